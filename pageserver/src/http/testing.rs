//! Test-only routes, compiled with the `testing` feature only:
//!
//! - `PUT /v1/failpoints` `[{"name": "flush::before-rename", "actions": "exit"}]`:
//!   all specs are validated before any is applied.
//! - `POST .../testing/ingest` `{"lsn": "X/X", "values": [...]}`: writes the
//!   values at `lsn` through the timeline writer (`put_batch`, then
//!   `finish_write(lsn)`), exactly as WAL ingest would; `lsn` must be above
//!   `last_record_lsn`.
//! - `GET .../testing/get?key=<36hex>&lsn=X/X`: one reconstructed value, hex.
//!
//! Crash tests drive the storage engine with these, without PostgreSQL.

use axum::extract::State;
use axum::Json;
use bytes::Bytes;
use pageserver_api::key::Key;
use pageserver_api::models::{
    FailpointConfig, TestingGetResponse, TestingIngestRequest, TestingIngestResponse,
    TestingIngestValue,
};
use serde::Deserialize;
use tracing::info;
use utils::failpoint::Action;
use utils::lsn::Lsn;

use super::error::ApiError;
use super::extract::{JsonBody, QueryParams, TimelinePath};
use super::timelines::check_read_lsn;
use super::HttpState;
use crate::tenant::value::{Record, Value};

/// `PUT /v1/failpoints`.
pub async fn configure_failpoints(
    JsonBody(specs): JsonBody<Vec<FailpointConfig>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let mut parsed = Vec::with_capacity(specs.len());
    for spec in &specs {
        let action: Action = spec
            .actions
            .parse()
            .map_err(|e| ApiError::BadRequest(format!("failpoint {}: {e}", spec.name)))?;
        parsed.push((spec.name.as_str(), action));
    }
    for (name, action) in parsed {
        info!("failpoint {name} set to {action:?}");
        utils::failpoint::configure(name, action);
    }
    Ok(Json(serde_json::json!({})))
}

fn decode_hex(field: &str, key: &Key, hex_str: &str) -> Result<Bytes, ApiError> {
    hex::decode(hex_str)
        .map(Bytes::from)
        .map_err(|e| ApiError::BadRequest(format!("{field} of key {key}: invalid hex: {e}")))
}

/// `POST /v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/ingest`.
pub async fn ingest(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    JsonBody(req): JsonBody<TestingIngestRequest>,
) -> Result<Json<TestingIngestResponse>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    let mut batch = Vec::with_capacity(req.values.len());
    for v in &req.values {
        let (key, value) = match v {
            TestingIngestValue::Image { key, image } => {
                (*key, Value::Image(decode_hex("image", key, image)?))
            }
            TestingIngestValue::Append { key, append, will_init } => (
                *key,
                Value::Record(Record::Test {
                    append: decode_hex("append", key, append)?,
                    will_init: *will_init,
                }),
            ),
        };
        batch.push((key, req.lsn, value));
    }
    // The writer is exclusive: the LSN check and the write happen under it,
    // so two concurrent ingests cannot both pass the check for one LSN.
    let mut writer = tl.writer().await;
    let last = tl.get_last_record_lsn();
    if req.lsn <= last {
        return Err(ApiError::BadRequest(format!(
            "ingest LSN {} must be above last_record_lsn {last}",
            req.lsn
        )));
    }
    writer.put_batch(&batch).await.map_err(|e| {
        if tl.cancel.is_cancelled() {
            ApiError::ShuttingDown
        } else {
            ApiError::Internal(e.context("testing ingest"))
        }
    })?;
    writer.finish_write(req.lsn);
    drop(writer);
    Ok(Json(TestingIngestResponse { last_record_lsn: tl.get_last_record_lsn() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetQuery {
    key: Key,
    lsn: Lsn,
}

/// `GET /v1/tenant/{tenant_id}/timeline/{timeline_id}/testing/get?key=..&lsn=..`.
pub async fn get_value(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    QueryParams(q): QueryParams<GetQuery>,
) -> Result<Json<TestingGetResponse>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    check_read_lsn(&tl, q.lsn)?;
    let value = tl.get(q.key, q.lsn).await?;
    Ok(Json(TestingGetResponse { value: hex::encode(&value) }))
}
