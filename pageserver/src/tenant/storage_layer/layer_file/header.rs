//! The header block of a delta layer file, and the two layouts it names.
//!
//! | version | header block | values start | index start | file end |
//! |---------|--------------|--------------|-------------|----------|
//! | 1       | 512 B        | 512          | 512-aligned | index + CRC, unpadded |
//! | 2       | 4 KiB        | 4096         | 4 KiB-aligned | padded to 4 KiB |
//!
//! Version 2 makes every region start and end on a direct IO block
//! (`io_engine::DIRECT_IO_ALIGN`), so the file is written and read with
//! `O_DIRECT`. New layers are written as version 2; version 1 files (from
//! daemons before direct IO) stay readable, through the page cache.

use anyhow::ensure;
use pageserver_api::key::{Key, KEY_SIZE};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

const MAGIC: &[u8; 4] = b"PSDL";
pub(super) const FORMAT_VERSION: u16 = 2;
/// Alignment of the version 2 layout.
pub(super) const BLOCK_BYTES: u64 = io_engine::DIRECT_IO_ALIGN as u64;
/// Bytes of the header that `decode` reads (the whole version 1 block).
pub(super) const HEADER_READ_BYTES: u64 = 512;
/// Encoded fields: magic, version, pad, two ids, two keys, six u64s; then the CRC.
const FIELDS_LEN: usize = 4 + 2 + 2 + 16 + 16 + 2 * KEY_SIZE + 6 * 8;
const ENCODED_LEN: usize = FIELDS_LEN + 4;
const _: () = assert!(ENCODED_LEN as u64 <= HEADER_READ_BYTES, "the header fits its block");
const _: () = assert!(BLOCK_BYTES.is_multiple_of(HEADER_READ_BYTES));

/// Where the regions of a file of one format version are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub version: u16,
    /// Start of the header block, values, and the index: all multiples of this.
    pub align: u64,
}

impl Layout {
    pub const CURRENT: Layout = Layout { version: FORMAT_VERSION, align: BLOCK_BYTES };
    pub const V1: Layout = Layout { version: 1, align: 512 };

    /// Offset of the values region (the header block's size).
    pub fn values_offset(&self) -> u64 {
        self.align
    }

    pub fn index_offset(&self, values_len: u64) -> u64 {
        (self.values_offset() + values_len).next_multiple_of(self.align)
    }

    /// The file size a well-formed file of this layout has.
    pub fn file_size(&self, index_offset: u64, index_bytes: u64) -> u64 {
        let end = index_offset + index_bytes;
        if self.version == 1 {
            end
        } else {
            end.next_multiple_of(self.align)
        }
    }

    /// Whether the file can be read with direct IO.
    pub fn direct_io_capable(&self) -> bool {
        self.align.is_multiple_of(BLOCK_BYTES)
    }
}

pub(super) struct Header {
    pub layout: Layout,
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    pub key_range: std::ops::Range<Key>,
    pub lsn_range: std::ops::Range<Lsn>,
    pub values_len: u64,
    pub index_offset: u64,
    pub entry_count: u64,
}

impl Header {
    /// The header block: fields, CRC, zero padding to the layout's block.
    /// (Only the current layout is written; tests write version 1 files.)
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.layout.align as usize);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.layout.version.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(self.tenant_id.as_bytes());
        b.extend_from_slice(self.timeline_id.as_bytes());
        b.extend_from_slice(&self.key_range.start.to_be_bytes());
        b.extend_from_slice(&self.key_range.end.to_be_bytes());
        let values_offset = self.layout.values_offset();
        for v in [self.lsn_range.start.0, self.lsn_range.end.0, values_offset, self.values_len] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.index_offset, self.entry_count] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(b.len(), ENCODED_LEN);
        b.resize(self.layout.align as usize, 0);
        b
    }

    /// Decode the first `HEADER_READ_BYTES` of a file (either version).
    pub fn decode(b: &[u8]) -> anyhow::Result<Header> {
        ensure!(b.len() >= ENCODED_LEN, "header truncated");
        ensure!(&b[0..4] == MAGIC, "bad magic {:02x?} (not a delta layer)", &b[0..4]);
        let stored = u32::from_le_bytes(b[FIELDS_LEN..ENCODED_LEN].try_into().unwrap());
        let computed = crc32c::crc32c(&b[..FIELDS_LEN]);
        ensure!(
            stored == computed,
            "header checksum mismatch: stored {stored:#x}, computed {computed:#x}"
        );
        let layout = match u16::from_le_bytes([b[4], b[5]]) {
            1 => Layout::V1,
            FORMAT_VERSION => Layout::CURRENT,
            v => anyhow::bail!("unsupported format version {v}"),
        };
        let key = |o: usize| Key::from_be_bytes(b[o..o + KEY_SIZE].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let o = 40 + 2 * KEY_SIZE;
        let values_offset = u64_at(o + 16);
        ensure!(
            values_offset == layout.values_offset(),
            "values offset {values_offset} is not the {} of format version {}",
            layout.values_offset(),
            layout.version
        );
        Ok(Header {
            layout,
            tenant_id: TenantId(b[8..24].try_into().unwrap()),
            timeline_id: TimelineId(b[24..40].try_into().unwrap()),
            key_range: key(40)..key(40 + KEY_SIZE),
            lsn_range: Lsn(u64_at(o))..Lsn(u64_at(o + 8)),
            values_len: u64_at(o + 24),
            index_offset: u64_at(o + 32),
            entry_count: u64_at(o + 40),
        })
    }
}
