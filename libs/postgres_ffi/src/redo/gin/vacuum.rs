//! VACUUM_DATA_LEAF_PAGE and DELETE_PAGE redo
//! (`ginRedoVacuumDataLeafPage`, `ginRedoDeletePage`), the same in
//! PostgreSQL 15-18. (VACUUM_PAGE always carries its page's image.)
//!
//! - VACUUM_DATA_LEAF_PAGE: block 0's data is `ginxlogRecompressDataLeaf`
//!   (segment actions, `leaf.rs`) for a posting-tree leaf;
//! - DELETE_PAGE: main data `parentOffset` (u16), `rightLink` (u32 at 4),
//!   `deleteXid` (u32 at 8). Block 0, the emptied posting-tree page, is
//!   marked GIN_DELETED with `deleteXid` in `pd_prune_xid`; block 1, its
//!   parent, loses the `PostingItem` at `parentOffset`; block 2, the left
//!   sibling, takes `rightLink`.

use super::page::{
    delete_posting_item, expect_flags, modify_opaque, GIN_DATA, GIN_DELETED, GIN_LEAF,
};
use super::{leaf, main_u16, main_u32, unexpected_block, Ctx, Fault};
use crate::page::PageHeader;

/// `ginRedoVacuumDataLeafPage`.
pub(super) fn vacuum_data_leaf(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    expect_flags(page, GIN_DATA | GIN_LEAF, 0, "a data leaf")?;
    leaf::recompress(page, ctx.rec.block_data)
}

/// `ginRedoDeletePage` for one of its three pages.
pub(super) fn delete_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let parent_off = main_u16(ctx, 0)?;
    let right_link = main_u32(ctx, 4)?;
    let delete_xid = main_u32(ctx, 8)?;
    match block {
        0 => {
            expect_flags(page, GIN_DATA, 0, "a data page")?;
            modify_opaque(page, |o| o.flags |= GIN_DELETED)?;
            let mut h = PageHeader::decode(page);
            h.prune_xid = delete_xid;
            h.encode(page);
            Ok(())
        }
        1 => {
            expect_flags(page, GIN_DATA, GIN_LEAF, "an internal data page")?;
            delete_posting_item(page, parent_off)
        }
        2 => {
            expect_flags(page, GIN_DATA, 0, "a data page")?;
            modify_opaque(page, |o| o.rightlink = right_link)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}
