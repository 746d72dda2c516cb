//! A part of a get (its head or its tail, or the whole get): its queries
//! planned, their values coalesced per layer into aligned chunks (a chunk
//! shared by several values is read once), and each query reconstructed
//! and answered as soon as the last chunk it needs is read.

use std::ops::Range;

use bytes::Bytes;
use smallvec::SmallVec;

use io_engine::{IoEngine, ReadAt};

use super::super::reconstruct::{reconstruct, ClusterInfo};
use super::super::storage_layer::BlobRef;
use super::super::value::Value;
use super::super::PageReconstructError;
use super::io::{chunk_result, read_bounded, ChunkRead, ChunkResult, Permits};
use super::plan::{finish_plans, refusal, PlanResult, PlannedLayer, Query};
use super::{coalesce, ReadChain, ReadStats, Ready, CHUNK_ALIGN};

/// Hands a unique query's result to every query that asked for it. The
/// head and the tail of a get answer through it while both read, in the
/// get's task; the lock (never contended) makes that shareable in a
/// `Send` future.
pub(super) struct Answers<'r, 'f> {
    pub askers: Vec<SmallVec<[usize; 1]>>,
    /// How the get's pages are reconstructed.
    pub cluster: ClusterInfo,
    pub ready: std::sync::Mutex<&'r mut Ready<'f, Result<Bytes, PageReconstructError>>>,
}

impl Answers<'_, '_> {
    pub fn give(&self, u: usize, r: Result<Bytes, PageReconstructError>) {
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
pub(super) struct Part {
    uniq: Vec<Query>,
    /// The index of `uniq[0]` among the get's unique queries.
    first: usize,
    layers: Vec<PlannedLayer>,
    pub chunks: Vec<(usize, Range<u64>)>,
    pub stats: ReadStats,
}

impl Part {
    /// Plan `uniq` (`memory`: its plans from `plan_from_memory`), answer
    /// the queries refused at planning, and coalesce the values the others
    /// need per layer.
    pub async fn plan(
        snapshot: &ReadChain<'_>,
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
    pub async fn read(&self, engine: &IoEngine, permits: Permits<'_>, answers: &Answers<'_, '_>) {
        if let [(li, r)] = self.chunks.as_slice() {
            if let PlannedLayer::File(l) = &self.layers[*li] {
                return self
                    .read_one(l.chunk_read(r.start, (r.end - r.start) as usize), permits, answers)
                    .await;
            }
        }
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

    /// [`Part::read`] of a part whose values are all in one chunk of a
    /// layer file (a single page at queue depth 1, as a rule): one read,
    /// without the waves and streams of [`read_bounded`].
    async fn read_one(&self, read: ReadAt<'_>, _permits: Permits<'_>, answers: &Answers<'_, '_>) {
        let ReadAt { file, buf, offset, len } = read;
        let (buf, res) = file.read_exact_at(buf, offset, len).await;
        let bufs = [Some(chunk_result(res.map(|()| buf)))];
        for (u, q) in self.uniq.iter().enumerate().filter(|(_, q)| q.complete) {
            let r =
                reconstruct_query(q, &self.layers, &self.chunks, &bufs, |_, _| 0, answers.cluster);
            answers.give(self.first + u, r);
        }
    }
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
