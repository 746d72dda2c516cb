//! PostgreSQL timelines (TLIs) of a followed server: fetching its history,
//! choosing the TLI to stream from, and recognizing a history that forked
//! below what was ingested.
//!
//! The timeline records the history its ingested WAL belongs to
//! (`WalSource::pg_tli`, `pg_tli_history`). At each session the server's
//! history (`TIMELINE_HISTORY` of its current TLI) is compared with it
//! below `last_record_lsn` (L), the only part that is data here:
//! - the same TLI wrote every LSN below L on both sides: stream from L on
//!   the TLI that holds L in the server's history (a switch LSN belongs to
//!   the new TLI, as in PostgreSQL's `tliOfPointInHistory`);
//! - the server has not reached a TLI this timeline has ingested (a standby
//!   that has not followed a promotion yet): an error, retried;
//! - otherwise the histories forked below L ([`Divergence`]): the WAL here
//!   past the fork belongs to a history that no longer exists on the
//!   server. Ingest stops: mixing the two would serve pages that never
//!   existed together.
//!
//! Invariant: both histories are valid (`TimelineHistory::new`), so each
//! LSN has one TLI on each side.

use std::fmt;

use anyhow::Context;
use postgres_ffi::wal::TimelineHistory;
use pq_proto::replication::ReplicationClient;
use utils::lsn::Lsn;

/// The server's history forked below `last_record_lsn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The TLI of the WAL this timeline ingested from the fork on.
    pub old_tli: u32,
    /// The fork: the first LSN the two histories give different TLIs.
    pub switch_lsn: Lsn,
    /// The server's TLI from `switch_lsn` on.
    pub new_tli: u32,
    /// How far this timeline ingested (on `old_tli`'s history).
    pub last_record_lsn: Lsn,
    /// The server's current TLI.
    pub server_tli: u32,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the server's PostgreSQL timeline history diverged from the ingested WAL at {}: from \
             there the server has timeline {}'s WAL (it is on timeline {}), but this timeline \
             ingested timeline {}'s up to {} (last_record_lsn), a history that no longer \
             exists; ingest stopped, reads up to {} are served",
            self.switch_lsn,
            self.new_tli,
            self.server_tli,
            self.old_tli,
            self.last_record_lsn,
            self.last_record_lsn
        )
    }
}

/// What the comparison of the histories says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryCheck {
    /// Stream from `last_record_lsn` on this TLI.
    Start {
        tli: u32,
    },
    /// The server is behind this timeline's history (the message says how).
    Behind(String),
    Diverged(Divergence),
}

/// Compare `own` (the history of the ingested WAL; `None`: not recorded,
/// taken to be the server's) with the `server`'s below `last`.
pub fn check(own: Option<&TimelineHistory>, server: &TimelineHistory, last: Lsn) -> HistoryCheck {
    let own = own.unwrap_or(server);
    let own_tlis = own.switches().iter().map(|s| s.tli).chain([own.tli()]);
    for tli in own_tlis {
        let begin = own.begin_of(tli).expect("a TLI of its own history");
        if begin >= last {
            break;
        }
        let own_end = own.end_of(tli).expect("a TLI of its own history").filter(|&e| e < last);
        let Ok(server_end) = server.end_of(tli) else {
            if tli > server.tli() {
                return HistoryCheck::Behind(format!(
                    "the server is on PostgreSQL timeline {}, behind timeline {tli} of the WAL \
                     ingested up to {last}",
                    server.tli()
                ));
            }
            // A sibling: the server's history left ours before `tli` began.
            let switch_lsn = begin;
            let new_tli = server.tli_at(switch_lsn);
            let old_tli = tli;
            return diverged(old_tli, switch_lsn, new_tli, last, server);
        };
        match (own_end, server_end.filter(|&e| e < last)) {
            (None, None) => return HistoryCheck::Start { tli: server.tli_at(last) },
            (Some(a), Some(b)) if a == b => continue,
            (Some(_), None) if server_end.is_none() => {
                return HistoryCheck::Behind(format!(
                    "the server is still on PostgreSQL timeline {tli}, which this timeline's \
                     WAL left at {} (ingested up to {last})",
                    own_end.expect("matched Some")
                ));
            }
            (a, b) => {
                // The earlier of the two ends is where the histories part.
                let switch_lsn = [a, b, server_end].into_iter().flatten().min().expect("one end");
                let new_tli = server.tli_at(switch_lsn);
                return diverged(own.tli_at(switch_lsn), switch_lsn, new_tli, last, server);
            }
        }
    }
    unreachable!("the newest TLI of a history has no end, so the loop returns")
}

fn diverged(
    old_tli: u32,
    switch_lsn: Lsn,
    new_tli: u32,
    last_record_lsn: Lsn,
    server: &TimelineHistory,
) -> HistoryCheck {
    HistoryCheck::Diverged(Divergence {
        old_tli,
        switch_lsn,
        new_tli,
        last_record_lsn,
        server_tli: server.tli(),
    })
}

