//! A tenant's attachment to remote storage: its generation on this
//! pageserver (`tenant.json`) and the claim of it, the remote client of
//! each timeline, and the removal of a deleted tenant's objects.
//!
//! `<workdir>/tenants/<id>/tenant.json` is `{"generation": N}`, written
//! durably (`write_file_durably`: temp, fsync, rename, fsync dir) before
//! generation N is used for anything.
//!
//! Invariants:
//! - with remote storage configured, every loaded tenant has a generation,
//!   claimed in remote storage (`claim_generation`) before any of its
//!   timelines is loaded; a newer claim fails the load (the tenant is
//!   Broken, the reason naming both generations). A store that cannot be
//!   reached (`store_unavailable`) while claiming or downloading an index
//!   fails the whole load before any timeline is loaded; the manager keeps
//!   the tenant Activating and tries again (`mgr/activation.rs`). A tenant that existed
//!   before remote storage was configured (no `tenant.json`) gets
//!   generation 1. Without remote storage no tenant has a generation and
//!   `tenant.json` is not read;
//! - a timeline's remote client starts from the newest index at or below
//!   the tenant's generation (downloaded, or handed over by attach, which
//!   wrote the local manifest from that same index);
//! - a tenant's objects are deleted only while no newer generation than
//!   its own is claimed, and an object of a newer generation is never
//!   deleted (`remote_timeline`'s rule).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use io_engine::IoEngine;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};

use super::remote_timeline::client::RemoteTimelineClient;
use super::remote_timeline::index_part::IndexPart;
use super::remote_timeline::{
    claim_generation, download_newest_index, newest_generation, tenant_prefix, timeline_prefix,
    ClaimError, Generation, TimelineObject,
};
use super::{StorageConf, TenantError};
use crate::remote_storage::{RemoteError, RemoteStorage};

pub const TENANT_FILE: &str = "tenant.json";
/// A tenant file is a few bytes; anything larger is damage.
const MAX_TENANT_FILE_BYTES: usize = 4096;

/// `tenant.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantFile {
    pub generation: Generation,
}

impl TenantFile {
    /// The file of the tenant in `dir`, if it has one.
    pub async fn load(engine: &IoEngine, dir: &Path) -> anyhow::Result<Option<TenantFile>> {
        let path = dir.join(TENANT_FILE);
        if !engine.exists(&path).await? {
            return Ok(None);
        }
        let bytes = engine.read_file(&path, MAX_TENANT_FILE_BYTES).await?;
        let file: TenantFile = serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("{} is not a valid tenant file: {e}", path.display()))?;
        anyhow::ensure!(
            file.generation.0 >= 1,
            "{} says generation 0, which is not valid",
            path.display()
        );
        Ok(Some(file))
    }

    /// Write (or replace) the file of the tenant in `dir`, durably.
    pub async fn persist(&self, engine: &IoEngine, dir: &Path) -> anyhow::Result<()> {
        assert!(self.generation.0 >= 1, "generation 0 is not valid");
        let json = serde_json::to_vec(self).expect("a TenantFile serializes");
        let path = dir.join(TENANT_FILE);
        engine
            .write_file_durably(&path, &json)
            .await
            .with_context(|| format!("write {} (generation {})", path.display(), self.generation))
    }
}

/// The generation tenant `id` (in `dir`) is attached with here, claimed
/// in remote storage; `None` without remote storage.
pub(super) async fn claim_at_load(
    conf: &StorageConf,
    id: TenantId,
    dir: &Path,
) -> anyhow::Result<Option<Generation>> {
    let Some(rs) = &conf.remote_storage else { return Ok(None) };
    let engine = &conf.io_engine;
    let file = TenantFile::load(engine, dir).await?;
    let generation = file.map_or(Generation(1), |f| f.generation);
    if file.is_none() {
        info!("tenant {id} has no {TENANT_FILE}: it predates remote storage here; generation 1");
    }
    claim_generation(rs, id, generation)
        .await
        .with_context(|| format!("claim generation {generation} in {}", rs.describe()))?;
    if file.is_none() {
        TenantFile { generation }.persist(engine, dir).await?;
    }
    Ok(Some(generation))
}

/// A new tenant's first claim: generation 1, refused when the tenant has
/// claims already (it exists in remote storage: attach it instead).
pub(super) async fn claim_new_tenant(
    rs: &RemoteStorage,
    id: TenantId,
) -> Result<Generation, TenantError> {
    let newest = newest_generation(rs, id)
        .await
        .with_context(|| format!("create tenant {id}: list its claims"))?;
    if let Some(g) = newest {
        return Err(TenantError::Conflict(format!(
            "tenant {id} already exists in remote storage ({}, generation {g} is claimed): \
             attach it with PUT /v1/tenant/{id}/location_config",
            rs.describe()
        )));
    }
    let first = Generation(1);
    claim_generation(rs, id, first).await.map_err(|e| TenantError::Conflict(e.to_string()))?;
    Ok(first)
}

