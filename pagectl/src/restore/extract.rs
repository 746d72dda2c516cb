//! Streaming extraction of a `fullbackup` tar into a data directory.
//!
//! Invariants:
//! - memory is bounded: entries are read one at a time from the stream
//!   (`tar::Archive` over a buffered reader) and copied with a fixed buffer;
//! - every path stays inside the data directory or a mapped tablespace
//!   directory: absolute paths, `..` and links in the archive are refused
//!   (the daemon writes none);
//! - directories are created 0700 and files 0600 (PostgreSQL refuses a
//!   data directory others can read), each recorded for the final fsync;
//! - `pg_tblspc/<oid>` of a mapped tablespace becomes a symlink to its
//!   directory and the tablespace's files go there; an unmapped one stays a
//!   directory in place (PostgreSQL 15+ reads in-place tablespaces);
//! - files are written through `durable.rs`, which starts their writeback
//!   while the stream goes on and fsyncs them side by side in `seal`;
//! - `global/pg_control` is written under [`CONTROL_PENDING`] and renamed
//!   into place by [`Extracted::seal`] only after everything is durable: a
//!   directory whose restore was interrupted has no `pg_control`, so no
//!   PostgreSQL starts on it. [`INCOMPLETE_MARKER`] (written before the
//!   first entry, removed after `pg_control` is in place) says so.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, ensure, Context};

use super::durable;
use super::progress::Progress;

/// Written first into the data directory, removed last: its presence
/// marks a restore that did not finish.
pub const INCOMPLETE_MARKER: &str = "pagectl_restore_incomplete";
/// Where `global/pg_control` waits until the restore is complete.
pub const CONTROL_PENDING: &str = "global/pg_control.pagectl-incomplete";
const PAGE_BYTES: u64 = 8192;
/// The largest write of a file's data (see `durable.rs`).
const COPY_BUFFER_BYTES: usize = 1 << 20;

pub struct Extracted {
    pub pgdata: PathBuf,
    /// Tablespace OIDs the archive held (mapped or in place).
    pub tablespaces: BTreeSet<u32>,
    /// Every file and directory written, for the final fsync.
    files: Vec<PathBuf>,
    dirs: BTreeSet<PathBuf>,
    pub has_postgresql_conf: bool,
    has_control: bool,
    /// The buffer every file is copied through.
    buf: Vec<u8>,
}

/// Extract `archive` into `pgdata` (existing, empty), tablespaces of `map`
/// into their directories (absolute; absent or empty).
pub fn extract(
    archive: impl Read,
    pgdata: &Path,
    map: &BTreeMap<u32, PathBuf>,
    progress: &mut Progress,
) -> anyhow::Result<Extracted> {
    let mut out = Extracted {
        pgdata: pgdata.to_path_buf(),
        tablespaces: BTreeSet::new(),
        files: Vec::new(),
        dirs: BTreeSet::from([pgdata.to_path_buf()]),
        has_postgresql_conf: false,
        has_control: false,
        buf: vec![0; COPY_BUFFER_BYTES],
    };
    let mut tar = tar::Archive::new(archive);
    for entry in tar.entries().context("reading the archive")? {
        let mut entry = entry.context("reading the archive")?;
        let name = entry.path().context("an archive entry's name")?.into_owned();
        let rel = checked_relative(&name)?;
        let kind = entry.header().entry_type();
        let dest = out.destination(&rel, map)?;
        if kind.is_dir() {
            out.mkdir(&dest)?;
        } else if kind.is_file() {
            let bytes = out.write_file(&rel, &dest, &mut entry)?;
            progress.bytes += bytes + 512; // the entry's tar header
            if is_relation_file(&rel) {
                progress.pages += bytes / PAGE_BYTES;
            }
            progress.tick();
        } else {
            bail!("archive entry {} is a {kind:?}, not a file or directory", name.display());
        }
    }
    ensure!(out.has_control, "the archive has no global/pg_control: it is not a fullbackup");
    Ok(out)
}

/// `name` as relative normal components only.
fn checked_relative(name: &Path) -> anyhow::Result<PathBuf> {
    let mut rel = PathBuf::new();
    for c in name.components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            _ => bail!("archive entry {} leaves the data directory", name.display()),
        }
    }
    ensure!(!rel.as_os_str().is_empty(), "archive entry with an empty name");
    Ok(rel)
}

