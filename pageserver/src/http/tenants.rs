//! Tenant routes: create, list, get (with timelines), delete. Attach and
//! detach: `location.rs`.
//!
//! The JSON shapes of list/get are the ones Neon's pagebench reads
//! (`TenantInfo`, `TenantDetails` in `pageserver_api::models`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pageserver_api::models::{
    Slug, TenantCreateRequest, TenantCreateResponse, TenantDetails, TenantInfo,
};
use utils::id::TenantId;

use super::error::ApiError;
use super::extract::{JsonBody, TenantPath};
use super::HttpState;
use crate::tenant::{Tenant, TenantError};
use crate::walreceiver::slots;

pub(super) fn tenant_info(tenant: &Tenant) -> TenantInfo {
    TenantInfo {
        id: tenant.id(),
        state: Slug::new("Active"),
        current_physical_size: Some(tenant.physical_size()),
        attachment_status: Slug::new("attached"),
        generation: tenant.generation().map(|g| g.0),
    }
}

/// `POST /v1/tenant`: 201 `{"id": ...}`; 409 if the id exists (here, or,
/// with remote storage, as claims there: attach it instead).
pub async fn create(
    State(state): State<HttpState>,
    JsonBody(req): JsonBody<Option<TenantCreateRequest>>,
) -> Result<(StatusCode, Json<TenantCreateResponse>), ApiError> {
    let id = req.unwrap_or_default().new_tenant_id.unwrap_or_else(TenantId::generate);
    let tenant = state.tenants.create_tenant(id).await?;
    Ok((StatusCode::CREATED, Json(TenantCreateResponse { id: tenant.id() })))
}

fn broken_info(id: TenantId, reason: &str) -> TenantInfo {
    TenantInfo {
        id,
        state: Slug::broken(reason),
        current_physical_size: None,
        attachment_status: Slug::new("attached"),
        generation: None,
    }
}

/// An Activating tenant (its load waits for remote storage):
/// `{"slug": "Activating", "data": {"reason": ..., "tries": N}}`.
fn activating_info(id: TenantId, reason: &str, tries: u32) -> TenantInfo {
    let data = serde_json::json!({ "reason": reason, "tries": tries });
    TenantInfo {
        id,
        state: Slug { slug: "Activating".to_string(), data: Some(data) },
        current_physical_size: None,
        attachment_status: Slug::new("attaching"),
        generation: None,
    }
}

/// `GET /v1/tenant`: every tenant (Broken ones with their reason,
/// Activating ones with their latest error), sorted by id.
pub async fn list(State(state): State<HttpState>) -> Json<Vec<TenantInfo>> {
    let mut infos: Vec<TenantInfo> =
        state.tenants.list_tenants().iter().map(|t| tenant_info(t)).collect();
    infos.extend(state.tenants.list_broken().iter().map(|(id, reason)| broken_info(*id, reason)));
    let activating = state.tenants.list_activating();
    infos.extend(activating.iter().map(|(id, reason, tries)| activating_info(*id, reason, *tries)));
    infos.sort_by_key(|i| i.id);
    Json(infos)
}

/// `GET /v1/tenant/{tenant_id}`.
pub async fn get(
    State(state): State<HttpState>,
    TenantPath(id): TenantPath,
) -> Result<Json<TenantDetails>, ApiError> {
    if let Some((reason, tries)) = state.tenants.activating(id) {
        let info = activating_info(id, &reason, tries);
        return Ok(Json(TenantDetails {
            info,
            walredo: None,
            timelines: Vec::new(),
            operations: Vec::new(),
        }));
    }
    let tenant = match state.tenants.get_tenant(id) {
        Err(TenantError::Broken { id, reason }) => {
            let info = broken_info(id, &reason);
            return Ok(Json(TenantDetails {
                info,
                walredo: None,
                timelines: Vec::new(),
                operations: Vec::new(),
            }));
        }
        other => other?,
    };
    let mut timelines: Vec<_> = tenant.list_timelines().iter().map(|t| t.timeline_id).collect();
    timelines.sort();
    let operations = tenant.operations();
    Ok(Json(TenantDetails { info: tenant_info(&tenant), walredo: None, timelines, operations }))
}

/// `DELETE /v1/tenant/{tenant_id}`: stops and removes the tenant and its
/// data; with remote storage also its remote objects, unless a newer
/// generation is claimed (then they stay). The slots of its following
/// timelines are released (`walreceiver::slots`): `{}` without any, else
/// `{"slots": [{"timeline_id": ..., <as a timeline delete answers>}]}`.
pub async fn delete(
    State(state): State<HttpState>,
    TenantPath(id): TenantPath,
) -> Result<Json<serde_json::Value>, ApiError> {
    // From disk: a Broken tenant's or timeline's sources are there too.
    let sources = state.tenants.wal_sources_on_disk(id, None).await;
    let deleted = match state.tenants.delete_tenant(id).await {
        Ok(()) => Ok(()),
        // Deleted here, its remote objects not all: its slots go too.
        Err(TenantError::Other(e)) if !tenant_dir_exists(&state, id) => Err(e),
        Err(e) => return Err(e.into()),
    };
    let cause = slots::Cause::TenantDelete;
    let mut released = Vec::new();
    match sources {
        Ok(sources) => {
            for ts in sources {
                let ids = (id, ts.timeline_id);
                let release = match &ts.source {
                    Ok(Some(source)) => slots::release(&state.tenants, ids, source, cause).await,
                    Ok(None) => continue,
                    Err(why) => slots::release_unknown(ids, why, cause),
                };
                let mut entry = release.to_json();
                entry["timeline_id"] = serde_json::json!(ts.timeline_id);
                released.push(entry);
            }
        }
        Err(why) => {
            let release = slots::release_unknown_tenant(id, &why, cause);
            released.push(release.to_json());
        }
    }
    let answer = if released.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::json!({ "slots": released })
    };
    match deleted {
        Ok(()) => Ok(Json(answer)),
        Err(e) => Err(ApiError::Internal(anyhow::anyhow!("{e:#}; replication slots: {answer}"))),
    }
}

/// Whether tenant `id`'s directory is still here (or cannot be checked).
fn tenant_dir_exists(state: &HttpState, id: TenantId) -> bool {
    state.tenants.conf().tenants_dir().join(id.to_string()).try_exists().unwrap_or(true)
}
