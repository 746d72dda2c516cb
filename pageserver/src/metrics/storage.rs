//! Storage-engine metrics: flushes, in-memory layers, vectored reads,
//! ingest backpressure. Registered at start-up by `register()`.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{register_histogram, register_int_counter, Histogram, IntCounter};

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

pub static INGEST_BACKPRESSURE: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_ingest_backpressure_waits_total",
        "Times ingest waited for flushes (too many frozen layers or memory budget exceeded)"
    )
    .expect("register metric")
});

/// Force registration so `/metrics` lists every metric from the first scrape.
pub fn register() {
    LazyLock::force(&LAYER_FLUSH_SECONDS);
    LazyLock::force(&LAYER_FLUSHED_BYTES);
    LazyLock::force(&VECTORED_READ_CHUNKS);
    LazyLock::force(&VECTORED_READ_BYTES);
    LazyLock::force(&INGEST_BACKPRESSURE);
}

pub fn record_flush(elapsed: Duration, bytes: u64) {
    LAYER_FLUSH_SECONDS.observe(elapsed.as_secs_f64());
    LAYER_FLUSHED_BYTES.inc_by(bytes);
}

pub fn record_vectored_read(chunks: usize, bytes: u64) {
    VECTORED_READ_CHUNKS.inc_by(chunks as u64);
    VECTORED_READ_BYTES.inc_by(bytes);
}

pub fn record_backpressure() {
    INGEST_BACKPRESSURE.inc();
}
