//! `ApiError`: the one error type of the management API and its mapping to
//! HTTP status codes. Every error response is `{"msg": "..."}`.
//!
//! Mapping (the contract documented in `docs/http-api.md`):
//! 400 bad id / LSN / key / body, 401 no valid token, 403 a token without the
//! access, 404 unknown tenant / timeline / key,
//! 409 already exists or a conflict (generations), 503 shutting down, busy,
//! uploads not finished or an attach from an incomplete remote copy, 500
//! anything else.
//!
//! Messages are escaped and cut to [`MAX_ERROR_MESSAGE_CHARS`].
//!
//! Logging: an error is logged once, here, where it becomes a response:
//! 5xx at ERROR (it is our fault), 4xx at INFO (it is the client's).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pageserver_api::models::HttpErrorBody;
use tracing::{error, info};
use utils::quote::escape_for_log;

use crate::import::ImportError;
use crate::pgdatadir_mapping::DatadirError;
use crate::tenant::mgr::LocationError;
use crate::tenant::{GetVectoredError, PageReconstructError, TenantError};
use crate::walreceiver::bootstrap::BootstrapError;

/// Longest error message sent or logged, in characters.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// No token, or one that proves nothing (`http_auth_type = "jwt"`).
    #[error("{0}")]
    Unauthorized(String),
    /// A valid token that does not grant the route.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    RequestTimeout(String),
    #[error("pageserver is shutting down")]
    ShuttingDown,
    /// A limit on concurrent work was reached; retry later (503).
    #[error("{0}")]
    Overloaded(String),
    /// The object is stopping (a timeline being deleted or detached), the
    /// daemon is not; or remote storage lacks objects an attach needs (503).
    #[error("{0}")]
    Unavailable(String),
    /// Each cause of the chain once (`utils::error::report`).
    #[error("{}", utils::error::report_anyhow(.0))]
    Internal(anyhow::Error),
}

