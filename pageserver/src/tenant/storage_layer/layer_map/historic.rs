//! The historic part of a layer map: strata of delta layers, and image
//! layers. A `Historic` is immutable once published: the map changes a
//! private copy and swaps it in (see `layer_map.rs`).
//!
//! Invariants (`Historic::check`, asserted by every mutation; the checks
//! name the layers):
//! - strata are sorted by LSN and do not overlap; each starts where the one
//!   below it ends (the lowest at `start_lsn`), except for gaps lying
//!   wholly at or below the GC cutoff (left by GC). `end_lsn`, where the
//!   next flushed layer starts, is at or above the newest stratum's end (above
//!   it only when GC removed the newest strata, all at or below the cutoff);
//! - a stratum is L0 (at most one delta layer, spanning the stratum; none
//!   for a flushed range without values) or L1 (delta layers spanning the
//!   stratum's LSN range, sorted by key and disjoint in keys; key gaps hold
//!   no values); every L1 stratum is below every L0 stratum;
//! - images: at each LSN (> 0) a non-empty set of image layers at that LSN,
//!   sorted by key and disjoint in keys; no other order among LSNs;
//! - every layer has a non-empty key range.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::coverage::Images;
use super::HistoricLayer;
use crate::tenant::storage_layer::{LayerKind, LayerLevel};

/// One stratum: an LSN range and the delta layers holding its values.
pub struct Stratum<L> {
    lsn_range: Range<Lsn>,
    level: LayerLevel,
    /// Sorted by key start, disjoint in keys.
    layers: Vec<Arc<L>>,
}

impl<L: HistoricLayer> Stratum<L> {
    /// A stratum of `layers` (any order; sorted here by key start).
    pub(super) fn new(level: LayerLevel, lsn_range: Range<Lsn>, mut layers: Vec<Arc<L>>) -> Self {
        layers.sort_by_key(|l| l.layer_name().key_range.start);
        Stratum { lsn_range, level, layers }
    }

    pub fn lsn_range(&self) -> &Range<Lsn> {
        &self.lsn_range
    }

    pub fn level(&self) -> LayerLevel {
        self.level
    }

    /// The stratum's delta layers, sorted by key.
    pub fn layers(&self) -> &[Arc<L>] {
        &self.layers
    }

    /// The layer whose key range holds `key` (binary search).
    pub fn layer_containing(&self, key: Key) -> Option<&Arc<L>> {
        let n = self.layers.partition_point(|l| l.layer_name().key_range.start <= key);
        let l = self.layers.get(n.checked_sub(1)?)?;
        (key < l.layer_name().key_range.end).then_some(l)
    }

    /// The layers whose key ranges overlap `keys` (binary search).
    pub fn overlapping(&self, keys: &Range<Key>) -> &[Arc<L>] {
        // Disjoint and sorted by start, so sorted by end too.
        let lo = self.layers.partition_point(|l| l.layer_name().key_range.end <= keys.start);
        let hi = self.layers.partition_point(|l| l.layer_name().key_range.start < keys.end);
        &self.layers[lo..hi.max(lo)]
    }

    /// The stratum as errors name it: its layers' file names, or its range.
    pub(super) fn describe(&self) -> String {
        match self.layers.as_slice() {
            [] => format!(
                "the empty {} stratum {}..{}",
                self.level, self.lsn_range.start, self.lsn_range.end
            ),
            [l] => format!("{} layer {}", self.level, l.layer_name()),
            [first, .., last] => format!(
                "the {} stratum {}..{} ({} layers, {} .. {})",
                self.level,
                self.lsn_range.start,
                self.lsn_range.end,
                self.layers.len(),
                first.layer_name(),
                last.layer_name()
            ),
        }
    }

