//! Heap UPDATE 0x20 and HOT_UPDATE 0x40 (rmgr 10), on the heap pages.
//! `xl_heap_update` (main data, 14 bytes, the same in 15-18): old_xmax u32
//! @0, old_offnum u16 @4, old_infobits_set u8 @6, flags u8 @7, new_xmax u32
//! @8, new_offnum u16 @12. Block 0 is the new page; block 1 the old page
//! when it is another one (no data). Block 0 data: prefix length u16 if
//! `XLH_UPDATE_PREFIX_FROM_OLD`, suffix length u16 if
//! `XLH_UPDATE_SUFFIX_FROM_OLD`, `xl_heap_header`, then the new tuple's
//! bitmap/padding (`t_hoff - 23` bytes) and the data not shared with the
//! old tuple. Prefix and suffix come only with a same-page update, so redo
//! of either page needs no other page's data.
//!
//! Invariants: the old tuple gets xmax, cmax 0, the infobits, HOT_UPDATED
//! per the record kind and ctid = the new TID; its page becomes prunable
//! by the record's xid. The new tuple goes in at exactly `new_offnum`
//! (xmin = xid, cmin 0, xmax = new_xmax, ctid = its own TID).
//! `XLOG_HEAP_INIT_PAGE` re-initialises the new page only when it is not
//! the old one (as PostgreSQL).

use super::htup::{self, build_tuple, normal_tuple_mut, XlHeader, HEADER_LEN};
use super::htup::{HEAP_HOT_UPDATED, XL_HEAP_HEADER_LEN};
use super::insert::put_tuple;
use super::{block_no, Fields, XLOG_HEAP_INIT_PAGE};
use crate::redo::bufpage;
use crate::redo::{Ctx, Fault};

pub(crate) const XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED: u8 = 0x01;
pub(crate) const XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED: u8 = 0x02;
const XLH_UPDATE_PREFIX_FROM_OLD: u8 = 0x20;
const XLH_UPDATE_SUFFIX_FROM_OLD: u8 = 0x40;

pub(crate) struct XlUpdate {
    pub old_xmax: u32,
    pub old_offnum: u16,
    pub old_infobits: u8,
    pub flags: u8,
    pub new_xmax: u32,
    pub new_offnum: u16,
}

impl XlUpdate {
    pub fn decode(main: &[u8]) -> Result<XlUpdate, Fault> {
        let m = Fields { b: main, what: "Heap UPDATE main data" };
        m.need(14)?;
        Ok(XlUpdate {
            old_xmax: m.u32(0)?,
            old_offnum: m.u16(4)?,
            old_infobits: m.u8(6)?,
            flags: m.u8(7)?,
            new_xmax: m.u32(8)?,
            new_offnum: m.u16(12)?,
        })
    }
}

/// (new block, old block) numbers: block 1 if the record has it, else 0.
pub(crate) fn new_and_old_blocks(ctx: &Ctx) -> Result<(u32, u32), Fault> {
    let new = block_no(ctx, 0, "Heap UPDATE")?;
    let old = ctx.rec.block(1).map_or(new, |b| b.tag.blkno);
    Ok((new, old))
}

pub(super) fn update(page: &mut [u8], ctx: &Ctx, hot: bool) -> Result<(), Fault> {
    let rec = XlUpdate::decode(ctx.rec.main_data)?;
    let (newblk, _) = new_and_old_blocks(ctx)?;
    let same_page = ctx.rec.block(1).is_none();
    if ctx.rec.target == 1 || same_page {
        old_tuple(page, ctx, &rec, hot, newblk)?;
    }
    if ctx.rec.target == 0 {
        if !same_page && ctx.rec.info & XLOG_HEAP_INIT_PAGE != 0 {
            bufpage::page_init(page, 0);
        }
        new_tuple(page, ctx, &rec, same_page)?;
    }
    Ok(())
}