/// Relation segment files: `global/N`, `base/D/N[_fork][.seg]`, and those
/// of tablespaces.
fn is_relation_file(rel: &Path) -> bool {
    let top = rel.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned());
    let numeric = rel
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()));
    numeric && matches!(top.as_deref(), Some("global" | "base" | "pg_tblspc"))
}

impl Extracted {
    /// Where `rel` goes: under the data directory, or, below a mapped
    /// `pg_tblspc/<oid>`, under the mapped directory.
    fn destination(&mut self, rel: &Path, map: &BTreeMap<u32, PathBuf>) -> anyhow::Result<PathBuf> {
        let mut parts = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned());
        if parts.next().as_deref() != Some("pg_tblspc") {
            return Ok(self.pgdata.join(rel));
        }
        let Some(oid) = parts.next() else { return Ok(self.pgdata.join(rel)) };
        let oid: u32 =
            oid.parse().with_context(|| format!("tablespace directory {}", rel.display()))?;
        self.tablespaces.insert(oid);
        let Some(target) = map.get(&oid) else { return Ok(self.pgdata.join(rel)) };
        let link = self.pgdata.join("pg_tblspc").join(oid.to_string());
        if fs::symlink_metadata(&link).is_err() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(target)
                .with_context(|| format!("create directory {}", target.display()))?;
            self.dirs.insert(target.clone());
            std::os::unix::fs::symlink(target, &link)
                .with_context(|| format!("symlink {} -> {}", link.display(), target.display()))?;
        }
        Ok(parts.fold(target.clone(), |p, part| p.join(part)))
    }

    fn mkdir(&mut self, dir: &Path) -> anyhow::Result<()> {
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e).with_context(|| format!("create directory {}", dir.display())),
        }
        self.dirs.insert(dir.to_path_buf());
        Ok(())
    }

    fn write_file(&mut self, rel: &Path, dest: &Path, data: &mut impl Read) -> anyhow::Result<u64> {
        let dest = if rel == Path::new("global/pg_control") {
            self.has_control = true;
            self.pgdata.join(CONTROL_PENDING)
        } else {
            dest.to_path_buf()
        };
        self.has_postgresql_conf |= rel == Path::new("postgresql.conf");
        if let Some(parent) = dest.parent() {
            if !self.dirs.contains(parent) {
                self.mkdir(parent)?; // the archive names directories first; in case not
            }
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&dest)
            .with_context(|| format!("create {}", dest.display()))?;
        let bytes = durable::copy_with_writeback(data, &mut file, &mut self.buf)
            .with_context(|| format!("write {}", dest.display()))?;
        self.files.push(dest);
        Ok(bytes)
    }

    /// Write a file the archive lacked (e.g. `postgresql.conf`), recorded
    /// for the fsync.
    pub fn add_file(&mut self, rel: &str, text: &str) -> anyhow::Result<()> {
        let dest = self.pgdata.join(rel);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&dest)
            .with_context(|| format!("create {}", dest.display()))?;
        io::Write::write_all(&mut file, text.as_bytes())
            .with_context(|| format!("write {}", dest.display()))?;
        self.files.push(dest);
        Ok(())
    }

    /// Make everything durable (files, then directories deepest first, and
    /// the parents of the data and tablespace directories), then put
    /// `pg_control` in place and make that durable: the restore is complete.
    pub fn seal(self, extra_dirs: &[PathBuf]) -> anyhow::Result<()> {
        durable::sync_files(&self.files)?;
        let mut dirs: Vec<&PathBuf> = self.dirs.iter().collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs.into_iter().chain(extra_dirs) {
            fsync_dir(d)?;
        }
        let control = self.pgdata.join("global/pg_control");
        fs::rename(self.pgdata.join(CONTROL_PENDING), &control)
            .with_context(|| format!("rename into {}", control.display()))?;
        fsync_dir(&self.pgdata.join("global"))?;
        let marker = self.pgdata.join(INCOMPLETE_MARKER);
        fs::remove_file(&marker).with_context(|| format!("remove {}", marker.display()))?;
        fsync_dir(&self.pgdata)
    }
}

pub fn fsync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync directory {}", dir.display()))
}
