//! Layer file tests on real files through the IO engine the test run
//! selects (`PAGESERVER_IO_ENGINE`, `PAGESERVER_DIRECT_IO`): round trips,
//! `collect` against a brute-force oracle, compatibility (`compat.rs`),
//! faults (`faults.rs`), the read path's head and tail (`parts.rs`).

mod compat;
mod faults;
mod parts;

use std::collections::BTreeMap;
use std::path::Path;

use io_engine::IoEngine;
use pageserver_api::key::{CompactKey, Key};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::{BlobRef, LayerKind};
use super::{Index, LayerFile, LayerWriter};

const TENANT: TenantId = TenantId([1; 16]);
const TIMELINE: TimelineId = TimelineId([2; 16]);

/// (key, LSN) -> (serialized bytes, will_init): what a layer must hold.
type Model = BTreeMap<(CompactKey, Lsn), (Vec<u8>, bool)>;

fn engine() -> IoEngine {
    IoEngine::new(crate::tenant::test_io_engine_kind()).unwrap()
}

fn direct() -> bool {
    crate::tenant::test_direct_io()
}

fn seed() -> u64 {
    let seed = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("SEED={seed}");
    seed
}

fn key(i: u32) -> CompactKey {
    Key::MIN.add(1000 + i).to_compact()
}

/// Bytes standing for a serialized value (a layer never decodes them).
fn raw(rng: &mut StdRng, max_len: usize) -> Vec<u8> {
    let len = rng.gen_range(1..=max_len);
    (0..len).map(|_| rng.gen()).collect()
}

/// `keys` keys (spaced by 2, so odd ones are absent), each with 1..=`max_versions`
/// LSNs in 0x10..0x10000; about a third of the values initialize.
fn random_model(rng: &mut StdRng, keys: u32, max_versions: u32, max_len: usize) -> Model {
    let mut m = Model::new();
    for k in 0..keys {
        let versions = rng.gen_range(1..=max_versions);
        for _ in 0..versions {
            let lsn = Lsn(rng.gen_range(0x10..0x10000));
            m.insert((key(2 * k), lsn), (raw(rng, max_len), rng.gen_ratio(1, 3)));
        }
    }
    m
}

async fn write(dir: &Path, kind: LayerKind, lsns: std::ops::Range<Lsn>, m: &Model) -> LayerFile {
    let mut w =
        LayerWriter::new(&engine(), dir, TENANT, TIMELINE, kind, lsns, direct()).await.unwrap();
    for ((k, lsn), (bytes, init)) in m {
        w.put_raw(*k, *lsn, bytes, *init).await.unwrap();
    }
    assert_eq!(w.bytes_written(), m.values().map(|v| v.0.len() as u64).sum::<u64>());
    let key_end = Key::from_compact(m.keys().last().unwrap().0).next();
    w.finish(key_end).await.unwrap()
}

async fn reload(layer: &LayerFile) -> LayerFile {
    LayerFile::load(&engine(), &layer.path, TENANT, TIMELINE, direct()).await.unwrap()
}

fn depth(layer: &LayerFile) -> u8 {
    match &layer.index {
        Index::Tree(t) => t.shape().depth,
        Index::Legacy(_) => 0,
    }
}

/// What `collect` must return, from the model.
fn oracle(m: &Model, k: CompactKey, lsn: Lsn, floor: Lsn) -> (Vec<Lsn>, bool) {
    let mut out = Vec::new();
    for ((_, l), (_, init)) in m.range((k, Lsn(0))..=(k, lsn)).rev() {
        if *l <= floor {
            break;
        }
        out.push(*l);
        if *init {
            return (out, true);
        }
    }
    (out, false)
}

/// Every entry through `entry_cursor`, in order, with its bytes read back
/// by `read_raw_values`, equals the model.
async fn check_contents(layer: &LayerFile, m: &Model) {
    let mut cursor = layer.entry_cursor();
    let mut entries = Vec::new();
    while let Some(leaf) = cursor.next_leaf().await.unwrap() {
        assert!(!leaf.is_empty() && leaf.len() <= super::ENTRIES_PER_BLOCK);
        entries.extend(leaf);
    }
    assert_eq!(entries.len(), m.len());
    assert_eq!(layer.entry_count(), m.len() as u64);
    for (chunk, model) in entries.chunks(1000).zip(m.iter().collect::<Vec<_>>().chunks(1000)) {
        let blobs: Vec<BlobRef> = chunk.iter().map(|e| e.2).collect();
        let values = layer.read_raw_values(&blobs).await.unwrap();
        for ((e, v), ((k, lsn), (bytes, init))) in chunk.iter().zip(values).zip(model) {
            assert_eq!((e.0, e.1, e.2.will_init()), (*k, *lsn, *init));
            assert_eq!(&v[..], &bytes[..], "{} at {lsn}", Key::from_compact(*k));
        }
    }
}

