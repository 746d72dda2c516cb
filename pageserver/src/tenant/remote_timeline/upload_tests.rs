//! The upload queue on a real timeline, against remote storage in a local
//! directory: what is uploaded when, deletions and generations,
//! backpressure while the store is down.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::client::RemoteTimelineClient;
use super::*;
use crate::tenant::metadata::TimelineMetadata;
use crate::tenant::timeline::compaction::CompactOptions;
use crate::tenant::value::image;
use crate::tenant::{Globals, StorageConf, Timeline};

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub remote_root: PathBuf,
    pub rs: Arc<RemoteStorage>,
    pub tl: Arc<Timeline>,
}

fn storage(root: &Path, extra: &str) -> Arc<RemoteStorage> {
    let extra = format!("deletion_delay = '0s'\n{extra}");
    Arc::new(crate::remote_storage::local_for_tests(root, &extra))
}

/// A new timeline at generation 1 with remote storage (`extra`: more
/// `remote_storage` keys).
pub(super) async fn fixture(extra: &str) -> Fixture {
    fixture_checking(extra, crate::remote_storage::config::DEFAULT_CHECK_PERIOD).await
}

/// [`fixture`] whose upload task checks the store every `period`
/// (`remote_storage.check_period`).
pub(super) async fn fixture_checking(extra: &str, period: Duration) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let remote_root = dir.path().join("remote");
    let rs = storage(&remote_root, &format!("check_period = '{}ms'\n{extra}", period.as_millis()));
    let mut conf = StorageConf::for_tests(dir.path());
    conf.compaction.compaction_period = Duration::ZERO;
    conf.compaction.pitr_interval = Duration::ZERO; // GC follows `gc_horizon` alone
    let conf = Arc::new(conf);
    let (t, id) = (TenantId::generate(), TimelineId::generate());
    let tl_dir = dir.path().join("timeline");
    Timeline::create_on_disk(&conf, &tl_dir, &TimelineMetadata::new_empty(Lsn(0x10), 16))
        .await
        .unwrap();
    claim_generation(&rs, t, Generation(1)).await.unwrap();
    let engine = conf.io_engine.clone();
    let client =
        RemoteTimelineClient::new(rs.clone(), engine, (t, id), Generation(1), tl_dir.clone(), None);
    let globals = Arc::new(Globals::default());
    let cancel = CancellationToken::new();
    let client = Some(Arc::new(client));
    let tl = Timeline::load(conf, globals, t, id, tl_dir, cancel, client, None).await.unwrap();
    Fixture { _dir: dir, remote_root, rs, tl }
}

/// Write one value per key of `keys` at `lsn` and flush.
pub(super) async fn write_and_flush(tl: &Timeline, keys: std::ops::Range<u32>, lsn: u64) {
    let mut w = tl.writer().await;
    for k in keys {
        w.put(Key::MIN.add(k), Lsn(lsn), &image(format!("{k}@{lsn}").as_bytes())).await.unwrap();
    }
    w.finish_write(Lsn(lsn));
    drop(w);
    tl.freeze_and_flush().await.unwrap();
}

async fn layer_objects(rs: &RemoteStorage, tl: &Timeline) -> Vec<String> {
    let listed = rs.list(&timeline_prefix(tl.tenant_id, tl.timeline_id)).await.unwrap();
    let names = listed.into_iter().filter_map(|o| {
        let file = o.key.rsplit('/').next()?.to_string();
        matches!(TimelineObject::parse(&file), Some(TimelineObject::Layer(..))).then_some(file)
    });
    let mut v: Vec<_> = names.collect();
    v.sort();
    v
}

/// The layers the local manifest lists.
pub(super) async fn local_layers(tl: &Timeline) -> Vec<String> {
    let decoded = TimelineMetadata::load(&tl.conf().io_engine, tl.dir()).await.unwrap();
    let crate::tenant::metadata::Decoded::Manifest(md) = decoded else { panic!("a v3 manifest") };
    let mut v: Vec<_> = md.layers.into_iter().map(|l| l.name).collect();
    v.sort();
    v
}

pub(super) async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    for _ in 0..200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within 10 s: {what}");
}

