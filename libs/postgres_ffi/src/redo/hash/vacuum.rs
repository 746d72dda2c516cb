//! Hash records that remove tuples or pages: MOVE_PAGE_CONTENTS,
//! SQUEEZE_PAGE, DELETE, SPLIT_CLEANUP, UPDATE_META_PAGE and
//! VACUUM_ONE_PAGE (`hash_xlog_move_page_contents` ...
//! `hash_xlog_vacuum_one_page`).
//!
//! Main data layouts (little-endian, C struct padding), 15-18 unless said:
//! - `xl_hash_move_page_contents`: ntups u16, is_prim_bucket_same_wrt (3);
//! - `xl_hash_squeeze_page`: prevblkno, nextblkno u32, ntups u16,
//!   is_prim_bucket_same_wrt, is_prev_bucket_same_wrt (12);
//! - `xl_hash_delete`: clear_dead_marking, is_primary_bucket_page (2);
//! - `xl_hash_update_meta_page`: ntuples f64 (8);
//! - `xl_hash_vacuum_one_page`: horizon xid u32, then in 15 ntuples i32,
//!   from 16 ntuples u16 and isCatalogRel; the offsets follow at byte 8.
//!
//! The write page's block data of MOVE_PAGE_CONTENTS and SQUEEZE_PAGE is
//! `ntups` target offsets, then the tuples, each `MAXALIGN(IndexTupleSize)`
//! bytes and added with that length; a delete list is u16 offsets.

use super::page::{self, meta, Meta, Opaque, INVALID, LH_BUCKET_NEEDS_SPLIT_CLEANUP};
use super::page::{LH_PAGE_HAS_DEAD_TUPLES, LH_UNUSED_PAGE};
use super::{main_data, name, unexpected_block};
use crate::redo::{bufpage, Ctx, Fault};
use crate::PgMajorVersion;

/// `sizeof(IndexTupleData)`; `t_info`'s low 13 bits are the tuple size.
const INDEX_TUPLE_HEADER: usize = 8;
const INDEX_SIZE_MASK: u16 = 0x1FFF;

/// Offsets stored as consecutive little-endian u16.
fn offsets(ctx: &Ctx, data: &[u8]) -> Result<Vec<u16>, Fault> {
    if !data.len().is_multiple_of(2) {
        return Err(Fault::malformed(format!(
            "hash {}: odd offset list of {} bytes",
            name(ctx),
            data.len()
        )));
    }
    Ok(data.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect())
}

/// Add the logged tuples of a write page at their logged offsets
/// (`ntups` offsets, then the tuples).
fn add_tuples(page: &mut [u8], ctx: &Ctx, ntups: usize) -> Result<(), Fault> {
    let data = ctx.rec.block_data;
    let Some(offs) = data.get(..2 * ntups) else {
        return Err(Fault::malformed(format!(
            "hash {}: {} bytes for {ntups} offsets",
            name(ctx),
            data.len()
        )));
    };
    let offs = offsets(ctx, offs)?;
    let mut rest = &data[2 * ntups..];
    let mut added = 0;
    while !rest.is_empty() {
        let short = || Fault::malformed(format!("hash {}: tuple {added} is cut short", name(ctx)));
        let Some(&off) = offs.get(added) else {
            return Err(Fault::malformed(format!("hash {}: more than {ntups} tuples", name(ctx))));
        };
        let header = rest.get(..INDEX_TUPLE_HEADER).ok_or_else(short)?;
        let size = (u16::from_le_bytes([header[6], header[7]]) & INDEX_SIZE_MASK) as usize;
        let size = bufpage::maxalign(size);
        if size < INDEX_TUPLE_HEADER {
            return Err(Fault::malformed(format!(
                "hash {}: index tuple of {size} bytes",
                name(ctx)
            )));
        }
        let tuple = rest.get(..size).ok_or_else(short)?;
        bufpage::add_item(page, tuple, off, false, false)?;
        rest = &rest[size..];
        added += 1;
    }
    if added != ntups {
        return Err(Fault::malformed(format!("hash {}: {added} tuples, not {ntups}", name(ctx))));
    }
    Ok(())
}

/// A primary bucket page the record registers only for its cleanup lock:
/// it stays as it is, but it must be a hash page.
fn locked_only(page: &[u8]) -> Result<(), Fault> {
    Opaque::read(page).map(|_| ())
}

/// Delete the items the target block's data lists.
fn delete_logged(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let offs = offsets(ctx, ctx.rec.block_data)?;
    bufpage::index_multi_delete(page, &offs)
}

