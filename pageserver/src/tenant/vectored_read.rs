//! The read path: plan every value a vectored get needs, coalesce the reads
//! per layer into aligned chunks, issue them together, and reconstruct each
//! query as soon as the last chunk it needs is read ([`read_each`] hands
//! results on in completion order; [`read`] collects them in query order).
//!
//! Planning walks the layer map's snapshot (`ReadSnapshot::walk`): per key,
//! only the layers that may hold its values above its newest image, newest
//! first, each with a floor below which its entries are superseded, until
//! a value that initializes the page. It uses only the indexes (which carry
//! `will_init`), so no value is read before the plan is complete. A layer
//! file's index blocks come from the block cache or its file
//! (`storage_layer/block_cache.rs`). Each query is first planned from
//! memory only (in-memory layers, cached blocks), which never waits; the
//! queries that need a block from disk are then planned again, all
//! concurrently, so their block reads are in flight together. A query
//! whose index read fails gets that error (naming the layer); the others
//! go on.
//! A historic layer that is not resident (only in remote storage, or
//! evicted) is like a missing index block: the memory-only pass stops
//! there, and the second pass downloads it (`Layer::get_resident`; one
//! download per layer, however many queries need it). A plan holds the
//! open `LayerFile` it planned with, so its chunk reads read that file even
//! if the layer is evicted meanwhile (the descriptor stays open). A layer
//! that cannot be downloaded fails only the queries that need it.
//! A query below the snapshot's GC cutoff is refused: its history may be
//! gone. Per layer, each needed value becomes a
//! range aligned to the layer's read alignment (512 bytes through the page
//! cache; under direct IO what the kernel reports for the file, 512 bytes
//! or 4 KiB); ranges are sorted and merged when they
//! overlap or touch, up to `MAX_CHUNK` bytes, so a chunk shared by several
//! values (or by the same key at several LSNs) is read exactly once (per
//! part: see below).
//!
//! With the io-uring engine, a get's first `HEAD_QUERIES` unique queries
//! (the head) are planned and their chunk reads started before the others
//! (the tail) are planned; then both parts' reads run together. So a
//! batch's first reads are on the disk while its other pages are still
//! looked up. Only when the head plans from memory (else all its queries'
//! index reads would wait for the head's) and reads a file with direct IO
//! (through the page cache its reads are likely done at once). With
//! std-fs a read runs on the polling thread: one part.
//!
//! Chunk reads run concurrently: those of layer files as one batch of the
//! IO engine per wave (with io-uring, submitted together, one
//! `io_uring_enter` per group of 2, and all in flight at once), those of
//! in-memory layers beside it. They are bounded three ways: at most
//! `MAX_CHUNK_READS_PER_GET` per get, head and tail together (more chunks
//! go in waves), and permits
//! of the timeline's and the process's read semaphores
//! ([`ReadLimits`]), taken once per part for as many reads as it runs at
//! a time. Permits are taken timeline first, then process, and a get that
//! waits for its tail's permits holds only its head's, whose reads need
//! nothing more and end: gets cannot deadlock on them.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, FuturesUnordered, Stream};
use futures::{FutureExt, StreamExt};
use io_engine::{AlignedBuf, IoEngine, IoEngineKind, ReadAt};
use pageserver_api::key::Key;
use smallvec::SmallVec;
use utils::lsn::Lsn;

use super::reconstruct::{reconstruct, ClusterInfo};
use super::storage_layer::inmemory_layer::InMemoryLayer;
use super::storage_layer::layer_file::LayerFile;
use super::storage_layer::layer_map::{ReadSnapshot, ReadableLayer};
use super::storage_layer::BlobRef;
use super::value::Value;
use super::PageReconstructError;

pub use super::storage_layer::chunks::{coalesce, CHUNK_ALIGN, MAX_CHUNK};

/// Chunk reads one vectored get keeps in flight at most.
pub const MAX_CHUNK_READS_PER_GET: usize = 64;
/// Chunk reads in flight per timeline, and in the whole process.
pub const TIMELINE_CHUNK_READS: usize = 256;
pub const PROCESS_CHUNK_READS: usize = 512;
// A get's permits always fit both semaphores (else it would wait forever).
const _: () = assert!(
    MAX_CHUNK_READS_PER_GET <= TIMELINE_CHUNK_READS && TIMELINE_CHUNK_READS <= PROCESS_CHUNK_READS
);

