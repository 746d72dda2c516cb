//! `EphemeralFile`: the append-only file behind an in-memory layer.
//!
//! Appends go to an in-memory tail buffer; a full tail becomes `pending`
//! while it is written to disk, then a new tail starts. Reads combine the
//! three places a byte can be: on disk (`< flushed_len`), in `pending`, or in
//! the tail.
//!
//! Concurrency contract: exactly one appender at a time (the timeline's
//! writer lock guarantees it); any number of concurrent readers. Bytes
//! readers may read (those of completed appends) are never changed, so
//! readers read the on-disk ones without a lock.
//!
//! Failed writes (a full disk): `append` is all or nothing. When a tail
//! write fails, the state goes back to what it was before the append: the
//! logical end, `flushed_len` and the tail's bytes (saved when the append
//! began, only by an append that fills the tail). Tails written by the
//! failed append stay on disk beyond `flushed_len` as garbage that the next
//! tail writes overwrite; the bytes of the restored tail are rewritten with
//! the same content, so a reader that still reads them from disk sees them
//! unchanged.
//! The state lock is a std `RwLock` held only for memcpy-sized sections,
//! never across an await.
//!
//! Direct IO (`direct_io` in the config): the file is opened with
//! `O_DIRECT`. Its writes are whole tails (`TAIL_SIZE`, block aligned, at
//! block-aligned offsets), double-buffered by `tail` and `pending`; a read
//! of the on-disk part reads the enclosing blocks of the file's direct IO
//! alignment (all below `flushed_len`, which is a multiple of `TAIL_SIZE`)
//! and copies the range.
//!
//! The file is removed (through the IO engine's synchronous
//! `remove_from_drop`: `Drop` cannot await) when the `EphemeralFile` is dropped (its layer has been
//! flushed to an L0 file, or the timeline is gone). Start-up deletes any
//! leftovers (`ephemeral-*`), since their content is not durable by design.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use io_engine::{AlignedBuf, File, IoEngine, OpenMode, DIRECT_IO_ALIGN};

/// Size of the tail buffer, and so of each disk write.
pub const TAIL_SIZE: usize = 256 * 1024;
const _: () =
    assert!(TAIL_SIZE.is_multiple_of(DIRECT_IO_ALIGN), "tails are whole direct IO blocks");

pub const EPHEMERAL_PREFIX: &str = "ephemeral-";

pub struct EphemeralFile {
    engine: IoEngine,
    path: PathBuf,
    file: File,
    /// Opened for direct IO: disk reads are block aligned.
    direct: bool,
    state: RwLock<State>,
}

/// What `append` puts back when a write fails.
struct Saved {
    flushed_len: u64,
    tail: AlignedBuf,
}

struct State {
    /// Bytes `[0, flushed_len)` are on disk.
    flushed_len: u64,
    /// Bytes `[flushed_len, flushed_len + pending.len())` being written.
    pending: Option<Arc<AlignedBuf>>,
    /// Bytes after those.
    tail: AlignedBuf,
    /// A recycled buffer for the next tail.
    spare: Option<AlignedBuf>,
}

impl State {
    fn len(&self) -> u64 {
        self.flushed_len
            + self.pending.as_ref().map_or(0, |p| p.len() as u64)
            + self.tail.len() as u64
    }
}

impl EphemeralFile {
    pub async fn create(
        engine: &IoEngine,
        dir: &Path,
        seq: u64,
        direct: bool,
    ) -> io::Result<EphemeralFile> {
        let path = dir.join(format!("{EPHEMERAL_PREFIX}{seq}"));
        if engine.exists(&path).await? {
            engine.remove_file(&path).await?; // left by an earlier run; start-up removes these too
        }
        let file = engine.open(&path, OpenMode::CREATE_NEW.with_direct(direct)).await?;
        Ok(EphemeralFile {
            engine: engine.clone(),
            path,
            file,
            direct,
            state: RwLock::new(State {
                flushed_len: 0,
                pending: None,
                tail: AlignedBuf::with_capacity(TAIL_SIZE),
                spare: None,
            }),
        })
    }

    pub fn len(&self) -> u64 {
        self.state.read().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append `data`; returns the offset it starts at. Single appender only.
    ///
    /// All or nothing: if a write fails (a full disk), the file is as it
    /// was before the call (`len()` back at the returned offset would have
    /// been, the tail holding what it held), so the caller may append the
    /// same bytes again and they land at the same offset.
    pub async fn append(&self, data: &[u8]) -> io::Result<u64> {
        let (start, saved) = {
            let st = self.state.read().unwrap();
            debug_assert!(st.pending.is_none(), "a previous append did not finish its write");
            // Only an append that fills the tail writes, and so can fail:
            // keep what the tail held to put it back then.
            let saved = (data.len() >= st.tail.remaining()).then(|| Saved {
                flushed_len: st.flushed_len,
                tail: AlignedBuf::from_slice_with_capacity(&st.tail, TAIL_SIZE),
            });
            (st.len(), saved)
        };
        match self.append_unchecked(data).await {
            Ok(()) => Ok(start),
            Err(e) => {
                let saved = saved.expect("only an append that fills the tail writes");
                let mut st = self.state.write().unwrap();
                st.flushed_len = saved.flushed_len;
                st.pending = None;
                st.tail = saved.tail;
                debug_assert_eq!(st.len(), start);
                Err(e)
            }
        }
    }

    async fn append_unchecked(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let full = {
                let mut st = self.state.write().unwrap();
                let n = st.tail.remaining().min(data.len());
                st.tail.extend_from_slice(&data[..n]);
                data = &data[n..];
                if st.tail.remaining() == 0 {
                    let next =
                        st.spare.take().unwrap_or_else(|| AlignedBuf::with_capacity(TAIL_SIZE));
                    let full = Arc::new(std::mem::replace(&mut st.tail, next));
                    st.pending = Some(full.clone());
                    Some((full, st.flushed_len))
                } else {
                    None
                }
            };
            if let Some((full, offset)) = full {
                self.write_pending(full, offset).await?;
            }
        }
        Ok(())
    }

