//! Progress of a long operation (import, fullbackup, attach prefetch,
//! compaction, image creation): done and total units, the rate, and an INFO
//! line at most every [`LOG_INTERVAL`].
//!
//! Invariants: `done` only grows; `total` is 0 while unknown, and once set
//! the shown `done` never exceeds it (a caller that underestimated shows
//! `total` = `done`). One `Progress` is shared by the operation (which
//! advances it, from any task) and whoever shows it (the API), so every
//! field is an atomic and no lock is held across anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Most often a progress line is logged.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What an operation has done, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressInfo {
    /// The operation (`import`, `compaction`, `image_creation`, ...).
    pub operation: String,
    /// What it works on (`<tenant>/<timeline>`).
    pub subject: String,
    /// What is counted (`bytes`, `layers`, `keys`).
    pub unit: String,
    pub done: u64,
    /// `null` while unknown.
    pub total: Option<u64>,
    pub elapsed_ms: u64,
    /// `done` per second since the start, rounded down.
    pub rate_per_s: u64,
    pub finished: bool,
}

#[derive(Debug)]
pub struct Progress {
    operation: &'static str,
    unit: &'static str,
    /// What names the object in log lines (a tenant/timeline).
    subject: String,
    done: AtomicU64,
    total: AtomicU64,
    started: Instant,
    finished: std::sync::atomic::AtomicBool,
    /// When the last line was logged (the start, initially).
    last_log: Mutex<Instant>,
    log_interval: Duration,
}

impl Progress {
    pub fn new(operation: &'static str, unit: &'static str, subject: String) -> Progress {
        Progress::with_log_interval(operation, unit, subject, LOG_INTERVAL)
    }

    pub fn with_log_interval(
        operation: &'static str,
        unit: &'static str,
        subject: String,
        log_interval: Duration,
    ) -> Progress {
        let now = Instant::now();
        Progress {
            operation,
            unit,
            subject,
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            started: now,
            finished: Default::default(),
            last_log: Mutex::new(now),
            log_interval,
        }
    }

    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
    }

    /// `n` more units done; logs a line if the last was `log_interval` ago.
    /// Returns whether it logged.
    pub fn add(&self, n: u64) -> bool {
        self.done.fetch_add(n, Ordering::Relaxed);
        self.maybe_log(Instant::now())
    }

    /// Log a line if `now` is `log_interval` after the last one.
    pub fn maybe_log(&self, now: Instant) -> bool {
        {
            let mut last = self.last_log.lock().unwrap();
            if now.saturating_duration_since(*last) < self.log_interval {
                return false;
            }
            *last = now;
        }
        tracing::info!("{}", self.line(now));
        true
    }

    /// The operation ended: a final line, and `finished` in the API.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
        tracing::info!("{} (done)", self.line(Instant::now()));
    }

    fn line(&self, now: Instant) -> String {
        let i = self.info_at(now);
        let total = i.total.map_or(String::new(), |t| format!(" of {t}"));
        format!(
            "{} of {}: {}{total} {} in {:.1} s ({} {}/s)",
            self.operation,
            self.subject,
            i.done,
            self.unit,
            i.elapsed_ms as f64 / 1000.0,
            i.rate_per_s,
            self.unit
        )
    }

    pub fn info(&self) -> ProgressInfo {
        self.info_at(Instant::now())
    }

    fn info_at(&self, now: Instant) -> ProgressInfo {
        let done = self.done.load(Ordering::Relaxed);
        let total = match self.total.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t.max(done)),
        };
        let elapsed = now.saturating_duration_since(self.started);
        let secs = elapsed.as_secs_f64();
        ProgressInfo {
            operation: self.operation.to_string(),
            subject: self.subject.clone(),
            unit: self.unit.to_string(),
            done,
            total,
            elapsed_ms: elapsed.as_millis() as u64,
            rate_per_s: if secs > 0.0 { (done as f64 / secs) as u64 } else { 0 },
            finished: self.finished.load(Ordering::Relaxed),
        }
    }
}

/// The operations running now, for the API. Holds them weakly: an
/// operation is listed while its `Arc<Progress>` lives. Bounded by the
/// operations running (dead entries are pruned at each registration).
#[derive(Debug, Default)]
pub struct Registry {
    running: Mutex<Vec<Weak<Progress>>>,
}

impl Registry {
    /// Start listing `p`.
    pub fn register(&self, p: &Arc<Progress>) {
        let mut running = self.running.lock().unwrap();
        running.retain(|w| w.strong_count() > 0);
        running.push(Arc::downgrade(p));
    }

    /// The running operations whose subject starts with `prefix`.
    pub fn list(&self, prefix: &str) -> Vec<ProgressInfo> {
        let running: Vec<Arc<Progress>> =
            self.running.lock().unwrap().iter().filter_map(Weak::upgrade).collect();
        running.iter().filter(|p| p.subject.starts_with(prefix)).map(|p| p.info()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines come at most once per interval, however often `add` is called.
    #[test]
    fn lines_are_rate_limited() {
        let p =
            Progress::with_log_interval("import", "bytes", "t/tl".into(), Duration::from_secs(10));
        let t0 = p.started;
        let logged: Vec<bool> = [1, 5, 9, 10, 11, 19, 20, 35, 36]
            .iter()
            .map(|&s| p.maybe_log(t0 + Duration::from_secs(s)))
            .collect();
        assert_eq!(logged, [false, false, false, true, false, false, true, true, false]);
        for _ in 0..10_000 {
            assert!(!p.add(1), "no line within the interval");
        }
    }

    #[test]
    fn info_reports_done_total_and_rate() {
        let p = Progress::new("compaction", "bytes", "t/tl".into());
        assert_eq!(p.info().total, None);
        p.set_total(100);
        p.add(40);
        let i = p.info_at(p.started + Duration::from_secs(2));
        assert_eq!((i.done, i.total, i.elapsed_ms, i.rate_per_s), (40, Some(100), 2000, 20));
        p.add(80); // more than the estimate: total follows done
        assert_eq!(p.info().total, Some(120));
        assert!(!p.info().finished);
        p.finish();
        assert!(p.info().finished);
        assert!(p.line(p.started).starts_with("compaction of t/tl: 120 of 120 bytes in 0.0 s"));
    }

    #[test]
    fn the_registry_lists_live_operations_by_subject() {
        let r = Registry::default();
        let a = Arc::new(Progress::new("import", "bytes", "t1/a".into()));
        let b = Arc::new(Progress::new("compaction", "bytes", "t2/b".into()));
        r.register(&a);
        r.register(&b);
        assert_eq!(r.list("t1/").iter().map(|i| i.subject.as_str()).collect::<Vec<_>>(), ["t1/a"]);
        assert_eq!(r.list("").len(), 2);
        drop(a);
        assert_eq!(r.list("t1/").len(), 0);
    }
}
