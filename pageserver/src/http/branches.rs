//! `POST /v1/tenant/{tenant_id}/timeline` with `ancestor_timeline_id`:
//! a branch at `ancestor_start_lsn` (`docs/branches.md`,
//! `tenant/branch.rs`). The other fields of a new timeline come from the
//! ancestor, so they must be absent.

use axum::http::StatusCode;
use axum::Json;
use pageserver_api::models::{TimelineCreateRequest, TimelineInfo};
use utils::id::{TenantId, TimelineId};

use super::error::ApiError;
use super::timelines::timeline_info;
use super::HttpState;

/// Create the branch `req` asks for (201 with its detail); 400 naming the
/// field for a field a branch takes from its ancestor.
pub async fn create(
    state: &HttpState,
    tenant_id: TenantId,
    ancestor: TimelineId,
    req: TimelineCreateRequest,
) -> Result<(StatusCode, Json<TimelineInfo>), ApiError> {
    let inherited = [
        ("pg_version", req.pg_version.is_some()),
        ("initial_lsn", req.initial_lsn.is_some()),
        ("source", req.source.is_some()),
    ];
    if let Some((field, _)) = inherited.iter().find(|(_, set)| *set) {
        return Err(ApiError::BadRequest(format!(
            "{field}: a branch takes it from its ancestor (set the source later with \
             PUT .../source)"
        )));
    }
    let id = req.new_timeline_id.unwrap_or_else(TimelineId::generate);
    let tenant = state.tenants.get_tenant(tenant_id)?;
    let tl = tenant.create_branch(id, ancestor, req.ancestor_start_lsn).await?;
    Ok((StatusCode::CREATED, Json(timeline_info(&tl))))
}
