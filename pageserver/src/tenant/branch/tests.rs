//! Branches on real files: reads fall through to the ancestor (and its
//! ancestor), GC and compaction of the ancestor keep the branch points,
//! restarts load ancestors first, and each refusal names what was wrong.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::mgr::TenantManager;
use super::super::timeline::compaction::CompactOptions;
use super::super::value::{image, Record, Value};
use super::super::{StorageConf, TenantError, Timeline};

const K1: Key = Key::MIN;

fn k2() -> Key {
    Key::MIN.add(1)
}

fn append(b: &'static [u8]) -> Value {
    Value::Record(Record::Test { append: Bytes::from_static(b), will_init: false })
}

/// Write `values` at `lsn` and flush.
async fn write(tl: &Timeline, lsn: u64, values: &[(Key, Value)]) {
    let mut w = tl.writer().await;
    for (k, v) in values {
        w.put(*k, Lsn(lsn), v).await.unwrap();
    }
    w.finish_write(Lsn(lsn));
    drop(w);
    tl.freeze_and_flush().await.unwrap();
}

async fn get(tl: &Timeline, key: Key, lsn: u64) -> Vec<u8> {
    tl.get(key, Lsn(lsn)).await.unwrap_or_else(|e| panic!("{key} at {lsn:#x}: {e}")).to_vec()
}

fn conf(dir: &tempfile::TempDir) -> Arc<StorageConf> {
    let mut conf = StorageConf::for_tests(dir.path());
    conf.compaction.compaction_threshold = 2;
    conf.compaction.compaction_period = Duration::ZERO;
    conf.compaction.gc_period = Duration::ZERO;
    (conf.compaction.pitr_interval, conf.compaction.gc_horizon) = (Duration::ZERO, 0);
    Arc::new(conf)
}

/// An ancestor with K1 = "a1" at 0x18 and "a2" at 0x28, K2 = "b" at 0x18
/// and "b+" at 0x28; a branch at 0x20 that appends "!" to K2 at 0x30.
async fn ancestor_and_branch(
    mgr: &TenantManager,
) -> (Arc<super::Tenant>, Arc<Timeline>, Arc<Timeline>) {
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let main = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    write(&main, 0x18, &[(K1, image(b"a1")), (k2(), image(b"b"))]).await;
    write(&main, 0x20, &[]).await;
    write(&main, 0x28, &[(K1, image(b"a2")), (k2(), append(b"+"))]).await;
    let branch = t.create_branch(TimelineId::generate(), main.timeline_id, Some(Lsn(0x20)));
    let branch = branch.await.unwrap();
    assert_eq!(branch.get_last_record_lsn(), Lsn(0x20));
    write(&branch, 0x30, &[(k2(), append(b"!"))]).await;
    (t, main, branch)
}

async fn check_reads(main: &Timeline, branch: &Timeline) {
    assert_eq!(get(branch, K1, 0x30).await, b"a1", "an untouched key is the ancestor's at 0x20");
    assert_eq!(get(branch, k2(), 0x30).await, b"b!", "a record on the ancestor's page");
    assert_eq!(get(branch, k2(), 0x20).await, b"b");
    assert_eq!(get(main, K1, 0x28).await, b"a2");
    assert_eq!(get(main, k2(), 0x28).await, b"b+");
}

#[tokio::test]
async fn reads_fall_through_to_the_ancestor_at_the_branch_point() {
    let dir = tempfile::tempdir().unwrap();
    let mgr = TenantManager::load(conf(&dir), CancellationToken::new()).await.unwrap();
    let (t, main, branch) = ancestor_and_branch(&mgr).await;
    check_reads(&main, &branch).await;
    assert_eq!(
        branch.ancestor().map(|(a, lsn)| (a.timeline_id, lsn)),
        Some((main.timeline_id, Lsn(0x20)))
    );
    // A branch of the branch at 0x30 reads through both.
    let grandchild = t.create_branch(TimelineId::generate(), branch.timeline_id, None).await;
    let grandchild = grandchild.unwrap();
    assert_eq!(grandchild.get_initial_lsn(), Lsn(0x30));
    write(&grandchild, 0x38, &[(K1, append(b"?"))]).await;
    assert_eq!(get(&grandchild, K1, 0x38).await, b"a1?");
    assert_eq!(get(&grandchild, k2(), 0x38).await, b"b!");
    // A key nobody has is missing, naming the request LSN.
    let e = grandchild.get(Key::MIN.add(9), Lsn(0x38)).await.unwrap_err().to_string();
    assert!(e.contains("no value at or below LSN 0/38"), "{e}");
    mgr.shutdown().await;
}

