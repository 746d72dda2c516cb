//! Error types of the page service, one per boundary.
//!
//! - [`PageStreamError`]: the outcome of one pagestream request. Every variant
//!   but `Shutdown` becomes an in-band Error response (tag 103) and the stream
//!   goes on; `Shutdown` ends the stream (the client reconnects elsewhere or later).
//! - [`QueryError`]: the outcome of a libpq command or of a whole stream.
//!   `Shutdown` and `Disconnected` close the connection without a word;
//!   `Fatal` sends an ErrorResponse (S=FATAL) and closes; `Command` sends an
//!   ErrorResponse followed by ReadyForQuery and the session goes on.

use std::borrow::Cow;

use crate::pgdatadir_mapping::DatadirError;
use crate::tenant::{GetVectoredError, TenantError, WaitLsnError};

/// Why one pagestream request failed.
#[derive(Debug, thiserror::Error)]
pub enum PageStreamError {
    /// The request is malformed or asks for something that cannot be served
    /// (LSN 0, request_lsn < not_modified_since, below the timeline's start,
    /// unknown SLRU kind).
    #[error("bad request: {0}")]
    BadRequest(Cow<'static, str>),
    /// The relation, database or SLRU segment does not exist at that LSN.
    #[error("not found: {0}")]
    NotFound(String),
    /// WAL did not arrive within `wait_lsn_timeout`.
    #[error("{0}")]
    LsnTimeout(String),
    /// Reading or reconstructing the data failed (IO, checksum, missing redo).
    #[error("read error: {0}")]
    Read(String),
    /// The timeline or the daemon is shutting down: ends the stream.
    #[error("shutting down")]
    Shutdown,
}

impl From<WaitLsnError> for PageStreamError {
    fn from(e: WaitLsnError) -> Self {
        match e {
            WaitLsnError::Timeout(e) => PageStreamError::LsnTimeout(e.to_string()),
            WaitLsnError::Shutdown => PageStreamError::Shutdown,
        }
    }
}

impl From<GetVectoredError> for PageStreamError {
    fn from(e: GetVectoredError) -> Self {
        match e {
            GetVectoredError::Cancelled => PageStreamError::Shutdown,
            e @ GetVectoredError::TooManyKeys { .. } => PageStreamError::Read(e.to_string()),
        }
    }
}

impl From<DatadirError> for PageStreamError {
    fn from(e: DatadirError) -> Self {
        match e {
            DatadirError::RelNotFound { .. }
            | DatadirError::SlruSegmentNotFound { .. }
            | DatadirError::DbNotFound { .. } => PageStreamError::NotFound(e.to_string()),
            DatadirError::GetVectored(e) => e.into(),
            DatadirError::Reconstruct(e) => PageStreamError::Read(e.to_string()),
            DatadirError::Corrupt(_) => PageStreamError::Read(e.to_string()),
        }
    }
}

pub use pq_proto::{sqlstate, QueryError};

impl From<TenantError> for QueryError {
    fn from(e: TenantError) -> Self {
        match e {
            TenantError::ShuttingDown => QueryError::Shutdown,
            e @ (TenantError::NotFound(_) | TenantError::InvalidArgument(_)) => {
                QueryError::command(sqlstate::INTERNAL_ERROR, e.to_string())
            }
            e => QueryError::command(sqlstate::INTERNAL_ERROR, utils::error::report(&e)),
        }
    }
}
