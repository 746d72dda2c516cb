//! GIN page layout shared by every record kind (`ginblock.h`,
//! `ginutil.c`, `gindatapage.c`), identical in PostgreSQL 15-18 for 8 KB
//! pages:
//! - the special space `GinPageOpaqueData` (8 bytes: rightlink, maxoff,
//!   flags) and its flag bits;
//! - the metapage (block 0): `GinMetaPageData` (56 bytes) right after the
//!   page header, `pd_lower` just past it;
//! - posting-tree (data) pages: a 6-byte right bound at `PageGetContents`,
//!   the data from byte 32 on, `pd_lower` at its end. Internal data pages
//!   hold `maxoff` 10-byte `PostingItem`s (child `BlockIdData`, key TID);
//!   leaf pages hold compressed posting-list segments (`leaf.rs`);
//! - entry and pending-list pages: ordinary line pointers and index tuples.
//!
//! Every read is bounds-checked: a short or inconsistent input is a
//! [`Fault`], never a panic.

use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::bufpage;
use crate::redo::Fault;

/// `sizeof(GinPageOpaqueData)`.
pub(super) const OPAQUE_SIZE: usize = 8;

pub(super) const GIN_DATA: u16 = 1 << 0;
pub(super) const GIN_LEAF: u16 = 1 << 1;
pub(super) const GIN_DELETED: u16 = 1 << 2;
pub(super) const GIN_META: u16 = 1 << 3;
pub(super) const GIN_LIST: u16 = 1 << 4;
pub(super) const GIN_LIST_FULLROW: u16 = 1 << 5;
pub(super) const GIN_INCOMPLETE_SPLIT: u16 = 1 << 6;
pub(super) const GIN_COMPRESSED: u16 = 1 << 7;

/// `InvalidBlockNumber`.
pub(super) const INVALID_BLOCK: u32 = u32::MAX;
/// `GIN_METAPAGE_BLKNO`.
pub(super) const METAPAGE_BLKNO: u32 = 0;

/// `PageGetContents`: `MAXALIGN(SizeOfPageHeaderData)`.
const CONTENTS_OFF: usize = 24;
/// `sizeof(GinMetaPageData)`.
pub(super) const META_SIZE: usize = 56;
/// `GinDataPageGetData`: the contents after the maxaligned right bound.
pub(super) const DATA_OFF: usize = CONTENTS_OFF + 8;
/// `GinDataPageMaxDataSize`.
pub(super) const DATA_MAX_SIZE: usize = BLCKSZ - DATA_OFF - OPAQUE_SIZE;
/// `sizeof(PostingItem)`: `BlockIdData` child + `ItemPointerData` key.
pub(super) const POSTING_ITEM_SIZE: usize = 10;
/// `sizeof(IndexTupleData)`.
pub(super) const INDEX_TUPLE_HEADER: usize = 8;
const INDEX_SIZE_MASK: u16 = 0x1FFF;

/// `GinPageOpaqueData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opaque {
    pub rightlink: u32,
    pub maxoff: u16,
    pub flags: u16,
}

