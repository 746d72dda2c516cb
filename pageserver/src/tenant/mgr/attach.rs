//! Attach and detach: a tenant moves between pageservers through remote
//! storage (`PUT /v1/tenant/{id}/location_config`).
//!
//! - **Attach** (`AttachedSingle`, generation N), tenant not here: claim N
//!   (refused when a newer generation is claimed), list per remote
//!   timeline its objects once, download the newest index at or below N
//!   that listing shows, and refuse the attach (`RemoteIncomplete`, 503,
//!   naming them) if the index lists objects that listing lacks
//!   (one of another size is left to the
//!   download's size and CRC-32C check, which names it) (a lost bucket: the tenant would answer
//!   "not found" to reads; the pageserver that uploaded them may still
//!   have them and upload them again), build the tenant directory as
//!   `<id>.___temp` (`tenant.json`, per timeline `metadata` from the index
//!   and `wal_source.json` when it has one, its commit-time segments,
//!   downloaded and checked: a damaged one refuses the attach (409, naming
//!   the object)), fsync, rename into place, fsync
//!   the parent, then load it: its layers are remote-only and downloaded
//!   when read, and a background prefetch downloads them all
//!   (`tenant/prefetch.rs`). Loading a timeline makes its manifest the
//!   upload target, so every timeline uploads an index under N right away.
//!   The caller starts the WAL receivers (a layer above this one).
//! - Attach with the generation the tenant has here: nothing changes. With
//!   a higher one: claim it, shut the tenant down (flushing), persist
//!   `tenant.json`, load it again. With a lower one: refused.
//! - **Detach**: flush every timeline (each flush schedules an index
//!   upload), wait (bounded) until remote storage has everything flushed
//!   (`remote_consistent_lsn >= disk_consistent_lsn`), then stop the tenant
//!   and remove its directory durably; the remote copy stays. If the
//!   uploads do not finish in time, the tenant stays attached and serving.
//!
//! Concurrency contract: each of these holds the tenant's `busy`
//! reservation (see `mgr.rs`) throughout, so attach, detach, create and
//! delete of one tenant never interleave. Reads go on meanwhile. Detach
//! waits for uploads while ingest goes on, then stops the tenant without a
//! further flush: what arrived after the wait is dropped with the local
//! copy, never half-uploaded. It is not lost: the WAL receiver reports no
//! more than `remote_consistent_lsn` as its flush position
//! (`Timeline::durable_lsn`), so the primary keeps the WAL from the remote
//! copy's `disk_consistent_lsn`, where the next attachment resumes.
//! Generation safety (split brain) is `remote_timeline`'s: a claim is made
//! before anything of the new generation is read or written.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use io_engine::IoEngine;
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::TenantManager;
use crate::metrics::storage as metrics;
use crate::remote_storage::{ListedObject, RemoteStorage};
use crate::tenant::attachment::TenantFile;
use crate::tenant::remote_timeline::commit_times;
use crate::tenant::remote_timeline::index_part::IndexPart;
use crate::tenant::remote_timeline::{
    claim_generation, download_newest_index_listed, list_timelines, missing_objects, ClaimError,
    Generation, SizeCheck,
};
use crate::tenant::{prefetch, remove_dir_durably, Tenant, TenantError, Timeline};

/// How long a detach waits for everything flushed to be uploaded.
pub const DETACH_UPLOAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Index downloads of one attach in flight at once.
const ATTACH_INDEX_DOWNLOADS: usize = 8;
/// Most missing objects a refused attach names.
const MAX_NAMED: usize = 10;

/// Where a tenant should be, as `location_config` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocationMode {
    /// Attached here alone, with this generation (>= 1).
    AttachedSingle { generation: Generation },
    /// Not here; the remote copy stays.
    Detached,
}

pub enum LocationOutcome {
    /// The tenant is attached. `loaded`: this call (re)loaded it, so its
    /// WAL receivers are to be started.
    Attached {
        tenant: Arc<Tenant>,
        loaded: bool,
    },
    Detached,
}

