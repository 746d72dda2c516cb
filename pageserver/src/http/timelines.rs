//! Timeline routes: create (empty), list, get, delete, keyspace, base-backup
//! import, checkpoint and LSN leases.
//!
//! LSN arguments are checked against the timeline before any read: a read
//! below `initial_lsn` or above `last_record_lsn` is a 400, never a wait.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use futures::StreamExt;
use pageserver_api::models::{
    CheckpointResponse, KeySpace, LsnLeaseInfo, LsnLeaseRequest, LsnLeaseResponse, RemoteInfo,
    RemoteMissingObject, RemoteState, TimelineCreateRequest, TimelineInfo, TimelineState,
    WalSourceHostInfo, WalSourceInfo, WalSourceRequest, DEFAULT_PG_VERSION, MAX_NAMED_MISSING,
};
use serde::Deserialize;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::error::ApiError;
use super::extract::{JsonBody, QueryParams, TenantPath, TimelinePath};
use super::HttpState;
use crate::import::ImportError;
use crate::tenant::remote_timeline::client::RemoteConsistency;
use crate::tenant::timeline::wal_source::{HostState, WalSource};
use crate::tenant::timeline::{LeaseError, LsnNotReadable};
use crate::tenant::{ReadKind, TenantError, Timeline};
use crate::walreceiver::{bootstrap, slots};

/// PostgreSQL major versions a timeline may declare.
pub const SUPPORTED_PG_VERSIONS: std::ops::RangeInclusive<u32> = 15..=18;

pub fn timeline_info(tl: &Timeline) -> TimelineInfo {
    let stats = tl.layer_stats();
    TimelineInfo {
        tenant_id: tl.tenant_id,
        timeline_id: tl.timeline_id,
        state: TimelineState::Active,
        wal_source: tl.wal_source().map(|s| wal_source_info(tl, &s)),
        last_record_lsn: tl.get_last_record_lsn(),
        disk_consistent_lsn: tl.get_disk_consistent_lsn(),
        remote_consistent_lsn: tl.remote_client().and_then(|r| r.remote_consistent_lsn()),
        remote: tl
            .remote_client()
            .map(|r| remote_info(&r.remote_consistency()))
            .unwrap_or_default(),
        pg_version: tl.pg_version,
        initial_lsn: tl.get_initial_lsn(),
        in_memory_layers: stats.in_memory_layers as u64,
        in_memory_bytes: stats.in_memory_bytes,
        l0_layers: stats.files.l0_layers as u64,
        l0_bytes: stats.files.l0_bytes,
        l1_layers: stats.files.l1_layers as u64,
        l1_bytes: stats.files.l1_bytes,
        image_layers: stats.files.image_layers as u64,
        image_bytes: stats.files.image_bytes,
        gc_cutoff: tl.gc_cutoff(),
        lsn_leases: tl
            .valid_leases(std::time::SystemTime::now())
            .into_iter()
            .map(|(lsn, l)| LsnLeaseInfo { lsn, valid_until: rfc3339_ms(l.valid_until) })
            .collect(),
        ancestor_timeline_id: tl.ancestor_timeline_id(),
        ancestor_lsn: tl.ancestor().map(|(_, lsn)| lsn),
    }
}

/// The detail's view of what remote storage lacks: lost objects first.
fn remote_info(c: &RemoteConsistency) -> RemoteInfo {
    let lost = c.lost().count();
    let state = match (c.missing.len(), lost) {
        (0, _) => RemoteState::Complete,
        (_, 0) => RemoteState::Repairing,
        _ => RemoteState::Incomplete,
    };
    let (lost_first, recoverable): (Vec<_>, Vec<_>) =
        c.missing.iter().partition(|m| !m.recoverable);
    let named = lost_first.into_iter().chain(recoverable).take(MAX_NAMED_MISSING);
    RemoteInfo {
        remote_state: Some(state),
        remote_missing_objects: c.missing.len() as u64,
        remote_lost_objects: lost as u64,
        remote_missing: named
            .map(|m| RemoteMissingObject { key: m.key.clone(), recoverable: m.recoverable })
            .collect(),
    }
}

