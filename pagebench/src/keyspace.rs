//! The set of relation blocks a benchmark client requests, built from the
//! keyspace endpoint's key ranges, and uniform sampling over it.
//!
//! Only relation block keys are kept: field1 == 0 (relation data), field4 != 0
//! (relnode 0 is a directory or relmap key) and field6 != 0xFFFFFFFF (that is the
//! relation-size key). A range from the API may cross from one fork's size key
//! into the next fork's blocks, so ranges are cut at every (rel, fork) prefix.
//! Invariant: every span is non-empty and lies within one (rel, fork); sampling
//! is uniform over all blocks of all spans.

use std::ops::Range;

use anyhow::bail;
use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;
use rand::Rng;

/// Upper bound on the spans one timeline may contribute; a keyspace response
/// that would exceed it is certainly not what a real database produces.
const MAX_SPANS: usize = 10_000_000;

/// Blocks `[start_blk, start_blk + len)` of one relation fork.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSpan {
    pub rel: RelTag,
    pub start_blk: u32,
    pub len: u32,
}

/// Relation blocks of one timeline, sampled uniformly.
#[derive(Debug, Clone, Default)]
pub struct RelBlockSpace {
    spans: Vec<BlockSpan>,
    /// `cumulative[i]` = number of blocks in `spans[..=i]`.
    cumulative: Vec<u64>,
}

impl RelBlockSpace {
    pub fn from_key_ranges(ranges: &[(Key, Key)]) -> anyhow::Result<RelBlockSpace> {
        let mut space = RelBlockSpace::default();
        for (start, end) in ranges {
            space.add_range(*start..*end)?;
        }
        Ok(space)
    }

    fn push(&mut self, span: BlockSpan) -> anyhow::Result<()> {
        if self.spans.len() >= MAX_SPANS {
            bail!("keyspace has more than {MAX_SPANS} relation block spans");
        }
        let total = self.total_blocks() + span.len as u64;
        self.spans.push(span);
        self.cumulative.push(total);
        Ok(())
    }

    fn add_range(&mut self, range: Range<Key>) -> anyhow::Result<()> {
        const SIZE_BLK: u32 = 0xFFFF_FFFF;
        let mut cur = range.start;
        while cur < range.end {
            if cur.field1 != 0 {
                // Non-relation keys (SLRU, two-phase, control) sort after all
                // relation keys: nothing more in this range.
                return Ok(());
            }
            if cur.field4 == 0 {
                // Directory or relmap key: skip to relnode 1 of this (spc, db).
                cur = Key { field4: 1, field5: 0, field6: 0, ..cur };
                continue;
            }
            if cur.field6 == SIZE_BLK {
                cur = cur.next();
                continue;
            }
            // Cut at the size key of cur's (rel, fork), which ends its blocks.
            let size_key = Key { field6: SIZE_BLK, ..cur };
            let stop = if range.end < size_key { range.end } else { size_key };
            // When range.end < size_key, range.end has cur's prefix or a larger
            // one it cannot have (it would then be >= size_key), so field6 of
            // `stop` is the exclusive end block within this (rel, fork).
            let len = stop.field6 - cur.field6;
            if len > 0 {
                self.push(BlockSpan {
                    rel: RelTag::new(cur.field2, cur.field3, cur.field4, cur.field5),
                    start_blk: cur.field6,
                    len,
                })?;
            }
            cur = stop;
        }
        Ok(())
    }

    pub fn total_blocks(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    pub fn spans(&self) -> &[BlockSpan] {
        &self.spans
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The `n`-th block of the space, `n < total_blocks()`.
    pub fn nth(&self, n: u64) -> (RelTag, u32) {
        debug_assert!(n < self.total_blocks());
        let i = self.cumulative.partition_point(|&c| c <= n);
        let span = &self.spans[i];
        let before = if i == 0 { 0 } else { self.cumulative[i - 1] };
        (span.rel, span.start_blk + (n - before) as u32)
    }

    /// A uniformly random block. Panics on an empty space (callers check).
    pub fn sample<R: Rng>(&self, rng: &mut R) -> (RelTag, u32) {
        self.nth(rng.gen_range(0..self.total_blocks()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pageserver_api::reltag::SlruKind;
    use rand::SeedableRng;

    fn rel(n: u32, fork: u8) -> RelTag {
        RelTag::new(1663, 5, n, fork)
    }

    #[test]
    fn keeps_only_relation_blocks() {
        // Ranges as the keyspace endpoint returns them: adjacent existing keys merged.
        let ranges = vec![
            (Key::dbdir(), Key::dbdir().next()),
            // relmap file and relation directory of db 5 are adjacent keys
            (Key::relmap_file(1663, 5), Key::rel_dir(1663, 5).next()),
            // rel 100 main blocks 0..10
            (Key::rel_block(rel(100, 0), 0), Key::rel_block(rel(100, 0), 10)),
            // its size key is adjacent to fsm block 0: one range crossing forks
            (Key::rel_size(rel(100, 0)), Key::rel_block(rel(100, 1), 3)),
            (Key::rel_size(rel(100, 1)), Key::rel_size(rel(100, 1)).next()),
            // rel 200: an empty relation, size key only
            (Key::rel_size(rel(200, 0)), Key::rel_size(rel(200, 0)).next()),
            // SLRU and control keys: ignored
            (Key::slru_dir(SlruKind::Clog), Key::slru_dir(SlruKind::Clog).next()),
            (Key::control_file(), Key::checkpoint().next()),
        ];
        let space = RelBlockSpace::from_key_ranges(&ranges).unwrap();
        assert_eq!(
            space.spans(),
            &[
                BlockSpan { rel: rel(100, 0), start_blk: 0, len: 10 },
                BlockSpan { rel: rel(100, 1), start_blk: 0, len: 3 },
            ]
        );
        assert_eq!(space.total_blocks(), 13);
        assert_eq!(space.nth(0), (rel(100, 0), 0));
        assert_eq!(space.nth(9), (rel(100, 0), 9));
        assert_eq!(space.nth(10), (rel(100, 1), 0));
        assert_eq!(space.nth(12), (rel(100, 1), 2));
    }

    #[test]
    fn range_ending_inside_a_relation() {
        let ranges = vec![(Key::rel_block(rel(7, 2), 4), Key::rel_block(rel(7, 2), 9))];
        let space = RelBlockSpace::from_key_ranges(&ranges).unwrap();
        assert_eq!(space.spans(), &[BlockSpan { rel: rel(7, 2), start_blk: 4, len: 5 }]);
        assert!(RelBlockSpace::from_key_ranges(&[]).unwrap().is_empty());
    }

    #[test]
    fn sampling_is_uniform_and_in_range() {
        let ranges = vec![
            (Key::rel_block(rel(1, 0), 5), Key::rel_block(rel(1, 0), 6)),
            (Key::rel_block(rel(2, 0), 0), Key::rel_block(rel(2, 0), 3)),
        ];
        let space = RelBlockSpace::from_key_ranges(&ranges).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            let (r, b) = space.sample(&mut rng);
            let idx = if r == rel(1, 0) {
                assert_eq!(b, 5);
                0
            } else {
                assert!(b < 3);
                1 + b as usize
            };
            counts[idx] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}