/// The read semaphores a vectored get draws on (see the module comment).
#[derive(Clone, Copy)]
pub struct ReadLimits<'a> {
    pub timeline: &'a tokio::sync::Semaphore,
    pub process: &'a tokio::sync::Semaphore,
}

impl<'a> ReadLimits<'a> {
    /// Permits for `reads` chunk reads, at most as many as a get runs at a time:
    /// the timeline's first, then the process's (one order, so gets cannot
    /// deadlock on them).
    async fn acquire(self, reads: usize) -> Permits<'a> {
        let count = reads.min(MAX_CHUNK_READS_PER_GET);
        // Semaphores are never closed: acquire cannot fail.
        let timeline = self.timeline.acquire_many(count as u32).await.expect("never closed");
        let process = self.process.acquire_many(count as u32).await.expect("never closed");
        Permits { count, _timeline: timeline, _process: process }
    }
}

/// Permits of both read semaphores for `count` reads at a time, given back
/// when dropped.
struct Permits<'a> {
    count: usize,
    _timeline: tokio::sync::SemaphorePermit<'a>,
    _process: tokio::sync::SemaphorePermit<'a>,
}

/// The process-wide read semaphore (`PROCESS_CHUNK_READS` permits).
pub fn process_read_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(PROCESS_CHUNK_READS);
    &SLOTS
}
/// (layer index, LSN, location), newest first. Inline: a page is usually
/// one image.
type Plan = SmallVec<[(usize, Lsn, BlobRef); 2]>;

struct Query {
    key: Key,
    lsn: Lsn,
    plan: Plan,
    complete: bool,
    /// Planning failed (a layer index could not be read).
    error: Option<PageReconstructError>,
}

/// Statistics of one vectored read, for metrics and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadStats {
    pub values: usize,
    pub chunks: usize,
    pub bytes: u64,
}

impl ReadStats {
    fn plus(self, other: ReadStats) -> ReadStats {
        ReadStats {
            values: self.values + other.values,
            chunks: self.chunks + other.chunks,
            bytes: self.bytes + other.bytes,
        }
    }
}

/// A layer a plan reads: in memory, or an open layer file (held, so an
/// eviction after planning does not affect the read).
#[derive(Clone)]
enum PlannedLayer {
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
    fn describe(&self) -> String {
        match self {
            PlannedLayer::InMemory(l) => format!("in-memory layer from {}", l.start_lsn),
            PlannedLayer::File(l) => l.name.to_string(),
        }
    }
}

/// One chunk read: of a layer file (batched), or any other (an in-memory
/// layer's, which may copy from memory).
enum ChunkRead<'a, F> {
    File(ReadAt<'a>),
    Other(F),
}

/// Where a read hands its results: (index into the queries, result),
/// exactly once per query, as soon as it is known.
pub type Ready<'f, T> = dyn FnMut(usize, T) + Send + 'f;

/// Read `queries` (key at LSN) through the layers of `snapshot`; the
/// results in query order. A query below the snapshot's GC cutoff is
/// refused (`GarbageCollected`).
pub async fn read(
    engine: &IoEngine,
    snapshot: &ReadSnapshot,
    queries: &[(Key, Lsn)],
    limits: ReadLimits<'_>,
    cluster: ClusterInfo,
) -> (Vec<Result<Bytes, PageReconstructError>>, ReadStats) {
    let mut results: Vec<Option<Result<Bytes, PageReconstructError>>> = vec![None; queries.len()];
    let stats = read_each(engine, snapshot, queries, limits, cluster, &mut |i, r| {
        assert!(results[i].replace(r).is_none(), "query {i} answered twice");
    })
    .await;
    (results.into_iter().map(|r| r.expect("every query is answered")).collect(), stats)
}

