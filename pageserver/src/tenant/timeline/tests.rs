//! Start-up against the manifest: missing, resized, unlisted and corrupt
//! layer files, a version-2 manifest, and the GC cutoff across a restart,
//! on real files.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::mgr::TenantManager;
use super::super::value::image;
use super::super::StorageConf;

/// A timeline with two L0 files (values at 0x18 and 0x28), shut down.
/// Returns the workdir, ids, and the L0 paths oldest first.
async fn two_layers() -> (tempfile::TempDir, TenantId, TimelineId, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    for (lsn, v) in [(0x18, b"old"), (0x28, b"new")] {
        let mut w = tl.writer().await;
        w.put(Key::MIN, Lsn(lsn), &image(v)).await.unwrap();
        w.finish_write(Lsn(lsn));
        drop(w);
        tl.freeze_and_flush().await.unwrap();
    }
    let paths: Vec<PathBuf> =
        tl.layers.read().unwrap().historic().l0_layers().map(|l| l.path.clone()).collect();
    assert_eq!(paths.len(), 2);
    let ids = (t.id(), tl.timeline_id);
    mgr.shutdown().await;
    (dir, ids.0, ids.1, paths)
}

/// The reason the (only) timeline is Broken after a start-up on `dir`; its
/// reads are refused with that reason.
async fn load_error(dir: &tempfile::TempDir) -> String {
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.expect("start-up succeeds");
    assert!(mgr.list_broken().is_empty(), "the tenant itself loads");
    let tenant = mgr.list_tenants().pop().expect("one tenant");
    let Some((id, reason)) = tenant.list_broken_timelines().into_iter().next() else {
        panic!("start-up accepted a damaged timeline");
    };
    let err = mgr.get_timeline(tenant.id(), id).err().expect("a broken timeline is not served");
    assert!(err.to_string().contains(&reason), "{err}");
    reason
}

#[tokio::test]
async fn intact_layers_load_and_serve_the_newest_value() {
    let (dir, t, tl, _) = two_layers().await;
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tl = mgr.get_timeline(t, tl).unwrap();
    assert_eq!(&tl.get(Key::MIN, Lsn(0x28)).await.unwrap()[..], b"new");
    assert_eq!(&tl.get(Key::MIN, Lsn(0x20)).await.unwrap()[..], b"old");
}

#[tokio::test]
async fn deleted_newest_layer_is_an_error_naming_it() {
    let (dir, _, _, paths) = two_layers().await;
    std::fs::remove_file(&paths[1]).unwrap();
    let err = load_error(&dir).await;
    let name = paths[1].file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name) && err.contains("missing"), "{err}");
}

#[tokio::test]
async fn deleted_only_layer_is_an_error_naming_it() {
    let (dir, _, _, paths) = two_layers().await;
    std::fs::remove_file(&paths[0]).unwrap();
    std::fs::remove_file(&paths[1]).unwrap();
    let err = load_error(&dir).await;
    let name = paths[0].file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name) && err.contains("missing"), "{err}");
}

#[tokio::test]
async fn resized_layer_is_an_error_naming_it() {
    let (dir, _, _, paths) = two_layers().await;
    let f = std::fs::OpenOptions::new().append(true).open(&paths[0]).unwrap();
    f.set_len(f.metadata().unwrap().len() + 512).unwrap();
    let err = load_error(&dir).await;
    let name = paths[0].file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name) && err.contains("the manifest says"), "{err}");
}

#[tokio::test]
async fn unlisted_layer_is_removed_as_a_leftover() {
    let (dir, t, tl, paths) = two_layers().await;
    // A flush that renamed its L0 but crashed before the manifest update.
    let stray = paths[1].with_file_name(
        "000000000000000000000000000000000000-FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF__0000000000000029-0000000000000030",
    );
    std::fs::copy(&paths[1], &stray).unwrap();
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    assert!(!stray.exists(), "an unlisted layer is not trusted");
    let tl = mgr.get_timeline(t, tl).unwrap();
    assert_eq!(&tl.get(Key::MIN, Lsn(0x28)).await.unwrap()[..], b"new");
}

