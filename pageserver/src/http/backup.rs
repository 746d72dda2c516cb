//! `GET /v1/tenant/{tenant_id}/timeline/{timeline_id}/fullbackup[?lsn=X/X]`:
//! the timeline's full backup at `lsn` (default `last_record_lsn`), the same
//! tar as the page service's `fullbackup`, for operators.
//!
//! Streamed: a task of the timeline writes the tar into a channel of
//! [`CHANNEL_CHUNKS`] chunks that the response body drains, so memory stays
//! bounded whatever the size; a client that goes away ends the task at its
//! next chunk. As elsewhere in the API, the LSN is checked, not waited for:
//! outside the readable range it is a 400 before any byte is sent. An error
//! while streaming (the status is sent by then) cuts the body short, which
//! the client sees as a truncated transfer, and is logged.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use tracing::{info, warn};
use utils::lsn::Lsn;

use super::error::ApiError;
use super::extract::{QueryParams, TimelinePath};
use super::timelines::check_read_lsn;
use super::HttpState;
use crate::basebackup::{self, BackupError, BackupOptions, ChunkSink};
use crate::tenant::ReadKind;

/// Chunks (of about `basebackup::tar::CHUNK_BYTES`) buffered between the
/// generator and the socket.
const CHANNEL_CHUNKS: usize = 4;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FullbackupQuery {
    lsn: Option<Lsn>,
}

pub async fn fullbackup(
    State(state): State<HttpState>,
    TimelinePath(tenant_id, timeline_id): TimelinePath,
    QueryParams(q): QueryParams<FullbackupQuery>,
) -> Result<Response, ApiError> {
    let tl = state.tenants.get_timeline(tenant_id, timeline_id)?;
    let lsn = q.lsn.unwrap_or_else(|| tl.get_last_record_lsn());
    check_read_lsn(&tl, lsn)?;
    let lsn = basebackup::resolve_lsn(&tl, Some(lsn), &state.cancel).await.map_err(api_error)?;
    let opts = BackupOptions {
        lsn,
        full: true,
        replica: false,
        gzip: false,
        reader: ReadKind::HttpRequest,
    };
    let prepared = basebackup::prepare(&tl, opts).await.map_err(api_error)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_CHUNKS);
    let task_tl = tl.clone();
    tl.spawn_background(async move {
        let sink = ChannelSink { tx: tx.clone(), cancel: task_tl.cancel.clone() };
        match basebackup::send_tarball(&task_tl, prepared, sink).await {
            Ok(_) => {}
            Err(BackupError::Disconnected(e)) => info!("fullbackup over HTTP at {lsn}: {e}"),
            Err(e) => {
                warn!("fullbackup over HTTP at {lsn} failed while streaming: {e}");
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
            }
        }
    });
    let body =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let name = format!("attachment; filename=\"{timeline_id}_{:X}.tar\"", lsn.0);
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-tar".to_string()),
            (header::CONTENT_DISPOSITION, name),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

struct ChannelSink {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    cancel: tokio_util::sync::CancellationToken,
}

impl ChunkSink for ChannelSink {
    async fn send(&mut self, chunk: Bytes) -> Result<(), BackupError> {
        tokio::select! {
            r = self.tx.send(Ok(chunk)) => r.map_err(|_| {
                BackupError::Disconnected(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the HTTP client went away",
                ))
            }),
            _ = self.cancel.cancelled() => Err(BackupError::Shutdown),
        }
    }
}

fn api_error(e: BackupError) -> ApiError {
    match e {
        BackupError::Shutdown => ApiError::ShuttingDown,
        e @ (BackupError::NotReadable(_)
        | BackupError::Unaligned(_)
        | BackupError::LsnTimeout { .. }) => ApiError::BadRequest(e.to_string()),
        e => ApiError::Internal(anyhow::Error::new(e)),
    }
}