/// Compaction, forced images and GC with no horizon on the ancestor keep
/// the versions at the branch point; the cutoff stops there.
#[tokio::test]
async fn gc_and_compaction_of_the_ancestor_keep_the_branch_point() {
    let dir = tempfile::tempdir().unwrap();
    let mgr = TenantManager::load(conf(&dir), CancellationToken::new()).await.unwrap();
    let (_t, main, branch) = ancestor_and_branch(&mgr).await;
    write(&main, 0x40, &[(K1, image(b"a3"))]).await;
    let opts = CompactOptions { force_l0_compaction: true, force_image_layer_creation: true };
    let report = main.compact(opts).await.unwrap();
    assert!(report.image_layers_written > 0, "{report:?}");
    let gc = main.gc(Some(0)).await.unwrap();
    assert_eq!(gc.gc_cutoff, Lsn(0x20), "GC stops at the branch point");
    check_reads(&main, &branch).await;
    // Without the branch, the cutoff moves on.
    mgr.get_tenant(main.tenant_id).unwrap().delete_timeline(branch.timeline_id).await.unwrap();
    assert!(main.branch_points().is_empty());
    assert_eq!(main.gc(Some(0)).await.unwrap().gc_cutoff, Lsn(0x40));
    mgr.shutdown().await;
}

/// A restart loads the ancestor before the branch (whatever the directory
/// order), reads agree, and deleting the ancestor is refused naming the
/// branch; an ancestor missing on disk makes the branch Broken, naming it.
#[tokio::test]
async fn restart_loads_ancestors_first_and_delete_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mgr = TenantManager::load(conf(&dir), CancellationToken::new()).await.unwrap();
    let (t, main, branch) = ancestor_and_branch(&mgr).await;
    let (tid, mid, bid) = (t.id(), main.timeline_id, branch.timeline_id);
    drop((t, main, branch));
    mgr.shutdown().await;
    let mgr = TenantManager::load(conf(&dir), CancellationToken::new()).await.unwrap();
    let (main, branch) = (mgr.get_timeline(tid, mid).unwrap(), mgr.get_timeline(tid, bid).unwrap());
    check_reads(&main, &branch).await;
    assert_eq!(main.branch_points(), vec![(bid, Lsn(0x20))]);
    assert_eq!(main.gc(Some(0)).await.unwrap().gc_cutoff, Lsn(0x20));
    let t = mgr.get_tenant(tid).unwrap();
    let e = t.delete_timeline(mid).await.unwrap_err();
    assert!(
        matches!(e, TenantError::Conflict(_)) && e.to_string().contains(&bid.to_string()),
        "{e}"
    );
    check_reads(&main, &branch).await;
    drop((t, main, branch));
    mgr.shutdown().await;
    // The ancestor gone by hand: the branch is Broken, naming it.
    std::fs::remove_dir_all(dir.path().join(format!("tenants/{tid}/timelines/{mid}"))).unwrap();
    let mgr = TenantManager::load(conf(&dir), CancellationToken::new()).await.unwrap();
    let t = mgr.get_tenant(tid).unwrap();
    let broken = t.list_broken_timelines();
    assert_eq!(broken.len(), 1);
    assert!(broken[0].1.contains(&format!("ancestor timeline {mid} is missing")), "{broken:?}");
    mgr.shutdown().await;
}

