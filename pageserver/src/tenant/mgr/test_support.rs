//! Helpers of the remote storage tests: pageservers (tenant managers on
//! their own workdirs) sharing one remote storage on a local directory,
//! and remote indexes written directly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::TenantManager;
use crate::remote_storage::RemoteStorage;
use crate::tenant::lsn_by_time::LsnTimeRecord;
use crate::tenant::metadata::TimelineMetadata;
use crate::tenant::remote_timeline::index_part::IndexPart;
use crate::tenant::remote_timeline::{claim_generation, index_key, Generation};
use crate::tenant::storage_layer::LayerLevel;
use crate::tenant::timeline::wal_source::{SlotOrigin, WalSource};
use crate::tenant::{StorageConf, Timeline};

/// Remote storage in `root` (a local directory).
pub fn remote(root: &Path) -> Arc<RemoteStorage> {
    Arc::new(crate::remote_storage::local_for_tests(root, ""))
}

/// A pageserver on `workdir` with `remote` (or none).
pub async fn pageserver(workdir: &Path, remote: Option<&Arc<RemoteStorage>>) -> Arc<TenantManager> {
    let mut conf = StorageConf::for_tests(workdir);
    conf.remote_storage = remote.cloned();
    TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap()
}

/// Wait (10 s at most) until `tl`'s upload queue has uploaded an index
/// with everything it flushed.
pub async fn uploaded(tl: &Timeline) {
    let client = tl.remote_client().expect("a remote client");
    let lsn = tl.get_disk_consistent_lsn();
    let done = client.wait_uploaded(lsn, Duration::from_secs(10)).await;
    assert!(done, "timeline {}/{}: {lsn} not uploaded", tl.tenant_id, tl.timeline_id);
}

/// Wait (10 s at most) until the upload queue writes `path`; asserts it.
pub async fn appears(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{} was not written", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The file of object `key` in remote storage on `root`.
pub fn object(root: &Path, key: &str) -> PathBuf {
    root.join(key)
}

pub fn claim_file(root: &Path, tenant: TenantId, g: u32) -> PathBuf {
    root.join(format!("tenants/{tenant}/generations/{g:08x}"))
}

/// A manifest without layers whose history runs from 0x10 to 0x4f (one
/// empty L0 stratum), with an LSN-by-time sample.
pub fn manifest() -> TimelineMetadata {
    TimelineMetadata {
        empty_strata: vec![(LayerLevel::L0, Lsn(0x11)..Lsn(0x50))],
        disk_consistent_lsn: Lsn(0x4f),
        lsn_by_time: LsnTimeRecord::from_samples(vec![(1_700_000_000, Lsn(0x4f))]).unwrap(),
        ..TimelineMetadata::new_empty(Lsn(0x10), 16)
    }
}

pub fn wal_source() -> WalSource {
    let connstring = "postgres://u:secret@127.0.0.1:1/postgres".to_string();
    let slot = "pageserver_test".to_string();
    WalSource {
        consistent_lsn: Lsn(0x20),
        ..WalSource::new(connstring, slot, 7, SlotOrigin::Created)
    }
}

/// Claim `g` for `tenant` and upload an index of [`manifest`] for
/// `timeline` under it, as another pageserver of generation `g` would.
pub async fn seed_remote(
    rs: &RemoteStorage,
    tenant: TenantId,
    timeline: TimelineId,
    g: u32,
    source: Option<WalSource>,
) -> IndexPart {
    claim_generation(rs, tenant, Generation(g)).await.unwrap();
    let ip = IndexPart::new(Generation(g), &manifest(), &BTreeMap::new(), source);
    rs.put(&index_key(tenant, timeline, Generation(g)), ip.to_json().into()).await.unwrap();
    ip
}
