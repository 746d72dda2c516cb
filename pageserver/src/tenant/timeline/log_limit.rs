//! `PerKeyLogLimit`: at most one log line per key (a layer file name) per
//! `INTERVAL`, so a corrupt file read by every request logs a line every
//! few seconds, not thousands. Bounded: at most `MAX_KEYS` keys are
//! remembered (then the map is cleared, which only allows an extra line).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const INTERVAL: Duration = Duration::from_secs(10);
const MAX_KEYS: usize = 1024;

#[derive(Default)]
pub struct PerKeyLogLimit {
    last: Mutex<HashMap<String, Instant>>,
}

impl PerKeyLogLimit {
    /// Whether a line about `key` may be logged now (and remember it).
    pub fn should_log(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap();
        if let Some(t) = last.get(key) {
            if now.duration_since(*t) < INTERVAL {
                return false;
            }
        }
        if last.len() >= MAX_KEYS {
            last.clear();
        }
        last.insert(key.to_string(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_interval_per_key() {
        let l = PerKeyLogLimit::default();
        assert!(l.should_log("a"));
        assert!(!l.should_log("a"));
        assert!(l.should_log("b"));
        for i in 0..2 * MAX_KEYS {
            l.should_log(&i.to_string());
        }
        assert!(l.last.lock().unwrap().len() <= MAX_KEYS);
    }
}
