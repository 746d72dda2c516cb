//! Eviction runs over timelines whose layers are in remote storage (a local
//! directory): least recently used first, within the budget, only uploaded
//! layers; the free-space limit; tenants without remote storage; the loop.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::tenant::timeline::residency::testing::*;

/// Read every page of layer `l` (of `write_disjoint_layers`).
async fn read_layer(tl: &Timeline, l: u32) {
    for k in l * KEYS_PER_LAYER..(l + 1) * KEYS_PER_LAYER {
        check_page(tl, l, k).await;
    }
}

/// The layer of `tl` holding layer `l`'s LSN.
fn layer_of(tl: &Timeline, l: u32) -> Arc<Layer> {
    let layers = tl.historic_layers();
    let holding = layers.iter().find(|x| x.name.lsn_range.contains(&lsn_of(l)));
    holding.expect("a layer holds the LSN").clone()
}

fn budget(max_resident_bytes: Option<u64>, min_avail_bytes: Option<u64>) -> EvictionConf {
    EvictionConf { max_resident_bytes, min_avail_bytes, period: Duration::from_secs(1) }
}

#[tokio::test]
async fn the_least_recently_used_uploaded_layers_go_first_and_the_budget_holds() {
    let rt = disjoint_remote_timeline(5).await;
    let tl = rt.load().await;
    // Layer 5 is the least recently used, but not uploaded (the store is down).
    rt.store_down();
    write_disjoint_layers(&tl, 5, 1).await;
    for l in [3, 0, 4, 1, 2] {
        tokio::time::sleep(Duration::from_millis(2)).await;
        read_layer(&tl, l).await;
    }
    let size = |l| layer_of(&tl, l).file_size;
    let total = tl.resident_bytes();
    let max = total - size(3) - size(0) / 2; // layers 3 and 0 must go
    let before = EVICTIONS.get();
    let report = evict_timelines_to_budget(
        std::slice::from_ref(&tl),
        &budget(Some(max), None),
        rt.root.path(),
    )
    .await;
    assert_eq!(report.resident_bytes_before, total);
    assert_eq!(report.bytes_to_free, total - max);
    assert_eq!((report.layers_evicted, report.bytes_evicted), (2, size(3) + size(0)));
    assert!(report.within_budget && report.layers_skipped == 0, "{report:?}");
    assert!(EVICTIONS.get() - before >= 2, "counted");
    let resident: Vec<bool> = (0..6).map(|l| layer_of(&tl, l).is_resident()).collect();
    assert_eq!(resident, [false, true, true, false, true, true]);
    assert!(tl.resident_bytes() <= max);
    // Evicted layers read again (downloaded).
    rt.store_up();
    read_layer(&tl, 3).await;
    read_layer(&tl, 0).await;
    tl.shutdown(false, Duration::ZERO).await;
}

#[tokio::test]
async fn within_budget_nothing_is_evicted() {
    let rt = disjoint_remote_timeline(2).await;
    let tl = rt.load().await;
    let total = tl.resident_bytes();
    let report = evict_timelines_to_budget(
        std::slice::from_ref(&tl),
        &budget(Some(total), Some(1)),
        rt.root.path(),
    )
    .await;
    assert!(report.avail_bytes_before.is_some_and(|b| b > 1), "{report:?}");
    assert_eq!((report.bytes_to_free, report.layers_evicted), (0, 0));
    assert!(report.within_budget);
    assert_eq!(tl.resident_bytes(), total);
    tl.shutdown(false, Duration::ZERO).await;
}

#[tokio::test]
async fn a_file_system_short_of_space_evicts_every_evictable_layer() {
    let rt = disjoint_remote_timeline(3).await;
    let tl = rt.load().await;
    rt.store_down();
    write_disjoint_layers(&tl, 3, 1).await; // not uploaded
    let report = evict_timelines_to_budget(
        std::slice::from_ref(&tl),
        &budget(None, Some(u64::MAX)),
        rt.root.path(),
    )
    .await;
    assert_eq!(report.layers_evicted, 3);
    assert!(!report.within_budget, "the file system cannot free that much");
    let resident: Vec<String> = tl.resident_layers().iter().map(|l| l.name.to_string()).collect();
    assert_eq!(resident, vec![layer_of(&tl, 3).name.to_string()]);
    rt.store_up();
    for l in 0..4 {
        read_layer(&tl, l).await;
    }
    tl.shutdown(false, Duration::ZERO).await;
}

/// Tenants without remote storage: nothing is evictable.
#[tokio::test]
async fn layers_without_remote_storage_stay() {
    let root = tempfile::tempdir().unwrap();
    let (mgr, tl) = new_timeline(root.path()).await;
    write_disjoint_layers(&tl, 0, 2).await;
    let total = tl.resident_bytes();
    assert!(total > 0);
    let report = evict_to_budget(&mgr.list_tenants(), &budget(Some(0), None), root.path()).await;
    assert_eq!((report.resident_bytes_before, report.bytes_to_free), (total, total));
    assert_eq!(report.layers_evicted, 0);
    assert!(!report.within_budget);
    assert_eq!(tl.resident_bytes(), total);
    mgr.shutdown().await;
}

#[tokio::test]
async fn the_loop_runs_only_when_configured_and_stops_on_cancel() {
    let root = tempfile::tempdir().unwrap();
    let (mgr, _tl) = new_timeline(root.path()).await;
    let dir = root.path().to_path_buf();
    let cancel = CancellationToken::new();
    for off in
        [EvictionConf { period: Duration::ZERO, ..budget(Some(0), None) }, budget(None, None)]
    {
        assert!(spawn_eviction_loop(mgr.clone(), off, dir.clone(), cancel.clone()).is_none());
    }
    let on = EvictionConf { period: Duration::from_millis(5), ..budget(Some(0), None) };
    let task = spawn_eviction_loop(mgr.clone(), on, dir, cancel.clone()).expect("spawned");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!task.is_finished());
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
    mgr.shutdown().await;
}
