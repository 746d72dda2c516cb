//! BRIN (rmgr 16) redo, PostgreSQL 15-18 (`brin_xlog.c`, `brin_xlog.h`),
//! one block reference at a time. Which block id is which page:
//!
//! | record | block 0 | 1 | 2 |
//! |---|---|---|---|
//! | CREATE_INDEX | metapage, will_init | | |
//! | INSERT(+INIT) | regular page (data: tuple; will_init with +INIT) | revmap page | |
//! | UPDATE(+INIT) | new regular page (data: tuple) | revmap page | old regular page |
//! | SAMEPAGE_UPDATE | regular page (data: tuple) | | |
//! | REVMAP_EXTEND | metapage | new revmap page, will_init | |
//! | DESUMMARIZE | revmap page | regular page | |
//!
//! Each block's redo needs only its own data, the main data and the other
//! blocks' tags (the revmap entry of INSERT and UPDATE points at block 0's
//! block number). Main data layouts (little-endian, C padding), the same in
//! 15-18 (the 15 → 18 diff of `brin_xlog.c`, `brin_xlog.h` and
//! `brin_page.h` is comments and includes only):
//! - `xl_brin_createidx`: pagesPerRange u32, version u16 (6);
//! - `xl_brin_insert`: heapBlk, pagesPerRange u32, offnum u16 (10);
//! - `xl_brin_update`: oldOffnum u16, then `xl_brin_insert` at byte 4 (14);
//! - `xl_brin_samepage_update`: offnum u16 (2);
//! - `xl_brin_revmap_extend`: targetBlk u32 (4);
//! - `xl_brin_desummarize`: pagesPerRange, heapBlk u32, regOffset u16 (10).
//!
//! BRIN records write the main fork only (an unlogged index's init fork
//! metapage is logged as a full-page image, not a BRIN record).

mod page;

#[cfg(test)]
mod tests;

use super::{bufpage, Ctx, Fault};
use page::{BRIN_PAGETYPE_REGULAR, BRIN_PAGETYPE_REVMAP};

const XLOG_BRIN_CREATE_INDEX: u8 = 0x00;
const XLOG_BRIN_INSERT: u8 = 0x10;
const XLOG_BRIN_UPDATE: u8 = 0x20;
const XLOG_BRIN_SAMEPAGE_UPDATE: u8 = 0x30;
const XLOG_BRIN_REVMAP_EXTEND: u8 = 0x40;
const XLOG_BRIN_DESUMMARIZE: u8 = 0x50;
const XLOG_BRIN_OPMASK: u8 = 0x70;
const XLOG_BRIN_INIT_PAGE: u8 = 0x80;

const MAIN_FORKNUM: u8 = 0;

/// Redo of block `ctx.rec.target` of a BRIN record on `page`.
pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    if ctx.tag.fork != MAIN_FORKNUM {
        return Err(Fault::malformed(format!("BRIN {} on fork {}", name(ctx), ctx.tag.fork)));
    }
    let block = ctx.rec.target;
    match ctx.rec.rmgr_info() & XLOG_BRIN_OPMASK {
        XLOG_BRIN_CREATE_INDEX => create_index(page, ctx, block),
        XLOG_BRIN_INSERT => insert_update(page, ctx, block, main_data(ctx, 10)?),
        XLOG_BRIN_UPDATE => match block {
            2 => {
                let old_off = u16_at(main_data(ctx, 14)?, 0)?;
                page::expect_type(page, BRIN_PAGETYPE_REGULAR)?;
                bufpage::index_tuple_delete_no_compact(page, old_off)
            }
            _ => insert_update(page, ctx, block, &main_data(ctx, 14)?[4..]),
        },
        XLOG_BRIN_SAMEPAGE_UPDATE if block == 0 => {
            let off = u16_at(main_data(ctx, 2)?, 0)?;
            page::expect_type(page, BRIN_PAGETYPE_REGULAR)?;
            bufpage::index_tuple_overwrite(page, off, ctx.rec.block_data)
        }
        XLOG_BRIN_REVMAP_EXTEND => revmap_extend(page, ctx, block),
        XLOG_BRIN_DESUMMARIZE => desummarize(page, ctx, block),
        XLOG_BRIN_SAMEPAGE_UPDATE => Err(unexpected_block(ctx, block)),
        _ => Err(Fault::unsupported(format!("BRIN record (info {:#04x})", ctx.rec.info))),
    }
}

/// PostgreSQL's name of the record kind.
fn name(ctx: &Ctx) -> &'static str {
    super::names::record_name(ctx.rec.rmid, ctx.rec.info, ctx.version)
}

