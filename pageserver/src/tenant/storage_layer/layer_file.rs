//! Layer files: delta layers (L0 from flushes, L1 from compaction) and
//! image layers, in one format.
//!
//! Layout (format version 3; `header.rs` describes versions 1 and 2 too):
//! ```text
//! [0, 4096)       header block: fields (kind, ids, key and LSN ranges, regions,
//!                 index shape), CRC-32C, zero padding
//! [4096, 4096+V)  values: serialized `Value`s, each with its own CRC, back to back
//! [I, I+8192*n)   index: n blocks of 8 KiB (I a multiple of 4096): the leaves
//!                 (entries sorted by (key, lsn)), then the internal levels
//!                 bottom-up, the root last (`index_block.rs`, `index_builder.rs`)
//! ```
//! The file ends after the root block. Every index block carries its own
//! CRC-32C, kind, level and number; a block failing a check is an error
//! naming the file and the block (`LayerReadError`), never a wrong answer.
//!
//! In memory per layer: the header fields, and for version 3 the index's
//! shape and root block (8 KiB); other index blocks are read on demand
//! through the process-wide block cache (`block_cache.rs`). Versions 1 and 2
//! (written by older daemons) keep their whole index in memory
//! (`legacy.rs`), as they always did: [`Index`] is one or the other.
//!
//! Direct IO (`direct_io` in the config): every region is block-aligned, so
//! a layer is written (whole aligned buffers) and read with `O_DIRECT`;
//! value reads are then aligned to what the file system asks, 512 or 4096
//! bytes ([`LayerFile::read_align`]); index blocks are 8 KiB at 4 KiB
//! multiples, aligned for both. The header (and a legacy index) is read
//! once at load through the page cache.
//!
//! Writing (`writer.rs`) is crash safe: temp file, fsync, rename; the
//! directory fsync comes with the manifest update. A layer file is
//! immutable once renamed into place, so readers need no locks: `&LayerFile`
//! is shared by any number of concurrent reads.

mod cursor;
mod header;
mod index_block;
mod index_builder;
mod inspect;
mod legacy;
mod tree_index;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{ensure, Context};
use bytes::Bytes;
use futures::FutureExt;
use io_engine::{AlignedBuf, File, IoEngine, OpenMode, ReadAt};
use pageserver_api::key::{CompactKey, Key};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::chunks::coalesce;
use super::{BlobRef, LayerKind, LayerName};
use header::{Header, BLOCK_BYTES, HEADER_READ_BYTES};
use legacy::LegacyIndex;
use tree_index::{Fetch, TreeIndex};

pub use cursor::{Entry, EntryCursor};
pub use index_block::{ENTRIES_PER_BLOCK, INDEX_BLOCK_BYTES};
pub use inspect::HeaderInfo;
pub use writer::LayerWriter;

/// Read alignment of a layer read through the page cache.
const BUFFERED_READ_ALIGN: u64 = 512;
/// Chunk reads `read_raw_values` issues as one engine batch at most.
const RAW_READS_PER_BATCH: usize = 64;

/// Why reading a layer file's index or values failed. Names the file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LayerReadError {
    #[error("layer file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("layer file {}: index block {block} is corrupt: {reason}", path.display())]
    CorruptBlock { path: PathBuf, block: u64, reason: String },
}

/// A layer file's index: on disk (version 3) or all in memory (1 and 2).
enum Index {
    Tree(TreeIndex),
    Legacy(LegacyIndex),
}

pub struct LayerFile {
    pub name: LayerName,
    pub path: PathBuf,
    pub file_size: u64,
    engine: IoEngine,
    file: File,
    format_version: u16,
    /// Where the values region starts in the file.
    values_offset: u64,
    values_len: u64,
    /// Multiple of which every chunk read's offset and length must be.
    read_align: u64,
    index: Index,
}

/// Chunk reads of `file` start and end on multiples of this: the file's
/// direct IO alignment (512 or 4096), or 512 through the page cache. The
/// values region starts at a multiple of it (`BLOCK_BYTES` is one).
fn read_align_of(file: &File) -> u64 {
    let align = file.direct_io_align().map_or(BUFFERED_READ_ALIGN, |a| a as u64);
    assert!(BLOCK_BYTES.is_multiple_of(align), "alignment {align} divides the layout's blocks");
    align
}

impl LayerFile {
    fn assemble(
        engine: &IoEngine,
        name: LayerName,
        file: File,
        file_size: u64,
        h: &Header,
        index: Index,
    ) -> LayerFile {
        LayerFile {
            name,
            path: file.path().to_path_buf(),
            file_size,
            engine: engine.clone(),
            read_align: read_align_of(&file),
            file,
            format_version: h.layout.version,
            values_offset: h.layout.values_offset(),
            values_len: h.values_len,
            index,
        }
    }