fn old_tuple(
    page: &mut [u8],
    ctx: &Ctx,
    rec: &XlUpdate,
    hot: bool,
    newblk: u32,
) -> Result<(), Fault> {
    let t = normal_tuple_mut(page, rec.old_offnum)?;
    htup::reset_xmax_bits(t, rec.old_infobits);
    let mask2 = htup::infomask2(t);
    htup::set_infomask2(t, if hot { mask2 | HEAP_HOT_UPDATED } else { mask2 & !HEAP_HOT_UPDATED });
    htup::set_xmax(t, rec.old_xmax);
    htup::set_first_command_id(t);
    htup::set_ctid(t, newblk, rec.new_offnum);
    htup::page_set_prunable(page, ctx.rec.xid);
    if rec.flags & XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED != 0 {
        htup::page_set_all_visible(page, false);
    }
    Ok(())
}

fn new_tuple(page: &mut [u8], ctx: &Ctx, rec: &XlUpdate, same_page: bool) -> Result<(), Fault> {
    let data = Fields { b: ctx.rec.block_data, what: "Heap UPDATE new tuple" };
    let mut at = 0;
    let mut lens = [0usize; 2];
    for (i, flag) in
        [XLH_UPDATE_PREFIX_FROM_OLD, XLH_UPDATE_SUFFIX_FROM_OLD].into_iter().enumerate()
    {
        if rec.flags & flag != 0 {
            lens[i] = data.u16(at)? as usize;
            at += 2;
        }
    }
    let [prefix_len, suffix_len] = lens;
    if (prefix_len > 0 || suffix_len > 0) && !same_page {
        return Err(Fault::malformed("Heap UPDATE: prefix/suffix from another page".into()));
    }
    data.need(at + XL_HEAP_HEADER_LEN)?;
    let header = XlHeader::decode(&data.b[at..])?;
    let rest = &data.b[at + XL_HEAP_HEADER_LEN..];
    let body = if prefix_len > 0 || suffix_len > 0 {
        let old = normal_tuple_mut(page, rec.old_offnum)?;
        with_old_parts(header, rest, old, prefix_len, suffix_len)?
    } else {
        rest.to_vec()
    };
    let mut tuple = build_tuple(header, &body, ctx.rec.xid, ctx.tag.blkno, rec.new_offnum);
    htup::set_xmax(&mut tuple, rec.new_xmax);
    put_tuple(page, &tuple, rec.new_offnum)?;
    if rec.flags & XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED != 0 {
        htup::page_set_all_visible(page, false);
    }
    Ok(())
}

/// The new tuple after its fixed header: the logged bitmap/padding, the
/// old tuple's first `prefix_len` data bytes, the logged data, the old
/// tuple's last `suffix_len` bytes.
fn with_old_parts(
    header: XlHeader,
    logged: &[u8],
    old: &[u8],
    prefix_len: usize,
    suffix_len: usize,
) -> Result<Vec<u8>, Fault> {
    let (bitmap, data): (&[u8], &[u8]) = if prefix_len == 0 {
        (logged, &[])
    } else {
        let bitmap_len = (header.hoff as usize).checked_sub(HEADER_LEN);
        let Some(n) = bitmap_len.filter(|n| *n <= logged.len()) else {
            return Err(Fault::malformed(format!(
                "Heap UPDATE: t_hoff {} with {} logged bytes",
                header.hoff,
                logged.len()
            )));
        };
        logged.split_at(n)
    };
    let old_hoff = htup::hoff(old) as usize;
    let prefix = old.get(old_hoff..old_hoff + prefix_len);
    let suffix = old.len().checked_sub(suffix_len).map(|s| &old[s..]);
    let (Some(prefix), Some(suffix)) = (prefix, suffix) else {
        return Err(Fault::page(format!(
            "Heap UPDATE: old tuple of {} bytes (t_hoff {old_hoff}) lacks prefix {prefix_len} / suffix {suffix_len}",
            old.len()
        )));
    };
    let mut body = Vec::with_capacity(logged.len() + prefix_len + suffix_len);
    body.extend_from_slice(bitmap);
    body.extend_from_slice(prefix);
    body.extend_from_slice(data);
    body.extend_from_slice(suffix);
    Ok(body)
}
