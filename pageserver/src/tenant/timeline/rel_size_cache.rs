//! `RelSizeCache`: the timeline's cache of relation sizes, so that a GetPage
//! does not read the relation's size key every time.
//!
//! An entry `rel -> (lsn, size)` claims: "at every LSN >= `lsn`, up to the
//! next change, the relation has `size` blocks" (`None` = it does not exist,
//! a dropped relation). A lookup at LSN `L` uses the entry only if `lsn <= L`;
//! older reads go to storage.
//!
//! Concurrency contract (why the claim holds):
//! - Writers (`DatadirModification::commit`) are serialized per timeline by
//!   the timeline writer lock and call `update()` for every size they change
//!   at LSN `M` *after* the values are stored and *before* `finish_write(M)`.
//!   So from the moment any reader can read at `M`, the cache knows the change.
//! - Readers `fill()` an entry only for a read at the timeline's
//!   `last_record_lsn` exactly, as it was *before* the storage read started. Every
//!   change above that LSN comes from a writer that has not finished yet;
//!   its `update()` either lands before our `fill()` (then the newer entry is
//!   kept: `fill()` never replaces an entry at a higher LSN) or after (then it
//!   overwrites ours). Size changes persisted before this process started are
//!   at or below `last_record_lsn`, so the storage read saw them.
//! - The map is bounded (`MAX_ENTRIES`): a writer that would exceed it clears
//!   the map first, then inserts its own entries, all before its
//!   `finish_write`; dropping entries only sends readers back to storage.

use std::collections::HashMap;
use std::sync::RwLock;

use pageserver_api::reltag::RelTag;
use utils::lsn::Lsn;

/// Upper bound of cached relations per timeline (~50 bytes each).
pub const MAX_ENTRIES: usize = 256 * 1024;

#[derive(Default)]
pub struct RelSizeCache {
    rel_sizes: RwLock<HashMap<RelTag, (Lsn, Option<u32>)>>,
}

impl RelSizeCache {
    /// The cached size of `rel` valid at `lsn`: `Some(Some(n))` = n blocks,
    /// `Some(None)` = does not exist, `None` = unknown (read storage).
    pub fn lookup(&self, rel: RelTag, lsn: Lsn) -> Option<Option<u32>> {
        let map = self.rel_sizes.read().unwrap();
        match map.get(&rel) {
            Some(&(at, size)) if at <= lsn => Some(size),
            _ => None,
        }
    }

    /// Reader side: remember a size read from storage at `lsn`, which the
    /// caller checked was equal to `last_record_lsn` before its read (see the
    /// module comment). Never replaces a newer entry; never grows past the bound.
    pub fn fill(&self, rel: RelTag, lsn: Lsn, size: Option<u32>) {
        let mut map = self.rel_sizes.write().unwrap();
        let len = map.len();
        match map.get_mut(&rel) {
            Some(entry) if entry.0 < lsn => *entry = (lsn, size),
            Some(_) => {}
            None if len < MAX_ENTRIES => {
                map.insert(rel, (lsn, size));
            }
            None => {}
        }
    }

    /// Writer side: sizes changed at `lsn` (stored, not yet finished).
    pub fn update(&self, changes: impl ExactSizeIterator<Item = (RelTag, Option<u32>)>, lsn: Lsn) {
        let mut map = self.rel_sizes.write().unwrap();
        if map.len() + changes.len() > MAX_ENTRIES {
            map.clear();
        }
        for (rel, size) in changes {
            map.insert(rel, (lsn, size));
        }
    }

    pub fn len(&self) -> usize {
        self.rel_sizes.read().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_respects_lsn_and_order() {
        let c = RelSizeCache::default();
        let rel = RelTag::new(1663, 5, 16384, 0);
        assert_eq!(c.lookup(rel, Lsn(100)), None);
        c.fill(rel, Lsn(100), Some(3));
        assert_eq!(c.lookup(rel, Lsn(99)), None, "older reads must go to storage");
        assert_eq!(c.lookup(rel, Lsn(100)), Some(Some(3)));
        assert_eq!(c.lookup(rel, Lsn(500)), Some(Some(3)));

        // A writer at 200 wins over a late reader fill at 150.
        c.update([(rel, Some(7))].into_iter(), Lsn(200));
        c.fill(rel, Lsn(150), Some(3));
        assert_eq!(c.lookup(rel, Lsn(300)), Some(Some(7)));
        assert_eq!(c.lookup(rel, Lsn(150)), None);

        // Drop: a tombstone.
        c.update([(rel, None)].into_iter(), Lsn(300));
        assert_eq!(c.lookup(rel, Lsn(300)), Some(None));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn bounded() {
        let c = RelSizeCache::default();
        let many: Vec<_> =
            (0..MAX_ENTRIES as u32).map(|i| (RelTag::new(1663, 1, i + 1, 0), Some(1))).collect();
        c.update(many.into_iter(), Lsn(10));
        assert_eq!(c.len(), MAX_ENTRIES);
        // A fill of a new relation is refused when full...
        c.fill(RelTag::new(1663, 2, 1, 0), Lsn(10), Some(1));
        assert_eq!(c.len(), MAX_ENTRIES);
        // ...a writer clears the map and keeps its own entries.
        let rel = RelTag::new(1663, 3, 1, 0);
        c.update([(rel, Some(9))].into_iter(), Lsn(20));
        assert_eq!(c.len(), 1);
        assert_eq!(c.lookup(rel, Lsn(20)), Some(Some(9)));
    }
}
