//! GiST page layout shared by every record kind (`gist.h`, `gistutil.c`),
//! identical in PostgreSQL 15-18 for 8 KB pages:
//! - the special space `GISTPageOpaqueData` (16 bytes): the NSN as a
//!   `PageXLogRecPtr` (high word first), the right link, the flags and the
//!   page id `GIST_PAGE_ID`;
//! - `gistinitpage`: an empty page with that special space, no right link;
//! - a deleted page (`GistPageSetDeleted`): `F_DELETED`, and the full xid
//!   that deleted it right after the header, `pd_lower` just past it;
//! - index tuples (`IndexTupleData`: TID, `t_info` with the size in its
//!   low 13 bits) as records carry them, back to back.
//!
//! Every read is bounds-checked: short or inconsistent input is a
//! [`Fault`], never a panic.

use crate::consts::SIZE_OF_PAGE_HEADER_DATA;
use crate::page::PageHeader;
use crate::redo::{bufpage, Fault};

/// `sizeof(GISTPageOpaqueData)`.
pub(super) const OPAQUE_SIZE: usize = 16;
/// `GIST_PAGE_ID`.
pub(super) const GIST_PAGE_ID: u16 = 0xFF81;
/// `InvalidBlockNumber`: no right link.
pub(super) const INVALID_BLOCK: u32 = u32::MAX;
/// `GIST_ROOT_BLKNO`.
pub(super) const ROOT_BLKNO: u32 = 0;

pub(super) const F_LEAF: u16 = 1 << 0;
pub(super) const F_DELETED: u16 = 1 << 1;
pub(super) const F_TUPLES_DELETED: u16 = 1 << 2;
pub(super) const F_FOLLOW_RIGHT: u16 = 1 << 3;
pub(super) const F_HAS_GARBAGE: u16 = 1 << 4;

/// `MAXALIGN(SizeOfPageHeaderData)`: where `PageGetContents` starts.
const CONTENTS_OFF: usize = 24;
/// `sizeof(GISTDeletedPageContents)`: one `FullTransactionId`.
const DELETED_CONTENTS_SIZE: usize = 8;
/// `sizeof(IndexTupleData)`.
pub(super) const INDEX_TUPLE_HEADER: usize = 8;
/// `INDEX_SIZE_MASK`.
const INDEX_SIZE_MASK: u16 = 0x1FFF;

/// `GISTPageOpaqueData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opaque {
    pub nsn: u64,
    pub rightlink: u32,
    pub flags: u16,
    pub page_id: u16,
}

impl Opaque {
    /// What `gistinitpage` writes.
    pub fn new(flags: u16) -> Opaque {
        Opaque { nsn: 0, rightlink: INVALID_BLOCK, flags, page_id: GIST_PAGE_ID }
    }

    /// The special space of a GiST page (exactly 16 bytes).
    pub fn read(page: &[u8]) -> Result<Opaque, Fault> {
        let s = special(page)?;
        let nsn = (u32_at(s, 0)? as u64) << 32 | u32_at(s, 4)? as u64;
        Ok(Opaque { nsn, rightlink: u32_at(s, 8)?, flags: u16_at(s, 12)?, page_id: u16_at(s, 14)? })
    }

    pub fn write(&self, page: &mut [u8]) -> Result<(), Fault> {
        let s = bufpage::special_mut(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("GiST special space of {} bytes", s.len())));
        }
        s[0..4].copy_from_slice(&((self.nsn >> 32) as u32).to_le_bytes());
        s[4..8].copy_from_slice(&(self.nsn as u32).to_le_bytes());
        s[8..12].copy_from_slice(&self.rightlink.to_le_bytes());
        s[12..14].copy_from_slice(&self.flags.to_le_bytes());
        s[14..16].copy_from_slice(&self.page_id.to_le_bytes());
        Ok(())
    }
}

fn special(page: &[u8]) -> Result<&[u8], Fault> {
    let s = bufpage::special(page)?;
    if s.len() != OPAQUE_SIZE {
        return Err(Fault::page(format!("GiST special space of {} bytes", s.len())));
    }
    Ok(s)
}

/// Update the special space in place.
pub(super) fn modify_opaque(page: &mut [u8], f: impl FnOnce(&mut Opaque)) -> Result<(), Fault> {
    let mut o = Opaque::read(page)?;
    f(&mut o);
    o.write(page)
}

/// `gistinitpage`, then the given special space.
pub(super) fn init_page(page: &mut [u8], opaque: Opaque) -> Result<(), Fault> {
    bufpage::page_init(page, OPAQUE_SIZE);
    opaque.write(page)
}

/// `gistRedoClearFollowRight` on a page: NSN = the record's end LSN,
/// `F_FOLLOW_RIGHT` cleared.
pub(super) fn clear_follow_right(page: &mut [u8], lsn: u64) -> Result<(), Fault> {
    modify_opaque(page, |o| {
        o.nsn = lsn;
        o.flags &= !F_FOLLOW_RIGHT;
    })
}

/// `GistPageSetDeleted` on an empty page.
pub(super) fn set_deleted(page: &mut [u8], delete_xid: u64) -> Result<(), Fault> {
    let nitems = bufpage::max_offset(page);
    if nitems != 0 {
        return Err(Fault::page(format!("deleting a GiST page that holds {nitems} items")));
    }
    modify_opaque(page, |o| o.flags |= F_DELETED)?;
    let mut h = PageHeader::decode(page);
    let lower = CONTENTS_OFF + DELETED_CONTENTS_SIZE;
    if (h.upper as usize) < lower {
        return Err(Fault::page(format!("pd_upper {} below the deleted page's xid", h.upper)));
    }
    h.lower = lower as u16;
    h.encode(page);
    page[CONTENTS_OFF..lower].copy_from_slice(&delete_xid.to_le_bytes());
    Ok(())
}

/// Whether the page is a deleted one (no line pointers below `pd_lower`).
pub(super) fn is_deleted(page: &[u8]) -> bool {
    page.len() > SIZE_OF_PAGE_HEADER_DATA
        && Opaque::read(page).is_ok_and(|o| o.flags & F_DELETED != 0)
}

/// The index tuples stored back to back in `data`, each
/// `IndexTupleSize` bytes long; anything left over is a fault.
pub(super) fn tuples(data: &[u8]) -> Result<Vec<&[u8]>, Fault> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let size = (u16_at(rest, 6)? & INDEX_SIZE_MASK) as usize;
        if size < INDEX_TUPLE_HEADER || size > rest.len() {
            return Err(Fault::malformed(format!(
                "an index tuple of {size} bytes in the {} bytes left",
                rest.len()
            )));
        }
        let (tuple, after) = rest.split_at(size);
        out.push(tuple);
        rest = after;
    }
    Ok(out)
}

/// `n` offset numbers at the start of `data`, and what follows them.
pub(super) fn offsets(data: &[u8], n: usize) -> Result<(Vec<u16>, &[u8]), Fault> {
    let len = 2 * n;
    if data.len() < len {
        return Err(Fault::malformed(format!("{n} offsets in {} bytes", data.len())));
    }
    let (head, rest) = data.split_at(len);
    Ok((head.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect(), rest))
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

pub(super) fn u64_at(b: &[u8], off: usize) -> Result<u64, Fault> {
    Ok(u32_at(b, off)? as u64 | (u32_at(b, off + 4)? as u64) << 32)
}
