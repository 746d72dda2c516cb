//! One pagestream: from the CopyBothResponse until the stream ends, bound to
//! one timeline. Reads requests off the CopyBoth stream and hands them to the
//! configured handler (`serial` or `pipelined`).
//!
//! How a stream ends:
//! - Terminate (`X`) or EOF from the client: `Ok(())` once every response to
//!   the requests read before it is written; the connection then closes.
//! - CopyDone, CopyFail, any other message type, an unparsable CopyData or an
//!   oversized frame: `Err(QueryError::Fatal)` *after* every earlier response;
//!   the connection sends an ErrorResponse and closes.
//! - Daemon shutdown, or shutdown/deletion of the timeline (its `cancel`):
//!   `Err(QueryError::Shutdown)` promptly, even when the client stops reading
//!   (every socket operation races the stream's cancellation token).
//! - Socket errors: `Err(QueryError::Disconnected)`.

use std::sync::Arc;
use std::time::Instant;

use pageserver_api::config::PageServicePipeliningConfig;
use pageserver_api::pagestream::{PagestreamFeMessage, PagestreamProtocolVersion};
use tokio_util::sync::CancellationToken;

use super::batch::{prepare, BatchedFeMessage};
use super::error::{sqlstate, QueryError};
use super::libpq::{FrameReader, FrameWriter};
use super::{pipelined, serial};
use crate::tenant::Timeline;

/// Reads the next request and prepares it for the executor. `Ok(None)`:
/// the client ended the stream cleanly. Stream-ending protocol errors come
/// back as `Ok(Some(BatchedFeMessage::Fatal))` so that they take their place
/// in the response order; socket errors and shutdown as `Err`.
pub async fn next_request(
    reader: &mut FrameReader,
    tl: &Timeline,
    version: PagestreamProtocolVersion,
    cancel: &CancellationToken,
) -> Result<Option<BatchedFeMessage>, QueryError> {
    let frame = match reader.read_message(cancel).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return Ok(None),
        Err(e @ QueryError::Fatal { .. }) => return Ok(Some(BatchedFeMessage::Fatal(e))),
        Err(e) => return Err(e),
    };
    let fatal = |message: String| {
        Ok(Some(BatchedFeMessage::Fatal(QueryError::fatal(sqlstate::PROTOCOL_VIOLATION, message))))
    };
    match frame.tag {
        b'd' => match PagestreamFeMessage::parse(frame.body, version) {
            Ok(req) => Ok(Some(prepare(tl, req, Instant::now()))),
            Err(e) => fatal(format!("invalid pagestream message: {e}")),
        },
        b'X' => Ok(None),
        b'c' => fatal("client sent CopyDone: a pagestream ends with Terminate or EOF".to_string()),
        b'f' => {
            let why = String::from_utf8_lossy(frame.body.strip_suffix(&[0]).unwrap_or(frame.body));
            fatal(format!("client sent CopyFail: {why}"))
        }
        tag => fatal(format!("unexpected message type '{}' in a pagestream", tag.escape_ascii())),
    }
}

/// Runs the pagestream of `tl` until it ends (see the module comment).
/// Gives the reader back unless a reader task failed.
pub async fn run(
    mut reader: FrameReader,
    writer: &mut FrameWriter,
    tl: Arc<Timeline>,
    version: PagestreamProtocolVersion,
    pipelining: &PageServicePipeliningConfig,
    conn_cancel: &CancellationToken,
) -> (Result<(), QueryError>, Option<FrameReader>) {
    // The stream ends when the connection is cancelled (daemon shutdown) or
    // when the timeline shuts down; one token covers both.
    let cancel = conn_cancel.child_token();
    let _cancel_on_exit = cancel.clone().drop_guard();
    let watcher = {
        let (tl_cancel, cancel) = (tl.cancel.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = tl_cancel.cancelled() => cancel.cancel(),
                _ = cancel.cancelled() => {}
            }
        })
    };
    let (res, reader) = match pipelining {
        PageServicePipeliningConfig::Serial => {
            let res = serial::run(&mut reader, writer, &tl, version, &cancel).await;
            (res, Some(reader))
        }
        PageServicePipeliningConfig::Pipelined(p) => {
            pipelined::run(reader, writer, tl.clone(), version, p, &cancel).await
        }
    };
    cancel.cancel();
    // The watcher ends as soon as `cancel` is cancelled.
    let _ = watcher.await;
    (res, reader)
}
