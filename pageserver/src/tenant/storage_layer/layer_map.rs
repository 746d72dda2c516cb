//! `LayerMap`: which layers a timeline has, in LSN order.
//!
//! Invariants: layer LSN ranges are disjoint and contiguous in this order:
//! L0 deltas (oldest first), frozen in-memory layers (oldest first), then the
//! open in-memory layer. Every value lives in exactly one layer. A frozen
//! layer leaves the map only when the L0 file holding its values has been
//! added, in the same critical section, so a reader never misses a value.

use std::collections::VecDeque;
use std::sync::Arc;

use utils::lsn::Lsn;

use super::delta_layer::DeltaLayer;
use super::inmemory_layer::InMemoryLayer;

#[derive(Default)]
pub struct LayerMap {
    pub open: Option<Arc<InMemoryLayer>>,
    pub frozen: VecDeque<Arc<InMemoryLayer>>,
    pub l0: Vec<Arc<DeltaLayer>>,
}

/// A layer in a read plan.
#[derive(Clone)]
pub enum ReadableLayer {
    InMemory(Arc<InMemoryLayer>),
    Delta(Arc<DeltaLayer>),
}

impl ReadableLayer {
    pub fn start_lsn(&self) -> Lsn {
        match self {
            ReadableLayer::InMemory(l) => l.start_lsn,
            ReadableLayer::Delta(l) => l.lsn_range().start,
        }
    }
}

impl LayerMap {
    /// All layers, newest first.
    pub fn newest_first(&self) -> Vec<ReadableLayer> {
        let mut v = Vec::with_capacity(1 + self.frozen.len() + self.l0.len());
        v.extend(self.open.iter().cloned().map(ReadableLayer::InMemory));
        v.extend(self.frozen.iter().rev().cloned().map(ReadableLayer::InMemory));
        v.extend(self.l0.iter().rev().cloned().map(ReadableLayer::Delta));
        v
    }

    /// Replace the oldest frozen layer with the L0 file it was flushed to
    /// (`None` when it held no values).
    pub fn finish_flush(&mut self, flushed: &Arc<InMemoryLayer>, l0: Option<Arc<DeltaLayer>>) {
        let front = self.frozen.pop_front().expect("flushed layer is in the map");
        assert!(Arc::ptr_eq(&front, flushed), "layers must be flushed oldest first");
        if let Some(l0) = l0 {
            debug_assert!(self
                .l0
                .last()
                .is_none_or(|last| last.lsn_range().end <= l0.lsn_range().start));
            self.l0.push(l0);
        }
    }

    pub fn in_memory_bytes(&self) -> u64 {
        self.open.iter().chain(self.frozen.iter()).map(|l| l.size()).sum()
    }
}
