//! Base-backup import: a `pg_basebackup -Ft -X none` tar (PostgreSQL 15 to
//! 18), the whole `-Ft` directory as one tar (`nested`: base.tar and one
//! archive per tablespace), or the archives of a `BASE_BACKUP`
//! (`backup_parts`), streamed into a new timeline.
//!
//! Guarantees:
//! - the body is streamed (`tar_reader`), never held whole in memory; page
//!   values go to the timeline in bounded batches, and large relation files
//!   straight to image layers (`rel_images`), so memory does not grow with
//!   the bytes imported;
//! - everything is written at one LSN, the backup's start LSN (see
//!   `basebackup` and docs/import.md), inside a timeline created with
//!   `Tenant::begin_timeline_creation`: it becomes visible only when
//!   `UninitializedTimeline::finish` has made it durable, and a failed,
//!   abandoned or killed import leaves nothing behind and can be retried;
//! - a malformed tar is `ImportError::BadTar` naming the entry and what was
//!   wrong with it; a body that stops (client gone, read timeout) is
//!   `ImportError::BodyRead`, the client's doing, not a server error.

mod backup_parts;
mod basebackup;
pub mod manifest;
pub mod nested;
pub mod pg_files;
mod preamble;
mod rel_images;
mod spill;
mod tablespaces;
pub mod tar_reader;

pub use backup_parts::backup_parts;
pub use basebackup::{
    import_archives_unfinished, import_basebackup, import_basebackup_unfinished, Seed,
};

use crate::tenant::TenantError;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The tar is malformed, truncated, or not a supported base backup (400).
    #[error("bad base backup tar: {0}")]
    BadTar(String),
    /// The timeline exists already (409).
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error(transparent)]
    Tenant(TenantError),
    /// The request body could not be read: the client went away, or sent
    /// nothing for `http_body_read_timeout` (`timed_out`). Nothing was imported.
    #[error("cannot read the base backup from the request: {msg}")]
    BodyRead { timed_out: bool, msg: String },
    /// Anything else: IO, storage (500).
    #[error("{0:#}")]
    Other(anyhow::Error),
}

impl From<TenantError> for ImportError {
    fn from(e: TenantError) -> Self {
        match e {
            TenantError::AlreadyExists(what) => ImportError::AlreadyExists(what),
            e => ImportError::Tenant(e),
        }
    }
}

impl From<tar_reader::TarError> for ImportError {
    fn from(e: tar_reader::TarError) -> Self {
        match e {
            tar_reader::TarError::Malformed(m) => ImportError::BadTar(m),
            tar_reader::TarError::Io(e) => ImportError::BodyRead {
                timed_out: e.kind() == std::io::ErrorKind::TimedOut,
                msg: e.to_string(),
            },
        }
    }
}

impl From<anyhow::Error> for ImportError {
    fn from(e: anyhow::Error) -> Self {
        ImportError::Other(e)
    }
}
