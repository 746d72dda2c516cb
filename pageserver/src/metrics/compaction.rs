//! Compaction, image creation, GC and L0 backpressure metrics. Registered
//! at start-up by `register()`; layer counts are refreshed per scrape
//! (`refresh_layer_counts`).

use std::sync::LazyLock;
use std::time::Duration;

use super::SLOW_SECONDS_BUCKETS;
use prometheus::{
    register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec,
    register_int_gauge_vec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec,
};

/// One observation per run of a maintenance task that did work, labelled
/// `compaction`, `image_creation` or `gc`.
pub static TASK_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "pageserver_layer_maintenance_seconds",
        "Time of one compaction, image creation or GC run that changed layers",
        &["task"],
        SLOW_SECONDS_BUCKETS.to_vec()
    )
    .expect("register metric")
});

/// Bytes of layer files written (compaction, image creation) or removed (gc).
pub static TASK_BYTES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_layer_maintenance_bytes_total",
        "Bytes of layer files written by compaction and image creation, removed by GC",
        &["task"]
    )
    .expect("register metric")
});

/// Layer files written (compaction, image creation) or removed (gc).
pub static TASK_LAYERS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_layer_maintenance_layers_total",
        "Layer files written by compaction and image creation, removed by GC",
        &["task"]
    )
    .expect("register metric")
});

/// Layer files of all timelines by level: `l0`, `l1`, `image`.
pub static LAYERS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "pageserver_layers",
        "Layer files of all timelines, by level (l0, l1, image)",
        &["level"]
    )
    .expect("register metric")
});

/// Layers a read visited per key (in-memory and files), observed per key of
/// every vectored get.
pub static LAYERS_VISITED_PER_READ: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "pageserver_layers_visited_per_read",
        "Layers visited to reconstruct one key of a vectored get",
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 8.0, 12.0, 16.0, 32.0, 64.0]
    )
    .expect("register metric")
});

/// Time layer flushes waited because of the L0 count.
pub static FLUSH_DELAY_SECONDS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_l0_flush_wait_microseconds_total",
        "Time layer flushes waited on the L0 count: delayed (l0_flush_delay_threshold) or \
         stalled (l0_flush_stall_threshold)",
        &["reason"]
    )
    .expect("register metric")
});

/// Maintenance runs that failed (they are retried next period).
pub static TASK_ERRORS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_layer_maintenance_errors_total",
        "Compaction, image creation and GC runs that failed"
    )
    .expect("register metric")
});

/// The label values of the per-task metrics.
#[derive(Clone, Copy, Debug)]
pub enum Task {
    Compaction,
    ImageCreation,
    Gc,
}

impl Task {
    pub fn label(self) -> &'static str {
        match self {
            Task::Compaction => "compaction",
            Task::ImageCreation => "image_creation",
            Task::Gc => "gc",
        }
    }
}

/// A run of `task` that took `elapsed` and wrote (or removed) `layers`
/// files of `bytes` in total.
pub fn record_task(task: Task, elapsed: Duration, layers: usize, bytes: u64) {
    TASK_SECONDS.with_label_values(&[task.label()]).observe(elapsed.as_secs_f64());
    TASK_LAYERS.with_label_values(&[task.label()]).inc_by(layers as u64);
    TASK_BYTES.with_label_values(&[task.label()]).inc_by(bytes);
}

/// A flush waited `waited` on the L0 count; `stalled` when it waited for
/// compaction rather than by a delay.
pub fn record_flush_wait(waited: Duration, stalled: bool) {
    let reason = if stalled { "stall" } else { "delay" };
    FLUSH_DELAY_SECONDS.with_label_values(&[reason]).inc_by(waited.as_micros() as u64);
}

/// Sum the layer counts of every timeline into [`LAYERS`].
pub fn refresh_layer_counts(tenants: &crate::tenant::mgr::TenantManager) {
    let (mut l0, mut l1, mut image) = (0, 0, 0);
    for tl in tenants.list_tenants().iter().flat_map(|t| t.list_timelines()) {
        let s = tl.layer_stats().files;
        (l0, l1, image) = (l0 + s.l0_layers, l1 + s.l1_layers, image + s.image_layers);
    }
    for (level, n) in [("l0", l0), ("l1", l1), ("image", image)] {
        LAYERS.with_label_values(&[level]).set(n as i64);
    }
}

/// Force registration (and every label) so `/metrics` lists them from the
/// first scrape.
pub fn register() {
    for task in [Task::Compaction, Task::ImageCreation, Task::Gc] {
        TASK_SECONDS.with_label_values(&[task.label()]);
        TASK_BYTES.with_label_values(&[task.label()]);
        TASK_LAYERS.with_label_values(&[task.label()]);
    }
    for level in ["l0", "l1", "image"] {
        LAYERS.with_label_values(&[level]);
    }
    for reason in ["delay", "stall"] {
        FLUSH_DELAY_SECONDS.with_label_values(&[reason]);
    }
    LazyLock::force(&LAYERS_VISITED_PER_READ);
    LazyLock::force(&TASK_ERRORS);
}
