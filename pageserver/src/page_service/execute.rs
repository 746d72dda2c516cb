//! The executor's half of a request: wait for the effective LSN, read, and
//! collect the responses (in request order) into a [`Responses`] list, which
//! the handler encodes into the connection's `FrameWriter` with
//! [`write_responses`] (pages are referenced, not copied). Given an early
//! channel, a GetPage batch sends each answer there instead, as soon as it
//! and every answer before it are ready (the pipelined handler writes them
//! while the batch's later pages are still being read). Shared by the
//! serial and pipelined handlers; encoding and flushing are theirs, so the
//! pipelined handler can execute several items at once and still answer in
//! order.
//!
//! Invariants:
//! - exactly one response is collected per request, in request order, unless
//!   the result is `Err(QueryError::Shutdown)` (then the stream ends and
//!   nothing more is sent);
//! - a GetPage batch costs one wait (for its highest effective LSN, only if
//!   that is above `last_record_lsn`) and one `get_rel_pages_batched`, i.e.
//!   one vectored get;
//! - per-request failures become in-band Error responses; only shutdown
//!   (timeline or daemon) escapes as an error.

use std::time::Instant;

use pageserver_api::pagestream::{
    PagestreamBeMessage, PagestreamDbSizeResponse, PagestreamErrorResponse,
    PagestreamExistsResponse, PagestreamFeMessage, PagestreamGetPageResponse,
    PagestreamGetSlruSegmentResponse, PagestreamNblocksResponse, PagestreamProtocolVersion,
    PagestreamRequest, BLCKSZ,
};
use pageserver_api::reltag::{RelTag, SlruKind};
use smallvec::SmallVec;
use tokio_util::sync::CancellationToken;
use tracing::debug;
use utils::lsn::Lsn;

use super::batch::{smgr_query_type, BatchedFeMessage, GetPageBatch};
use super::error::{PageStreamError, QueryError};
use crate::metrics::page_service::{BatchBreakReason, SmgrQueryType, METRICS};
use crate::pgdatadir_mapping as datadir;
use crate::tenant::{ReadKind, Timeline};
use pq_proto::FrameWriter;

/// The responses of one unit of work, in request order. Inline for the
/// common single response.
pub type Responses = SmallVec<[PagestreamBeMessage; 1]>;

/// Every read of the page service is labelled so in the storage metrics.
const PAGE_READ: ReadKind = ReadKind::PageRequestHandler;

/// What the executor needs besides the work itself.
pub struct ExecCtx<'a> {
    pub tl: &'a Timeline,
    pub version: PagestreamProtocolVersion,
    /// Cancelled when the stream must end (daemon or timeline shutdown).
    pub cancel: &'a CancellationToken,
    /// Pipelined mode: record batch break reasons.
    pub pipelined: bool,
    /// The benchmark floor: GetPages answered with [`CONSTANT_PAGE`].
    pub constant_pages: bool,
}

/// The page of the benchmark floor (`page_service_constant_pages`).
pub static CONSTANT_PAGE: [u8; BLCKSZ] = [0x5a; BLCKSZ];

/// The stream's end when the client closed the connection while a request
/// of it was still executing: the work is abandoned, nothing is written.
pub fn client_gone() -> QueryError {
    QueryError::Disconnected(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the client closed the connection while a request was pending; the request was abandoned",
    ))
}

fn error_response(hdr: PagestreamRequest, err: &PageStreamError) -> PagestreamBeMessage {
    debug!(reqid = hdr.reqid, "pagestream request failed: {err}");
    PagestreamBeMessage::Error(PagestreamErrorResponse { req: hdr, message: err.to_string() })
}

fn push_error(out: &mut Responses, hdr: PagestreamRequest, err: &PageStreamError) {
    out.push(error_response(hdr, err));
}

/// Waits until `lsn` is readable, if it is not already; observes the wait.
async fn wait_for(ctx: &ExecCtx<'_>, lsn: Lsn) -> Result<(), PageStreamError> {
    if lsn <= ctx.tl.get_last_record_lsn() {
        return Ok(());
    }
    let started = Instant::now();
    let res = ctx.tl.wait_lsn(lsn, ctx.cancel).await;
    METRICS.wait_lsn_seconds.observe(started.elapsed().as_secs_f64());
    res.map_err(PageStreamError::from)
}

