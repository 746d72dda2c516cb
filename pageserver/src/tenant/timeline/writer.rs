//! `TimelineWriter`: the single ingest handle of a timeline.
//!
//! Contract: a writer (a guard of the async `writer` mutex, so one at a time)
//! puts values at LSNs above `last_record_lsn`, then calls
//! `finish_write(lsn)` once all values of `lsn` are in; only then do readers
//! see them and may a freeze happen, so layers always end at an LSN boundary.
//! Ingest waits (backpressure) while `MAX_FROZEN_LAYERS` layers are frozen
//! and unflushed, or in-memory bytes exceed twice the global budget; if a
//! flush fails while it waits, the write fails with that error instead of
//! waiting on a disk that may not recover.
//!
//! Chains: the writer counts, per key, the records since its last image
//! and writes an image of a key whose chain reaches `max_record_chain`
//! (`chain.rs` states how and why that keeps every invariant).
//!
//! Failed and abandoned writes (a full disk, a cancelled ingest): a write
//! that fails leaves the open layer as it was before the call (the append
//! is all or nothing), and the writer then abandons every LSN it has not
//! finished: their index entries are discarded (`discard_above` at
//! `last_record_lsn`), and a layer this writer opened is dropped (a layer
//! is installed in the layer map only by `finish_write`, so the map never
//! holds a layer without values). A writer that failed refuses further
//! writes; the caller drops it and ingests again from `last_record_lsn`
//! (the WAL receiver reconnects there), which rewrites the same LSNs. A
//! writer dropped between `put_batch` and `finish_write` abandons its
//! LSNs the same way, so the next writer starts from a clean state.

use std::ops::Range;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Context};
use pageserver_api::key::Key;
use tracing::{error, info, warn};
use utils::lsn::Lsn;

use super::super::storage_layer::inmemory_layer::InMemoryLayer;
use super::super::storage_layer::MAX_BLOB_LEN;
use super::super::value::Value;
use super::super::{PageReconstructError, ReadKind};
use super::Timeline;
use crate::metrics::redo as redo_metrics;
use crate::metrics::storage as metrics;

mod chain;
#[cfg(test)]
mod tests;

use chain::ChainCounts;

/// Ingest waits while this many layers are frozen but not yet flushed.
pub const MAX_FROZEN_LAYERS: usize = 4;

#[derive(Default)]
pub(super) struct WriterState {
    buf: Vec<u8>,
    entries: Vec<(Key, Lsn, Range<usize>, bool)>,
    /// Highest LSN put since the last `finish_write`. `None` whenever no
    /// writer holds the lock (a dropped writer abandons its LSNs).
    pub(super) unfinished_lsn: Option<Lsn>,
    /// Records per key since its last image (`chain.rs`).
    chains: ChainCounts,
    /// A layer this writer opened, installed as the open layer at
    /// `finish_write` (until then only unfinished LSNs are in it).
    new_layer: Option<Arc<InMemoryLayer>>,
    /// A write of the current writer failed: its unfinished LSNs were
    /// abandoned, and it takes no more writes (reset when it is dropped).
    failed: bool,
}

/// Exclusive ingest handle; see the module comment.
pub struct TimelineWriter<'a> {
    pub(super) tl: &'a Timeline,
    pub(super) state: tokio::sync::MutexGuard<'a, WriterState>,
}

