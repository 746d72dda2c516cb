//! Hash index (rmgr 12) redo, PostgreSQL 15-18 (`hash_xlog.c`,
//! `hash_xlog.h`), one block reference at a time. Which block id is which
//! page:
//!
//! | record | block 0 | 1 | 2 | 3 | 4 | 5 | 6 |
//! |---|---|---|---|---|---|---|---|
//! | INIT_META_PAGE | metapage, will_init | | | | | | |
//! | INIT_BITMAP_PAGE | bitmap, will_init | metapage | | | | | |
//! | INSERT | bucket/overflow page (data: tuple) | metapage | | | | | |
//! | ADD_OVFL_PAGE | new overflow page, will_init (data: bucket) | its left page | bitmap (data: bit) | new bitmap, will_init | metapage (data: firstfree) | | |
//! | SPLIT_ALLOCATE_PAGE | old bucket | new bucket, will_init | metapage (data: masks, splitpoint) | | | | |
//! | SPLIT_PAGE | new bucket page, always a full image | | | | | | |
//! | SPLIT_COMPLETE | old bucket | new bucket | | | | | |
//! | MOVE_PAGE_CONTENTS | primary bucket (lock only) | write page (data: offsets, tuples) | read page (data: offsets) | | | | |
//! | SQUEEZE_PAGE | primary bucket (lock only) | write page (data: offsets, tuples) | freed overflow page | its prev | its next | bitmap (data: bit) | metapage (data: firstfree) |
//! | DELETE | primary bucket (lock only) | page (data: offsets) | | | | | |
//! | SPLIT_CLEANUP | primary bucket | | | | | | |
//! | UPDATE_META_PAGE | metapage | | | | | | |
//! | VACUUM_ONE_PAGE | page | metapage | | | | | |
//!
//! Each block's redo needs only its own data, the main data and the other
//! blocks' tags (an overflow page's neighbour links are block numbers of
//! other block references). A "lock only" block is not changed (PostgreSQL
//! reads it for a cleanup lock and leaves even its LSN; `apply` still sets
//! the LSN, which the masks ignore).
//!
//! Per major: every record's layout is the same in 15-18 except
//! VACUUM_ONE_PAGE, whose `ntuples` is an `int` in 15 and a `uint16`
//! followed by `isCatalogRel` from 16 (the offsets start at byte 8 in
//! both). A SQUEEZE_PAGE that moves no tuple still registers its write page;
//! 18 skips it in redo unless it is the freed page's predecessor (15 sets
//! only its LSN): the page comes out unchanged either way.
//!
//! Every hash page is in the main fork, except INIT_META_PAGE and
//! INIT_BITMAP_PAGE, which build an unlogged index's init fork too.

mod build;
mod page;
mod vacuum;

#[cfg(test)]
mod tests;

use super::{Ctx, Fault};

const XLOG_HASH_INIT_META_PAGE: u8 = 0x00;
const XLOG_HASH_INIT_BITMAP_PAGE: u8 = 0x10;
const XLOG_HASH_INSERT: u8 = 0x20;
const XLOG_HASH_ADD_OVFL_PAGE: u8 = 0x30;
const XLOG_HASH_SPLIT_ALLOCATE_PAGE: u8 = 0x40;
const XLOG_HASH_SPLIT_PAGE: u8 = 0x50;
const XLOG_HASH_SPLIT_COMPLETE: u8 = 0x60;
const XLOG_HASH_MOVE_PAGE_CONTENTS: u8 = 0x70;
const XLOG_HASH_SQUEEZE_PAGE: u8 = 0x80;
const XLOG_HASH_DELETE: u8 = 0x90;
const XLOG_HASH_SPLIT_CLEANUP: u8 = 0xA0;
const XLOG_HASH_UPDATE_META_PAGE: u8 = 0xB0;
const XLOG_HASH_VACUUM_ONE_PAGE: u8 = 0xC0;

const MAIN_FORKNUM: u8 = 0;
const INIT_FORKNUM: u8 = 3;

