//! SPLIT_L and SPLIT_R redo (`btree_xlog_split`), the same in PostgreSQL
//! 15-18. Main data `xl_btree_split` (10 bytes): level, firstrightoff,
//! newitemoff, postingoff.
//!
//! - block 0, the left (original) page: rebuilt on a temp page in item
//!   order: the new high key (block data), then the original items before
//!   `firstrightoff`, with the new item inserted at `newitemoff` when it went
//!   left (SPLIT_L) and the posting list before it replaced when the insert
//!   split a posting list; then INCOMPLETE_SPLIT (+ LEAF), right link = the
//!   right page (block 1's tag), cycle id 0;
//! - block 1, the right page: from scratch, its tuples re-added from the
//!   block data; left link = block 0, right link = block 2 (or none);
//! - block 2, the right page's old right sibling: left link = block 1;
//! - block 3, the child whose split this insert finishes (level > 0).

use super::insert::swap_posting;
use super::page::{self, Opaque, BTP_INCOMPLETE_SPLIT, BTP_LEAF, P_HIKEY, P_NONE};
use super::{block_tag, clear_incomplete_split, unexpected_block};
use crate::redo::{bufpage, Ctx, Fault};

/// `xl_btree_split`.
struct XlSplit {
    level: u32,
    firstrightoff: u16,
    newitemoff: u16,
    postingoff: u16,
}

impl XlSplit {
    fn decode(data: &[u8]) -> Result<XlSplit, Fault> {
        Ok(XlSplit {
            level: page::u32_at(data, 0)?,
            firstrightoff: page::u16_at(data, 4)?,
            newitemoff: page::u16_at(data, 6)?,
            postingoff: page::u16_at(data, 8)?,
        })
    }
}

pub(super) fn split(
    page: &mut [u8],
    ctx: &Ctx,
    block: u8,
    newitemonleft: bool,
) -> Result<(), Fault> {
    let xl = XlSplit::decode(ctx.rec.main_data)?;
    match block {
        0 => left_page(page, ctx, &xl, newitemonleft),
        1 => right_page(page, ctx, &xl),
        2 => {
            let right = block_tag(ctx, 1)?.blkno;
            page::modify_opaque(page, |o| o.prev = right)
        }
        3 if xl.level > 0 => clear_incomplete_split(page),
        _ => Err(unexpected_block(ctx, block)),
    }
}

fn right_page(page: &mut [u8], ctx: &Ctx, xl: &XlSplit) -> Result<(), Fault> {
    let prev = block_tag(ctx, 0)?.blkno;
    let next = ctx.rec.block(2).map_or(P_NONE, |b| b.tag.blkno);
    let flags = if xl.level == 0 { BTP_LEAF } else { 0 };
    page::init_page(page, Opaque { prev, next, level: xl.level, flags, cycleid: 0 })?;
    page::restore_page(page, ctx.rec.block_data)
}

/// What block 0's data holds: the new item (maybe) and the left high key.
struct LeftData {
    newitem: Option<Vec<u8>>,
    /// The posting list replacing the one at `newitemoff - 1`, if split.
    nposting: Option<(u16, Vec<u8>)>,
    hikey: Vec<u8>,
}

fn left_data(page: &[u8], ctx: &Ctx, xl: &XlSplit, newitemonleft: bool) -> Result<LeftData, Fault> {
    let mut data = ctx.rec.block_data;
    let (mut newitem, mut nposting) = (None, None);
    if newitemonleft || xl.postingoff != 0 {
        let size = bufpage::maxalign(page::first_tuple(data)?.len());
        let mut item =
            data.get(..size).ok_or_else(|| Fault::malformed("split new item".into()))?.to_vec();
        data = &data[size..];
        if xl.postingoff != 0 {
            let off = xl
                .newitemoff
                .checked_sub(1)
                .ok_or_else(|| Fault::malformed("newitemoff 0".into()))?;
            let np = swap_posting(&mut item, bufpage::item(page, off)?, xl.postingoff as usize)?;
            nposting = Some((off, np));
        }
        newitem = Some(item);
    }
    let size = bufpage::maxalign(page::first_tuple(data)?.len());
    if size != data.len() {
        return Err(Fault::malformed(format!(
            "split left data: {} bytes after the high key",
            data.len()
        )));
    }
    Ok(LeftData { newitem, nposting, hikey: data.to_vec() })
}

fn left_page(page: &mut [u8], ctx: &Ctx, xl: &XlSplit, newitemonleft: bool) -> Result<(), Fault> {
    let right = block_tag(ctx, 1)?.blkno;
    let d = left_data(page, ctx, xl, newitemonleft)?;
    let oopaque = Opaque::read(page)?;
    let mut left = page::temp_page_copy_special(page)?;
    bufpage::add_item(&mut left, &d.hikey, P_HIKEY, false, false)?;
    let mut leftoff = P_HIKEY + 1;
    let mut add = |left: &mut Vec<u8>, item: &[u8]| -> Result<(), Fault> {
        bufpage::add_item(left, item, leftoff, false, false)?;
        leftoff += 1;
        Ok(())
    };
    let newitem = d.newitem.as_deref().filter(|_| newitemonleft);
    let mut off = oopaque.first_data_key();
    while off < xl.firstrightoff {
        match &d.nposting {
            Some((p_off, np)) if *p_off == off => {
                add(&mut left, np)?;
                off += 1;
                continue;
            }
            _ => {}
        }
        if let Some(item) = newitem.filter(|_| off == xl.newitemoff) {
            add(&mut left, item)?;
        }
        add(&mut left, bufpage::item(page, off)?)?;
        off += 1;
    }
    if let Some(item) = newitem.filter(|_| off == xl.newitemoff) {
        add(&mut left, item)?;
    }
    page.copy_from_slice(&left);
    page::modify_opaque(page, |o| {
        o.flags = BTP_INCOMPLETE_SPLIT | if xl.level == 0 { BTP_LEAF } else { 0 };
        o.next = right;
        o.cycleid = 0;
    })
}
