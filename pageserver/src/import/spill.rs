//! Spill file: tar entries that arrive before the import can create its
//! timeline.
//!
//! The timeline needs the backup LSN (from `backup_label`, always the first
//! entry of a `pg_basebackup` tar) and the PostgreSQL major version (from
//! `PG_VERSION`, whose position follows the server's `readdir` order, so
//! `base/` may come first). Entries seen before both are known are copied
//! here and replayed once the timeline exists, keeping memory bounded.
//!
//! The file is created in the system temp directory and unlinked at once:
//! it vanishes when dropped, on error, or when the process is killed.
//! Record format: `path_len u32 LE | path | is_dir u8 | size u64 LE | data`.

use std::io;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use tokio::fs::File;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};

pub struct SpillWriter {
    file: BufWriter<File>,
    pub entries: u64,
    pub bytes: u64,
}

pub struct SpillReader {
    file: BufReader<File>,
    /// Data bytes of the current entry not yet read.
    remaining: u64,
}

/// One spilled entry header.
pub struct SpilledEntry {
    pub path: String,
    pub is_dir: bool,
    pub size: u64,
}

impl SpillWriter {
    pub async fn create(dir: &Path) -> io::Result<SpillWriter> {
        let name = format!(
            "pageserver-import-spill-{}-{}",
            std::process::id(),
            utils::id::TimelineId::generate()
        );
        let path = dir.join(name);
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await?;
        tokio::fs::remove_file(&path).await?;
        Ok(SpillWriter { file: BufWriter::with_capacity(1 << 20, file), entries: 0, bytes: 0 })
    }

    pub async fn begin_entry(&mut self, path: &str, is_dir: bool, size: u64) -> io::Result<()> {
        self.file.write_u32_le(path.len() as u32).await?;
        self.file.write_all(path.as_bytes()).await?;
        self.file.write_u8(is_dir as u8).await?;
        self.file.write_u64_le(size).await?;
        self.entries += 1;
        Ok(())
    }

    /// Append data of the current entry (the caller writes exactly `size`).
    pub async fn write_data(&mut self, data: &[u8]) -> io::Result<()> {
        self.bytes += data.len() as u64;
        self.file.write_all(data).await
    }

    pub async fn into_reader(mut self) -> io::Result<SpillReader> {
        self.file.flush().await?;
        let mut file = self.file.into_inner();
        use tokio::io::AsyncSeekExt;
        file.seek(io::SeekFrom::Start(0)).await?;
        Ok(SpillReader { file: BufReader::with_capacity(1 << 20, file), remaining: 0 })
    }
}

impl SpillReader {
    pub async fn next_entry(&mut self) -> io::Result<Option<SpilledEntry>> {
        if self.remaining > 0 {
            let mut skip = (&mut self.file).take(self.remaining);
            tokio::io::copy(&mut skip, &mut tokio::io::sink()).await?;
            self.remaining = 0;
        }
        let len = match self.file.read_u32_le().await {
            Ok(l) => l as usize,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut path = vec![0u8; len];
        self.file.read_exact(&mut path).await?;
        let is_dir = self.file.read_u8().await? != 0;
        let size = self.file.read_u64_le().await?;
        self.remaining = size;
        let path = String::from_utf8(path)
            .map_err(|_| io::Error::other("spill file: path is not UTF-8"))?;
        Ok(Some(SpilledEntry { path, is_dir, size }))
    }

    /// Up to `max` bytes of the current entry (fewer only at its end).
    pub async fn read_data(&mut self, max: usize) -> io::Result<Bytes> {
        let n = self.remaining.min(max as u64) as usize;
        let mut buf = BytesMut::zeroed(n);
        self.file.read_exact(&mut buf).await?;
        self.remaining -= n as u64;
        Ok(buf.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip_and_unlinked() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SpillWriter::create(dir.path()).await.unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "unlinked at once");
        w.begin_entry("base/5/16384", false, 10000).await.unwrap();
        w.write_data(&[1u8; 4000]).await.unwrap();
        w.write_data(&[2u8; 6000]).await.unwrap();
        w.begin_entry("base/5", true, 0).await.unwrap();
        w.begin_entry("base/5/16385", false, 3).await.unwrap();
        w.write_data(b"abc").await.unwrap();
        assert_eq!((w.entries, w.bytes), (3, 10003));
        let mut r = w.into_reader().await.unwrap();
        let e = r.next_entry().await.unwrap().unwrap();
        assert_eq!((e.path.as_str(), e.is_dir, e.size), ("base/5/16384", false, 10000));
        let d = r.read_data(8192).await.unwrap();
        assert_eq!((d.len(), d[0], d[4000]), (8192, 1, 2));
        // The rest of the entry is skipped by next_entry.
        let e = r.next_entry().await.unwrap().unwrap();
        assert_eq!((e.path.as_str(), e.is_dir), ("base/5", true));
        let e = r.next_entry().await.unwrap().unwrap();
        assert_eq!(e.path, "base/5/16385");
        assert_eq!(&r.read_data(100).await.unwrap()[..], b"abc");
        assert_eq!(r.read_data(100).await.unwrap().len(), 0);
        assert!(r.next_entry().await.unwrap().is_none());
    }
}
