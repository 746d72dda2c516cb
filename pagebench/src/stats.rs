//! Request statistics: a per-connection HDR histogram of latencies in
//! microseconds, live counters for the once-a-second progress line, and the
//! final JSON report.
//!
//! Invariants: every completed request (success or in-band error) is recorded
//! exactly once, by the connection's reader; requests lost to a disconnect are
//! counted as errors but have no latency. Histograms are merged only after all
//! connections have finished, so no lock is held on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency the histogram tracks (larger values are clamped): 10 minutes.
const MAX_LATENCY_US: u64 = 600_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// Statistics of one connection (or a merge of several).
pub struct RequestStats {
    pub latency_us: Histogram<u64>,
    /// Successful responses.
    pub ok: u64,
    /// Error responses from the server (tag 103).
    pub error_responses: u64,
    /// Requests lost or failed because the connection broke or misbehaved
    /// (disconnect, unparsable or mismatching response).
    pub connection_errors: u64,
    /// Connection attempts that failed.
    pub connect_failures: u64,
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            latency_us: new_histogram(),
            ok: 0,
            error_responses: 0,
            connection_errors: 0,
            connect_failures: 0,
        }
    }
}

impl RequestStats {
    pub fn record_latency(&mut self, latency: Duration) {
        let us = (latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        self.latency_us.record(us).expect("value within bounds");
    }

    pub fn merge(&mut self, other: &RequestStats) {
        self.latency_us.add(&other.latency_us).expect("same histogram bounds");
        self.ok += other.ok;
        self.error_responses += other.error_responses;
        self.connection_errors += other.connection_errors;
        self.connect_failures += other.connect_failures;
    }
}

/// Counters shared by all connections for the progress line (relaxed atomics:
/// they are only ever summed for display).
#[derive(Default)]
pub struct LiveCounters {
    pub completed: AtomicU64,
    pub errors: AtomicU64,
    pub latency_sum_us: AtomicU64,
}

impl LiveCounters {
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.completed.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.latency_sum_us.load(Ordering::Relaxed),
        )
    }
}

/// One progress line, from two snapshots `elapsed` apart.
pub fn progress_line(prev: (u64, u64, u64), now: (u64, u64, u64), elapsed: Duration) -> String {
    let done = now.0 - prev.0;
    let errors = now.1 - prev.1;
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mean = if done > 0 { (now.2 - prev.2) as f64 / done as f64 } else { 0.0 };
    format!(
        "{:>10.0} req/s  mean {:>9.1}µs  errors {:>6}  total {:>10}",
        done as f64 / secs,
        mean,
        errors,
        now.0
    )
}

#[derive(Serialize)]
pub struct Percentiles<T> {
    pub p50: T,
    pub p95: T,
    pub p99: T,
    #[serde(rename = "p99.9")]
    pub p99_9: T,
    #[serde(rename = "p99.99")]
    pub p99_99: T,
}

#[derive(Serialize)]
pub struct ErrorBreakdown {
    pub error_responses: u64,
    pub connection_errors: u64,
    pub connect_failures: u64,
}

/// The `total` object of the JSON report. Latency strings are in humantime
/// form ("123us", "1ms 234us": humantime, which Neon's pagebench uses); the `_us`
/// fields carry the same figures as numbers for scripts.
#[derive(Serialize)]
pub struct TotalReport {
    pub request_count: u64,
    pub error_count: u64,
    pub runtime_seconds: f64,
    pub rps: f64,
    pub latency_mean: String,
    pub latency_mean_us: f64,
    pub latency_max_us: u64,
    pub latency_percentiles: Percentiles<String>,
    pub latency_percentiles_us: Percentiles<u64>,
    pub errors: ErrorBreakdown,
}

#[derive(Serialize)]
pub struct Report {
    pub total: TotalReport,
}

fn us_to_string(us: u64) -> String {
    humantime::format_duration(Duration::from_micros(us)).to_string()
}

impl Report {
    /// `request_count` counts successful responses (what throughput means);
    /// errors are reported beside it.
    pub fn new(stats: &RequestStats, runtime: Duration) -> Report {
        let h = &stats.latency_us;
        let empty = h.is_empty();
        let q = |q: f64| if empty { 0 } else { h.value_at_quantile(q) };
        let pct_us = Percentiles {
            p50: q(0.50),
            p95: q(0.95),
            p99: q(0.99),
            p99_9: q(0.999),
            p99_99: q(0.9999),
        };
        let mean_us = if empty { 0.0 } else { h.mean() };
        let error_count = stats.error_responses + stats.connection_errors + stats.connect_failures;
        let secs = runtime.as_secs_f64();
        Report {
            total: TotalReport {
                request_count: stats.ok,
                error_count,
                runtime_seconds: secs,
                rps: if secs > 0.0 { stats.ok as f64 / secs } else { 0.0 },
                latency_mean: us_to_string(mean_us.round() as u64),
                latency_mean_us: (mean_us * 10.0).round() / 10.0,
                latency_max_us: if empty { 0 } else { h.max() },
                latency_percentiles: Percentiles {
                    p50: us_to_string(pct_us.p50),
                    p95: us_to_string(pct_us.p95),
                    p99: us_to_string(pct_us.p99),
                    p99_9: us_to_string(pct_us.p99_9),
                    p99_99: us_to_string(pct_us.p99_99),
                },
                latency_percentiles_us: pct_us,
                errors: ErrorBreakdown {
                    error_responses: stats.error_responses,
                    connection_errors: stats.connection_errors,
                    connect_failures: stats.connect_failures,
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_shape_and_values() {
        let mut a = RequestStats::default();
        let mut b = RequestStats::default();
        for us in 1..=100u64 {
            a.record_latency(Duration::from_micros(us * 10));
            a.ok += 1;
        }
        b.error_responses = 2;
        b.connection_errors = 1;
        a.merge(&b);
        let report = Report::new(&a, Duration::from_secs(2));
        let v = serde_json::to_value(&report).unwrap();
        let t = &v["total"];
        assert_eq!(t["request_count"], 100);
        assert_eq!(t["error_count"], 3);
        assert_eq!(t["rps"], 50.0);
        assert_eq!(t["latency_percentiles_us"]["p50"], 500);
        assert_eq!(t["latency_percentiles_us"]["p99"], 990);
        assert_eq!(t["latency_percentiles"]["p50"], "500us");
        assert_eq!(t["latency_mean_us"], 505.0);
        assert_eq!(t["latency_mean"], "505us");
        for k in ["p50", "p95", "p99", "p99.9", "p99.99"] {
            assert!(t["latency_percentiles"][k].is_string(), "{k}");
        }
    }

    #[test]
    fn empty_report_has_zeros() {
        let report = Report::new(&RequestStats::default(), Duration::from_secs(1));
        assert_eq!(report.total.request_count, 0);
        assert_eq!(report.total.latency_percentiles_us.p99, 0);
        assert_eq!(report.total.latency_mean, "0s");
    }

    #[test]
    fn clamps_out_of_range_latencies() {
        let mut s = RequestStats::default();
        s.record_latency(Duration::ZERO);
        s.record_latency(Duration::from_secs(3600));
        assert_eq!(s.latency_us.len(), 2);
    }
}