/// `collect` at every entry's own LSN finds that entry first.
async fn check_every_entry(layer: &LayerFile, m: &Model) {
    let mut out = Vec::new();
    for (&(k, lsn), _) in m.iter() {
        out.clear();
        layer.collect(k, lsn, Lsn(0), &mut out).await.unwrap();
        assert_eq!(out[0].0, lsn, "{} at {lsn}", Key::from_compact(k));
    }
}

#[tokio::test]
async fn delta_layers_round_trip_at_every_depth() {
    let mut rng = StdRng::seed_from_u64(seed());
    // One leaf, two levels, three levels (over 240 * 240 entries).
    for (keys, max_versions, want_depth) in [(50, 3, 1), (2_000, 4, 2), (50_000, 3, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let m = random_model(&mut rng, keys, max_versions, 40);
        let layer = write(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x10000), &m).await;
        assert_eq!((layer.kind(), layer.format_version()), (LayerKind::Delta, 3));
        assert_eq!(depth(&layer), want_depth, "{} entries", m.len());
        assert_eq!(layer.file_size % 4096, 0);
        check_contents(&layer, &m).await;
        let loaded = reload(&layer).await;
        check_contents(&loaded, &m).await;
        check_every_entry(&loaded, &m).await;
    }
}

#[tokio::test]
async fn image_layers_round_trip_with_large_values() {
    let mut rng = StdRng::seed_from_u64(seed());
    let dir = tempfile::tempdir().unwrap();
    let image_lsn = Lsn(0x500);
    let mut m = Model::new();
    for k in 0..3000 {
        // Every 500th value spans several write buffers (1 MiB each).
        let len = if k % 500 == 7 { 2_500_000 } else { rng.gen_range(1..9000) };
        m.insert((key(k), image_lsn), (vec![k as u8; len], true));
    }
    let layer = write(dir.path(), LayerKind::Image, image_lsn..image_lsn + 1, &m).await;
    assert_eq!(layer.name, super::LayerName::image(layer.name.key_range.clone(), image_lsn));
    assert_eq!(layer.key_range().start, Key::from_compact(key(0)));
    check_contents(&layer, &m).await;
    let loaded = reload(&layer).await;
    assert_eq!(loaded.kind(), LayerKind::Image);
    check_every_entry(&loaded, &m).await;
}

#[tokio::test]
async fn collect_matches_a_brute_force_oracle() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut m = random_model(&mut rng, 3000, 6, 16);
    // Keys whose histories span several leaves (240 entries each).
    for k in [2 * 1500 + 1, 2 * 3000 + 1] {
        for i in 0..700u64 {
            m.insert((key(k), Lsn(0x10 + 3 * i)), (vec![i as u8], i % 250 == 0));
        }
    }
    let layer =
        reload(&write(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x10000), &m).await).await;
    let keys: Vec<CompactKey> = m.keys().map(|k| k.0).collect();
    let (first, last) = (keys[0], keys[keys.len() - 1]);
    let mut out = Vec::new();
    for _ in 0..20_000 {
        let k = match rng.gen_range(0..10) {
            0 => key(rng.gen_range(0..7000)), // mostly absent
            1 => first - rng.gen_range(1..5),
            2 => last + rng.gen_range(1..5),
            _ => keys[rng.gen_range(0..keys.len())],
        };
        let lsn = Lsn(rng.gen_range(0..0x10100));
        let floor = if rng.gen_bool(0.5) { Lsn(0) } else { Lsn(rng.gen_range(0..=lsn.0)) };
        out.clear();
        let done = layer.collect(k, lsn, floor, &mut out).await.unwrap();
        let got: Vec<Lsn> = out.iter().map(|e| e.0).collect();
        let want = oracle(&m, k, lsn, floor);
        assert_eq!(
            (got, done),
            want,
            "SEED={seed} key {} lsn {lsn} floor {floor}",
            Key::from_compact(k)
        );
        for (l, blob) in &out {
            assert_eq!(blob.will_init(), m[&(k, *l)].1);
        }
        // From memory only: the same answer, unless a block was evicted.
        let mut cached = Vec::new();
        if let Some(res) = layer.collect_cached(k, lsn, floor, &mut cached) {
            assert_eq!((cached, res.unwrap()), (out.clone(), done), "SEED={seed}");
        }
    }
}
