//! One libpq session: startup (SSL/GSSENC refused with `N`), authentication
//! (trust or JWT), then commands (`command.rs`) over the simple or the
//! extended query protocol until Terminate or EOF (`connection/dispatch.rs`
//! routes each message and runs commands; `extended.rs` keeps prepared
//! statements and portals). The command
//! `pagestream_v2|pagestream_v3 <tenant_id> <timeline_id>` switches the
//! session to CopyBoth and hands it to the pagestream; the connection closes
//! when that stream ends.
//!
//! Invariants:
//! - with JWT auth, no command runs before a valid token was presented, and
//!   every command that names a tenant is checked against the token's claims;
//!   an authentication failure is FATAL (ErrorResponse, close);
//! - an unknown or failing command gets ErrorResponse then ReadyForQuery, and
//!   the session goes on; in the extended protocol the error ends the
//!   sequence: messages are discarded until Sync, which gets ReadyForQuery
//!   (PostgreSQL's rule);
//! - a malformed frame (length) is FATAL; a malformed extended-protocol
//!   message body is an ERROR (08P01) naming the message and the fault;
//! - every wait on the socket races the connection's cancellation token;
//! - startup and authentication together are bounded by
//!   `authentication_timeout` (PostgreSQL's setting of the same name is the
//!   model): a client that sends no startup packet, or no password, is
//!   closed with a FATAL error when it expires;
//! - client values quoted in errors and logs are escaped and cut
//!   (`utils::quote`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use utils::id::TenantId;
use utils::quote::escape_for_log;

use super::error::{sqlstate, QueryError};
use super::extended::ExtendedState;
use super::ServiceState;
use crate::auth::{check_permission, Claims};
use crate::metrics::page_service::METRICS;
use pageserver_api::config::AuthType;
use pq_proto::backend as be;
use pq_proto::{single_cstr, FrameReader, FrameWriter, StartupPacket};

mod dispatch;

/// How many SSLRequest/GSSENCRequest packets a client may send before its startup packet.
const MAX_NEGOTIATION_PACKETS: usize = 4;
/// Bound on writing the final ErrorResponse of a failing connection.
const FAREWELL_TIMEOUT: Duration = Duration::from_secs(1);
/// Bytes discarded at most while lingering after a fatal error.
const LINGER_LIMIT: usize = 1024 * 1024;
/// Longest error message sent or logged, in characters (a safety net: client
/// values in messages are already quoted with a bounded prefix).
const MAX_ERROR_MESSAGE_CHARS: usize = 1024;
const SERVER_VERSION: &str = "15.0 (pageserver)";

struct Connection {
    /// `None` once handed to a pagestream (which ends the session).
    reader: Option<FrameReader>,
    writer: FrameWriter,
    peer: SocketAddr,
    state: Arc<ServiceState>,
    cancel: CancellationToken,
    /// Set by JWT authentication.
    claims: Option<Claims>,
    /// Prepared statements and portals of the extended query protocol.
    extended: ExtendedState,
}

/// What a successful command leaves behind.
enum Next {
    /// Send ReadyForQuery and read the next command.
    Query,
    /// A pagestream ran and ended; close the connection.
    Close,
}

/// Serves one accepted connection until it ends; never fails (errors are
/// reported to the client where possible, and logged).
pub async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    state: Arc<ServiceState>,
    cancel: CancellationToken,
) {
    METRICS.live_connections.inc();
    // Decrements even if the task is dropped (runtime shutdown).
    let _live = scopeguard(|| METRICS.live_connections.dec());
    // Responses are flushed once per batch; Nagle would only add latency.
    if let Err(e) = socket.set_nodelay(true) {
        debug!("set_nodelay failed for {peer}: {e}");
    }
    let (rd, wr) = socket.into_split();
    let mut conn = Connection {
        reader: Some(FrameReader::new(rd)),
        writer: FrameWriter::new(wr),
        peer,
        state,
        cancel,
        claims: None,
        extended: ExtendedState::default(),
    };
    match conn.run().await {
        Ok(()) => debug!("connection from {peer} closed"),
        Err(QueryError::Shutdown) => debug!("connection from {peer} closed by shutdown"),
        Err(QueryError::Disconnected(e)) => info!("connection from {peer} lost: {e}"),
        Err(QueryError::Fatal { code, message } | QueryError::Command { code, message }) => {
            let message = escape_for_log(&message, MAX_ERROR_MESSAGE_CHARS).to_string();
            warn!("closing connection from {peer}: {message}");
            be::error_response(conn.writer.buf(), "FATAL", code, &message);
            let flushed = tokio::time::timeout(FAREWELL_TIMEOUT, conn.writer.flush(&conn.cancel));
            if let Ok(Ok(())) = flushed.await {
                conn.writer.shutdown().await;
                if let Some(reader) = conn.reader.as_mut() {
                    tokio::select! {
                        _ = reader.drain(FAREWELL_TIMEOUT, LINGER_LIMIT) => {}
                        _ = conn.cancel.cancelled() => {}
                    }
                }
            }
        }
    }
}

