//! The `std-fs` engine: blocking positional syscalls on the calling thread.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::OpenMode;

pub(crate) struct StdFile(fs::File);

impl StdFile {
    pub fn open(path: &Path, mode: OpenMode) -> io::Result<StdFile> {
        let f = OpenOptions::new()
            .read(true)
            .write(mode.write)
            .create(mode.create && !mode.create_new)
            .create_new(mode.create_new)
            .truncate(mode.truncate)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
        Ok(StdFile(f))
    }

    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    pub fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    pub fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
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
