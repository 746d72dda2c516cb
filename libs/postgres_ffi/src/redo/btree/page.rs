//! Btree page layout shared by every record kind (`nbtree.h`, `nbtpage.c`),
//! identical in PostgreSQL 15-18 for 8 KB pages:
//! - the special space `BTPageOpaqueData` (16 bytes: prev, next, level,
//!   flags, cycle id) and its flag bits;
//! - the metapage (block 0): `BTMetaPageData` right after the page header,
//!   `pd_lower` just past it, rebuilt from `xl_btree_metadata` (28 bytes);
//! - index tuples: `IndexTupleData` (TID, `t_info` with the size in its low
//!   13 bits), pivot tuples' downlink and top-parent link, posting lists
//!   (the TID's block holds the posting list's byte offset, its offset
//!   number the TID count with `BT_IS_POSTING`);
//! - `_bt_restore_page`: a page's tuples re-added in item order from a copy
//!   of its upper part, and temp pages that keep the special space.
//!
//! Every read is bounds-checked: a short or inconsistent input is a
//! [`Fault`], never a panic.

use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::bufpage;
use crate::redo::Fault;

/// `sizeof(BTPageOpaqueData)`.
pub(super) const OPAQUE_SIZE: usize = 16;

pub(super) const BTP_LEAF: u16 = 1 << 0;
pub(super) const BTP_ROOT: u16 = 1 << 1;
pub(super) const BTP_DELETED: u16 = 1 << 2;
pub(super) const BTP_META: u16 = 1 << 3;
pub(super) const BTP_HALF_DEAD: u16 = 1 << 4;
pub(super) const BTP_HAS_GARBAGE: u16 = 1 << 6;
pub(super) const BTP_INCOMPLETE_SPLIT: u16 = 1 << 7;
pub(super) const BTP_HAS_FULLXID: u16 = 1 << 8;

/// `P_NONE`: no sibling.
pub(super) const P_NONE: u32 = 0;
/// `P_HIKEY`: the high key's offset on a page that is not rightmost.
pub(super) const P_HIKEY: u16 = 1;
/// `BTREE_MAGIC`.
pub(super) const BTREE_MAGIC: u32 = 0x053162;
/// `MAXALIGN(SizeOfPageHeaderData)`: where `PageGetContents` starts.
const CONTENTS_OFF: usize = 24;
/// `sizeof(BTMetaPageData)`.
const META_SIZE: usize = 48;
/// `sizeof(xl_btree_metadata)` as registered.
pub(super) const XL_METADATA_SIZE: usize = 28;
/// `sizeof(IndexTupleData)`.
pub(super) const INDEX_TUPLE_HEADER: usize = 8;
/// `sizeof(ItemPointerData)`.
pub(super) const TID_SIZE: usize = 6;
const INDEX_SIZE_MASK: u16 = 0x1FFF;
/// `INDEX_ALT_TID_MASK`.
const INDEX_ALT_TID_MASK: u16 = 0x2000;
const BT_IS_POSTING: u16 = 0x2000;
const BT_OFFSET_MASK: u16 = 0x0FFF;
/// `BTMaxItemSize` for 8 KB pages (the same 2704 bytes in 15-18).
pub(super) const BT_MAX_ITEM_SIZE: usize = 2704;

/// `BTPageOpaqueData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Opaque {
    pub prev: u32,
    pub next: u32,
    pub level: u32,
    pub flags: u16,
    pub cycleid: u16,
}

impl Opaque {
    /// The special space of a btree page (exactly 16 bytes).
    pub fn read(page: &[u8]) -> Result<Opaque, Fault> {
        let s = bufpage::special(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("btree special space of {} bytes", s.len())));
        }
        Ok(Opaque {
            prev: u32_at(s, 0)?,
            next: u32_at(s, 4)?,
            level: u32_at(s, 8)?,
            flags: u16_at(s, 12)?,
            cycleid: u16_at(s, 14)?,
        })
    }

    pub fn write(&self, page: &mut [u8]) -> Result<(), Fault> {
        let s = bufpage::special_mut(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("btree special space of {} bytes", s.len())));
        }
        s[0..4].copy_from_slice(&self.prev.to_le_bytes());
        s[4..8].copy_from_slice(&self.next.to_le_bytes());
        s[8..12].copy_from_slice(&self.level.to_le_bytes());
        s[12..14].copy_from_slice(&self.flags.to_le_bytes());
        s[14..16].copy_from_slice(&self.cycleid.to_le_bytes());
        Ok(())
    }

    pub fn is_rightmost(&self) -> bool {
        self.next == P_NONE
    }

    /// `P_FIRSTDATAKEY`.
    pub fn first_data_key(&self) -> u16 {
        if self.is_rightmost() {
            P_HIKEY
        } else {
            P_HIKEY + 1
        }
    }
}

/// Update the special space in place.
pub(super) fn modify_opaque(page: &mut [u8], f: impl FnOnce(&mut Opaque)) -> Result<(), Fault> {
    let mut o = Opaque::read(page)?;
    f(&mut o);
    o.write(page)
}