/// Where a GetPage batch sends its answers early: in request order, each
/// as soon as it and every answer before it are ready (see [`execute`]).
pub type EarlyTx = tokio::sync::mpsc::UnboundedSender<PagestreamBeMessage>;

/// Executes one unit of work; its responses, one per request, in order.
/// With `early`, a GetPage batch sends its answers there as they become
/// ready (in order, the first ones while later pages are still being
/// read), and returns only those not sent; everything else ignores it.
pub async fn execute(
    ctx: &ExecCtx<'_>,
    work: BatchedFeMessage,
    early: Option<EarlyTx>,
) -> Result<Responses, QueryError> {
    let mut out = Responses::new();
    execute_into(ctx, work, &mut out, early).await?;
    Ok(out)
}

async fn execute_into(
    ctx: &ExecCtx<'_>,
    work: BatchedFeMessage,
    out: &mut Responses,
    early: Option<EarlyTx>,
) -> Result<(), QueryError> {
    match work {
        BatchedFeMessage::GetPage(batch) => {
            let mut answers = InOrder::new(batch.pages.len(), out, early);
            execute_getpages(ctx, batch, &mut answers).await
        }
        BatchedFeMessage::Single { req, lsn, received_at } => {
            let started = Instant::now();
            METRICS.batch_wait_time_seconds.observe((started - received_at).as_secs_f64());
            let kind = smgr_query_type(&req);
            let res = match wait_for(ctx, lsn).await {
                Ok(()) => execute_single(ctx.tl, &req, lsn).await,
                Err(e) => Err(e),
            };
            let msg = match res {
                Ok(msg) => msg,
                Err(PageStreamError::Shutdown) => return Err(QueryError::Shutdown),
                Err(err) => {
                    push_error(out, *req.header(), &err);
                    METRICS.smgr_query_seconds(kind).observe(started.elapsed().as_secs_f64());
                    return Ok(());
                }
            };
            out.push(msg);
            METRICS.smgr_query_seconds(kind).observe(started.elapsed().as_secs_f64());
            Ok(())
        }
        BatchedFeMessage::RespondError { hdr, err } => {
            push_error(out, hdr, &err);
            Ok(())
        }
        BatchedFeMessage::Fatal(e) => Err(e),
    }
}

async fn execute_single(
    tl: &Timeline,
    req: &PagestreamFeMessage,
    lsn: Lsn,
) -> Result<PagestreamBeMessage, PageStreamError> {
    Ok(match *req {
        PagestreamFeMessage::Exists(req) => {
            let exists = datadir::get_rel_exists(tl, PAGE_READ, req.rel, lsn).await?;
            PagestreamBeMessage::Exists(PagestreamExistsResponse { req, exists })
        }
        PagestreamFeMessage::Nblocks(req) => {
            let n_blocks = datadir::get_rel_size(tl, PAGE_READ, req.rel, lsn).await?;
            PagestreamBeMessage::Nblocks(PagestreamNblocksResponse { req, n_blocks })
        }
        PagestreamFeMessage::DbSize(req) => {
            // Every tablespace, as pg_database_size.
            let bytes =
                datadir::get_db_size_all_tablespaces(tl, PAGE_READ, req.dbnode, lsn).await?;
            let db_size = i64::try_from(bytes)
                .map_err(|_| PageStreamError::Read(format!("database size {bytes} overflows")))?;
            PagestreamBeMessage::DbSize(PagestreamDbSizeResponse { req, db_size })
        }
        PagestreamFeMessage::GetSlruSegment(req) => {
            let kind = SlruKind::from_u8(req.kind).ok_or_else(|| {
                PageStreamError::BadRequest(format!("invalid SLRU kind {}", req.kind).into())
            })?;
            let segment = datadir::get_slru_segment(tl, PAGE_READ, kind, req.segno, lsn).await?;
            if segment.len() % BLCKSZ != 0 {
                return Err(PageStreamError::Read(format!(
                    "SLRU segment {} of {} is {} bytes, not a whole number of pages",
                    req.segno,
                    kind.dir_name(),
                    segment.len()
                )));
            }
            PagestreamBeMessage::GetSlruSegment(PagestreamGetSlruSegmentResponse { req, segment })
        }
        PagestreamFeMessage::GetPage(_) => {
            unreachable!("GetPage requests are executed as batches")
        }
    })
}

