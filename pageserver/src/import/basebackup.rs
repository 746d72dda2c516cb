//! `import_basebackup`: the import driver.
//!
//! Two phases:
//! 1. Read entries until the backup LSN (`backup_label`: `START WAL
//!    LOCATION`) and the major version (`PG_VERSION`) are known. Data
//!    entries seen before that go to a spill file (`spill`); with
//!    `pg_basebackup` tars `backup_label` is the first entry and `PG_VERSION`
//!    usually comes before `base/`, so the spill is usually empty. A caller
//!    that knows both already passes them as a [`Seed`] (the bootstrap: the
//!    `BASE_BACKUP` response's start LSN, the server's major; its tablespace
//!    archives come before `base.tar`): phase 2 starts at once, nothing is
//!    spilled, and `backup_label` and `PG_VERSION` must agree with the seed
//!    when they arrive, and must arrive.
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

use std::io;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use futures::Stream;
use tracing::{debug, info};
use utils::id::TimelineId;
use utils::lsn::Lsn;

use super::nested::body_parts;
use super::pg_files::{classify, parse_control, PgFile};
pub use super::preamble::Seed;
use super::preamble::{classify_entry, Preamble, SMALL_FILE_LIMIT};
use super::rel_images::RelImages;
use super::spill::{SpillReader, SpillWriter};
use super::tablespaces::check_tablespace_links;
use super::tar_reader::{EntryKind, EntryObserver, TarPart, TarReader};
use super::ImportError;
use crate::pgdatadir_mapping::{DatadirModification, BLCKSZ, RELSEG_SIZE, SLRU_PAGES_PER_SEGMENT};
use crate::tenant::storage_layer::layer_file::LayerFile;
use crate::tenant::{Tenant, TenantError, Timeline, UninitializedTimeline};

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

#[derive(Debug, Default)]
struct Stats {
    rel_files: u64,
    rel_pages: u64,
    /// Of `rel_pages`, written straight to image layers (`rel_images`).
    image_pages: u64,
    slru_pages: u64,
    skipped: u64,
}

/// Streams a `pg_basebackup -Ft -X none` tar, or the whole `-Ft`
/// directory as one tar (`super::nested`), into a new timeline; returns
/// once the timeline is durable and published.
pub async fn import_basebackup<S>(
    tenant: Arc<Tenant>,
    timeline_id: TimelineId,
    body: S,
) -> Result<Arc<Timeline>, ImportError>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static,
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
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static,
{
    if tenant.get_timeline(timeline_id).is_ok() {
        return Err(ImportError::AlreadyExists(format!("timeline {}/{timeline_id}", tenant.id())));
    }
    let parts = body_parts(body).await?;
    import_archives_unfinished(tenant, timeline_id, parts, None, None).await
}

/// [`import_basebackup_unfinished`] of several archives in one stream (a
/// `BASE_BACKUP`: the main one and one per tablespace, each tablespace's
/// under its `pg_tblspc/<oid>/` prefix, see `super::backup_parts`).
/// `observer` sees every file's data (the bootstrap's checks against the
/// backup manifest: `super::manifest`). `seed`: the start LSN and major
/// version, if known before the first entry (see the module comment).
pub async fn import_archives_unfinished<S>(
    tenant: Arc<Tenant>,
    timeline_id: TimelineId,
    body: S,
    observer: Option<Box<dyn EntryObserver>>,
    seed: Option<Seed>,
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
    let mut pre = Preamble::seeded(seed);
    let mut stats = Stats::default();
    let ended = read_preamble(&tenant, &mut pre, &mut tar, &mut stats).await?;
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
    pre.check_seed_confirmed()?;
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

/// Phase 1: entries until the LSN and the version are known (at once when
/// seeded), spilling data entries; true if the stream ended meanwhile.
async fn read_preamble<S>(
    tenant: &Tenant,
    pre: &mut Preamble,
    tar: &mut TarReader<S>,
    stats: &mut Stats,
) -> Result<bool, ImportError>
where
    S: Stream<Item = Result<TarPart, io::Error>> + Send + Unpin,
{
    while !pre.ready() {
        let Some(entry) = tar.next_entry().await? else {
            return Ok(true);
        };
        pre.check_duplicate(&entry)?;
        match classify_entry(&entry, &mut pre.links, tar.archives())? {
            class @ (PgFile::BackupLabel
            | PgFile::PgVersion
            | PgFile::Control
            | PgFile::TablespaceMap) => pre.read_file(&class, tar, &entry).await?,
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
    Ok(false)
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
                // Label and version: seeded imports (unseeded, a duplicate).
                class @ (PgFile::BackupLabel
                | PgFile::PgVersion
                | PgFile::Control
                | PgFile::TablespaceMap) => pre.read_file(&class, tar, &entry).await?,
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
        PgFile::BackupLabel
        | PgFile::PgVersion
        | PgFile::Control
        | PgFile::TablespaceMap
        | PgFile::Other => {
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
