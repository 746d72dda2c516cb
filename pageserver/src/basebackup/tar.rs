//! A streaming tar writer: ustar headers, file data, the end-of-archive
//! marker, optionally gzip-compressed, handed to a [`ChunkSink`] in chunks
//! of about [`CHUNK_BYTES`].
//!
//! Invariants: at most one file is open; its data must add up to the size
//! its header announced (checked at `end_file`, before the 512-byte padding
//! is written), so a mistake is an error here, never a shifted archive. The
//! buffer never holds much more than one chunk plus one write.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use flate2::write::GzEncoder;
use flate2::Compression;

use super::BackupError;

/// Bytes handed to the sink at a time (before compression).
pub const CHUNK_BYTES: usize = 256 * 1024;
const BLOCK: usize = 512;
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// Where the archive goes (a libpq COPY stream, an HTTP body).
pub trait ChunkSink: Send {
    fn send(
        &mut self,
        chunk: Bytes,
    ) -> impl std::future::Future<Output = Result<(), BackupError>> + Send;
}

pub struct TarWriter<S: ChunkSink> {
    sink: S,
    buf: BytesMut,
    gzip: Option<GzEncoder<Vec<u8>>>,
    mtime_secs: u64,
    /// The open file: (path, bytes still due).
    open: Option<(String, u64)>,
    /// Uncompressed bytes of archive produced.
    pub bytes_written: u64,
}

impl<S: ChunkSink> TarWriter<S> {
    pub fn new(sink: S, gzip: bool) -> Self {
        let mtime_secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        TarWriter {
            sink,
            buf: BytesMut::with_capacity(CHUNK_BYTES + BLOCK),
            gzip: gzip.then(|| GzEncoder::new(Vec::new(), Compression::fast())),
            mtime_secs,
            open: None,
            bytes_written: 0,
        }
    }

    pub async fn dir(&mut self, path: &str) -> Result<(), BackupError> {
        let h = self.header(path, 0, ::tar::EntryType::Directory, DIR_MODE)?;
        self.put(&h).await
    }

    /// A whole small file.
    pub async fn file(&mut self, path: &str, data: &[u8]) -> Result<(), BackupError> {
        self.begin_file(path, data.len() as u64).await?;
        self.data(data).await?;
        self.end_file().await
    }

    pub async fn begin_file(&mut self, path: &str, size_bytes: u64) -> Result<(), BackupError> {
        assert!(self.open.is_none(), "tar: {path} begun while another file is open");
        let h = self.header(path, size_bytes, ::tar::EntryType::Regular, FILE_MODE)?;
        self.put(&h).await?;
        self.open = Some((path.to_string(), size_bytes));
        Ok(())
    }

    pub async fn data(&mut self, data: &[u8]) -> Result<(), BackupError> {
        let (path, due) = self.open.as_mut().expect("tar: data outside a file");
        if data.len() as u64 > *due {
            return Err(BackupError::Internal(format!(
                "tar entry {path}: {} bytes more than its header announced",
                data.len() as u64 - *due
            )));
        }
        *due -= data.len() as u64;
        self.put(data).await
    }

    pub async fn end_file(&mut self) -> Result<(), BackupError> {
        let (path, due) = self.open.take().expect("tar: end_file without a file");
        if due != 0 {
            return Err(BackupError::Internal(format!(
                "tar entry {path}: {due} bytes short of the size its header announced"
            )));
        }
        let pad = (BLOCK - (self.bytes_written as usize % BLOCK)) % BLOCK;
        self.put(&[0u8; BLOCK][..pad]).await
    }

    /// The end-of-archive marker, then everything still buffered.
    pub async fn finish(mut self) -> Result<S, BackupError> {
        assert!(self.open.is_none(), "tar: finish with a file open");
        self.put(&[0u8; 2 * BLOCK]).await?;
        self.emit().await?;
        if let Some(gz) = self.gzip.take() {
            let tail = gz.finish().map_err(|e| BackupError::Internal(format!("gzip: {e}")))?;
            self.sink.send(Bytes::from(tail)).await?;
        }
        Ok(self.sink)
    }

    fn header(
        &self,
        path: &str,
        size_bytes: u64,
        kind: ::tar::EntryType,
        mode: u32,
    ) -> Result<[u8; BLOCK], BackupError> {
        let mut h = ::tar::Header::new_ustar();
        h.set_path(path)
            .map_err(|e| BackupError::Internal(format!("tar entry name {path}: {e}")))?;
        h.set_entry_type(kind);
        h.set_size(size_bytes);
        h.set_mode(mode);
        h.set_mtime(self.mtime_secs);
        h.set_cksum();
        Ok(*h.as_bytes())
    }

    async fn put(&mut self, bytes: &[u8]) -> Result<(), BackupError> {
        self.bytes_written += bytes.len() as u64;
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK_BYTES {
            self.emit().await?;
        }
        Ok(())
    }

    /// Send the buffer (through the compressor, if any).
    async fn emit(&mut self) -> Result<(), BackupError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let raw = self.buf.split().freeze();
        let out = match &mut self.gzip {
            None => raw,
            Some(gz) => {
                gz.write_all(&raw).map_err(|e| BackupError::Internal(format!("gzip: {e}")))?;
                let compressed = std::mem::take(gz.get_mut());
                if compressed.is_empty() {
                    return Ok(());
                }
                Bytes::from(compressed)
            }
        };
        self.sink.send(out).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct VecSink(Vec<u8>);

    impl ChunkSink for VecSink {
        async fn send(&mut self, chunk: Bytes) -> Result<(), BackupError> {
            self.0.extend_from_slice(&chunk);
            Ok(())
        }
    }

    async fn sample(gzip: bool) -> Vec<u8> {
        let mut t = TarWriter::new(VecSink(Vec::new()), gzip);
        t.dir("base").await.unwrap();
        t.file("PG_VERSION", b"16\n").await.unwrap();
        let big = vec![7u8; CHUNK_BYTES + 1000];
        t.begin_file("base/5/16384", big.len() as u64).await.unwrap();
        t.data(&big[..100]).await.unwrap();
        t.data(&big[100..]).await.unwrap();
        t.end_file().await.unwrap();
        t.finish().await.unwrap().0
    }

    fn entries(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut a = ::tar::Archive::new(bytes);
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut v).unwrap();
                (e.path().unwrap().to_string_lossy().into_owned(), v)
            })
            .collect()
    }

    #[tokio::test]
    async fn round_trips_plain_and_gzip() {
        let plain = sample(false).await;
        assert_eq!(plain.len() % BLOCK, 0);
        let got = entries(&plain);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, "base");
        assert_eq!(got[1], ("PG_VERSION".to_string(), b"16\n".to_vec()));
        assert_eq!(got[2].1, vec![7u8; CHUNK_BYTES + 1000]);
        let gz = sample(true).await;
        let mut unzipped = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut unzipped)
            .unwrap();
        assert_eq!(unzipped.len(), plain.len());
        assert_eq!(entries(&unzipped), got);
    }

    #[tokio::test]
    async fn wrong_sizes_are_errors() {
        let mut t = TarWriter::new(VecSink(Vec::new()), false);
        t.begin_file("a", 10).await.unwrap();
        let e = t.data(&[0; 11]).await.unwrap_err();
        assert!(e.to_string().contains("1 bytes more"), "{e}");
        let mut t = TarWriter::new(VecSink(Vec::new()), false);
        t.begin_file("b", 10).await.unwrap();
        t.data(&[0; 4]).await.unwrap();
        let e = t.end_file().await.unwrap_err();
        assert!(e.to_string().contains("b: 6 bytes short"), "{e}");
    }
}
