//! MultiXact rmgr (`access/multixact.h`, `multixact.c`).
//!
//! - ZERO_OFF_PAGE (0x00) / ZERO_MEM_PAGE (0x10): the page number, `int`
//!   in 15/16, `int64` from 17 (as for CLOG);
//! - CREATE_ID (0x20): `xl_multixact_create {MultiXactId mid;
//!   MultiXactOffset moff; int32 nmembers; MultiXactMember members[]}`,
//!   12 bytes then 8 per member (`TransactionId xid; MultiXactStatus
//!   status` as an int), the same in 15-18;
//! - TRUNCATE_ID (0x30): `xl_multixact_truncate {Oid oldestMultiDB;
//!   MultiXactId startTruncOff, endTruncOff; MultiXactOffset
//!   startTruncMemb, endTruncMemb}`, 20 bytes, the same in 15-18.

use super::super::{DecodedWalRecord, WalDecodeError};
use super::clog::read_slru_pageno;
use super::cursor::Cursor;
use crate::PgMajorVersion;

pub const XLOG_MULTIXACT_ZERO_OFF_PAGE: u8 = 0x00;
pub const XLOG_MULTIXACT_ZERO_MEM_PAGE: u8 = 0x10;
pub const XLOG_MULTIXACT_CREATE_ID: u8 = 0x20;
pub const XLOG_MULTIXACT_TRUNCATE_ID: u8 = 0x30;

/// Largest `MultiXactStatus` (`MultiXactStatusUpdate`).
pub const MULTIXACT_STATUS_MAX: u32 = 5;
const MULTIXACT_MEMBER_LEN: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiXactRecord {
    ZeroOffsetsPage {
        pageno: u32,
    },
    ZeroMembersPage {
        pageno: u32,
    },
    /// Multixact `mid` has `members`, stored from member offset `moff`.
    Create {
        mid: u32,
        moff: u32,
        members: Vec<MultiXactMember>,
    },
    /// Offsets `start_trunc_off..end_trunc_off` and members
    /// `start_trunc_memb..end_trunc_memb` are removed (end exclusive).
    Truncate {
        oldest_multi_db: u32,
        start_trunc_off: u32,
        end_trunc_off: u32,
        start_trunc_memb: u32,
        end_trunc_memb: u32,
    },
}

/// `MultiXactMember`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiXactMember {
    pub xid: u32,
    /// `MultiXactStatus` (0 ForKeyShare .. 5 Update).
    pub status: u32,
}

pub(crate) fn decode(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
) -> Result<Option<MultiXactRecord>, WalDecodeError> {
    Ok(Some(match rec.rmgr_info() {
        XLOG_MULTIXACT_ZERO_OFF_PAGE => {
            let mut c = Cursor::new(rec, "MultiXact ZERO_OFF_PAGE");
            let pageno = read_slru_pageno(&mut c, version)?;
            c.finish()?;
            MultiXactRecord::ZeroOffsetsPage { pageno }
        }
        XLOG_MULTIXACT_ZERO_MEM_PAGE => {
            let mut c = Cursor::new(rec, "MultiXact ZERO_MEM_PAGE");
            let pageno = read_slru_pageno(&mut c, version)?;
            c.finish()?;
            MultiXactRecord::ZeroMembersPage { pageno }
        }
        XLOG_MULTIXACT_CREATE_ID => create(rec)?,
        XLOG_MULTIXACT_TRUNCATE_ID => {
            let mut c = Cursor::new(rec, "MultiXact TRUNCATE_ID");
            let truncate = MultiXactRecord::Truncate {
                oldest_multi_db: c.u32("oldestMultiDB")?,
                start_trunc_off: c.u32("startTruncOff")?,
                end_trunc_off: c.u32("endTruncOff")?,
                start_trunc_memb: c.u32("startTruncMemb")?,
                end_trunc_memb: c.u32("endTruncMemb")?,
            };
            c.finish()?;
            truncate
        }
        _ => return Ok(None),
    }))
}

