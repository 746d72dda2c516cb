//! Native redo: PostgreSQL's WAL records applied to pages in Rust, with no
//! PostgreSQL process. Redo is a pure function, page × record → page.
//!
//! The storage engine keeps one [`RedoRecord`] per (block, record): the
//! block reference's own data, the record's main data and header fields,
//! and the tags of all the record's block references (some redo routines
//! need a sibling's block number). [`RedoRecord::encode`] is its versioned
//! byte form; the engine only frames it (tag, CRC) and calls [`apply`].
//!
//! Modules, one concept each, written from PostgreSQL's headers and redo
//! routines of each major (15-18; layouts differ, each module says where):
//! - `bufpage`: page primitives (`bufpage.c`): init, add item, repair
//!   fragmentation, index tuple delete/multi-delete/overwrite, truncate the
//!   line-pointer array, and the invariants every page keeps;
//! - `heap`, `heap2`, `btree`, `sequence`, `generic`, `hash`, `gin`,
//!   `gist`, `spgist`, `brin`: one rmgr each;
//! - `mask`: PostgreSQL's masking rules (`bufmask.c` and each rmgr's
//!   `rm_mask`), for comparing our result with PostgreSQL's own image.
//!
//! Invariants of [`apply`]:
//! - it writes only the block the record names for this value (the key's
//!   relation, fork and block are checked against the record's tag first);
//! - after a successful redo the page keeps `pd_lower <= pd_upper <=
//!   pd_special <= BLCKSZ` and, on pages with line pointers, every line
//!   pointer with storage lies within `[pd_upper, pd_special)`; `pd_lsn` is
//!   the record's end LSN;
//! - a record that cannot be applied (malformed, a page that does not hold
//!   what it expects, an rmgr without native redo) is a [`RedoError`]
//!   naming LSN, rmgr, info, relation and block. Never a panic, never a page
//!   that is silently wrong. The caller treats the page as unreadable.
//!
//! A read applies a chain of records to one page: [`apply_in_chain`] per
//! record, on a [`RedoRecordRef`] decoded from the stored bytes without
//! allocating, then [`check_page`] once after the last. Each record is
//! checked as in [`apply`] (its block and fork, every offset and length it
//! uses, and the page header after writing; `bufpage`'s primitives check
//! the bounds they write within, so a line pointer a record writes points
//! inside `[pd_upper, pd_special)`); the whole line-pointer array is
//! checked once per chain (O(line pointers), not O(records × line
//! pointers)). The page a read returns keeps the same invariants as one
//! built with [`apply`]; the fuzz test checks that both paths agree, page
//! and outcome, on every input.
//!
//! The data checksum is not redo's business: it depends on the block number
//! and is set when the page is served.

mod brin;
mod btree;
pub mod bufpage;
mod encoding;
mod generic;
mod gin;
mod gist;
mod hash;
mod heap;
mod heap2;
pub mod mask;
pub mod names;
mod sequence;
mod spgist;

use bytes::Bytes;
use utils::lsn::Lsn;

use crate::consts::BLCKSZ;
use crate::page::set_page_lsn;
use crate::wal::{rmgr_id, BlockTag, DecodedWalRecord};
use crate::PgMajorVersion;

pub use encoding::RedoDecodeError;

/// One block reference of a record, as redo of any of its blocks may need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRef {
    /// Block id within the record (0..=32).
    pub id: u8,
    pub tag: BlockTag,
    /// `BKPBLOCK_WILL_INIT`.
    pub will_init: bool,
    /// The record carries a full-page image of this block.
    pub has_image: bool,
}

/// What redo of one block of one WAL record needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedoRecord {
    pub rmid: u8,
    /// `xl_info`, whole (the high nibble is the rmgr's record kind).
    pub info: u8,
    /// `xl_xid`.
    pub xid: u32,
    /// The block id (within the record) this value redoes.
    pub target: u8,
    /// Every block reference of the record, in id order.
    pub blocks: Vec<BlockRef>,
    /// The target block's data (`XLogRecGetBlockData`), maybe empty.
    pub block_data: Bytes,
    /// The record's main data (`XLogRecGetData`).
    pub main_data: Bytes,
}

