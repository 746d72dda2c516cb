//! File IO for the pageserver: one interface, several engines.
//!
//! Every file operation of the daemon goes through `IoEngine`/`File`: open,
//! positional read and write, fsync, set_len, and the namespace operations
//! (create_dir_all, read_dir, rename, remove_file, remove_dir_all, fsync of a
//! directory). Nothing in the daemon calls `std::fs` for its data directory,
//! so a test engine can see (and fault) every operation.
//!
//! Calls take and return owned buffers (`AlignedBuf`), the shape io_uring
//! needs: the kernel may own the memory while the operation is in flight, so
//! the caller gets it back with the result.
//!
//! Engines:
//! - `std-fs`: positional `pread`/`pwrite`/`fsync` executed inline on the
//!   calling thread (page-cache hits cost ~1 µs; no thread hop as in tokio::fs).
//! - `io-uring`: reads, writes and fsyncs through an io_uring whose
//!   completions are driven from tokio's reactor through an eventfd
//!   (`uring.rs`, which states its concurrency contract). Page-cache hits
//!   and buffered writes io_uring would punt to a kernel thread (ext4)
//!   skip the ring by default ([`UringInline`]). Creating it fails with a
//!   plain error when the kernel refuses io_uring; there is no silent
//!   fallback.
//! - simulated (`sim` feature, tests only, [`IoEngine::simulated`]): an
//!   in-memory file system that drops or tears unsynced data on a simulated
//!   crash (`sim.rs`).
//!
//! Failpoints (`testing` feature of `utils`): every operation checks one named
//! `io::<op>::err` before it runs (`io::open::err`, `io::read::err`,
//! `io::write::err`, `io::fsync::err`, `io::set_len::err`, `io::create_dir::err`,
//! `io::read_dir::err`, `io::rename::err`, `io::remove::err`,
//! `io::fsync_dir::err`); `return` makes the operation fail with an error
//! naming the failpoint and the path.
//!
//! Open files are bounded (`max_open_files`): an open beyond the bound fails
//! with an error naming the limit instead of exhausting the process's
//! descriptors (sockets need them too).
//!
//! Batches: [`IoEngine::read_exact_at_many`] and
//! [`IoEngine::write_all_at_many`] (`batch.rs`) submit many operations with
//! one `io_uring_enter` per group of 2, and [`IoEngine::read_exact_at_each`]
//! yields each read as it completes; std-fs and the simulated engine run them one after
//! another, with the same results.
//!
//! Direct IO: [`OpenMode::with_direct`] opens with `O_DIRECT`; offsets,
//! lengths and buffer addresses must then be multiples of
//! [`DIRECT_IO_ALIGN`], checked here for every engine (`direct_io.rs`).
//!
//! Read buffers: `AlignedBuf::for_read` recycles dropped buffers of up to
//! 2 MiB + 64 KiB ([`MAX_POOLED_READ_BYTES`]) through a bounded process-wide
//! pool (`buf_pool.rs`), so steady-state reads do not pay for allocating
//! and zeroing (faulting in) a fresh buffer.
//!
//! Durability helpers: [`IoEngine::write_file_durably`] and [`TempFile`]
//! (write `<name>.___temp`, fsync, rename over `<name>`, fsync the directory).

mod aligned_buf;
mod batch;
mod buf_pool;
mod direct_io;
mod select;
#[cfg(feature = "sim")]
pub mod sim;
mod std_fs;
mod uring;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use select::{Backend, RealFile};

pub use aligned_buf::{AlignedBuf, BUF_ALIGN, MAX_BUF_BYTES};
pub use batch::{ReadAt, WriteAt};
pub use direct_io::DIRECT_IO_ALIGN;
pub use uring::MAX_IN_FLIGHT_OPS as URING_MAX_IN_FLIGHT_OPS;
/// Largest read buffer the pool recycles (`AlignedBuf::for_read`).
pub const MAX_POOLED_READ_BYTES: usize = buf_pool::MAX_POOLED_CAP;

/// Which engine executes file IO (config key `io_engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoEngineKind {
    /// `"std-fs"`
    StdFs,
    /// `"io-uring"`
    IoUring,
}

impl std::str::FromStr for IoEngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "std-fs" => Ok(IoEngineKind::StdFs),
            "io-uring" => Ok(IoEngineKind::IoUring),
            other => {
                Err(format!("unknown io_engine '{other}': expected \"std-fs\" or \"io-uring\""))
            }
        }
    }
}

