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
//! - The executor takes whatever is pending, whole, when nothing is
//!   executing. While items execute (waiting on the disk) it takes the
//!   pending value as the next item, if fewer than `max_batches_in_flight`
//!   are executing, only once it holds at least `max_batch_size /
//!   max_batches_in_flight` (rounded up) GetPages, or is not a GetPage
//!   batch, or can no longer grow (`spsc_fold::Receiver::recv_if`). There
//!   are no timers: a batch grows only while the executor cannot or will
//!   not take it, so a client with one request in flight pays nothing for
//!   batching and a client with many in flight gets them batched.
//! - So on a warm cache (every item done before the executor looks again)
//!   batches hold up to `max_batch_size` GetPages whatever
//!   `max_batches_in_flight` is; on a cold disk a client with 32 requests
//!   outstanding has, with the default of two in flight, its next requests
//!   read in a batch of at least 16 while the first is still on the disk,
//!   so the disk idles less between batches (docs/benchmarks.md, cold
//!   reads).
//! - Order: the channel is FIFO at the granularity of items, a batch keeps
//!   its requests in arrival order, and the executor answers items in the
//!   order it took them (`FuturesOrdered`): an item's responses are encoded
//!   only after every earlier item's. Responses are therefore strictly in
//!   request order, errors included.
//! - The executor flushes the socket once for all the items that are done
//!   when it looks (at least once per item answered).
//! - Early answers: a GetPage batch of more than one page sends each answer,
//!   in request order, through its item's channel as soon as it and every
//!   one before it are read. The executor writes the oldest item's early
//!   answers as they arrive (one flush per wake-up) while its later pages
//!   are still read; a younger item's wait in its channel until it is the
//!   oldest. Order is unchanged: an item's answers, early or not, are
//!   written only after every earlier item's.
//!
//! # Execution strategies
//!
//! - `concurrent-futures`: reader and executor are two futures joined in the
//!   connection's task, the reader polled first on every wake-up. While the
//!   executor awaits (IO, socket), the reader runs and folds; when the
//!   reader's socket read would block (or its fold is refused), the executor
//!   runs.
//! - `tasks`: the reader is a separate tokio task (it owns the read half);
//!   the executor stays in the connection's task. Both run on the
//!   connection's thread (`page_service/threads.rs`), so they take turns
//!   as in `concurrent-futures`, with a cross-task wake-up between them.
//!
//! # Ending, errors and cancellation
//!
//! - Client gone (Terminate or EOF): the reader drops its sender and cancels
//!   `client_gone`. Work that completes without waiting is still answered
//!   (`spsc_fold` drains after the sender is gone; execution is polled before
//!   `client_gone`); work that would wait (for WAL, for IO) is abandoned at
//!   once, so a client that leaves never holds the connection, its socket or
//!   a WAL waiter for `wait_lsn_timeout`. Then `SenderGone` ends the stream
//!   once every item taken is answered.
//! - Protocol error seen by the reader (bad CopyData, wrong message type,
//!   oversized frame): it sends a `Fatal` item and stops. The executor
//!   answers everything before it, flushes, then returns that error; the
//!   connection sends an ErrorResponse and closes.
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

use std::collections::VecDeque;
use std::sync::Arc;

use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};

use pageserver_api::config::{
    PageServicePipeliningConfigPipelined,
    PageServiceProtocolPipelinedExecutionStrategy as Execution,
};
use pageserver_api::pagestream::{PagestreamBeMessage, PagestreamProtocolVersion};
use tokio_util::sync::CancellationToken;
use tracing::warn;
use utils::spsc_fold;

use super::batch::{self, BatchedFeMessage};
use super::error::QueryError;
use super::execute::{
    client_gone as client_gone_error, execute, write_responses, EarlyTx, ExecCtx, Responses,
};
use super::request::next_request;
use crate::tenant::Timeline;
use pq_proto::{FrameReader, FrameWriter};

