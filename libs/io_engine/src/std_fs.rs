//! The `std-fs` engine: blocking positional syscalls on the calling thread.
//! Batches (`IoEngine::read_exact_at_many`) run one operation after another.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use crate::direct_io::{eof, short_read_hit_eof};
use crate::OpenMode;

pub(crate) struct StdFile {
    /// Shared with the file's io-uring state (`select.rs`).
    file: Arc<fs::File>,
    direct: bool,
}

/// Open `path` as `mode` says (both real engines open files this way).
pub(crate) fn open_file(path: &Path, mode: OpenMode) -> io::Result<fs::File> {
    OpenOptions::new()
        .read(true)
        .write(mode.write)
        .create(mode.create && !mode.create_new)
        .create_new(mode.create_new)
        .truncate(mode.truncate)
        .custom_flags(if mode.direct { libc::O_DIRECT } else { 0 })
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))
}

impl StdFile {
    pub fn new(file: fs::File, mode: OpenMode) -> StdFile {
        StdFile { file: Arc::new(file), direct: mode.direct }
    }

    pub fn shared(&self) -> &Arc<fs::File> {
        &self.file
    }

    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if !self.direct {
            return self.file.read_exact_at(buf, offset);
        }
        // std's loop would go on from an unaligned position after a short
        // direct read at EOF (EINVAL): stop there instead.
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => return Err(eof()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if short_read_hit_eof(true, done, buf.len()) {
                return Err(eof());
            }
        }
        Ok(())
    }

    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    pub fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    pub fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

pub(crate) fn fsync_dir(path: &Path) -> io::Result<()> {
    fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| io::Error::new(e.kind(), format!("fsync directory {}: {e}", path.display())))
}

pub(crate) fn read_dir(path: &Path) -> io::Result<Vec<crate::DirEntry>> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(path)? {
        let entry = entry?;
        let is_dir = entry.file_type()?.is_dir();
        entries.push(crate::DirEntry { name: entry.file_name(), is_dir });
    }
    entries.sort();
    Ok(entries)
}
