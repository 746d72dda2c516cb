//! Hash records that build the index and grow it: INIT_META_PAGE,
//! INIT_BITMAP_PAGE, INSERT, ADD_OVFL_PAGE, SPLIT_ALLOCATE_PAGE and
//! SPLIT_COMPLETE (`hash_xlog_init_meta_page` ... `hash_xlog_split_complete`),
//! the same in PostgreSQL 15-18.
//!
//! Main data layouts (little-endian, C struct padding):
//! - `xl_hash_init_meta_page`: num_tuples f64, procid u32, ffactor u16 (14);
//! - `xl_hash_init_bitmap_page`: bmsize u16 (2);
//! - `xl_hash_insert`: offnum u16 (2);
//! - `xl_hash_add_ovfl_page`: bmsize u16, bmpage_found bool (3);
//! - `xl_hash_split_allocate_page`: new_bucket u32, old and new bucket
//!   flags u16, flags u8 (9);
//! - `xl_hash_split_complete`: old and new bucket flags u16 (4).

use super::page::{self, meta, Meta, Opaque, INVALID, LH_OVERFLOW_PAGE};
use super::{block_number, main_data, unexpected_block};
use crate::redo::{bufpage, Ctx, Fault};

/// `XLH_SPLIT_META_UPDATE_MASKS`.
const SPLIT_META_UPDATE_MASKS: u8 = 1 << 0;
/// `XLH_SPLIT_META_UPDATE_SPLITPOINT`.
const SPLIT_META_UPDATE_SPLITPOINT: u8 = 1 << 1;

/// Block data that must be exactly one u32.
fn data_u32(ctx: &Ctx, what: &str) -> Result<u32, Fault> {
    let data = ctx.rec.block_data;
    if data.len() != 4 {
        return Err(Fault::malformed(format!(
            "hash {what}: {} bytes of block data, not 4",
            data.len()
        )));
    }
    page::u32_at(data, 0)
}

/// The metapage must be block 0 of the index.
fn check_meta_block(ctx: &Ctx) -> Result<(), Fault> {
    if ctx.tag.blkno != 0 {
        return Err(Fault::malformed(format!("hash metapage at block {}", ctx.tag.blkno)));
    }
    Ok(())
}

/// INIT_META_PAGE: block 0, the metapage, from scratch.
pub(super) fn init_meta_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    check_meta_block(ctx)?;
    let data = main_data(ctx, 14)?;
    let num_tuples = page::f64_at(data, 0)?;
    page::init_meta(page, num_tuples, page::u32_at(data, 8)?, page::u16_at(data, 12)?)
}

