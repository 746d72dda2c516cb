//! The read path's head and tail (`vectored_read::HEAD_QUERIES`): every
//! query is answered whichever part it falls in, and a tail waiting for
//! its permits does not hold up the head.

use crate::tenant::reconstruct::ClusterInfo;
use std::sync::Arc;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::*;
use crate::tenant::storage_layer::layer::Layer;
use crate::tenant::storage_layer::layer_map::LayerMap;
use crate::tenant::storage_layer::LayerLevel;
use crate::tenant::value::image;
use crate::tenant::vectored_read::{self, ReadLimits, HEAD_QUERIES, MAX_CHUNK_READS_PER_GET};

/// Page `k` of the test layer: 8 KiB of `k`, then `k` in its first bytes.
fn page(k: u32) -> Vec<u8> {
    let mut p = vec![k as u8; 8192];
    p[..4].copy_from_slice(&k.to_be_bytes());
    p
}

/// An image layer of pages 0..`keys` at LSN 0x20, as a layer map.
async fn image_map(dir: &std::path::Path, keys: u32) -> LayerMap {
    let mut m = Model::new();
    for k in 0..keys {
        m.insert((key(k), Lsn(0x20)), (image(&page(k)).serialize(), true));
    }
    let file = write(dir, LayerKind::Image, Lsn(0x20)..Lsn(0x21), &m).await;
    let layer = Arc::new(Layer::resident(file, None));
    LayerMap::new(Lsn(0x20), Lsn(0), vec![(LayerLevel::Image, layer)], vec![])
}

type Answer = (usize, Result<bytes::Bytes, crate::tenant::PageReconstructError>);

fn page_at(k: u32) -> (Key, Lsn) {
    (Key::from_compact(key(k)), Lsn(0x20))
}

/// Every other page (so each value is a chunk of its own), some asked
/// twice, and one key the layer does not hold. The head is pages 0, 2,
/// 40 and 4 (queries 0-3, 5 and 23); the missing key (query 4) is the
/// tail's first.
fn queries() -> Vec<(Key, Lsn)> {
    let mut q = vec![page_at(0), page_at(2), page_at(40), page_at(4), page_at(999), page_at(2)];
    q.extend((3..24).map(|i| page_at(2 * i)));
    assert_eq!(q[23], page_at(40));
    q
}
const HEAD_ANSWERS: [usize; 7] = [0, 1, 2, 3, 4, 5, 23];

/// Checks each query's answer: its page, or `MissingKey` for the key the
/// layer does not hold.
fn check(q: &[(Key, Lsn)], mut answers: Vec<Answer>) {
    answers.sort_by_key(|(i, _)| *i);
    let asked: Vec<usize> = answers.iter().map(|(i, _)| *i).collect();
    assert_eq!(asked, (0..q.len()).collect::<Vec<_>>(), "every query answered once");
    for ((k, _), (_, r)) in q.iter().zip(answers) {
        let i = (k.to_compact() - key(0)) as u32;
        match r {
            Ok(b) => assert_eq!(b[..], page(i)[..], "page {i}"),
            Err(e) => {
                assert_eq!(i, 999, "only the missing key fails: {e}");
                assert!(matches!(e, crate::tenant::PageReconstructError::MissingKey { .. }), "{e}");
            }
        }
    }
}

#[tokio::test]
async fn head_and_tail_answer_every_query() {
    let dir = tempfile::tempdir().unwrap();
    let map = image_map(dir.path(), 64).await;
    let q = queries();
    assert_eq!(HEAD_QUERIES, 4, "the queries above are laid out for a head of 4");
    let timeline = tokio::sync::Semaphore::new(vectored_read::TIMELINE_CHUNK_READS);
    let limits = ReadLimits { timeline: &timeline, process: vectored_read::process_read_slots() };
    let (res, stats) =
        vectored_read::read(&engine(), &map.snapshot(), &q, limits, ClusterInfo::TESTS).await;
    check(&q, res.into_iter().enumerate().collect());
    assert_eq!((stats.values, stats.chunks), (24, 24), "each page planned once, in one part");
    assert_eq!(timeline.available_permits(), vectored_read::TIMELINE_CHUNK_READS);
}

