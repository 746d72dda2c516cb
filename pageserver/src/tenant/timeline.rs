//! `Timeline`: one branch of a tenant's page history, and its ingest and
//! flush machinery.
//!
//! LSNs: `last_record_lsn` — everything up to it is ingested and readable;
//! `disk_consistent_lsn` — everything up to it is in L0 files on disk and
//! recorded in the metadata file. `disk_consistent_lsn <= last_record_lsn`.
//!
//! Concurrency contract:
//! - Writes go through `TimelineWriter`, a guard of the async `writer` mutex:
//!   one writer at a time. A writer puts values at LSNs above
//!   `last_record_lsn`, then calls `finish_write(lsn)` once all values of
//!   `lsn` are in; only then do readers see them and may a freeze happen, so
//!   layers always end at an LSN boundary. (A writer dropped between `put`
//!   and `finish_write` leaves a partial LSN; freezes are skipped until it is
//!   finished.)
//! - Freezing (size, budget, timeout, checkpoint) moves the open layer to the
//!   frozen queue under the `layers` lock, with the writer lock held.
//! - One flush task per timeline flushes frozen layers oldest first: write L0
//!   (temp, fsync, rename, fsync dir), swap it into the layer map in place of
//!   the frozen layer, then persist `disk_consistent_lsn` in the metadata.
//!   A failed flush is retried; ingest waits (backpressure) rather than lose
//!   anything.
//! - Readers snapshot the layer list (Arcs) under the `layers` lock and read
//!   without it; a frozen layer being flushed stays readable until dropped.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use pageserver_api::key::Key;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn, Instrument};
use utils::failpoint::failpoint;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;
use utils::seqwait::{SeqWait, SeqWaitError};

use super::metadata::TimelineMetadata;
use super::storage_layer::delta_layer::DeltaLayer;
use super::storage_layer::ephemeral_file::EPHEMERAL_PREFIX;
use super::storage_layer::inmemory_layer::InMemoryLayer;
use super::storage_layer::layer_map::LayerMap;
use super::storage_layer::{DeltaLayerName, MAX_BLOB_LEN};
use super::value::Value;
use super::{
    vectored_read, GetVectoredError, Globals, PageReconstructError, ReadKind, StorageConf,
    WaitLsnError,
};
use crate::metrics::storage as metrics;
use crate::pgdatadir_mapping::DatadirCache;

/// Ingest waits while this many layers are frozen but not yet flushed.
const MAX_FROZEN_LAYERS: usize = 4;

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LayerStats {
    pub in_memory_layers: usize,
    pub in_memory_bytes: u64,
    pub l0_layers: usize,
    pub l0_bytes: u64,
}

#[derive(Clone, Debug, Default)]
struct FlushState {
    disk_consistent_lsn: Lsn,
    /// The last flush error, cleared by the next successful flush.
    error: Option<Arc<String>>,
}

pub struct Timeline {
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    pub pg_version: u32,
    /// Cancelled when the timeline shuts down or is deleted.
    pub cancel: CancellationToken,
    pub datadir_cache: DatadirCache,
    conf: Arc<StorageConf>,
    globals: Arc<Globals>,
    dir: PathBuf,
    initial_lsn: Lsn,
    last_record_lsn: SeqWait,
    flush_state: watch::Sender<FlushState>,
    layers: RwLock<LayerMap>,
    writer: tokio::sync::Mutex<WriterState>,
    flush_wakeup: Notify,
    /// LSN to record as disk-consistent once the frozen queue is drained
    /// (a checkpoint with nothing in memory).
    pending_advance: Mutex<Option<Lsn>>,
    ephemeral_seq: AtomicU64,
    tasks: TaskTracker,
}

#[derive(Default)]
struct WriterState {
    buf: Vec<u8>,
    entries: Vec<(Key, Lsn, Range<usize>, bool)>,
    /// Highest LSN put since the last `finish_write`.
    unfinished_lsn: Option<Lsn>,
}

