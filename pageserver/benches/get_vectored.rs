//! `get_vectored` of 32 keys and of 1 key (8 KiB pages), from an in-memory
//! layer and from L0 files. Baseline in the same run: 32 `pread`s of 8 KiB
//! at the same spread of offsets in a plain file — the cost of the IO alone.

mod common;

use std::os::unix::fs::FileExt;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pageserver::tenant::ReadKind;
use utils::lsn::Lsn;

const PAGES: usize = 20_000;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut g = c.benchmark_group("get_vectored");
    g.throughput(Throughput::Elements(32));

    // 32 keys spread over the key space, 8 of them adjacent pairs.
    let picks: Vec<u32> = (0..32).map(|i| ((i * 7919) % PAGES) as u32).collect();

    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("baseline");
    std::fs::write(&path, vec![0u8; PAGES * 8192]).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    g.bench_function("baseline_32_pread_8KiB", |b| {
        let mut page = vec![0u8; 8192];
        b.iter(|| {
            for &p in &picks {
                f.read_exact_at(&mut page, p as u64 * 8192).unwrap();
            }
        })
    });

    for (name, flush) in [("inmemory_32_keys", false), ("l0_32_keys", true)] {
        let (env, lsn) = rt.block_on(async {
            // Small checkpoint distance: the L0 case spreads over many files.
            let env = common::env(if flush { 32 << 20 } else { u64::MAX }).await;
            let lsn = common::ingest(&env.tl, PAGES * 8192, 8192, 64).await;
            if flush {
                env.tl.freeze_and_flush().await.unwrap();
            }
            (env, lsn)
        });
        let queries: Vec<_> =
            picks.iter().map(|&i| (common::rel_key(i), Lsn::MAX.min(lsn))).collect();
        g.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let res =
                        env.tl.get_vectored(&queries, ReadKind::PageRequestHandler).await.unwrap();
                    assert!(res
                        .iter()
                        .all(|r| r.as_ref().map(|p| p.len() == 8192).unwrap_or(false)));
                })
            })
        });
        // One key per get, as a client waiting on each page asks (queue
        // depth 1): the fixed cost of a get, the picks in turn.
        let one = format!("{}_1_key", name.trim_end_matches("_32_keys"));
        g.throughput(Throughput::Elements(1));
        let mut next = queries.iter().cycle();
        g.bench_function(one, |b| {
            b.iter(|| {
                let q = [*next.next().unwrap()];
                rt.block_on(async {
                    let res = env.tl.get_vectored(&q, ReadKind::PageRequestHandler).await.unwrap();
                    assert_eq!(res[0].as_ref().map(|p| p.len()).ok(), Some(8192));
                })
            })
        });
        g.throughput(Throughput::Elements(32));
        rt.block_on(env.mgr.shutdown());
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
