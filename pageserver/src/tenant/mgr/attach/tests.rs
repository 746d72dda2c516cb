//! Attach, detach and re-attach between pageservers (tenant managers on
//! their own workdirs) sharing remote storage on a local directory.

use std::time::Duration;

use pageserver_api::key::Key;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::test_support::*;
use super::{LocationError, LocationMode, LocationOutcome};
use crate::tenant::attachment::{TenantFile, TENANT_FILE};
use crate::tenant::metadata::{Decoded, TimelineMetadata};
use crate::tenant::remote_timeline::{claim_generation, index_key, Generation};
use crate::tenant::value::image;
use crate::tenant::TenantError;

const WAIT: Duration = Duration::from_secs(10);

fn attached(g: u32) -> LocationMode {
    LocationMode::AttachedSingle { generation: Generation(g) }
}

fn conflict(r: Result<LocationOutcome, LocationError>) -> String {
    match r {
        Err(LocationError::Conflict(m)) => m,
        Err(e) => panic!("expected a conflict, got {e}"),
        Ok(_) => panic!("expected a conflict, got success"),
    }
}

#[tokio::test]
async fn attach_refuses_a_stale_generation_naming_both() {
    let (work, rdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rs = remote(rdir.path());
    let mgr = pageserver(work.path(), Some(&rs)).await;
    let t = TenantId::generate();
    claim_generation(&rs, t, Generation(3)).await.unwrap();
    let msg = conflict(mgr.set_location(t, attached(2), WAIT).await);
    assert!(msg.contains("generation 2 is stale") && msg.contains("generation 3"), "{msg}");
    assert!(!work.path().join("tenants").join(t.to_string()).exists());
    assert!(!claim_file(rdir.path(), t, 2).exists(), "a stale claim is not written");
    assert!(matches!(mgr.get_tenant(t), Err(TenantError::NotFound(_))));
}

#[tokio::test]
async fn attach_builds_the_tenant_from_the_remote_manifest() {
    let (work, rdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rs = remote(rdir.path());
    let (t, tl_id) = (TenantId::generate(), TimelineId::generate());
    let ip = seed_remote(&rs, t, tl_id, 1, Some(wal_source())).await;
    let mgr = pageserver(work.path(), Some(&rs)).await;

    let Ok(LocationOutcome::Attached { tenant, loaded: true }) =
        mgr.set_location(t, attached(2), WAIT).await
    else {
        panic!("attach failed");
    };
    assert_eq!(tenant.generation(), Some(Generation(2)));
    let dir = work.path().join("tenants").join(t.to_string());
    let file = TenantFile::load(&mgr.conf().io_engine, &dir).await.unwrap();
    assert_eq!(file, Some(TenantFile { generation: Generation(2) }));
    assert!(!io_engine::temp_path(&dir).exists(), "the temp directory is renamed away");

    let tl = tenant.get_timeline(tl_id).unwrap();
    assert_eq!(tl.get_disk_consistent_lsn(), Lsn(0x4f));
    assert_eq!(tl.get_last_record_lsn(), Lsn(0x4f));
    assert_eq!(tl.wal_source(), Some(wal_source()));
    let Decoded::Manifest(md) =
        TimelineMetadata::load(&mgr.conf().io_engine, tl.dir()).await.unwrap()
    else {
        panic!("a current manifest");
    };
    assert_eq!(md, ip.to_metadata().unwrap());
    assert_eq!(tl.remote_client().unwrap().generation, Generation(2));
    // The new generation gets an index of its own at once.
    appears(&object(rdir.path(), &index_key(t, tl_id, Generation(2)))).await;
    assert!(claim_file(rdir.path(), t, 2).exists());
    mgr.shutdown().await;
}

/// Two pageservers' workdirs sharing remote storage in `rdir`; pageserver
/// `a` runs on `work_a` with one tenant `t` and an empty timeline `tl`.
struct Sites {
    rdir: tempfile::TempDir,
    work_a: tempfile::TempDir,
    work_b: tempfile::TempDir,
    rs: std::sync::Arc<crate::remote_storage::RemoteStorage>,
    a: std::sync::Arc<crate::tenant::mgr::TenantManager>,
    t: std::sync::Arc<crate::tenant::Tenant>,
    tl: std::sync::Arc<crate::tenant::Timeline>,
}

impl Sites {
    async fn new() -> Sites {
        let rdir = tempfile::tempdir().unwrap();
        let (work_a, work_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let rs = remote(rdir.path());
        let a = pageserver(work_a.path(), Some(&rs)).await;
        let t = a.create_tenant(TenantId::generate()).await.unwrap();
        let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 16).await.unwrap();
        Sites { rdir, work_a, work_b, rs, a, t, tl }
    }
}

#[tokio::test]
async fn detach_keeps_the_remote_copy_and_another_pageserver_attaches_it() {
    let Sites { rdir, work_a, work_b, rs, a, t, tl } = Sites::new().await;
    let (id, tl_id) = (t.id(), tl.timeline_id);
    drop((t, tl));

    // The detach waits for the new timeline's first index.
    assert!(matches!(
        a.set_location(id, LocationMode::Detached, WAIT).await,
        Ok(LocationOutcome::Detached)
    ));
    assert!(!work_a.path().join("tenants").join(id.to_string()).exists());
    assert!(matches!(a.get_tenant(id), Err(TenantError::NotFound(_))));
    assert!(object(rdir.path(), &index_key(id, tl_id, Generation(1))).exists(), "remote stays");
    // Detaching again is a no-op.
    assert!(matches!(
        a.set_location(id, LocationMode::Detached, WAIT).await,
        Ok(LocationOutcome::Detached)
    ));

    let b = pageserver(work_b.path(), Some(&rs)).await;
    let Ok(LocationOutcome::Attached { tenant, .. }) = b.set_location(id, attached(2), WAIT).await
    else {
        panic!("attach on the second pageserver failed");
    };
    let timelines: Vec<_> = tenant.list_timelines().iter().map(|t| t.timeline_id).collect();
    assert_eq!(timelines, vec![tl_id]);
    assert_eq!(tenant.get_timeline(tl_id).unwrap().get_last_record_lsn(), Lsn(0x10));
    // The first pageserver's generation is stale now.
    let msg = conflict(a.set_location(id, attached(1), WAIT).await);
    assert!(msg.contains("generation 1 is stale") && msg.contains("generation 2"), "{msg}");
    b.shutdown().await;
}

#[tokio::test]
async fn attach_with_the_same_generation_is_a_no_op_a_higher_one_reloads() {
    let (work, rdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rs = remote(rdir.path());
    let mgr = pageserver(work.path(), Some(&rs)).await;
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 16).await.unwrap();
    let (id, tl_id) = (t.id(), tl.timeline_id);

    let Ok(LocationOutcome::Attached { tenant, loaded: false }) =
        mgr.set_location(id, attached(1), WAIT).await
    else {
        panic!("the same generation again");
    };
    assert!(std::sync::Arc::ptr_eq(&tenant, &t), "nothing changes");

    let Ok(LocationOutcome::Attached { tenant, loaded: true }) =
        mgr.set_location(id, attached(3), WAIT).await
    else {
        panic!("a higher generation");
    };
    assert_eq!(tenant.generation(), Some(Generation(3)));
    assert!(tl.cancel.is_cancelled(), "the old generation's timeline is stopped");
    let tl = tenant.get_timeline(tl_id).unwrap();
    assert_eq!(tl.remote_client().unwrap().generation, Generation(3));
    let text = std::fs::read_to_string(tenant_dir(&work, id).join(TENANT_FILE)).unwrap();
    assert_eq!(text, r#"{"generation":3}"#);
    appears(&object(rdir.path(), &index_key(id, tl_id, Generation(3)))).await;

    let msg = conflict(mgr.set_location(id, attached(2), WAIT).await);
    assert!(msg.contains("generation 3, above the requested generation 2"), "{msg}");
    mgr.shutdown().await;
}

fn tenant_dir(work: &tempfile::TempDir, id: TenantId) -> std::path::PathBuf {
    work.path().join("tenants").join(id.to_string())
}

#[tokio::test]
async fn detach_that_cannot_upload_keeps_the_tenant_attached() {
    let (work, rdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let root = rdir.path().join("store");
    let rs = remote(&root);
    let mgr = pageserver(work.path(), Some(&rs)).await;
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 16).await.unwrap();
    uploaded(&tl).await; // nothing writes to the store below
    let mut w = tl.writer().await;
    w.put(Key::MIN, Lsn(0x18), &image(b"v")).await.unwrap();
    w.finish_write(Lsn(0x18));
    drop(w);
    // The store becomes unusable: every request fails.
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::write(&root, b"not a directory").unwrap();

    let r = mgr.set_location(t.id(), LocationMode::Detached, Duration::from_millis(300)).await;
    let Err(e @ LocationError::NotUploaded { .. }) = r else {
        panic!("expected NotUploaded, got {:?}", r.err());
    };
    let msg = e.to_string();
    let tl_name = format!("timeline {}/{} is flushed up to 0/18", t.id(), tl.timeline_id);
    assert!(msg.contains("stays attached") && msg.contains(&tl_name), "{msg}");
    assert!(msg.contains("but remote storage has it only up to"), "{msg}");
    let still = mgr.get_timeline(t.id(), tl.timeline_id).unwrap();
    assert_eq!(&still.get(Key::MIN, Lsn(0x18)).await.unwrap()[..], b"v");
    assert!(tenant_dir(&work, t.id()).exists());
    mgr.shutdown().await;
}

#[tokio::test]
async fn data_moves_with_the_tenant_and_the_prefetch_downloads_every_layer() {
    let Sites { rdir: _rdir, work_a: _work_a, work_b, rs, a, t, tl } = Sites::new().await;
    for (lsn, v) in [(0x18, b"one"), (0x28, b"two"), (0x38, b"six")] {
        let mut w = tl.writer().await;
        w.put(Key::MIN.add(lsn as u32), Lsn(lsn), &image(v)).await.unwrap();
        w.finish_write(Lsn(lsn));
        drop(w);
        tl.freeze_and_flush().await.unwrap();
    }
    let (id, tl_id) = (t.id(), tl.timeline_id);
    drop((t, tl));
    a.set_location(id, LocationMode::Detached, WAIT).await.unwrap();

    let b = pageserver(work_b.path(), Some(&rs)).await;
    let Ok(LocationOutcome::Attached { tenant, .. }) = b.set_location(id, attached(2), WAIT).await
    else {
        panic!("attach failed");
    };
    let tl = tenant.get_timeline(tl_id).unwrap();
    assert_eq!(tl.get_last_record_lsn(), Lsn(0x38));
    assert_eq!(tl.historic_layers().len(), 3);
    let got = tl.get(Key::MIN.add(0x28), Lsn(0x38)).await.unwrap();
    assert_eq!(&got[..], b"two", "a read downloads what it needs");
    let deadline = std::time::Instant::now() + WAIT;
    while tl.resident_layers().len() < 3 {
        assert!(std::time::Instant::now() < deadline, "the prefetch did not download all");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.shutdown().await;
}

#[tokio::test]
async fn attach_refuses_an_index_listing_missing_objects_naming_them() {
    let Sites { rdir, work_a: _work_a, work_b, rs, a, t, tl } = Sites::new().await;
    let mut w = tl.writer().await;
    w.put(Key::MIN.add(1), Lsn(0x18), &image(b"one")).await.unwrap();
    w.finish_write(Lsn(0x18));
    drop(w);
    tl.freeze_and_flush().await.unwrap();
    let (id, tl_id) = (t.id(), tl.timeline_id);
    drop((t, tl));
    a.set_location(id, LocationMode::Detached, WAIT).await.unwrap();
    let ip = crate::tenant::remote_timeline::download_newest_index(&rs, id, tl_id, Generation(1))
        .await
        .unwrap()
        .expect("the detach uploaded an index");
    let (name, layer) = ip.layers.iter().next().expect("the index lists the flushed layer");
    let key = crate::tenant::remote_timeline::layer_key(id, tl_id, name, layer.generation);
    let path = object(rdir.path(), &key);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();

    let b = pageserver(work_b.path(), Some(&rs)).await;
    let lists = rs.list_requests();
    let refused = b.set_location(id, attached(2), WAIT).await;
    // The claim's check, the timelines, and the one timeline's objects
    // once (its newest index is chosen from the same listing).
    assert_eq!(rs.list_requests() - lists, 3, "LIST requests of a refused attach");
    let e = match refused {
        Err(e @ LocationError::RemoteIncomplete { .. }) => e,
        Err(e) => panic!("expected RemoteIncomplete, got {e}"),
        Ok(_) => panic!("expected RemoteIncomplete, got success"),
    };
    let LocationError::RemoteIncomplete { ref missing, more, .. } = e else { unreachable!() };
    assert_eq!((missing.len(), more), (1, 0), "{e}");
    assert!(missing[0].ends_with(&key), "{missing:?} does not name {key}");
    let msg = e.to_string();
    assert!(msg.contains(&key) && msg.contains("1 objects") && msg.contains("missing"), "{msg}");
    assert!(matches!(b.get_tenant(id), Err(TenantError::NotFound(_))));
    assert!(!tenant_dir(&work_b, id).exists(), "a refused attach builds nothing");
    // Once the object is back, the same generation attaches and reads.
    std::fs::write(&path, &bytes).unwrap();
    let Ok(LocationOutcome::Attached { tenant, .. }) = b.set_location(id, attached(2), WAIT).await
    else {
        panic!("attach failed with the object back");
    };
    let tl = tenant.get_timeline(tl_id).unwrap();
    assert_eq!(&tl.get(Key::MIN.add(1), Lsn(0x18)).await.unwrap()[..], b"one");
    b.shutdown().await;
}
