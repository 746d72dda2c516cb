//! The page service: a libpq listener that serves pages to PostgreSQL computes
//! over the pagestream sub-protocol (v2 and v3), byte-compatible with Neon's
//! compute and pagebench. See `docs/page-service.md` and `docs/protocol.md`.
//!
//! Files:
//! - libpq framing and messages: `libs/pq_proto` (server side);
//! - JWT validation and per-tenant permission checks: `crate::auth` (shared
//!   with the HTTP API);
//! - `connection`: one session: startup, auth, then message routing and the
//!   one command dispatch of both query protocols (`connection/dispatch`);
//! - `command`: the commands, parsed from query text, with their result shape;
//! - `extended`: prepared statements and portals of the extended query protocol;
//! - `backup`: the `basebackup`/`fullbackup` commands (COPY OUT of a tar);
//! - `stream`: one pagestream: request reading, end conditions, mode dispatch;
//! - `serial` / `pipelined`: the two handler modes (the reader/executor
//!   contract is documented at the top of `pipelined`);
//! - `batch`: LSN validation, effective LSN, batch folding rules;
//! - `execute`: executing work against the timeline, encoding responses;
//! - `error`: `PageStreamError` (per request) and `QueryError` (per command/stream);
//! - `threads`: the connection threads (`page_service_threads`), one
//!   current-thread runtime each; a connection stays on one.
//!
//! Lifecycle invariants:
//! - every connection runs in a task of this service's `TaskTracker` with a
//!   child token of the service's `cancel`, on one of its connection threads
//!   (refusals at the connection limit run on the caller's runtime);
//! - [`page_service_main`] returns only after the listener is closed and every
//!   connection task has ended, or after [`CONNECTION_SHUTDOWN_TIMEOUT`]
//!   (logged); connections observe cancellation at every socket operation and
//!   every wait, so the timeout is a safety net, not the expected path.

mod backup;
mod batch;
mod command;
mod connection;
mod error;
mod execute;
mod extended;
mod pipelined;
mod request;
mod serial;
mod stream;
mod threads;

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pageserver_api::config::PageServicePipeliningConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

pub use crate::auth::{check_permission, AuthError, Claims, JwtAuth};
pub use batch::effective_lsn;
pub use error::{PageStreamError, QueryError};
pub use pq_proto::MAX_MESSAGE_LEN;

use crate::metrics;
use crate::metrics::page_service::METRICS;
use crate::tenant::mgr::TenantManager;
use pageserver_api::config::AuthType;

/// Refusals (at the connection limit) in progress at once; see the accept loop.
const MAX_CONCURRENT_REFUSALS: usize = 16;

/// How long [`page_service_main`] waits for connections to end on shutdown.
pub const CONNECTION_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Page service configuration, built by the daemon from the TOML config
/// (`page_service_pipelining`, `pg_auth_type`, `auth_validation_public_key_path`).
#[derive(Debug, Clone)]
pub struct PageServiceConf {
    pub pipelining: PageServicePipeliningConfig,
    pub auth_type: AuthType,
    /// Ed25519 public key (PEM); required when `auth_type` is `Jwt`.
    pub auth_validation_public_key_path: Option<PathBuf>,
    /// From accept to authenticated; the connection is closed after it.
    pub authentication_timeout: Duration,
    /// Connections served at once; one more is refused with SQLSTATE 53300.
    pub max_connections: usize,
    /// Connection threads (`page_service_threads`; default: one per CPU;
    /// 0: connections are tasks of the daemon's runtime).
    pub threads: usize,
    /// The benchmark floor (`page_service_constant_pages`): every GetPage
    /// is answered with [`execute::CONSTANT_PAGE`], no storage read.
    pub constant_pages: bool,
}

/// One connection thread per CPU.
pub fn default_threads() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

impl Default for PageServiceConf {
    /// Pipelined (32, concurrent-futures, scattered-lsn), trust auth,
    /// 10 s to authenticate, 1000 connections, a thread per CPU.
    fn default() -> Self {
        PageServiceConf {
            pipelining: PageServicePipeliningConfig::default(),
            auth_type: AuthType::Trust,
            auth_validation_public_key_path: None,
            authentication_timeout: Duration::from_secs(10),
            max_connections: 1000,
            threads: default_threads().get(),
            constant_pages: false,
        }
    }
}

