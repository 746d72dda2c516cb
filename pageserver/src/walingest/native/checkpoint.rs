//! The checkpoint as WAL moves it: the values a server started from a
//! backup at any LSN takes as its counters (`nextXid`, `nextOid`,
//! `nextMulti`...). It follows what PostgreSQL's redo does to shared
//! memory (`xlog_redo`, `multixact_redo` in 15-18), not the latest
//! checkpoint record alone:
//!
//! | field | CHECKPOINT_SHUTDOWN | CHECKPOINT_ONLINE | other records |
//! |---|---|---|---|
//! | `nextXid` (with epoch) | the record's | only advances | advanced past every xid seen (rounded, [`CheckpointState::note_xid`]) |
//! | `nextOid` | the record's | ignored | NEXTOID sets it exactly |
//! | `nextMulti`, `nextMultiOffset` | the record's | only advance | MULTIXACT CREATE_ID advances them past the new one |
//! | `oldestXid`, `oldestXidDB` | the record's | only advance | |
//! | `oldestMulti`, `oldestMultiDB` | only advance | only advance | MULTIXACT TRUNCATE_ID sets them |
//! | the rest (redo, timeline ids, `fullPageWrites`, `wal_level`, time, commit-ts xids, `oldestActiveXid`) | the record's | the record's | |
//!
//! An online checkpoint's values are taken when it starts (its REDO
//! point); records between then and the checkpoint record (multixacts, OID
//! and xid assignments) have already moved our values past them, so
//! copying them would move the counters back, and a server started from
//! the backup would reuse ids (`MultiXactId N has not been created yet`).
//! Comparisons are modulo 2^32 as PostgreSQL's (`*Precedes`).

use bytes::Bytes;
use postgres_ffi::controlfile::CheckPoint;
use postgres_ffi::PgMajorVersion;

/// `FirstNormalTransactionId`: xids below it are special.
const FIRST_NORMAL_XID: u32 = 3;
/// `nextXid` advances in steps of this many xids (a power of two; a CLOG
/// page holds a multiple of it, so a rounded value stays on the page of
/// the xid or starts the next one, which PostgreSQL's start-up allows).
const XID_CHECKPOINT_INTERVAL: u64 = 1024;

/// The checkpoint as WAL moves it (see the module comment).
pub struct CheckpointState {
    version: PgMajorVersion,
    raw: Vec<u8>,
    pub(super) current: CheckPoint,
    dirty: bool,
}

/// `TransactionIdPrecedes`: modulo 2^32 for normal xids.
fn xid_precedes(a: u32, b: u32) -> bool {
    if a < FIRST_NORMAL_XID || b < FIRST_NORMAL_XID {
        return a < b;
    }
    (a.wrapping_sub(b) as i32) < 0
}

