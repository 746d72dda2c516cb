//! PostgreSQL timeline histories: which timeline (TLI) wrote the WAL at
//! each LSN.
//!
//! A server on timeline `tli` keeps `<tli as %08X>.history` (sent by the
//! replication command `TIMELINE_HISTORY tli`): one line per ancestor,
//! `parent_tli <TAB> switch_lsn <TAB> reason`, oldest first; `#` comments
//! and blank lines are skipped (`readTimeLineHistory` in PostgreSQL).
//! Timeline 1 has no file. Parent `p` wrote the WAL below its `switch_lsn`
//! (and above the previous switch); `tli` writes from the last switch on.
//!
//! Invariants of a [`TimelineHistory`] (checked by [`TimelineHistory::new`]
//! and [`TimelineHistory::parse`]): TLIs strictly increase along the
//! switches and stay below `tli`; switch LSNs never decrease. So every LSN
//! belongs to exactly one TLI ([`TimelineHistory::tli_at`]), as in
//! PostgreSQL's `tliOfPointInHistory`: ranges are `[begin, switch)`.

use utils::lsn::Lsn;

/// Timeline `tli` ended at `switch_lsn`: the next one begins there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TliSwitch {
    pub tli: u32,
    pub switch_lsn: Lsn,
}

/// A timeline and its ancestors (module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineHistory {
    tli: u32,
    switches: Vec<TliSwitch>,
}

/// A history that breaks an invariant, or a line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timeline history of timeline {tli}: {msg}")]
pub struct HistoryError {
    pub tli: u32,
    pub msg: String,
}

impl TimelineHistory {
    /// Timeline 1 (or any timeline with no recorded ancestors).
    pub fn root(tli: u32) -> TimelineHistory {
        TimelineHistory { tli, switches: Vec::new() }
    }

