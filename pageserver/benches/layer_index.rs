//! `LayerFile::collect` of 32 keys (a GetPage batch's planning in one
//! layer): a format version 3 layer (on-disk B-tree, blocks in the warm
//! block cache) against the same layer rewritten as version 2 (whole index
//! in memory, binary search), in the same run; and `collect_cached`, the
//! memory-only walk the read path tries first.
//!
//! Needs the `testing` feature (`LayerFile::write_legacy_copy`):
//! `cargo bench -p pageserver --features testing --bench layer_index`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use io_engine::{IoEngine, IoEngineKind};
use pageserver::tenant::storage_layer::layer_file::{LayerFile, LayerWriter};
use pageserver::tenant::storage_layer::{BlobRef, LayerKind};
use pageserver_api::key::{CompactKey, Key};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

/// 200,000 keys at two LSNs: 400,000 entries, a three-level tree of 1,675
/// blocks (13 MiB, well inside the default 64 MiB cache).
const KEYS: u32 = 200_000;
const TENANT: TenantId = TenantId([1; 16]);
const TIMELINE: TimelineId = TimelineId([2; 16]);

fn key(i: u32) -> CompactKey {
    Key::MIN.add(i).to_compact()
}

async fn write_layer(engine: &IoEngine, dir: &std::path::Path) -> LayerFile {
    let lsns = Lsn(0x10)..Lsn(0x40);
    let mut w = LayerWriter::new(engine, dir, TENANT, TIMELINE, LayerKind::Delta, lsns, false)
        .await
        .unwrap();
    for i in 0..KEYS {
        w.put_raw(key(i), Lsn(0x20), &[1; 16], true).await.unwrap();
        w.put_raw(key(i), Lsn(0x30), &[2; 16], false).await.unwrap();
    }
    w.finish(Key::MIN.add(KEYS)).await.unwrap()
}

/// Collect each of `keys` at the newest LSN: two entries each.
async fn collect_all(layer: &LayerFile, keys: &[CompactKey], out: &mut Vec<(Lsn, BlobRef)>) {
    for &k in keys {
        out.clear();
        assert!(layer.collect(k, Lsn(0x3f), Lsn(0), out).await.unwrap());
        assert_eq!(out.len(), 2);
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let engine = IoEngine::new(IoEngineKind::StdFs).unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let legacy_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (v3, v2) = rt.block_on(async {
        let v3 = write_layer(&engine, dir.path()).await;
        let path = v3.write_legacy_copy(2, legacy_dir.path()).await.unwrap();
        let v2 = LayerFile::load(&engine, &path, TENANT, TIMELINE, false).await.unwrap();
        assert_eq!((v3.format_version(), v2.format_version()), (3, 2));
        // Warm the block cache: one key of every leaf (120 keys a leaf).
        let every_leaf: Vec<CompactKey> = (0..KEYS).step_by(60).map(key).collect();
        collect_all(&v3, &every_leaf, &mut Vec::new()).await;
        (v3, v2)
    });
    // 4096 pseudo-random keys; each iteration takes the next 32.
    let mut x = 0x9e37_79b9u64;
    let picks: Vec<CompactKey> = (0..4096)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            key((x >> 33) as u32 % KEYS)
        })
        .collect();

    let mut g = c.benchmark_group("layer_index_collect");
    g.throughput(Throughput::Elements(32));
    for (name, layer) in [("v2_in_memory_32_keys", &v2), ("v3_warm_cache_32_keys", &v3)] {
        let (mut at, mut out) = (0, Vec::new());
        g.bench_function(name, |b| {
            b.iter(|| {
                at = (at + 32) % picks.len();
                rt.block_on(collect_all(layer, &picks[at..at + 32], &mut out));
            })
        });
    }
    // What the read path does first: the walk from cached blocks only.
    let (mut at, mut out) = (0, Vec::new());
    g.bench_function("v3_warm_cache_32_keys_collect_cached", |b| {
        b.iter(|| {
            at = (at + 32) % picks.len();
            for &k in &picks[at..at + 32] {
                out.clear();
                let done = v3.collect_cached(k, Lsn(0x3f), Lsn(0), &mut out);
                assert!(done.expect("cached").unwrap() && out.len() == 2);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
