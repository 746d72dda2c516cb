//! Page service metrics, with Neon's names so that its dashboards and tests
//! read them unchanged.
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `pageserver_smgr_query_seconds` | histogram | `smgr_query_type` | execution time of one request: from the executor picking up its batch until its response is encoded (excludes the wait in the batch and the socket flush) |
//! | `pageserver_smgr_query_started_count` | counter | `smgr_query_type` | requests parsed off the wire |
//! | `pageserver_page_service_batch_size` | histogram | | getpage requests per executed batch (buckets 1..=32) |
//! | `pageserver_page_service_batch_break_reason_total` | counter | `reason` | why an executed getpage batch did not grow further |
//! | `pageserver_page_service_pagestream_batch_wait_time_seconds` | histogram | | time from the first request of a batch being read until the executor takes the batch |
//! | `pageserver_page_service_config_max_batch_size` | gauge | `mode`, `execution`, `batching` | the configured batching (0 for serial) |
//! | `pageserver_wait_lsn_seconds` | histogram | | time spent waiting for WAL to arrive before a batch could execute |
//! | `pageserver_live_connections` | gauge | `pageserver_connection_kind` | open libpq connections (`page_service`) |
//! | `pageserver_page_service_refused_connections_total` | counter | | connections refused at `page_service_max_connections` (SQLSTATE 53300) |
//! | `pageserver_page_service_auth_timeouts_total` | counter | | connections closed for not authenticating within `authentication_timeout` |
//! | `pageserver_backups_running` | gauge | | basebackups and fullbackups being generated (libpq and HTTP) |
//! | `pageserver_backups_refused_total` | counter | `limit` | backups refused at `max_concurrent_backups` (`total`) or `max_concurrent_backups_per_tenant` (`per_tenant`) |
//!
//! Hot-path handles are resolved once (`LazyLock` of label-resolved metrics),
//! so recording is a few atomic operations with no lookup or allocation.

use std::sync::LazyLock;

use pageserver_api::config::{
    PageServicePipeliningConfig, PageServiceProtocolPipelinedBatchingStrategy,
    PageServiceProtocolPipelinedExecutionStrategy,
};
use prometheus::{
    register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec,
    register_int_gauge_vec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec,
};

use super::{BATCH_SIZE_BUCKETS, LATENCY_SECONDS_BUCKETS};

/// The `smgr_query_type` label values, one per pagestream request type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmgrQueryType {
    GetRelExists = 0,
    GetRelSize = 1,
    GetPageAtLsn = 2,
    GetDbSize = 3,
    GetSlruSegment = 4,
}

impl SmgrQueryType {
    pub const ALL: [SmgrQueryType; 5] = [
        SmgrQueryType::GetRelExists,
        SmgrQueryType::GetRelSize,
        SmgrQueryType::GetPageAtLsn,
        SmgrQueryType::GetDbSize,
        SmgrQueryType::GetSlruSegment,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SmgrQueryType::GetRelExists => "get_rel_exists",
            SmgrQueryType::GetRelSize => "get_rel_size",
            SmgrQueryType::GetPageAtLsn => "get_page_at_lsn",
            SmgrQueryType::GetDbSize => "get_db_size",
            SmgrQueryType::GetSlruSegment => "get_slru_segment",
        }
    }
}

/// Why an executed getpage batch stopped growing (`reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchBreakReason {
    /// It reached `max_batch_size`.
    BatchFull = 0,
    /// A request other than GetPage arrived (or a request that failed validation).
    NonBatchableRequest = 1,
    /// `uniform-lsn`: the next GetPage had a different effective LSN.
    NonUniformLsn = 2,
    /// `scattered-lsn`: the batch already held the same page at another LSN.
    SamePageAtDifferentLsn = 3,
    /// The executor became free and took the batch as it was.
    ExecutorSteal = 4,
}

