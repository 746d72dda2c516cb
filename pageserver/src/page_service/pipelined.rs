//! The pipelined handler (`page_service_pipelining = { mode = "pipelined", ... }`).
//!
//! ```text
//!            socket (read half)                               socket (write half)
//!                   |                                                  ^
//!   +---------------v----------------+   spsc_fold    +----------------+---------------+
//!   | reader                         |  one pending   | executor                       |
//!   |  parse CopyData, validate LSNs,| -------------> |  take the whole pending value, |
//!   |  compute effective LSN,        |  work item     |  wait for LSN once, one        |
//!   |  fold into the pending batch   |  (a batch)     |  vectored get, encode all      |
//!   +--------------------------------+                |  responses, flush once         |
//!                                                     +--------------------------------+
//! ```
//!
//! # Reader / executor contract
//!
//! - The reader turns every CopyData into a work item and `send`s it. If a
//!   batch is pending, [`batch::try_fold`] decides whether the item joins it
//!   (GetPages only, same timeline, `max_batch_size`, LSN rule); if refused,
//!   the reader waits until the executor takes the pending value, so at most
//!   one item is buffered beyond the pending batch, and the socket provides
//!   backpressure to the client from there.
//! - The executor takes whatever is pending, whole. There are no timers: a
//!   batch grows only while the executor is busy (executing or flushing the
//!   previous one), so a client with one request in flight pays nothing for
//!   batching and a client with many in flight gets them batched.
//! - Order: the channel is FIFO at the granularity of items, a batch keeps
//!   its requests in arrival order, and the executor writes each item's
//!   responses before taking the next one. Responses are therefore strictly
//!   in request order, errors included.
//! - The executor flushes the socket once per item (once per batch).
//!
//! # Execution strategies
//!
//! - `concurrent-futures`: reader and executor are two futures joined in the
//!   connection's task, the reader polled first on every wake-up. While the
//!   executor awaits (IO, socket), the reader runs and folds; when the
//!   reader's socket read would block (or its fold is refused), the executor
//!   runs.
//! - `tasks`: the reader is a separate tokio task (it owns the read half);
//!   the executor stays in the connection's task. Cross-task wake-ups cost a
//!   little latency but let the two halves run on both cores.
//!
//! # Ending, errors and cancellation
//!
//! - Client gone (Terminate or EOF): the reader drops its sender and cancels
//!   `client_gone`. Work that completes without waiting is still answered
//!   (`spsc_fold` drains after the sender is gone; execution is polled before
//!   `client_gone`); work that would wait (for WAL, for IO) is abandoned at
//!   once, so a client that leaves never holds the connection, its socket or
//!   a WAL waiter for `wait_lsn_timeout`. Then `SenderGone` ends the stream.
//! - Protocol error seen by the reader (bad CopyData, wrong message type,
//!   oversized frame): it sends a `Fatal` item and stops. The executor
//!   answers everything before it, then returns that error; the connection
//!   sends an ErrorResponse and closes.
//! - Per-request errors never end the stream: they are in-band responses.
//! - Executor failure (socket write error, shutdown): the executor returns
//!   and cancels `reader_cancel`, which ends a reader blocked in a socket
//!   read; a reader blocked in `send` gets `ReceiverGone` once the receiver
//!   is dropped. Either way the reader stops promptly.
//! - Shutdown (daemon, or the timeline's `cancel`): `cancel` is cancelled.
//!   The reader's socket read, the executor's LSN wait, execution and flush
//!   all race it, so the stream ends within one scheduling round even if the
//!   client never reads its responses (the flush would block forever) or
//!   never sends anything. Work in flight is dropped unanswered; the client
//!   reconnects and resends.
//! - In `tasks` mode the executor joins the reader task before returning, so
//!   nothing of the stream outlives it.

use std::sync::Arc;

use pageserver_api::config::{
    PageServicePipeliningConfigPipelined,
    PageServiceProtocolPipelinedExecutionStrategy as Execution,
};
use pageserver_api::pagestream::PagestreamProtocolVersion;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use utils::spsc_fold;

