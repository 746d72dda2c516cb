//! The header block of a layer file, and the layouts of its format versions.
//!
//! | version | header block | values start | index | file end |
//! |---------|--------------|--------------|-------|----------|
//! | 1       | 512 B        | 512          | 512-aligned: entries + CRC | unpadded |
//! | 2       | 4 KiB        | 4096         | 4 KiB-aligned: entries + CRC | padded to 4 KiB |
//! | 3       | 4 KiB        | 4096         | 4 KiB-aligned: B-tree of 8 KiB blocks | after the root block |
//!
//! Header fields (little-endian), all versions: magic "PSDL", version u16,
//! 2 zero bytes, tenant id, timeline id, key range (2 x 18 B big-endian),
//! LSN range, values offset, values length, index offset, entry count (u64
//! each). Version 3 adds: kind u8 (0 delta, 1 image), tree depth u8, 6 zero
//! bytes, root block u64, leaf count u64. Then the CRC-32C of the fields,
//! then zeros to the end of the block.
//!
//! Versions 2 and 3 start and end every region on a direct IO block
//! (`io_engine::DIRECT_IO_ALIGN`), so those files are read with `O_DIRECT`.
//! New layers are written as version 3; versions 1 and 2 (delta layers of
//! older daemons, index in memory) stay readable, version 1 through the
//! page cache.

use anyhow::{bail, ensure};
use pageserver_api::key::{Key, KEY_SIZE};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::LayerKind;
use super::index_builder::TreeShape;

const MAGIC: &[u8; 4] = b"PSDL";
pub(super) const FORMAT_VERSION: u16 = 3;
/// Alignment of the version 2 and 3 layouts.
pub(super) const BLOCK_BYTES: u64 = io_engine::DIRECT_IO_ALIGN as u64;
/// Bytes of the header that `decode` reads (the whole version 1 block).
pub(super) const HEADER_READ_BYTES: u64 = 512;
/// Fields of every version: magic, version, pad, two ids, two keys, six u64s.
const FIELDS_LEN: usize = 4 + 2 + 2 + 16 + 16 + 2 * KEY_SIZE + 6 * 8;
/// Version 3 adds kind, depth, pad, root block, leaf count.
const FIELDS_LEN_V3: usize = FIELDS_LEN + 1 + 1 + 6 + 8 + 8;
const _: () = assert!(FIELDS_LEN_V3 + 4 <= HEADER_READ_BYTES as usize, "the header fits");
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
    pub const V2: Layout = Layout { version: 2, align: BLOCK_BYTES };
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

    /// Whether the index is the version 3 B-tree (else a flat list).
    pub fn has_tree(&self) -> bool {
        self.version >= 3
    }

    fn fields_len(&self) -> usize {
        if self.has_tree() {
            FIELDS_LEN_V3
        } else {
            FIELDS_LEN
        }
    }
}

pub(super) struct Header {
    pub layout: Layout,
    pub kind: LayerKind,
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    pub key_range: std::ops::Range<Key>,
    pub lsn_range: std::ops::Range<Lsn>,
    pub values_len: u64,
    pub index_offset: u64,
    pub entry_count: u64,
    /// Version 3: the B-tree's shape; `None` for versions 1 and 2.
    pub tree: Option<TreeShape>,
}

impl Header {
    /// The header block: fields, CRC, zero padding to the layout's block.
    /// (Only the current layout is written by the daemon; tests write
    /// versions 1 and 2.)
    pub fn encode(&self) -> Vec<u8> {
        assert_eq!(self.tree.is_some(), self.layout.has_tree(), "a tree exactly in version 3");
        assert!(self.layout.has_tree() || self.kind == LayerKind::Delta, "v1/v2 are delta only");
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
        if let Some(t) = &self.tree {
            let kind = match self.kind {
                LayerKind::Delta => 0u8,
                LayerKind::Image => 1,
            };
            b.extend_from_slice(&[kind, t.depth, 0, 0, 0, 0, 0, 0]);
            b.extend_from_slice(&t.root_block.to_le_bytes());
            b.extend_from_slice(&t.leaf_count.to_le_bytes());
        }
        assert_eq!(b.len(), self.layout.fields_len());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.resize(self.layout.align as usize, 0);
        b
    }