/// A block id the record kind does not write.
fn unexpected_block(ctx: &Ctx, block: u8) -> Fault {
    Fault::malformed(format!("BRIN {} has no page at block id {block}", name(ctx)))
}

/// The main data, which must be at least `len` bytes.
fn main_data<'a>(ctx: &'a Ctx, len: usize) -> Result<&'a [u8], Fault> {
    let data = ctx.rec.main_data;
    if data.len() < len {
        return Err(Fault::malformed(format!(
            "BRIN {} main data of {} bytes, need {len}",
            name(ctx),
            data.len()
        )));
    }
    Ok(data)
}

fn u16_at(data: &[u8], at: usize) -> Result<u16, Fault> {
    match data.get(at..at + 2) {
        Some(b) => Ok(u16::from_le_bytes([b[0], b[1]])),
        None => Err(Fault::malformed(format!("{} bytes, need a u16 at {at}", data.len()))),
    }
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, Fault> {
    match data.get(at..at + 4) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(Fault::malformed(format!("{} bytes, need a u32 at {at}", data.len()))),
    }
}

/// CREATE_INDEX: the metapage (block 0 of the index) from scratch.
fn create_index(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 || ctx.tag.blkno != 0 {
        return Err(Fault::malformed(format!(
            "BRIN metapage at block id {block}, block {}",
            ctx.tag.blkno
        )));
    }
    let data = main_data(ctx, 6)?;
    page::init_meta(page, u32_at(data, 0)?, u16_at(data, 4)?);
    Ok(())
}

/// INSERT, and UPDATE's blocks 0 and 1: `xlrec` is the `xl_brin_insert`.
/// Block 0 gets the tuple at the logged offset (a new page first with
/// +INIT), block 1's revmap entry for the range points at it.
fn insert_update(page: &mut [u8], ctx: &Ctx, block: u8, xlrec: &[u8]) -> Result<(), Fault> {
    let (heap_blk, pages_per_range) = (u32_at(xlrec, 0)?, u32_at(xlrec, 4)?);
    let offnum = u16_at(xlrec, 8)?;
    match block {
        0 => {
            if ctx.rec.rmgr_info() & XLOG_BRIN_INIT_PAGE != 0 {
                page::init_page(page, BRIN_PAGETYPE_REGULAR);
            }
            page::expect_type(page, BRIN_PAGETYPE_REGULAR)?;
            let max = bufpage::max_offset(page);
            if offnum == 0 || offnum > max + 1 {
                return Err(Fault::page(format!(
                    "BRIN tuple offset {offnum} on a page of {max} items"
                )));
            }
            bufpage::add_item(page, ctx.rec.block_data, offnum, true, false)?;
            Ok(())
        }
        1 => {
            let regpgno = ctx.rec.block(0).map(|b| b.tag.blkno).ok_or_else(|| {
                Fault::malformed(format!("BRIN {} without block reference 0", name(ctx)))
            })?;
            if offnum == 0 {
                return Err(Fault::malformed(format!("BRIN {} at offset 0", name(ctx))));
            }
            page::set_revmap_entry(page, pages_per_range, heap_blk, regpgno, offnum)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// REVMAP_EXTEND: block 0 the metapage (new last revmap page), block 1
/// the new revmap page, which must be the logged target block.
fn revmap_extend(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let target = u32_at(main_data(ctx, 4)?, 0)?;
    if ctx.rec.block(1).is_some_and(|b| b.tag.blkno != target) {
        return Err(Fault::malformed(format!(
            "BRIN REVMAP_EXTEND to block {target} registers another block 1"
        )));
    }
    match block {
        0 => page::set_last_revmap_page(page, target),
        1 => {
            page::init_page(page, BRIN_PAGETYPE_REVMAP);
            Ok(())
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// DESUMMARIZE: block 0's revmap entry for the range becomes invalid,
/// block 1 loses the summary tuple (its line pointer left unused).
fn desummarize(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let data = main_data(ctx, 10)?;
    match block {
        0 => page::set_revmap_entry(page, u32_at(data, 0)?, u32_at(data, 4)?, u32::MAX, 0),
        1 => {
            page::expect_type(page, BRIN_PAGETYPE_REGULAR)?;
            bufpage::index_tuple_delete_no_compact(page, u16_at(data, 8)?)
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// Whether the bytes of a BRIN page below `pd_lower` are line pointers:
/// not on the metapage nor on a revmap page, which `apply` checks by their
/// header only.
pub(crate) fn has_line_pointers(page: &[u8]) -> bool {
    page::has_line_pointers(page)
}
