//! L0 delta layer files: the durable form of a flushed in-memory layer.
//!
//! Layout (format version 2; `header.rs` describes version 1 too):
//! ```text
//! [0, 4096)           header (little-endian fields, CRC-32C, zero padding)
//! [4096, 4096+V)      values: the ephemeral file's bytes, copied verbatim
//! [I, I+34*n+4)       index: n x (key 18 B big-endian, lsn u64 BE, blobref u64 BE),
//!                     sorted by (key, lsn), then CRC-32C (LE) of the entries;
//!                     I and the file's end are multiples of 4096
//! ```
//! Header: magic "PSDL", format version, tenant and timeline ids, key range,
//! LSN range, values offset/length, index offset/length, entry count.
//! Every value carries its own CRC (`value.rs`); the header and index are
//! checked when the layer is loaded. A file that fails any check is an error
//! naming the file, never silently used.
//!
//! Direct IO (`direct_io` in the config): every region is block-aligned, so
//! a layer is written (whole aligned buffers, the copy double-buffered) and
//! read with `O_DIRECT`; reads are then aligned to what the file system
//! asks, 512 or 4096 bytes ([`DeltaLayer::read_align`]). The header and
//! index are read once at load through the page cache.
//!
//! Writing is crash safe: write `<name>.___temp`, fsync, rename; the
//! directory fsync that makes the rename durable is the one of the manifest
//! update that follows in the same directory (until then the manifest does
//! not list the file, and start-up removes it). A layer file is immutable
//! once renamed into place.

mod header;

use std::io;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use io_engine::{AlignedBuf, File, IoEngine, OpenMode, ReadAt};
use pageserver_api::key::{CompactKey, Key, KEY_SIZE};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::ephemeral_file::EphemeralFile;
use super::inmemory_layer::InMemoryLayer;
use super::key_index::KeyIndex;
use super::{BlobRef, LayerName};
use header::{Header, Layout, BLOCK_BYTES, HEADER_READ_BYTES};

const INDEX_ENTRY_SIZE: usize = KEY_SIZE + 8 + 8;
/// Chunk size for copying values from the ephemeral file.
const COPY_CHUNK: usize = 1024 * 1024;
const _: () = assert!((COPY_CHUNK as u64).is_multiple_of(BLOCK_BYTES));
/// Read alignment of a layer read through the page cache.
const BUFFERED_READ_ALIGN: u64 = 512;

pub struct DeltaLayer {
    pub name: LayerName,
    pub path: PathBuf,
    pub file_size: u64,
    file: File,
    /// Where the values region starts in the file.
    values_offset: u64,
    /// Multiple of which every chunk read's offset and length must be.
    read_align: u64,
    /// Sorted by (key, lsn).
    index: Vec<(CompactKey, Lsn, BlobRef)>,
    /// Finds a key's entries in `index` in O(1).
    key_index: KeyIndex,
}

async fn write_at(file: &File, data: AlignedBuf, offset: u64) -> io::Result<AlignedBuf> {
    let (buf, res) = file.write_all_at(data, offset).await;
    res.map(|_| buf)
}

/// Chunk reads of `file` start and end on multiples of this: the file's
/// direct IO alignment (512 or 4096), or 512 through the page cache. The
/// values region starts at a multiple of it (`BLOCK_BYTES` is one).
fn read_align_of(file: &File) -> u64 {
    let align = file.direct_io_align().map_or(BUFFERED_READ_ALIGN, |a| a as u64);
    assert!(BLOCK_BYTES.is_multiple_of(align), "alignment {align} divides the layout's blocks");
    align
}

/// Zero-fill `buf` up to the next block boundary (a direct write's length
/// must be whole blocks; the padding is never read as data).
fn pad_to_block(buf: &mut AlignedBuf) {
    let (len, padded) = (buf.len(), buf.len().next_multiple_of(BLOCK_BYTES as usize));
    buf.spare_full_mut()[len..padded].fill(0);
    buf.set_len(padded);
}

