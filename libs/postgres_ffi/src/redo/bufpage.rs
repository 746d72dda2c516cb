//! Page primitives of PostgreSQL's `bufpage.c`, `bufpage.h` and `itemid.h`,
//! on a `BLCKSZ` byte slice, with 1-based offsets like `OffsetNumber`.
//!
//! Per major: these routines and layouts are the same in 15, 16, 17 and 18
//! (the 15 → 18 diff of `bufpage.c` is constness and comments only, and
//! heap and btree redo built on them match the 16 and 17 fixtures' images
//! too). A line pointer (`ItemIdData`) is one little-endian `u32`:
//! `lp_off` in bits 0-14, `lp_flags` in bits 15-16, `lp_len` in bits 17-31.
//!
//! Invariants:
//! - nothing here panics or touches a byte outside the slice: where
//!   PostgreSQL would `elog(ERROR/PANIC)`, or refuse (`PageAddItem`
//!   returning `InvalidOffsetNumber`, `PageIndexTupleOverwrite` returning
//!   false, both of which redo turns into a PANIC), we return
//!   [`Fault::Page`] saying what was wrong; the page may then be half
//!   changed and must be discarded;
//! - where PostgreSQL succeeds the bytes written are PostgreSQL's, including
//!   the bytes it leaves stale (a line pointer slot dropped off the end of
//!   the array, the hole left by compaction) and the hint bit
//!   `PD_HAS_FREE_LINES`;
//! - stricter than PostgreSQL only where it merely asserts or would read
//!   past the page: an index tuple change on a line pointer without
//!   storage, an item ending past the page in compaction, and
//!   [`item`]/[`item_mut`] outside `[pd_upper, pd_special)` are faults;
//! - [`check_invariants`] is what every page with line pointers must
//!   satisfy after redo; [`check_header`] what any page must.

mod compact;
mod index;
#[cfg(test)]
mod tests;

pub use compact::{index_multi_delete, repair_fragmentation, truncate_line_pointer_array};
pub use index::{index_tuple_delete, index_tuple_delete_no_compact, index_tuple_overwrite};

use super::Fault;
use crate::consts::{BLCKSZ, SIZE_OF_PAGE_HEADER_DATA};
use crate::page::{PageHeader, PD_FLAGS_OFFSET};

/// `MAXIMUM_ALIGNOF` of a 64-bit build.
pub const MAXIMUM_ALIGNOF: usize = 8;

/// `MAXALIGN`: `len` rounded up to a multiple of 8.
pub const fn maxalign(len: usize) -> usize {
    len.saturating_add(MAXIMUM_ALIGNOF - 1) & !(MAXIMUM_ALIGNOF - 1)
}

/// `pd_flags` bits.
pub const PD_HAS_FREE_LINES: u16 = 0x1;
pub const PD_PAGE_FULL: u16 = 0x2;
pub const PD_ALL_VISIBLE: u16 = 0x4;

/// `lp_flags` values.
pub const LP_UNUSED: u8 = 0;
pub const LP_NORMAL: u8 = 1;
pub const LP_REDIRECT: u8 = 2;
pub const LP_DEAD: u8 = 3;

/// `sizeof(ItemIdData)`.
pub const SIZE_OF_ITEM_ID: usize = 4;
/// `PG_PAGE_LAYOUT_VERSION`.
pub const PG_PAGE_LAYOUT_VERSION: u16 = 4;
/// `MaxHeapTuplesPerPage`: (8192 - 24) / (MAXALIGN(23) + 4).
pub const MAX_HEAP_TUPLES_PER_PAGE: u16 = 291;
/// `MaxIndexTuplesPerPage`: (8192 - 24) / (MAXALIGN(8 + 1) + 4).
pub const MAX_INDEX_TUPLES_PER_PAGE: u16 = 408;

/// Largest value of the 15-bit `lp_off` and `lp_len` fields.
const LP_FIELD_MAX: u16 = 0x7FFF;

/// One line pointer (`ItemIdData`): `off` and `len` are 15 bits, `flags` 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ItemId {
    pub off: u16,
    pub flags: u8,
    pub len: u16,
}