/// With only the head's permits free, the head is read and answered while
/// the tail waits for its permits (gathering the head's as they come
/// back: tokio's semaphore is fair), and the tail is read once the other
/// holder lets go. Only with io-uring and direct IO (run-tests.sh runs
/// the daemon's tests that way too): else a get is one part.
#[tokio::test]
async fn a_tail_waiting_for_permits_does_not_hold_up_the_head() {
    if engine().kind() != io_engine::IoEngineKind::IoUring || !direct() {
        println!(
            "skipped: a get is one part but with io-uring and direct IO (run-tests.sh runs that)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let map = image_map(dir.path(), 64).await;
    let q = queries();
    let timeline = tokio::sync::Semaphore::new(MAX_CHUNK_READS_PER_GET);
    let others = timeline.try_acquire_many((MAX_CHUNK_READS_PER_GET - HEAD_QUERIES) as u32);
    let limits = ReadLimits { timeline: &timeline, process: vectored_read::process_read_slots() };
    let (engine, snapshot) = (engine(), map.snapshot());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Answer>();
    let mut ready = |i: usize, r| tx.send((i, r)).unwrap();
    let mut get = std::pin::pin!(vectored_read::read_each(
        &engine,
        &snapshot,
        &q,
        limits,
        ClusterInfo::TESTS,
        &mut ready
    ));
    let mut answers = Vec::new();
    let head = async {
        while answers.len() < HEAD_ANSWERS.len() {
            tokio::select! {
                _ = get.as_mut() => panic!("the tail was read without permits"),
                Some(a) = rx.recv() => answers.push(a),
            }
        }
    };
    let waited = tokio::time::timeout(std::time::Duration::from_secs(10), head).await;
    waited.expect("the head is read and answered while the tail has no permits");
    let mut first: Vec<usize> = answers.iter().map(|(i, _)| *i).collect();
    first.sort();
    assert_eq!(first, HEAD_ANSWERS, "the head's pages and the tail's refusal");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(futures::poll!(get.as_mut()).is_pending(), "the tail waits for permits");
    assert_eq!(timeline.available_permits(), 0, "the head's permits went to the tail's acquire");
    drop(others);
    let stats = tokio::time::timeout(std::time::Duration::from_secs(10), get).await.unwrap();
    assert_eq!(stats.values, 24);
    answers.extend(std::iter::from_fn(|| rx.try_recv().ok()));
    check(&q, answers);
}

/// Gets whose head needs index blocks from the disk (a freshly loaded
/// layer of three index levels: one part) and gets on a warmed index (two
/// parts), two at a time: every page comes back.
#[tokio::test]
async fn gets_on_cold_and_warm_indexes_answer_every_page() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = Model::new();
    for k in 0..2000 {
        m.insert((key(k), Lsn(0x20)), (image(&page(k)).serialize(), true));
    }
    let path = write(dir.path(), LayerKind::Image, Lsn(0x20)..Lsn(0x21), &m).await.path;
    let timeline = tokio::sync::Semaphore::new(vectored_read::TIMELINE_CHUNK_READS);
    let limits = ReadLimits { timeline: &timeline, process: vectored_read::process_read_slots() };
    let engine = engine();
    let mut rng = StdRng::seed_from_u64(seed());
    for _ in 0..10 {
        let file = LayerFile::load(&engine, &path, TENANT, TIMELINE, direct()).await.unwrap();
        assert_eq!(depth(&file), 2, "the root, then leaves read through the block cache");
        let layer = Arc::new(Layer::resident(file, None));
        let map = LayerMap::new(Lsn(0x20), Lsn(0), vec![(LayerLevel::Image, layer)], vec![]);
        let snapshot = map.snapshot();
        for _ in 0..2 {
            let mut batch = || (0..32).map(|_| page_at(rng.gen_range(0..2000))).collect::<Vec<_>>();
            let (qa, qb) = (batch(), batch());
            let ((ra, _), (rb, _)) = futures::join!(
                vectored_read::read(&engine, &snapshot, &qa, limits, ClusterInfo::TESTS),
                vectored_read::read(&engine, &snapshot, &qb, limits, ClusterInfo::TESTS)
            );
            check(&qa, ra.into_iter().enumerate().collect());
            check(&qb, rb.into_iter().enumerate().collect());
        }
    }
}
