//! The image layers of a layer map and their coverage index: for a (key,
//! LSN), the newest image layer covering the key at or below the LSN, in
//! O(log n).
//!
//! The key space is cut at every image layer's key boundaries into
//! disjoint segments; a segment lists the images covering it, by LSN
//! ascending (at most one per LSN: images of one LSN are disjoint). Keys
//! no image covers belong to no segment. The index is rebuilt whenever the
//! images change (image creation and GC, both rare); its size is the
//! number of (segment, image) pairs.

use std::collections::BTreeMap;
use std::ops::{Range, RangeInclusive};
use std::sync::Arc;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::HistoricLayer;

/// The image layers of a map: by LSN, each LSN's layers sorted by key and
/// disjoint; plus the coverage index over them.
pub(super) struct Images<L> {
    by_lsn: BTreeMap<Lsn, Vec<Arc<L>>>,
    segments: BTreeMap<Key, Segment<L>>,
}

struct Segment<L> {
    end: Key,
    /// The images covering the whole segment, LSN ascending.
    images: Vec<(Lsn, Arc<L>)>,
}

impl<L: HistoricLayer> Images<L> {
    /// Index `by_lsn` (each LSN's layers sorted by key start; the caller
    /// checks disjointness, see `Historic::check`).
    pub(super) fn new(by_lsn: BTreeMap<Lsn, Vec<Arc<L>>>) -> Images<L> {
        let mut bounds: Vec<Key> = by_lsn
            .values()
            .flatten()
            .flat_map(|l| [l.layer_name().key_range.start, l.layer_name().key_range.end])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut segments: BTreeMap<Key, Segment<L>> =
            bounds.windows(2).map(|w| (w[0], Segment { end: w[1], images: Vec::new() })).collect();
        for (&lsn, layers) in &by_lsn {
            for l in layers {
                let keys = &l.layer_name().key_range;
                for (_, seg) in segments.range_mut(keys.start..keys.end) {
                    debug_assert!(seg.images.last().is_none_or(|(last, _)| *last < lsn));
                    seg.images.push((lsn, l.clone()));
                }
            }
        }
        segments.retain(|_, s| !s.images.is_empty());
        Images { by_lsn, segments }
    }

    pub(super) fn by_lsn(&self) -> &BTreeMap<Lsn, Vec<Arc<L>>> {
        &self.by_lsn
    }

    /// The newest image covering `key` with LSN <= `lsn`.
    pub(super) fn newest(&self, key: Key, lsn: Lsn) -> Option<(Lsn, &Arc<L>)> {
        let (_, seg) = self.segments.range(..=key).next_back()?;
        if key >= seg.end {
            return None;
        }
        let n = seg.images.partition_point(|(l, _)| *l <= lsn);
        n.checked_sub(1).map(|i| (seg.images[i].0, &seg.images[i].1))
    }

    /// Whether every key of `keys` is covered by an image with an LSN in
    /// `lsns` (not necessarily the same image for all keys).
    pub(super) fn covers(&self, keys: &Range<Key>, lsns: RangeInclusive<Lsn>) -> bool {
        self.every_segment(keys, |images| {
            let n = images.partition_point(|(l, _)| l <= lsns.end());
            n > 0 && images[n - 1].0 >= *lsns.start()
        })
    }

    /// The oldest, over the keys of `keys`, of the newest image covering
    /// each key; `None` if some key has no image.
    pub(super) fn newest_floor(&self, keys: &Range<Key>) -> Option<Lsn> {
        let mut floor = Lsn::MAX;
        let covered = self.every_segment(keys, |images| {
            floor = floor.min(images.last().expect("segments are not empty").0);
            true
        });
        covered.then_some(floor)
    }

    /// Whether the segments tile `keys` without a gap and `ok` holds for
    /// each of them (it is called on the segments in key order, until one
    /// fails).
    fn every_segment(
        &self,
        keys: &Range<Key>,
        mut ok: impl FnMut(&[(Lsn, Arc<L>)]) -> bool,
    ) -> bool {
        assert!(keys.start < keys.end, "empty key range {keys:?}");
        let first = match self.segments.range(..=keys.start).next_back() {
            Some((&start, seg)) if seg.end > keys.start => start,
            _ => return false,
        };
        let mut at = keys.start;
        for (&start, seg) in self.segments.range(first..) {
            if start > at || !ok(&seg.images) {
                return false; // a gap, or a segment without the wanted image
            }
            at = seg.end;
            if at >= keys.end {
                return true;
            }
        }
        false
    }
}
