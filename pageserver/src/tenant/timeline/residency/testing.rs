//! Timelines whose layer files are in remote storage (a local directory),
//! for the residency and eviction tests: written through a
//! `TenantManager`, shut down, every layer file uploaded, then loaded again
//! with a remote client (`Timeline::load`), with or without their local
//! files.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::super::metadata::{Decoded, TimelineMetadata};
use super::super::super::mgr::TenantManager;
use super::super::super::remote_timeline::client::RemoteTimelineClient;
use super::super::super::remote_timeline::index_part::IndexLayer;
use super::super::super::storage_layer::layer::testing;
use super::super::super::value::image;
use super::super::super::{Globals, StorageConf};
use super::super::Timeline;
use crate::remote_storage::RemoteStorage;

/// Keys each layer of [`write_disjoint_layers`] holds.
pub(crate) const KEYS_PER_LAYER: u32 = 12;

/// Settings of the test timelines: no background compaction or GC.
pub(crate) fn conf(workdir: &std::path::Path) -> StorageConf {
    let mut conf = StorageConf::for_tests(workdir);
    conf.compaction.compaction_period = Duration::ZERO;
    conf.compaction.gc_period = Duration::ZERO;
    conf.compaction.pitr_interval = Duration::ZERO;
    conf
}

/// A new tenant with one empty timeline (starting at 0x10) under `workdir`.
pub(crate) async fn new_timeline(workdir: &std::path::Path) -> (Arc<TenantManager>, Arc<Timeline>) {
    let mgr = TenantManager::load(Arc::new(conf(workdir)), CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    (mgr, tl)
}

/// The page of key `k` that layer `l` of [`write_disjoint_layers`] holds.
pub(crate) fn page(l: u32, k: u32) -> Vec<u8> {
    format!("layer {l} key {k}|").repeat(300).into_bytes()
}

/// The LSN of layer `l` of [`write_disjoint_layers`].
pub(crate) fn lsn_of(l: u32) -> Lsn {
    Lsn(0x100 + 0x10 * l as u64)
}

/// Flush `layers` L0s, numbered from `first`; L0 `l` holds the keys
/// `l * KEYS_PER_LAYER ..` (its own), images at `lsn_of(l)`.
pub(crate) async fn write_disjoint_layers(tl: &Timeline, first: u32, layers: u32) {
    for l in first..first + layers {
        let mut w = tl.writer().await;
        for k in l * KEYS_PER_LAYER..(l + 1) * KEYS_PER_LAYER {
            w.put(Key::MIN.add(k), lsn_of(l), &image(&page(l, k))).await.unwrap();
        }
        w.finish_write(lsn_of(l));
        drop(w);
        tl.freeze_and_flush().await.unwrap();
    }
}

/// Read key `k` of layer `l` of [`write_disjoint_layers`] at the latest LSN.
pub(crate) async fn check_page(tl: &Timeline, l: u32, k: u32) {
    let got = tl.get(Key::MIN.add(k), tl.get_last_record_lsn()).await.unwrap();
    assert_eq!(&got[..], &page(l, k)[..], "key {k} of layer {l}");
}

/// A shut-down timeline whose layer files are all uploaded.
pub(crate) struct RemoteTimeline {
    pub root: tempfile::TempDir,
    pub conf: Arc<StorageConf>,
    pub ids: (TenantId, TimelineId),
    /// The timeline's local directory.
    pub dir: PathBuf,
    pub remote_root: PathBuf,
    pub storage: Arc<RemoteStorage>,
    /// The layers of the manifest, uploaded.
    pub uploaded: BTreeMap<String, IndexLayer>,
}

/// Shut `mgr` (owner of `tl`, under `root/work`) down and upload every
/// layer file of `tl`'s manifest to `root/remote`.
pub(crate) async fn publish(
    root: tempfile::TempDir,
    mgr: Arc<TenantManager>,
    tl: Arc<Timeline>,
) -> RemoteTimeline {
    let (ids, dir) = ((tl.tenant_id, tl.timeline_id), tl.dir().to_path_buf());
    drop(tl);
    mgr.shutdown().await;
    let conf = Arc::new(conf(&root.path().join("work")));
    let remote_root = root.path().join("remote");
    let storage = testing::local_storage(&remote_root);
    let md = match TimelineMetadata::load(&conf.io_engine, &dir).await.unwrap() {
        Decoded::Manifest(md) => md,
        Decoded::V1(_) => panic!("a version-1 manifest"),
    };
    let names: Vec<String> = md.layers.iter().map(|l| l.name.clone()).collect();
    let uploaded = testing::upload(&storage, &conf.io_engine, ids, &dir, &names).await;
    RemoteTimeline { root, conf, ids, dir, remote_root, storage, uploaded }
}

impl RemoteTimeline {
    /// A client whose remote index lists `layers`.
    pub(crate) fn client_of(
        &self,
        layers: BTreeMap<String, IndexLayer>,
    ) -> Arc<RemoteTimelineClient> {
        testing::client(&self.storage, &self.conf.io_engine, self.ids, &self.dir, layers)
    }

    /// Load the timeline with a client listing every uploaded layer, and
    /// wait for the index upload that loading schedules (the client's index
    /// says LSN 0). That upload lists the store after writing the index: a
    /// [`Self::store_down`] in between made the listing empty, every layer
    /// "missing" and not evictable (a flaky eviction test).
    pub(crate) async fn load(&self) -> Arc<Timeline> {
        let tl = self.try_load(self.client_of(self.uploaded.clone())).await.unwrap();
        let client = tl.remote_client().expect("loaded with a remote client");
        let lsn = tl.get_disk_consistent_lsn();
        assert!(
            client.wait_uploaded(lsn, Duration::from_secs(30)).await,
            "index at {lsn} uploaded"
        );
        tl
    }

    pub(crate) async fn try_load(
        &self,
        client: Arc<RemoteTimelineClient>,
    ) -> anyhow::Result<Arc<Timeline>> {
        let (conf, globals) = (self.conf.clone(), Arc::new(Globals::default()));
        let (t, tl, dir) = (self.ids.0, self.ids.1, self.dir.clone());
        Timeline::load(conf, globals, t, tl, dir, CancellationToken::new(), Some(client), None)
            .await
    }

    /// Remove the local files of every uploaded layer.
    pub(crate) fn remove_local_layers(&self) {
        for name in self.uploaded.keys() {
            std::fs::remove_file(self.dir.join(name)).unwrap();
        }
    }

    /// The store goes away (its root becomes a file, its objects are set
    /// aside): uploads and downloads fail until [`Self::store_up`]. One
    /// atomic swap: an upload running meanwhile cannot recreate the root
    /// directory between a rename and a write (it did, failing a test).
    pub(crate) fn store_down(&self) {
        let aside = self.root.path().join("remote.down");
        std::fs::write(&aside, b"not a directory").unwrap();
        exchange(&aside, &self.remote_root);
    }

    /// The store comes back with its objects.
    pub(crate) fn store_up(&self) {
        let aside = self.root.path().join("remote.down");
        exchange(&aside, &self.remote_root);
        std::fs::remove_file(&aside).unwrap();
    }

    /// Where remote storage keeps layer `name`.
    pub(crate) fn object(&self, name: &str) -> PathBuf {
        testing::object_path(&self.remote_root, self.ids, name)
    }
}

/// A timeline of `layers` disjoint L0s ([`write_disjoint_layers`]), all
/// uploaded, not loaded.
pub(crate) async fn disjoint_remote_timeline(layers: u32) -> RemoteTimeline {
    let root = tempfile::tempdir().unwrap();
    let (mgr, tl) = new_timeline(&root.path().join("work")).await;
    write_disjoint_layers(&tl, 0, layers).await;
    publish(root, mgr, tl).await
}

/// Swap two paths atomically (`renameat2` with `RENAME_EXCHANGE`; a file
/// and a directory may swap).
fn exchange(a: &std::path::Path, b: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &std::path::Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let (a_c, b_c) = (c(a), c(b));
    // SAFETY: two NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a_c.as_ptr(),
            libc::AT_FDCWD,
            b_c.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    let err = std::io::Error::last_os_error();
    assert_eq!(rc, 0, "exchanging {} and {}: {err}", a.display(), b.display());
}