/// Why a tenant could not be put where `location_config` asked.
#[derive(Debug, thiserror::Error)]
pub enum LocationError {
    #[error(
        "remote storage is not configured (config key remote_storage): tenants are attached \
         and detached through it"
    )]
    NoRemoteStorage,
    /// A generation conflict, or a tenant in a state that refuses the move;
    /// the message names both sides.
    #[error("{0}")]
    Conflict(String),
    /// Attach: the remote indexes list objects the store does not have
    /// (`missing`: up to `MAX_NAMED` of their keys, sorted; `more`: how many
    /// beyond those); nothing was created here.
    #[error(
        "tenant {tenant} is not attached: {} objects its remote indexes list are missing from \
         {store} ({}{}); the pageserver that uploaded them may still have them and upload them \
         again",
        missing.len() + more,
        missing.join(", "),
        if *more > 0 { format!(" and {more} more") } else { String::new() }
    )]
    RemoteIncomplete {
        tenant: TenantId,
        /// The store, as `RemoteStorage::describe` names it.
        store: String,
        missing: Vec<String>,
        more: usize,
    },
    /// Detach: uploads did not finish in time; the tenant stays attached.
    #[error(
        "tenant {tenant} stays attached: timeline {tenant}/{timeline} is flushed up to \
         {local_lsn}, but remote storage has it only up to {} after {waited:?}",
        remote_lsn.map_or("nothing".to_string(), |l| l.to_string())
    )]
    NotUploaded {
        tenant: TenantId,
        timeline: TimelineId,
        local_lsn: Lsn,
        remote_lsn: Option<Lsn>,
        waited: Duration,
    },
    #[error(transparent)]
    Tenant(#[from] TenantError),
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

impl TenantManager {
    /// Put tenant `id` where `mode` says (module comment). A detach waits
    /// up to `upload_timeout` for its uploads.
    pub async fn set_location(
        &self,
        id: TenantId,
        mode: LocationMode,
        upload_timeout: Duration,
    ) -> Result<LocationOutcome, LocationError> {
        let Some(rs) = self.conf.remote_storage.clone() else {
            return Err(LocationError::NoRemoteStorage);
        };
        let _busy = self.reserve_or_busy(id)?;
        match mode {
            LocationMode::AttachedSingle { generation } => self.attach(&rs, id, generation).await,
            LocationMode::Detached => {
                self.detach(id, upload_timeout).await?;
                Ok(LocationOutcome::Detached)
            }
        }
    }

    async fn attach(
        &self,
        rs: &RemoteStorage,
        id: TenantId,
        generation: Generation,
    ) -> Result<LocationOutcome, LocationError> {
        assert!(generation.0 >= 1, "generation 0 is refused by the caller");
        if let Some(reason) = self.broken.read().unwrap().get(&id) {
            return Err(LocationError::Conflict(format!(
                "tenant {id} is broken here ({reason}); detach it (mode Detached) or delete it \
                 before attaching it again"
            )));
        }
        if let Some(e) = self.activating_error(id) {
            return Err(LocationError::Conflict(format!(
                "{e}; wait until it is Active (then attach), or delete it"
            )));
        }
        let current = self.tenants.read().unwrap().get(&id).cloned();
        let Some(tenant) = current else {
            let tenant = self.attach_new(rs, id, generation).await?;
            return Ok(LocationOutcome::Attached { tenant, loaded: true });
        };
        let here = tenant.generation().expect("with remote storage every tenant has a generation");
        match here.cmp(&generation) {
            std::cmp::Ordering::Equal => Ok(LocationOutcome::Attached { tenant, loaded: false }),
            std::cmp::Ordering::Greater => Err(LocationError::Conflict(format!(
                "tenant {id} is attached here with generation {here}, above the requested \
                 generation {generation}"
            ))),
            std::cmp::Ordering::Less => {
                let tenant = self.reattach(rs, tenant, generation).await?;
                Ok(LocationOutcome::Attached { tenant, loaded: true })
            }
        }
    }

    /// Attach a tenant that is not here: claim, build its directory from
    /// the remote indexes, load it.
    async fn attach_new(
        &self,
        rs: &RemoteStorage,
        id: TenantId,
        generation: Generation,
    ) -> Result<Arc<Tenant>, LocationError> {
        claim(rs, id, generation).await?;
        let (indexes, listings) = download_indexes(rs, id, generation).await?;
        refuse_incomplete(rs, id, &indexes, &listings)?;
        if let Err(e) = self.build_tenant_dir(rs, id, generation, &indexes).await {
            // A damaged object refuses the attach (module comment).
            if e.downcast_ref::<commit_times::DamagedSegment>().is_some() {
                return Err(LocationError::Conflict(format!("tenant {id} is not attached: {e:#}")));
            }
            return Err(e.into());
        }
        let dir = self.tenant_dir(id);
        let cancel = self.cancel.child_token();
        let loaded = Tenant::load_with_indexes(
            self.conf.clone(),
            self.globals.clone(),
            id,
            dir,
            cancel.clone(),
            indexes,
        )
        .await;
        let tenant = match loaded {
            Ok(t) => t,
            Err(e) => {
                cancel.cancel(); // timelines loaded before the failure stop
                if let Err(rm) = remove_dir_durably(&self.conf, &self.tenant_dir(id)).await {
                    warn!("attach of tenant {id} failed; its directory stays: {rm:#}");
                }
                return Err(e.context(format!("load attached tenant {id}")).into());
            }
        };
        self.tenants.write().unwrap().insert(id, tenant.clone());
        prefetch::spawn_prefetch(tenant.list_timelines());
        let n = tenant.list_timelines().len();
        info!("attached tenant {id} with generation {generation} ({n} timelines)");
        Ok(tenant)
    }

    /// The tenant's directory as attach builds it (module comment); a
    /// failure leaves nothing behind but a temp directory, which the next
    /// attach or start-up removes.
    async fn build_tenant_dir(
        &self,
        rs: &RemoteStorage,
        id: TenantId,
        generation: Generation,
        indexes: &HashMap<TimelineId, IndexPart>,
    ) -> anyhow::Result<()> {
        let engine = &self.conf.io_engine;
        let final_dir = self.tenant_dir(id);
        anyhow::ensure!(
            !engine.exists(&final_dir).await?,
            "attach tenant {id}: {} exists, but the tenant is not loaded (a failed create?); \
             delete it first",
            final_dir.display()
        );
        let temp_dir = io_engine::temp_path(&final_dir);
        if engine.exists(&temp_dir).await? {
            engine.remove_dir_all(&temp_dir).await?;
        }
        let tl_dir = temp_dir.join("timelines");
        engine.create_dir_all(&tl_dir).await?;
        TenantFile { generation }.persist(engine, &temp_dir).await?;
        for (tl, ip) in indexes {
            write_timeline_dir(rs, engine, (id, *tl), &tl_dir.join(tl.to_string()), ip)
                .await
                .with_context(|| format!("attach timeline {id}/{tl}"))?;
        }
        engine.fsync_dir(&tl_dir).await?;
        engine.fsync_dir(&temp_dir).await?;
        engine.rename(&temp_dir, &final_dir).await?;
        engine.fsync_dir(&self.conf.tenants_dir()).await?;
        Ok(())
    }

    /// The tenant is here with a lower generation: claim the new one, stop
    /// it (flushing), persist the generation, load it again. Meanwhile
    /// requests for it get "shutting down" errors; if the load fails, the
    /// tenant is Broken with the reason.
    async fn reattach(
        &self,
        rs: &RemoteStorage,
        old: Arc<Tenant>,
        generation: Generation,
    ) -> Result<Arc<Tenant>, LocationError> {
        let id = old.id();
        claim(rs, id, generation).await?;
        old.shutdown(true).await;
        let dir = self.tenant_dir(id);
        let persisted = TenantFile { generation }.persist(&self.conf.io_engine, &dir).await;
        let cancel = self.cancel.child_token();
        let loaded = match persisted {
            Ok(()) => {
                let (conf, globals) = (self.conf.clone(), self.globals.clone());
                Tenant::load(conf, globals, id, dir, cancel.clone()).await
            }
            Err(e) => Err(e),
        };
        let removed = self.tenants.write().unwrap().remove(&id);
        debug_assert!(removed.is_some_and(|t| Arc::ptr_eq(&t, &old)), "busy held throughout");
        metrics::BROKEN_TIMELINES.sub(old.list_broken_timelines().len() as i64);
        match loaded {
            Ok(tenant) => {
                self.tenants.write().unwrap().insert(id, tenant.clone());
                let from = old.generation().expect("a generation");
                info!("tenant {id} moved from generation {from} to {generation}");
                Ok(tenant)
            }
            Err(e) => {
                cancel.cancel(); // timelines loaded before the failure stop
                self.park_failed_load(id, &e);
                Err(e.context(format!("reload tenant {id} with generation {generation}")).into())
            }
        }
    }

    /// Detach tenant `id` (module comment); one that is not here is
    /// detached already. A Broken one has nothing to upload: its local
    /// files are removed, whatever remote storage has of it stays.
    async fn detach(&self, id: TenantId, upload_timeout: Duration) -> Result<(), LocationError> {
        let tenant = self.tenants.read().unwrap().get(&id).cloned();
        match tenant {
            Some(t) => self.wait_tenant_uploaded(&t, upload_timeout).await?,
            None => {
                if let Some(e) = self.activating_error(id) {
                    return Err(LocationError::Conflict(format!(
                        "{e}; its local layers may not all be uploaded: wait until it is Active \
                         (then detach), or delete it"
                    )));
                }
                if !self.broken.read().unwrap().contains_key(&id) {
                    return Ok(());
                }
                warn!("detaching broken tenant {id}: only what remote storage has of it stays");
            }
        }
        let generation = self.stop_and_unpublish(id, false).await?;
        remove_dir_durably(&self.conf, &self.tenant_dir(id)).await?;
        let generation = generation.map_or("unknown".to_string(), |g| g.to_string());
        info!("detached tenant {id} (generation {generation}); its remote copy stays");
        Ok(())
    }

    /// Flush every timeline, then wait up to `timeout` in all until remote
    /// storage has everything flushed.
    async fn wait_tenant_uploaded(
        &self,
        tenant: &Tenant,
        timeout: Duration,
    ) -> Result<(), LocationError> {
        let started = Instant::now();
        let timelines = tenant.list_timelines();
        for (tl, reason) in tenant.list_broken_timelines() {
            warn!("detach: timeline {}/{tl} is broken ({reason}); it is not uploaded", tenant.id());
        }
        let flushes = timelines.iter().map(|tl| async move {
            let what = || format!("detach: flush timeline {}/{}", tl.tenant_id, tl.timeline_id);
            tl.freeze_and_flush().await.with_context(what)
        });
        futures::future::try_join_all(flushes).await?;
        for tl in &timelines {
            let left = timeout.saturating_sub(started.elapsed());
            wait_uploaded(tl, left, started).await?;
        }
        Ok(())
    }
}

/// Wait up to `left` until the uploaded index of `tl` reaches its
/// `disk_consistent_lsn`; `started`: when the detach began (for the error).
async fn wait_uploaded(
    tl: &Timeline,
    left: Duration,
    started: Instant,
) -> Result<(), LocationError> {
    let client = tl.remote_client().expect("with remote storage every timeline has a client");
    let local_lsn = tl.get_disk_consistent_lsn();
    if client.wait_uploaded(local_lsn, left).await {
        return Ok(());
    }
    Err(LocationError::NotUploaded {
        tenant: tl.tenant_id,
        timeline: tl.timeline_id,
        local_lsn,
        remote_lsn: client.remote_consistent_lsn(),
        waited: started.elapsed(),
    })
}

/// Claim `generation`; a stale one is a conflict naming both generations.
async fn claim(
    rs: &RemoteStorage,
    id: TenantId,
    generation: Generation,
) -> Result<(), LocationError> {
    match claim_generation(rs, id, generation).await {
        Ok(()) => Ok(()),
        Err(e @ ClaimError::Stale { .. }) => Err(LocationError::Conflict(e.to_string())),
        Err(ClaimError::Remote(e)) => Err(anyhow::Error::new(e)
            .context(format!("claim generation {generation} of tenant {id}"))
            .into()),
    }
}

/// The newest index at or below `generation` of every remote timeline of
/// `id`, and the listing of the timeline's objects it was chosen from (one
/// listing per timeline serves both); a timeline without one is left out
/// (logged).
async fn download_indexes(
    rs: &RemoteStorage,
    id: TenantId,
    generation: Generation,
) -> anyhow::Result<(HashMap<TimelineId, IndexPart>, HashMap<TimelineId, Vec<ListedObject>>)> {
    let timelines = list_timelines(rs, id).await.context("list the remote timelines")?;
    let downloads = futures::stream::iter(timelines).map(|tl| async move {
        let (ip, listed) = download_newest_index_listed(rs, id, tl, generation)
            .await
            .with_context(|| format!("the index of timeline {id}/{tl}"))?;
        if ip.is_none() {
            warn!("timeline {id}/{tl} has no index at or below generation {generation}: skipped");
        }
        anyhow::Ok(ip.map(|ip| (tl, ip, listed)))
    });
    let found: Vec<_> = downloads.buffer_unordered(ATTACH_INDEX_DOWNLOADS).try_collect().await?;
    let (mut indexes, mut listings) = (HashMap::new(), HashMap::new());
    for (tl, ip, listed) in found.into_iter().flatten() {
        indexes.insert(tl, ip);
        listings.insert(tl, listed);
    }
    Ok((indexes, listings))
}

/// Refuse the attach if an index lists objects the store lacks (module
/// comment), checked against the listing the index was chosen from; the
/// error names them.
fn refuse_incomplete(
    rs: &RemoteStorage,
    id: TenantId,
    indexes: &HashMap<TimelineId, IndexPart>,
    listings: &HashMap<TimelineId, Vec<ListedObject>>,
) -> Result<(), LocationError> {
    let mut missing = Vec::new();
    for (tl, ip) in indexes {
        let listed = listings.get(tl).expect("a listing per index");
        let keys = missing_objects(id, *tl, ip, listed, SizeCheck::AtDownload);
        missing.extend(keys.into_iter().map(|k| rs.full_key(&k)));
    }
    if missing.is_empty() {
        return Ok(());
    }
    missing.sort();
    let more = missing.len().saturating_sub(MAX_NAMED);
    missing.truncate(MAX_NAMED);
    let store = rs.describe().to_string();
    Err(LocationError::RemoteIncomplete { tenant: id, store, missing, more })
}

/// A timeline's directory as the index describes it: `metadata`, its
/// commit-time segments (downloaded and checked) and, when it follows a
/// primary, `wal_source.json` (each written durably).
async fn write_timeline_dir(
    rs: &RemoteStorage,
    engine: &IoEngine,
    ids: (TenantId, TimelineId),
    dir: &Path,
    ip: &IndexPart,
) -> anyhow::Result<()> {
    let md = ip.to_metadata()?;
    engine.create_dir_all(dir).await?;
    md.persist(engine, dir).await?;
    match &ip.commit_times {
        Some(ct) => commit_times::download_segments(rs, engine, ids, ct, dir).await?,
        None => info!(
            "timeline {}/{}: its index (generation {}) has no commit-time index (an older \
             pageserver wrote it): times before the attach answer past or nodata",
            ids.0, ids.1, ip.generation
        ),
    }
    if let Some(source) = &ip.wal_source {
        source.persist(engine, dir).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