async fn execute_getpages(
    ctx: &ExecCtx<'_>,
    batch: GetPageBatch,
    answers: &mut InOrder<'_>,
) -> Result<(), QueryError> {
    let started = Instant::now();
    let n = batch.pages.len();
    debug_assert!(n > 0);
    METRICS.batch_wait_time_seconds.observe((started - batch.received_at).as_secs_f64());
    METRICS.batch_size.observe(n as f64);
    if ctx.pipelined {
        let reason = batch.break_reason.unwrap_or(BatchBreakReason::ExecutorSteal);
        METRICS.batch_break_reason(reason).inc();
    }
    let hist = METRICS.smgr_query_seconds(SmgrQueryType::GetPageAtLsn);
    if ctx.constant_pages {
        for (i, item) in batch.pages.iter().enumerate() {
            let page = bytes::Bytes::from_static(&CONSTANT_PAGE);
            hist.observe(started.elapsed().as_secs_f64());
            answers.put(
                i,
                PagestreamBeMessage::GetPage(PagestreamGetPageResponse { req: item.req, page }),
            );
        }
        return Ok(());
    }

    let mut shutdown = false;
    let read = match wait_for(ctx, batch.max_lsn).await {
        Ok(()) => {
            let queries: SmallVec<[(RelTag, u32, Lsn); 1]> =
                batch.pages.iter().map(|p| (p.req.rel, p.req.blkno, p.lsn)).collect();
            datadir::get_rel_pages_each(ctx.tl, PAGE_READ, &queries, &mut |i, res| {
                let item = &batch.pages[i];
                let msg = match res.map_err(PageStreamError::from) {
                    Ok(page) if page.len() == BLCKSZ => {
                        PagestreamBeMessage::GetPage(PagestreamGetPageResponse {
                            req: item.req,
                            page,
                        })
                    }
                    Ok(page) => {
                        let err = PageStreamError::Read(format!(
                            "block {} of {} at {} is {} bytes, expected {BLCKSZ}",
                            item.req.blkno,
                            item.req.rel,
                            item.lsn,
                            page.len()
                        ));
                        error_response(item.req.hdr, &err)
                    }
                    Err(PageStreamError::Shutdown) => return shutdown = true,
                    Err(err) => error_response(item.req.hdr, &err),
                };
                hist.observe(started.elapsed().as_secs_f64());
                answers.put(i, msg);
            })
            .await
            .map_err(PageStreamError::from)
        }
        Err(e) => Err(e),
    };
    match read {
        _ if shutdown => return Err(QueryError::Shutdown),
        Err(PageStreamError::Shutdown) => return Err(QueryError::Shutdown),
        Err(err) => {
            for (i, item) in batch.pages.iter().enumerate() {
                if !answers.has(i) {
                    hist.observe(started.elapsed().as_secs_f64());
                    answers.put(i, error_response(item.req.hdr, &err));
                }
            }
        }
        Ok(()) => {}
    }
    debug_assert!((0..n).all(|i| answers.has(i)), "one answer per page");
    Ok(())
}

/// The answers of a batch, put in any order, handed on in request order:
/// to the early channel while it is open, else into the returned list.
struct InOrder<'a> {
    ready: SmallVec<[Option<PagestreamBeMessage>; 1]>,
    /// Answers before this one are handed on.
    next: usize,
    out: &'a mut Responses,
    early: Option<EarlyTx>,
}

impl<'a> InOrder<'a> {
    fn new(n: usize, out: &'a mut Responses, early: Option<EarlyTx>) -> Self {
        InOrder { ready: (0..n).map(|_| None).collect(), next: 0, out, early }
    }

