//! `get_lsn_by_timestamp` and `get_timestamp_of_lsn` of a timeline: its
//! commit-time index (`tenant/commit_times.rs`) and, for a branch, its
//! ancestors' below the branch point.
//!
//! A branch's history at or below its branch point is its ancestor's, so
//! the transactions it knows are the ancestor's that ended at or below the
//! branch point (recursively) followed by its own (all above it). Lookups
//! search that concatenation link by link, newest first, each ancestor
//! with the branch point as the ceiling: an ancestor's entries above the
//! branch point are never seen, so an answer from the ancestor is never
//! above the branch point.
//!
//! An answer is always an LSN this timeline can restore: at least its own
//! lowest readable LSN (a branch's branch point) and GC cutoff. The
//! ancestors' entries decide the kind, so a time between the branch
//! point's last transaction and the branch's first is `present` at the
//! branch point, and a time before a transaction at or below the branch
//! point is `past` at the branch point (that moment is the ancestor's to
//! restore; reads on a branch below its branch point are refused).

use utils::lsn::Lsn;

use super::Timeline;
use crate::tenant::commit_times::{CommitTimesError, Found, LsnForTimestamp};

impl Timeline {
    /// This timeline and its ancestors, each with the highest LSN of its
    /// index that belongs to this timeline's history.
    fn commit_chain(&self) -> Vec<(&Timeline, Lsn)> {
        let mut chain = vec![(self, Lsn::MAX)];
        let mut ceiling = Lsn::MAX;
        let mut next = self.ancestor();
        while let Some((a, lsn)) = next {
            ceiling = ceiling.min(lsn);
            chain.push((a.as_ref(), ceiling));
            next = a.ancestor();
        }
        chain
    }

    /// The lowest LSN a `get_lsn_by_timestamp` answer can have: the lowest
    /// this timeline restores (module comment).
    pub fn lookup_min_lsn(&self) -> Lsn {
        self.min_readable_lsn().max(self.gc_cutoff())
    }

    /// The LSN whose restore holds exactly the transactions that ended by
    /// `ts` (µs since 2000-01-01), searching the ancestors of a branch.
    pub async fn lsn_for_timestamp(&self, ts: i64) -> Result<LsnForTimestamp, CommitTimesError> {
        // The first entry after `ts` seen so far, in a newer link, with no
        // entry before it in that link.
        let mut first_after = None;
        let mut found = Found::Nothing;
        for (tl, ceiling) in self.commit_chain() {
            match (tl.commit_times.find_after(ts, ceiling).await?, first_after) {
                (Found::Nothing, _) => continue,
                (Found::After { first_after: f, before: None }, _) => first_after = Some(f),
                (Found::AllBefore(last), Some(f)) => {
                    found = Found::After { first_after: f, before: Some(last) };
                    break;
                }
                (done, _) => {
                    found = done;
                    break;
                }
            }
        }
        if let (Found::Nothing, Some(f)) = (found, first_after) {
            found = Found::After { first_after: f, before: None };
        }
        Ok(found.classify(self.lookup_min_lsn()))
    }

    /// The timestamp of the last transaction that ended at or below `lsn`
    /// in this timeline's history (its ancestors' below the branch point).
    pub async fn timestamp_of_lsn(&self, lsn: Lsn) -> Result<Option<i64>, CommitTimesError> {
        for (tl, ceiling) in self.commit_chain() {
            if let Some(ts) = tl.commit_times.timestamp_of_lsn(lsn.min(ceiling)).await? {
                return Ok(Some(ts));
            }
        }
        Ok(None)
    }
}
