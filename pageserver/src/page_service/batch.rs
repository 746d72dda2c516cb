//! From a parsed pagestream request to a unit of work for the executor
//! ([`BatchedFeMessage`]), and the rules by which getpage requests fold into
//! one batch.
//!
//! LSN rules (applied when a request is read, against the timeline's
//! `last_record_lsn` at that moment):
//! - `request_lsn == 0`, `request_lsn < not_modified_since`, or `request_lsn`
//!   below the timeline's initial LSN: in-band BadRequest;
//! - effective LSN = `not_modified_since` if that is above `last_record_lsn`
//!   (the executor then waits for it), else `min(request_lsn, last_record_lsn)`.
//!
//! Folding rules ([`try_fold`]): only GetPage batches grow, by GetPages (one
//! stream serves one timeline, so all are on the same timeline). A batch
//! stops growing when full, when any other item arrives, under `uniform-lsn`
//! when the effective LSN differs from the batch's, and under `scattered-lsn`
//! when the batch already holds the same page at a different LSN. The first
//! refusal records its reason on the batch (for the break-reason metric).

use std::time::Instant;

pub use pageserver_api::config::PageServiceProtocolPipelinedBatchingStrategy as Batching;
use pageserver_api::pagestream::{
    PagestreamFeMessage, PagestreamGetPageRequest, PagestreamRequest,
};
use smallvec::SmallVec;
use utils::lsn::Lsn;

use super::error::{PageStreamError, QueryError};
use crate::metrics::page_service::{BatchBreakReason, SmgrQueryType, METRICS};
use crate::tenant::Timeline;

/// One GetPage of a batch, with the LSN it will be read at.
#[derive(Debug, Clone, Copy)]
pub struct GetPageItem {
    pub req: PagestreamGetPageRequest,
    pub lsn: Lsn,
}

/// GetPages executed together with one vectored get.
#[derive(Debug)]
pub struct GetPageBatch {
    /// In request order; responses go out in this order. Inline for the
    /// common unbatched case, so a lone request allocates nothing.
    pub pages: SmallVec<[GetPageItem; 1]>,
    /// When the first request of the batch was read.
    pub received_at: Instant,
    /// Highest effective LSN in the batch: the one LSN the executor waits for.
    pub max_lsn: Lsn,
    /// Why the batch stopped growing, if a fold refusal did it.
    pub break_reason: Option<BatchBreakReason>,
}

/// A unit of work for the executor; produces one response per request, in order.
#[derive(Debug)]
pub enum BatchedFeMessage {
    GetPage(GetPageBatch),
    /// Exists, Nblocks, DbSize or GetSlruSegment, with its effective LSN.
    Single {
        req: PagestreamFeMessage,
        lsn: Lsn,
        received_at: Instant,
    },
    /// A request that failed validation: answered with an in-band error.
    RespondError {
        hdr: PagestreamRequest,
        err: PageStreamError,
    },
    /// The stream cannot go on (unparsable message, wrong message type):
    /// the executor sends every earlier response, then the connection
    /// reports this error and closes.
    Fatal(QueryError),
}

pub fn smgr_query_type(req: &PagestreamFeMessage) -> SmgrQueryType {
    match req {
        PagestreamFeMessage::Exists(_) => SmgrQueryType::GetRelExists,
        PagestreamFeMessage::Nblocks(_) => SmgrQueryType::GetRelSize,
        PagestreamFeMessage::GetPage(_) => SmgrQueryType::GetPageAtLsn,
        PagestreamFeMessage::DbSize(_) => SmgrQueryType::GetDbSize,
        PagestreamFeMessage::GetSlruSegment(_) => SmgrQueryType::GetSlruSegment,
    }
}

/// The LSN a request reads at (see the module comment), or why it is refused.
/// `floor` is the timeline's lowest readable LSN (`Timeline::min_readable_lsn`,
/// raised to its GC cutoff).
pub fn effective_lsn(
    hdr: &PagestreamRequest,
    floor: Lsn,
    last_record_lsn: Lsn,
) -> Result<Lsn, PageStreamError> {
    let PagestreamRequest { request_lsn, not_modified_since, .. } = *hdr;
    if request_lsn == Lsn::INVALID {
        return Err(PageStreamError::BadRequest("invalid request with zero LSN".into()));
    }
    if request_lsn < not_modified_since {
        return Err(PageStreamError::BadRequest(
            format!(
                "invalid request: request_lsn {request_lsn} is less than not_modified_since \
                 {not_modified_since}"
            )
            .into(),
        ));
    }
    if request_lsn < floor {
        return Err(PageStreamError::BadRequest(
            format!(
                "tried to request a page version that was garbage collected: request_lsn \
                 {request_lsn} is below the timeline's first readable LSN {floor}"
            )
            .into(),
        ));
    }
    let lsn = if not_modified_since > last_record_lsn {
        not_modified_since
    } else {
        request_lsn.min(last_record_lsn)
    };
    if lsn < floor {
        // "Latest" while a followed primary's base backup is not yet consistent.
        return Err(PageStreamError::BadRequest(
            format!(
                "the timeline is not readable yet: WAL is ingested up to {last_record_lsn}, \
                 reads start at {floor} (where its base backup becomes consistent)"
            )
            .into(),
        ));
    }
    Ok(lsn)
}

