//! Timelines whose layers are only in remote storage (a local directory):
//! on-demand downloads through the read path, compaction, image creation
//! and GC; eviction and reads at once; corrupt objects; start-up.

use crate::tenant::reconstruct::ClusterInfo;
use std::sync::Arc;

use bytes::Bytes;
use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::super::super::remote_timeline::client::RemoteTimelineClient;
use super::super::super::storage_layer::layer::LayerAccessError;
use super::super::super::storage_layer::LayerName;
use super::super::super::value::{image, Record, Value};
use super::super::super::{vectored_read, PageReconstructError, ReadKind};
use super::super::compaction::CompactOptions;
use super::super::Timeline;
use super::testing::*;

const FORCE: CompactOptions =
    CompactOptions { force_l0_compaction: true, force_image_layer_creation: true };

/// Keys of [`write_history`].
const HISTORY_KEYS: u32 = 40;

fn history_lsn(f: u32) -> Lsn {
    Lsn(0x20 + 0x10 * f as u64)
}

/// Flushes `first..first + n` of a history: every key an image in flush 0,
/// then per flush an image of one key in five and appending records on
/// the others, so pages span layers.
async fn write_history(tl: &Timeline, first: u32, n: u32) {
    for f in first..first + n {
        let mut w = tl.writer().await;
        for k in 0..HISTORY_KEYS {
            let v = if f == 0 || k % 5 == f % 5 {
                image(format!("image of {k} in {f};").repeat(40).as_bytes())
            } else {
                let append = Bytes::from(format!("f{f}k{k};"));
                Value::Record(Record::Test { append, will_init: false })
            };
            w.put(Key::MIN.add(k), history_lsn(f), &v).await.unwrap();
        }
        w.finish_write(history_lsn(f));
        drop(w);
        tl.freeze_and_flush().await.unwrap();
    }
}

/// Every key at every LSN of the first `flushes` flushes, read in batches.
async fn read_all(tl: &Timeline, flushes: u32) -> Vec<Bytes> {
    let queries: Vec<(Key, Lsn)> = (0..flushes)
        .flat_map(|f| (0..HISTORY_KEYS).map(move |k| (Key::MIN.add(k), history_lsn(f))))
        .collect();
    let mut pages = Vec::with_capacity(queries.len());
    for batch in queries.chunks(tl.conf.max_get_vectored_keys) {
        for (q, r) in batch.iter().zip(tl.get_vectored(batch, ReadKind::HttpRequest).await.unwrap())
        {
            pages.push(r.unwrap_or_else(|e| panic!("{} at {}: {e}", q.0, q.1)));
        }
    }
    pages
}

/// The uploaded name of the L0 holding `lsn`.
fn l0_holding(rt: &RemoteTimeline, lsn: Lsn) -> String {
    let holds = |n: &&String| LayerName::parse(n).unwrap().lsn_range.contains(&lsn);
    rt.uploaded.keys().find(holds).expect("an L0 holds the LSN").clone()
}

/// A history of L0s, L1s, an image layer and L0s above them, read fully
/// while local; then with no local layer file: every page reads the same,
/// downloaded on demand; then again after evicting everything.
#[tokio::test]
async fn a_timeline_without_local_layer_files_reads_every_page_identically() {
    let root = tempfile::tempdir().unwrap();
    let (mgr, tl) = new_timeline(&root.path().join("work")).await;
    write_history(&tl, 0, 6).await;
    tl.compact(FORCE).await.unwrap();
    write_history(&tl, 6, 2).await;
    let stats = tl.layer_stats().files;
    assert!(stats.l0_layers == 2 && stats.l1_layers > 0 && stats.image_layers > 0, "{stats:?}");
    let expected = read_all(&tl, 8).await;
    let rt = publish(root, mgr, tl).await;

    rt.remove_local_layers();
    let tl = rt.load().await;
    assert!(tl.resident_layers().is_empty(), "nothing is local");
    assert_eq!(tl.historic_layers().len(), rt.uploaded.len());
    assert_eq!(read_all(&tl, 8).await, expected);
    let resident = tl.resident_layers();
    assert!(!resident.is_empty());
    assert!(resident.iter().all(|l| l.path.exists()), "downloaded into the timeline directory");
    assert_eq!(tl.resident_bytes(), resident.iter().map(|l| l.file_size).sum::<u64>());

    for l in &resident {
        assert!(l.evict().await, "{} is uploaded", l.name);
    }
    assert!(tl.resident_layers().is_empty() && tl.resident_bytes() == 0);
    assert_eq!(read_all(&tl, 8).await, expected, "downloaded again, the same pages");
    tl.shutdown(false, std::time::Duration::ZERO).await;
}

