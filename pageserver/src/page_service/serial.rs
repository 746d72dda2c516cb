//! The serial handler (`page_service_pipelining = { mode = "serial" }`): read
//! one request, execute it, write and flush its response, repeat.
//!
//! Nothing is batched; every getpage is its own vectored get. Responses are
//! trivially in request order. Shutdown is observed while reading, executing
//! and flushing, so a client that never reads cannot hold the stream open.

use pageserver_api::pagestream::PagestreamProtocolVersion;
use tokio_util::sync::CancellationToken;

use super::error::QueryError;
use super::execute::{execute, ExecCtx};
use super::request::next_request;
use crate::tenant::Timeline;
use pq_proto::{FrameReader, FrameWriter};

pub async fn run(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    tl: &Timeline,
    version: PagestreamProtocolVersion,
    cancel: &CancellationToken,
) -> Result<(), QueryError> {
    let ctx = ExecCtx { tl, version, cancel, pipelined: false };
    loop {
        let Some(work) = next_request(reader, tl, version, cancel).await? else {
            return Ok(());
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(QueryError::Shutdown),
            r = execute(&ctx, work, &mut *writer) => r?,
        }
        writer.flush(cancel).await?;
    }
}