/// Turns a parsed request into executor work; counts it as started.
pub fn prepare(tl: &Timeline, req: PagestreamFeMessage, received_at: Instant) -> BatchedFeMessage {
    METRICS.smgr_query_started(smgr_query_type(&req)).inc();
    let hdr = *req.header();
    let floor = tl.min_readable_lsn().max(tl.gc_cutoff());
    let lsn = match effective_lsn(&hdr, floor, tl.get_last_record_lsn()) {
        Ok(lsn) => lsn,
        Err(err) => return BatchedFeMessage::RespondError { hdr, err },
    };
    match req {
        PagestreamFeMessage::GetPage(req) => BatchedFeMessage::GetPage(GetPageBatch {
            pages: smallvec::smallvec![GetPageItem { req, lsn }],
            received_at,
            max_lsn: lsn,
            break_reason: None,
        }),
        req => BatchedFeMessage::Single { req, lsn, received_at },
    }
}

/// The `try_fold` of the reader → executor `spsc_fold` channel.
pub fn try_fold(
    pending: &mut BatchedFeMessage,
    new: BatchedFeMessage,
    max_batch_size: usize,
    batching: Batching,
) -> Result<(), BatchedFeMessage> {
    let BatchedFeMessage::GetPage(batch) = pending else {
        // Only getpage batches grow.
        return Err(new);
    };
    let BatchedFeMessage::GetPage(incoming) = &new else {
        batch.break_reason = Some(BatchBreakReason::NonBatchableRequest);
        return Err(new);
    };
    debug_assert_eq!(incoming.pages.len(), 1, "the reader folds single requests");
    let item = incoming.pages[0];
    if batch.pages.len() >= max_batch_size {
        batch.break_reason = Some(BatchBreakReason::BatchFull);
        return Err(new);
    }
    match batching {
        Batching::UniformLsn => {
            if item.lsn != batch.pages[0].lsn {
                batch.break_reason = Some(BatchBreakReason::NonUniformLsn);
                return Err(new);
            }
        }
        Batching::ScatteredLsn => {
            let conflict = batch.pages.iter().any(|p| {
                p.req.rel == item.req.rel && p.req.blkno == item.req.blkno && p.lsn != item.lsn
            });
            if conflict {
                batch.break_reason = Some(BatchBreakReason::SamePageAtDifferentLsn);
                return Err(new);
            }
        }
    }
    batch.pages.push(item);
    batch.max_lsn = batch.max_lsn.max(item.lsn);
    Ok(())
}

#[cfg(test)]
mod tests {
    use pageserver_api::reltag::RelTag;

    use super::*;

    fn hdr(request_lsn: u64, nms: u64) -> PagestreamRequest {
        PagestreamRequest { reqid: 0, request_lsn: Lsn(request_lsn), not_modified_since: Lsn(nms) }
    }

    #[test]
    fn effective_lsn_rules() {
        let (initial, last) = (Lsn(0x100), Lsn(0x500));
        let bad =
            |h| matches!(effective_lsn(&h, initial, last), Err(PageStreamError::BadRequest(_)));
        assert!(bad(hdr(0, 0)), "LSN 0");
        assert!(bad(hdr(0x300, 0x400)), "request_lsn < not_modified_since");
        assert!(bad(hdr(0xff, 0)), "below the timeline start");
        // Latest: MAX reads at last_record_lsn.
        assert_eq!(effective_lsn(&hdr(u64::MAX, 0x200), initial, last).unwrap(), last);
        // A replica's LSN in the past is honoured.
        assert_eq!(effective_lsn(&hdr(0x300, 0x200), initial, last).unwrap(), Lsn(0x300));
        // Exactly at the start is fine.
        assert_eq!(effective_lsn(&hdr(0x100, 0), initial, last).unwrap(), Lsn(0x100));
        // not_modified_since in the future: wait for it, read there.
        assert_eq!(effective_lsn(&hdr(u64::MAX, 0x600), initial, last).unwrap(), Lsn(0x600));
        assert_eq!(effective_lsn(&hdr(0x700, 0x600), initial, last).unwrap(), Lsn(0x600));
    }

