//! Tenants with remote storage on a local directory: creation claims
//! generation 1, a tenant from before remote storage gets it at load,
//! timelines get remote clients, deletion removes the remote objects only
//! while no newer generation is claimed.

use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::test_support::*;
use crate::tenant::attachment::TENANT_FILE;
use crate::tenant::remote_timeline::{claim_generation, index_key, Generation};
use crate::tenant::TenantError;

#[tokio::test]
async fn creating_a_tenant_claims_generation_1_and_timelines_get_clients() {
    let (work, rdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rs = remote(rdir.path());
    let mgr = pageserver(work.path(), Some(&rs)).await;
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    assert_eq!(t.generation(), Some(Generation(1)));
    assert!(claim_file(rdir.path(), t.id(), 1).exists(), "the claim object exists");
    let dir = work.path().join("tenants").join(t.id().to_string());
    assert_eq!(std::fs::read_to_string(dir.join(TENANT_FILE)).unwrap(), r#"{"generation":1}"#);

    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 16).await.unwrap();
    let client = tl.remote_client().expect("a remote client");
    assert_eq!((client.tenant_id, client.generation), (t.id(), Generation(1)));
    uploaded(&tl).await;
    assert!(object(rdir.path(), &index_key(t.id(), tl.timeline_id, Generation(1))).exists());
    // A timeline id that exists in remote storage is refused.
    let other = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let taken = TimelineId::generate();
    seed_remote(&rs, other.id(), taken, 1, None).await;
    let e = other.create_empty_timeline(taken, Lsn(0x10), 16).await.err().expect("refused");
    assert!(matches!(e, TenantError::Conflict(_)), "{e}");
    assert!(e.to_string().contains("already exists in remote storage"), "{e}");

    // A second pageserver may not create it again: it exists remotely.
    let work_b = tempfile::tempdir().unwrap();
    let b = pageserver(work_b.path(), Some(&rs)).await;
    let e = b.create_tenant(t.id()).await.err().expect("refused");
    let msg = e.to_string();
    assert!(matches!(e, TenantError::Conflict(_)), "{msg}");
    assert!(msg.contains("generation 1 is claimed") && msg.contains("location_config"), "{msg}");
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_tenant_from_before_remote_storage_gets_generation_1_or_is_broken() {
    let (work, rdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let local = pageserver(work.path(), None).await;
    let old = local.create_tenant(TenantId::generate()).await.unwrap();
    assert_eq!(old.generation(), None);
    let tl = old.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 16).await.unwrap();
    assert!(tl.remote_client().is_none());
    let taken = local.create_tenant(TenantId::generate()).await.unwrap();
    let (old, tl, taken) = (old.id(), tl.timeline_id, taken.id());
    local.shutdown().await;
    let rs = remote(rdir.path());
    claim_generation(&rs, taken, Generation(2)).await.unwrap();

    let mgr = pageserver(work.path(), Some(&rs)).await;
    let t = mgr.get_tenant(old).unwrap();
    assert_eq!(t.generation(), Some(Generation(1)));
    assert!(claim_file(rdir.path(), old, 1).exists());
    assert_eq!(t.get_timeline(tl).unwrap().remote_client().unwrap().generation, Generation(1));
    let dir = work.path().join("tenants").join(old.to_string());
    assert_eq!(std::fs::read_to_string(dir.join(TENANT_FILE)).unwrap(), r#"{"generation":1}"#);
    // Attached elsewhere with generation 2 meanwhile: Broken, naming both.
    let Err(e @ TenantError::Broken { .. }) = mgr.get_tenant(taken) else {
        panic!("expected a broken tenant");
    };
    let msg = e.to_string();
    assert!(msg.contains("generation 1 is stale") && msg.contains("generation 2"), "{msg}");
    mgr.shutdown().await;
}

#[tokio::test]
async fn delete_removes_remote_objects_unless_a_newer_generation_is_claimed() {
    let (work, rdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let rs = remote(rdir.path());
    let mgr = pageserver(work.path(), Some(&rs)).await;
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 16).await.unwrap();
    uploaded(&tl).await;
    let id = t.id();
    drop((t, tl));
    assert!(!walk(&rdir.path().join("tenants").join(id.to_string())).is_empty());
    mgr.delete_tenant(id).await.unwrap();
    let remote_dir = rdir.path().join("tenants").join(id.to_string());
    let left: Vec<_> = walk(&remote_dir);
    assert!(left.is_empty(), "remote objects left: {left:?}");

    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 16).await.unwrap();
    uploaded(&tl).await;
    let (id, tl_id) = (t.id(), tl.timeline_id);
    drop((t, tl));
    claim_generation(&rs, id, Generation(5)).await.unwrap(); // attached elsewhere
    mgr.delete_tenant(id).await.unwrap();
    assert!(!work.path().join("tenants").join(id.to_string()).exists(), "deleted here");
    assert!(object(rdir.path(), &index_key(id, tl_id, Generation(1))).exists(), "kept there");
    assert!(claim_file(rdir.path(), id, 5).exists());
    mgr.shutdown().await;
}

/// Every file under `dir` (none if it does not exist).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files = Vec::new();
    for e in entries {
        let path = e.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