    /// Decode the first `HEADER_READ_BYTES` of a file (any version).
    pub fn decode(b: &[u8]) -> anyhow::Result<Header> {
        ensure!(b.len() >= HEADER_READ_BYTES as usize, "header truncated");
        ensure!(&b[0..4] == MAGIC, "bad magic {:02x?} (not a layer file)", &b[0..4]);
        let layout = match u16::from_le_bytes([b[4], b[5]]) {
            1 => Layout::V1,
            2 => Layout::V2,
            FORMAT_VERSION => Layout::CURRENT,
            v => bail!("unsupported format version {v}"),
        };
        let fields = layout.fields_len();
        let stored = u32::from_le_bytes(b[fields..fields + 4].try_into().unwrap());
        let computed = crc32c::crc32c(&b[..fields]);
        ensure!(
            stored == computed,
            "header checksum mismatch: stored {stored:#x}, computed {computed:#x}"
        );
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
        let (kind, tree) = if layout.has_tree() { decode_v3(b)? } else { (LayerKind::Delta, None) };
        Ok(Header {
            layout,
            kind,
            tenant_id: TenantId(b[8..24].try_into().unwrap()),
            timeline_id: TimelineId(b[24..40].try_into().unwrap()),
            key_range: key(40)..key(40 + KEY_SIZE),
            lsn_range: Lsn(u64_at(o))..Lsn(u64_at(o + 8)),
            values_len: u64_at(o + 24),
            index_offset: u64_at(o + 32),
            entry_count: u64_at(o + 40),
            tree,
        })
    }
}

/// The fields version 3 adds (the CRC has been checked).
fn decode_v3(b: &[u8]) -> anyhow::Result<(LayerKind, Option<TreeShape>)> {
    let at = FIELDS_LEN;
    let kind = match b[at] {
        0 => LayerKind::Delta,
        1 => LayerKind::Image,
        k => bail!("unknown layer kind {k}"),
    };
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let shape =
        TreeShape { depth: b[at + 1], root_block: u64_at(at + 8), leaf_count: u64_at(at + 16) };
    ensure!(
        shape.depth >= 1 && shape.leaf_count >= 1 && shape.leaf_count <= shape.block_count(),
        "impossible index shape {shape:?}"
    );
    ensure!((shape.depth == 1) == (shape.block_count() == 1), "impossible index shape {shape:?}");
    Ok((kind, Some(shape)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(layout: Layout, kind: LayerKind) -> Header {
        Header {
            layout,
            kind,
            tenant_id: TenantId([3; 16]),
            timeline_id: TimelineId([4; 16]),
            key_range: Key::MIN..Key::MAX,
            lsn_range: Lsn(10)..Lsn(11),
            values_len: 12345,
            index_offset: 16384,
            entry_count: 77,
            tree: layout.has_tree().then_some(TreeShape { root_block: 3, depth: 2, leaf_count: 3 }),
        }
    }

    #[test]
    fn every_version_round_trips() {
        for (layout, kind) in [
            (Layout::CURRENT, LayerKind::Image),
            (Layout::CURRENT, LayerKind::Delta),
            (Layout::V2, LayerKind::Delta),
            (Layout::V1, LayerKind::Delta),
        ] {
            let h = header(layout, kind);
            let bytes = h.encode();
            assert_eq!(bytes.len() as u64, layout.align);
            let d = Header::decode(&bytes[..HEADER_READ_BYTES as usize]).unwrap();
            assert_eq!((d.layout, d.kind, d.tree), (layout, kind, h.tree));
            assert_eq!((d.key_range, d.lsn_range), (h.key_range, h.lsn_range));
            assert_eq!((d.values_len, d.index_offset, d.entry_count), (12345, 16384, 77));
        }
    }

    #[test]
    fn a_flipped_bit_or_unknown_version_is_refused() {
        let mut bytes = header(Layout::CURRENT, LayerKind::Image).encode();
        bytes[FIELDS_LEN + 9] ^= 1; // the root block number
        let err = Header::decode(&bytes[..512]).err().unwrap().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
        let mut bytes = header(Layout::CURRENT, LayerKind::Image).encode();
        bytes[4] = 9;
        let err = Header::decode(&bytes[..512]).err().unwrap().to_string();
        assert!(err.contains("unsupported format version 9"), "{err}");
    }
}
