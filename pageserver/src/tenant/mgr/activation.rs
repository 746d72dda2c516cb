//! Activating tenants: a tenant whose load could not reach remote storage.
//!
//! With remote storage, loading a tenant claims its generation and
//! downloads the remote index of each timeline before any timeline is
//! loaded (`attachment.rs`). When the store cannot be reached or refuses
//! the request (down, a network error, a timeout, wrong credentials:
//! `attachment::store_unavailable`), that is a state of the store, not
//! damage of the tenant: the tenant is **Activating**, not Broken. Its
//! load is tried again after 1 s, doubling up to `remote_storage.
//! retry_max_backoff` (default 30 s), until it succeeds (the tenant is
//! Active, its WAL receivers start) or fails for another reason (Broken:
//! a newer generation is claimed, an index or local file is damaged).
//! Once one tenant found the store unavailable at start-up, the tenants
//! after it are not tried there (each try can take the store's request
//! timeout, and start-up would take that times the tenants): they are
//! Activating from the start, with 0 tries, and tried by their tasks.
//! The tenant API shows the state, the latest error (each cause once) and
//! the tries; `pageserver_activating_tenants_count` counts such tenants,
//! `pageserver_tenant_activation_retries_total` their failed tries.
//! Requests for an Activating tenant get 503 (HTTP) or an error naming the
//! state and the store's error (page service).
//!
//! An Activating tenant does not serve, not even from complete local
//! layers, and there is no setting that makes it: until the claim
//! succeeds this pageserver cannot know that no newer generation is
//! attached elsewhere. A restart that coincides with a store outage is
//! typically a failover: the tenant may already be attached to another
//! pageserver that has ingested past this one's local data, and pages
//! served here would be stale without any error. Reads wait for the claim
//! instead (split brain: `remote_timeline`'s generations).
//!
//! Concurrency: each try holds the tenant's `busy` reservation (see
//! `mgr.rs`), so it never interleaves with a delete, detach or attach of
//! the tenant; a try that finds the tenant reserved waits for the next
//! one. Delete removes the tenant from `activating` and cancels its task
//! (which ends at its next wait, or aborts a try in flight: the try's
//! tenant token is a child of the task's). Shutdown cancels every task and
//! waits for them; a try that finishes after the cancellation stops the
//! tenant it loaded instead of publishing it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use utils::id::TenantId;

use super::TenantManager;
use crate::metrics::storage as metrics;
use crate::remote_storage::config::{DEFAULT_RETRY_MAX_BACKOFF, RETRY_FIRST_BACKOFF};
use crate::tenant::attachment::store_unavailable;
use crate::tenant::{Tenant, TenantError};

/// Called with every tenant that becomes Active after being Activating
/// (the daemon starts its WAL receivers: a layer above this one).
pub type OnActive = Box<dyn Fn(&Arc<Tenant>) + Send + Sync>;

/// A tenant whose load waits for remote storage.
pub(super) struct Activating {
    /// The latest try's error, each cause once.
    reason: String,
    /// Tries so far (the load at start-up is the first).
    tries: u32,
    since: Instant,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// Where a tenant whose load failed goes.
pub(super) enum Parked {
    Activating(Activating),
    Broken(String),
}

/// Activating when the store is unavailable, else Broken; logged
/// here, once.
pub(super) fn park(id: TenantId, e: &anyhow::Error, cancel: &CancellationToken) -> Parked {
    let reason = utils::error::report_anyhow(e);
    if store_unavailable(e) {
        warn!(
            "tenant {id} is activating: remote storage is unavailable; its load is tried again \
             with backoff (each further failed try is logged at INFO): {reason}"
        );
        let cancel = cancel.child_token();
        let since = Instant::now();
        return Parked::Activating(Activating { reason, tries: 1, since, cancel, task: None });
    }
    error!("tenant {id} is broken and will not be served: {reason}");
    Parked::Broken(reason)
}

/// A tenant not tried at start-up: remote storage was unavailable for
/// tenant `first` (with `reason`), tried just before.
pub(super) fn not_tried(first: TenantId, reason: &str, cancel: &CancellationToken) -> Activating {
    Activating {
        reason: format!(
            "not tried yet: remote storage was unavailable for tenant {first}: {reason}"
        ),
        tries: 0,
        since: Instant::now(),
        cancel: cancel.child_token(),
        task: None,
    }
}

impl Activating {
    pub(super) fn reason(&self) -> &str {
        &self.reason
    }
}

impl TenantManager {
    /// Try the load of every Activating tenant again in the background
    /// (and of those parked later); `on_active` gets each that becomes
    /// Active. Called once, after start-up has started the loaded tenants.
    pub fn start_activation(&self, on_active: OnActive) {
        assert!(self.on_active.set(on_active).is_ok(), "start_activation is called once");
        let ids: Vec<TenantId> = self.activating.read().unwrap().keys().copied().collect();
        for id in ids {
            self.spawn_activation(id);
        }
    }

