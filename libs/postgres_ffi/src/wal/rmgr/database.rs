//! Database rmgr (`commands/dbcommands_xlog.h`), the same in 15-18:
//! - CREATE_FILE_COPY (0x00): `{Oid db_id, tablespace_id, src_db_id,
//!   src_tablespace_id}`, 16 bytes;
//! - CREATE_WAL_LOG (0x10): `{Oid db_id, tablespace_id}`, 8 bytes (the
//!   pages then arrive as ordinary records);
//! - DROP (0x20): `{Oid db_id; int ntablespaces; Oid tablespace_ids[]}`.

use super::super::{DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;

pub const XLOG_DBASE_CREATE_FILE_COPY: u8 = 0x00;
pub const XLOG_DBASE_CREATE_WAL_LOG: u8 = 0x10;
pub const XLOG_DBASE_DROP: u8 = 0x20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseRecord {
    /// Copy every relation of `src_db_oid` in `src_spc_oid`, as of this
    /// LSN, into `db_oid` in `spc_oid`.
    CreateFileCopy { db_oid: u32, spc_oid: u32, src_db_oid: u32, src_spc_oid: u32 },
    /// The database directory exists (empty).
    CreateWalLog { db_oid: u32, spc_oid: u32 },
    /// Drop every relation of `db_oid` in each of `spc_oids`.
    Drop { db_oid: u32, spc_oids: Vec<u32> },
}

pub(crate) fn decode(rec: &DecodedWalRecord) -> Result<Option<DatabaseRecord>, WalDecodeError> {
    let what = match rec.rmgr_info() {
        XLOG_DBASE_CREATE_FILE_COPY => "Database CREATE_FILE_COPY",
        XLOG_DBASE_CREATE_WAL_LOG => "Database CREATE_WAL_LOG",
        XLOG_DBASE_DROP => "Database DROP",
        _ => return Ok(None),
    };
    let mut c = Cursor::new(rec, what);
    let record = fields(rec.rmgr_info(), &mut c)?;
    c.finish()?;
    Ok(Some(record))
}

fn fields(info: u8, c: &mut Cursor) -> Result<DatabaseRecord, WalDecodeError> {
    Ok(match info {
        XLOG_DBASE_CREATE_FILE_COPY => DatabaseRecord::CreateFileCopy {
            db_oid: c.u32("db_id")?,
            spc_oid: c.u32("tablespace_id")?,
            src_db_oid: c.u32("src_db_id")?,
            src_spc_oid: c.u32("src_tablespace_id")?,
        },
        XLOG_DBASE_CREATE_WAL_LOG => DatabaseRecord::CreateWalLog {
            db_oid: c.u32("db_id")?,
            spc_oid: c.u32("tablespace_id")?,
        },
        _ => {
            let db_oid = c.u32("db_id")?;
            let n = c.count(4, "ntablespaces")?;
            let mut spc_oids = Vec::with_capacity(n);
            for _ in 0..n {
                spc_oids.push(c.u32("tablespace_id")?);
            }
            DatabaseRecord::Drop { db_oid, spc_oids }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::DATABASE;
    use crate::PgMajorVersion;

    fn db(info: u8, main: &[u8]) -> Result<DatabaseRecord, WalDecodeError> {
        let mut last = None;
        for v in PgMajorVersion::ALL {
            let r = match classify(&record(DATABASE, info, main), v) {
                Ok(NativeRecord::Database(d)) => Ok(d),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            };
            if let Some(prev) = &last {
                assert_eq!(prev, &r, "same layout in every version");
            }
            last = Some(r);
        }
        last.unwrap()
    }

    #[test]
    fn create_file_copy() {
        let main = Le::new().u32(16400).u32(1663).u32(1).u32(1663);
        assert_eq!(
            db(XLOG_DBASE_CREATE_FILE_COPY, main.bytes()).unwrap(),
            DatabaseRecord::CreateFileCopy {
                db_oid: 16400,
                spc_oid: 1663,
                src_db_oid: 1,
                src_spc_oid: 1663
            }
        );
        assert_truncations_fail(main.bytes(), |m| db(XLOG_DBASE_CREATE_FILE_COPY, m));
    }

    #[test]
    fn create_wal_log() {
        let main = Le::new().u32(16401).u32(16390);
        assert_eq!(
            db(XLOG_DBASE_CREATE_WAL_LOG, main.bytes()).unwrap(),
            DatabaseRecord::CreateWalLog { db_oid: 16401, spc_oid: 16390 }
        );
        assert_truncations_fail(main.bytes(), |m| db(XLOG_DBASE_CREATE_WAL_LOG, m));
        let long = Le::new().u32(16401).u32(16390).u32(0);
        let err = db(XLOG_DBASE_CREATE_WAL_LOG, long.bytes()).unwrap_err();
        assert_err(err, "Database CREATE_WAL_LOG: 4 bytes left after the last field");
    }

    #[test]
    fn drop() {
        let main = Le::new().u32(16401).i32(2).u32(1663).u32(16390);
        assert_eq!(
            db(XLOG_DBASE_DROP, main.bytes()).unwrap(),
            DatabaseRecord::Drop { db_oid: 16401, spc_oids: vec![1663, 16390] }
        );
        assert_truncations_fail(main.bytes(), |m| db(XLOG_DBASE_DROP, m));
        for n in [-1, 3, i32::MAX] {
            let bad = Le::new().u32(16401).i32(n).u32(1663).u32(16390);
            assert_err(db(XLOG_DBASE_DROP, bad.bytes()).unwrap_err(), "ntablespaces");
        }
        let none = Le::new().u32(16401).i32(0);
        assert_eq!(
            db(XLOG_DBASE_DROP, none.bytes()).unwrap(),
            DatabaseRecord::Drop { db_oid: 16401, spc_oids: vec![] }
        );
    }
}