impl BatchBreakReason {
    pub const ALL: [BatchBreakReason; 5] = [
        BatchBreakReason::BatchFull,
        BatchBreakReason::NonBatchableRequest,
        BatchBreakReason::NonUniformLsn,
        BatchBreakReason::SamePageAtDifferentLsn,
        BatchBreakReason::ExecutorSteal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BatchBreakReason::BatchFull => "batch_full",
            BatchBreakReason::NonBatchableRequest => "non_batchable_request",
            BatchBreakReason::NonUniformLsn => "non_uniform_lsn",
            BatchBreakReason::SamePageAtDifferentLsn => "same_page_different_lsn",
            BatchBreakReason::ExecutorSteal => "executor_steal",
        }
    }
}

static SMGR_QUERY_SECONDS_VEC: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "pageserver_smgr_query_seconds",
        "Execution time of page service requests, excluding the wait in a batch and the flush",
        &["smgr_query_type"],
        LATENCY_SECONDS_BUCKETS.to_vec()
    )
    .expect("register metric")
});

static SMGR_QUERY_STARTED_VEC: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_smgr_query_started_count",
        "Page service requests received",
        &["smgr_query_type"]
    )
    .expect("register metric")
});

static BATCH_BREAK_REASON_VEC: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_page_service_batch_break_reason_total",
        "Executed getpage batches by the reason they stopped growing",
        &["reason"]
    )
    .expect("register metric")
});

static CONFIG_MAX_BATCH_SIZE_VEC: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "pageserver_page_service_config_max_batch_size",
        "Configured maximum getpage batch size (0 when serial); labels give the rest of the config",
        &["mode", "execution", "batching"]
    )
    .expect("register metric")
});

static LIVE_CONNECTIONS_VEC: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "pageserver_live_connections",
        "Open connections",
        &["pageserver_connection_kind"]
    )
    .expect("register metric")
});

/// Label-resolved handles used on the hot path.
pub struct PageServiceMetrics {
    smgr_query_seconds: [Histogram; 5],
    smgr_query_started: [IntCounter; 5],
    pub batch_size: Histogram,
    batch_break_reason: [IntCounter; 5],
    pub batch_wait_time_seconds: Histogram,
    pub wait_lsn_seconds: Histogram,
    /// `pageserver_connection_kind="page_service"`.
    pub live_connections: IntGauge,
    pub refused_connections: IntCounter,
    pub auth_timeouts: IntCounter,
}

impl PageServiceMetrics {
    pub fn smgr_query_seconds(&self, t: SmgrQueryType) -> &Histogram {
        &self.smgr_query_seconds[t as usize]
    }

    pub fn smgr_query_started(&self, t: SmgrQueryType) -> &IntCounter {
        &self.smgr_query_started[t as usize]
    }

    pub fn batch_break_reason(&self, r: BatchBreakReason) -> &IntCounter {
        &self.batch_break_reason[r as usize]
    }
}

pub static METRICS: LazyLock<PageServiceMetrics> = LazyLock::new(|| PageServiceMetrics {
    smgr_query_seconds: SmgrQueryType::ALL
        .map(|t| SMGR_QUERY_SECONDS_VEC.with_label_values(&[t.as_str()])),
    smgr_query_started: SmgrQueryType::ALL
        .map(|t| SMGR_QUERY_STARTED_VEC.with_label_values(&[t.as_str()])),
    batch_size: register_histogram!(
        "pageserver_page_service_batch_size",
        "Getpage requests per executed batch",
        BATCH_SIZE_BUCKETS.to_vec()
    )
    .expect("register metric"),
    batch_break_reason: BatchBreakReason::ALL
        .map(|r| BATCH_BREAK_REASON_VEC.with_label_values(&[r.as_str()])),
    batch_wait_time_seconds: register_histogram!(
        "pageserver_page_service_pagestream_batch_wait_time_seconds",
        "Time from reading the first request of a batch until the executor takes the batch",
        LATENCY_SECONDS_BUCKETS.to_vec()
    )
    .expect("register metric"),
    wait_lsn_seconds: register_histogram!(
        "pageserver_wait_lsn_seconds",
        "Time spent waiting for WAL to arrive before a read could execute",
        LATENCY_SECONDS_BUCKETS.to_vec()
    )
    .expect("register metric"),
    live_connections: LIVE_CONNECTIONS_VEC.with_label_values(&["page_service"]),
    refused_connections: register_int_counter!(
        "pageserver_page_service_refused_connections_total",
        "Page service connections refused because page_service_max_connections were open"
    )
    .expect("register metric"),
    auth_timeouts: register_int_counter!(
        "pageserver_page_service_auth_timeouts_total",
        "Page service connections closed for not authenticating within authentication_timeout"
    )
    .expect("register metric"),
});

