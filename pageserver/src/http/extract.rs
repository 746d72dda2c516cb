//! Request extractors whose failures are `ApiError`s (JSON `{"msg"}` with a
//! 400), never axum's plain-text rejections.
//!
//! - `JsonBody<T>`: the body as JSON, whatever the content type; an empty body
//!   reads as `null`, so `JsonBody<Option<T>>` accepts "no body", `null` and a
//!   `T`. Bounded by the router's `DefaultBodyLimit`.
//! - `TenantPath` / `TimelinePath`: the `{tenant_id}` / `{timeline_id}` route
//!   parameters parsed into ids.
//! - `QueryParams<T>`: the query string deserialized into `T`.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use utils::id::{TenantId, TimelineId};

use super::error::ApiError;

pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(rejection.body_text())
            } else {
                ApiError::BadRequest(format!("cannot read request body: {}", rejection.body_text()))
            }
        })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) { b"null" } else { &bytes };
        serde_json::from_slice(text)
            .map(JsonBody)
            .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))
    }
}

async fn path_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<String, ApiError> {
    let Path(params) = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
        .await
        .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
    params
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("route has no {{{name}}} parameter")))
}

pub fn parse_tenant_id(s: &str) -> Result<TenantId, ApiError> {
    s.parse().map_err(|e| ApiError::BadRequest(format!("tenant id: {e}")))
}

pub fn parse_timeline_id(s: &str) -> Result<TimelineId, ApiError> {
    s.parse().map_err(|e| ApiError::BadRequest(format!("timeline id: {e}")))
}

/// `{tenant_id}` of the route.
pub struct TenantPath(pub TenantId);

impl<S: Send + Sync> FromRequestParts<S> for TenantPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Ok(TenantPath(parse_tenant_id(&path_param(parts, state, "tenant_id").await?)?))
    }
}

/// `{tenant_id}` and `{timeline_id}` of the route.
pub struct TimelinePath(pub TenantId, pub TimelineId);

impl<S: Send + Sync> FromRequestParts<S> for TimelinePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let tenant = parse_tenant_id(&path_param(parts, state, "tenant_id").await?)?;
        let timeline = parse_timeline_id(&path_param(parts, state, "timeline_id").await?)?;
        Ok(TimelinePath(tenant, timeline))
    }
}

/// The query string as `T`.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(q) = Query::<T>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
        Ok(QueryParams(q))
    }
}