/// Exclusive ingest handle; see the module comment.
pub struct TimelineWriter<'a> {
    tl: &'a Timeline,
    state: tokio::sync::MutexGuard<'a, WriterState>,
}

impl Timeline {
    /// Create the directory of a new timeline with its metadata.
    pub(crate) async fn create_on_disk(
        conf: &StorageConf,
        dir: &Path,
        md: &TimelineMetadata,
    ) -> anyhow::Result<()> {
        conf.io_engine.create_dir_all(dir).await?;
        md.persist(&conf.io_engine, dir).await?;
        conf.io_engine.fsync_dir(dir.parent().unwrap()).await?;
        Ok(())
    }

    /// Load a timeline from `dir`: metadata, then layer files. Removes temp
    /// files, ephemeral files and layers beyond `disk_consistent_lsn` (not
    /// acknowledged as durable). Starts the background tasks.
    pub(crate) async fn load(
        conf: Arc<StorageConf>,
        globals: Arc<Globals>,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        dir: PathBuf,
        cancel: CancellationToken,
    ) -> anyhow::Result<Arc<Timeline>> {
        let md = TimelineMetadata::load(&conf.io_engine, &dir).await?;
        let mut names = Vec::new();
        let mut removed = false;
        let engine = &conf.io_engine;
        for entry in engine.read_dir(&dir).await? {
            let fname = entry.name_lossy();
            let path = dir.join(&entry.name);
            if fname == super::metadata::METADATA_FILE {
                continue;
            }
            if fname.ends_with(io_engine::TEMP_SUFFIX) || fname.starts_with(EPHEMERAL_PREFIX) {
                engine.remove_file(&path).await?;
                removed = true;
                continue;
            }
            match DeltaLayerName::parse(&fname) {
                Some(n) if n.lsn_range.end > md.disk_consistent_lsn + 1 => {
                    info!(
                        "removing layer {fname}: beyond disk_consistent_lsn {}",
                        md.disk_consistent_lsn
                    );
                    engine.remove_file(&path).await?;
                    removed = true;
                }
                Some(n) => names.push(n),
                None => warn!("ignoring unexpected file {}", path.display()),
            }
        }
        if removed {
            conf.io_engine.fsync_dir(&dir).await?;
        }
        names.sort_by_key(|n| n.lsn_range.start);
        let mut layer_map = LayerMap::default();
        for n in names {
            let l =
                DeltaLayer::load(&conf.io_engine, &dir.join(n.to_string()), tenant_id, timeline_id)
                    .await?;
            if let Some(prev) = layer_map.l0.last() {
                if prev.lsn_range().end > l.lsn_range().start {
                    bail!("layers {} and {} overlap in LSN", prev.name, l.name);
                }
            }
            layer_map.l0.push(Arc::new(l));
        }
        let tl = Arc::new(Timeline {
            tenant_id,
            timeline_id,
            pg_version: md.pg_version,
            cancel,
            datadir_cache: DatadirCache::default(),
            conf,
            globals,
            dir,
            initial_lsn: md.initial_lsn,
            last_record_lsn: SeqWait::new(md.disk_consistent_lsn),
            flush_state: watch::Sender::new(FlushState {
                disk_consistent_lsn: md.disk_consistent_lsn,
                error: None,
            }),
            layers: RwLock::new(layer_map),
            writer: tokio::sync::Mutex::new(WriterState::default()),
            flush_wakeup: Notify::new(),
            pending_advance: Mutex::new(None),
            ephemeral_seq: AtomicU64::new(0),
            tasks: TaskTracker::new(),
        });
        let span =
            tracing::info_span!("timeline", tenant_id = %tenant_id, timeline_id = %timeline_id);
        tl.tasks.spawn(tl.clone().flush_loop().instrument(span.clone()));
        tl.tasks.spawn(tl.clone().checkpoint_timeout_loop().instrument(span));
        Ok(tl)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn get_last_record_lsn(&self) -> Lsn {
        self.last_record_lsn.load()
    }

    pub fn get_disk_consistent_lsn(&self) -> Lsn {
        self.flush_state.borrow().disk_consistent_lsn
    }

    pub fn get_initial_lsn(&self) -> Lsn {
        self.initial_lsn
    }

    pub fn conf(&self) -> &StorageConf {
        &self.conf
    }

    /// Wait until `lsn` is ingested, up to `wait_lsn_timeout`.
    pub async fn wait_lsn(&self, lsn: Lsn, cancel: &CancellationToken) -> Result<(), WaitLsnError> {
        let res = tokio::select! {
            r = self.last_record_lsn.wait_for(lsn, self.conf.wait_lsn_timeout, cancel) => r,
            _ = self.cancel.cancelled() => Err(SeqWaitError::Cancelled),
        };
        match res {
            Ok(_) => Ok(()),
            Err(SeqWaitError::Cancelled) => Err(WaitLsnError::Shutdown),
            Err(e @ SeqWaitError::Timeout { .. }) => Err(WaitLsnError::Timeout(e.to_string())),
        }
    }

    /// One vectored read of (key, LSN) queries; see `vectored_read`.
    pub async fn get_vectored(
        &self,
        queries: &[(Key, Lsn)],
        kind: ReadKind,
    ) -> Result<Vec<Result<Bytes, PageReconstructError>>, GetVectoredError> {
        let started = Instant::now();
        if queries.len() > self.conf.max_get_vectored_keys {
            return Err(GetVectoredError::TooManyKeys {
                n: queries.len(),
                max: self.conf.max_get_vectored_keys,
            });
        }
        if self.cancel.is_cancelled() {
            return Err(GetVectoredError::Cancelled);
        }
        let layers = self.layers.read().unwrap().newest_first();
        let (results, stats) = vectored_read::read(&layers, queries).await;
        metrics::record_vectored_read(
            kind as usize,
            kind.label(),
            started.elapsed(),
            stats.chunks,
            stats.bytes,
        );
        Ok(results)
    }

    pub async fn get(&self, key: Key, lsn: Lsn) -> Result<Bytes, PageReconstructError> {
        match self.get_vectored(&[(key, lsn)], ReadKind::HttpRequest).await {
            Ok(mut v) => v.pop().expect("one result per query"),
            Err(e) => Err(PageReconstructError::Other(e.to_string())),
        }
    }

    pub async fn writer(&self) -> TimelineWriter<'_> {
        TimelineWriter { tl: self, state: self.writer.lock().await }
    }

