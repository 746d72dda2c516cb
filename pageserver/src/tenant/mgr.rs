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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use utils::id::{TenantId, TimelineId};

use crate::metrics::storage as metrics;

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
    creating: Mutex<HashSet<TenantId>>,
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
            match Tenant::load(conf.clone(), globals.clone(), id, path, cancel.child_token()).await
            {
                Ok(t) => {
                    tenants.insert(id, t);
                }
                Err(e) => {
                    let reason = format!("{e:#}");
                    error!("tenant {id} is broken and will not be served: {reason}");
                    broken.insert(id, reason);
                }
            }
        }
        metrics::BROKEN_TENANTS.set(broken.len() as i64);
        info!("loaded {} tenants from {} ({} broken)", tenants.len(), dir.display(), broken.len());
        Ok(Arc::new(TenantManager {
            conf,
            globals,
            cancel,
            tenants: RwLock::new(tenants),
            broken: RwLock::new(broken),
            creating: Mutex::new(HashSet::new()),
        }))
    }

    pub fn conf(&self) -> &StorageConf {
        &self.conf
    }

    pub async fn create_tenant(&self, id: TenantId) -> Result<Arc<Tenant>, TenantError> {
        if self.cancel.is_cancelled() {
            return Err(TenantError::ShuttingDown);
        }
        if self.tenants.read().unwrap().contains_key(&id)
            || self.broken.read().unwrap().contains_key(&id)
            || !self.creating.lock().unwrap().insert(id)
        {
            return Err(TenantError::AlreadyExists(format!("tenant {id}")));
        }
        let res = self.create_tenant_inner(id).await;
        self.creating.lock().unwrap().remove(&id);
        let t = res?;
        self.tenants.write().unwrap().insert(id, t.clone());
        info!("created tenant {id}");
        Ok(t)
    }

    async fn create_tenant_inner(&self, id: TenantId) -> Result<Arc<Tenant>, TenantError> {
        let final_dir = self.conf.tenants_dir().join(id.to_string());
        let temp_dir = io_engine::temp_path(&final_dir);
        let engine = &self.conf.io_engine;
        if engine.exists(&temp_dir).await.context("create tenant")? {
            engine.remove_dir_all(&temp_dir).await.context("create tenant")?;
        }
        let tl_dir = temp_dir.join("timelines");
        engine.create_dir_all(&tl_dir).await.context("create tenant")?;
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

    pub async fn delete_tenant(&self, id: TenantId) -> Result<(), TenantError> {
        let removed = self.tenants.write().unwrap().remove(&id);
        match removed {
            Some(t) => {
                t.shutdown(false).await;
                metrics::BROKEN_TIMELINES.sub(t.list_broken_timelines().len() as i64);
            }
            None => {
                if self.broken.write().unwrap().remove(&id).is_none() {
                    return Err(TenantError::NotFound(format!("tenant {id}")));
                }
                metrics::BROKEN_TENANTS.dec();
            }
        }
        remove_dir_durably(&self.conf, &self.conf.tenants_dir().join(id.to_string())).await?;
        info!("deleted tenant {id}");
        Ok(())
    }

    /// Flush in-memory data of every timeline (bounded), then stop all tasks.
    pub async fn shutdown(&self) {
        let tenants = self.list_tenants();
        info!("shutting down {} tenants", tenants.len());
        futures::future::join_all(tenants.iter().map(|t| t.shutdown(true))).await;
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests;
