//! `Layer` on real files and a real remote store (a local directory):
//! eviction and download round trips, refusals, concurrent callers,
//! corrupt objects, deletion, and the resident-bytes accounting.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use io_engine::IoEngine;
use pageserver_api::key::Key;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::testing::{client, corrupt, local_storage, object_path, upload};
use super::{Layer, LayerAccessError};
use crate::tenant::storage_layer::layer_file::{LayerFile, LayerWriter};
use crate::tenant::storage_layer::{BlobRef, LayerKind};

const IDS: (TenantId, TimelineId) = (TenantId([3; 16]), TimelineId([4; 16]));
const KEYS: u32 = 600;

fn engine() -> IoEngine {
    IoEngine::new(crate::tenant::test_io_engine_kind()).unwrap()
}

fn value(i: u32) -> Vec<u8> {
    format!("value {i} ").repeat(1 + i as usize % 7).into_bytes()
}

/// A delta layer of `KEYS` keys at LSN 0x20 in `dir`.
async fn write_layer(dir: &Path) -> LayerFile {
    let direct = crate::tenant::test_direct_io();
    let lsns = Lsn(0x10)..Lsn(0x30);
    let mut w = LayerWriter::new(&engine(), dir, IDS.0, IDS.1, LayerKind::Delta, lsns, direct)
        .await
        .unwrap();
    for i in 0..KEYS {
        w.put_raw(Key::MIN.add(i).to_compact(), Lsn(0x20), &value(i), true).await.unwrap();
    }
    w.finish(Key::MIN.add(KEYS)).await.unwrap()
}

/// Every value of the file, through its index, equals what was written.
async fn check_contents(file: &LayerFile) {
    let mut cursor = file.entry_cursor();
    let mut blobs: Vec<BlobRef> = Vec::new();
    while let Some(leaf) = cursor.next_leaf().await.unwrap() {
        blobs.extend(leaf.iter().map(|e| e.2));
    }
    assert_eq!(blobs.len(), KEYS as usize);
    let values: Vec<Bytes> = file.read_raw_values(&blobs).await.unwrap();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(&v[..], &value(i as u32)[..], "value {i}");
    }
}

/// A timeline directory with one layer file, and a remote store under
/// `root/remote` holding it when `uploaded`.
struct Fixture {
    _root: tempfile::TempDir,
    remote_root: std::path::PathBuf,
    file: Option<LayerFile>,
    client: Arc<crate::tenant::remote_timeline::client::RemoteTimelineClient>,
}