/// [`read`], handing each query's result to `ready` as soon as the chunks
/// it needs are read (queries refused at planning first), so a caller can
/// answer the first pages while the others are still on the disk.
pub async fn read_each(
    engine: &IoEngine,
    snapshot: &ReadSnapshot,
    queries: &[(Key, Lsn)],
    limits: ReadLimits<'_>,
    cluster: ClusterInfo,
    ready: &mut Ready<'_, Result<Bytes, PageReconstructError>>,
) -> ReadStats {
    // Deduplicate: the same (key, lsn) is planned and reconstructed once,
    // and answered for every query that asked for it.
    let mut uniq: Vec<Query> = Vec::with_capacity(queries.len());
    let mut askers: Vec<SmallVec<[usize; 1]>> = Vec::with_capacity(queries.len());
    for (qi, &(key, lsn)) in queries.iter().enumerate() {
        match uniq.iter().position(|q| q.key == key && q.lsn == lsn) {
            Some(u) => askers[u].push(qi),
            None => {
                uniq.push(Query { key, lsn, plan: Plan::new(), complete: false, error: None });
                askers.push(smallvec::smallvec![qi]);
            }
        }
    }
    let answers = Answers { askers, cluster, ready: std::sync::Mutex::new(ready) };

    // The head: planned, and its reads started, before the tail is planned
    // (`join!` polls the head first). Both parts are polled on every wake:
    // the io-uring engine has one waiting operation's future reap for all
    // (libs/io_engine/src/uring.rs), so none may be left unpolled while
    // the get waits on another. One part instead: with std-fs (a read runs
    // on the polling thread, so the head would be read before the tail is
    // planned anyway); when the head cannot be planned from memory (its
    // index block reads then go with the others', all in flight together);
    // and when the head reads no file with direct IO (through the page
    // cache its reads are likely done at once: the split would only cost).
    let head_len = match engine.kind() {
        IoEngineKind::IoUring => uniq.len().min(HEAD_QUERIES),
        IoEngineKind::StdFs => uniq.len(),
    };
    let mut memory = plan_from_memory(snapshot, &uniq[..head_len]);
    let planned = memory.iter().all(Option::is_some);
    if head_len == uniq.len() || !planned || !memory.iter().any(reads_direct) {
        memory.extend(plan_from_memory(snapshot, &uniq[head_len..]));
        let all = Part::plan(snapshot, (uniq, memory), 0, &answers).await;
        all.read(engine, limits.acquire(all.chunks.len()).await, &answers).await;
        return all.stats;
    }
    let tail = uniq.split_off(head_len);
    let head = Part::plan(snapshot, (uniq, memory), 0, &answers).await;
    let head_permits = limits.acquire(head.chunks.len()).await;
    let room = MAX_CHUNK_READS_PER_GET.saturating_sub(head.chunks.len());
    let tail_beside = async {
        let memory = plan_from_memory(snapshot, &tail);
        let tail = Part::plan(snapshot, (tail, memory), head_len, &answers).await;
        // Both parts together stay within `MAX_CHUNK_READS_PER_GET`; a head
        // that used them all leaves the tail for after it.
        if room == 0 && !tail.chunks.is_empty() {
            return (tail, false);
        }
        let permits = limits.acquire(tail.chunks.len().min(room)).await;
        tail.read(engine, permits, &answers).await;
        (tail, true)
    };
    let ((), (tail, read)) = futures::join!(head.read(engine, head_permits, &answers), tail_beside);
    if !read {
        tail.read(engine, limits.acquire(tail.chunks.len()).await, &answers).await;
    }
    head.stats.plus(tail.stats)
}

/// Whether a plan reads a layer file opened with direct IO.
fn reads_direct(plan: &Option<PlanResult>) -> bool {
    let Some(Ok((walk, _))) = plan else { return false };
    walk.iter().any(|(l, _, _)| matches!(l, PlannedLayer::File(f) if f.is_direct_io()))
}

/// Unique queries of a get planned and read first, before the others are
/// planned, so their reads are on the disk while the rest are planned
/// (docs/benchmarks.md, cold reads: a round of 32 cold pages spends ~75 µs
/// planning before its first read otherwise). A chunk that a head query
/// and a later one both need is read by each.
pub const HEAD_QUERIES: usize = 4;