impl RedoRecord {
    /// The redo input for block reference `block_index` (an index into
    /// `rec.blocks`, not the block id) of a decoded record.
    pub fn from_decoded(rec: &DecodedWalRecord, block_index: usize) -> RedoRecord {
        let blocks = rec
            .blocks
            .iter()
            .map(|b| BlockRef {
                id: b.id,
                tag: b.tag,
                will_init: b.will_init,
                has_image: b.image.is_some(),
            })
            .collect();
        let target = &rec.blocks[block_index];
        RedoRecord {
            rmid: rec.rmid,
            info: rec.info,
            xid: rec.xid,
            target: target.id,
            blocks,
            block_data: target.data.clone(),
            main_data: rec.main_data.clone(),
        }
    }

    /// The block reference this value redoes.
    pub fn target_block(&self) -> Option<BlockRef> {
        self.as_ref().target_block()
    }

    /// The block reference with id `id`, if the record has one.
    pub fn block(&self, id: u8) -> Option<BlockRef> {
        self.as_ref().block(id)
    }

    /// `BKPBLOCK_WILL_INIT` of the target: redo needs no older page.
    pub fn will_init(&self) -> bool {
        self.as_ref().will_init()
    }

    /// The rmgr-specific part of `info` (`XLR_INFO_MASK` removed).
    pub fn rmgr_info(&self) -> u8 {
        self.info & 0xF0
    }

    /// The borrowed form [`apply`] works on.
    pub fn as_ref(&self) -> RedoRecordRef<'_> {
        RedoRecordRef {
            rmid: self.rmid,
            info: self.info,
            xid: self.xid,
            target: self.target,
            blocks: BlockRefs(BlockRefsRepr::Decoded(&self.blocks)),
            block_data: &self.block_data,
            main_data: &self.main_data,
        }
    }
}

/// A [`RedoRecord`] borrowed: either from one ([`RedoRecord::as_ref`]) or
/// straight from its stored bytes ([`RedoRecordRef::decode`], which
/// allocates nothing: a read applies hundreds of these per page).
#[derive(Debug, Clone, Copy)]
pub struct RedoRecordRef<'a> {
    pub rmid: u8,
    pub info: u8,
    pub xid: u32,
    pub target: u8,
    pub blocks: BlockRefs<'a>,
    pub block_data: &'a [u8],
    pub main_data: &'a [u8],
}

/// The block references of a [`RedoRecordRef`], in id order: decoded, or
/// still in their stored form (read on demand; `decode` checked the length).
#[derive(Debug, Clone, Copy)]
pub struct BlockRefs<'a>(BlockRefsRepr<'a>);

