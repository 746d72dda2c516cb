//! `QueryError`: how a libpq command, or the stream it started, ends, and
//! what the server sends for it (nothing, ErrorResponse then close, or
//! ErrorResponse then ReadyForQuery). `sqlstate`: the codes used.

/// Why a libpq command (or the stream it started) failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The daemon, tenant or timeline is shutting down: close silently.
    #[error("shutting down")]
    Shutdown,
    /// The socket failed or the client went away: nothing can be sent.
    #[error("connection lost: {0}")]
    Disconnected(#[from] std::io::Error),
    /// A protocol violation or failed authentication: ErrorResponse
    /// (SQLSTATE `code`), then close.
    #[error("{message}")]
    Fatal { code: &'static [u8; 5], message: String },
    /// The command failed but the session is fine: ErrorResponse, then
    /// ReadyForQuery.
    #[error("{message}")]
    Command { code: &'static [u8; 5], message: String },
}

/// SQLSTATEs used in ErrorResponses.
pub mod sqlstate {
    /// `invalid_authorization_specification`.
    pub const INVALID_AUTHORIZATION: &[u8; 5] = b"28000";
    /// `protocol_violation`.
    pub const PROTOCOL_VIOLATION: &[u8; 5] = b"08P01";
    /// `feature_not_supported` (unknown command).
    pub const FEATURE_NOT_SUPPORTED: &[u8; 5] = b"0A000";
    /// `too_many_connections`.
    pub const TOO_MANY_CONNECTIONS: &[u8; 5] = b"53300";
    /// `connection_failure` (e.g. authentication timed out).
    pub const CONNECTION_FAILURE: &[u8; 5] = b"08006";
    /// `internal_error`.
    pub const INTERNAL_ERROR: &[u8; 5] = b"XX000";
}

impl QueryError {
    pub fn fatal(code: &'static [u8; 5], message: impl Into<String>) -> QueryError {
        QueryError::Fatal { code, message: message.into() }
    }

    pub fn command(code: &'static [u8; 5], message: impl Into<String>) -> QueryError {
        QueryError::Command { code, message: message.into() }
    }
}