#[tokio::test]
async fn a_flush_uploads_its_layer_then_the_index() {
    let f = fixture("").await;
    assert!(f.tl.durable_lsn() <= Lsn(0x10));
    write_and_flush(&f.tl, 0..100, 0x20).await;
    let dcl = f.tl.get_disk_consistent_lsn();
    let remote = f.tl.remote_client().unwrap().clone();
    assert!(remote.wait_uploaded(dcl, Duration::from_secs(10)).await, "uploaded");
    assert_eq!(f.tl.durable_lsn(), dcl);
    let ip = download_newest_index(&f.rs, f.tl.tenant_id, f.tl.timeline_id, Generation(1))
        .await
        .unwrap()
        .expect("an index");
    assert_eq!(ip.disk_consistent_lsn, dcl);
    let names: Vec<_> = ip.layers.keys().cloned().collect();
    assert_eq!(names, local_layers(&f.tl).await);
    let (name, l) = ip.layers.iter().next().unwrap();
    let bytes = std::fs::read(f.tl.dir().join(name)).unwrap();
    assert_eq!((l.file_size, l.crc32c), (bytes.len() as u64, crc32c::crc32c(&bytes)));
    assert_eq!(layer_objects(&f.rs, &f.tl).await, vec![format!("{name}-00000001")]);
    f.tl.shutdown(false, Duration::ZERO).await;
}

