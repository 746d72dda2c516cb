//! A process-wide pool of `AlignedBuf` allocations for short-lived read
//! buffers (`AlignedBuf::for_read`): the read path allocates one buffer per
//! chunk it reads, and `posix_memalign` plus zeroing a fresh 12 KiB buffer
//! costs more than the `pread` that fills it.
//!
//! Invariants:
//! - Only allocations of `BUF_ALIGN`-aligned layout whose capacity is a
//!   multiple of `BUF_ALIGN` and at most `MAX_POOLED_CAP` are pooled, one
//!   free list per capacity class, each bounded to `CLASS_BUDGET` bytes (at
//!   least `MIN_PER_CLASS` buffers); the pool never holds more than
//!   `CLASSES * CLASS_BUDGET`-ish bytes (~64 MiB worst case, a few MiB in
//!   practice since only a few classes are used).
//! - A pooled allocation is fully initialized (it came from `alloc_zeroed`
//!   and was written only through safe slices since), so reusing it without
//!   zeroing keeps `AlignedBuf`'s "whole capacity initialized" invariant.
//!   Its old content is stale data: `AlignedBuf` never exposes bytes beyond
//!   `len`, and `for_read` buffers start with `len == 0`.
//! - Concurrency: each class is a `Mutex<Vec<..>>` held only for a push or
//!   pop (no allocation under the lock once the Vec has grown).

use std::ptr::NonNull;
use std::sync::Mutex;

/// Alignment of every pooled allocation; `AlignedBuf` asserts at compile
/// time that its `BUF_ALIGN` equals it (this module depends on nothing).
pub const POOL_ALIGN: usize = 4096;
const BUF_ALIGN: usize = POOL_ALIGN;

/// Largest pooled capacity (a coalesced read chunk is at most 128 KiB, plus
/// up to 4 KiB of alignment at each end under direct IO).
pub const MAX_POOLED_CAP: usize = 136 * 1024;
const CLASSES: usize = MAX_POOLED_CAP / BUF_ALIGN;
/// Bytes of free buffers kept per class.
const CLASS_BUDGET: usize = 2 * 1024 * 1024;
const MIN_PER_CLASS: usize = 8;

/// An allocation owned by the pool.
struct FreeBuf(NonNull<u8>);
// SAFETY: a free buffer is exclusively owned by the pool's list; moving the
// pointer between threads is like moving a Box<[u8]>.
unsafe impl Send for FreeBuf {}

static POOL: [Mutex<Vec<FreeBuf>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];

fn class(cap: usize) -> Option<usize> {
    (cap > 0 && cap <= MAX_POOLED_CAP && cap.is_multiple_of(BUF_ALIGN)).then(|| cap / BUF_ALIGN - 1)
}

fn class_limit(cap: usize) -> usize {
    (CLASS_BUDGET / cap).max(MIN_PER_CLASS)
}

/// Take an initialized allocation of exactly `cap` bytes, if one is free.
pub(crate) fn take(cap: usize) -> Option<NonNull<u8>> {
    let c = class(cap)?;
    POOL[c].lock().unwrap_or_else(|e| e.into_inner()).pop().map(|b| b.0)
}

/// Offer an allocation of `cap` bytes (aligned to `BUF_ALIGN`, fully
/// initialized) back. Returns it when the pool does not keep it; the caller
/// then frees it.
pub(crate) fn give(ptr: NonNull<u8>, cap: usize) -> Option<NonNull<u8>> {
    let Some(c) = class(cap) else { return Some(ptr) };
    let mut list = POOL[c].lock().unwrap_or_else(|e| e.into_inner());
    if list.len() >= class_limit(cap) {
        return Some(ptr);
    }
    list.push(FreeBuf(ptr));
    None
}

#[cfg(test)]
pub(crate) fn free_count(cap: usize) -> usize {
    class(cap).map_or(0, |c| POOL[c].lock().unwrap().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_limits() {
        assert_eq!(class(0), None);
        assert_eq!(class(BUF_ALIGN), Some(0));
        assert_eq!(class(BUF_ALIGN + 1), None, "not a multiple of the alignment");
        assert_eq!(class(MAX_POOLED_CAP), Some(CLASSES - 1));
        assert_eq!(class(MAX_POOLED_CAP + BUF_ALIGN), None);
        // A 12 KiB class (one 8 KiB page value per chunk) keeps 170 buffers.
        assert_eq!(class_limit(3 * BUF_ALIGN), 170);
        assert_eq!(class_limit(MAX_POOLED_CAP), 15);
        assert_eq!(class_limit(4 * CLASS_BUDGET), MIN_PER_CLASS);
    }
}