#[tokio::test]
async fn a_flipped_value_byte_is_an_error_naming_the_layer() {
    let (dir, t, tl, paths) = two_layers().await;
    // The first value of the newest L0 starts right after its 4 KiB header block.
    let mut bytes = std::fs::read(&paths[1]).unwrap();
    bytes[4096 + 3] ^= 0xff;
    std::fs::write(&paths[1], &bytes).unwrap();
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tl = mgr.get_timeline(t, tl).unwrap();
    let before = crate::metrics::storage::LAYER_CORRUPTION_ERRORS.get();
    let err = tl.get(Key::MIN, Lsn(0x28)).await.unwrap_err();
    assert!(crate::metrics::storage::LAYER_CORRUPTION_ERRORS.get() > before, "counted");
    let name = paths[1].file_name().unwrap().to_str().unwrap();
    assert!(
        matches!(&err, super::super::PageReconstructError::CorruptValue { layer, .. } if layer == name),
        "{err}"
    );
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    // The older version, in the intact layer, still reads.
    assert_eq!(&tl.get(Key::MIN, Lsn(0x20)).await.unwrap()[..], b"old");
}

/// The metadata file of the (only) timeline under `dir`.
fn metadata_path(paths: &[PathBuf]) -> PathBuf {
    paths[0].with_file_name(crate::tenant::metadata::METADATA_FILE)
}

fn read_manifest(path: &std::path::Path) -> crate::tenant::metadata::TimelineMetadata {
    use crate::tenant::metadata::{Decoded, TimelineMetadata};
    match TimelineMetadata::decode(&std::fs::read(path).unwrap()).unwrap() {
        Decoded::Manifest(md) => md,
        Decoded::V1(_) => panic!("a version-1 file"),
    }
}

#[tokio::test]
async fn version_2_and_3_manifests_load_and_the_next_write_is_version_4() {
    for v3 in [false, true] {
        older_manifest_loads(v3).await;
    }
}

/// A timeline whose manifest is version 2 (or 3) loads, serves, and its
/// next manifest write is version 4 (without an ancestor).
async fn older_manifest_loads(v3: bool) {
    let (dir, t, tl, paths) = two_layers().await;
    let path = metadata_path(&paths);
    let md = read_manifest(&path);
    assert!(!md.lsn_by_time.samples().is_empty(), "each manifest write records a sample");
    assert!(md.layers.iter().all(|l| l.level == crate::tenant::storage_layer::LayerLevel::L0));
    std::fs::write(&path, if v3 { md.encode_v3() } else { md.encode_v2() }).unwrap();

    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tl = mgr.get_timeline(t, tl).unwrap();
    assert_eq!(tl.layer_stats().files.l0_layers, 2);
    assert_eq!(&tl.get(Key::MIN, Lsn(0x20)).await.unwrap()[..], b"old");
    let mut w = tl.writer().await;
    w.put(Key::MIN, Lsn(0x38), &image(b"newer")).await.unwrap();
    w.finish_write(Lsn(0x38));
    drop(w);
    tl.freeze_and_flush().await.unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 4);
    let md = read_manifest(&path);
    assert_eq!(md.ancestor(), None);
    assert_eq!((md.layers.len(), md.disk_consistent_lsn), (3, Lsn(0x38)));
    assert_eq!(md.lsn_by_time.samples().last().unwrap().1, Lsn(0x38));
    assert_eq!(
        tl.lsn_at_or_before(std::time::SystemTime::now() + Duration::from_secs(2)),
        Some(Lsn(0x38))
    );
    mgr.shutdown().await;
}

