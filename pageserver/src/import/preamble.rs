//! Phase 1 of the import (`basebackup`): what it learns from the small
//! files before the timeline can be created (`backup_label`, `PG_VERSION`,
//! `global/pg_control`, `tablespace_map`), and how it sees each entry.
//!
//! Invariants:
//! - the import LSN and major version come from a [`Seed`] when the caller
//!   has one, else from `backup_label` (or `pg_control`) and `PG_VERSION`;
//!   a seeded import checks both files against the seed when they come,
//!   and fails without them ([`Preamble::check_seed_confirmed`]);
//! - a file entry's path appears once (`check_duplicate`);
//! - every tablespace a `pg_tblspc` symlink or `tablespace_map` declares is
//!   in `links`, checked against the archives of the stream
//!   (`super::tablespaces`); the small files read into memory are at most
//!   [`SMALL_FILE_LIMIT`] bytes each.

use std::collections::HashSet;
use std::io;

use bytes::Bytes;
use futures::Stream;
use tracing::{debug, info};
use utils::lsn::Lsn;

use super::pg_files::{
    classify, parse_backup_label, parse_control, parse_pg_version, BackupLabel, PgFile,
    SUPPORTED_VERSIONS,
};
use super::spill::SpillWriter;
use super::tablespaces::{
    check_tablespace_links, parse_tablespace_map, symlink_ref, TablespaceRef,
};
use super::tar_reader::{Entry, EntryKind, TarPart, TarReader};
use super::ImportError;

/// Largest `backup_label`, `PG_VERSION`, `pg_control`, `tablespace_map` or
/// two-phase file read into memory.
pub(super) const SMALL_FILE_LIMIT: u64 = 8 * 1024 * 1024;

/// What the caller knows before the first entry: the backup's start LSN and
/// the server's major version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed {
    pub start_lsn: Lsn,
    pub pg_version: u32,
}

/// What the import learned from the small files.
#[derive(Default)]
pub(super) struct Preamble {
    pub(super) seed: Option<Seed>,
    pub(super) label: Option<BackupLabel>,
    /// The seed's, until `PG_VERSION` is read (`version_read`).
    pub(super) version: Option<u32>,
    pub(super) version_read: bool,
    pub(super) control: Option<Bytes>,
    pub(super) spill: Option<SpillWriter>,
    /// Paths of file entries seen so far (duplicates are an error).
    pub(super) seen: HashSet<String>,
    /// Tablespaces declared by `pg_tblspc/<oid>` symlinks and
    /// `tablespace_map`. Each needs its own archive in the stream
    /// ([`check_tablespace_links`]).
    pub(super) links: Vec<TablespaceRef>,
}

impl Preamble {
    pub(super) fn seeded(seed: Option<Seed>) -> Preamble {
        let version = seed.map(|s| s.pg_version);
        Preamble { seed, version, ..Preamble::default() }
    }

    pub(super) fn ready(&self) -> bool {
        self.seed.is_some() || (self.label.is_some() && self.version.is_some())
    }

    /// Reads `backup_label`, `PG_VERSION`, `global/pg_control` or
    /// `tablespace_map` (`class`), in either phase.
    pub(super) async fn read_file<S>(
        &mut self,
        class: &PgFile,
        tar: &mut TarReader<S>,
        entry: &Entry,
    ) -> Result<(), ImportError>
    where
        S: Stream<Item = Result<TarPart, io::Error>> + Unpin,
    {
        match class {
            PgFile::BackupLabel => {
                let text = utf8(entry, &read_small(tar, entry, SMALL_FILE_LIMIT).await?)?;
                let label = parse_backup_label(&text)
                    .map_err(|e| ImportError::BadTar(format!("backup_label: {e}")))?;
                if let Some(seed) = self.seed.filter(|s| s.start_lsn != label.start_lsn) {
                    return Err(ImportError::BadTar(format!(
                        "backup_label says START WAL LOCATION {}, but the base backup began at {}",
                        label.start_lsn, seed.start_lsn
                    )));
                }
                self.label = Some(label);
            }
            PgFile::PgVersion => {
                let text = utf8(entry, &read_small(tar, entry, 64).await?)?;
                let version = parse_pg_version(&text).map_err(ImportError::BadTar)?;
                if let Some(seed) = self.seed.filter(|s| s.pg_version != version) {
                    return Err(ImportError::BadTar(format!(
                        "PG_VERSION says {version}, but the server runs PostgreSQL {}",
                        seed.pg_version
                    )));
                }
                self.version = Some(version);
                self.version_read = true;
            }
            PgFile::Control => self.control = Some(read_small(tar, entry, SMALL_FILE_LIMIT).await?),
            PgFile::TablespaceMap => {
                let text = read_small(tar, entry, SMALL_FILE_LIMIT).await?;
                let map = parse_tablespace_map(&text)
                    .map_err(|e| ImportError::BadTar(format!("tablespace_map: {e}")))?;
                for t in &map {
                    info!("tablespace_map: tablespace {} at '{}'", t.oid, t.location);
                }
                self.links.extend(map);
                if tar.archives().is_empty() {
                    check_tablespace_links(&self.links, tar.archives())?;
                }
            }
            other => unreachable!("{other:?} is not read by the preamble"),
        }
        Ok(())
    }

