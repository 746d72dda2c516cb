//! ADD_NODE, SPLIT_TUPLE and PICKSPLIT redo (`spgRedoAddNode`,
//! `spgRedoSplitTuple`, `spgRedoPickSplit`), the same in PostgreSQL 15-18.
//!
//! `spgxlogAddNode` (20 bytes): offnum (0), offnumNew (2), newPage (4),
//! parentBlk (5, signed), offnumParent (6), nodeI (8), the state (redirect
//! xid at 12, isBuild at 16), then the new inner tuple. Without block 1 the
//! tuple replaces the old one on block 0. Otherwise block 1 gets it at
//! offnumNew (a fresh inner page when newPage), block 0 replaces the old
//! tuple by a redirect to it (a placeholder when building), and the parent
//! downlink is updated on block parentBlk (0, 1 or 2).
//!
//! `spgxlogSplitTuple` (6 bytes): offnumPrefix (0), offnumPostfix (2),
//! newPage (4), postfixBlkSame (5), then the prefix and postfix inner
//! tuples. Block 0 gets the prefix tuple in place of the old one, and the
//! postfix tuple too when postfixBlkSame; otherwise block 1 does.
//!
//! `spgxlogPickSplit` (28 bytes): isRootSplit (0), nDelete (2), nInsert
//! (4), initSrc (6), initDest (7), offnumInner (8), initInner (10),
//! storesNulls (11), innerIsParent (12), offnumParent (14), nodeI (16),
//! the state (redirect xid at 20, isBuild at 24); then nDelete offsets,
//! nInsert offsets, nInsert page selectors (0 source, else destination),
//! the new inner tuple and nInsert leaf tuples. Block 0 is the source leaf
//! (absent in a root split): re-initialised, or its deleted tuples become
//! a redirect to the new inner tuple and placeholders. Block 1 is the
//! destination leaf. Each gets its selected leaf tuples. Block 2 gets the
//! inner tuple (and the parent link when innerIsParent), block 3 is the
//! parent when it is another page.

use super::page::{self, SPGIST_PLACEHOLDER, SPGIST_REDIRECT};
use super::{block_tag, require_will_init, unexpected_block, xlog_state};
use crate::redo::{Ctx, Fault};

/// `sizeof(spgxlogAddNode)`.
const ADD_NODE_SIZE: usize = 20;
/// `sizeof(spgxlogSplitTuple)`.
const SPLIT_TUPLE_SIZE: usize = 6;
/// `SizeOfSpgxlogPickSplit`.
const PICKSPLIT_SIZE: usize = 28;

pub(super) fn add_node(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    let (off, new_off) = (page::u16_at(main, 0)?, page::u16_at(main, 2)?);
    let parent_blk =
        *main.get(5).ok_or_else(|| Fault::malformed("spgxlogAddNode cut short".into()))? as i8;
    let (parent_off, node) = (page::u16_at(main, 6)?, page::u16_at(main, 8)?);
    let tuple = page::inner_tuple(main.get(ADD_NODE_SIZE..).unwrap_or_default())?;
    let Some(new_block) = ctx.rec.block(1) else {
        return match block {
            0 => page::replace_at(page, tuple, off),
            _ => Err(unexpected_block(ctx, block)),
        };
    };
    let new_blkno = new_block.tag.blkno;
    let link_parent = |page: &mut [u8]| -> Result<(), Fault> {
        match parent_blk == block as i8 {
            true => page::update_node_link(page, parent_off, node, new_blkno, new_off),
            false => Ok(()),
        }
    };
    match block {
        0 => {
            let (xid, is_build) = xlog_state(main, 12)?;
            let state = if is_build { SPGIST_PLACEHOLDER } else { SPGIST_REDIRECT };
            page::replace_at(page, &page::dead_tuple(state, new_blkno, new_off, xid), off)?;
            page::modify_opaque(page, |o| match is_build {
                true => o.n_placeholder = o.n_placeholder.wrapping_add(1),
                false => o.n_redirection = o.n_redirection.wrapping_add(1),
            })?;
            link_parent(page)
        }
        1 => {
            if page::flag_at(main, 4)? {
                require_will_init(ctx, block)?;
                page::init_page(page, 0)?;
            }
            page::add_or_replace(page, tuple, new_off)?;
            link_parent(page)
        }
        2 if parent_blk == 2 => link_parent(page),
        _ => Err(unexpected_block(ctx, block)),
    }
}