/// Compaction downloads its remote-only inputs; image creation lists the
/// keys of remote-only layers; the results read the same.
#[tokio::test]
async fn compaction_and_images_work_on_remote_only_layers() {
    let rt = disjoint_remote_timeline(4).await;
    rt.remove_local_layers();
    let tl = rt.load().await;
    let report = tl.compact(FORCE).await.unwrap();
    assert_eq!(report.l0_layers_compacted, 4);
    assert!(report.l1_layers_written > 0 && report.image_layers_written > 0, "{report:?}");
    for name in rt.uploaded.keys() {
        assert!(!rt.dir.join(name).exists(), "replaced L0 {name} is not left behind");
    }
    for l in 0..4 {
        for k in l * KEYS_PER_LAYER..(l + 1) * KEYS_PER_LAYER {
            check_page(&tl, l, k).await;
        }
    }
    tl.shutdown(false, std::time::Duration::ZERO).await;
}

/// GC removes remote-only layers without downloading them; a read on a
/// snapshot older than the GC that needs one of them gets an error naming
/// it (a fresh snapshot refuses the LSN as below the cutoff), and reads
/// above the cutoff are served.
#[tokio::test]
async fn gc_of_remote_only_layers_and_older_snapshots() {
    let root = tempfile::tempdir().unwrap();
    let (mgr, tl) = new_timeline(&root.path().join("work")).await;
    write_disjoint_layers(&tl, 0, 3).await;
    tl.compact(FORCE).await.unwrap();
    write_disjoint_layers(&tl, 3, 1).await;
    let rt = publish(root, mgr, tl).await;
    rt.remove_local_layers();
    let tl = rt.load().await;
    let old = tl.layers.read().unwrap().snapshot();
    let report = tl.gc(Some(0)).await.unwrap();
    assert!(report.layers_removed > 0, "{report:?}");
    assert!(tl.resident_layers().is_empty(), "GC downloads nothing");

    let query = (Key::MIN.add(0), lsn_of(0));
    let limits = vectored_read::ReadLimits {
        timeline: &tl.read_slots,
        process: vectored_read::process_read_slots(),
    };
    let (mut res, _) =
        vectored_read::read(&tl.conf.io_engine, &old, &[query], limits, ClusterInfo::TESTS).await;
    let err = res.pop().unwrap().unwrap_err();
    assert!(
        matches!(err, PageReconstructError::LayerAccess(LayerAccessError::Replaced { .. })),
        "{err}"
    );
    let err = tl.get(query.0, query.1).await.unwrap_err();
    assert!(matches!(err, PageReconstructError::GarbageCollected { .. }), "{err}");
    for l in 0..4 {
        for k in l * KEYS_PER_LAYER..(l + 1) * KEYS_PER_LAYER {
            check_page(&tl, l, k).await;
        }
    }
    tl.shutdown(false, std::time::Duration::ZERO).await;
}

