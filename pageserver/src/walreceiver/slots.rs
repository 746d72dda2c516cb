//! The replication slots of following timelines: which timeline of this
//! pageserver uses which slot, and releasing the slot of a timeline that is
//! deleted (alone or with its tenant) or whose bootstrap failed. A slot
//! left on a primary keeps its WAL there forever, until its disk fills, so
//! none is left silently.
//!
//! Rules:
//! - A slot is identified by the primary's cluster (`system_id`) and its
//!   name. No two timelines of this pageserver use one slot: a bootstrap
//!   creates its own (the primary refuses an existing name), and
//!   `PUT .../source` refuses a slot another timeline uses
//!   ([`check_unused`], under [`ADOPTION`] so two adoptions cannot race).
//!   So no timeline ever has to hold a slot back for another one.
//! - A deleted timeline's slot is dropped, whether the timeline created or
//!   adopted it (`WalSource::slot_origin`), unless another timeline of this
//!   pageserver still uses it: only possible with sources written before
//!   the refusal existed. That slot is kept and the answer names its user.
//! - The drop runs over a fresh replication connection, never over the
//!   session that failed: after an interrupted `BASE_BACKUP` that one is
//!   out of step with the server.
//! - A source with several hosts has the slot on each host recorded as
//!   holding it (`WalSource::slot_hosts`): each is dropped, and each that
//!   cannot be is named on its own.
//! - A slot that cannot be dropped is named with its server and the SQL
//!   that drops it in the HTTP answer and a WARN log line, and counted in
//!   `pageserver_replication_slots_left_total{cause}`.

use anyhow::Context;
use pq_proto::replication::ReplicationClient;
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};

use crate::metrics::walreceiver::METRICS;
use crate::tenant::mgr::TenantManager;
use crate::tenant::timeline::wal_source::WalSource;

/// Held from the check that a slot is unused until the adopting timeline's
/// source is durable.
pub static ADOPTION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Why a slot was released; the label of the metric.
#[derive(Debug, Clone, Copy)]
pub enum Cause {
    TimelineDelete,
    TenantDelete,
    BootstrapFailure,
    /// `PUT .../source` replaced the source that used it.
    SourceReplaced,
}

impl Cause {
    pub const ALL: [Cause; 4] = [
        Cause::TimelineDelete,
        Cause::TenantDelete,
        Cause::BootstrapFailure,
        Cause::SourceReplaced,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Cause::TimelineDelete => "timeline_delete",
            Cause::TenantDelete => "tenant_delete",
            Cause::BootstrapFailure => "bootstrap_failure",
            Cause::SourceReplaced => "source_replaced",
        }
    }
}

/// What became of a timeline's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    Dropped {
        slot: String,
    },
    /// Another timeline of this pageserver uses it (the message names it).
    Kept {
        slot: String,
        message: String,
    },
    /// It could not be dropped, or which slot it is is unknown: the message
    /// names what is left where and how to drop it.
    Left {
        slot: Option<String>,
        message: String,
    },
}

impl Release {
    /// The answer of a timeline delete, one entry of a tenant delete's:
    /// `{"slot_dropped": "<slot>"}`, or `{"slot_dropped": null,
    /// "slot_kept": "<slot>", "note": ...}`, or `{"slot_dropped": null,
    /// "slot_left": "<slot>" | null, "warning": ...}`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Release::Dropped { slot } => serde_json::json!({ "slot_dropped": slot }),
            Release::Kept { slot, message } => {
                serde_json::json!({ "slot_dropped": null, "slot_kept": slot, "note": message })
            }
            Release::Left { slot, message } => {
                serde_json::json!({ "slot_dropped": null, "slot_left": slot, "warning": message })
            }
        }
    }
}

/// The SQL that drops `slot` on its primary.
pub fn drop_sql(slot: &str) -> String {
    format!("SELECT pg_drop_replication_slot('{slot}')")
}

/// Drop `source.slot` on its host `addr` (`host:port`, one of its
/// connection string's) over a new replication connection; with `wait`,
/// wait until the walsender of a session that just ended releases it
/// (bound the call).
pub async fn drop_at(source: &WalSource, addr: &str, wait: bool) -> anyhow::Result<()> {
    let list = source.host_list()?;
    let Some(cs) = list.hosts.iter().find(|cs| cs.addr() == addr) else {
        anyhow::bail!("host {addr} is not in the connection string");
    };
    let mut client = ReplicationClient::connect_with(cs).await.context("connect")?;
    client.drop_slot(&source.slot, wait).await.context("DROP_REPLICATION_SLOT")?;
    Ok(())
}

