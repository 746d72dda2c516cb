//! Damaged files, misuse of the writer, and the block cache's counters.

use crate::tenant::reconstruct::ClusterInfo;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::super::header::Header;
use super::super::index_block::INDEX_BLOCK_BYTES;
use super::super::{LayerFile, LayerReadError};
use super::*;
use crate::metrics::storage as metrics;
use crate::tenant::storage_layer::layer::Layer;
use crate::tenant::storage_layer::layer_map::{LayerMap, ReadableLayer};
use crate::tenant::storage_layer::LayerLevel;
use crate::tenant::vectored_read::{self, ReadLimits};
use crate::tenant::PageReconstructError;

/// `keys` keys at 0x20 (will_init) and 0x30: entries `2k` and `2k + 1`
/// are key `k`'s, 240 entries a leaf (40,000 keys: three levels).
fn two_versions(keys: u32) -> Model {
    let mut m = Model::new();
    for k in 0..keys {
        m.insert((key(k), Lsn(0x20)), (vec![k as u8; 10], true));
        m.insert((key(k), Lsn(0x30)), (vec![!k as u8; 10], false));
    }
    m
}

/// A copy of `src` in `dir` with a byte of index block `block` flipped.
fn corrupt_copy(src: &Path, dir: &Path, block: u64) -> PathBuf {
    let mut bytes = std::fs::read(src).unwrap();
    let h = Header::decode(&bytes[..512]).unwrap();
    bytes[(h.index_offset + block * INDEX_BLOCK_BYTES as u64) as usize + 100] ^= 0x40;
    let dst = dir.join(src.file_name().unwrap());
    std::fs::write(&dst, bytes).unwrap();
    dst
}

async fn load(path: &Path) -> anyhow::Result<LayerFile> {
    LayerFile::load(&engine(), path, TENANT, TIMELINE, direct()).await
}

fn expect_corrupt(err: LayerReadError, path: &Path, want_block: u64) {
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "names the file: {text}");
    assert!(text.contains(&format!("index block {want_block} is corrupt")), "{text}");
    let LayerReadError::CorruptBlock { block, .. } = err else { panic!("{text}") };
    assert_eq!(block, want_block);
}

#[tokio::test]
async fn corrupt_blocks_are_errors_naming_the_file_and_block() {
    let dir = tempfile::tempdir().unwrap();
    let m = two_versions(40_000);
    let good = write(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x40), &m).await;
    let shape = match &good.index {
        Index::Tree(t) => t.shape(),
        Index::Legacy(_) => unreachable!(),
    };
    assert_eq!(shape.depth, 3);
    let mut out = Vec::new();

    // Leaf 10 holds entries 2400..2640: keys 1200..1320.
    let leaf_dir = tempfile::tempdir().unwrap();
    let path = corrupt_copy(&good.path, leaf_dir.path(), 10);
    let layer = load(&path).await.unwrap();
    let err = layer.collect(key(1250), Lsn(0x30), Lsn(0), &mut out).await.unwrap_err();
    expect_corrupt(err, &path, 10);
    assert!(layer.collect(key(1500), Lsn(0x30), Lsn(0), &mut out).await.unwrap(), "others read");
    // The read path turns it into an error naming the layer.
    let timeline = tokio::sync::Semaphore::new(vectored_read::TIMELINE_CHUNK_READS);
    let limits = ReadLimits { timeline: &timeline, process: vectored_read::process_read_slots() };
    let layer = Arc::new(Layer::resident(layer, None));
    let map = LayerMap::new(Lsn(0x10), Lsn(0), vec![(LayerLevel::L0, layer.clone())], vec![]);
    let query = (Key::from_compact(key(1250)), Lsn(0x30));
    let (mut res, _) =
        vectored_read::read(&engine(), &map.snapshot(), &[query], limits, ClusterInfo::TESTS).await;
    let err = res.pop().unwrap().unwrap_err();
    assert!(matches!(err, PageReconstructError::LayerIndex { .. }), "{err}");
    assert!(err.to_string().contains(&ReadableLayer::Historic(layer).describe()), "{err}");

    // The first internal block (level 1) covers the first 240 leaves.
    let internal_dir = tempfile::tempdir().unwrap();
    let path = corrupt_copy(&good.path, internal_dir.path(), shape.leaf_count);
    let layer = load(&path).await.unwrap();
    let err = layer.collect(key(5), Lsn(0x30), Lsn(0), &mut out).await.unwrap_err();
    expect_corrupt(err, &path, shape.leaf_count);

    // The root is read at load.
    let root_dir = tempfile::tempdir().unwrap();
    let path = corrupt_copy(&good.path, root_dir.path(), shape.root_block);
    let err = format!("{:#}", load(&path).await.err().unwrap());
    assert!(err.contains(&path.display().to_string()) && err.contains("unusable"), "{err}");
    assert!(err.contains(&format!("index block {} is corrupt", shape.root_block)), "{err}");

    // A compaction scan reports the damaged leaf too.
    let layer = load(&corrupt_copy(&good.path, leaf_dir.path(), 10)).await.unwrap();
    let mut cursor = layer.entry_cursor();
    let mut leaves = 0;
    let err = loop {
        match cursor.next_leaf().await {
            Ok(Some(_)) => leaves += 1,
            Ok(None) => panic!("the scan passed a corrupt leaf"),
            Err(e) => break e,
        }
    };
    assert_eq!(leaves, 0, "the first read of 16 leaves holds leaf 10");
    expect_corrupt(err, &layer.path, 10);
}