    /// Open and verify an existing layer file (for direct IO when
    /// `direct_io` and its format allows it).
    pub async fn load(
        engine: &IoEngine,
        path: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        direct_io: bool,
    ) -> anyhow::Result<LayerFile> {
        Self::load_inner(engine, path, (tenant_id, timeline_id), direct_io)
            .await
            .with_context(|| format!("layer file {} is unusable", path.display()))
    }

    async fn load_inner(
        engine: &IoEngine,
        path: &Path,
        ids: (TenantId, TimelineId),
        direct_io: bool,
    ) -> anyhow::Result<LayerFile> {
        let fname = path.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let name = LayerName::parse(fname).context("not a layer file name")?;
        let file = engine.open(path, OpenMode::READ).await?;
        let file_size = file.len().await?;
        ensure!(
            file_size >= HEADER_READ_BYTES,
            "file of {file_size} bytes is shorter than the header"
        );
        let hlen = HEADER_READ_BYTES as usize;
        let (hbuf, res) = file.read_exact_at(AlignedBuf::with_capacity(hlen), 0, hlen).await;
        res?;
        let h = Header::decode(&hbuf)?;
        check_header(&h, &name, ids, file_size)?;
        // A legacy index is read through the page cache, before reopening.
        let legacy = match h.tree {
            Some(_) => None,
            None => Some(read_legacy_index(&file, &h).await?),
        };
        // Version 1 files are not block-aligned: they stay buffered.
        let file = if direct_io && h.layout.direct_io_capable() {
            engine.open(path, OpenMode::READ.with_direct(true)).await?
        } else {
            file
        };
        let index = match (legacy, h.tree) {
            (Some(legacy), _) => Index::Legacy(legacy),
            (None, Some(shape)) => Index::Tree(TreeIndex::open(&file, &h, shape).await?),
            (None, None) => unreachable!("a legacy index was read"),
        };
        Ok(LayerFile::assemble(engine, name, file, file_size, &h, index))
    }

    pub fn kind(&self) -> LayerKind {
        self.name.kind
    }

    pub fn key_range(&self) -> &std::ops::Range<Key> {
        &self.name.key_range
    }

    pub fn lsn_range(&self) -> &std::ops::Range<Lsn> {
        &self.name.lsn_range
    }

    /// The file's format version (3 for every layer this daemon writes).
    pub fn format_version(&self) -> u16 {
        self.format_version
    }

    pub fn entry_count(&self) -> u64 {
        match &self.index {
            Index::Tree(t) => t.entry_count(),
            Index::Legacy(l) => l.entries().len() as u64,
        }
    }

    /// Chunk reads (`read_chunk`) start and end on multiples of this.
    pub fn read_align(&self) -> u64 {
        self.read_align
    }

    /// The engine the file was opened through.
    pub fn engine(&self) -> &IoEngine {
        &self.engine
    }

    /// Whether the file was opened with direct IO (so a copy of it, e.g.
    /// downloaded again, is opened the same way).
    pub fn is_direct_io(&self) -> bool {
        self.file.direct_io_align().is_some()
    }

    /// Push the entries of `key` with `floor < LSN <= lsn` to `out`, newest
    /// first, up to and including the first `will_init` one; returns
    /// whether one was reached (then older layers are not needed). Index
    /// blocks come from the block cache or are read (and cached).
    pub async fn collect(
        &self,
        key: CompactKey,
        lsn: Lsn,
        floor: Lsn,
        out: &mut Vec<(Lsn, BlobRef)>,
    ) -> Result<bool, LayerReadError> {
        let found = self.collect_with((key, lsn, floor), out, Fetch::ReadMisses).await?;
        Ok(found.expect("a walk that reads misses always finishes"))
    }

    /// `collect` from memory only, without waiting: `None` when an index
    /// block it needs is not in the block cache (`out` may then hold some
    /// entries, to be discarded; `collect` finishes the job).
    pub fn collect_cached(
        &self,
        key: CompactKey,
        lsn: Lsn,
        floor: Lsn,
        out: &mut Vec<(Lsn, BlobRef)>,
    ) -> Option<Result<bool, LayerReadError>> {
        let walk = self.collect_with((key, lsn, floor), out, Fetch::CachedOnly);
        walk.now_or_never().expect("a cached-only walk never waits").transpose()
    }

