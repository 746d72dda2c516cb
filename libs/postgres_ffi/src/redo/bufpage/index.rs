//! Single-item changes on index pages: `PageIndexTupleDelete`,
//! `PageIndexTupleDeleteNoCompact` and `PageIndexTupleOverwrite`. The same
//! in PostgreSQL 15-18.
//!
//! Invariants: the tuple space stays packed (the data between `pd_upper`
//! and the changed item moves by the item's aligned size change, and the
//! line pointers into it follow, their 15-bit `lp_off` wrapping as C's
//! bitfield does); the target item must have storage and lie maxaligned
//! inside `[pd_upper, pd_special)`, or nothing changes.

use super::{
    check_pointers, header, max_offset, maxalign, read_lp, write_lp, Fault, ItemId, PageHeader,
    SIZE_OF_ITEM_ID, SIZE_OF_PAGE_HEADER_DATA,
};

/// The target line pointer of an index tuple change, checked as
/// PostgreSQL checks it ("invalid index offnum", "corrupted line pointer");
/// PostgreSQL only asserts that it has storage (without, its data moves
/// would cut through a neighbour), we check it.
fn target(page: &[u8], h: &PageHeader, off: u16) -> Result<ItemId, Fault> {
    let nline = max_offset(page);
    if off == 0 || off > nline {
        return Err(Fault::page(format!("invalid index offnum: {off} (of {nline})")));
    }
    let id = read_lp(page, off)?;
    if !id.has_storage() {
        return Err(Fault::page(format!("index line pointer {off} has no storage: {id:?}")));
    }
    let (start, end) = (id.off as usize, id.off as usize + id.len as usize);
    if start < h.upper as usize || end > h.special as usize || maxalign(start) != start {
        return Err(Fault::page(format!("corrupted line pointer {off}: {id:?}")));
    }
    Ok(id)
}

/// Move the tuple data in `[upper, item_off)` up by `delta` bytes (down
/// when negative), closing or opening a gap at the item.
fn shift_data(page: &mut [u8], upper: usize, item_off: usize, delta: isize) -> Result<(), Fault> {
    let to = upper.checked_add_signed(delta).filter(|to| to + (item_off - upper) <= page.len());
    match to {
        Some(to) => {
            page.copy_within(upper..item_off, to);
            Ok(())
        }
        None => Err(Fault::page(format!("cannot move tuple data {upper}..{item_off}"))),
    }
}

/// Add `delta` to `lp_off` of line pointers `1..=nline` whose `lp_off` is
/// at most `item_off`; `storage_only` skips those without storage.
fn shift_pointers(
    page: &mut [u8],
    nline: u16,
    item_off: u16,
    delta: isize,
    storage_only: bool,
) -> Result<(), Fault> {
    for off in 1..=nline {
        let id = read_lp(page, off)?;
        if (storage_only && !id.has_storage()) || id.off > item_off {
            continue;
        }
        let moved = (id.off as isize + delta) as u16 & 0x7FFF;
        write_lp(page, off, ItemId { off: moved, ..id })?;
    }
    Ok(())
}

/// `PageIndexTupleDelete`: remove item `off`, closing up both its line
/// pointer (the later ones move down one slot; the last slot keeps its
/// stale bytes) and its tuple space.
pub fn index_tuple_delete(page: &mut [u8], off: u16) -> Result<(), Fault> {
    let mut h = header(page)?;
    check_pointers(&h, true)?;
    let id = target(page, &h, off)?;
    let size = maxalign(id.len as usize);
    let from = super::lp_pos(off) + SIZE_OF_ITEM_ID;
    let lower = h.lower as usize;
    if from < lower {
        page.copy_within(from..lower, from - SIZE_OF_ITEM_ID);
    }
    let upper = h.upper as usize;
    if id.off as usize > upper {
        shift_data(page, upper, id.off as usize, size as isize)?;
    }
    h.upper += size as u16;
    h.lower -= SIZE_OF_ITEM_ID as u16;
    h.encode(page);
    if h.lower as usize > SIZE_OF_PAGE_HEADER_DATA {
        shift_pointers(page, max_offset(page), id.off, size as isize, false)?;
    }
    Ok(())
}

/// `PageIndexTupleDeleteNoCompact`: remove item `off`'s data, leaving its
/// line pointer unused (or dropping it if it is the last one).
pub fn index_tuple_delete_no_compact(page: &mut [u8], off: u16) -> Result<(), Fault> {
    let mut h = header(page)?;
    check_pointers(&h, true)?;
    let id = target(page, &h, off)?;
    let size = maxalign(id.len as usize);
    let mut nline = max_offset(page);
    if off < nline {
        write_lp(page, off, ItemId::UNUSED)?;
    } else {
        h.lower -= SIZE_OF_ITEM_ID as u16;
        nline -= 1;
    }
    let upper = h.upper as usize;
    if id.off as usize > upper {
        shift_data(page, upper, id.off as usize, size as isize)?;
    }
    h.upper += size as u16;
    h.encode(page);
    if h.lower as usize > SIZE_OF_PAGE_HEADER_DATA {
        shift_pointers(page, nline, id.off, size as isize, true)?;
    }
    Ok(())
}

/// `PageIndexTupleOverwrite`: replace item `off` by `new_item` in place,
/// moving the data before it by the change in aligned size; the line
/// pointer keeps its flags. No room is a fault.
pub fn index_tuple_overwrite(page: &mut [u8], off: u16, new_item: &[u8]) -> Result<(), Fault> {
    let mut h = header(page)?;
    check_pointers(&h, true)?;
    let id = target(page, &h, off)?;
    let old_size = maxalign(id.len as usize);
    let new_size = maxalign(new_item.len());
    let free = (h.upper - h.lower) as usize;
    if new_size > old_size + free {
        return Err(Fault::page(format!(
            "no room to overwrite item {off} ({} bytes) with {} bytes; {free} free",
            id.len,
            new_item.len()
        )));
    }
    let diff = old_size as isize - new_size as isize;
    if diff != 0 {
        shift_data(page, h.upper as usize, id.off as usize, diff)?;
        h.upper = (h.upper as isize + diff) as u16;
        h.encode(page);
        shift_pointers(page, max_offset(page), id.off, diff, true)?;
    }
    let start = (id.off as isize + diff) as usize;
    write_lp(page, off, ItemId { off: start as u16, len: new_item.len() as u16, ..id })?;
    match page.get_mut(start..start + new_item.len()) {
        Some(dst) => dst.copy_from_slice(new_item),
        None => return Err(Fault::page(format!("item {off} would end past the page"))),
    }
    Ok(())
}
