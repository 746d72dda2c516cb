//! SP-GiST page and tuple layout shared by every record kind
//! (`spgist_private.h`, `spgutils.c`, `spgdoinsert.c`, `spgxlog.c`),
//! identical in PostgreSQL 15-18 for 8 KB pages on a 64-bit build:
//! - the special space `SpGistPageOpaqueData` (8 bytes): flags, the
//!   redirect and placeholder counts, the page id `SPGIST_PAGE_ID`;
//! - tuples begin with a 32-bit word whose two low bits are the state
//!   (live, redirect, dead, placeholder); a leaf or dead tuple keeps its
//!   size in the other 30 bits, an inner tuple its node count and prefix
//!   size there and its size in the `u16` at byte 4. A leaf tuple's
//!   `t_info` (byte 4) holds the next offset of its chain in 14 bits;
//! - an inner tuple's nodes (index tuples whose TID is the downlink)
//!   follow its 8-byte header and its prefix;
//! - dead tuples (`spgFormDeadTuple`): 16 bytes, a redirect pointing at
//!   the moved tuple with the record's redirect xid, any other state with an
//!   invalid pointer and no xid;
//! - `addOrReplaceTuple` and `spgPageIndexMultiDelete`, the two ways redo
//!   puts tuples on a page, with the counters they keep.
//!
//! Tuples in a record's main data are unaligned and back to back; each is
//! as long as its header says. Every read is bounds-checked: short or
//! inconsistent input is a [`Fault`], never a panic.

use crate::consts::SIZE_OF_PAGE_HEADER_DATA;
use crate::redo::{bufpage, Fault};

/// `sizeof(SpGistPageOpaqueData)`.
pub(super) const OPAQUE_SIZE: usize = 8;
/// `SPGIST_PAGE_ID`.
pub(super) const SPGIST_PAGE_ID: u16 = 0xFF82;

pub(super) const SPGIST_META: u16 = 1 << 0;
pub(super) const SPGIST_LEAF: u16 = 1 << 2;
pub(super) const SPGIST_NULLS: u16 = 1 << 3;

/// Tuple states (`tupstate`).
pub(super) const SPGIST_REDIRECT: u32 = 1;
pub(super) const SPGIST_DEAD: u32 = 2;
pub(super) const SPGIST_PLACEHOLDER: u32 = 3;

/// `SGDTSIZE`: a dead tuple.
const DEAD_TUPLE_SIZE: usize = 16;
/// `SGITHDRSZ`: an inner tuple's header.
const INNER_HEADER_SIZE: usize = 8;
/// `InvalidBlockNumber`.
pub(super) const INVALID_BLOCK: u32 = u32::MAX;
/// `SGLT_GET_NEXTOFFSET`'s mask.
const NEXT_OFFSET_MASK: u16 = 0x3FFF;

/// `SpGistPageOpaqueData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opaque {
    pub flags: u16,
    pub n_redirection: u16,
    pub n_placeholder: u16,
    pub page_id: u16,
}

