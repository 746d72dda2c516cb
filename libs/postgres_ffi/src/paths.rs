//! Where things live in a PostgreSQL data directory (`common/relpath.c`,
//! `slru.c`, `relmapper.c`, `twophase.c`), per major version.
//!
//! - relation files: `global/<f>` (tablespace 1664, database 0),
//!   `base/<db>/<f>` (1663), `pg_tblspc/<spc>/PG_<major>_<catversion>/<db>/<f>`,
//!   where `<f>` is `<relfilenode>[_fsm|_vm|_init][.<segno>]`;
//! - relmap files `pg_filenode.map` in `global/` and each database
//!   directory: 512 bytes up to 15, 524 from 16;
//! - SLRU segments `pg_xact/`, `pg_multixact/offsets/`,
//!   `pg_multixact/members/`: upper-case hex segment numbers of at least 4
//!   digits in 15-18 (17's 15-digit "long" names are used only by SLRUs the
//!   pageserver does not store);
//! - two-phase state files `pg_twophase/<xid>`: 8 hex digits up to 16; from
//!   17, 16 hex digits (the epoch in the high half).

use crate::consts::*;
use crate::PgMajorVersion;

/// A relation fork's file as its parts: (tablespace, database, relfilenode, fork).
pub type RelFile = (u32, u32, u32, u8);

/// Fork name suffix (`_fsm`, `_vm`, `_init`; none for main).
pub fn fork_suffix(fork: u8) -> Option<&'static str> {
    match fork {
        MAIN_FORKNUM => Some(""),
        FSM_FORKNUM => Some("_fsm"),
        VISIBILITYMAP_FORKNUM => Some("_vm"),
        INIT_FORKNUM => Some("_init"),
        _ => None,
    }
}

/// An OID in a path: decimal, no leading zero, not 0.
pub fn parse_oid(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse::<u32>().ok().filter(|&v| v != 0)
}

/// `<relfilenode>[_fsm|_vm|_init][.<segno>]` -> (relfilenode, fork, segno).
pub fn parse_relfile_name(name: &str) -> Option<(u32, u8, u32)> {
    let (base, segno) = match name.split_once('.') {
        Some((b, s)) => {
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            (b, s.parse::<u32>().ok()?)
        }
        None => (name, 0),
    };
    let (rel, fork) = match base.split_once('_') {
        Some((r, "fsm")) => (r, FSM_FORKNUM),
        Some((r, "vm")) => (r, VISIBILITYMAP_FORKNUM),
        Some((r, "init")) => (r, INIT_FORKNUM),
        Some(_) => return None,
        None => (base, MAIN_FORKNUM),
    };
    Some((parse_oid(rel)?, fork, segno))
}

/// The directory of a database (`global`, `base/<db>`, or the tablespace
/// path, which needs the catalog version).
pub fn db_dir(spc: u32, db: u32, version: PgMajorVersion, catalog_version_no: u32) -> String {
    match spc {
        GLOBALTABLESPACE_OID => "global".to_string(),
        DEFAULTTABLESPACE_OID => format!("base/{db}"),
        _ => format!("{}/{db}", tablespace_version_dir(spc, version, catalog_version_no)),
    }
}

/// The directory of tablespace `spc` that holds its databases:
/// `pg_tblspc/<spc>/PG_<major>_<catversion>` (`TABLESPACE_VERSION_DIRECTORY`).
pub fn tablespace_version_dir(
    spc: u32,
    version: PgMajorVersion,
    catalog_version_no: u32,
) -> String {
    format!("pg_tblspc/{spc}/PG_{}_{catalog_version_no}", version.number())
}

/// The path of segment `segno` of a relation fork. Panics on an unknown fork.
pub fn relfile_path(
    rel: RelFile,
    segno: u32,
    version: PgMajorVersion,
    catalog_version_no: u32,
) -> String {
    let (spc, db, relnode, fork) = rel;
    let suffix = fork_suffix(fork).expect("a known fork number");
    let dir = db_dir(spc, db, version, catalog_version_no);
    if segno == 0 {
        format!("{dir}/{relnode}{suffix}")
    } else {
        format!("{dir}/{relnode}{suffix}.{segno}")
    }
}

/// Size of a relmap file (`pg_filenode.map`).
pub fn relmap_file_size(version: PgMajorVersion) -> usize {
    if version >= PgMajorVersion::V16 {
        524
    } else {
        512
    }
}

pub const RELMAP_FILE_NAME: &str = "pg_filenode.map";

/// The file name of SLRU segment `segno` (the stored SLRUs: see the module comment).
pub fn slru_segment_name(segno: u32) -> String {
    format!("{segno:04X}")
}

/// Parse an SLRU segment or two-phase file name: upper-case hex, 4 to 16 digits.
pub fn parse_hex_name(name: &str) -> Option<u64> {
    if !(4..=16).contains(&name.len())
        || !name.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(name, 16).ok()
}

/// The name of the two-phase state file of `xid` (`epoch` is used from 17).
pub fn twophase_file_name(xid: u32, epoch: u32, version: PgMajorVersion) -> String {
    if version >= PgMajorVersion::V17 {
        format!("{:016X}", ((epoch as u64) << 32) | xid as u64)
    } else {
        format!("{xid:08X}")
    }
}

/// The xid of a two-phase state file name of any supported version.
pub fn parse_twophase_file_name(name: &str) -> Option<u32> {
    match (name.len(), parse_hex_name(name)) {
        (8 | 16, Some(full)) => Some(full as u32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relation_paths_round_trip() {
        let v = PgMajorVersion::V15;
        assert_eq!(relfile_path((1663, 5, 16384, 0), 0, v, 202209061), "base/5/16384");
        assert_eq!(relfile_path((1663, 5, 16384, 1), 2, v, 202209061), "base/5/16384_fsm.2");
        assert_eq!(relfile_path((1664, 0, 1262, 0), 0, v, 202209061), "global/1262");
        assert_eq!(
            relfile_path((16400, 16401, 16402, 3), 1, PgMajorVersion::V17, 202406281),
            "pg_tblspc/16400/PG_17_202406281/16401/16402_init.1"
        );
        for name in ["16384", "16384_fsm.2", "16384_vm", "16390_init"] {
            let (rel, fork, seg) = parse_relfile_name(name).unwrap();
            let back = relfile_path((1663, 5, rel, fork), seg, v, 0);
            assert_eq!(back, format!("base/5/{name}"));
        }
        for bad in ["16384.", "16384_foo", "0", "016384", "t3_16384", "pg_internal.init"] {
            assert_eq!(parse_relfile_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn per_version_names_and_sizes() {
        assert_eq!(relmap_file_size(PgMajorVersion::V15), 512);
        assert_eq!(relmap_file_size(PgMajorVersion::V16), 524);
        assert_eq!(twophase_file_name(742, 1, PgMajorVersion::V16), "000002E6");
        assert_eq!(twophase_file_name(742, 1, PgMajorVersion::V17), "00000001000002E6");
        assert_eq!(parse_twophase_file_name("00000001000002E6"), Some(742));
        assert_eq!(parse_twophase_file_name("000002E6"), Some(742));
        assert_eq!(parse_twophase_file_name("2E6"), None);
        assert_eq!(slru_segment_name(10), "000A");
        assert_eq!(slru_segment_name(0x14078), "14078");
        assert_eq!(parse_hex_name("14078"), Some(0x14078));
        assert_eq!(parse_hex_name("zz00"), None);
    }
}