    /// The stratum's own invariants (see the module comment).
    pub(super) fn check(&self) -> Result<(), String> {
        let Range { start, end } = self.lsn_range;
        if start >= end {
            return Err(format!("{} has an empty LSN range {start}..{end}", self.describe()));
        }
        match self.level {
            LayerLevel::Image => {
                return Err(format!("{} is a stratum of image layers", self.describe()));
            }
            LayerLevel::L0 if self.layers.len() > 1 => {
                return Err(format!("{} has more than one L0 layer", self.describe()));
            }
            _ => {}
        }
        for l in &self.layers {
            let name = l.layer_name();
            if name.kind != LayerKind::Delta {
                return Err(format!("{} layer {name} is not a delta layer", self.level));
            }
            if name.lsn_range != self.lsn_range {
                return Err(format!(
                    "{} layer {name} does not span its stratum {start}..{end}",
                    self.level
                ));
            }
            check_keys(l)?;
        }
        check_disjoint(&self.layers, &self.level.to_string())
    }
}

impl<L> Clone for Stratum<L> {
    fn clone(&self) -> Self {
        Stratum {
            lsn_range: self.lsn_range.clone(),
            level: self.level,
            layers: self.layers.clone(),
        }
    }
}

fn check_keys<L: HistoricLayer>(l: &Arc<L>) -> Result<(), String> {
    let name = l.layer_name();
    if name.key_range.start >= name.key_range.end {
        return Err(format!("layer {name} has an empty key range"));
    }
    Ok(())
}

/// `layers` (sorted by key start) do not overlap in keys.
fn check_disjoint<L: HistoricLayer>(layers: &[Arc<L>], what: &str) -> Result<(), String> {
    for w in layers.windows(2) {
        let (a, b) = (w[0].layer_name(), w[1].layer_name());
        if a.key_range.end > b.key_range.start {
            return Err(format!("{what} layers {a} and {b} overlap in keys"));
        }
    }
    Ok(())
}

/// The image layers' invariants (see the module comment).
fn check_images<L: HistoricLayer>(by_lsn: &BTreeMap<Lsn, Vec<Arc<L>>>) -> Result<(), String> {
    for (&lsn, layers) in by_lsn {
        if lsn == Lsn(0) || layers.is_empty() {
            return Err(format!("{} image layers at LSN {lsn}", layers.len()));
        }
        for l in layers {
            let name = l.layer_name();
            if name.kind != LayerKind::Image || name.image_lsn() != lsn {
                return Err(format!("layer {name} is not an image layer at {lsn}"));
            }
            check_keys(l)?;
        }
        check_disjoint(layers, &format!("image (at {lsn})"))?;
    }
    Ok(())
}

/// Layer counts and bytes per level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoricStats {
    pub l0_layers: usize,
    pub l0_bytes: u64,
    pub l1_layers: usize,
    pub l1_bytes: u64,
    pub image_layers: usize,
    pub image_bytes: u64,
}

impl HistoricStats {
    /// Bytes of all layer files.
    pub fn bytes(&self) -> u64 {
        self.l0_bytes + self.l1_bytes + self.image_bytes
    }
}

/// For image creation: the strata above the newest image of a key range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltasAboveImage {
    /// The oldest, over the keys of the range, of the newest image covering
    /// each key; `None` if some key has no image.
    pub image_lsn: Option<Lsn>,
    /// Every stratum holding LSNs above `image_lsn` (all strata if `None`),
    /// oldest first.
    pub strata: Vec<StratumDeltas>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StratumDeltas {
    pub lsn_range: Range<Lsn>,
    pub level: LayerLevel,
    /// Delta layers of the stratum overlapping the key range.
    pub overlapping_layers: usize,
}

/// The historic layers of a map (see the module comment).
pub struct Historic<L> {
    /// The timeline's first LSN (`initial_lsn + 1`).
    start_lsn: Lsn,
    /// Where the next (flushed) stratum starts.
    end_lsn: Lsn,
    /// Reads below this LSN are refused; the history below it may be gone.
    gc_cutoff: Lsn,
    strata: Vec<Arc<Stratum<L>>>,
    images: Arc<Images<L>>,
}

