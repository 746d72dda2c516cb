//! Leases on real timelines: what is granted or refused, what a restart
//! keeps, and that a damaged lease file breaks only its own timeline.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::LeaseError;
use super::{LEASES_FILE, WRITE_AHEAD_DIVISOR};
use crate::tenant::mgr::TenantManager;
use crate::tenant::StorageConf;

const INITIAL: Lsn = Lsn(0x1000);

async fn start(dir: &tempfile::TempDir, lease_length: Duration) -> Arc<TenantManager> {
    let mut conf = StorageConf::for_tests(dir.path());
    conf.lsn_lease_length = lease_length;
    TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap()
}

#[tokio::test]
async fn grants_refusals_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mgr = start(&dir, Duration::from_secs(600)).await;
    let (t, id) = (TenantId::generate(), TimelineId::generate());
    let tl =
        mgr.create_tenant(t).await.unwrap().create_empty_timeline(id, INITIAL, 16).await.unwrap();

    let before = SystemTime::now();
    let lease = tl.lease_lsn(INITIAL).await.unwrap();
    let after = SystemTime::now();
    // `valid_until` is the lease's own now plus the length and the
    // write-ahead (`lease.rs`, point 2), to the whole millisecond below.
    let ms = Duration::from_millis(1);
    let length = Duration::from_secs(600) * (WRITE_AHEAD_DIVISOR + 1) / WRITE_AHEAD_DIVISOR;
    let granted = before + length - ms..=after + length;
    assert!(granted.contains(&lease.valid_until), "{:?} not in {granted:?}", lease.valid_until);
    // Above last_record_lsn is granted (see `lease_lsn`).
    let ahead = Lsn(0x9000_0000);
    assert!(ahead > tl.get_last_record_lsn());
    tl.lease_lsn(ahead).await.unwrap();
    let renewed = tl.lease_lsn(INITIAL).await.unwrap();
    assert!(renewed >= lease);

    let err = tl.lease_lsn(Lsn(INITIAL.0 - 1)).await.unwrap_err();
    assert!(matches!(err, LeaseError::BelowHistory { .. }), "{err}");
    assert!(err.to_string().contains("below the history") && err.to_string().contains("0/1000"));
    assert!(matches!(tl.lease_lsn(Lsn(0)).await, Err(LeaseError::InvalidLsn)));

    let now = SystemTime::now();
    assert_eq!(tl.min_valid_lease_lsn(now), Some(INITIAL));
    let held = tl.valid_leases(now);
    assert_eq!(held.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [INITIAL, ahead]);
    mgr.shutdown().await;

    // A restart keeps them.
    let mgr = start(&dir, Duration::from_secs(600)).await;
    let tl = mgr.get_timeline(t, id).unwrap();
    assert_eq!(tl.valid_leases(now), held);
    mgr.shutdown().await;
}

#[tokio::test]
async fn expired_leases_are_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mgr = start(&dir, Duration::from_millis(300)).await;
    let (t, id) = (TenantId::generate(), TimelineId::generate());
    let tl =
        mgr.create_tenant(t).await.unwrap().create_empty_timeline(id, INITIAL, 16).await.unwrap();
    tl.lease_lsn(INITIAL).await.unwrap();
    assert_eq!(tl.min_valid_lease_lsn(SystemTime::now()), Some(INITIAL));
    mgr.shutdown().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mgr = start(&dir, Duration::from_millis(300)).await;
    let tl = mgr.get_timeline(t, id).unwrap();
    assert_eq!(tl.min_valid_lease_lsn(SystemTime::now()), None);
    assert!(tl.valid_leases(SystemTime::now()).is_empty());
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_damaged_lease_file_breaks_only_its_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let mgr = start(&dir, Duration::from_secs(600)).await;
    let (t, damaged, sibling) =
        (TenantId::generate(), TimelineId::generate(), TimelineId::generate());
    let other = TenantId::generate();
    let tenant = mgr.create_tenant(t).await.unwrap();
    let tl = tenant.create_empty_timeline(damaged, INITIAL, 16).await.unwrap();
    tl.lease_lsn(INITIAL).await.unwrap();
    let path = tl.dir().join(LEASES_FILE);
    tenant.create_empty_timeline(sibling, INITIAL, 16).await.unwrap();
    mgr.create_tenant(other)
        .await
        .unwrap()
        .create_empty_timeline(sibling, INITIAL, 16)
        .await
        .unwrap();
    mgr.shutdown().await;
    std::fs::write(&path, b"{\"version\": 1, \"leases\": [").unwrap();

    let mgr = start(&dir, Duration::from_secs(600)).await;
    let err = mgr.get_timeline(t, damaged).err().expect("the damaged timeline is not served");
    let msg = err.to_string();
    assert!(msg.contains("is broken") && msg.contains(&path.display().to_string()), "{msg}");
    mgr.get_timeline(t, sibling).unwrap().lease_lsn(INITIAL).await.unwrap();
    mgr.get_timeline(other, sibling).unwrap().lease_lsn(INITIAL).await.unwrap();
    mgr.shutdown().await;
}

/// 10,000 renewals of one LSN write the lease file once (the file is not
/// replaced: same inode), 100 concurrent new leases share writes, and a
/// restart keeps every answered lease with at least its answered expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_write_the_file_a_bounded_number_of_times() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let length = Duration::from_secs(600);
    let mgr = start(&dir, length).await;
    let (t, id) = (TenantId::generate(), TimelineId::generate());
    let tl =
        mgr.create_tenant(t).await.unwrap().create_empty_timeline(id, INITIAL, 16).await.unwrap();
    let first = tl.lease_lsn(INITIAL).await.unwrap();
    let path = tl.dir().join(LEASES_FILE);
    let inode = std::fs::metadata(&path).unwrap().ino();
    for _ in 0..10_000 {
        assert_eq!(tl.lease_lsn(INITIAL).await.unwrap(), first);
    }
    assert_eq!(tl.lease_file_writes(), 1);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the file was rewritten");

    let before = SystemTime::now();
    let lsns: Vec<Lsn> = (1..=100).map(|i| Lsn(INITIAL.0 + 0x100 * i)).collect();
    let answers = futures::future::join_all(lsns.iter().map(|lsn| {
        let tl = Arc::clone(&tl);
        let lsn = *lsn;
        tokio::spawn(async move { tl.lease_lsn(lsn).await.unwrap() })
    }))
    .await;
    let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap()).collect();
    let writes = tl.lease_file_writes() - 1;
    assert!((1..=20).contains(&writes), "100 concurrent new leases took {writes} writes");
    for a in &answers {
        assert!(a.valid_until >= before + length - Duration::from_millis(1), "{a:?}");
    }
    mgr.shutdown().await;

    let mgr = start(&dir, length).await;
    let tl = mgr.get_timeline(t, id).unwrap();
    let now = SystemTime::now();
    let loaded: std::collections::BTreeMap<_, _> = tl.valid_leases(now).into_iter().collect();
    assert_eq!(loaded.get(&INITIAL), Some(&first));
    for (lsn, a) in lsns.iter().zip(&answers) {
        assert!(
            loaded.get(lsn).is_some_and(|l| l >= a),
            "{lsn}: answered {a:?}, loaded {loaded:?}"
        );
    }
    mgr.shutdown().await;
}