/// Hands a unique query's result to every query that asked for it. The
/// head and the tail of a get answer through it while both read, in the
/// get's task; the lock (never contended) makes that shareable in a
/// `Send` future.
struct Answers<'r, 'f> {
    askers: Vec<SmallVec<[usize; 1]>>,
    /// How the get's pages are reconstructed.
    cluster: ClusterInfo,
    ready: std::sync::Mutex<&'r mut Ready<'f, Result<Bytes, PageReconstructError>>>,
}

impl Answers<'_, '_> {
    fn give(&self, u: usize, r: Result<Bytes, PageReconstructError>) {
        let mut ready = self.ready.lock().expect("no answer panicked");
        let (&last, others) = self.askers[u].split_last().expect("every query has an asker");
        for &qi in others {
            (*ready)(qi, r.clone());
        }
        (*ready)(last, r);
    }
}

/// Some of a get's unique queries, planned: the layers their plans read,
/// and the coalesced chunk reads, per layer in offset order.
struct Part {
    uniq: Vec<Query>,
    /// The index of `uniq[0]` among the get's unique queries.
    first: usize,
    layers: Vec<PlannedLayer>,
    chunks: Vec<(usize, Range<u64>)>,
    stats: ReadStats,
}

impl Part {
    /// Plan `uniq` (`memory`: its plans from `plan_from_memory`), answer
    /// the queries refused at planning, and coalesce the values the others
    /// need per layer.
    async fn plan(
        snapshot: &ReadSnapshot,
        (mut uniq, memory): (Vec<Query>, Vec<Option<PlanResult>>),
        first: usize,
        answers: &Answers<'_, '_>,
    ) -> Part {
        let layers = finish_plans(snapshot, &mut uniq, memory).await;
        for (u, q) in uniq.iter_mut().enumerate() {
            if let Some(e) = refusal(q) {
                answers.give(first + u, Err(e));
            }
        }
        let mut stats = ReadStats::default();
        let mut per_layer: Vec<Vec<(u64, u64)>> = vec![Vec::new(); layers.len()];
        for q in uniq.iter().filter(|q| q.complete) {
            for &(li, _, b) in &q.plan {
                per_layer[li].push((b.offset(), b.end()));
                stats.values += 1;
            }
        }
        let mut chunks: Vec<(usize, Range<u64>)> = Vec::new();
        for (li, ranges) in per_layer.iter().enumerate() {
            if ranges.is_empty() {
                continue;
            }
            let (limit, align) = match &layers[li] {
                PlannedLayer::InMemory(l) => (l.size(), CHUNK_ALIGN),
                PlannedLayer::File(l) => (u64::MAX, l.read_align()),
            };
            chunks.extend(coalesce(ranges, limit, align).into_iter().map(|r| (li, r)));
        }
        stats.chunks = chunks.len();
        stats.bytes = chunks.iter().map(|(_, r)| r.end - r.start).sum();
        Part { uniq, first, layers, chunks, stats }
    }

    /// The chunk holding value `b` of layer `li`.
    fn chunk_of(&self, li: usize, b: BlobRef) -> usize {
        self.chunks.partition_point(|(cl, r)| (*cl, r.start) <= (li, b.offset())) - 1
    }

