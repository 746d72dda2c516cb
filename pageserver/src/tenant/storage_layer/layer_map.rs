//! `LayerMap`: which layers a timeline has, in LSN order.
//!
//! Invariants (asserted by every method that changes the map):
//! - layer LSN ranges are disjoint, ordered and contiguous: L0 deltas
//!   (oldest first), then frozen in-memory layers (oldest first), then the
//!   open in-memory layer; each starts where the one before it ends, and the
//!   first starts at `start_lsn` (the timeline's `initial_lsn + 1`). Layers
//!   loaded from a version-1 metadata file may have gaps between L0s (older
//!   daemons opened a layer at `last_record_lsn + 1`); new layers never do;
//! - every value lives in exactly one layer;
//! - a frozen layer leaves the map only in `replace_flushed`, in the same
//!   critical section that adds the L0 file holding its values (oldest
//!   frozen first), so a reader never misses a value.
//!
//! The fields are private: the timeline changes the map only through these
//! methods, under its `layers` lock.

use std::collections::VecDeque;
use std::sync::Arc;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::inmemory_layer::InMemoryLayer;
use super::layer_file::LayerFile;

pub struct LayerMap {
    /// Where the oldest layer starts (`initial_lsn + 1`).
    start_lsn: Lsn,
    open: Option<Arc<InMemoryLayer>>,
    frozen: VecDeque<Arc<InMemoryLayer>>,
    l0: Vec<Arc<LayerFile>>,
}

/// A layer in a read plan.
#[derive(Clone)]
pub enum ReadableLayer {
    InMemory(Arc<InMemoryLayer>),
    Delta(Arc<LayerFile>),
}

impl ReadableLayer {
    pub fn start_lsn(&self) -> Lsn {
        match self {
            ReadableLayer::InMemory(l) => l.start_lsn,
            ReadableLayer::Delta(l) => l.lsn_range().start,
        }
    }

    /// The layer as errors name it: the L0 file name, or the in-memory
    /// layer's LSN start.
    pub fn describe(&self) -> String {
        match self {
            ReadableLayer::InMemory(l) => format!("in-memory layer from {}", l.start_lsn),
            ReadableLayer::Delta(l) => l.name.to_string(),
        }
    }

    /// Whether the layer can hold a value of `key` (in-memory layers hold
    /// any key; an L0's key range is in its name).
    pub fn may_contain(&self, key: &Key) -> bool {
        match self {
            ReadableLayer::InMemory(_) => true,
            ReadableLayer::Delta(l) => l.name.key_range.contains(key),
        }
    }
}

impl LayerMap {
    /// A map of loaded L0 layers (sorted by LSN, disjoint; see the module
    /// comment for gaps); panics if they are not.
    pub fn new(start_lsn: Lsn, l0: Vec<Arc<LayerFile>>) -> LayerMap {
        for w in l0.windows(2) {
            assert!(
                w[0].lsn_range().end <= w[1].lsn_range().start,
                "layers {} and {} overlap or are out of order",
                w[0].name,
                w[1].name
            );
        }
        if let Some(first) = l0.first() {
            assert!(
                first.lsn_range().start >= start_lsn,
                "layer {} starts below the timeline",
                first.name
            );
        }
        LayerMap { start_lsn, open: None, frozen: VecDeque::new(), l0 }
    }

    /// Where the next layer must start: the end of the newest layer.
    pub fn next_layer_start(&self) -> Lsn {
        assert!(self.open.is_none(), "the open layer has no end yet");
        if let Some(f) = self.frozen.back() {
            return f.end_lsn().expect("frozen layers have an end");
        }
        self.l0.last().map_or(self.start_lsn, |l| l.lsn_range().end)
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
    /// (`None` when it held no values).
    pub fn replace_flushed(&mut self, flushed: &Arc<InMemoryLayer>, l0: Option<Arc<LayerFile>>) {
        let front = self.frozen.pop_front().expect("flushed layer is in the map");
        assert!(Arc::ptr_eq(&front, flushed), "layers must be flushed oldest first");
        if let Some(l0) = l0 {
            let end = flushed.end_lsn().expect("frozen");
            assert!(
                l0.lsn_range().start == flushed.start_lsn && l0.lsn_range().end == end,
                "L0 {} does not cover the flushed layer {}..{end}",
                l0.name,
                flushed.start_lsn
            );
            self.l0.push(l0);
        }
    }

    pub fn l0_layers(&self) -> &[Arc<LayerFile>] {
        &self.l0
    }

    /// All layers, newest first.
    pub fn newest_first(&self) -> Vec<ReadableLayer> {
        let mut v = Vec::with_capacity(1 + self.frozen.len() + self.l0.len());
        v.extend(self.open.iter().cloned().map(ReadableLayer::InMemory));
        v.extend(self.frozen.iter().rev().cloned().map(ReadableLayer::InMemory));
        v.extend(self.l0.iter().rev().cloned().map(ReadableLayer::Delta));
        v
    }

    /// The layers that may hold a value of `key` at or below `lsn`, newest
    /// first. L0s are found by binary search on their LSN ranges.
    pub fn search(&self, key: &Key, lsn: Lsn) -> Vec<ReadableLayer> {
        let mut v: Vec<ReadableLayer> = self
            .open
            .iter()
            .chain(self.frozen.iter().rev())
            .filter(|l| l.start_lsn <= lsn)
            .cloned()
            .map(ReadableLayer::InMemory)
            .collect();
        let below = self.l0.partition_point(|l| l.lsn_range().start <= lsn);
        v.extend(
            self.l0[..below]
                .iter()
                .rev()
                .filter(|l| l.name.key_range.contains(key))
                .cloned()
                .map(ReadableLayer::Delta),
        );
        v
    }

    pub fn in_memory_layer_count(&self) -> usize {
        self.open.iter().count() + self.frozen.len()
    }

    pub fn in_memory_bytes(&self) -> u64 {
        self.open.iter().chain(self.frozen.iter()).map(|l| l.size()).sum()
    }
}
