//! One damaged tenant or timeline never stops the others: every kind of
//! damage of the hardening probe, with a healthy tenant and a healthy
//! sibling timeline beside it, on real files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::TenantManager;
use crate::tenant::value::image;
use crate::tenant::{StorageConf, TenantError};

/// A tenant with one timeline holding one flushed value at 0x18.
async fn tenant_with_layer(mgr: &TenantManager) -> (TenantId, TimelineId, PathBuf) {
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    timeline_with_layer(mgr, t.id()).await
}

/// A new timeline of `tenant` holding one flushed value at 0x18.
async fn timeline_with_layer(
    mgr: &TenantManager,
    tenant: TenantId,
) -> (TenantId, TimelineId, PathBuf) {
    let t = mgr.get_tenant(tenant).unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    let mut w = tl.writer().await;
    w.put(Key::MIN, Lsn(0x18), &image(b"v")).await.unwrap();
    w.finish_write(Lsn(0x18));
    drop(w);
    tl.freeze_and_flush().await.unwrap();
    (t.id(), tl.timeline_id, tl.dir().to_path_buf())
}

fn layer_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().contains("__"))
        .expect("a layer file")
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0xff;
    std::fs::write(path, b).unwrap();
}

async fn serves_v(mgr: &TenantManager, tenant: TenantId, timeline: TimelineId, what: &str) {
    let tl = mgr.get_timeline(tenant, timeline).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(&tl.get(Key::MIN, Lsn(0x18)).await.unwrap()[..], b"v", "{what}: serves");
}

#[tokio::test]
async fn a_damaged_timeline_is_broken_and_the_others_serve() {
    type Damage = fn(&Path);
    let cases: [(&str, Damage, &str); 6] = [
        ("layer header checksum", |tl| flip(&layer_file(tl), 10), "header checksum"),
        (
            "layer index checksum",
            |tl| {
                // A small layer's index is one 8 KiB block (the root), its last.
                let p = layer_file(tl);
                let len = std::fs::metadata(&p).unwrap().len() as usize;
                flip(&p, len - 8192 + 100)
            },
            "index block 0 is corrupt: checksum mismatch",
        ),
        (
            "truncated layer",
            |tl| {
                let p = layer_file(tl);
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(600).unwrap();
            },
            "the manifest says",
        ),
        ("missing metadata", |tl| std::fs::remove_file(tl.join("metadata")).unwrap(), "metadata"),
        ("empty metadata", |tl| std::fs::write(tl.join("metadata"), b"").unwrap(), "metadata"),
        ("corrupt metadata", |tl| flip(&tl.join("metadata"), 9), "checksum"),
    ];
    for (what, damage, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let conf = Arc::new(StorageConf::for_tests(dir.path()));
        let mgr = TenantManager::load(conf.clone(), CancellationToken::new()).await.unwrap();
        let (good, good_tl, _) = tenant_with_layer(&mgr).await;
        let (tenant, bad_tl, bad_dir) = tenant_with_layer(&mgr).await;
        let (_, sibling, _) = timeline_with_layer(&mgr, tenant).await;
        mgr.shutdown().await;
        damage(&bad_dir);

        let mgr = TenantManager::load(conf, CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("{what}: start-up failed: {e:#}"));
        serves_v(&mgr, good, good_tl, what).await;
        serves_v(&mgr, tenant, sibling, what).await;
        assert!(mgr.list_broken().is_empty(), "{what}: no tenant is broken");
        let t = mgr.get_tenant(tenant).unwrap();
        let broken = t.list_broken_timelines();
        assert_eq!(broken.len(), 1, "{what}");
        assert_eq!(broken[0].0, bad_tl);
        assert!(broken[0].1.contains(expected), "{what}: reason {:?}", broken[0].1);
        match mgr.get_timeline(tenant, bad_tl) {
            Err(e @ TenantError::TimelineBroken { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("timeline {tenant}/{bad_tl} is broken")), "{e}");
                assert!(text.contains(expected), "{what}: {e}");
            }
            other => {
                panic!("{what}: expected TimelineBroken, got {:?}", other.map(|t| t.timeline_id))
            }
        }
        let err = t.create_empty_timeline(bad_tl, Lsn(0x10), 15).await.err();
        assert!(matches!(err, Some(TenantError::AlreadyExists(_))), "{what}: id stays taken");
        t.delete_timeline(bad_tl).await.unwrap_or_else(|e| panic!("{what}: delete failed: {e}"));
        assert!(!bad_dir.exists(), "{what}");
        assert!(t.list_broken_timelines().is_empty());
        assert!(matches!(mgr.get_timeline(tenant, bad_tl), Err(TenantError::NotFound(_))));
        serves_v(&mgr, tenant, sibling, what).await;
    }
}

#[tokio::test]
async fn a_tenant_without_its_timelines_directory_is_broken_and_the_others_serve() {
    let dir = tempfile::tempdir().unwrap();
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf.clone(), CancellationToken::new()).await.unwrap();
    let (good, good_tl, _) = tenant_with_layer(&mgr).await;
    let (bad, _, bad_dir) = tenant_with_layer(&mgr).await;
    mgr.shutdown().await;
    std::fs::remove_dir_all(bad_dir.parent().unwrap()).unwrap();

    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    serves_v(&mgr, good, good_tl, "healthy tenant").await;
    let broken = mgr.list_broken();
    assert_eq!(broken.len(), 1);
    assert_eq!(broken[0].0, bad);
    assert!(broken[0].1.contains("timelines"), "reason {:?}", broken[0].1);
    match mgr.get_tenant(bad) {
        Err(e @ TenantError::Broken { .. }) => {
            assert!(e.to_string().contains(&format!("tenant {bad} is broken")), "{e}")
        }
        other => panic!("expected Broken, got {:?}", other.map(|t| t.id())),
    }
    mgr.delete_tenant(bad).await.unwrap();
    assert!(!dir.path().join("tenants").join(bad.to_string()).exists());
    assert!(mgr.list_broken().is_empty());
    assert!(matches!(mgr.get_tenant(bad), Err(TenantError::NotFound(_))));
}