impl Opaque {
    /// The special space of an SP-GiST page (exactly 8 bytes).
    pub fn read(page: &[u8]) -> Result<Opaque, Fault> {
        let s = bufpage::special(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("SP-GiST special space of {} bytes", s.len())));
        }
        Ok(Opaque {
            flags: u16_at(s, 0)?,
            n_redirection: u16_at(s, 2)?,
            n_placeholder: u16_at(s, 4)?,
            page_id: u16_at(s, 6)?,
        })
    }

    pub fn write(&self, page: &mut [u8]) -> Result<(), Fault> {
        let s = bufpage::special_mut(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("SP-GiST special space of {} bytes", s.len())));
        }
        for (i, v) in [self.flags, self.n_redirection, self.n_placeholder, self.page_id]
            .into_iter()
            .enumerate()
        {
            s[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

/// Update the special space in place.
pub(super) fn modify_opaque(page: &mut [u8], f: impl FnOnce(&mut Opaque)) -> Result<(), Fault> {
    let mut o = Opaque::read(page)?;
    f(&mut o);
    o.write(page)
}

/// `SpGistInitPage` with `flags`.
pub(super) fn init_page(page: &mut [u8], flags: u16) -> Result<(), Fault> {
    bufpage::page_init(page, OPAQUE_SIZE);
    let opaque = Opaque { flags, n_redirection: 0, n_placeholder: 0, page_id: SPGIST_PAGE_ID };
    opaque.write(page)
}

/// `SPGIST_LEAF`, with `SPGIST_NULLS` for the nulls tree.
pub(super) fn leaf_flags(stores_nulls: bool) -> u16 {
    SPGIST_LEAF | if stores_nulls { SPGIST_NULLS } else { 0 }
}

/// Whether the page is the metapage (metadata below `pd_lower`).
pub(super) fn is_meta(page: &[u8]) -> bool {
    page.len() > SIZE_OF_PAGE_HEADER_DATA
        && Opaque::read(page).is_ok_and(|o| o.flags & SPGIST_META != 0)
}

/// A tuple's state: the two low bits of its first word.
pub(super) fn tuple_state(t: &[u8]) -> Result<u32, Fault> {
    Ok(u32_at(t, 0)? & 0x3)
}

/// The leaf tuple at the start of `data` (its size is the header's).
pub(super) fn leaf_tuple(data: &[u8]) -> Result<&[u8], Fault> {
    let size = (u32_at(data, 0)? >> 2) as usize;
    sized(data, size, "leaf")
}

/// The inner tuple at the start of `data` (its size is the header's).
pub(super) fn inner_tuple(data: &[u8]) -> Result<&[u8], Fault> {
    let size = u16_at(data, 4)? as usize;
    sized(data, size, "inner")
}

fn sized<'a>(data: &'a [u8], size: usize, what: &str) -> Result<&'a [u8], Fault> {
    if size < INNER_HEADER_SIZE || size > data.len() {
        return Err(Fault::malformed(format!(
            "a {size}-byte {what} tuple in the {} bytes left",
            data.len()
        )));
    }
    Ok(&data[..size])
}

/// `n` leaf tuples back to back at the start of `data`.
pub(super) fn leaf_tuples(data: &[u8], n: usize) -> Result<Vec<&[u8]>, Fault> {
    let mut out = Vec::with_capacity(n);
    let mut rest = data;
    for _ in 0..n {
        let t = leaf_tuple(rest)?;
        rest = &rest[t.len()..];
        out.push(t);
    }
    Ok(out)
}

/// `spgFormDeadTuple`: a dead tuple of `state`; a redirect points at
/// (`blkno`, `offnum`) and carries `xid`.
pub(super) fn dead_tuple(state: u32, blkno: u32, offnum: u16, xid: u32) -> [u8; DEAD_TUPLE_SIZE] {
    let mut t = [0u8; DEAD_TUPLE_SIZE];
    t[0..4].copy_from_slice(&(state | (DEAD_TUPLE_SIZE as u32) << 2).to_le_bytes());
    let (blkno, offnum, xid) =
        if state == SPGIST_REDIRECT { (blkno, offnum, xid) } else { (INVALID_BLOCK, 0, 0) };
    set_item_pointer(&mut t[6..12], blkno, offnum);
    t[12..16].copy_from_slice(&xid.to_le_bytes());
    t
}

/// `ItemPointerSet` on the 6 bytes of `tid`.
fn set_item_pointer(tid: &mut [u8], blkno: u32, offnum: u16) {
    tid[0..2].copy_from_slice(&((blkno >> 16) as u16).to_le_bytes());
    tid[2..4].copy_from_slice(&(blkno as u16).to_le_bytes());
    tid[4..6].copy_from_slice(&offnum.to_le_bytes());
}

/// `SGLT_SET_NEXTOFFSET` on the leaf tuple at `off`.
pub(super) fn set_next_offset(page: &mut [u8], off: u16, next: u16) -> Result<(), Fault> {
    let t = bufpage::item_mut(page, off)?;
    let info = u16_at(t, 4).map_err(|_| Fault::page(format!("leaf tuple {off} too short")))?;
    let info = info & !NEXT_OFFSET_MASK | next & NEXT_OFFSET_MASK;
    t[4..6].copy_from_slice(&info.to_le_bytes());
    Ok(())
}

/// `spgUpdateNodeLink`: node `node` of the inner tuple at `off` now
/// points at (`blkno`, `offnum`).
pub(super) fn update_node_link(
    page: &mut [u8],
    off: u16,
    node: u16,
    blkno: u32,
    offnum: u16,
) -> Result<(), Fault> {
    let t = bufpage::item_mut(page, off)?;
    let bad = |what: String| Fault::page(format!("inner tuple {off}: {what}"));
    let word = u32_at(t, 0).map_err(|_| bad("too short".into()))?;
    let (n_nodes, prefix_size) = ((word >> 3) & 0x1FFF, (word >> 16) as usize);
    if node as u32 >= n_nodes {
        return Err(bad(format!("no node {node} among {n_nodes}")));
    }
    let mut at = INNER_HEADER_SIZE + prefix_size;
    for _ in 0..node {
        let size =
            (u16_at(t, at + 6).map_err(|_| bad(format!("node past {at}")))? & 0x1FFF) as usize;
        if size == 0 {
            return Err(bad(format!("a node of 0 bytes at {at}")));
        }
        at += size;
    }
    match t.get_mut(at..at + 6) {
        Some(tid) => {
            set_item_pointer(tid, blkno, offnum);
            Ok(())
        }
        None => Err(bad(format!("node {node} at {at} ends past the tuple"))),
    }
}

