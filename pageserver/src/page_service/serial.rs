//! The serial handler (`page_service_pipelining = { mode = "serial" }`): read
//! one request, execute it, write and flush its response, repeat.
//!
//! Nothing is batched; every getpage is its own vectored get. Responses are
//! trivially in request order. Shutdown is observed while reading, executing
//! and flushing, so a client that never reads cannot hold the stream open.
//! While a request executes the socket is watched for EOF: a client that
//! leaves while its request waits (for WAL, say) ends the stream at once.

use pageserver_api::pagestream::PagestreamProtocolVersion;
use tokio_util::sync::CancellationToken;

use super::error::QueryError;
use super::execute::{client_gone, execute, write_responses, ExecCtx};
use super::request::next_request;
use crate::tenant::Timeline;
use pq_proto::{FrameReader, FrameWriter};

pub async fn run(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    tl: &Timeline,
    version: PagestreamProtocolVersion,
    constant_pages: bool,
    cancel: &CancellationToken,
) -> Result<(), QueryError> {
    let ctx = ExecCtx { tl, version, cancel, pipelined: false, constant_pages };
    loop {
        let Some(work) = next_request(reader, tl, version, cancel).await? else {
            return Ok(());
        };
        let (exec, closed) = (execute(&ctx, work, None), reader.wait_closed());
        let responses = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(QueryError::Shutdown),
            r = exec => r?,
            _ = closed => return Err(client_gone()),
        };
        write_responses(writer, &responses, version);
        writer.flush(cancel).await?;
    }
}