#[tokio::test]
async fn reads_and_leases_below_the_gc_cutoff_are_refused_after_restart_too() {
    use super::super::PageReconstructError;
    use super::{LeaseError, LsnNotReadable};
    let (dir, t, tl_id, paths) = two_layers().await;
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tl = mgr.get_timeline(t, tl_id).unwrap();
    let now = std::time::SystemTime::now();
    assert_eq!(tl.gc_cutoff(), Lsn(0));
    assert_eq!(tl.set_gc_cutoff(Lsn(0x20), now).await, Lsn(0x20));
    assert_eq!(tl.set_gc_cutoff(Lsn(0x18), now).await, Lsn(0x20), "never lowered");
    let err = tl.check_lsn_readable(Lsn(0x1f)).unwrap_err();
    assert!(matches!(err, LsnNotReadable::GarbageCollected { gc_cutoff: Lsn(0x20), .. }), "{err}");
    assert!(err.to_string().contains("GC cutoff 0/20"), "{err}");
    tl.check_lsn_readable(Lsn(0x20)).unwrap();
    let err = tl.get(Key::MIN, Lsn(0x1f)).await.unwrap_err();
    assert!(matches!(err, PageReconstructError::GarbageCollected { .. }), "{err}");
    assert_eq!(&tl.get(Key::MIN, Lsn(0x20)).await.unwrap()[..], b"old");
    let err = tl.lease_lsn(Lsn(0x1f)).await.unwrap_err();
    assert!(matches!(err, LeaseError::BelowHistory { floor: Lsn(0x20), .. }), "{err}");
    // A valid lease holds the cutoff down.
    tl.lease_lsn(Lsn(0x24)).await.unwrap();
    assert_eq!(tl.set_gc_cutoff(Lsn(0x30), now).await, Lsn(0x24));
    tl.persist_manifest().await.unwrap();
    assert_eq!(read_manifest(&metadata_path(&paths)).gc_cutoff, Lsn(0x24));
    mgr.shutdown().await;

    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tl = mgr.get_timeline(t, tl_id).unwrap();
    assert_eq!(tl.gc_cutoff(), Lsn(0x24));
    let err = tl.get(Key::MIN, Lsn(0x23)).await.unwrap_err();
    assert!(err.to_string().contains("GC cutoff 0/24"), "{err}");
    assert_eq!(&tl.get(Key::MIN, Lsn(0x28)).await.unwrap()[..], b"new");
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_corrupt_index_block_is_an_error_naming_the_layer() {
    let dir = tempfile::tempdir().unwrap();
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf.clone(), CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    // 300 keys: two leaves (240 entries each at most) and a root, in that order at the end.
    let mut w = tl.writer().await;
    for i in 0..300 {
        w.put(Key::MIN.add(i), Lsn(0x18), &image(b"v")).await.unwrap();
    }
    w.finish_write(Lsn(0x18));
    drop(w);
    tl.freeze_and_flush().await.unwrap();
    let path = tl.layers.read().unwrap().historic().l0_layers().next().unwrap().path.clone();
    let ids = (t.id(), tl.timeline_id);
    mgr.shutdown().await;
    let mut bytes = std::fs::read(&path).unwrap();
    let second_leaf = bytes.len() - 2 * 8192;
    bytes[second_leaf + 100] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();

    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tl = mgr.get_timeline(ids.0, ids.1).unwrap();
    let before = crate::metrics::storage::LAYER_CORRUPTION_ERRORS.get();
    let err = tl.get(Key::MIN.add(250), Lsn(0x18)).await.unwrap_err();
    assert!(crate::metrics::storage::LAYER_CORRUPTION_ERRORS.get() > before, "counted");
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(
        matches!(&err, super::super::PageReconstructError::LayerIndex { layer, .. } if layer == name),
        "{err}"
    );
    assert!(err.to_string().contains("index block 1 is corrupt"), "{err}");
    // Keys of the intact leaf still read.
    assert_eq!(&tl.get(Key::MIN.add(5), Lsn(0x18)).await.unwrap()[..], b"v");
}

/// With background compaction on, flushes wait once the L0 count reaches
/// the stall threshold, so it is never passed; compaction catches up and
/// every value still reads back.
#[tokio::test]
async fn l0_backpressure_keeps_the_l0_count_at_the_stall_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let mut conf = StorageConf::for_tests(dir.path());
    conf.compaction.compaction_threshold = 2;
    conf.compaction.l0_flush_delay_threshold = 3;
    conf.compaction.l0_flush_stall_threshold = 4;
    // Rarely on its own: flushes at the thresholds wake it.
    conf.compaction.compaction_period = Duration::from_secs(3600);
    let conf = Arc::new(conf);
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    let waited = || {
        let m = &crate::metrics::compaction::FLUSH_DELAY_SECONDS;
        m.with_label_values(&["delay"]).get() + m.with_label_values(&["stall"]).get()
    };
    let waited_before = waited();
    // Hold compaction off for a while (as a slow compaction would), so the
    // L0 count reaches the thresholds whatever the machine's speed.
    let (held, hold) = tokio::sync::oneshot::channel();
    let holder = tl.clone();
    tokio::spawn(async move {
        let _maintenance = holder.maintenance.lock().await;
        let _ = held.send(());
        tokio::time::sleep(Duration::from_millis(1500)).await;
    });
    hold.await.unwrap();
    let mut max_l0 = 0;
    for i in 0..16u64 {
        let lsn = Lsn(0x20 + i * 0x10);
        let mut w = tl.writer().await;
        w.put(Key::MIN.add(i as u32), lsn, &image(&i.to_le_bytes())).await.unwrap();
        w.finish_write(lsn);
        drop(w);
        tl.freeze_and_flush().await.unwrap();
        max_l0 = max_l0.max(tl.layer_stats().files.l0_layers);
    }
    assert!(max_l0 <= 4, "the L0 count reached {max_l0}, above the stall threshold 4");
    assert!(waited() > waited_before, "no flush waited on the L0 count");
    assert!(tl.layer_stats().files.l1_layers > 0, "compaction ran");
    for i in 0..16u64 {
        let got = tl.get(Key::MIN.add(i as u32), Lsn(0x20 + 15 * 0x10)).await.unwrap();
        assert_eq!(&got[..], &i.to_le_bytes());
    }
    mgr.shutdown().await;
}

