//! The fast-update pending list: UPDATE_META_PAGE, INSERT_LISTPAGE and
//! DELETE_LISTPAGE redo (`ginRedoUpdateMetapage`, `ginRedoInsertListPage`,
//! `ginRedoDeleteListPages`), the same in PostgreSQL 15-18.
//!
//! - UPDATE_META_PAGE: main data `ginxlogUpdateMeta` (88 bytes: the
//!   relation at 0, `GinMetaPageData` at 16, `prevTail` at 72,
//!   `newRightlink` at 76, `ntuples` at 80). Block 0, the metapage, is
//!   rebuilt from the metadata. Block 1 is the list's tail: with
//!   `ntuples` > 0 its data holds that many index tuples, appended, and
//!   the tail's heap-tuple count (`maxoff`) goes up by one; else, when
//!   `prevTail` is valid, the old tail's rightlink becomes `newRightlink`;
//! - INSERT_LISTPAGE: main data `rightlink`, `ntuples`; block 0 is
//!   rebuilt as a list page holding the tuples of its data. The last page
//!   of a sublist (no rightlink) is marked FULLROW with `maxoff` 1;
//! - DELETE_LISTPAGE: main data `GinMetaPageData` and `ndeleted` (at 56);
//!   block 0 is the metapage, blocks 1..=ndeleted are rebuilt as empty
//!   deleted pages.
//!
//! The metapage and list pages rebuilt here are will_init block
//! references; the metapage must be block 0 of the relation.

use super::page::{
    add_tuples, expect_flags, init_meta, init_page, modify_opaque, packed_tuples, GIN_DELETED,
    GIN_LIST, GIN_LIST_FULLROW, INVALID_BLOCK, META_SIZE,
};
use super::{
    expect_metapage, expect_will_init, main_field, main_u32, unexpected_block, Ctx, Fault,
};
use crate::consts::SIZE_OF_PAGE_HEADER_DATA;
use crate::redo::bufpage;

/// `offsetof(ginxlogUpdateMeta, metadata)`.
const UPDATE_META_OFF: usize = 16;

/// `ginRedoUpdateMetapage` for the metapage (block 0) or the list tail
/// (block 1).
pub(super) fn update_meta(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let metadata = main_field(ctx, UPDATE_META_OFF, META_SIZE)?;
    let prev_tail = main_u32(ctx, UPDATE_META_OFF + META_SIZE)?;
    let new_rightlink = main_u32(ctx, UPDATE_META_OFF + META_SIZE + 4)?;
    let ntuples = main_u32(ctx, UPDATE_META_OFF + META_SIZE + 8)? as i32;
    if block == 0 {
        expect_will_init(ctx)?;
        expect_metapage(ctx)?;
        return init_meta(page, metadata);
    }
    if ntuples <= 0 && prev_tail == INVALID_BLOCK {
        return Err(unexpected_block(ctx, block));
    }
    expect_flags(page, GIN_LIST, 0, "a pending-list page")?;
    if ntuples <= 0 {
        return modify_opaque(page, |o| o.rightlink = new_rightlink);
    }
    let tuples = packed_tuples(ctx.rec.block_data, ntuples as usize)?;
    let first = if is_empty(page) { 1 } else { bufpage::max_offset(page) + 1 };
    add_tuples(page, &tuples, first)?;
    modify_opaque(page, |o| o.maxoff = o.maxoff.wrapping_add(1))
}

/// `PageIsEmpty`: no line pointers.
fn is_empty(page: &[u8]) -> bool {
    crate::page::PageHeader::decode(page).lower as usize <= SIZE_OF_PAGE_HEADER_DATA
}

/// `ginRedoInsertListPage`.
pub(super) fn insert_list_page(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    expect_will_init(ctx)?;
    let rightlink = main_u32(ctx, 0)?;
    let ntuples = main_u32(ctx, 4)? as i32;
    if ntuples < 0 {
        return Err(Fault::malformed(format!("GIN INSERT_LISTPAGE of {ntuples} tuples")));
    }
    let tuples = packed_tuples(ctx.rec.block_data, ntuples as usize)?;
    init_page(page, GIN_LIST)?;
    modify_opaque(page, |o| {
        o.rightlink = rightlink;
        if rightlink == INVALID_BLOCK {
            o.flags |= GIN_LIST_FULLROW;
            o.maxoff = 1;
        }
    })?;
    add_tuples(page, &tuples, 1)
}

/// `ginRedoDeleteListPages` for the metapage (block 0) or a deleted list
/// page (blocks 1..=ndeleted).
pub(super) fn delete_list_pages(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let metadata = main_field(ctx, 0, META_SIZE)?;
    let ndeleted = main_u32(ctx, META_SIZE)? as i32;
    expect_will_init(ctx)?;
    if block == 0 {
        expect_metapage(ctx)?;
        return init_meta(page, metadata);
    }
    if block as i32 > ndeleted {
        return Err(unexpected_block(ctx, block));
    }
    init_page(page, GIN_DELETED)
}