/// Whether a failed load (or claim) is remote storage that could not be
/// reached or refused the request (network, timeout, credentials): a
/// state of the store, not damage of the tenant, so the load is tried
/// again later. A stale generation, a damaged index or local file is not.
pub fn store_unavailable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<RemoteError>().is_some_and(RemoteError::is_unavailable)
            || matches!(c.downcast_ref::<ClaimError>(), Some(ClaimError::Remote(r)) if r.is_unavailable())
    })
}

/// Where a timeline's remote client gets its remote state from.
pub(super) enum RemoteIndex {
    /// Known: downloaded by the load (`fetch_indexes`), handed over by
    /// attach, or `None` (no index yet, a new timeline).
    Given(Option<IndexPart>),
    /// The index could not be downloaded or read for a reason other than
    /// an unreachable store: the timeline is Broken with it.
    Unusable(anyhow::Error),
}

/// The remote index of each of `timelines` (local timelines of tenant
/// `id`), the ones in `given` (handed over by attach) as they are, the
/// others the newest at or below `generation`, downloaded now: before any
/// timeline is loaded, so a store that cannot be reached fails the
/// tenant's load as a whole (`store_unavailable`; the manager tries
/// again) instead of making timelines Broken. Without remote storage every
/// index is `Given(None)`.
pub(super) async fn fetch_indexes(
    conf: &StorageConf,
    id: TenantId,
    generation: Option<Generation>,
    timelines: &[TimelineId],
    mut given: HashMap<TimelineId, IndexPart>,
) -> anyhow::Result<HashMap<TimelineId, RemoteIndex>> {
    let mut out = HashMap::new();
    for &tl in timelines {
        let index = match (&conf.remote_storage, generation, given.remove(&tl)) {
            (_, _, Some(ip)) => RemoteIndex::Given(Some(ip)),
            (Some(rs), Some(g), None) => match download_newest_index(rs, id, tl, g).await {
                Ok(ip) => RemoteIndex::Given(ip),
                Err(e) if store_unavailable(&e) => {
                    return Err(e.context(format!(
                        "download the remote index of timeline {id}/{tl} (generation <= {g})"
                    )));
                }
                Err(e) => RemoteIndex::Unusable(
                    e.context(format!("the remote index of generation <= {g}")),
                ),
            },
            _ => RemoteIndex::Given(None),
        };
        out.insert(tl, index);
    }
    Ok(out)
}

/// The remote client of timeline `ids.1` (local directory `dir`), or
/// `None` without remote storage.
pub(super) async fn timeline_client(
    conf: &StorageConf,
    ids: (TenantId, TimelineId),
    generation: Option<Generation>,
    dir: &Path,
    index: RemoteIndex,
) -> anyhow::Result<Option<Arc<RemoteTimelineClient>>> {
    let (Some(rs), Some(generation)) = (&conf.remote_storage, generation) else {
        debug_assert!(generation.is_none(), "a generation without remote storage");
        return Ok(None);
    };
    let index = match index {
        RemoteIndex::Given(index) => index,
        RemoteIndex::Unusable(e) => return Err(e),
    };
    if let Some(ip) = &index {
        assert!(
            ip.generation <= generation,
            "index of generation {} > {generation}",
            ip.generation
        );
    }
    let client = RemoteTimelineClient::new(
        rs.clone(),
        conf.io_engine.clone(),
        ids,
        generation,
        dir.to_path_buf(),
        index,
    );
    Ok(Some(Arc::new(client)))
}

/// Refuse to create timeline `ids.1` when remote storage holds objects
/// of it (a timeline of this id exists, or existed, elsewhere).
pub(super) async fn refuse_if_remote(
    conf: &StorageConf,
    ids: (TenantId, TimelineId),
) -> Result<(), TenantError> {
    let Some(rs) = &conf.remote_storage else { return Ok(()) };
    let (tenant, timeline) = ids;
    let prefix = timeline_prefix(tenant, timeline);
    let listed = rs.list(&prefix).await.context("create timeline: list its remote objects")?;
    if let Some(first) = listed.first() {
        return Err(TenantError::Conflict(format!(
            "timeline {tenant}/{timeline} already exists in remote storage ({}: {} objects, \
             e.g. {})",
            rs.describe(),
            listed.len(),
            first.key
        )));
    }
    Ok(())
}

/// What [`delete_tenant_objects`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum RemoteDeletion {
    /// The tenant's objects of this generation and older are gone.
    Deleted { objects: usize },
    /// A newer generation is claimed (attached elsewhere): nothing deleted.
    Skipped { newest: Generation },
}

