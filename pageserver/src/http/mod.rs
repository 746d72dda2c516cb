//! The HTTP management API (axum on hyper) and `GET /metrics`.
//!
//! Contract (documented route by route in `docs/http-api.md` and, as a
//! checked schema, `docs/openapi.yaml`; the routes are the table [`ROUTES`]):
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
mod branches;
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
use axum::routing::{on, MethodFilter, MethodRouter};
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

/// One served route: a row of [`ROUTES`], the one list the router is built
/// from. `docs/openapi.yaml` describes the same (method, path) pairs; the
/// unit test `openapi_spec_matches_the_router` checks both directions.
pub struct Route {
    /// An HTTP method name (`"GET"`); valid, or `router` panics (a test builds it).
    pub method: &'static str,
    /// The axum path template (`{tenant_id}`, `{timeline_id}`).
    pub path: &'static str,
    /// The handler served on the method's filter (`axum::routing::on`).
    handler: fn(MethodFilter) -> MethodRouter<HttpState>,
    /// Largest request body (`DefaultBodyLimit`); a streamed body
    /// (`import_basebackup`) is not limited by it and has its own bounds.
    body_limit_bytes: usize,
}

impl Route {
    /// A management route: JSON bodies up to [`MAX_JSON_BODY_BYTES`].
    const fn json(
        method: &'static str,
        path: &'static str,
        handler: fn(MethodFilter) -> MethodRouter<HttpState>,
    ) -> Route {
        Route { method, path, handler, body_limit_bytes: MAX_JSON_BODY_BYTES }
    }

    /// A test-only route (batches of ingested values: larger bodies).
    #[cfg(feature = "testing")]
    const fn testing(
        method: &'static str,
        path: &'static str,
        handler: fn(MethodFilter) -> MethodRouter<HttpState>,
    ) -> Route {
        Route { method, path, handler, body_limit_bytes: MAX_TESTING_BODY_BYTES }
    }
}

/// Every route. `router` serves exactly these; start-up passes their
/// (method, path) pairs ([`route_list`]) to `metrics::register_all`, which
/// pre-registers their labels. A new route also needs its access decided
/// (`auth.rs` test) and its entry in `docs/openapi.yaml`.
pub const ROUTES: &[Route] = &[
    Route::json("GET", "/v1/status", |m| on(m, status)),
    Route::json("GET", "/metrics", |m| on(m, prometheus_metrics)),
    Route::json("GET", "/v1/io_engine", |m| on(m, io_engine::get)),
    Route::json("PUT", "/v1/io_engine", |m| on(m, io_engine::put)),
    Route::json("POST", "/v1/tenant", |m| on(m, tenants::create)),
    Route::json("GET", "/v1/tenant", |m| on(m, tenants::list)),
    Route::json("GET", "/v1/tenant/{tenant_id}", |m| on(m, tenants::get)),
    Route::json("DELETE", "/v1/tenant/{tenant_id}", |m| on(m, tenants::delete)),
    Route::json("PUT", "/v1/tenant/{tenant_id}/location_config", |m| on(m, location::put)),
    Route::json("POST", "/v1/tenant/{tenant_id}/timeline", |m| on(m, timelines::create)),
    Route::json("GET", "/v1/tenant/{tenant_id}/timeline", |m| on(m, timelines::list)),
    Route::json("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}", |m| on(m, timelines::get)),
    Route::json("DELETE", "/v1/tenant/{tenant_id}/timeline/{timeline_id}", |m| {
        on(m, timelines::delete)
    }),
    Route::json("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/keyspace", |m| {
        on(m, timelines::keyspace)
    }),
    Route::json("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/fullbackup", |m| {
        on(m, backup::fullbackup)
    }),
    Route::json("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/import_basebackup", |m| {
        on(m, timelines::import_basebackup)
    }),
    Route::json("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/checkpoint", |m| {
        on(m, timelines::checkpoint)
    }),
    Route::json("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/checkpoint", |m| {
        on(m, timelines::checkpoint)
    }),
    Route::json("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/source", |m| {
        on(m, timelines::set_source)
    }),
    Route::json("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/lsn_lease", |m| {
        on(m, timelines::lsn_lease)
    }),
    Route::json("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/compact", |m| {
        on(m, maintenance::compact)
    }),
    Route::json("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/do_gc", |m| {
        on(m, maintenance::do_gc)
    }),
    Route::json("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/get_lsn_by_timestamp", |m| {
        on(m, lsn_by_timestamp::get_lsn_by_timestamp)
    }),
    Route::json("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/get_timestamp_of_lsn", |m| {
        on(m, lsn_by_timestamp::get_timestamp_of_lsn)
    }),
    #[cfg(feature = "testing")]
    Route::testing("PUT", "/v1/failpoints", |m| on(m, testing::configure_failpoints)),
    #[cfg(feature = "testing")]
    Route::testing("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/ingest", |m| {
        on(m, testing::ingest)
    }),
    #[cfg(feature = "testing")]
    Route::testing("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/get", |m| {
        on(m, testing::get_value)
    }),
];

/// The (method, path) pairs of [`ROUTES`].
pub fn route_list() -> Vec<(&'static str, &'static str)> {
    ROUTES.iter().map(|r| (r.method, r.path)).collect()
}

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

/// The full API as a router (tests call it without a socket): every row of
/// [`ROUTES`], each with its own body limit; routes of one path share a
/// method router (axum merges them).
pub fn router(state: HttpState) -> Router {
    let mut r = Router::new();
    for route in ROUTES {
        let method: Method = route.method.parse().expect("ROUTES: an HTTP method name");
        let filter = MethodFilter::try_from(method).expect("ROUTES: a method axum can route");
        let handler = (route.handler)(filter).layer(DefaultBodyLimit::max(route.body_limit_bytes));
        r = r.route(route.path, handler);
    }
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
