//! `PUT /v1/tenant/{tenant_id}/location_config` over a real socket: the
//! refusals (400s naming what is unsupported or missing, 409s naming the
//! generations, 503 naming the timeline and LSNs) and a detach / attach
//! round trip, with remote storage on a local directory.

use pageserver_api::key::Key;
use pageserver_api::models::TenantDetails;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value as Json};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::TestServer;
use crate::tenant::mgr::test_support::{remote, uploaded};
use crate::tenant::remote_timeline::{claim_generation, Generation};
use crate::tenant::value::image;

fn path(t: TenantId) -> String {
    format!("/v1/tenant/{t}/location_config")
}

fn attach(g: u32) -> Option<Json> {
    Some(json!({"mode": "AttachedSingle", "generation": g, "tenant_conf": {}}))
}

#[tokio::test]
async fn location_config_needs_remote_storage() {
    let s = TestServer::start().await;
    let t = TenantId::generate();
    let (put, bad) = (Method::PUT, StatusCode::BAD_REQUEST);
    s.expect_err(put, &path(t), attach(1), bad, "remote storage is not configured").await;
}

#[tokio::test]
async fn location_config_refuses_what_it_does_not_support() {
    let rdir = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_remote(remote(rdir.path())).await;
    let p = path(TenantId::generate());
    let bad = StatusCode::BAD_REQUEST;
    for mode in ["AttachedMulti", "AttachedStale", "Secondary"] {
        let body = Some(json!({"mode": mode, "generation": 1}));
        s.expect_err(Method::PUT, &p, body, bad, &format!("mode {mode} is not supported")).await;
    }
    let no_gen = Some(json!({"mode": "AttachedSingle"}));
    s.expect_err(Method::PUT, &p, no_gen, bad, "needs a generation of 1 or more, got none").await;
    s.expect_err(Method::PUT, &p, attach(0), bad, "got 0").await;
    let sharded = Some(json!({"mode": "AttachedSingle", "generation": 1, "shard_count": 4}));
    s.expect_err(Method::PUT, &p, sharded, bad, "sharded tenants are not supported").await;
    let unknown = Some(json!({"mode": "Elsewhere"}));
    s.expect_err(Method::PUT, &p, unknown, bad, "Elsewhere").await;
    // Unknown tenant_conf fields and a secondary_conf are accepted and
    // ignored; detaching a tenant that is not here is done already.
    let neon = json!({"mode": "Detached", "generation": null, "secondary_conf": {"warm": true},
        "shard_number": 0, "shard_count": 0, "shard_stripe_size": 32768,
        "tenant_conf": {"pitr_interval": "7 days", "a_future_knob": 1}});
    let (status, body) = s.call(Method::PUT, &p, Some(neon)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({})));
}

#[tokio::test]
async fn generations_conflict_and_a_tenant_moves_through_detach_and_attach() {
    let rdir = tempfile::tempdir().unwrap();
    let rs = remote(rdir.path());
    let s = TestServer::start_with_remote(rs.clone()).await;
    let t = s.create_tenant().await;
    let tl: TimelineId = s.create_timeline(t, json!({"pg_version": 16})).await.timeline_id;
    let (put, conflict) = (Method::PUT, StatusCode::CONFLICT);

    // Another pageserver attached it with generation 3 meanwhile.
    claim_generation(&rs, t, Generation(3)).await.unwrap();
    s.expect_err(put.clone(), &path(t), attach(2), conflict, "generation 2 is stale, generation 3")
        .await;
    let (status, info) = s.call(put.clone(), &path(t), attach(4)).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert_eq!(info["generation"], json!(4));
    s.expect_err(put.clone(), &path(t), attach(2), conflict, "generation 4, above the requested")
        .await;
    let create = Some(json!({"new_tenant_id": t.to_string()}));
    s.expect_err(Method::POST, "/v1/tenant", create, conflict, "already exists").await;

    let (status, body) = s.call(put.clone(), &path(t), Some(json!({"mode": "Detached"}))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({})));
    s.expect_err(Method::GET, &format!("/v1/tenant/{t}"), None, StatusCode::NOT_FOUND, "").await;
    let create = Some(json!({"new_tenant_id": t.to_string()}));
    s.expect_err(Method::POST, "/v1/tenant", create, conflict, "location_config").await;

    let (status, info) = s.call(put, &path(t), attach(5)).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    let (_, details) = s.call(Method::GET, &format!("/v1/tenant/{t}"), None).await;
    let details: TenantDetails = serde_json::from_value(details).unwrap();
    assert_eq!((details.info.generation, details.timelines), (Some(5), vec![tl]));
}

#[tokio::test]
async fn detach_whose_uploads_do_not_finish_is_503_naming_the_timeline() {
    let rdir = tempfile::tempdir().unwrap();
    let root = rdir.path().join("store");
    let s = TestServer::start_with_remote(remote(&root)).await;
    let t = s.create_tenant().await;
    let tl = s.create_timeline(t, json!({"pg_version": 16, "initial_lsn": "0/10"})).await;
    let timeline = s.tenants.get_timeline(t, tl.timeline_id).unwrap();
    uploaded(&timeline).await; // nothing writes to the store below
    let mut w = timeline.writer().await;
    w.put(Key::MIN, Lsn(0x18), &image(b"v")).await.unwrap();
    w.finish_write(Lsn(0x18));
    drop(w);
    // The store becomes unusable: the flush of 0/18 cannot be uploaded.
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::write(&root, b"not a directory").unwrap();
    let detach = Some(json!({"mode": "Detached"}));
    let needle = format!("timeline {t}/{} is flushed up to 0/18", tl.timeline_id);
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    s.expect_err(Method::PUT, &path(t), detach, unavailable, &needle).await;
    let (status, _) = s.call(Method::GET, &format!("/v1/tenant/{t}"), None).await;
    assert_eq!(status, StatusCode::OK, "the tenant stays attached");
}