/// Readers and an evictor at once: every page reads right throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_racing_evictions_are_correct() {
    let rt = disjoint_remote_timeline(4).await;
    let tl = rt.load().await;
    let evictor = {
        let tl = tl.clone();
        tokio::spawn(async move {
            let mut evicted = 0;
            for _ in 0..30 {
                for l in tl.resident_layers() {
                    evicted += l.evict().await as usize;
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            evicted
        })
    };
    let readers = (0..4).map(|_| {
        let tl = tl.clone();
        tokio::spawn(async move {
            for _ in 0..8 {
                for l in 0..4 {
                    for k in l * KEYS_PER_LAYER..(l + 1) * KEYS_PER_LAYER {
                        check_page(&tl, l, k).await;
                    }
                }
            }
        })
    });
    for r in futures::future::join_all(readers).await {
        r.unwrap();
    }
    assert!(evictor.await.unwrap() > 0);
    tl.shutdown(false, std::time::Duration::ZERO).await;
}

/// A corrupt object fails the reads that need its layer, with an error
/// naming the object; other keys and layers read.
#[tokio::test]
async fn a_corrupt_remote_layer_fails_only_the_reads_that_need_it() {
    let rt = disjoint_remote_timeline(3).await;
    rt.remove_local_layers();
    let bad = l0_holding(&rt, lsn_of(1));
    let object = rt.object(&bad);
    super::super::super::storage_layer::layer::testing::corrupt(&object);
    let tl = rt.load().await;
    let lsn = tl.get_last_record_lsn();
    let queries: Vec<(Key, Lsn)> = [0, KEYS_PER_LAYER, 2 * KEYS_PER_LAYER + 1]
        .iter()
        .map(|&k| (Key::MIN.add(k), lsn))
        .collect();
    let res = tl.get_vectored(&queries, ReadKind::HttpRequest).await.unwrap();
    assert_eq!(&res[0].as_ref().unwrap()[..], &page(0, 0)[..]);
    assert_eq!(&res[2].as_ref().unwrap()[..], &page(2, 2 * KEYS_PER_LAYER + 1)[..]);
    let err = res[1].as_ref().unwrap_err();
    let key = object.strip_prefix(&rt.remote_root).unwrap().to_str().unwrap();
    assert!(
        matches!(err, PageReconstructError::LayerAccess(LayerAccessError::Download { .. })),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains(key) && msg.contains("corrupt") && msg.contains(&bad), "{msg}");
    check_page(&tl, 0, 1).await;
    check_page(&tl, 2, 2 * KEYS_PER_LAYER).await;
    tl.shutdown(false, std::time::Duration::ZERO).await;
}

/// Start-up with a remote client: a missing local file becomes remote-only
/// only if its remote copy has the manifest's size; otherwise the load
/// fails naming the file, as without remote storage.
#[tokio::test]
async fn a_missing_local_file_needs_a_remote_copy_of_its_size() {
    let rt = disjoint_remote_timeline(2).await;
    let newest = l0_holding(&rt, lsn_of(1));
    std::fs::remove_file(rt.dir.join(&newest)).unwrap();

    let mut not_uploaded = rt.uploaded.clone();
    not_uploaded.remove(&newest);
    let err = format!("{:#}", rt.try_load(rt.client_of(not_uploaded)).await.err().unwrap());
    assert!(err.contains(&newest) && err.contains("missing"), "{err}");
    assert!(err.contains("remote storage has no copy"), "{err}");

    let mut resized = rt.uploaded.clone();
    resized.get_mut(&newest).unwrap().file_size += 512;
    let err = format!("{:#}", rt.try_load(rt.client_of(resized)).await.err().unwrap());
    assert!(err.contains(&newest) && err.contains("missing"), "{err}");

    let tl = rt.load().await;
    let resident: Vec<String> = tl.resident_layers().iter().map(|l| l.name.to_string()).collect();
    assert_eq!(resident, vec![l0_holding(&rt, lsn_of(0))], "the local one is resident");
    check_page(&tl, 1, KEYS_PER_LAYER).await;
    assert!(rt.dir.join(&newest).exists(), "downloaded on first read");
    tl.shutdown(false, std::time::Duration::ZERO).await;
}

/// A layer flushed while the store is down is resident and not evictable;
/// once the upload queue uploaded it, it is evicted and downloaded again.
#[tokio::test]
async fn new_layers_become_evictable_once_uploaded() {
    let rt = disjoint_remote_timeline(1).await;
    let tl = rt.load().await;
    rt.store_down();
    write_disjoint_layers(&tl, 1, 1).await;
    let layers = tl.historic_layers();
    assert_eq!(layers.len(), 2);
    assert!(layers.iter().all(|l| l.is_resident()));
    let client: &Arc<RemoteTimelineClient> = tl.remote_client().unwrap();
    let newest = layers.iter().find(|l| client.uploaded_layer(&l.name.to_string()).is_none());
    let newest = newest.expect("one layer is not uploaded");
    assert!(!newest.is_evictable() && !newest.evict().await);
    rt.store_up();
    let lsn = tl.get_disk_consistent_lsn();
    assert!(client.wait_uploaded(lsn, std::time::Duration::from_secs(30)).await);
    assert!(newest.is_evictable() && newest.evict().await);
    check_page(&tl, 1, KEYS_PER_LAYER + 3).await;
    assert!(newest.is_resident(), "downloaded the queue's upload");
    tl.shutdown(false, std::time::Duration::ZERO).await;
}
