//! PAGE_UPDATE, DELETE and PAGE_DELETE redo (`gistRedoPageUpdateRecord`,
//! `gistRedoDeleteRecord`, `gistRedoPageDelete`).
//!
//! Main data per major:
//! - `gistxlogPageUpdate` (ntodelete, ntoinsert: 4 bytes), the same in
//!   15-18; block 0's data is the offsets to delete, then the tuples to add
//!   (one of each: the tuple replaces the item in place, as
//!   `gistplacetopage` did; else deletions first, `F_TUPLES_DELETED` on a
//!   leaf, then the tuples appended in order). Block 1, when present, is
//!   the left half of a split whose downlink this update inserts: NSN =
//!   the record's end LSN, `F_FOLLOW_RIGHT` cleared.
//! - `gistxlogDelete` (the microvacuum of `gistprunepage`): the conflict
//!   xid and ntodelete, then the offsets in the main data: at byte 6 in 15
//!   (and only if the main data is longer than those 6 bytes), at byte 8
//!   from 16 on (after `isCatalogRel`). Clears `F_HAS_GARBAGE`, sets
//!   `F_TUPLES_DELETED`.
//! - `gistxlogPageDelete` (the full xid at 0, the parent's downlink offset
//!   at 8), the same in 15-18: block 0 becomes a deleted page, block 1
//!   (the parent) loses the downlink.

use super::page::{self, F_HAS_GARBAGE, F_LEAF, F_TUPLES_DELETED};
use super::unexpected_block;
use crate::redo::{bufpage, Ctx, Fault};
use crate::PgMajorVersion;

/// `sizeof(gistxlogPageUpdate)`.
const PAGE_UPDATE_SIZE: usize = 4;
/// `SizeOfGistxlogPageDelete`.
const PAGE_DELETE_SIZE: usize = 10;

pub(super) fn page_update(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    if main.len() < PAGE_UPDATE_SIZE {
        return Err(Fault::malformed(format!("gistxlogPageUpdate of {} bytes", main.len())));
    }
    match block {
        0 => {
            let (ntodelete, ntoinsert) = (page::u16_at(main, 0)?, page::u16_at(main, 2)?);
            update_page(page, ctx.rec.block_data, ntodelete as usize, ntoinsert as usize)
        }
        1 => page::clear_follow_right(page, ctx.lsn.0),
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// Block 0 of PAGE_UPDATE: `data` is `ntodelete` offsets, then
/// `ntoinsert` tuples.
fn update_page(
    page: &mut [u8],
    data: &[u8],
    ntodelete: usize,
    ntoinsert: usize,
) -> Result<(), Fault> {
    let (todelete, rest) = page::offsets(data, ntodelete)?;
    let tuples = page::tuples(rest)?;
    if tuples.len() != ntoinsert {
        return Err(Fault::malformed(format!(
            "PAGE_UPDATE says {ntoinsert} tuples, its data holds {}",
            tuples.len()
        )));
    }
    if ntodelete == 1 && ntoinsert == 1 {
        return bufpage::index_tuple_overwrite(page, todelete[0], tuples[0]);
    }
    if ntodelete > 0 {
        bufpage::index_multi_delete(page, &todelete)?;
        if page::Opaque::read(page)?.flags & F_LEAF != 0 {
            page::modify_opaque(page, |o| o.flags |= F_TUPLES_DELETED)?;
        }
    }
    let first = bufpage::max_offset(page) + 1;
    for (i, tuple) in tuples.iter().enumerate() {
        bufpage::add_item(page, tuple, first + i as u16, false, false)?;
    }
    Ok(())
}

/// DELETE (block 0 only): the offsets in the main data go.
pub(super) fn delete(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let main = ctx.rec.main_data;
    let ntodelete = page::u16_at(main, 4)? as usize;
    let header_size = if ctx.version >= PgMajorVersion::V16 { 8 } else { 6 };
    if main.len() < header_size {
        return Err(Fault::malformed(format!("gistxlogDelete of {} bytes", main.len())));
    }
    let deletes = ctx.version >= PgMajorVersion::V16 || main.len() > header_size;
    if deletes {
        let (todelete, _) = page::offsets(&main[header_size..], ntodelete)?;
        bufpage::index_multi_delete(page, &todelete)?;
    }
    page::modify_opaque(page, |o| {
        o.flags &= !F_HAS_GARBAGE;
        o.flags |= F_TUPLES_DELETED;
    })
}

/// PAGE_DELETE: block 0 the deleted (empty) leaf, block 1 its parent.
pub(super) fn page_delete(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    if main.len() < PAGE_DELETE_SIZE {
        return Err(Fault::malformed(format!("gistxlogPageDelete of {} bytes", main.len())));
    }
    match block {
        0 => page::set_deleted(page, page::u64_at(main, 0)?),
        1 => bufpage::index_tuple_delete(page, page::u16_at(main, 8)?),
        _ => Err(unexpected_block(ctx, block)),
    }
}