impl<L> Clone for Historic<L> {
    fn clone(&self) -> Self {
        Historic {
            start_lsn: self.start_lsn,
            end_lsn: self.end_lsn,
            gc_cutoff: self.gc_cutoff,
            strata: self.strata.clone(),
            images: self.images.clone(),
        }
    }
}

/// `lsn + 1`: the first LSN above `lsn` (ranges ending here hold only LSNs
/// at or below `lsn`).
fn above(lsn: Lsn) -> Lsn {
    Lsn(lsn.0 + 1)
}

impl<L: HistoricLayer> Historic<L> {
    /// Build from loaded layers with their levels (any order) and the
    /// strata without layers, then check every invariant.
    pub(super) fn build(
        start_lsn: Lsn,
        gc_cutoff: Lsn,
        layers: Vec<(LayerLevel, Arc<L>)>,
        empty_strata: Vec<(LayerLevel, Range<Lsn>)>,
    ) -> Result<Historic<L>, String> {
        let mut strata = Vec::new();
        let mut l1: BTreeMap<(Lsn, Lsn), Vec<Arc<L>>> = BTreeMap::new();
        let mut images: BTreeMap<Lsn, Vec<Arc<L>>> = BTreeMap::new();
        for (level, l) in layers {
            let name = l.layer_name();
            if name.kind != level.kind() {
                let kind = if name.kind == LayerKind::Image { "an image" } else { "a delta" };
                return Err(format!("layer {name} is listed as {level}, but is {kind} layer"));
            }
            match level {
                LayerLevel::L0 => {
                    strata.push(Stratum::new(level, name.lsn_range.clone(), vec![l]));
                }
                LayerLevel::L1 => {
                    let (s, e) = (name.lsn_range.start, name.lsn_range.end);
                    l1.entry((s, e)).or_default().push(l);
                }
                LayerLevel::Image => images.entry(name.image_lsn()).or_default().push(l),
            }
        }
        strata.extend(l1.into_iter().map(|((s, e), v)| Stratum::new(LayerLevel::L1, s..e, v)));
        strata.extend(empty_strata.into_iter().map(|(lv, r)| Stratum::new(lv, r, Vec::new())));
        strata.sort_by_key(|s| (s.lsn_range.start, s.lsn_range.end));
        for v in images.values_mut() {
            v.sort_by_key(|l| l.layer_name().key_range.start);
        }
        check_images(&images)?; // before they are indexed
        let end_lsn = strata.last().map_or(start_lsn, |s| s.lsn_range.end.max(start_lsn));
        let h = Historic {
            start_lsn,
            end_lsn,
            gc_cutoff,
            strata: strata.into_iter().map(Arc::new).collect(),
            images: Arc::new(Images::new(images)),
        };
        h.check()?;
        Ok(h)
    }

    /// Every invariant of the module comment; the error names the layers.
    pub(super) fn check(&self) -> Result<(), String> {
        let mut prev: Option<&Stratum<L>> = None;
        let mut prev_end = self.start_lsn;
        let below_start = || format!("the timeline's start {}", self.start_lsn);
        for s in &self.strata {
            s.check()?;
            let what_below = prev.map_or_else(below_start, |p| p.describe());
            let start = s.lsn_range.start;
            if start < prev_end {
                return Err(format!(
                    "{} starts at {start}, below the end {prev_end} of {what_below}: overlap",
                    s.describe()
                ));
            }
            if start > prev_end && start > above(self.gc_cutoff) {
                return Err(format!(
                    "gap {prev_end}..{start} between {what_below} and {} above the GC cutoff {}",
                    s.describe(),
                    self.gc_cutoff
                ));
            }
            if let Some(p) = prev.filter(|p| p.level == LayerLevel::L0) {
                if s.level == LayerLevel::L1 {
                    return Err(format!("{} lies above {}", s.describe(), p.describe()));
                }
            }
            prev = Some(s);
            prev_end = s.lsn_range.end;
        }
        if self.end_lsn < prev_end
            || (self.end_lsn > prev_end && self.end_lsn > above(self.gc_cutoff))
        {
            return Err(format!(
                "the layers end at {prev_end}, the map at {} (GC cutoff {})",
                self.end_lsn, self.gc_cutoff
            ));
        }
        check_images(self.images.by_lsn())
    }

