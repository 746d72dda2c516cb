//! Lookups in the commit-time index: "the first transaction that ended
//! after T" and "the last one at or before LSN L", optionally among the
//! entries at or below a ceiling LSN (a branch searches its ancestor's
//! index below the branch point: `timeline/commit_lookup.rs`).
//!
//! Timestamps need not increase with LSNs (a backend takes its commit time
//! before it inserts the record), so sealed segments are searched by their
//! running maximum (`max_ts` in the name), which does; only the one
//! segment that holds the answer is read.

use utils::lsn::Lsn;

use super::{CommitTime, CommitTimes, CommitTimesError, Found, LsnForTimestamp, State};

impl Found {
    /// Neon's answer for this search result, where `min_lsn` is the lowest
    /// LSN a restore can use.
    pub fn classify(self, min_lsn: Lsn) -> LsnForTimestamp {
        match self {
            Found::Nothing => LsnForTimestamp::NoData(min_lsn),
            Found::AllBefore(last) => LsnForTimestamp::Future(last.max(min_lsn)),
            Found::After { before: None, .. } => LsnForTimestamp::Past(min_lsn),
            Found::After { first_after, .. } if first_after.lsn <= min_lsn => {
                LsnForTimestamp::Past(min_lsn)
            }
            Found::After { before: Some(b), .. } => LsnForTimestamp::Present(b.max(min_lsn)),
        }
    }
}

impl CommitTimes {
    /// The LSN whose restore holds exactly the transactions that ended by
    /// `ts` (see [`LsnForTimestamp`]); `min_lsn` is the lowest LSN a
    /// restore can use.
    pub async fn lsn_for_timestamp(
        &self,
        ts: i64,
        min_lsn: Lsn,
    ) -> Result<LsnForTimestamp, CommitTimesError> {
        Ok(self.find_after(ts, Lsn::MAX).await?.classify(min_lsn))
    }

    /// The first entry (in LSN order) later than `ts` among those at or
    /// below `ceiling`.
    pub async fn find_after(&self, ts: i64, ceiling: Lsn) -> Result<Found, CommitTimesError> {
        let _files = self.files.read().await;
        let in_sealed = {
            let st = self.state.lock().unwrap();
            let in_range = st.sealed.partition_point(|s| s.first_lsn <= ceiling);
            match st.sealed[..in_range].iter().position(|s| s.max_ts > ts) {
                Some(i) => Some((st.sealed[i], i.checked_sub(1).map(|p| st.sealed[p].last_lsn))),
                None => match find_in_memory(&st, ts, ceiling) {
                    Some(found) => return Ok(found),
                    None => None,
                },
            }
        };
        let Some((seg, before_seg)) = in_sealed else {
            // Every entry at or below the ceiling is at or before `ts`.
            return Ok(match self.last_at_or_below(ceiling).await? {
                Some(last) => Found::AllBefore(last),
                None => Found::Nothing,
            });
        };
        let entries = self.read_segment(seg).await?;
        let kept = entries.partition_point(|e| e.lsn <= ceiling);
        debug_assert!(kept > 0, "segment {} starts above {ceiling}", seg.file_name());
        match entries[..kept].iter().position(|e| e.ts > ts) {
            Some(i) => {
                let before = if i == 0 { before_seg } else { Some(entries[i - 1].lsn) };
                Ok(Found::After { first_after: entries[i], before })
            }
            None if kept == entries.len() => Err(CommitTimesError::Corrupt {
                path: self.dir.join(seg.file_name()),
                reason: format!(
                    "no entry reaches the maximum timestamp {} of its name",
                    seg.max_ts
                ),
            }),
            None => Ok(Found::AllBefore(entries[kept - 1].lsn)),
        }
    }

    /// The LSN of the last entry at or below `ceiling`, if any is kept.
    async fn last_at_or_below(&self, ceiling: Lsn) -> Result<Option<Lsn>, CommitTimesError> {
        let seg = {
            let st = self.state.lock().unwrap();
            let mem = st.tail.iter().chain(&st.pending);
            if let Some(e) = mem.take_while(|e| e.lsn <= ceiling).last() {
                return Ok(Some(e.lsn));
            }
            match st.sealed.partition_point(|s| s.first_lsn <= ceiling) {
                0 => return Ok(None),
                n if st.sealed[n - 1].last_lsn <= ceiling => {
                    return Ok(Some(st.sealed[n - 1].last_lsn))
                }
                n => st.sealed[n - 1],
            }
        };
        let entries = self.read_segment(seg).await?;
        Ok(entries.iter().take_while(|e| e.lsn <= ceiling).last().map(|e| e.lsn))
    }

    /// The timestamp of the last entry at or below `lsn`, if any is kept.
    pub async fn timestamp_of_lsn(&self, lsn: Lsn) -> Result<Option<i64>, CommitTimesError> {
        let _files = self.files.read().await;
        let seg = {
            let st = self.state.lock().unwrap();
            let mem = st.tail.iter().chain(&st.pending);
            if let Some(e) = mem.take_while(|e| e.lsn <= lsn).last() {
                return Ok(Some(e.ts));
            }
            match st.sealed.partition_point(|s| s.first_lsn <= lsn) {
                0 => return Ok(None),
                n => st.sealed[n - 1],
            }
        };
        let entries = self.read_segment(seg).await?;
        Ok(entries.iter().take_while(|e| e.lsn <= lsn).last().map(|e| e.ts))
    }
}

/// `find_after` in the tail and pending entries at or below `ceiling`,
/// after every sealed segment at or below it (none of which holds an
/// entry after `ts`). `None`: no entry at or below `ceiling` is after
/// `ts`, and the answer is the last one at or below it, which may be in a
/// sealed segment that straddles the ceiling.
fn find_in_memory(st: &State, ts: i64, ceiling: Lsn) -> Option<Found> {
    let before_mem = st.sealed.last().map(|s| s.last_lsn);
    let mem: Vec<&CommitTime> =
        st.tail.iter().chain(&st.pending).take_while(|e| e.lsn <= ceiling).collect();
    let i = mem.iter().position(|e| e.ts > ts)?;
    // An entry in memory at or below the ceiling: every sealed one is below it.
    Some(Found::After {
        first_after: *mem[i],
        before: if i == 0 { before_mem } else { Some(mem[i - 1].lsn) },
    })
}