use super::batch::{self, BatchedFeMessage};
use super::error::QueryError;
use super::execute::{client_gone as client_gone_error, execute, ExecCtx};
use super::request::next_request;
use crate::tenant::Timeline;
use pq_proto::{FrameReader, FrameWriter};

pub async fn run(
    reader: FrameReader,
    writer: &mut FrameWriter,
    tl: Arc<Timeline>,
    version: PagestreamProtocolVersion,
    conf: &PageServicePipeliningConfigPipelined,
    cancel: &CancellationToken,
) -> (Result<(), QueryError>, Option<FrameReader>) {
    let (tx, rx) = spsc_fold::channel::<BatchedFeMessage>();
    // Cancelled by shutdown (parent) or when the executor stops.
    let reader_cancel = cancel.child_token();
    // Cancelled by the reader at EOF or Terminate.
    let client_gone = CancellationToken::new();
    let read_half = read_loop(
        reader,
        tx,
        Arc::clone(&tl),
        version,
        (conf.max_batch_size.get(), conf.batching),
        reader_cancel.clone(),
        client_gone.clone(),
    );
    let exec_half = async {
        let res = exec_loop(rx, writer, &tl, version, cancel, &client_gone).await;
        reader_cancel.cancel();
        res
    };
    match conf.execution {
        Execution::ConcurrentFutures => {
            // `futures::future::join` polls the reader first on every wake-up
            // (tokio's `join!` rotates), so everything already in the socket
            // is folded into the pending batch before the executor takes it.
            let (reader, res) = futures::future::join(read_half, exec_half).await;
            (res, Some(reader))
        }
        Execution::Tasks => {
            let reader_task = tokio::spawn(read_half);
            let res = exec_half.await;
            // `reader_cancel` is cancelled: the reader ends promptly.
            match reader_task.await {
                Ok(reader) => (res, Some(reader)),
                Err(e) => {
                    warn!("pagestream reader task failed: {e}");
                    (res, None)
                }
            }
        }
    }
}

/// The reader: parse, prepare and fold requests until the stream ends.
/// Terminal conditions are reported through the channel (see the module
/// comment); the function itself never fails. Returns the reader, for the
/// connection's lingering close.
async fn read_loop(
    mut reader: FrameReader,
    mut tx: spsc_fold::Sender<BatchedFeMessage>,
    tl: Arc<Timeline>,
    version: PagestreamProtocolVersion,
    (max_batch_size, batching): (usize, batch::Batching),
    cancel: CancellationToken,
    client_gone: CancellationToken,
) -> FrameReader {
    loop {
        let work = match next_request(&mut reader, &tl, version, &cancel).await {
            Ok(Some(work)) => work,
            // Clean end: dropping `tx` lets the executor drain and finish.
            Ok(None) => {
                client_gone.cancel();
                return reader;
            }
            Err(e) => BatchedFeMessage::Fatal(e),
        };
        let last = matches!(work, BatchedFeMessage::Fatal(_));
        let sent = tx
            .send(work, |pending, new| batch::try_fold(pending, new, max_batch_size, batching))
            .await;
        if sent.is_err() || last {
            // The executor is gone (it has already ended the stream), or the
            // stream cannot continue.
            return reader;
        }
    }
}

/// The executor: answer work items in order, one flush per item.
async fn exec_loop(
    mut rx: spsc_fold::Receiver<BatchedFeMessage>,
    writer: &mut FrameWriter,
    tl: &Timeline,
    version: PagestreamProtocolVersion,
    cancel: &CancellationToken,
    client_gone: &CancellationToken,
) -> Result<(), QueryError> {
    let ctx = ExecCtx { tl, version, cancel, pipelined: true };
    // One registration for the whole stream, not one per batch.
    let gone = client_gone.cancelled();
    tokio::pin!(gone);
    loop {
        let work = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(QueryError::Shutdown),
            r = rx.recv() => match r {
                Ok(work) => work,
                Err(spsc_fold::RecvError::SenderGone) => return Ok(()),
            },
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(QueryError::Shutdown),
            r = execute(&ctx, work, &mut *writer) => r?,
            _ = &mut gone => return Err(client_gone_error()),
        }
        writer.flush(cancel).await?;
    }
}
