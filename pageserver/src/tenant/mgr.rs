//! `TenantManager`: the set of tenants of this pageserver.
//!
//! Tenant creation is durable before it is acknowledged: the directory is
//! built as `<id>.___temp`, fsynced, renamed into place and the parent
//! directory fsynced. Deletion renames to `<id>.___deleted` first. Start-up
//! removes leftovers of both.
//!
//! A tenant that cannot be loaded (a damaged layer or metadata file, a
//! missing directory) does not stop start-up: it is kept as Broken with the
//! reason (logged at ERROR, counted in `pageserver_broken_tenants_count`),
//! every request for it gets an error naming it, and deleting it works.
//! Every other tenant loads and serves. A timeline that cannot be loaded
//! makes only itself Broken (`Tenant::get_timeline` names it and the reason;
//! `pageserver_broken_timelines_count`); its tenant and siblings serve.
//! A tenant whose load could not reach remote storage is not Broken but
//! Activating, and its load is tried again with backoff (`activation.rs`).
//!
//! Concurrency: create, attach, detach (`attach.rs`) and delete of one
//! tenant run one at a time: each holds the tenant's id in `busy` (a
//! [`Busy`] guard) from its first check to its last change; a second one
//! meanwhile is refused at once (409 for a create, as for an existing
//! tenant; 503 "busy, retry" for the others). Reads go on meanwhile: they
//! see the tenant before or after the change, or a shut-down tenant's
//! "shutting down" errors while it is replaced.
//!
//! With remote storage, creating a tenant claims generation 1 (refused when
//! the tenant has claims: it exists elsewhere, attach it), and deleting one
//! also deletes its remote objects unless a newer generation is claimed
//! (`attachment::delete_tenant_objects`).

mod activation;
mod attach;
mod sources;

pub use activation::OnActive;
pub use attach::{LocationError, LocationMode, LocationOutcome, DETACH_UPLOAD_TIMEOUT};
pub use sources::TimelineSource;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};

use crate::metrics::storage as metrics;

use super::attachment::{self, RemoteDeletion, TenantFile};
use super::remote_timeline::Generation;
use super::{
    remove_dir_durably, Globals, StorageConf, Tenant, TenantError, Timeline, DELETED_SUFFIX,
};

pub struct TenantManager {
    conf: Arc<StorageConf>,
    globals: Arc<Globals>,
    cancel: CancellationToken,
    tenants: RwLock<HashMap<TenantId, Arc<Tenant>>>,
    /// Tenants that failed to load: id -> reason.
    broken: RwLock<HashMap<TenantId, String>>,
    /// Tenants whose load waits for remote storage (`activation.rs`).
    /// Disjoint from `tenants` and `broken`.
    activating: RwLock<HashMap<TenantId, activation::Activating>>,
    /// Set by `start_activation`.
    on_active: OnceLock<OnActive>,
    /// This manager, for the activation tasks it spawns.
    me: Weak<TenantManager>,
    /// Tenants being created, attached, detached or deleted (see the
    /// module comment).
    busy: Mutex<HashSet<TenantId>>,
}

/// Tenant `id` reserved in `busy` until dropped.
struct Busy<'a> {
    mgr: &'a TenantManager,
    id: TenantId,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let removed = self.mgr.busy.lock().unwrap().remove(&self.id);
        debug_assert!(removed, "tenant {} was reserved", self.id);
    }
}

