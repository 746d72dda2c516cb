//! Hash index page layout (`hash.h`, `hashpage.c`, `hashovfl.c`), the same
//! in PostgreSQL 15-18 for 8 KB pages:
//! - every page has the 16-byte special space `HashPageOpaqueData`
//!   (prev, next, bucket: u32; flag, page id: u16), page id `HASHO_PAGE_ID`;
//! - the metapage (block 0, `LH_META_PAGE`) holds `HashMetaPageData` at
//!   `PageGetContents` (byte 24), 4544 bytes, `pd_lower` just past it;
//! - a bitmap page (`LH_BITMAP_PAGE`) holds `bmsize` bytes of u32 words at
//!   byte 24, `pd_lower` just past them;
//! - bucket and overflow pages hold index tuples behind line pointers.
//!
//! Every access is bounds-checked: a page that is not the kind the record
//! expects is a [`Fault::Page`], never a panic.

use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::{bufpage, Fault};

/// `sizeof(HashPageOpaqueData)`.
pub(super) const OPAQUE_SIZE: usize = 16;
/// `HASHO_PAGE_ID`.
pub(super) const HASHO_PAGE_ID: u16 = 0xFF80;
/// `InvalidBlockNumber` and `InvalidBucket`.
pub(super) const INVALID: u32 = 0xFFFF_FFFF;

pub(super) const LH_UNUSED_PAGE: u16 = 0;
pub(super) const LH_OVERFLOW_PAGE: u16 = 1 << 0;
pub(super) const LH_BITMAP_PAGE: u16 = 1 << 2;
pub(super) const LH_META_PAGE: u16 = 1 << 3;
pub(super) const LH_BUCKET_NEEDS_SPLIT_CLEANUP: u16 = 1 << 6;
pub(super) const LH_PAGE_HAS_DEAD_TUPLES: u16 = 1 << 7;

/// `PageGetContents`: `MAXALIGN(SizeOfPageHeaderData)`.
const CONTENTS_OFF: usize = 24;
/// `sizeof(HashMetaPageData)`: 52 bytes of fields, 98 spares, 1024 bitmap
/// block numbers, rounded up to the alignment of its `double`.
const META_SIZE: usize = 4544;
/// `HASH_MAX_SPLITPOINTS`.
pub(super) const MAX_SPLITPOINTS: u32 = 98;
/// `HASH_MAX_BITMAPS` for 8 KB pages.
pub(super) const MAX_BITMAPS: u32 = 1024;
const HASH_MAGIC: u32 = 0x0644_0640;
const HASH_VERSION: u32 = 4;

/// Byte offsets of `HashMetaPageData` fields within the page.
pub(super) mod meta {
    const AT: usize = super::CONTENTS_OFF;
    pub const MAGIC: usize = AT;
    pub const VERSION: usize = AT + 4;
    pub const NTUPLES: usize = AT + 8;
    pub const FFACTOR: usize = AT + 16;
    pub const BSIZE: usize = AT + 18;
    pub const BMSIZE: usize = AT + 20;
    pub const BMSHIFT: usize = AT + 22;
    pub const MAXBUCKET: usize = AT + 24;
    pub const HIGHMASK: usize = AT + 28;
    pub const LOWMASK: usize = AT + 32;
    pub const OVFLPOINT: usize = AT + 36;
    pub const FIRSTFREE: usize = AT + 40;
    pub const NMAPS: usize = AT + 44;
    pub const PROCID: usize = AT + 48;
    pub const SPARES: usize = AT + 52;
    pub const MAPP: usize = SPARES + 4 * super::MAX_SPLITPOINTS as usize;
}

/// `HashPageOpaqueData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opaque {
    pub prev: u32,
    pub next: u32,
    pub bucket: u32,
    pub flag: u16,
}

impl Opaque {
    /// The special space of a hash page: 16 bytes ending in `HASHO_PAGE_ID`.
    pub fn read(page: &[u8]) -> Result<Opaque, Fault> {
        let s = bufpage::special(page)?;
        if s.len() != OPAQUE_SIZE || u16_at(s, 14)? != HASHO_PAGE_ID {
            return Err(Fault::page(format!("not a hash page: special space {s:02x?}")));
        }
        Ok(Opaque {
            prev: u32_at(s, 0)?,
            next: u32_at(s, 4)?,
            bucket: u32_at(s, 8)?,
            flag: u16_at(s, 12)?,
        })
    }