/// Whether the io-uring engine may skip the ring where that is cheaper
/// and blocks no more than io_uring would (`uring/inline.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UringInline {
    /// Reads of regular files first try a non-blocking `preadv2(RWF_NOWAIT)`
    /// (io_uring's own first attempt) and use the ring only when that would
    /// block; buffered writes run inline with `pwrite` on file systems where
    /// io_uring would hand them to a kernel worker thread (ext4, tmpfs).
    /// Direct IO and fsync always use the ring.
    #[default]
    Auto,
    /// Every read, write and fsync goes through the ring.
    Never,
}

/// Default bound on files open through one engine (layer files stay open
/// while their layer is loaded, so this bounds loaded layers too).
pub const DEFAULT_MAX_OPEN_FILES: usize = 16 * 1024;

/// How to open a file.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenMode {
    pub write: bool,
    pub create: bool,
    /// Fail if the file exists (with `create`).
    pub create_new: bool,
    pub truncate: bool,
    /// Direct IO (`O_DIRECT`): see [`OpenMode::with_direct`].
    pub direct: bool,
}

impl OpenMode {
    pub const READ: OpenMode =
        OpenMode { write: false, create: false, create_new: false, truncate: false, direct: false };
    pub const CREATE_NEW: OpenMode =
        OpenMode { write: true, create: true, create_new: true, truncate: false, direct: false };
    pub const READ_WRITE: OpenMode =
        OpenMode { write: true, create: false, create_new: false, truncate: false, direct: false };

    /// Open with `O_DIRECT` (bypassing the page cache) or not. Every read
    /// and write of such a file must have its offset, length and buffer
    /// address aligned to [`DIRECT_IO_ALIGN`]; a misaligned one fails with
    /// `InvalidInput` naming them and the file (for every engine; the
    /// simulated one ignores `direct` otherwise).
    pub const fn with_direct(self, direct: bool) -> OpenMode {
        OpenMode { direct, ..self }
    }
}

/// One entry of [`IoEngine::read_dir`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    pub name: OsString,
    pub is_dir: bool,
}

impl DirEntry {
    /// The name as UTF-8, lossily (names the daemon writes are ASCII).
    pub fn name_lossy(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }
}

/// The engine handle; cheap to clone (all clones share the open-file
/// bound and the engine selection, see [`IoEngine::set_kind`]).
#[derive(Clone, Debug)]
pub struct IoEngine {
    open_files: Arc<OpenFiles>,
    /// The engine that runs operations now, and the ring once io-uring was selected.
    selected: Arc<select::Selected>,
    uring_inline: UringInline,
    /// Set for the simulated engine: every operation goes there instead.
    #[cfg(feature = "sim")]
    sim: Option<Arc<sim::SimFs>>,
}

/// Dispatch one namespace operation: to the simulated file system when the
/// engine is simulated, else to `$std`.
macro_rules! dispatch {
    ($self:ident, |$fs:ident| $sim:expr, $std:expr) => {{
        #[cfg(feature = "sim")]
        if let Some($fs) = &$self.sim {
            $sim
        } else {
            $std
        }
        #[cfg(not(feature = "sim"))]
        {
            $std
        }
    }};
}

/// The open-file bound shared by all clones of an engine.
#[derive(Debug)]
struct OpenFiles {
    max: usize,
    current: AtomicUsize,
}

/// Held by an open `File`; gives its slot back on drop.
struct OpenFileSlot(Arc<OpenFiles>);

impl Drop for OpenFileSlot {
    fn drop(&mut self) {
        let prev = self.0.current.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(prev > 0, "open-file count underflow");
    }
}

