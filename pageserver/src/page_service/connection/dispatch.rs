//! Routing of frontend messages after authentication, and the one place
//! where commands run ([`Connection::dispatch`]), for both protocols:
//!
//! - simple: Query -> RowDescription (row commands), DataRow*,
//!   CommandComplete (or EmptyQueryResponse), ReadyForQuery;
//! - extended: Parse/Bind/Describe/Close answer from `ExtendedState`;
//!   Execute runs the portal's command like a simple query but without
//!   RowDescription (Describe gives it) and without ReadyForQuery; Sync
//!   answers ReadyForQuery, Flush sends what is buffered. A command-level
//!   error in an extended message sends ErrorResponse and discards every
//!   message until Sync;
//! - COPY commands (the pagestream: CopyBoth; `basebackup`/`fullbackup`:
//!   CopyOut ... CopyDone, CommandComplete) send their copy response
//!   themselves, in either protocol.
//!
//! Output is only buffered here; it reaches the socket at ReadyForQuery,
//! Flush, or when a command flushes (a COPY start).

use pq_proto::extended as ext;
use pq_proto::{single_cstr, ErrorFields};
use tracing::info;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;
use utils::quote::escape_for_log;

use super::{Connection, Next, MAX_ERROR_MESSAGE_CHARS};
use crate::page_service::backup;
use crate::page_service::command::Command;
use crate::page_service::error::{sqlstate, QueryError};
use crate::page_service::stream;
use crate::tenant::timeline::LeaseError;
use pageserver_api::pagestream::PagestreamProtocolVersion;
use pq_proto::backend as be;

/// Where a command's result goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    /// Simple query: RowDescription before the rows.
    Simple,
    /// Execute: rows only.
    Extended,
}

impl Connection {
    /// One frontend message of an authenticated session.
    pub(super) async fn handle_message(
        &mut self,
        tag: u8,
        body: &[u8],
    ) -> Result<Next, QueryError> {
        match tag {
            b'X' => Ok(Next::Close),
            b'S' => self.sync(body).await,
            // Discarded after an error in an extended-protocol sequence.
            b'Q' | b'P' | b'B' | b'D' | b'E' | b'C' | b'H' if self.extended.skip_until_sync => {
                Ok(Next::Query)
            }
            b'Q' => self.simple_query(body).await,
            b'P' | b'B' | b'D' | b'E' | b'C' | b'H' => {
                match self.extended_message(tag, body).await {
                    Err(QueryError::Command { code, message }) => {
                        self.report_error(code, &message);
                        self.extended.skip_until_sync = true;
                        // Sent now: a client that sent Flush rather than
                        // Sync still learns why nothing else came back.
                        self.writer.flush(&self.cancel).await?;
                        Ok(Next::Query)
                    }
                    other => other,
                }
            }
            // Like PostgreSQL: copy messages outside copy mode are ignored.
            b'd' | b'c' | b'f' => Ok(Next::Query),
            tag => Err(QueryError::fatal(
                sqlstate::PROTOCOL_VIOLATION,
                format!("unexpected message type '{}'", tag.escape_ascii()),
            )),
        }
    }

    /// ErrorResponse (S=ERROR) for a failed command; the session goes on.
    fn report_error(&mut self, code: &[u8; 5], message: &str) {
        let message = escape_for_log(message, MAX_ERROR_MESSAGE_CHARS).to_string();
        info!("command from {} failed: {message}", self.peer);
        be::error_response(self.writer.buf(), "ERROR", code, &message);
    }

    async fn ready_for_query(&mut self) -> Result<Next, QueryError> {
        be::ready_for_query(self.writer.buf());
        self.writer.flush(&self.cancel).await?;
        Ok(Next::Query)
    }

    async fn simple_query(&mut self, body: &[u8]) -> Result<Next, QueryError> {
        let query = single_cstr(body)?.to_string();
        self.extended.drop_unnamed_statement();
        self.extended.end_transaction();
        let res = match Command::parse(&query) {
            Ok(command) => self.dispatch(&command, Output::Simple).await,
            Err(e) => Err(e),
        };
        match res {
            Ok(Next::Query) => {}
            Ok(Next::Close) => return Ok(Next::Close),
            Err(QueryError::Command { code, message }) => self.report_error(code, &message),
            Err(e) => return Err(e),
        }
        self.ready_for_query().await
    }

    /// Sync: the end of an extended-protocol sequence (and of any error skip).
    async fn sync(&mut self, body: &[u8]) -> Result<Next, QueryError> {
        self.extended.skip_until_sync = false;
        self.extended.end_transaction();
        if let Err(QueryError::Command { code, message }) = ext::parse_empty("Sync", body) {
            self.report_error(code, &message);
        }
        self.ready_for_query().await
    }