/// Publish the configured batching in `pageserver_page_service_config_max_batch_size`.
/// Only the current configuration's label set exists afterwards.
pub fn set_config(conf: &PageServicePipeliningConfig) {
    let gauge = &*CONFIG_MAX_BATCH_SIZE_VEC;
    gauge.reset();
    match conf {
        PageServicePipeliningConfig::Serial => gauge.with_label_values(&["serial", "", ""]).set(0),
        PageServicePipeliningConfig::Pipelined(p) => {
            let execution = match p.execution {
                PageServiceProtocolPipelinedExecutionStrategy::ConcurrentFutures => {
                    "concurrent-futures"
                }
                PageServiceProtocolPipelinedExecutionStrategy::Tasks => "tasks",
            };
            let batching = match p.batching {
                PageServiceProtocolPipelinedBatchingStrategy::UniformLsn => "uniform-lsn",
                PageServiceProtocolPipelinedBatchingStrategy::ScatteredLsn => "scattered-lsn",
            };
            gauge
                .with_label_values(&["pipelined", execution, batching])
                .set(p.max_batch_size.get() as i64);
        }
    }
}

/// Force registration of every page service metric (and its known label
/// values) so `/metrics` lists them from the first scrape.
/// Backups being generated (`basebackup/limits.rs`).
pub static BACKUPS_RUNNING: LazyLock<IntGauge> = LazyLock::new(|| {
    prometheus::register_int_gauge!(
        "pageserver_backups_running",
        "Basebackups and fullbackups being generated (libpq and HTTP)"
    )
    .expect("register metric")
});

/// Backups refused at a limit: `total` or `per_tenant`.
pub static BACKUPS_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let c = register_int_counter_vec!(
        "pageserver_backups_refused_total",
        "Backups refused at max_concurrent_backups (total) or \
         max_concurrent_backups_per_tenant (per_tenant)",
        &["limit"]
    )
    .expect("register metric");
    for limit in ["total", "per_tenant"] {
        c.with_label_values(&[limit]);
    }
    c
});

pub fn register() {
    LazyLock::force(&METRICS);
    LazyLock::force(&CONFIG_MAX_BATCH_SIZE_VEC);
    LazyLock::force(&BACKUPS_RUNNING);
    LazyLock::force(&BACKUPS_REFUSED);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_lists_every_metric_with_neon_names() {
        register();
        set_config(&PageServicePipeliningConfig::default());
        let text = crate::metrics::encode_text().unwrap();
        for name in [
            "pageserver_smgr_query_seconds",
            "pageserver_smgr_query_started_count",
            "pageserver_page_service_batch_size",
            "pageserver_page_service_batch_break_reason_total",
            "pageserver_page_service_pagestream_batch_wait_time_seconds",
            "pageserver_page_service_config_max_batch_size",
            "pageserver_wait_lsn_seconds",
            "pageserver_live_connections",
            "pageserver_page_service_refused_connections_total",
            "pageserver_page_service_auth_timeouts_total",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
        for t in SmgrQueryType::ALL {
            assert!(text.contains(&format!("smgr_query_type=\"{}\"", t.as_str())));
        }
        assert!(text.contains(
            "pageserver_page_service_config_max_batch_size{batching=\"scattered-lsn\",\
             execution=\"concurrent-futures\",mode=\"pipelined\"} 32"
        ));
        set_config(&PageServicePipeliningConfig::Serial);
        let text = crate::metrics::encode_text().unwrap();
        assert!(!text.contains("mode=\"pipelined\""), "the old config's label set is removed");
    }
}
