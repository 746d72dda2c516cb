//! Compaction of the tuple space (`compactify_tuples`) and its users:
//! `PageRepairFragmentation` (heap pages after pruning),
//! `PageIndexMultiDelete` and `PageTruncateLinePointerArray`. The same in
//! PostgreSQL 15-18.
//!
//! Invariants: the kept items end up packed at the end of the tuple space
//! in the order their line pointers come (the first at the highest
//! address), each taking `MAXALIGN(lp_len)` bytes copied from where it was;
//! bytes below the new `pd_upper` keep their stale contents, as in
//! PostgreSQL. Every item is checked to lie inside the page before anything
//! moves, so a corrupted line pointer is a fault, never a stray copy.

use super::{
    check_pointers, header, index_tuple_delete, max_offset, maxalign, read_lp, write_lp, Fault,
    ItemId, BLCKSZ, PD_HAS_FREE_LINES, SIZE_OF_ITEM_ID,
};

/// One item to keep (`itemIdCompactData`).
#[derive(Clone, Copy, Debug)]
struct Kept {
    /// The line pointer (1-based) that will point at it after compaction.
    lp: u16,
    /// Where its bytes are now.
    off: usize,
    /// `MAXALIGN(lp_len)`.
    aligned_len: usize,
}

impl Kept {
    fn end(&self) -> usize {
        self.off + self.aligned_len
    }
}

/// Whether `items` come in strictly descending `off` order (the order
/// items are first added in): then PostgreSQL moves them in place.
fn presorted(items: &[Kept], special: usize) -> bool {
    let mut last = special;
    let mut sorted = true;
    for it in items {
        if last > it.off {
            last = it.off;
        } else {
            sorted = false;
        }
    }
    sorted
}

/// `compactify_tuples`: pack `items` (non-empty, checked to lie inside the
/// page, total aligned length at most `special - pd_lower`) down from
/// `special`, updating their line pointers' `lp_off`; returns the new
/// `pd_upper`. Items already in place at the end are not moved. When the
/// items are not presorted their bytes are read from a copy of the page
/// (PostgreSQL's scratch buffer), so moving one never clobbers another.
fn compactify(page: &mut [u8], items: &[Kept], special: usize) -> Result<usize, Fault> {
    let scratch = if presorted(items, special) { None } else { Some(page.to_vec()) };
    let mut upper = special;
    let mut i = 0;
    while i < items.len() && upper == items[i].end() {
        upper -= items[i].aligned_len;
        i += 1;
    }
    let Some(first) = items.get(i) else {
        return Ok(upper);
    };
    let (mut head, mut tail) = (first.end(), first.end());
    for it in &items[i..] {
        if head != it.end() {
            move_bytes(page, scratch.as_deref(), head..tail, upper)?;
            tail = it.end();
        }
        upper = upper.checked_sub(it.aligned_len).ok_or_else(overflow)?;
        head = it.off;
        let id = read_lp(page, it.lp)?;
        write_lp(page, it.lp, ItemId { off: upper as u16, ..id })?;
    }
    move_bytes(page, scratch.as_deref(), head..tail, upper)?;
    Ok(upper)
}

fn overflow() -> Fault {
    Fault::page("items do not fit the tuple space".to_string())
}

/// Copy `from` (of `scratch` if given, else of `page` itself) to `to`.
fn move_bytes(
    page: &mut [u8],
    scratch: Option<&[u8]>,
    from: std::ops::Range<usize>,
    to: usize,
) -> Result<(), Fault> {
    let len = from.end.saturating_sub(from.start);
    if from.end > page.len() || to + len > page.len() {
        return Err(overflow());
    }
    match scratch {
        Some(src) => page[to..to + len].copy_from_slice(&src[from]),
        None => page.copy_within(from, to),
    }
    Ok(())
}

/// A kept item, checked to lie inside the page.
fn kept(lp: u16, id: ItemId) -> Result<Kept, Fault> {
    let it = Kept { lp, off: id.off as usize, aligned_len: maxalign(id.len as usize) };
    if it.end() > BLCKSZ {
        return Err(Fault::page(format!("corrupted line pointer: {id:?} ends past the page")));
    }
    Ok(it)
}

