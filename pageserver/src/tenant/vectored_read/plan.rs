//! Planning a vectored get's queries: per query, the values it needs and
//! the layers that hold them, from the indexes only (no value is read
//! before the plan is complete). First from memory only, which never
//! waits; then, all concurrently, the queries that need an index block
//! from disk or a layer downloaded. A planned query holds the open layer
//! file it planned with.

use std::sync::Arc;

use futures::FutureExt;
use pageserver_api::key::Key;
use smallvec::SmallVec;
use utils::lsn::Lsn;

use super::super::storage_layer::inmemory_layer::InMemoryLayer;
use super::super::storage_layer::layer_file::LayerFile;
use super::super::storage_layer::layer_map::{ReadSnapshot, ReadableLayer};
use super::super::storage_layer::BlobRef;
use super::super::PageReconstructError;
use super::ReadChain;

/// (layer index, LSN, location), newest first. Inline: a page is usually
/// one image.
pub(super) type Plan = SmallVec<[(usize, Lsn, BlobRef); 2]>;

pub(super) struct Query {
    pub key: Key,
    pub lsn: Lsn,
    pub plan: Plan,
    pub complete: bool,
    /// Planning failed (a layer index could not be read).
    pub error: Option<PageReconstructError>,
}

impl Query {
    pub fn new(key: Key, lsn: Lsn) -> Query {
        Query { key, lsn, plan: Plan::new(), complete: false, error: None }
    }
}

/// A layer a plan reads: in memory, or an open layer file (held, so an
/// eviction after planning does not affect the read).
#[derive(Clone)]
pub(super) enum PlannedLayer {
    InMemory(Arc<InMemoryLayer>),
    File(Arc<LayerFile>),
}

impl PlannedLayer {
    /// The layer's identity (its allocation), for deduplication.
    fn id(&self) -> usize {
        match self {
            PlannedLayer::InMemory(l) => Arc::as_ptr(l) as *const u8 as usize,
            PlannedLayer::File(l) => Arc::as_ptr(l) as *const u8 as usize,
        }
    }

    /// The layer as errors name it: the file name, or the in-memory
    /// layer's LSN start.
    pub fn describe(&self) -> String {
        match self {
            PlannedLayer::InMemory(l) => format!("in-memory layer from {}", l.start_lsn),
            PlannedLayer::File(l) => l.name.to_string(),
        }
    }
}

/// Whether a plan reads a layer file opened with direct IO.
pub(super) fn reads_direct(plan: &Option<PlanResult>) -> bool {
    let Some(Ok((walk, _))) = plan else { return false };
    walk.iter().any(|(l, _, _)| matches!(l, PlannedLayer::File(f) if f.is_direct_io()))
}

/// Plan each query from memory only (in-memory layers, cached index
/// blocks, resident layers): no future per query on the common path, and
/// never waits. `None` for a query that needs a read.
pub(super) fn plan_from_memory(
    snapshot: &ReadChain<'_>,
    uniq: &[Query],
) -> Vec<Option<PlanResult>> {
    let gc_cutoff = snapshot.own().gc_cutoff();
    let planned = uniq.iter().map(|q| {
        if q.lsn < gc_cutoff {
            let (key, lsn) = (q.key, q.lsn);
            return Some(Err(PageReconstructError::GarbageCollected { key, lsn, gc_cutoff }));
        }
        plan(snapshot, q.key, q.lsn, true).now_or_never().expect("planning from memory never waits")
    });
    planned.collect()
}

/// Finish the plans `plan_from_memory` made (filling each query's `plan`,
/// `complete`, `error`); the layers the plans read, numbered as the plans
/// refer to them. The queries that need an index block from disk are
/// planned again, all concurrently, so their reads overlap instead of
/// running one after another.
pub(super) async fn finish_plans(
    snapshot: &ReadChain<'_>,
    uniq: &mut [Query],
    mut plans: Vec<Option<PlanResult>>,
) -> Vec<PlannedLayer> {
    assert_eq!(plans.len(), uniq.len(), "a plan per query");
    let need_reads: Vec<usize> = (0..plans.len()).filter(|&i| plans[i].is_none()).collect();
    let with_reads = need_reads.iter().map(|&i| plan(snapshot, uniq[i].key, uniq[i].lsn, false));
    for (&i, p) in need_reads.iter().zip(futures::future::join_all(with_reads).await) {
        plans[i] = Some(p.expect("planning with reads always finishes"));
    }
    let plans = plans.into_iter().map(|p| p.expect("every query is planned"));
    let mut layers: Vec<PlannedLayer> = Vec::new();
    // A get reads few layers: a linear search beats hashing (and a
    // `HashMap`'s random seed and allocation per get).
    let mut ids: SmallVec<[usize; 4]> = SmallVec::new();
    for (q, p) in uniq.iter_mut().zip(plans) {
        let (walked, complete) = match p {
            Ok(p) => p,
            Err(e) => {
                q.error = Some(e);
                continue;
            }
        };
        q.complete = complete;
        for (layer, lsn, blob) in walked {
            let id = layer.id();
            let li = ids.iter().position(|&i| i == id).unwrap_or_else(|| {
                ids.push(id);
                layers.push(layer);
                layers.len() - 1
            });
            q.plan.push((li, lsn, blob));
        }
    }
    layers
}

