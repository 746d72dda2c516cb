//! Writing layer files (format version 3): the flush of a frozen in-memory
//! layer ([`LayerFile::write_from_inmemory`], values copied verbatim from
//! the ephemeral file) and [`LayerWriter`] (compaction, image creation:
//! values put one by one, already serialized).
//!
//! Both write the values from offset 4096 in whole aligned buffers,
//! double-buffered (one filled or read while the other is written), then
//! the index blocks, then the header block, so every write is aligned and
//! the file can be written with direct IO.
//!
//! Crash safety: the file is written under a `.___temp` name, fsynced and
//! renamed; the directory fsync that makes the rename durable is the one of
//! the manifest update that follows in the same directory (until then the
//! manifest does not list the file, and start-up removes it). A write that
//! fails, or a writer dropped before `finish`, removes its file at once
//! ([`unfinished::Unfinished`]); start-up removes what a crash left. A layer
//! file is immutable once renamed.
//!
//! Errors: the IO engine's errors name the operation and the file; nothing
//! here repeats them, a context names only the step.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{ensure, Context};
use io_engine::{AlignedBuf, File, IoEngine, TempFile};
use pageserver_api::key::{CompactKey, Key};
use tokio::task::JoinHandle;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::ephemeral_file::EphemeralFile;
use super::super::inmemory_layer::InMemoryLayer;
use super::super::{BlobRef, LayerKind, LayerName};
use super::header::{Header, Layout, BLOCK_BYTES};
use super::index_builder::{BuiltIndex, IndexBuilder};
use super::tree_index::TreeIndex;
use super::{Index, LayerFile};
use unfinished::Unfinished;

mod unfinished;

/// Size of each value write, and of each piece of the flush's copy.
const COPY_CHUNK: usize = 1024 * 1024;
const _: () = assert!((COPY_CHUNK as u64).is_multiple_of(BLOCK_BYTES));
const _: () = assert!(COPY_CHUNK.is_multiple_of(io_engine::BUF_ALIGN));

async fn write_at(file: &File, data: AlignedBuf, offset: u64) -> anyhow::Result<AlignedBuf> {
    // The engine's error names the operation and the file.
    let (buf, res) = file.write_all_at(data, offset).await;
    res?;
    Ok(buf)
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
                Some((buf, at)) => Some(write_at(file, buf, at).await),
                None => None,
            }
        };
        let (read, written) = tokio::join!(read, write);
        if let Some(res) = written {
            free.push(res?);
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

/// Write the index blocks, then the header; commit the temp file under its
/// target name `path` (deferring the directory fsync) and open the layer.
/// On error `unfinished` removes the file, under either name.
async fn finish_file(
    engine: &IoEngine,
    (temp, path): (TempFile, &Path),
    mut unfinished: Unfinished,
    name: LayerName,
    ids: (TenantId, TimelineId),
    values_len: u64,
    index: BuiltIndex,
) -> anyhow::Result<LayerFile> {
    let layout = Layout::CURRENT;
    let index_offset = layout.index_offset(values_len);
    let file = temp.file();
    let mut buf = AlignedBuf::with_capacity(COPY_CHUNK);
    for (i, piece) in index.blocks.chunks(COPY_CHUNK).enumerate() {
        buf.clear();
        buf.extend_from_slice(piece);
        buf = write_at(file, buf, index_offset + (i * COPY_CHUNK) as u64).await?;
    }
    let header = Header {
        layout,
        kind: name.kind,
        tenant_id: ids.0,
        timeline_id: ids.1,
        key_range: name.key_range.clone(),
        lsn_range: name.lsn_range.clone(),
        values_len,
        index_offset,
        entry_count: index.entry_count,
        tree: Some(index.shape),
    };
    write_at(file, AlignedBuf::from_slice(&header.encode()), 0).await?;
    // The directory fsync comes with the manifest update (same directory).
    unfinished.renaming_to(path);
    let file = temp.commit_deferring_dir_sync().await.context("commit the layer file")?;
    let file_size = file.len().await?;
    let expected = layout.file_size(index_offset, index.shape.index_bytes());
    assert_eq!(file_size, expected, "{}", file.path().display());
    let tree = TreeIndex::written(&header, index.shape, index.root())?;
    unfinished.keep();
    Ok(LayerFile::assemble(engine, name, file, file_size, &header, Index::Tree(tree)))
}

impl LayerFile {
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
    ) -> anyhow::Result<LayerFile> {
        let end_lsn = layer.end_lsn().expect("only frozen layers are flushed");
        let entries = layer.sorted_entries();
        ensure!(!entries.is_empty(), "flush of an empty layer");
        let key_range =
            Key::from_compact(entries[0].0)..Key::from_compact(entries[entries.len() - 1].0).next();
        let name = LayerName::delta(key_range, layer.start_lsn..end_lsn);
        let mut index = IndexBuilder::new();
        for &(key, lsn, blob) in &entries {
            index.push(key, lsn, blob); // asserts (key, lsn) strictly increasing
        }
        drop(entries);
        let path = dir.join(name.to_string());
        let temp =
            engine.create_temp_direct(&path, direct_io).await.context("create layer file")?;
        let temp = temp.with_failpoints("flush");
        let unfinished = Unfinished::new(engine, &temp);
        let values_len = layer.size();
        let values_offset = Layout::CURRENT.values_offset();
        copy_values(layer.ephemeral_file(), temp.file(), values_len, values_offset).await?;
        let ids = (tenant_id, timeline_id);
        let index = index.finish();
        finish_file(engine, (temp, path.as_path()), unfinished, name, ids, values_len, index).await
    }
}

