//! What a path in a PostgreSQL data directory is, and parsers for the small
//! files the import reads: `backup_label`, `PG_VERSION`, `global/pg_control`.
//!
//! Paths understood (relative to the data directory):
//! - `global/<relfile>` (tablespace 1664, database 0), `base/<db>/<relfile>`
//!   (1663), `pg_tblspc/<spc>/<PG_ver_catver>/<db>/<relfile>` (other
//!   tablespaces, when their contents are in the tar); `<relfile>` is
//!   `<relfilenode>[_fsm|_vm|_init][.<segno>]`;
//! - `global/pg_filenode.map`, `<db dir>/pg_filenode.map`: relmap files;
//! - `pg_xact/`, `pg_multixact/offsets/`, `pg_multixact/members/`: SLRU
//!   segments named by hex segment number; `pg_twophase/<hex xid>`;
//! - `backup_label`, `PG_VERSION`, `global/pg_control`, `tablespace_map`
//!   (`pg_basebackup -Ft` writes it instead of `pg_tblspc` symlinks).
//!
//! Everything else (configuration, statistics, temp relations `t<n>_<rel>`,
//! `pg_internal.init`, ...) is `Other` and skipped by the importer.

use pageserver_api::reltag::{RelTag, SlruKind, DEFAULTTABLESPACE_OID, GLOBALTABLESPACE_OID};
use postgres_ffi::consts::PG_CONTROL_FILE_SIZE;
use postgres_ffi::controlfile::{major_version_of_catalog, ControlFileData, CHECKPOINT_SIZE};
use postgres_ffi::PgMajorVersion;
use utils::lsn::Lsn;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgFile {
    BackupLabel,
    PgVersion,
    Control,
    /// `tablespace_map`: `<oid> <location>` per symlinked tablespace.
    TablespaceMap,
    /// A database directory (or the `global` directory: 1664/0).
    DbDir {
        spc: u32,
        db: u32,
    },
    Relmap {
        spc: u32,
        db: u32,
    },
    Rel {
        rel: RelTag,
        segno: u32,
    },
    Slru {
        kind: SlruKind,
        segno: u32,
    },
    TwoPhase {
        xid: u32,
    },
    Other,
}

use postgres_ffi::paths::{
    parse_hex_name, parse_oid, parse_relfile_name, parse_twophase_file_name,
};

/// Files inside a database directory of tablespace `spc`.
fn in_db_dir(spc: u32, db: u32, name: &str) -> PgFile {
    if name == "pg_filenode.map" {
        return PgFile::Relmap { spc, db };
    }
    match parse_relfile_name(name) {
        Some((relnode, fork, segno)) => {
            PgFile::Rel { rel: RelTag::new(spc, db, relnode, fork), segno }
        }
        None => PgFile::Other,
    }
}

pub fn classify(path: &str, is_dir: bool) -> PgFile {
    let parts: Vec<&str> = path.split('/').collect();
    if is_dir {
        return match parts.as_slice() {
            ["global"] => PgFile::DbDir { spc: GLOBALTABLESPACE_OID, db: 0 },
            ["base", db] => parse_oid(db)
                .map_or(PgFile::Other, |db| PgFile::DbDir { spc: DEFAULTTABLESPACE_OID, db }),
            ["pg_tblspc", spc, ver, db] if ver.starts_with("PG_") => {
                match (parse_oid(spc), parse_oid(db)) {
                    (Some(spc), Some(db)) => PgFile::DbDir { spc, db },
                    _ => PgFile::Other,
                }
            }
            // A tablespace's version directory: the tablespace exists (as
            // ingest records it, its database 0), even with no database.
            ["pg_tblspc", spc, ver] if ver.starts_with("PG_") => {
                parse_oid(spc).map_or(PgFile::Other, |spc| PgFile::DbDir { spc, db: 0 })
            }
            _ => PgFile::Other,
        };
    }
    match parts.as_slice() {
        ["backup_label"] => PgFile::BackupLabel,
        ["PG_VERSION"] => PgFile::PgVersion,
        ["global", "pg_control"] => PgFile::Control,
        ["tablespace_map"] => PgFile::TablespaceMap,
        ["global", name] => in_db_dir(GLOBALTABLESPACE_OID, 0, name),
        ["base", db, name] => match parse_oid(db) {
            Some(db) => in_db_dir(DEFAULTTABLESPACE_OID, db, name),
            None => PgFile::Other,
        },
        ["pg_tblspc", spc, ver, db, name] if ver.starts_with("PG_") => {
            match (parse_oid(spc), parse_oid(db)) {
                (Some(spc), Some(db)) => in_db_dir(spc, db, name),
                _ => PgFile::Other,
            }
        }
        ["pg_xact", seg] => slru(SlruKind::Clog, seg),
        ["pg_multixact", "offsets", seg] => slru(SlruKind::MultiXactOffsets, seg),
        ["pg_multixact", "members", seg] => slru(SlruKind::MultiXactMembers, seg),
        // PG17 names carry the epoch in the high 32 bits; the key holds the xid.
        ["pg_twophase", name] => match parse_twophase_file_name(name) {
            Some(xid) => PgFile::TwoPhase { xid },
            None => PgFile::Other,
        },
        _ => PgFile::Other,
    }
}

