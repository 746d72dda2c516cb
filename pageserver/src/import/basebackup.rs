//! `import_basebackup`: the import driver.
//!
//! Two phases:
//! 1. Read entries until the backup LSN (`backup_label`: `START WAL
//!    LOCATION`) and the major version (`PG_VERSION`) are known. Data
//!    entries seen before that go to a spill file (`spill`); with
//!    `pg_basebackup` tars `backup_label` is the first entry and `PG_VERSION`
//!    usually comes before `base/`, so the spill is usually empty.
//! 2. Create the timeline with `begin_timeline_creation(initial_lsn =
//!    backup LSN - 1)` — the timeline writer accepts only LSNs above
//!    `last_record_lsn`, which starts at `initial_lsn` — replay the spill,
//!    import the remaining entries through one `DatadirModification` at the
//!    backup LSN (it writes in bounded batches), add `pg_control` and the
//!    checkpoint from it, commit (one `finish_write`), then `finish()` the
//!    timeline: flushed, fsynced, renamed into place, published.
//!
//! Choice of LSN: the backup's start LSN (the redo point of its checkpoint;
//! without `backup_label`, the redo point in `pg_control`). With `-X none`
//! the files are a fuzzy copy taken between start and end; the end LSN is not
//! in the tar. Importing at the start LSN lets a WAL stream that starts there
//! replay the backup window over the imported pages (every WAL record ends
//! above it), while reading at the timeline's `last_record_lsn` serves
//! exactly the backup's files. Reads at `initial_lsn` find no data.
//!
//! Any error drops the `UninitializedTimeline`, which removes its directory.

use std::collections::HashSet;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use tracing::{debug, info};
use utils::id::TimelineId;
use utils::lsn::Lsn;

use super::pg_files::{
    classify, parse_backup_label, parse_control, parse_pg_version, BackupLabel, PgFile,
    SUPPORTED_VERSIONS,
};
use super::rel_images::RelImages;
use super::spill::{SpillReader, SpillWriter};
use super::tar_reader::{Entry, EntryKind, EntryObserver, TarPart, TarReader};
use super::ImportError;
use crate::pgdatadir_mapping::{DatadirModification, BLCKSZ, RELSEG_SIZE, SLRU_PAGES_PER_SEGMENT};
use crate::tenant::storage_layer::layer_file::LayerFile;
use crate::tenant::{Tenant, TenantError, Timeline, UninitializedTimeline};

/// Largest `backup_label`, `PG_VERSION`, `pg_control` or two-phase file read
/// into memory.
const SMALL_FILE_LIMIT: u64 = 8 * 1024 * 1024;
/// `RELMAPPER_FILESIZE`: 512 bytes in PostgreSQL 15, 524 from 16 on.
fn relmap_file_size(pg_version: u32) -> u64 {
    if pg_version <= 15 {
        512
    } else {
        524
    }
}
/// Chunk size when copying entries to the spill file.
const SPILL_CHUNK: usize = 256 * 1024;

/// What the import learned from the small files.
#[derive(Default)]
struct Preamble {
    label: Option<BackupLabel>,
    version: Option<u32>,
    control: Option<Bytes>,
    spill: Option<SpillWriter>,
    /// Paths of file entries seen so far (duplicates are an error).
    seen: HashSet<String>,
    /// `pg_tblspc/<oid>` symlinks: (path, target). Each needs the
    /// tablespace's own archive in the stream ([`check_tablespace_links`]).
    links: Vec<(String, String)>,
}

impl Preamble {
    fn ready(&self) -> bool {
        self.label.is_some() && self.version.is_some()
    }