    pub fn start_lsn(&self) -> Lsn {
        self.start_lsn
    }

    /// Where the next flushed layer starts.
    pub fn end_lsn(&self) -> Lsn {
        self.end_lsn
    }

    pub fn gc_cutoff(&self) -> Lsn {
        self.gc_cutoff
    }

    /// The strata, oldest first.
    pub fn strata(&self) -> impl DoubleEndedIterator<Item = &Stratum<L>> + ExactSizeIterator {
        self.strata.iter().map(|s| &**s)
    }

    pub(super) fn stratum_slice(&self) -> &[Arc<Stratum<L>>] {
        &self.strata
    }

    /// Index of the oldest L0 stratum (`strata.len()` if none).
    fn first_l0(&self) -> usize {
        self.strata.partition_point(|s| s.level == LayerLevel::L1)
    }

    /// The L0 layers, oldest first.
    pub fn l0_layers(&self) -> impl DoubleEndedIterator<Item = &Arc<L>> {
        self.strata[self.first_l0()..].iter().flat_map(|s| s.layers.iter())
    }

    pub fn l0_count(&self) -> usize {
        self.l0_layers().count()
    }

    /// The image layers by LSN ascending, each LSN's sorted by key.
    pub fn images(&self) -> impl DoubleEndedIterator<Item = (Lsn, &[Arc<L>])> {
        self.images.by_lsn().iter().map(|(lsn, v)| (*lsn, v.as_slice()))
    }

    /// The parts of `keys` that no image layer at exactly `lsn` covers, in
    /// key order: where new images at `lsn` may go, since images at one
    /// LSN are disjoint (an import writes its own at its LSN, and image
    /// creation may later pick the same LSN).
    pub fn uncovered_by_images_at(&self, lsn: Lsn, keys: Range<Key>) -> Vec<Range<Key>> {
        let mut gaps = Vec::new();
        let mut from = keys.start;
        for l in self.images.by_lsn().get(&lsn).into_iter().flatten() {
            let covered = &l.layer_name().key_range;
            if covered.end <= from || covered.start >= keys.end {
                continue;
            }
            if covered.start > from {
                gaps.push(from..covered.start);
            }
            from = from.max(covered.end);
        }
        if from < keys.end {
            gaps.push(from..keys.end);
        }
        gaps
    }

    /// The newest image layer covering `key` at or below `lsn`, with its LSN.
    pub fn newest_image(&self, key: Key, lsn: Lsn) -> Option<(Lsn, &Arc<L>)> {
        self.images.newest(key, lsn)
    }

    /// Every historic layer with its level, in the manifest's canonical
    /// order: strata oldest first (an L1 stratum's layers by key), then
    /// images by LSN and key.
    pub fn all_historic(&self) -> Vec<(LayerLevel, Arc<L>)> {
        let deltas = self.strata.iter().flat_map(|s| s.layers.iter().map(|l| (s.level, l.clone())));
        let images =
            self.images().flat_map(|(_, v)| v.iter().map(|l| (LayerLevel::Image, l.clone())));
        deltas.chain(images).collect()
    }

    /// The strata that hold no layer (their LSN ranges have no values), oldest first.
    pub fn empty_strata(&self) -> Vec<(LayerLevel, Range<Lsn>)> {
        let empty = self.strata.iter().filter(|s| s.layers.is_empty());
        empty.map(|s| (s.level, s.lsn_range.clone())).collect()
    }