    async fn collect_with(
        &self,
        (key, lsn, floor): (CompactKey, Lsn, Lsn),
        out: &mut Vec<(Lsn, BlobRef)>,
        fetch: Fetch,
    ) -> Result<Option<bool>, LayerReadError> {
        if !self.name.key_range.contains(&Key::from_compact(key)) {
            return Ok(Some(false)); // no index block to read
        }
        match &self.index {
            Index::Tree(t) => t.collect(&self.file, (key, lsn, floor), out, fetch).await,
            Index::Legacy(l) => Ok(Some(l.collect(key, lsn, floor, out))),
        }
    }

    /// Every index entry in (key, LSN) order, leaf by leaf (not through the
    /// block cache).
    pub fn entry_cursor(&self) -> EntryCursor<'_> {
        EntryCursor::new(self)
    }

    /// The serialized bytes of each value of `blobs` (verbatim, in the
    /// order given). Reads are coalesced into aligned chunks and issued as
    /// engine batches of at most `MAX_CHUNK_READS_PER_GET`; the caller
    /// bounds the memory by the number of blobs it asks for at once.
    pub async fn read_raw_values(&self, blobs: &[BlobRef]) -> Result<Vec<Bytes>, LayerReadError> {
        let ranges: Vec<(u64, u64)> = blobs.iter().map(|b| (b.offset(), b.end())).collect();
        for &(_, end) in &ranges {
            assert!(
                end <= self.values_len,
                "value {end} beyond the values of {}",
                self.path.display()
            );
        }
        let readable = self.file_size - self.values_offset;
        let chunks = coalesce(&ranges, readable, self.read_align);
        let mut bufs: Vec<Bytes> = Vec::with_capacity(chunks.len());
        for wave in chunks.chunks(RAW_READS_PER_BATCH) {
            let reads = wave.iter().map(|r| self.chunk_read(r.start, (r.end - r.start) as usize));
            for (buf, res) in self.engine.read_exact_at_many(reads.collect()).await {
                res.map_err(|e| LayerReadError::Io {
                    path: self.path.clone(),
                    source: Arc::new(e),
                })?;
                bufs.push(Bytes::from_owner(buf));
            }
        }
        let values = blobs.iter().map(|b| {
            let ci = chunks.partition_point(|r| r.start <= b.offset()) - 1;
            let at = (b.offset() - chunks[ci].start) as usize;
            bufs[ci].slice(at..at + b.len())
        });
        Ok(values.collect())
    }

    /// The read of `len` bytes at `offset` of the values region, both
    /// multiples of [`Self::read_align`], for a batch
    /// (`IoEngine::read_exact_at_many`).
    pub fn chunk_read(&self, offset: u64, len: usize) -> ReadAt<'_> {
        debug_assert!(
            offset.is_multiple_of(self.read_align) && (len as u64).is_multiple_of(self.read_align),
            "chunk {offset}+{len} of {} is not aligned to {}",
            self.path.display(),
            self.read_align
        );
        let offset = self.values_offset + offset;
        ReadAt { file: &self.file, buf: AlignedBuf::for_read(len), offset, len }
    }

    /// `chunk_read`, on its own.
    pub async fn read_chunk(&self, offset: u64, len: usize) -> io::Result<AlignedBuf> {
        let ReadAt { file, buf, offset, len } = self.chunk_read(offset, len);
        let (buf, res) = file.read_exact_at(buf, offset, len).await;
        res?; // the engine's error names the operation and the file
        Ok(buf)
    }
}

/// The header's claims against the file name, the expected owner and the
/// file's size.
fn check_header(
    h: &Header,
    name: &LayerName,
    ids: (TenantId, TimelineId),
    file_size: u64,
) -> anyhow::Result<()> {
    ensure!((h.tenant_id, h.timeline_id) == ids, "belongs to {}/{}", h.tenant_id, h.timeline_id);
    ensure!(
        h.kind == name.kind && h.key_range == name.key_range && h.lsn_range == name.lsn_range,
        "header kind or ranges differ from the file name"
    );
    let layout = h.layout;
    ensure!(
        h.index_offset >= layout.values_offset() + h.values_len
            && h.index_offset.is_multiple_of(layout.align),
        "index offset {} overlaps the values or is misaligned",
        h.index_offset
    );
    let index_bytes = match &h.tree {
        Some(shape) => shape.index_bytes(),
        None => legacy::index_bytes(h.entry_count),
    };
    ensure!(
        file_size == layout.file_size(h.index_offset, index_bytes),
        "file size {file_size} does not match its header (truncated or corrupt)"
    );
    Ok(())
}

async fn read_legacy_index(file: &File, h: &Header) -> anyhow::Result<LegacyIndex> {
    let len = legacy::index_bytes(h.entry_count) as usize;
    let (buf, res) = file.read_exact_at(AlignedBuf::with_capacity(len), h.index_offset, len).await;
    res?;
    LegacyIndex::decode(&buf, h)
}

#[cfg(test)]
mod tests;
