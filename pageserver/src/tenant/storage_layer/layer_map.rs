//! `LayerMap`: which layers a timeline has, and which of them a read of a
//! key at an LSN must visit.
//!
//! Two parts:
//! - in memory: the open layer and the frozen layers (oldest first), LSN
//!   ranges contiguous, the oldest starting at `Historic::end_lsn`;
//! - historic (`historic.rs`), an immutable `Arc<Historic>` replaced
//!   copy-on-write on every change (flush, compaction, image creation, GC:
//!   all rare), so a reader's snapshot ([`ReadSnapshot`]) costs one Arc
//!   clone plus the few in-memory layers. LSN space above the timeline's
//!   start is cut into *strata*, oldest first, contiguous (gaps only at or
//!   below the GC cutoff): one L0 delta layer of a flush, or the L1 delta
//!   layers compaction wrote for an LSN range (disjoint key ranges; a key
//!   outside them has no value there). L0 strata are the newest. Image
//!   layers stand apart, by LSN: at each image LSN, disjoint key ranges,
//!   with an index giving the newest image covering a key at or below an
//!   LSN in O(log n) (`coverage.rs`).
//!
//! A read of `key` at `lsn` ([`ReadSnapshot::walk`]) visits, newest first,
//! with `I` the newest image covering `key` at or below `lsn`: the
//! in-memory layers starting at or below `lsn` (and holding LSNs above
//! `I`); the delta layers holding `key` in the strata that start at or
//! below `lsn` and hold LSNs above `I`; then the image layer. Each comes
//! with a *floor*: the layer's entries at or below it are not part of the
//! answer (`I` for the in-memory and delta layers, `I - 1` for the image
//! itself, 0 without an image). Each stratum looked at costs
//! O(log n) (a binary search by key; the image is found once, in O(log n)),
//! and the reader stops at the first value that initializes the page.
//!
//! Invariants: those of `historic.rs`, plus: every value lives in exactly
//! one layer; a frozen layer leaves the map only in `replace_flushed`, in
//! the same critical section that adds the L0 holding its values (oldest
//! frozen first), so a reader never misses a value; L0s leave only through
//! `replace_l0s`, which puts the L1s holding their values in their place.
//! Every mutation asserts them, naming the layers involved; in debug builds
//! the whole historic part is checked again after each.
//!
//! The fields are private: the timeline changes the map only through these
//! methods, under its `layers` lock. The map is generic over the historic
//! layer type ([`HistoricLayer`]): a timeline's is [`Layer`] (resident or
//! only in remote storage, `layer.rs`), and the map is tested with layers
//! that are only names.

mod coverage;
mod historic;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::inmemory_layer::InMemoryLayer;
use super::layer::Layer;
use super::{LayerLevel, LayerName};

pub use historic::{DeltasAboveImage, Historic, HistoricStats, Stratum, StratumDeltas};

/// What the map needs of a layer file.
pub trait HistoricLayer {
    fn layer_name(&self) -> &LayerName;
    fn file_size(&self) -> u64;
}

impl HistoricLayer for Layer {
    fn layer_name(&self) -> &LayerName {
        &self.name
    }
    fn file_size(&self) -> u64 {
        self.file_size
    }
}

/// A layer known by its name and size only: start-up checks a manifest
/// with it before opening any file, and tests use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDesc {
    pub name: LayerName,
    pub file_size: u64,
}

impl HistoricLayer for LayerDesc {
    fn layer_name(&self) -> &LayerName {
        &self.name
    }
    fn file_size(&self) -> u64 {
        self.file_size
    }
}

pub struct LayerMap<L = Layer> {
    open: Option<Arc<InMemoryLayer>>,
    frozen: VecDeque<Arc<InMemoryLayer>>,
    historic: Arc<Historic<L>>,
}

/// A layer in a read plan.
pub enum ReadableLayer<L = Layer> {
    InMemory(Arc<InMemoryLayer>),
    Historic(Arc<L>),
}

impl<L> Clone for ReadableLayer<L> {
    fn clone(&self) -> Self {
        match self {
            ReadableLayer::InMemory(l) => ReadableLayer::InMemory(l.clone()),
            ReadableLayer::Historic(l) => ReadableLayer::Historic(l.clone()),
        }
    }
}

impl<L: HistoricLayer> ReadableLayer<L> {
    /// The layer as errors name it: the file name, or the in-memory
    /// layer's LSN start.
    pub fn describe(&self) -> String {
        match self {
            ReadableLayer::InMemory(l) => format!("in-memory layer from {}", l.start_lsn),
            ReadableLayer::Historic(l) => l.layer_name().to_string(),
        }
    }

    /// The layer's identity (its allocation), for deduplication.
    pub fn id(&self) -> usize {
        match self {
            ReadableLayer::InMemory(l) => Arc::as_ptr(l) as *const u8 as usize,
            ReadableLayer::Historic(l) => Arc::as_ptr(l) as *const u8 as usize,
        }
    }
}