impl ItemId {
    /// `ItemIdSetUnused`.
    pub const UNUSED: ItemId = ItemId { off: 0, flags: LP_UNUSED, len: 0 };

    /// `ItemIdSetNormal`.
    pub fn normal(off: u16, len: u16) -> ItemId {
        ItemId { off, flags: LP_NORMAL, len }
    }

    /// The line pointer stored as `raw`.
    pub fn from_raw(raw: u32) -> ItemId {
        ItemId {
            off: (raw & 0x7FFF) as u16,
            flags: ((raw >> 15) & 0x3) as u8,
            len: (raw >> 17) as u16,
        }
    }

    /// The stored form (fields beyond their width are cut, as C's bitfields do).
    pub fn to_raw(self) -> u32 {
        (self.off as u32 & 0x7FFF) | ((self.flags as u32 & 0x3) << 15) | ((self.len as u32) << 17)
    }

    /// `ItemIdIsUsed`: anything but `LP_UNUSED`.
    pub fn is_used(self) -> bool {
        self.flags != LP_UNUSED
    }

    /// `ItemIdHasStorage`: `lp_len != 0`, whatever the flags.
    pub fn has_storage(self) -> bool {
        self.len != 0
    }
}

/// Byte position of line pointer `off` (1-based).
fn lp_pos(off: u16) -> usize {
    SIZE_OF_PAGE_HEADER_DATA + (off as usize).saturating_sub(1) * SIZE_OF_ITEM_ID
}

