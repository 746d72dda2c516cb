//! The executor's half of a request: wait for the effective LSN, read, and
//! collect the responses (in request order) into a [`Responses`] list, which
//! the handler encodes into the connection's `FrameWriter` with
//! [`write_responses`] (pages are referenced, not copied). Shared by the
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
use pageserver_api::reltag::{RelTag, SlruKind, DEFAULTTABLESPACE_OID};
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
}

/// The stream's end when the client closed the connection while a request
/// of it was still executing: the work is abandoned, nothing is written.
pub fn client_gone() -> QueryError {
    QueryError::Disconnected(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the client closed the connection while a request was pending; the request was abandoned",
    ))
}

fn push_error(out: &mut Responses, hdr: PagestreamRequest, err: &PageStreamError) {
    debug!(reqid = hdr.reqid, "pagestream request failed: {err}");
    out.push(PagestreamBeMessage::Error(PagestreamErrorResponse {
        req: hdr,
        message: err.to_string(),
    }));
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

/// Executes one unit of work; its responses, one per request, in order.
pub async fn execute(ctx: &ExecCtx<'_>, work: BatchedFeMessage) -> Result<Responses, QueryError> {
    let mut out = Responses::new();
    execute_into(ctx, work, &mut out).await?;
    Ok(out)
}

async fn execute_into(
    ctx: &ExecCtx<'_>,
    work: BatchedFeMessage,
    out: &mut Responses,
) -> Result<(), QueryError> {
    match work {
        BatchedFeMessage::GetPage(batch) => execute_getpages(ctx, batch, out).await,
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
            let bytes =
                datadir::get_db_size(tl, PAGE_READ, DEFAULTTABLESPACE_OID, req.dbnode, lsn).await?;
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
    out: &mut Responses,
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

    let results = match wait_for(ctx, batch.max_lsn).await {
        Ok(()) => {
            let queries: SmallVec<[(RelTag, u32, Lsn); 1]> =
                batch.pages.iter().map(|p| (p.req.rel, p.req.blkno, p.lsn)).collect();
            datadir::get_rel_pages_batched(ctx.tl, PAGE_READ, &queries)
                .await
                .map_err(PageStreamError::from)
        }
        Err(e) => Err(e),
    };
    match results {
        Ok(results) => {
            debug_assert_eq!(results.len(), n, "one result per page");
            for (item, res) in batch.pages.iter().zip(results) {
                match res {
                    Ok(page) if page.len() == BLCKSZ => {
                        out.push(PagestreamBeMessage::GetPage(PagestreamGetPageResponse {
                            req: item.req,
                            page,
                        }));
                    }
                    Ok(page) => {
                        let err = PageStreamError::Read(format!(
                            "block {} of {} at {} is {} bytes, expected {BLCKSZ}",
                            item.req.blkno,
                            item.req.rel,
                            item.lsn,
                            page.len()
                        ));
                        push_error(out, item.req.hdr, &err);
                    }
                    Err(e) => match PageStreamError::from(e) {
                        PageStreamError::Shutdown => return Err(QueryError::Shutdown),
                        err => push_error(out, item.req.hdr, &err),
                    },
                }
            }
        }
        Err(PageStreamError::Shutdown) => return Err(QueryError::Shutdown),
        Err(err) => {
            for item in &batch.pages {
                push_error(out, item.req.hdr, &err);
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let hist = METRICS.smgr_query_seconds(SmgrQueryType::GetPageAtLsn);
    for _ in 0..n {
        hist.observe(elapsed);
    }
    Ok(())
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
