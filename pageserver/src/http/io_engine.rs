//! `GET`/`PUT /v1/io_engine`: the IO engine in use, and switching it at
//! runtime (for benchmarks: the same process, the same open layer files and
//! the same page cache under each engine). The switch covers every open
//! file; an operation already running finishes on its old engine
//! (`io_engine::IoEngine::set_kind`). Direct IO is chosen at start-up only.

use axum::extract::State;
use axum::Json;
use io_engine::IoEngineKind;
use serde::Serialize;
use tracing::info;

use super::error::ApiError;
use super::extract::JsonBody;
use super::HttpState;

#[derive(Serialize)]
pub struct IoEngineInfo {
    io_engine: IoEngineKind,
    direct_io: bool,
}

fn current(state: &HttpState) -> IoEngineInfo {
    let conf = state.tenants.conf();
    IoEngineInfo { io_engine: conf.io_engine.kind(), direct_io: conf.direct_io }
}

/// `GET /v1/io_engine`.
pub async fn get(State(state): State<HttpState>) -> Json<IoEngineInfo> {
    Json(current(&state))
}

/// `PUT /v1/io_engine` with a JSON string body, `"std-fs"` or `"io-uring"`.
/// A kernel that refuses io_uring is a 500 naming the errno; nothing changes.
pub async fn put(
    State(state): State<HttpState>,
    JsonBody(kind): JsonBody<IoEngineKind>,
) -> Result<Json<IoEngineInfo>, ApiError> {
    let engine = &state.tenants.conf().io_engine;
    let before = engine.kind();
    engine.set_kind(kind).map_err(|e| {
        ApiError::Internal(anyhow::anyhow!("cannot switch the IO engine to {kind:?}: {e}"))
    })?;
    info!("IO engine switched from {before:?} to {kind:?}");
    Ok(Json(current(&state)))
}
