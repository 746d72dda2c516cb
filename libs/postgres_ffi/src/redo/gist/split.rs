//! PAGE_SPLIT redo (`gistRedoPageSplitRecord`), the same in PostgreSQL
//! 15-18.
//!
//! Main data `gistxlogPageSplit` (24 bytes): the original page's right
//! link (0), its NSN (8), whether it was a leaf (16), the number of pages
//! (18) and whether to set `F_FOLLOW_RIGHT` (20). Block ids 1..=npage are
//! the split pages, in right-link order, each will_init, each with data
//! `int num` then `num` tuples; block 1 is the original page. Block 0,
//! when present, is the left half of a lower split whose downlink went
//! into the split page: NSN = the record's end LSN, `F_FOLLOW_RIGHT`
//! cleared.
//!
//! Each page is rebuilt from scratch: a leaf if the original was one
//! (never the root), its tuples added in order, NSN = the original's. A
//! root split (block 1 is block 0 of the relation) keeps the root with no
//! right link and no page `F_FOLLOW_RIGHT`; otherwise each page links to
//! the next block's page (block `id + 1`'s tag), the last to the
//! original's right link, and all but the last get `F_FOLLOW_RIGHT` when
//! the record says so.

use super::page::{self, Opaque, F_FOLLOW_RIGHT, F_LEAF, INVALID_BLOCK, ROOT_BLKNO};
use super::{block_tag, unexpected_block};
use crate::redo::{bufpage, Ctx, Fault};

/// `sizeof(gistxlogPageSplit)`.
const PAGE_SPLIT_SIZE: usize = 24;

/// `gistxlogPageSplit`.
struct XlSplit {
    origrlink: u32,
    orignsn: u64,
    origleaf: bool,
    npage: u16,
    markfollowright: bool,
}

impl XlSplit {
    fn decode(d: &[u8]) -> Result<XlSplit, Fault> {
        if d.len() < PAGE_SPLIT_SIZE {
            return Err(Fault::malformed(format!("gistxlogPageSplit of {} bytes", d.len())));
        }
        Ok(XlSplit {
            origrlink: page::u32_at(d, 0)?,
            orignsn: page::u64_at(d, 8)?,
            origleaf: d[16] != 0,
            npage: page::u16_at(d, 18)?,
            markfollowright: d[20] != 0,
        })
    }
}

pub(super) fn page_split(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    let xl = XlSplit::decode(ctx.rec.main_data)?;
    match block {
        0 => page::clear_follow_right(page, ctx.lsn.0),
        b if (b as u16) <= xl.npage => split_page(page, ctx, &xl, b),
        _ => Err(unexpected_block(ctx, block)),
    }
}

/// Split page `block` (1..=npage) rebuilt from its data.
fn split_page(page: &mut [u8], ctx: &Ctx, xl: &XlSplit, block: u8) -> Result<(), Fault> {
    if !ctx.rec.will_init() {
        return Err(Fault::malformed(format!("GiST split page (block id {block}) not will_init")));
    }
    let blkno = ctx.tag.blkno;
    let is_root_split = block_tag(ctx, 1)?.blkno == ROOT_BLKNO;
    if blkno == ROOT_BLKNO && block != 1 {
        return Err(Fault::malformed(format!("GiST split: the root at block id {block}, not 1")));
    }
    let last = block as u16 == xl.npage;
    let mut opaque = Opaque::new(if xl.origleaf && blkno != ROOT_BLKNO { F_LEAF } else { 0 });
    opaque.nsn = xl.orignsn;
    if blkno != ROOT_BLKNO {
        opaque.rightlink = if last { xl.origrlink } else { block_tag(ctx, block + 1)?.blkno };
        if !last && !is_root_split && xl.markfollowright {
            opaque.flags |= F_FOLLOW_RIGHT;
        }
    } else {
        opaque.rightlink = INVALID_BLOCK;
    }
    page::init_page(page, opaque)?;
    let data = ctx.rec.block_data;
    let num = page::u32_at(data, 0)? as usize;
    let tuples = page::tuples(&data[4..])?;
    if tuples.len() != num {
        return Err(Fault::malformed(format!(
            "GiST split page says {num} tuples, its data holds {}",
            tuples.len()
        )));
    }
    for (i, tuple) in tuples.iter().enumerate() {
        bufpage::add_item(page, tuple, i as u16 + 1, false, false)?;
    }
    Ok(())
}