/// `_bt_pageinit` on a zeroed page, then the given special space.
pub(super) fn init_page(page: &mut [u8], opaque: Opaque) -> Result<(), Fault> {
    page.fill(0);
    bufpage::page_init(page, OPAQUE_SIZE);
    opaque.write(page)
}

/// `PageGetTempPageCopySpecial`: an empty page with `page`'s special space.
pub(super) fn temp_page_copy_special(page: &[u8]) -> Result<Vec<u8>, Fault> {
    let special = bufpage::special(page)?;
    let mut temp = vec![0u8; BLCKSZ];
    bufpage::page_init(&mut temp, special.len());
    let start = BLCKSZ - special.len();
    temp[start..].copy_from_slice(special);
    Ok(temp)
}

/// `xl_btree_metadata` (block data of the metapage's block reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Metadata {
    pub version: u32,
    pub root: u32,
    pub level: u32,
    pub fastroot: u32,
    pub fastlevel: u32,
    pub last_cleanup_num_delpages: u32,
    pub allequalimage: bool,
}

impl Metadata {
    pub fn decode(data: &[u8]) -> Result<Metadata, Fault> {
        if data.len() != XL_METADATA_SIZE {
            return Err(Fault::malformed(format!("xl_btree_metadata of {} bytes", data.len())));
        }
        Ok(Metadata {
            version: u32_at(data, 0)?,
            root: u32_at(data, 4)?,
            level: u32_at(data, 8)?,
            fastroot: u32_at(data, 12)?,
            fastlevel: u32_at(data, 16)?,
            last_cleanup_num_delpages: u32_at(data, 20)?,
            allequalimage: data[24] != 0,
        })
    }
}

/// `_bt_restore_meta`: the metapage rebuilt from scratch.
pub(super) fn restore_meta(page: &mut [u8], md: &Metadata) -> Result<(), Fault> {
    init_page(page, Opaque { flags: BTP_META, ..Opaque::default() })?;
    let m = &mut page[CONTENTS_OFF..CONTENTS_OFF + META_SIZE];
    for (i, v) in [BTREE_MAGIC, md.version, md.root, md.level, md.fastroot, md.fastlevel]
        .into_iter()
        .enumerate()
    {
        m[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    m[24..28].copy_from_slice(&md.last_cleanup_num_delpages.to_le_bytes());
    m[32..40].copy_from_slice(&(-1.0f64).to_le_bytes());
    m[40] = md.allequalimage as u8;
    let mut h = PageHeader::decode(page);
    h.lower = (CONTENTS_OFF + META_SIZE) as u16;
    h.encode(page);
    Ok(())
}

/// `BTPageSetDeleted` on a freshly initialised page.
pub(super) fn set_deleted(page: &mut [u8], safexid: u64) -> Result<(), Fault> {
    modify_opaque(page, |o| {
        o.flags &= !BTP_HALF_DEAD;
        o.flags |= BTP_DELETED | BTP_HAS_FULLXID;
    })?;
    let mut h = PageHeader::decode(page);
    h.lower = (CONTENTS_OFF + 8) as u16;
    h.upper = h.special;
    h.encode(page);
    page[CONTENTS_OFF..CONTENTS_OFF + 8].copy_from_slice(&safexid.to_le_bytes());
    Ok(())
}

/// The dummy high key of a half-dead leaf: a bare 8-byte pivot tuple whose
/// TID's block is the top parent (`BTreeTupleSetTopParent`, no attributes).
pub(super) fn top_parent_tuple(topparent: u32) -> [u8; INDEX_TUPLE_HEADER] {
    let mut t = [0u8; INDEX_TUPLE_HEADER];
    set_tid_block(&mut t, topparent);
    t[6..8].copy_from_slice(&(INDEX_TUPLE_HEADER as u16 | INDEX_ALT_TID_MASK).to_le_bytes());
    t
}

/// A half-dead leaf rebuilt from scratch (MARK_PAGE_HALFDEAD's leaf, and
/// UNLINK_PAGE's leaf below a deleted internal page).
pub(super) fn halfdead_leaf(
    page: &mut [u8],
    prev: u32,
    next: u32,
    topparent: u32,
) -> Result<(), Fault> {
    let opaque = Opaque { prev, next, level: 0, flags: BTP_HALF_DEAD | BTP_LEAF, cycleid: 0 };
    init_page(page, opaque)?;
    bufpage::add_item(page, &top_parent_tuple(topparent), P_HIKEY, false, false)?;
    Ok(())
}

/// `IndexTupleSize` of the tuple starting at `t`.
pub(super) fn tuple_size(t: &[u8]) -> Result<usize, Fault> {
    Ok((u16_at(t, 6)? & INDEX_SIZE_MASK) as usize)
}

/// The first tuple in `data`, `IndexTupleSize` bytes long.
pub(super) fn first_tuple(data: &[u8]) -> Result<&[u8], Fault> {
    let size = tuple_size(data)?;
    if size < INDEX_TUPLE_HEADER || size > data.len() {
        return Err(Fault::malformed(format!(
            "an index tuple of {size} bytes in {} bytes",
            data.len()
        )));
    }
    Ok(&data[..size])
}

fn t_info(t: &[u8]) -> Result<u16, Fault> {
    u16_at(t, 6)
}

pub(super) fn tid_block(t: &[u8]) -> Result<u32, Fault> {
    Ok(((u16_at(t, 0)? as u32) << 16) | u16_at(t, 2)? as u32)
}

fn tid_offset(t: &[u8]) -> Result<u16, Fault> {
    u16_at(t, 4)
}

/// `ItemPointerSetBlockNumber` on the tuple's TID (`BTreeTupleSetDownLink`).
pub(super) fn set_tid_block(t: &mut [u8], blkno: u32) {
    if t.len() >= 4 {
        t[0..2].copy_from_slice(&((blkno >> 16) as u16).to_le_bytes());
        t[2..4].copy_from_slice(&(blkno as u16).to_le_bytes());
    }
}

/// `BTreeTupleIsPosting`.
pub(super) fn is_posting(t: &[u8]) -> Result<bool, Fault> {
    Ok(t_info(t)? & INDEX_ALT_TID_MASK != 0 && tid_offset(t)? & BT_IS_POSTING != 0)
}

/// A posting list tuple's key size (`BTreeTupleGetPostingOffset`) and TIDs.
pub(super) struct Posting<'a> {
    pub key_size: usize,
    pub tids: &'a [u8],
}

impl Posting<'_> {
    pub fn count(&self) -> usize {
        self.tids.len() / TID_SIZE
    }
    pub fn tid(&self, i: usize) -> &[u8] {
        &self.tids[i * TID_SIZE..(i + 1) * TID_SIZE]
    }
}

