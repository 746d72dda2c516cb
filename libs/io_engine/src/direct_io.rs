//! Direct IO (`O_DIRECT`, asked for with [`crate::OpenMode::with_direct`]).
//!
//! Rules, the same for every engine (the simulated one checks them too,
//! so tests catch misaligned callers):
//! - the offset and the length of every read and write are multiples of
//!   the file's [`crate::File::direct_io_align`]: what the kernel reports
//!   for it (`statx` `STATX_DIOALIGN`, e.g. 512 on a device with 512-byte
//!   logical blocks), else `DIRECT_IO_ALIGN` (4096, which satisfies devices
//!   with 512-byte and 4 KiB logical blocks); buffer addresses are always
//!   `BUF_ALIGN`-aligned. A misaligned request fails with `InvalidInput`
//!   naming the offset, the length and the file, before it reaches the
//!   kernel; reads never read past `len`, so `len` itself must be aligned;
//! - the page cache is bypassed, so a file's tail beyond its last aligned
//!   block can only be read as part of an aligned read that reaches EOF:
//!   such a read returns short, and `read_exact_at` reports
//!   `UnexpectedEof` as for any read past EOF.

use std::io;
use std::path::Path;

use crate::{AlignedBuf, IoEngine, OpenMode, BUF_ALIGN};

/// Alignment of offsets, lengths and buffer addresses under direct IO.
pub const DIRECT_IO_ALIGN: usize = BUF_ALIGN;
const _: () =
    assert!(DIRECT_IO_ALIGN.is_multiple_of(512) && BUF_ALIGN.is_multiple_of(DIRECT_IO_ALIGN));

/// The offset and length alignment direct IO needs for `file`: the
/// kernel's answer (`STATX_DIOALIGN`, Linux 6.1+) when it is a power of two
/// between 512 and `DIRECT_IO_ALIGN`, else `DIRECT_IO_ALIGN`.
pub(crate) fn offset_align_of(file: &std::fs::File) -> usize {
    use std::os::fd::AsRawFd;
    // SAFETY: statx fills a zeroed struct we own; the fd is open and the
    // empty path with AT_EMPTY_PATH names it.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    let align = stx.stx_dio_offset_align as usize;
    let reported = rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0;
    let usable = align.is_power_of_two() && (512..=DIRECT_IO_ALIGN).contains(&align);
    let mem_ok = (stx.stx_dio_mem_align as usize) <= BUF_ALIGN;
    if reported && usable && mem_ok {
        align
    } else {
        DIRECT_IO_ALIGN
    }
}

/// Check one direct IO request (`op` is "read" or "write") against the
/// file's offset alignment `align` and the buffer alignment.
pub(crate) fn check_aligned(
    op: &str,
    path: &Path,
    align: usize,
    offset: u64,
    len: usize,
    buf_addr: usize,
) -> io::Result<()> {
    if offset.is_multiple_of(align as u64)
        && len.is_multiple_of(align)
        && buf_addr.is_multiple_of(BUF_ALIGN)
    {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{op} of {len} bytes at offset {offset} of {} (opened for direct IO): offset, \
             length and buffer address must be multiples of {align}",
            path.display()
        ),
    ))
}

/// After a short read left `done` of `len` bytes read: whether the file
/// ended (a direct read cannot go on from an unaligned position; it
/// stopped there because the file ends there).
pub(crate) fn short_read_hit_eof(direct: bool, done: usize, len: usize) -> bool {
    direct && done < len && !done.is_multiple_of(DIRECT_IO_ALIGN)
}

/// The error of a read that reaches EOF before `len` (as std's `read_exact_at`).
pub(crate) fn eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "failed to fill whole buffer")
}

/// The error of a write the kernel accepted no bytes of (as std's `write_all_at`).
pub(crate) fn write_zero() -> io::Error {
    io::Error::new(io::ErrorKind::WriteZero, "failed to write whole buffer")
}

