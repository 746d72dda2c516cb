//! Bounded record chains: ingest writes an image of a key once
//! `max_record_chain` records of it follow its last image, so that no read
//! applies more than that many records (a hot page: a pgbench_branches row,
//! a counter, a btree root updated thousands of times between image layers).
//!
//! Counting: per key, the values written since its last `will_init` value
//! (image or initializing record), counted by the writer as it puts each
//! batch (the writer lock serializes it; nothing else reads the counts).
//! Only keys with a non-zero count are held, at most `MAX_TRACKED_KEYS`:
//! when full, keys under half the bound are forgotten (and all, if that
//! frees too little). A forgotten or, after a restart, unknown count only
//! starts again from zero, so a chain can reach up to twice the bound; an
//! image layer written meanwhile by compaction only makes the count too
//! high, which costs one early image, never a wrong page.
//!
//! The image (`TimelineWriter::write_chain_images`): once a batch is in the
//! open layer, each key is read through the normal read path at `L`, the
//! LSN of the value at which its count reached the bound, and the page is
//! stored at `L` as a `Value::Image`, replacing that value in the open layer
//! (`InMemoryLayer::replace_with_images`: one value per key per LSN; the
//! writer lock keeps the layer open). So:
//! - the image equals the page after every record <= `L` (it is that read);
//! - reads at `L` and above stop at it; reads below `L` use the records
//!   below `L`, which stay where they were (GC treats the image as any
//!   value: the history below it is kept while reads below it are allowed);
//! - nothing changes for flush, compaction, GC or crash safety: the image
//!   is one more value of the open layer, at an LSN ingest is writing and
//!   readers cannot see before `finish_write`; a crash loses it with the
//!   records of the open layer, and WAL replay counts from zero again.
//! A key whose read fails (an rmgr without native redo, a corrupt value)
//! keeps its records and is counted again from zero
//! (`pageserver_chain_image_errors_total`): ingest never stops for it.

use std::collections::HashMap;
use std::ops::Range;

use pageserver_api::key::{CompactKey, Key};
use utils::lsn::Lsn;

use super::super::log_limit::PerKeyLogLimit;

/// Keys with a non-zero count held at most (~40 bytes each: ~2.6 MiB).
pub const MAX_TRACKED_KEYS: usize = 65_536;

/// Per key, the values written since its last `will_init` value.
#[derive(Default)]
pub(in crate::tenant::timeline) struct ChainCounts {
    counts: HashMap<CompactKey, u32>,
    /// Rate limit of the warnings about images that could not be built.
    pub log: PerKeyLogLimit,
}

impl ChainCounts {
    /// Count a batch (entries as `put_serialized` takes them, per key in
    /// LSN order); returns each (key, LSN) at which a key's chain reached
    /// `bound`, in batch order (a key may come more than once: its count
    /// starts again after each, as its image will replace that value).
    /// With `images_possible` false (the batch went into a layer readers
    /// cannot see yet, so no image of it can be read) nothing is returned:
    /// counts go on past the bound, and the key is due at its first value
    /// of a later batch.
    pub fn count(
        &mut self,
        entries: &[(Key, Lsn, Range<usize>, bool)],
        bound: usize,
        images_possible: bool,
    ) -> Vec<(Key, Lsn)> {
        let bound = u32::try_from(bound).unwrap_or(u32::MAX).max(1);
        let mut due = Vec::new();
        for (key, lsn, _, will_init) in entries {
            let k = key.to_compact();
            if *will_init {
                self.counts.remove(&k); // an image or initializing value ends the chain
                continue;
            }
            if !self.counts.contains_key(&k) && self.counts.len() >= MAX_TRACKED_KEYS {
                self.make_room(bound);
            }
            let c = self.counts.entry(k).or_insert(0);
            *c = c.saturating_add(1);
            if *c >= bound && images_possible {
                self.counts.remove(&k);
                due.push((*key, *lsn));
            }
        }
        due
    }

    /// Forget keys under half the bound; all of them if that frees less
    /// than a quarter of the room.
    fn make_room(&mut self, bound: u32) {
        self.counts.retain(|_, c| *c >= bound / 2);
        if self.counts.len() > MAX_TRACKED_KEYS * 3 / 4 {
            self.counts.clear();
        }
    }

    #[cfg(test)]
    pub fn get(&self, key: Key) -> u32 {
        self.counts.get(&key.to_compact()).copied().unwrap_or(0)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.counts.len()
    }
}
