//! Spill file: tar entries that arrive before the import can create its
//! timeline.
//!
//! The timeline needs the backup LSN (from `backup_label`, always the first
//! entry of a `pg_basebackup` tar) and the PostgreSQL major version (from
//! `PG_VERSION`, whose position follows the server's `readdir` order, so
//! `base/` may come first). Entries seen before both are known are copied
//! here and replayed once the timeline exists, keeping memory bounded.
//!
//! Record format: `path_len u32 LE | path | is_dir u8 | size u64 LE | data`.
//!
//! Invariants:
//! - The file lives in the tenant's scratch directory (`Tenant::scratch_dir`,
//!   under the workdir, emptied at start-up) and is unlinked right after it
//!   is created: it vanishes when dropped, on error, or when the process is
//!   killed, and never appears in a directory listing.
//! - All IO goes through the IO engine: positional writes of whole
//!   `AlignedBuf`s at increasing offsets, positional reads into one
//!   `AlignedBuf`; memory is one buffer of `SPILL_BUF_SIZE`, moved from the
//!   writer to the reader.
//! - The writer accepts exactly `size` data bytes per entry; more is an
//!   error, and so is starting the next entry (or reading back) before the
//!   current one is complete. A file that ends inside a record is an
//!   `UnexpectedEof` error, never a silently shorter entry.

use std::io;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use io_engine::{AlignedBuf, File, IoEngine, OpenMode};

/// Buffer size of the writer and the reader.
const SPILL_BUF_SIZE: usize = 1024 * 1024;

pub struct SpillWriter {
    file: File,
    /// Bytes not yet written; `buf.len() < buf.capacity()` between calls.
    buf: AlignedBuf,
    /// Bytes written to the file (the offset of `buf[0]`).
    written: u64,
    /// Data bytes the current entry still expects.
    pending: u64,
    pub entries: u64,
    pub bytes: u64,
}

pub struct SpillReader {
    file: File,
    /// File bytes `[next - buf.len(), next)`; `buf[pos..]` not yet consumed.
    buf: AlignedBuf,
    pos: usize,
    /// File offset of the next refill.
    next: u64,
    /// File length (everything the writer wrote).
    len: u64,
    /// Data bytes of the current entry not yet read.
    remaining: u64,
}

/// One spilled entry header.
#[derive(Debug)]
pub struct SpilledEntry {
    pub path: String,
    pub is_dir: bool,
    pub size: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl SpillWriter {
    /// Create the spill file in `dir` (the tenant's scratch directory) and
    /// unlink it at once.
    pub async fn create(engine: &IoEngine, dir: &Path) -> io::Result<SpillWriter> {
        Self::create_with_buf(engine, dir, SPILL_BUF_SIZE).await
    }

    async fn create_with_buf(
        engine: &IoEngine,
        dir: &Path,
        buf_size: usize,
    ) -> io::Result<SpillWriter> {
        let name = format!("import-spill-{}", utils::id::TimelineId::generate());
        let path = dir.join(name);
        let file = engine.open(&path, OpenMode::CREATE_NEW).await?;
        engine.remove_file(&path).await?; // unlinked while open: gone on any exit
        Ok(SpillWriter {
            file,
            buf: AlignedBuf::with_capacity(buf_size),
            written: 0,
            pending: 0,
            entries: 0,
            bytes: 0,
        })
    }

    pub async fn begin_entry(&mut self, path: &str, is_dir: bool, size: u64) -> io::Result<()> {
        self.check_complete()?;
        let path_len = u32::try_from(path.len())
            .map_err(|_| invalid(format!("spill: path of {} bytes", path.len())))?;
        self.append(&path_len.to_le_bytes()).await?;
        self.append(path.as_bytes()).await?;
        self.append(&[is_dir as u8]).await?;
        self.append(&size.to_le_bytes()).await?;
        self.pending = size;
        self.entries += 1;
        Ok(())
    }

    /// Append data of the current entry (the caller writes exactly `size`).
    pub async fn write_data(&mut self, data: &[u8]) -> io::Result<()> {
        if data.len() as u64 > self.pending {
            return Err(invalid(format!(
                "spill: {} data bytes for an entry that expects {} more",
                data.len(),
                self.pending
            )));
        }
        self.append(data).await?;
        self.pending -= data.len() as u64;
        self.bytes += data.len() as u64;
        Ok(())
    }

    /// Write out the partial buffer and rewind for reading.
    pub async fn into_reader(mut self) -> io::Result<SpillReader> {
        self.check_complete()?;
        if !self.buf.is_empty() {
            self.write_buf().await?;
        }
        Ok(SpillReader {
            file: self.file,
            buf: self.buf,
            pos: 0,
            next: 0,
            len: self.written,
            remaining: 0,
        })
    }

    fn check_complete(&self) -> io::Result<()> {
        if self.pending > 0 {
            return Err(invalid(format!("spill: entry is {} data bytes short", self.pending)));
        }
        Ok(())
    }

    async fn append(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = data.len().min(self.buf.remaining());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.remaining() == 0 {
                self.write_buf().await?;
            }
        }
        Ok(())
    }