    fn page(blkno: u32, lsn: u64) -> BatchedFeMessage {
        BatchedFeMessage::GetPage(GetPageBatch {
            pages: smallvec::smallvec![GetPageItem {
                req: PagestreamGetPageRequest {
                    hdr: hdr(u64::MAX, 0),
                    rel: RelTag::new(1663, 5, 1000, 0),
                    blkno,
                },
                lsn: Lsn(lsn),
            }],
            received_at: Instant::now(),
            max_lsn: Lsn(lsn),
            break_reason: None,
        })
    }

    fn reason(b: &BatchedFeMessage) -> Option<BatchBreakReason> {
        match b {
            BatchedFeMessage::GetPage(b) => b.break_reason,
            _ => panic!("not a batch"),
        }
    }

    fn len(b: &BatchedFeMessage) -> usize {
        match b {
            BatchedFeMessage::GetPage(b) => b.pages.len(),
            _ => panic!("not a batch"),
        }
    }

    #[test]
    fn batch_breaks_when_full() {
        let mut b = page(0, 10);
        for i in 1..4 {
            try_fold(&mut b, page(i, 10), 4, Batching::ScatteredLsn).unwrap();
        }
        assert_eq!(len(&b), 4);
        assert!(try_fold(&mut b, page(9, 10), 4, Batching::ScatteredLsn).is_err());
        assert_eq!(reason(&b), Some(BatchBreakReason::BatchFull));
        // max_batch_size 1: nothing ever folds.
        let mut b = page(0, 10);
        assert!(try_fold(&mut b, page(1, 10), 1, Batching::UniformLsn).is_err());
    }

    #[test]
    fn other_requests_break_and_never_fold() {
        let mut b = page(0, 10);
        let single = BatchedFeMessage::Single {
            req: PagestreamFeMessage::DbSize(pageserver_api::pagestream::PagestreamDbSizeRequest {
                hdr: hdr(u64::MAX, 0),
                dbnode: 5,
            }),
            lsn: Lsn(10),
            received_at: Instant::now(),
        };
        let single = try_fold(&mut b, single, 32, Batching::ScatteredLsn).unwrap_err();
        assert_eq!(reason(&b), Some(BatchBreakReason::NonBatchableRequest));
        // Nothing folds into a non-batch either.
        let mut s = single;
        assert!(try_fold(&mut s, page(1, 10), 32, Batching::ScatteredLsn).is_err());
        let mut e = BatchedFeMessage::RespondError {
            hdr: hdr(0, 0),
            err: PageStreamError::BadRequest("x".into()),
        };
        assert!(try_fold(&mut e, page(1, 10), 32, Batching::ScatteredLsn).is_err());
        let mut b = page(0, 10);
        let err = BatchedFeMessage::RespondError {
            hdr: hdr(0, 0),
            err: PageStreamError::BadRequest("x".into()),
        };
        assert!(try_fold(&mut b, err, 32, Batching::ScatteredLsn).is_err());
        assert_eq!(reason(&b), Some(BatchBreakReason::NonBatchableRequest));
    }

    #[test]
    fn uniform_lsn_breaks_on_any_lsn_change() {
        let mut b = page(0, 10);
        try_fold(&mut b, page(1, 10), 32, Batching::UniformLsn).unwrap();
        assert!(try_fold(&mut b, page(2, 11), 32, Batching::UniformLsn).is_err());
        assert_eq!(reason(&b), Some(BatchBreakReason::NonUniformLsn));
        assert_eq!(len(&b), 2);
    }

    #[test]
    fn scattered_lsn_breaks_only_on_same_page_at_other_lsn() {
        let mut b = page(0, 10);
        try_fold(&mut b, page(1, 11), 32, Batching::ScatteredLsn).unwrap();
        try_fold(&mut b, page(2, 9), 32, Batching::ScatteredLsn).unwrap();
        // Same page at the same LSN: a duplicate, folds (read once).
        try_fold(&mut b, page(1, 11), 32, Batching::ScatteredLsn).unwrap();
        let BatchedFeMessage::GetPage(batch) = &b else { unreachable!() };
        assert_eq!(batch.max_lsn, Lsn(11));
        assert!(try_fold(&mut b, page(1, 12), 32, Batching::ScatteredLsn).is_err());
        assert_eq!(reason(&b), Some(BatchBreakReason::SamePageAtDifferentLsn));
        assert_eq!(len(&b), 4);
    }
}
