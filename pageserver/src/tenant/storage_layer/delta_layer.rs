//! L0 delta layer files: the durable form of a flushed in-memory layer.
//!
//! Layout (all offsets 512-byte aligned):
//! ```text
//! [0, 512)            header (little-endian fields, CRC-32C at the end)
//! [512, 512+V)        values: the ephemeral file's bytes, copied verbatim
//! [I, I+34*n+4)       index: n x (key 18 B big-endian, lsn u64 BE, blobref u64 BE),
//!                     sorted by (key, lsn), then CRC-32C (LE) of the entries
//! ```
//! Header: magic "PSDL", format version, tenant and timeline ids, key range,
//! LSN range, values offset/length, index offset/length, entry count.
//! Every value carries its own CRC (`value.rs`); the header and index are
//! checked when the layer is loaded. A file that fails any check is an error
//! naming the file, never silently used.
//!
//! Writing is crash safe: write `<name>.___temp`, fsync, rename; the
//! directory fsync that makes the rename durable is the one of the manifest
//! update that follows in the same directory (until then the manifest does
//! not list the file, and start-up removes it). A layer file is immutable
//! once renamed into place.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use io_engine::{AlignedBuf, File, IoEngine, OpenMode};
use pageserver_api::key::{CompactKey, Key, KEY_SIZE};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::inmemory_layer::InMemoryLayer;
use super::key_index::KeyIndex;
use super::{BlobRef, DeltaLayerName};

const MAGIC: &[u8; 4] = b"PSDL";
const FORMAT_VERSION: u16 = 1;
const HEADER_SIZE: u64 = 512;
const INDEX_ENTRY_SIZE: usize = KEY_SIZE + 8 + 8;
/// Encoded header: magic, version, pad, two ids, two keys, six u64s, CRC.
const HEADER_ENCODED_LEN: usize = 4 + 2 + 2 + 16 + 16 + 2 * KEY_SIZE + 6 * 8 + 4;
const _: () = assert!(HEADER_ENCODED_LEN <= HEADER_SIZE as usize, "the header fits its block");
const _: () = assert!(HEADER_SIZE % 512 == 0, "values start 512-byte aligned (direct IO)");
/// Chunk size for copying values from the ephemeral file.
const COPY_CHUNK: usize = 1024 * 1024;

pub struct DeltaLayer {
    pub name: DeltaLayerName,
    pub path: PathBuf,
    pub file_size: u64,
    file: File,
    /// Sorted by (key, lsn).
    index: Vec<(CompactKey, Lsn, BlobRef)>,
    /// Finds a key's entries in `index` in O(1).
    key_index: KeyIndex,
}