/// The posting list of `t`, checked to lie within the tuple.
pub(super) fn posting(t: &[u8]) -> Result<Posting<'_>, Fault> {
    if !is_posting(t)? {
        return Err(Fault::page("not a posting list tuple".into()));
    }
    let key_size = tid_block(t)? as usize;
    let n = (tid_offset(t)? & BT_OFFSET_MASK) as usize;
    let end = key_size + n * TID_SIZE;
    if key_size < INDEX_TUPLE_HEADER || end > t.len() {
        return Err(Fault::page(format!(
            "posting list of {n} TIDs at {key_size} in a {}-byte tuple",
            t.len()
        )));
    }
    Ok(Posting { key_size, tids: &t[key_size..end] })
}

/// `_bt_form_posting`: `base`'s key with `tids` (concatenated 6-byte TIDs)
/// as its heap TID(s): a posting list tuple for more than one TID.
pub(super) fn form_posting(base: &[u8], tids: &[u8]) -> Result<Vec<u8>, Fault> {
    let key_size = if is_posting(base)? { posting(base)?.key_size } else { tuple_size(base)? };
    let n = tids.len() / TID_SIZE;
    if n == 0
        || !tids.len().is_multiple_of(TID_SIZE)
        || key_size > base.len()
        || key_size < INDEX_TUPLE_HEADER
    {
        return Err(Fault::page(format!(
            "cannot form a tuple of {n} TIDs from a {key_size}-byte key"
        )));
    }
    let size = if n > 1 { bufpage::maxalign(key_size + tids.len()) } else { key_size };
    if size > INDEX_SIZE_MASK as usize || n > BT_OFFSET_MASK as usize {
        return Err(Fault::page(format!("a posting list tuple of {size} bytes")));
    }
    let mut t = vec![0u8; size];
    t[..key_size].copy_from_slice(&base[..key_size]);
    let mut info = t_info(&t)? & !INDEX_SIZE_MASK | size as u16;
    if n > 1 {
        info |= INDEX_ALT_TID_MASK;
        set_tid_block(&mut t, key_size as u32);
        t[4..6].copy_from_slice(&(n as u16 | BT_IS_POSTING).to_le_bytes());
        t[key_size..key_size + tids.len()].copy_from_slice(tids);
    } else {
        info &= !INDEX_ALT_TID_MASK;
        t[0..TID_SIZE].copy_from_slice(tids);
    }
    t[6..8].copy_from_slice(&info.to_le_bytes());
    Ok(t)
}

/// `_bt_restore_page`: re-add the tuples of `data` (a copy of a page's
/// upper part, highest item first) so that they get item numbers in order.
pub(super) fn restore_page(page: &mut [u8], data: &[u8]) -> Result<(), Fault> {
    let mut items = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let size = bufpage::maxalign(tuple_size(&data[pos..])?);
        if size == 0 || pos + size > data.len() {
            return Err(Fault::malformed(format!(
                "a {size}-byte tuple at {pos} of {} bytes",
                data.len()
            )));
        }
        items.push(&data[pos..pos + size]);
        pos += size;
    }
    let n = items.len();
    for (i, item) in items.iter().enumerate().rev() {
        bufpage::add_item(page, item, (n - i) as u16, false, false)?;
    }
    Ok(())
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