#[derive(Debug, Clone, Copy)]
enum BlockRefsRepr<'a> {
    Decoded(&'a [BlockRef]),
    Encoded(&'a [u8]),
}

impl<'a> BlockRefs<'a> {
    #[inline]
    fn encoded(raw: &'a [u8]) -> Self {
        debug_assert_eq!(raw.len() % encoding::BLOCK_REF_LEN, 0);
        BlockRefs(BlockRefsRepr::Encoded(raw))
    }

    #[inline]
    pub fn len(&self) -> usize {
        match self.0 {
            BlockRefsRepr::Decoded(b) => b.len(),
            BlockRefsRepr::Encoded(raw) => raw.len() / encoding::BLOCK_REF_LEN,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn iter(self) -> impl Iterator<Item = BlockRef> + 'a {
        (0..self.len()).map(move |i| self.at(i))
    }

    /// The block reference with id `id`, if there is one; only that one is
    /// decoded (a read looks up its target once per record).
    #[inline]
    pub fn find(self, id: u8) -> Option<BlockRef> {
        match self.0 {
            BlockRefsRepr::Decoded(b) => b.iter().find(|b| b.id == id).copied(),
            BlockRefsRepr::Encoded(raw) => raw
                .chunks_exact(encoding::BLOCK_REF_LEN)
                .find(|r| r[0] == id)
                .map(encoding::block_ref),
        }
    }

    /// Block reference `i` (an index, not an id); `i < len()`.
    #[inline]
    fn at(&self, i: usize) -> BlockRef {
        match self.0 {
            BlockRefsRepr::Decoded(b) => b[i],
            BlockRefsRepr::Encoded(raw) => encoding::block_ref(&raw[i * encoding::BLOCK_REF_LEN..]),
        }
    }
}

impl RedoRecordRef<'_> {
    /// The block reference this value redoes.
    #[inline]
    pub fn target_block(&self) -> Option<BlockRef> {
        self.block(self.target)
    }

    /// The block reference with id `id`, if the record has one.
    #[inline]
    pub fn block(&self, id: u8) -> Option<BlockRef> {
        self.blocks.find(id)
    }

    /// `BKPBLOCK_WILL_INIT` of the target: redo needs no older page.
    pub fn will_init(&self) -> bool {
        self.target_block().is_some_and(|b| b.will_init)
    }

    /// The rmgr-specific part of `info` (`XLR_INFO_MASK` removed).
    pub fn rmgr_info(&self) -> u8 {
        self.info & 0xF0
    }

    /// The owned form (the blocks decoded, the data copied).
    pub fn to_owned(&self) -> RedoRecord {
        RedoRecord {
            rmid: self.rmid,
            info: self.info,
            xid: self.xid,
            target: self.target,
            blocks: self.blocks.iter().collect(),
            block_data: Bytes::copy_from_slice(self.block_data),
            main_data: Bytes::copy_from_slice(self.main_data),
        }
    }
}

impl<'a> From<&'a RedoRecord> for RedoRecordRef<'a> {
    fn from(rec: &'a RedoRecord) -> Self {
        rec.as_ref()
    }
}

/// Why one record could not be applied to one page. Two words wide (the
/// message is boxed), so the `Result<_, Fault>` of every redo helper comes
/// back in registers: a read calls them hundreds of times per page, and a
/// `Result` returned through memory stalled the load that checks it. Build
/// one with [`Fault::malformed`], [`Fault::page`] or
/// [`Fault::unsupported`] (cold: the branch that builds it is laid out of
/// the hot path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The record's bytes are not what its type says.
    #[error("malformed record: {0}")]
    Malformed(FaultMessage),
    /// The page does not hold what the record expects (an offset out of
    /// range, no room for an item, a broken invariant after writing).
    #[error("page does not fit the record: {0}")]
    Page(FaultMessage),
    /// No native redo for this rmgr or record kind.
    #[error("no native redo: {0}")]
    Unsupported(FaultMessage),
}

const _: () = assert!(std::mem::size_of::<Result<(), Fault>>() == 16);
const _: () = assert!(std::mem::size_of::<Result<u16, Fault>>() == 16);

impl Fault {
    /// [`Fault::Malformed`].
    #[cold]
    #[inline(never)]
    pub fn malformed(message: String) -> Fault {
        Fault::Malformed(FaultMessage(Box::new(message)))
    }

    /// [`Fault::Page`].
    #[cold]
    #[inline(never)]
    pub fn page(message: String) -> Fault {
        Fault::Page(FaultMessage(Box::new(message)))
    }

    /// [`Fault::Unsupported`].
    #[cold]
    #[inline(never)]
    pub fn unsupported(message: String) -> Fault {
        Fault::Unsupported(FaultMessage(Box::new(message)))
    }
}

/// What a [`Fault`] says, behind one pointer (a `String` inline would make
/// `Fault` four words and its `Result`s come back through memory; a
/// `Box<str>` is two words, and three variants of it need a tag word).
#[derive(Clone, PartialEq, Eq)]
#[allow(clippy::box_collection)] // the thin pointer is the point
pub struct FaultMessage(Box<String>);