impl TenantManager {
    /// Load every tenant under `<workdir>/tenants`, creating the directory.
    pub async fn load(
        conf: Arc<StorageConf>,
        cancel: CancellationToken,
    ) -> anyhow::Result<Arc<TenantManager>> {
        let dir = conf.tenants_dir();
        let engine = &conf.io_engine;
        engine.create_dir_all(&dir).await?;
        let globals = Arc::new(Globals::default());
        let mut tenants = HashMap::new();
        let mut broken = HashMap::new();
        let mut activating = HashMap::new();
        // Once one tenant found the store unavailable, the others are not
        // tried here (each try can take `remote_storage.timeout`): they are
        // Activating at once, tried by their activation tasks.
        let mut store_down: Option<(TenantId, String)> = None;
        for entry in engine.read_dir(&dir).await? {
            let name = entry.name_lossy();
            let path = dir.join(&entry.name);
            if name.ends_with(io_engine::TEMP_SUFFIX) || name.ends_with(DELETED_SUFFIX) {
                info!("removing unfinished tenant directory {}", path.display());
                engine.remove_dir_all(&path).await?;
                continue;
            }
            let Ok(id) = name.parse::<TenantId>() else {
                warn!("ignoring unexpected entry {}", path.display());
                continue;
            };
            if let Some((first, reason)) = &store_down {
                activating.insert(id, activation::not_tried(*first, reason, &cancel));
                continue;
            }
            match Tenant::load(conf.clone(), globals.clone(), id, path, cancel.child_token()).await
            {
                Ok(t) => {
                    tenants.insert(id, t);
                }
                Err(e) => match activation::park(id, &e, &cancel) {
                    activation::Parked::Activating(a) => {
                        store_down = Some((id, a.reason().to_string()));
                        activating.insert(id, a);
                    }
                    activation::Parked::Broken(reason) => {
                        broken.insert(id, reason);
                    }
                },
            }
        }
        if let Some((first, _)) = store_down {
            let not_tried = activating.len() - 1;
            info!(
                "{not_tried} tenants not tried at start-up: remote storage was unavailable for \
                 tenant {first}; their activation tasks try them"
            );
        }
        metrics::BROKEN_TENANTS.set(broken.len() as i64);
        metrics::ACTIVATING_TENANTS.set(activating.len() as i64);
        info!(
            "loaded {} tenants from {} ({} broken, {} activating)",
            tenants.len(),
            dir.display(),
            broken.len(),
            activating.len()
        );
        Ok(Arc::new_cyclic(|me| TenantManager {
            conf,
            globals,
            cancel,
            tenants: RwLock::new(tenants),
            broken: RwLock::new(broken),
            activating: RwLock::new(activating),
            on_active: OnceLock::new(),
            me: me.clone(),
            busy: Mutex::new(HashSet::new()),
        }))
    }

    pub fn conf(&self) -> &StorageConf {
        &self.conf
    }

