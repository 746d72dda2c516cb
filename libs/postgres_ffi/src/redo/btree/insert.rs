//! INSERT_LEAF, INSERT_UPPER, INSERT_META, INSERT_POST, NEWROOT and
//! META_CLEANUP redo (`btree_xlog_insert`, `btree_xlog_newroot`,
//! `_bt_restore_meta`), the same in PostgreSQL 15-18.
//!
//! Main data `xl_btree_insert` is the new item's offset (2 bytes); block 0's
//! data is the tuple, preceded by the posting list split offset for
//! INSERT_POST (`_bt_swap_posting` is redone here: the posting list at the
//! offset before the new item keeps its size, the new item takes its
//! maximum TID). `xl_btree_newroot` is root block and level (8 bytes).

use super::page::{self, Opaque, BTP_LEAF, BTP_ROOT, P_NONE, TID_SIZE};
use super::{block_tag, clear_incomplete_split, unexpected_block};
use crate::redo::{bufpage, Ctx, Fault};

/// The new item's offset (`xl_btree_insert.offnum`).
fn insert_offnum(ctx: &Ctx) -> Result<u16, Fault> {
    page::u16_at(ctx.rec.main_data, 0)
}

/// Block 0 of INSERT_LEAF or INSERT_POST (which has no other block).
pub(super) fn insert(page: &mut [u8], ctx: &Ctx, block: u8, posting: bool) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let offnum = insert_offnum(ctx)?;
    let data = ctx.rec.block_data;
    if !posting {
        bufpage::add_item(page, data, offnum, false, false)?;
        return Ok(());
    }
    let postingoff = page::u16_at(data, 0)? as usize;
    let mut newitem = data[2..].to_vec();
    let oposting_off =
        offnum.checked_sub(1).ok_or_else(|| Fault::malformed("INSERT_POST at offset 0".into()))?;
    let nposting = swap_posting(&mut newitem, bufpage::item(page, oposting_off)?, postingoff)?;
    let target = bufpage::item_mut(page, oposting_off)?;
    if target.len() < nposting.len() {
        return Err(Fault::page("posting list shorter than its line pointer".into()));
    }
    target[..nposting.len()].copy_from_slice(&nposting);
    bufpage::add_item(page, &newitem, offnum, false, false)?;
    Ok(())
}

/// `_bt_swap_posting`: the posting list with `newitem`'s TID put at
/// `postingoff` (its largest TID dropped), and `newitem` given that TID.
/// Returns `MAXALIGN(IndexTupleSize)` bytes of the new posting list.
pub(super) fn swap_posting(
    newitem: &mut [u8],
    oposting: &[u8],
    postingoff: usize,
) -> Result<Vec<u8>, Fault> {
    let size = bufpage::maxalign(page::tuple_size(oposting)?);
    let p = page::posting(oposting)?;
    let n = p.count();
    if postingoff == 0 || postingoff >= n {
        return Err(Fault::page(format!("posting list of {n} TIDs split at {postingoff}")));
    }
    if newitem.len() < TID_SIZE {
        return Err(Fault::malformed("posting split new item too short".into()));
    }
    if size > oposting.len() || p.key_size + n * TID_SIZE > size {
        return Err(Fault::page(format!("posting list tuple of {size} bytes holds {n} TIDs")));
    }
    let mut nposting = oposting[..size].to_vec();
    let at = p.key_size + postingoff * TID_SIZE;
    let last = p.key_size + (n - 1) * TID_SIZE;
    nposting.copy_within(at..last, at + TID_SIZE);
    nposting[at..at + TID_SIZE].copy_from_slice(&newitem[..TID_SIZE]);
    newitem[..TID_SIZE].copy_from_slice(p.tid(n - 1));
    Ok(nposting)
}

/// INSERT_UPPER and INSERT_META: block 0 gets the tuple, block 1 (the
/// child) loses INCOMPLETE_SPLIT, block 2 (META) is the metapage.
pub(super) fn insert_upper(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    match block {
        0 => {
            let offnum = insert_offnum(ctx)?;
            bufpage::add_item(page, ctx.rec.block_data, offnum, false, false)?;
            Ok(())
        }
        1 => clear_incomplete_split(page),
        2 if ctx.rec.rmgr_info() == super::XLOG_BTREE_INSERT_META => restore_meta(page, ctx),
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// `_bt_restore_meta` from the target block's data.
pub(super) fn restore_meta(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    if ctx.tag.blkno != 0 {
        return Err(Fault::malformed(format!("btree metapage at block {}", ctx.tag.blkno)));
    }
    let md = page::Metadata::decode(ctx.rec.block_data)?;
    page::restore_meta(page, &md)
}

/// NEWROOT: block 0 the new root (from scratch), block 1 the old root
/// (left child, level > 0 only), block 2 the metapage.
pub(super) fn newroot(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let level = page::u32_at(ctx.rec.main_data, 4)?;
    match block {
        0 => {
            let flags = if level == 0 { BTP_ROOT | BTP_LEAF } else { BTP_ROOT };
            let opaque = Opaque { prev: P_NONE, next: P_NONE, level, flags, cycleid: 0 };
            page::init_page(page, opaque)?;
            if level > 0 {
                page::restore_page(page, ctx.rec.block_data)?;
            }
            Ok(())
        }
        1 if level > 0 => clear_incomplete_split(page),
        2 => {
            block_tag(ctx, 0)?;
            restore_meta(page, ctx)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}
