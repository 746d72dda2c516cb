//! Garbage collection: history below the GC cutoff is dropped where newer
//! image layers make it unnecessary.
//!
//! The cutoff is the lowest of: `disk_consistent_lsn`;
//! `last_record_lsn - gc_horizon`; the LSN
//! `pitr_interval` ago (from the LSN-by-time record; while the record does
//! not reach that far back, nothing is collected); the lowest LSN with a
//! valid lease. It never moves backwards. Reads below it are refused with
//! an error naming it (`check_lsn_readable`, and again in `get_vectored`
//! after the layer snapshot, so a read racing GC never sees a removed
//! layer's absence).
//!
//! Removed: what `LayerMap::gc_candidates` returns: layers wholly at or
//! below the cutoff whose key range newer images (at or below the cutoff)
//! cover. Order: raise the cutoff in memory (reads below it stop), remove
//! the layers from the map, persist the manifest (cutoff and layer list in
//! one write), then delete the files; a crash before the manifest keeps
//! everything, a crash after it leaves unlisted files start-up removes.
//!
//! Leases: the cutoff is raised by `Timeline::set_gc_cutoff`, under the
//! lease store's lock, which a lease renewal holds while it checks the
//! cutoff and registers the lease, so a lease is either seen by GC or
//! refused as below the new cutoff.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tracing::{error, info};
use utils::failpoint::failpoint;
use utils::lsn::Lsn;

use super::Timeline;
use crate::metrics::compaction::{self as metrics, Task};

/// What a GC run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GcReport {
    pub gc_cutoff: Lsn,
    pub layers_removed: usize,
    pub bytes_removed: u64,
}

impl Timeline {
    /// The cutoff the retention settings allow at `now` (see the module
    /// comment) before leases hold it back; `gc_horizon` overrides the
    /// configured one.
    pub fn gc_cutoff_at(&self, now: SystemTime, gc_horizon: Option<u64>) -> Lsn {
        let c = &self.conf.compaction;
        let last = self.get_last_record_lsn();
        let mut cutoff = Lsn(last.0.saturating_sub(gc_horizon.unwrap_or(c.gc_horizon)));
        if !c.pitr_interval.is_zero() {
            let then = now.checked_sub(c.pitr_interval).unwrap_or(SystemTime::UNIX_EPOCH);
            cutoff = cutoff.min(self.lsn_at_or_before(then).unwrap_or(Lsn(0)));
        }
        // Never above what is on disk: a crash would otherwise restart with
        // a cutoff above `last_record_lsn`.
        cutoff.min(self.get_disk_consistent_lsn()).max(self.gc_cutoff())
    }

    /// Raise the cutoff and remove what it makes unnecessary; `gc_horizon`
    /// overrides the configured one for this run.
    pub async fn gc(&self, gc_horizon: Option<u64>) -> anyhow::Result<GcReport> {
        let _maintenance = self.maintenance.lock().await;
        let started = Instant::now();
        let now = SystemTime::now();
        let cutoff = self.set_gc_cutoff(self.gc_cutoff_at(now, gc_horizon), now).await;
        let removed = {
            let mut lm = self.layers.write().unwrap();
            let candidates = lm.historic().gc_candidates(cutoff);
            lm.remove(&candidates);
            candidates
        };
        failpoint("gc::before-manifest")?;
        self.persist_manifest().await.context("gc: persist the manifest")?;
        self.commit_times.thin(cutoff).await.context("gc: thin the commit-time index")?;
        failpoint("gc::before-delete")?;
        self.delete_replaced(&removed).await;
        let bytes_removed = removed.iter().map(|l| l.file_size).sum();
        if !removed.is_empty() {
            metrics::record_task(Task::Gc, started.elapsed(), removed.len(), bytes_removed);
            info!(
                "gc at cutoff {cutoff}: removed {} layers ({bytes_removed} bytes) in {:?}",
                removed.len(),
                started.elapsed()
            );
        }
        Ok(GcReport { gc_cutoff: cutoff, layers_removed: removed.len(), bytes_removed })
    }

    /// Background GC every `gc_period` (never when it is zero).
    pub(super) async fn gc_loop(self: Arc<Self>) {
        let period = self.conf.compaction.gc_period;
        if period.is_zero() {
            return;
        }
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            if let Err(e) = self.gc(None).await {
                if self.cancel.is_cancelled() {
                    return;
                }
                metrics::TASK_ERRORS.inc();
                error!("gc failed, will retry in {:?}: {e:#}", period.min(Duration::from_secs(60)));
            }
        }
    }
}
