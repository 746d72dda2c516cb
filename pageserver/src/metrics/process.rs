//! Process-level metrics beyond the `prometheus` crate's own `process_*` set.
//!
//! `libmetrics_process_cpu_seconds_highres` (Neon's name): user + system CPU
//! time of the whole process, read from `/proc/self/stat` (utime + stime in
//! clock ticks divided by `sysconf(_SC_CLK_TCK)`) at every scrape, as a gauge
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
pub fn process_cpu_seconds() -> std::io::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let (utime, stime) = parse_stat_cpu_ticks(&stat).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected /proc/self/stat format")
    })?;
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let ticks_per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks_per_sec <= 0 {
        return Err(std::io::Error::other("sysconf(_SC_CLK_TCK) failed"));
    }
    Ok((utime + stime) as f64 / ticks_per_sec as f64)
}

/// (utime, stime) in clock ticks: fields 14 and 15 of `/proc/<pid>/stat`.
/// The command name (field 2) is in parentheses and may contain spaces or
/// parentheses itself, so fields are counted from the last `)`.
fn parse_stat_cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first one after the command name.
    let mut fields = after_comm.split_whitespace().skip(14 - 3);
    let utime = fields.next()?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
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
    fn parses_stat_line_with_odd_command_name() {
        let stat = "4242 (my (weird) cmd) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                    250 37 0 0 20 0 8 0 12345 1000000 500 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(stat), Some((250, 37)));
        assert_eq!(parse_stat_cpu_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn cpu_seconds_grow_with_work() {
        // Ticks are 10 ms; spin until one is accounted to us (bounded).
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
