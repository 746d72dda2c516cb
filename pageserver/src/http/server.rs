//! The HTTP listener: accepts connections up to a limit and serves each with
//! hyper's HTTP/1 connection driver, under the request-header timeout.
//!
//! Bounds (config keys in brackets, `docs/configuration.md`):
//! - connections [`http_max_connections`]: one more is answered with a 503
//!   and closed at once, so an idle crowd cannot take every descriptor;
//! - request headers must arrive within [`http_header_read_timeout`], counted
//!   from when the connection starts waiting for a request (idle keep-alive
//!   connections included), else hyper closes the connection;
//! - each piece of a request body must arrive within [`http_body_read_timeout`]
//!   (`tower_http`'s body timeout, reset by every chunk, so a long import that
//!   keeps sending is not cut);
//! - requests in flight [`http_max_concurrent_requests`]: enforced by the
//!   router's middleware (`mod.rs`), a 503 beyond it.
//!
//! Shutdown: when `cancel` fires the listener closes, every connection is
//! told to finish its current request and close, and `serve` returns once
//! they have; the caller bounds that wait.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::auth::JwtAuth;

/// Limits of the HTTP server, from the daemon's config.
#[derive(Debug, Clone)]
pub struct HttpConf {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_connections: usize,
    pub max_concurrent_requests: usize,
    /// `Some` with `http_auth_type = "jwt"`: the key that checks tokens.
    pub auth: Option<Arc<JwtAuth>>,
    /// Routes that need no token when `auth` is set (`http_auth_open_routes`).
    pub auth_open_routes: Vec<String>,
}

impl Default for HttpConf {
    /// The built-in defaults of the config keys.
    fn default() -> Self {
        HttpConf {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            max_connections: 256,
            max_concurrent_requests: 64,
            auth: None,
            auth_open_routes: super::OPENABLE_ROUTES.iter().map(|r| r.to_string()).collect(),
        }
    }
}

/// Serve `app` on `listener` until `cancel` fires, then let the requests in
/// flight finish and return.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    conf: &HttpConf,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(conf.body_read_timeout));
    let slots = Arc::new(Semaphore::new(conf.max_connections));
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => r,
        };
        let (socket, peer) = match accepted {
            Ok(v) => v,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!("HTTP accept failed: {e}");
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            debug!(
                "refusing HTTP connection from {peer}: {} connections open",
                conf.max_connections
            );
            refuse(&socket, conf.max_connections);
            continue;
        };
        let (app, conf, cancel) = (app.clone(), conf.clone(), cancel.clone());
        connections.spawn(async move {
            serve_one(socket, app, &conf, cancel).await;
            drop(slot);
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

async fn serve_one(socket: TcpStream, app: Router, conf: &HttpConf, cancel: CancellationToken) {
    let service = TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(conf.header_read_timeout);
    let conn = builder.serve_connection(TokioIo::new(socket), service);
    tokio::pin!(conn);
    let res = tokio::select! {
        r = conn.as_mut() => r,
        _ = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = res {
        debug!("HTTP connection ended: {e}");
    }
}

/// A best-effort 503 on a fresh socket (its send buffer is empty, so one
/// non-blocking write takes it all), then close.
fn refuse(socket: &TcpStream, limit: usize) {
    let body = format!(
        "{{\"msg\":\"too many HTTP connections: at most {limit} (http_max_connections)\"}}"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.try_write(response.as_bytes());
}