fn slru(kind: SlruKind, name: &str) -> PgFile {
    match parse_hex_name(name).and_then(|v| u32::try_from(v).ok()) {
        Some(segno) => PgFile::Slru { kind, segno },
        None => PgFile::Other,
    }
}

/// What the import needs from `backup_label`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupLabel {
    /// `START WAL LOCATION`: the redo point of the backup's checkpoint.
    pub start_lsn: Lsn,
    /// `CHECKPOINT LOCATION`.
    pub checkpoint_lsn: Option<Lsn>,
    pub timeline: Option<u32>,
}

pub fn parse_backup_label(text: &str) -> Result<BackupLabel, String> {
    let mut start = None;
    let mut checkpoint = None;
    let mut timeline = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let first_word = || v.split_whitespace().next().unwrap_or("");
        match k.trim() {
            "START WAL LOCATION" => {
                start = Some(
                    first_word().parse::<Lsn>().map_err(|e| format!("START WAL LOCATION: {e}"))?,
                )
            }
            "CHECKPOINT LOCATION" => {
                checkpoint = Some(
                    first_word().parse::<Lsn>().map_err(|e| format!("CHECKPOINT LOCATION: {e}"))?,
                )
            }
            "START TIMELINE" => timeline = first_word().parse::<u32>().ok(),
            _ => {}
        }
    }
    let start_lsn = start.ok_or("no START WAL LOCATION line")?;
    if !start_lsn.is_valid() {
        return Err("START WAL LOCATION is 0/0".into());
    }
    Ok(BackupLabel { start_lsn, checkpoint_lsn: checkpoint, timeline })
}

/// Major version from `PG_VERSION` ("15\n").
pub fn parse_pg_version(text: &str) -> Result<u32, String> {
    let t = text.trim();
    t.parse::<u32>()
        .map_err(|_| format!("PG_VERSION holds '{}', not a major version number", t.escape_debug()))
}

/// Majors whose base backups the importer is verified with (`postgres_ffi`
/// knows 15-18; 18 imports are not tested here yet).
pub const SUPPORTED_VERSIONS: &[u32] = &[15, 16, 17, 18];

/// The fields of `pg_control` the import uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlData {
    pub system_identifier: u64,
    pub pg_control_version: u32,
    pub catalog_version_no: u32,
    /// Location of the latest checkpoint record.
    pub checkpoint: Lsn,
    /// Its redo point.
    pub redo: Lsn,
    pub timeline: u32,
    /// The raw `CheckPoint` struct (`checkPointCopy`).
    pub checkpoint_copy: Vec<u8>,
    /// The major version that wrote it (from its catalog version).
    pub major: PgMajorVersion,
    /// `data_checksum_version` is not zero: pages carry checksums.
    pub data_checksums: bool,
}

impl ControlData {
    pub fn major_version(&self) -> Option<u32> {
        Some(self.major.number())
    }
}

