//! A layer file as an operator's tool sees it (`pagectl layer info|verify`):
//! the header on its own (without knowing the owner, so a file can be
//! looked at wherever it was copied to), and a check of every index block.
//!
//! Read only; the checks are the daemon's own (`Header::decode`,
//! `check_header`, the index blocks' checks), so a file this accepts is one
//! the daemon loads.

use std::ops::Range;
use std::path::Path;

use anyhow::Context;
use io_engine::{AlignedBuf, IoEngine, OpenMode};
use pageserver_api::key::Key;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::header::{Header, HEADER_READ_BYTES};
use super::index_block::INDEX_BLOCK_BYTES;
use super::{legacy, Index, LayerFile, LayerReadError};
use crate::tenant::storage_layer::LayerKind;

/// Index blocks one read of [`LayerFile::verify_index`] covers (256 KiB).
const VERIFY_READ_BLOCKS: u64 = 32;

/// A layer file's header fields, and the size they imply.
#[derive(Clone, Debug)]
pub struct HeaderInfo {
    pub format_version: u16,
    pub kind: LayerKind,
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    pub key_range: Range<Key>,
    pub lsn_range: Range<Lsn>,
    /// Where the values region starts, and its length.
    pub values_offset: u64,
    pub values_len: u64,
    pub index_offset: u64,
    pub entry_count: u64,
    /// Version 3: the B-tree's depth, leaves and blocks (of 8 KiB);
    /// versions 1 and 2: `None` (a flat list of `entry_count` entries).
    pub tree: Option<(u8, u64, u64)>,
    /// Bytes of the index region.
    pub index_bytes: u64,
    /// The size a file with this header has.
    pub expected_file_size: u64,
}

impl HeaderInfo {
    fn of(h: &Header) -> HeaderInfo {
        let index_bytes = match &h.tree {
            Some(shape) => shape.index_bytes(),
            None => legacy::index_bytes(h.entry_count),
        };
        HeaderInfo {
            format_version: h.layout.version,
            kind: h.kind,
            tenant_id: h.tenant_id,
            timeline_id: h.timeline_id,
            key_range: h.key_range.clone(),
            lsn_range: h.lsn_range.clone(),
            values_offset: h.layout.values_offset(),
            values_len: h.values_len,
            index_offset: h.index_offset,
            entry_count: h.entry_count,
            tree: h.tree.map(|t| (t.depth, t.leaf_count, t.block_count())),
            index_bytes,
            expected_file_size: h.layout.file_size(h.index_offset, index_bytes),
        }
    }

    /// The file offset of index block `block` (version 3).
    pub fn index_block_offset(&self, block: u64) -> u64 {
        self.index_offset + block * INDEX_BLOCK_BYTES as u64
    }
}

impl LayerFile {
    /// The header of the layer file at `path`, decoded and checked
    /// (magic, version, CRC), and the file's actual size. Errors name the
    /// file.
    pub async fn read_header(engine: &IoEngine, path: &Path) -> anyhow::Result<(HeaderInfo, u64)> {
        let read = async {
            let file = engine.open(path, OpenMode::READ).await?;
            let file_size = file.len().await?;
            anyhow::ensure!(
                file_size >= HEADER_READ_BYTES,
                "file of {file_size} bytes is shorter than the header"
            );
            let hlen = HEADER_READ_BYTES as usize;
            let (hbuf, res) = file.read_exact_at(AlignedBuf::with_capacity(hlen), 0, hlen).await;
            res?;
            Ok((HeaderInfo::of(&Header::decode(&hbuf)?), file_size))
        };
        read.await.with_context(|| format!("layer file {}", path.display()))
    }

    /// Read and check every index block, leaves and internal levels
    /// (version 3; the legacy index was checked whole at load).
    pub async fn verify_index(&self) -> Result<(), LayerReadError> {
        let Index::Tree(tree) = &self.index else { return Ok(()) };
        let blocks = tree.shape().block_count();
        let mut first = 0;
        while first < blocks {
            let count = (blocks - first).min(VERIFY_READ_BLOCKS);
            tree.read_blocks_checked(&self.file, first, count).await?;
            first += count;
        }
        Ok(())
    }

    /// Where the values region starts in the file.
    pub fn values_offset(&self) -> u64 {
        self.values_offset
    }
}
