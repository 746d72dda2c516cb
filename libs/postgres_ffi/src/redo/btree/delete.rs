//! VACUUM, DELETE, MARK_PAGE_HALFDEAD, UNLINK_PAGE and UNLINK_PAGE_META
//! redo (`btree_xlog_vacuum`, `btree_xlog_delete`, `btree_xlog_updates`,
//! `btree_xlog_mark_page_halfdead`, `btree_xlog_unlink_page`).
//!
//! Main data per major: `xl_btree_vacuum` (ndeleted, nupdated) is the same
//! in 15-18; `xl_btree_delete` has the conflict xid first (ndeleted at 4,
//! nupdated at 6) and from 16 on a trailing `isCatalogRel` redo ignores.
//! Their block 0 data: the deleted offsets, the updated offsets, then one
//! `xl_btree_update` (count, then TID positions) per updated posting list.
//! Updates are applied before the deletions. Both clear BTP_HAS_GARBAGE;
//! VACUUM also clears `btpo_cycleid` from PostgreSQL 18 on (15's redo does
//! not; masked by btree_mask either way).
//!
//! `xl_btree_mark_page_halfdead` (20 bytes): poffset, leaf, left, right,
//! top parent. `xl_btree_unlink_page` (36 bytes): left, right, level, then
//! the 8-aligned full safexid at 16, then the leaf's left, right and top
//! parent. Deleted and half-dead pages are rebuilt from the main data.

use super::page::{self, Opaque, BTP_HAS_GARBAGE, BTP_LEAF};
use super::{dedup, unexpected_block};
use crate::redo::{bufpage, Ctx, Fault};
use crate::PgMajorVersion;

/// `btree_xlog_updates` then `PageIndexMultiDelete`, from block 0's data.
fn apply_deletions(
    page: &mut [u8],
    data: &[u8],
    ndeleted: usize,
    nupdated: usize,
) -> Result<(), Fault> {
    let offsets = |from: usize, n: usize| -> Result<Vec<u16>, Fault> {
        (0..n).map(|i| page::u16_at(data, from + 2 * i)).collect()
    };
    let deleted = offsets(0, ndeleted)?;
    let updated = offsets(2 * ndeleted, nupdated)?;
    let mut pos = 2 * (ndeleted + nupdated);
    for &off in &updated {
        let n = page::u16_at(data, pos)? as usize;
        let positions = offsets(pos + 2, n)?;
        pos += 2 + 2 * n;
        let new = dedup::update_posting(bufpage::item(page, off)?, &positions)?;
        bufpage::index_tuple_overwrite(page, off, &new)?;
    }
    if !deleted.is_empty() {
        bufpage::index_multi_delete(page, &deleted)?;
    }
    Ok(())
}

pub(super) fn vacuum_or_delete(
    page: &mut [u8],
    ctx: &Ctx,
    block: u8,
    vacuum: bool,
) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let main = ctx.rec.main_data;
    let at = if vacuum { 0 } else { 4 };
    let (ndeleted, nupdated) =
        (page::u16_at(main, at)? as usize, page::u16_at(main, at + 2)? as usize);
    apply_deletions(page, ctx.rec.block_data, ndeleted, nupdated)?;
    let clear_cycleid = vacuum && ctx.version >= PgMajorVersion::V18;
    page::modify_opaque(page, |o| {
        o.flags &= !BTP_HAS_GARBAGE;
        if clear_cycleid {
            o.cycleid = 0;
        }
    })
}

pub(super) fn mark_page_halfdead(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    match block {
        0 => {
            let (left, right, top) =
                (page::u32_at(main, 8)?, page::u32_at(main, 12)?, page::u32_at(main, 16)?);
            page::halfdead_leaf(page, left, right, top)
        }
        1 => {
            let poffset = page::u16_at(main, 0)?;
            let next =
                poffset.checked_add(1).ok_or_else(|| Fault::malformed("poffset 65535".into()))?;
            let rightsib = page::tid_block(bufpage::item(page, next)?)?;
            let itup = bufpage::item_mut(page, poffset)?;
            if itup.len() < page::INDEX_TUPLE_HEADER {
                return Err(Fault::page(format!("a {}-byte pivot tuple", itup.len())));
            }
            page::set_tid_block(itup, rightsib);
            bufpage::index_tuple_delete(page, next)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// `xl_btree_unlink_page`.
struct XlUnlink {
    leftsib: u32,
    rightsib: u32,
    level: u32,
    safexid: u64,
    leafleftsib: u32,
    leafrightsib: u32,
    leaftopparent: u32,
}

impl XlUnlink {
    fn decode(d: &[u8]) -> Result<XlUnlink, Fault> {
        Ok(XlUnlink {
            leftsib: page::u32_at(d, 0)?,
            rightsib: page::u32_at(d, 4)?,
            level: page::u32_at(d, 8)?,
            safexid: page::u64_at(d, 16)?,
            leafleftsib: page::u32_at(d, 24)?,
            leafrightsib: page::u32_at(d, 28)?,
            leaftopparent: page::u32_at(d, 32)?,
        })
    }
}

pub(super) fn unlink_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let xl = XlUnlink::decode(ctx.rec.main_data)?;
    match block {
        0 => {
            let opaque = Opaque {
                prev: xl.leftsib,
                next: xl.rightsib,
                level: xl.level,
                flags: 0,
                cycleid: 0,
            };
            page::init_page(page, opaque)?;
            page::set_deleted(page, xl.safexid)?;
            if xl.level == 0 {
                page::modify_opaque(page, |o| o.flags |= BTP_LEAF)?;
            }
            Ok(())
        }
        1 if xl.leftsib != page::P_NONE => page::modify_opaque(page, |o| o.next = xl.rightsib),
        2 => page::modify_opaque(page, |o| o.prev = xl.leftsib),
        3 if xl.level > 0 => {
            page::halfdead_leaf(page, xl.leafleftsib, xl.leafrightsib, xl.leaftopparent)
        }
        4 if ctx.rec.rmgr_info() == super::XLOG_BTREE_UNLINK_PAGE_META => {
            super::insert::restore_meta(page, ctx)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}
