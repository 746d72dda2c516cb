//! PostgreSQL's page masking (`access/common/bufmask.c` and each rmgr's
//! `rm_mask`), so a page produced by native redo can be compared with the
//! image PostgreSQL logged after the same record (`wal_consistency_checking`).
//!
//! PostgreSQL's check (`verifyBackupPageConsistency`) masks both pages with
//! the record's rmgr's `rm_mask` and compares all `BLCKSZ` bytes. It does so
//! for every block reference, whatever its fork: a visibility-map page
//! referenced by a heap record is masked by `heap_mask` too (its bitmap lies
//! between `pd_lower` and `pd_upper`, so only its header is compared).
//! [`mask_page`] does the same.
//!
//! Per major: the masking functions and every layout they touch
//! (`PageHeaderData`, `ItemIdData`, `HeapTupleHeaderData`, the special
//! spaces of btree, hash, GIN, GiST and BRIN pages, their flag bits) are the
//! same in 15, 16, 17 and 18 (`heap_mask` moved from `heapam.c` to
//! `heapam_xlog.c` in 18 without changing), so `version` selects nothing yet.
//!
//! Invariants: masking never panics and never touches a byte outside the
//! slice. Where PostgreSQL raises an error (`mask_unused_space` on a header
//! whose bounds are inconsistent) we skip that step; where it would read or
//! write past the page (a line pointer or special space pointing outside),
//! the access is dropped. A page of a length other than `BLCKSZ` is masked
//! as if its length were the block size.

mod heap;
mod index;
#[cfg(test)]
mod tests;

use std::ops::Range;

use crate::consts::SIZE_OF_PAGE_HEADER_DATA;
use crate::wal::rmgr_id;
use crate::PgMajorVersion;

/// `MASK_MARKER`: the byte masked bytes are set to.
const MASK_MARKER: u8 = 0;

/// `pd_flags` hint bits (`bufpage.h`).
const PD_HAS_FREE_LINES: u16 = 0x1;
const PD_PAGE_FULL: u16 = 0x2;
const PD_ALL_VISIBLE: u16 = 0x4;

/// Byte offsets of `PageHeaderData` fields.
use crate::page::PD_FLAGS_OFFSET as PD_FLAGS;
const PD_LOWER: usize = 12;
const PD_UPPER: usize = 14;
const PD_SPECIAL: usize = 16;
const PD_PRUNE_XID: usize = 20;

/// `sizeof(ItemIdData)`.
const ITEM_ID_SIZE: usize = 4;

/// Apply rmgr `rmid`'s `rm_mask` to `page` (block `blkno` of any fork), as
/// PostgreSQL does to both pages before comparing them. Rmgrs without a
/// mask function leave the page as it is.
pub fn mask_page(page: &mut [u8], rmid: u8, blkno: u32, version: PgMajorVersion) {
    let _ = version;
    match rmid {
        rmgr_id::HEAP | rmgr_id::HEAP2 => heap::heap_mask(page, blkno),
        rmgr_id::BTREE => index::btree_mask(page),
        rmgr_id::HASH => index::hash_mask(page),
        rmgr_id::GIN => index::gin_mask(page),
        rmgr_id::GIST => index::gist_mask(page),
        rmgr_id::SPGIST => index::spg_mask(page),
        rmgr_id::BRIN => index::brin_mask(page),
        rmgr_id::SEQUENCE | rmgr_id::GENERIC => {
            mask_page_lsn_and_checksum(page);
            mask_unused_space(page);
        }
        _ => {}
    }
}

/// The first run of differing bytes of `a` and `b` (a length difference
/// counts as a difference from the shorter length on), `None` if equal.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<Range<usize>> {
    let common = a.len().min(b.len());
    match (0..common).find(|&i| a[i] != b[i]) {
        Some(start) => {
            let end = (start..common).find(|&i| a[i] == b[i]).unwrap_or(common);
            let end = if end == common { a.len().max(b.len()) } else { end };
            Some(start..end)
        }
        None if a.len() != b.len() => Some(common..a.len().max(b.len())),
        None => None,
    }
}

/// The little-endian `u16` at `at`, if it lies within `page`.
fn get_u16(page: &[u8], at: usize) -> Option<u16> {
    let bytes = page.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([bytes[0], bytes[1]]))
}

/// Write `value` at `at` if it lies within `page`.
fn set_u16(page: &mut [u8], at: usize, value: u16) {
    if let Some(bytes) = at.checked_add(2).and_then(|end| page.get_mut(at..end)) {
        bytes.copy_from_slice(&value.to_le_bytes());
    }
}

