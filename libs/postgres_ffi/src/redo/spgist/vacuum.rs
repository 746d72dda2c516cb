//! VACUUM_LEAF, VACUUM_ROOT and VACUUM_REDIRECT redo (`spgRedoVacuumLeaf`,
//! `spgRedoVacuumRoot`, `spgRedoVacuumRedirect`); block 0 only.
//!
//! Main data per major:
//! - `spgxlogVacuumLeaf` (16 bytes, 15-18): nDead, nPlaceholder, nMove,
//!   nChain, the state; then the offsets to make dead, to make
//!   placeholders, to move from, to move to, and the chain links to set
//!   (tuples, then their new next offsets). Moves swap the two line
//!   pointers, then the sources become placeholders.
//! - `spgxlogVacuumRoot` (12 bytes, 15-18): nDelete, the state, then the
//!   offsets, deleted outright.
//! - `spgxlogVacuumRedirect`: nToPlaceholder (0), firstPlaceholder (2), the
//!   conflict xid (4), then the offsets: at 8 in 15, at 10 from 16 on
//!   (after `isCatalogRel`). The redirects become placeholders (pointer
//!   invalid, xid kept); the placeholders from firstPlaceholder to the end
//!   of the page are then removed.

use super::page::{self, SPGIST_DEAD, SPGIST_PLACEHOLDER, SPGIST_REDIRECT};
use super::unexpected_block;
use crate::redo::{bufpage, Ctx, Fault};
use crate::PgMajorVersion;

/// `SizeOfSpgxlogVacuumLeaf`.
const VACUUM_LEAF_SIZE: usize = 16;
/// `SizeOfSpgxlogVacuumRoot`.
const VACUUM_ROOT_SIZE: usize = 12;

/// Dead and placeholder tuples carry no pointer and no xid.
const NOWHERE: (u32, u16, u32) = (page::INVALID_BLOCK, 0, 0);

pub(super) fn vacuum_leaf(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let main = ctx.rec.main_data;
    let count = |at| page::u16_at(main, at).map(usize::from);
    let (n_dead, n_placeholder, n_move, n_chain) = (count(0)?, count(2)?, count(4)?, count(6)?);
    let mut at = VACUUM_LEAF_SIZE;
    let mut next = |n: usize| {
        let offs = page::offsets(main, at, n);
        at += 2 * n;
        offs
    };
    let (to_dead, to_placeholder) = (next(n_dead)?, next(n_placeholder)?);
    let (move_src, move_dest) = (next(n_move)?, next(n_move)?);
    let (chain_src, chain_dest) = (next(n_chain)?, next(n_chain)?);
    page::multi_delete(page, &to_dead, (SPGIST_DEAD, SPGIST_DEAD), NOWHERE)?;
    let placeholder = (SPGIST_PLACEHOLDER, SPGIST_PLACEHOLDER);
    page::multi_delete(page, &to_placeholder, placeholder, NOWHERE)?;
    for (&src, &dest) in move_src.iter().zip(&move_dest) {
        let (a, b) = (bufpage::item_id(page, src)?, bufpage::item_id(page, dest)?);
        bufpage::set_item_id(page, src, b)?;
        bufpage::set_item_id(page, dest, a)?;
    }
    page::multi_delete(page, &move_src, placeholder, NOWHERE)?;
    for (&src, &dest) in chain_src.iter().zip(&chain_dest) {
        page::set_next_offset(page, src, dest)?;
    }
    Ok(())
}

pub(super) fn vacuum_root(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let main = ctx.rec.main_data;
    let n = page::u16_at(main, 0)? as usize;
    let to_delete = page::offsets(main, VACUUM_ROOT_SIZE, n)?;
    if !to_delete.is_empty() {
        bufpage::index_multi_delete(page, &to_delete)?;
    }
    Ok(())
}

pub(super) fn vacuum_redirect(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let main = ctx.rec.main_data;
    let n = page::u16_at(main, 0)?;
    let first_placeholder = page::u16_at(main, 2)?;
    let offsets_at = if ctx.version >= PgMajorVersion::V16 { 10 } else { 8 };
    for off in page::offsets(main, offsets_at, n as usize)? {
        let t = bufpage::item_mut(page, off)?;
        let word = page::u32_at(t, 0).ok().filter(|w| w & 0x3 == SPGIST_REDIRECT);
        let (Some(word), Some(pointer)) = (word, t.get_mut(6..12)) else {
            return Err(Fault::page(format!("tuple {off} is not a redirect")));
        };
        pointer.copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 0]);
        t[0..4].copy_from_slice(&(word | SPGIST_PLACEHOLDER).to_le_bytes());
    }
    let mut o = page::Opaque::read(page)?;
    o.n_redirection = o.n_redirection.checked_sub(n).ok_or_else(|| {
        Fault::page(format!("{n} redirects to clear on a page that counts {}", o.n_redirection))
    })?;
    o.n_placeholder = o.n_placeholder.wrapping_add(n);
    if first_placeholder != 0 {
        let max = bufpage::max_offset(page);
        let removed = (max + 1).checked_sub(first_placeholder);
        let removed = removed.filter(|&r| r <= o.n_placeholder).ok_or_else(|| {
            Fault::page(format!(
                "placeholders {first_placeholder}..={max} on a page that counts {}",
                o.n_placeholder
            ))
        })?;
        o.n_placeholder -= removed;
        o.write(page)?;
        if removed > 0 {
            let to_delete: Vec<u16> = (first_placeholder..=max).collect();
            bufpage::index_multi_delete(page, &to_delete)?;
        }
        return Ok(());
    }
    o.write(page)
}