impl IoEngine {
    /// Check that files in `dir` can be written and read back with direct
    /// IO through this engine (a file system may refuse `O_DIRECT`, e.g.
    /// tmpfs before Linux 6.6): creates, uses and removes one probe file.
    /// The error names the directory and what failed.
    pub async fn check_direct_io(&self, dir: &Path) -> io::Result<()> {
        let path = dir.join(format!("direct_io_probe{}", crate::TEMP_SUFFIX));
        if self.exists(&path).await? {
            self.remove_file(&path).await?;
        }
        let res = self.probe_direct_io(&path).await;
        let removed = self.remove_file(&path).await;
        res.and(removed).map_err(|e| {
            io::Error::new(e.kind(), format!("direct IO does not work in {}: {e}", dir.display()))
        })
    }

    async fn probe_direct_io(&self, path: &Path) -> io::Result<()> {
        let file = self.open(path, OpenMode::CREATE_NEW.with_direct(true)).await?;
        let mut block = AlignedBuf::with_capacity(DIRECT_IO_ALIGN);
        block.extend_from_slice(&[0xA5; DIRECT_IO_ALIGN]);
        let (block, res) = file.write_all_at(block, 0).await;
        res?;
        let (back, res) = file
            .read_exact_at(AlignedBuf::with_capacity(DIRECT_IO_ALIGN), 0, DIRECT_IO_ALIGN)
            .await;
        res?;
        if back[..] != block[..] {
            return Err(io::Error::other("a block read back differs from what was written"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_rules() {
        let p = Path::new("/d/f");
        assert!(check_aligned("read", p, 4096, 8192, 4096, 4096).is_ok());
        assert!(check_aligned("read", p, 512, 512, 1024, 4096).is_ok());
        for (offset, len, addr) in [(512, 4096, 0), (0, 100, 0), (0, 4096, 8)] {
            let e = check_aligned("read", p, 4096, offset, len, addr).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            let msg = e.to_string();
            assert!(msg.contains(&format!("{len} bytes at offset {offset}")), "{msg}");
            assert!(msg.contains("/d/f") && msg.contains("4096"), "{msg}");
        }
        assert!(short_read_hit_eof(true, 100, 4096));
        assert!(!short_read_hit_eof(true, 4096, 8192));
        assert!(!short_read_hit_eof(false, 100, 4096));
    }

    /// The kernel's alignment is used when it is finer than 4096 (this
    /// machine's ext4 on a 512-byte-sector disk reports 512): a read of
    /// 512 bytes at 512 then goes through; 100 bytes never do.
    #[tokio::test]
    async fn files_align_to_what_the_file_system_reports() {
        let dir = tempfile::tempdir().unwrap();
        let eng = IoEngine::new(crate::IoEngineKind::StdFs).unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![3u8; 8192]).unwrap();
        let file = eng.open(&path, OpenMode::READ.with_direct(true)).await.unwrap();
        let align = file.direct_io_align().unwrap();
        assert!(align == 512 || align == 4096, "{align}");
        let (buf, res) =
            file.read_exact_at(AlignedBuf::with_capacity(align), align as u64, align).await;
        res.unwrap();
        assert!(buf.iter().all(|&b| b == 3));
        let (_, res) = file.read_exact_at(AlignedBuf::with_capacity(4096), 0, 100).await;
        assert_eq!(res.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let buffered = eng.open(&path, OpenMode::READ).await.unwrap();
        assert_eq!(buffered.direct_io_align(), None);
    }

    #[tokio::test]
    async fn probe_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let eng = IoEngine::new(crate::IoEngineKind::StdFs).unwrap();
        eng.check_direct_io(dir.path()).await.unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let missing = dir.path().join("missing");
        let err = eng.check_direct_io(&missing).await.unwrap_err().to_string();
        assert!(err.contains("direct IO does not work in") && err.contains("missing"), "{err}");
    }
}
