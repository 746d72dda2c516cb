//! How many backups (basebackup, fullbackup; libpq and HTTP) are generated
//! at once: at most `max_concurrent_backups` in the daemon and
//! `max_concurrent_backups_per_tenant` per tenant. One more is refused at
//! once, naming the limit (SQLSTATE 53300 over libpq, 503 over HTTP),
//! rather than queued: a compute retries, and a queue would hold its
//! connection and memory anyway.
//!
//! With the tar streamed in chunks and the WAL segment made page by page, a
//! backup whose client does not read holds about one chunk being filled and
//! the chunks in flight (`tar.rs`, the HTTP channel, the socket buffer), so
//! these limits bound the memory of all backups together.
//!
//! A [`BackupSlot`] is taken in `prepare` and released when dropped (the
//! backup finished, failed, or its client went away).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use utils::id::TenantId;

use super::BackupError;
use crate::metrics::page_service as metrics;
use crate::tenant::Globals;

/// The configured limits (> 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupLimits {
    pub total: usize,
    pub per_tenant: usize,
}

/// Backups running now, in all and per tenant.
#[derive(Debug, Default)]
pub struct BackupSlots {
    running: Mutex<Running>,
}

#[derive(Debug, Default)]
struct Running {
    total: usize,
    /// Only tenants with a backup running.
    per_tenant: HashMap<TenantId, usize>,
}

/// One running backup; releases its slot when dropped.
pub struct BackupSlot {
    globals: Arc<Globals>,
    tenant: TenantId,
}

/// Take a slot for a backup of `tenant`, or refuse naming the limit reached.
pub fn acquire(
    globals: &Arc<Globals>,
    tenant: TenantId,
    limits: BackupLimits,
) -> Result<BackupSlot, BackupError> {
    let mut r = globals.backups.running.lock().unwrap();
    if r.total >= limits.total {
        metrics::BACKUPS_REFUSED.with_label_values(&["total"]).inc();
        return Err(BackupError::TooMany(format!(
            "{} backups are being generated, the most this pageserver runs at once \
             (max_concurrent_backups); retry later",
            r.total
        )));
    }
    let mine = r.per_tenant.get(&tenant).copied().unwrap_or(0);
    if mine >= limits.per_tenant {
        metrics::BACKUPS_REFUSED.with_label_values(&["per_tenant"]).inc();
        return Err(BackupError::TooMany(format!(
            "{mine} backups of tenant {tenant} are being generated, the most per tenant \
             (max_concurrent_backups_per_tenant); retry later"
        )));
    }
    r.total += 1;
    *r.per_tenant.entry(tenant).or_default() += 1;
    metrics::BACKUPS_RUNNING.inc();
    Ok(BackupSlot { globals: globals.clone(), tenant })
}

impl Drop for BackupSlot {
    fn drop(&mut self) {
        let mut r = self.globals.backups.running.lock().unwrap();
        r.total -= 1;
        metrics::BACKUPS_RUNNING.dec();
        let mine = r.per_tenant.get_mut(&self.tenant).expect("a slot counted for its tenant");
        *mine -= 1;
        if *mine == 0 {
            r.per_tenant.remove(&self.tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_in_all_and_per_tenant_and_release_on_drop() {
        let g = Arc::new(Globals::default());
        let limits = BackupLimits { total: 3, per_tenant: 2 };
        let (a, b) = (TenantId::generate(), TenantId::generate());
        let a1 = acquire(&g, a, limits).unwrap();
        let a2 = acquire(&g, a, limits).unwrap();
        let e = acquire(&g, a, limits).err().unwrap().to_string();
        assert!(
            e.contains("max_concurrent_backups_per_tenant") && e.contains(&a.to_string()),
            "{e}"
        );
        let b1 = acquire(&g, b, limits).unwrap();
        let e = acquire(&g, b, limits).err().unwrap().to_string();
        assert!(e.contains("3 backups") && e.contains("(max_concurrent_backups)"), "{e}");
        drop(a1);
        let b2 = acquire(&g, b, limits).unwrap();
        drop((a2, b1, b2));
        let r = g.backups.running.lock().unwrap();
        assert_eq!((r.total, r.per_tenant.len()), (0, 0));
    }
}
