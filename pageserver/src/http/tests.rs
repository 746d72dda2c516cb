//! HTTP API tests over a real socket: status codes, `{"msg"}` errors, `null`
//! bodies, tenant and timeline lifecycles, shutdown 503s, `/metrics`.
//! Attach and detach (`location_config`): `tests/location.rs`.

mod auth;
mod location;
mod openapi;

use std::sync::Arc;

use pageserver_api::models::{
    CheckpointResponse, HttpErrorBody, StatusResponse, TenantCreateResponse, TenantDetails,
    TenantInfo, TimelineInfo,
};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value as Json};
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::{router, HttpConf, HttpState};
use crate::remote_storage::RemoteStorage;
use crate::tenant::mgr::TenantManager;
use crate::tenant::StorageConf;

struct TestServer {
    base: String,
    client: reqwest::Client,
    /// The API's shutdown token (the server itself keeps running when it fires).
    cancel: CancellationToken,
    tenants: Arc<TenantManager>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    async fn start() -> TestServer {
        TestServer::start_with(HttpConf::default()).await
    }

    /// The daemon's own server (`super::serve`) with `http` limits; its
    /// shutdown token is not the API's, so 503-on-shutdown tests can fire
    /// `cancel` and still talk to it.
    async fn start_with(http: HttpConf) -> TestServer {
        TestServer::start_on(http, None).await
    }

    /// With `remote` storage; a detach waits 300 ms for its uploads.
    async fn start_with_remote(remote: Arc<RemoteStorage>) -> TestServer {
        TestServer::start_on(HttpConf::default(), Some(remote)).await
    }

    async fn start_on(http: HttpConf, remote: Option<Arc<RemoteStorage>>) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let mut conf = StorageConf::for_tests(dir.path());
        conf.remote_storage = remote;
        let tenants = TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap();
        let cancel = CancellationToken::new();
        let mut state = HttpState::new(tenants.clone(), cancel.clone(), &http);
        state.detach_upload_timeout = std::time::Duration::from_millis(300);
        let app = router(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server_cancel = CancellationToken::new();
        tokio::spawn(async move {
            super::server::serve_connections(listener, app, &http, server_cancel).await.unwrap()
        });
        TestServer { base, client: reqwest::Client::new(), cancel, tenants, _dir: dir }
    }

    /// Send `body` as JSON (`None` sends the literal `null`, as Neon's clients do).
    async fn call(&self, method: Method, path: &str, body: Option<Json>) -> (StatusCode, Json) {
        let body = body.unwrap_or(Json::Null).to_string();
        let resp = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Json::String(text));
        (status, json)
    }

    /// Assert an error response: `status` and a `{"msg"}` body containing `needle`.
    async fn expect_err(
        &self,
        method: Method,
        path: &str,
        body: Option<Json>,
        status: StatusCode,
        needle: &str,
    ) {
        let (got, json) = self.call(method.clone(), path, body).await;
        assert_eq!(got, status, "{method} {path}: {json}");
        let err: HttpErrorBody = serde_json::from_value(json.clone())
            .unwrap_or_else(|_| panic!("{method} {path}: not an error body: {json}"));
        assert!(err.msg.contains(needle), "{method} {path}: '{}' lacks '{needle}'", err.msg);
    }

    async fn create_tenant(&self) -> TenantId {
        let (status, json) = self.call(Method::POST, "/v1/tenant", None).await;
        assert_eq!(status, StatusCode::CREATED, "{json}");
        serde_json::from_value::<TenantCreateResponse>(json).unwrap().id
    }

    async fn create_timeline(&self, tenant: TenantId, body: Json) -> TimelineInfo {
        let (status, json) =
            self.call(Method::POST, &format!("/v1/tenant/{tenant}/timeline"), Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{json}");
        serde_json::from_value(json).unwrap()
    }
}