/// The history of the server's timeline `tli` (`TIMELINE_HISTORY`; none
/// for timeline 1).
pub async fn fetch(client: &mut ReplicationClient, tli: u32) -> anyhow::Result<TimelineHistory> {
    if tli <= 1 {
        return Ok(TimelineHistory::root(tli.max(1)));
    }
    let content =
        client.timeline_history(tli).await.with_context(|| format!("TIMELINE_HISTORY {tli}"))?;
    Ok(TimelineHistory::parse(tli, &content)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(tli: u32, content: &str) -> TimelineHistory {
        TimelineHistory::parse(tli, content).unwrap()
    }

    #[test]
    fn start_on_the_tli_that_holds_last_record_lsn() {
        let root = TimelineHistory::root(1);
        let two = h(2, "1\t0/5000000\tpromoted\n");
        let three = h(3, "1\t0/5000000\tx\n2\t0/7000000\ty\n");
        // Nothing recorded (a version 1 source): the server's history.
        assert_eq!(check(None, &two, Lsn(0x4000000)), HistoryCheck::Start { tli: 1 });
        assert_eq!(check(None, &two, Lsn(0x6000000)), HistoryCheck::Start { tli: 2 });
        // Ingested on 1 below the switch: stream 1 from there.
        assert_eq!(check(Some(&root), &two, Lsn(0x4FFFFF8)), HistoryCheck::Start { tli: 1 });
        // Exactly at the switch: the new TLI.
        assert_eq!(check(Some(&root), &two, Lsn(0x5000000)), HistoryCheck::Start { tli: 2 });
        // Recorded 2, server moved on to 3.
        assert_eq!(check(Some(&two), &three, Lsn(0x6000000)), HistoryCheck::Start { tli: 2 });
        assert_eq!(check(Some(&two), &three, Lsn(0x7000000)), HistoryCheck::Start { tli: 3 });
        // Recorded 2 past where the server's 2 ended: that WAL was 2's, not 3's.
        let past = check(Some(&two), &three, Lsn(0x7000010));
        assert!(matches!(past, HistoryCheck::Diverged(Divergence { old_tli: 2, .. })), "{past:?}");
        // Recorded 3 at a point still on 1 (crash right after a switch was recorded).
        assert_eq!(check(Some(&three), &three, Lsn(0x100)), HistoryCheck::Start { tli: 1 });
        // The old primary, still on 1, below where this timeline left 1.
        assert_eq!(check(Some(&two), &root, Lsn(0x4000000)), HistoryCheck::Start { tli: 1 });
    }

    #[test]
    fn divergence_names_both_lsns_and_tlis() {
        let root = TimelineHistory::root(1);
        let two = h(2, "1\t0/5000000\tpromoted\n");
        // Followed the old primary past where the standby was promoted.
        let HistoryCheck::Diverged(d) = check(Some(&root), &two, Lsn(0x5000100)) else { panic!() };
        let want = Divergence {
            old_tli: 1,
            switch_lsn: Lsn(0x5000000),
            new_tli: 2,
            last_record_lsn: Lsn(0x5000100),
            server_tli: 2,
        };
        assert_eq!(d, want);
        let msg = d.to_string();
        for needle in [
            "diverged from the ingested WAL at 0/5000000: from there the server has timeline 2's",
            "ingested timeline 1's up to 0/5000100",
        ] {
            assert!(msg.contains(needle), "{msg}");
        }
        // Two standbys promoted at different points: both named TLI 2.
        let sibling = h(2, "1\t0/4800000\tpromoted elsewhere\n");
        let HistoryCheck::Diverged(d) = check(Some(&two), &sibling, Lsn(0x6000000)) else {
            panic!()
        };
        assert_eq!((d.old_tli, d.switch_lsn, d.new_tli), (1, Lsn(0x4800000), 2));
        let HistoryCheck::Diverged(d) = check(Some(&sibling), &two, Lsn(0x6000000)) else {
            panic!()
        };
        assert_eq!((d.old_tli, d.switch_lsn, d.new_tli), (2, Lsn(0x4800000), 1));
        // A sibling TLI the server never had.
        let three_via_2 = h(3, "1\t0/5000000\tx\n2\t0/5800000\ty\n");
        let four = h(4, "1\t0/5000000\tx\n3\t0/6000000\ty\n");
        let HistoryCheck::Diverged(d) = check(Some(&three_via_2), &four, Lsn(0x7000000)) else {
            panic!()
        };
        assert_eq!((d.old_tli, d.switch_lsn, d.new_tli), (2, Lsn(0x5000000), 3));
    }

    #[test]
    fn a_server_behind_is_retried() {
        let root = TimelineHistory::root(1);
        let two = h(2, "1\t0/5000000\tpromoted\n");
        let HistoryCheck::Behind(msg) = check(Some(&two), &root, Lsn(0x6000000)) else { panic!() };
        assert!(msg.contains("still on PostgreSQL timeline 1"), "{msg}");
        let three = h(3, "1\t0/5000000\tx\n2\t0/7000000\ty\n");
        let HistoryCheck::Behind(msg) = check(Some(&three), &two, Lsn(0x7000100)) else { panic!() };
        assert!(
            msg.contains(
                "still on PostgreSQL timeline 2, which this timeline's WAL left at 0/7000000"
            ),
            "{msg}"
        );
        let four = h(4, "1\t0/5000000\tx\n2\t0/7000000\ty\n3\t0/8000000\tz\n");
        let HistoryCheck::Behind(msg) = check(Some(&four), &two, Lsn(0x8000100)) else { panic!() };
        assert!(msg.contains("still on PostgreSQL timeline 2"), "{msg}");
        let three_from_1 = h(3, "1\t0/5000000\tx\n");
        let HistoryCheck::Behind(msg) = check(Some(&three_from_1), &two, Lsn(0x6000000)) else {
            panic!()
        };
        assert!(msg.contains("server is on PostgreSQL timeline 2, behind timeline 3"), "{msg}");
    }
}