    pub fn stats(&self) -> HistoricStats {
        let mut st = HistoricStats::default();
        for (level, l) in self.all_historic() {
            let (n, bytes) = match level {
                LayerLevel::L0 => (&mut st.l0_layers, &mut st.l0_bytes),
                LayerLevel::L1 => (&mut st.l1_layers, &mut st.l1_bytes),
                LayerLevel::Image => (&mut st.image_layers, &mut st.image_bytes),
            };
            *n += 1;
            *bytes += l.file_size();
        }
        st
    }

    /// For image creation over `keys`: the newest image floor and, per
    /// stratum above it, how many of its delta layers overlap `keys`.
    pub fn deltas_above_image(&self, keys: &Range<Key>) -> DeltasAboveImage {
        let image_lsn = self.images.newest_floor(keys);
        let floor = image_lsn.unwrap_or(Lsn(0));
        let strata = self
            .strata
            .iter()
            .filter(|s| s.lsn_range.end > above(floor))
            .map(|s| StratumDeltas {
                lsn_range: s.lsn_range.clone(),
                level: s.level,
                overlapping_layers: s.overlapping(keys).len(),
            })
            .collect();
        DeltasAboveImage { image_lsn, strata }
    }

    /// The historic layers GC may delete at `cutoff` (reads at or above it
    /// never need them), in canonical order:
    /// - a delta layer whose stratum ends at or below `cutoff + 1` and
    ///   whose key range is covered by images with LSNs in
    ///   `[lsn_range.end - 1, cutoff]`;
    /// - an image layer whose key range is covered by newer images at or
    ///   below `cutoff`.
    ///
    /// So the newest image at or below `cutoff` of any key is never one.
    pub fn gc_candidates(&self, cutoff: Lsn) -> Vec<Arc<L>> {
        let mut out = Vec::new();
        for s in self.strata.iter().take_while(|s| s.lsn_range.end <= above(cutoff)) {
            let lowest_image = Lsn(s.lsn_range.end.0 - 1);
            let covered =
                |l: &&Arc<L>| self.images.covers(&l.layer_name().key_range, lowest_image..=cutoff);
            out.extend(s.layers.iter().filter(covered).cloned());
        }
        for (&lsn, layers) in self.images.by_lsn().range(..cutoff) {
            let covered =
                |l: &&Arc<L>| self.images.covers(&l.layer_name().key_range, above(lsn)..=cutoff);
            out.extend(layers.iter().filter(covered).cloned());
        }
        out
    }

    /// Publish `l0` (`None`: the range held no values) as the newest
    /// stratum, covering `lsn_range`, which starts at `end_lsn`.
    pub(super) fn push_flushed(&mut self, lsn_range: Range<Lsn>, l0: Option<Arc<L>>) {
        assert_eq!(
            lsn_range.start, self.end_lsn,
            "flushed range {}..{} does not start where the layers end",
            lsn_range.start, lsn_range.end
        );
        let s = Stratum::new(LayerLevel::L0, lsn_range, l0.into_iter().collect());
        if let Err(e) = s.check() {
            panic!("flushed layer refused: {e}");
        }
        self.end_lsn = s.lsn_range.end;
        self.strata.push(Arc::new(s));
    }

    /// See `LayerMap::replace_l0s`.
    pub(super) fn replace_l0s(&mut self, old: &[Arc<L>], new_l1s: Vec<Arc<L>>) {
        let first = self.first_l0();
        let mut given = old.iter();
        let mut want = given.next().expect("compaction of no L0 layers");
        let mut run_end = None;
        for (i, s) in self.strata.iter().enumerate().skip(first) {
            let Some(l) = s.layers.first() else { continue };
            assert!(
                Arc::ptr_eq(l, want),
                "replace_l0s: the oldest run of L0s, in order, has {} where {} was given",
                l.layer_name(),
                want.layer_name()
            );
            match given.next() {
                Some(w) => want = w,
                None => {
                    run_end = Some(i + 1);
                    break;
                }
            }
        }
        let Some(run_end) = run_end else {
            panic!("replace_l0s: {} is not an L0 layer of the map", want.layer_name());
        };
        let range = self.strata[first].lsn_range.start..self.strata[run_end - 1].lsn_range.end;
        let s = Stratum::new(LayerLevel::L1, range, new_l1s);
        if let Err(e) = s.check() {
            panic!("replace_l0s: {e}");
        }
        self.strata.splice(first..run_end, [Arc::new(s)]);
    }

