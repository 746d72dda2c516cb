//! Heap records that change one existing tuple in place: DELETE 0x10,
//! LOCK 0x60, CONFIRM 0x50, INPLACE 0x70 (rmgr 10) and Heap2 LOCK_UPDATED
//! 0x60 (rmgr 9). Main data, the same in 15-18:
//! - `xl_heap_delete` / `xl_heap_lock` / `xl_heap_lock_updated` (8 bytes):
//!   xmax u32, offnum u16, infobits_set u8, flags u8;
//! - `xl_heap_confirm`: offnum u16;
//! - `xl_heap_inplace`: offnum u16 (18 appends invalidation messages);
//!   block 0 data is the tuple's new data after `t_hoff`, same length.
//!
//! Invariants: the tuple must be `LP_NORMAL` with a whole header (else a
//! `Fault::Page`, where PostgreSQL PANICs "invalid lp"); nothing but that
//! tuple's header (or, for INPLACE, its data) and the page header's
//! `pd_prune_xid` / `PD_ALL_VISIBLE` (DELETE) changes.

use super::htup::{self, normal_tuple_mut, HEAP_HOT_UPDATED};
use super::Fields;
use crate::redo::{Ctx, Fault};

const XLH_DELETE_ALL_VISIBLE_CLEARED: u8 = 0x01;
const XLH_DELETE_IS_SUPER: u8 = 0x08;
const XLH_DELETE_IS_PARTITION_MOVE: u8 = 0x10;

/// xmax u32, offnum u16, infobits u8, flags u8.
struct XmaxRecord {
    xmax: u32,
    offnum: u16,
    infobits: u8,
    flags: u8,
}

impl XmaxRecord {
    fn decode(main: &[u8], what: &'static str) -> Result<XmaxRecord, Fault> {
        let m = Fields { b: main, what };
        m.need(8)?;
        Ok(XmaxRecord { xmax: m.u32(0)?, offnum: m.u16(4)?, infobits: m.u8(6)?, flags: m.u8(7)? })
    }
}

/// Redo of Heap DELETE on block 0.
pub(super) fn delete(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let rec = XmaxRecord::decode(ctx.rec.main_data, "Heap DELETE main data")?;
    let t = normal_tuple_mut(page, rec.offnum)?;
    htup::reset_xmax_bits(t, rec.infobits);
    htup::set_infomask2(t, htup::infomask2(t) & !HEAP_HOT_UPDATED);
    if rec.flags & XLH_DELETE_IS_SUPER == 0 {
        htup::set_xmax(t, rec.xmax);
    } else {
        htup::set_xmin(t, 0);
    }
    htup::set_first_command_id(t);
    if rec.flags & XLH_DELETE_IS_PARTITION_MOVE != 0 {
        htup::set_moved_partitions(t);
    } else {
        htup::set_ctid(t, ctx.tag.blkno, rec.offnum);
    }
    htup::page_set_prunable(page, ctx.rec.xid);
    if rec.flags & XLH_DELETE_ALL_VISIBLE_CLEARED != 0 {
        htup::page_set_all_visible(page, false);
    }
    Ok(())
}

/// Redo of Heap LOCK on block 0.
pub(super) fn lock(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let rec = XmaxRecord::decode(ctx.rec.main_data, "Heap LOCK main data")?;
    let t = normal_tuple_mut(page, rec.offnum)?;
    htup::reset_xmax_bits(t, rec.infobits);
    if htup::xmax_is_locked_only(htup::infomask(t)) {
        htup::set_infomask2(t, htup::infomask2(t) & !HEAP_HOT_UPDATED);
        htup::set_ctid(t, ctx.tag.blkno, rec.offnum);
    }
    htup::set_xmax(t, rec.xmax);
    htup::set_first_command_id(t);
    Ok(())
}

/// Redo of Heap2 LOCK_UPDATED on block 0 (no cmax, no ctid change).
pub(crate) fn lock_updated(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let rec = XmaxRecord::decode(ctx.rec.main_data, "Heap2 LOCK_UPDATED main data")?;
    let t = normal_tuple_mut(page, rec.offnum)?;
    htup::reset_xmax_bits(t, rec.infobits);
    htup::set_xmax(t, rec.xmax);
    Ok(())
}

/// Redo of Heap CONFIRM on block 0: the speculative token in t_ctid
/// becomes the tuple's own TID.
pub(super) fn confirm(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let offnum = Fields { b: ctx.rec.main_data, what: "Heap CONFIRM main data" }.u16(0)?;
    let t = normal_tuple_mut(page, offnum)?;
    htup::set_ctid(t, ctx.tag.blkno, offnum);
    Ok(())
}

/// Redo of Heap INPLACE on block 0: the tuple's data after `t_hoff` is
/// replaced by the block data, which must be exactly as long.
pub(super) fn inplace(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let offnum = Fields { b: ctx.rec.main_data, what: "Heap INPLACE main data" }.u16(0)?;
    let t = normal_tuple_mut(page, offnum)?;
    let hoff = htup::hoff(t) as usize;
    let new = ctx.rec.block_data;
    if hoff > t.len() || t.len() - hoff != new.len() {
        return Err(Fault::page(format!(
            "Heap INPLACE: tuple {offnum} has {} data bytes after t_hoff {hoff}, record {}",
            t.len().saturating_sub(hoff),
            new.len()
        )));
    }
    t[hoff..].copy_from_slice(new);
    Ok(())
}
