//! `PUT /v1/tenant/{tenant_id}/location_config`: attach a tenant from
//! remote storage (`AttachedSingle` with a generation) or detach it
//! (`Detached`), in Neon's request shape (`LocationConfigRequest`). The
//! work is the tenant manager's (`tenant/mgr/attach.rs`); this layer checks
//! the request and starts the WAL receivers of a tenant it (re)loaded.
//!
//! Statuses: 200 with the tenant info (attached) or `{}` (detached, also
//! when the tenant was not here); 400 for an unsupported mode or sharding,
//! a missing or zero generation, or no remote storage configured; 409 for a
//! stale generation (naming both) or one below the tenant's here; 503 when
//! a detach's uploads did not finish in time (naming the timeline and the
//! LSNs; the tenant stays attached) or another change of the tenant runs.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use pageserver_api::models::{LocationConfigMode, LocationConfigRequest};
use serde_json::Value;

use super::error::ApiError;
use super::extract::{JsonBody, TenantPath};
use super::tenants::tenant_info;
use super::HttpState;
use crate::tenant::mgr::{LocationMode, LocationOutcome};
use crate::tenant::remote_timeline::Generation;
use crate::tenant::Tenant;

/// `PUT /v1/tenant/{tenant_id}/location_config`.
pub async fn put(
    State(state): State<HttpState>,
    TenantPath(id): TenantPath,
    JsonBody(req): JsonBody<LocationConfigRequest>,
) -> Result<Json<Value>, ApiError> {
    let mode = location_mode(&req)?;
    let timeout = state.detach_upload_timeout;
    match state.tenants.set_location(id, mode, timeout).await? {
        LocationOutcome::Attached { tenant, loaded } => {
            if loaded {
                start_wal_receivers(&tenant, &state);
            }
            let info = serde_json::to_value(tenant_info(&tenant)).expect("serializes");
            Ok(Json(info))
        }
        LocationOutcome::Detached => Ok(Json(serde_json::json!({}))),
    }
}

/// The mode asked for, or a 400 naming what is not supported or missing.
fn location_mode(req: &LocationConfigRequest) -> Result<LocationMode, ApiError> {
    if req.shard_count > 1 || req.shard_number > 0 {
        return Err(ApiError::BadRequest(format!(
            "sharded tenants are not supported (shard_number {}, shard_count {}): give \
             shard_count 0 or 1",
            req.shard_number, req.shard_count
        )));
    }
    match (req.mode, req.generation) {
        (LocationConfigMode::Detached, _) => Ok(LocationMode::Detached),
        (LocationConfigMode::AttachedSingle, Some(g)) if g >= 1 => {
            Ok(LocationMode::AttachedSingle { generation: Generation(g) })
        }
        (LocationConfigMode::AttachedSingle, g) => Err(ApiError::BadRequest(format!(
            "mode AttachedSingle needs a generation of 1 or more, got {}",
            g.map_or("none".to_string(), |g| g.to_string())
        ))),
        (other, _) => Err(ApiError::BadRequest(format!(
            "mode {other:?} is not supported: this pageserver attaches a tenant alone \
             (AttachedSingle) or not at all (Detached)"
        ))),
    }
}

/// The receivers of the tenant's timelines that follow a primary.
fn start_wal_receivers(tenant: &Arc<Tenant>, state: &HttpState) {
    for tl in tenant.list_timelines() {
        if let Some(source) = tl.wal_source() {
            crate::walreceiver::start(tenant, &tl, source, state.walreceiver.clone());
        }
    }
}