    pub fn write(&self, page: &mut [u8]) -> Result<(), Fault> {
        let s = bufpage::special_mut(page)?;
        if s.len() != OPAQUE_SIZE {
            return Err(Fault::page(format!("hash special space of {} bytes", s.len())));
        }
        s[0..4].copy_from_slice(&self.prev.to_le_bytes());
        s[4..8].copy_from_slice(&self.next.to_le_bytes());
        s[8..12].copy_from_slice(&self.bucket.to_le_bytes());
        s[12..14].copy_from_slice(&self.flag.to_le_bytes());
        s[14..16].copy_from_slice(&HASHO_PAGE_ID.to_le_bytes());
        Ok(())
    }
}

/// Change the special space of an existing hash page.
pub(super) fn modify_opaque(page: &mut [u8], f: impl FnOnce(&mut Opaque)) -> Result<(), Fault> {
    let mut o = Opaque::read(page)?;
    f(&mut o);
    o.write(page)
}

/// `_hash_pageinit` and the special space `_hash_initbuf` and its kin set.
pub(super) fn init_page(page: &mut [u8], opaque: Opaque) -> Result<(), Fault> {
    bufpage::page_init(page, OPAQUE_SIZE);
    opaque.write(page)
}

/// The little-endian u16 at `at`.
pub(super) fn u16_at(data: &[u8], at: usize) -> Result<u16, Fault> {
    match data.get(at..at + 2) {
        Some(b) => Ok(u16::from_le_bytes([b[0], b[1]])),
        None => Err(Fault::malformed(format!("{} bytes, need a u16 at {at}", data.len()))),
    }
}

/// The little-endian u32 at `at`.
pub(super) fn u32_at(data: &[u8], at: usize) -> Result<u32, Fault> {
    match data.get(at..at + 4) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(Fault::malformed(format!("{} bytes, need a u32 at {at}", data.len()))),
    }
}

/// The little-endian f64 at `at`.
pub(super) fn f64_at(data: &[u8], at: usize) -> Result<f64, Fault> {
    match data.get(at..at + 8) {
        Some(b) => Ok(f64::from_le_bytes(b.try_into().expect("8 bytes"))),
        None => Err(Fault::malformed(format!("{} bytes, need a double at {at}", data.len()))),
    }
}

fn put(page: &mut [u8], at: usize, bytes: &[u8]) {
    page[at..at + bytes.len()].copy_from_slice(bytes);
}

/// The metapage of a hash index, checked by its special space, to change.
pub(super) struct Meta<'a>(&'a mut [u8]);

impl<'a> Meta<'a> {
    pub fn open(page: &'a mut [u8]) -> Result<Meta<'a>, Fault> {
        let o = Opaque::read(page)?;
        let lower = PageHeader::decode(page).lower as usize;
        if o.flag & LH_META_PAGE == 0 || lower < CONTENTS_OFF + META_SIZE {
            return Err(Fault::page(format!(
                "not a hash metapage: flag {:#x}, pd_lower {lower}",
                o.flag
            )));
        }
        Ok(Meta(page))
    }

    pub fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }

    pub fn set_u32(&mut self, at: usize, v: u32) {
        put(self.0, at, &v.to_le_bytes());
    }

    pub fn ntuples(&self) -> f64 {
        f64::from_le_bytes(self.0[meta::NTUPLES..meta::NTUPLES + 8].try_into().expect("8 bytes"))
    }

    pub fn set_ntuples(&mut self, v: f64) {
        put(self.0, meta::NTUPLES, &v.to_le_bytes());
    }

    /// Byte offset of `hashm_spares[i]`.
    pub fn spare(i: u32) -> Result<usize, Fault> {
        if i >= MAX_SPLITPOINTS {
            return Err(Fault::page(format!("splitpoint {i} >= HASH_MAX_SPLITPOINTS")));
        }
        Ok(meta::SPARES + 4 * i as usize)
    }

    /// `hashm_mapp[hashm_nmaps++] = blkno`.
    pub fn push_bitmap(&mut self, blkno: u32) -> Result<(), Fault> {
        let nmaps = self.u32(meta::NMAPS);
        if nmaps >= MAX_BITMAPS {
            return Err(Fault::page(format!("hash metapage already lists {nmaps} bitmaps")));
        }
        self.set_u32(meta::MAPP + 4 * nmaps as usize, blkno);
        self.set_u32(meta::NMAPS, nmaps + 1);
        Ok(())
    }
}