pub async fn run(
    reader: FrameReader,
    writer: &mut FrameWriter,
    tl: Arc<Timeline>,
    version: PagestreamProtocolVersion,
    conf: &PageServicePipeliningConfigPipelined,
    constant_pages: bool,
    cancel: &CancellationToken,
) -> (Result<(), QueryError>, Option<FrameReader>) {
    let (tx, rx) = spsc_fold::channel::<BatchedFeMessage>();
    // Cancelled by shutdown (parent) or when the executor stops.
    let reader_cancel = cancel.child_token();
    // Cancelled by the reader at EOF or Terminate.
    let client_gone = CancellationToken::new();
    let in_flight = conf.max_batches_in_flight.get();
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
        let ctx = ExecCtx { tl: &tl, version, cancel, pipelined: true, constant_pages };
        let slots =
            Slots { max: in_flight, min_pages: conf.max_batch_size.get().div_ceil(in_flight) };
        let res = exec_loop(rx, writer, &ctx, slots, &client_gone).await;
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

/// When the executor takes the next item (see the module comment).
#[derive(Clone, Copy)]
struct Slots {
    /// Items executing at once (`max_batches_in_flight`).
    max: usize,
    /// GetPages a batch needs to be taken while other items execute.
    min_pages: usize,
}

impl Slots {
    /// Whether `work` may start while other items execute.
    fn ready_beside_others(self, work: &BatchedFeMessage) -> bool {
        match work {
            BatchedFeMessage::GetPage(b) => b.pages.len() >= self.min_pages,
            _ => true,
        }
    }
}

/// The executor: execute up to `slots.max` work items at once, answer
/// them in the order taken. The oldest item's early answers (a GetPage
/// batch of more than one page sends each as soon as it and every one
/// before it are read) are written while the rest of it still reads.
async fn exec_loop(
    mut rx: spsc_fold::Receiver<BatchedFeMessage>,
    writer: &mut FrameWriter,
    ctx: &ExecCtx<'_>,
    slots: Slots,
    client_gone: &CancellationToken,
) -> Result<(), QueryError> {
    assert!(slots.max > 0 && slots.min_pages > 0);
    let cancel = ctx.cancel;
    // One registration for the whole stream, not one per batch.
    let gone = client_gone.cancelled();
    tokio::pin!(gone);
    let mut executing = FuturesOrdered::new();
    // Per item in `executing`, in the same order: its early answers.
    let mut early: VecDeque<Option<EarlyRx>> = VecDeque::new();
    let mut sender_open = true;
    while sender_open || !executing.is_empty() {
        debug_assert_eq!(early.len(), executing.len());
        let idle = executing.is_empty();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(QueryError::Shutdown),
            Some(done) = executing.next(), if !executing.is_empty() => {
                answer_done(done, &mut executing, &mut early, writer, ctx).await?;
            }
            Some(msg) = recv_oldest(&mut early), if matches!(early.front(), Some(Some(_))) => {
                write_responses(writer, &[msg], ctx.version);
                let rx = early.front_mut().and_then(Option::as_mut).expect("polled above");
                write_early(rx, writer, ctx);
                writer.flush(ctx.cancel).await?;
            }
            r = rx.recv_if(|w| idle || slots.ready_beside_others(w)),
                if sender_open && executing.len() < slots.max => match r {
                Ok(work) => {
                    let (tx, rx) = early_channel(&work);
                    executing.push_back(execute(ctx, work, tx));
                    early.push_back(rx);
                }
                Err(spsc_fold::RecvError::SenderGone) => sender_open = false,
            },
            // Only work that would still wait is abandoned: what is done is
            // answered first (the branches above are polled before this one).
            _ = &mut gone, if !executing.is_empty() => return Err(client_gone_error()),
        }
    }
    Ok(())
}

type EarlyRx = tokio::sync::mpsc::UnboundedReceiver<PagestreamBeMessage>;

/// An early-answer channel for a GetPage batch of more than one page (a
/// single page is answered when its item is done).
fn early_channel(work: &BatchedFeMessage) -> (Option<EarlyTx>, Option<EarlyRx>) {
    match work {
        BatchedFeMessage::GetPage(b) if b.pages.len() > 1 => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        _ => (None, None),
    }
}

/// The next early answer of the oldest item; `None` once it has sent all.
async fn recv_oldest(early: &mut VecDeque<Option<EarlyRx>>) -> Option<PagestreamBeMessage> {
    early.front_mut()?.as_mut()?.recv().await
}

/// Encodes the early answers `rx` holds now.
fn write_early(rx: &mut EarlyRx, writer: &mut FrameWriter, ctx: &ExecCtx<'_>) {
    while let Ok(msg) = rx.try_recv() {
        write_responses(writer, &[msg], ctx.version);
    }
}

/// Encodes `done` (after its early answers not yet written) and every
/// later item that is already done, then flushes once. An item that failed
/// ends the stream after the answers before it.
async fn answer_done<F>(
    mut done: Result<Responses, QueryError>,
    executing: &mut FuturesOrdered<F>,
    early: &mut VecDeque<Option<EarlyRx>>,
    writer: &mut FrameWriter,
    ctx: &ExecCtx<'_>,
) -> Result<(), QueryError>
where
    F: std::future::Future<Output = Result<Responses, QueryError>>,
{
    let failed = loop {
        if let Some(mut rx) = early.pop_front().expect("one entry per item") {
            write_early(&mut rx, writer, ctx);
        }
        match done {
            Ok(responses) => write_responses(writer, &responses, ctx.version),
            Err(e) => break Some(e),
        }
        match executing.next().now_or_never() {
            Some(Some(next)) => done = next,
            _ => break None,
        }
    };
    writer.flush(ctx.cancel).await?;
    failed.map_or(Ok(()), Err)
}
