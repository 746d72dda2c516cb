//! Remote storage metrics: transfers, the upload queue, remote
//! consistency and objects found missing (or lost), on-demand downloads and evictions.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge,
    register_int_gauge_vec, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
};

use super::SLOW_SECONDS_BUCKETS;

/// `op_kind` label values.
pub const OPS: [&str; 3] = ["upload", "download", "delete"];

pub static OPERATION_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "pageserver_remote_operation_seconds",
        "Time of one remote storage operation that succeeded, by object kind and operation",
        &["file_kind", "op_kind"],
        SLOW_SECONDS_BUCKETS.to_vec()
    )
    .expect("register metric")
});

pub static OPERATION_ERRORS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_remote_operation_errors_total",
        "Remote storage operations that failed (each retry counts), by operation",
        &["op_kind"]
    )
    .expect("register metric")
});

pub static BYTES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_remote_timeline_client_bytes_finished_total",
        "Bytes of layer files uploaded or downloaded",
        &["op_kind"]
    )
    .expect("register metric")
});

pub static UPLOAD_QUEUE_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_remote_upload_queue_bytes",
        "Bytes of layer files listed in a local manifest and not yet uploaded (all timelines)"
    )
    .expect("register metric")
});

pub static UPLOAD_QUEUE_WAIT: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_remote_upload_queue_wait_microseconds_total",
        "Time flushes waited because the upload queue was full"
    )
    .expect("register metric")
});

pub static REMOTE_CONSISTENT_LSN: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "pageserver_remote_consistent_lsn",
        "disk_consistent_lsn of the newest index uploaded, as an LSN number",
        &["tenant_id", "timeline_id"]
    )
    .expect("register metric")
});

pub static MISSING_OBJECTS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_remote_missing_objects",
        "Objects an uploaded index lists that remote storage was found to lack and that are not \
         uploaded again yet (all timelines)"
    )
    .expect("register metric")
});

pub static MISSING_OBJECTS_FOUND: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_remote_missing_objects_found_total",
        "Objects an uploaded index lists that a listing or a download found missing from remote \
         storage"
    )
    .expect("register metric")
});

pub static LOST_OBJECTS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_remote_lost_objects",
        "Objects an uploaded index lists that remote storage lacks and that are not on local disk \
         either (evicted before the loss): they cannot be uploaded again, and remote_consistent_lsn \
         stays until an index no longer lists them (all timelines)"
    )
    .expect("register metric")
});

pub static LIST_REQUESTS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_remote_list_requests_total",
        "LIST requests sent to remote storage (listings of a prefix, whether they succeeded or not)"
    )
    .expect("register metric")
});

pub static EVICTIONS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_layer_evictions_total",
        "Local layer files removed to stay within the disk budget (their remote copy stays)"
    )
    .expect("register metric")
});

pub static RESIDENT_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_resident_physical_size",
        "Bytes of layer files on local disk (all timelines)"
    )
    .expect("register metric")
});

pub fn record_download(bytes: u64, took: Duration) {
    OPERATION_SECONDS.with_label_values(&["layer", "download"]).observe(took.as_secs_f64());
    BYTES.with_label_values(&["download"]).inc_by(bytes);
}

pub fn record_upload(file_kind: &str, bytes: u64, took: Duration) {
    OPERATION_SECONDS.with_label_values(&[file_kind, "upload"]).observe(took.as_secs_f64());
    if file_kind == "layer" {
        BYTES.with_label_values(&["upload"]).inc_by(bytes);
    }
}

/// One `pageserver_remote_consistent_lsn` series per timeline with remote
/// storage (series of timelines gone since are dropped).
pub fn refresh(tenants: &crate::tenant::mgr::TenantManager) {
    REMOTE_CONSISTENT_LSN.reset();
    for tl in tenants.list_tenants().iter().flat_map(|t| t.list_timelines()) {
        let Some(lsn) = tl.remote_client().and_then(|r| r.remote_consistent_lsn()) else {
            continue;
        };
        let ids = [tl.tenant_id.to_string(), tl.timeline_id.to_string()];
        REMOTE_CONSISTENT_LSN.with_label_values(&[&ids[0], &ids[1]]).set(lsn.0 as i64);
    }
}

pub fn register() {
    for op in OPS {
        for kind in ["layer", "index"] {
            OPERATION_SECONDS.with_label_values(&[kind, op]);
        }
        OPERATION_ERRORS.with_label_values(&[op]);
    }
    OPERATION_SECONDS.with_label_values(&["commit_times", "upload"]);
    BYTES.with_label_values(&["upload"]);
    BYTES.with_label_values(&["download"]);
    LazyLock::force(&UPLOAD_QUEUE_BYTES);
    LazyLock::force(&UPLOAD_QUEUE_WAIT);
    LazyLock::force(&REMOTE_CONSISTENT_LSN);
    LazyLock::force(&MISSING_OBJECTS);
    LazyLock::force(&MISSING_OBJECTS_FOUND);
    LazyLock::force(&LOST_OBJECTS);
    LazyLock::force(&LIST_REQUESTS);
    LazyLock::force(&EVICTIONS);
    LazyLock::force(&RESIDENT_BYTES);
}