#[tokio::test]
async fn a_truncated_file_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let layer = write(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x40), &two_versions(500)).await;
    for cut in [100, INDEX_BLOCK_BYTES as u64] {
        let len = std::fs::metadata(&layer.path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&layer.path).unwrap();
        f.set_len(len - cut).unwrap();
        let text = format!("{:#}", load(&layer.path).await.err().unwrap());
        assert!(text.contains("does not match its header") && text.contains("unusable"), "{text}");
    }
}

#[tokio::test]
async fn the_block_cache_counts_misses_then_hits() {
    let dir = tempfile::tempdir().unwrap();
    let layer =
        write(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x40), &two_versions(2000)).await;
    let misses = metrics::LAYER_INDEX_CACHE_MISSES.get();
    let mut out = Vec::new();
    assert!(layer.collect_cached(key(1000), Lsn(0x30), Lsn(0), &mut out).is_none(), "cold");
    out.clear();
    layer.collect(key(1000), Lsn(0x30), Lsn(0), &mut out).await.unwrap();
    let mut cached = Vec::new();
    let res = layer.collect_cached(key(1000), Lsn(0x30), Lsn(0), &mut cached);
    assert_eq!((res.unwrap().unwrap(), cached), (true, out.clone()), "now from memory");
    assert!(metrics::LAYER_INDEX_CACHE_MISSES.get() > misses, "a leaf was read");
    let hits = metrics::LAYER_INDEX_CACHE_HITS.get();
    layer.collect(key(1001), Lsn(0x30), Lsn(0), &mut out).await.unwrap();
    assert!(metrics::LAYER_INDEX_CACHE_HITS.get() > hits, "the same leaf again");
    assert!(metrics::LAYER_INDEX_CACHE_BYTES.get() >= INDEX_BLOCK_BYTES as i64);
}

async fn writer(dir: &Path, kind: LayerKind, lsns: std::ops::Range<Lsn>) -> LayerWriter {
    LayerWriter::new(&engine(), dir, TENANT, TIMELINE, kind, lsns, direct()).await.unwrap()
}

#[tokio::test]
#[should_panic(expected = "strictly increasing")]
async fn the_writer_refuses_out_of_order_puts() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x40)).await;
    w.put_raw(key(5), Lsn(0x20), b"a", true).await.unwrap();
    w.put_raw(key(5), Lsn(0x20), b"b", true).await.unwrap();
}

#[tokio::test]
#[should_panic(expected = "outside the layer")]
async fn the_writer_refuses_an_lsn_outside_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x40)).await;
    w.put_raw(key(5), Lsn(0x40), b"a", true).await.unwrap();
}

#[tokio::test]
#[should_panic(expected = "only images")]
async fn an_image_writer_refuses_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), LayerKind::Image, Lsn(0x10)..Lsn(0x11)).await;
    w.put_raw(key(5), Lsn(0x10), b"a", false).await.unwrap();
}

#[tokio::test]
async fn a_dropped_or_empty_writer_leaves_only_a_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x40)).await;
    assert!(w.is_empty());
    for k in 0..5000 {
        w.put_raw(key(k), Lsn(0x20), &[7; 300], true).await.unwrap();
    }
    assert!(!w.is_empty() && w.index_bytes() >= 3 * INDEX_BLOCK_BYTES as u64);
    drop(w);
    let empty = writer(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x40)).await;
    let err = empty.finish(Key::MAX).await.err().unwrap();
    assert!(err.to_string().contains("at least one value"), "{err}");
    tokio::task::yield_now().await; // a detached write may still finish
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(name.ends_with(io_engine::TEMP_SUFFIX), "{name} is not a temp file");
    }
}

#[tokio::test]
async fn a_failed_commit_leaves_no_file() {
    if !utils::failpoint::ENABLED {
        return; // built without the testing feature
    }
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path(), LayerKind::Image, Lsn(0x10)..Lsn(0x11)).await;
    w.put_raw(key(1), Lsn(0x10), b"image", true).await.unwrap();
    let fp = "layer-write::before-rename";
    // On this test's thread only: tests running beside it write layers too.
    utils::failpoint::configure_on_this_thread(fp, utils::failpoint::Action::Return);
    let res = w.finish(Key::from_compact(key(2))).await;
    utils::failpoint::configure_on_this_thread(fp, utils::failpoint::Action::Off);
    let err = format!("{:#}", res.err().unwrap());
    assert!(err.contains(fp), "{err}");
    // The writer's guard removed its temp file (`writer/unfinished.rs`).
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, Vec::<String>::new());
}
