//! ADD_LEAF and MOVE_LEAFS redo (`spgRedoAddLeaf`, `spgRedoMoveLeafs`),
//! the same in PostgreSQL 15-18 (15 names the state's xid `myXid`, 18
//! `redirectXid`; same place, same use).
//!
//! `spgxlogAddLeaf` (10 bytes): newPage (0), storesNulls (1), offnumLeaf
//! (2), offnumHeadLeaf (4), offnumParent (6), nodeI (8), then the leaf
//! tuple. Block 0 gets the tuple (a fresh leaf page when newPage): at
//! offnumLeaf, chained after the head tuple when there is one, or in place
//! of a dead tuple when both offsets are equal. Block 1, registered when
//! offnumParent is valid, is the parent whose node now points at block 0's
//! new tuple.
//!
//! `spgxlogMoveLeafs` (20 bytes): nMoves (0), newPage (2), replaceDead
//! (3), storesNulls (4), offnumParent (6), nodeI (8), the state (redirect
//! xid at 12, isBuild at 16); then nMoves source offsets, the destination
//! offsets (1 when replaceDead, else nMoves + 1) and as many leaf tuples.
//! Block 1 (the destination) gets the tuples, block 0 (the source) turns
//! the moved ones into dead tuples (the first a redirect to the last new
//! tuple, unless building), block 2 (the parent) points at the last new
//! tuple.

use super::page::{self, SPGIST_PLACEHOLDER, SPGIST_REDIRECT};
use super::{block_tag, require_will_init, unexpected_block, xlog_state};
use crate::redo::{Ctx, Fault};

/// `sizeof(spgxlogAddLeaf)`.
const ADD_LEAF_SIZE: usize = 10;
/// `SizeOfSpgxlogMoveLeafs`.
const MOVE_LEAFS_SIZE: usize = 20;

pub(super) fn add_leaf(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    let leaf_off = page::u16_at(main, 2)?;
    let head_off = page::u16_at(main, 4)?;
    let parent_off = page::u16_at(main, 6)?;
    let tuple = page::leaf_tuple(main.get(ADD_LEAF_SIZE..).unwrap_or_default())?;
    match block {
        0 => {
            if page::flag_at(main, 0)? {
                require_will_init(ctx, block)?;
                page::init_page(page, page::leaf_flags(page::flag_at(main, 1)?))?;
            }
            if leaf_off == head_off {
                return page::replace_at(page, tuple, leaf_off);
            }
            page::add_or_replace(page, tuple, leaf_off)?;
            if head_off != 0 {
                page::set_next_offset(page, head_off, leaf_off)?;
            }
            Ok(())
        }
        1 if parent_off != 0 => {
            let node = page::u16_at(main, 8)?;
            page::update_node_link(page, parent_off, node, block_tag(ctx, 0)?.blkno, leaf_off)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// The decoded `spgxlogMoveLeafs` and its arrays.
struct MoveLeafs<'a> {
    to_delete: Vec<u16>,
    to_insert: Vec<u16>,
    tuples: Vec<&'a [u8]>,
}

impl MoveLeafs<'_> {
    fn decode(main: &[u8]) -> Result<MoveLeafs<'_>, Fault> {
        let n_moves = page::u16_at(main, 0)? as usize;
        let n_insert = if page::flag_at(main, 3)? { 1 } else { n_moves + 1 };
        let to_delete = page::offsets(main, MOVE_LEAFS_SIZE, n_moves)?;
        let inserts_at = MOVE_LEAFS_SIZE + 2 * n_moves;
        let to_insert = page::offsets(main, inserts_at, n_insert)?;
        let tuples_at = inserts_at + 2 * n_insert;
        let tuples = page::leaf_tuples(main.get(tuples_at..).unwrap_or_default(), n_insert)?;
        Ok(MoveLeafs { to_delete, to_insert, tuples })
    }

    /// Where the last inserted tuple went (the one the redirect and the
    /// parent point at).
    fn last_insert(&self) -> u16 {
        self.to_insert.last().copied().unwrap_or(0)
    }
}

pub(super) fn move_leafs(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    let xl = MoveLeafs::decode(main)?;
    let dest_blkno = block_tag(ctx, 1)?.blkno;
    match block {
        0 => {
            let (xid, is_build) = xlog_state(main, 12)?;
            let first = if is_build { SPGIST_PLACEHOLDER } else { SPGIST_REDIRECT };
            let target = (dest_blkno, xl.last_insert(), xid);
            page::multi_delete(page, &xl.to_delete, (first, SPGIST_PLACEHOLDER), target)
        }
        1 => {
            if page::flag_at(main, 2)? {
                require_will_init(ctx, block)?;
                page::init_page(page, page::leaf_flags(page::flag_at(main, 4)?))?;
            }
            for (tuple, &off) in xl.tuples.iter().zip(&xl.to_insert) {
                page::add_or_replace(page, tuple, off)?;
            }
            Ok(())
        }
        2 => {
            let (parent_off, node) = (page::u16_at(main, 6)?, page::u16_at(main, 8)?);
            page::update_node_link(page, parent_off, node, dest_blkno, xl.last_insert())
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}
