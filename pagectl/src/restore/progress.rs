//! Progress of a restore on stderr: bytes and pages written, rate, and an
//! ETA when the total is estimated (the timeline's keyspace at the LSN,
//! 8 KiB a key: an estimate, so the ETA is marked `~` and never negative).
//!
//! On a terminal: one line redrawn at most every [`TTY_INTERVAL`]; else a
//! plain line at most every [`PLAIN_INTERVAL`], so logs stay short. The
//! final line is always printed.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const TTY_INTERVAL: Duration = Duration::from_millis(200);
const PLAIN_INTERVAL: Duration = Duration::from_secs(10);
const MIB: f64 = (1 << 20) as f64;

pub struct Progress {
    started: Instant,
    last_shown: Instant,
    tty: bool,
    /// Estimated bytes of the archive, if known.
    total_bytes: Option<u64>,
    pub bytes: u64,
    pub pages: u64,
}

impl Progress {
    pub fn new(total_bytes: Option<u64>) -> Progress {
        let now = Instant::now();
        Progress {
            started: now,
            last_shown: now,
            tty: std::io::stderr().is_terminal(),
            total_bytes,
            bytes: 0,
            pages: 0,
        }
    }

    /// Show the state if it is time to.
    pub fn tick(&mut self) {
        let interval = if self.tty { TTY_INTERVAL } else { PLAIN_INTERVAL };
        if self.last_shown.elapsed() >= interval {
            self.last_shown = Instant::now();
            self.show(false);
        }
    }

    /// The final line.
    pub fn finish(&mut self) {
        self.show(true);
    }

    fn show(&self, last: bool) {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let rate = self.bytes as f64 / secs;
        let mut line = format!(
            "{:.1} MiB, {} pages, {:.1} MiB/s, {:.1} s",
            self.bytes as f64 / MIB,
            self.pages,
            rate / MIB,
            secs
        );
        if let (Some(total), false) = (self.total_bytes, last) {
            let left = total.saturating_sub(self.bytes) as f64;
            let eta = if rate > 0.0 { format!("{:.0} s", left / rate) } else { "?".into() };
            line.push_str(&format!(" of ~{:.1} MiB, ETA ~{eta}", total as f64 / MIB));
        }
        let mut err = std::io::stderr().lock();
        let _ = match (self.tty, last) {
            (true, false) => write!(err, "\r\x1b[Krestoring: {line}"),
            (true, true) => writeln!(err, "\r\x1b[Krestored: {line}"),
            (false, false) => writeln!(err, "restoring: {line}"),
            (false, true) => writeln!(err, "restored: {line}"),
        };
        let _ = err.flush();
    }
}