impl TimelineWriter<'_> {
    pub async fn put(&mut self, key: Key, lsn: Lsn, value: &Value) -> anyhow::Result<()> {
        self.put_batch(std::slice::from_ref(&(key, lsn, value.clone()))).await
    }

    /// Append values (any keys, LSNs above `last_record_lsn`) to the open layer.
    pub async fn put_batch(&mut self, batch: &[(Key, Lsn, Value)]) -> anyhow::Result<()> {
        if self.state.failed {
            bail!("an earlier write of this writer failed; ingest again from last_record_lsn");
        }
        if batch.is_empty() {
            return Ok(());
        }
        let res = self.put_batch_inner(batch).await;
        if res.is_err() {
            self.state.failed = true;
            self.abandon_unfinished();
        }
        res
    }

    async fn put_batch_inner(&mut self, batch: &[(Key, Lsn, Value)]) -> anyhow::Result<()> {
        self.wait_for_flush_capacity().await?;
        let tl = self.tl;
        let last = tl.get_last_record_lsn();
        let st = &mut *self.state;
        st.buf.clear();
        st.entries.clear();
        let mut max_lsn = Lsn(0);
        for (key, lsn, value) in batch {
            if *lsn <= last {
                bail!("write of key {key} at {lsn}, at or below last_record_lsn {last}");
            }
            if !key.is_compactable() {
                bail!("key {key} is outside the supported key space");
            }
            let start = st.buf.len();
            value.serialize_into(&mut st.buf);
            if st.buf.len() - start > MAX_BLOB_LEN {
                bail!(
                    "value of key {key} at {lsn} is {} bytes, above the limit",
                    st.buf.len() - start
                );
            }
            st.entries.push((*key, *lsn, start..st.buf.len(), value.will_init()));
            max_lsn = max_lsn.max(*lsn);
        }
        let open = tl.layers.read().unwrap().open_layer().cloned();
        // Chain images are read through the layer map: not possible from a
        // layer this writer opened and has not installed yet.
        let images_possible = open.is_some();
        let layer = match open.or_else(|| st.new_layer.clone()) {
            Some(l) => l,
            None => {
                // Only the writer (us) opens layers, and freezes happen with
                // the writer lock held: the map cannot change in between.
                let start = tl.layers.read().unwrap().next_layer_start();
                debug_assert!(start <= last + 1);
                let seq = tl.ephemeral_seq.fetch_add(1, Ordering::Relaxed);
                let l = InMemoryLayer::create(
                    &tl.conf.io_engine,
                    &tl.dir,
                    seq,
                    start,
                    tl.conf.direct_io,
                )
                .await
                .context("create an in-memory layer")?;
                st.new_layer.insert(Arc::new(l)).clone()
            }
        };
        st.unfinished_lsn = Some(st.unfinished_lsn.map_or(max_lsn, |u| u.max(max_lsn)));
        layer.put_serialized(&st.buf, &st.entries).await?;
        tl.globals.in_memory_bytes.fetch_add(st.buf.len() as u64, Ordering::Relaxed);
        let bound = tl.conf.compaction.max_record_chain;
        let long = st.chains.count(&st.entries, bound, images_possible);
        if !long.is_empty() {
            self.write_chain_images(&layer, &long).await?;
        }
        Ok(())
    }

    /// Replace the value of each (key, LSN) in `long` (just put into
    /// `layer`, the open layer) by the key's image at that LSN.
    /// A key whose page cannot be read keeps its records. See `chain.rs`.
    async fn write_chain_images(
        &mut self,
        layer: &InMemoryLayer,
        long: &[(Key, Lsn)],
    ) -> anyhow::Result<()> {
        // A key due at several LSNs of one batch is read once per round, so
        // that each read starts from the image the round before stored.
        let mut rest: Vec<(Key, Lsn)> = long.to_vec();
        while !rest.is_empty() {
            let mut seen = std::collections::HashSet::new();
            let (round, later): (Vec<_>, Vec<_>) =
                std::mem::take(&mut rest).into_iter().partition(|(k, _)| seen.insert(*k));
            self.write_chain_images_round(layer, &round).await?;
            rest = later;
        }
        Ok(())
    }

    /// One round of `write_chain_images`: each key at most once.
    async fn write_chain_images_round(
        &mut self,
        layer: &InMemoryLayer,
        long: &[(Key, Lsn)],
    ) -> anyhow::Result<()> {
        let tl = self.tl;
        let st = &mut *self.state;
        for chunk in long.chunks(tl.conf.max_get_vectored_keys) {
            let pages = tl.get_vectored(chunk, ReadKind::Ingest).await;
            let pages = pages.context("read pages with long chains for their images")?;
            st.buf.clear();
            let mut images = Vec::with_capacity(chunk.len());
            for (&(key, lsn), page) in chunk.iter().zip(pages) {
                match page {
                    Ok(page) => {
                        let start = st.buf.len();
                        Value::Image(page).serialize_into(&mut st.buf);
                        if st.buf.len() - start > MAX_BLOB_LEN {
                            st.buf.truncate(start); // not a page: its records stay
                            continue;
                        }
                        images.push((key, lsn, start..st.buf.len()));
                    }
                    Err(PageReconstructError::MissingKey { .. }) => {}
                    Err(e) => {
                        redo_metrics::CHAIN_IMAGE_ERRORS.inc();
                        if st.chains.log.should_log("chain image") {
                            warn!("no image for key {key} at {lsn}, whose chain is long: {e}");
                        }
                    }
                }
            }
            if images.is_empty() {
                continue;
            }
            layer.replace_with_images(&st.buf, &images).await?;
            tl.globals.in_memory_bytes.fetch_add(st.buf.len() as u64, Ordering::Relaxed);
            redo_metrics::CHAIN_IMAGES.inc_by(images.len() as u64);
        }
        Ok(())
    }

    /// Forget every LSN above `last_record_lsn`: discard its index entries
    /// from the open layer, drop a layer this writer opened. Readers never
    /// saw them; ingest writes them again.
    fn abandon_unfinished(&mut self) {
        let tl = self.tl;
        let st = &mut *self.state;
        if let Some(new) = st.new_layer.take() {
            // Never installed: nothing else holds it; its file goes with it.
            tl.globals.in_memory_bytes.fetch_sub(new.size(), Ordering::Relaxed);
        }
        let Some(u) = st.unfinished_lsn.take() else { return };
        let last = tl.get_last_record_lsn();
        let mut discarded = 0;
        if let Some(open) = tl.layers.read().unwrap().open_layer() {
            discarded = open.discard_above(last);
            // It held finished values before this writer: still has them.
            debug_assert!(!open.has_no_values(), "the open layer has finished values");
        }
        info!(
            "abandoned the unfinished LSNs {}..={u} ({discarded} values discarded from the open layer); ingest resumes after {last}",
            last + 1
        );
    }

    /// Everything at or below `lsn` is ingested: publish it to readers and
    /// freeze the open layer if it is big enough or the budget is exceeded.
    /// After a failed write this publishes nothing (the caller should have
    /// stopped at the error): it logs that and leaves `last_record_lsn`.
    pub fn finish_write(&mut self, lsn: Lsn) {
        let tl = self.tl;
        if self.state.failed {
            error!("finish_write({lsn}) after a failed write: nothing published");
            return;
        }
        if let Some(u) = self.state.unfinished_lsn {
            if u > lsn {
                // A caller's bug; publishing would expose part of LSN `u`.
                debug_assert!(u <= lsn, "finish_write({lsn}) below a written LSN {u}");
                error!(
                    "finish_write({lsn}) below a written LSN {u}: abandoning the unfinished LSNs"
                );
                self.state.failed = true;
                self.abandon_unfinished();
                return;
            }
        }
        self.state.unfinished_lsn = None;
        if lsn <= tl.get_last_record_lsn() {
            debug_assert!(self.state.new_layer.is_none(), "values at or below last_record_lsn");
            return;
        }
        if let Some(new) = self.state.new_layer.take() {
            tl.layers.write().unwrap().set_open(new);
        }
        tl.last_record_lsn.advance(lsn);
        let open_size = tl.layers.read().unwrap().open_layer().map_or(0, |l| l.size());
        let over_budget =
            tl.globals.in_memory_bytes.load(Ordering::Relaxed) > tl.conf.in_memory_layers_budget;
        if open_size >= tl.conf.checkpoint_distance || (over_budget && open_size > 0) {
            tl.freeze(lsn + 1);
        }
    }

    /// Backpressure: wait while too much is frozen and not yet flushed.
    async fn wait_for_flush_capacity(&self) -> anyhow::Result<()> {
        let tl = self.tl;
        let mut rx = tl.flush_state.subscribe();
        loop {
            let frozen = tl.layers.read().unwrap().frozen_count();
            let bytes = tl.globals.in_memory_bytes.load(Ordering::Relaxed);
            if frozen < MAX_FROZEN_LAYERS
                && bytes <= tl.conf.in_memory_layers_budget.saturating_mul(2)
            {
                return Ok(());
            }
            if frozen == 0 {
                return Ok(()); // over budget because of other timelines: our freeze can't help here
            }
            metrics::record_backpressure();
            tokio::select! {
                r = rx.changed() => r.context("timeline is gone")?,
                _ = tl.cancel.cancelled() => bail!("timeline is shutting down"),
            }
            // A flush failed while we waited: report it instead of waiting
            // on a disk that may never recover (the caller retries later;
            // nothing is lost, the frozen layers stay in memory).
            if let Some(e) = rx.borrow_and_update().error.clone() {
                bail!("ingest is paused: flushing layers to disk fails: {e}");
            }
        }
    }
}

impl Drop for TimelineWriter<'_> {
    fn drop(&mut self) {
        // This happens when ingest is cancelled part way, or a timeline
        // being created is abandoned: not an error here. The next writer
        // starts at `last_record_lsn` with nothing unfinished.
        self.abandon_unfinished();
        self.state.failed = false;
    }
}
