//! Where the io-uring engine skips the ring (`UringInline::Auto`, the
//! default), and why. Both cases do on the calling thread exactly what
//! io_uring itself would do there, minus its overhead:
//!
//! - Reads of regular files (not direct IO) first try `preadv2` with
//!   `RWF_NOWAIT`: the same non-blocking page-cache attempt io_uring makes
//!   inline when it is entered (`IOCB_NOWAIT`), which never waits for the
//!   disk. Only when it would block (a page-cache miss: `EAGAIN`), or for
//!   the part it could not serve, does the read go through the ring, which
//!   then waits for the disk asynchronously. A hit costs ~0.2 µs more than
//!   `pread`; through the ring it costs ~0.8 µs more (measured on this
//!   kernel for 8 KiB, most of it in io_uring's own submit and complete).
//! - Buffered writes of regular files, on file systems that cannot do them
//!   without blocking (no `FOP_BUFFER_WASYNC`: ext4, tmpfs, ...; XFS and
//!   btrfs can), run inline with `pwrite`: io_uring would hand each one to
//!   an io-wq kernel thread that does the same blocking copy, plus two
//!   thread switches (on ext4, 10 µs instead of 1.5 µs for 8 bytes).
//!
//! Direct IO, fsync, FIFOs and other non-regular files always use the
//! ring, as does everything with `UringInline::Never`.

use std::fs;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{AlignedBuf, OpenMode, UringInline};

/// The inline paths of one open file.
pub(super) struct InlinePaths {
    /// Try `RWF_NOWAIT` reads; cleared if the file refuses them.
    nowait_reads: AtomicBool,
    /// Run buffered writes inline.
    writes: bool,
}

impl InlinePaths {
    pub fn for_file(file: &fs::File, mode: OpenMode, policy: UringInline) -> io::Result<Self> {
        let eligible =
            policy == UringInline::Auto && !mode.direct && file.metadata()?.file_type().is_file();
        Ok(InlinePaths {
            nowait_reads: AtomicBool::new(eligible),
            writes: eligible && !buffered_writes_are_async(file),
        })
    }

    pub fn writes(&self) -> bool {
        self.writes
    }

    /// Read `buf[range]` at `offset` if that does not block. `None`: it
    /// would block (or the file cannot tell), the ring must do it.
    pub fn try_read(
        &self,
        file: &fs::File,
        buf: &mut AlignedBuf,
        offset: u64,
        range: Range<usize>,
    ) -> Option<io::Result<usize>> {
        if !self.nowait_reads.load(Ordering::Relaxed) || range.is_empty() {
            return None;
        }
        let dst = &mut buf.spare_full_mut()[range];
        let iov = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: dst.len() };
        let offset = i64::try_from(offset).ok()?;
        // SAFETY: one iovec over memory we hold exclusively for the call.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        if n >= 0 {
            return Some(Ok(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR) => None,
            Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS | libc::ESPIPE) => {
                self.nowait_reads.store(false, Ordering::Relaxed);
                None
            }
            _ => Some(Err(e)),
        }
    }
}

/// Whether the file system of `file` does buffered writes without
/// blocking under io_uring (`FOP_BUFFER_WASYNC`: XFS and btrfs as of
/// Linux 6.18). Unknown file systems answer no: their writes run inline.
fn buffered_writes_are_async(file: &fs::File) -> bool {
    const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;
    // SAFETY: fstatfs fills a zeroed struct we own; the fd is open.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    rc == 0 && matches!(st.f_type as i64, XFS_SUPER_MAGIC | BTRFS_SUPER_MAGIC)
}