/// Decode and checksum `pg_control` in the layout of the major version its
/// catalog version number names (`postgres_ffi::controlfile`).
pub fn parse_control(buf: &[u8]) -> Result<ControlData, String> {
    if buf.len() != PG_CONTROL_FILE_SIZE {
        return Err(format!("pg_control is {} bytes, expected {PG_CONTROL_FILE_SIZE}", buf.len()));
    }
    let catalog_version_no = u32::from_le_bytes(buf[12..16].try_into().unwrap());
    let major = major_version_of_catalog(catalog_version_no).ok_or_else(|| {
        format!("catalog version {catalog_version_no} belongs to no supported PostgreSQL version (15-18)")
    })?;
    let c = ControlFileData::decode(buf, major).map_err(|e| e.to_string())?;
    Ok(ControlData {
        system_identifier: c.system_identifier,
        pg_control_version: c.pg_control_version,
        catalog_version_no,
        checkpoint: Lsn(c.checkpoint),
        redo: Lsn(c.checkpoint_copy.redo),
        timeline: c.checkpoint_copy.this_timeline_id,
        checkpoint_copy: buf[40..40 + CHECKPOINT_SIZE].to_vec(),
        major,
        data_checksums: c.data_checksum_version != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_paths() {
        let r = |spc, db, rel, fork| RelTag::new(spc, db, rel, fork);
        assert_eq!(
            classify("base/5/16384", false),
            PgFile::Rel { rel: r(1663, 5, 16384, 0), segno: 0 }
        );
        assert_eq!(
            classify("base/5/16384_fsm.2", false),
            PgFile::Rel { rel: r(1663, 5, 16384, 1), segno: 2 }
        );
        assert_eq!(
            classify("base/5/16384_vm", false),
            PgFile::Rel { rel: r(1663, 5, 16384, 2), segno: 0 }
        );
        assert_eq!(
            classify("base/5/16390_init", false),
            PgFile::Rel { rel: r(1663, 5, 16390, 3), segno: 0 }
        );
        assert_eq!(
            classify("global/1262", false),
            PgFile::Rel { rel: r(1664, 0, 1262, 0), segno: 0 }
        );
        assert_eq!(
            classify("pg_tblspc/16400/PG_15_202209061/16401/16402.1", false),
            PgFile::Rel { rel: r(16400, 16401, 16402, 0), segno: 1 }
        );
        assert_eq!(classify("global/pg_control", false), PgFile::Control);
        assert_eq!(classify("global/pg_filenode.map", false), PgFile::Relmap { spc: 1664, db: 0 });
        assert_eq!(classify("base/5/pg_filenode.map", false), PgFile::Relmap { spc: 1663, db: 5 });
        assert_eq!(classify("base/5", true), PgFile::DbDir { spc: 1663, db: 5 });
        assert_eq!(classify("global", true), PgFile::DbDir { spc: 1664, db: 0 });
        assert_eq!(
            classify("pg_tblspc/16400/PG_15_202209061", true),
            PgFile::DbDir { spc: 16400, db: 0 }
        );
        assert_eq!(
            classify("pg_xact/0000", false),
            PgFile::Slru { kind: SlruKind::Clog, segno: 0 }
        );
        assert_eq!(
            classify("pg_multixact/members/14078", false),
            PgFile::Slru { kind: SlruKind::MultiXactMembers, segno: 0x14078 }
        );
        assert_eq!(
            classify("pg_multixact/offsets/000A", false),
            PgFile::Slru { kind: SlruKind::MultiXactOffsets, segno: 10 }
        );
        assert_eq!(classify("pg_twophase/000002E6", false), PgFile::TwoPhase { xid: 742 });
        assert_eq!(classify("pg_twophase/00000001000002E6", false), PgFile::TwoPhase { xid: 742 });
        assert_eq!(classify("backup_label", false), PgFile::BackupLabel);
        assert_eq!(classify("PG_VERSION", false), PgFile::PgVersion);
        assert_eq!(classify("tablespace_map", false), PgFile::TablespaceMap);
        for other in [
            "postgresql.conf",
            "pg_hba.conf",
            "base/5/PG_VERSION",
            "base/5/t3_16384",
            "base/5/pg_internal.init",
            "base/5/16384.",
            "base/5/16384_foo",
            "base/05/16384",
            "base/5/0",
            "pg_xact/zz",
            "pg_wal/000000010000000000000001",
            "pg_tblspc/16400",
            "base/5/tablespace_map",
        ] {
            assert_eq!(classify(other, false), PgFile::Other, "{other}");
        }
    }

    #[test]
    fn backup_label_and_version() {
        let text = "START WAL LOCATION: 0/3000028 (file 000000010000000000000003)\n\
                    CHECKPOINT LOCATION: 0/30416A8\nBACKUP METHOD: streamed\nSTART TIMELINE: 1\n";
        let l = parse_backup_label(text).unwrap();
        assert_eq!(l.start_lsn, Lsn(0x3000028));
        assert_eq!(l.checkpoint_lsn, Some(Lsn(0x30416A8)));
        assert_eq!(l.timeline, Some(1));
        assert!(parse_backup_label("LABEL: x\n").unwrap_err().contains("START WAL LOCATION"));
        assert!(parse_backup_label("START WAL LOCATION: zz\n").is_err());
        assert_eq!(parse_pg_version("16\n").unwrap(), 16);
        assert!(parse_pg_version("sixteen").is_err());
    }

    /// A pg_control in the layout of the version `catversion` belongs to.
    pub(crate) fn fake_control(catversion: u32, checkpoint: Lsn, redo: Lsn) -> Vec<u8> {
        use postgres_ffi::controlfile::{pg_control_version, CheckPoint};
        let v = major_version_of_catalog(catversion).unwrap_or(PgMajorVersion::V15);
        ControlFileData {
            system_identifier: 7,
            pg_control_version: pg_control_version(v),
            catalog_version_no: catversion,
            checkpoint: checkpoint.0,
            checkpoint_copy: CheckPoint {
                redo: redo.0,
                this_timeline_id: 1,
                ..CheckPoint::default()
            },
            ..ControlFileData::default()
        }
        .encode(v)
    }

    #[test]
    fn control_file() {
        let b = fake_control(202209061, Lsn(0x30416A8), Lsn(0x3000028));
        let c = parse_control(&b).unwrap();
        assert_eq!((c.checkpoint, c.redo, c.timeline), (Lsn(0x30416A8), Lsn(0x3000028), 1));
        assert_eq!(c.major_version(), Some(15));
        assert_eq!(c.checkpoint_copy.len(), CHECKPOINT_SIZE);
        let mut bad = b.clone();
        bad[33] ^= 1;
        assert!(parse_control(&bad).unwrap_err().contains("checksum"));
        assert!(parse_control(&b[..100]).is_err());
        let v16 = parse_control(&fake_control(202307071, Lsn(1), Lsn(1))).unwrap();
        assert_eq!(v16.major_version(), Some(16));
    }
}