/// Tells a client over `page_service_max_connections` why it is turned away
/// (FATAL, SQLSTATE 53300, as PostgreSQL does), then closes with a short
/// linger so the error is not lost to a reset. Bounded by [`FAREWELL_TIMEOUT`].
pub async fn refuse_too_many(socket: TcpStream, limit: usize) {
    let (rd, wr) = socket.into_split();
    let mut writer = FrameWriter::new(wr);
    let message = format!(
        "sorry, too many clients already: the page service serves at most {limit} \
         connections (page_service_max_connections)"
    );
    be::error_response(writer.buf(), "FATAL", sqlstate::TOO_MANY_CONNECTIONS, &message);
    let never = CancellationToken::new();
    if let Ok(Ok(())) = tokio::time::timeout(FAREWELL_TIMEOUT, writer.flush(&never)).await {
        writer.shutdown().await;
        FrameReader::new(rd).drain(FAREWELL_TIMEOUT, LINGER_LIMIT).await;
    }
}

/// Runs `f` when dropped.
struct ScopeGuard<F: FnMut()>(F);

impl<F: FnMut()> Drop for ScopeGuard<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

fn scopeguard<F: FnMut()>(f: F) -> ScopeGuard<F> {
    ScopeGuard(f)
}

impl Connection {
    fn reader(&mut self) -> &mut FrameReader {
        self.reader
            .as_mut()
            .expect("the reader is only taken by a pagestream, which ends the session")
    }

    async fn run(&mut self) -> Result<(), QueryError> {
        let limit = self.state.conf.authentication_timeout;
        match tokio::time::timeout(limit, self.startup_and_authenticate()).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                METRICS.auth_timeouts.inc();
                return Err(QueryError::fatal(
                    sqlstate::CONNECTION_FAILURE,
                    format!(
                        "canceling authentication due to timeout: not authenticated within \
                         {limit:?} (authentication_timeout)"
                    ),
                ));
            }
        }
        let buf = self.writer.buf();
        be::auth_ok(buf);
        be::parameter_status(buf, "client_encoding", "UTF8");
        be::parameter_status(buf, "integer_datetimes", "on");
        be::parameter_status(buf, "server_version", SERVER_VERSION);
        be::ready_for_query(buf);
        self.writer.flush(&self.cancel).await?;

        loop {
            let cancel = self.cancel.clone();
            let Some(frame) = self.reader().read_message(&cancel).await? else {
                return Ok(());
            };
            // Frontend messages are small (MAX_MESSAGE_LEN): a copy frees
            // the reader for the command (a pagestream takes it over).
            let (tag, body) = (frame.tag, frame.body.to_vec());
            match self.handle_message(tag, &body).await? {
                Next::Query => {}
                Next::Close => return Ok(()),
            }
        }
    }

    /// `Ok(false)`: the client left before starting up.
    async fn startup_and_authenticate(&mut self) -> Result<bool, QueryError> {
        if !self.startup().await? {
            return Ok(false);
        }
        self.authenticate().await?;
        Ok(true)
    }

    /// Negotiation and the startup packet. `Ok(false)`: the client left
    /// (EOF or CancelRequest, which has nothing to cancel here).
    async fn startup(&mut self) -> Result<bool, QueryError> {
        for _ in 0..=MAX_NEGOTIATION_PACKETS {
            let cancel = self.cancel.clone();
            match self.reader().read_startup(&cancel).await? {
                None | Some(StartupPacket::CancelRequest { .. }) => return Ok(false),
                Some(StartupPacket::SslRequest | StartupPacket::GssEncRequest) => {
                    be::encryption_refused(self.writer.buf());
                    self.writer.flush(&self.cancel).await?;
                }
                Some(StartupPacket::Startup { params }) => {
                    let get =
                        |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                    debug!(
                        "startup from {}: user={:?} application_name={:?}",
                        self.peer,
                        get("user"),
                        get("application_name")
                    );
                    return Ok(true);
                }
            }
        }
        Err(QueryError::fatal(sqlstate::PROTOCOL_VIOLATION, "too many negotiation requests"))
    }

    async fn authenticate(&mut self) -> Result<(), QueryError> {
        match self.state.conf.auth_type {
            AuthType::Trust => Ok(()),
            AuthType::Jwt => {
                be::auth_cleartext_password(self.writer.buf());
                self.writer.flush(&self.cancel).await?;
                let cancel = self.cancel.clone();
                let frame = self.reader().read_message(&cancel).await?.ok_or_else(|| {
                    QueryError::Disconnected(std::io::ErrorKind::UnexpectedEof.into())
                })?;
                if frame.tag != b'p' {
                    return Err(QueryError::fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        "expected a password message holding a JWT",
                    ));
                }
                let token = single_cstr(frame.body)?.to_string();
                let auth = self.state.auth.as_ref().expect("JWT auth has a key");
                let claims = auth.decode(&token).map_err(|e| {
                    QueryError::fatal(sqlstate::INVALID_AUTHORIZATION, e.to_string())
                })?;
                self.claims = Some(claims);
                Ok(())
            }
        }
    }

    fn check_permission(&self, tenant: TenantId) -> Result<(), QueryError> {
        match self.state.conf.auth_type {
            AuthType::Trust => Ok(()),
            AuthType::Jwt => {
                let claims = self.claims.as_ref().expect("authenticated before any command");
                check_permission(claims, tenant)
                    .map_err(|e| QueryError::fatal(sqlstate::INVALID_AUTHORIZATION, e.to_string()))
            }
        }
    }
}