#[tokio::test]
async fn status_and_generic_errors() {
    let s = TestServer::start().await;
    let (status, json) = s.call(Method::GET, "/v1/status", None).await;
    assert_eq!(status, StatusCode::OK);
    let st: StatusResponse = serde_json::from_value(json).unwrap();
    assert_eq!(st.status, "ok");

    // A GET without any body or content type works too.
    let resp = s.client.get(format!("{}/v1/status", s.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    s.expect_err(Method::GET, "/v1/nope", None, StatusCode::NOT_FOUND, "no route").await;
    s.expect_err(Method::PATCH, "/v1/tenant", None, StatusCode::METHOD_NOT_ALLOWED, "PATCH").await;
    s.expect_err(Method::GET, "/v1/tenant/xyz", None, StatusCode::BAD_REQUEST, "tenant id").await;
    let t = TenantId::generate();
    s.expect_err(
        Method::GET,
        &format!("/v1/tenant/{t}/timeline/123"),
        None,
        StatusCode::BAD_REQUEST,
        "timeline id",
    )
    .await;
}

#[tokio::test]
async fn tenant_lifecycle() {
    let s = TestServer::start().await;
    let (status, json) = s.call(Method::GET, "/v1/tenant", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json, json!([]));

    let a = s.create_tenant().await;
    let b = TenantId::generate();
    let (status, json) =
        s.call(Method::POST, "/v1/tenant", Some(json!({"new_tenant_id": b.to_string()}))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(json, json!({"id": b.to_string()}));
    // An empty object and an empty body both mean "all defaults".
    let (status, _) = s.call(Method::POST, "/v1/tenant", Some(json!({}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let resp = s.client.post(format!("{}/v1/tenant", s.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);

    s.expect_err(
        Method::POST,
        "/v1/tenant",
        Some(json!({"new_tenant_id": b.to_string()})),
        StatusCode::CONFLICT,
        "already exists",
    )
    .await;
    s.expect_err(
        Method::POST,
        "/v1/tenant",
        Some(json!({"new_tenant_id": "abc"})),
        StatusCode::BAD_REQUEST,
        "invalid request body",
    )
    .await;
    s.expect_err(
        Method::POST,
        "/v1/tenant",
        Some(json!({"bogus": 1})),
        StatusCode::BAD_REQUEST,
        "bogus",
    )
    .await;
    let resp =
        s.client.post(format!("{}/v1/tenant", s.base)).body("{not json").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    let (status, json) = s.call(Method::GET, "/v1/tenant", None).await;
    assert_eq!(status, StatusCode::OK);
    let list: Vec<TenantInfo> = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(list.len(), 4);
    assert!(list.windows(2).all(|w| w[0].id < w[1].id), "sorted by id");
    assert!(list.iter().any(|t| t.id == a) && list.iter().any(|t| t.id == b));
    assert_eq!(json[0]["state"], json!({"slug": "Active"}));
    assert_eq!(json[0]["attachment_status"], json!({"slug": "attached"}));
    // No remote storage: no generation.
    assert_eq!(json[0]["generation"], Json::Null);
    assert!(json[0]["current_physical_size"].is_u64());

    let (status, json) = s.call(Method::GET, &format!("/v1/tenant/{a}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["walredo"], Json::Null);
    let details: TenantDetails = serde_json::from_value(json).unwrap();
    assert_eq!(details.info.id, a);
    assert!(details.timelines.is_empty());

    let (status, _) = s.call(Method::DELETE, &format!("/v1/tenant/{a}"), None).await;
    assert_eq!(status, StatusCode::OK);
    s.expect_err(Method::GET, &format!("/v1/tenant/{a}"), None, StatusCode::NOT_FOUND, "not found")
        .await;
    s.expect_err(
        Method::DELETE,
        &format!("/v1/tenant/{a}"),
        None,
        StatusCode::NOT_FOUND,
        "not found",
    )
    .await;
    assert!(s.tenants.get_tenant(a).is_err());
}

#[tokio::test]
async fn timeline_lifecycle() {
    let s = TestServer::start().await;
    let t = s.create_tenant().await;
    let tl_path = |tl: TimelineId| format!("/v1/tenant/{t}/timeline/{tl}");

    let def = s.create_timeline(t, Json::Null).await;
    assert_eq!(def.tenant_id, t);
    assert_eq!(def.pg_version, 15);
    assert_eq!(def.initial_lsn, Lsn(0));

    let id = TimelineId::generate();
    let info = s
        .create_timeline(
            t,
            json!({"new_timeline_id": id.to_string(), "pg_version": 16, "initial_lsn": "0/1000000"}),
        )
        .await;
    assert_eq!(info.timeline_id, id);
    assert_eq!(info.pg_version, 16);
    assert_eq!(info.initial_lsn, Lsn(0x100_0000));
    assert_eq!(info.last_record_lsn, Lsn(0x100_0000));
    assert_eq!(info.disk_consistent_lsn, Lsn(0x100_0000));

    let create = format!("/v1/tenant/{t}/timeline");
    s.expect_err(
        Method::POST,
        &create,
        Some(json!({"new_timeline_id": id.to_string()})),
        StatusCode::CONFLICT,
        "already exists",
    )
    .await;
    s.expect_err(
        Method::POST,
        &create,
        Some(json!({"pg_version": 9})),
        StatusCode::BAD_REQUEST,
        "pg_version",
    )
    .await;
    s.expect_err(
        Method::POST,
        &create,
        Some(json!({"initial_lsn": "zz"})),
        StatusCode::BAD_REQUEST,
        "LSN",
    )
    .await;
    let missing = TenantId::generate();
    s.expect_err(
        Method::POST,
        &format!("/v1/tenant/{missing}/timeline"),
        None,
        StatusCode::NOT_FOUND,
        "not found",
    )
    .await;

    let (status, json) = s.call(Method::GET, &create, None).await;
    assert_eq!(status, StatusCode::OK);
    let list: Vec<TimelineInfo> = serde_json::from_value(json).unwrap();
    let mut expected = vec![def.timeline_id, id];
    expected.sort();
    assert_eq!(list.iter().map(|i| i.timeline_id).collect::<Vec<_>>(), expected);

    let (status, json) = s.call(Method::GET, &tl_path(id), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_value::<TimelineInfo>(json).unwrap(), info);
    let (_, json) = s.call(Method::GET, &format!("/v1/tenant/{t}"), None).await;
    assert_eq!(json["timelines"].as_array().unwrap().len(), 2);

    // Checkpoint answers on both PUT and POST with the durable LSN.
    for m in [Method::PUT, Method::POST] {
        let (status, json) = s.call(m, &format!("{}/checkpoint", tl_path(id)), None).await;
        assert_eq!(status, StatusCode::OK, "{json}");
        let cp: CheckpointResponse = serde_json::from_value(json).unwrap();
        assert_eq!(cp.disk_consistent_lsn, Lsn(0x100_0000));
    }

    // An empty timeline has an empty keyspace, at last_record_lsn by default.
    let ks = format!("{}/keyspace", tl_path(id));
    let (status, json) = s.call(Method::GET, &ks, None).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(json, json!({"keys": [], "sparse_keys": [], "at_lsn": "0/1000000"}));
    // Keyspace LSN validation happens before any read.
    s.expect_err(
        Method::GET,
        &format!("{ks}?at_lsn=0/10"),
        None,
        StatusCode::BAD_REQUEST,
        "outside",
    )
    .await;
    s.expect_err(
        Method::GET,
        &format!("{ks}?at_lsn=FF/0"),
        None,
        StatusCode::BAD_REQUEST,
        "outside",
    )
    .await;
    s.expect_err(Method::GET, &format!("{ks}?at_lsn=nope"), None, StatusCode::BAD_REQUEST, "LSN")
        .await;
    s.expect_err(Method::GET, &format!("{ks}?bogus=1"), None, StatusCode::BAD_REQUEST, "bogus")
        .await;

    let (status, _) = s.call(Method::DELETE, &tl_path(id), None).await;
    assert_eq!(status, StatusCode::OK);
    s.expect_err(Method::GET, &tl_path(id), None, StatusCode::NOT_FOUND, "not found").await;
    s.expect_err(Method::DELETE, &tl_path(id), None, StatusCode::NOT_FOUND, "not found").await;
    s.expect_err(
        Method::PUT,
        &format!("{}/checkpoint", tl_path(id)),
        None,
        StatusCode::NOT_FOUND,
        "not found",
    )
    .await;
    // The id is free again.
    let again = s.create_timeline(t, json!({"new_timeline_id": id.to_string()})).await;
    assert_eq!(again.timeline_id, id);
}

#[tokio::test]
async fn import_basebackup_errors_map_to_statuses() {
    let s = TestServer::start().await;
    let t = s.create_tenant().await;
    let existing = s.create_timeline(t, Json::Null).await.timeline_id;
    let put = |tenant: TenantId, tl: TimelineId, body: &'static [u8]| {
        s.client
            .put(format!("{}/v1/tenant/{tenant}/timeline/{tl}/import_basebackup", s.base))
            .body(body)
            .send()
    };
    let resp = put(t, TimelineId::generate(), b"this is not a tar file").await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let err: HttpErrorBody = resp.json().await.unwrap();
    assert!(err.msg.contains("tar"), "{}", err.msg);
    let resp = put(TenantId::generate(), TimelineId::generate(), b"").await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let resp = put(t, existing, b"").await.unwrap();
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    // A failed import leaves no timeline behind.
    let (_, json) = s.call(Method::GET, &format!("/v1/tenant/{t}"), None).await;
    assert_eq!(json["timelines"], json!([existing.to_string()]));
}

#[tokio::test]
async fn shutting_down_gives_503_but_metrics_still_serve() {
    let s = TestServer::start().await;
    s.cancel.cancel();
    s.expect_err(Method::GET, "/v1/status", None, StatusCode::SERVICE_UNAVAILABLE, "shutting down")
        .await;
    s.expect_err(
        Method::POST,
        "/v1/tenant",
        None,
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting down",
    )
    .await;
    let resp = s.client.get(format!("{}/metrics", s.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn metrics_endpoint_lists_registered_metrics() {
    crate::metrics::register_all(&super::route_list(), &crate::tenant::ReadKind::LABELS);
    let s = TestServer::start().await;
    s.call(Method::GET, "/v1/status", None).await;
    let resp = s.client.get(format!("{}/metrics", s.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = resp.text().await.unwrap();
    for name in [
        "libmetrics_process_cpu_seconds_highres",
        "pageserver_http_request_seconds_bucket",
        "pageserver_http_responses_total",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
    assert!(
        text.contains(r#"pageserver_http_request_seconds_count{method="GET",route="/v1/status"}"#)
    );
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn testing_ingest_and_get() {
    let s = TestServer::start().await;
    let t = s.create_tenant().await;
    let tl = s.create_timeline(t, json!({"initial_lsn": "0/100"})).await.timeline_id;
    let base = format!("/v1/tenant/{t}/timeline/{tl}/testing");
    let key = "000000067F00000005000040000000000001";

    let (status, json) = s
        .call(
            Method::POST,
            &format!("{base}/ingest"),
            Some(json!({"lsn": "0/200", "values": [{"key": key, "image": "0102"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(json["last_record_lsn"], "0/200");
    let (status, json) = s
        .call(
            Method::POST,
            &format!("{base}/ingest"),
            Some(json!({"lsn": "0/300", "values": [{"key": key, "append": "03", "will_init": false}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{json}");

    let get = |lsn: &str| format!("{base}/get?key={key}&lsn={lsn}");
    let (status, json) = s.call(Method::GET, &get("0/250"), None).await;
    assert_eq!((status, json), (StatusCode::OK, json!({"value": "0102"})));
    let (status, json) = s.call(Method::GET, &get("0/300"), None).await;
    assert_eq!((status, json), (StatusCode::OK, json!({"value": "010203"})));

    s.expect_err(Method::GET, &get("0/150"), None, StatusCode::NOT_FOUND, key).await;
    s.expect_err(Method::GET, &get("0/400"), None, StatusCode::BAD_REQUEST, "outside").await;
    s.expect_err(
        Method::POST,
        &format!("{base}/ingest"),
        Some(json!({"lsn": "0/300", "values": []})),
        StatusCode::BAD_REQUEST,
        "above",
    )
    .await;
    s.expect_err(
        Method::POST,
        &format!("{base}/ingest"),
        Some(json!({"lsn": "0/400", "values": [{"key": key, "image": "xyz"}]})),
        StatusCode::BAD_REQUEST,
        "hex",
    )
    .await;
    s.expect_err(
        Method::GET,
        &format!("{base}/get?key=00&lsn=0/300"),
        None,
        StatusCode::BAD_REQUEST,
        "key",
    )
    .await;

    let (status, json) =
        s.call(Method::POST, &format!("/v1/tenant/{t}/timeline/{tl}/checkpoint"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["disk_consistent_lsn"], "0/300");
    let (_, json) = s.call(Method::GET, &format!("/v1/tenant/{t}/timeline/{tl}"), None).await;
    assert!(json["l0_layers"].as_u64().unwrap() >= 1, "{json}");
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn failpoints_are_validated_then_applied() {
    let s = TestServer::start().await;
    let (status, _) = s
        .call(
            Method::PUT,
            "/v1/failpoints",
            Some(json!([{"name": "http-test::a", "actions": "return"}])),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(utils::failpoint::failpoint("http-test::a").is_err());
    s.expect_err(
        Method::PUT,
        "/v1/failpoints",
        Some(json!([{"name": "http-test::a", "actions": "off"}, {"name": "http-test::b", "actions": "explode"}])),
        StatusCode::BAD_REQUEST,
        "http-test::b",
    )
    .await;
    // Nothing of a rejected request was applied.
    assert!(utils::failpoint::failpoint("http-test::a").is_err());
    s.call(
        Method::PUT,
        "/v1/failpoints",
        Some(json!([{"name": "http-test::a", "actions": "off"}])),
    )
    .await;
    assert!(utils::failpoint::failpoint("http-test::a").is_ok());
}

/// A PUT whose chunked body never finishes: holds one request slot.
async fn hanging_import(base: &str, tenant: TenantId) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tl = TimelineId::generate();
    let head = format!(
        "PUT /v1/tenant/{tenant}/timeline/{tl}/import_basebackup HTTP/1.1\r\nhost: x\r\n\
         transfer-encoding: chunked\r\n\r\n200\r\n{}\r\n",
        "\0".repeat(512)
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_get_503() {
    let conf = HttpConf { max_concurrent_requests: 1, ..HttpConf::default() };
    let srv = TestServer::start_with(conf).await;
    let tenant = srv.create_tenant().await;
    let held = hanging_import(&srv.base, tenant).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    srv.expect_err(
        Method::GET,
        "/v1/status",
        None,
        StatusCode::SERVICE_UNAVAILABLE,
        "at most 1 (http_max_concurrent_requests)",
    )
    .await;
    drop(held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, _) = srv.call(Method::GET, "/v1/status", None).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the slot of a gone client was not freed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_body_that_stops_is_cut_after_the_body_read_timeout() {
    use tokio::io::AsyncReadExt;
    let conf = HttpConf {
        body_read_timeout: std::time::Duration::from_millis(300),
        ..HttpConf::default()
    };
    let srv = TestServer::start_with(conf).await;
    let tenant = srv.create_tenant().await;
    let mut held = hanging_import(&srv.base, tenant).await;
    let mut response = Vec::new();
    let read = held.read_to_end(&mut response);
    tokio::time::timeout(std::time::Duration::from_secs(5), read).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("http_body_read_timeout"), "{text}");
}

#[tokio::test]
async fn lsn_lease_route_and_timeline_detail() {
    let s = TestServer::start().await;
    let t = s.create_tenant().await;
    let info = s.create_timeline(t, json!({"initial_lsn": "0/1000"})).await;
    assert!(info.lsn_leases.is_empty());
    let path = format!("/v1/tenant/{t}/timeline/{}", info.timeline_id);
    let lease = format!("{path}/lsn_lease");

    let (status, json) = s.call(Method::POST, &lease, Some(json!({"lsn": "0/16B5A50"}))).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    let valid_until = json["valid_until"].as_str().unwrap().to_string();
    let until = humantime::parse_rfc3339(&valid_until).unwrap();
    let ahead = until.duration_since(std::time::SystemTime::now()).unwrap();
    assert!(ahead > std::time::Duration::from_secs(590), "{valid_until}");
    assert!(valid_until.ends_with('Z') && valid_until.contains('.'), "{valid_until}");

    let (_, json) = s.call(Method::GET, &path, None).await;
    let info: TimelineInfo = serde_json::from_value(json).unwrap();
    assert_eq!(info.lsn_leases.len(), 1);
    assert_eq!(
        (info.lsn_leases[0].lsn, &info.lsn_leases[0].valid_until),
        (Lsn(0x16B5A50), &valid_until)
    );

    let below = Some(json!({"lsn": "0/FFF"}));
    s.expect_err(Method::POST, &lease, below, StatusCode::BAD_REQUEST, "below the history").await;
    let zero = Some(json!({"lsn": "0/0"}));
    s.expect_err(Method::POST, &lease, zero, StatusCode::BAD_REQUEST, "not a valid LSN").await;
    let bad = Some(json!({"lsn": "nope"}));
    s.expect_err(Method::POST, &lease, bad, StatusCode::BAD_REQUEST, "invalid LSN").await;
    let missing = format!("/v1/tenant/{t}/timeline/{}/lsn_lease", TimelineId::generate());
    let body = Some(json!({"lsn": "0/2000"}));
    s.expect_err(Method::POST, &missing, body, StatusCode::NOT_FOUND, "not found").await;

    crate::metrics::storage::refresh_lease_count(&s.tenants);
    assert!(crate::metrics::storage::VALID_LSN_LEASES.get() >= 1);
}