/// Delete tenant `id`'s objects, which generation `own` last wrote here:
/// only when no newer generation is claimed, and never an object of a
/// newer generation (one claimed meanwhile). Timelines first, the claims
/// last, so a deletion cut short still shows the tenant's claims.
pub async fn delete_tenant_objects(
    rs: &RemoteStorage,
    id: TenantId,
    own: Generation,
) -> anyhow::Result<RemoteDeletion> {
    let newest = newest_generation(rs, id).await.context("list the tenant's claims")?;
    if let Some(newest) = newest.filter(|n| *n > own) {
        return Ok(RemoteDeletion::Skipped { newest });
    }
    let listed = rs.list(&tenant_prefix(id)).await.context("list the tenant's objects")?;
    let (mut timelines, mut claims) = (Vec::new(), Vec::new());
    for object in listed {
        match object_generation(&object.key) {
            Some((g, _)) if g > own => {
                warn!("not deleting {}: generation {g} is newer than {own}", object.key);
            }
            Some((_, true)) => claims.push(object.key),
            Some((_, false)) => timelines.push(object.key),
            None => warn!("not deleting {}: not a tenant object", object.key),
        }
    }
    let objects = timelines.len() + claims.len();
    for key in timelines.iter().chain(&claims) {
        rs.delete(key).await.with_context(|| format!("delete {key}"))?;
    }
    Ok(RemoteDeletion::Deleted { objects })
}

/// The generation of a tenant object and whether it is a claim.
fn object_generation(key: &str) -> Option<(Generation, bool)> {
    let (dir, last) = key.rsplit_once('/')?;
    if dir.ends_with("/generations") {
        let parsed = (last.len() == 8).then(|| u32::from_str_radix(last, 16).ok()).flatten();
        return parsed.map(|g| (Generation(g), true));
    }
    match TimelineObject::parse(last)? {
        TimelineObject::Index(g)
        | TimelineObject::Layer(_, g)
        | TimelineObject::CommitTimes(_, g) => Some((g, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tenant_file_round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let engine = IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap();
        assert_eq!(TenantFile::load(&engine, dir.path()).await.unwrap(), None);
        let f = TenantFile { generation: Generation(7) };
        f.persist(&engine, dir.path()).await.unwrap();
        let text = std::fs::read_to_string(dir.path().join(TENANT_FILE)).unwrap();
        assert_eq!(text, r#"{"generation":7}"#);
        assert_eq!(TenantFile::load(&engine, dir.path()).await.unwrap(), Some(f));
        for bad in [&b"{\"generation\": 0}"[..], b"{\"generation\": -1}", b"{}", b"junk"] {
            std::fs::write(dir.path().join(TENANT_FILE), bad).unwrap();
            let err = TenantFile::load(&engine, dir.path()).await.unwrap_err().to_string();
            assert!(err.contains(TENANT_FILE), "{err}");
        }
    }

    #[test]
    fn an_unreachable_store_is_not_damage() {
        let refused = || object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        };
        let (key, store) = ("tenants/t/generations".to_string(), "S3 bucket b".to_string());
        let down = RemoteError::Store {
            op: "list",
            key: key.clone(),
            store: store.clone(),
            source: refused(),
        };
        let e = anyhow::Error::new(ClaimError::Remote(down)).context("claim generation 1");
        assert!(store_unavailable(&e), "{e:#}");
        let timeout = RemoteError::Timeout {
            op: "get",
            key: key.clone(),
            store: store.clone(),
            timeout: std::time::Duration::from_secs(1),
        };
        assert!(store_unavailable(&anyhow::Error::new(timeout).context("download the index")));
        let t = TenantId::generate();
        let stale = ClaimError::Stale { tenant: t, wanted: 1, newest: 2 };
        assert!(!store_unavailable(&anyhow::Error::new(stale).context("claim generation 1")));
        let gone = RemoteError::NotFound { key, store };
        assert!(!store_unavailable(&anyhow::Error::new(gone)));
        assert!(!store_unavailable(&anyhow::anyhow!("object k is not a valid index")));
    }

    #[test]
    fn object_generations_parse() {
        let t = TenantId::generate();
        let claim = format!("tenants/{t}/generations/0000000a");
        assert_eq!(object_generation(&claim), Some((Generation(10), true)));
        let tl = TimelineId::generate();
        let index = super::super::remote_timeline::index_key(t, tl, Generation(3));
        assert_eq!(object_generation(&index), Some((Generation(3), false)));
        assert_eq!(object_generation(&format!("tenants/{t}/generations/xyz")), None);
        assert_eq!(object_generation(&format!("tenants/{t}/stray")), None);
    }
}
