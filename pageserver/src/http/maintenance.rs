//! Layer maintenance routes, for tests and operators: run compaction (with
//! image creation) or GC now, instead of waiting for the background tasks.
//!
//! Both wait for the timeline's maintenance lock (one compaction, image
//! creation or GC at a time) and answer with what the run did.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use super::error::ApiError;
use super::extract::{JsonBody, QueryParams, TimelinePath};
use super::HttpState;
use crate::tenant::timeline::compaction::{CompactOptions, CompactionReport};
use crate::tenant::timeline::gc::GcReport;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CompactQuery {
    #[serde(default)]
    force_l0_compaction: bool,
    #[serde(default)]
    force_image_layer_creation: bool,
}

/// `PUT .../compact[?force_l0_compaction=true][&force_image_layer_creation=true]`:
/// compact the L0s if `compaction_threshold` are there (any with
/// `force_l0_compaction`), then write image layers where due (for every key
/// range with `force_image_layer_creation`).
pub async fn compact(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    QueryParams(q): QueryParams<CompactQuery>,
) -> Result<Json<CompactionReport>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    let opts = CompactOptions {
        force_l0_compaction: q.force_l0_compaction,
        force_image_layer_creation: q.force_image_layer_creation,
    };
    match tl.compact(opts).await {
        Ok(report) => Ok(Json(report)),
        Err(_) if tl.cancel.is_cancelled() => Err(ApiError::ShuttingDown),
        // `compact` names the part that failed ("L0 compaction: ...").
        Err(e) => Err(ApiError::Internal(e)),
    }
}

/// Body of `PUT .../do_gc` (Neon's shape); `gc_horizon` overrides the
/// configured one for this run.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GcRequest {
    gc_horizon: Option<u64>,
}

/// `PUT .../do_gc` `[{"gc_horizon": N}]`: raise the GC cutoff as the
/// retention settings allow and remove the layers it makes unnecessary.
pub async fn do_gc(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    JsonBody(req): JsonBody<Option<GcRequest>>,
) -> Result<Json<GcReport>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    match tl.gc(req.unwrap_or_default().gc_horizon).await {
        Ok(report) => Ok(Json(report)),
        Err(_) if tl.cancel.is_cancelled() => Err(ApiError::ShuttingDown),
        // `gc` names its steps ("gc: persist the manifest"): no prefix here.
        Err(e) => Err(ApiError::Internal(e)),
    }
}
