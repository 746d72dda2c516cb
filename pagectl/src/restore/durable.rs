//! Writing a restore's files so that making them durable at the end costs
//! little: the disk writes while the stream goes on, and the final fsyncs
//! run side by side.
//!
//! - [`copy_with_writeback`] writes a file in writes of up to the buffer's
//!   size (1 MiB in a restore, not `io::copy`'s 8 KiB) and, after every
//!   [`WRITEBACK_BYTES`] and at the end of the file, asks the kernel to
//!   start writing the range just written back (`sync_file_range` with
//!   `SYNC_FILE_RANGE_WRITE` on Linux, as PostgreSQL's `pg_flush_data`
//!   does; nothing elsewhere). It is a hint: it neither waits for the disk
//!   nor makes anything durable, and its failure is ignored (an IO error
//!   comes back from the fsync).
//! - [`sync_files`] fsyncs every file from up to [`SYNC_THREADS`] threads:
//!   concurrent fsyncs share journal commits (ext4, XFS), where a data
//!   directory's ~1,000 small files one after the other wait for one
//!   commit each. It returns only after every fsync has returned, and fails
//!   if any failed (the first failure by file order, naming the file).
//!
//! Durability is the callers' fsync of every file and directory, as
//! before; this module changes only when the disk does the work.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Context;

/// Bytes written to a file between two writeback hints.
pub const WRITEBACK_BYTES: u64 = 8 << 20;
/// Threads that fsync files at the end of a restore.
pub const SYNC_THREADS: usize = 8;

/// Copy `data` to the end of `file` through `buf` (each write as full as
/// the stream allows), starting the writeback of every [`WRITEBACK_BYTES`]
/// written. Returns the bytes copied.
pub fn copy_with_writeback(
    data: &mut impl Read,
    file: &mut File,
    buf: &mut [u8],
) -> io::Result<u64> {
    assert!(!buf.is_empty(), "a copy needs a buffer");
    let (mut written, mut hinted) = (0u64, 0u64);
    loop {
        let filled = fill(data, buf)?;
        if filled == 0 {
            break;
        }
        file.write_all(&buf[..filled])?;
        written += filled as u64;
        if written - hinted >= WRITEBACK_BYTES {
            start_writeback(file, hinted, written - hinted);
            hinted = written;
        }
    }
    if written > hinted {
        start_writeback(file, hinted, written - hinted);
    }
    Ok(written)
}

/// Read into `buf` until it is full or the stream ends; the bytes read.
fn fill(data: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match data.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Ask the kernel to start writing `len` bytes at `offset` of `file` back.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else { return };
    // SAFETY: a plain syscall on an open descriptor; no memory is passed.
    // Its result is ignored: a hint (see the module's doc).
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

/// fsync every file of `files` (see the module's doc).
pub fn sync_files(files: &[PathBuf]) -> anyhow::Result<()> {
    let next = AtomicUsize::new(0);
    let failures: Mutex<Vec<(usize, anyhow::Error)>> = Mutex::new(Vec::new());
    let threads = SYNC_THREADS.min(files.len());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else { break };
                let synced = File::open(path).and_then(|f| f.sync_all());
                if let Err(e) = synced.with_context(|| format!("fsync {}", path.display())) {
                    failures.lock().unwrap_or_else(|p| p.into_inner()).push((i, e));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    failures.sort_by_key(|(i, _)| *i);
    match failures.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `step` bytes a call, and fails
    /// with Interrupted every other call.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        interrupt: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn copies_every_byte_across_writeback_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        // Crosses WRITEBACK_BYTES twice and ends in a partial buffer.
        let len = 2 * WRITEBACK_BYTES as usize + 12_345;
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let path = dir.path().join("f");
        let mut file = File::create(&path).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut src = Trickle { data: &data, step: 70_001, interrupt: false };
        assert_eq!(copy_with_writeback(&mut src, &mut file, &mut buf).unwrap(), len as u64);
        drop(file);
        assert!(std::fs::read(&path).unwrap() == data, "the file differs from the stream");
    }

    #[test]
    fn an_empty_stream_makes_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty");
        let mut file = File::create(&path).unwrap();
        let mut buf = vec![0u8; 4096];
        assert_eq!(copy_with_writeback(&mut io::empty(), &mut file, &mut buf).unwrap(), 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn sync_files_syncs_all_and_names_the_first_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut files: Vec<PathBuf> = (0..50).map(|i| dir.path().join(format!("f{i}"))).collect();
        for f in &files {
            std::fs::write(f, b"x").unwrap();
        }
        sync_files(&files).unwrap();
        sync_files(&[]).unwrap();
        files.insert(7, dir.path().join("gone-a"));
        files.insert(30, dir.path().join("gone-b"));
        let err = format!("{:#}", sync_files(&files).unwrap_err());
        assert!(
            err.starts_with("fsync ") && err.contains("gone-a") && !err.contains("gone-b"),
            "{err}"
        );
    }
}