impl std::ops::Deref for FaultMessage {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for FaultMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for FaultMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self.0, f)
    }
}

impl From<&str> for FaultMessage {
    fn from(message: &str) -> Self {
        FaultMessage(Box::new(message.to_string()))
    }
}

/// `Fault` with what it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("redo of {rmgr} record (info {info:#04x}) ending at {lsn} on block {blkno} of relation {spc}/{db}/{rel} fork {fork}: {fault}",
    rmgr = rmgr_name(*rmid), spc = tag.spc_oid, db = tag.db_oid, rel = tag.rel_number, fork = tag.fork, blkno = tag.blkno)]
pub struct RedoError {
    /// The record's end LSN (where values are stored).
    pub lsn: Lsn,
    pub rmid: u8,
    pub info: u8,
    /// The block redo was asked to produce.
    pub tag: BlockTag,
    #[source]
    pub fault: Fault,
}

impl RedoError {
    /// `fault` of redo of `rec` on block `tag`, the record ending at `lsn`.
    fn of(rec: &RedoRecordRef<'_>, tag: BlockTag, lsn: Lsn, fault: Fault) -> Self {
        RedoError { lsn, rmid: rec.rmid, info: rec.info, tag, fault }
    }
}

/// What a per-rmgr redo function gets besides the page.
pub(crate) struct Ctx<'a> {
    pub rec: &'a RedoRecordRef<'a>,
    /// The block being redone (checked against `rec`'s target).
    pub tag: BlockTag,
    /// The record's end LSN.
    pub lsn: Lsn,
    pub version: PgMajorVersion,
}

/// The rmgrs [`apply`] can redo, for every record kind that touches a page.
pub const NATIVE_RMGRS: [u8; 10] = [
    rmgr_id::HEAP,
    rmgr_id::HEAP2,
    rmgr_id::BTREE,
    rmgr_id::SEQUENCE,
    rmgr_id::GENERIC,
    rmgr_id::HASH,
    rmgr_id::GIN,
    rmgr_id::GIST,
    rmgr_id::SPGIST,
    rmgr_id::BRIN,
];

/// Whether PostgreSQL's redo changes block `block_id` of this record even
/// when the record carries the block's image: it restores the image, then
/// applies the change, because the primary made that change after taking
/// the image. Hash SPLIT_ALLOCATE_PAGE block 0 and SPLIT_COMPLETE blocks 0
/// and 1 (the bucket flags), GiST PAGE_UPDATE block 1 and PAGE_SPLIT block
/// 0 (the left child's `F_FOLLOW_RIGHT` and NSN). For these, [`apply`] runs
/// on the restored image too.
pub fn redo_after_image(rmid: u8, info: u8, block_id: u8) -> bool {
    match rmid {
        rmgr_id::HASH => hash::redo_after_image(info, block_id),
        rmgr_id::GIST => gist::redo_after_image(info, block_id),
        _ => false,
    }
}

/// Whether [`apply`] has redo for `rmid`'s page records.
pub fn has_native_redo(rmid: u8) -> bool {
    NATIVE_RMGRS.contains(&rmid)
}

/// Apply `rec` to `page` (`BLCKSZ` bytes; all zeros when the record
/// initialises the page), the version of block `tag` before the record,
/// producing the version at `lsn` (the record's end LSN), and check the
/// page's invariants ([`check_page`]). `rec` is a [`RedoRecord`] or a
/// [`RedoRecordRef`].
pub fn apply<'a>(
    page: &mut [u8],
    tag: BlockTag,
    lsn: Lsn,
    rec: impl Into<RedoRecordRef<'a>>,
    version: PgMajorVersion,
) -> Result<(), RedoError> {
    let rec = rec.into();
    redo(page, tag, lsn, &rec, version)?;
    check_page(page, rec.rmid).map_err(|fault| RedoError::of(&rec, tag, lsn, fault))
}

