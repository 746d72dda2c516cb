//! The non-relation parts of the data directory: the directory skeleton and
//! configuration stubs, `PG_VERSION` and relmap files per database, SLRU
//! segments, two-phase state files.

use std::collections::BTreeSet;

use pageserver_api::key::Key;
use pageserver_api::reltag::SlruKind;
use postgres_ffi::paths::{
    db_dir, relmap_file_size, slru_segment_name, tablespace_version_dir, twophase_file_name,
};
use postgres_ffi::{PgMajorVersion, DEFAULTTABLESPACE_OID, GLOBALTABLESPACE_OID};

use super::control::Control;
use super::{BackupError, BackupOptions, ChunkSink, Layout, TarWriter};
use crate::pgdatadir_mapping::{
    get_one, get_slru_segment, list_dbs, list_slru_segments, TwoPhaseDirectory,
};
use crate::tenant::Timeline;

/// Directories every data directory has (`initdb`'s `subdirs`), 15-18.
const SUBDIRS: &[&str] = &[
    "global",
    "pg_wal",
    "pg_wal/archive_status",
    "pg_commit_ts",
    "pg_dynshmem",
    "pg_notify",
    "pg_serial",
    "pg_snapshots",
    "pg_subtrans",
    "pg_tblspc",
    "pg_twophase",
    "pg_multixact",
    "pg_multixact/members",
    "pg_multixact/offsets",
    "base",
    "pg_replslot",
    "pg_stat",
    "pg_stat_tmp",
    "pg_xact",
    "pg_logical",
    "pg_logical/snapshots",
    "pg_logical/mappings",
];
/// Added by `initdb` from 17 (WAL summaries for incremental backups).
const SUBDIRS_17: &[&str] = &["pg_wal/summaries"];

/// Trust for local connections: the compute is reached through its proxy,
/// a restored server by its operator, who replaces this file as needed.
const PG_HBA: &str = "# Written by the pageserver's base backup: trust local connections.\n\
    local\tall\tall\t\ttrust\n\
    host\tall\tall\t127.0.0.1/32\ttrust\n\
    host\tall\tall\t::1/128\t\ttrust\n";

const SLRU_KINDS: [SlruKind; 3] =
    [SlruKind::Clog, SlruKind::MultiXactOffsets, SlruKind::MultiXactMembers];

pub async fn write_skeleton<S: ChunkSink>(
    tar: &mut TarWriter<S>,
    version: PgMajorVersion,
) -> Result<(), BackupError> {
    for dir in SUBDIRS {
        tar.dir(dir).await?;
    }
    if version >= PgMajorVersion::V17 {
        for dir in SUBDIRS_17 {
            tar.dir(dir).await?;
        }
    }
    tar.file("pg_hba.conf", PG_HBA.as_bytes()).await?;
    tar.file("pg_ident.conf", b"").await?;
    tar.file("postgresql.auto.conf", b"").await
}

fn pg_version_file(version: PgMajorVersion) -> String {
    format!("{}\n", version.number())
}