/// Each refusal names what was wrong, and leaves nothing behind.
#[tokio::test]
async fn bad_branches_are_refused_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let mgr = TenantManager::load(conf(&dir), CancellationToken::new()).await.unwrap();
    let (t, main, branch) = ancestor_and_branch(&mgr).await;
    let new = TimelineId::generate;
    let unknown = TimelineId::generate();
    let cases: Vec<(Result<Arc<Timeline>, TenantError>, String)> = vec![
        (
            t.create_branch(new(), unknown, None).await,
            format!("ancestor timeline {}/{unknown} not found", t.id()),
        ),
        (
            t.create_branch(new(), main.timeline_id, Some(Lsn(0x29))).await,
            "above what ancestor".into(),
        ),
        (
            t.create_branch(new(), main.timeline_id, Some(Lsn(0x8))).await,
            "first readable LSN 0/10".into(),
        ),
        (t.create_branch(new(), main.timeline_id, Some(Lsn(0))).await, "0/0".into()),
        (
            t.create_branch(branch.timeline_id, main.timeline_id, None).await,
            "already exists".into(),
        ),
    ];
    for (r, want) in cases {
        let e = r.err().expect("refused").to_string();
        assert!(e.contains(&want), "{e} (wanted {want})");
    }
    // Below the GC cutoff of the ancestor (raised after the branch is gone).
    write(&main, 0x40, &[(K1, image(b"a3"))]).await;
    t.delete_timeline(branch.timeline_id).await.unwrap();
    assert_eq!(main.gc(Some(0)).await.unwrap().gc_cutoff, Lsn(0x40));
    let e = t.create_branch(new(), main.timeline_id, Some(Lsn(0x30))).await.err().unwrap();
    assert!(e.to_string().contains("below the timeline's GC cutoff 0/40"), "{e}");
    assert_eq!(t.list_timelines().len(), 1, "nothing left behind");
    assert!(main.branch_points().is_empty());
    let listing = std::fs::read_dir(dir.path().join(format!("tenants/{}/timelines", t.id())));
    assert_eq!(listing.unwrap().count(), 1);
    mgr.shutdown().await;
}

/// `get_lsn_by_timestamp` on a branch: its own transactions, then the
/// ancestor's at or below the branch point (never one above it) decide the
/// answer, and the answer is an LSN the branch restores: at least its
/// branch point.
#[tokio::test]
async fn commit_time_lookups_search_the_ancestor_below_the_branch_point() {
    use super::super::commit_times::{CommitTime, LsnForTimestamp::*};
    let dir = tempfile::tempdir().unwrap();
    let mgr = TenantManager::load(conf(&dir), CancellationToken::new()).await.unwrap();
    let (t, main, branch) = ancestor_and_branch(&mgr).await;
    let ct = |lsn: u64, ts: i64| CommitTime { lsn: Lsn(lsn), ts };
    main.commit_times.record([ct(0x18, 100), ct(0x28, 300)]);
    branch.commit_times.record([ct(0x30, 400)]);
    let bp = Lsn(0x20);
    assert_eq!(branch.lookup_min_lsn(), bp, "the branch restores from its branch point");
    let (m, b) = (&main, &branch);
    // After the ancestor's 0x18 and before the branch's 0x30: the branch
    // point holds exactly those transactions.
    assert_eq!(b.lsn_for_timestamp(150).await.unwrap(), Present(bp));
    // The ancestor's 0x28 (at 300) is above the branch point: not the branch's.
    assert_eq!(b.lsn_for_timestamp(350).await.unwrap(), Present(bp));
    assert_eq!(m.lsn_for_timestamp(350).await.unwrap(), Future(Lsn(0x28)));
    assert_eq!(b.lsn_for_timestamp(450).await.unwrap(), Future(Lsn(0x30)));
    // Before the ancestor's 0x18: the branch point already holds a later
    // transaction, so the moment is the ancestor's to restore.
    assert_eq!(b.lsn_for_timestamp(50).await.unwrap(), Past(bp));
    assert_eq!(m.lsn_for_timestamp(50).await.unwrap(), Past(main.lookup_min_lsn()));
    assert_eq!(b.timestamp_of_lsn(Lsn(0x20)).await.unwrap(), Some(100));
    assert_eq!(b.timestamp_of_lsn(Lsn(0x2f)).await.unwrap(), Some(100), "not the ancestor's 300");
    assert_eq!(b.timestamp_of_lsn(Lsn(0x30)).await.unwrap(), Some(400));
    assert_eq!(b.timestamp_of_lsn(Lsn(0x17)).await.unwrap(), None);
    // A branch of the branch at 0x30, without transactions of its own.
    let sub = t.create_branch(TimelineId::generate(), branch.timeline_id, Some(Lsn(0x30)));
    let sub = sub.await.unwrap();
    assert_eq!(sub.lsn_for_timestamp(350).await.unwrap(), Past(Lsn(0x30)), "0x30 ended at 400");
    assert_eq!(sub.lsn_for_timestamp(i64::MAX).await.unwrap(), Future(Lsn(0x30)));
    assert_eq!(sub.timestamp_of_lsn(Lsn(0x29)).await.unwrap(), Some(100));
}