/// Why a planned query is answered without reading: planning failed, or
/// its walk ended before a value that initializes the page.
pub(super) fn refusal(q: &mut Query) -> Option<PageReconstructError> {
    if let Some(e) = q.error.take() {
        return Some(e);
    }
    if q.complete {
        return None;
    }
    Some(if q.plan.is_empty() {
        PageReconstructError::MissingKey { key: q.key, lsn: q.lsn }
    } else {
        PageReconstructError::Corrupt(format!(
            "key {} at {}: no image or initializing record below {}",
            q.key,
            q.lsn,
            q.plan.last().unwrap().1
        ))
    })
}

/// A query's plan before the layers are numbered: (layer, LSN, location),
/// newest first.
type WalkPlan = SmallVec<[(PlannedLayer, Lsn, BlobRef); 2]>;

/// What planning one query gives: its values (layers not yet numbered)
/// and whether they reach one that initializes the page.
pub(super) type PlanResult = Result<(WalkPlan, bool), PageReconstructError>;

/// Plan one query: walk the snapshot's layers for `key` newest first,
/// collecting its values above each layer's floor until one that
/// initializes the page (`complete`), or the walk ends; then, for a
/// branch, the same in its ancestor at min(`lsn`, branch point), and so
/// on (`ReadChain::at`). An ancestor's link below its GC cutoff is
/// refused (GC keeps every branch point, so this is a broken invariant,
/// never a race). With `cached_only`,
/// a layer file's index blocks come from the block cache only and only
/// resident layers are read: then this never waits, and is `None` when a
/// block or a layer file is missing. The layers visited are counted
/// (`pageserver_layers_visited_per_read`).
async fn plan(
    chain: &ReadChain<'_>,
    key: Key,
    request_lsn: Lsn,
    cached_only: bool,
) -> Option<PlanResult> {
    let mut plan = WalkPlan::new();
    let mut visited = LayersVisited { layers: 0, counted: false };
    for (link, (snapshot, lsn)) in chain.at(request_lsn).enumerate() {
        let gc_cutoff = snapshot.gc_cutoff();
        let walked = match link > 0 && lsn < gc_cutoff {
            true => Err(PageReconstructError::GarbageCollected { key, lsn, gc_cutoff }),
            false => walk_link(snapshot, key, lsn, cached_only, &mut plan, &mut visited).await?,
        };
        match walked {
            Ok(false) => continue,
            Ok(true) => {
                visited.counted = true;
                return Some(Ok((plan, true)));
            }
            Err(e) => {
                visited.counted = true;
                return Some(Err(e));
            }
        }
    }
    visited.counted = true;
    Some(Ok((plan, false)))
}

/// One link of [`plan`]: append `key`'s values at or below `lsn` in
/// `snapshot`'s layers to `plan`; whether they reach one that initializes
/// the page. `None`: a block or a layer is not in memory (`cached_only`).
async fn walk_link(
    snapshot: &ReadSnapshot,
    key: Key,
    lsn: Lsn,
    cached_only: bool,
    plan: &mut WalkPlan,
    visited: &mut LayersVisited,
) -> Option<Result<bool, PageReconstructError>> {
    let ck = key.to_compact();
    let mut scratch = Vec::new();
    for (layer, floor) in snapshot.walk(key, lsn) {
        visited.layers += 1;
        scratch.clear();
        let layer = match open_layer(layer, cached_only).await? {
            Ok(layer) => layer,
            Err(e) => return Some(Err(e)),
        };
        let done = match &layer {
            PlannedLayer::InMemory(l) => Ok(l.collect(ck, lsn, floor, &mut scratch)),
            PlannedLayer::File(l) if cached_only => {
                l.collect_cached(ck, lsn, floor, &mut scratch)?
            }
            PlannedLayer::File(l) => l.collect(ck, lsn, floor, &mut scratch).await,
        };
        let done = match done {
            Ok(done) => done,
            Err(source) => {
                let layer = layer.describe();
                return Some(Err(PageReconstructError::LayerIndex { layer, source }));
            }
        };
        plan.extend(scratch.iter().map(|&(lsn, b)| (layer.clone(), lsn, b)));
        if done {
            return Some(Ok(true));
        }
    }
    Some(Ok(false))
}

/// The layer of a walk as a plan reads it: a historic layer's open file,
/// downloaded first if it is not resident, unless `cached_only` (then
/// `None`: the second pass downloads it).
async fn open_layer(
    layer: ReadableLayer,
    cached_only: bool,
) -> Option<Result<PlannedLayer, PageReconstructError>> {
    let historic = match layer {
        ReadableLayer::InMemory(l) => return Some(Ok(PlannedLayer::InMemory(l))),
        ReadableLayer::Historic(l) => l,
    };
    if let Some(file) = historic.try_resident() {
        return Some(Ok(PlannedLayer::File(file)));
    }
    if cached_only {
        return None;
    }
    let file = historic.get_resident().await.map_err(PageReconstructError::LayerAccess);
    Some(file.map(PlannedLayer::File))
}

/// Observes the layers one query visited when dropped, if the plan was
/// finished (`counted`): a memory-only attempt that stopped at a missing
/// index block is planned again, and only that second walk counts.
struct LayersVisited {
    layers: usize,
    counted: bool,
}

impl Drop for LayersVisited {
    fn drop(&mut self) {
        if self.counted {
            crate::metrics::compaction::LAYERS_VISITED_PER_READ.observe(self.layers as f64);
        }
    }
}
