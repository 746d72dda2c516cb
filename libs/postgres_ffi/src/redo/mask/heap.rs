//! `heap_mask` (heap and heap2 rmgrs; `heapam.c` in 15-17, `heapam_xlog.c`
//! in 18, the same in all four): header hints, the hole, and per tuple
//! the hint bits of `t_infomask`, `t_cid`, a speculative insertion's
//! `t_ctid`, and the padding after each item up to its `MAXALIGN`ed length.
//!
//! Tuple fields that would lie outside the page are left alone.

use super::{
    fill_marker, get_u16, get_u32, item_id_at, lp_flags, lp_len, lp_off, mask_page_hint_bits,
    mask_page_lsn_and_checksum, mask_unused_space, max_offset, set_u16, set_u32, MASK_MARKER,
};

/// `HeapTupleHeaderData` field offsets.
const T_CID: usize = 8;
const T_CTID: usize = 12;
const T_INFOMASK: usize = 20;

/// `t_infomask` bits (`htup_details.h`).
const HEAP_XMIN_COMMITTED: u16 = 0x0100;
const HEAP_XMIN_INVALID: u16 = 0x0200;
const HEAP_XMIN_FROZEN: u16 = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
const HEAP_XMAX_COMMITTED: u16 = 0x0400;
const HEAP_XMAX_INVALID: u16 = 0x0800;
const HEAP_XACT_MASK: u16 = 0xFFF0;

/// `SpecTokenOffsetNumber`: `t_ctid`'s offset while an insertion is speculative.
const SPEC_TOKEN_OFFSET_NUMBER: u16 = 0xFFFE;

const LP_NORMAL: u32 = 1;

/// `heap_mask`.
pub(super) fn heap_mask(page: &mut [u8], blkno: u32) {
    mask_page_lsn_and_checksum(page);
    mask_page_hint_bits(page);
    mask_unused_space(page);
    let mut off = 1;
    // PostgreSQL re-reads the item count on every iteration.
    while off <= max_offset(page) {
        let Some(word) = get_u32(page, item_id_at(off)) else { break };
        let item = lp_off(word);
        if lp_flags(word) == LP_NORMAL {
            mask_tuple_header(page, item, blkno, off as u16);
        }
        let len = lp_len(word);
        if len != 0 {
            let padded = (len + 7) & !7;
            fill_marker(page, item + len..item + padded);
        }
        off += 1;
    }
}

/// The per-tuple part of `heap_mask` for the tuple at byte `item`.
fn mask_tuple_header(page: &mut [u8], item: usize, blkno: u32, off: u16) {
    if let Some(infomask) = get_u16(page, item + T_INFOMASK) {
        let masked = if infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN {
            infomask & !HEAP_XACT_MASK
        } else {
            infomask & !(HEAP_XMAX_INVALID | HEAP_XMAX_COMMITTED)
        };
        set_u16(page, item + T_INFOMASK, masked);
    }
    set_u32(page, item + T_CID, MASK_MARKER as u32);
    if get_u16(page, item + T_CTID + 4) == Some(SPEC_TOKEN_OFFSET_NUMBER) {
        set_u16(page, item + T_CTID, (blkno >> 16) as u16);
        set_u16(page, item + T_CTID + 2, blkno as u16);
        set_u16(page, item + T_CTID + 4, off);
    }
}