    /// A seeded import had the `backup_label` and `PG_VERSION` it was
    /// checked against.
    pub(super) fn check_seed_confirmed(&self) -> Result<(), ImportError> {
        let missing = match (self.seed, &self.label, self.version_read) {
            (None, _, _) | (Some(_), Some(_), true) => return Ok(()),
            (Some(_), None, _) => "backup_label",
            (Some(_), Some(_), false) => "PG_VERSION",
        };
        Err(ImportError::BadTar(format!("the base backup has no {missing}")))
    }

    /// The import LSN and the major version.
    pub(super) fn decide(&self) -> Result<(Lsn, u32), ImportError> {
        let version = self.version.ok_or_else(|| {
            ImportError::BadTar("no PG_VERSION file: not a PostgreSQL base backup".into())
        })?;
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(ImportError::BadTar(format!(
                "PostgreSQL {version} is not supported (supported: {SUPPORTED_VERSIONS:?})"
            )));
        }
        let lsn = match (self.seed, &self.label, &self.control) {
            (Some(seed), _, _) => seed.start_lsn,
            (None, Some(l), _) => l.start_lsn,
            (None, None, Some(c)) => {
                parse_control(c)
                    .map_err(|e| ImportError::BadTar(format!("global/pg_control: {e}")))?
                    .redo
            }
            (None, None, None) => return Err(ImportError::BadTar(
                "neither backup_label nor global/pg_control found: truncated, or not a base backup"
                    .into(),
            )),
        };
        if lsn.0 < 2 {
            return Err(ImportError::BadTar(format!(
                "backup LSN {lsn} is not a valid WAL position"
            )));
        }
        Ok((lsn, version))
    }

    pub(super) fn check_duplicate(&mut self, entry: &Entry) -> Result<(), ImportError> {
        if matches!(entry.kind, EntryKind::File) && !self.seen.insert(entry.path.clone()) {
            return Err(ImportError::BadTar(format!(
                "entry '{}' at offset {} appears twice in the tar",
                entry.path, entry.offset
            )));
        }
        Ok(())
    }
}

/// How the importer sees an entry. A tablespace symlink is noted in
/// `links`: the tablespace's relations must come in an archive of their own
/// (a `BASE_BACKUP`), else the timeline would silently lack them
/// ([`check_tablespace_links`], at the end). A stream of one plain tar
/// (`archives` empty: no `TarPart::Archive`) can have no such archive: its
/// link is refused at once.
pub(super) fn classify_entry(
    entry: &Entry,
    links: &mut Vec<TablespaceRef>,
    archives: &[String],
) -> Result<PgFile, ImportError> {
    Ok(match &entry.kind {
        EntryKind::File => classify(&entry.path, false),
        EntryKind::Dir => classify(&entry.path, true),
        EntryKind::Symlink(target) => {
            if let Some(link) = symlink_ref(&entry.path, target) {
                links.push(link);
                if archives.is_empty() {
                    check_tablespace_links(links, archives)?;
                }
            }
            debug!("skipping symlink {} -> {target}", entry.path);
            PgFile::Other
        }
        EntryKind::HardLink(_) | EntryKind::Other(_) => PgFile::Other,
    })
}

async fn read_small<S>(
    tar: &mut TarReader<S>,
    entry: &Entry,
    limit: u64,
) -> Result<Bytes, ImportError>
where
    S: Stream<Item = Result<TarPart, io::Error>> + Unpin,
{
    if entry.size > limit {
        return Err(ImportError::BadTar(format!(
            "'{}' is {} bytes, more than the {limit} expected",
            entry.path, entry.size
        )));
    }
    let b = tar.read_data(entry.size as usize).await?;
    if b.len() as u64 != entry.size {
        return Err(ImportError::BadTar(format!("entry '{}' ends early", entry.path)));
    }
    Ok(b)
}

fn utf8(entry: &Entry, b: &[u8]) -> Result<String, ImportError> {
    String::from_utf8(b.to_vec())
        .map_err(|_| ImportError::BadTar(format!("'{}' is not UTF-8 text", entry.path)))
}