/// `PG_VERSION` (top level, and in each database directory) and the relmap
/// files. A database without a relmap file (being created at the LSN, or
/// only holding relations of a database whose default tablespace is
/// another) gets an empty directory, as in Neon. Tablespaces: see the
/// module comment of `basebackup`.
pub async fn write_databases<S: ChunkSink>(
    tar: &mut TarWriter<S>,
    tl: &Timeline,
    opts: &BackupOptions,
    layout: Layout,
) -> Result<(), BackupError> {
    let lsn = opts.lsn;
    let version = layout.version;
    let dbs = list_dbs(tl, opts.reader, lsn).await.map_err(BackupError::read(lsn))?;
    tar.file("PG_VERSION", pg_version_file(version).as_bytes()).await?;
    // Sorted by (spc, db): a tablespace's directories come before its databases.
    let mut tablespaces = BTreeSet::new();
    for ((spc, db), has_relmap) in dbs {
        if spc != GLOBALTABLESPACE_OID && spc != DEFAULTTABLESPACE_OID && tablespaces.insert(spc) {
            tar.dir(&format!("pg_tblspc/{spc}")).await?;
            tar.dir(&tablespace_version_dir(spc, version, layout.catalog_version_no)).await?;
        }
        if db == 0 && spc != GLOBALTABLESPACE_OID {
            // The tablespace itself (written above), no database.
            continue;
        }
        let dir = db_dir(spc, db, version, layout.catalog_version_no);
        if spc != GLOBALTABLESPACE_OID {
            tar.dir(&dir).await?;
        }
        if !has_relmap {
            continue;
        }
        let map = get_one(tl, opts.reader, Key::relmap_file(spc, db), lsn)
            .await
            .map_err(BackupError::read(lsn))?
            .ok_or_else(|| {
                BackupError::Internal(format!(
                    "database {spc}/{db} has a relmap file per its directory, but none at {lsn}"
                ))
            })?;
        if map.len() != relmap_file_size(version) {
            return Err(BackupError::Internal(format!(
                "relmap file of database {spc}/{db} at {lsn} is {} bytes, expected {} for \
                 PostgreSQL {}",
                map.len(),
                relmap_file_size(version),
                version.number()
            )));
        }
        if spc != GLOBALTABLESPACE_OID {
            tar.file(&format!("{dir}/PG_VERSION"), pg_version_file(version).as_bytes()).await?;
        }
        tar.file(&format!("{dir}/pg_filenode.map"), &map).await?;
    }
    Ok(())
}

/// Every segment of `pg_xact`, `pg_multixact/offsets` and `/members`.
pub async fn write_slrus<S: ChunkSink>(
    tar: &mut TarWriter<S>,
    tl: &Timeline,
    opts: &BackupOptions,
) -> Result<(), BackupError> {
    let lsn = opts.lsn;
    for kind in SLRU_KINDS {
        let segments =
            list_slru_segments(tl, opts.reader, kind, lsn).await.map_err(BackupError::read(lsn))?;
        for segno in segments {
            let data = get_slru_segment(tl, opts.reader, kind, segno, lsn)
                .await
                .map_err(BackupError::read(lsn))?;
            tar.file(&format!("{}/{}", kind.dir_name(), slru_segment_name(segno)), &data).await?;
        }
    }
    Ok(())
}

/// `pg_twophase/<xid>`: one file per transaction prepared at the LSN.
pub async fn write_twophase<S: ChunkSink>(
    tar: &mut TarWriter<S>,
    tl: &Timeline,
    opts: &BackupOptions,
    version: PgMajorVersion,
    control: &Control,
) -> Result<(), BackupError> {
    let lsn = opts.lsn;
    let read = |key| get_one(tl, opts.reader, key, lsn);
    let Some(dir) = read(Key::twophase_dir()).await.map_err(BackupError::read(lsn))? else {
        return Ok(());
    };
    let dir =
        TwoPhaseDirectory::decode(&dir).map_err(|e| BackupError::Read { lsn, source: e.into() })?;
    for xid in dir.xids {
        let state = read(Key::twophase_file(xid)).await.map_err(BackupError::read(lsn))?;
        let state = state.ok_or_else(|| {
            BackupError::Internal(format!(
                "prepared transaction {xid} is in the two-phase directory but has no state at {lsn}"
            ))
        })?;
        // The file on disk: the state, then its CRC-32C (`RecreateTwoPhaseFile`).
        let mut file = Vec::with_capacity(state.len() + 4);
        file.extend_from_slice(&state);
        file.extend_from_slice(&crc32c::crc32c(&state).to_le_bytes());
        let name = twophase_file_name(xid, control.epoch_of(xid), version);
        tar.file(&format!("pg_twophase/{name}"), &file).await?;
    }
    Ok(())
}
