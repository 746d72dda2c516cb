//! Storage-engine metrics: flushes, in-memory layers, vectored reads,
//! the layer index block cache, ingest backpressure. Registered at start-up by `register()`.

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus::{
    register_histogram, register_histogram_vec, register_int_counter, register_int_gauge,
    Histogram, HistogramVec, IntCounter, IntGauge,
};

use super::LATENCY_SECONDS_BUCKETS;

pub static LAYER_FLUSH_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "pageserver_layer_flush_seconds",
        "Time to write one frozen in-memory layer to an L0 file",
        vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0]
    )
    .expect("register metric")
});

pub static LAYER_FLUSHED_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("pageserver_layer_flushed_bytes_total", "Bytes of L0 layer files written")
        .expect("register metric")
});

pub static VECTORED_READ_CHUNKS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_vectored_read_chunks_total",
        "Coalesced chunk reads issued by vectored gets"
    )
    .expect("register metric")
});

pub static VECTORED_READ_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("pageserver_vectored_read_bytes_total", "Bytes read by vectored gets")
        .expect("register metric")
});

/// One observation per `Timeline::get_vectored`, labelled by who read.
pub static GET_VECTORED_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "pageserver_get_vectored_seconds",
        "Time of one vectored get",
        &["task_kind"],
        LATENCY_SECONDS_BUCKETS.to_vec()
    )
    .expect("register metric")
});

/// `GET_VECTORED_SECONDS` children pre-resolved at registration, indexed
/// like the `read_kinds` given to `register` (no label lookup per read).
static GET_VECTORED_BY_KIND: OnceLock<Vec<Histogram>> = OnceLock::new();

/// Corrupt values found while serving reads (checksum or framing errors).
pub static LAYER_CORRUPTION_ERRORS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_layer_corruption_errors_total",
        "Corrupt values found in layer files while serving reads"
    )
    .expect("register metric")
});

/// Layer index block reads the block cache served (`block_cache.rs`).
pub static LAYER_INDEX_CACHE_HITS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_layer_index_cache_hits_total",
        "Layer index block reads served by the layer index cache"
    )
    .expect("register metric")
});

/// Layer index block reads that had to read the block from its file.
pub static LAYER_INDEX_CACHE_MISSES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_layer_index_cache_misses_total",
        "Layer index block reads that read the block from its layer file"
    )
    .expect("register metric")
});

/// Bytes of index blocks the cache holds (at most `layer_index_cache_size`).
pub static LAYER_INDEX_CACHE_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_layer_index_cache_bytes",
        "Bytes of layer index blocks held by the layer index cache"
    )
    .expect("register metric")
});

/// File operations the IO engine has handed to the kernel and not yet
/// finished (io-uring; 0 for std-fs), set at each scrape.
pub static IO_ENGINE_IN_FLIGHT_OPS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_io_engine_in_flight_ops",
        "File operations in flight in the IO engine's ring (sampled at scrape)"
    )
    .unwrap()
});

/// Tenants that could not be loaded at start-up (Broken), until deleted.
pub static BROKEN_TENANTS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("pageserver_broken_tenants_count", "Tenants in the Broken state")
        .expect("register metric")
});

/// Tenants whose load waits for remote storage (Activating, retried).
pub static ACTIVATING_TENANTS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_activating_tenants_count",
        "Tenants in the Activating state: their load waits for remote storage"
    )
    .expect("register metric")
});

/// Failed tries to load an Activating tenant (remote storage unreachable).
pub static TENANT_ACTIVATION_RETRIES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_tenant_activation_retries_total",
        "Loads of Activating tenants that failed because remote storage was unavailable"
    )
    .expect("register metric")
});

/// Timelines that could not be loaded at start-up (Broken), until deleted.
pub static BROKEN_TIMELINES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("pageserver_broken_timelines_count", "Timelines in the Broken state")
        .expect("register metric")
});

pub static INGEST_BACKPRESSURE: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_ingest_backpressure_waits_total",
        "Times ingest waited for flushes (too many frozen layers or memory budget exceeded)"
    )
    .expect("register metric")
});

/// LSN leases valid now, all timelines together, counted at each scrape.
pub static VALID_LSN_LEASES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "pageserver_valid_lsn_leases",
        "LSN leases valid now, all timelines (sampled at scrape)"
    )
    .expect("register metric")
});

/// Writes of LSN lease files (`lsn_leases.json`), all timelines together.
pub static LEASE_FILE_WRITES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_lease_file_writes_total",
        "Durable writes of LSN lease files, all timelines"
    )
    .expect("register metric")
});

/// Count the valid leases of every timeline into [`VALID_LSN_LEASES`].
pub fn refresh_lease_count(tenants: &crate::tenant::mgr::TenantManager) {
    let now = std::time::SystemTime::now();
    let n: usize = tenants
        .list_tenants()
        .iter()
        .flat_map(|t| t.list_timelines())
        .map(|tl| tl.valid_leases(now).len())
        .sum();
    VALID_LSN_LEASES.set(n as i64);
}

/// Force registration so `/metrics` lists every metric from the first
/// scrape; `read_kinds` are the `task_kind` label values of vectored gets.
pub fn register(read_kinds: &[&str]) {
    let handles = read_kinds.iter().map(|k| GET_VECTORED_SECONDS.with_label_values(&[k])).collect();
    let _ = GET_VECTORED_BY_KIND.set(handles);
    LazyLock::force(&LAYER_FLUSH_SECONDS);
    LazyLock::force(&LAYER_FLUSHED_BYTES);
    LazyLock::force(&VECTORED_READ_CHUNKS);
    LazyLock::force(&VECTORED_READ_BYTES);
    LazyLock::force(&INGEST_BACKPRESSURE);
    LazyLock::force(&BROKEN_TENANTS);
    LazyLock::force(&BROKEN_TIMELINES);
    LazyLock::force(&ACTIVATING_TENANTS);
    LazyLock::force(&TENANT_ACTIVATION_RETRIES);
    LazyLock::force(&LAYER_CORRUPTION_ERRORS);
    LazyLock::force(&LAYER_INDEX_CACHE_HITS);
    LazyLock::force(&LAYER_INDEX_CACHE_MISSES);
    LazyLock::force(&LAYER_INDEX_CACHE_BYTES);
    LazyLock::force(&IO_ENGINE_IN_FLIGHT_OPS);
    LazyLock::force(&VALID_LSN_LEASES);
    LazyLock::force(&LEASE_FILE_WRITES);
}

pub fn record_flush(elapsed: Duration, bytes: u64) {
    LAYER_FLUSH_SECONDS.observe(elapsed.as_secs_f64());
    LAYER_FLUSHED_BYTES.inc_by(bytes);
}

/// `kind_index`/`kind_label`: the reader's index in `register`'s list and
/// its label (used when metrics were not registered, e.g. in unit tests).
pub fn record_vectored_read(
    kind_index: usize,
    kind_label: &str,
    elapsed: Duration,
    chunks: usize,
    bytes: u64,
) {
    match GET_VECTORED_BY_KIND.get().and_then(|v| v.get(kind_index)) {
        Some(h) => h.observe(elapsed.as_secs_f64()),
        None => {
            GET_VECTORED_SECONDS.with_label_values(&[kind_label]).observe(elapsed.as_secs_f64())
        }
    }
    VECTORED_READ_CHUNKS.inc_by(chunks as u64);
    VECTORED_READ_BYTES.inc_by(bytes);
}

pub fn record_backpressure() {
    INGEST_BACKPRESSURE.inc();
}
