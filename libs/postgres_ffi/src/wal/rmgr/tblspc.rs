//! Tablespace rmgr (`commands/tablespace.h`), the same in 15-18:
//! - CREATE (0x00): `{Oid ts_id; char ts_path[]}`, the path NUL-terminated
//!   (empty for an in-place tablespace);
//! - DROP (0x10): `{Oid ts_id}`, 4 bytes.
//!
//! Neither touches a relation page: redo makes or removes the
//! `pg_tblspc/<ts_id>` link and its `PG_<major>_<catversion>` directory,
//! which a base backup must lay out.

use super::super::{DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;

pub const XLOG_TBLSPC_CREATE: u8 = 0x00;
pub const XLOG_TBLSPC_DROP: u8 = 0x10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TablespaceRecord {
    /// Tablespace `spc_oid` exists, empty. The primary's location of it is
    /// not kept: a backup lays it out in place (`pg_tblspc/<oid>`).
    Create { spc_oid: u32 },
    /// Tablespace `spc_oid` is gone (PostgreSQL drops only an empty one).
    Drop { spc_oid: u32 },
}

pub(crate) fn decode(rec: &DecodedWalRecord) -> Result<Option<TablespaceRecord>, WalDecodeError> {
    let record = match rec.rmgr_info() {
        XLOG_TBLSPC_CREATE => {
            let mut c = Cursor::new(rec, "Tablespace CREATE");
            let spc_oid = c.u32("ts_id")?;
            c.cstr("ts_path")?;
            c.finish()?;
            TablespaceRecord::Create { spc_oid }
        }
        XLOG_TBLSPC_DROP => {
            let mut c = Cursor::new(rec, "Tablespace DROP");
            let spc_oid = c.u32("ts_id")?;
            c.finish()?;
            TablespaceRecord::Drop { spc_oid }
        }
        _ => return Ok(None),
    };
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::TABLESPACE;
    use crate::PgMajorVersion;

    fn ts(info: u8, main: &[u8]) -> Result<TablespaceRecord, WalDecodeError> {
        let mut last = None;
        for v in PgMajorVersion::ALL {
            let r = match classify(&record(TABLESPACE, info, main), v) {
                Ok(NativeRecord::Tablespace(t)) => Ok(t),
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
    fn create() {
        let main = Le::new().u32(16797).raw(b"/srv/ts1\0");
        assert_eq!(
            ts(XLOG_TBLSPC_CREATE, main.bytes()).unwrap(),
            TablespaceRecord::Create { spc_oid: 16797 }
        );
        let in_place = Le::new().u32(16798).raw(b"\0");
        assert_eq!(
            ts(XLOG_TBLSPC_CREATE, in_place.bytes()).unwrap(),
            TablespaceRecord::Create { spc_oid: 16798 }
        );
        let unterminated = Le::new().u32(16797).raw(b"/srv");
        assert_err(ts(XLOG_TBLSPC_CREATE, unterminated.bytes()).unwrap_err(), "ts_path");
        let long = Le::new().u32(16797).raw(b"/srv\0x");
        assert_err(ts(XLOG_TBLSPC_CREATE, long.bytes()).unwrap_err(), "1 bytes left");
        assert_err(ts(XLOG_TBLSPC_CREATE, &[1, 2]).unwrap_err(), "ts_id");
    }

    #[test]
    fn drop() {
        let main = Le::new().u32(16797);
        assert_eq!(
            ts(XLOG_TBLSPC_DROP, main.bytes()).unwrap(),
            TablespaceRecord::Drop { spc_oid: 16797 }
        );
        assert_truncations_fail(main.bytes(), |m| ts(XLOG_TBLSPC_DROP, m));
        let long = Le::new().u32(16797).u32(0);
        assert_err(ts(XLOG_TBLSPC_DROP, long.bytes()).unwrap_err(), "4 bytes left");
    }
}
