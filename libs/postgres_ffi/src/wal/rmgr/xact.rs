//! Transaction rmgr (`access/xact.h`, parsed as `xactdesc.c` does).
//!
//! `xl_info`: opcode `info & 0x70` (COMMIT 0x00, PREPARE 0x10, ABORT 0x20,
//! COMMIT_PREPARED 0x30, ABORT_PREPARED 0x40, ASSIGNMENT 0x50,
//! INVALIDATIONS 0x60); 0x80 (`XLOG_XACT_HAS_INFO`) says an `xinfo` word
//! follows the fixed part.
//!
//! Commit/abort main data, in order, each present if its `xinfo` bit is set:
//! `TimestampTz xact_time` (8); `uint32 xinfo` (if HAS_INFO); dbinfo
//! `{dbId, tsId}` (bit 0); subxacts `{int n; xid[n]}` (bit 1); relation
//! locators `{int n; RelFileLocator[n]}` of 12 bytes (bit 2, named
//! RELFILENODES up to 15); dropped stats `{int n; xl_xact_stats_item[n]}`
//! (bit 8); invalidations `{int n; SharedInvalidationMessage[n]}` of 16
//! bytes (bit 3, commit only); two-phase `xid` (bit 4) and, inside it, the
//! GID as a NUL-terminated string (bit 7, no padding after); origin
//! `{lsn, timestamp}` (bit 5, 16 bytes, unaligned). Bit 6 (AE locks) and
//! bits 29-31 carry no data. Nothing follows the last part: bytes left
//! over are an error (the sign of a layout from another version).
//!
//! Version differences: `xl_xact_stats_item` is `{int kind; Oid dboid; Oid
//! objoid}` (12 bytes) in 15, 16 and 17; 18 widens the object id to
//! `uint32 objid_lo, objid_hi` (16 bytes). Everything else is the same in
//! 15-18 (`xl_xact_prepare` is 72 bytes, `xid` at offset 8).

use bytes::Bytes;

use super::super::{DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;
use super::storage::read_locator;
use super::{RelFileLocator, REL_FILE_LOCATOR_LEN};
use crate::PgMajorVersion;

pub const XLOG_XACT_COMMIT: u8 = 0x00;
pub const XLOG_XACT_PREPARE: u8 = 0x10;
pub const XLOG_XACT_ABORT: u8 = 0x20;
pub const XLOG_XACT_COMMIT_PREPARED: u8 = 0x30;
pub const XLOG_XACT_ABORT_PREPARED: u8 = 0x40;
pub const XLOG_XACT_ASSIGNMENT: u8 = 0x50;
pub const XLOG_XACT_INVALIDATIONS: u8 = 0x60;
pub const XLOG_XACT_OPMASK: u8 = 0x70;
pub const XLOG_XACT_HAS_INFO: u8 = 0x80;

pub const XACT_XINFO_HAS_DBINFO: u32 = 1 << 0;
pub const XACT_XINFO_HAS_SUBXACTS: u32 = 1 << 1;
pub const XACT_XINFO_HAS_RELFILELOCATORS: u32 = 1 << 2;
pub const XACT_XINFO_HAS_INVALS: u32 = 1 << 3;
pub const XACT_XINFO_HAS_TWOPHASE: u32 = 1 << 4;
pub const XACT_XINFO_HAS_ORIGIN: u32 = 1 << 5;
pub const XACT_XINFO_HAS_AE_LOCKS: u32 = 1 << 6;
pub const XACT_XINFO_HAS_GID: u32 = 1 << 7;
pub const XACT_XINFO_HAS_DROPPED_STATS: u32 = 1 << 8;

/// `sizeof(SharedInvalidationMessage)`, 15-18.
const SHARED_INVAL_MSG_LEN: usize = 16;
/// `sizeof(xl_xact_origin)`: origin LSN and timestamp.
const XACT_ORIGIN_LEN: usize = 16;
/// `sizeof(xl_xact_prepare)`, the header of the two-phase state, 15-18.
pub const XACT_PREPARE_HEADER_LEN: usize = 72;
const XACT_PREPARE_XID_OFFSET: usize = 8;

/// `sizeof(xl_xact_stats_item)` of `version`.
pub fn stats_item_len(version: PgMajorVersion) -> usize {
    if version >= PgMajorVersion::V18 {
        16
    } else {
        12
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XactRecord {
    /// COMMIT or COMMIT_PREPARED: mark `xid` and `subxacts` committed,
    /// drop `dropped_rels`; for a prepared one also remove its two-phase state.
    Commit(XactCompletion),
    /// ABORT or ABORT_PREPARED: as commit, with aborted status.
    Abort(XactCompletion),
    /// PREPARE: store the two-phase state.
    Prepare(XactPrepare),
}

/// A commit or abort record, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XactCompletion {
    /// The transaction: the record's xid, or for *_PREPARED the prepared
    /// transaction's xid from `xl_xact_twophase`.
    pub xid: u32,
    /// COMMIT_PREPARED / ABORT_PREPARED.
    pub prepared: bool,
    pub xact_time: i64,
    /// The raw `xinfo` word (0 if the record has none).
    pub xinfo: u32,
    pub db: Option<XactDbInfo>,
    pub subxacts: Vec<u32>,
    /// Relations to drop, every fork.
    pub dropped_rels: Vec<RelFileLocator>,
}

/// `xl_xact_dbinfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XactDbInfo {
    pub db_oid: u32,
    pub spc_oid: u32,
}

/// A PREPARE record: the state file `pg_twophase/<xid>` holds `state`
/// followed by its CRC-32C.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XactPrepare {
    /// `xl_xact_prepare.xid`.
    pub xid: u32,
    /// The whole main data (`xl_xact_prepare` and what follows).
    pub state: Bytes,
}