    /// The import LSN and the major version.
    fn decide(&self) -> Result<(Lsn, u32), ImportError> {
        let version = self.version.ok_or_else(|| {
            ImportError::BadTar("no PG_VERSION file: not a PostgreSQL base backup".into())
        })?;
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(ImportError::BadTar(format!(
                "PostgreSQL {version} is not supported (supported: {SUPPORTED_VERSIONS:?})"
            )));
        }
        let lsn = match (&self.label, &self.control) {
            (Some(l), _) => l.start_lsn,
            (None, Some(c)) => {
                parse_control(c)
                    .map_err(|e| ImportError::BadTar(format!("global/pg_control: {e}")))?
                    .redo
            }
            (None, None) => return Err(ImportError::BadTar(
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

    fn check_duplicate(&mut self, entry: &Entry) -> Result<(), ImportError> {
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
fn classify_entry(
    entry: &Entry,
    links: &mut Vec<(String, String)>,
    archives: &[String],
) -> Result<PgFile, ImportError> {
    Ok(match &entry.kind {
        EntryKind::File => classify(&entry.path, false),
        EntryKind::Dir => classify(&entry.path, true),
        EntryKind::Symlink(target) => {
            if entry.path.starts_with("pg_tblspc/") {
                links.push((entry.path.clone(), target.clone()));
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

/// Every `pg_tblspc/<oid>` symlink has its tablespace's archive (prefix
/// `pg_tblspc/<oid>/`) among the `archives` of the stream; a tar uploaded
/// alone has none, and is refused naming the link.
fn check_tablespace_links(
    links: &[(String, String)],
    archives: &[String],
) -> Result<(), ImportError> {
    let missing = links.iter().find(|(path, _)| !archives.contains(&format!("{path}/")));
    match missing {
        None => Ok(()),
        Some((path, target)) => Err(ImportError::BadTar(format!(
            "'{path}' is a symlink to '{target}': that tablespace's files are not in this tar \
             (pg_basebackup -Ft puts them in a tar of their own, and an import takes one tar); \
             import a tar that holds them in place under {path}/PG_<major>_<catversion>/, e.g. \
             a plain-format backup archived with `tar --dereference`"
        ))),
    }
}

/// Where the data of the entry being imported comes from.
pub(super) enum Source<'r, S> {
    Tar(&'r mut TarReader<S>),
    Spill(&'r mut SpillReader),
}

impl<S> Source<'_, S>
where
    S: Stream<Item = Result<TarPart, io::Error>> + Unpin,
{
    /// Exactly `n` bytes of the current entry (the caller knows its size).
    pub(super) async fn read_exact(&mut self, n: usize, path: &str) -> Result<Bytes, ImportError> {
        let b = match self {
            Source::Tar(t) => t.read_data(n).await?,
            Source::Spill(s) => s.read_data(n).await.context("read the import spill file")?,
        };
        if b.len() != n {
            return Err(ImportError::BadTar(format!("entry '{path}' ends early")));
        }
        Ok(b)
    }
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
    Source::Tar(tar).read_exact(entry.size as usize, &entry.path).await
}

fn utf8(entry: &Entry, b: &[u8]) -> Result<String, ImportError> {
    String::from_utf8(b.to_vec())
        .map_err(|_| ImportError::BadTar(format!("'{}' is not UTF-8 text", entry.path)))
}

#[derive(Debug, Default)]
struct Stats {
    rel_files: u64,
    rel_pages: u64,
    /// Of `rel_pages`, written straight to image layers (`rel_images`).
    image_pages: u64,
    slru_pages: u64,
    skipped: u64,
}

/// Streams a `pg_basebackup -Ft -X none` tar (PG 15/16/17) into a new
/// timeline; returns once the timeline is durable and published.
pub async fn import_basebackup<S>(
    tenant: Arc<Tenant>,
    timeline_id: TimelineId,
    body: S,
) -> Result<Arc<Timeline>, ImportError>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin,
{
    let uninit = import_basebackup_unfinished(tenant, timeline_id, body).await?;
    Ok(uninit.finish().await?)
}

/// [`import_basebackup`] without the final `finish()`: the caller may add
/// files to the new timeline's (temporary) directory first, so they become
/// visible with it, atomically.
pub async fn import_basebackup_unfinished<S>(
    tenant: Arc<Tenant>,
    timeline_id: TimelineId,
    body: S,
) -> Result<UninitializedTimeline, ImportError>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin,
{
    let parts = body.map_ok(TarPart::Data);
    import_archives_unfinished(tenant, timeline_id, parts, None).await
}

/// [`import_basebackup_unfinished`] of several archives in one stream (a
/// `BASE_BACKUP`: the main one and one per tablespace, each tablespace's
/// under its `pg_tblspc/<oid>/` prefix, see `super::backup_parts`).
/// `observer` sees every file's data (the bootstrap's checks against the
/// backup manifest: `super::manifest`).
pub async fn import_archives_unfinished<S>(
    tenant: Arc<Tenant>,
    timeline_id: TimelineId,
    body: S,
    observer: Option<Box<dyn EntryObserver>>,
) -> Result<UninitializedTimeline, ImportError>
where
    S: Stream<Item = Result<TarPart, io::Error>> + Send + Unpin,
{
    let started = Instant::now();
    if tenant.get_timeline(timeline_id).is_ok() {
        return Err(ImportError::AlreadyExists(format!("timeline {}/{timeline_id}", tenant.id())));
    }
    let mut tar = match observer {
        Some(o) => TarReader::with_observer(body, o),
        None => TarReader::new(body),
    };
    let mut pre = Preamble::default();
    let mut stats = Stats::default();

    // Phase 1: until the LSN and the version are known.
    let mut ended = false;
    while !pre.ready() {
        let Some(entry) = tar.next_entry().await? else {
            ended = true;
            break;
        };
        pre.check_duplicate(&entry)?;
        match classify_entry(&entry, &mut pre.links, tar.archives())? {
            PgFile::BackupLabel => {
                let text = utf8(&entry, &read_small(&mut tar, &entry, SMALL_FILE_LIMIT).await?)?;
                let label = parse_backup_label(&text)
                    .map_err(|e| ImportError::BadTar(format!("backup_label: {e}")))?;
                pre.label = Some(label);
            }
            PgFile::PgVersion => {
                let text = utf8(&entry, &read_small(&mut tar, &entry, 64).await?)?;
                pre.version = Some(parse_pg_version(&text).map_err(ImportError::BadTar)?);
            }
            PgFile::Control => {
                pre.control = Some(read_small(&mut tar, &entry, SMALL_FILE_LIMIT).await?)
            }
            PgFile::Other => {
                debug!("skipping {}", entry.path);
                stats.skipped += 1;
            }
            _ => {
                if pre.spill.is_none() {
                    let engine = &tenant.conf().io_engine;
                    let spill = SpillWriter::create(engine, &tenant.scratch_dir())
                        .await
                        .context("create the import spill file")?;
                    pre.spill = Some(spill);
                }
                let spill = pre.spill.as_mut().unwrap();
                spill
                    .begin_entry(&entry.path, entry.kind == EntryKind::Dir, entry.size)
                    .await
                    .context("spill")?;
                loop {
                    let chunk = tar.read_data(SPILL_CHUNK).await?;
                    if chunk.is_empty() {
                        break;
                    }
                    spill.write_data(&chunk).await.context("spill")?;
                }
            }
        }
    }
    let (lsn, pg_version) = pre.decide()?;
    if let Some(s) = &pre.spill {
        info!(
            "{} entries ({} bytes) arrived before backup_label and PG_VERSION; spilled them",
            s.entries, s.bytes
        );
    }

    // Phase 2: the timeline.
    let initial_lsn = Lsn(lsn.0 - 1);
    let mut uninit = tenant.begin_timeline_creation(timeline_id, initial_lsn, pg_version).await?;
    let tl = uninit.timeline().clone();
    let images = import_into(&tl, lsn, &mut pre, &mut tar, ended, &mut stats).await?;
    uninit.add_import_images(images);
    info!(
        "imported base backup into timeline {}/{timeline_id} at {lsn} (PostgreSQL {pg_version}): \
         {} relation files, {} relation pages ({} into image layers), {} SLRU pages, \
         {} entries skipped, {} tar bytes in {:.1?}",
        tenant.id(),
        stats.rel_files,
        stats.rel_pages,
        stats.image_pages,
        stats.slru_pages,
        stats.skipped,
        tar.offset(),
        started.elapsed()
    );
    drop(tl);
    Ok(uninit)
}

/// Phase 2: everything into one modification at `lsn`, then commit.
async fn import_into<S>(
    tl: &Timeline,
    lsn: Lsn,
    pre: &mut Preamble,
    tar: &mut TarReader<S>,
    ended: bool,
    stats: &mut Stats,
) -> Result<(Lsn, Vec<LayerFile>), ImportError>
where
    S: Stream<Item = Result<TarPart, io::Error>> + Send + Unpin,
{
    let pg_version = pre.version.expect("decided before the timeline was created");
    let mut m = tl.begin_modification(lsn);
    m.init_empty().await?;
    let mut images = RelImages::new(tl, lsn);

    if let Some(spill) = pre.spill.take() {
        let mut reader = spill.into_reader().await.context("rewind the import spill file")?;
        while let Some(e) = reader.next_entry().await.context("read the import spill file")? {
            let class = classify(&e.path, e.is_dir);
            let src = &mut Source::Spill(&mut reader);
            let dst = (&mut m, &mut images);
            import_entry::<S>(dst, pg_version, &e.path, class, e.size, src, stats).await?;
        }
    }

    if !ended {
        while let Some(entry) = tar.next_entry().await? {
            if tl.cancel.is_cancelled() {
                return Err(ImportError::Tenant(TenantError::ShuttingDown));
            }
            pre.check_duplicate(&entry)?;
            match classify_entry(&entry, &mut pre.links, tar.archives())? {
                PgFile::Control => {
                    pre.control = Some(read_small(tar, &entry, SMALL_FILE_LIMIT).await?)
                }
                PgFile::BackupLabel | PgFile::PgVersion => {
                    unreachable!("duplicates are rejected above")
                }
                PgFile::Other => {
                    debug!("skipping {}", entry.path);
                    stats.skipped += 1;
                }
                class => {
                    let (path, size) = (entry.path.clone(), entry.size);
                    let src = &mut Source::Tar(tar);
                    let dst = (&mut m, &mut images);
                    import_entry(dst, pg_version, &path, class, size, src, stats).await?;
                }
            }
        }
    }

    check_tablespace_links(&pre.links, tar.archives())?;
    let control = pre.control.take().ok_or_else(|| {
        ImportError::BadTar(
            "no global/pg_control in the tar: it is truncated or not a base backup".into(),
        )
    })?;
    let cd = parse_control(&control)
        .map_err(|e| ImportError::BadTar(format!("global/pg_control: {e}")))?;
    if let Some(major) = cd.major_version() {
        if major != pg_version {
            return Err(ImportError::BadTar(format!(
                "PG_VERSION says {pg_version} but global/pg_control was written by PostgreSQL {major} \
                 (catalog version {})",
                cd.catalog_version_no
            )));
        }
    }
    info!(
        "pg_control: system {} checkpoint {} redo {} timeline {}; importing at {lsn}",
        cd.system_identifier, cd.checkpoint, cd.redo, cd.timeline
    );
    m.put_control_file(control);
    m.put_checkpoint(Bytes::from(cd.checkpoint_copy));
    let tl = m.committed_view().0;
    m.commit().await.with_context(|| format!("commit the import at {lsn}"))?;
    tl.set_data_checksums(cd.data_checksums);
    Ok(images.into_files())
}

/// Import one data entry (relation file, SLRU segment, relmap, two-phase
/// file, database directory).
async fn import_entry<S>(
    (m, images): (&mut DatadirModification<'_>, &mut RelImages),
    pg_version: u32,
    path: &str,
    class: PgFile,
    size: u64,
    src: &mut Source<'_, S>,
    stats: &mut Stats,
) -> Result<(), ImportError>
where
    S: Stream<Item = Result<TarPart, io::Error>> + Unpin,
{
    let blocks = |what: &str| -> Result<u32, ImportError> {
        if !size.is_multiple_of(BLCKSZ as u64) {
            return Err(ImportError::BadTar(format!(
                "{what} '{path}' is {size} bytes, not a multiple of the {BLCKSZ}-byte page size"
            )));
        }
        Ok((size / BLCKSZ as u64).min(u32::MAX as u64) as u32)
    };
    match class {
        PgFile::DbDir { spc, db } => m.put_db_dir_creation(spc, db).await?,
        PgFile::Relmap { spc, db } => {
            let expected = relmap_file_size(pg_version);
            if size != expected {
                return Err(ImportError::BadTar(format!(
                    "relmap file '{path}' is {size} bytes, expected {expected} for PostgreSQL {pg_version}"
                )));
            }
            let img = src.read_exact(size as usize, path).await?;
            m.put_relmap_file(spc, db, img).await?;
        }
        PgFile::Rel { rel, segno } => {
            let n = blocks("relation file")?;
            if n > RELSEG_SIZE {
                return Err(ImportError::BadTar(format!(
                    "relation file '{path}' has {n} pages, more than a 1 GiB segment ({RELSEG_SIZE})"
                )));
            }
            let first = segno
                .checked_mul(RELSEG_SIZE)
                .filter(|f| f.checked_add(n).is_some_and(|end| end < u32::MAX))
                .ok_or_else(|| {
                    ImportError::BadTar(format!(
                        "relation file '{path}': segment number {segno} too large"
                    ))
                })?;
            if m.rel_size(rel).await?.is_none() {
                m.put_rel_creation(rel, 0).await?;
            }
            if RelImages::wants(n) {
                images.write_segment(m.timeline(), (rel, first, n), path, src).await?;
                m.put_rel_blocks_written_elsewhere(rel, first..first + n).await?;
                stats.image_pages += n as u64;
            } else {
                for i in 0..n {
                    let page = src.read_exact(BLCKSZ, path).await?;
                    m.put_rel_page_image(rel, first + i, page).await?;
                }
            }
            // An empty segment N still means the relation spans N segments.
            m.put_rel_extend(rel, first + n).await?;
            stats.rel_files += 1;
            stats.rel_pages += n as u64;
        }
        PgFile::Slru { kind, segno } => {
            let n = blocks("SLRU segment")?;
            if n > SLRU_PAGES_PER_SEGMENT {
                return Err(ImportError::BadTar(format!(
                    "SLRU segment '{path}' has {n} pages, more than {SLRU_PAGES_PER_SEGMENT}"
                )));
            }
            m.put_slru_segment_creation(kind, segno, n).await?;
            for blk in 0..n {
                let page = src.read_exact(BLCKSZ, path).await?;
                m.put_slru_page_image(kind, segno, blk, page).await?;
            }
            stats.slru_pages += n as u64;
        }
        PgFile::TwoPhase { xid } => {
            if size > SMALL_FILE_LIMIT {
                return Err(ImportError::BadTar(format!(
                    "two-phase file '{path}' is {size} bytes, too large"
                )));
            }
            let img = src.read_exact(size as usize, path).await?;
            let state = twophase_state(&img)
                .map_err(|e| ImportError::BadTar(format!("two-phase file '{path}': {e}")))?;
            m.put_twophase_file(xid, state).await?;
        }
        PgFile::BackupLabel | PgFile::PgVersion | PgFile::Control | PgFile::Other => {
            unreachable!("not a data entry: {path}")
        }
    }
    Ok(())
}

/// The state of a two-phase file, as the PREPARE record holds it (what the
/// timeline stores): the file without its trailing CRC-32C, checked.
fn twophase_state(file: &Bytes) -> Result<Bytes, String> {
    let Some(body_len) = file.len().checked_sub(4) else {
        return Err(format!("{} bytes, too short for its CRC", file.len()));
    };
    let stored = u32::from_le_bytes(file[body_len..].try_into().unwrap());
    let computed = crc32c::crc32c(&file[..body_len]);
    if stored != computed {
        return Err(format!("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"));
    }
    Ok(file.slice(..body_len))
}

#[cfg(test)]
mod twophase_tests {
    use super::*;

    #[test]
    fn twophase_file_crc_is_checked_and_stripped() {
        let mut file = b"state".to_vec();
        file.extend_from_slice(&crc32c::crc32c(b"state").to_le_bytes());
        assert_eq!(&twophase_state(&Bytes::from(file.clone())).unwrap()[..], b"state");
        file[0] ^= 1;
        let e = twophase_state(&Bytes::from(file)).unwrap_err();
        assert!(e.starts_with("CRC mismatch"), "{e}");
        assert!(twophase_state(&Bytes::from_static(b"abc")).unwrap_err().contains("too short"));
    }
}