/// Redo of block `ctx.rec.target` of a hash record on `page`.
/// See [`super::redo_after_image`]: the bucket flags of a split.
pub(crate) fn redo_after_image(info: u8, block_id: u8) -> bool {
    match info & 0xF0 {
        XLOG_HASH_SPLIT_ALLOCATE_PAGE => block_id == 0,
        XLOG_HASH_SPLIT_COMPLETE => block_id <= 1,
        _ => false,
    }
}

pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let info = ctx.rec.rmgr_info();
    let init = matches!(info, XLOG_HASH_INIT_META_PAGE | XLOG_HASH_INIT_BITMAP_PAGE);
    if ctx.tag.fork != MAIN_FORKNUM && !(init && ctx.tag.fork == INIT_FORKNUM) {
        return Err(Fault::malformed(format!("hash {} on fork {}", name(ctx), ctx.tag.fork)));
    }
    let block = ctx.rec.target;
    match info {
        XLOG_HASH_INIT_META_PAGE => build::init_meta_page(page, ctx, block),
        XLOG_HASH_INIT_BITMAP_PAGE => build::init_bitmap_page(page, ctx, block),
        XLOG_HASH_INSERT => build::insert(page, ctx, block),
        XLOG_HASH_ADD_OVFL_PAGE => build::add_ovfl_page(page, ctx, block),
        XLOG_HASH_SPLIT_ALLOCATE_PAGE => build::split_allocate_page(page, ctx, block),
        XLOG_HASH_SPLIT_PAGE => Err(Fault::malformed(
            "hash SPLIT_PAGE without its full-page image (PostgreSQL always logs one)".into(),
        )),
        XLOG_HASH_SPLIT_COMPLETE => build::split_complete(page, ctx, block),
        XLOG_HASH_MOVE_PAGE_CONTENTS => vacuum::move_page_contents(page, ctx, block),
        XLOG_HASH_SQUEEZE_PAGE => vacuum::squeeze_page(page, ctx, block),
        XLOG_HASH_DELETE => vacuum::delete(page, ctx, block),
        XLOG_HASH_SPLIT_CLEANUP => vacuum::split_cleanup(page, ctx, block),
        XLOG_HASH_UPDATE_META_PAGE => vacuum::update_meta_page(page, ctx, block),
        XLOG_HASH_VACUUM_ONE_PAGE => vacuum::vacuum_one_page(page, ctx, block),
        _ => Err(Fault::unsupported(format!("hash record (info {:#04x})", ctx.rec.info))),
    }
}

/// PostgreSQL's name of the record kind.
fn name(ctx: &Ctx) -> &'static str {
    super::names::record_name(ctx.rec.rmid, ctx.rec.info, ctx.version)
}

/// A block id the record kind does not write.
fn unexpected_block(ctx: &Ctx, block: u8) -> Fault {
    Fault::malformed(format!("hash {} has no page at block id {block}", name(ctx)))
}

/// The block number of another block reference of the record.
fn block_number(ctx: &Ctx, block: u8) -> Result<u32, Fault> {
    ctx.rec.block(block).map(|b| b.tag.blkno).ok_or_else(|| {
        Fault::malformed(format!("hash {} without block reference {block}", name(ctx)))
    })
}

/// The main data, which must be at least `len` bytes.
fn main_data<'a>(ctx: &'a Ctx, len: usize) -> Result<&'a [u8], Fault> {
    let data = ctx.rec.main_data;
    if data.len() < len {
        return Err(Fault::malformed(format!(
            "hash {} main data of {} bytes, need {len}",
            name(ctx),
            data.len()
        )));
    }
    Ok(data)
}

/// Whether the bytes of a hash page below `pd_lower` are line pointers:
/// not on the metapage nor on a bitmap page, which `apply` checks by their
/// header only.
pub(crate) fn has_line_pointers(page: &[u8]) -> bool {
    page::has_line_pointers(page)
}
