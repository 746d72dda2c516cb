//! CREATE_PTREE, INSERT and SPLIT redo (`ginRedoCreatePTree`,
//! `ginRedoInsert`, `ginRedoSplit`), the same in PostgreSQL 15-18.
//!
//! - CREATE_PTREE: main data `size` (u32) and a posting list of `size`
//!   bytes, the new root leaf of a posting tree (will_init);
//! - INSERT: main data `flags` (u16: ISDATA, ISLEAF), then on a non-leaf
//!   insert the left and right child (`BlockIdData` each) whose split it
//!   finishes. Block 0's data is, on an entry page, the offset (u16),
//!   `isDelete` (u8), a pad byte and the index tuple; on an internal data
//!   page the offset and a 10-byte `PostingItem`; on a data leaf the
//!   segment actions (`leaf.rs`). On an internal page the downlink at the
//!   offset is first pointed at the right child. Block 1 (non-leaf only)
//!   is the child, whose INCOMPLETE_SPLIT flag is cleared;
//! - SPLIT: main data `ginxlogSplit` (28 bytes, `flags` at 24). Blocks 0-2
//!   carry full-page images; block 3 (non-leaf only) is the child.

use super::page::{
    add_posting_item, block_id, expect_flags, init_page, modify_opaque, set_block_id,
    set_data_size, set_posting_item_child, tuple_size, DATA_OFF, GIN_COMPRESSED, GIN_DATA,
    GIN_INCOMPLETE_SPLIT, GIN_LEAF, INVALID_BLOCK, POSTING_ITEM_SIZE,
};
use super::{leaf, main_field, main_u16, main_u32, needs_image, unexpected_block, Ctx, Fault};
use crate::redo::bufpage;

const GIN_INSERT_ISDATA: u16 = 0x01;
const GIN_INSERT_ISLEAF: u16 = 0x02;
const GIN_SPLIT_ROOT: u16 = 0x04;
/// `offsetof(ginxlogSplit, flags)`.
const SPLIT_FLAGS_OFF: usize = 24;
/// `offsetof(ginxlogInsertEntry, tuple)`.
const ENTRY_TUPLE_OFF: usize = 4;

/// `ginRedoCreatePTree`.
pub(super) fn create_ptree(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    super::expect_will_init(ctx)?;
    let size = main_u32(ctx, 0)? as usize;
    let list = main_field(ctx, 4, size)?;
    init_page(page, GIN_DATA | GIN_LEAF | GIN_COMPRESSED)?;
    set_data_size(page, size)?;
    page[DATA_OFF..DATA_OFF + size].copy_from_slice(list);
    Ok(())
}

/// `ginRedoInsert` for block 0 (the page inserted into) or block 1 (the
/// child whose split the insert finishes).
pub(super) fn insert(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let flags = main_u16(ctx, 0)?;
    let is_leaf = flags & GIN_INSERT_ISLEAF != 0;
    // The left child (bytes 2..6) is the child page itself: block 1.
    let right_child = if is_leaf { INVALID_BLOCK } else { block_id(main_field(ctx, 6, 4)?) };
    match (block, is_leaf) {
        (1, false) => clear_incomplete_split(page),
        (1, true) => Err(unexpected_block(ctx, block)),
        _ if flags & GIN_INSERT_ISDATA == 0 => {
            expect_flags(page, 0, GIN_DATA, "an entry page")?;
            insert_entry(page, right_child, ctx.rec.block_data)
        }
        (_, true) => {
            expect_flags(page, GIN_DATA | GIN_LEAF, 0, "a data leaf")?;
            leaf::recompress(page, ctx.rec.block_data)
        }
        (_, false) => {
            expect_flags(page, GIN_DATA, GIN_LEAF, "an internal data page")?;
            insert_posting_item(page, right_child, ctx.rec.block_data)
        }
    }
}

/// `ginRedoInsertEntry`.
fn insert_entry(page: &mut [u8], right_child: u32, data: &[u8]) -> Result<(), Fault> {
    let Some(tuple) = data.get(ENTRY_TUPLE_OFF..) else {
        return Err(Fault::malformed(format!("GIN entry insert data of {} bytes", data.len())));
    };
    let off = u16::from_le_bytes([data[0], data[1]]);
    let is_delete = data[2] != 0;
    if tuple_size(tuple) != Some(tuple.len()) {
        return Err(Fault::malformed(format!(
            "GIN entry insert data of {} bytes is not one index tuple",
            data.len()
        )));
    }
    if right_child != INVALID_BLOCK {
        expect_flags(page, 0, GIN_LEAF, "an entry internal page")?;
        let item = bufpage::item_mut(page, off)?;
        if item.len() < 6 {
            return Err(Fault::page(format!("entry tuple {off} of {} bytes", item.len())));
        }
        set_block_id(item, right_child);
        item[4..6].fill(0);
    }
    if is_delete {
        expect_flags(page, GIN_LEAF, 0, "an entry leaf")?;
        bufpage::index_tuple_delete(page, off)?;
    }
    bufpage::add_item(page, tuple, off, false, false)?;
    Ok(())
}

/// `ginRedoInsertData` on an internal data page: the downlink at the
/// offset now leads to the right child, the new item goes before it.
fn insert_posting_item(page: &mut [u8], right_child: u32, data: &[u8]) -> Result<(), Fault> {
    if data.len() != 2 + POSTING_ITEM_SIZE {
        return Err(Fault::malformed(format!(
            "GIN internal data insert of {} bytes, not {}",
            data.len(),
            2 + POSTING_ITEM_SIZE
        )));
    }
    let off = u16::from_le_bytes([data[0], data[1]]);
    set_posting_item_child(page, off, right_child)?;
    add_posting_item(page, &data[2..], off)
}

/// `ginRedoSplit`: only the child (block 3) is redone without an image.
pub(super) fn split(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let flags = main_u16(ctx, SPLIT_FLAGS_OFF)?;
    let is_leaf = flags & GIN_INSERT_ISLEAF != 0;
    match block {
        0 => Err(needs_image(ctx, "the left page")),
        1 => Err(needs_image(ctx, "the right page")),
        2 if flags & GIN_SPLIT_ROOT != 0 => Err(needs_image(ctx, "the root")),
        3 if !is_leaf => clear_incomplete_split(page),
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// `ginRedoClearIncompleteSplit`.
fn clear_incomplete_split(page: &mut [u8]) -> Result<(), Fault> {
    modify_opaque(page, |o| o.flags &= !GIN_INCOMPLETE_SPLIT)
}