struct Header {
    tenant_id: TenantId,
    timeline_id: TimelineId,
    key_range: std::ops::Range<Key>,
    lsn_range: std::ops::Range<Lsn>,
    values_len: u64,
    index_offset: u64,
    entry_count: u64,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_SIZE as usize);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(self.tenant_id.as_bytes());
        b.extend_from_slice(self.timeline_id.as_bytes());
        b.extend_from_slice(&self.key_range.start.to_be_bytes());
        b.extend_from_slice(&self.key_range.end.to_be_bytes());
        for v in [self.lsn_range.start.0, self.lsn_range.end.0, HEADER_SIZE, self.values_len] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.index_offset, self.entry_count] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(b.len(), HEADER_ENCODED_LEN);
        b
    }

    fn decode(b: &[u8]) -> anyhow::Result<Header> {
        const LEN: usize = 4 + 2 + 2 + 16 + 16 + 2 * KEY_SIZE + 6 * 8;
        ensure!(b.len() >= LEN + 4, "header truncated");
        ensure!(&b[0..4] == MAGIC, "bad magic {:02x?} (not a delta layer)", &b[0..4]);
        let stored = u32::from_le_bytes(b[LEN..LEN + 4].try_into().unwrap());
        let computed = crc32c::crc32c(&b[..LEN]);
        ensure!(
            stored == computed,
            "header checksum mismatch: stored {stored:#x}, computed {computed:#x}"
        );
        let version = u16::from_le_bytes([b[4], b[5]]);
        ensure!(version == FORMAT_VERSION, "unsupported format version {version}");
        let key = |o: usize| Key::from_be_bytes(b[o..o + KEY_SIZE].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let o = 40 + 2 * KEY_SIZE;
        ensure!(u64_at(o + 16) == HEADER_SIZE, "unexpected values offset");
        Ok(Header {
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

async fn write_at(file: &File, data: AlignedBuf, offset: u64) -> io::Result<AlignedBuf> {
    let (buf, res) = file.write_all_at(data, offset).await;
    res.map(|_| buf)
}

impl DeltaLayer {
    /// Write a frozen, non-empty in-memory layer to an L0 file in `dir` and
    /// open it. The value bytes are copied without decoding.
    pub async fn write_from_inmemory(
        engine: &IoEngine,
        dir: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        layer: &InMemoryLayer,
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
        let name = DeltaLayerName { key_range, lsn_range: layer.start_lsn..end_lsn };
        let path = dir.join(name.to_string());
        let temp = engine.create_temp(&path).await.context("create layer file")?;
        let temp = temp.with_failpoints("flush");
        let tmp = temp.temp_path().to_path_buf();
        let file = temp.file();

        // Values, verbatim.
        let values_len = layer.size();
        let eph = layer.ephemeral_file();
        let mut buf = AlignedBuf::with_capacity(COPY_CHUNK);
        let mut off = 0u64;
        while off < values_len {
            let n = (values_len - off).min(COPY_CHUNK as u64) as usize;
            buf = eph.read_at(buf, off, n).await.context("read ephemeral file")?;
            buf = write_at(&file, buf, HEADER_SIZE + off)
                .await
                .with_context(|| format!("write {}", tmp.display()))?;
            off += n as u64;
        }

        // Index.
        let index_offset = (HEADER_SIZE + values_len).next_multiple_of(512);
        let mut ibuf = AlignedBuf::with_capacity(index.len() * INDEX_ENTRY_SIZE + 4);
        let mut crc = 0u32;
        let mut entry = [0u8; INDEX_ENTRY_SIZE];
        for (k, lsn, blob) in &index {
            Key::from_compact(*k).write_be((&mut entry[..KEY_SIZE]).try_into().unwrap());
            entry[KEY_SIZE..KEY_SIZE + 8].copy_from_slice(&lsn.0.to_be_bytes());
            entry[KEY_SIZE + 8..].copy_from_slice(&blob.raw().to_be_bytes());
            crc = crc32c::crc32c_append(crc, &entry);
            ibuf.extend_from_slice(&entry);
        }
        ibuf.extend_from_slice(&crc.to_le_bytes());
        write_at(&file, ibuf, index_offset)
            .await
            .with_context(|| format!("write {}", tmp.display()))?;

        let header = Header {
            tenant_id,
            timeline_id,
            key_range: name.key_range.clone(),
            lsn_range: name.lsn_range.clone(),
            values_len,
            index_offset,
            entry_count: index.len() as u64,
        };
        write_at(&file, AlignedBuf::from_slice(&header.encode()), 0).await?;
        // The directory fsync comes with the manifest update (same directory).
        let file = temp.commit_deferring_dir_sync().await.context("write layer file")?;
        let file_size = file.len().await?;
        let key_index = KeyIndex::build(&index);
        Ok(DeltaLayer { name, path, file_size, file, index, key_index })
    }

    /// Open and verify an existing layer file.
    pub async fn load(
        engine: &IoEngine,
        path: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
    ) -> anyhow::Result<DeltaLayer> {
        Self::load_inner(engine, path, tenant_id, timeline_id)
            .await
            .with_context(|| format!("layer file {} is unusable", path.display()))
    }

    async fn load_inner(
        engine: &IoEngine,
        path: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
    ) -> anyhow::Result<DeltaLayer> {
        let fname = path.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let name = DeltaLayerName::parse(fname).context("not a layer file name")?;
        let file = engine.open(path, OpenMode::READ).await?;
        let file_size = file.len().await?;
        ensure!(file_size >= HEADER_SIZE, "file of {file_size} bytes is shorter than the header");
        let (hbuf, res) = file
            .read_exact_at(AlignedBuf::with_capacity(HEADER_SIZE as usize), 0, HEADER_SIZE as usize)
            .await;
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
        let index_len = h.entry_count as usize * INDEX_ENTRY_SIZE;
        ensure!(h.index_offset >= HEADER_SIZE + h.values_len, "index overlaps values");
        ensure!(
            file_size == h.index_offset + index_len as u64 + 4,
            "file size {file_size} does not match its header (truncated or corrupt)"
        );
        let (ibuf, res) = file
            .read_exact_at(AlignedBuf::with_capacity(index_len + 4), h.index_offset, index_len + 4)
            .await;
        res?;
        let stored = u32::from_le_bytes(ibuf[index_len..].try_into().unwrap());
        let computed = crc32c::crc32c(&ibuf[..index_len]);
        ensure!(
            stored == computed,
            "index checksum mismatch: stored {stored:#x}, computed {computed:#x}"
        );
        let mut index = Vec::with_capacity(h.entry_count as usize);
        for e in ibuf[..index_len].chunks_exact(INDEX_ENTRY_SIZE) {
            let key = Key::from_be_bytes(e[..KEY_SIZE].try_into().unwrap()).to_compact();
            let lsn = Lsn(u64::from_be_bytes(e[KEY_SIZE..KEY_SIZE + 8].try_into().unwrap()));
            let blob = BlobRef::from_raw(u64::from_be_bytes(e[KEY_SIZE + 8..].try_into().unwrap()));
            if blob.end() > h.values_len || !h.lsn_range.contains(&lsn) {
                bail!(
                    "index entry for {} at {lsn} points outside the layer",
                    Key::from_compact(key)
                );
            }
            index.push((key, lsn, blob));
        }
        ensure!(index.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)), "index not sorted");
        let key_index = KeyIndex::build(&index);
        Ok(DeltaLayer { name, path: path.to_path_buf(), file_size, file, index, key_index })
    }

    pub fn lsn_range(&self) -> &std::ops::Range<Lsn> {
        &self.name.lsn_range
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

    /// Read `len` bytes at `offset` of the values region.
    pub async fn read_chunk(&self, offset: u64, len: usize) -> io::Result<AlignedBuf> {
        let (buf, res) =
            self.file.read_exact_at(AlignedBuf::for_read(len), HEADER_SIZE + offset, len).await;
        res?; // the engine's error names the operation and the file
        Ok(buf)
    }
}