/// What a read sees: the in-memory layers (newest first) and the historic
/// part, as of one moment. Later changes of the map do not affect it.
pub struct ReadSnapshot<L = Layer> {
    in_memory: Vec<Arc<InMemoryLayer>>,
    historic: Arc<Historic<L>>,
}

impl<L: HistoricLayer> ReadSnapshot<L> {
    /// The layers a read of `key` at `lsn` visits, newest first, each with
    /// its floor (exclusive); see the module comment. Reads below
    /// [`Self::gc_cutoff`] must be refused before: their history may be gone.
    pub fn walk(&self, key: Key, lsn: Lsn) -> Walk<'_, L> {
        let image = self.historic.newest_image(key, lsn);
        let strata = self.historic.stratum_slice();
        Walk {
            snapshot: self,
            key,
            lsn,
            floor: image.map_or(Lsn(0), |(i, _)| i),
            image,
            next_in_memory: 0,
            strata_left: strata.partition_point(|s| s.lsn_range().start <= lsn),
        }
    }

    pub fn gc_cutoff(&self) -> Lsn {
        self.historic.gc_cutoff()
    }

    pub fn historic(&self) -> &Arc<Historic<L>> {
        &self.historic
    }
}

/// The iterator of [`ReadSnapshot::walk`].
pub struct Walk<'a, L> {
    snapshot: &'a ReadSnapshot<L>,
    key: Key,
    lsn: Lsn,
    /// The newest image covering the key at or below `lsn`; taken when
    /// visited.
    image: Option<(Lsn, &'a Arc<L>)>,
    /// The image's LSN, or 0.
    floor: Lsn,
    next_in_memory: usize,
    /// Strata below this index are still to visit (newest first).
    strata_left: usize,
}

impl<L: HistoricLayer> Iterator for Walk<'_, L> {
    type Item = (ReadableLayer<L>, Lsn);

    fn next(&mut self) -> Option<Self::Item> {
        // A range ending at `end` holds LSNs above the floor.
        let floor = self.floor;
        let above_floor = |end: Lsn| end.0 > floor.0 + 1;
        while let Some(l) = self.snapshot.in_memory.get(self.next_in_memory) {
            self.next_in_memory += 1;
            if l.start_lsn <= self.lsn && l.end_lsn().is_none_or(above_floor) {
                return Some((ReadableLayer::InMemory(l.clone()), self.floor));
            }
        }
        let strata = self.snapshot.historic.stratum_slice();
        while self.strata_left > 0 {
            let s = &strata[self.strata_left - 1];
            if !above_floor(s.lsn_range().end) {
                self.strata_left = 0; // older strata end lower still
                break;
            }
            self.strata_left -= 1;
            if let Some(l) = s.layer_containing(self.key) {
                return Some((ReadableLayer::Historic(l.clone()), self.floor));
            }
        }
        let (i, l) = self.image.take()?;
        Some((ReadableLayer::Historic(l.clone()), Lsn(i.0 - 1)))
    }
}

impl<L: HistoricLayer> LayerMap<L> {
    /// A map of loaded historic layers with their levels (any order) and
    /// the strata without layers, or why they break an invariant (the
    /// error names the layer files). `start_lsn` is the timeline's first
    /// LSN (`initial_lsn + 1`).
    pub fn try_new(
        start_lsn: Lsn,
        gc_cutoff: Lsn,
        layers: Vec<(LayerLevel, Arc<L>)>,
        empty_strata: Vec<(LayerLevel, Range<Lsn>)>,
    ) -> anyhow::Result<LayerMap<L>> {
        let historic = Historic::build(start_lsn, gc_cutoff, layers, empty_strata)
            .map_err(|e| anyhow::anyhow!("the layers break the layer map's invariants: {e}"))?;
        Ok(LayerMap { open: None, frozen: VecDeque::new(), historic: Arc::new(historic) })
    }

