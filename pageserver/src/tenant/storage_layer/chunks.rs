//! Coalescing value reads into aligned chunks: shared by the read path
//! (`vectored_read/`) and the layer files' raw value reads.
//!
//! Each range becomes a range aligned to the reader's alignment (512 bytes
//! through the page cache; under direct IO the file's
//! `io_engine::File::direct_io_align`, 512 bytes or 4 KiB); ranges are
//! sorted and merged when they overlap or touch, up to `MAX_CHUNK` bytes,
//! so a chunk shared by several values is read exactly once. A single value larger
//! than `MAX_CHUNK` is one chunk of its own size.

use std::ops::Range;

/// The finest read alignment (buffered reads; direct IO on a disk with
/// 512-byte logical blocks); direct IO uses at most 4 KiB.
pub const CHUNK_ALIGN: u64 = 512;
/// Adjacent ranges merge into chunks of at most this many bytes.
pub const MAX_CHUNK: u64 = 128 * 1024;
const DIRECT_ALIGN: u64 = io_engine::DIRECT_IO_ALIGN as u64;
const _: () = assert!(CHUNK_ALIGN.is_power_of_two() && DIRECT_ALIGN.is_multiple_of(CHUNK_ALIGN));
const _: () = assert!(MAX_CHUNK.is_multiple_of(DIRECT_ALIGN), "a full chunk stays aligned");
// A chunk plus its alignment slack fits a pooled read buffer.
const _: () = assert!(MAX_CHUNK + 2 * DIRECT_ALIGN <= io_engine::MAX_POOLED_READ_BYTES as u64);

/// Merge value ranges into read chunks aligned to `align` (a power of two,
/// at least `CHUNK_ALIGN`). `ranges` are (start, end) byte offsets; `limit`
/// is the readable length (chunks never pass it). Returns the chunks,
/// sorted and disjoint.
pub fn coalesce(ranges: &[(u64, u64)], limit: u64, align: u64) -> Vec<Range<u64>> {
    debug_assert!(align.is_power_of_two() && align >= CHUNK_ALIGN);
    let mut aligned: Vec<Range<u64>> = ranges
        .iter()
        .map(|&(s, e)| (s / align * align)..e.next_multiple_of(align).min(limit))
        .collect();
    aligned.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(aligned.len());
    for r in aligned {
        if let Some(cur) = out.last_mut() {
            let overlaps = r.start < cur.end;
            let fits = r.end.max(cur.end) - cur.start <= MAX_CHUNK;
            if overlaps || (r.start == cur.end && fits) {
                cur.end = cur.end.max(r.end);
                continue;
            }
        }
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_aligns_merges_and_bounds() {
        // Two values in one 512-byte block: one chunk.
        assert_eq!(coalesce(&[(10, 20), (30, 40)], u64::MAX, 512), vec![0..512]);
        // Adjacent blocks merge; a gap does not.
        assert_eq!(
            coalesce(&[(0, 512), (512, 600), (2048, 2100)], u64::MAX, 512),
            vec![0..1024, 2048..2560]
        );
        // The limit clamps the end.
        assert_eq!(coalesce(&[(0, 100)], 100, 512), vec![0..100]);
        // Adjacent 8 KiB pages merge up to 128 KiB, then a new chunk starts.
        let pages: Vec<(u64, u64)> = (0..20).map(|i| (i * 8192, (i + 1) * 8192)).collect();
        let c = coalesce(&pages, u64::MAX, 512);
        assert_eq!(c, vec![0..MAX_CHUNK, MAX_CHUNK..20 * 8192]);
        // Duplicates are read once.
        assert_eq!(coalesce(&[(0, 8192), (0, 8192)], u64::MAX, 512), vec![0..8192]);
        // Direct IO: a value with its header spans whole 4 KiB blocks.
        assert_eq!(coalesce(&[(100, 8300)], u64::MAX, 4096), vec![0..12288]);
        assert_eq!(coalesce(&[(0, 10), (4000, 4100)], u64::MAX, 4096), vec![0..8192]);
    }
}
