//! Cost of one positional read or write on a file in the page cache, per
//! operation, at 8 B, 8 KiB, 128 KiB and 1 MiB:
//! - `std_pread`/`std_pwrite`: `std::os::unix::fs::FileExt`, the floor
//!   (into a 4 KiB-aligned buffer, as the engines use: the kernel copies
//!   into a page-aligned buffer faster than into a heap `Vec`);
//! - `tokio_fs`: `tokio::fs::File`, seek then read/write (and flush), as a
//!   tokio user would (each call hops to the blocking pool);
//! - `engine_std_fs`, `engine_io_uring`: this crate's `File`, one operation
//!   per await (io-uring with `UringInline::Auto`, the default: page-cache
//!   hits are read inline, and on ext4 buffered writes are written inline);
//! - `engine_io_uring_for_read` (reads only): as `engine_io_uring`, but
//!   every read takes a new `AlignedBuf::for_read` and drops it, as the
//!   pageserver's readers do: measures the buffer pool (`buf_pool.rs`);
//!   without it each read pays an allocation and the zeroing (page faults
//!   included) of a fresh buffer, which the other cases, reusing one
//!   buffer as the `std_pread` floor does, do not;
//! - `io_uring_batch32`: `IoEngine::{read_exact_at,write_all_at}_many` of
//!   32 operations, reported per operation;
//! - `*_ring_only`: the same through the ring (`UringInline::Never`).
//!
//! Async cases run on a current-thread runtime. Run with
//! `cargo bench -p io_engine --bench ops`.

use std::io::SeekFrom;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use io_engine::{AlignedBuf, File, IoEngine, IoEngineKind, OpenMode, ReadAt, UringInline, WriteAt};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::runtime::Runtime;

const FILE_BYTES: u64 = 64 << 20;
const SIZES: [(usize, &str); 4] =
    [(8, "8B"), (8 << 10, "8KiB"), (128 << 10, "128KiB"), (1 << 20, "1MiB")];
const BATCH: usize = 32;

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Read,
    Write,
}

/// The offset of the `i`-th operation of `size` bytes: distinct blocks, cycling through the file.
fn offset(i: u64, size: usize) -> u64 {
    (i * size as u64) % (FILE_BYTES - size as u64)
}

/// Operation numbers `first..first + n` for the next `n` operations of a
/// case, so every case walks the whole file across its samples.
fn next_ops(counter: &AtomicU64, n: u64) -> std::ops::Range<u64> {
    let first = counter.fetch_add(n, Ordering::Relaxed);
    first..first + n
}

fn bench_ops(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    prepare_file(&path);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for op in [Op::Read, Op::Write] {
        for (size, label) in SIZES {
            let name = format!("{}/{label}", if op == Op::Read { "read" } else { "write" });
            let mut g = c.benchmark_group(name);
            g.sample_size(30).warm_up_time(Duration::from_millis(300));
            g.measurement_time(Duration::from_secs(2));
            bench_std(&mut g, &path, op, size);
            bench_tokio_fs(&mut g, &rt, &path, op, size);
            bench_engine(&mut g, &rt, Engine::StdFs, &path, op, size);
            bench_engine(&mut g, &rt, Engine::Uring, &path, op, size);
            if op == Op::Read {
                bench_for_read(&mut g, &rt, &path, size);
            }
            bench_batch(&mut g, &rt, Engine::Uring, &path, op, size);
            bench_engine(&mut g, &rt, Engine::UringRingOnly, &path, op, size);
            bench_batch(&mut g, &rt, Engine::UringRingOnly, &path, op, size);
            g.finish();
        }
    }
}

/// A file of `FILE_BYTES`, written and read once so it is in the page cache.
fn prepare_file(path: &Path) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    let chunk = vec![0x5a; 1 << 20];
    for k in 0..FILE_BYTES / chunk.len() as u64 {
        f.write_all_at(&chunk, k * chunk.len() as u64).unwrap();
    }
    let mut buf = vec![0; chunk.len()];
    for k in 0..FILE_BYTES / chunk.len() as u64 {
        f.read_exact_at(&mut buf, k * chunk.len() as u64).unwrap();
    }
}

fn bench_std(g: &mut BenchmarkGroup<'_, WallTime>, path: &Path, op: Op, size: usize) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut buf = AlignedBuf::from_slice(&vec![0x11; size]);
    let mut i = 0u64;
    let name = if op == Op::Read { "std_pread" } else { "std_pwrite" };
    g.bench_function(name, |b| {
        b.iter(|| {
            i += 1;
            match op {
                Op::Read => f.read_exact_at(&mut buf, offset(i, size)).unwrap(),
                Op::Write => f.write_all_at(&buf, offset(i, size)).unwrap(),
            }
        })
    });
}

