//! PostgreSQL concepts on top of the key-value page store: relations and
//! their sizes, databases, relmap files, SLRUs, two-phase state, control data.
//!
//! Keys follow `pageserver_api::key` (Neon's key space). Values:
//! - relation block / SLRU block: the 8 KiB page image;
//! - relation size / SLRU segment size: `u32` LE number of blocks; an empty
//!   value means "dropped" (the store has no deletes, so a drop is a write);
//! - directories: see `dirs` (our compact versioned format); an empty value
//!   at a relation-directory key means the database was dropped;
//! - relmap file, control file, checkpoint: raw bytes;
//! - two-phase file: the state as the PREPARE record holds it, without the
//!   trailing CRC-32C of the file on disk (import strips and checks it, a
//!   base backup appends it).
//!
//! Invariants kept by `DatadirModification` (all changes of one LSN commit
//! together, with one `finish_write`):
//! - a relation exists iff it is in its database's `RelDirectory` iff its
//!   size key holds 4 bytes; likewise for SLRU segments;
//! - every block below a relation's size has a value written at or after the
//!   LSN at which the size last grew past it (gaps are zero-filled), so a
//!   truncated-then-extended relation never shows stale pages;
//! - sizes cached in `Timeline::rel_size_cache` agree with storage (see
//!   `tenant/timeline/rel_size_cache.rs`).
//!
//! Reads (`reads`, `keyspace`) never wait for an LSN: the caller
//! (page service, HTTP) has already waited for it.

mod dirs;
mod keyspace;
mod modification;
mod reads;

#[cfg(test)]
mod tests;

use bytes::Bytes;
use pageserver_api::key::Key;
use pageserver_api::reltag::{RelTag, SlruKind};
use utils::lsn::Lsn;

use crate::tenant::{GetVectoredError, PageReconstructError, ReadKind, Timeline};

pub use dirs::{DbDirectory, DirDecodeError, RelDirectory, SlruDirectory, TwoPhaseDirectory};
pub use keyspace::collect_keyspace;
pub use modification::DatadirModification;
pub(crate) use reads::rel_sizes;
pub use reads::{
    get_db_size, get_db_size_all_tablespaces, get_rel_exists, get_rel_pages_batched,
    get_rel_pages_each, get_rel_size, get_slru_segment, list_dbs, list_rels, list_slru_segments,
};

pub use postgres_ffi::{BLCKSZ, RELSEG_SIZE, SLRU_PAGES_PER_SEGMENT};

static ZEROES: [u8; BLCKSZ] = [0; BLCKSZ];

/// An all-zero page (what PostgreSQL reads past the end of a relation).
pub fn zero_page() -> Bytes {
    Bytes::from_static(&ZEROES)
}

/// Errors of the PostgreSQL-level reads. Each names what was asked for.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DatadirError {
    #[error("relation {rel} does not exist at LSN {lsn}")]
    RelNotFound { rel: RelTag, lsn: Lsn },
    #[error("SLRU segment {segno:04X} of {} does not exist at LSN {lsn}", kind.dir_name())]
    SlruSegmentNotFound { kind: SlruKind, segno: u32, lsn: Lsn },
    #[error("database {spcnode}/{dbnode} does not exist at LSN {lsn}")]
    DbNotFound { spcnode: u32, dbnode: u32, lsn: Lsn },
    #[error(transparent)]
    Reconstruct(#[from] PageReconstructError),
    #[error(transparent)]
    GetVectored(#[from] GetVectoredError),
    #[error("corrupt data: {0}")]
    Corrupt(String),
}

impl From<DirDecodeError> for DatadirError {
    fn from(e: DirDecodeError) -> Self {
        DatadirError::Corrupt(e.to_string())
    }
}

impl Timeline {
    /// Start a set of changes that all happen at `lsn` (above
    /// `last_record_lsn`); see `DatadirModification`.
    pub fn begin_modification(&self, lsn: Lsn) -> DatadirModification<'_> {
        DatadirModification::new(self, lsn)
    }
}

/// Encode a relation or SLRU segment size.
pub(crate) fn encode_size(nblocks: u32) -> Bytes {
    Bytes::copy_from_slice(&nblocks.to_le_bytes())
}

/// Decode a size value: `None` for a dropped object (empty value).
pub(crate) fn decode_size(
    buf: &[u8],
    what: impl FnOnce() -> String,
) -> Result<Option<u32>, DatadirError> {
    match buf.len() {
        0 => Ok(None),
        4 => Ok(Some(u32::from_le_bytes(buf.try_into().unwrap()))),
        n => {
            Err(DatadirError::Corrupt(format!("size value of {} is {n} bytes, expected 4", what())))
        }
    }
}

/// A missing key is `None`; other errors stay errors.
pub(crate) fn optional(
    r: Result<Bytes, PageReconstructError>,
) -> Result<Option<Bytes>, PageReconstructError> {
    match r {
        Ok(b) => Ok(Some(b)),
        Err(PageReconstructError::MissingKey { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Read any number of (key, LSN) queries in chunks of the configured
/// vectored-get limit (`max_get_vectored_keys`).
pub(crate) async fn get_chunked(
    tl: &Timeline,
    reader: ReadKind,
    queries: &[(Key, Lsn)],
) -> Result<Vec<Result<Bytes, PageReconstructError>>, GetVectoredError> {
    let mut out = Vec::with_capacity(queries.len());
    let chunk_keys = tl.conf().max_get_vectored_keys;
    assert!(chunk_keys > 0, "max_get_vectored_keys is validated positive at start-up");
    for chunk in queries.chunks(chunk_keys) {
        out.append(&mut tl.get_vectored(chunk, reader).await?);
    }
    Ok(out)
}

/// Read one key; `None` if it has no value at `lsn`.
pub(crate) async fn get_one(
    tl: &Timeline,
    reader: ReadKind,
    key: Key,
    lsn: Lsn,
) -> Result<Option<Bytes>, DatadirError> {
    let mut r = tl.get_vectored(&[(key, lsn)], reader).await?;
    Ok(optional(r.pop().expect("one result per query"))?)
}
