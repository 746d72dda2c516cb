//! Process-level metrics beyond the `prometheus` crate's own `process_*` set.
//!
//! `libmetrics_process_cpu_seconds_highres` (Neon's name): user + system CPU
//! time of the whole process (utime + stime, as in `/proc/self/stat`, read
//! with `getrusage` for microsecond resolution) at every scrape, as a gauge
//! in seconds with fractional part. Benchmarks divide its delta by the request
//! count to get CPU per request. If `/proc` cannot be read the gauge keeps its
//! last value (a scrape never fails because of it).

use std::sync::OnceLock;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, Opts};

pub const CPU_SECONDS_HIGHRES: &str = "libmetrics_process_cpu_seconds_highres";

/// Collector that refreshes the CPU gauge whenever the registry is gathered.
struct CpuCollector {
    gauge: Gauge,
}

impl Collector for CpuCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        if let Ok(secs) = process_cpu_seconds() {
            self.gauge.set(secs);
        }
        self.gauge.collect()
    }
}

/// User + system CPU seconds consumed by this process so far.
///
/// `getrusage(RUSAGE_SELF)` reports the same utime + stime as
/// `/proc/self/stat`, but with microsecond resolution instead of 10 ms
/// clock ticks, so short benchmark runs can divide its delta by a request
/// count.
pub fn process_cpu_seconds() -> std::io::Result<f64> {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Ok(secs(ru.ru_utime) + secs(ru.ru_stime))
}

/// Register the process collectors in the default registry (idempotent).
pub fn register() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        let gauge = Gauge::with_opts(Opts::new(
            CPU_SECONDS_HIGHRES,
            "User and system CPU time of the process in seconds, read at scrape time",
        ))
        .expect("valid metric options");
        prometheus::register(Box::new(CpuCollector { gauge })).expect("register CPU gauge");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_grow_with_work() {
        // Spin until CPU time is accounted to us (bounded).
        let before = process_cpu_seconds().unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after <= before && start.elapsed() < std::time::Duration::from_secs(20) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            after = process_cpu_seconds().unwrap();
        }
        std::hint::black_box(x);
        assert!(after > before, "CPU time did not grow: {before} -> {after}");
    }

    #[test]
    fn gauge_is_refreshed_on_gather() {
        register();
        register();
        let value = prometheus::gather()
            .into_iter()
            .find(|f| f.get_name() == CPU_SECONDS_HIGHRES)
            .expect("registered")
            .get_metric()[0]
            .get_gauge()
            .get_value();
        assert!(value >= 0.0);
        assert!(value <= process_cpu_seconds().unwrap());
    }
}
