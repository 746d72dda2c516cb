//! SP-GiST (rmgr 15) redo, PostgreSQL 15-18 (`spgxlog.c`, `spgxlog.h`),
//! one block reference at a time. Every record keeps its tuples and
//! offsets in the main data; block references carry no data. Which block
//! id is which page:
//!
//! | record | block 0 | 1 | 2 | 3 |
//! |---|---|---|---|---|
//! | ADD_LEAF | leaf (maybe new) | parent (if linked) | | |
//! | MOVE_LEAFS | source leaf | destination leaf (maybe new) | parent | |
//! | ADD_NODE | the inner tuple's page | its new page (if moved; maybe new) | parent (parentBlk 2) | |
//! | SPLIT_TUPLE | prefix tuple's page | postfix tuple's page (if another; maybe new) | | |
//! | PICKSPLIT | source leaf (not in a root split; maybe re-init) | destination leaf (maybe new) | inner page (maybe new) | parent (if another page) |
//! | VACUUM_LEAF, _ROOT, _REDIRECT | the page | | | |
//!
//! A page the record initialises ("maybe new": a flag in the main data)
//! must be a will_init block. Each block's redo needs only the main data
//! and the other blocks' tags (a redirect or downlink names the block that
//! now holds the tuple).
//!
//! Per major: only VACUUM_REDIRECT's main data differs (`isCatalogRel`
//! from 16 on moves the offsets from byte 8 to byte 10); the state field
//! renamed from `myXid` (15) to `redirectXid` (18) keeps its place and use.
//! Every SP-GiST record writes the main fork (an unlogged index's init fork
//! is written as full-page images).
//!
//! Invariants: every block written must be an SP-GiST page (8-byte special
//! space) or one the record initialises; the metapage (never written by
//! these records) keeps metadata below `pd_lower`, so [`has_line_pointers`]
//! is false for it.

mod inner;
mod leaf;
mod page;
mod vacuum;

#[cfg(test)]
mod tests;

use super::{Ctx, Fault};
use crate::wal::BlockTag;

const XLOG_SPGIST_ADD_LEAF: u8 = 0x10;
const XLOG_SPGIST_MOVE_LEAFS: u8 = 0x20;
const XLOG_SPGIST_ADD_NODE: u8 = 0x30;
const XLOG_SPGIST_SPLIT_TUPLE: u8 = 0x40;
const XLOG_SPGIST_PICKSPLIT: u8 = 0x50;
const XLOG_SPGIST_VACUUM_LEAF: u8 = 0x60;
const XLOG_SPGIST_VACUUM_ROOT: u8 = 0x70;
const XLOG_SPGIST_VACUUM_REDIRECT: u8 = 0x80;

/// The main fork, the only one SP-GiST records write.
const MAIN_FORKNUM: u8 = 0;

/// PostgreSQL's name of an SP-GiST record kind (`spg_identify`).
fn record_name(info: u8) -> &'static str {
    match info & 0xF0 {
        XLOG_SPGIST_ADD_LEAF => "ADD_LEAF",
        XLOG_SPGIST_MOVE_LEAFS => "MOVE_LEAFS",
        XLOG_SPGIST_ADD_NODE => "ADD_NODE",
        XLOG_SPGIST_SPLIT_TUPLE => "SPLIT_TUPLE",
        XLOG_SPGIST_PICKSPLIT => "PICKSPLIT",
        XLOG_SPGIST_VACUUM_LEAF => "VACUUM_LEAF",
        XLOG_SPGIST_VACUUM_ROOT => "VACUUM_ROOT",
        XLOG_SPGIST_VACUUM_REDIRECT => "VACUUM_REDIRECT",
        _ => "UNKNOWN",
    }
}

/// Redo of block `ctx.rec.target` of an SP-GiST record on `page`.
pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let info = ctx.rec.rmgr_info();
    if ctx.tag.fork != MAIN_FORKNUM {
        let name = record_name(info);
        return Err(Fault::malformed(format!("SP-GiST {name} on fork {}", ctx.tag.fork)));
    }
    type Redo = fn(&mut [u8], &Ctx, u8) -> Result<(), Fault>;
    let redo: Redo = match info {
        XLOG_SPGIST_ADD_LEAF => leaf::add_leaf,
        XLOG_SPGIST_MOVE_LEAFS => leaf::move_leafs,
        XLOG_SPGIST_ADD_NODE => inner::add_node,
        XLOG_SPGIST_SPLIT_TUPLE => inner::split_tuple,
        XLOG_SPGIST_PICKSPLIT => inner::pick_split,
        XLOG_SPGIST_VACUUM_LEAF => vacuum::vacuum_leaf,
        XLOG_SPGIST_VACUUM_ROOT => vacuum::vacuum_root,
        XLOG_SPGIST_VACUUM_REDIRECT => vacuum::vacuum_redirect,
        _ => return Err(Fault::unsupported(format!("SP-GiST record kind {info:#04x}"))),
    };
    // A page the record does not initialise must be an SP-GiST page already.
    if !ctx.rec.will_init() {
        page::Opaque::read(page)?;
    }
    redo(page, ctx, ctx.rec.target)
}

/// A block id the record kind (or this record) does not register.
fn unexpected_block(ctx: &Ctx, block: u8) -> Fault {
    Fault::malformed(format!(
        "SP-GiST {} has no page at block id {block}",
        record_name(ctx.rec.info)
    ))
}

/// The tag of another block reference of the record.
fn block_tag(ctx: &Ctx, block: u8) -> Result<BlockTag, Fault> {
    ctx.rec.block(block).map(|b| b.tag).ok_or_else(|| {
        Fault::malformed(format!(
            "SP-GiST {} without block reference {block}",
            record_name(ctx.rec.info)
        ))
    })
}

/// A page the record initialises must come as a will_init block
/// (`XLogInitBufferForRedo`).
fn require_will_init(ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if ctx.rec.will_init() {
        return Ok(());
    }
    Err(Fault::malformed(format!(
        "SP-GiST {} initialises block id {block}, which is not will_init",
        record_name(ctx.rec.info)
    )))
}

/// `spgxlogState` at byte `at` of the main data: the redirect xid and
/// `isBuild`.
fn xlog_state(main: &[u8], at: usize) -> Result<(u32, bool), Fault> {
    Ok((page::u32_at(main, at)?, page::flag_at(main, at + 4)?))
}

/// Whether the bytes of this page below `pd_lower` are line pointers: not
/// on the metapage.
pub(crate) fn has_line_pointers(page: &[u8]) -> bool {
    !page::is_meta(page)
}
