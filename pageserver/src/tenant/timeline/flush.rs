//! Freezing in-memory layers and flushing them to L0 files.
//!
//! Contract (see `mod.rs` for the whole timeline's): freezing moves the open
//! layer to the frozen queue under the `layers` lock, with the writer lock
//! held, at an LSN boundary. One flush task per timeline writes frozen layers
//! oldest first: write the L0 (temp, fsync, rename, fsync dir), swap it into
//! the layer map in place of the frozen layer (a new L0 stratum), then
//! persist the manifest with the new `disk_consistent_lsn`. A failed flush
//! is retried; ingest waits (backpressure) rather than lose anything.
//! With remote storage, every manifest written becomes the upload queue's
//! target (`remote_timeline/upload.rs`), and a flush first waits while
//! that queue is full.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use tracing::{error, warn};
use utils::failpoint::failpoint;
use utils::lsn::Lsn;

use super::super::metadata::LayerEntry;
use super::super::storage_layer::layer::Layer;
use super::super::storage_layer::layer_file::LayerFile;
use super::{load, Timeline, TimelineMetadata};
use crate::metrics::storage as metrics;

impl Timeline {
    pub async fn freeze_and_flush(&self) -> anyhow::Result<Lsn> {
        let target = {
            let w = self.writer.lock().await;
            let last = self.get_last_record_lsn();
            if w.unfinished_lsn.is_some() {
                warn!(
                    "checkpoint while a write is unfinished: flushing only up to the frozen layers"
                );
            } else if !self.freeze(last + 1) && last > self.get_disk_consistent_lsn() {
                *self.pending_advance.lock().unwrap() = Some(last);
            }
            last
        };
        self.flush_wakeup.notify_one();
        let mut rx = self.flush_state.subscribe();
        let seen_error = rx.borrow().error.clone();
        loop {
            {
                let st = rx.borrow_and_update();
                if st.disk_consistent_lsn >= target {
                    return Ok(st.disk_consistent_lsn);
                }
                if let Some(e) = &st.error {
                    if seen_error.as_ref().is_none_or(|s| !Arc::ptr_eq(s, e)) {
                        bail!("flush failed: {e}");
                    }
                }
            }
            tokio::select! {
                r = rx.changed() => r.context("timeline is gone")?,
                _ = self.cancel.cancelled() => bail!("timeline is shutting down"),
            }
        }
    }

    /// Move the open layer (if any) to the frozen queue, ending at `end`.
    /// The caller holds the writer lock. Returns whether a layer was frozen.
    pub(super) fn freeze(&self, end: Lsn) -> bool {
        if !self.layers.write().unwrap().freeze_open(end) {
            return false;
        }
        self.flush_wakeup.notify_one();
        true
    }

