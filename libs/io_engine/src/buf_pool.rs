//! A process-wide pool of `AlignedBuf` allocations for short-lived read
//! buffers (`AlignedBuf::for_read`): the read path allocates one buffer per
//! chunk it reads, and `posix_memalign` plus zeroing a fresh buffer costs
//! more than the `pread` that fills it (12 KiB), or a third of it (1 MiB:
//! a fresh buffer is zeroed page by page, each page faulted in, ~20 µs on
//! top of a ~55 µs page-cache read).
//!
//! Two tiers:
//! - small (capacity at most `MAX_SMALL_CAP`, 136 KiB): one free list per
//!   capacity class (every multiple of `BUF_ALIGN`), each bounded to
//!   `CLASS_BUDGET` bytes (at least `MIN_PER_CLASS` buffers);
//! - large (above that, up to `MAX_POOLED_CAP`, 2 MiB + 64 KiB): one list
//!   of buffers of any capacity, bounded to `LARGE_BUDGET` bytes in all; a
//!   take needs an exact capacity match (most recent first), and a buffer
//!   given back to a full list evicts the oldest ones (freed), so sizes
//!   nobody asks for any more leave. `AlignedBuf::for_read` rounds large
//!   capacities up to a multiple of `LARGE_GRANULE` (`read_capacity`), so
//!   reads of varying lengths share buffers.
//!
//! Invariants:
//! - Only allocations of `BUF_ALIGN`-aligned layout whose capacity is a
//!   multiple of `BUF_ALIGN` and at most `MAX_POOLED_CAP` are pooled; the
//!   pool never holds more than `CLASSES * CLASS_BUDGET + LARGE_BUDGET`
//!   bytes (~84 MiB worst case, a few MiB in practice since only a few
//!   classes are used).
//! - A pooled allocation is fully initialized (it came from `alloc_zeroed`
//!   and was written only through safe slices since), so reusing it without
//!   zeroing keeps `AlignedBuf`'s "whole capacity initialized" invariant.
//!   Its old content is stale data: `AlignedBuf` never exposes bytes beyond
//!   `len`, and `for_read` buffers start with `len == 0`.
//! - Only buffers nobody else can touch are given back: `AlignedBuf`'s
//!   drop, which the io-uring engine runs only once the kernel is done
//!   with the buffer (a slot holds it until its completion is reaped).
//! - Concurrency: each list is a `Mutex` held only for a push, a pop or a
//!   scan of the large list (no allocation under the lock once the list has
//!   grown); evicted buffers are freed after the lock is released.

use std::alloc::{self, Layout};
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Alignment of every pooled allocation; `AlignedBuf` asserts at compile
/// time that its `BUF_ALIGN` equals it (this module depends on nothing).
pub const POOL_ALIGN: usize = 4096;
const BUF_ALIGN: usize = POOL_ALIGN;

/// Largest capacity of the small tier (a coalesced read chunk is at most
/// 128 KiB, plus up to 4 KiB of alignment at each end under direct IO).
pub const MAX_SMALL_CAP: usize = 136 * 1024;
/// Largest pooled capacity: 2 MiB reads (1 MiB copy chunks and the like),
/// plus the alignment slack, rounded up to `LARGE_GRANULE`.
pub const MAX_POOLED_CAP: usize = 2 * 1024 * 1024 + LARGE_GRANULE;
/// Large-tier capacities of `AlignedBuf::for_read` are multiples of this.
const LARGE_GRANULE: usize = 64 * 1024;
const _: () = assert!(MAX_POOLED_CAP.is_multiple_of(LARGE_GRANULE));
const CLASSES: usize = MAX_SMALL_CAP / BUF_ALIGN;
/// Bytes of free buffers kept per class.
const CLASS_BUDGET: usize = 2 * 1024 * 1024;
const MIN_PER_CLASS: usize = 8;
/// Bytes of free buffers kept in the large tier, all capacities together.
const LARGE_BUDGET: usize = 16 * 1024 * 1024;
const _: () = assert!(LARGE_BUDGET >= 4 * MAX_POOLED_CAP);