/// Values written from `Layout::CURRENT.values_offset()` in `COPY_CHUNK`
/// buffers: one is filled while the other is written (a spawned task, so
/// the write proceeds while the caller produces the next values).
struct ValueSink {
    temp: Arc<TempFile>,
    filling: AlignedBuf,
    /// File offset of `filling`'s first byte.
    filling_at: u64,
    /// The write of the other buffer; it returns its clone of `temp`.
    in_flight: Option<JoinHandle<(Arc<TempFile>, anyhow::Result<AlignedBuf>)>>,
    /// Value bytes appended.
    len: u64,
}

impl ValueSink {
    fn new(temp: TempFile) -> ValueSink {
        ValueSink {
            temp: Arc::new(temp),
            filling: AlignedBuf::with_capacity(COPY_CHUNK),
            filling_at: Layout::CURRENT.values_offset(),
            in_flight: None,
            len: 0,
        }
    }

    async fn append(&mut self, mut data: &[u8]) -> anyhow::Result<()> {
        while !data.is_empty() {
            let n = data.len().min(self.filling.remaining());
            self.filling.extend_from_slice(&data[..n]);
            (data, self.len) = (&data[n..], self.len + n as u64);
            if self.filling.remaining() == 0 {
                self.submit().await?;
            }
        }
        Ok(())
    }

    /// The buffer of the write in flight, once it is done.
    async fn wait(&mut self) -> anyhow::Result<Option<AlignedBuf>> {
        let Some(task) = self.in_flight.take() else { return Ok(None) };
        let (temp, res) = task.await.context("layer value write task")?;
        drop(temp);
        Ok(Some(res?))
    }

    /// Start writing `filling` (padded to a block) and fill the other buffer.
    async fn submit(&mut self) -> anyhow::Result<()> {
        let mut spare = self.wait().await?.unwrap_or_else(|| AlignedBuf::with_capacity(COPY_CHUNK));
        spare.clear();
        let mut full = std::mem::replace(&mut self.filling, spare);
        pad_to_block(&mut full);
        let at = self.filling_at;
        self.filling_at += full.len() as u64;
        let temp = self.temp.clone();
        self.in_flight = Some(tokio::spawn(async move {
            let res = write_at(temp.file(), full, at).await;
            (temp, res)
        }));
        Ok(())
    }

    /// Write what is left and wait for it; the temp file back.
    async fn finish(mut self) -> anyhow::Result<TempFile> {
        if !self.filling.is_empty() {
            self.submit().await?;
        }
        self.wait().await?;
        // The last write returned its clone: this one is the only one left.
        Ok(Arc::try_unwrap(self.temp).ok().expect("no write in flight holds the file"))
    }
}

/// Writes one layer file from values put in (key, LSN) order: a delta layer
/// over an LSN range, or an image layer (`lsn_range` = `I..I+1`, every value
/// at `I` and `will_init`). See the module comment for crash safety; after
/// an error the writer must be dropped.
pub struct LayerWriter {
    engine: IoEngine,
    dir: PathBuf,
    ids: (TenantId, TimelineId),
    kind: LayerKind,
    lsn_range: Range<Lsn>,
    values: ValueSink,
    /// Removes the file if the writer fails or is dropped unfinished.
    unfinished: Unfinished,
    index: IndexBuilder,
    first_key: Option<Key>,
    last_key: Option<CompactKey>,
}

/// Writers get distinct temp names in a process; start-up removes leftovers.
static NEXT_WRITER: AtomicU64 = AtomicU64::new(0);

