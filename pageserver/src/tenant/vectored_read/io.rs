//! The chunk reads of a get: run in waves bounded by the permits it
//! holds, the layer files' reads of a wave as one engine batch (with
//! io-uring, submitted together and all in flight at once) and in-memory
//! layers' reads beside it, each result handed on as soon as it is read.
//! And the limits those permits come from: per get, per timeline, per
//! process (taken in that order, so gets cannot deadlock on them).

use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, FuturesUnordered, Stream};
use futures::{FutureExt, StreamExt};
use io_engine::{AlignedBuf, IoEngine, ReadAt};

use super::Ready;

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
    pub(super) async fn acquire(self, reads: usize) -> Permits<'a> {
        let count = reads.min(MAX_CHUNK_READS_PER_GET);
        // Semaphores are never closed: acquire cannot fail.
        let timeline = self.timeline.acquire_many(count as u32).await.expect("never closed");
        let process = self.process.acquire_many(count as u32).await.expect("never closed");
        Permits { count, _timeline: timeline, _process: process }
    }
}

/// Permits of both read semaphores for `count` reads at a time, given back
/// when dropped.
pub(super) struct Permits<'a> {
    count: usize,
    _timeline: tokio::sync::SemaphorePermit<'a>,
    _process: tokio::sync::SemaphorePermit<'a>,
}

/// The process-wide read semaphore (`PROCESS_CHUNK_READS` permits).
pub fn process_read_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(PROCESS_CHUNK_READS);
    &SLOTS
}
/// One chunk read: of a layer file (batched), or any other (an in-memory
/// layer's, which may copy from memory).
pub(super) enum ChunkRead<'a, F> {
    File(ReadAt<'a>),
    Other(F),
}

/// A chunk read's bytes, or its error (shared by the queries that need it).
pub(super) type ChunkResult = Result<Bytes, Arc<std::io::Error>>;

/// A chunk read's outcome as the queries share it: the buffer as `Bytes`
/// (page images are slices of it, no copy), the error behind an `Arc`.
pub(super) fn chunk_result(read: std::io::Result<AlignedBuf>) -> ChunkResult {
    read.map(Bytes::from_owner).map_err(Arc::new)
}

/// Run `reads`, in waves of as many as `permits` are for, handing each
/// result to `done` (with its index in `reads`) as soon as it is read.
/// Chunks become shared `Bytes` so page images are slices of them (no
/// copy).
pub(super) async fn read_bounded<F>(
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
            done(first + i, chunk_result(res));
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
        let engine = IoEngine::new(super::super::super::test_io_engine_kind()).unwrap();
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