    fn has(&self, i: usize) -> bool {
        i < self.next || self.ready[i].is_some()
    }

    fn put(&mut self, i: usize, msg: PagestreamBeMessage) {
        assert!(!self.has(i), "page {i} of the batch answered twice");
        self.ready[i] = Some(msg);
        while let Some(msg) = self.ready.get_mut(self.next).and_then(Option::take) {
            self.next += 1;
            // A closed channel: the executor stopped; keep the rest here.
            let msg = match &self.early {
                Some(tx) => match tx.send(msg) {
                    Ok(()) => continue,
                    Err(tokio::sync::mpsc::error::SendError(msg)) => msg,
                },
                None => msg,
            };
            self.early = None;
            self.out.push(msg);
        }
    }
}

/// Encodes `responses` in order, each in one CopyData; a page or SLRU
/// segment is referenced, not copied (see `FrameWriter::copy_data_with_body`).
pub fn write_responses(
    out: &mut FrameWriter,
    responses: &[PagestreamBeMessage],
    v: PagestreamProtocolVersion,
) {
    for msg in responses {
        out.copy_data_with_body(msg.serialized_len(v), |buf| msg.serialize_head_into(buf, v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pageserver_api::pagestream::PagestreamNblocksResponse;
    use pageserver_api::reltag::RelTag;

    fn answer(reqid: u64) -> PagestreamBeMessage {
        let req = pageserver_api::pagestream::PagestreamNblocksRequest {
            hdr: PagestreamRequest { reqid, request_lsn: Lsn(1), not_modified_since: Lsn(1) },
            rel: RelTag { spcnode: 1, dbnode: 2, relnode: 3, forknum: 0 },
        };
        PagestreamBeMessage::Nblocks(PagestreamNblocksResponse { req, n_blocks: 0 })
    }

    fn reqid(msg: &PagestreamBeMessage) -> u64 {
        match msg {
            PagestreamBeMessage::Nblocks(r) => r.req.hdr.reqid,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Answers put out of order leave in request order, each as soon as it
    /// and every one before it are there.
    #[test]
    fn in_order_hands_on_each_answer_once_its_prefix_is_ready() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut out = Responses::new();
        let mut answers = InOrder::new(5, &mut out, Some(tx));
        let mut sent = || -> Vec<u64> {
            std::iter::from_fn(|| rx.try_recv().ok()).map(|m| reqid(&m)).collect()
        };
        answers.put(2, answer(2));
        assert_eq!(sent(), Vec::<u64>::new());
        answers.put(0, answer(0));
        assert_eq!(sent(), vec![0]);
        answers.put(1, answer(1));
        assert_eq!(sent(), vec![1, 2]);
        answers.put(4, answer(4));
        assert!(answers.has(4) && !answers.has(3));
        answers.put(3, answer(3));
        assert_eq!(sent(), vec![3, 4]);
        drop(answers);
        assert!(out.is_empty(), "everything went early");
    }

    /// Without a channel, or once the executor dropped it, answers go into
    /// the returned list, still in order.
    #[test]
    fn in_order_falls_back_to_the_list() {
        let mut out = Responses::new();
        let mut answers = InOrder::new(3, &mut out, None);
        for i in [1, 2, 0] {
            answers.put(i, answer(i as u64));
        }
        assert_eq!(out.iter().map(reqid).collect::<Vec<_>>(), vec![0, 1, 2]);

        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut out = Responses::new();
        let mut answers = InOrder::new(3, &mut out, Some(tx));
        answers.put(0, answer(0));
        drop(rx);
        answers.put(2, answer(2));
        answers.put(1, answer(1));
        assert_eq!(out.iter().map(reqid).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    #[should_panic(expected = "answered twice")]
    fn in_order_refuses_a_second_answer() {
        let mut out = Responses::new();
        let mut answers = InOrder::new(2, &mut out, None);
        answers.put(0, answer(0));
        answers.put(0, answer(0));
    }
}