    /// Publish a failed load of tenant `id` as Activating (retried) or
    /// Broken (module comment).
    pub(super) fn park_failed_load(&self, id: TenantId, e: &anyhow::Error) {
        match park(id, e, &self.cancel) {
            Parked::Activating(a) => {
                self.activating.write().unwrap().insert(id, a);
                metrics::ACTIVATING_TENANTS.inc();
                if self.on_active.get().is_some() {
                    self.spawn_activation(id);
                }
            }
            Parked::Broken(reason) => {
                self.broken.write().unwrap().insert(id, reason);
                metrics::BROKEN_TENANTS.inc();
            }
        }
    }

    /// The error for a request to Activating tenant `id`, if it is one.
    pub(super) fn activating_error(&self, id: TenantId) -> Option<TenantError> {
        let reason = self.activating.read().unwrap().get(&id)?.reason.clone();
        Some(TenantError::Activating { id, reason })
    }

    /// Activating tenant `id`'s latest error and tries so far, if it is one.
    pub fn activating(&self, id: TenantId) -> Option<(String, u32)> {
        self.activating.read().unwrap().get(&id).map(|a| (a.reason.clone(), a.tries))
    }

    /// Activating tenants: id, latest error, tries so far; sorted by id.
    pub fn list_activating(&self) -> Vec<(TenantId, String, u32)> {
        let map = self.activating.read().unwrap();
        let mut v: Vec<_> = map.iter().map(|(id, a)| (*id, a.reason.clone(), a.tries)).collect();
        v.sort_by_key(|(id, _, _)| *id);
        v
    }

    /// Take tenant `id` out of `activating` (deleted or detached), ending
    /// its task; whether it was there.
    pub(super) fn unpark_activating(&self, id: TenantId) -> bool {
        let Some(a) = self.activating.write().unwrap().remove(&id) else { return false };
        a.cancel.cancel();
        metrics::ACTIVATING_TENANTS.dec();
        true
    }

    /// Cancel every activation task and wait for them (shutdown).
    pub(super) async fn stop_activation(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut map = self.activating.write().unwrap();
            map.values_mut()
                .filter_map(|a| {
                    a.cancel.cancel();
                    a.task.take()
                })
                .collect()
        };
        for t in tasks {
            if let Err(e) = t.await {
                warn!("a tenant activation task ended abnormally: {e}");
            }
        }
    }

    fn spawn_activation(&self, id: TenantId) {
        let Some(me) = self.me.upgrade() else { return };
        let mut map = self.activating.write().unwrap();
        let Some(a) = map.get_mut(&id) else { return };
        let cancel = a.cancel.clone();
        a.task = Some(tokio::spawn(async move { me.activate(id, cancel).await }));
    }

    /// The retry loop of Activating tenant `id` (module comment).
    async fn activate(self: Arc<Self>, id: TenantId, cancel: CancellationToken) {
        let rs = self.conf.remote_storage.as_ref();
        let max = rs.map_or(DEFAULT_RETRY_MAX_BACKOFF, |rs| rs.conf().retry_max_backoff);
        let mut backoff = RETRY_FIRST_BACKOFF.min(max);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(max);
            let _busy = match self.reserve(id) {
                Ok(Some(busy)) => busy,
                Ok(None) => continue, // being deleted or detached: look again later
                Err(_) => return,     // shutting down
            };
            if !self.activating.read().unwrap().contains_key(&id) {
                return;
            }
            let attempt = cancel.child_token();
            let (conf, globals, dir) =
                (self.conf.clone(), self.globals.clone(), self.tenant_dir(id));
            let loaded = tokio::select! {
                _ = cancel.cancelled() => return,
                r = Tenant::load(conf, globals, id, dir, attempt.clone()) => r,
            };
            match loaded {
                Ok(tenant) if cancel.is_cancelled() => {
                    tenant.shutdown(false).await;
                    return;
                }
                Ok(tenant) => return self.activated(id, tenant),
                Err(e) => {
                    attempt.cancel(); // timelines loaded before the failure stop
                    if !self.retry_failed(id, &e, backoff) {
                        return;
                    }
                }
            }
        }
    }

    /// Record a failed try; false when the tenant is Broken now (the
    /// failure was not the store's) or gone.
    fn retry_failed(&self, id: TenantId, e: &anyhow::Error, next: Duration) -> bool {
        if !store_unavailable(e) {
            if self.unpark_activating(id) {
                self.park_failed_load(id, e);
            }
            return false;
        }
        metrics::TENANT_ACTIVATION_RETRIES.inc();
        let reason = utils::error::report_anyhow(e);
        let mut map = self.activating.write().unwrap();
        let Some(a) = map.get_mut(&id) else { return false };
        a.tries += 1;
        info!(
            "tenant {id} is still activating: try {} failed, the next in {next:?}: {reason}",
            a.tries
        );
        a.reason = reason;
        true
    }

    fn activated(&self, id: TenantId, tenant: Arc<Tenant>) {
        let Some(a) = self.activating.write().unwrap().remove(&id) else {
            debug_assert!(false, "busy held: tenant {id} stays Activating until this");
            return;
        };
        metrics::ACTIVATING_TENANTS.dec();
        self.tenants.write().unwrap().insert(id, tenant.clone());
        let waited = a.since.elapsed();
        info!(
            "tenant {id} is active: remote storage answered after {} tries ({:.1} s)",
            a.tries + 1,
            waited.as_secs_f64()
        );
        if let Some(on_active) = self.on_active.get() {
            on_active(&tenant);
        }
    }
}
