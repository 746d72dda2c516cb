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
    /// `invalid_sql_statement_name`: no prepared statement of that name.
    pub const INVALID_SQL_STATEMENT_NAME: &[u8; 5] = b"26000";
    /// `invalid_cursor_name`: no portal of that name.
    pub const INVALID_CURSOR_NAME: &[u8; 5] = b"34000";
    /// `duplicate_prepared_statement`.
    pub const DUPLICATE_PREPARED_STATEMENT: &[u8; 5] = b"42P05";
    /// `duplicate_cursor`: a portal of that name exists.
    pub const DUPLICATE_CURSOR: &[u8; 5] = b"42P03";
    /// `program_limit_exceeded` (e.g. too many prepared statements).
    pub const PROGRAM_LIMIT_EXCEEDED: &[u8; 5] = b"54000";
    /// `object_not_in_prerequisite_state` (e.g. a portal that already ran).
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &[u8; 5] = b"55000";
    /// `invalid_parameter_value` (e.g. an unknown format code).
    pub const INVALID_PARAMETER_VALUE: &[u8; 5] = b"22023";
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
