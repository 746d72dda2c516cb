//! The index rmgrs' masks: `btree_mask` (`nbtxlog.c`), `hash_mask`
//! (`hash_xlog.c`), `gin_mask` (`ginxlog.c`), `gist_mask` (`gistxlog.c`),
//! `spg_mask` (`spgxlog.c`) and `brin_mask` (`brin_xlog.c`), the same in
//! 15-18, as are the special-space layouts they read.
//!
//! Each reads its special space at `pd_special` as PostgreSQL does (on a
//! new, all-zero page that is the page header itself); a special-space
//! field outside the page is neither read nor written.

use super::{
    clear_u16_bits, fill_marker, get_u16, mask_lp_flags, mask_page_content, mask_page_hint_bits,
    mask_page_lsn_and_checksum, mask_unused_space, pd_lower, pd_special, set_u16,
};
use crate::consts::SIZE_OF_PAGE_HEADER_DATA;

/// `BTPageOpaqueData`: prev, next, level (u32 each), flags, cycle id (u16).
const BTPO_FLAGS: usize = 12;
const BTPO_CYCLEID: usize = 14;
const BTP_LEAF: u16 = 1 << 0;
const BTP_SPLIT_END: u16 = 1 << 5;
const BTP_HAS_GARBAGE: u16 = 1 << 6;

/// `HashPageOpaqueData`: prev, next, bucket (u32 each), flag, page id (u16).
const HASHO_FLAG: usize = 12;
const LH_UNUSED_PAGE: u16 = 0;
const LH_OVERFLOW_PAGE: u16 = 1 << 0;
const LH_BUCKET_PAGE: u16 = 1 << 1;
const LH_PAGE_TYPE: u16 = 0xF;
const LH_PAGE_HAS_DEAD_TUPLES: u16 = 1 << 7;

/// `GinPageOpaqueData`: rightlink (u32), maxoff, flags (u16).
const GIN_FLAGS: usize = 6;
const GIN_DELETED: u16 = 1 << 2;

/// `GISTPageOpaqueData`: nsn (8 bytes), rightlink (u32), flags, page id (u16).
const GIST_NSN_LEN: usize = 8;
const GIST_FLAGS: usize = 12;
const F_LEAF: u16 = 1 << 0;
const F_TUPLES_DELETED: u16 = 1 << 2;
const F_FOLLOW_RIGHT: u16 = 1 << 3;
const F_HAS_GARBAGE: u16 = 1 << 4;

/// `BrinSpecialSpace`: four u16, the flags third and the page type last.
const BRIN_FLAGS: usize = 4;
const BRIN_TYPE: usize = 6;
const BRIN_PAGETYPE_META: u16 = 0xF091;
const BRIN_PAGETYPE_REGULAR: u16 = 0xF093;
const BRIN_EVACUATE_PAGE: u16 = 1 << 0;

/// `btree_mask`.
pub(super) fn btree_mask(page: &mut [u8]) {
    mask_page_lsn_and_checksum(page);
    mask_page_hint_bits(page);
    mask_unused_space(page);
    let opaque = pd_special(page);
    if get_u16(page, opaque + BTPO_FLAGS).is_some_and(|f| f & BTP_LEAF != 0) {
        mask_lp_flags(page);
    }
    clear_u16_bits(page, opaque + BTPO_FLAGS, BTP_HAS_GARBAGE | BTP_SPLIT_END);
    set_u16(page, opaque + BTPO_CYCLEID, 0);
}

/// `hash_mask`.
pub(super) fn hash_mask(page: &mut [u8]) {
    mask_page_lsn_and_checksum(page);
    mask_page_hint_bits(page);
    mask_unused_space(page);
    let opaque = pd_special(page);
    if let Some(flag) = get_u16(page, opaque + HASHO_FLAG) {
        match flag & LH_PAGE_TYPE {
            LH_UNUSED_PAGE => mask_page_content(page),
            LH_BUCKET_PAGE | LH_OVERFLOW_PAGE => mask_lp_flags(page),
            _ => {}
        }
    }
    clear_u16_bits(page, opaque + HASHO_FLAG, LH_PAGE_HAS_DEAD_TUPLES);
}

/// `gin_mask`.
pub(super) fn gin_mask(page: &mut [u8]) {
    mask_page_lsn_and_checksum(page);
    let opaque = pd_special(page);
    mask_page_hint_bits(page);
    if get_u16(page, opaque + GIN_FLAGS).is_some_and(|f| f & GIN_DELETED != 0) {
        mask_page_content(page);
    } else if pd_lower(page) > SIZE_OF_PAGE_HEADER_DATA {
        mask_unused_space(page);
    }
}

/// `gist_mask`, and one bit more: `F_TUPLES_DELETED`, which PostgreSQL
/// never reads, is set by its redo of a microvacuum (`XLOG_GIST_DELETE`)
/// but not by the primary's `gistprunepage`, so the page a standby (or the
/// native redo, which follows PostgreSQL's) holds differs there from the
/// primary's. PostgreSQL's own check trips on it: crash recovery of such a
/// record with `wal_consistency_checking = 'gist'` ends in "inconsistent
/// page found" (seen on 18.x).
pub(super) fn gist_mask(page: &mut [u8]) {
    mask_page_lsn_and_checksum(page);
    mask_page_hint_bits(page);
    mask_unused_space(page);
    let opaque = pd_special(page);
    fill_marker(page, opaque..opaque + GIST_NSN_LEN);
    if let Some(flags) = get_u16(page, opaque + GIST_FLAGS) {
        set_u16(page, opaque + GIST_FLAGS, flags | F_FOLLOW_RIGHT);
        if flags & F_LEAF != 0 {
            mask_lp_flags(page);
        }
    }
    clear_u16_bits(page, opaque + GIST_FLAGS, F_HAS_GARBAGE | F_TUPLES_DELETED);
}

/// `spg_mask`.
pub(super) fn spg_mask(page: &mut [u8]) {
    mask_page_lsn_and_checksum(page);
    mask_page_hint_bits(page);
    if pd_lower(page) >= SIZE_OF_PAGE_HEADER_DATA {
        mask_unused_space(page);
    }
}

/// `brin_mask`.
pub(super) fn brin_mask(page: &mut [u8]) {
    mask_page_lsn_and_checksum(page);
    mask_page_hint_bits(page);
    let special = pd_special(page);
    let page_type = get_u16(page, special + BRIN_TYPE);
    if page_type == Some(BRIN_PAGETYPE_REGULAR)
        || (page_type == Some(BRIN_PAGETYPE_META) && pd_lower(page) > SIZE_OF_PAGE_HEADER_DATA)
    {
        mask_unused_space(page);
    }
    clear_u16_bits(page, special + BRIN_FLAGS, BRIN_EVACUATE_PAGE);
}
