//! `KeyIndex`: a hash table from key to the first entry of that key in a
//! layer's sorted index, so that finding the history of one key costs two
//! cache misses (table slot, index entry) instead of ~log2(n) scattered
//! probes of a binary search over the whole index (which dominated the CPU
//! profile of random GetPages: ~10% of the page service's time).
//!
//! Invariants:
//! - Built once from an index sorted by (key, lsn) and immutable after, like
//!   the index itself; lookups need `&self` only.
//! - Open addressing with linear probing over a power-of-two table of `u32`
//!   entry positions, at most half full (`EMPTY` = free slot); the table
//!   stores no keys, a probe compares against `index[pos].0`.
//! - `partition_point` returns exactly what
//!   `index.partition_point(|(k, l, _)| (*k, *l) <= (key, lsn))` would for
//!   every key present in the index; for an absent key it returns a position
//!   with no entry of that key before it (callers only walk back over
//!   entries of the key, so both give the same history: none).

use pageserver_api::key::CompactKey;
use utils::lsn::Lsn;

use super::BlobRef;

const EMPTY: u32 = u32::MAX;

pub struct KeyIndex {
    /// Position in the index of the first entry of a key, or `EMPTY`.
    slots: Vec<u32>,
    shift: u32,
}

fn hash(key: CompactKey, shift: u32) -> usize {
    let x = key as u128;
    let folded = (x as u64) ^ ((x >> 64) as u64).rotate_left(29);
    // Fibonacci hashing: the high bits of the product; sequential keys spread.
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

impl KeyIndex {
    /// `index` sorted by (key, lsn), fewer than `u32::MAX` entries.
    pub fn build(index: &[(CompactKey, Lsn, BlobRef)]) -> KeyIndex {
        assert!(index.len() < EMPTY as usize, "layer index too large for a KeyIndex");
        let distinct = index.windows(2).filter(|w| w[0].0 != w[1].0).count() + 1;
        let bits = (distinct * 2).next_power_of_two().trailing_zeros().max(1);
        let mask = (1usize << bits) - 1;
        let shift = 64 - bits;
        let mut slots = vec![EMPTY; 1 << bits];
        for (pos, &(key, _, _)) in index.iter().enumerate() {
            if pos > 0 && index[pos - 1].0 == key {
                continue;
            }
            let mut s = hash(key, shift);
            while slots[s] != EMPTY {
                s = (s + 1) & mask;
            }
            slots[s] = pos as u32;
        }
        KeyIndex { slots, shift }
    }

    /// Position of the first entry of `key`, if it has any.
    fn first(&self, index: &[(CompactKey, Lsn, BlobRef)], key: CompactKey) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut s = hash(key, self.shift);
        loop {
            let pos = self.slots[s];
            if pos == EMPTY {
                return None;
            }
            if index[pos as usize].0 == key {
                return Some(pos as usize);
            }
            s = (s + 1) & mask;
        }
    }

    /// The end of `key`'s entries with LSN <= `lsn` (see the module comment).
    pub fn partition_point(
        &self,
        index: &[(CompactKey, Lsn, BlobRef)],
        key: CompactKey,
        lsn: Lsn,
    ) -> usize {
        let Some(start) = self.first(index, key) else { return 0 };
        let le = |e: &(CompactKey, Lsn, BlobRef)| e.0 == key && e.1 <= lsn;
        if !le(&index[start]) {
            return start;
        }
        // Gallop forward from `start` (most keys have a few entries), then
        // binary search the last step; `le` is true then false along the tail.
        let (mut lo, mut step) = (start, 1);
        loop {
            let hi = lo + step;
            if hi >= index.len() || !le(&index[hi]) {
                let hi = hi.min(index.len());
                return lo + 1 + index[lo + 1..hi].partition_point(le);
            }
            lo = hi;
            step *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_binary_search_over_the_index() {
        for n in [0usize, 1, 2, 3, 15, 16, 17, 100, 1000] {
            // Runs of 1..=7 LSNs per key; keys spaced by 2 so odd keys are absent.
            let mut index = Vec::new();
            for i in 0..n {
                for j in 0..(i % 7 + 1) {
                    index.push((
                        i as CompactKey * 2,
                        Lsn(10 + j as u64 * 10),
                        BlobRef::new(0, 1, true),
                    ));
                }
            }
            let ki = KeyIndex::build(&index);
            assert!(ki.slots.len() >= 2 * n.max(1));
            for key in -1..=(2 * n as CompactKey + 1) {
                for lsn in [0, 10, 15, 20, 70, 71, u64::MAX] {
                    let got = ki.partition_point(&index, key, Lsn(lsn));
                    let want = index.partition_point(|(k, l, _)| (*k, *l) <= (key, Lsn(lsn)));
                    if key % 2 == 0 && key >= 0 && (key as usize) < 2 * n {
                        assert_eq!(got, want, "n={n} key={key} lsn={lsn}");
                    } else {
                        // Absent key: no entry of it before the position.
                        assert!(got == 0 || index[got - 1].0 != key);
                    }
                }
            }
        }
    }

    #[test]
    fn large_and_negative_keys_hash_apart() {
        let keys = [i128::MIN, -1, 0, 1, i128::MAX, 1 << 64, (1 << 64) + 1];
        let mut index: Vec<_> =
            keys.iter().map(|&k| (k, Lsn(1), BlobRef::new(0, 1, true))).collect();
        index.sort_by_key(|e| e.0);
        let ki = KeyIndex::build(&index);
        for (pos, e) in index.iter().enumerate() {
            assert_eq!(ki.partition_point(&index, e.0, Lsn(1)), pos + 1);
            assert_eq!(ki.partition_point(&index, e.0, Lsn(0)), pos);
        }
    }
}