    /// `try_new` of layers known to be valid; panics if they are not.
    pub fn new(
        start_lsn: Lsn,
        gc_cutoff: Lsn,
        layers: Vec<(LayerLevel, Arc<L>)>,
        empty_strata: Vec<(LayerLevel, Range<Lsn>)>,
    ) -> LayerMap<L> {
        Self::try_new(start_lsn, gc_cutoff, layers, empty_strata).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The historic part, as of now (an Arc clone: later changes do not
    /// affect it). The queries compaction and GC need are its methods.
    pub fn historic(&self) -> &Arc<Historic<L>> {
        &self.historic
    }

    /// What a read needs: the in-memory layers and the historic part.
    pub fn snapshot(&self) -> ReadSnapshot<L> {
        let mut in_memory = Vec::with_capacity(1 + self.frozen.len());
        in_memory.extend(self.open.iter().cloned());
        in_memory.extend(self.frozen.iter().rev().cloned());
        ReadSnapshot { in_memory, historic: self.historic.clone() }
    }

    /// Where the next layer must start: the end of the newest layer.
    pub fn next_layer_start(&self) -> Lsn {
        assert!(self.open.is_none(), "the open layer has no end yet");
        if let Some(f) = self.frozen.back() {
            return f.end_lsn().expect("frozen layers have an end");
        }
        self.historic.end_lsn()
    }

    pub fn open_layer(&self) -> Option<&Arc<InMemoryLayer>> {
        self.open.as_ref()
    }

    /// Install a new open layer; it must start where the newest layer ends.
    pub fn set_open(&mut self, layer: Arc<InMemoryLayer>) {
        assert!(self.open.is_none(), "a layer is already open");
        assert_eq!(layer.start_lsn, self.next_layer_start(), "layers must be contiguous");
        self.open = Some(layer);
    }

    /// Freeze the open layer at `end` and queue it for flushing; `false` if
    /// no layer is open.
    pub fn freeze_open(&mut self, end: Lsn) -> bool {
        let Some(open) = self.open.take() else { return false };
        open.freeze(end); // asserts end > start
        self.frozen.push_back(open);
        true
    }

    pub fn oldest_frozen(&self) -> Option<Arc<InMemoryLayer>> {
        self.frozen.front().cloned()
    }

    pub fn frozen_count(&self) -> usize {
        self.frozen.len()
    }

    /// Replace the oldest frozen layer with the L0 file it was flushed to
    /// (`None` when it held no values: an empty L0 stratum keeps the strata
    /// contiguous). The L0 becomes the newest stratum.
    pub fn replace_flushed(&mut self, flushed: &Arc<InMemoryLayer>, l0: Option<Arc<L>>) {
        let front = self.frozen.front().expect("flushed layer is in the map");
        assert!(Arc::ptr_eq(front, flushed), "layers must be flushed oldest first");
        let range = flushed.start_lsn..flushed.end_lsn().expect("frozen");
        if let Some(l0) = &l0 {
            assert!(
                l0.layer_name().lsn_range == range,
                "L0 {} does not cover the flushed layer {}..{}",
                l0.layer_name(),
                range.start,
                range.end
            );
        }
        self.change_historic(|h| h.push_flushed(range, l0));
        self.frozen.pop_front();
    }

    /// Compaction: replace the oldest run of L0 strata, up to and including
    /// the one of `old.last()`, by one L1 stratum of `new_l1s`. `old` must
    /// be that run's L0 layers, oldest first (empty L0 strata in the run go
    /// too). Every L1 spans the run's LSN range (from the oldest L0
    /// stratum's start to `old.last()`'s end); their key ranges are
    /// disjoint; there may be none (the run held no values).
    pub fn replace_l0s(&mut self, old: &[Arc<L>], new_l1s: Vec<Arc<L>>) {
        self.change_historic(|h| h.replace_l0s(old, new_l1s));
    }

    /// Image creation: add image layers at `lsn`, disjoint in keys among
    /// themselves and from the images already at `lsn`. (The timeline's
    /// manifest writer refuses an image above `disk_consistent_lsn`, as
    /// start-up would: create images at or below it.)
    pub fn add_images(&mut self, lsn: Lsn, layers: Vec<Arc<L>>) {
        self.change_historic(|h| h.add_images(lsn, layers));
    }

    /// Raise the GC cutoff (never lowered). Snapshots taken from now on
    /// carry it; readers must refuse LSNs below it.
    pub fn set_gc_cutoff(&mut self, cutoff: Lsn) {
        self.change_historic(|h| h.set_gc_cutoff(cutoff));
    }

    /// GC: remove historic layers; each must be one of
    /// `gc_candidates(gc_cutoff)` (asserted), so reads at or above the
    /// cutoff are unaffected. Strata left without layers go (they lie at
    /// or below the cutoff).
    pub fn remove(&mut self, layers: &[Arc<L>]) {
        self.change_historic(|h| h.remove(layers));
    }

    /// Apply `change` to a private copy of the historic part (unless no
    /// snapshot shares it) and publish it.
    fn change_historic(&mut self, change: impl FnOnce(&mut Historic<L>)) {
        let h = Arc::make_mut(&mut self.historic);
        change(h);
        #[cfg(debug_assertions)]
        if let Err(e) = h.check() {
            panic!("layer map invariant broken: {e}");
        }
    }

    pub fn in_memory_layer_count(&self) -> usize {
        self.open.iter().count() + self.frozen.len()
    }

    pub fn in_memory_bytes(&self) -> u64 {
        self.open.iter().chain(self.frozen.iter()).map(|l| l.size()).sum()
    }
}