pub(crate) fn decode(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
) -> Result<Option<XactRecord>, WalDecodeError> {
    let info = rec.info & XLOG_XACT_OPMASK;
    let has_info = rec.info & XLOG_XACT_HAS_INFO != 0;
    Ok(Some(match info {
        XLOG_XACT_COMMIT => {
            XactRecord::Commit(completion(rec, version, has_info, false, "Transaction COMMIT")?)
        }
        XLOG_XACT_COMMIT_PREPARED => XactRecord::Commit(completion(
            rec,
            version,
            has_info,
            true,
            "Transaction COMMIT_PREPARED",
        )?),
        XLOG_XACT_ABORT => {
            XactRecord::Abort(completion(rec, version, has_info, false, "Transaction ABORT")?)
        }
        XLOG_XACT_ABORT_PREPARED => XactRecord::Abort(completion(
            rec,
            version,
            has_info,
            true,
            "Transaction ABORT_PREPARED",
        )?),
        XLOG_XACT_PREPARE => XactRecord::Prepare(prepare(rec)?),
        _ => return Ok(None),
    }))
}

fn completion(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
    has_info: bool,
    prepared: bool,
    what: &'static str,
) -> Result<XactCompletion, WalDecodeError> {
    let is_commit =
        matches!(rec.info & XLOG_XACT_OPMASK, XLOG_XACT_COMMIT | XLOG_XACT_COMMIT_PREPARED);
    let mut c = Cursor::new(rec, what);
    let xact_time = c.i64("xact_time")?;
    let xinfo = if has_info { c.u32("xinfo")? } else { 0 };
    let db = if xinfo & XACT_XINFO_HAS_DBINFO != 0 {
        Some(XactDbInfo { db_oid: c.u32("dbinfo.dbId")?, spc_oid: c.u32("dbinfo.tsId")? })
    } else {
        None
    };
    let mut subxacts = Vec::new();
    if xinfo & XACT_XINFO_HAS_SUBXACTS != 0 {
        let n = c.count(4, "nsubxacts")?;
        subxacts.reserve_exact(n);
        for _ in 0..n {
            subxacts.push(c.u32("subxact")?);
        }
    }
    let mut dropped_rels = Vec::new();
    if xinfo & XACT_XINFO_HAS_RELFILELOCATORS != 0 {
        let n = c.count(REL_FILE_LOCATOR_LEN, "nrels")?;
        dropped_rels.reserve_exact(n);
        for _ in 0..n {
            dropped_rels.push(read_locator(&mut c)?);
        }
    }
    if xinfo & XACT_XINFO_HAS_DROPPED_STATS != 0 {
        let item_len = stats_item_len(version);
        let n = c.count(item_len, "dropped stats nitems")?;
        c.skip(n * item_len, "dropped stats items")?;
    }
    if is_commit && xinfo & XACT_XINFO_HAS_INVALS != 0 {
        let n = c.count(SHARED_INVAL_MSG_LEN, "invalidation nmsgs")?;
        c.skip(n * SHARED_INVAL_MSG_LEN, "invalidation messages")?;
    }
    let mut twophase_xid = None;
    if xinfo & XACT_XINFO_HAS_TWOPHASE != 0 {
        twophase_xid = Some(c.u32("twophase xid")?);
        if xinfo & XACT_XINFO_HAS_GID != 0 {
            c.cstr("gid")?;
        }
    }
    if xinfo & XACT_XINFO_HAS_ORIGIN != 0 {
        c.skip(XACT_ORIGIN_LEN, "origin")?;
    }
    // PostgreSQL registers exactly these parts: anything left means the
    // layout is not this version's (e.g. the stats item size).
    if c.remaining() != 0 {
        return Err(c.error(format_args!(
            "{} bytes left after the last part xinfo {xinfo:#x} announces",
            c.remaining()
        )));
    }
    let xid = match (prepared, twophase_xid) {
        (true, Some(xid)) => xid,
        (true, None) => {
            return Err(c.error("no two-phase transaction id (xinfo lacks HAS_TWOPHASE)"))
        }
        (false, _) => rec.xid,
    };
    if xid == 0 {
        return Err(c.error("transaction id is 0 (invalid)"));
    }
    Ok(XactCompletion { xid, prepared, xact_time, xinfo, db, subxacts, dropped_rels })
}