impl LayerWriter {
    /// Start a layer file of `kind` over `lsn_range` in `dir` (a temp file
    /// until `finish`), for direct IO when `direct_io`. Panics on an empty
    /// LSN range, or an image layer's range that is not one LSN.
    pub async fn new(
        engine: &IoEngine,
        dir: &Path,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        kind: LayerKind,
        lsn_range: Range<Lsn>,
        direct_io: bool,
    ) -> anyhow::Result<LayerWriter> {
        assert!(lsn_range.start < lsn_range.end, "empty LSN range {lsn_range:?}");
        if kind == LayerKind::Image {
            assert_eq!(lsn_range.end, lsn_range.start + 1, "an image layer is at one LSN");
        }
        // Named by its key range once finished (`TempFile::retarget`).
        let seq = NEXT_WRITER.fetch_add(1, Ordering::Relaxed);
        let provisional = dir.join(format!("layer-writer-{seq}"));
        let temp = engine
            .create_temp_direct(&provisional, direct_io)
            .await
            .context("create layer file")?
            .with_failpoints("layer-write");
        let unfinished = Unfinished::new(engine, &temp);
        Ok(LayerWriter {
            engine: engine.clone(),
            dir: dir.to_path_buf(),
            ids: (tenant_id, timeline_id),
            kind,
            lsn_range,
            values: ValueSink::new(temp),
            unfinished,
            index: IndexBuilder::new(),
            first_key: None,
            last_key: None,
        })
    }

    /// Append one value: `raw` is a serialized `Value` (copied verbatim).
    /// Panics unless `(key, lsn)` is above the previous put's and `lsn` is
    /// in the writer's LSN range (for an image layer: its LSN, and
    /// `will_init`).
    pub async fn put_raw(
        &mut self,
        key: CompactKey,
        lsn: Lsn,
        raw: &[u8],
        will_init: bool,
    ) -> anyhow::Result<()> {
        assert!(self.lsn_range.contains(&lsn), "{lsn} outside the layer's {:?}", self.lsn_range);
        if self.kind == LayerKind::Image {
            assert!(will_init, "an image layer holds only images (key {})", Key::from_compact(key));
        }
        let blob = BlobRef::new(self.values.len, raw.len(), will_init);
        self.index.push(key, lsn, blob); // asserts the order
        self.first_key.get_or_insert(Key::from_compact(key));
        self.last_key = Some(key);
        self.values.append(raw).await
    }

    /// Value bytes put so far (the file less its header and index).
    pub fn bytes_written(&self) -> u64 {
        self.values.len
    }

    /// Bytes the index would take if the layer were finished now.
    pub fn index_bytes(&self) -> u64 {
        self.index.index_bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.first_key.is_none()
    }

    /// Write the index and header and commit the file, named by its kind,
    /// key range (first key put .. `key_end`) and LSN range. Fails for an
    /// empty writer; panics unless `key_end` is above every key put.
    pub async fn finish(self, key_end: Key) -> anyhow::Result<LayerFile> {
        let Some(first) = self.first_key else {
            anyhow::bail!("a layer file holds at least one value");
        };
        self.finish_with_key_range(first..key_end).await
    }

    /// `finish`, naming the file by `key_range`, which must contain every
    /// key put (an image layer states that its range has no other keys).
    pub async fn finish_with_key_range(self, key_range: Range<Key>) -> anyhow::Result<LayerFile> {
        let (Some(first), Some(last)) = (self.first_key, self.last_key) else {
            anyhow::bail!("a layer file holds at least one value");
        };
        assert!(
            key_range.start <= first && Key::from_compact(last) < key_range.end,
            "keys {first}..={} outside the layer's range {}..{}",
            Key::from_compact(last),
            key_range.start,
            key_range.end
        );
        let name = match self.kind {
            LayerKind::Delta => LayerName::delta(key_range, self.lsn_range.clone()),
            LayerKind::Image => LayerName::image(key_range, self.lsn_range.start),
        };
        // Layer files are immutable: a name already taken is a bug of the
        // caller, and renaming over it would replace a live layer's bytes.
        let path = self.dir.join(name.to_string());
        ensure!(
            !self.engine.exists(&path).await?,
            "layer file {} already exists: a new layer must not replace it",
            path.display()
        );
        let values_len = self.values.len;
        let unfinished = self.unfinished;
        let mut temp = self.values.finish().await?;
        temp.retarget(&path);
        let (index, engine) = (self.index.finish(), &self.engine);
        finish_file(engine, (temp, path.as_path()), unfinished, name, self.ids, values_len, index)
            .await
    }
}

#[cfg(test)]
mod tests;