/// Copy `values_len` bytes of `eph` to `file` at `dest_offset` (block
/// aligned), in `COPY_CHUNK` pieces, reading the next piece while the
/// previous one is written (two buffers). The last piece is zero-padded to
/// a whole block.
async fn copy_values(
    eph: &EphemeralFile,
    file: &File,
    values_len: u64,
    dest_offset: u64,
) -> anyhow::Result<()> {
    assert!(dest_offset.is_multiple_of(BLOCK_BYTES));
    let mut free =
        vec![AlignedBuf::with_capacity(COPY_CHUNK), AlignedBuf::with_capacity(COPY_CHUNK)];
    let mut in_write: Option<(AlignedBuf, u64)> = None;
    let mut off = 0u64;
    while off < values_len || in_write.is_some() {
        let next = (off < values_len).then(|| {
            let n = (values_len - off).min(COPY_CHUNK as u64) as usize;
            (free.pop().expect("a buffer is free: at most one other is being written"), n)
        });
        let to_write = in_write.take();
        let read = async {
            match next {
                Some((buf, n)) => Some(eph.read_at(buf, off, n).await),
                None => None,
            }
        };
        let write = async {
            match to_write {
                Some((buf, at)) => Some(file.write_all_at(buf, at).await),
                None => None,
            }
        };
        let (read, written) = tokio::join!(read, write);
        if let Some((buf, res)) = written {
            res.with_context(|| format!("write {}", file.path().display()))?;
            free.push(buf);
        }
        if let Some(res) = read {
            let mut buf = res.context("read ephemeral file")?;
            let n = buf.len() as u64;
            pad_to_block(&mut buf);
            in_write = Some((buf, dest_offset + off));
            off += n;
        }
    }
    Ok(())
}

/// The index region: entries, CRC, zero padding to a whole block.
fn encode_index(index: &[(CompactKey, Lsn, BlobRef)]) -> AlignedBuf {
    let mut ibuf = AlignedBuf::with_capacity(index.len() * INDEX_ENTRY_SIZE + 4);
    let mut crc = 0u32;
    let mut entry = [0u8; INDEX_ENTRY_SIZE];
    for (k, lsn, blob) in index {
        Key::from_compact(*k).write_be((&mut entry[..KEY_SIZE]).try_into().unwrap());
        entry[KEY_SIZE..KEY_SIZE + 8].copy_from_slice(&lsn.0.to_be_bytes());
        entry[KEY_SIZE + 8..].copy_from_slice(&blob.raw().to_be_bytes());
        crc = crc32c::crc32c_append(crc, &entry);
        ibuf.extend_from_slice(&entry);
    }
    ibuf.extend_from_slice(&crc.to_le_bytes());
    pad_to_block(&mut ibuf);
    ibuf
}

fn decode_index(bytes: &[u8], h: &Header) -> anyhow::Result<Vec<(CompactKey, Lsn, BlobRef)>> {
    let index_len = bytes.len() - 4;
    let stored = u32::from_le_bytes(bytes[index_len..].try_into().unwrap());
    let computed = crc32c::crc32c(&bytes[..index_len]);
    ensure!(
        stored == computed,
        "index checksum mismatch: stored {stored:#x}, computed {computed:#x}"
    );
    let mut index = Vec::with_capacity(h.entry_count as usize);
    for e in bytes[..index_len].chunks_exact(INDEX_ENTRY_SIZE) {
        let key = Key::from_be_bytes(e[..KEY_SIZE].try_into().unwrap()).to_compact();
        let lsn = Lsn(u64::from_be_bytes(e[KEY_SIZE..KEY_SIZE + 8].try_into().unwrap()));
        let blob = BlobRef::from_raw(u64::from_be_bytes(e[KEY_SIZE + 8..].try_into().unwrap()));
        if blob.end() > h.values_len || !h.lsn_range.contains(&lsn) {
            bail!("index entry for {} at {lsn} points outside the layer", Key::from_compact(key));
        }
        index.push((key, lsn, blob));
    }
    ensure!(index.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)), "index not sorted");
    Ok(index)
}

