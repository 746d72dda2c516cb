//! `AlignedBuf`: an owned, growable byte buffer whose memory is aligned to
//! `BUF_ALIGN` (4096, which also satisfies 512-byte direct IO).
//!
//! Invariant: `len <= cap`, and bytes `[0, cap)` are always initialized
//! (allocated zeroed, or reused from the pool, see `buf_pool.rs`), so
//! handing the whole capacity to the kernel is sound.
//!
//! `with_capacity` always returns zeroed memory. `for_read` may return a
//! recycled allocation whose bytes beyond `len` (0) are stale: for buffers a
//! read fills before anything looks at them. Every dropped buffer of a
//! poolable size (up to 2 MiB + 64 KiB) goes back to the pool.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::buf_pool;

pub const BUF_ALIGN: usize = 4096;
const _: () = assert!(
    BUF_ALIGN == buf_pool::POOL_ALIGN
        && BUF_ALIGN.is_power_of_two()
        && BUF_ALIGN.is_multiple_of(512)
);

/// The largest buffer (1 TiB): far above any real IO, far below the
/// allocator's limit (`isize::MAX`), so a size computed from bad data fails
/// with an error naming it, never with the allocator's `LayoutError`.
pub const MAX_BUF_BYTES: usize = 1 << 40;

fn check_capacity(cap: usize) -> std::io::Result<()> {
    if cap > MAX_BUF_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a buffer of {cap} bytes was asked for, above the limit of {MAX_BUF_BYTES}"),
        ));
    }
    Ok(())
}

pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer with room for at least `cap` bytes (rounded up to
    /// the alignment). `cap` above [`MAX_BUF_BYTES`] is a caller's bug: it
    /// panics, naming the size; where a length comes from data, use
    /// [`Self::try_for_read`].
    pub fn with_capacity(cap: usize) -> Self {
        Self::try_with_capacity(cap).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As `with_capacity`, but a capacity above [`MAX_BUF_BYTES`] is an
    /// error naming it instead of a panic.
    pub fn try_with_capacity(cap: usize) -> std::io::Result<Self> {
        check_capacity(cap)?;
        let cap = cap.max(1).next_multiple_of(BUF_ALIGN);
        let Ok(layout) = Layout::from_size_align(cap, BUF_ALIGN) else {
            unreachable!("{cap} bytes at alignment {BUF_ALIGN} is below MAX_BUF_BYTES");
        };
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Ok(AlignedBuf { ptr, len: 0, cap })
    }

    /// An empty buffer with room for at least `cap` bytes, for a read to
    /// fill: taken from the pool when one of that size is free (its stale
    /// bytes are initialized but unspecified), else freshly allocated.
    /// Above 136 KiB the capacity is rounded up to a multiple of 64 KiB, so
    /// reads of nearby lengths reuse each other's buffers.
    pub fn for_read(cap: usize) -> Self {
        Self::try_for_read(cap).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As `for_read`, but a capacity above [`MAX_BUF_BYTES`] (a length
    /// read from corrupt data, say) is an error naming it, not a panic.
    pub fn try_for_read(cap: usize) -> std::io::Result<Self> {
        check_capacity(cap)?;
        let cap = buf_pool::read_capacity(cap.max(1).next_multiple_of(BUF_ALIGN));
        match buf_pool::take(cap) {
            Some(ptr) => Ok(AlignedBuf { ptr, len: 0, cap }),
            None => AlignedBuf::try_with_capacity(cap),
        }
    }

    pub fn from_slice(data: &[u8]) -> Self {
        Self::from_slice_with_capacity(data, data.len())
    }

    /// A copy of `data` with room for at least `cap` bytes (`cap` >= its length).
    pub fn from_slice_with_capacity(data: &[u8], cap: usize) -> Self {
        let mut b = AlignedBuf::with_capacity(cap.max(data.len()));
        b.extend_from_slice(data);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn remaining(&self) -> usize {
        self.cap - self.len
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Set the length; the bytes between the old and new length keep
    /// whatever they held (always initialized, see the invariant).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "set_len {len} beyond capacity {}", self.cap);
        self.len = len;
    }

    /// Append; panics if it does not fit (callers check `remaining()`).
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        assert!(data.len() <= self.remaining(), "AlignedBuf overflow");
        // SAFETY: in bounds by the assert; source and destination don't overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                data.len(),
            );
        }
        self.len += data.len();
    }

    /// The full capacity as a mutable slice (for reads that fill it).
    pub fn spare_full_mut(&mut self) -> &mut [u8] {
        // SAFETY: the whole capacity is initialized and owned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let Some(ptr) = buf_pool::give(self.ptr, self.cap) else { return };
        let layout = Layout::from_size_align(self.cap, BUF_ALIGN).unwrap();
        // SAFETY: allocated in with_capacity with this layout.
        unsafe { alloc::dealloc(ptr.as_ptr(), layout) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: [0, len) is initialized and owned.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we have &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf(len={}, cap={})", self.len, self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_bounded() {
        let mut b = AlignedBuf::with_capacity(100);
        assert_eq!(b.capacity(), BUF_ALIGN);
        assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0);
        b.extend_from_slice(b"hello");
        assert_eq!(&b[..], b"hello");
        b.set_len(10);
        assert_eq!(&b[5..10], &[0; 5]);
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn for_read_reuses_dropped_buffers() {
        // A class no other test uses (parallel tests share the pool).
        let cap = 29 * BUF_ALIGN;
        let mut b = AlignedBuf::for_read(cap - 10);
        assert_eq!((b.len(), b.capacity()), (0, cap));
        b.extend_from_slice(&[7; 100]);
        let ptr = b.as_ptr();
        drop(b);
        assert_eq!(crate::buf_pool::free_count(cap), 1);
        let b = AlignedBuf::for_read(cap);
        assert_eq!(b.as_ptr(), ptr, "the dropped allocation is reused");
        assert!(b.is_empty(), "stale bytes are not visible");
        drop(b);
        // with_capacity never takes from the pool: always zeroed.
        let mut z = AlignedBuf::with_capacity(cap);
        z.set_len(100);
        assert!(z.iter().all(|&x| x == 0));
        // Buffers larger than the pooled sizes are freed, not kept.
        drop(AlignedBuf::for_read(crate::buf_pool::MAX_POOLED_CAP + 1));
        assert_eq!(crate::buf_pool::free_count(crate::buf_pool::MAX_POOLED_CAP + BUF_ALIGN), 0);
    }

    #[test]
    fn oversized_buffers_are_an_error() {
        for cap in [MAX_BUF_BYTES + 1, isize::MAX as usize, usize::MAX] {
            let err = AlignedBuf::try_for_read(cap).unwrap_err();
            assert!(err.to_string().contains(&format!("{cap} bytes")), "{err}");
            assert!(AlignedBuf::try_with_capacity(cap).is_err());
        }
    }

    #[test]
    #[should_panic(expected = "overflow")]
    fn overflow_panics() {
        let mut b = AlignedBuf::with_capacity(BUF_ALIGN);
        b.extend_from_slice(&vec![0; BUF_ALIGN + 1]);
    }
}
