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
//! When the engine's reads proceed while their caller works
//! (`IoEngine::reads_overlap_caller`: io-uring), a get's first
//! `HEAD_QUERIES` unique queries (the head) are planned and their chunk
//! reads started before the others (the tail) are planned; then both
//! parts' reads run together. So a batch's first reads are on the disk
//! while its other pages are still looked up. Only when the head plans
//! from memory (else all its queries' index reads would wait for the
//! head's) and reads a file with direct IO (through the page cache its
//! reads are likely done at once). Where a read runs on the polling thread
//! (std-fs) the head would be read before the tail is planned anyway: one
//! part.
//!
//! A part whose values are all in one chunk of a layer file (a single
//! page, as a rule: a client waiting on each page) reads it with one
//! engine read, without the waves below (`Part::read_one`).
//!
//! Otherwise chunk reads run concurrently: those of layer files as one batch of the
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
//!
//! Branches: a read walks a chain of snapshots ([`ReadChain`]): the
//! timeline's own, then, while the key is not reconstructed, its
//! ancestor's at min(request LSN, branch point), and so on up the
//! ancestors (`docs/branches.md`). The values of all links make one plan,
//! newest first; an ancestor's LSN is at or above its GC cutoff (GC keeps
//! the history at every branch point), and a read below it is refused.
//!
//! Files: `plan.rs` plans queries (the walk, the two passes, refusals);
//! `parts.rs` coalesces a part's plans into chunks and answers each query
//! when its chunks are read; `io.rs` runs the chunk reads in bounded
//! waves and holds the read limits. This file splits a get into parts.

use bytes::Bytes;
use smallvec::SmallVec;
use utils::lsn::Lsn;

use io_engine::IoEngine;
use pageserver_api::key::Key;

use self::parts::{Answers, Part};
use self::plan::{plan_from_memory, reads_direct, Query};
use super::reconstruct::ClusterInfo;
use super::storage_layer::layer_map::ReadSnapshot;
use super::PageReconstructError;

mod io;
mod parts;
mod plan;

pub use self::io::{
    process_read_slots, ReadLimits, MAX_CHUNK_READS_PER_GET, PROCESS_CHUNK_READS,
    TIMELINE_CHUNK_READS,
};
pub use super::storage_layer::chunks::{coalesce, CHUNK_ALIGN, MAX_CHUNK};

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

/// The layer map snapshots a read walks, newest history first: the
/// timeline's own, then for a branch its ancestor's, each with the LSN the
/// read goes on at there (the branch point; `Lsn::MAX` for the first).
pub struct ReadChain<'s> {
    links: SmallVec<[(&'s ReadSnapshot, Lsn); 2]>,
}

impl<'s> ReadChain<'s> {
    /// A chain of (snapshot, LSN cap) links; the first is the timeline's own.
    pub fn new(links: impl IntoIterator<Item = (&'s ReadSnapshot, Lsn)>) -> ReadChain<'s> {
        let links: SmallVec<_> = links.into_iter().collect();
        assert!(!links.is_empty(), "a read chain has the timeline's own snapshot");
        ReadChain { links }
    }

    /// The timeline's own snapshot.
    pub fn own(&self) -> &'s ReadSnapshot {
        self.links[0].0
    }

    /// The (snapshot, LSN) pairs a read at `lsn` walks, in order: each
    /// link at the lowest of `lsn` and the caps up to it.
    pub fn at(&self, lsn: Lsn) -> impl Iterator<Item = (&'s ReadSnapshot, Lsn)> + '_ {
        self.links.iter().scan(lsn, |at, &(snapshot, cap)| {
            *at = (*at).min(cap);
            Some((snapshot, *at))
        })
    }
}

impl<'s> From<&'s ReadSnapshot> for ReadChain<'s> {
    fn from(snapshot: &'s ReadSnapshot) -> ReadChain<'s> {
        ReadChain::new([(snapshot, Lsn::MAX)])
    }
}

/// Where a read hands its results: (index into the queries, result),
/// exactly once per query, as soon as it is known.
pub type Ready<'f, T> = dyn FnMut(usize, T) + Send + 'f;

/// Read `queries` (key at LSN) through the layers of `snapshot`; the
/// results in query order. A query below the snapshot's GC cutoff is
/// refused (`GarbageCollected`).
pub async fn read<'s>(
    engine: &IoEngine,
    snapshot: impl Into<ReadChain<'s>>,
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
pub async fn read_each<'s>(
    engine: &IoEngine,
    chain: impl Into<ReadChain<'s>>,
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
                uniq.push(Query::new(key, lsn));
                askers.push(smallvec::smallvec![qi]);
            }
        }
    }
    let answers = Answers { askers, cluster, ready: std::sync::Mutex::new(ready) };
    let snapshot = &chain.into();

    // The head: planned, and its reads started, before the tail is planned
    // (`join!` polls the head first, then both parts on every wake). One
    // part instead: when the engine's reads do not proceed while the get
    // plans (std-fs: a read runs on the polling thread, so the head would
    // be read before the tail is planned anyway); when the head cannot be
    // planned from memory (its index block reads then go with the others',
    // all in flight together); and when the head reads no file with direct
    // IO (through the page cache its reads are likely done at once: the
    // split would only cost).
    let head_len =
        if engine.reads_overlap_caller() { uniq.len().min(HEAD_QUERIES) } else { uniq.len() };
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

/// Unique queries of a get planned and read first, before the others are
/// planned, so their reads are on the disk while the rest are planned
/// (docs/benchmarks.md, cold reads: a round of 32 cold pages spends ~75 µs
/// planning before its first read otherwise). A chunk that a head query
/// and a later one both need is read by each.
pub const HEAD_QUERIES: usize = 4;
