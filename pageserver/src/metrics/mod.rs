//! Prometheus metrics of the daemon, one file per area, all in the
//! `prometheus` crate's default registry (served by `GET /metrics`).
//!
//! Conventions (every file here follows them):
//! - names are unit-suffixed: `_seconds`, `_bytes`, `_total` (counters), and
//!   start with `pageserver_` (or `libmetrics_` for process-level gauges that
//!   keep Neon's names);
//! - histograms take their buckets from the constants below, so dashboards can
//!   compare areas;
//! - each area has a `register()` that forces its statics (and pre-creates the
//!   label values it knows), and `register_all()` runs them all at start-up so
//!   `/metrics` lists every metric from the first scrape.

pub mod compaction;
pub mod http;
pub mod page_service;
pub mod process;
pub mod redo;
pub mod remote;
pub mod storage;
pub mod walreceiver;

/// Latency buckets for fast operations (10 µs .. 10 s): page reads, vectored
/// gets, waits for an LSN.
pub const LATENCY_SECONDS_BUCKETS: &[f64] = &[
    0.000_010, 0.000_020, 0.000_050, 0.000_100, 0.000_200, 0.000_500, 0.001, 0.002, 0.005, 0.010,
    0.020, 0.050, 0.100, 0.200, 0.500, 1.0, 2.0, 5.0, 10.0,
];

/// Latency buckets for slow operations (1 ms .. 300 s): HTTP requests, flushes,
/// imports.
pub const SLOW_SECONDS_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.010, 0.050, 0.100, 0.500, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0];

/// Buckets for batch sizes of 1..=32 requests (one bucket per size).
pub const BATCH_SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0,
    18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0,
];

/// Register every metric of the daemon. Idempotent; call once at start-up.
/// `http_routes` are the management API's (method, route template) pairs,
/// pre-registered as label values (the API passes them in; metrics never
/// import the API).
/// `read_kinds` are the `task_kind` labels of vectored gets
/// (`tenant::ReadKind::LABELS`), likewise passed in from above.
pub fn register_all(http_routes: &[(&str, &str)], read_kinds: &[&str]) {
    process::register();
    http::register(http_routes);
    page_service::register();
    storage::register(read_kinds);
    compaction::register();
    walreceiver::register();
    remote::register();
    redo::register();
}

/// The default registry in Prometheus text format.
pub fn encode_text() -> anyhow::Result<String> {
    use prometheus::Encoder;
    let families = prometheus::gather();
    let mut buf = Vec::new();
    prometheus::TextEncoder::new().encode(&families, &mut buf)?;
    Ok(String::from_utf8(buf)?)
}

#[cfg(test)]
mod tests {
    const TEST_ROUTES: &[(&str, &str)] = &[("GET", "/v1/status")];

    #[test]
    fn buckets_are_sorted() {
        for b in
            [super::LATENCY_SECONDS_BUCKETS, super::SLOW_SECONDS_BUCKETS, super::BATCH_SIZE_BUCKETS]
        {
            assert!(b.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn register_all_lists_process_and_http_metrics() {
        super::register_all(TEST_ROUTES, &["PageRequestHandler"]);
        let text = super::encode_text().unwrap();
        for name in [
            "libmetrics_process_cpu_seconds_highres",
            "pageserver_http_request_seconds",
            "pageserver_http_responses_total",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing from:\n{text}");
        }
    }

    /// Metric names in the first column of the tables of `docs/metrics.md`.
    fn documented_metrics() -> Vec<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let mut names = Vec::new();
        for line in doc.lines().filter(|l| l.starts_with("| `")) {
            let first_cell = line.split('|').nth(1).unwrap();
            names.extend(first_cell.split('`').skip(1).step_by(2).map(str::to_string));
        }
        names
    }

    /// `docs/metrics.md` and the registry list the same metrics.
    #[test]
    fn docs_list_every_registered_metric() {
        super::register_all(TEST_ROUTES, &["PageRequestHandler"]);
        // Per-timeline families appear once a timeline has a series.
        super::walreceiver::METRICS.refresh(&[super::walreceiver::FollowerSample {
            tenant_id: "t".into(),
            timeline_id: "tl".into(),
            lag_bytes: 0,
            lag_seconds: 0.0,
            reported: Default::default(),
            stopped: false,
            diverged: false,
            pg_tli: Some(1),
        }]);
        super::remote::REMOTE_CONSISTENT_LSN.with_label_values(&["t", "tl"]).set(0);
        let registered: std::collections::BTreeSet<String> =
            prometheus::gather().iter().map(|f| f.get_name().to_string()).collect();
        let documented: std::collections::BTreeSet<String> =
            documented_metrics().into_iter().collect();
        let undocumented: Vec<_> = registered.difference(&documented).collect();
        let missing: Vec<_> = documented.difference(&registered).collect();
        assert!(undocumented.is_empty(), "registered but not in docs/metrics.md: {undocumented:?}");
        assert!(missing.is_empty(), "in docs/metrics.md but not registered: {missing:?}");
    }
}
