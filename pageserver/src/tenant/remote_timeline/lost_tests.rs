//! Lost objects (`lost.rs`): a layer lost from the store after it was
//! evicted is shown as lost, logged once, retried at `check_period` rather
//! than with the short backoff, and the index is complete again once GC
//! removes the layer.

use std::time::{Duration, SystemTime};

use super::upload_tests::{eventually, fixture_checking, local_layers, write_and_flush};
use super::*;
use crate::tenant::timeline::compaction::CompactOptions;

fn modified(path: &std::path::Path) -> SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

#[tokio::test]
async fn a_lost_evicted_layer_is_shown_lost_retried_slowly_and_repaired_by_gc() {
    // The periodic check is off (an hour): a 404 starts the check.
    let f = fixture_checking("", Duration::from_secs(3600)).await;
    write_and_flush(&f.tl, 0..50, 0x20).await;
    write_and_flush(&f.tl, 0..50, 0x30).await;
    // L1 deltas below an image of every key at 0x30.
    let force = CompactOptions { force_l0_compaction: true, force_image_layer_creation: true };
    let report = f.tl.compact(force).await.unwrap();
    assert!(report.image_layers_written >= 1 && report.l1_layers_written >= 1, "{report:?}");
    let remote = f.tl.remote_client().unwrap().clone();
    let dcl = f.tl.get_disk_consistent_lsn();
    assert!(remote.wait_uploaded(dcl, Duration::from_secs(10)).await);
    let is_delta = |n: &String| n.rsplit_once("__").is_some_and(|(_, lsns)| lsns.contains('-'));
    let first = local_layers(&f.tl).await.into_iter().find(is_delta).expect("an L1 delta");
    let key = remote.object_key(&first, Generation(1));
    std::fs::remove_file(f.remote_root.join(&key)).unwrap();
    std::fs::remove_file(f.tl.dir().join(&first)).unwrap(); // as if evicted
    let layer = crate::tenant::storage_layer::LayerName::parse(&first).unwrap();
    assert!(remote.download_layer(&layer).await.is_err(), "the store lost it");
    let r = remote.clone();
    eventually("the loss is noticed", async || r.remote_consistency().lost().count() == 1).await;
    let state = remote.remote_consistency();
    assert_eq!(state.missing.len(), 1, "{state:?}");
    assert!(state.missing[0].key.ends_with(&key) && !state.missing[0].recoverable, "{state:?}");
    assert_eq!(remote.remote_consistent_lsn(), Some(dcl));
    assert!(!remote.wait_uploaded(dcl, Duration::ZERO).await, "vouched for a lost layer");

    // Retrying cannot help: the index is not uploaded again before the
    // check period (the short backoff rewrote it within a second).
    let index = f.remote_root.join(index_key(f.tl.tenant_id, f.tl.timeline_id, Generation(1)));
    let before = modified(&index);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(modified(&index), before, "the index was uploaded again within the backoff");
    assert_eq!(remote.remote_consistency().lost().count(), 1);

    // A newer image covers its keys and GC's cutoff passes it: GC removes
    // it from the manifest, and the next index, not listing it, is complete.
    let report = f.tl.gc(Some(0)).await.unwrap();
    assert!(report.layers_removed >= 1, "{report:?}");
    assert!(!local_layers(&f.tl).await.contains(&first), "GC kept the lost layer");
    let dcl = f.tl.get_disk_consistent_lsn();
    assert!(remote.wait_uploaded(dcl, Duration::from_secs(10)).await, "not complete after GC");
    assert_eq!(
        remote.remote_consistency(),
        client::RemoteConsistency { lsn: Some(dcl), missing: vec![] }
    );
    f.tl.shutdown(false, Duration::ZERO).await;
}
