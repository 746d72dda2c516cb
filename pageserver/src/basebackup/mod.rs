//! Base backups generated from a timeline at an LSN: a tar of a PostgreSQL
//! data directory, streamed to a [`ChunkSink`] (the page service's COPY OUT,
//! the HTTP `fullbackup` body). See `docs/basebackup.md`.
//!
//! Two flavours:
//! - `basebackup` (Neon's compute format): directories, configuration
//!   stubs, `PG_VERSION` and relmap files, SLRU segments, two-phase state,
//!   unlogged relations' init forks (with an empty main fork), no other
//!   relation data (the compute reads pages over the page service); then
//!   `neon.signal`/`zenith.signal` (`PREV LSN`), `pg_control` and a WAL
//!   segment holding only page headers up to the LSN;
//! - `fullbackup`: the same plus every relation fork at the LSN in 1 GiB
//!   segment files, no signal files, and a shutdown checkpoint record at
//!   the LSN in the WAL segment, so an unmodified PostgreSQL of the same
//!   major starts on it as after a clean shutdown (no WAL replay).
//!
//! Tablespaces: a database or relation in tablespace `spc` is written
//! under `pg_tblspc/<spc>/PG_<major>_<catversion>/<db>` (the catalog
//! version of the stored `pg_control`), with `pg_tblspc/<spc>` a directory
//! (an in-place tablespace, which PostgreSQL 15+ starts on) rather than the
//! primary's symlink; an empty tablespace (ingest records it as database 0
//! of the tablespace) still gets its `PG_<major>_<catversion>` directory.
//!
//! Invariants:
//! - everything is read at one LSN, at or below `last_record_lsn` and at or
//!   above the timeline's first readable LSN (`resolve_lsn`, which waits for
//!   WAL like GetPage); a record boundary (8-byte aligned);
//! - `pg_control` says "shut down" with its checkpoint and redo at
//!   `normalize_lsn(lsn)` (past a page header if `lsn` is on a page
//!   boundary), CRC recomputed in the timeline's major's layout;
//! - the output is streamed: memory is bounded by one tar chunk plus one
//!   read batch (`max_get_vectored_keys` pages), whatever the database size.

mod control;
mod datadir;
pub mod limits;
mod rels;
pub mod tar;

use std::time::Instant;

use postgres_ffi::PgMajorVersion;
use tokio_util::sync::CancellationToken;
use tracing::info;
use utils::lsn::Lsn;

pub use tar::{ChunkSink, TarWriter};