/// The line pointer at `off`, with no check against `pd_lower`.
#[inline]
fn read_lp(page: &[u8], off: u16) -> Result<ItemId, Fault> {
    let at = lp_pos(off);
    match page.get(at..at + SIZE_OF_ITEM_ID) {
        Some(b) => Ok(ItemId::from_raw(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        None => Err(Fault::page(format!("line pointer {off} lies outside the page"))),
    }
}

/// Store the line pointer at `off`, with no check against `pd_lower`.
#[inline]
fn write_lp(page: &mut [u8], off: u16, id: ItemId) -> Result<(), Fault> {
    let at = lp_pos(off);
    match page.get_mut(at..at + SIZE_OF_ITEM_ID) {
        Some(b) => {
            b.copy_from_slice(&id.to_raw().to_le_bytes());
            Ok(())
        }
        None => Err(Fault::page(format!("line pointer {off} lies outside the page"))),
    }
}

/// The header of a page that is `BLCKSZ` long.
fn header(page: &[u8]) -> Result<PageHeader, Fault> {
    if page.len() != BLCKSZ {
        return Err(Fault::page(format!("a {}-byte page, not {BLCKSZ}", page.len())));
    }
    Ok(PageHeader::decode(page))
}

/// The bounds check `bufpage.c` makes before changing a page ("corrupted
/// page pointers"); `special_aligned` adds `pd_special == MAXALIGN(pd_special)`.
fn check_pointers(h: &PageHeader, special_aligned: bool) -> Result<(), Fault> {
    let b = Bounds { flags: h.flags, lower: h.lower, upper: h.upper, special: h.special };
    b.check(special_aligned)
}

/// The header fields a page change reads and writes (`pd_flags`,
/// `pd_lower`, `pd_upper`, `pd_special`), read and written in place, not
/// the whole header: a read applies hundreds of records to one page.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    flags: u16,
    lower: u16,
    upper: u16,
    special: u16,
}

impl Bounds {
    /// The fields of a page that is `BLCKSZ` long.
    #[inline]
    fn read(page: &[u8]) -> Result<Bounds, Fault> {
        if page.len() != BLCKSZ {
            return Err(Fault::page(format!("a {}-byte page, not {BLCKSZ}", page.len())));
        }
        let at = |o: usize| u16::from_le_bytes([page[o], page[o + 1]]);
        Ok(Bounds { flags: at(PD_FLAGS_OFFSET), lower: at(12), upper: at(14), special: at(16) })
    }

    /// Whether the pointers are in order (and `pd_special` aligned if asked).
    #[inline]
    fn hold(self, special_aligned: bool) -> bool {
        let ordered = SIZE_OF_PAGE_HEADER_DATA <= self.lower as usize
            && self.lower <= self.upper
            && self.upper <= self.special
            && self.special as usize <= BLCKSZ;
        let aligned = !special_aligned || maxalign(self.special as usize) == self.special as usize;
        ordered && aligned
    }

    /// Store the four fields, in one 8-byte store: the next [`Bounds::read`]
    /// (an 8-byte load) then takes them from the store buffer, where four
    /// 2-byte stores would stall it.
    #[inline]
    fn write(self, page: &mut [u8]) {
        let v = u64::from(self.flags)
            | u64::from(self.lower) << 16
            | u64::from(self.upper) << 32
            | u64::from(self.special) << 48;
        page[10..18].copy_from_slice(&v.to_le_bytes());
    }

    /// [`check_pointers`].
    #[inline]
    fn check(self, special_aligned: bool) -> Result<(), Fault> {
        if self.hold(special_aligned) {
            return Ok(());
        }
        Err(Fault::page(format!(
            "corrupted page pointers: lower = {}, upper = {}, special = {}",
            self.lower, self.upper, self.special
        )))
    }
}

/// `PageInit`: zero the page, empty line-pointer array, `special_size`
/// (rounded up to 8) bytes of special space at the end. A special size that
/// leaves no room makes `pd_upper` < `pd_lower`, which [`check_invariants`]
/// refuses.
pub fn page_init(page: &mut [u8], special_size: usize) {
    page.fill(0);
    let size = page.len().min(BLCKSZ);
    let special = size.saturating_sub(maxalign(special_size)) as u16;
    let h = PageHeader {
        lower: SIZE_OF_PAGE_HEADER_DATA as u16,
        upper: special,
        special,
        pagesize_version: size as u16 | PG_PAGE_LAYOUT_VERSION,
        ..PageHeader::default()
    };
    if page.len() >= SIZE_OF_PAGE_HEADER_DATA {
        h.encode(page);
    }
}

/// `PageGetMaxOffsetNumber`: the number of line pointers.
pub fn max_offset(page: &[u8]) -> u16 {
    if page.len() < SIZE_OF_PAGE_HEADER_DATA {
        return 0;
    }
    let lower = u16::from_le_bytes([page[12], page[13]]) as usize; // pd_lower
    (lower.saturating_sub(SIZE_OF_PAGE_HEADER_DATA) / SIZE_OF_ITEM_ID) as u16
}

fn check_offset(page: &[u8], off: u16) -> Result<(), Fault> {
    let max = max_offset(page);
    if off == 0 || off > max {
        return Err(Fault::page(format!("offset {off} is not a line pointer (1..={max})")));
    }
    Ok(())
}

/// `PageGetItemId`: line pointer `off`, which must be in `1..=max_offset`.
pub fn item_id(page: &[u8], off: u16) -> Result<ItemId, Fault> {
    check_offset(page, off)?;
    read_lp(page, off)
}

/// Replace line pointer `off` (in `1..=max_offset`); `off` and `len` must
/// fit their 15 bits and `flags` its 2.
pub fn set_item_id(page: &mut [u8], off: u16, id: ItemId) -> Result<(), Fault> {
    check_offset(page, off)?;
    if id.off > LP_FIELD_MAX || id.len > LP_FIELD_MAX || id.flags > LP_DEAD {
        return Err(Fault::page(format!("line pointer {id:?} does not fit ItemIdData")));
    }
    write_lp(page, off, id)
}

/// Where the item of line pointer `off` lies: it must have storage and be
/// inside the tuple space `[pd_upper, pd_special)`.
fn item_range(page: &[u8], off: u16) -> Result<std::ops::Range<usize>, Fault> {
    let h = header(page)?;
    let id = item_id(page, off)?;
    if !id.has_storage() {
        return Err(Fault::page(format!("line pointer {off} has no storage ({id:?})")));
    }
    let (start, end) = (id.off as usize, id.off as usize + id.len as usize);
    if start < h.upper as usize || end > h.special as usize || end > page.len() {
        return Err(Fault::page(format!(
            "item {off} ({id:?}) lies outside the tuple space {}..{}",
            h.upper, h.special
        )));
    }
    Ok(start..end)
}

/// `PageGetItem`: the `lp_len` bytes of item `off`.
pub fn item(page: &[u8], off: u16) -> Result<&[u8], Fault> {
    let range = item_range(page, off)?;
    Ok(&page[range])
}

/// `PageGetItem`, to write into.
pub fn item_mut(page: &mut [u8], off: u16) -> Result<&mut [u8], Fault> {
    let range = item_range(page, off)?;
    Ok(&mut page[range])
}

/// `PageAddItemExtended`: store `item` and return its offset. `off` 0
/// (`InvalidOffsetNumber`) takes the first unused line pointer if the page
/// says it has one (`PD_HAS_FREE_LINES`, cleared when the hint was wrong),
/// else appends. A given `off` with `overwrite` (`PAI_OVERWRITE`) must be
/// unused or one past the end; without it, later line pointers shift up.
/// `is_heap` (`PAI_IS_HEAP`) caps offsets at `MaxHeapTuplesPerPage`.
pub fn add_item(
    page: &mut [u8],
    item: &[u8],
    off: u16,
    overwrite: bool,
    is_heap: bool,
) -> Result<u16, Fault> {
    add_item_with(page, item.len(), off, overwrite, is_heap, |dst| dst.copy_from_slice(item))
}

/// [`add_item`] of a `len`-byte item that `fill` writes into its place on
/// the page (every byte of it), for a caller that builds the item: no
/// buffer, no second copy.
#[inline]
pub fn add_item_with(
    page: &mut [u8],
    len: usize,
    off: u16,
    overwrite: bool,
    is_heap: bool,
    fill: impl FnOnce(&mut [u8]),
) -> Result<u16, Fault> {
    let h = Bounds::read(page)?;
    h.check(false)?;
    // `check`: SizeOfPageHeaderData <= pd_lower.
    let limit = ((h.lower as usize - SIZE_OF_PAGE_HEADER_DATA) / SIZE_OF_ITEM_ID) as u16 + 1;
    let mut shuffle = false;
    let mut flags = h.flags;
    let off = if off != 0 {
        if overwrite && off < limit {
            let id = read_lp(page, off)?;
            if id.is_used() || id.has_storage() {
                return Err(Fault::page(format!("will not overwrite used line pointer {off}")));
            }
        }
        shuffle = !overwrite && off < limit;
        off
    } else {
        let found;
        (found, flags) = free_line_pointer(page, h.flags, limit)?;
        found
    };
    if off > limit {
        return Err(Fault::page(format!("item offset {off} is past the first free one {limit}")));
    }
    if is_heap && off > MAX_HEAP_TUPLES_PER_PAGE {
        return Err(Fault::page(format!("heap item offset {off} > MaxHeapTuplesPerPage")));
    }
    let lower = h.lower as usize + if off == limit || shuffle { SIZE_OF_ITEM_ID } else { 0 };
    let aligned = maxalign(len);
    if aligned > h.upper as usize || lower > h.upper as usize - aligned {
        return Err(Fault::page(format!(
            "no room for a {len}-byte item: lower = {}, upper = {}",
            h.lower, h.upper
        )));
    }
    let upper = h.upper as usize - aligned;
    if shuffle {
        page.copy_within(lp_pos(off)..lp_pos(limit), lp_pos(off) + SIZE_OF_ITEM_ID);
    }
    // What this writes keeps the invariants: the item lies in
    // [new pd_upper, pd_special), its pointer below the new pd_lower.
    let at = lp_pos(off);
    debug_assert!(upper + len <= h.special as usize && at < lower);
    let raw = ItemId::normal(upper as u16, len as u16).to_raw();
    page[at..at + SIZE_OF_ITEM_ID].copy_from_slice(&raw.to_le_bytes()); // at + 4 <= lower <= upper
    fill(&mut page[upper..upper + len]);
    Bounds { flags, lower: lower as u16, upper: upper as u16, special: h.special }.write(page);
    Ok(off)
}

/// The offset `PageAddItemExtended` picks when given none, and the page
/// flags after looking (the hint is cleared when it was wrong).
fn free_line_pointer(page: &[u8], flags: u16, limit: u16) -> Result<(u16, u16), Fault> {
    if flags & PD_HAS_FREE_LINES == 0 {
        return Ok((limit, flags));
    }
    for off in 1..limit {
        let id = read_lp(page, off)?;
        if !id.is_used() && !id.has_storage() {
            return Ok((off, flags));
        }
    }
    Ok((limit, flags & !PD_HAS_FREE_LINES))
}

/// `PageGetSpecialPointer`: the special space, `pd_special..BLCKSZ`.
pub fn special(page: &[u8]) -> Result<&[u8], Fault> {
    let start = special_start(page)?;
    Ok(&page[start..])
}

/// The special space, to write into.
pub fn special_mut(page: &mut [u8]) -> Result<&mut [u8], Fault> {
    let start = special_start(page)?;
    Ok(&mut page[start..])
}

fn special_start(page: &[u8]) -> Result<usize, Fault> {
    let special = header(page)?.special as usize;
    if !(SIZE_OF_PAGE_HEADER_DATA..=BLCKSZ).contains(&special) {
        return Err(Fault::page(format!("pd_special {special} is outside the page")));
    }
    Ok(special)
}

/// Whether a page is new: all zeros, except maybe `pd_lsn` (which
/// `apply` sets after redo).
fn is_new(page: &[u8]) -> bool {
    page.get(8..).is_some_and(|rest| rest.iter().all(|&b| b == 0))
}

/// The header part of [`check_invariants`]: a new page (all zeros but
/// `pd_lsn`), or `SizeOfPageHeaderData <= pd_lower <= pd_upper <=
/// pd_special <= BLCKSZ` with `pd_special` maxaligned. For pages whose
/// bytes below `pd_lower` are not line pointers (metapages of GIN, hash,
/// SP-GiST, BRIN and btree; bloom's pages, written through Generic WAL),
/// this is all that can be checked.
#[inline]
pub fn check_header(page: &[u8]) -> Result<(), Fault> {
    let bounds = Bounds::read(page)?;
    if bounds.hold(true) {
        return Ok(());
    }
    check_header_cold(page, bounds)
}

/// [`check_header`] of a page whose pointers are out of order: new, or a fault.
#[cold]
#[inline(never)]
fn check_header_cold(page: &[u8], bounds: Bounds) -> Result<(), Fault> {
    if is_new(page) {
        return Ok(());
    }
    bounds.check(true)
}

/// What every page with line pointers keeps: [`check_header`], and every
/// line pointer with storage (`LP_NORMAL` or `LP_DEAD` with `lp_len > 0`)
/// inside `[pd_upper, pd_special)`.
pub fn check_invariants(page: &[u8]) -> Result<(), Fault> {
    check_header(page)?;
    if is_new(page) {
        return Ok(());
    }
    let h = PageHeader::decode(page);
    // Redo runs this after every record, so it must not cost more than the
    // record on a full page: one branch-free pass over the raw array (the
    // compiler vectorizes it), and the offending pointer is looked up only
    // when there is one. `check_header` bounds `pd_lower`.
    let (upper, special) = (u32::from(h.upper), u32::from(h.special));
    let outside = |raw: u32| {
        let id = ItemId::from_raw(raw);
        let (off, len) = (u32::from(id.off), u32::from(id.len));
        // LP_NORMAL (1) and LP_DEAD (3) are the flags with bit 0 set.
        const _: () = assert!(LP_NORMAL & LP_DEAD & 1 == 1 && (LP_UNUSED | LP_REDIRECT) & 1 == 0);
        let stored = (id.flags & 1 == 1) & (len != 0);
        stored & ((off < upper) | (off + len > special))
    };
    let raw = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let pointers = &page[SIZE_OF_PAGE_HEADER_DATA..h.lower as usize];
    let any = pointers.chunks_exact(SIZE_OF_ITEM_ID).fold(false, |acc, b| acc | outside(raw(b)));
    if !any {
        return Ok(());
    }
    let i = pointers.chunks_exact(SIZE_OF_ITEM_ID).position(|b| outside(raw(b))).unwrap_or(0);
    let id = ItemId::from_raw(raw(&pointers[i * SIZE_OF_ITEM_ID..]));
    Err(Fault::page(format!(
        "line pointer {} ({id:?}) lies outside the tuple space {}..{}",
        i + 1,
        h.upper,
        h.special
    )))
}