    async fn write_pending(&self, full: Arc<AlignedBuf>, offset: u64) -> io::Result<()> {
        // `pending` holds a clone for readers: write from a private copy,
        // recycled as the next spare tail.
        let owned = AlignedBuf::from_slice(&full);
        drop(full);
        let len = owned.len() as u64;
        let (mut buf, res) = self.file.write_all_at(owned, offset).await;
        res?; // the engine's error names the operation and the file
        let mut st = self.state.write().unwrap();
        st.flushed_len += len;
        st.pending = None;
        buf.clear();
        st.spare = Some(buf);
        Ok(())
    }

    /// Read `len` bytes at `offset` into `buf` (cleared first). The range
    /// must have been appended already.
    pub async fn read_at(
        &self,
        buf: AlignedBuf,
        offset: u64,
        len: usize,
    ) -> io::Result<AlignedBuf> {
        let end = offset + len as u64;
        let mut buf = buf;
        // Copy the in-memory part under the lock; remember the disk part.
        let disk_end = {
            let st = self.state.read().unwrap();
            if end > st.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "read [{offset}, {end}) past the end {} of {}",
                        st.len(),
                        self.path.display()
                    ),
                ));
            }
            buf.clear();
            buf.set_len(len);
            let mut copy_from = |src: &[u8], src_start: u64| {
                let src_end = src_start + src.len() as u64;
                let (lo, hi) = (offset.max(src_start), end.min(src_end));
                if lo < hi {
                    buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(
                        &src[(lo - src_start) as usize..(hi - src_start) as usize],
                    );
                }
            };
            let mut mem_start = st.flushed_len;
            if let Some(p) = &st.pending {
                copy_from(p, mem_start);
                mem_start += p.len() as u64;
            }
            copy_from(&st.tail, mem_start);
            st.flushed_len.min(end)
        };
        if offset < disk_end {
            let n = (disk_end - offset) as usize;
            if n == len && !self.direct {
                let (b, res) = self.file.read_exact_at(buf, offset, n).await;
                res?;
                return Ok(b);
            }
            let tmp = self.read_disk(offset, n, disk_end).await?;
            buf[..n].copy_from_slice(&tmp[..n]);
        }
        Ok(buf)
    }

    /// Read `n` on-disk bytes at `offset` into a fresh buffer that starts
    /// with them (under direct IO, read the enclosing aligned blocks).
    /// `disk_end` is `flushed_len` as of the caller's look at the state (a
    /// failed append may lower it since; the bytes below it stay valid).
    async fn read_disk(&self, offset: u64, n: usize, disk_end: u64) -> io::Result<AlignedBuf> {
        if !self.direct {
            let (tmp, res) = self.file.read_exact_at(AlignedBuf::try_for_read(n)?, offset, n).await;
            return res.map(|_| tmp);
        }
        let Some(block) = self.file.direct_io_align() else {
            return Err(io::Error::other(format!(
                "{} is not open for direct IO",
                self.path.display()
            )));
        };
        let block = block as u64;
        let start = offset / block * block;
        let end = (offset + n as u64).next_multiple_of(block);
        debug_assert!(end <= disk_end.next_multiple_of(TAIL_SIZE as u64), "aligned read past disk");
        let len = (end - start) as usize;
        let (mut tmp, res) =
            self.file.read_exact_at(AlignedBuf::try_for_read(len)?, start, len).await;
        res?;
        let skip = (offset - start) as usize;
        if skip > 0 {
            tmp.spare_full_mut().copy_within(skip..skip + n, 0);
        }
        tmp.set_len(n);
        Ok(tmp)
    }
}

impl Drop for EphemeralFile {
    fn drop(&mut self) {
        self.engine.remove_from_drop(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_engine::IoEngineKind;

    #[tokio::test]
    async fn reads_span_disk_pending_and_tail() {
        for direct in [false, true] {
            reads_span_disk_pending_and_tail_with(direct).await;
        }
    }

    async fn reads_span_disk_pending_and_tail_with(direct: bool) {
        let dir = tempfile::tempdir().unwrap();
        let eng = IoEngine::new(IoEngineKind::StdFs).unwrap();
        let f = EphemeralFile::create(&eng, dir.path(), 1, direct).await.unwrap();
        let mut model = Vec::new();
        let mut rng = 12345u64;
        for i in 0..400 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let n = (rng >> 40) as usize % 9000 + 1;
            let chunk: Vec<u8> = (0..n).map(|j| (i + j) as u8).collect();
            let off = f.append(&chunk).await.unwrap();
            assert_eq!(off, model.len() as u64);
            model.extend_from_slice(&chunk);
        }
        assert!(model.len() > 3 * TAIL_SIZE);
        let reads = [(0, 10), (TAIL_SIZE - 5, 10), (100, 2 * TAIL_SIZE), (model.len() - 7, 7)];
        for (off, len) in reads.into_iter().chain([(4095, 2), (TAIL_SIZE, 4096), (8191, 9000)]) {
            let b = f.read_at(AlignedBuf::with_capacity(len), off as u64, len).await.unwrap();
            assert_eq!(&b[..], &model[off..off + len], "read at {off}+{len}, direct {direct}");
        }
        let path = dir.path().join("ephemeral-1");
        assert!(path.exists());
        drop(f);
        assert!(!path.exists());
    }
}