impl PageServiceConf {
    /// Start-up check: a batch must fit in one vectored get, and JWT auth
    /// needs a key. The message names the offending config key.
    pub fn validate(&self, max_get_vectored_keys: usize) -> Result<(), String> {
        if let PageServicePipeliningConfig::Pipelined(p) = &self.pipelining {
            if p.max_batch_size.get() > max_get_vectored_keys {
                return Err(format!(
                    "page_service_pipelining: max_batch_size {} exceeds max_get_vectored_keys {}",
                    p.max_batch_size, max_get_vectored_keys
                ));
            }
        }
        if self.auth_type == AuthType::Jwt && self.auth_validation_public_key_path.is_none() {
            return Err(
                "auth_validation_public_key_path: required when pg_auth_type = \"jwt\"".to_string()
            );
        }
        Ok(())
    }

    /// Loads the JWT key when `auth_type` is `Jwt`.
    pub fn load_auth(&self) -> anyhow::Result<Option<Arc<JwtAuth>>> {
        match self.auth_type {
            AuthType::Trust => Ok(None),
            AuthType::Jwt => {
                let path = self
                    .auth_validation_public_key_path
                    .as_deref()
                    .context("pg_auth_type = \"jwt\" needs auth_validation_public_key_path")?;
                Ok(Some(Arc::new(JwtAuth::from_key_path(path)?)))
            }
        }
    }
}

/// What every connection shares.
struct ServiceState {
    conf: Arc<PageServiceConf>,
    tenants: Arc<TenantManager>,
    /// `Some` iff JWT auth.
    auth: Option<Arc<JwtAuth>>,
}

/// Accepts page service connections on `listener` until `cancel`, then ends
/// every connection (bounded by [`CONNECTION_SHUTDOWN_TIMEOUT`]) and returns.
/// Fails at once if the configuration is unusable (validate, JWT key).
pub async fn page_service_main(
    conf: Arc<PageServiceConf>,
    tenants: Arc<TenantManager>,
    listener: TcpListener,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    conf.validate(tenants.conf().max_get_vectored_keys).map_err(anyhow::Error::msg)?;
    let auth = conf.load_auth()?;
    metrics::page_service::register();
    metrics::page_service::set_config(&conf.pipelining);
    let threads = threads::ConnectionThreads::start(conf.threads)
        .context("cannot start the page service's connection threads")?;
    let slots = Arc::new(Semaphore::new(conf.max_connections));
    let state = Arc::new(ServiceState { conf, tenants, auth });
    let connections = TaskTracker::new();
    let refusals = Arc::new(Semaphore::new(MAX_CONCURRENT_REFUSALS));
    info!(
        "page service listening on {} ({:?}, auth {:?}, {} connection threads)",
        listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        state.conf.pipelining,
        state.conf.auth_type,
        state.conf.threads
    );

    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((socket, peer)) => match Arc::clone(&slots).try_acquire_owned() {
                Ok(slot) => {
                    let (state, cancel) = (Arc::clone(&state), cancel.child_token());
                    threads.spawn(&connections, socket, move |socket| async move {
                        connection::serve(socket, peer, state, cancel).await;
                        drop(slot);
                    });
                }
                Err(_) => {
                    METRICS.refused_connections.inc();
                    let limit = state.conf.max_connections;
                    debug!("refusing page service connection from {peer}: {limit} open");
                    // Each refusal holds its socket for up to a second; beyond
                    // MAX_CONCURRENT_REFUSALS of them the socket is just closed.
                    if let Ok(permit) = Arc::clone(&refusals).try_acquire_owned() {
                        connections.spawn(async move {
                            connection::refuse_too_many(socket, limit).await;
                            drop(permit);
                        });
                    }
                }
            },
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!("page service accept failed: {e}");
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    }
    drop(listener);
    connections.close();
    info!("page service stopping: waiting for {} connections", connections.len());
    if tokio::time::timeout(CONNECTION_SHUTDOWN_TIMEOUT, connections.wait()).await.is_err() {
        warn!(
            "{} page service connections did not end within {CONNECTION_SHUTDOWN_TIMEOUT:?}",
            connections.len()
        );
    }
    threads.shut_down().await;
    info!("page service stopped");
    Ok(())
}