pub(super) fn split_tuple(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    let (prefix_off, postfix_off) = (page::u16_at(main, 0)?, page::u16_at(main, 2)?);
    let postfix_same = page::flag_at(main, 5)?;
    let tuples = main.get(SPLIT_TUPLE_SIZE..).unwrap_or_default();
    let prefix = page::inner_tuple(tuples)?;
    let postfix = page::inner_tuple(&tuples[prefix.len()..])?;
    match block {
        0 => {
            page::replace_at(page, prefix, prefix_off)?;
            if postfix_same {
                page::add_or_replace(page, postfix, postfix_off)?;
            }
            Ok(())
        }
        1 if !postfix_same => {
            if page::flag_at(main, 4)? {
                require_will_init(ctx, block)?;
                page::init_page(page, 0)?;
            }
            page::add_or_replace(page, postfix, postfix_off)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// The decoded `spgxlogPickSplit` arrays and tuples.
struct PickSplit<'a> {
    to_delete: Vec<u16>,
    to_insert: Vec<u16>,
    select: &'a [u8],
    inner: &'a [u8],
    leaves: Vec<&'a [u8]>,
}

impl PickSplit<'_> {
    fn decode(main: &[u8]) -> Result<PickSplit<'_>, Fault> {
        let n_delete = page::u16_at(main, 2)? as usize;
        let n_insert = page::u16_at(main, 4)? as usize;
        let to_delete = page::offsets(main, PICKSPLIT_SIZE, n_delete)?;
        let inserts_at = PICKSPLIT_SIZE + 2 * n_delete;
        let to_insert = page::offsets(main, inserts_at, n_insert)?;
        let select_at = inserts_at + 2 * n_insert;
        let select = main.get(select_at..select_at + n_insert).ok_or_else(|| {
            Fault::malformed(format!("{n_insert} page selectors at {select_at} of {}", main.len()))
        })?;
        let inner = page::inner_tuple(&main[select_at + n_insert..])?;
        let leaves_at = select_at + n_insert + inner.len();
        let leaves = page::leaf_tuples(&main[leaves_at..], n_insert)?;
        Ok(PickSplit { to_delete, to_insert, select, inner, leaves })
    }

    /// Add the leaf tuples selected for the destination (`dest`) or the
    /// source page.
    fn add_leaves(&self, page: &mut [u8], dest: bool) -> Result<(), Fault> {
        for ((tuple, &off), &sel) in self.leaves.iter().zip(&self.to_insert).zip(self.select) {
            if (sel != 0) == dest {
                page::add_or_replace(page, tuple, off)?;
            }
        }
        Ok(())
    }
}

pub(super) fn pick_split(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    let xl = PickSplit::decode(main)?;
    let inner_off = page::u16_at(main, 8)?;
    let stores_nulls = page::flag_at(main, 11)?;
    let (parent_off, node) = (page::u16_at(main, 14)?, page::u16_at(main, 16)?);
    let inner_blkno = block_tag(ctx, 2)?.blkno;
    let init = |page: &mut [u8], at: usize, flags: u16| -> Result<bool, Fault> {
        let init = page::flag_at(main, at)?;
        if init {
            require_will_init(ctx, block)?;
            page::init_page(page, flags)?;
        }
        Ok(init)
    };
    match block {
        0 if !page::flag_at(main, 0)? => {
            if !init(page, 6, page::leaf_flags(stores_nulls))? {
                let (xid, is_build) = xlog_state(main, 20)?;
                let (first, target) = match is_build {
                    true => (SPGIST_PLACEHOLDER, (page::INVALID_BLOCK, 0, xid)),
                    false => (SPGIST_REDIRECT, (inner_blkno, inner_off, xid)),
                };
                page::multi_delete(page, &xl.to_delete, (first, SPGIST_PLACEHOLDER), target)?;
            }
            xl.add_leaves(page, false)
        }
        1 => {
            init(page, 7, page::leaf_flags(stores_nulls))?;
            xl.add_leaves(page, true)
        }
        2 => {
            init(page, 10, if stores_nulls { page::SPGIST_NULLS } else { 0 })?;
            page::add_or_replace(page, xl.inner, inner_off)?;
            if page::flag_at(main, 12)? {
                page::update_node_link(page, parent_off, node, inner_blkno, inner_off)?;
            }
            Ok(())
        }
        3 => page::update_node_link(page, parent_off, node, inner_blkno, inner_off),
        _ => Err(unexpected_block(ctx, block)),
    }
}