/// Check the failpoint `name` (`io::<op>::err`); an error names it and the path.
fn fail(name: &'static str, path: &Path) -> io::Result<()> {
    if !utils::failpoint::ENABLED {
        return Ok(());
    }
    utils::failpoint::failpoint(name)
        .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

/// An error that names the operation and the path.
fn named<'a>(op: &'a str, path: &'a Path) -> impl FnOnce(io::Error) -> io::Error + 'a {
    move |e| io::Error::new(e.kind(), format!("{op} {}: {e}", path.display()))
}

impl IoEngine {
    /// An engine of `kind`. For `IoUring` this creates the ring; when the
    /// kernel refuses io_uring the error names the errno and the
    /// alternative (`io_engine = "std-fs"`).
    pub fn new(kind: IoEngineKind) -> io::Result<Self> {
        Self::with_max_open_files(kind, DEFAULT_MAX_OPEN_FILES)
    }

    pub fn with_max_open_files(kind: IoEngineKind, max_open_files: usize) -> io::Result<Self> {
        assert!(max_open_files > 0, "max_open_files must be positive");
        let open_files = Arc::new(OpenFiles { max: max_open_files, current: AtomicUsize::new(0) });
        Ok(IoEngine {
            open_files,
            selected: Arc::new(select::Selected::new(kind)?),
            uring_inline: UringInline::Auto,
            #[cfg(feature = "sim")]
            sim: None,
        })
    }

    /// An engine over a simulated file system (tests: see `sim.rs`).
    #[cfg(feature = "sim")]
    pub fn simulated(fs: Arc<sim::SimFs>) -> Self {
        let mut e = Self::new(IoEngineKind::StdFs).expect("infallible");
        e.sim = Some(fs);
        e
    }

    /// Set whether the io-uring engine may skip the ring, for files
    /// opened from now on (no effect on other engines).
    pub fn with_uring_inline(mut self, policy: UringInline) -> Self {
        self.uring_inline = policy;
        self
    }

    /// The engine operations starting now run on.
    pub fn kind(&self) -> IoEngineKind {
        self.selected.kind()
    }

    /// Whether a read started now proceeds while its caller does other
    /// work: true for io-uring (the kernel moves the data and a reaper
    /// wakes the future), false for std-fs and the simulated engine, whose
    /// reads run on the thread that polls them. A caller that can start
    /// some reads and then prepare others (the read planner) gains from
    /// that only when this is true.
    pub fn reads_overlap_caller(&self) -> bool {
        #[cfg(feature = "sim")]
        if self.sim.is_some() {
            return false;
        }
        match self.kind() {
            IoEngineKind::IoUring => true,
            IoEngineKind::StdFs => false,
        }
    }

    /// Switch the engine of this engine handle, its clones and every file
    /// they opened: operations that start after the call run on `kind`
    /// (those running finish where they started; see `select.rs`).
    /// Switching to io-uring creates the ring the first time, and fails,
    /// changing nothing, when the kernel refuses it. The simulated engine
    /// cannot switch.
    pub fn set_kind(&self, kind: IoEngineKind) -> io::Result<()> {
        #[cfg(feature = "sim")]
        if self.sim.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the simulated IO engine cannot switch engines",
            ));
        }
        self.selected.set(kind)
    }

    /// Files open through this engine (and its clones) right now.
    pub fn open_file_count(&self) -> usize {
        self.open_files.current.load(Ordering::Relaxed)
    }

    /// Operations the kernel may still be working on, including those of
    /// dropped futures not yet reaped (it reaps first), for tests and
    /// metrics. Always 0 for std-fs and the simulated engine, whose
    /// operations finish within their call.
    pub fn in_flight_ops(&self) -> usize {
        self.selected.ring().map_or(0, |r| r.in_flight_ops())
    }

    fn take_open_slot(&self, path: &Path) -> io::Result<OpenFileSlot> {
        let of = &self.open_files;
        let prev = of.current.fetch_add(1, Ordering::Relaxed);
        let slot = OpenFileSlot(of.clone());
        if prev >= of.max {
            drop(slot);
            return Err(io::Error::other(format!(
                "open {}: {} files are open, the limit max_open_files is {}",
                path.display(),
                prev,
                of.max
            )));
        }
        Ok(slot)
    }

    pub async fn open(&self, path: &Path, mode: OpenMode) -> io::Result<File> {
        fail("io::open::err", path)?;
        let slot = self.take_open_slot(path)?;
        let (inner, align) =
            dispatch!(self, |fs| (FileInner::Sim(fs.open(path, mode)?), DIRECT_IO_ALIGN), {
                let file = std_fs::open_file(path, mode)?;
                let align =
                    if mode.direct { direct_io::offset_align_of(&file) } else { DIRECT_IO_ALIGN };
                let selected = self.selected.clone();
                (FileInner::Real(RealFile::new(file, mode, self.uring_inline, selected)), align)
            });
        let direct_align = if mode.direct { Some(align) } else { None };
        Ok(File { inner, path: path.to_path_buf(), direct_align, _slot: slot })
    }

    /// Create a directory and its missing parents (not durable by itself:
    /// fsync the parent with [`Self::fsync_dir`]).
    pub async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fail("io::create_dir::err", path)?;
        dispatch!(self, |fs| fs.create_dir_all(path), std::fs::create_dir_all(path))
            .map_err(named("create directory", path))
    }

    /// The entries of a directory, sorted by name.
    pub async fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        fail("io::read_dir::err", path)?;
        dispatch!(self, |fs| fs.read_dir(path), std_fs::read_dir(path)).map_err(named("list", path))
    }

    /// Whether `path` exists (a file or a directory).
    pub async fn exists(&self, path: &Path) -> io::Result<bool> {
        dispatch!(self, |fs| fs.exists(path), path.try_exists()).map_err(named("stat", path))
    }

    /// Rename `from` to `to`, replacing `to` if it is a file. Durable only
    /// after an fsync of the directory (both directories, if they differ).
    pub async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fail("io::rename::err", from)?;
        dispatch!(self, |fs| fs.rename(from, to), std::fs::rename(from, to)).map_err(|e| {
            io::Error::new(e.kind(), format!("rename {} to {}: {e}", from.display(), to.display()))
        })
    }

    /// Remove a file. Durable only after an fsync of its directory.
    pub async fn remove_file(&self, path: &Path) -> io::Result<()> {
        fail("io::remove::err", path)?;
        dispatch!(self, |fs| fs.remove(path, false), std::fs::remove_file(path))
            .map_err(named("remove", path))
    }

    /// Remove a directory and everything in it.
    pub async fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        fail("io::remove::err", path)?;
        dispatch!(self, |fs| fs.remove(path, true), std::fs::remove_dir_all(path))
            .map_err(named("remove directory", path))
    }

    /// Remove a file or directory tree (if present) from a destructor,
    /// which cannot await: the removal runs synchronously on the calling
    /// thread (the same syscalls the std-fs engine issues), with the same
    /// failpoint as `remove_file`. Errors are logged, not returned; callers
    /// use this only for files that start-up removes anyway (temp and
    /// ephemeral files, abandoned temp directories).
    pub fn remove_from_drop(&self, path: &Path) {
        #[cfg(feature = "sim")]
        if let Some(fs) = &self.sim {
            let res = fail("io::remove::err", path).and_then(|_| match fs.exists(path) {
                Ok(true) => fs.remove(path, true),
                other => other.map(|_| ()),
            });
            if let Err(e) = res {
                tracing::warn!("could not remove {}: {e}", path.display());
            }
            return;
        }
        let res =
            fail("io::remove::err", path).and_then(|_| match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
                Ok(_) => std::fs::remove_file(path),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            });
        if let Err(e) = res {
            tracing::warn!("could not remove {}: {e}", path.display());
        }
    }

    /// fsync a directory, making renames, creations and removals in it durable.
    pub async fn fsync_dir(&self, path: &Path) -> io::Result<()> {
        fail("io::fsync_dir::err", path)?;
        dispatch!(
            self,
            |fs| fs.fsync_dir(path).map_err(named("fsync directory", path)),
            std_fs::fsync_dir(path)
        )
    }

    /// Read a whole file of at most `max_len` bytes (a longer file is an
    /// error naming it).
    pub async fn read_file(&self, path: &Path, max_len: usize) -> io::Result<Vec<u8>> {
        let file = self.open(path, OpenMode::READ).await?;
        let len = file.len().await?;
        if len > max_len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is {len} bytes, more than the {max_len} expected", path.display()),
            ));
        }
        let len = len as usize;
        let (buf, res) = file.read_exact_at(AlignedBuf::for_read(len), 0, len).await;
        res?;
        Ok(buf.to_vec())
    }

    /// Start writing `path` crash-safely: see [`TempFile`].
    pub async fn create_temp(&self, path: &Path) -> io::Result<TempFile> {
        self.create_temp_direct(path, false).await
    }

    /// `create_temp`, with the file opened for direct IO when `direct`
    /// (every write must then be aligned: see [`OpenMode::with_direct`]).
    pub async fn create_temp_direct(&self, path: &Path, direct: bool) -> io::Result<TempFile> {
        let tmp = temp_path(path);
        if self.exists(&tmp).await? {
            self.remove_file(&tmp).await?; // a leftover of an earlier failed attempt
        }
        let file = self.open(&tmp, OpenMode::CREATE_NEW.with_direct(direct)).await?;
        Ok(TempFile {
            engine: self.clone(),
            file: Some(file),
            tmp,
            path: path.to_path_buf(),
            failpoint_prefix: "io::temp",
        })
    }

    /// Atomically and durably replace `path` with `data`: write
    /// `path.___temp`, fsync it, rename over `path`, fsync the parent
    /// directory. A crash at any point leaves either the old or the new
    /// content (plus possibly a temp file, which start-up deletes).
    pub async fn write_file_durably(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let tmp = self.create_temp(path).await?;
        let (_, res) = tmp.file().write_all_at(AlignedBuf::from_slice(data), 0).await;
        res?;
        tmp.commit().await?;
        Ok(())
    }
}