/// `pitr_interval` holds GC back while the LSN-by-time record does not
/// reach that far into the past; with it at zero, `gc_horizon` decides.
#[tokio::test]
async fn pitr_interval_keeps_history_younger_than_it() {
    for (pitr, expect_cutoff) in [(Duration::from_secs(3600), false), (Duration::ZERO, true)] {
        let dir = tempfile::tempdir().unwrap();
        let mut conf = StorageConf::for_tests(dir.path());
        (conf.compaction.pitr_interval, conf.compaction.gc_horizon) = (pitr, 0);
        conf.compaction.compaction_period = Duration::ZERO;
        let mgr = TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap();
        let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
        let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
        let mut w = tl.writer().await;
        w.put(Key::MIN, Lsn(0x20), &image(b"v")).await.unwrap();
        w.finish_write(Lsn(0x20));
        drop(w);
        tl.freeze_and_flush().await.unwrap();
        let report = tl.gc(None).await.unwrap();
        let want = if expect_cutoff { Lsn(0x20) } else { Lsn(0) };
        assert_eq!(report.gc_cutoff, want, "pitr_interval {pitr:?}");
        assert_eq!(&tl.get(Key::MIN, Lsn(0x20)).await.unwrap()[..], b"v");
        mgr.shutdown().await;
    }
}

/// `PREV LSN` of recent batch ends stays known while more WAL arrives, so
/// two base backups at the same LSN agree; unknown LSNs and a restarted
/// stream (an end not above the last) answer `None`.
#[tokio::test]
async fn prev_record_lsn_remembers_recent_batch_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mgr =
        TenantManager::load(Arc::new(StorageConf::for_tests(dir.path())), CancellationToken::new())
            .await
            .unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    assert_eq!(tl.prev_record_lsn(Lsn(0x100)), None);
    for i in 1..=10_000u64 {
        tl.set_last_record(Lsn(i * 0x100), Lsn(i * 0x100 - 0x18));
    }
    assert_eq!(tl.prev_record_lsn(Lsn(10_000 * 0x100)), Some(Lsn(10_000 * 0x100 - 0x18)));
    assert_eq!(tl.prev_record_lsn(Lsn(9_000 * 0x100)), Some(Lsn(9_000 * 0x100 - 0x18)));
    assert_eq!(tl.prev_record_lsn(Lsn(9_000 * 0x100 + 8)), None, "not a batch end");
    assert_eq!(tl.prev_record_lsn(Lsn(0x100)), None, "forgotten: older than the window");
    tl.set_last_record(Lsn(0x200), Lsn(0x1e8));
    assert_eq!(tl.prev_record_lsn(Lsn(10_000 * 0x100)), None, "a new stream starts over");
    assert_eq!(tl.prev_record_lsn(Lsn(0x200)), Some(Lsn(0x1e8)));
    mgr.shutdown().await;
}