/// [`apply`] for one record of a chain applied to one page (a read): the
/// page's header is checked after the record ([`bufpage::check_header`],
/// O(1)), its line pointers are not; the caller runs [`check_page`] once,
/// after the chain's last record, before the page is used. The full check
/// is O(line pointers), so after every record a chain of n inserts would
/// cost O(n²) (measured: ~40% of a 227-record read). Safe to defer: every
/// redo routine takes any page bytes (as the fuzz test feeds them) and
/// faults instead of reading or writing outside the page, so a page broken
/// midway fails a later record or the final check, never a panic.
pub fn apply_in_chain(
    page: &mut [u8],
    tag: BlockTag,
    lsn: Lsn,
    rec: &RedoRecordRef<'_>,
    version: PgMajorVersion,
) -> Result<(), RedoError> {
    redo(page, tag, lsn, rec, version)?;
    bufpage::check_header(page).map_err(|fault| RedoError::of(rec, tag, lsn, fault))
}

/// The rmgr's redo of `rec` on `page`, and `pd_lsn`; no page check.
#[inline]
fn redo(
    page: &mut [u8],
    tag: BlockTag,
    lsn: Lsn,
    rec: &RedoRecordRef<'_>,
    version: PgMajorVersion,
) -> Result<(), RedoError> {
    let error = |fault| RedoError::of(rec, tag, lsn, fault);
    if page.len() != BLCKSZ {
        return Err(error(Fault::page(format!("a {}-byte page, not {BLCKSZ}", page.len()))));
    }
    match rec.target_block() {
        Some(b) if b.tag == tag => {}
        Some(b) => {
            return Err(error(Fault::malformed(format!(
                "the record's block {} is block {} of {}/{}/{} fork {}",
                b.id, b.tag.blkno, b.tag.spc_oid, b.tag.db_oid, b.tag.rel_number, b.tag.fork
            ))))
        }
        None => {
            return Err(error(Fault::malformed(format!(
                "the record has no block reference {}",
                rec.target
            ))))
        }
    }
    let ctx = Ctx { rec, tag, lsn, version };
    let result = match rec.rmid {
        rmgr_id::HEAP => heap::redo(page, &ctx),
        rmgr_id::HEAP2 => heap2::redo(page, &ctx),
        rmgr_id::BTREE => btree::redo(page, &ctx),
        rmgr_id::SEQUENCE => sequence::redo(page, &ctx),
        rmgr_id::GENERIC => generic::redo(page, &ctx),
        rmgr_id::HASH => hash::redo(page, &ctx),
        rmgr_id::GIN => gin::redo(page, &ctx),
        rmgr_id::GIST => gist::redo(page, &ctx),
        rmgr_id::SPGIST => spgist::redo(page, &ctx),
        rmgr_id::BRIN => brin::redo(page, &ctx),
        other => Err(Fault::unsupported(format!("rmgr {} ({other})", rmgr_name(other)))),
    };
    result.map_err(error)?;
    set_page_lsn(page, lsn.0);
    Ok(())
}

/// The invariants of the page redo produced. Pages whose bytes below
/// `pd_lower` are not line pointers get the header checks only: a generic
/// record's page (bloom keeps its tuples there), a B-tree metapage or
/// deleted page (metadata there).
pub fn check_page(page: &[u8], rmid: u8) -> Result<(), Fault> {
    match rmid {
        rmgr_id::GENERIC => bufpage::check_header(page),
        rmgr_id::BTREE if !btree::has_line_pointers(page) => bufpage::check_header(page),
        rmgr_id::HASH if !hash::has_line_pointers(page) => bufpage::check_header(page),
        rmgr_id::GIN if !gin::has_line_pointers(page) => bufpage::check_header(page),
        rmgr_id::GIST if !gist::has_line_pointers(page) => bufpage::check_header(page),
        rmgr_id::SPGIST if !spgist::has_line_pointers(page) => bufpage::check_header(page),
        rmgr_id::BRIN if !brin::has_line_pointers(page) => bufpage::check_header(page),
        _ => bufpage::check_invariants(page),
    }
}

pub use crate::wal::rmgr::rmgr_name;
