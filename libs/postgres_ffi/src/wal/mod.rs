//! PostgreSQL's write-ahead log: the byte stream (page headers, records that
//! span pages), record decoding (block references, full-page images, main
//! data) and the per-resource-manager bodies the pageserver applies itself.
//!
//! Layers, bottom up:
//! - `stream`: [`WalStreamDecoder`] takes WAL bytes in arbitrary chunks (as
//!   they arrive over replication, never record aligned), checks page
//!   headers (magic, pageaddr, continuation lengths) and yields whole
//!   records with their end LSN, CRC-32C verified;
//! - `record`: [`decode_record`] splits one record into a
//!   [`DecodedWalRecord`]: header, block references with their images
//!   rebuilt to a full `BLCKSZ` page (hole filled; pglz, lz4, zstd
//!   decompressed), block data and main data;
//! - `rmgr`: typed views of the main data of the records the pageserver
//!   handles natively (storage, transaction, CLOG, multixact, database,
//!   relmap, XLOG, heap VM-clear flags), per major version.
//!
//! Every error names the LSN of the record it is about. No input makes
//! these functions panic, loop or allocate more than the record's stated
//! length (bounded by [`MAX_RECORD_LEN`]).

use bytes::Bytes;
use utils::lsn::Lsn;

pub mod image;
pub mod pglz;
pub mod record;
pub mod rmgr;
pub mod stream;
pub mod stub;
pub mod timeline_history;

pub use record::decode_record;
pub use stream::WalStreamDecoder;
pub use timeline_history::{TimelineHistory, TliSwitch};

/// Size of a WAL page (`XLOG_BLCKSZ`).
pub const XLOG_BLCKSZ: usize = 8192;
/// Default (and, here, only supported) WAL segment size.
pub const WAL_SEGMENT_SIZE: u64 = 16 * 1024 * 1024;
/// Short page header (`SizeOfXLogShortPHD`).
pub const XLOG_SHORT_PHD_LEN: usize = 24;
/// Long page header, first page of each segment (`SizeOfXLogLongPHD`).
pub const XLOG_LONG_PHD_LEN: usize = 40;
/// Record header (`SizeOfXLogRecord`).
pub const XLOG_RECORD_HEADER_LEN: usize = 24;
/// Largest record accepted (`XLogRecordMaxSize`, 1020 MiB).
pub const MAX_RECORD_LEN: u32 = 1020 * 1024 * 1024;

/// Resource manager ids (`rmgrlist.h`).
pub mod rmgr_id {
    pub const XLOG: u8 = 0;
    pub const TRANSACTION: u8 = 1;
    pub const STORAGE: u8 = 2;
    pub const CLOG: u8 = 3;
    pub const DATABASE: u8 = 4;
    pub const TABLESPACE: u8 = 5;
    pub const MULTIXACT: u8 = 6;
    pub const RELMAP: u8 = 7;
    pub const STANDBY: u8 = 8;
    pub const HEAP2: u8 = 9;
    pub const HEAP: u8 = 10;
    pub const BTREE: u8 = 11;
    pub const HASH: u8 = 12;
    pub const GIN: u8 = 13;
    pub const GIST: u8 = 14;
    pub const SEQUENCE: u8 = 15;
    pub const SPGIST: u8 = 16;
    pub const BRIN: u8 = 17;
    pub const COMMIT_TS: u8 = 18;
    pub const REPLORIGIN: u8 = 19;
    pub const GENERIC: u8 = 20;
    pub const LOGICAL_MESSAGE: u8 = 21;
}

/// A WAL decoding error; `lsn` is the start of the record (or page) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid WAL at {lsn}: {msg}")]
pub struct WalDecodeError {
    pub lsn: Lsn,
    pub msg: String,
}

/// Which relation a block reference names (`RelFileLocator` + fork).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockTag {
    pub spc_oid: u32,
    pub db_oid: u32,
    pub rel_number: u32,
    pub fork: u8,
    pub blkno: u32,
}

/// One block reference of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBlock {
    /// Block id within the record (0..=32).
    pub id: u8,
    pub tag: BlockTag,
    /// `BKPBLOCK_WILL_INIT`: the redo routine re-initialises the page.
    pub will_init: bool,
    /// The full page image, if the record carries one, as stored (hole
    /// removed, maybe compressed): `restore()` rebuilds the `BLCKSZ` page,
    /// `pd_lsn` as in the record.
    pub image: Option<image::BlockImage>,
    /// `BKPIMAGE_APPLY`: redo applies the image (else: consistency check only).
    pub apply_image: bool,
    /// Per-block data for the redo routine (may be empty).
    pub data: Bytes,
}

/// One whole record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedWalRecord {
    /// Where the record starts.
    pub lsn: Lsn,
    /// Where the next record may start: the end of this one, 8-byte aligned
    /// (the value PostgreSQL stamps into `pd_lsn` of the pages it changes).
    /// For an XLOG SWITCH record, the start of the next segment (as
    /// PostgreSQL's reader and pg_walinspect report it).
    pub end_lsn: Lsn,
    pub xid: u32,
    /// `xl_info`: the high nibble is the rmgr's record kind.
    pub info: u8,
    pub rmid: u8,
    pub prev_lsn: Lsn,
    /// `XLR_BLOCK_ID_TOPLEVEL_XID`, if present.
    pub toplevel_xid: Option<u32>,
    /// `XLR_BLOCK_ID_ORIGIN`, if present.
    pub origin: Option<u16>,
    pub blocks: Vec<DecodedBlock>,
    pub main_data: Bytes,
}

impl DecodedWalRecord {
    /// The rmgr-specific part of `info` (high nibble, with `XLR_INFO_MASK` removed).
    pub fn rmgr_info(&self) -> u8 {
        self.info & 0xF0
    }
}