fn prepare(rec: &DecodedWalRecord) -> Result<XactPrepare, WalDecodeError> {
    let mut c = Cursor::new(rec, "Transaction PREPARE");
    c.skip(XACT_PREPARE_XID_OFFSET, "xl_xact_prepare magic, total_len")?;
    let xid = c.u32("xl_xact_prepare.xid")?;
    c.skip(XACT_PREPARE_HEADER_LEN - XACT_PREPARE_XID_OFFSET - 4, "rest of xl_xact_prepare")?;
    if xid == 0 {
        return Err(c.error("transaction id is 0 (invalid)"));
    }
    Ok(XactPrepare { xid, state: rec.main_data.clone() })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::TRANSACTION;

    const REL_A: RelFileLocator = RelFileLocator { spc_oid: 1663, db_oid: 5, rel_number: 16384 };
    const REL_B: RelFileLocator = RelFileLocator { spc_oid: 1664, db_oid: 0, rel_number: 1262 };

    fn stats_items(le: Le, version: PgMajorVersion, n: i32) -> Le {
        let mut le = le.i32(n);
        for i in 0..n {
            le = le.i32(1).u32(5).u32(16384 + i as u32);
            if version >= PgMajorVersion::V18 {
                le = le.u32(0); // objid_hi
            }
        }
        le
    }

    /// A commit (or abort) with every section that carries data.
    fn full(version: PgMajorVersion, commit: bool, gid: Option<&str>) -> Vec<u8> {
        let mut le = Le::new().i64(777_000_111).u32(xinfo_full(gid.is_some()));
        le = le.u32(5).u32(1663); // dbinfo
        le = le.i32(2).u32(901).u32(902); // subxacts
        le = le.i32(2).u32(1663).u32(5).u32(16384).u32(1664).u32(0).u32(1262); // rels
        le = stats_items(le, version, 3);
        if commit {
            le = le.i32(2).raw(&[0xAB; 32]); // two invalidation messages
        }
        le = le.u32(4242); // twophase xid
        if let Some(gid) = gid {
            le = le.raw(gid.as_bytes()).u8(0);
        }
        le.u64(0x1234_5678).i64(99).0 // origin, unaligned
    }

    fn xinfo_full(gid: bool) -> u32 {
        let mut x = XACT_XINFO_HAS_DBINFO
            | XACT_XINFO_HAS_SUBXACTS
            | XACT_XINFO_HAS_RELFILELOCATORS
            | XACT_XINFO_HAS_DROPPED_STATS
            | XACT_XINFO_HAS_INVALS
            | XACT_XINFO_HAS_TWOPHASE
            | XACT_XINFO_HAS_ORIGIN
            | XACT_XINFO_HAS_AE_LOCKS;
        if gid {
            x |= XACT_XINFO_HAS_GID;
        }
        x
    }

    fn xact(
        info: u8,
        main: &[u8],
        xid: u32,
        v: PgMajorVersion,
    ) -> Result<XactRecord, WalDecodeError> {
        let mut rec = record(TRANSACTION, info, main);
        rec.xid = xid;
        match classify(&rec, v)? {
            NativeRecord::Xact(x) => Ok(x),
            other => panic!("not a transaction record: {other:?}"),
        }
    }

    #[test]
    fn simple_commit_without_xinfo() {
        let main = Le::new().i64(5).0;
        for v in PgMajorVersion::ALL {
            let x = xact(XLOG_XACT_COMMIT, &main, 730, v).unwrap();
            assert_eq!(
                x,
                XactRecord::Commit(XactCompletion {
                    xid: 730,
                    prepared: false,
                    xact_time: 5,
                    xinfo: 0,
                    db: None,
                    subxacts: vec![],
                    dropped_rels: vec![],
                })
            );
        }
        assert_err(
            xact(XLOG_XACT_COMMIT, &main[..7], 730, PgMajorVersion::V15).unwrap_err(),
            "xact_time",
        );
        assert_err(
            xact(XLOG_XACT_ABORT, &main, 0, PgMajorVersion::V15).unwrap_err(),
            "transaction id is 0",
        );
    }

    #[test]
    fn full_commit_prepared_every_version() {
        for v in PgMajorVersion::ALL {
            for gid in [None, Some("tx-gid-1")] {
                let main = full(v, true, gid);
                let info = XLOG_XACT_COMMIT_PREPARED | XLOG_XACT_HAS_INFO;
                let XactRecord::Commit(c) = xact(info, &main, 0, v).unwrap() else { panic!() };
                assert_eq!(c.xid, 4242, "{v:?}");
                assert!(c.prepared);
                assert_eq!(c.xact_time, 777_000_111);
                assert_eq!(c.db, Some(XactDbInfo { db_oid: 5, spc_oid: 1663 }));
                assert_eq!(c.subxacts, vec![901, 902]);
                assert_eq!(c.dropped_rels, vec![REL_A, REL_B]);
                // Every byte is accounted for: one byte less fails (origin).
                let err = xact(info, &main[..main.len() - 1], 0, v).unwrap_err();
                assert_err(err, "origin");
            }
        }
    }

    #[test]
    fn stats_item_size_is_per_version() {
        // A PG18 record read as PG17 misplaces everything after the stats.
        let main = full(PgMajorVersion::V18, true, None);
        let info = XLOG_XACT_COMMIT_PREPARED | XLOG_XACT_HAS_INFO;
        let as17 = xact(info, &main, 0, PgMajorVersion::V17);
        assert!(!matches!(as17, Ok(XactRecord::Commit(ref c)) if c.xid == 4242), "{as17:?}");
        assert_eq!(stats_item_len(PgMajorVersion::V17), 12);
        assert_eq!(stats_item_len(PgMajorVersion::V18), 16);
    }

    #[test]
    fn abort_has_no_invalidations() {
        for v in PgMajorVersion::ALL {
            let main = full(v, false, Some("g"));
            let info = XLOG_XACT_ABORT_PREPARED | XLOG_XACT_HAS_INFO;
            let XactRecord::Abort(a) = xact(info, &main, 0, v).unwrap() else { panic!() };
            assert_eq!((a.xid, a.subxacts.len(), a.dropped_rels.len()), (4242, 2, 2));
            // A plain abort takes the record's xid even with a two-phase section.
            let XactRecord::Abort(a) =
                xact(XLOG_XACT_ABORT | XLOG_XACT_HAS_INFO, &main, 31, v).unwrap()
            else {
                panic!()
            };
            assert_eq!((a.xid, a.prepared), (31, false));
        }
    }

    #[test]
    fn leftover_bytes_are_an_error() {
        let mut main = full(PgMajorVersion::V17, true, None);
        main.push(0);
        let info = XLOG_XACT_COMMIT_PREPARED | XLOG_XACT_HAS_INFO;
        assert_err(xact(info, &main, 0, PgMajorVersion::V17).unwrap_err(), "1 bytes left");
        // The same record read with PostgreSQL 18's 16-byte stats items.
        let main = full(PgMajorVersion::V17, true, None);
        assert!(xact(info, &main, 0, PgMajorVersion::V18).is_err());
    }

    #[test]
    fn prepared_without_twophase_xid_is_an_error() {
        let main = Le::new().i64(1).u32(XACT_XINFO_HAS_SUBXACTS).i32(1).u32(9).0;
        let info = XLOG_XACT_COMMIT_PREPARED | XLOG_XACT_HAS_INFO;
        assert_err(xact(info, &main, 50, PgMajorVersion::V16).unwrap_err(), "two-phase");
    }

    #[test]
    fn bad_counts_are_errors() {
        let info = XLOG_XACT_COMMIT | XLOG_XACT_HAS_INFO;
        for (flag, what) in [
            (XACT_XINFO_HAS_SUBXACTS, "nsubxacts"),
            (XACT_XINFO_HAS_RELFILELOCATORS, "nrels"),
            (XACT_XINFO_HAS_DROPPED_STATS, "nitems"),
            (XACT_XINFO_HAS_INVALS, "nmsgs"),
        ] {
            for n in [-1, i32::MAX, 2] {
                let main = Le::new().i64(1).u32(flag).i32(n).u32(0).0;
                let err = xact(info, &main, 50, PgMajorVersion::V15).unwrap_err();
                assert_err(err, what);
            }
        }
        // A GID without its terminator.
        let main =
            Le::new().i64(1).u32(XACT_XINFO_HAS_TWOPHASE | XACT_XINFO_HAS_GID).u32(7).raw(b"abc").0;
        assert_err(xact(info, &main, 50, PgMajorVersion::V17).unwrap_err(), "gid");
    }

    #[test]
    fn prepare_keeps_the_state_bytes() {
        let mut main = Le::new().u32(0x57F9_4534).u32(80).u32(3001).u32(5).0;
        main.resize(XACT_PREPARE_HEADER_LEN + 8, 0x11);
        for v in PgMajorVersion::ALL {
            let XactRecord::Prepare(p) = xact(XLOG_XACT_PREPARE, &main, 3001, v).unwrap() else {
                panic!()
            };
            assert_eq!(p.xid, 3001);
            assert_eq!(&p.state[..], &main[..]);
        }
        let err = xact(
            XLOG_XACT_PREPARE,
            &main[..XACT_PREPARE_HEADER_LEN - 1],
            3001,
            PgMajorVersion::V18,
        );
        assert_err(err.unwrap_err(), "rest of xl_xact_prepare");
    }

    #[test]
    fn assignment_and_invalidations_are_images_only() {
        for info in [XLOG_XACT_ASSIGNMENT, XLOG_XACT_INVALIDATIONS, 0x70] {
            let rec = record(TRANSACTION, info, &[1, 2, 3]);
            assert_eq!(
                classify(&rec, PgMajorVersion::V15).unwrap(),
                NativeRecord::ImagesOnly { without_image: vec![] }
            );
        }
    }
}
