//! Authentication of HTTP requests (`http_auth_type = "jwt"`).
//!
//! With `"trust"` (the default) this layer does nothing: anyone who can reach
//! `listen_http_addr` may use every route, full database contents included
//! (`fullbackup`). With `"jwt"` every request carries
//! `Authorization: Bearer <JWT>`, checked by `crate::auth` (the page
//! service's validation: same key, same claims), and each route needs one of
//! three [`Access`] levels, decided by [`required_access`] from the matched
//! route template and method:
//! - [`Access::Open`]: the routes of `http_auth_open_routes` (by default
//!   `/v1/status` and `/metrics`; only those two can be opened);
//! - [`Access::Tenant`]: routes about one tenant's data (`/v1/tenant/{tenant_id}`
//!   and below): scope `pageserverapi`, or scope `tenant` for that tenant;
//! - [`Access::Management`]: everything else (the tenant list, creating,
//!   deleting, attaching and detaching tenants, the IO engine, the testing
//!   routes, unknown routes): scope `pageserverapi` only. Deleting and
//!   `location_config` are management although their path names a tenant: a
//!   tenant token is what a compute holds, and a compute must not remove or
//!   move its tenant (Neon lets a tenant token do both).
//!
//! Outcomes: no usable token is a 401 naming why (no header, not `Bearer`,
//! bad signature, expired, ...) with `WWW-Authenticate: Bearer`; a valid token
//! without the access is a 403 naming the tenant it grants (or its scope,
//! when that is neither of ours). Both in the API's `{"msg"}` shape, logged
//! at INFO and counted in the request metrics like any response. The check
//! runs after routing and before the handler, so a refused request changes
//! nothing.

use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::extract::TenantPath;
use super::HttpState;
use crate::auth::{check_management_permission, check_permission, AuthError, JwtAuth};

/// Routes that `http_auth_open_routes` may list: they carry no page data
/// (`/metrics` does carry tenant and timeline ids as labels).
pub const OPENABLE_ROUTES: &[&str] = &["/v1/status", "/metrics"];

/// The token checker and the open routes, shared by every request.
#[derive(Debug)]
pub struct HttpAuth {
    pub jwt: Arc<JwtAuth>,
    pub open_routes: Vec<String>,
}

/// What a route needs from the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Open,
    Tenant,
    Management,
}

/// The access `method` on the route template `route` needs (`None`: no route
/// matched, a 404 to be: management, so probing for routes needs a token).
/// A route added to `ROUTES` fails the unit test below until its access is
/// written down there.
pub fn required_access(method: &Method, route: Option<&str>, open_routes: &[String]) -> Access {
    const TENANT: &str = "/v1/tenant/{tenant_id}";
    let Some(route) = route else { return Access::Management };
    if open_routes.iter().any(|r| r == route) {
        return Access::Open;
    }
    let lifecycle = (*method == Method::DELETE && route == TENANT)
        || route == "/v1/tenant/{tenant_id}/location_config"
        || route.contains("/testing/");
    let of_one_tenant = route == TENANT || route.starts_with("/v1/tenant/{tenant_id}/");
    if of_one_tenant && !lifecycle {
        Access::Tenant
    } else {
        Access::Management
    }
}

/// Middleware: refuses a request whose token does not grant its route.
pub async fn authenticate(State(state): State<HttpState>, req: Request, next: Next) -> Response {
    let Some(auth) = state.auth.as_deref() else {
        return next.run(req).await;
    };
    match authorize(auth, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn authorize(auth: &HttpAuth, req: Request) -> Result<Request, ApiError> {
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str());
    let access = required_access(req.method(), route, &auth.open_routes);
    if access == Access::Open {
        return Ok(req);
    }
    let claims = auth.jwt.verify(bearer_token(req.headers())?).map_err(unauthorized)?;
    if access == Access::Management {
        check_management_permission(&claims).map_err(forbidden)?;
        return Ok(req);
    }
    let (mut parts, body) = req.into_parts();
    let TenantPath(tenant) = TenantPath::from_request_parts(&mut parts, &()).await?;
    check_permission(&claims, tenant).map_err(forbidden)?;
    Ok(Request::from_parts(parts, body))
}

/// The token of `Authorization: Bearer <token>`.
fn bearer_token(headers: &HeaderMap) -> Result<&str, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::Unauthorized(
            "no Authorization header: this API needs 'Authorization: Bearer <JWT>' \
             (http_auth_type = \"jwt\")"
                .to_string(),
        ));
    };
    let not_bearer =
        || ApiError::Unauthorized("the Authorization header is not 'Bearer <JWT>'".to_string());
    let value = value.to_str().map_err(|_| not_bearer())?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(not_bearer()),
    }
}