async fn fixture(uploaded: bool) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let (dir, remote_root) = (root.path().join("timeline"), root.path().join("remote"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = write_layer(&dir).await;
    let rs = local_storage(&remote_root);
    let names = if uploaded { vec![file.name.to_string()] } else { vec![] };
    let index = upload(&rs, &engine(), IDS, &dir, &names).await;
    let client = client(&rs, &engine(), IDS, &dir, index);
    Fixture { _root: root, remote_root, file: Some(file), client }
}

impl Fixture {
    /// The layer, resident.
    fn resident(&mut self) -> Layer {
        Layer::resident(self.file.take().unwrap(), Some(self.client.clone()))
    }

    /// The layer, remote-only (its local file removed).
    fn remote_only(&mut self) -> Layer {
        let file = self.file.take().unwrap();
        std::fs::remove_file(&file.path).unwrap();
        let dir = file.path.parent().unwrap();
        let direct = crate::tenant::test_direct_io();
        let (name, size) = (file.name.clone(), file.file_size);
        Layer::remote_only(name, size, dir, engine(), direct, self.client.clone())
    }
}

#[tokio::test]
async fn an_evicted_layer_downloads_again_with_the_same_bytes() {
    let mut f = fixture(true).await;
    let layer = f.resident();
    let size = layer.file_size;
    assert!(layer.is_resident() && layer.is_evictable());
    assert_eq!(layer.resident_bytes_counted(), size);
    check_contents(&layer.try_resident().unwrap()).await;

    assert!(layer.evict().await);
    assert!(!layer.path.exists(), "the local file is removed");
    assert!(layer.try_resident().is_none() && !layer.is_resident());
    assert_eq!(layer.resident_bytes_counted(), 0);
    assert!(!layer.evict().await, "nothing left to evict");

    let file = layer.get_resident().await.unwrap();
    check_contents(&file).await;
    assert!(layer.path.exists() && layer.is_resident());
    assert_eq!(layer.resident_bytes_counted(), size);
    assert_eq!(file.file_size, size);
}

#[tokio::test]
async fn eviction_is_refused_unless_uploaded_with_the_same_size() {
    // Not uploaded.
    let mut f = fixture(false).await;
    let layer = f.resident();
    assert!(!layer.is_evictable());
    assert!(!layer.evict().await);
    assert!(layer.path.exists() && layer.is_resident());
    // No remote storage at all.
    let mut f = fixture(false).await;
    let layer = Layer::resident(f.file.take().unwrap(), None);
    assert!(!layer.evict().await);
    assert!(layer.path.exists() && layer.is_resident());
    // Uploaded with another size (another file of the same name).
    let mut f = fixture(true).await;
    let file = f.file.take().unwrap();
    let name = file.name.to_string();
    let mut other = f.client.uploaded_layer(&name).unwrap();
    other.file_size += 4096;
    let dir = file.path.parent().unwrap().to_path_buf();
    let remote = client(f.client.storage(), &engine(), IDS, &dir, [(name, other)].into());
    let layer = Layer::resident(file, Some(remote));
    assert!(!layer.evict().await);
    assert!(layer.path.exists() && layer.is_resident());
}

#[tokio::test]
async fn readers_holding_the_file_read_through_eviction() {
    let mut f = fixture(true).await;
    let layer = f.resident();
    let held = layer.try_resident().unwrap();
    assert!(layer.evict().await);
    assert!(!layer.path.exists());
    check_contents(&held).await; // the descriptor is still open
    let again = layer.get_resident().await.unwrap();
    assert!(!Arc::ptr_eq(&held, &again), "a new download, a new file");
    check_contents(&again).await;
    check_contents(&held).await;
}

#[tokio::test]
async fn concurrent_callers_share_one_download() {
    let mut f = fixture(true).await;
    let layer = Arc::new(f.remote_only());
    assert!(!layer.is_resident() && layer.resident_bytes_counted() == 0);
    assert!(!layer.evict().await, "a remote-only layer is not evicted");
    let calls = (0..16).map(|_| {
        let layer = layer.clone();
        tokio::spawn(async move { layer.get_resident().await.unwrap() })
    });
    let files: Vec<Arc<LayerFile>> =
        futures::future::join_all(calls).await.into_iter().map(|r| r.unwrap()).collect();
    assert!(files.iter().all(|f| Arc::ptr_eq(f, &files[0])), "one download, one open file");
    check_contents(&files[0]).await;
    assert_eq!(layer.resident_bytes_counted(), layer.file_size);
}

#[tokio::test]
async fn a_corrupt_object_is_an_error_naming_it_for_every_waiter() {
    let mut f = fixture(true).await;
    let layer = Arc::new(f.remote_only());
    let object = object_path(&f.remote_root, IDS, &layer.name.to_string());
    let pristine = std::fs::read(&object).unwrap();
    corrupt(&object);
    let calls = (0..4).map(|_| {
        let layer = layer.clone();
        tokio::spawn(async move { layer.get_resident().await.map(|_| ()) })
    });
    let key = object.strip_prefix(&f.remote_root).unwrap().to_str().unwrap().to_string();
    for res in futures::future::join_all(calls).await {
        let err = res.unwrap().unwrap_err();
        assert!(matches!(err, LayerAccessError::Download { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&key) && msg.contains("corrupt"), "{msg}");
        assert!(msg.contains(&layer.name.to_string()), "{msg}");
    }
    assert!(!layer.is_resident() && !layer.path.exists(), "nothing corrupt is kept");
    assert_eq!(layer.resident_bytes_counted(), 0);
    // Repaired: the next caller downloads again.
    std::fs::write(&object, pristine).unwrap();
    check_contents(&layer.get_resident().await.unwrap()).await;
}

#[tokio::test]
async fn a_deleted_layer_is_never_downloaded_again() {
    let mut f = fixture(true).await;
    let layer = f.resident();
    let held = layer.try_resident().unwrap();
    layer.delete_local().await;
    assert!(!layer.path.exists());
    assert_eq!(layer.resident_bytes_counted(), 0);
    assert!(!layer.is_resident() && !layer.evict().await);
    // Readers of older snapshots keep the open file.
    check_contents(&layer.try_resident().unwrap()).await;
    drop(held);

    let mut f = fixture(true).await;
    let layer = f.resident();
    assert!(layer.evict().await);
    layer.delete_local().await;
    let err = layer.get_resident().await.map(|_| ()).unwrap_err();
    assert!(matches!(err, LayerAccessError::Replaced { .. }), "{err}");
    assert!(err.to_string().contains(&layer.name.to_string()), "{err}");
    assert!(!layer.path.exists(), "not downloaded");
}

/// Evictions racing readers: every read sees the layer's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_racing_evictions_see_the_same_bytes() {
    let mut f = fixture(true).await;
    let layer = Arc::new(f.resident());
    let evictor = {
        let layer = layer.clone();
        tokio::spawn(async move {
            let mut evicted = 0;
            for _ in 0..40 {
                evicted += layer.evict().await as usize;
                tokio::task::yield_now().await;
            }
            evicted
        })
    };
    let readers = (0..4).map(|_| {
        let layer = layer.clone();
        tokio::spawn(async move {
            for _ in 0..40 {
                check_contents(&layer.get_resident().await.unwrap()).await;
            }
        })
    });
    for r in futures::future::join_all(readers).await {
        r.unwrap();
    }
    assert!(evictor.await.unwrap() > 0, "some evictions happened");
    let resident = layer.is_resident();
    assert_eq!(layer.resident_bytes_counted(), if resident { layer.file_size } else { 0 });
    assert_eq!(layer.path.exists(), resident);
}

#[tokio::test]
async fn access_times_move_forward_on_reads_only() {
    let mut f = fixture(true).await;
    let layer = f.resident();
    let created = layer.last_access();
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    assert!(layer.is_resident() && layer.is_evictable());
    assert_eq!(layer.last_access(), created, "listing is no access");
    layer.try_resident().unwrap();
    assert!(layer.last_access() > created);
}