/// `PageRepairFragmentation`: on a heap page after pruning, pack the items
/// with storage to the end of the page, zero every unused line pointer,
/// drop unused ones from the end of the array, and set
/// `PD_HAS_FREE_LINES` exactly when unused ones remain.
pub fn repair_fragmentation(page: &mut [u8]) -> Result<(), Fault> {
    let mut h = header(page)?;
    check_pointers(&h, true)?;
    let (upper, special) = (h.upper as usize, h.special as usize);
    let nline = max_offset(page);
    let mut items = Vec::new();
    let (mut nunused, mut final_used) = (0u16, 0u16);
    for off in 1..=nline {
        let id = read_lp(page, off)?;
        if !id.is_used() {
            write_lp(page, off, ItemId::UNUSED)?;
            nunused += 1;
            continue;
        }
        if id.has_storage() {
            if (id.off as usize) < upper || id.off as usize >= special {
                return Err(Fault::page(format!("corrupted line pointer {off}: {id:?}")));
            }
            items.push(kept(off, id)?);
        }
        final_used = off;
    }
    if items.is_empty() {
        h.upper = h.special;
    } else {
        check_total_len(&items, h.lower as usize, special)?;
        h.upper = compactify(page, &items, special)? as u16;
    }
    if final_used != nline {
        let unused_end = nline - final_used;
        nunused -= unused_end;
        h.lower -= unused_end * SIZE_OF_ITEM_ID as u16;
    }
    set_free_lines_hint(&mut h.flags, nunused > 0);
    h.encode(page);
    Ok(())
}

fn set_free_lines_hint(flags: &mut u16, on: bool) {
    if on {
        *flags |= PD_HAS_FREE_LINES;
    } else {
        *flags &= !PD_HAS_FREE_LINES;
    }
}

/// "corrupted item lengths": the kept items cannot fit `[lower, special)`.
fn check_total_len(items: &[Kept], lower: usize, special: usize) -> Result<(), Fault> {
    let total: usize = items.iter().map(|it| it.aligned_len).sum();
    if total > special - lower {
        return Err(Fault::page(format!(
            "corrupted item lengths: total {total}, available space {}",
            special - lower
        )));
    }
    Ok(())
}

/// `PageTruncateLinePointerArray`: drop the unused line pointers at the end
/// of the array, keeping at least one line pointer; set
/// `PD_HAS_FREE_LINES` exactly when an unused one remains. The dropped
/// slots keep their bytes. A page that is not `BLCKSZ` long is left alone.
pub fn truncate_line_pointer_array(page: &mut [u8]) {
    let Ok(mut h) = header(page) else {
        return;
    };
    let fits = ((BLCKSZ - super::SIZE_OF_PAGE_HEADER_DATA) / SIZE_OF_ITEM_ID) as u16;
    let nline = max_offset(page).min(fits);
    let (mut counting, mut hint, mut unused_end) = (true, false, 0u16);
    for off in (1..=nline).rev() {
        let used = read_lp(page, off).map(|id| id.is_used()).unwrap_or(true);
        if counting && off > 1 {
            if used {
                counting = false;
            } else {
                unused_end += 1;
            }
        } else if !used {
            hint = true;
            break;
        }
    }
    h.lower -= unused_end * SIZE_OF_ITEM_ID as u16;
    set_free_lines_hint(&mut h.flags, hint);
    h.encode(page);
}

/// `PageIndexMultiDelete`: remove the items at `offs` (ascending) from an
/// index page, closing up both the line pointer array and the tuple space.
/// Up to two offsets are deleted one by one, last first
/// (`PageIndexTupleDelete`), as PostgreSQL does. Every line pointer must
/// have storage (PostgreSQL asserts it).
pub fn index_multi_delete(page: &mut [u8], offs: &[u16]) -> Result<(), Fault> {
    if offs.len() <= 2 {
        for &off in offs.iter().rev() {
            index_tuple_delete(page, off)?;
        }
        return Ok(());
    }
    let mut h = header(page)?;
    check_pointers(&h, true)?;
    let (lower, upper, special) = (h.lower as usize, h.upper as usize, h.special as usize);
    let mut items = Vec::new();
    let mut kept_ids = Vec::new();
    let mut next = 0;
    for off in 1..=max_offset(page) {
        let id = read_lp(page, off)?;
        let (start, end) = (id.off as usize, id.off as usize + id.len as usize);
        if !id.has_storage() || start < upper || end > special || maxalign(start) != start {
            return Err(Fault::page(format!("corrupted line pointer {off}: {id:?}")));
        }
        if offs.get(next) == Some(&off) {
            next += 1;
            continue;
        }
        kept_ids.push(id);
        items.push(kept(kept_ids.len() as u16, id)?);
    }
    if next != offs.len() {
        return Err(Fault::page(format!("incorrect index offsets supplied: {offs:?}")));
    }
    check_total_len(&items, lower, special)?;
    for (i, id) in kept_ids.iter().enumerate() {
        write_lp(page, i as u16 + 1, *id)?;
    }
    h.lower = (super::SIZE_OF_PAGE_HEADER_DATA + kept_ids.len() * SIZE_OF_ITEM_ID) as u16;
    h.upper = if items.is_empty() { h.special } else { compactify(page, &items, special)? as u16 };
    h.encode(page);
    Ok(())
}
