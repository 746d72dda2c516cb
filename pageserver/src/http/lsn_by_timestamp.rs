//! `GET .../get_lsn_by_timestamp` and `GET .../get_timestamp_of_lsn`: the
//! timeline's commit-time index (`tenant/commit_times.rs`) over HTTP.
//!
//! Times are RFC 3339 in and out; in, `Z` or a `+HH:MM`/`-HH:MM` offset,
//! any fraction of a second down to microseconds (PostgreSQL's precision);
//! out, UTC with microseconds.

use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::Json;
use pageserver_api::models::{
    LsnByTimestampKind, LsnByTimestampQuery, LsnByTimestampResponse, TimestampOfLsnQuery,
};

use super::error::ApiError;
use super::extract::{QueryParams, TimelinePath};
use super::HttpState;
use crate::tenant::commit_times::{pg_timestamp, system_time, LsnForTimestamp};

/// `GET .../get_lsn_by_timestamp?timestamp=<RFC 3339>`.
pub async fn get_lsn_by_timestamp(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    QueryParams(q): QueryParams<LsnByTimestampQuery>,
) -> Result<Json<LsnByTimestampResponse>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    let at = parse_time(&q.timestamp)?;
    let ts = pg_timestamp(at).ok_or_else(|| {
        ApiError::BadRequest(format!("timestamp {:?} is out of range", q.timestamp))
    })?;
    let answer = tl.lsn_for_timestamp(ts).await.map_err(|e| ApiError::Internal(e.into()))?;
    let (lsn, kind) = match answer {
        LsnForTimestamp::Present(l) => (l, LsnByTimestampKind::Present),
        LsnForTimestamp::Past(l) => (l, LsnByTimestampKind::Past),
        LsnForTimestamp::Future(l) => (l, LsnByTimestampKind::Future),
        LsnForTimestamp::NoData(l) => (l, LsnByTimestampKind::Nodata),
    };
    Ok(Json(LsnByTimestampResponse { lsn, kind }))
}

/// `GET .../get_timestamp_of_lsn?lsn=X/X`: a JSON string, the time of the
/// last transaction that ended at or before `lsn`.
pub async fn get_timestamp_of_lsn(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    QueryParams(q): QueryParams<TimestampOfLsnQuery>,
) -> Result<Json<String>, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    let last = tl.get_last_record_lsn();
    if q.lsn > last {
        return Err(ApiError::BadRequest(format!(
            "LSN {} is above the last record LSN {last} of timeline {tenant_id}/{timeline_id}",
            q.lsn
        )));
    }
    let ts = tl.timestamp_of_lsn(q.lsn).await.map_err(|e| ApiError::Internal(e.into()))?;
    let Some(ts) = ts else {
        return Err(ApiError::NotFound(format!(
            "no transaction ended at or before LSN {} on timeline {tenant_id}/{timeline_id} \
             (or GC removed its record)",
            q.lsn
        )));
    };
    let at = system_time(ts).ok_or_else(|| {
        ApiError::Internal(anyhow::anyhow!("commit timestamp {ts} is before 1970"))
    })?;
    Ok(Json(humantime::format_rfc3339_micros(at).to_string()))
}

/// RFC 3339 with `Z` or a numeric offset (humantime takes only `Z`).
fn parse_time(s: &str) -> Result<SystemTime, ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
            "timestamp {s:?} is not RFC 3339 (like 2026-11-28T03:04:05.123456Z or ...+02:00)"
        ))
    };
    let (base, offset_secs) = match s.len().checked_sub(6).map(|i| s.split_at(i)) {
        Some((base, off))
            if matches!(off.as_bytes()[0], b'+' | b'-') && off.as_bytes()[3] == b':' =>
        {
            let h: u64 = off[1..3].parse().map_err(|_| bad())?;
            let m: u64 = off[4..6].parse().map_err(|_| bad())?;
            let secs = (h * 3600 + m * 60) as i64;
            (format!("{base}Z"), if off.starts_with('-') { -secs } else { secs })
        }
        _ => (s.to_string(), 0),
    };
    let utc = humantime::parse_rfc3339(&base).map_err(|_| bad())?;
    // Local time = UTC + offset, so UTC = local - offset.
    let shift = Duration::from_secs(offset_secs.unsigned_abs());
    let t = if offset_secs >= 0 { utc.checked_sub(shift) } else { utc.checked_add(shift) };
    t.ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_with_z_and_offsets() {
        let z = parse_time("2026-11-28T03:04:05.123456Z").unwrap();
        assert_eq!(parse_time("2026-11-28T05:04:05.123456+02:00").unwrap(), z);
        assert_eq!(parse_time("2026-11-28T02:34:05.123456-00:30").unwrap(), z);
        assert_eq!(parse_time("2026-11-28T03:04:05.123456+00:00").unwrap(), z);
        for bad in ["", "yesterday", "2026-11-28T03:04:05+0200", "2026-11-28T03:04:05+xx:00"] {
            let e = parse_time(bad).unwrap_err();
            assert!(e.to_string().contains("is not RFC 3339"), "{bad}: {e}");
        }
    }
}
