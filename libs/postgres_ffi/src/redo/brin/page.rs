//! BRIN page layout (`brin_page.h`, `brin_pageops.c`, `brin_revmap.c`), the
//! same in PostgreSQL 15-18 for 8 KB pages:
//! - every page has the 8-byte special space `BrinSpecialSpace`: four u16,
//!   the flags third (`BRIN_EVACUATE_PAGE`), the page type last;
//! - the metapage (block 0) holds `BrinMetaPageData` (magic, version,
//!   pages per range, last revmap page: u32 each) at byte 24, `pd_lower`
//!   just past it;
//! - a revmap page holds `REVMAP_PAGE_MAXITEMS` (1360) TIDs of 6 bytes at
//!   byte 24, below its `pd_upper` (its `pd_lower` stays at 24);
//! - regular pages hold the summary tuples behind line pointers.
//!
//! Every access is bounds-checked: a page of another type than the record
//! expects is a [`Fault::Page`], never a panic.

use crate::page::PageHeader;
use crate::redo::{bufpage, Fault};

/// `sizeof(BrinSpecialSpace)`.
const SPECIAL_SIZE: usize = 8;
const FLAGS_AT: usize = 4;
const TYPE_AT: usize = 6;

pub(super) const BRIN_PAGETYPE_META: u16 = 0xF091;
pub(super) const BRIN_PAGETYPE_REVMAP: u16 = 0xF092;
pub(super) const BRIN_PAGETYPE_REGULAR: u16 = 0xF093;

/// `PageGetContents`: `MAXALIGN(SizeOfPageHeaderData)`.
const CONTENTS_OFF: usize = 24;
/// `sizeof(BrinMetaPageData)`.
const META_SIZE: usize = 16;
const BRIN_META_MAGIC: u32 = 0xA810_9CFA;
/// Byte offset of `BrinMetaPageData.lastRevmapPage`.
const LAST_REVMAP_PAGE_AT: usize = CONTENTS_OFF + 12;
/// `REVMAP_PAGE_MAXITEMS` for 8 KB pages.
pub(super) const REVMAP_PAGE_MAXITEMS: u32 = 1360;
/// `sizeof(ItemPointerData)`.
const TID_SIZE: usize = 6;

/// The page type in the special space, if the special space is BRIN's.
pub(super) fn page_type(page: &[u8]) -> Option<u16> {
    let s = bufpage::special(page).ok()?;
    (s.len() == SPECIAL_SIZE).then(|| u16::from_le_bytes([s[TYPE_AT], s[TYPE_AT + 1]]))
}

/// The page must be a BRIN page of type `want`.
pub(super) fn expect_type(page: &[u8], want: u16) -> Result<(), Fault> {
    match page_type(page) {
        Some(t) if t == want => Ok(()),
        other => Err(Fault::page(format!("BRIN page of type {other:x?}, expected {want:#x}"))),
    }
}

/// `brin_page_init`: an empty page of type `page_type`, flags clear.
pub(super) fn init_page(page: &mut [u8], page_type: u16) {
    bufpage::page_init(page, SPECIAL_SIZE);
    let at = page.len() - SPECIAL_SIZE;
    page[at + TYPE_AT..at + TYPE_AT + 2].copy_from_slice(&page_type.to_le_bytes());
    debug_assert_eq!(page[at + FLAGS_AT..at + FLAGS_AT + 2], [0, 0]);
}

fn set_lower(page: &mut [u8], lower: usize) {
    let mut h = PageHeader::decode(page);
    h.lower = lower as u16;
    h.encode(page);
}

/// `brin_metapage_init`: a metapage for `pages_per_range`, format `version`,
/// with no revmap page yet (`lastRevmapPage` 0).
pub(super) fn init_meta(page: &mut [u8], pages_per_range: u32, version: u16) {
    init_page(page, BRIN_PAGETYPE_META);
    let fields = [BRIN_META_MAGIC, u32::from(version), pages_per_range, 0];
    for (i, v) in fields.iter().enumerate() {
        let at = CONTENTS_OFF + 4 * i;
        page[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    set_lower(page, CONTENTS_OFF + META_SIZE);
}

/// REVMAP_EXTEND on the metapage: `lastRevmapPage` becomes `target`, and
/// `pd_lower` is set past the metadata (older versions left it at 24).
pub(super) fn set_last_revmap_page(page: &mut [u8], target: u32) -> Result<(), Fault> {
    expect_type(page, BRIN_PAGETYPE_META)?;
    page[LAST_REVMAP_PAGE_AT..LAST_REVMAP_PAGE_AT + 4].copy_from_slice(&target.to_le_bytes());
    set_lower(page, CONTENTS_OFF + META_SIZE);
    Ok(())
}

/// `brinSetHeapBlockItemptr`: the revmap entry of the range holding heap
/// block `heap_blk` becomes `(blkno, off)`, or invalid when `off` is 0.
pub(super) fn set_revmap_entry(
    page: &mut [u8],
    pages_per_range: u32,
    heap_blk: u32,
    blkno: u32,
    off: u16,
) -> Result<(), Fault> {
    expect_type(page, BRIN_PAGETYPE_REVMAP)?;
    if pages_per_range == 0 {
        return Err(Fault::malformed("BRIN record with 0 pages per range".into()));
    }
    let index = (heap_blk / pages_per_range) % REVMAP_PAGE_MAXITEMS;
    let at = CONTENTS_OFF + index as usize * TID_SIZE;
    let (blkno, off) = if off == 0 { (u32::MAX, 0) } else { (blkno, off) };
    let Some(tid) = page.get_mut(at..at + TID_SIZE) else {
        return Err(Fault::page(format!("revmap entry {index} lies outside the page")));
    };
    tid[0..2].copy_from_slice(&((blkno >> 16) as u16).to_le_bytes());
    tid[2..4].copy_from_slice(&(blkno as u16).to_le_bytes());
    tid[4..6].copy_from_slice(&off.to_le_bytes());
    Ok(())
}

/// Whether the bytes below `pd_lower` are line pointers: not on the
/// metapage (its metadata) nor on a revmap page.
pub(super) fn has_line_pointers(page: &[u8]) -> bool {
    !matches!(page_type(page), Some(BRIN_PAGETYPE_META | BRIN_PAGETYPE_REVMAP))
}