/// MOVE_PAGE_CONTENTS: tuples move from block 2 to block 1 (block 0 is
/// only locked).
pub(super) fn move_page_contents(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let ntups = page::u16_at(main_data(ctx, 3)?, 0)? as usize;
    match block {
        0 => locked_only(page),
        1 => add_tuples(page, ctx, ntups),
        2 => delete_logged(page, ctx),
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// SQUEEZE_PAGE: tuples move to block 1 from overflow page block 2, which
/// is freed and unlinked from its neighbours (blocks 3 and 4, or block 1
/// when that is its predecessor); its bitmap bit (block 5) is cleared and
/// the metapage (block 6) gets the new first free bit.
pub(super) fn squeeze_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let data = main_data(ctx, 12)?;
    let (prevblkno, nextblkno) = (page::u32_at(data, 0)?, page::u32_at(data, 4)?);
    let ntups = page::u16_at(data, 8)? as usize;
    let is_prev_same_wrt = data[11] != 0;
    match block {
        0 => locked_only(page),
        1 => {
            if ntups > 0 {
                add_tuples(page, ctx, ntups)?;
            }
            if is_prev_same_wrt {
                page::modify_opaque(page, |o| o.next = nextblkno)?;
            }
            Ok(())
        }
        2 => {
            let o = Opaque { prev: INVALID, next: INVALID, bucket: INVALID, flag: LH_UNUSED_PAGE };
            page::init_page(page, o)
        }
        3 if !is_prev_same_wrt => page::modify_opaque(page, |o| o.next = nextblkno),
        4 => page::modify_opaque(page, |o| o.prev = prevblkno),
        5 => page::set_bitmap_bit(page, block_u32(ctx)?, false),
        6 => {
            let firstfree = block_u32(ctx)?;
            Meta::open(page)?.set_u32(meta::FIRSTFREE, firstfree);
            Ok(())
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// The target block's data as one u32.
fn block_u32(ctx: &Ctx) -> Result<u32, Fault> {
    let data = ctx.rec.block_data;
    if data.len() != 4 {
        return Err(Fault::malformed(format!(
            "hash {}: {} bytes of block data, not 4",
            name(ctx),
            data.len()
        )));
    }
    page::u32_at(data, 0)
}

/// DELETE: block 1 loses the logged items (block 0 is only locked).
pub(super) fn delete(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let clear_dead_marking = main_data(ctx, 2)?[0] != 0;
    match block {
        0 => locked_only(page),
        1 => {
            delete_logged(page, ctx)?;
            if clear_dead_marking {
                page::modify_opaque(page, |o| o.flag &= !LH_PAGE_HAS_DEAD_TUPLES)?;
            }
            Ok(())
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// SPLIT_CLEANUP: the primary bucket page loses NEEDS_SPLIT_CLEANUP.
pub(super) fn split_cleanup(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    page::modify_opaque(page, |o| o.flag &= !LH_BUCKET_NEEDS_SPLIT_CLEANUP)
}

/// UPDATE_META_PAGE: the metapage's tuple count after a vacuum.
pub(super) fn update_meta_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let ntuples = page::f64_at(main_data(ctx, 8)?, 0)?;
    Meta::open(page)?.set_ntuples(ntuples);
    Ok(())
}

/// VACUUM_ONE_PAGE: block 0 loses its dead items (listed in the main
/// data) and the HAS_DEAD_TUPLES hint, block 1 (the metapage) their count.
pub(super) fn vacuum_one_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let data = main_data(ctx, 8)?;
    let ntuples = match ctx.version {
        PgMajorVersion::V15 => {
            let n = i32::from_le_bytes(data[4..8].try_into().expect("4 bytes"));
            usize::try_from(n)
                .map_err(|_| Fault::malformed(format!("hash VACUUM_ONE_PAGE of {n} tuples")))?
        }
        _ => page::u16_at(data, 4)? as usize,
    };
    match block {
        0 => {
            let Some(list) = data.get(8..8 + 2 * ntuples) else {
                return Err(Fault::malformed(format!(
                    "hash VACUUM_ONE_PAGE: {} bytes of main data for {ntuples} offsets",
                    data.len()
                )));
            };
            bufpage::index_multi_delete(page, &offsets(ctx, list)?)?;
            page::modify_opaque(page, |o| o.flag &= !LH_PAGE_HAS_DEAD_TUPLES)
        }
        1 => {
            let mut m = Meta::open(page)?;
            m.set_ntuples(m.ntuples() - ntuples as f64);
            Ok(())
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}
