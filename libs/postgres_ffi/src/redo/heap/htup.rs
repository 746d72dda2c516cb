//! The heap tuple header (`htup_details.h`) as heap redo writes it, and the
//! page-level flags heap redo sets (`bufpage.h`). Same layout in 15-18:
//! ```text
//!   t_xmin u32 @0 | t_xmax u32 @4 | t_cid / t_xvac u32 @8
//!   | t_ctid (bi_hi u16 @12, bi_lo u16 @14, posid u16 @16)
//!   | t_infomask2 u16 @18 | t_infomask u16 @20 | t_hoff u8 @22 | bits @23
//! ```
//! Invariants: every accessor works on a tuple slice already checked to
//! hold the 23-byte header ([`normal_tuple_mut`]); redo never indexes past
//! it. Tuples rebuilt from `xl_heap_header` get xmin = the record's xid,
//! cmin = `FirstCommandId` (0) and `HEAP_COMBOCID` cleared, as
//! `HeapTupleHeaderSetCmin` does.

use crate::page::{PageHeader, PD_FLAGS_OFFSET};
use crate::redo::bufpage::{self, LP_NORMAL, PD_ALL_VISIBLE};
use crate::redo::Fault;

/// `SizeofHeapTupleHeader`.
pub const HEADER_LEN: usize = 23;
/// `SizeOfHeapHeader` (`xl_heap_header`: infomask2, infomask, hoff).
pub const XL_HEAP_HEADER_LEN: usize = 5;

const XMIN_AT: usize = 0;
const XMAX_AT: usize = 4;
const CID_AT: usize = 8;
const CTID_AT: usize = 12;
const INFOMASK2_AT: usize = 18;
const INFOMASK_AT: usize = 20;
const HOFF_AT: usize = 22;

pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
pub const HEAP_COMBOCID: u16 = 0x0020;
pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
pub const HEAP_XMAX_INVALID: u16 = 0x0800;
pub const HEAP_XMAX_IS_MULTI: u16 = 0x1000;
pub const HEAP_MOVED: u16 = 0xC000;
const HEAP_LOCK_MASK: u16 = HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
/// `HEAP_XMAX_BITS`: cleared whenever xmax changes.
pub const HEAP_XMAX_BITS: u16 = HEAP_XMAX_COMMITTED
    | HEAP_XMAX_INVALID
    | HEAP_XMAX_IS_MULTI
    | HEAP_LOCK_MASK
    | HEAP_XMAX_LOCK_ONLY;
pub const HEAP_KEYS_UPDATED: u16 = 0x2000;
pub const HEAP_HOT_UPDATED: u16 = 0x4000;

/// `xl_heap_*.infobits_set` bits.
const XLHL_XMAX_IS_MULTI: u8 = 0x01;
const XLHL_XMAX_LOCK_ONLY: u8 = 0x02;
const XLHL_XMAX_EXCL_LOCK: u8 = 0x04;
const XLHL_XMAX_KEYSHR_LOCK: u8 = 0x08;
const XLHL_KEYS_UPDATED: u8 = 0x10;

/// `MovedPartitionsBlockNumber` / `MovedPartitionsOffsetNumber`.
const MOVED_PARTITIONS: (u32, u16) = (u32::MAX, 0xFFFD);

fn u16_at(t: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([t[at], t[at + 1]])
}

