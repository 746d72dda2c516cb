//! Btree (rmgr 11) redo, PostgreSQL 15-18 (`nbtxlog.c`, `nbtxlog.h`), one
//! block reference at a time. Which block id is which page:
//!
//! | record | block 0 | 1 | 2 | 3 | 4 |
//! |---|---|---|---|---|---|
//! | INSERT_LEAF/_POST | leaf (data: [postingoff], tuple) | | | | |
//! | INSERT_UPPER/_META | internal page (data: tuple) | child: clear INCOMPLETE_SPLIT | metapage (META; data: metadata) | | |
//! | SPLIT_L/_R | left (data: [new item], high key) | right, will_init (data: its tuples) | right's right sibling: btpo_prev | child (level > 0) | |
//! | DEDUP | leaf (data: intervals) | | | | |
//! | VACUUM/DELETE | leaf (data: offsets, updates) | | | | |
//! | MARK_PAGE_HALFDEAD | leaf, will_init (main data) | parent (main data) | | | |
//! | UNLINK_PAGE/_META | target, will_init (main data) | left sibling | right sibling | leaf, will_init | metapage (data) |
//! | NEWROOT | root, will_init (data: tuples) | left child | metapage (data) | | |
//! | META_CLEANUP | metapage (data) | | | | |
//!
//! REUSE_PAGE has no block reference. Each block's redo needs only its own
//! data, the main data and the other blocks' tags (a split's left page
//! needs the right page's number, block 1's tag). Main data layouts differ
//! by major only for DELETE (`isCatalogRel` from 16, unused by redo) and
//! REUSE_PAGE; VACUUM redo clears `btpo_cycleid` from 18 on.
//!
//! Every btree page is written in the main fork; pages rebuilt from scratch
//! (will_init blocks) ignore the page passed in.

mod dedup;
mod delete;
mod insert;
mod page;
mod split;

#[cfg(test)]
mod real_wal_tests;
#[cfg(test)]
mod tests;

use super::{Ctx, Fault};
use crate::wal::BlockTag;

const XLOG_BTREE_INSERT_LEAF: u8 = 0x00;
const XLOG_BTREE_INSERT_UPPER: u8 = 0x10;
const XLOG_BTREE_INSERT_META: u8 = 0x20;
const XLOG_BTREE_SPLIT_L: u8 = 0x30;
const XLOG_BTREE_SPLIT_R: u8 = 0x40;
const XLOG_BTREE_INSERT_POST: u8 = 0x50;
const XLOG_BTREE_DEDUP: u8 = 0x60;
const XLOG_BTREE_DELETE: u8 = 0x70;
const XLOG_BTREE_UNLINK_PAGE: u8 = 0x80;
const XLOG_BTREE_UNLINK_PAGE_META: u8 = 0x90;
const XLOG_BTREE_NEWROOT: u8 = 0xA0;
const XLOG_BTREE_MARK_PAGE_HALFDEAD: u8 = 0xB0;
const XLOG_BTREE_VACUUM: u8 = 0xC0;
const XLOG_BTREE_REUSE_PAGE: u8 = 0xD0;
const XLOG_BTREE_META_CLEANUP: u8 = 0xE0;

/// The main fork, the only one btree records write.
const MAIN_FORKNUM: u8 = 0;

/// PostgreSQL's name of a btree record kind (`btree_identify`).
pub(crate) fn record_name(info: u8) -> &'static str {
    match info & 0xF0 {
        XLOG_BTREE_INSERT_LEAF => "INSERT_LEAF",
        XLOG_BTREE_INSERT_UPPER => "INSERT_UPPER",
        XLOG_BTREE_INSERT_META => "INSERT_META",
        XLOG_BTREE_SPLIT_L => "SPLIT_L",
        XLOG_BTREE_SPLIT_R => "SPLIT_R",
        XLOG_BTREE_INSERT_POST => "INSERT_POST",
        XLOG_BTREE_DEDUP => "DEDUP",
        XLOG_BTREE_DELETE => "DELETE",
        XLOG_BTREE_UNLINK_PAGE => "UNLINK_PAGE",
        XLOG_BTREE_UNLINK_PAGE_META => "UNLINK_PAGE_META",
        XLOG_BTREE_NEWROOT => "NEWROOT",
        XLOG_BTREE_MARK_PAGE_HALFDEAD => "MARK_PAGE_HALFDEAD",
        XLOG_BTREE_VACUUM => "VACUUM",
        XLOG_BTREE_REUSE_PAGE => "REUSE_PAGE",
        _ => "META_CLEANUP",
    }
}

/// Redo of block `ctx.rec.target` of a btree record on `page`.
pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    if ctx.tag.fork != MAIN_FORKNUM {
        return Err(Fault::malformed(format!(
            "btree {} on fork {}",
            record_name(ctx.rec.info),
            ctx.tag.fork
        )));
    }
    let block = ctx.rec.target;
    match ctx.rec.rmgr_info() {
        XLOG_BTREE_INSERT_LEAF => insert::insert(page, ctx, block, false),
        XLOG_BTREE_INSERT_POST => insert::insert(page, ctx, block, true),
        XLOG_BTREE_INSERT_UPPER | XLOG_BTREE_INSERT_META => insert::insert_upper(page, ctx, block),
        XLOG_BTREE_SPLIT_L => split::split(page, ctx, block, true),
        XLOG_BTREE_SPLIT_R => split::split(page, ctx, block, false),
        XLOG_BTREE_DEDUP => dedup::dedup(page, ctx, block),
        XLOG_BTREE_VACUUM => delete::vacuum_or_delete(page, ctx, block, true),
        XLOG_BTREE_DELETE => delete::vacuum_or_delete(page, ctx, block, false),
        XLOG_BTREE_MARK_PAGE_HALFDEAD => delete::mark_page_halfdead(page, ctx, block),
        XLOG_BTREE_UNLINK_PAGE | XLOG_BTREE_UNLINK_PAGE_META => {
            delete::unlink_page(page, ctx, block)
        }
        XLOG_BTREE_NEWROOT => insert::newroot(page, ctx, block),
        XLOG_BTREE_META_CLEANUP => match block {
            0 => insert::restore_meta(page, ctx),
            _ => Err(unexpected_block(ctx, block)),
        },
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// A block id the record kind does not register (or REUSE_PAGE, which
/// registers none).
fn unexpected_block(ctx: &Ctx, block: u8) -> Fault {
    Fault::malformed(format!("btree {} has no page at block id {block}", record_name(ctx.rec.info)))
}

/// The tag of another block reference of the record.
fn block_tag(ctx: &Ctx, block: u8) -> Result<BlockTag, Fault> {
    ctx.rec.block(block).map(|b| b.tag).ok_or_else(|| {
        Fault::malformed(format!(
            "btree {} without block reference {block}",
            record_name(ctx.rec.info)
        ))
    })
}

/// `_bt_clear_incomplete_split` on a child page.
fn clear_incomplete_split(page: &mut [u8]) -> Result<(), Fault> {
    page::modify_opaque(page, |o| o.flags &= !page::BTP_INCOMPLETE_SPLIT)
}

/// Whether the bytes of a btree page below `pd_lower` are line pointers:
/// not on the metapage (its metadata) nor on a deleted page (its
/// `BTDeletedPageData`), which `apply` checks by their header only.
pub(crate) fn has_line_pointers(page: &[u8]) -> bool {
    page::Opaque::read(page).is_ok_and(|o| o.flags & (page::BTP_META | page::BTP_DELETED) == 0)
}