/// An allocation owned by the pool.
struct FreeBuf(NonNull<u8>);
// SAFETY: a free buffer is exclusively owned by the pool's list; moving the
// pointer between threads is like moving a Box<[u8]>.
unsafe impl Send for FreeBuf {}

static POOL: [Mutex<Vec<FreeBuf>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];

/// The large tier: free buffers with their capacities, oldest first, and
/// the sum of those capacities (at most `LARGE_BUDGET`).
struct Large {
    bufs: VecDeque<(FreeBuf, usize)>,
    bytes: usize,
}

static LARGE: Mutex<Large> = Mutex::new(Large { bufs: VecDeque::new(), bytes: 0 });

/// Where an allocation of `cap` bytes is pooled.
enum Tier {
    Small(usize),
    Large,
}

fn tier(cap: usize) -> Option<Tier> {
    if cap == 0 || !cap.is_multiple_of(BUF_ALIGN) || cap > MAX_POOLED_CAP {
        return None;
    }
    Some(if cap <= MAX_SMALL_CAP { Tier::Small(cap / BUF_ALIGN - 1) } else { Tier::Large })
}

/// The capacity `AlignedBuf::for_read` allocates for a request of `cap`
/// bytes (a multiple of `BUF_ALIGN`): `cap` itself, or in the large tier
/// `cap` rounded up to `LARGE_GRANULE` (at most 64 KiB more, under 50%).
pub(crate) fn read_capacity(cap: usize) -> usize {
    if cap <= MAX_SMALL_CAP || cap > MAX_POOLED_CAP {
        return cap;
    }
    cap.next_multiple_of(LARGE_GRANULE)
}

#[cfg(test)]
fn class(cap: usize) -> Option<usize> {
    match tier(cap)? {
        Tier::Small(c) => Some(c),
        Tier::Large => None,
    }
}

fn large() -> std::sync::MutexGuard<'static, Large> {
    LARGE.lock().unwrap_or_else(|e| e.into_inner())
}

fn class_limit(cap: usize) -> usize {
    (CLASS_BUDGET / cap).max(MIN_PER_CLASS)
}

/// Take an initialized allocation of exactly `cap` bytes, if one is free.
pub(crate) fn take(cap: usize) -> Option<NonNull<u8>> {
    match tier(cap)? {
        Tier::Small(c) => POOL[c].lock().unwrap_or_else(|e| e.into_inner()).pop().map(|b| b.0),
        Tier::Large => {
            let mut l = large();
            let at = l.bufs.iter().rposition(|(_, c)| *c == cap)?;
            let (buf, _) = l.bufs.remove(at).expect("found");
            l.bytes -= cap;
            Some(buf.0)
        }
    }
}

/// Offer an allocation of `cap` bytes (allocated with the layout
/// `(cap, POOL_ALIGN)` by the global allocator, fully initialized, owned by
/// the caller alone) back. Returns it when the pool does not keep it; the
/// caller then frees it. The pool may free it later itself (large tier).
pub(crate) fn give(ptr: NonNull<u8>, cap: usize) -> Option<NonNull<u8>> {
    let c = match tier(cap) {
        None => return Some(ptr),
        Some(Tier::Large) => {
            give_large(ptr, cap);
            return None;
        }
        Some(Tier::Small(c)) => c,
    };
    let mut list = POOL[c].lock().unwrap_or_else(|e| e.into_inner());
    if list.len() >= class_limit(cap) {
        return Some(ptr);
    }
    list.push(FreeBuf(ptr));
    None
}

/// Keep a large buffer, evicting (and freeing) the oldest ones beyond the budget.
fn give_large(ptr: NonNull<u8>, cap: usize) {
    loop {
        let (old, old_cap) = {
            let mut l = large();
            if l.bytes + cap <= LARGE_BUDGET {
                l.bufs.push_back((FreeBuf(ptr), cap));
                l.bytes += cap;
                return;
            }
            let (old, old_cap) = l.bufs.pop_front().expect("bytes counts the buffers");
            l.bytes -= old_cap;
            (old, old_cap)
        };
        let layout = Layout::from_size_align(old_cap, POOL_ALIGN).expect("pooled layout");
        // SAFETY: pooled allocations have this layout (see `give`) and are
        // owned by the pool alone; this one has left it.
        unsafe { alloc::dealloc(old.0.as_ptr(), layout) }
    }
}