/// `MultiXactIdPrecedes` and `MultiXactOffsetPrecedes`: modulo 2^32.
fn precedes_mod32(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl CheckpointState {
    pub fn new(raw: Bytes, version: PgMajorVersion) -> CheckpointState {
        let current = CheckPoint::decode(&raw, version);
        CheckpointState { version, raw: raw.to_vec(), current, dirty: false }
    }

    fn update(&mut self, f: impl FnOnce(&mut CheckPoint)) {
        let before = self.current;
        f(&mut self.current);
        self.dirty |= self.current != before;
    }

    /// Move `nextXid` past `xid`, an xid seen in WAL, so that a server
    /// started from this checkpoint never reuses it (a checkpoint record's
    /// `nextXid` is taken when the checkpoint starts; transactions go on
    /// meanwhile). Rounded up to [`XID_CHECKPOINT_INTERVAL`]: the value is
    /// rewritten once per that many xids, not per record. 64-bit
    /// arithmetic: `nextXid` carries the epoch.
    pub fn note_xid(&mut self, xid: u32) {
        if xid < FIRST_NORMAL_XID {
            return;
        }
        let next = self.current.next_xid;
        let (epoch, next_lo) = (next >> 32, next as u32);
        // Modulo-2^32 comparison, as TransactionIdPrecedes: older xids are ignored.
        if (xid.wrapping_sub(next_lo) as i32) < 0 {
            return;
        }
        let epoch = if xid < next_lo { epoch + 1 } else { epoch };
        let full = (epoch << 32) | xid as u64;
        let mut new_next = (full + XID_CHECKPOINT_INTERVAL) & !(XID_CHECKPOINT_INTERVAL - 1);
        if (new_next as u32) < FIRST_NORMAL_XID {
            new_next |= FIRST_NORMAL_XID as u64; // past the special xids of a new epoch
        }
        self.update(|c| c.next_xid = c.next_xid.max(new_next));
    }

    /// A checkpoint record (the table of the module comment).
    pub fn checkpoint(&mut self, record: CheckPoint, shutdown: bool) {
        self.update(|c| {
            let before = *c;
            *c = record;
            if !shutdown {
                c.next_xid = record.next_xid.max(before.next_xid);
                c.next_oid = before.next_oid;
                if precedes_mod32(record.next_multi, before.next_multi) {
                    c.next_multi = before.next_multi;
                }
                if precedes_mod32(record.next_multi_offset, before.next_multi_offset) {
                    c.next_multi_offset = before.next_multi_offset;
                }
                if !xid_precedes(before.oldest_xid, record.oldest_xid) {
                    (c.oldest_xid, c.oldest_xid_db) = (before.oldest_xid, before.oldest_xid_db);
                }
            }
            // MultiXactAdvanceOldest, in both kinds.
            if !precedes_mod32(before.oldest_multi, record.oldest_multi) {
                (c.oldest_multi, c.oldest_multi_db) = (before.oldest_multi, before.oldest_multi_db);
            }
        });
    }

    /// XLOG NEXTOID: believed exactly (the OID counter may wrap around).
    pub fn next_oid(&mut self, oid: u32) {
        self.update(|c| c.next_oid = oid);
    }

    /// MULTIXACT CREATE_ID of `mid` whose members end before `next_offset`
    /// (`MultiXactAdvanceNextMXact`), and the members' xids.
    pub fn multixact_created(&mut self, mid: u32, next_offset: u32, member_xids: &[u32]) {
        for &xid in member_xids {
            self.note_xid(xid);
        }
        self.update(|c| {
            let next = mid.wrapping_add(1);
            if precedes_mod32(c.next_multi, next) {
                c.next_multi = next;
            }
            if precedes_mod32(c.next_multi_offset, next_offset) {
                c.next_multi_offset = next_offset;
            }
        });
    }

    /// MULTIXACT TRUNCATE_ID: `SetMultiXactIdLimit(endTruncOff,
    /// oldestMultiDB)`, exactly.
    pub fn multixact_truncated(&mut self, oldest_multi: u32, oldest_multi_db: u32) {
        self.update(|c| (c.oldest_multi, c.oldest_multi_db) = (oldest_multi, oldest_multi_db));
    }

    /// True once per change: the caller then stores `encode()`.
    pub fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    pub fn encode(&mut self) -> Bytes {
        self.current.encode_into(&mut self.raw, self.version);
        Bytes::copy_from_slice(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(cp: CheckPoint) -> CheckpointState {
        let v = PgMajorVersion::V16;
        let mut raw = vec![0u8; postgres_ffi::controlfile::CHECKPOINT_SIZE];
        cp.encode_into(&mut raw, v);
        CheckpointState::new(Bytes::from(raw), v)
    }

    #[test]
    fn next_xid_moves_past_every_xid_seen() {
        let mut s = state(CheckPoint { next_xid: (1 << 32) | 750, ..Default::default() });
        s.note_xid(700); // older: nothing
        s.note_xid(2); // special: nothing
        assert!(!s.take_dirty());
        s.note_xid(750);
        assert_eq!(s.current.next_xid, (1 << 32) | 1024);
        assert!(s.take_dirty());
        s.note_xid(1000); // still below the rounded value: no rewrite
        assert!(!s.take_dirty());
        s.note_xid(1024);
        assert_eq!(s.current.next_xid, (1 << 32) | 2048);
        // Wraparound: the xid after u32::MAX is in the next epoch.
        let mut s = state(CheckPoint { next_xid: (1 << 32) | 0xFFFF_FF00, ..Default::default() });
        s.note_xid(0xFFFF_FFF0);
        assert_eq!(s.current.next_xid, (2 << 32) | FIRST_NORMAL_XID as u64);
        s.note_xid(5);
        assert_eq!(s.current.next_xid, (2 << 32) | 1024);
    }

    /// The state after a multixact, a NEXTOID, a later oldestXid: what WAL
    /// between an online checkpoint's start and its record leaves.
    fn moved_on() -> CheckpointState {
        let mut s = state(CheckPoint {
            next_xid: (1 << 32) | 2048,
            next_oid: 16384,
            next_multi: 8,
            next_multi_offset: 20,
            oldest_xid: 700,
            oldest_xid_db: 1,
            oldest_multi: 5,
            oldest_multi_db: 1,
            ..Default::default()
        });
        s.multixact_created(21, 64, &[2100, 2101]);
        s.next_oid(24576);
        assert_eq!((s.current.next_multi, s.current.next_multi_offset), (22, 64));
        assert_eq!(s.current.next_xid, (1 << 32) | 3072); // past the members
        s
    }

    /// An online checkpoint started before the multixacts 8..=21: its
    /// values as PostgreSQL took them at its start.
    fn stale_online() -> CheckPoint {
        CheckPoint {
            redo: 0x0100_0028,
            this_timeline_id: 1,
            full_page_writes: true,
            next_xid: (1 << 32) | 1900,
            next_oid: 16384,
            next_multi: 8,
            next_multi_offset: 20,
            oldest_xid: 650, // older than ours
            oldest_xid_db: 5,
            oldest_multi: 3, // older than ours
            oldest_multi_db: 5,
            time: 1_700_000_000,
            oldest_active_xid: 1900,
            ..Default::default()
        }
    }

    #[test]
    fn online_checkpoint_never_moves_counters_back() {
        let mut s = moved_on();
        s.checkpoint(stale_online(), false);
        let c = s.current;
        assert_eq!(c.next_xid, (1 << 32) | 3072);
        assert_eq!(c.next_oid, 24576, "an online checkpoint's nextOid is ignored");
        assert_eq!((c.next_multi, c.next_multi_offset), (22, 64));
        assert_eq!((c.oldest_xid, c.oldest_xid_db), (700, 1));
        assert_eq!((c.oldest_multi, c.oldest_multi_db), (5, 1));
        // The rest is the record's.
        assert_eq!((c.redo, c.time, c.oldest_active_xid), (0x0100_0028, 1_700_000_000, 1900));
        assert!(c.full_page_writes);
        // Newer values in the record are taken.
        let newer = CheckPoint {
            next_xid: (1 << 32) | 5000,
            next_oid: 40000,
            next_multi: 30,
            next_multi_offset: 100,
            oldest_xid: 800,
            oldest_xid_db: 5,
            oldest_multi: 6,
            oldest_multi_db: 5,
            ..stale_online()
        };
        s.checkpoint(newer, false);
        let c = s.current;
        assert_eq!(c.next_xid, (1 << 32) | 5000);
        assert_eq!(c.next_oid, 24576);
        assert_eq!((c.next_multi, c.next_multi_offset), (30, 100));
        assert_eq!(
            (c.oldest_xid, c.oldest_xid_db, c.oldest_multi, c.oldest_multi_db),
            (800, 5, 6, 5)
        );
    }

    #[test]
    fn shutdown_checkpoint_is_taken_as_is_but_oldest_multi_only_advances() {
        let mut s = moved_on();
        let exact = CheckPoint {
            next_xid: (1 << 32) | 2102,
            next_oid: 24000,
            next_multi: 22,
            next_multi_offset: 64,
            ..stale_online()
        };
        s.checkpoint(exact, true);
        let c = s.current;
        assert_eq!((c.next_xid, c.next_oid), ((1 << 32) | 2102, 24000));
        assert_eq!((c.next_multi, c.next_multi_offset), (22, 64));
        assert_eq!((c.oldest_xid, c.oldest_xid_db), (650, 5));
        assert_eq!((c.oldest_multi, c.oldest_multi_db), (5, 1));
    }

    #[test]
    fn wraparound_and_truncation() {
        // nextMulti wraps: 0xFFFF_FFF0 + ... -> 2 is ahead, not behind.
        let mut s = state(CheckPoint {
            next_multi: 0xFFFF_FFF0,
            next_multi_offset: 0xFFFF_FF00,
            ..Default::default()
        });
        s.multixact_created(1, 0x10, &[]);
        assert_eq!((s.current.next_multi, s.current.next_multi_offset), (2, 0x10));
        s.checkpoint(
            CheckPoint {
                next_multi: 0xFFFF_FFF8,
                next_multi_offset: 0xFFFF_FFF0,
                ..Default::default()
            },
            false,
        );
        assert_eq!((s.current.next_multi, s.current.next_multi_offset), (2, 0x10));
        // An older multixact (replayed out of order) does not move it back.
        s.multixact_created(0xFFFF_FFF1, 0xFFFF_FF08, &[]);
        assert_eq!((s.current.next_multi, s.current.next_multi_offset), (2, 0x10));
        // TRUNCATE_ID sets oldestMulti exactly.
        s.multixact_truncated(9, 16384);
        assert_eq!((s.current.oldest_multi, s.current.oldest_multi_db), (9, 16384));
        // NEXTOID is believed, even when it wraps.
        s.next_oid(16384);
        s.next_oid(12000);
        assert_eq!(s.current.next_oid, 12000);
    }
}