/// A file being written crash-safely under `<path>.___temp`. `commit` fsyncs
/// it, renames it to `<path>` and fsyncs the directory, then returns the
/// open file (now at `<path>`). Dropped uncommitted, the temp file stays
/// behind for start-up (or the next `create_temp`) to remove: removal here
/// would be a blocking call in a destructor.
pub struct TempFile {
    engine: IoEngine,
    file: Option<File>,
    tmp: PathBuf,
    path: PathBuf,
    failpoint_prefix: &'static str,
}

impl TempFile {
    /// Name the failpoints of `commit` `<prefix>::before-fsync`,
    /// `<prefix>::before-rename` and `<prefix>::after-rename` (default
    /// prefix `io::temp`), so crash tests can target one kind of file.
    pub fn with_failpoints(mut self, prefix: &'static str) -> Self {
        self.failpoint_prefix = prefix;
        self
    }

    pub fn file(&self) -> &File {
        self.file.as_ref().expect("present until commit")
    }

    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// Make `commit` rename to `path` instead: for a file whose final name
    /// is known only once it is written (a layer file named by its key
    /// range). `path` must be in the same directory, whose fsync makes the
    /// rename durable; the temp file keeps its name until then.
    pub fn retarget(&mut self, path: &Path) {
        assert_eq!(
            path.parent(),
            self.path.parent(),
            "a temp file is renamed within its directory"
        );
        self.path = path.to_path_buf();
    }