/// The little-endian `u32` at `at`, if it lies within `page`.
fn get_u32(page: &[u8], at: usize) -> Option<u32> {
    let bytes = page.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Write `value` at `at` if it lies within `page`.
fn set_u32(page: &mut [u8], at: usize, value: u32) {
    if let Some(bytes) = at.checked_add(4).and_then(|end| page.get_mut(at..end)) {
        bytes.copy_from_slice(&value.to_le_bytes());
    }
}

/// Set the bytes of `range` that lie within `page` to `MASK_MARKER`.
fn fill_marker(page: &mut [u8], range: Range<usize>) {
    let end = range.end.min(page.len());
    if range.start < end {
        page[range.start..end].fill(MASK_MARKER);
    }
}

/// `page[at] &= !bits` for a `u16` field, if it lies within `page`.
fn clear_u16_bits(page: &mut [u8], at: usize, bits: u16) {
    if let Some(v) = get_u16(page, at) {
        set_u16(page, at, v & !bits);
    }
}

/// `pd_special`, or 0 on a page too short to have one.
fn pd_special(page: &[u8]) -> usize {
    get_u16(page, PD_SPECIAL).unwrap_or(0) as usize
}

/// `pd_lower`, or 0 on a page too short to have one.
fn pd_lower(page: &[u8]) -> usize {
    get_u16(page, PD_LOWER).unwrap_or(0) as usize
}

/// `mask_page_lsn_and_checksum`: `pd_lsn` and `pd_checksum`.
fn mask_page_lsn_and_checksum(page: &mut [u8]) {
    fill_marker(page, 0..PD_FLAGS);
}

/// `mask_page_hint_bits`: `pd_prune_xid` and the flags set without WAL.
fn mask_page_hint_bits(page: &mut [u8]) {
    set_u32(page, PD_PRUNE_XID, MASK_MARKER as u32);
    clear_u16_bits(page, PD_FLAGS, PD_PAGE_FULL | PD_HAS_FREE_LINES | PD_ALL_VISIBLE);
}

/// `mask_unused_space`: the hole between `pd_lower` and `pd_upper`. Skipped
/// when the header's bounds are inconsistent (PostgreSQL raises an error).
fn mask_unused_space(page: &mut [u8]) {
    let (Some(lower), Some(upper), Some(special)) =
        (get_u16(page, PD_LOWER), get_u16(page, PD_UPPER), get_u16(page, PD_SPECIAL))
    else {
        return;
    };
    let (lower, upper, special) = (lower as usize, upper as usize, special as usize);
    if lower > upper || special < upper || lower < SIZE_OF_PAGE_HEADER_DATA || special > page.len()
    {
        return;
    }
    fill_marker(page, lower..upper);
}

/// `PageGetMaxOffsetNumber`.
fn max_offset(page: &[u8]) -> usize {
    pd_lower(page).saturating_sub(SIZE_OF_PAGE_HEADER_DATA) / ITEM_ID_SIZE
}

/// Where line pointer `off` (1-based) lies.
fn item_id_at(off: usize) -> usize {
    SIZE_OF_PAGE_HEADER_DATA + (off - 1) * ITEM_ID_SIZE
}

/// `ItemIdData` as a word: `lp_off` bits 0-14, `lp_flags` 15-16, `lp_len` 17-31.
fn lp_off(word: u32) -> usize {
    (word & 0x7FFF) as usize
}
fn lp_flags(word: u32) -> u32 {
    (word >> 15) & 0x3
}
fn lp_len(word: u32) -> usize {
    (word >> 17) as usize
}

/// `mask_lp_flags`: every used line pointer's flags become `LP_UNUSED`.
fn mask_lp_flags(page: &mut [u8]) {
    for off in 1..=max_offset(page) {
        let at = item_id_at(off);
        if let Some(word) = get_u32(page, at) {
            if lp_flags(word) != 0 {
                set_u32(page, at, word & !(0x3 << 15));
            }
        }
    }
}

/// `mask_page_content`: everything after the header, `pd_lower`, `pd_upper`.
fn mask_page_content(page: &mut [u8]) {
    fill_marker(page, SIZE_OF_PAGE_HEADER_DATA..page.len());
    fill_marker(page, PD_LOWER..PD_LOWER + 2);
    fill_marker(page, PD_UPPER..PD_UPPER + 2);
}