    /// Reserve tenant `id` for a create, attach, detach or delete; `None`
    /// while another one runs.
    fn reserve(&self, id: TenantId) -> Result<Option<Busy<'_>>, TenantError> {
        if self.cancel.is_cancelled() {
            return Err(TenantError::ShuttingDown);
        }
        if !self.busy.lock().unwrap().insert(id) {
            return Ok(None);
        }
        Ok(Some(Busy { mgr: self, id }))
    }

    /// `reserve`, with "busy" as an error.
    fn reserve_or_busy(&self, id: TenantId) -> Result<Busy<'_>, TenantError> {
        self.reserve(id)?.ok_or_else(|| {
            TenantError::Busy(format!(
                "tenant {id} is busy: it is being created, attached, detached or deleted; retry"
            ))
        })
    }

    fn is_here(&self, id: TenantId) -> bool {
        self.tenants.read().unwrap().contains_key(&id)
            || self.broken.read().unwrap().contains_key(&id)
            || self.activating.read().unwrap().contains_key(&id)
    }

    fn tenant_dir(&self, id: TenantId) -> std::path::PathBuf {
        self.conf.tenants_dir().join(id.to_string())
    }

    /// A new, empty tenant; with remote storage it claims generation 1
    /// (409 when the tenant exists in remote storage).
    pub async fn create_tenant(&self, id: TenantId) -> Result<Arc<Tenant>, TenantError> {
        let exists = || TenantError::AlreadyExists(format!("tenant {id}"));
        let _busy = self.reserve(id)?.ok_or_else(exists)?;
        if self.is_here(id) {
            return Err(exists());
        }
        let generation = match &self.conf.remote_storage {
            Some(rs) => Some(attachment::claim_new_tenant(rs, id).await?),
            None => None,
        };
        let t = self.create_tenant_inner(id, generation).await?;
        self.tenants.write().unwrap().insert(id, t.clone());
        match generation {
            Some(g) => info!("created tenant {id} with generation {g}"),
            None => info!("created tenant {id}"),
        }
        Ok(t)
    }

    async fn create_tenant_inner(
        &self,
        id: TenantId,
        generation: Option<Generation>,
    ) -> Result<Arc<Tenant>, TenantError> {
        let final_dir = self.tenant_dir(id);
        let temp_dir = io_engine::temp_path(&final_dir);
        let engine = &self.conf.io_engine;
        if engine.exists(&temp_dir).await.context("create tenant")? {
            engine.remove_dir_all(&temp_dir).await.context("create tenant")?;
        }
        let tl_dir = temp_dir.join("timelines");
        engine.create_dir_all(&tl_dir).await.context("create tenant")?;
        if let Some(generation) = generation {
            TenantFile { generation }.persist(engine, &temp_dir).await?;
        }
        engine.fsync_dir(&tl_dir).await.context("create tenant")?;
        engine.fsync_dir(&temp_dir).await.context("create tenant")?;
        engine.rename(&temp_dir, &final_dir).await.context("create tenant")?;
        engine.fsync_dir(&self.conf.tenants_dir()).await.context("create tenant")?;
        Ok(Tenant::load(
            self.conf.clone(),
            self.globals.clone(),
            id,
            final_dir,
            self.cancel.child_token(),
        )
        .await?)
    }

    pub fn get_tenant(&self, id: TenantId) -> Result<Arc<Tenant>, TenantError> {
        if let Some(t) = self.tenants.read().unwrap().get(&id) {
            return Ok(t.clone());
        }
        if let Some(e) = self.activating_error(id) {
            return Err(e);
        }
        match self.broken.read().unwrap().get(&id) {
            Some(reason) => Err(TenantError::Broken { id, reason: reason.clone() }),
            None => Err(TenantError::NotFound(format!("tenant {id}"))),
        }
    }

    /// Tenants that could not be loaded, with the reason, sorted by id.
    pub fn list_broken(&self) -> Vec<(TenantId, String)> {
        let mut v: Vec<_> =
            self.broken.read().unwrap().iter().map(|(id, r)| (*id, r.clone())).collect();
        v.sort();
        v
    }

    pub fn list_tenants(&self) -> Vec<Arc<Tenant>> {
        let mut v: Vec<_> = self.tenants.read().unwrap().values().cloned().collect();
        v.sort_by_key(|t| t.id());
        v
    }

    pub fn get_timeline(
        &self,
        tenant: TenantId,
        timeline: TimelineId,
    ) -> Result<Arc<Timeline>, TenantError> {
        self.get_tenant(tenant)?.get_timeline(timeline)
    }

    /// Stop and remove the tenant (a Broken one too); with remote storage
    /// also its remote objects, unless a newer generation is claimed.
    pub async fn delete_tenant(&self, id: TenantId) -> Result<(), TenantError> {
        let _busy = self.reserve_or_busy(id)?;
        let generation = self.stop_and_unpublish(id, false).await?;
        remove_dir_durably(&self.conf, &self.tenant_dir(id)).await?;
        info!("deleted tenant {id}");
        self.delete_remote_objects(id, generation).await
    }

    /// Take tenant `id` (Active, Activating or Broken) out of the maps and stop it
    /// (with `flush`, after writing its in-memory data to disk). Returns
    /// its generation: the loaded one, or a Broken tenant's `tenant.json`.
    async fn stop_and_unpublish(
        &self,
        id: TenantId,
        flush: bool,
    ) -> Result<Option<Generation>, TenantError> {
        let removed = self.tenants.write().unwrap().remove(&id);
        if let Some(t) = removed {
            t.shutdown(flush).await;
            metrics::BROKEN_TIMELINES.sub(t.list_broken_timelines().len() as i64);
            return Ok(t.generation());
        }
        if self.unpark_activating(id) {
            // Not loaded: nothing to stop; its generation is in tenant.json.
        } else if self.broken.write().unwrap().remove(&id).is_some() {
            metrics::BROKEN_TENANTS.dec();
        } else {
            return Err(TenantError::NotFound(format!("tenant {id}")));
        }
        match TenantFile::load(&self.conf.io_engine, &self.tenant_dir(id)).await {
            Ok(file) => Ok(file.map(|f| f.generation)),
            Err(e) => {
                warn!("broken tenant {id}: its generation is unknown: {e:#}");
                Ok(None)
            }
        }
    }

    /// Delete the remote objects of deleted tenant `id`, which this
    /// pageserver attached with `generation` (nothing without one).
    async fn delete_remote_objects(
        &self,
        id: TenantId,
        generation: Option<Generation>,
    ) -> Result<(), TenantError> {
        let (Some(rs), Some(own)) = (&self.conf.remote_storage, generation) else {
            return Ok(());
        };
        match attachment::delete_tenant_objects(rs, id, own).await {
            Ok(RemoteDeletion::Deleted { objects }) => {
                info!("deleted the {objects} objects of tenant {id} in {}", rs.describe());
                Ok(())
            }
            Ok(RemoteDeletion::Skipped { newest }) => {
                info!(
                    "tenant {id} is deleted here only: generation {newest} is claimed in {}, \
                     above this pageserver's {own}, so its remote objects stay",
                    rs.describe()
                );
                Ok(())
            }
            Err(e) => Err(TenantError::Other(e.context(format!(
                "tenant {id} is deleted here, but its objects under tenants/{id}/ in {} could \
                 not all be deleted",
                rs.describe()
            )))),
        }
    }

    /// Flush in-memory data of every timeline (bounded), then stop all tasks.
    pub async fn shutdown(&self) {
        self.stop_activation().await;
        let tenants = self.list_tenants();
        info!("shutting down {} tenants", tenants.len());
        futures::future::join_all(tenants.iter().map(|t| t.shutdown(true))).await;
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod remote_tests;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
