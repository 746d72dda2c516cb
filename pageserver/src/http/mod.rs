//! The HTTP management API (axum on hyper) and `GET /metrics`.
//!
//! Contract (documented route by route in `docs/http-api.md`):
//! - with `http_auth_type = "jwt"` every route but the open ones
//!   (`/v1/status`, `/metrics`) needs a Bearer JWT whose scope covers it
//!   (`auth.rs`); with `"trust"` every route is open to anyone who can connect;
//! - JSON in and out; every error is `{"msg": "..."}` with a 4xx/5xx status
//!   (`error.rs`), including unknown routes (404) and wrong methods (405);
//! - request bodies are read as JSON whatever the content type, and a `null`
//!   or empty body is accepted wherever no body is needed (GET, DELETE) or
//!   every field is optional (creates) — Neon's clients send `null`;
//! - once the daemon's cancellation token fires, the server stops accepting
//!   connections and every new request except `/metrics` gets a 503; requests
//!   already running finish (the caller bounds how long it waits for them);
//! - every request is timed into `metrics::http` under its route template;
//!   requests other than GET are logged at INFO with status and duration,
//!   the path escaped and cut (a client's path cannot forge a log line);
//! - bounded: JSON bodies up to [`MAX_JSON_BODY_BYTES`] (413 beyond), at most
//!   `http_max_concurrent_requests` requests in flight (503 beyond), and the
//!   connection limits and timeouts of `server.rs`.

mod auth;
mod backup;
mod error;
mod extract;
mod io_engine;
mod location;
mod lsn_by_timestamp;
mod maintenance;
mod server;
mod tenants;
#[cfg(feature = "testing")]
mod testing;
mod timelines;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use pageserver_api::models::StatusResponse;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::info;
use utils::quote::{escape_for_log, quote};

pub use auth::OPENABLE_ROUTES;
pub use error::ApiError;
pub use server::HttpConf;

use crate::metrics;
use crate::tenant::mgr::TenantManager;
use crate::walreceiver::WalReceiverConf;

/// Largest JSON request body of the management routes. Streamed bodies
/// (`import_basebackup`) are not limited by this; they have their own bounds.
pub const MAX_JSON_BODY_BYTES: usize = 1024 * 1024;
/// Largest body of the test-only routes (batches of ingested values).
#[cfg(feature = "testing")]
const MAX_TESTING_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Characters of a request path shown in a log line.
const LOGGED_PATH_CHARS: usize = 256;

/// Every route as (method, template); start-up passes them to
/// `metrics::register_all`, which pre-registers their labels.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/status"),
    ("GET", "/metrics"),
    ("GET", "/v1/io_engine"),
    ("PUT", "/v1/io_engine"),
    ("POST", "/v1/tenant"),
    ("GET", "/v1/tenant"),
    ("GET", "/v1/tenant/{tenant_id}"),
    ("DELETE", "/v1/tenant/{tenant_id}"),
    ("PUT", "/v1/tenant/{tenant_id}/location_config"),
    ("POST", "/v1/tenant/{tenant_id}/timeline"),
    ("GET", "/v1/tenant/{tenant_id}/timeline"),
    ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}"),
    ("DELETE", "/v1/tenant/{tenant_id}/timeline/{timeline_id}"),
    ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/keyspace"),
    ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/fullbackup"),
    ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/import_basebackup"),
    ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/checkpoint"),
    ("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/checkpoint"),
    ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/source"),
    ("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/lsn_lease"),
    ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/compact"),
    ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/do_gc"),
    ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/get_lsn_by_timestamp"),
    ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/get_timestamp_of_lsn"),
    #[cfg(feature = "testing")]
    ("PUT", "/v1/failpoints"),
    #[cfg(feature = "testing")]
    ("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/ingest"),
    #[cfg(feature = "testing")]
    ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/get"),
];

/// Shared by all handlers; cheap to clone.
#[derive(Clone)]
pub struct HttpState {
    pub tenants: Arc<TenantManager>,
    /// The daemon's shutdown token: once cancelled, new requests get a 503.
    pub cancel: CancellationToken,
    /// One permit per request in flight (`http_max_concurrent_requests`).
    request_slots: Arc<Semaphore>,
    max_concurrent_requests: usize,
    /// Settings of the WAL receivers this API starts.
    pub walreceiver: Arc<WalReceiverConf>,
    /// How long a detach waits for its uploads (tests shorten it).
    pub detach_upload_timeout: std::time::Duration,
    /// `Some` with `http_auth_type = "jwt"`.
    auth: Option<Arc<auth::HttpAuth>>,
}

impl HttpState {
    pub fn new(tenants: Arc<TenantManager>, cancel: CancellationToken, conf: &HttpConf) -> Self {
        HttpState {
            tenants,
            cancel,
            request_slots: Arc::new(Semaphore::new(conf.max_concurrent_requests)),
            max_concurrent_requests: conf.max_concurrent_requests,
            walreceiver: Arc::new(WalReceiverConf::default()),
            detach_upload_timeout: crate::tenant::mgr::DETACH_UPLOAD_TIMEOUT,
            auth: conf.auth.as_ref().map(|jwt| {
                Arc::new(auth::HttpAuth {
                    jwt: Arc::clone(jwt),
                    open_routes: conf.auth_open_routes.clone(),
                })
            }),
        }
    }
}