impl DeltaLayer {
    /// Write a frozen, non-empty in-memory layer to an L0 file in `dir` and
    /// open it (for direct IO when `direct_io`). The value bytes are copied
    /// without decoding.
    pub async fn write_from_inmemory(
        engine: &IoEngine,
        dir: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        layer: &InMemoryLayer,
        direct_io: bool,
    ) -> anyhow::Result<DeltaLayer> {
        let end_lsn = layer.end_lsn().expect("only frozen layers are flushed");
        let index = layer.sorted_entries();
        ensure!(!index.is_empty(), "flush of an empty layer");
        assert!(
            index.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)),
            "layer index must be sorted by (key, lsn) without duplicates before it is written"
        );
        let key_range =
            Key::from_compact(index[0].0)..Key::from_compact(index[index.len() - 1].0).next();
        let name = LayerName::delta(key_range, layer.start_lsn..end_lsn);
        let path = dir.join(name.to_string());
        let temp =
            engine.create_temp_direct(&path, direct_io).await.context("create layer file")?;
        let temp = temp.with_failpoints("flush");
        let tmp = temp.temp_path().to_path_buf();
        let file = temp.file();

        let layout = Layout::CURRENT;
        let values_len = layer.size();
        copy_values(layer.ephemeral_file(), file, values_len, layout.values_offset()).await?;
        let index_offset = layout.index_offset(values_len);
        write_at(file, encode_index(&index), index_offset)
            .await
            .with_context(|| format!("write {}", tmp.display()))?;
        let header = Header {
            layout,
            tenant_id,
            timeline_id,
            key_range: name.key_range.clone(),
            lsn_range: name.lsn_range.clone(),
            values_len,
            index_offset,
            entry_count: index.len() as u64,
        };
        write_at(file, AlignedBuf::from_slice(&header.encode()), 0).await?;
        // The directory fsync comes with the manifest update (same directory).
        let file = temp.commit_deferring_dir_sync().await.context("write layer file")?;
        let file_size = file.len().await?;
        let index_bytes = (index.len() * INDEX_ENTRY_SIZE + 4) as u64;
        assert_eq!(file_size, layout.file_size(index_offset, index_bytes), "{}", path.display());
        let key_index = KeyIndex::build(&index);
        let read_align = read_align_of(&file);
        let values_offset = layout.values_offset();
        Ok(DeltaLayer { name, path, file_size, file, values_offset, read_align, index, key_index })
    }

    /// Open and verify an existing layer file (for direct IO when
    /// `direct_io` and its format allows it).
    pub async fn load(
        engine: &IoEngine,
        path: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        direct_io: bool,
    ) -> anyhow::Result<DeltaLayer> {
        Self::load_inner(engine, path, tenant_id, timeline_id, direct_io)
            .await
            .with_context(|| format!("layer file {} is unusable", path.display()))
    }

    async fn load_inner(
        engine: &IoEngine,
        path: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        direct_io: bool,
    ) -> anyhow::Result<DeltaLayer> {
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
        ensure!(
            h.tenant_id == tenant_id && h.timeline_id == timeline_id,
            "belongs to {}/{}",
            h.tenant_id,
            h.timeline_id
        );
        ensure!(
            h.key_range == name.key_range && h.lsn_range == name.lsn_range,
            "header ranges differ from the file name"
        );
        let layout = h.layout;
        let index_bytes = h.entry_count as usize * INDEX_ENTRY_SIZE + 4;
        ensure!(
            h.index_offset >= layout.values_offset() + h.values_len
                && h.index_offset.is_multiple_of(layout.align),
            "index offset {} overlaps the values or is misaligned",
            h.index_offset
        );
        ensure!(
            file_size == layout.file_size(h.index_offset, index_bytes as u64),
            "file size {file_size} does not match its header (truncated or corrupt)"
        );
        let (ibuf, res) = file
            .read_exact_at(AlignedBuf::with_capacity(index_bytes), h.index_offset, index_bytes)
            .await;
        res?;
        let index = decode_index(&ibuf, &h)?;
        let key_index = KeyIndex::build(&index);
        // Version 1 files are not block-aligned: they stay buffered.
        let file = if direct_io && layout.direct_io_capable() {
            engine.open(path, OpenMode::READ.with_direct(true)).await?
        } else {
            file
        };
        let read_align = read_align_of(&file);
        Ok(DeltaLayer {
            name,
            path: path.to_path_buf(),
            file_size,
            file,
            values_offset: layout.values_offset(),
            read_align,
            index,
            key_index,
        })
    }

    pub fn lsn_range(&self) -> &std::ops::Range<Lsn> {
        &self.name.lsn_range
    }

    /// Chunk reads (`read_chunk`) start and end on multiples of this.
    pub fn read_align(&self) -> u64 {
        self.read_align
    }

    /// Same contract as `InMemoryLayer::collect`.
    pub fn collect(&self, key: CompactKey, lsn: Lsn, out: &mut Vec<(Lsn, BlobRef)>) -> bool {
        // Entries of `key` with LSN <= lsn end just before `end`, the
        // partition point of `(k, l) <= (key, lsn)` in the index.
        let end = self.partition_point(key, lsn);
        for &(k, l, blob) in self.index[..end].iter().rev() {
            if k != key {
                break;
            }
            out.push((l, blob));
            if blob.will_init() {
                return true;
            }
        }
        false
    }

    fn partition_point(&self, key: CompactKey, lsn: Lsn) -> usize {
        self.key_index.partition_point(&self.index, key, lsn)
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

#[cfg(test)]
mod tests;