/// `addOrReplaceTuple`: put `tuple` at `off`, which is one past the end or
/// a placeholder (then replaced, one placeholder fewer).
pub(super) fn add_or_replace(page: &mut [u8], tuple: &[u8], off: u16) -> Result<(), Fault> {
    if off <= bufpage::max_offset(page) {
        let state = tuple_state(bufpage::item(page, off)?)
            .map_err(|_| Fault::page(format!("tuple {off} too short")))?;
        if state != SPGIST_PLACEHOLDER {
            return Err(Fault::page(format!("tuple {off} to replace is not a placeholder")));
        }
        let mut o = Opaque::read(page)?;
        o.n_placeholder = o
            .n_placeholder
            .checked_sub(1)
            .ok_or_else(|| Fault::page(format!("placeholder {off} on a page that counts none")))?;
        o.write(page)?;
        bufpage::index_tuple_delete(page, off)?;
    }
    add_at(page, tuple, off)
}

/// `PageAddItem` at `off` that must land there (shifting later items).
pub(super) fn add_at(page: &mut [u8], tuple: &[u8], off: u16) -> Result<(), Fault> {
    let got = bufpage::add_item(page, tuple, off, false, false)?;
    if got != off {
        return Err(Fault::page(format!("tuple meant for offset {off} landed at {got}")));
    }
    Ok(())
}

/// `PageIndexTupleDelete` then `PageAddItem` at the same offset.
pub(super) fn replace_at(page: &mut [u8], tuple: &[u8], off: u16) -> Result<(), Fault> {
    bufpage::index_tuple_delete(page, off)?;
    add_at(page, tuple, off)
}

/// `spgPageIndexMultiDelete`: the items at `offs` become dead tuples, the
/// first listed of state `first`, the others of `rest`; redirects point
/// at (`blkno`, `offnum`) with `xid`. Counters follow.
pub(super) fn multi_delete(
    page: &mut [u8],
    offs: &[u16],
    (first, rest): (u32, u32),
    (blkno, offnum, xid): (u32, u16, u32),
) -> Result<(), Fault> {
    let Some(&first_item) = offs.first() else { return Ok(()) };
    let mut sorted = offs.to_vec();
    sorted.sort_unstable();
    bufpage::index_multi_delete(page, &sorted)?;
    let mut o = Opaque::read(page)?;
    for &off in &sorted {
        let state = if off == first_item { first } else { rest };
        add_at(page, &dead_tuple(state, blkno, offnum, xid), off)?;
        match state {
            SPGIST_REDIRECT => o.n_redirection = o.n_redirection.wrapping_add(1),
            SPGIST_PLACEHOLDER => o.n_placeholder = o.n_placeholder.wrapping_add(1),
            _ => {}
        }
    }
    o.write(page)
}

/// `n` offset numbers at byte `at` of `data`.
pub(super) fn offsets(data: &[u8], at: usize, n: usize) -> Result<Vec<u16>, Fault> {
    match data.get(at..at + 2 * n) {
        Some(b) => Ok(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
        None => Err(Fault::malformed(format!("{n} offsets at {at} of {} bytes", data.len()))),
    }
}

/// The clamped little-endian readers every decoder here uses.
pub(super) fn u16_at(b: &[u8], off: usize) -> Result<u16, Fault> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| Fault::malformed(format!("2 bytes at {off} of {}", b.len())))
}

pub(super) fn u32_at(b: &[u8], off: usize) -> Result<u32, Fault> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| Fault::malformed(format!("4 bytes at {off} of {}", b.len())))
}

/// A `bool` field at `off`.
pub(super) fn flag_at(b: &[u8], off: usize) -> Result<bool, Fault> {
    b.get(off)
        .map(|&v| v != 0)
        .ok_or_else(|| Fault::malformed(format!("1 byte at {off} of {}", b.len())))
}