fn bench_tokio_fs(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    path: &Path,
    op: Op,
    size: usize,
) {
    let counter = AtomicU64::new(0);
    let counter = &counter;
    g.bench_function("tokio_fs", |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let opts = tokio::fs::OpenOptions::new().read(true).write(true).open(path).await;
            let mut f = opts.unwrap();
            let mut buf = vec![0x22; size];
            let start = Instant::now();
            for i in next_ops(counter, iters) {
                f.seek(SeekFrom::Start(offset(i, size))).await.unwrap();
                match op {
                    Op::Read => {
                        f.read_exact(&mut buf).await.unwrap();
                    }
                    Op::Write => {
                        f.write_all(&buf).await.unwrap();
                        f.flush().await.unwrap();
                    }
                }
            }
            start.elapsed()
        })
    });
}

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    StdFs,
    Uring,
    UringRingOnly,
}

impl Engine {
    fn name(self, what: &str) -> String {
        let suffix = if self == Engine::UringRingOnly { "_ring_only" } else { "" };
        format!("{what}{suffix}")
    }
}

async fn open(engine: Engine, path: &Path) -> (IoEngine, Arc<File>) {
    let e = match engine {
        Engine::StdFs => IoEngine::new(IoEngineKind::StdFs).unwrap(),
        Engine::Uring => IoEngine::new(IoEngineKind::IoUring).unwrap(),
        Engine::UringRingOnly => {
            IoEngine::new(IoEngineKind::IoUring).unwrap().with_uring_inline(UringInline::Never)
        }
    };
    let f = e.open(path, OpenMode::READ_WRITE).await.unwrap();
    (e, Arc::new(f))
}

fn bench_engine(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    engine: Engine,
    path: &Path,
    op: Op,
    size: usize,
) {
    let (_e, f) = rt.block_on(open(engine, path));
    let name = if engine == Engine::StdFs {
        "engine_std_fs".into()
    } else {
        engine.name("engine_io_uring")
    };
    let counter = AtomicU64::new(0);
    let counter = &counter;
    g.bench_function(name, |b| {
        b.to_async(rt).iter_custom(|iters| {
            let f = f.clone();
            async move {
                let mut buf = AlignedBuf::from_slice(&vec![0x33; size]);
                let start = Instant::now();
                for i in next_ops(counter, iters) {
                    let (b, r) = match op {
                        Op::Read => f.read_exact_at(buf, offset(i, size), size).await,
                        Op::Write => f.write_all_at(buf, offset(i, size)).await,
                    };
                    r.unwrap();
                    buf = b;
                }
                start.elapsed()
            }
        })
    });
}

/// io-uring reads, each into a buffer from `AlignedBuf::for_read` that is
/// dropped after the read (the pageserver's pattern).
fn bench_for_read(g: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, path: &Path, size: usize) {
    let (_e, f) = rt.block_on(open(Engine::Uring, path));
    let counter = AtomicU64::new(0);
    let counter = &counter;
    g.bench_function("engine_io_uring_for_read", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let f = f.clone();
            async move {
                let start = Instant::now();
                for i in next_ops(counter, iters) {
                    let buf = AlignedBuf::for_read(size);
                    let (buf, r) = f.read_exact_at(buf, offset(i, size), size).await;
                    r.unwrap();
                    std::hint::black_box(&buf[..]);
                }
                start.elapsed()
            }
        })
    });
}

/// Batches of `BATCH` operations; the time reported is per operation.
fn bench_batch(
    g: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    engine: Engine,
    path: &Path,
    op: Op,
    size: usize,
) {
    let (e, f) = rt.block_on(open(engine, path));
    let counter = AtomicU64::new(0);
    let counter = &counter;
    g.bench_function(engine.name("io_uring_batch32"), |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (e, f) = (e.clone(), f.clone());
            async move {
                let mut bufs: Vec<AlignedBuf> =
                    (0..BATCH).map(|_| AlignedBuf::from_slice(&vec![0x44; size])).collect();
                let start = Instant::now();
                for i in next_ops(counter, iters) {
                    let first = i * BATCH as u64;
                    let at = |k: usize| offset(first + k as u64, size);
                    let results = match op {
                        Op::Read => {
                            let reads = bufs.drain(..).enumerate().map(|(k, buf)| ReadAt {
                                file: &f,
                                buf,
                                offset: at(k),
                                len: size,
                            });
                            e.read_exact_at_many(reads.collect()).await
                        }
                        Op::Write => {
                            let writes = bufs.drain(..).enumerate().map(|(k, buf)| WriteAt {
                                file: &f,
                                buf,
                                offset: at(k),
                            });
                            e.write_all_at_many(writes.collect()).await
                        }
                    };
                    for (buf, r) in results {
                        r.unwrap();
                        bufs.push(buf);
                    }
                }
                start.elapsed() / BATCH as u32
            }
        })
    });
}

criterion_group!(benches, bench_ops);
criterion_main!(benches);