    /// See `LayerMap::add_images`.
    pub(super) fn add_images(&mut self, lsn: Lsn, layers: Vec<Arc<L>>) {
        assert!(lsn > Lsn(0), "add_images at LSN 0");
        for l in &layers {
            let name = l.layer_name();
            assert!(
                name.kind == LayerKind::Image && name.image_lsn() == lsn,
                "add_images at {lsn}: {name} is not an image layer at {lsn}"
            );
            if let Err(e) = check_keys(l) {
                panic!("add_images at {lsn}: {e}");
            }
        }
        if layers.is_empty() {
            return;
        }
        let mut by_lsn = self.images.by_lsn().clone();
        let at = by_lsn.entry(lsn).or_default();
        at.extend(layers);
        at.sort_by_key(|l| l.layer_name().key_range.start);
        if let Err(e) = check_disjoint(at, &format!("image (at {lsn})")) {
            panic!("add_images at {lsn}: {e}");
        }
        self.images = Arc::new(Images::new(by_lsn));
    }

    /// See `LayerMap::set_gc_cutoff`.
    pub(super) fn set_gc_cutoff(&mut self, cutoff: Lsn) {
        assert!(
            cutoff >= self.gc_cutoff,
            "the GC cutoff moves backwards, from {} to {cutoff}",
            self.gc_cutoff
        );
        self.gc_cutoff = cutoff;
    }

    /// See `LayerMap::remove`.
    pub(super) fn remove(&mut self, layers: &[Arc<L>]) {
        let candidates = self.gc_candidates(self.gc_cutoff);
        let is_candidate: HashSet<*const L> = candidates.iter().map(Arc::as_ptr).collect();
        let mut gone = HashSet::new();
        for l in layers {
            if !is_candidate.contains(&Arc::as_ptr(l)) {
                let why = if self.contains(l) {
                    "reads at or above the cutoff may still need it"
                } else {
                    "it is not in the layer map"
                };
                panic!(
                    "remove: layer {} is not removable at the GC cutoff {}: {why}",
                    l.layer_name(),
                    self.gc_cutoff
                );
            }
            gone.insert(Arc::as_ptr(l));
        }
        let cutoff = self.gc_cutoff;
        let strata = std::mem::take(&mut self.strata);
        for s in strata {
            let s = if s.layers.iter().any(|l| gone.contains(&Arc::as_ptr(l))) {
                let kept = s.layers.iter().filter(|l| !gone.contains(&Arc::as_ptr(l))).cloned();
                Arc::new(Stratum {
                    lsn_range: s.lsn_range.clone(),
                    level: s.level,
                    layers: kept.collect(),
                })
            } else {
                s
            };
            // A stratum without layers wholly at or below the cutoff goes.
            if !(s.layers.is_empty() && s.lsn_range.end <= above(cutoff)) {
                self.strata.push(s);
            }
        }
        let mut by_lsn = self.images.by_lsn().clone();
        for v in by_lsn.values_mut() {
            v.retain(|l| !gone.contains(&Arc::as_ptr(l)));
        }
        by_lsn.retain(|_, v| !v.is_empty());
        self.images = Arc::new(Images::new(by_lsn));
    }

    fn contains(&self, l: &Arc<L>) -> bool {
        let deltas = self.strata.iter().flat_map(|s| s.layers.iter());
        let images = self.images().flat_map(|(_, v)| v.iter());
        deltas.chain(images).any(|x| Arc::ptr_eq(x, l))
    }
}