use crate::pgdatadir_mapping::DatadirError;
use crate::tenant::timeline::LsnNotReadable;
use crate::tenant::{ReadKind, Timeline, WaitLsnError};

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct BackupOptions {
    /// From `resolve_lsn`.
    pub lsn: Lsn,
    /// Every relation page (`fullbackup`), for an unmodified PostgreSQL.
    pub full: bool,
    /// Leave out replication slot state. The pageserver stores none, so
    /// `pg_replslot` is an empty directory either way.
    pub replica: bool,
    pub gzip: bool,
    /// Who reads (metrics label).
    pub reader: ReadKind,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    NotReadable(#[from] LsnNotReadable),
    #[error("LSN {0} is not a record boundary (not 8-byte aligned)")]
    Unaligned(Lsn),
    #[error("LSN {wanted} is beyond the timeline's last_record_lsn {current}: WAL up to it did not arrive within {timeout:?} (wait_lsn_timeout)")]
    LsnTimeout { wanted: Lsn, current: Lsn, timeout: std::time::Duration },
    #[error("reading the timeline at {lsn}: {source}")]
    Read {
        lsn: Lsn,
        #[source]
        source: DatadirError,
    },
    /// The timeline's data cannot make a data directory (bad control file,
    /// unsupported tablespace...), or a bug in the generator.
    #[error("{0}")]
    Internal(String),
    /// The receiver went away.
    #[error("sending the backup failed: {0}")]
    Disconnected(#[source] std::io::Error),
    #[error("shutting down")]
    Shutdown,
    /// A limit on concurrent backups was reached (`limits.rs`).
    #[error("{0}")]
    TooMany(String),
}

impl BackupError {
    fn read(lsn: Lsn) -> impl FnOnce(DatadirError) -> BackupError {
        move |source| match source {
            DatadirError::GetVectored(crate::tenant::GetVectoredError::Cancelled) => {
                BackupError::Shutdown
            }
            source => BackupError::Read { lsn, source },
        }
    }
}

/// The LSN a backup is taken at: `requested`, or `last_record_lsn` for
/// `None` ("latest"). Refused below the timeline's readable history or off
/// a record boundary; above `last_record_lsn` it waits for WAL up to
/// `wait_lsn_timeout`.
pub async fn resolve_lsn(
    tl: &Timeline,
    requested: Option<Lsn>,
    cancel: &CancellationToken,
) -> Result<Lsn, BackupError> {
    let lsn = requested.unwrap_or_else(|| tl.get_last_record_lsn());
    if !lsn.0.is_multiple_of(8) {
        return Err(BackupError::Unaligned(lsn));
    }
    tl.check_lsn_readable(lsn)?;
    tl.wait_lsn(lsn, cancel).await.map_err(|e| match e {
        WaitLsnError::Shutdown => BackupError::Shutdown,
        WaitLsnError::Timeout(utils::seqwait::SeqWaitError::Timeout {
            wanted,
            current,
            timeout,
        }) => BackupError::LsnTimeout { wanted, current, timeout },
        WaitLsnError::Timeout(_) => BackupError::Shutdown,
    })?;
    Ok(lsn)
}

/// What names the files of a database: the major, and the catalog version
/// (from the stored `pg_control`) in tablespace paths.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub version: PgMajorVersion,
    pub catalog_version_no: u32,
}

/// What is read before the first byte is sent, so that the common errors
/// (no control file, a corrupt one) come before a COPY starts.
pub struct Prepared {
    opts: BackupOptions,
    version: PgMajorVersion,
    control: control::Control,
    /// Held until the backup is sent or abandoned.
    _slot: limits::BackupSlot,
}

/// Everything known before the first byte: a slot within the limits on
/// concurrent backups, the control file at the LSN.
pub async fn prepare(tl: &Timeline, opts: BackupOptions) -> Result<Prepared, BackupError> {
    let slot = limits::acquire(tl.globals(), tl.tenant_id, tl.conf().backup_limits)?;
    let version = PgMajorVersion::new(tl.pg_version)
        .map_err(|e| BackupError::Internal(format!("timeline {}: {e}", tl.timeline_id)))?;
    let control = control::Control::read(tl, &opts, version).await?;
    Ok(Prepared { opts, version, control, _slot: slot })
}

/// Write the whole archive to `sink`; returns the sink (flushed) and the
/// archive's uncompressed size in bytes.
pub async fn send_tarball<S: ChunkSink>(
    tl: &Timeline,
    p: Prepared,
    sink: S,
) -> Result<(S, u64), BackupError> {
    let started = Instant::now();
    let opts = p.opts;
    let mut tar = TarWriter::new(sink, opts.gzip);
    datadir::write_skeleton(&mut tar, p.version).await?;
    let layout = Layout { version: p.version, catalog_version_no: p.control.catalog_version_no() };
    datadir::write_databases(&mut tar, tl, &opts, layout).await?;
    rels::write_relations(&mut tar, tl, &opts, layout).await?;
    datadir::write_slrus(&mut tar, tl, &opts).await?;
    datadir::write_twophase(&mut tar, tl, &opts, p.version, &p.control).await?;
    // Read once: the signal files and the checkpoint record's xl_prev agree.
    let prev = tl.prev_record_lsn(opts.lsn);
    if !opts.full {
        let text = match prev {
            Some(prev) => format!("PREV LSN: {prev}"),
            None => "PREV LSN: none".to_string(),
        };
        tar.file("neon.signal", text.as_bytes()).await?;
        tar.file("zenith.signal", text.as_bytes()).await?;
    }
    p.control.write(&mut tar, prev).await?;
    let bytes = tar.bytes_written;
    let sink = tar.finish().await?;
    info!(
        "{} of {}/{} at {} sent: {bytes} bytes{} in {:?}",
        if opts.full { "fullbackup" } else { "basebackup" },
        tl.tenant_id,
        tl.timeline_id,
        opts.lsn,
        if opts.gzip { " before gzip" } else { "" },
        started.elapsed()
    );
    Ok((sink, bytes))
}

#[cfg(test)]
mod tests;
