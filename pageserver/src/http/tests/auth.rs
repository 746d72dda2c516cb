//! `http_auth_type = "jwt"` over a real socket: 401 without a usable token
//! (naming why), 403 for a token of another tenant or of tenant scope on a
//! management route (naming the tenant), the open routes, and that a refused
//! request changes nothing.

use std::sync::Arc;

use pageserver_api::models::HttpErrorBody;
use reqwest::{Method, StatusCode};
use serde_json::json;
use utils::id::{TenantId, TimelineId};

use super::TestServer;
use crate::auth::test_keys::{sign, PRIVATE_A, PRIVATE_B, PUBLIC_A};
use crate::auth::JwtAuth;
use crate::http::HttpConf;

fn tenant_token(t: TenantId) -> String {
    sign(PRIVATE_A, json!({"scope": "tenant", "tenant_id": t.to_string()}))
}

async fn start(open_routes: &[&str]) -> TestServer {
    let conf = HttpConf {
        auth: Some(Arc::new(JwtAuth::from_pem(PUBLIC_A.as_bytes()).unwrap())),
        auth_open_routes: open_routes.iter().map(|r| r.to_string()).collect(),
        ..HttpConf::default()
    };
    TestServer::start_with(conf).await
}

/// Sends `method path` with `token` (none: no Authorization header) and a `null` body.
async fn send(
    s: &TestServer,
    method: Method,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, String, reqwest::header::HeaderMap) {
    let mut req = s.client.request(method, format!("{}{path}", s.base)).body("null");
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    (status, resp.text().await.unwrap(), headers)
}

/// Asserts `status` with a `{"msg"}` body containing `needle`.
async fn refused(
    s: &TestServer,
    method: Method,
    path: &str,
    token: Option<&str>,
    status: StatusCode,
    needle: &str,
) {
    let (got, body, headers) = send(s, method.clone(), path, token).await;
    assert_eq!(got, status, "{method} {path}: {body}");
    let err: HttpErrorBody = serde_json::from_str(&body).unwrap();
    assert!(err.msg.contains(needle), "{method} {path}: '{}' lacks '{needle}'", err.msg);
    if status == StatusCode::UNAUTHORIZED {
        assert_eq!(headers["www-authenticate"], "Bearer");
    }
}

async fn ok(s: &TestServer, method: Method, path: &str, token: Option<&str>) -> String {
    let (status, body, _) = send(s, method.clone(), path, token).await;
    assert!(status.is_success(), "{method} {path}: {status} {body}");
    body
}

#[tokio::test]
async fn routes_need_a_token_of_their_scope() {
    let s = start(crate::http::OPENABLE_ROUTES).await;
    let admin = sign(PRIVATE_A, json!({"scope": "pageserverapi"}));
    let (a, b) = (TenantId::generate(), TenantId::generate());
    for t in [a, b] {
        let body = format!("{{\"new_tenant_id\": \"{t}\"}}");
        let resp = s
            .client
            .post(format!("{}/v1/tenant", s.base))
            .bearer_auth(&admin)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    let tl = TimelineId::generate();
    let timeline = format!("/v1/tenant/{a}/timeline/{tl}");
    let unauth = StatusCode::UNAUTHORIZED;

    // No token, or one that proves nothing: 401 naming why, nothing done.
    refused(&s, Method::DELETE, &format!("/v1/tenant/{a}"), None, unauth, "no Authorization").await;
    refused(&s, Method::GET, &format!("{timeline}/fullbackup"), None, unauth, "no Authorization")
        .await;
    refused(&s, Method::GET, "/v1/nope", None, unauth, "no Authorization").await;
    let wrong_key = sign(PRIVATE_B, json!({"scope": "pageserverapi"}));
    refused(&s, Method::GET, "/v1/tenant", Some(&wrong_key), unauth, "bad signature").await;
    let expired = sign(PRIVATE_A, json!({"scope": "pageserverapi", "exp": 1000}));
    refused(&s, Method::GET, "/v1/tenant", Some(&expired), unauth, "expired").await;
    // A signed token of a scope that is not ours proves who sent it: 403.
    let foreign = sign(PRIVATE_A, json!({"scope": "safekeeperdata"}));
    refused(&s, Method::GET, "/v1/tenant", Some(&foreign), StatusCode::FORBIDDEN, "not accepted")
        .await;
    let (status, _, _) = send(&s, Method::GET, &format!("/v1/tenant/{a}"), Some(&admin)).await;
    assert_eq!(status, StatusCode::OK, "the refused DELETE deleted nothing");

    // A token of tenant b on tenant a: 403 naming both.
    let forbidden = StatusCode::FORBIDDEN;
    let tb = tenant_token(b);
    refused(&s, Method::GET, &format!("/v1/tenant/{a}"), Some(&tb), forbidden, &b.to_string())
        .await;
    refused(
        &s,
        Method::POST,
        &format!("/v1/tenant/{a}/timeline"),
        Some(&tb),
        forbidden,
        "mismatch",
    )
    .await;

    // A token of tenant a: its routes, not management ones.
    let ta = tenant_token(a);
    ok(&s, Method::GET, &format!("/v1/tenant/{a}"), Some(&ta)).await;
    let body = format!("{{\"new_timeline_id\": \"{tl}\"}}");
    let resp = s
        .client
        .post(format!("{}/v1/tenant/{a}/timeline", s.base))
        .bearer_auth(&ta)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    ok(&s, Method::GET, &timeline, Some(&ta)).await;
    for (method, path) in [
        (Method::GET, "/v1/tenant".to_string()),
        (Method::POST, "/v1/tenant".to_string()),
        (Method::DELETE, format!("/v1/tenant/{a}")),
        (Method::PUT, format!("/v1/tenant/{a}/location_config")),
        (Method::PUT, "/v1/io_engine".to_string()),
    ] {
        refused(&s, method, &path, Some(&ta), forbidden, &format!("tenant {a} only")).await;
    }
    // A bad tenant id in a tenant route is still a 400.
    refused(&s, Method::GET, "/v1/tenant/xyz", Some(&ta), StatusCode::BAD_REQUEST, "tenant id")
        .await;

    // The open routes need nothing; pageserverapi opens everything.
    ok(&s, Method::GET, "/v1/status", None).await;
    ok(&s, Method::GET, "/metrics", None).await;
    let list = ok(&s, Method::GET, "/v1/tenant", Some(&admin)).await;
    assert!(list.contains(&a.to_string()) && list.contains(&b.to_string()), "{list}");
    ok(&s, Method::DELETE, &format!("/v1/tenant/{b}"), Some(&admin)).await;
    refused(&s, Method::GET, "/v1/nope", Some(&admin), StatusCode::NOT_FOUND, "no route").await;
}

#[tokio::test]
async fn open_routes_can_be_closed() {
    let s = start(&[]).await;
    let unauth = StatusCode::UNAUTHORIZED;
    refused(&s, Method::GET, "/v1/status", None, unauth, "no Authorization").await;
    refused(&s, Method::GET, "/metrics", None, unauth, "no Authorization").await;
    let t = TenantId::generate();
    let ta = tenant_token(t);
    refused(&s, Method::GET, "/metrics", Some(&ta), StatusCode::FORBIDDEN, "pageserverapi").await;
    let admin = sign(PRIVATE_A, json!({"scope": "pageserverapi"}));
    ok(&s, Method::GET, "/metrics", Some(&admin)).await;
    ok(&s, Method::GET, "/v1/status", Some(&admin)).await;
}