/// The full API as a router (tests call it without a socket).
pub fn router(state: HttpState) -> Router {
    const TL: &str = "/v1/tenant/{tenant_id}/timeline/{timeline_id}";
    let r = Router::new()
        .route("/v1/status", get(status))
        .route("/metrics", get(prometheus_metrics))
        .route("/v1/io_engine", get(io_engine::get).put(io_engine::put))
        .route("/v1/tenant", post(tenants::create).get(tenants::list))
        .route("/v1/tenant/{tenant_id}", get(tenants::get).delete(tenants::delete))
        .route("/v1/tenant/{tenant_id}/location_config", axum::routing::put(location::put))
        .route("/v1/tenant/{tenant_id}/timeline", post(timelines::create).get(timelines::list))
        .route(TL, get(timelines::get).delete(timelines::delete))
        .route(&format!("{TL}/keyspace"), get(timelines::keyspace))
        .route(&format!("{TL}/fullbackup"), get(backup::fullbackup))
        .route(&format!("{TL}/import_basebackup"), axum::routing::put(timelines::import_basebackup))
        .route(
            &format!("{TL}/checkpoint"),
            axum::routing::put(timelines::checkpoint).post(timelines::checkpoint),
        )
        .route(&format!("{TL}/source"), axum::routing::put(timelines::set_source))
        .route(&format!("{TL}/lsn_lease"), post(timelines::lsn_lease))
        .route(&format!("{TL}/compact"), axum::routing::put(maintenance::compact))
        .route(&format!("{TL}/do_gc"), axum::routing::put(maintenance::do_gc))
        .route(&format!("{TL}/get_lsn_by_timestamp"), get(lsn_by_timestamp::get_lsn_by_timestamp))
        .route(&format!("{TL}/get_timestamp_of_lsn"), get(lsn_by_timestamp::get_timestamp_of_lsn));
    // The router-wide limit is set first (outermost); the testing routes'
    // own layer runs later and overrides it for them.
    let r = r.layer(DefaultBodyLimit::max(MAX_JSON_BODY_BYTES));
    #[cfg(feature = "testing")]
    let r = r.merge(
        Router::new()
            .route("/v1/failpoints", axum::routing::put(testing::configure_failpoints))
            .route(&format!("{TL}/testing/ingest"), post(testing::ingest))
            .route(&format!("{TL}/testing/get"), get(testing::get_value))
            .layer(DefaultBodyLimit::max(MAX_TESTING_BODY_BYTES)),
    );
    r.fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), auth::authenticate))
        .layer(middleware::from_fn_with_state(state.clone(), guard_and_measure))
        .with_state(state)
}

/// Serve the API on `listener` until `state.cancel` fires, then finish the
/// requests in flight. The caller bounds the wait for them.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    conf: HttpConf,
) -> std::io::Result<()> {
    let cancel = state.cancel.clone();
    match &state.auth {
        Some(auth) => info!(
            "HTTP API auth: jwt; open without a token: {}",
            if auth.open_routes.is_empty() {
                "none".to_string()
            } else {
                auth.open_routes.join(", ")
            }
        ),
        None => info!("HTTP API auth: trust (every route is open to anyone who can connect)"),
    }
    server::serve_connections(listener, router(state), &conf, cancel).await
}

/// Middleware: 503 during shutdown (except `/metrics`), then time the request.
async fn guard_and_measure(State(state): State<HttpState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| metrics::http::UNMATCHED_ROUTE.to_string());
    let method = req.method().clone();
    let path = escape_for_log(req.uri().path(), LOGGED_PATH_CHARS).to_string();
    let start = Instant::now();
    let slot = state.request_slots.clone().try_acquire_owned();
    let response = if state.cancel.is_cancelled() && route != "/metrics" {
        ApiError::ShuttingDown.into_response()
    } else if slot.is_err() {
        ApiError::Overloaded(format!(
            "too many HTTP requests in flight: at most {} (http_max_concurrent_requests)",
            state.max_concurrent_requests
        ))
        .into_response()
    } else {
        next.run(req).await
    };
    drop(slot);
    let elapsed = start.elapsed();
    let status = response.status().as_u16();
    metrics::http::record_request(method.as_str(), &route, status, elapsed);
    // Requests that change state are worth a line each; reads and scrapes are not.
    if method != Method::GET {
        info!(%method, %path, status, elapsed_ms = elapsed.as_millis() as u64, "HTTP request");
    }
    response
}

/// `GET /v1/status`.
async fn status() -> Json<StatusResponse> {
    Json(StatusResponse {
        status: "ok".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// `GET /metrics`: the default Prometheus registry in text format.
async fn prometheus_metrics(State(state): State<HttpState>) -> Result<Response, ApiError> {
    crate::walreceiver::refresh_metrics(&state.tenants);
    crate::metrics::storage::refresh_lease_count(&state.tenants);
    crate::metrics::compaction::refresh_layer_counts(&state.tenants);
    crate::metrics::remote::refresh(&state.tenants);
    let in_flight = state.tenants.conf().io_engine.in_flight_ops();
    crate::metrics::storage::IO_ENGINE_IN_FLIGHT_OPS.set(in_flight as i64);
    let text = metrics::encode_text().map_err(ApiError::Internal)?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

async fn unknown_route(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {method} {}", quote(uri.path())))
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("method {method} not allowed on {}", quote(uri.path())))
}
