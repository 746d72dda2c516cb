//! GIN (rmgr 13) redo, PostgreSQL 15-18 (`ginxlog.c`, `ginxlog.h`), one
//! block reference at a time. Which block id is which page:
//!
//! | record | block 0 | 1 | 2 | 3 | 1..=n |
//! |---|---|---|---|---|---|
//! | CREATE_PTREE | posting-tree root, will_init (main data: list) | | | | |
//! | INSERT | target page (data: entry tuple / posting item / leaf actions) | child: clear INCOMPLETE_SPLIT (non-leaf) | | | |
//! | SPLIT | left, image | right, image | root, image (root split) | child: clear INCOMPLETE_SPLIT (non-leaf) | |
//! | VACUUM_PAGE | entry page, image | | | | |
//! | VACUUM_DATA_LEAF_PAGE | data leaf (data: leaf actions) | | | | |
//! | DELETE_PAGE | deleted data page | parent: item removed | left sibling: rightlink | | |
//! | UPDATE_META_PAGE | metapage, will_init | list tail: tuples added or rightlink set (data: tuples) | | | |
//! | INSERT_LISTPAGE | list page, will_init (data: tuples) | | | | |
//! | DELETE_LISTPAGE | metapage, will_init | | | | list pages, will_init |
//!
//! SPLIT and VACUUM_PAGE pages always carry a full-page image
//! (`REGBUF_FORCE_IMAGE`) and are never redone here: asked to, redo says
//! the record is malformed. Each block's redo needs only its own data and
//! the main data (no GIN redo reads another block's tag).
//!
//! Record layouts are the same in 15-18 (16 renamed `RelFileNode` to
//! `RelFileLocator` in SPLIT and UPDATE_META_PAGE; same 12 bytes). Every
//! GIN record writes the main fork (an unlogged index's init fork is
//! written with FPI records, not GIN ones).

mod insert;
mod leaf;
mod list;
mod page;
mod posting;
mod vacuum;

#[cfg(test)]
mod tests;

use super::{Ctx, Fault};
use crate::wal::rmgr_id;

const XLOG_GIN_CREATE_PTREE: u8 = 0x10;
const XLOG_GIN_INSERT: u8 = 0x20;
const XLOG_GIN_SPLIT: u8 = 0x30;
const XLOG_GIN_VACUUM_PAGE: u8 = 0x40;
const XLOG_GIN_DELETE_PAGE: u8 = 0x50;
const XLOG_GIN_UPDATE_META_PAGE: u8 = 0x60;
const XLOG_GIN_INSERT_LISTPAGE: u8 = 0x70;
const XLOG_GIN_DELETE_LISTPAGE: u8 = 0x80;
const XLOG_GIN_VACUUM_DATA_LEAF_PAGE: u8 = 0x90;

/// The main fork, the only one GIN records write.
const MAIN_FORKNUM: u8 = 0;

/// PostgreSQL's name of a GIN record kind (`gin_identify`).
fn record_name(ctx: &Ctx) -> &'static str {
    super::names::record_name(rmgr_id::GIN, ctx.rec.info, ctx.version)
}

/// Redo of block `ctx.rec.target` of a GIN record on `page`.
pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    if ctx.tag.fork != MAIN_FORKNUM {
        return Err(Fault::malformed(format!("GIN {} on fork {}", record_name(ctx), ctx.tag.fork)));
    }
    let block = ctx.rec.target;
    match (ctx.rec.rmgr_info(), block) {
        (XLOG_GIN_CREATE_PTREE, 0) => insert::create_ptree(page, ctx),
        (XLOG_GIN_INSERT, 0 | 1) => insert::insert(page, ctx, block),
        (XLOG_GIN_SPLIT, 0..=3) => insert::split(page, ctx, block),
        (XLOG_GIN_VACUUM_PAGE, 0) => Err(needs_image(ctx, "the vacuumed entry page")),
        (XLOG_GIN_VACUUM_DATA_LEAF_PAGE, 0) => vacuum::vacuum_data_leaf(page, ctx),
        (XLOG_GIN_DELETE_PAGE, 0..=2) => vacuum::delete_page(page, ctx, block),
        (XLOG_GIN_UPDATE_META_PAGE, 0 | 1) => list::update_meta(page, ctx, block),
        (XLOG_GIN_INSERT_LISTPAGE, 0) => list::insert_list_page(page, ctx),
        (XLOG_GIN_DELETE_LISTPAGE, _) => list::delete_list_pages(page, ctx, block),
        (0x00 | 0xA0..=0xF0, _) => {
            Err(Fault::unsupported(format!("GIN record kind {:#04x}", ctx.rec.rmgr_info())))
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// A block id the record kind does not register.
fn unexpected_block(ctx: &Ctx, block: u8) -> Fault {
    Fault::malformed(format!("GIN {} has no page at block id {block}", record_name(ctx)))
}

/// A page PostgreSQL only ever restores from the record's full-page image.
fn needs_image(ctx: &Ctx, what: &str) -> Fault {
    Fault::malformed(format!(
        "GIN {} without a full-page image of {what} (PostgreSQL always logs one)",
        record_name(ctx)
    ))
}

/// `len` bytes of the main data from `at`.
fn main_field<'a>(ctx: &'a Ctx, at: usize, len: usize) -> Result<&'a [u8], Fault> {
    ctx.rec.main_data.get(at..at + len).ok_or_else(|| {
        Fault::malformed(format!(
            "GIN {} main data of {} bytes, wants {}",
            record_name(ctx),
            ctx.rec.main_data.len(),
            at + len
        ))
    })
}

fn main_u16(ctx: &Ctx, at: usize) -> Result<u16, Fault> {
    let b = main_field(ctx, at, 2)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn main_u32(ctx: &Ctx, at: usize) -> Result<u32, Fault> {
    let b = main_field(ctx, at, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The target must be the metapage (block 0 of the relation).
fn expect_metapage(ctx: &Ctx) -> Result<(), Fault> {
    if ctx.tag.blkno != page::METAPAGE_BLKNO {
        return Err(Fault::malformed(format!(
            "GIN {} writes its metapage to block {}",
            record_name(ctx),
            ctx.tag.blkno
        )));
    }
    Ok(())
}

/// PostgreSQL rebuilds this page from scratch (`XLogInitBufferForRedo`),
/// which needs the block reference marked will_init.
fn expect_will_init(ctx: &Ctx) -> Result<(), Fault> {
    if !ctx.rec.will_init() {
        return Err(Fault::malformed(format!(
            "GIN {} rebuilds block id {} but it is not marked will_init",
            record_name(ctx),
            ctx.rec.target
        )));
    }
    Ok(())
}

/// Whether the bytes of a GIN page below `pd_lower` are line pointers:
/// not on the metapage, posting-tree (data) pages or deleted pages, which
/// `apply` checks by their header only.
pub(crate) fn has_line_pointers(page: &[u8]) -> bool {
    page::Opaque::read(page)
        .map_or(true, |o| o.flags & (page::GIN_DATA | page::GIN_META | page::GIN_DELETED) == 0)
}