    /// Read the chunks (holding `permits` for them) and answer each
    /// complete query as soon as the last chunk it needs is read.
    async fn read(&self, engine: &IoEngine, permits: Permits<'_>, answers: &Answers<'_, '_>) {
        let mut waiting: Vec<SmallVec<[usize; 2]>> = vec![SmallVec::new(); self.chunks.len()];
        let mut missing = vec![0usize; self.uniq.len()];
        for (u, q) in self.uniq.iter().enumerate().filter(|(_, q)| q.complete) {
            for &(li, _, b) in &q.plan {
                let ci = self.chunk_of(li, b);
                if waiting[ci].last() != Some(&u) {
                    waiting[ci].push(u);
                    missing[u] += 1;
                }
            }
        }
        let reads = self.chunks.iter().map(|(li, r)| {
            let len = (r.end - r.start) as usize;
            match &self.layers[*li] {
                PlannedLayer::InMemory(l) => ChunkRead::Other(l.read_chunk(r.start, len)),
                PlannedLayer::File(l) => ChunkRead::File(l.chunk_read(r.start, len)),
            }
        });
        let mut bufs: Vec<Option<ChunkResult>> = vec![None; self.chunks.len()];
        read_bounded(engine, reads.collect(), permits, &mut |ci, buf| {
            bufs[ci] = Some(buf);
            for &u in &waiting[ci] {
                missing[u] -= 1;
                if missing[u] == 0 {
                    let r = reconstruct_query(
                        &self.uniq[u],
                        &self.layers,
                        &self.chunks,
                        &bufs,
                        |li, b| self.chunk_of(li, b),
                        answers.cluster,
                    );
                    answers.give(self.first + u, r);
                }
            }
        })
        .await;
        debug_assert!(missing.iter().all(|&m| m == 0), "every chunk was read");
    }
}

/// A chunk read's bytes, or its error (shared by the queries that need it).
type ChunkResult = Result<Bytes, Arc<std::io::Error>>;

/// Plan each query from memory only (in-memory layers, cached index
/// blocks, resident layers): no future per query on the common path, and
/// never waits. `None` for a query that needs a read.
fn plan_from_memory(snapshot: &ReadSnapshot, uniq: &[Query]) -> Vec<Option<PlanResult>> {
    let gc_cutoff = snapshot.gc_cutoff();
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
async fn finish_plans(
    snapshot: &ReadSnapshot,
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
    let mut layer_index: HashMap<usize, usize> = HashMap::new();
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
            let li = *layer_index.entry(layer.id()).or_insert_with(|| {
                layers.push(layer.clone());
                layers.len() - 1
            });
            q.plan.push((li, lsn, blob));
        }
    }
    layers
}