/// Drop `source.slot` on every host that holds it; a message per host
/// where it is left ([`left_at`]).
pub async fn drop_everywhere(source: &WalSource, cause: Cause) -> Vec<String> {
    let mut left = Vec::new();
    for addr in source.slot_hosts() {
        match drop_at(source, &addr, false).await {
            Ok(()) => info!("dropped replication slot {} on {addr}", source.slot),
            Err(e) => left.push(left_at(source, &addr, &e, cause)),
        }
    }
    left
}

/// `slot` on `addr` (`host:port`) could not be dropped (`why`): the
/// message, logged at WARN and counted.
pub fn left_at(source: &WalSource, addr: &str, why: &anyhow::Error, cause: Cause) -> String {
    let message = format!(
        "replication slot {} on {addr} is left: it could not be dropped: {why:#}; it retains \
         WAL on that server until dropped there: {}",
        source.slot,
        drop_sql(&source.slot)
    );
    warn!("{message}");
    METRICS.slots_left.with_label_values(&[cause.label()]).inc();
    message
}

/// The timeline `(tenant, timeline)` that uses the slot of `source`, other
/// than `except`, if one does.
pub async fn user_of(
    tenants: &TenantManager,
    source: &WalSource,
    except: (TenantId, TimelineId),
) -> Option<(TenantId, TimelineId)> {
    tenants
        .all_wal_sources_on_disk()
        .await
        .into_iter()
        .find(|(tenant, timeline, s)| {
            (*tenant, *timeline) != except
                && s.system_id == source.system_id
                && s.slot == source.slot
        })
        .map(|(tenant, timeline, _)| (tenant, timeline))
}

/// Refuse `slot` of cluster `system_id` when a timeline of this pageserver
/// other than `me` uses it (the message names it).
pub async fn check_unused(
    tenants: &TenantManager,
    system_id: u64,
    slot: &str,
    me: (TenantId, TimelineId),
) -> Result<(), String> {
    let probe = WalSource::new(String::new(), slot.to_string(), system_id, Default::default());
    match user_of(tenants, &probe, me).await {
        None => Ok(()),
        Some((tenant, timeline)) => Err(format!(
            "replication slot {slot} is used by timeline {tenant}/{timeline} of this pageserver: \
             a slot serves one timeline (the other would lose the WAL this one released); create \
             another slot for this timeline"
        )),
    }
}

/// Release the slot of deleted timeline `(tenant, timeline)`, whose source
/// was `source` (see the module comment).
pub async fn release(
    tenants: &TenantManager,
    ids: (TenantId, TimelineId),
    source: &WalSource,
    cause: Cause,
) -> Release {
    let slot = source.slot.clone();
    if let Some((tenant, timeline)) = user_of(tenants, source, ids).await {
        let message = format!(
            "replication slot {slot} on {} is kept: timeline {tenant}/{timeline} of this \
             pageserver uses it",
            source.redacted_connstring()
        );
        info!("{message}");
        return Release::Kept { slot, message };
    }
    let left = drop_everywhere(source, cause).await;
    if left.is_empty() {
        info!(
            "dropped replication slot {slot} on {} of timeline {}/{}",
            source.redacted_connstring(),
            ids.0,
            ids.1
        );
        return Release::Dropped { slot };
    }
    Release::Left { message: left.join("; "), slot: Some(slot) }
}

/// The source of deleted timeline `(tenant, timeline)` could not be read
/// (`why`): its slot, if it had one, is left.
pub fn release_unknown(ids: (TenantId, TimelineId), why: &str, cause: Cause) -> Release {
    let default = format!("pageserver_{}", ids.1);
    let message = format!(
        "the WAL source of timeline {}/{} could not be read ({why}): if it followed a primary, \
         its replication slot there (by default {default}) is left and retains WAL until \
         dropped: find it in pg_replication_slots and drop it with {}",
        ids.0,
        ids.1,
        drop_sql(&default)
    );
    warn!("{message}");
    METRICS.slots_left.with_label_values(&[cause.label()]).inc();
    Release::Left { slot: None, message }
}

/// The timelines of deleted tenant `tenant` could not be listed (`why`):
/// the slots of those that followed a primary, if any, are left.
pub fn release_unknown_tenant(tenant: TenantId, why: &str, cause: Cause) -> Release {
    let message = format!(
        "the timelines of tenant {tenant} could not be listed ({why}): the replication slots of \
         those that followed a primary (by default pageserver_<timeline_id>) are left and \
         retain WAL until dropped: find them in pg_replication_slots and drop each with {}",
        drop_sql("<slot>")
    );
    warn!("{message}");
    METRICS.slots_left.with_label_values(&[cause.label()]).inc();
    Release::Left { slot: None, message }
}