fn rfc3339_ms(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn wal_source_info(tl: &Timeline, s: &WalSource) -> WalSourceInfo {
    let status = tl.receiver_status.lock().unwrap().clone();
    let now = pq_proto::replication::PgTimestamp::now().0;
    let (lag_bytes, lag_ms) = status.lag(tl.get_last_record_lsn(), now);
    let (state, last_error) = status.shown(tl.flush_error().as_deref().map(String::as_str));
    WalSourceInfo {
        connstring: s.redacted_connstring(),
        slot: s.slot.clone(),
        system_id: s.system_id,
        consistent_lsn: s.consistent_lsn,
        state: state.to_string(),
        pg_tli: s.pg_tli,
        pg_tli_history: s.pg_tli_history.clone(),
        on_divergence: s.on_divergence,
        received_lsn: status.received_lsn,
        primary_lsn: status.primary_lsn,
        lag_bytes,
        lag_ms,
        last_message_age_ms: status.last_message_age_ms(),
        last_error,
        host: status.host.clone(),
        hosts: hosts_info(s, &status.hosts),
    }
}

/// The hosts of `s`, with what the slot keeper knows of each.
fn hosts_info(s: &WalSource, known: &[HostState]) -> Vec<WalSourceHostInfo> {
    let Ok(list) = s.host_list() else { return Vec::new() };
    let holding = s.slot_hosts();
    let info = |cs: &pq_proto::ConnString| {
        let host = cs.addr();
        let state = known.iter().find(|h| h.host == host).cloned().unwrap_or_default();
        WalSourceHostInfo {
            slot_present: holding.contains(&host),
            role: state.role.map(str::to_string),
            advanced_lsn: state.advanced_lsn,
            last_error: state.last_error,
            errors: state.errors,
            host,
        }
    };
    list.hosts.iter().map(info).collect()
}

/// A timeline that could not be loaded: its ids and the reason.
fn broken_timeline_info(
    tenant_id: TenantId,
    timeline_id: TimelineId,
    reason: String,
) -> TimelineInfo {
    TimelineInfo {
        tenant_id,
        timeline_id,
        state: TimelineState::Broken { reason, backtrace: String::new() },
        wal_source: None,
        last_record_lsn: Lsn(0),
        disk_consistent_lsn: Lsn(0),
        remote_consistent_lsn: None,
        remote: RemoteInfo::default(),
        pg_version: 0,
        initial_lsn: Lsn(0),
        in_memory_layers: 0,
        in_memory_bytes: 0,
        l0_layers: 0,
        l0_bytes: 0,
        l1_layers: 0,
        l1_bytes: 0,
        image_layers: 0,
        image_bytes: 0,
        gc_cutoff: Lsn(0),
        lsn_leases: Vec::new(),
        ancestor_timeline_id: None,
        ancestor_lsn: None,
    }
}

/// 400 unless the history at `lsn` is kept (not below the start or the GC
/// cutoff, named in the message) and `lsn <= last_record_lsn`.
pub fn check_read_lsn(tl: &Timeline, lsn: Lsn) -> Result<(), ApiError> {
    if let Err(e @ LsnNotReadable::GarbageCollected { .. }) = tl.check_lsn_readable(lsn) {
        return Err(ApiError::BadRequest(format!(
            "{e} (timeline {}/{})",
            tl.tenant_id, tl.timeline_id
        )));
    }
    let (initial, last) = (tl.min_readable_lsn(), tl.get_last_record_lsn());
    if lsn < initial || lsn > last {
        return Err(ApiError::BadRequest(format!(
            "LSN {lsn} is outside the readable range {initial}..={last} of timeline {}/{}",
            tl.tenant_id, tl.timeline_id
        )));
    }
    Ok(())
}

/// `POST /v1/tenant/{tenant_id}/timeline`: an empty timeline at `initial_lsn`.
pub async fn create(
    State(state): State<HttpState>,
    TenantPath(tenant_id): TenantPath,
    JsonBody(req): JsonBody<Option<TimelineCreateRequest>>,
) -> Result<(StatusCode, Json<TimelineInfo>), ApiError> {
    let req = req.unwrap_or_default();
    if let Some(ancestor) = req.ancestor_timeline_id {
        return super::branches::create(&state, tenant_id, ancestor, req).await;
    }
    if let Some(source) = req.source {
        if req.pg_version.is_some() || req.initial_lsn.is_some() {
            return Err(ApiError::BadRequest(
                "pg_version and initial_lsn come from the primary: leave them out with a source"
                    .to_string(),
            ));
        }
        let id = req.new_timeline_id.unwrap_or_else(TimelineId::generate);
        let tenant = state.tenants.get_tenant(tenant_id)?;
        let tl = bootstrap::create_following_timeline(
            tenant,
            id,
            source.connstring,
            source.slot,
            source.on_divergence.unwrap_or_default(),
            state.walreceiver.clone(),
        )
        .await?;
        return Ok((StatusCode::CREATED, Json(timeline_info(&tl))));
    }
    let pg_version = req.pg_version.unwrap_or(DEFAULT_PG_VERSION);
    if !SUPPORTED_PG_VERSIONS.contains(&pg_version) {
        return Err(ApiError::BadRequest(format!(
            "pg_version {pg_version} is not supported (expected {}..={})",
            SUPPORTED_PG_VERSIONS.start(),
            SUPPORTED_PG_VERSIONS.end()
        )));
    }
    let id = req.new_timeline_id.unwrap_or_else(TimelineId::generate);
    let initial_lsn = req.initial_lsn.unwrap_or(Lsn(0));
    let tenant = state.tenants.get_tenant(tenant_id)?;
    let tl = tenant.create_empty_timeline(id, initial_lsn, pg_version).await?;
    Ok((StatusCode::CREATED, Json(timeline_info(&tl))))
}

/// `GET /v1/tenant/{tenant_id}/timeline`: sorted by timeline id.
pub async fn list(
    State(state): State<HttpState>,
    TenantPath(tenant_id): TenantPath,
) -> Result<Json<Vec<TimelineInfo>>, ApiError> {
    let tenant = state.tenants.get_tenant(tenant_id)?;
    let mut infos: Vec<_> = tenant.list_timelines().iter().map(|t| timeline_info(t)).collect();
    infos.extend(
        tenant
            .list_broken_timelines()
            .into_iter()
            .map(|(id, reason)| broken_timeline_info(tenant_id, id, reason)),
    );
    infos.sort_by_key(|i| i.timeline_id);
    Ok(Json(infos))
}

/// `GET /v1/tenant/{tenant_id}/timeline/{timeline_id}`.
pub async fn get(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
) -> Result<Json<TimelineInfo>, ApiError> {
    match state.tenants.get_timeline(tenant_id, timeline_id) {
        Ok(tl) => Ok(Json(timeline_info(&tl))),
        Err(TenantError::TimelineBroken { reason, .. }) => {
            Ok(Json(broken_timeline_info(tenant_id, timeline_id, reason)))
        }
        Err(e) => Err(e.into()),
    }
}

/// `DELETE /v1/tenant/{tenant_id}/timeline/{timeline_id}`: a Broken
/// timeline too. The slot of a following timeline is released
/// (`walreceiver::slots`); the answer says what became of it.
pub async fn delete(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
) -> Result<Json<serde_json::Value>, ApiError> {
    let tenant = state.tenants.get_tenant(tenant_id)?;
    // From disk: a Broken timeline's source is there too.
    let sources = state.tenants.wal_sources_on_disk(tenant_id, Some(timeline_id)).await;
    tenant.delete_timeline(timeline_id).await?;
    let ids = (tenant_id, timeline_id);
    let cause = slots::Cause::TimelineDelete;
    let release = match sources.unwrap_or_default().into_iter().next().map(|ts| ts.source) {
        None | Some(Ok(None)) => return Ok(Json(serde_json::json!({}))),
        Some(Ok(Some(source))) => slots::release(&state.tenants, ids, &source, cause).await,
        Some(Err(why)) => slots::release_unknown(ids, &why, cause),
    };
    Ok(Json(release.to_json()))
}

/// `PUT .../source` `{"connstring", "slot", "on_divergence"}`: a timeline
/// starts following a server of the cluster it holds (the primary it was
/// backed up from, or after a failover the new primary), on an existing
/// slot, from its `last_record_lsn`; a source it had is replaced. The
/// answer is the timeline's detail plus `slots_left`: a message per slot
/// of the replaced source that could not be dropped, naming its host and
/// the SQL that drops it there.
pub async fn set_source(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    JsonBody(req): JsonBody<WalSourceRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let tenant = state.tenants.get_tenant(tenant_id)?;
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    let (source, left) =
        bootstrap::attach_source(&state.tenants, &tl, req, &state.walreceiver).await?;
    crate::walreceiver::start(&tenant, &tl, source, state.walreceiver.clone());
    let mut answer = serde_json::to_value(timeline_info(&tl)).expect("a TimelineInfo serializes");
    answer["slots_left"] = serde_json::json!(left);
    Ok(Json(answer))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyspaceQuery {
    at_lsn: Option<Lsn>,
}

/// `GET .../keyspace[?at_lsn=X/X]`: every key that exists at `at_lsn`
/// (default: `last_record_lsn`), as PostgreSQL sees the data directory.
pub async fn keyspace(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    QueryParams(q): QueryParams<KeyspaceQuery>,
) -> Result<Json<KeySpace>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    let at_lsn = q.at_lsn.unwrap_or_else(|| tl.get_last_record_lsn());
    check_read_lsn(&tl, at_lsn)?;
    let keys =
        crate::pgdatadir_mapping::collect_keyspace(&tl, ReadKind::HttpRequest, at_lsn).await?;
    Ok(Json(KeySpace { keys, sparse_keys: Vec::new(), at_lsn }))
}

/// `PUT .../import_basebackup`: the body is a `pg_basebackup -Ft -X none`
/// tar, or the whole `-Ft` directory as one tar (`import::nested`),
/// streamed into a new timeline `{timeline_id}`. Returns once durable.
/// A failure says what happened: the tenant was deleted meanwhile (409), the
/// body stopped (400, or 408 after `http_body_read_timeout`), the daemon is
/// shutting down (503).
pub async fn import_basebackup(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<TimelineInfo>), ApiError> {
    let tenant = state.tenants.get_tenant(tenant_id)?;
    // Progress in tar bytes received (the import reads as it receives).
    let progress = tenant.start_progress("import", "bytes", timeline_id);
    let length = headers.get(axum::http::header::CONTENT_LENGTH);
    if let Some(total) = length.and_then(|v| v.to_str().ok()?.parse().ok()) {
        progress.set_total(total);
    }
    let counted = progress.clone();
    let stream = body.into_data_stream().map(move |chunk| {
        if let Ok(bytes) = &chunk {
            counted.add(bytes.len() as u64);
        }
        chunk.map_err(body_read_error)
    });
    let res = crate::import::import_basebackup(tenant.clone(), timeline_id, stream).await;
    progress.finish();
    match res {
        Ok(tl) => Ok((StatusCode::CREATED, Json(timeline_info(&tl)))),
        Err(_) if state.cancel.is_cancelled() => Err(ApiError::ShuttingDown),
        Err(_) if tenant.cancel.is_cancelled() => Err(ApiError::Conflict(format!(
            "tenant {tenant_id} was deleted during the import of timeline {timeline_id}; \
             nothing was imported"
        ))),
        Err(ImportError::BodyRead { timed_out: true, msg }) => {
            Err(ApiError::RequestTimeout(format!("import of {tenant_id}/{timeline_id}: {msg}")))
        }
        Err(ImportError::BodyRead { msg, .. }) => Err(ApiError::BadRequest(format!(
            "import of {tenant_id}/{timeline_id}: the client went away or the body broke off: \
             {msg}; nothing was imported"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// A body chunk that could not be read, as the tar reader's IO error:
/// `TimedOut` for `http_body_read_timeout`, `ConnectionAborted` otherwise.
fn body_read_error(e: axum::Error) -> std::io::Error {
    use std::error::Error as _;
    let mut source: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = source {
        if s.is::<tower_http::timeout::TimeoutError>() {
            return std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no body data arrived within http_body_read_timeout",
            );
        }
        source = s.source();
    }
    std::io::Error::new(std::io::ErrorKind::ConnectionAborted, e.to_string())
}

/// `PUT|POST .../checkpoint`: freeze the open in-memory layer and wait until
/// everything ingested so far is in layer files.
pub async fn checkpoint(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
) -> Result<Json<CheckpointResponse>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    match tl.freeze_and_flush().await {
        Ok(disk_consistent_lsn) => Ok(Json(CheckpointResponse { disk_consistent_lsn })),
        Err(_) if tl.cancel.is_cancelled() => Err(ApiError::ShuttingDown),
        Err(e) => Err(ApiError::Internal(e.context("checkpoint"))),
    }
}

/// `POST .../lsn_lease` `{"lsn": "X/X"}`: grant or renew the lease at `lsn`
/// (see `Timeline::lease_lsn`); `{"valid_until": "<RFC 3339>"}` once it is
/// durable. 400 for an LSN whose history the timeline cannot serve.
pub async fn lsn_lease(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    JsonBody(req): JsonBody<LsnLeaseRequest>,
) -> Result<Json<LsnLeaseResponse>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    match tl.lease_lsn(req.lsn).await {
        Ok(lease) => Ok(Json(LsnLeaseResponse { valid_until: rfc3339_ms(lease.valid_until) })),
        Err(e @ (LeaseError::InvalidLsn | LeaseError::BelowHistory { .. })) => {
            Err(ApiError::BadRequest(e.to_string()))
        }
        Err(e @ LeaseError::TooMany(_)) => Err(ApiError::Conflict(e.to_string())),
        Err(LeaseError::ShuttingDown) => Err(ApiError::ShuttingDown),
        Err(LeaseError::Persist(e)) => Err(ApiError::Internal(e.context("persist LSN lease"))),
    }
}