    async fn write_buf(&mut self) -> io::Result<()> {
        // The engine owns the buffer during the call; a one-page placeholder
        // stands in (0.4% of a full buffer's IO).
        let buf = std::mem::replace(&mut self.buf, AlignedBuf::with_capacity(0));
        let (mut buf, res) = self.file.write_all_at(buf, self.written).await;
        res?;
        self.written += buf.len() as u64;
        buf.clear();
        self.buf = buf;
        Ok(())
    }
}

impl SpillReader {
    pub async fn next_entry(&mut self) -> io::Result<Option<SpilledEntry>> {
        if self.remaining > 0 {
            self.skip(self.remaining)?;
            self.remaining = 0;
        }
        if self.pos == self.buf.len() && self.next == self.len {
            return Ok(None);
        }
        let mut len = [0u8; 4];
        self.read_into(&mut len).await?;
        let mut path = vec![0u8; u32::from_le_bytes(len) as usize];
        self.read_into(&mut path).await?;
        let mut is_dir = [0u8; 1];
        self.read_into(&mut is_dir).await?;
        let mut size = [0u8; 8];
        self.read_into(&mut size).await?;
        let size = u64::from_le_bytes(size);
        self.remaining = size;
        let path = String::from_utf8(path)
            .map_err(|_| io::Error::other("spill file: path is not UTF-8"))?;
        Ok(Some(SpilledEntry { path, is_dir: is_dir[0] != 0, size }))
    }

    /// Up to `max` bytes of the current entry (fewer only at its end).
    pub async fn read_data(&mut self, max: usize) -> io::Result<Bytes> {
        let n = self.remaining.min(max as u64) as usize;
        let mut out = BytesMut::zeroed(n);
        self.read_into(&mut out).await?;
        self.remaining -= n as u64;
        Ok(out.freeze())
    }

    /// Fill `out` from the buffer, refilling it from the file as consumed.
    async fn read_into(&mut self, mut out: &mut [u8]) -> io::Result<()> {
        while !out.is_empty() {
            if self.pos == self.buf.len() {
                self.refill().await?;
            }
            let n = out.len().min(self.buf.len() - self.pos);
            out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            out = &mut out[n..];
        }
        Ok(())
    }

    async fn refill(&mut self) -> io::Result<()> {
        let n = (self.len - self.next).min(self.buf.capacity() as u64) as usize;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "spill file ends inside a record",
            ));
        }
        let buf = std::mem::replace(&mut self.buf, AlignedBuf::with_capacity(0));
        let (buf, res) = self.file.read_exact_at(buf, self.next, n).await;
        self.buf = buf;
        self.pos = 0;
        res?;
        self.next += n as u64;
        Ok(())
    }

    /// Skip `n` bytes without reading those past the buffer.
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let in_buf = (self.buf.len() - self.pos) as u64;
        if n <= in_buf {
            self.pos += n as usize;
            return Ok(());
        }
        let past = n - in_buf;
        if past > self.len - self.next {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "spill file ends inside an entry",
            ));
        }
        self.next += past;
        self.pos = self.buf.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
