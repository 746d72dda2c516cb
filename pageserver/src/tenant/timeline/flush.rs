//! Freezing in-memory layers and flushing them to L0 files.
//!
//! Contract (see `mod.rs` for the whole timeline's): freezing moves the open
//! layer to the frozen queue under the `layers` lock, with the writer lock
//! held, at an LSN boundary. One flush task per timeline writes frozen layers
//! oldest first: write the L0 (temp, fsync, rename, fsync dir), swap it into
//! the layer map in place of the frozen layer, then persist the manifest with
//! the new `disk_consistent_lsn`. A failed flush is retried; ingest waits
//! (backpressure) rather than lose anything.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tracing::{error, warn};
use utils::failpoint::failpoint;
use utils::lsn::Lsn;

use super::super::metadata::LayerEntry;
use super::super::storage_layer::layer_file::LayerFile;
use super::{Timeline, TimelineMetadata};
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
        let newest_l0_end =
            self.layers.read().unwrap().l0_layers().last().map(|l| l.lsn_range().end);
        if let Some(end) = newest_l0_end {
            if end.0 - 1 > self.get_disk_consistent_lsn().0 {
                self.persist_disk_consistent(Lsn(end.0 - 1)).await?;
            }
        }
        loop {
            let Some(layer) = self.layers.read().unwrap().oldest_frozen() else { break };
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
            self.layers.write().unwrap().replace_flushed(&layer, Some(Arc::new(l0)));
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

    /// The L0 files of the layer map, as manifest entries, oldest first.
    fn manifest_layers(&self) -> Vec<LayerEntry> {
        let lm = self.layers.read().unwrap();
        lm.l0_layers()
            .iter()
            .map(|l| LayerEntry { name: l.name.to_string(), size_bytes: l.file_size })
            .collect()
    }

    /// Persist the manifest: the current L0 list and `disk_consistent_lsn = lsn`.
    async fn persist_disk_consistent(&self, lsn: Lsn) -> anyhow::Result<()> {
        failpoint("flush::before-metadata")?;
        let md = TimelineMetadata {
            disk_consistent_lsn: lsn,
            initial_lsn: self.initial_lsn,
            pg_version: self.pg_version,
            layers: self.manifest_layers(),
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