    pub fn layer_stats(&self) -> LayerStats {
        let lm = self.layers.read().unwrap();
        LayerStats {
            in_memory_layers: lm.open.iter().count() + lm.frozen.len(),
            in_memory_bytes: lm.in_memory_bytes(),
            l0_layers: lm.l0.len(),
            l0_bytes: lm.l0.iter().map(|l| l.file_size).sum(),
        }
    }

    /// Freeze the open layer at the last complete LSN and wait until
    /// everything up to it is on disk. Returns the new `disk_consistent_lsn`.
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
    fn freeze(&self, end: Lsn) -> bool {
        let mut lm = self.layers.write().unwrap();
        let Some(open) = lm.open.take() else { return false };
        open.freeze(end);
        lm.frozen.push_back(open);
        drop(lm);
        self.flush_wakeup.notify_one();
        true
    }

    /// Stop background tasks; with `flush`, first write everything in memory
    /// to disk (bounded by `timeout`).
    pub async fn shutdown(&self, flush: bool, timeout: Duration) {
        if flush && !self.cancel.is_cancelled() {
            match tokio::time::timeout(timeout, self.freeze_and_flush()).await {
                Ok(Ok(lsn)) => info!("flushed up to {lsn} on shutdown"),
                Ok(Err(e)) => warn!("flush on shutdown failed: {e:#}"),
                Err(_) => warn!("flush on shutdown did not finish within {timeout:?}"),
            }
        }
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    async fn flush_loop(self: Arc<Self>) {
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
        let newest_l0_end = self.layers.read().unwrap().l0.last().map(|l| l.lsn_range().end);
        if let Some(end) = newest_l0_end {
            if end.0 - 1 > self.get_disk_consistent_lsn().0 {
                self.persist_disk_consistent(Lsn(end.0 - 1)).await?;
            }
        }
        loop {
            let Some(layer) = self.layers.read().unwrap().frozen.front().cloned() else { break };
            let started = Instant::now();
            failpoint("flush::before-write-layer")?;
            let l0 = DeltaLayer::write_from_inmemory(
                &self.conf.io_engine,
                &self.dir,
                self.tenant_id,
                self.timeline_id,
                &layer,
            )
            .await?;
            let end = layer.end_lsn().expect("frozen");
            metrics::record_flush(started.elapsed(), l0.file_size);
            self.layers.write().unwrap().finish_flush(&layer, Some(Arc::new(l0)));
            self.globals.in_memory_bytes.fetch_sub(layer.size(), Ordering::Relaxed);
            self.persist_disk_consistent(Lsn(end.0 - 1)).await?;
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

    async fn persist_disk_consistent(&self, lsn: Lsn) -> anyhow::Result<()> {
        failpoint("flush::before-metadata")?;
        let md = TimelineMetadata {
            disk_consistent_lsn: lsn,
            initial_lsn: self.initial_lsn,
            pg_version: self.pg_version,
        };
        md.persist(&self.conf.io_engine, &self.dir).await?;
        failpoint("flush::after-metadata")?;
        self.flush_state.send_modify(|s| {
            s.disk_consistent_lsn = lsn;
            s.error = None;
        });
        Ok(())
    }

    /// Freeze an open layer that has been open longer than `checkpoint_timeout`.
    async fn checkpoint_timeout_loop(self: Arc<Self>) {
        let period = (self.conf.checkpoint_timeout / 4)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let expired = {
                let lm = self.layers.read().unwrap();
                lm.open
                    .as_ref()
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

impl TimelineWriter<'_> {
    pub async fn put(&mut self, key: Key, lsn: Lsn, value: &Value) -> anyhow::Result<()> {
        self.put_batch(std::slice::from_ref(&(key, lsn, value.clone()))).await
    }

    /// Append values (any keys, LSNs above `last_record_lsn`) to the open layer.
    pub async fn put_batch(&mut self, batch: &[(Key, Lsn, Value)]) -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
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
        let open = tl.layers.read().unwrap().open.clone();
        let layer = match open {
            Some(l) => l,
            None => {
                let seq = tl.ephemeral_seq.fetch_add(1, Ordering::Relaxed);
                let l = Arc::new(
                    InMemoryLayer::create(&tl.conf.io_engine, &tl.dir, seq, last + 1).await?,
                );
                tl.layers.write().unwrap().open = Some(l.clone());
                l
            }
        };
        st.unfinished_lsn = Some(st.unfinished_lsn.map_or(max_lsn, |u| u.max(max_lsn)));
        layer.put_serialized(&st.buf, &st.entries).await?;
        tl.globals.in_memory_bytes.fetch_add(st.buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Everything at or below `lsn` is ingested: publish it to readers and
    /// freeze the open layer if it is big enough or the budget is exceeded.
    pub fn finish_write(&mut self, lsn: Lsn) {
        let tl = self.tl;
        if let Some(u) = self.state.unfinished_lsn {
            assert!(u <= lsn, "finish_write({lsn}) below a written LSN {u}");
        }
        self.state.unfinished_lsn = None;
        if lsn <= tl.get_last_record_lsn() {
            return;
        }
        tl.last_record_lsn.advance(lsn);
        let open_size = tl.layers.read().unwrap().open.as_ref().map_or(0, |l| l.size());
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
            let frozen = tl.layers.read().unwrap().frozen.len();
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
        }
    }
}

impl Drop for TimelineWriter<'_> {
    fn drop(&mut self) {
        // This happens when a write fails part way (its caller reports the
        // error) or a timeline being created is abandoned: not an error here.
        if let Some(u) = self.state.unfinished_lsn {
            info!("timeline writer dropped with LSN {u} unfinished; freezes wait until it is finished");
        }
    }
}