fn create(rec: &DecodedWalRecord) -> Result<MultiXactRecord, WalDecodeError> {
    let mut c = Cursor::new(rec, "MultiXact CREATE_ID");
    let mid = c.u32("mid")?;
    let moff = c.u32("moff")?;
    let n = c.count(MULTIXACT_MEMBER_LEN, "nmembers")?;
    let mut members = Vec::with_capacity(n);
    for _ in 0..n {
        let xid = c.u32("member xid")?;
        let status = c.u32("member status")?;
        if status > MULTIXACT_STATUS_MAX {
            return Err(c.error(format_args!("member status {status} out of range")));
        }
        members.push(MultiXactMember { xid, status });
    }
    c.finish()?;
    if mid == 0 {
        return Err(c.error("multixact id is 0 (invalid)"));
    }
    Ok(MultiXactRecord::Create { mid, moff, members })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::MULTIXACT;

    fn mx(info: u8, main: &[u8], v: PgMajorVersion) -> Result<MultiXactRecord, WalDecodeError> {
        match classify(&record(MULTIXACT, info, main), v)? {
            NativeRecord::MultiXact(m) => Ok(m),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn zero_pages_width_per_version() {
        for v in PgMajorVersion::ALL {
            let main = if v >= PgMajorVersion::V17 { Le::new().i64(70) } else { Le::new().i32(70) };
            assert_eq!(
                mx(XLOG_MULTIXACT_ZERO_OFF_PAGE, main.bytes(), v).unwrap(),
                MultiXactRecord::ZeroOffsetsPage { pageno: 70 }
            );
            assert_eq!(
                mx(XLOG_MULTIXACT_ZERO_MEM_PAGE, main.bytes(), v).unwrap(),
                MultiXactRecord::ZeroMembersPage { pageno: 70 }
            );
            assert_truncations_fail(main.bytes(), |m| mx(XLOG_MULTIXACT_ZERO_MEM_PAGE, m, v));
        }
        let err = mx(XLOG_MULTIXACT_ZERO_MEM_PAGE, Le::new().i64(1).bytes(), PgMajorVersion::V15);
        assert_err(err.unwrap_err(), "MultiXact ZERO_MEM_PAGE: 4 bytes left");
        let err = mx(XLOG_MULTIXACT_ZERO_OFF_PAGE, &[1, 0, 0], PgMajorVersion::V16).unwrap_err();
        assert_err(err, "MultiXact ZERO_OFF_PAGE");
    }

    #[test]
    fn create_id() {
        let main = Le::new().u32(12).u32(40).i32(2).u32(700).u32(0).u32(701).u32(5);
        assert_eq!(main.bytes().len(), 12 + 2 * 8);
        for v in PgMajorVersion::ALL {
            assert_eq!(
                mx(XLOG_MULTIXACT_CREATE_ID, main.bytes(), v).unwrap(),
                MultiXactRecord::Create {
                    mid: 12,
                    moff: 40,
                    members: vec![
                        MultiXactMember { xid: 700, status: 0 },
                        MultiXactMember { xid: 701, status: 5 }
                    ]
                }
            );
            assert_truncations_fail(main.bytes(), |m| mx(XLOG_MULTIXACT_CREATE_ID, m, v));
        }
        let v = PgMajorVersion::V15;
        for n in [-5, 3, i32::MAX] {
            let bad = Le::new().u32(12).u32(40).i32(n).u32(700).u32(0);
            assert_err(mx(XLOG_MULTIXACT_CREATE_ID, bad.bytes(), v).unwrap_err(), "nmembers");
        }
        let bad = Le::new().u32(12).u32(40).i32(1).u32(700).u32(6);
        assert_err(mx(XLOG_MULTIXACT_CREATE_ID, bad.bytes(), v).unwrap_err(), "status 6");
    }

    #[test]
    fn truncate_id() {
        let main = Le::new().u32(5).u32(1).u32(4096).u32(0).u32(81_920);
        for v in PgMajorVersion::ALL {
            assert_eq!(
                mx(XLOG_MULTIXACT_TRUNCATE_ID, main.bytes(), v).unwrap(),
                MultiXactRecord::Truncate {
                    oldest_multi_db: 5,
                    start_trunc_off: 1,
                    end_trunc_off: 4096,
                    start_trunc_memb: 0,
                    end_trunc_memb: 81_920
                }
            );
            assert_truncations_fail(main.bytes(), |m| mx(XLOG_MULTIXACT_TRUNCATE_ID, m, v));
        }
    }
}
