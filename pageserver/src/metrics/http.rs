//! Management API metrics, recorded by a middleware in `http/mod.rs`.
//!
//! - `pageserver_http_request_seconds{method, route}`: time from the request
//!   reaching the router to the response head being ready (a streamed import
//!   counts in full: its handler consumes the body). `route` is the route
//!   template (`/v1/tenant/{tenant_id}`), never the raw path, so the label set
//!   is bounded; unmatched paths are counted as `route="unmatched"`.
//! - `pageserver_http_responses_total{status_class}`: responses by `2xx`,
//!   `4xx`, `5xx` (and `other`).
//!
//! `register(routes)` pre-creates the label values of every route it is
//! given (the API's route table), so each route appears from the first scrape.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{register_histogram_vec, register_int_counter_vec, HistogramVec, IntCounterVec};

use super::SLOW_SECONDS_BUCKETS;

pub static HTTP_REQUEST_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "pageserver_http_request_seconds",
        "Management API request handling time by method and route template",
        &["method", "route"],
        SLOW_SECONDS_BUCKETS.to_vec()
    )
    .expect("register metric")
});

pub static HTTP_RESPONSES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_http_responses_total",
        "Management API responses by status class",
        &["status_class"]
    )
    .expect("register metric")
});

const STATUS_CLASSES: [&str; 4] = ["2xx", "4xx", "5xx", "other"];

/// Route label for requests that matched no route.
pub const UNMATCHED_ROUTE: &str = "unmatched";

pub fn register(routes: &[(&str, &str)]) {
    for (method, route) in routes {
        HTTP_REQUEST_SECONDS.with_label_values(&[method, route]);
    }
    for class in STATUS_CLASSES {
        HTTP_RESPONSES.with_label_values(&[class]);
    }
}

pub fn record_request(method: &str, route: &str, status: u16, elapsed: Duration) {
    HTTP_REQUEST_SECONDS.with_label_values(&[method, route]).observe(elapsed.as_secs_f64());
    let class = match status {
        200..=299 => "2xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    };
    HTTP_RESPONSES.with_label_values(&[class]).inc();
}