fn put_u16(t: &mut [u8], at: usize, v: u16) {
    t[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(t: &mut [u8], at: usize, v: u32) {
    t[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The tuple at `off`, which must be `LP_NORMAL` with a whole header
/// (PostgreSQL's redo PANICs with "invalid lp" otherwise).
pub fn normal_tuple_mut(page: &mut [u8], off: u16) -> Result<&mut [u8], Fault> {
    let id = bufpage::item_id(page, off)?;
    if id.flags != LP_NORMAL {
        return Err(Fault::page(format!("line pointer {off} is not LP_NORMAL ({})", id.flags)));
    }
    let tuple = bufpage::item_mut(page, off)?;
    if tuple.len() < HEADER_LEN {
        return Err(Fault::page(format!("tuple {off} is {} bytes, under a header", tuple.len())));
    }
    Ok(tuple)
}

pub fn infomask(t: &[u8]) -> u16 {
    u16_at(t, INFOMASK_AT)
}

pub fn infomask2(t: &[u8]) -> u16 {
    u16_at(t, INFOMASK2_AT)
}

pub fn hoff(t: &[u8]) -> u8 {
    t[HOFF_AT]
}

pub fn set_infomask(t: &mut [u8], v: u16) {
    put_u16(t, INFOMASK_AT, v)
}

pub fn set_infomask2(t: &mut [u8], v: u16) {
    put_u16(t, INFOMASK2_AT, v)
}

pub fn set_xmin(t: &mut [u8], xid: u32) {
    put_u32(t, XMIN_AT, xid)
}

pub fn set_xmax(t: &mut [u8], xid: u32) {
    put_u32(t, XMAX_AT, xid)
}

/// `t_xvac` shares `t_cid`'s bytes.
pub fn set_xvac(t: &mut [u8], xid: u32) {
    put_u32(t, CID_AT, xid)
}

/// `HeapTupleHeaderSetCmin(t, FirstCommandId)` and
/// `HeapTupleHeaderSetCmax(t, FirstCommandId, false)`: both store 0 and
/// clear `HEAP_COMBOCID`.
pub fn set_first_command_id(t: &mut [u8]) {
    put_u32(t, CID_AT, 0);
    set_infomask(t, infomask(t) & !HEAP_COMBOCID);
}

pub fn set_ctid(t: &mut [u8], blkno: u32, off: u16) {
    put_u16(t, CTID_AT, (blkno >> 16) as u16);
    put_u16(t, CTID_AT + 2, blkno as u16);
    put_u16(t, CTID_AT + 4, off);
}

/// `HeapTupleHeaderSetMovedPartitions`.
pub fn set_moved_partitions(t: &mut [u8]) {
    set_ctid(t, MOVED_PARTITIONS.0, MOVED_PARTITIONS.1)
}

/// `HEAP_XMAX_IS_LOCKED_ONLY`.
pub fn xmax_is_locked_only(infomask: u16) -> bool {
    infomask & HEAP_XMAX_LOCK_ONLY != 0
        || infomask & (HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK) == HEAP_XMAX_EXCL_LOCK
}

/// `fix_infomask_from_infobits`: the xmax lock bits and `HEAP_KEYS_UPDATED`
/// from a record's `infobits_set`.
pub fn fix_infomask_from_infobits(infobits: u8, t: &mut [u8]) {
    let mut mask = infomask(t)
        & !(HEAP_XMAX_IS_MULTI | HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_KEYSHR_LOCK | HEAP_XMAX_EXCL_LOCK);
    let mut mask2 = infomask2(t) & !HEAP_KEYS_UPDATED;
    for (bit, flag) in [
        (XLHL_XMAX_IS_MULTI, HEAP_XMAX_IS_MULTI),
        (XLHL_XMAX_LOCK_ONLY, HEAP_XMAX_LOCK_ONLY),
        (XLHL_XMAX_EXCL_LOCK, HEAP_XMAX_EXCL_LOCK),
        (XLHL_XMAX_KEYSHR_LOCK, HEAP_XMAX_KEYSHR_LOCK),
    ] {
        if infobits & bit != 0 {
            mask |= flag;
        }
    }
    if infobits & XLHL_KEYS_UPDATED != 0 {
        mask2 |= HEAP_KEYS_UPDATED;
    }
    set_infomask(t, mask);
    set_infomask2(t, mask2);
}

/// The start of what delete, update (old tuple), lock and lock-updated redo
/// do to a tuple's infomasks: xmax bits and `HEAP_MOVED` off,
/// `HEAP_KEYS_UPDATED` off, then the record's infobits.
pub fn reset_xmax_bits(t: &mut [u8], infobits: u8) {
    set_infomask(t, infomask(t) & !(HEAP_XMAX_BITS | HEAP_MOVED));
    set_infomask2(t, infomask2(t) & !HEAP_KEYS_UPDATED);
    fix_infomask_from_infobits(infobits, t);
}

/// The fields an `xl_heap_header` (or `xl_multi_insert_tuple`) keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XlHeader {
    pub infomask2: u16,
    pub infomask: u16,
    pub hoff: u8,
}

impl XlHeader {
    /// From the 5 bytes at the start of `b`.
    pub fn decode(b: &[u8]) -> Result<XlHeader, Fault> {
        if b.len() < XL_HEAP_HEADER_LEN {
            return Err(Fault::malformed(format!("xl_heap_header needs 5 bytes, {}", b.len())));
        }
        Ok(XlHeader { infomask2: u16_at(b, 0), infomask: u16_at(b, 2), hoff: b[4] })
    }
}

/// A tuple as insert/update redo rebuilds it: a zeroed header with the
/// record's infomasks and hoff, xmin = `xid`, cmin = `FirstCommandId`,
/// ctid = (`blkno`, `off`), then `body` (null bitmap, padding, data).
pub fn build_tuple(h: XlHeader, body: &[u8], xid: u32, blkno: u32, off: u16) -> Vec<u8> {
    let mut t = vec![0u8; HEADER_LEN + body.len()];
    write_tuple(&mut t, h, body, xid, blkno, off);
    t
}

/// [`build_tuple`] into `t` (`HEADER_LEN + body.len()` bytes, e.g. the
/// tuple's place on the page), every byte of it written.
#[inline]
pub fn write_tuple(t: &mut [u8], h: XlHeader, body: &[u8], xid: u32, blkno: u32, off: u16) {
    assert_eq!(t.len(), HEADER_LEN + body.len(), "a tuple's place fits it");
    let (head, rest) = t.split_at_mut(HEADER_LEN);
    // A fixed-size header: fixed offsets, no bounds checks.
    let head: &mut [u8; HEADER_LEN] = head.try_into().expect("split at HEADER_LEN");
    set_xmin(head, xid);
    set_xmax(head, 0);
    put_u32(head, CID_AT, 0); // cmin = FirstCommandId
    set_ctid(head, blkno, off);
    set_infomask2(head, h.infomask2);
    set_infomask(head, h.infomask & !HEAP_COMBOCID);
    head[HOFF_AT] = h.hoff;
    copy_short(rest, body);
}

/// `dst.copy_from_slice(src)` (same lengths), with no call to `memcpy`
/// for 8 to 16 bytes (two overlapping 8-byte moves): the body of a row of
/// one or two fixed-width columns, which a page holds hundreds of.
#[inline]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if (8..=16).contains(&n) && dst.len() == n {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else {
        dst.copy_from_slice(src);
    }
}

/// `PageSetPrunable`: `pd_prune_xid` = `xid` unless it holds an older one.
pub fn page_set_prunable(page: &mut [u8], xid: u32) {
    let mut h = PageHeader::decode(page);
    if h.prune_xid == 0 || transaction_id_precedes(xid, h.prune_xid) {
        h.prune_xid = xid;
        h.encode(page);
    }
}

/// `TransactionIdPrecedes`: modulo-2^32 order for normal xids.
fn transaction_id_precedes(a: u32, b: u32) -> bool {
    if a < 3 || b < 3 {
        return a < b;
    }
    (a.wrapping_sub(b) as i32) < 0
}

/// Set or clear `PD_ALL_VISIBLE`: `pd_flags` (bytes 10-11) alone, not
/// the whole header decoded and written back.
#[inline]
pub fn page_set_all_visible(page: &mut [u8], on: bool) {
    let flags = u16_at(page, PD_FLAGS_OFFSET);
    let flags = if on { flags | PD_ALL_VISIBLE } else { flags & !PD_ALL_VISIBLE };
    put_u16(page, PD_FLAGS_OFFSET, flags);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuilt_tuple_header_bytes() {
        let h = XlHeader { infomask2: 0x0003, infomask: 0x0822, hoff: 24 };
        let t = build_tuple(h, &[0xAA, 1, 2, 3], 0x01020304, 0x0005_0006, 7);
        #[rustfmt::skip]
        let want = [
            4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, // xmin, xmax, cid
            5, 0, 6, 0, 7, 0, // ctid: bi_hi, bi_lo, posid
            3, 0, 0x02, 0x08, 24, // infomask2, infomask without COMBOCID, hoff
            0xAA, 1, 2, 3,
        ];
        assert_eq!(t, want);
    }

    #[test]
    fn infobits_and_locked_only() {
        let mut t = vec![0u8; HEADER_LEN];
        set_infomask(&mut t, HEAP_XMAX_INVALID | HEAP_XMAX_KEYSHR_LOCK | 0x0001);
        set_infomask2(&mut t, HEAP_KEYS_UPDATED | 2);
        reset_xmax_bits(&mut t, XLHL_XMAX_LOCK_ONLY | XLHL_XMAX_EXCL_LOCK);
        assert_eq!(infomask(&t), 0x0001 | HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_EXCL_LOCK);
        assert_eq!(infomask2(&t), 2);
        assert!(xmax_is_locked_only(infomask(&t)));
        reset_xmax_bits(&mut t, XLHL_KEYS_UPDATED | XLHL_XMAX_IS_MULTI);
        assert_eq!(infomask(&t), 0x0001 | HEAP_XMAX_IS_MULTI);
        assert_eq!(infomask2(&t), 2 | HEAP_KEYS_UPDATED);
        assert!(!xmax_is_locked_only(infomask(&t)));
        assert!(xmax_is_locked_only(HEAP_XMAX_EXCL_LOCK));
    }

    #[test]
    fn prunable_keeps_the_oldest_xid() {
        let mut page = vec![0u8; crate::consts::BLCKSZ];
        page_set_prunable(&mut page, 900);
        page_set_prunable(&mut page, 950);
        assert_eq!(PageHeader::decode(&page).prune_xid, 900);
        page_set_prunable(&mut page, 800);
        assert_eq!(PageHeader::decode(&page).prune_xid, 800);
        // Wraparound: 5 follows u32::MAX - 10.
        page_set_prunable(&mut page, u32::MAX - 10);
        page_set_prunable(&mut page, 5);
        assert_eq!(PageHeader::decode(&page).prune_xid, u32::MAX - 10);
    }
}
