//! Storage rmgr (`catalog/storage_xlog.h`), same layout in 15-18 (16 only
//! renamed `RelFileNode rnode` to `RelFileLocator rlocator`):
//! - `xl_smgr_create` (16 bytes): locator 0..12, `ForkNumber forkNum` (int) 12;
//! - `xl_smgr_truncate` (20 bytes): `BlockNumber blkno` 0, locator 4..16,
//!   `int flags` 16.

use super::super::{DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;
use super::RelFileLocator;
use crate::consts::MAX_FORKNUM;

pub const XLOG_SMGR_CREATE: u8 = 0x10;
pub const XLOG_SMGR_TRUNCATE: u8 = 0x20;

/// `xl_smgr_truncate.flags`: which forks the truncation applies to.
pub const SMGR_TRUNCATE_HEAP: u32 = 0x0001;
pub const SMGR_TRUNCATE_VM: u32 = 0x0002;
pub const SMGR_TRUNCATE_FSM: u32 = 0x0004;
pub const SMGR_TRUNCATE_ALL: u32 = SMGR_TRUNCATE_HEAP | SMGR_TRUNCATE_VM | SMGR_TRUNCATE_FSM;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageRecord {
    /// The fork exists, empty.
    Create { rel: RelFileLocator, fork: u8 },
    /// The main fork (if `SMGR_TRUNCATE_HEAP`) is cut to `blkno` blocks;
    /// VM and FSM (if their flags) to what maps that many heap blocks.
    Truncate { rel: RelFileLocator, blkno: u32, flags: u32 },
}

/// A `RelFileLocator` (`RelFileNode` before 16): tablespace, database, relation.
pub(crate) fn read_locator(c: &mut Cursor) -> Result<RelFileLocator, WalDecodeError> {
    Ok(RelFileLocator {
        spc_oid: c.u32("spcOid")?,
        db_oid: c.u32("dbOid")?,
        rel_number: c.u32("relNumber")?,
    })
}

pub(crate) fn decode(rec: &DecodedWalRecord) -> Result<Option<StorageRecord>, WalDecodeError> {
    match rec.rmgr_info() {
        XLOG_SMGR_CREATE => {
            let mut c = Cursor::new(rec, "Storage CREATE");
            let rel = read_locator(&mut c)?;
            let fork = c.i32("forkNum")?;
            if !(0..=MAX_FORKNUM as i32).contains(&fork) {
                return Err(c.error(format_args!("fork number {fork} out of range")));
            }
            c.finish()?;
            Ok(Some(StorageRecord::Create { rel, fork: fork as u8 }))
        }
        XLOG_SMGR_TRUNCATE => {
            let mut c = Cursor::new(rec, "Storage TRUNCATE");
            let blkno = c.u32("blkno")?;
            let rel = read_locator(&mut c)?;
            let flags = c.u32("flags")?;
            if flags & !SMGR_TRUNCATE_ALL != 0 {
                return Err(c.error(format_args!("unknown flags {flags:#x}")));
            }
            c.finish()?;
            Ok(Some(StorageRecord::Truncate { rel, blkno, flags }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::STORAGE;
    use crate::PgMajorVersion;

    fn rel() -> RelFileLocator {
        RelFileLocator { spc_oid: 1663, db_oid: 5, rel_number: 16384 }
    }

    fn locator_bytes(le: Le) -> Le {
        le.u32(1663).u32(5).u32(16384)
    }

    #[test]
    fn create() {
        let main = locator_bytes(Le::new()).i32(2);
        assert_eq!(main.bytes().len(), 16);
        let rec = record(STORAGE, XLOG_SMGR_CREATE, main.bytes());
        for v in PgMajorVersion::ALL {
            assert_eq!(
                classify(&rec, v).unwrap(),
                NativeRecord::Storage(StorageRecord::Create { rel: rel(), fork: 2 })
            );
        }
        assert_truncations_fail(main.bytes(), |m| {
            classify(&record(STORAGE, XLOG_SMGR_CREATE, m), PgMajorVersion::V15)
        });
        let bad = locator_bytes(Le::new()).i32(4);
        let err = classify(&record(STORAGE, XLOG_SMGR_CREATE, bad.bytes()), PgMajorVersion::V16);
        assert_err(err.unwrap_err(), "fork number 4");
    }

    #[test]
    fn truncate() {
        let main = locator_bytes(Le::new().u32(77)).u32(SMGR_TRUNCATE_HEAP | SMGR_TRUNCATE_FSM);
        assert_eq!(main.bytes().len(), 20);
        let rec = record(STORAGE, XLOG_SMGR_TRUNCATE, main.bytes());
        for v in PgMajorVersion::ALL {
            assert_eq!(
                classify(&rec, v).unwrap(),
                NativeRecord::Storage(StorageRecord::Truncate { rel: rel(), blkno: 77, flags: 5 })
            );
        }
        assert_truncations_fail(main.bytes(), |m| {
            classify(&record(STORAGE, XLOG_SMGR_TRUNCATE, m), PgMajorVersion::V17)
        });
        let bad = locator_bytes(Le::new().u32(1)).u32(8);
        let err = classify(&record(STORAGE, XLOG_SMGR_TRUNCATE, bad.bytes()), PgMajorVersion::V18);
        assert_err(err.unwrap_err(), "Storage TRUNCATE: unknown flags 0x8");
    }
}