#[cfg(test)]
pub(crate) fn free_count(cap: usize) -> usize {
    match tier(cap) {
        None => 0,
        Some(Tier::Small(c)) => POOL[c].lock().unwrap().len(),
        Some(Tier::Large) => large().bufs.iter().filter(|(_, c)| *c == cap).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_limits() {
        assert_eq!(class(0), None);
        assert_eq!(class(BUF_ALIGN), Some(0));
        assert_eq!(class(BUF_ALIGN + 1), None, "not a multiple of the alignment");
        assert_eq!(class(MAX_SMALL_CAP), Some(CLASSES - 1));
        assert_eq!(class(MAX_SMALL_CAP + BUF_ALIGN), None, "large tier");
        assert!(matches!(tier(MAX_SMALL_CAP + BUF_ALIGN), Some(Tier::Large)));
        assert!(matches!(tier(MAX_POOLED_CAP), Some(Tier::Large)));
        assert!(tier(MAX_POOLED_CAP + BUF_ALIGN).is_none());
        // A 12 KiB class (one 8 KiB page value per chunk) keeps 170 buffers.
        assert_eq!(class_limit(3 * BUF_ALIGN), 170);
        assert_eq!(class_limit(MAX_SMALL_CAP), 15);
        assert_eq!(class_limit(4 * CLASS_BUDGET), MIN_PER_CLASS);
        assert_eq!(read_capacity(MAX_SMALL_CAP), MAX_SMALL_CAP);
        assert_eq!(read_capacity(MAX_SMALL_CAP + BUF_ALIGN), 192 * 1024);
        assert_eq!(read_capacity(1 << 20), 1 << 20);
        assert_eq!(read_capacity((1 << 20) + BUF_ALIGN), (1 << 20) + LARGE_GRANULE);
        assert_eq!(read_capacity(MAX_POOLED_CAP - BUF_ALIGN), MAX_POOLED_CAP);
        assert_eq!(read_capacity(MAX_POOLED_CAP + BUF_ALIGN), MAX_POOLED_CAP + BUF_ALIGN);
    }

    fn alloc_pooled(cap: usize) -> NonNull<u8> {
        let layout = Layout::from_size_align(cap, POOL_ALIGN).unwrap();
        // SAFETY: non-zero size.
        NonNull::new(unsafe { alloc::alloc_zeroed(layout) }).unwrap()
    }

    fn free_pooled(p: NonNull<u8>, cap: usize) {
        // SAFETY: allocated by alloc_pooled with this capacity.
        unsafe { alloc::dealloc(p.as_ptr(), Layout::from_size_align(cap, POOL_ALIGN).unwrap()) }
    }

    /// The only test that uses the large tier (parallel tests share the pool).
    #[test]
    fn large_tier_reuses_exact_sizes_and_evicts_oldest() {
        let cap = MAX_SMALL_CAP + 3 * BUF_ALIGN;
        let p = alloc_pooled(cap);
        assert!(give(p, cap).is_none(), "kept");
        assert_eq!(take(cap + BUF_ALIGN), None, "exact capacities only");
        assert_eq!(take(cap), Some(p));
        free_pooled(p, cap);

        let first = alloc_pooled(MAX_POOLED_CAP);
        assert!(give(first, MAX_POOLED_CAP).is_none());
        let fit = LARGE_BUDGET / MAX_POOLED_CAP;
        for _ in 0..fit {
            assert!(give(alloc_pooled(MAX_POOLED_CAP), MAX_POOLED_CAP).is_none());
        }
        {
            let l = large();
            assert_eq!(l.bufs.len(), fit, "the oldest was evicted");
            assert!(l.bufs.iter().all(|(b, _)| b.0 != first));
            assert_eq!(l.bytes, fit * MAX_POOLED_CAP);
            assert!(l.bytes <= LARGE_BUDGET);
        }
        while let Some(b) = take(MAX_POOLED_CAP) {
            free_pooled(b, MAX_POOLED_CAP);
        }
        assert_eq!(large().bytes, 0);
    }
}
