//! CLOG rmgr (`access/clog.h`, `clog.c`).
//!
//! - ZEROPAGE (0x00): the page number, `int` (4 bytes) in 15 and 16,
//!   `int64` (8 bytes) from 17, when SLRU page numbers became 64-bit;
//! - TRUNCATE (0x10): `xl_clog_truncate {pageno; TransactionId oldestXact;
//!   Oid oldestXactDb}`: 12 bytes in 15/16 (`int pageno`), 16 bytes from
//!   17 (`int64 pageno` at 0, `oldestXact` at 8, `oldestXactDb` at 12).

use super::super::{DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;
use crate::PgMajorVersion;

pub const CLOG_ZEROPAGE: u8 = 0x00;
pub const CLOG_TRUNCATE: u8 = 0x10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClogRecord {
    /// The page becomes all zeros (every transaction on it in progress).
    ZeroPage { pageno: u32 },
    /// Segments wholly before the one holding `pageno` are removed;
    /// `oldest_xid` is the new oldest transaction (of `oldest_xid_db`).
    Truncate { pageno: u32, oldest_xid: u32, oldest_xid_db: u32 },
}

/// An SLRU page number: `int` up to 16, `int64` from 17; never negative and,
/// as every SLRU the pageserver stores is indexed by a 32-bit id, below 2^32.
pub(crate) fn read_slru_pageno(
    c: &mut Cursor,
    version: PgMajorVersion,
) -> Result<u32, WalDecodeError> {
    let pageno =
        if version >= PgMajorVersion::V17 { c.i64("pageno")? } else { i64::from(c.i32("pageno")?) };
    u32::try_from(pageno).map_err(|_| c.error(format_args!("page number {pageno} out of range")))
}

pub(crate) fn decode(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
) -> Result<Option<ClogRecord>, WalDecodeError> {
    match rec.rmgr_info() {
        CLOG_ZEROPAGE => {
            let mut c = Cursor::new(rec, "CLOG ZEROPAGE");
            let pageno = read_slru_pageno(&mut c, version)?;
            c.finish()?;
            Ok(Some(ClogRecord::ZeroPage { pageno }))
        }
        CLOG_TRUNCATE => {
            let mut c = Cursor::new(rec, "CLOG TRUNCATE");
            let pageno = read_slru_pageno(&mut c, version)?;
            let oldest_xid = c.u32("oldestXact")?;
            let oldest_xid_db = c.u32("oldestXactDb")?;
            c.finish()?;
            Ok(Some(ClogRecord::Truncate { pageno, oldest_xid, oldest_xid_db }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::CLOG;

    fn pageno(le: Le, v: PgMajorVersion, p: i64) -> Le {
        if v >= PgMajorVersion::V17 {
            le.i64(p)
        } else {
            le.i32(p as i32)
        }
    }

    #[test]
    fn zero_page() {
        for v in PgMajorVersion::ALL {
            let main = pageno(Le::new(), v, 4097);
            assert_eq!(main.bytes().len(), if v >= PgMajorVersion::V17 { 8 } else { 4 });
            let rec = record(CLOG, CLOG_ZEROPAGE, main.bytes());
            assert_eq!(
                classify(&rec, v).unwrap(),
                NativeRecord::Clog(ClogRecord::ZeroPage { pageno: 4097 })
            );
            assert_truncations_fail(main.bytes(), |m| classify(&record(CLOG, CLOG_ZEROPAGE, m), v));
            let neg = pageno(Le::new(), v, -1);
            let err = classify(&record(CLOG, CLOG_ZEROPAGE, neg.bytes()), v).unwrap_err();
            assert_err(err, "CLOG ZEROPAGE: page number -1 out of range");
        }
        // A 17 record read as 16 (and the reverse) has the wrong length.
        let wide = Le::new().i64(3);
        let err = classify(&record(CLOG, CLOG_ZEROPAGE, wide.bytes()), PgMajorVersion::V16);
        assert_err(err.unwrap_err(), "4 bytes left");
        let narrow = Le::new().i32(3);
        let err = classify(&record(CLOG, CLOG_ZEROPAGE, narrow.bytes()), PgMajorVersion::V17);
        assert_err(err.unwrap_err(), "pageno");
        let big = Le::new().i64(1 << 40);
        let err = classify(&record(CLOG, CLOG_ZEROPAGE, big.bytes()), PgMajorVersion::V18);
        assert_err(err.unwrap_err(), "out of range");
    }

    #[test]
    fn truncate() {
        for v in PgMajorVersion::ALL {
            let main = pageno(Le::new(), v, 33).u32(1_081_344).u32(5);
            assert_eq!(main.bytes().len(), if v >= PgMajorVersion::V17 { 16 } else { 12 });
            let rec = record(CLOG, CLOG_TRUNCATE, main.bytes());
            assert_eq!(
                classify(&rec, v).unwrap(),
                NativeRecord::Clog(ClogRecord::Truncate {
                    pageno: 33,
                    oldest_xid: 1_081_344,
                    oldest_xid_db: 5
                })
            );
            assert_truncations_fail(main.bytes(), |m| classify(&record(CLOG, CLOG_TRUNCATE, m), v));
        }
    }
}