#[tokio::test]
async fn replaced_layers_are_deleted_unless_a_newer_generation_exists() {
    for newer_claimed in [false, true] {
        let f = fixture("").await;
        for i in 0..3u64 {
            write_and_flush(&f.tl, 0..50, 0x20 + i * 0x10).await;
        }
        let remote = f.tl.remote_client().unwrap().clone();
        let tl = f.tl.clone();
        eventually("3 L0s uploaded", async || remote.uploaded_layers().len() == 3).await;
        if newer_claimed {
            claim_generation(&f.rs, tl.tenant_id, Generation(2)).await.unwrap();
        }
        let opts = CompactOptions { force_l0_compaction: true, ..Default::default() };
        tl.compact(opts).await.unwrap();
        let want = local_layers(&tl).await;
        eventually("the index lists the L1s", async || {
            remote.uploaded_layers().keys().cloned().collect::<Vec<_>>() == want
        })
        .await;
        let rs = f.rs.clone();
        let expect = if newer_claimed { 3 + want.len() } else { want.len() };
        eventually("replaced objects handled", async || {
            layer_objects(&rs, &tl).await.len() == expect
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(layer_objects(&rs, &tl).await.len(), expect, "newer: {newer_claimed}");
        tl.shutdown(false, Duration::ZERO).await;
    }
}

#[tokio::test]
async fn flushes_wait_for_a_full_queue_while_the_store_is_down() {
    let f = fixture("upload_queue_size = 1").await;
    write_and_flush(&f.tl, 0..10, 0x20).await;
    let remote = f.tl.remote_client().unwrap().clone();
    assert!(remote.wait_uploaded(f.tl.get_disk_consistent_lsn(), Duration::from_secs(10)).await);
    // The store goes away: its root becomes a file.
    std::fs::remove_dir_all(&f.remote_root).unwrap();
    std::fs::write(&f.remote_root, b"not a directory").unwrap();
    write_and_flush(&f.tl, 0..10, 0x30).await; // queue was empty: this flush goes through
    assert!(remote.pending_bytes() > 0);
    let stalled = tokio::time::timeout(Duration::from_millis(1500), async {
        write_and_flush(&f.tl, 0..10, 0x40).await;
    })
    .await;
    assert!(stalled.is_err(), "a flush went past a full upload queue");
    assert_eq!(f.tl.durable_lsn(), Lsn(0x20), "the slot may not move past the remote copy");
    // The store comes back: everything is uploaded, the flush finishes.
    std::fs::remove_file(&f.remote_root).unwrap();
    std::fs::create_dir_all(&f.remote_root).unwrap();
    f.tl.freeze_and_flush().await.unwrap();
    assert!(remote.wait_uploaded(Lsn(0x40), Duration::from_secs(30)).await);
    assert_eq!(remote.pending_bytes(), 0);
    assert_eq!(&f.tl.get(Key::MIN.add(3), Lsn(0x40)).await.unwrap()[..], b"3@64");
    f.tl.shutdown(false, Duration::ZERO).await;
}

/// Every object the newest index lists is in the store, and the claim.
async fn assert_complete(f: &Fixture) {
    let (t, tl) = (f.tl.tenant_id, f.tl.timeline_id);
    let ip = download_newest_index(&f.rs, t, tl, Generation(1)).await.unwrap().expect("an index");
    assert!(!ip.layers.is_empty());
    let missing = check_index_objects(&f.rs, t, tl, &ip, SizeCheck::Missing).await.unwrap();
    assert!(missing.is_empty(), "the store lacks {missing:?}");
    assert!(f.remote_root.join(format!("tenants/{t}/generations/00000001")).exists(), "claim");
    let remote = f.tl.remote_client().unwrap();
    assert!(remote.remote_consistency().missing.is_empty());
}

#[tokio::test]
async fn a_lost_store_is_uploaded_again_before_remote_consistent_lsn_advances() {
    let f = fixture("").await;
    for i in 0..3u64 {
        write_and_flush(&f.tl, 0..50, 0x20 + i * 0x10).await;
    }
    let remote = f.tl.remote_client().unwrap().clone();
    assert!(remote.wait_uploaded(Lsn(0x40), Duration::from_secs(10)).await);
    // The bucket is deleted and re-created empty.
    std::fs::remove_dir_all(&f.remote_root).unwrap();
    std::fs::create_dir_all(&f.remote_root).unwrap();
    write_and_flush(&f.tl, 0..50, 0x50).await;
    assert!(remote.wait_uploaded(Lsn(0x50), Duration::from_secs(10)).await);
    assert_complete(&f).await;
    assert_eq!(layer_objects(&f.rs, &f.tl).await.len(), 4, "every layer uploaded again");
    f.tl.shutdown(false, Duration::ZERO).await;
}

#[tokio::test]
async fn a_lost_layer_gone_locally_holds_remote_consistent_lsn() {
    let f = fixture("").await;
    write_and_flush(&f.tl, 0..50, 0x20).await;
    write_and_flush(&f.tl, 0..50, 0x30).await;
    let remote = f.tl.remote_client().unwrap().clone();
    assert!(remote.wait_uploaded(Lsn(0x30), Duration::from_secs(10)).await);
    let first = local_layers(&f.tl).await.into_iter().next().unwrap();
    std::fs::remove_dir_all(&f.remote_root).unwrap();
    std::fs::create_dir_all(&f.remote_root).unwrap();
    std::fs::remove_file(f.tl.dir().join(&first)).unwrap(); // as if evicted
    write_and_flush(&f.tl, 0..50, 0x40).await;
    let r = remote.clone();
    eventually("the loss is noticed", async || !r.remote_consistency().missing.is_empty()).await;
    assert!(!remote.wait_uploaded(Lsn(0x40), Duration::from_millis(1500)).await);
    assert_eq!(remote.remote_consistent_lsn(), Some(Lsn(0x30)), "vouched beyond the store");
    assert_eq!(f.tl.durable_lsn(), Lsn(0x30));
    let missing = remote.remote_consistency().missing;
    let lost = missing.iter().find(|m| m.key.contains(&first));
    assert!(lost.is_some_and(|m| !m.recoverable), "{missing:?} does not name {first} as lost");
    f.tl.shutdown(false, Duration::ZERO).await;
}

#[tokio::test]
async fn a_404_and_the_periodic_check_restore_lost_objects_and_the_claim() {
    for periodic in [false, true] {
        let period = if periodic { Duration::from_millis(200) } else { Duration::from_secs(3600) };
        let f = fixture_checking("", period).await;
        write_and_flush(&f.tl, 0..50, 0x20).await;
        let remote = f.tl.remote_client().unwrap().clone();
        assert!(remote.wait_uploaded(Lsn(0x20), Duration::from_secs(10)).await);
        let name = local_layers(&f.tl).await.into_iter().next().unwrap();
        let key = remote.object_key(&name, Generation(1));
        let t = f.tl.tenant_id;
        std::fs::remove_file(f.remote_root.join(&key)).unwrap();
        std::fs::remove_file(f.remote_root.join(format!("tenants/{t}/generations/00000001")))
            .unwrap();
        if !periodic {
            let layer = crate::tenant::storage_layer::LayerName::parse(&name).unwrap();
            let e = format!("{:#}", remote.download_layer(&layer).await.unwrap_err());
            assert!(e.contains(&key) && e.contains("not found"), "{e}");
        }
        let path = f.remote_root.join(&key);
        eventually("the object is uploaded again", async || path.exists()).await;
        assert!(remote.wait_uploaded(Lsn(0x20), Duration::from_secs(10)).await);
        assert_complete(&f).await;
        f.tl.shutdown(false, Duration::ZERO).await;
    }
}

/// The commit-time segments' objects, sorted.
async fn segment_objects(rs: &RemoteStorage, tl: &Timeline) -> Vec<String> {
    let listed = rs.list(&timeline_prefix(tl.tenant_id, tl.timeline_id)).await.unwrap();
    let names = listed.into_iter().filter_map(|o| {
        let file = o.key.rsplit('/').next()?.to_string();
        matches!(TimelineObject::parse(&file), Some(TimelineObject::CommitTimes(..)))
            .then_some(file)
    });
    let mut v: Vec<_> = names.collect();
    v.sort();
    v
}

/// The segment objects the newest index lists, as object names.
async fn indexed_segments(f: &Fixture) -> Vec<String> {
    let (t, tl) = (f.tl.tenant_id, f.tl.timeline_id);
    let ip = download_newest_index(&f.rs, t, tl, Generation(1)).await.unwrap().expect("an index");
    let ct = ip.commit_times.expect("the index lists the commit-time index");
    ct.segments.iter().map(|(n, s)| format!("{n}-{}", s.generation.suffix())).collect()
}

/// `n` commit times from LSN `from` on, 8 bytes apart, one second each.
fn commits(from: u64, n: u64) -> Vec<crate::tenant::commit_times::CommitTime> {
    let e = |i: u64| crate::tenant::commit_times::CommitTime {
        lsn: Lsn(from + i * 8),
        ts: (from + i * 8) as i64 * 1_000_000,
    };
    (0..n).map(e).collect()
}

#[tokio::test]
async fn commit_time_segments_are_uploaded_listed_replaced_and_deleted_after_gc() {
    let f = fixture("").await;
    let remote = f.tl.remote_client().unwrap().clone();
    let full = crate::tenant::commit_times::MAX_SEGMENT_ENTRIES as u64;
    // Two sealed segments and a tail.
    f.tl.commit_times.record(commits(0x20, 2 * full + 10));
    write_and_flush(&f.tl, 0..10, 0x20 + (2 * full + 10) * 8).await;
    assert!(remote.wait_uploaded(f.tl.get_disk_consistent_lsn(), Duration::from_secs(10)).await);
    let first = indexed_segments(&f).await;
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(segment_objects(&f.rs, &f.tl).await, first);
    // More transactions: a new tail is uploaded, the old one deleted; the
    // sealed ones are not uploaded again.
    let next = 0x20 + (2 * full + 10) * 8 + 8;
    f.tl.commit_times.record(commits(next, 5));
    write_and_flush(&f.tl, 0..10, next + 5 * 8).await;
    assert!(remote.wait_uploaded(Lsn(next + 5 * 8), Duration::from_secs(10)).await);
    let second = indexed_segments(&f).await;
    assert_eq!((second.len(), &second[..2]), (3, &first[..2]), "{second:?}");
    assert_ne!(second[2], first[2]);
    let (rs, tl) = (f.rs.clone(), f.tl.clone());
    let want = second.clone();
    eventually("the old tail deleted", async || segment_objects(&rs, &tl).await == want).await;
    // A lost segment object is uploaded again before remote_consistent_lsn moves.
    std::fs::remove_file(f.remote_root.join(format!(
        "{}/{}",
        timeline_prefix(tl.tenant_id, tl.timeline_id),
        second[1]
    )))
    .unwrap();
    write_and_flush(&f.tl, 0..10, next + 6 * 8).await;
    assert!(remote.wait_uploaded(Lsn(next + 6 * 8), Duration::from_secs(10)).await);
    assert_eq!(segment_objects(&f.rs, &f.tl).await, second, "uploaded again");
    assert_complete(&f).await;
    // GC past both sealed segments: the older one goes, locally and remotely.
    f.tl.gc(Some(0)).await.unwrap();
    let want = second[1..].to_vec();
    let f2 = &f;
    eventually("the index no longer lists the GC'd segment", async || {
        indexed_segments(f2).await == want
    })
    .await;
    eventually("its object deleted", async || segment_objects(&rs, &tl).await == want).await;
    assert_eq!(f.tl.commit_times.stats().1, 1, "one sealed segment left locally");
    f.tl.shutdown(false, Duration::ZERO).await;
}
