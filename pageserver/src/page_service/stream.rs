//! One pagestream: from the CopyBothResponse until the stream ends, bound to
//! one timeline. Reads requests off the CopyBoth stream and hands them to the
//! configured handler (`serial` or `pipelined`), which read requests with
//! `request::next_request`.
//!
//! How a stream ends:
//! - Terminate (`X`) or EOF from the client: `Ok(())` once every response to
//!   the requests read before it is written, if they complete without
//!   waiting; a request still waiting (for WAL up to `wait_lsn_timeout`, or
//!   IO) is abandoned at once, `Err(QueryError::Disconnected)`. Either way
//!   the connection then closes.
//! - CopyDone, CopyFail, any other message type, an unparsable CopyData or an
//!   oversized frame: `Err(QueryError::Fatal)` *after* every earlier response;
//!   the connection sends an ErrorResponse and closes.
//! - Daemon shutdown, or shutdown/deletion of the timeline (its `cancel`):
//!   `Err(QueryError::Shutdown)` promptly, even when the client stops reading
//!   (every socket operation races the stream's cancellation token).
//! - Socket errors: `Err(QueryError::Disconnected)`.

use std::sync::Arc;

use pageserver_api::config::PageServicePipeliningConfig;
use pageserver_api::pagestream::PagestreamProtocolVersion;
use tokio_util::sync::CancellationToken;

use super::error::QueryError;
use super::{pipelined, serial, PageServiceConf};
use crate::tenant::Timeline;
use pq_proto::{FrameReader, FrameWriter};

/// Runs the pagestream of `tl` until it ends (see the module comment).
/// Gives the reader back unless a reader task failed.
pub async fn run(
    mut reader: FrameReader,
    writer: &mut FrameWriter,
    tl: Arc<Timeline>,
    version: PagestreamProtocolVersion,
    conf: &PageServiceConf,
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
    let constant_pages = conf.constant_pages;
    let (res, reader) = match &conf.pipelining {
        PageServicePipeliningConfig::Serial => {
            let res = serial::run(&mut reader, writer, &tl, version, constant_pages, &cancel).await;
            (res, Some(reader))
        }
        PageServicePipeliningConfig::Pipelined(p) => {
            pipelined::run(reader, writer, tl.clone(), version, p, constant_pages, &cancel).await
        }
    };
    cancel.cancel();
    // The watcher ends as soon as `cancel` is cancelled.
    let _ = watcher.await;
    (res, reader)
}
