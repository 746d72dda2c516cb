//! Ingest throughput into one in-memory layer: 128 MiB of 100-byte and of
//! 8 KiB values on sequential keys, with and without the flush to an L0 file.
//! Baseline in the same run: plain `pwrite` of the same number of bytes in
//! 256 KiB chunks to a file on the same filesystem (no fsync, like the
//! no-L0 case) — results are read as a ratio to it.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const TOTAL: usize = 128 * 1024 * 1024;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut g = c.benchmark_group("ingest");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Bytes(TOTAL as u64));

    g.bench_function("baseline_pwrite_128MiB", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
                let mut f = std::fs::File::create(dir.path().join("f")).unwrap();
                let chunk = vec![0xABu8; 256 * 1024];
                let start = Instant::now();
                for _ in 0..TOTAL / chunk.len() {
                    f.write_all(&chunk).unwrap();
                }
                total += start.elapsed();
            }
            total
        })
    });

    for (name, value_size) in [("100B", 100), ("8KiB", 8192)] {
        for with_l0 in [false, true] {
            let id = format!("{name}_sequential_{}", if with_l0 { "with_l0" } else { "no_l0" });
            g.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let env = common::env(u64::MAX).await;
                            let start = Instant::now();
                            common::ingest(&env.tl, TOTAL, value_size, 256).await;
                            if with_l0 {
                                env.tl.freeze_and_flush().await.unwrap();
                            }
                            total += start.elapsed();
                            env.mgr.shutdown().await;
                        }
                        total
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