/// `pg_ceil_log2_32`.
fn ceil_log2(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// `_hash_spareindex`: the splitpoint phase of bucket count `num_bucket`.
pub(super) fn spare_index(num_bucket: u32) -> u32 {
    let group = ceil_log2(num_bucket);
    if group < 10 {
        return group;
    }
    10 + ((group - 10) << 2) + (((num_bucket - 1) >> (group - 3)) & 3)
}

/// `_hash_get_totalbuckets`: buckets allocated up to splitpoint `phase`.
pub(super) fn total_buckets(phase: u32) -> u32 {
    if phase < 10 {
        return 1 << phase;
    }
    let group = 10 + ((phase - 10) >> 2);
    let before = 1u32 << (group - 1);
    before + (before >> 2) * (((phase - 10) & 3) + 1)
}

/// `_hash_init_metabuffer` on a fresh page: `num_tuples` expected tuples,
/// hash function `procid`, fill factor `ffactor` tuples per bucket.
pub(super) fn init_meta(
    page: &mut [u8],
    num_tuples: f64,
    procid: u32,
    ffactor: u16,
) -> Result<(), Fault> {
    let buckets = num_tuples / f64::from(ffactor);
    if ffactor == 0 || buckets.is_nan() {
        return Err(Fault::malformed(format!(
            "hash metapage for {num_tuples} tuples, fill factor {ffactor}"
        )));
    }
    let num_buckets = if buckets <= 2.0 {
        2
    } else if buckets >= f64::from(0x4000_0000u32) {
        0x4000_0000
    } else {
        total_buckets(spare_index(buckets as u32))
    };
    let spare = spare_index(num_buckets);
    init_page(page, Opaque { prev: INVALID, next: INVALID, bucket: INVALID, flag: LH_META_PAGE })?;
    let bsize = BLCKSZ - (CONTENTS_OFF + OPAQUE_SIZE);
    let lshift = 31 - (bsize as u32).leading_zeros();
    put(page, meta::MAGIC, &HASH_MAGIC.to_le_bytes());
    put(page, meta::VERSION, &HASH_VERSION.to_le_bytes());
    put(page, meta::FFACTOR, &ffactor.to_le_bytes());
    put(page, meta::BSIZE, &(bsize as u16).to_le_bytes());
    put(page, meta::BMSIZE, &(1u16 << lshift).to_le_bytes());
    put(page, meta::BMSHIFT, &(lshift as u16 + 3).to_le_bytes());
    put(page, meta::PROCID, &procid.to_le_bytes());
    put(page, meta::MAXBUCKET, &(num_buckets - 1).to_le_bytes());
    let highmask = (num_buckets + 1).next_power_of_two() - 1;
    put(page, meta::HIGHMASK, &highmask.to_le_bytes());
    put(page, meta::LOWMASK, &(highmask >> 1).to_le_bytes());
    put(page, Meta::spare(spare)?, &1u32.to_le_bytes());
    put(page, meta::OVFLPOINT, &spare.to_le_bytes());
    set_lower(page, CONTENTS_OFF + META_SIZE);
    Ok(())
}

/// `_hash_initbitmapbuffer` on a fresh page: `bmsize` bytes of free bits.
pub(super) fn init_bitmap(page: &mut [u8], bmsize: u16) -> Result<(), Fault> {
    let bmsize = bmsize as usize;
    if bmsize > BLCKSZ - CONTENTS_OFF - OPAQUE_SIZE {
        return Err(Fault::malformed(format!("hash bitmap of {bmsize} bytes")));
    }
    init_page(
        page,
        Opaque { prev: INVALID, next: INVALID, bucket: INVALID, flag: LH_BITMAP_PAGE },
    )?;
    page[CONTENTS_OFF..CONTENTS_OFF + bmsize].fill(0xFF);
    set_lower(page, CONTENTS_OFF + bmsize);
    Ok(())
}

fn set_lower(page: &mut [u8], lower: usize) {
    let mut h = PageHeader::decode(page);
    h.lower = lower as u16;
    h.encode(page);
}

/// `SETBIT` (`set`) or `CLRBIT` on bit `bit` of a bitmap page's words.
pub(super) fn set_bitmap_bit(page: &mut [u8], bit: u32, set: bool) -> Result<(), Fault> {
    let o = Opaque::read(page)?;
    if o.flag & LH_BITMAP_PAGE == 0 {
        return Err(Fault::page(format!("not a hash bitmap page: flag {:#x}", o.flag)));
    }
    let word = CONTENTS_OFF + 4 * (bit / 32) as usize;
    let lower = PageHeader::decode(page).lower as usize;
    if word + 4 > lower {
        return Err(Fault::page(format!("bitmap bit {bit} is past the bitmap (pd_lower {lower})")));
    }
    let mut w = u32_at(page, word)?;
    let mask = 1u32 << (bit % 32);
    w = if set { w | mask } else { w & !mask };
    put(page, word, &w.to_le_bytes());
    Ok(())
}

/// Whether the bytes below `pd_lower` are line pointers: not on the
/// metapage nor on a bitmap page.
pub(super) fn has_line_pointers(page: &[u8]) -> bool {
    Opaque::read(page).map_or(true, |o| o.flag & (LH_META_PAGE | LH_BITMAP_PAGE) == 0)
}
