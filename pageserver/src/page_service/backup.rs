//! The `basebackup` and `fullbackup` commands of the page service:
//!
//! ```text
//! basebackup <tenant_id> <timeline_id> [<lsn>|latest] [--gzip] [--replica]
//! fullbackup <tenant_id> <timeline_id> [<lsn>|latest]
//! ```
//!
//! Answered as COPY OUT: CopyOutResponse, CopyData chunks of the tar
//! (`crate::basebackup`), CopyDone, CommandComplete; the caller sends
//! ReadyForQuery. Everything that can be refused (arguments, unknown
//! timeline, LSN bounds and the wait for WAL, the control file) is checked
//! before CopyOutResponse, so those errors are a plain ErrorResponse; an
//! error while streaming is an ErrorResponse inside the COPY, which ends it
//! (as in PostgreSQL). Either way the session goes on.
//!
//! A backup never ends in a way that looks complete when it is not: only a
//! whole archive is followed by CopyDone and CommandComplete. The timeline
//! shutting down (deleted, detached, reset) is an ErrorResponse (SQLSTATE
//! 57P01, `admin_shutdown`), before or during the COPY; only the daemon's
//! own shutdown and a lost client close the connection without a word, and
//! then without CopyDone, which a client reads as a failed COPY.

use std::sync::Arc;

use bytes::Bytes;
use pq_proto::backend as be;
use pq_proto::FrameWriter;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;
use utils::quote::quote;

use super::error::{sqlstate, QueryError};
use crate::basebackup::{self, BackupError, BackupOptions, ChunkSink};
use crate::tenant::{ReadKind, Timeline};

/// SQLSTATE `invalid_parameter_value`: an LSN out of bounds.
const INVALID_PARAMETER_VALUE: &[u8; 5] = b"22023";
/// SQLSTATE `admin_shutdown`: the timeline was stopped under the backup.
const ADMIN_SHUTDOWN: &[u8; 5] = b"57P01";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BackupRequest {
    pub tenant: TenantId,
    pub timeline: TimelineId,
    /// `None`: latest (`last_record_lsn`).
    pub lsn: Option<Lsn>,
    pub full: bool,
    pub gzip: bool,
    pub replica: bool,
}

/// Is `command` one of ours?
pub(super) fn is_backup_command(command: &str) -> bool {
    command.eq_ignore_ascii_case("basebackup") || command.eq_ignore_ascii_case("fullbackup")
}

pub(super) fn parse(command: &str, args: &[&str]) -> Result<BackupRequest, QueryError> {
    let full = command.eq_ignore_ascii_case("fullbackup");
    let usage = || {
        let opts = if full { "" } else { " [--gzip] [--replica]" };
        QueryError::command(
            sqlstate::PROTOCOL_VIOLATION,
            format!("usage: {command} <tenant_id> <timeline_id> [<lsn>|latest]{opts}"),
        )
    };
    let (ids, flags): (Vec<&str>, Vec<&str>) = args.iter().partition(|a| !a.starts_with("--"));
    let (tenant, timeline, lsn) = match ids[..] {
        [t, tl] => (t, tl, None),
        [t, tl, lsn] => (t, tl, Some(lsn)),
        _ => return Err(usage()),
    };
    let bad = |what: &str, value: &str, e: &dyn std::fmt::Display| {
        QueryError::command(
            sqlstate::PROTOCOL_VIOLATION,
            format!("invalid {what} {}: {e}", quote(value)),
        )
    };
    let mut req = BackupRequest {
        tenant: tenant.parse().map_err(|e| bad("tenant id", tenant, &e))?,
        timeline: timeline.parse().map_err(|e| bad("timeline id", timeline, &e))?,
        lsn: match lsn {
            None => None,
            Some(l) if l.eq_ignore_ascii_case("latest") => None,
            Some(l) => Some(l.parse::<Lsn>().map_err(|e| bad("LSN", l, &e))?),
        },
        full,
        gzip: false,
        replica: false,
    };
    for flag in flags {
        match flag {
            "--gzip" if !full => req.gzip = true,
            "--replica" if !full => req.replica = true,
            _ => {
                return Err(QueryError::command(
                    sqlstate::PROTOCOL_VIOLATION,
                    format!("{command}: unknown option {}; {}", quote(flag), usage()),
                ))
            }
        }
    }
    Ok(req)
}