impl Opaque {
    /// The special space of a GIN page (exactly 8 bytes).
    pub fn read(page: &[u8]) -> Result<Opaque, Fault> {
        let s = bufpage::special(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("GIN special space of {} bytes", s.len())));
        }
        Ok(Opaque {
            rightlink: u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
            maxoff: u16::from_le_bytes([s[4], s[5]]),
            flags: u16::from_le_bytes([s[6], s[7]]),
        })
    }

    pub fn write(&self, page: &mut [u8]) -> Result<(), Fault> {
        let s = bufpage::special_mut(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("GIN special space of {} bytes", s.len())));
        }
        s[0..4].copy_from_slice(&self.rightlink.to_le_bytes());
        s[4..6].copy_from_slice(&self.maxoff.to_le_bytes());
        s[6..8].copy_from_slice(&self.flags.to_le_bytes());
        Ok(())
    }

    pub fn is(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// Update the special space in place.
pub(super) fn modify_opaque(page: &mut [u8], f: impl FnOnce(&mut Opaque)) -> Result<(), Fault> {
    let mut o = Opaque::read(page)?;
    f(&mut o);
    o.write(page)
}

/// The page's flags must include `want` and exclude `not` (what
/// PostgreSQL asserts before changing it).
pub(super) fn expect_flags(page: &[u8], want: u16, not: u16, what: &str) -> Result<Opaque, Fault> {
    let o = Opaque::read(page)?;
    if o.flags & want != want || o.flags & not != 0 {
        return Err(Fault::page(format!("{what} expected, page flags are {:#06x}", o.flags)));
    }
    Ok(o)
}

/// `GinInitPage`: an empty page with `flags`, no right sibling.
pub(super) fn init_page(page: &mut [u8], flags: u16) -> Result<(), Fault> {
    bufpage::page_init(page, OPAQUE_SIZE);
    Opaque { rightlink: INVALID_BLOCK, maxoff: 0, flags }.write(page)
}

/// `GinInitMetabuffer` followed by a copy of the logged `GinMetaPageData`.
pub(super) fn init_meta(page: &mut [u8], metadata: &[u8]) -> Result<(), Fault> {
    if metadata.len() != META_SIZE {
        return Err(Fault::malformed(format!("GinMetaPageData of {} bytes", metadata.len())));
    }
    init_page(page, GIN_META)?;
    page[CONTENTS_OFF..CONTENTS_OFF + META_SIZE].copy_from_slice(metadata);
    set_lower(page, CONTENTS_OFF + META_SIZE);
    Ok(())
}

fn set_lower(page: &mut [u8], lower: usize) {
    let mut h = PageHeader::decode(page);
    h.lower = lower as u16;
    h.encode(page);
}

/// `GinDataPageSetDataSize`: `pd_lower` just past `size` bytes of data.
pub(super) fn set_data_size(page: &mut [u8], size: usize) -> Result<(), Fault> {
    let special = PageHeader::decode(page).special as usize;
    if size > DATA_MAX_SIZE || DATA_OFF + size > special {
        return Err(Fault::page(format!(
            "{size} bytes of posting data do not fit before pd_special {special}"
        )));
    }
    set_lower(page, DATA_OFF + size);
    Ok(())
}

/// `GinDataLeafPageGetPostingListSize`: the bytes of segments on a
/// compressed leaf, from `pd_lower`.
pub(super) fn posting_list_size(page: &[u8]) -> Result<usize, Fault> {
    let h = PageHeader::decode(page);
    let (lower, special) = (h.lower as usize, h.special as usize);
    if lower < DATA_OFF || lower > special || special > BLCKSZ {
        return Err(Fault::page(format!("data leaf with pd_lower {lower}, pd_special {special}")));
    }
    Ok(lower - DATA_OFF)
}

/// `BlockIdGetBlockNumber` of the 4 bytes at `b` (high half first).
pub(super) fn block_id(b: &[u8]) -> u32 {
    (u16::from_le_bytes([b[0], b[1]]) as u32) << 16 | u16::from_le_bytes([b[2], b[3]]) as u32
}

/// `BlockIdSet` into the 4 bytes at `b`.
pub(super) fn set_block_id(b: &mut [u8], blkno: u32) {
    b[0..2].copy_from_slice(&((blkno >> 16) as u16).to_le_bytes());
    b[2..4].copy_from_slice(&(blkno as u16).to_le_bytes());
}

/// Byte range of `PostingItem` `off` (1-based) of an internal data page
/// holding `maxoff` items (`off` may be `maxoff + 1`, one past the end).
fn posting_item_range(page: &[u8], off: u16, maxoff: u16) -> Result<std::ops::Range<usize>, Fault> {
    let special = PageHeader::decode(page).special as usize;
    let start = DATA_OFF + (off as usize).saturating_sub(1) * POSTING_ITEM_SIZE;
    if off == 0 || off > maxoff.saturating_add(1) || start + POSTING_ITEM_SIZE > special {
        return Err(Fault::page(format!("posting item {off} of an internal page with {maxoff}")));
    }
    Ok(start..start + POSTING_ITEM_SIZE)
}

/// `PostingItemSetBlockNumber` on existing item `off`.
pub(super) fn set_posting_item_child(page: &mut [u8], off: u16, child: u32) -> Result<(), Fault> {
    let maxoff = Opaque::read(page)?.maxoff;
    if off > maxoff {
        return Err(Fault::page(format!("posting item {off} of an internal page with {maxoff}")));
    }
    let r = posting_item_range(page, off, maxoff)?;
    set_block_id(&mut page[r], child);
    Ok(())
}

/// `GinDataPageAddPostingItem`: insert `item` at `off` (0: append).
pub(super) fn add_posting_item(page: &mut [u8], item: &[u8], off: u16) -> Result<(), Fault> {
    let o = Opaque::read(page)?;
    let off = if off == 0 { o.maxoff.saturating_add(1) } else { off };
    let at = posting_item_range(page, off, o.maxoff)?;
    let end = DATA_OFF + o.maxoff as usize * POSTING_ITEM_SIZE;
    let maxoff = o.maxoff + 1;
    set_data_size(page, maxoff as usize * POSTING_ITEM_SIZE)?;
    page.copy_within(at.start..end, at.start + POSTING_ITEM_SIZE);
    page[at].copy_from_slice(item);
    modify_opaque(page, |o| o.maxoff = maxoff)
}

/// `GinPageDeletePostingItem`: remove item `off` (1..=maxoff).
pub(super) fn delete_posting_item(page: &mut [u8], off: u16) -> Result<(), Fault> {
    let o = Opaque::read(page)?;
    if off > o.maxoff {
        return Err(Fault::page(format!(
            "posting item {off} of an internal page with {}",
            o.maxoff
        )));
    }
    let at = posting_item_range(page, off, o.maxoff)?;
    let end = DATA_OFF + o.maxoff as usize * POSTING_ITEM_SIZE;
    if end > PageHeader::decode(page).special as usize {
        return Err(Fault::page(format!("{} posting items overrun pd_special", o.maxoff)));
    }
    page.copy_within(at.end..end, at.start);
    let maxoff = o.maxoff - 1;
    modify_opaque(page, |o| o.maxoff = maxoff)?;
    set_data_size(page, maxoff as usize * POSTING_ITEM_SIZE)
}

/// The index tuples packed back to back in `data` (`IndexTupleSize` each),
/// exactly `count` of them filling `data`.
pub(super) fn packed_tuples(data: &[u8], count: usize) -> Result<Vec<&[u8]>, Fault> {
    let mut tuples = Vec::with_capacity(count.min(data.len() / INDEX_TUPLE_HEADER + 1));
    let mut at = 0;
    for i in 0..count {
        let size = tuple_size(&data[at.min(data.len())..])
            .ok_or_else(|| Fault::malformed(format!("index tuple {i} of {count} is cut short")))?;
        tuples.push(&data[at..at + size]);
        at += size;
    }
    if at != data.len() {
        return Err(Fault::malformed(format!(
            "{count} index tuples take {at} of {} bytes",
            data.len()
        )));
    }
    Ok(tuples)
}

/// `IndexTupleSize` of the tuple starting `data`, if it is whole and at
/// least a header long.
pub(super) fn tuple_size(data: &[u8]) -> Option<usize> {
    let info = u16::from_le_bytes([*data.get(6)?, *data.get(7)?]);
    let size = (info & INDEX_SIZE_MASK) as usize;
    (size >= INDEX_TUPLE_HEADER && size <= data.len()).then_some(size)
}

/// Append `tuples` from offset `off` on, as `PageAddItem` without
/// overwrite.
pub(super) fn add_tuples(page: &mut [u8], tuples: &[&[u8]], mut off: u16) -> Result<(), Fault> {
    for t in tuples {
        bufpage::add_item(page, t, off, false, false)?;
        off = off.wrapping_add(1);
    }
    Ok(())
}