/// Why a planned query is answered without reading: planning failed, or
/// its walk ended before a value that initializes the page.
fn refusal(q: &mut Query) -> Option<PageReconstructError> {
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

/// Reconstruct a complete query from the chunks of its plan (all read).
fn reconstruct_query(
    q: &Query,
    layers: &[PlannedLayer],
    chunks: &[(usize, Range<u64>)],
    bufs: &[Option<ChunkResult>],
    chunk_of: impl Fn(usize, BlobRef) -> usize,
    cluster: ClusterInfo,
) -> Result<Bytes, PageReconstructError> {
    let mut values = Vec::with_capacity(q.plan.len());
    for &(li, lsn, b) in &q.plan {
        let ci = chunk_of(li, b);
        let buf = bufs[ci].as_ref().expect("the query's chunks are read");
        let buf = buf.as_ref().map_err(|e| PageReconstructError::Io {
            layer: layers[li].describe(),
            source: e.clone(),
        })?;
        let at = (b.offset() - chunks[ci].1.start) as usize;
        let v = Value::deserialize_bytes(&buf.slice(at..at + b.len())).map_err(|source| {
            PageReconstructError::CorruptValue {
                key: q.key,
                lsn,
                layer: layers[li].describe(),
                source,
            }
        })?;
        values.push((lsn, v));
    }
    reconstruct(q.key, q.lsn, values, cluster)
}

/// A query's plan before the layers are numbered: (layer, LSN, location),
/// newest first.
type WalkPlan = SmallVec<[(PlannedLayer, Lsn, BlobRef); 2]>;

/// What planning one query gives: its values (layers not yet numbered)
/// and whether they reach one that initializes the page.
type PlanResult = Result<(WalkPlan, bool), PageReconstructError>;

/// Plan one query: walk the snapshot's layers for `key` newest first,
/// collecting its values above each layer's floor until one that
/// initializes the page (`complete`), or the walk ends. With `cached_only`,
/// a layer file's index blocks come from the block cache only and only
/// resident layers are read: then this never waits, and is `None` when a
/// block or a layer file is missing. The layers visited are counted
/// (`pageserver_layers_visited_per_read`).
async fn plan(
    snapshot: &ReadSnapshot,
    key: Key,
    lsn: Lsn,
    cached_only: bool,
) -> Option<PlanResult> {
    let ck = key.to_compact();
    let (mut plan, mut scratch) = (WalkPlan::new(), Vec::new());
    let mut visited = LayersVisited { layers: 0, counted: false };
    for (layer, floor) in snapshot.walk(key, lsn) {
        visited.layers += 1;
        scratch.clear();
        let layer = match open_layer(layer, cached_only).await? {
            Ok(layer) => layer,
            Err(e) => {
                visited.counted = true;
                return Some(Err(e));
            }
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
                visited.counted = true;
                let layer = layer.describe();
                return Some(Err(PageReconstructError::LayerIndex { layer, source }));
            }
        };
        plan.extend(scratch.iter().map(|&(lsn, b)| (layer.clone(), lsn, b)));
        if done {
            visited.counted = true;
            return Some(Ok((plan, true)));
        }
    }
    visited.counted = true;
    Some(Ok((plan, false)))
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

/// Run `reads`, in waves of as many as `permits` are for, handing each
/// result to `done` (with its index in `reads`) as soon as it is read.
/// Chunks become shared `Bytes` so page images are slices of them (no
/// copy).
async fn read_bounded<F>(
    engine: &IoEngine,
    reads: Vec<ChunkRead<'_, F>>,
    permits: Permits<'_>,
    done: &mut Ready<'_, ChunkResult>,
) where
    F: std::future::Future<Output = std::io::Result<AlignedBuf>> + Send,
{
    if reads.is_empty() {
        return;
    }
    let at_once = permits.count;
    assert!((1..=MAX_CHUNK_READS_PER_GET).contains(&at_once), "{at_once} permits for reads");
    let mut reads = reads.into_iter().peekable();
    let mut first = 0;
    while reads.peek().is_some() {
        let wave: Vec<_> = reads.by_ref().take(at_once).collect();
        let n = wave.len();
        let mut each = std::pin::pin!(read_wave(engine, wave));
        while let Some((i, res)) = each.next().await {
            done(first + i, res.map(Bytes::from_owner).map_err(Arc::new));
        }
        first += n;
    }
}

/// One wave: the file reads as one engine batch, the others beside it;
/// each result (with its index in `wave`) as soon as it is read.
fn read_wave<'a, F>(
    engine: &'a IoEngine,
    wave: Vec<ChunkRead<'a, F>>,
) -> impl Stream<Item = (usize, std::io::Result<AlignedBuf>)> + Send + 'a
where
    F: std::future::Future<Output = std::io::Result<AlignedBuf>> + Send + 'a,
{
    let (mut file_reads, mut file_at, mut others) = (Vec::new(), Vec::new(), Vec::new());
    for (i, read) in wave.into_iter().enumerate() {
        match read {
            ChunkRead::File(r) => (file_reads.push(r), file_at.push(i)),
            ChunkRead::Other(f) => (others.push(f.map(move |res| (i, res))), ()),
        };
    }
    let from_files = engine
        .read_exact_at_each(file_reads)
        .map(move |(at, (buf, res))| (file_at[at], res.map(|()| buf)));
    // No `FuturesUnordered` (two allocations) for a wave of file reads only.
    let others = (!others.is_empty()).then(|| others.into_iter().collect::<FuturesUnordered<_>>());
    stream::select(from_files, stream::iter(others).flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_bounded`'s results in the order of `reads`.
    async fn read_all<F>(
        engine: &IoEngine,
        reads: Vec<ChunkRead<'_, F>>,
        limits: ReadLimits<'_>,
    ) -> Vec<ChunkResult>
    where
        F: std::future::Future<Output = std::io::Result<AlignedBuf>> + Send,
    {
        let mut out: Vec<Option<ChunkResult>> = vec![None; reads.len()];
        let permits = limits.acquire(reads.len()).await;
        read_bounded(engine, reads, permits, &mut |i, r| {
            assert!(out[i].replace(r).is_none(), "chunk {i} read twice");
        })
        .await;
        out.into_iter().map(|r| r.expect("every chunk is read")).collect()
    }

    #[tokio::test]
    async fn chunk_reads_run_in_bounded_waves_in_order() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let timeline = tokio::sync::Semaphore::new(TIMELINE_CHUNK_READS);
        let limits = ReadLimits { timeline: &timeline, process: process_read_slots() };
        let reads: Vec<_> = (0..150u8)
            .map(|i| {
                let (now, peak) = (&now, &peak);
                async move {
                    peak.fetch_max(now.fetch_add(1, SeqCst) + 1, SeqCst);
                    tokio::task::yield_now().await;
                    now.fetch_sub(1, SeqCst);
                    Ok(AlignedBuf::from_slice(&[i]))
                }
            })
            .map(ChunkRead::<'_, _>::Other)
            .collect();
        let engine = IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap();
        let out = read_all(&engine, reads, limits).await;
        let firsts: Vec<u8> = out.iter().map(|r| r.as_ref().unwrap()[0]).collect();
        assert_eq!(firsts, (0..150).collect::<Vec<u8>>());
        assert_eq!(peak.load(SeqCst), MAX_CHUNK_READS_PER_GET);
        assert_eq!(timeline.available_permits(), TIMELINE_CHUNK_READS, "permits come back");
    }

    /// Results are handed on as they complete: the second read's result
    /// is what lets the first one finish (it would never finish if results
    /// were handed on only once all are read).
    #[tokio::test]
    async fn chunk_results_are_handed_on_as_they_complete() {
        let timeline = tokio::sync::Semaphore::new(TIMELINE_CHUNK_READS);
        let limits = ReadLimits { timeline: &timeline, process: process_read_slots() };
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = async move {
            released.await.expect("released");
            Ok(AlignedBuf::from_slice(&[0]))
        }
        .boxed();
        let second = async { Ok(AlignedBuf::from_slice(&[1])) }.boxed();
        let reads = vec![ChunkRead::Other(first), ChunkRead::Other(second)];
        let engine = IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap();
        let (mut order, mut release) = (Vec::new(), Some(release));
        let mut done = |i: usize, r: ChunkResult| {
            assert_eq!(r.unwrap()[0] as usize, i);
            order.push(i);
            if let Some(tx) = release.take() {
                tx.send(()).unwrap();
            }
        };
        let read = read_bounded(&engine, reads, limits.acquire(2).await, &mut done);
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("the second result is handed on before the first completes");
        assert_eq!(order, vec![1, 0]);
    }

    /// File reads (one engine batch per wave) and other reads interleaved:
    /// every result lands at its request's position.
    #[tokio::test]
    async fn batched_file_reads_and_others_keep_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blocks");
        let blocks: Vec<u8> = (0..150u32).flat_map(|i| [i as u8; 4096]).collect();
        std::fs::write(&path, &blocks).unwrap();
        let engine = IoEngine::new(super::super::test_io_engine_kind()).unwrap();
        let file = engine.open(&path, io_engine::OpenMode::READ).await.unwrap();
        let timeline = tokio::sync::Semaphore::new(TIMELINE_CHUNK_READS);
        let limits = ReadLimits { timeline: &timeline, process: process_read_slots() };
        let reads: Vec<_> = (0..150u8)
            .map(|i| match i % 3 {
                0 => ChunkRead::Other(async move { Ok(AlignedBuf::from_slice(&[i])) }),
                _ => ChunkRead::File(ReadAt {
                    file: &file,
                    buf: AlignedBuf::for_read(4096),
                    offset: i as u64 * 4096,
                    len: 4096,
                }),
            })
            .collect();
        let out = read_all(&engine, reads, limits).await;
        let firsts: Vec<u8> = out.iter().map(|r| r.as_ref().unwrap()[0]).collect();
        assert_eq!(firsts, (0..150).collect::<Vec<u8>>());
        let past_eof = vec![ChunkRead::<'_, std::future::Ready<_>>::File(ReadAt {
            file: &file,
            buf: AlignedBuf::for_read(4096),
            offset: 150 * 4096,
            len: 4096,
        })];
        let err = read_all(&engine, past_eof, limits).await.pop().unwrap().unwrap_err();
        assert!(err.to_string().contains("blocks"), "the error names the file: {err}");
    }
}