/// Run `req` on `tl` (the caller resolved the tenant and checked
/// permissions): CopyOutResponse ... CommandComplete.
pub(super) async fn send(
    req: &BackupRequest,
    tl: Arc<Timeline>,
    writer: &mut FrameWriter,
    cancel: &CancellationToken,
) -> Result<(), QueryError> {
    let failed = |e| to_query_error(e, &tl, cancel);
    let lsn = basebackup::resolve_lsn(&tl, req.lsn, cancel).await.map_err(failed)?;
    let opts = BackupOptions {
        lsn,
        full: req.full,
        replica: req.replica,
        gzip: req.gzip,
        reader: ReadKind::PageRequestHandler,
    };
    let prepared = basebackup::prepare(&tl, opts).await.map_err(failed)?;
    be::copy_out_response(writer.buf());
    let sink = CopySink { writer, cancel, timeline_cancel: &tl.cancel };
    let (sink, _) = basebackup::send_tarball(&tl, prepared, sink).await.map_err(failed)?;
    be::copy_done(sink.writer.buf());
    be::command_complete(sink.writer.buf(), "COPY");
    sink.writer.flush(cancel).await
}

/// CopyData messages on the session's socket.
struct CopySink<'a> {
    writer: &'a mut FrameWriter,
    /// The connection's: a flush it cuts short ends the connection.
    cancel: &'a CancellationToken,
    /// The timeline's, checked between chunks (never during a flush, which
    /// would leave a partial message before the ErrorResponse): a backup
    /// of a timeline that stops does not go on to look complete.
    timeline_cancel: &'a CancellationToken,
}

impl ChunkSink for CopySink<'_> {
    async fn send(&mut self, chunk: Bytes) -> Result<(), BackupError> {
        if self.timeline_cancel.is_cancelled() {
            return Err(BackupError::Shutdown);
        }
        be::copy_data(self.writer.buf(), &chunk);
        self.writer.flush(self.cancel).await.map_err(|e| match e {
            QueryError::Disconnected(io) => BackupError::Disconnected(io),
            _ => BackupError::Shutdown,
        })
    }
}

/// How `e` ends the command: see the module comment. `cancel` is the
/// connection's (cancelled when the daemon stops).
fn to_query_error(e: BackupError, tl: &Timeline, cancel: &CancellationToken) -> QueryError {
    match e {
        BackupError::Shutdown if cancel.is_cancelled() => QueryError::Shutdown,
        BackupError::Shutdown => QueryError::command(
            ADMIN_SHUTDOWN,
            format!(
                "timeline {}/{} is shutting down (deleted, detached or reset): \
                 the backup is incomplete",
                tl.tenant_id, tl.timeline_id
            ),
        ),
        BackupError::Disconnected(io) => QueryError::Disconnected(io),
        BackupError::TooMany(msg) => QueryError::command(sqlstate::TOO_MANY_CONNECTIONS, msg),
        e @ (BackupError::NotReadable(_)
        | BackupError::Unaligned(_)
        | BackupError::LsnTimeout { .. }) => {
            QueryError::command(INVALID_PARAMETER_VALUE, e.to_string())
        }
        e @ (BackupError::Read { .. } | BackupError::Internal(_)) => {
            QueryError::command(sqlstate::INTERNAL_ERROR, e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "1f359dd625e519a1a4e8d7509690f6fc";
    const TL: &str = "de200bd42b49cc1814412c7e592dd6e9";

    fn err(command: &str, args: &[&str]) -> String {
        match parse(command, args).unwrap_err() {
            QueryError::Command { message, .. } => message,
            e => panic!("not a command error: {e}"),
        }
    }

    #[test]
    fn parses_every_form() {
        let r = parse("basebackup", &[T, TL]).unwrap();
        assert_eq!((r.lsn, r.full, r.gzip, r.replica), (None, false, false, false));
        let r = parse("basebackup", &[T, TL, "latest", "--gzip"]).unwrap();
        assert_eq!((r.lsn, r.gzip), (None, true));
        let r = parse("BASEBACKUP", &[T, TL, "0/16B5A50", "--replica", "--gzip"]).unwrap();
        assert_eq!((r.lsn, r.gzip, r.replica), (Some(Lsn(0x16B5A50)), true, true));
        let r = parse("fullbackup", &[T, TL, "1/0"]).unwrap();
        assert_eq!((r.lsn, r.full), (Some(Lsn(1 << 32)), true));
        assert_eq!(r.tenant.to_string(), T);
    }

    #[test]
    fn malformed_arguments_name_what_is_wrong() {
        assert!(err("basebackup", &[T]).starts_with("usage: basebackup <tenant_id>"));
        assert!(err("basebackup", &[T, TL, "0/1", "0/2"]).starts_with("usage:"));
        assert!(err("basebackup", &["nope", TL]).contains("invalid tenant id 'nope'"));
        assert!(err("basebackup", &[T, "x"]).contains("invalid timeline id 'x'"));
        assert!(err("basebackup", &[T, TL, "12"]).contains("invalid LSN '12'"));
        assert!(err("basebackup", &[T, TL, "--zip"]).contains("unknown option '--zip'"));
        assert!(err("fullbackup", &[T, TL, "--gzip"]).contains("unknown option '--gzip'"));
    }
}