impl ApiError {
    /// The same error with `note` after its message (an error without a
    /// message of its own stays as it is).
    pub fn with_note(self, note: &str) -> ApiError {
        let add = |m: String| format!("{m}; {note}");
        match self {
            ApiError::BadRequest(m) => ApiError::BadRequest(add(m)),
            ApiError::Unauthorized(m) => ApiError::Unauthorized(add(m)),
            ApiError::Forbidden(m) => ApiError::Forbidden(add(m)),
            ApiError::NotFound(m) => ApiError::NotFound(add(m)),
            ApiError::Conflict(m) => ApiError::Conflict(add(m)),
            ApiError::MethodNotAllowed(m) => ApiError::MethodNotAllowed(add(m)),
            ApiError::PayloadTooLarge(m) => ApiError::PayloadTooLarge(add(m)),
            ApiError::RequestTimeout(m) => ApiError::RequestTimeout(add(m)),
            ApiError::Overloaded(m) => ApiError::Overloaded(add(m)),
            ApiError::Unavailable(m) => ApiError::Unavailable(add(m)),
            ApiError::Internal(e) => ApiError::Internal(anyhow::anyhow!("{e:#}; {note}")),
            ApiError::ShuttingDown => ApiError::ShuttingDown,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::ShuttingDown | ApiError::Overloaded(_) | ApiError::Unavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        // Messages quote client values with a bounded prefix; this bound is
        // the safety net for a source that does not (serde's own messages
        // quote a whole invalid string value).
        let msg = escape_for_log(&self.to_string(), MAX_ERROR_MESSAGE_CHARS).to_string();
        if status.is_server_error()
            && !matches!(
                self,
                ApiError::ShuttingDown | ApiError::Overloaded(_) | ApiError::Unavailable(_)
            )
        {
            error!(status = status.as_u16(), "HTTP request failed: {msg}");
        } else {
            info!(status = status.as_u16(), "HTTP request rejected: {msg}");
        }
        let mut response = (status, Json(HttpErrorBody { msg })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 6750: a 401 names the scheme the client should use.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<TenantError> for ApiError {
    fn from(e: TenantError) -> ApiError {
        match e {
            TenantError::NotFound(_) => ApiError::NotFound(e.to_string()),
            TenantError::AlreadyExists(_) | TenantError::Conflict(_) => {
                ApiError::Conflict(e.to_string())
            }
            TenantError::InvalidArgument(_) => ApiError::BadRequest(e.to_string()),
            TenantError::ShuttingDown => ApiError::ShuttingDown,
            TenantError::Busy(_) => ApiError::Overloaded(e.to_string()),
            TenantError::Activating { .. } => ApiError::Unavailable(e.to_string()),
            TenantError::Broken { .. } | TenantError::TimelineBroken { .. } => {
                ApiError::Conflict(e.to_string())
            }
            TenantError::Other(e) => ApiError::Internal(e),
        }
    }
}

impl From<LocationError> for ApiError {
    fn from(e: LocationError) -> ApiError {
        match e {
            LocationError::NoRemoteStorage => ApiError::BadRequest(e.to_string()),
            LocationError::Conflict(m) => ApiError::Conflict(m),
            LocationError::NotUploaded { .. } => ApiError::Overloaded(e.to_string()),
            // Nothing conflicts in the request and nothing is wrong with
            // it: the store lacks objects, which may come back (the uploader
            // uploads them again), and the same request may then succeed.
            LocationError::RemoteIncomplete { .. } => ApiError::Unavailable(e.to_string()),
            LocationError::Tenant(e) => e.into(),
            LocationError::Other(e) => ApiError::Internal(e),
        }
    }
}

impl From<ImportError> for ApiError {
    fn from(e: ImportError) -> ApiError {
        match e {
            ImportError::BadTar(_) => ApiError::BadRequest(e.to_string()),
            ImportError::AlreadyExists(_) => ApiError::Conflict(e.to_string()),
            ImportError::Tenant(e) => e.into(),
            ImportError::BodyRead { timed_out: true, .. } => {
                ApiError::RequestTimeout(e.to_string())
            }
            ImportError::BodyRead { .. } => ApiError::BadRequest(e.to_string()),
            ImportError::Other(e) => ApiError::Internal(e),
        }
    }
}

impl From<BootstrapError> for ApiError {
    fn from(e: BootstrapError) -> ApiError {
        match e {
            BootstrapError::Refused(m) => ApiError::BadRequest(m),
            BootstrapError::Slot(m) => ApiError::Conflict(m),
            BootstrapError::Import(e) => e.into(),
            BootstrapError::Other(e) => ApiError::Internal(e),
            // Whatever failed, a slot is left on the primary: a server-side
            // state the message names.
            e @ BootstrapError::AfterSlot { left: true, .. } => {
                ApiError::Internal(anyhow::anyhow!("{e}"))
            }
            BootstrapError::AfterSlot { error, note, left: false } => {
                ApiError::from(*error).with_note(&note)
            }
        }
    }
}

impl From<GetVectoredError> for ApiError {
    fn from(e: GetVectoredError) -> ApiError {
        match e {
            GetVectoredError::TooManyKeys { .. } => ApiError::BadRequest(e.to_string()),
            GetVectoredError::Cancelled => ApiError::ShuttingDown,
        }
    }
}

impl From<PageReconstructError> for ApiError {
    fn from(e: PageReconstructError) -> ApiError {
        match e {
            PageReconstructError::MissingKey { .. } => ApiError::NotFound(e.to_string()),
            PageReconstructError::GarbageCollected { .. } => ApiError::BadRequest(e.to_string()),
            _ => ApiError::Internal(anyhow::Error::new(e)),
        }
    }
}

impl From<DatadirError> for ApiError {
    fn from(e: DatadirError) -> ApiError {
        match e {
            DatadirError::GetVectored(e) => e.into(),
            other => ApiError::Internal(anyhow::Error::new(other)),
        }
    }
}
