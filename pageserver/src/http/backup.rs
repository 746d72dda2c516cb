//! `GET /v1/tenant/{tenant_id}/timeline/{timeline_id}/fullbackup[?lsn=X/X]`:
//! the timeline's full backup at `lsn` (default `last_record_lsn`), the same
//! tar as the page service's `fullbackup`, for operators.
//!
//! Streamed: a task of the timeline writes the tar into a channel of
//! [`CHANNEL_CHUNKS`] pieces that the response body drains, so memory stays
//! bounded whatever the size; a client that goes away ends the task at its
//! next chunk. As elsewhere in the API, the LSN is checked, not waited for.
//!
//! Errors, the contract (`docs/http-api.md`):
//! - before the response head: everything that can be refused (unknown
//!   tenant/timeline, a Broken one, the LSN's bounds and GC cutoff, the
//!   control file) and every error of the generator before its first chunk
//!   (the head waits for that chunk) is a 4xx/5xx with `{"msg": ...}`;
//! - after it: the body is aborted. The channel carries an explicit
//!   [`Piece::Done`] after the last chunk, and only then does the body end
//!   cleanly (with the chunked encoding's final zero-length chunk). A
//!   failure, or a task that ends without `Done` (timeline shutdown), makes
//!   the body stream yield an error, on which the server closes the
//!   connection without that final chunk: the client sees an incomplete
//!   response, never a short tar that looks whole.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::{info, warn};
use utils::lsn::Lsn;

use super::error::ApiError;
use super::extract::{QueryParams, TimelinePath};
use super::timelines::check_read_lsn;
use super::HttpState;
use crate::basebackup::{self, BackupError, BackupOptions, ChunkSink};
use crate::tenant::{ReadKind, Timeline};

/// Chunks (of about `basebackup::tar::CHUNK_BYTES`) buffered between the
/// generator and the socket.
const CHANNEL_CHUNKS: usize = 4;

/// What the generator task sends the response body.
enum Piece {
    Chunk(Bytes),
    /// The archive is complete: the body may end.
    Done,
}

/// The generator's end as the body sees it: its channel, and why it failed
/// when the channel closes without [`Piece::Done`] (set before the close,
/// so that a generator never waits for room to report it: a client that
/// does not read cannot hold up the timeline's shutdown).
struct Generated {
    rx: mpsc::Receiver<Piece>,
    failure: Arc<Mutex<Option<BackupError>>>,
    tl: Arc<Timeline>,
}

impl Generated {
    /// The next chunk; `Ok(None)` once the archive is complete.
    async fn next(&mut self) -> Result<Option<Bytes>, BackupError> {
        match self.rx.recv().await {
            Some(Piece::Chunk(chunk)) => Ok(Some(chunk)),
            Some(Piece::Done) => Ok(None),
            None => Err(self.failure.lock().unwrap().take().unwrap_or_else(|| {
                if self.tl.cancel.is_cancelled() {
                    BackupError::Shutdown // the task stopped at the shutdown
                } else {
                    BackupError::Internal(
                        "the backup generator ended before the archive was complete".into(),
                    )
                }
            })),
        }
    }
}

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
    let lsn = basebackup::resolve_lsn(&tl, Some(lsn), &state.cancel)
        .await
        .map_err(|e| api_error(&state, &tl, e))?;
    let opts = BackupOptions {
        lsn,
        full: true,
        replica: false,
        gzip: false,
        reader: ReadKind::HttpRequest,
    };
    let prepared = basebackup::prepare(&tl, opts).await.map_err(|e| api_error(&state, &tl, e))?;
    let mut generated = spawn_generator(&tl, prepared, lsn);
    // The head waits for the first chunk: an error before it is a status.
    // (An archive is at least its end marker: `Done` comes after a chunk.)
    let first = match generated.next().await {
        Ok(Some(chunk)) => chunk,
        Ok(None) => return Err(ApiError::Internal(anyhow::anyhow!("empty backup archive"))),
        Err(e) => return Err(api_error(&state, &tl, e)),
    };
    // Progress in archive bytes sent (the total is not known ahead).
    let progress = tl.start_progress("fullbackup", "bytes");
    progress.add(first.len() as u64);
    let rest = futures::stream::unfold(Some(generated), move |slot| {
        let progress = progress.clone();
        async move {
            let mut generated = slot?;
            match generated.next().await {
                Ok(Some(chunk)) => {
                    progress.add(chunk.len() as u64);
                    Some((Ok(chunk), Some(generated)))
                }
                Ok(None) => {
                    progress.finish();
                    None
                }
                Err(e) => {
                    // Logged here, once: the client only sees the connection close.
                    let tl = &generated.tl;
                    warn!(
                        "fullbackup of {}/{} at {lsn} over HTTP failed while streaming, body \
                     aborted: {e}",
                        tl.tenant_id, tl.timeline_id
                    );
                    Some((Err(std::io::Error::other(e.to_string())), None))
                }
            }
        }
    });
    let body = futures::stream::once(async { Ok(first) }).chain(rest);
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

/// Start the task that writes the archive into a channel.
fn spawn_generator(tl: &Arc<Timeline>, prepared: basebackup::Prepared, lsn: Lsn) -> Generated {
    let (tx, rx) = mpsc::channel::<Piece>(CHANNEL_CHUNKS);
    let failure = Arc::new(Mutex::new(None));
    let (task_tl, task_failure) = (tl.clone(), failure.clone());
    tl.spawn_background(async move {
        let sink = ChannelSink { tx: tx.clone(), cancel: task_tl.cancel.clone() };
        match basebackup::send_tarball(&task_tl, prepared, sink).await {
            // A shutdown meanwhile leaves the body without `Done`: aborted.
            Ok(_) => tokio::select! {
                _ = tx.send(Piece::Done) => {}
                _ = task_tl.cancel.cancelled() => {}
            },
            Err(BackupError::Disconnected(e)) => info!(
                "fullbackup of {}/{} at {lsn} over HTTP: {e}",
                task_tl.tenant_id, task_tl.timeline_id
            ),
            // Reported by the body (or the response) when `tx` closes.
            Err(e) => *task_failure.lock().unwrap() = Some(e),
        }
    });
    Generated { rx, failure, tl: tl.clone() }
}

struct ChannelSink {
    tx: mpsc::Sender<Piece>,
    cancel: tokio_util::sync::CancellationToken,
}

impl ChunkSink for ChannelSink {
    async fn send(&mut self, chunk: Bytes) -> Result<(), BackupError> {
        tokio::select! {
            r = self.tx.send(Piece::Chunk(chunk)) => r.map_err(|_| {
                BackupError::Disconnected(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "the HTTP client went away",
                ))
            }),
            _ = self.cancel.cancelled() => Err(BackupError::Shutdown),
        }
    }
}

fn api_error(state: &HttpState, tl: &Timeline, e: BackupError) -> ApiError {
    match e {
        BackupError::Shutdown if state.cancel.is_cancelled() => ApiError::ShuttingDown,
        BackupError::Shutdown => ApiError::Unavailable(format!(
            "timeline {}/{} is shutting down (deleted, detached or reset): no backup of it",
            tl.tenant_id, tl.timeline_id
        )),
        BackupError::TooMany(msg) => ApiError::Overloaded(msg),
        e @ (BackupError::NotReadable(_)
        | BackupError::Unaligned(_)
        | BackupError::LsnTimeout { .. }) => ApiError::BadRequest(e.to_string()),
        e => ApiError::Internal(anyhow::Error::new(e)),
    }
}