/// INIT_BITMAP_PAGE: block 0 the new bitmap page, block 1 the metapage,
/// which lists it after the initial buckets.
pub(super) fn init_bitmap_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let bmsize = page::u16_at(main_data(ctx, 2)?, 0)?;
    match block {
        0 => page::init_bitmap(page, bmsize),
        1 => {
            check_meta_block(ctx)?;
            let mut m = Meta::open(page)?;
            let num_buckets = m.u32(meta::MAXBUCKET).wrapping_add(1);
            m.push_bitmap(num_buckets.wrapping_add(1))
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// INSERT: block 0 gets the tuple at the logged offset, block 1 (the
/// metapage) counts it.
pub(super) fn insert(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    match block {
        0 => {
            let offnum = page::u16_at(main_data(ctx, 2)?, 0)?;
            bufpage::add_item(page, ctx.rec.block_data, offnum, false, false)?;
            Ok(())
        }
        1 => {
            check_meta_block(ctx)?;
            let mut m = Meta::open(page)?;
            m.set_ntuples(m.ntuples() + 1.0);
            Ok(())
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// ADD_OVFL_PAGE: see the table in the module above.
pub(super) fn add_ovfl_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let data = main_data(ctx, 3)?;
    let (bmsize, bmpage_found) = (page::u16_at(data, 0)?, data[2] != 0);
    match block {
        0 => {
            let bucket = data_u32(ctx, "ADD_OVFL_PAGE bucket")?;
            let prev = block_number(ctx, 1)?;
            let o = Opaque { prev, next: INVALID, bucket, flag: LH_OVERFLOW_PAGE };
            page::init_page(page, o)
        }
        1 => {
            let next = block_number(ctx, 0)?;
            page::modify_opaque(page, |o| o.next = next)
        }
        2 => page::set_bitmap_bit(page, data_u32(ctx, "ADD_OVFL_PAGE bitmap bit")?, true),
        3 => page::init_bitmap(page, bmsize),
        4 => {
            check_meta_block(ctx)?;
            let firstfree = data_u32(ctx, "ADD_OVFL_PAGE firstfree")?;
            let mut m = Meta::open(page)?;
            m.set_u32(meta::FIRSTFREE, firstfree);
            if !bmpage_found {
                let spare = Meta::spare(m.u32(meta::OVFLPOINT))?;
                let mut added = 1;
                if let Some(new_map) = ctx.rec.block(3) {
                    m.push_bitmap(new_map.tag.blkno)?;
                    added += 1;
                }
                m.set_u32(spare, m.u32(spare).wrapping_add(added));
            }
            Ok(())
        }
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// SPLIT_ALLOCATE_PAGE: block 0 the old bucket's primary page (new flags,
/// `hasho_prevblkno` set to the new bucket number), block 1 the new
/// bucket's primary page, block 2 the metapage.
pub(super) fn split_allocate_page(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let data = main_data(ctx, 9)?;
    let new_bucket = page::u32_at(data, 0)?;
    let (old_flag, new_flag) = (page::u16_at(data, 4)?, page::u16_at(data, 6)?);
    match block {
        0 => page::modify_opaque(page, |o| {
            o.flag = old_flag;
            o.prev = new_bucket;
        }),
        1 => {
            let o = Opaque { prev: new_bucket, next: INVALID, bucket: new_bucket, flag: new_flag };
            page::init_page(page, o)
        }
        2 => split_meta(page, ctx, new_bucket, data[8]),
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// The metapage of SPLIT_ALLOCATE_PAGE: the new max bucket, then per
/// `flags` the new masks and the new splitpoint's spare count.
fn split_meta(page: &mut [u8], ctx: &Ctx, new_bucket: u32, flags: u8) -> Result<(), Fault> {
    check_meta_block(ctx)?;
    let data = ctx.rec.block_data;
    let mut at = 0;
    let mut next = || {
        let v = page::u32_at(data, at);
        at += 4;
        v
    };
    let masks = match flags & SPLIT_META_UPDATE_MASKS {
        0 => None,
        _ => Some((next()?, next()?)),
    };
    let splitpoint = match flags & SPLIT_META_UPDATE_SPLITPOINT {
        0 => None,
        _ => Some((next()?, next()?)),
    };
    let mut m = Meta::open(page)?;
    m.set_u32(meta::MAXBUCKET, new_bucket);
    if let Some((lowmask, highmask)) = masks {
        m.set_u32(meta::LOWMASK, lowmask);
        m.set_u32(meta::HIGHMASK, highmask);
    }
    if let Some((ovflpoint, ovflpages)) = splitpoint {
        m.set_u32(Meta::spare(ovflpoint)?, ovflpages);
        m.set_u32(meta::OVFLPOINT, ovflpoint);
    }
    Ok(())
}

/// SPLIT_COMPLETE: the final flags of the old (block 0) and new (block 1)
/// buckets' primary pages.
pub(super) fn split_complete(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let data = main_data(ctx, 4)?;
    let flag = match block {
        0 => page::u16_at(data, 0)?,
        1 => page::u16_at(data, 2)?,
        _ => return Err(unexpected_block(ctx, block)),
    };
    page::modify_opaque(page, |o| o.flag = flag)
}