    /// `tli` with its `switches` (oldest first), checked.
    pub fn new(tli: u32, switches: Vec<TliSwitch>) -> Result<TimelineHistory, HistoryError> {
        let err = |msg: String| HistoryError { tli, msg };
        if tli == 0 {
            return Err(err("timeline 0 does not exist".to_string()));
        }
        for pair in switches.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.tli <= a.tli {
                return Err(err(format!("timeline {} follows timeline {}", b.tli, a.tli)));
            }
            if b.switch_lsn < a.switch_lsn {
                return Err(err(format!(
                    "timeline {} ends at {}, before timeline {} ends at {}",
                    b.tli, b.switch_lsn, a.tli, a.switch_lsn
                )));
            }
        }
        if let Some(last) = switches.last() {
            if last.tli >= tli {
                return Err(err(format!("ancestor timeline {} is not below {tli}", last.tli)));
            }
        }
        Ok(TimelineHistory { tli, switches })
    }

    /// The content of `tli`'s history file.
    pub fn parse(tli: u32, content: &str) -> Result<TimelineHistory, HistoryError> {
        let mut switches = Vec::new();
        for (i, line) in content.lines().enumerate() {
            let line = line.trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |what: &str| HistoryError {
                tli,
                msg: format!("line {}: {what} in {line:?}", i + 1),
            };
            let mut fields = line.split(['\t', ' ']).filter(|f| !f.is_empty());
            let parent = fields.next().and_then(|f| f.parse::<u32>().ok());
            let parent = parent.ok_or_else(|| bad("no timeline id"))?;
            let lsn = fields.next().and_then(|f| f.parse::<Lsn>().ok());
            let switch_lsn = lsn.ok_or_else(|| bad("no switch LSN"))?;
            switches.push(TliSwitch { tli: parent, switch_lsn });
        }
        TimelineHistory::new(tli, switches)
    }

    /// The newest timeline of the history.
    pub fn tli(&self) -> u32 {
        self.tli
    }

    /// The ancestors, oldest first.
    pub fn switches(&self) -> &[TliSwitch] {
        &self.switches
    }

    /// The timeline that wrote the WAL at `lsn`.
    pub fn tli_at(&self, lsn: Lsn) -> u32 {
        self.switches.iter().find(|s| lsn < s.switch_lsn).map_or(self.tli, |s| s.tli)
    }

    /// Where `tli` ended: `Ok(None)` for the newest (it has not ended),
    /// `Err(())` when it is not in this history.
    #[allow(clippy::result_unit_err)]
    pub fn end_of(&self, tli: u32) -> Result<Option<Lsn>, ()> {
        if tli == self.tli {
            return Ok(None);
        }
        self.switches.iter().find(|s| s.tli == tli).map(|s| Some(s.switch_lsn)).ok_or(())
    }

    /// Where `tli` began: the switch of the timeline before it (0 for the
    /// first); `None` when it is not in this history.
    pub fn begin_of(&self, tli: u32) -> Option<Lsn> {
        let i = if tli == self.tli {
            self.switches.len()
        } else {
            self.switches.iter().position(|s| s.tli == tli)?
        };
        Some(if i == 0 { Lsn(0) } else { self.switches[i - 1].switch_lsn })
    }

    /// `self` is `other` or continues it: every ancestor of `other` (and
    /// `other` itself, with the end recorded here) appears here with the
    /// same switch.
    pub fn extends(&self, other: &TimelineHistory) -> bool {
        let same_prefix =
            other.switches.iter().all(|s| self.end_of(s.tli) == Ok(Some(s.switch_lsn)));
        same_prefix && self.end_of(other.tli).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TLI3: &str = "1\t0/3000060\tno recovery target specified\n\n\
                        # a comment\n2\t0/5000108\tat restore point \"x\"\n";

    #[test]
    fn parse_and_select() {
        let h = TimelineHistory::parse(3, TLI3).unwrap();
        assert_eq!(h.tli(), 3);
        let s = |tli, lsn| TliSwitch { tli, switch_lsn: Lsn(lsn) };
        assert_eq!(h.switches(), &[s(1, 0x3000060), s(2, 0x5000108)]);
        assert_eq!(h.tli_at(Lsn(0)), 1);
        assert_eq!(h.tli_at(Lsn(0x300005F)), 1);
        assert_eq!(h.tli_at(Lsn(0x3000060)), 2, "a switch LSN belongs to the new timeline");
        assert_eq!(h.tli_at(Lsn(0x5000107)), 2);
        assert_eq!(h.tli_at(Lsn(0x5000108)), 3);
        assert_eq!(h.end_of(1), Ok(Some(Lsn(0x3000060))));
        assert_eq!(h.end_of(3), Ok(None));
        assert_eq!(h.end_of(4), Err(()));
        assert_eq!(h.begin_of(1), Some(Lsn(0)));
        assert_eq!(h.begin_of(2), Some(Lsn(0x3000060)));
        assert_eq!(h.begin_of(3), Some(Lsn(0x5000108)));
        assert_eq!(h.begin_of(7), None);
        assert_eq!(TimelineHistory::parse(1, "").unwrap(), TimelineHistory::root(1));
        assert_eq!(TimelineHistory::root(1).tli_at(Lsn(u64::MAX)), 1);
    }

    #[test]
    fn extends() {
        let h3 = TimelineHistory::parse(3, TLI3).unwrap();
        let h2 = TimelineHistory::parse(2, "1\t0/3000060\tx\n").unwrap();
        assert!(h3.extends(&h2));
        assert!(h3.extends(&TimelineHistory::root(1)));
        assert!(h2.extends(&h2));
        assert!(!h2.extends(&h3));
        let sibling = TimelineHistory::parse(3, "1\t0/4000000\tx\n").unwrap();
        assert!(!sibling.extends(&h2), "timeline 1 ended elsewhere");
    }

    #[test]
    fn refuses_bad_histories() {
        for (tli, content, needle) in [
            (3, "1\t0/3000060\n1\t0/4000000\n", "timeline 1 follows timeline 1"),
            (3, "1\t0/5000000\n2\t0/4000000\n", "ends at 0/4000000, before"),
            (2, "2\t0/3000060\n", "ancestor timeline 2 is not below 2"),
            (2, "x\t0/3000060\n", "line 1: no timeline id"),
            (2, "1\n", "line 1: no switch LSN"),
            (2, "1\t3000060\n", "no switch LSN"),
            (0, "", "timeline 0"),
        ] {
            let e = TimelineHistory::parse(tli, content).unwrap_err().to_string();
            assert!(e.contains(needle), "{content:?}: {e}");
            assert!(e.starts_with(&format!("timeline history of timeline {tli}: ")), "{e}");
        }
    }
}