    /// fsync, rename into place, fsync the directory, with a failpoint
    /// before each step and after the last (see `with_failpoints`).
    pub async fn commit(self) -> io::Result<File> {
        self.finish(true).await
    }

    /// Like `commit` without the directory fsync: the rename becomes
    /// durable only when the caller fsyncs the directory, which it must do
    /// before relying on the file (the flush does it with its manifest
    /// update in the same directory; a crash before that leaves a file the
    /// manifest does not list, which start-up removes).
    pub async fn commit_deferring_dir_sync(self) -> io::Result<File> {
        self.finish(false).await
    }

    async fn finish(mut self, sync_dir: bool) -> io::Result<File> {
        let mut file = self.file.take().expect("commit once");
        let fp = self.failpoint_prefix;
        checkpoint(&format!("{fp}::before-fsync"), &self.tmp)?;
        file.sync_all().await?;
        checkpoint(&format!("{fp}::before-rename"), &self.tmp)?;
        self.engine.rename(&self.tmp, &self.path).await?;
        if sync_dir {
            let dir = self.path.parent().expect("file has a parent directory");
            self.engine.fsync_dir(dir).await?;
        }
        checkpoint(&format!("{fp}::after-rename"), &self.path)?;
        file.path = self.path.clone();
        Ok(file)
    }
}

fn checkpoint(name: &str, path: &Path) -> io::Result<()> {
    if !utils::failpoint::ENABLED {
        return Ok(());
    }
    utils::failpoint::failpoint(name)
        .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

/// The temp-file name used while a file is being written (`<name>.___temp`).
pub fn temp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(TEMP_SUFFIX);
    s.into()
}

pub const TEMP_SUFFIX: &str = ".___temp";

enum FileInner {
    Real(RealFile),
    #[cfg(feature = "sim")]
    Sim(sim::SimFile),
}