    async fn extended_message(&mut self, tag: u8, body: &[u8]) -> Result<Next, QueryError> {
        let out = self.writer.buf();
        match tag {
            b'P' => self.extended.parse(&ext::parse_parse(body)?, out)?,
            b'B' => self.extended.bind(&ext::parse_bind(body)?, out)?,
            b'D' => self.extended.describe(&ext::parse_named("Describe", body)?, out)?,
            b'C' => self.extended.close(&ext::parse_named("Close", body)?, out),
            b'H' => {
                ext::parse_empty("Flush", body)?;
                self.writer.flush(&self.cancel).await?;
            }
            b'E' => {
                // Our commands return at most one row, so a row limit
                // (`max_rows`) never suspends a portal.
                let msg = ext::parse_execute(body)?;
                let portal = self.extended.take_for_execute(msg.portal)?;
                return self.dispatch(&portal.command, Output::Extended).await;
            }
            other => unreachable!("not an extended-protocol message: {other}"),
        }
        Ok(Next::Query)
    }

    /// Run `command`: the one dispatch of both protocols.
    async fn dispatch(&mut self, command: &Command, output: Output) -> Result<Next, QueryError> {
        if let Some(tenant) = command.tenant() {
            self.check_permission(tenant)?;
        }
        match command {
            Command::Empty => be::empty_query_response(self.writer.buf()),
            Command::Pagestream { version, tenant, timeline } => {
                return self.pagestream(*version, *tenant, *timeline).await;
            }
            Command::Backup(req) => {
                let tl = self.state.tenants.get_timeline(req.tenant, req.timeline)?;
                backup::send(req, tl, &mut self.writer, &self.cancel).await?;
            }
            Command::LeaseLsn { tenant, timeline, lsn } => {
                let valid_until_ms = self.lease_lsn(*tenant, *timeline, *lsn).await?;
                self.send_row(command, output, &[valid_until_ms.as_deref()]);
            }
        }
        if let Some(tag) = command.completion_tag() {
            be::command_complete(self.writer.buf(), tag);
        }
        Ok(Next::Query)
    }

    /// One result row of `command` (RowDescription first in the simple
    /// protocol). Values are text; a client that asked for binary gets the
    /// same bytes, which is the binary form of `text`.
    fn send_row(&mut self, command: &Command, output: Output, values: &[Option<&str>]) {
        let columns = command.result_columns().expect("a command that returns rows");
        debug_assert_eq!(columns.len(), values.len());
        if output == Output::Simple {
            be::row_description(self.writer.buf(), columns);
        }
        be::data_row(self.writer.buf(), values);
    }

    /// `lease lsn`: the lease's end in milliseconds since the UNIX epoch,
    /// or `None` (NULL) when the LSN cannot be leased (its history is
    /// gone), which Neon's compute takes as a final refusal; the reason
    /// goes to the client in a NoticeResponse. Other failures are errors,
    /// which the compute retries.
    async fn lease_lsn(
        &mut self,
        tenant: TenantId,
        timeline: TimelineId,
        lsn: Lsn,
    ) -> Result<Option<String>, QueryError> {
        let tl = self.state.tenants.get_timeline(tenant, timeline)?;
        match tl.lease_lsn(lsn).await {
            Ok(lease) => {
                let until = humantime::format_rfc3339_millis(lease.valid_until);
                info!(
                    "{} holds an LSN lease on {tenant}/{timeline} at {lsn} until {until}",
                    self.peer
                );
                Ok(Some(lease.valid_until_ms().to_string()))
            }
            Err(e @ (LeaseError::BelowHistory { .. } | LeaseError::InvalidLsn)) => {
                info!("refused an LSN lease on {tenant}/{timeline} to {}: {e}", self.peer);
                let notice = ErrorFields {
                    severity: "WARNING".to_string(),
                    code: "01000".to_string(),
                    message: format!("LSN lease not granted: {e}"),
                    detail: None,
                    hint: None,
                };
                be::notice_response(self.writer.buf(), &notice);
                Ok(None)
            }
            Err(LeaseError::ShuttingDown) => Err(QueryError::Shutdown),
            Err(e @ LeaseError::TooMany(_)) => {
                Err(QueryError::command(sqlstate::PROGRAM_LIMIT_EXCEEDED, e.to_string()))
            }
            Err(e @ LeaseError::Persist(_)) => {
                Err(QueryError::command(sqlstate::INTERNAL_ERROR, e.to_string()))
            }
        }
    }

    /// CopyBoth, then the pagestream until it ends; the session ends with it.
    async fn pagestream(
        &mut self,
        version: PagestreamProtocolVersion,
        tenant: TenantId,
        timeline: TimelineId,
    ) -> Result<Next, QueryError> {
        let tl = self.state.tenants.get_timeline(tenant, timeline)?;
        be::copy_both_response(self.writer.buf());
        self.writer.flush(&self.cancel).await?;
        info!("{} started pagestream {version:?} of {tenant}/{timeline}", self.peer);
        let reader = self.reader.take().expect("one pagestream per session");
        let conf = &self.state.conf;
        let (res, reader) =
            stream::run(reader, &mut self.writer, tl, version, conf, &self.cancel).await;
        self.reader = reader;
        match &res {
            Ok(()) => info!("{} ended pagestream of {tenant}/{timeline}", self.peer),
            Err(e) => info!("pagestream of {tenant}/{timeline} from {} ended: {e}", self.peer),
        }
        res.map(|()| Next::Close)
    }
}
