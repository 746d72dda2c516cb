//! RelMap rmgr (`utils/relmapper.h`): UPDATE (0x00) is `xl_relmap_update
//! {Oid dbid; Oid tsid; int32 nbytes; char data[]}`, 12 bytes then the
//! whole new `pg_filenode.map` (512 bytes in 15, 524 from 16: see
//! [`crate::paths::relmap_file_size`]). `dbid` 0 is the shared map
//! (`global/`).

use bytes::Bytes;

use super::super::{DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;
use crate::paths::relmap_file_size;
use crate::PgMajorVersion;

pub const XLOG_RELMAP_UPDATE: u8 = 0x00;

/// Write `map` as the relmap file of database `db_oid` in `spc_oid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelMapUpdate {
    pub db_oid: u32,
    pub spc_oid: u32,
    /// The file's contents, `relmap_file_size(version)` bytes.
    pub map: Bytes,
}

pub(crate) fn decode(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
) -> Result<Option<RelMapUpdate>, WalDecodeError> {
    if rec.rmgr_info() != XLOG_RELMAP_UPDATE {
        return Ok(None);
    }
    let mut c = Cursor::new(rec, "RelMap UPDATE");
    let db_oid = c.u32("dbid")?;
    let spc_oid = c.u32("tsid")?;
    let nbytes = c.i32("nbytes")?;
    let nbytes = c.check_count(nbytes, 1, "nbytes")?;
    let expected = relmap_file_size(version);
    if nbytes != expected {
        return Err(c.error(format_args!(
            "nbytes is {nbytes}, a PostgreSQL {} relmap file is {expected}",
            version.number()
        )));
    }
    let start = c.position();
    c.skip(nbytes, "map data")?;
    c.finish()?;
    Ok(Some(RelMapUpdate { db_oid, spc_oid, map: rec.main_data.slice(start..start + nbytes) }))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::RELMAP;

    #[test]
    fn update_per_version() {
        for v in PgMajorVersion::ALL {
            let size = relmap_file_size(v);
            let map: Vec<u8> = (0..size).map(|i| i as u8).collect();
            let main = Le::new().u32(0).u32(1664).i32(size as i32).raw(&map);
            let rec = record(RELMAP, XLOG_RELMAP_UPDATE, main.bytes());
            let NativeRecord::RelMap(u) = classify(&rec, v).unwrap() else { panic!() };
            assert_eq!((u.db_oid, u.spc_oid), (0, 1664));
            assert_eq!(&u.map[..], &map[..]);
            assert_truncations_fail(main.bytes(), |m| classify(&record(RELMAP, 0, m), v));
        }
        // A 15 map in a 16 record (or a lying nbytes) is refused.
        let main = Le::new().u32(5).u32(1663).i32(512).raw(&[0; 512]);
        let err = classify(&record(RELMAP, 0, main.bytes()), PgMajorVersion::V16).unwrap_err();
        assert_err(err, "nbytes is 512");
        let main = Le::new().u32(5).u32(1663).i32(-1);
        let err = classify(&record(RELMAP, 0, main.bytes()), PgMajorVersion::V15).unwrap_err();
        assert_err(err, "nbytes is negative");
    }
}