    /// Stop background tasks; with `flush`, first write everything in memory
    /// to disk (bounded by `timeout`).
    pub(super) async fn flush_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.flush_wakeup.notified() => {}
            }
            if let Err(e) = self.flush_frozen_layers().await {
                error!("layer flush failed, will retry: {e:#}");
                self.flush_state.send_modify(|s| s.error = Some(Arc::new(format!("{e:#}"))));
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => self.flush_wakeup.notify_one(),
                }
            }
        }
    }

    async fn flush_frozen_layers(&self) -> anyhow::Result<()> {
        // An earlier attempt may have placed an L0 but failed to record it.
        let end = self.layers.read().unwrap().historic().end_lsn();
        if end.0 - 1 > self.get_disk_consistent_lsn().0 {
            self.persist_disk_consistent(Lsn(end.0 - 1)).await?;
        }
        loop {
            let Some(layer) = self.layers.read().unwrap().oldest_frozen() else { break };
            self.wait_for_l0_backpressure().await;
            if let Some(remote) = &self.remote {
                remote.wait_for_queue_space(&self.cancel).await;
            }
            let started = Instant::now();
            failpoint("flush::before-write-layer")?;
            let l0 = LayerFile::write_from_inmemory(
                &self.conf.io_engine,
                &self.dir,
                self.tenant_id,
                self.timeline_id,
                &layer,
                self.conf.direct_io,
            )
            .await?;
            let end = layer.end_lsn().expect("frozen");
            metrics::record_flush(started.elapsed(), l0.file_size);
            // Just written: resident until evicted (once uploaded).
            let l0 = Arc::new(Layer::resident(l0, self.remote.clone()));
            self.layers.write().unwrap().replace_flushed(&layer, Some(l0));
            self.globals.in_memory_bytes.fetch_sub(layer.size(), Ordering::Relaxed);
            self.persist_disk_consistent(Lsn(end.0 - 1)).await?;
            self.after_l0_flush();
        }
        let pending = self.pending_advance.lock().unwrap().take();
        if let Some(lsn) = pending {
            if lsn > self.get_disk_consistent_lsn() {
                if let Err(e) = self.persist_disk_consistent(lsn).await {
                    *self.pending_advance.lock().unwrap() = Some(lsn);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Persist the manifest as the layer map is now (after GC, compaction
    /// or image creation changed it).
    pub async fn persist_manifest(&self) -> anyhow::Result<()> {
        self.persist_disk_consistent(self.get_disk_consistent_lsn()).await
    }

    /// Persist the manifest: the layer map's historic layers with their
    /// levels, its empty strata and GC cutoff, the LSN-by-time record with a
    /// sample (now, disk_consistent_lsn), and `disk_consistent_lsn`: `lsn`,
    /// or more if the map already holds (durable) layers beyond it.
    ///
    /// Manifest writes are serialized (`manifest_write`), and each lists
    /// one snapshot of the map, so a later write never lists an older
    /// state. The manifest is checked as start-up will check it before it
    /// is written: a map start-up would refuse is an error here, not a
    /// timeline that fails to load after a restart.
    async fn persist_disk_consistent(&self, lsn: Lsn) -> anyhow::Result<()> {
        failpoint("flush::before-metadata")?;
        let _writing = self.manifest_write.lock().await;
        let historic = self.layers.read().unwrap().historic().clone();
        let lsn = lsn.max(self.get_disk_consistent_lsn()).max(Lsn(historic.end_lsn().0 - 1));
        let lsn_by_time = {
            let mut record = self.lsn_by_time.lock().unwrap();
            record.record(SystemTime::now(), lsn);
            record.clone()
        };
        let layers = historic.all_historic().into_iter().map(|(level, l)| LayerEntry {
            name: l.name.to_string(),
            size_bytes: l.file_size,
            level,
        });
        let md = TimelineMetadata {
            disk_consistent_lsn: lsn,
            initial_lsn: self.initial_lsn,
            pg_version: self.pg_version,
            layers: layers.collect(),
            empty_strata: historic.empty_strata(),
            gc_cutoff: historic.gc_cutoff(),
            lsn_by_time,
            ancestor_timeline_id: self.ancestor.as_ref().map(|a| a.timeline.timeline_id),
            ancestor_lsn: self.ancestor.as_ref().map_or(Lsn(0), |a| a.lsn),
        };
        load::check_manifest(&md).context("the manifest about to be written is invalid")?;
        // The index covers every transaction up to `lsn` before the manifest says `lsn`.
        self.commit_times.persist(lsn).await?;
        md.persist(&self.conf.io_engine, &self.dir).await?;
        if let Some(remote) = &self.remote {
            let commit_times = self.commit_times.snapshot(md.gc_cutoff);
            remote.schedule_index_upload(md, self.wal_source(), commit_times);
        }
        failpoint("flush::after-metadata")?;
        self.flush_state.send_modify(|s| {
            s.disk_consistent_lsn = lsn;
            s.error = None;
        });
        Ok(())
    }

    /// Freeze an open layer that has been open longer than `checkpoint_timeout`.
    pub(super) async fn checkpoint_timeout_loop(self: Arc<Self>) {
        let period = (self.conf.checkpoint_timeout / 4)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let expired = {
                let lm = self.layers.read().unwrap();
                lm.open_layer()
                    .is_some_and(|l| l.opened_at.elapsed() >= self.conf.checkpoint_timeout)
            };
            if expired {
                let w = self.writer.lock().await;
                if w.unfinished_lsn.is_none() {
                    self.freeze(self.get_last_record_lsn() + 1);
                }
            }
        }
    }
}
