//! Older formats and the flush path: a version 2 file written by the
//! daemon before version 3 (a fixture), versions 1 and 2 rewritten from a
//! version 3 file, and L0 files flushed from an in-memory layer.

use std::path::{Path, PathBuf};

use pageserver_api::key::Key;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use utils::lsn::Lsn;

use super::super::header::Layout;
use super::super::LayerFile;
use super::*;
use crate::tenant::storage_layer::inmemory_layer::InMemoryLayer;

/// Written by the version 2 code (commit aeac975): 40 keys (`MIN + 3k`), at
/// LSNs 0x20 (will_init) and 0x30, value `k` at `lsn` of
/// `(37k + lsn) % 300 + 1` bytes `i ^ k ^ lsn`.
const FIXTURE_V2: &str = "tests/data/layer-v2/000000000000000000000000000000000000-000000000000000000000000000000000076__0000000000000010-0000000000000040";

fn fixture_value(k: u32, lsn: u64) -> Vec<u8> {
    let len = (k as usize * 37 + lsn as usize) % 300 + 1;
    (0..len).map(|i| (i as u32 ^ k ^ lsn as u32) as u8).collect()
}

fn copy_fixture(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE_V2);
    let dst = dir.join(src.file_name().unwrap());
    std::fs::copy(&src, &dst).unwrap();
    dst
}

#[tokio::test]
async fn a_version_2_file_of_the_previous_daemon_loads_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_fixture(dir.path());
    let layer = LayerFile::load(&engine(), &path, TENANT, TIMELINE, direct()).await.unwrap();
    assert_eq!(
        (layer.format_version(), layer.kind(), layer.entry_count()),
        (2, LayerKind::Delta, 80)
    );
    let mut m = Model::new();
    for k in 0..40u32 {
        for lsn in [0x20u64, 0x30] {
            m.insert(
                (Key::MIN.add(k * 3).to_compact(), Lsn(lsn)),
                (fixture_value(k, lsn), lsn == 0x20),
            );
        }
    }
    check_contents(&layer, &m).await;
    let mut out = Vec::new();
    let k = Key::MIN.add(9).to_compact();
    assert!(layer.collect(k, Lsn(0x35), Lsn(0), &mut out).await.unwrap());
    assert_eq!(out.iter().map(|e| e.0).collect::<Vec<_>>(), [Lsn(0x30), Lsn(0x20)]);
    out.clear();
    assert!(!layer.collect(k, Lsn(0x35), Lsn(0x20), &mut out).await.unwrap(), "the floor stops it");
    assert_eq!(out.len(), 1);
}

#[tokio::test]
async fn versions_1_and_2_answer_like_version_3() {
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let m = random_model(&mut rng, 500, 5, 3000);
    for layout in [Layout::V1, Layout::V2] {
        let (dir, old_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let v3 = write(dir.path(), LayerKind::Delta, Lsn(0x10)..Lsn(0x10000), &m).await;
        let path = v3.write_legacy_copy(layout.version, old_dir.path()).await.unwrap();
        let old = LayerFile::load(&engine(), &path, TENANT, TIMELINE, direct()).await.unwrap();
        assert_eq!(old.format_version(), layout.version);
        if layout == Layout::V1 {
            assert_eq!(old.read_align(), 512, "version 1 is read buffered even with direct_io");
        }
        check_contents(&old, &m).await;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..3000 {
            let k = key(rng.gen_range(0..1002));
            let lsn = Lsn(rng.gen_range(0..0x10100));
            let floor = Lsn(rng.gen_range(0..=lsn.0));
            a.clear();
            b.clear();
            let da = v3.collect(k, lsn, floor, &mut a).await.unwrap();
            let db = old.collect(k, lsn, floor, &mut b).await.unwrap();
            assert_eq!((a.clone(), da), (b.clone(), db), "SEED={seed} {layout:?}");
        }
    }
}

/// Values of pseudo-random sizes (some span several 4 KiB blocks), two
/// LSNs per key, flushed from an in-memory layer.
async fn flush_layer(dir: &Path, direct: bool) -> (LayerFile, Model) {
    let mut rng = StdRng::seed_from_u64(7);
    let mem = InMemoryLayer::create(&engine(), dir, 1, Lsn(0x10), direct).await.unwrap();
    let mut m = Model::new();
    for k in 0..400u32 {
        for lsn in [0x20, 0x30] {
            let v = raw(&mut rng, 10_000);
            let init = lsn == 0x20;
            mem.put_serialized(&v, &[(Key::from_compact(key(k)), Lsn(lsn), 0..v.len(), init)])
                .await
                .unwrap();
            m.insert((key(k), Lsn(lsn)), (v, init));
        }
    }
    mem.freeze(Lsn(0x40));
    let layer = LayerFile::write_from_inmemory(&engine(), dir, TENANT, TIMELINE, &mem, direct)
        .await
        .unwrap();
    (layer, m)
}

#[tokio::test]
async fn flushed_layers_read_back_buffered_and_direct() {
    for direct in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (layer, m) = flush_layer(dir.path(), direct).await;
        assert_eq!((layer.format_version(), depth(&layer)), (3, 2));
        // Direct IO aligns to what the file system asks (512 or 4096).
        let expected = if direct { [512, 4096].as_slice() } else { [512].as_slice() };
        assert!(expected.contains(&layer.read_align()), "{}", layer.read_align());
        check_contents(&layer, &m).await;
        let loaded =
            LayerFile::load(&engine(), &layer.path, TENANT, TIMELINE, direct).await.unwrap();
        check_contents(&loaded, &m).await;
        check_every_entry(&loaded, &m).await;
        // And through chunk reads, as the GetPage path does.
        let align = loaded.read_align();
        for (&(k, lsn), (bytes, _)) in m.iter().step_by(37) {
            let mut found = Vec::new();
            loaded.collect(k, lsn, Lsn(0), &mut found).await.unwrap();
            let blob = found[0].1;
            let start = blob.offset() / align * align;
            let end = blob.end().next_multiple_of(align);
            let chunk = loaded.read_chunk(start, (end - start) as usize).await.unwrap();
            let at = (blob.offset() - start) as usize;
            assert_eq!(&chunk[at..at + blob.len()], &bytes[..]);
        }
    }
}
