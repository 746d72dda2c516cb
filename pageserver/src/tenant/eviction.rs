//! Disk-usage based eviction: local layer files whose remote copy is
//! uploaded are removed, least recently used first, while the resident
//! layer files of all timelines take more than `max_resident_bytes` or the
//! workdir's file system has less than `min_avail_bytes` free
//! (`EvictionConf`). An evicted layer stays in the layer map, remote-only,
//! and is downloaded again by the next read that needs it
//! (`storage_layer/layer.rs`).
//!
//! One run ([`evict_to_budget`]): sum the resident layer bytes, read the
//! file system's free bytes (`statvfs`), compute the bytes to free (the
//! larger shortfall of the two limits), then evict candidates in order of
//! last access until that many bytes are freed. Candidates are resident
//! historic layers that `Layer::is_evictable` accepts (uploaded with the
//! same size); in-memory layers never are. A layer whose eviction is
//! refused or fails (replaced meanwhile, removal error) is skipped. Space
//! of a file that a reader still holds open is freed when it closes it, so
//! free bytes lag the count a little.
//!
//! [`spawn_eviction_loop`] runs it every `period` on the background
//! runtime, until its cancellation token fires.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use super::mgr::TenantManager;
use super::storage_layer::layer::Layer;
use super::{EvictionConf, Tenant, Timeline};
use crate::metrics::remote::EVICTIONS;

/// What one eviction run found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EvictionReport {
    /// Resident layer bytes of all timelines before the run.
    pub resident_bytes_before: u64,
    /// Free bytes of the workdir's file system before the run (`None` if
    /// `statvfs` failed; then only `max_resident_bytes` counts).
    pub avail_bytes_before: Option<u64>,
    /// The larger shortfall of the two limits.
    pub bytes_to_free: u64,
    pub layers_evicted: usize,
    pub bytes_evicted: u64,
    /// Candidates whose eviction was refused or failed.
    pub layers_skipped: usize,
    /// Whether the run freed `bytes_to_free`.
    pub within_budget: bool,
}

/// One eviction run over every timeline of `tenants` (see the module
/// comment); `workdir` is where the file system's free space is read.
pub async fn evict_to_budget(
    tenants: &[Arc<Tenant>],
    conf: &EvictionConf,
    workdir: &Path,
) -> EvictionReport {
    let timelines: Vec<Arc<Timeline>> = tenants.iter().flat_map(|t| t.list_timelines()).collect();
    evict_timelines_to_budget(&timelines, conf, workdir).await
}

/// [`evict_to_budget`] over `timelines` (those shutting down are left out).
pub async fn evict_timelines_to_budget(
    timelines: &[Arc<Timeline>],
    conf: &EvictionConf,
    workdir: &Path,
) -> EvictionReport {
    let live = timelines.iter().filter(|t| !t.cancel.is_cancelled());
    let resident: Vec<Arc<Layer>> = live.flat_map(|t| t.resident_layers()).collect();
    let resident_bytes_before = resident.iter().map(|l| l.file_size).sum();
    let avail_bytes_before = match avail_bytes(workdir) {
        Ok(b) => Some(b),
        Err(e) => {
            warn!("free space of {} unknown: {e}", workdir.display());
            None
        }
    };
    let bytes_to_free = bytes_to_free(conf, resident_bytes_before, avail_bytes_before);
    let mut report = EvictionReport {
        resident_bytes_before,
        avail_bytes_before,
        bytes_to_free,
        within_budget: bytes_to_free == 0,
        ..EvictionReport::default()
    };
    if bytes_to_free > 0 {
        evict_lru(resident, &mut report).await;
    }
    report
}

/// The bytes to free: the larger shortfall of the two limits.
fn bytes_to_free(conf: &EvictionConf, resident_bytes: u64, avail_bytes: Option<u64>) -> u64 {
    let over = conf.max_resident_bytes.map_or(0, |max| resident_bytes.saturating_sub(max));
    let short = match (conf.min_avail_bytes, avail_bytes) {
        (Some(min), Some(avail)) => min.saturating_sub(avail),
        _ => 0,
    };
    over.max(short)
}

/// Evict the evictable layers of `resident`, least recently used first,
/// until `report.bytes_to_free` bytes are freed.
async fn evict_lru(resident: Vec<Arc<Layer>>, report: &mut EvictionReport) {
    let started = Instant::now();
    let mut candidates: Vec<(Instant, Arc<Layer>)> =
        resident.into_iter().filter(|l| l.is_evictable()).map(|l| (l.last_access(), l)).collect();
    candidates.sort_by_key(|(at, _)| *at);
    for (_, layer) in candidates {
        if report.bytes_evicted >= report.bytes_to_free {
            break;
        }
        if layer.evict().await {
            EVICTIONS.inc();
            report.layers_evicted += 1;
            report.bytes_evicted += layer.file_size;
        } else {
            report.layers_skipped += 1;
        }
    }
    report.within_budget = report.bytes_evicted >= report.bytes_to_free;
    info!(
        "evicted {} layers ({} bytes of {} to free) in {:?}, {} skipped",
        report.layers_evicted,
        report.bytes_evicted,
        report.bytes_to_free,
        started.elapsed(),
        report.layers_skipped
    );
}

/// Bytes an unprivileged process may still use on the file system of
/// `path`.
fn avail_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `c_path` is a valid NUL-terminated string and `st` a
    // writable statvfs that the call fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut st) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(e.kind(), format!("statvfs {}: {e}", path.display())));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Run [`evict_to_budget`] over `mgr`'s tenants every `conf.period` on the
/// background runtime until `cancel` fires; `None` (nothing spawned) when
/// the period is zero or no limit is set. A run is not interrupted by
/// `cancel` (it is short: one file removal per layer); the loop stops
/// before the next.
pub fn spawn_eviction_loop(
    mgr: Arc<TenantManager>,
    conf: EvictionConf,
    workdir: PathBuf,
    cancel: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    if conf.period.is_zero()
        || (conf.max_resident_bytes.is_none() && conf.min_avail_bytes.is_none())
    {
        info!("disk usage based eviction is off");
        return None;
    }
    info!(
        "disk usage based eviction every {:?}: max_resident_bytes {:?}, min_avail_bytes {:?}",
        conf.period, conf.max_resident_bytes, conf.min_avail_bytes
    );
    let task = async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(conf.period) => {}
            }
            let report = evict_to_budget(&mgr.list_tenants(), &conf, &workdir).await;
            if !report.within_budget {
                warn!(
                    "over the disk budget: {} bytes to free, {} freed (nothing else is evictable)",
                    report.bytes_to_free, report.bytes_evicted
                );
            }
        }
    };
    Some(crate::background::handle().spawn(task.instrument(tracing::info_span!("eviction"))))
}

#[cfg(test)]
mod tests;
