//! The LSN-by-time record of a timeline: which LSN was durable by which
//! wall-clock time, so GC can turn `pitr_interval` (a time) into an LSN.
//!
//! A sample `(t, lsn)` means: `lsn` was durable (on disk and in the
//! manifest) by unix time `t` seconds; `t` is rounded up, so the claim holds
//! for the whole second. Invariants (checked when a record is decoded):
//! times strictly increase, LSNs do not decrease, at most
//! [`MAX_LSN_TIME_SAMPLES`] samples. When full, every other sample of the
//! older half is dropped (the first is kept), so old history is kept at
//! ever coarser spacing. Dropping samples only makes
//! [`LsnTimeRecord::lsn_at_or_before`] answer an older, lower LSN: GC then
//! keeps more history, never less.

use std::time::{Duration, SystemTime};

use anyhow::ensure;
use utils::lsn::Lsn;

/// Most samples a record holds.
pub const MAX_LSN_TIME_SAMPLES: usize = 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LsnTimeRecord {
    /// (unix seconds, LSN), see the module comment.
    samples: Vec<(u64, Lsn)>,
}

/// Unix seconds of `t`, rounded up (`None` before 1970).
fn secs_ceil(t: SystemTime) -> Option<u64> {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    Some(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

impl LsnTimeRecord {
    /// A decoded record; refused if it breaks an invariant.
    pub fn from_samples(samples: Vec<(u64, Lsn)>) -> anyhow::Result<LsnTimeRecord> {
        ensure!(
            samples.len() <= MAX_LSN_TIME_SAMPLES,
            "{} LSN-by-time samples, at most {MAX_LSN_TIME_SAMPLES} expected",
            samples.len()
        );
        for w in samples.windows(2) {
            ensure!(
                w[0].0 < w[1].0 && w[0].1 <= w[1].1,
                "LSN-by-time samples out of order: ({}, {}) then ({}, {})",
                w[0].0,
                w[0].1,
                w[1].0,
                w[1].1
            );
        }
        Ok(LsnTimeRecord { samples })
    }

    /// (unix seconds, LSN), oldest first.
    pub fn samples(&self) -> &[(u64, Lsn)] {
        &self.samples
    }

    /// `lsn` is durable at time `at`. A sample in the same second as (or,
    /// after the clock went back, older than) the newest one raises that
    /// one's LSN instead.
    pub fn record(&mut self, at: SystemTime, lsn: Lsn) {
        let Some(secs) = secs_ceil(at) else { return };
        match self.samples.last_mut() {
            Some(last) if secs <= last.0 => last.1 = last.1.max(lsn),
            Some(last) if lsn < last.1 => {} // LSNs never go back; keep the record ordered
            _ => self.samples.push((secs, lsn)),
        }
        if self.samples.len() > MAX_LSN_TIME_SAMPLES {
            self.thin();
        }
    }

    /// Drop every other sample of the older half, keeping the first.
    fn thin(&mut self) {
        let half = self.samples.len() / 2;
        let mut i = 0;
        self.samples.retain(|_| {
            let keep = i >= half || i % 2 == 0;
            i += 1;
            keep
        });
    }

    /// The newest LSN known to be durable at time `at`: that of the newest
    /// sample at or before it; `None` if there is none that old.
    pub fn lsn_at_or_before(&self, at: SystemTime) -> Option<Lsn> {
        let secs = at.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
        let n = self.samples.partition_point(|(t, _)| *t <= secs);
        n.checked_sub(1).map(|i| self.samples[i].1)
    }
}

/// The time `secs` unix seconds (for tests and callers holding samples).
pub fn unix_secs(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_up_and_merge_within_a_second() {
        let mut r = LsnTimeRecord::default();
        assert_eq!(r.lsn_at_or_before(unix_secs(100)), None);
        r.record(unix_secs(100) + Duration::from_millis(1), Lsn(10));
        r.record(unix_secs(100) + Duration::from_millis(900), Lsn(20));
        r.record(unix_secs(105), Lsn(30));
        r.record(unix_secs(104), Lsn(40)); // the clock went back
        r.record(unix_secs(106), Lsn(35)); // a lower LSN is not recorded
        assert_eq!(r.samples(), &[(101, Lsn(20)), (105, Lsn(40))]);
        assert_eq!(r.lsn_at_or_before(unix_secs(100) + Duration::from_millis(999)), None);
        assert_eq!(r.lsn_at_or_before(unix_secs(101)), Some(Lsn(20)));
        assert_eq!(r.lsn_at_or_before(unix_secs(104)), Some(Lsn(20)));
        assert_eq!(r.lsn_at_or_before(unix_secs(1000)), Some(Lsn(40)));
    }

    /// The record stays bounded and ordered, keeps its first and newest
    /// samples, and answers conservatively: never an LSN durable only
    /// after the asked time.
    #[test]
    fn thinning_bounds_the_record_and_stays_conservative() {
        let mut r = LsnTimeRecord::default();
        let n = 20 * MAX_LSN_TIME_SAMPLES as u64;
        for i in 0..n {
            r.record(unix_secs(1000 + i * 10), Lsn(i * 7));
            assert!(r.samples().len() <= MAX_LSN_TIME_SAMPLES);
        }
        let s = r.samples();
        assert_eq!(s[0], (1000, Lsn(0)));
        assert_eq!(*s.last().unwrap(), (1000 + (n - 1) * 10, Lsn((n - 1) * 7)));
        assert!(LsnTimeRecord::from_samples(s.to_vec()).is_ok());
        // Older samples are sparser than recent ones.
        let gap = |i: usize| s[i + 1].0 - s[i].0;
        assert!(gap(1) > gap(s.len() - 2), "{} vs {}", gap(1), gap(s.len() - 2));
        for t in (1000..1000 + n * 10).step_by(997) {
            let lsn = r.lsn_at_or_before(unix_secs(t)).unwrap();
            assert!(lsn.0 <= (t - 1000) / 10 * 7, "at {t}: {lsn}");
        }
    }

    #[test]
    fn disordered_or_oversized_records_are_refused() {
        assert!(LsnTimeRecord::from_samples(vec![(5, Lsn(1)), (5, Lsn(2))]).is_err());
        assert!(LsnTimeRecord::from_samples(vec![(5, Lsn(2)), (6, Lsn(1))]).is_err());
        let many = (0..=MAX_LSN_TIME_SAMPLES as u64).map(|i| (i, Lsn(i))).collect();
        assert!(LsnTimeRecord::from_samples(many).is_err());
    }
}
