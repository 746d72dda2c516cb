//! L0 backpressure: flushes wait while L0 layers pile up, so compaction
//! always catches up. A waiting flush keeps frozen layers in memory, and
//! the in-memory budget then slows ingest (`writer.rs`): the delay reaches
//! the WAL receiver without a second mechanism.
//!
//! - At `l0_flush_delay_threshold` L0s and above, each flush first sleeps,
//!   longer the closer the count is to the stall threshold (up to
//!   `MAX_FLUSH_DELAY`).
//! - At `l0_flush_stall_threshold`, flushes wait until compaction brings
//!   the count below it (compaction signals `l0_count_changed`).
//! - Both wake the compaction task at once. With background compaction off
//!   (`compaction_period = "0 s"`) nothing would catch up, so nothing waits.

use std::time::{Duration, Instant};

use super::Timeline;
use crate::metrics::compaction as metrics;

/// Longest delay of one flush (just below the stall threshold).
const MAX_FLUSH_DELAY: Duration = Duration::from_secs(1);
/// A stalled flush re-checks the L0 count at least this often.
const STALL_RECHECK: Duration = Duration::from_secs(1);

impl Timeline {
    /// Called before each L0 flush; returns once the flush may go on (or
    /// the timeline is shutting down).
    pub(super) async fn wait_for_l0_backpressure(&self) {
        let c = &self.conf.compaction;
        if c.compaction_period.is_zero() {
            return;
        }
        let l0 = self.layers.read().unwrap().historic().l0_count();
        if l0 >= c.l0_flush_stall_threshold {
            self.compaction_wakeup.notify_one();
            let started = Instant::now();
            loop {
                let changed = self.l0_count_changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.layers.read().unwrap().historic().l0_count() < c.l0_flush_stall_threshold {
                    break;
                }
                tokio::select! {
                    _ = changed => {}
                    _ = self.cancel.cancelled() => break,
                    _ = tokio::time::sleep(STALL_RECHECK) => {}
                }
            }
            metrics::record_flush_wait(started.elapsed(), true);
        } else if l0 >= c.l0_flush_delay_threshold {
            self.compaction_wakeup.notify_one();
            let delay = flush_delay(l0, c.l0_flush_delay_threshold, c.l0_flush_stall_threshold);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.cancel.cancelled() => {}
            }
            metrics::record_flush_wait(delay, false);
        }
    }

    /// Called after each L0 flush: wake compaction once it is due.
    pub(super) fn after_l0_flush(&self) {
        let l0 = self.layers.read().unwrap().historic().l0_count();
        if l0 >= self.conf.compaction.compaction_threshold {
            self.compaction_wakeup.notify_one();
        }
    }
}

/// The delay of a flush at `l0` L0s, `delay <= l0 < stall`: a linear ramp
/// from `MAX_FLUSH_DELAY / (stall - delay)` to `MAX_FLUSH_DELAY`.
fn flush_delay(l0: usize, delay: usize, stall: usize) -> Duration {
    assert!(delay <= l0 && l0 < stall, "{delay} <= {l0} < {stall}");
    MAX_FLUSH_DELAY * (l0 - delay + 1) as u32 / (stall - delay) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_ramps_up_to_the_maximum() {
        assert_eq!(flush_delay(20, 20, 40), MAX_FLUSH_DELAY / 20);
        assert_eq!(flush_delay(39, 20, 40), MAX_FLUSH_DELAY);
        let ramp: Vec<Duration> = (20..40).map(|l0| flush_delay(l0, 20, 40)).collect();
        assert!(ramp.windows(2).all(|w| w[0] < w[1]));
    }
}