/// The engine one operation of a `File` runs on.
enum Op<'a> {
    Std(&'a std_fs::StdFile),
    Uring(&'a uring::UringFile),
    #[cfg(feature = "sim")]
    Sim(&'a sim::SimFile),
}

/// An open file. Reads and writes are positional; the file has no cursor, so
/// concurrent reads through `&File` are fine.
pub struct File {
    inner: FileInner,
    path: PathBuf,
    /// Opened with `O_DIRECT`: the offset and length alignment requests
    /// are checked against (`direct_io.rs`).
    direct_align: Option<usize>,
    _slot: OpenFileSlot,
}

impl File {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// For a file opened with direct IO: the multiple every read's and
    /// write's offset and length must be (512 or 4096, see `direct_io.rs`).
    /// `None` for a buffered file.
    pub fn direct_io_align(&self) -> Option<usize> {
        self.direct_align
    }

    /// Read exactly `len` bytes at `offset` into `buf` (its old content is
    /// discarded; `len` must fit its capacity). EOF before `len` is an
    /// `UnexpectedEof` error; errors name the file.
    pub async fn read_exact_at(
        &self,
        mut buf: AlignedBuf,
        offset: u64,
        len: usize,
    ) -> (AlignedBuf, io::Result<()>) {
        if let Err(e) = self.check_read(&buf, offset, len) {
            buf.set_len(0);
            return (buf, Err(e));
        }
        let (buf, res) = self.read_checked(buf, offset, len).await;
        self.finish_read(buf, len, res)
    }

    /// The checks every read passes before it runs: capacity, failpoint,
    /// direct IO alignment.
    fn check_read(&self, buf: &AlignedBuf, offset: u64, len: usize) -> io::Result<()> {
        assert!(len <= buf.capacity(), "read of {len} bytes into a {} byte buffer", buf.capacity());
        fail("io::read::err", &self.path)?;
        self.check_direct("read", offset, len, buf)
    }

    fn check_direct(&self, op: &str, offset: u64, len: usize, buf: &AlignedBuf) -> io::Result<()> {
        let Some(align) = self.direct_align else { return Ok(()) };
        direct_io::check_aligned(op, &self.path, align, offset, len, buf.as_ptr() as usize)
    }

    /// The engine an operation starting now runs on (`select.rs`).
    fn op(&self) -> io::Result<Op<'_>> {
        match &self.inner {
            FileInner::Real(f) => Ok(match f.backend()? {
                Backend::Std(f) => Op::Std(f),
                Backend::Uring(f) => Op::Uring(f),
            }),
            #[cfg(feature = "sim")]
            FileInner::Sim(f) => Ok(Op::Sim(f)),
        }
    }

    /// A read that passed `check_read`, on the selected engine.
    async fn read_checked(
        &self,
        mut buf: AlignedBuf,
        offset: u64,
        len: usize,
    ) -> (AlignedBuf, io::Result<()>) {
        let res = match self.op() {
            Err(e) => Err(e),
            Ok(Op::Std(f)) => f.read_exact_at(&mut buf.spare_full_mut()[..len], offset),
            Ok(Op::Uring(f)) => return f.read_exact_at(buf, offset, len).await,
            #[cfg(feature = "sim")]
            Ok(Op::Sim(f)) => f.read_exact_at(&self.path, &mut buf.spare_full_mut()[..len], offset),
        };
        (buf, res)
    }

    fn finish_read(
        &self,
        mut buf: AlignedBuf,
        len: usize,
        res: io::Result<()>,
    ) -> (AlignedBuf, io::Result<()>) {
        buf.set_len(if res.is_ok() { len } else { 0 });
        (buf, res.map_err(named("read", &self.path)))
    }

    /// Write all of `buf` at `offset`.
    pub async fn write_all_at(&self, buf: AlignedBuf, offset: u64) -> (AlignedBuf, io::Result<()>) {
        if let Err(e) = self.check_write(&buf, offset) {
            return (buf, Err(e));
        }
        let (buf, res) = self.write_checked(buf, offset).await;
        (buf, res.map_err(named("write", &self.path)))
    }

    fn check_write(&self, buf: &AlignedBuf, offset: u64) -> io::Result<()> {
        fail("io::write::err", &self.path)?;
        self.check_direct("write", offset, buf.len(), buf)
    }

    async fn write_checked(&self, buf: AlignedBuf, offset: u64) -> (AlignedBuf, io::Result<()>) {
        let res = match self.op() {
            Err(e) => Err(e),
            Ok(Op::Std(f)) => f.write_all_at(&buf, offset),
            Ok(Op::Uring(f)) => return f.write_all_at(buf, offset).await,
            #[cfg(feature = "sim")]
            Ok(Op::Sim(f)) => f.write_all_at(&self.path, &buf, offset),
        };
        (buf, res)
    }

    pub async fn sync_all(&self) -> io::Result<()> {
        fail("io::fsync::err", &self.path)?;
        match self.op()? {
            Op::Std(f) => f.sync_all(),
            Op::Uring(f) => f.sync_all().await,
            #[cfg(feature = "sim")]
            Op::Sim(f) => f.sync_all(&self.path),
        }
        .map_err(named("fsync", &self.path))
    }

    pub async fn len(&self) -> io::Result<u64> {
        match &self.inner {
            FileInner::Real(f) => f.std().len(),
            #[cfg(feature = "sim")]
            FileInner::Sim(f) => f.len(&self.path),
        }
    }

    pub async fn set_len(&self, len: u64) -> io::Result<()> {
        fail("io::set_len::err", &self.path)?;
        match &self.inner {
            FileInner::Real(f) => f.std().set_len(len),
            #[cfg(feature = "sim")]
            FileInner::Sim(f) => f.set_len(&self.path, len),
        }
        .map_err(named("set_len", &self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn write_read_replace() {
        let dir = tempfile::tempdir().unwrap();
        let eng = IoEngine::new(IoEngineKind::StdFs).unwrap();
        let p = dir.path().join("f");
        let f = eng.open(&p, OpenMode::CREATE_NEW).await.unwrap();
        let (_, r) = f.write_all_at(AlignedBuf::from_slice(b"0123456789"), 0).await;
        r.unwrap();
        let (buf, r) = f.read_exact_at(AlignedBuf::with_capacity(16), 2, 5).await;
        r.unwrap();
        assert_eq!(&buf[..], b"23456");
        let (_, r) = f.read_exact_at(buf, 8, 5).await;
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert!(eng.open(&p, OpenMode::CREATE_NEW).await.is_err());

        eng.write_file_durably(&p, b"new").await.unwrap();
        assert_eq!(eng.read_file(&p, 16).await.unwrap(), b"new");
        assert!(!eng.exists(&temp_path(&p)).await.unwrap());
        assert!(eng.read_file(&p, 2).await.unwrap_err().to_string().contains("more than"));
    }

    #[tokio::test]
    async fn namespace_operations() {
        let dir = tempfile::tempdir().unwrap();
        let eng = IoEngine::new(IoEngineKind::StdFs).unwrap();
        let sub = dir.path().join("a/b");
        eng.create_dir_all(&sub).await.unwrap();
        eng.write_file_durably(&sub.join("y"), b"1").await.unwrap();
        eng.write_file_durably(&sub.join("x"), b"2").await.unwrap();
        eng.create_dir_all(&sub.join("d")).await.unwrap();
        let names: Vec<_> = eng
            .read_dir(&sub)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.name_lossy(), e.is_dir))
            .collect();
        assert_eq!(names, [("d".into(), true), ("x".into(), false), ("y".into(), false)]);
        eng.rename(&sub.join("x"), &sub.join("z")).await.unwrap();
        eng.remove_file(&sub.join("y")).await.unwrap();
        eng.fsync_dir(&sub).await.unwrap();
        let err = eng.remove_file(&sub.join("y")).await.unwrap_err();
        assert!(err.to_string().contains("remove") && err.to_string().contains("/y"), "{err}");
        eng.remove_dir_all(&dir.path().join("a")).await.unwrap();
        assert!(!eng.exists(&sub).await.unwrap());
    }

    #[tokio::test]
    async fn open_files_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let eng = IoEngine::with_max_open_files(IoEngineKind::StdFs, 2).unwrap();
        let a = eng.open(&dir.path().join("a"), OpenMode::CREATE_NEW).await.unwrap();
        let _b = eng.open(&dir.path().join("b"), OpenMode::CREATE_NEW).await.unwrap();
        let err = eng.open(&dir.path().join("c"), OpenMode::CREATE_NEW).await.err().unwrap();
        assert!(err.to_string().contains("max_open_files is 2"), "{err}");
        assert_eq!(eng.open_file_count(), 2);
        drop(a);
        eng.open(&dir.path().join("c"), OpenMode::CREATE_NEW).await.unwrap();
    }
}
