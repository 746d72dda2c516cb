//! GiST (rmgr 14) redo, PostgreSQL 15-18 (`gistxlog.c`, `gistxlog.h`), one
//! block reference at a time. Which block id is which page:
//!
//! | record | block 0 | 1 | 2.. |
//! |---|---|---|---|
//! | PAGE_UPDATE | the page (data: offsets to delete, tuples to add) | left child: clear FOLLOW_RIGHT | |
//! | DELETE | leaf (offsets in the main data) | | |
//! | PAGE_SPLIT | left child: clear FOLLOW_RIGHT | original page, will_init (data: its tuples) | the other halves, will_init |
//! | PAGE_DELETE | the deleted leaf | parent: downlink removed | |
//!
//! PAGE_REUSE and ASSIGN_LSN register no block (a standby conflict point,
//! an LSN for an unlogged change): there is no page to redo. Each block's
//! redo needs only its own data, the main data and the other blocks' tags
//! (a split page's right link is the next split page's block number).
//!
//! Per major: only DELETE's main data differs (`isCatalogRel` from 16 on
//! moves the offsets from byte 6 to byte 8, see `update`); PAGE_REUSE's
//! (no page) gains `isCatalogRel` too. Page layout and redo are otherwise
//! the same in 15-18. Every GiST record writes the main fork (an unlogged
//! index's init fork is written as a full-page image, not by these).
//!
//! Invariants: pages rebuilt by a split ignore the page passed in; every
//! other block must be a GiST page (16-byte special space). A deleted page
//! keeps its deleting xid below `pd_lower`, so [`has_line_pointers`] is
//! false for it and `apply` checks its header only.

mod page;
mod split;
mod update;

#[cfg(test)]
mod tests;

use super::{Ctx, Fault};
use crate::wal::BlockTag;

const XLOG_GIST_PAGE_UPDATE: u8 = 0x00;
const XLOG_GIST_DELETE: u8 = 0x10;
const XLOG_GIST_PAGE_REUSE: u8 = 0x20;
const XLOG_GIST_PAGE_SPLIT: u8 = 0x30;
const XLOG_GIST_PAGE_DELETE: u8 = 0x60;
const XLOG_GIST_ASSIGN_LSN: u8 = 0x70;

/// The main fork, the only one GiST records write.
const MAIN_FORKNUM: u8 = 0;

/// PostgreSQL's name of a GiST record kind (`gist_identify`).
fn record_name(info: u8) -> &'static str {
    match info & 0xF0 {
        XLOG_GIST_PAGE_UPDATE => "PAGE_UPDATE",
        XLOG_GIST_DELETE => "DELETE",
        XLOG_GIST_PAGE_REUSE => "PAGE_REUSE",
        XLOG_GIST_PAGE_SPLIT => "PAGE_SPLIT",
        XLOG_GIST_PAGE_DELETE => "PAGE_DELETE",
        XLOG_GIST_ASSIGN_LSN => "ASSIGN_LSN",
        _ => "UNKNOWN",
    }
}

/// Redo of block `ctx.rec.target` of a GiST record on `page`.
/// See [`super::redo_after_image`]: the left child of an update or split.
pub(crate) fn redo_after_image(info: u8, block_id: u8) -> bool {
    match info & 0xF0 {
        XLOG_GIST_PAGE_UPDATE => block_id == 1,
        XLOG_GIST_PAGE_SPLIT => block_id == 0,
        _ => false,
    }
}

pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let info = ctx.rec.rmgr_info();
    if ctx.tag.fork != MAIN_FORKNUM {
        let name = record_name(info);
        return Err(Fault::malformed(format!("GiST {name} on fork {}", ctx.tag.fork)));
    }
    type Redo = fn(&mut [u8], &Ctx, u8) -> Result<(), Fault>;
    let redo: Redo = match info {
        XLOG_GIST_PAGE_UPDATE => update::page_update,
        XLOG_GIST_DELETE => update::delete,
        XLOG_GIST_PAGE_SPLIT => split::page_split,
        XLOG_GIST_PAGE_DELETE => update::page_delete,
        XLOG_GIST_PAGE_REUSE | XLOG_GIST_ASSIGN_LSN => {
            return Err(unexpected_block(ctx, ctx.rec.target))
        }
        _ => return Err(Fault::unsupported(format!("GiST record kind {info:#04x}"))),
    };
    // A page the record does not rebuild must be a GiST page already (a
    // split checks its own blocks: all but the left child are rebuilt).
    if !ctx.rec.will_init() && info != XLOG_GIST_PAGE_SPLIT {
        page::Opaque::read(page)?;
    }
    redo(page, ctx, ctx.rec.target)
}

/// A block id the record kind does not register.
fn unexpected_block(ctx: &Ctx, block: u8) -> Fault {
    Fault::malformed(format!("GiST {} has no page at block id {block}", record_name(ctx.rec.info)))
}

/// The tag of another block reference of the record.
fn block_tag(ctx: &Ctx, block: u8) -> Result<BlockTag, Fault> {
    ctx.rec.block(block).map(|b| b.tag).ok_or_else(|| {
        Fault::malformed(format!(
            "GiST {} without block reference {block}",
            record_name(ctx.rec.info)
        ))
    })
}

/// Whether the bytes of this page below `pd_lower` are line pointers: not
/// on a deleted page (its deleting xid is there).
pub(crate) fn has_line_pointers(page: &[u8]) -> bool {
    !page::is_deleted(page)
}