fn unauthorized(e: AuthError) -> ApiError {
    ApiError::Unauthorized(e.0)
}

fn forbidden(e: AuthError) -> ApiError {
    ApiError::Forbidden(e.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route's access, written out: adding a route to `ROUTES` fails
    /// this test until its access is decided here.
    #[test]
    fn every_route_has_the_intended_access() {
        use Access::*;
        let expected: &[(&str, &str, Access)] = &[
            ("GET", "/v1/status", Open),
            ("GET", "/metrics", Open),
            ("GET", "/v1/io_engine", Management),
            ("PUT", "/v1/io_engine", Management),
            ("POST", "/v1/tenant", Management),
            ("GET", "/v1/tenant", Management),
            ("GET", "/v1/tenant/{tenant_id}", Tenant),
            ("DELETE", "/v1/tenant/{tenant_id}", Management),
            ("PUT", "/v1/tenant/{tenant_id}/location_config", Management),
            ("POST", "/v1/tenant/{tenant_id}/timeline", Tenant),
            ("GET", "/v1/tenant/{tenant_id}/timeline", Tenant),
            ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}", Tenant),
            ("DELETE", "/v1/tenant/{tenant_id}/timeline/{timeline_id}", Tenant),
            ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/keyspace", Tenant),
            ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/fullbackup", Tenant),
            ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/import_basebackup", Tenant),
            ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/checkpoint", Tenant),
            ("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/checkpoint", Tenant),
            ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/source", Tenant),
            ("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/lsn_lease", Tenant),
            ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/compact", Tenant),
            ("PUT", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/do_gc", Tenant),
            ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/get_lsn_by_timestamp", Tenant),
            ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/get_timestamp_of_lsn", Tenant),
            ("PUT", "/v1/failpoints", Management),
            ("POST", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/ingest", Management),
            ("GET", "/v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/get", Management),
        ];
        let open: Vec<String> = OPENABLE_ROUTES.iter().map(|r| r.to_string()).collect();
        for (method, route) in super::super::route_list() {
            let Some((_, _, want)) = expected.iter().find(|(m, r, _)| *m == method && *r == route)
            else {
                panic!("{method} {route}: decide its access in this test");
            };
            let got = required_access(&method.parse().unwrap(), Some(route), &open);
            assert_eq!(got, *want, "{method} {route}");
        }
        // No matched route: closed.
        assert_eq!(required_access(&Method::GET, None, &open), Management);
        // Closing the open routes makes them management routes.
        assert_eq!(required_access(&Method::GET, Some("/metrics"), &[]), Management);
        assert_eq!(required_access(&Method::GET, Some("/v1/status"), &[]), Management);
    }

    #[test]
    fn bearer_header_forms() {
        let headers = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        assert_eq!(bearer_token(&headers("Bearer abc")).unwrap(), "abc");
        assert_eq!(bearer_token(&headers("bearer  abc ")).unwrap(), "abc");
        for bad in ["Basic abc", "Bearer", "Bearer  ", "abc"] {
            let err = bearer_token(&headers(bad)).unwrap_err();
            assert!(err.to_string().contains("not 'Bearer <JWT>'"), "{bad}: {err}");
        }
        let err = bearer_token(&HeaderMap::new()).unwrap_err();
        assert!(err.to_string().contains("no Authorization header"), "{err}");
    }
}
