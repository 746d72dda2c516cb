//! The WAL receiver: one task per timeline that follows a primary
//! (`WalSource`), streaming WAL over physical replication into the timeline.
//!
//! Lifecycle: started when the timeline is created with a source, when a
//! source is set (`PUT .../source`), and at start-up for every timeline that
//! has one; it is a background task of the timeline, so it ends when the
//! timeline's `cancel` fires (shutdown, deletion) and `Timeline::shutdown`
//! waits for it.
//!
//! Each session (`session.rs`) connects, checks the primary's system id,
//! starts replication on the slot at `last_record_lsn` (always a record
//! boundary), and ingests what arrives. A session that fails or ends (the
//! primary stopped or restarted, the network broke) is retried after a
//! capped exponential backoff, logged once per attempt with the reason.
//!
//! A primary that goes silent (no WAL and no keepalive for
//! `wal_receiver_timeout`; a PostgreSQL primary sends keepalives every
//! `wal_sender_timeout / 2` when idle, and the receiver asks for one at half
//! the timeout) ends the session with [`SessionEnd::Stalled`]: the
//! connection is dropped and retried with the same backoff as a failure.
//! The state is `stalled` from then until a session streams again (it is
//! not reset to `connecting` on the way), so the timeline detail shows it
//! for as long as the primary cannot be heard; `last_message_age_ms` says
//! for how long. Connecting, `IDENTIFY_SYSTEM` and `START_REPLICATION` are
//! bounded by the same timeout.
//!
//! A session that meets WAL a standby must refuse (`SessionEnd::Refused`:
//! the primary ran with `wal_level = minimal`) is not retried: reconnecting
//! would stream the same record again. The receiver stops with state
//! `stopped` and the reason and LSN in `last_error`; what was ingested
//! before that LSN stays readable. It runs again when an operator sets the
//! source again (`PUT .../source`) or at the next start-up, and refuses
//! again while that WAL is what follows.
//!
//! PostgreSQL timelines (TLIs): each session compares the server's
//! timeline history with the one the ingested WAL belongs to
//! (`history.rs`) and streams from `last_record_lsn` on the TLI that holds
//! it; when a TLI ends mid-stream (a promotion), the session goes on with
//! the next one on the same connection (`switch.rs`). A server whose
//! history forked below `last_record_lsn` ends the session with
//! [`SessionEnd::Diverged`]: like a refusal, not retried. The state is
//! `diverged`, `last_error` names both LSNs and both TLIs, one ERROR line
//! is logged, `pageserver_wal_source_diverged` is 1; what was ingested
//! stays readable. With `on_divergence = branch` the daemon goes on in a
//! branch at the fork that follows the server's history (`fork.rs`, which
//! states the task contract), and `last_error` names it. For that the
//! receiver holds a `Weak` of its tenant (the tenant owns the timeline,
//! which owns the task: a strong one would be a cycle).
//!
//! Stopping: each receiver has its own token (a child of the timeline's),
//! so `PUT .../source` can stop it ([`stop`]) and start another.
//!
//! Durability contract with the primary: the flush position reported is
//! `disk_consistent_lsn` (with remote storage: no more than
//! `remote_consistent_lsn`), so the slot never releases WAL that is not in
//! layer files (uploaded) yet; a crash, or an attach elsewhere, replays
//! from there.

pub mod bootstrap;
pub mod fork;
pub mod history;
pub mod hosts;
pub mod keeper;
mod session;
pub mod slots;
mod status;
mod switch;

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn, Instrument};

use crate::metrics::walreceiver::{FollowerSample, METRICS};
use crate::tenant::mgr::TenantManager;
use crate::tenant::timeline::wal_source::{ReceiverTask, WalSource};
use crate::tenant::{Tenant, Timeline};
use history::Divergence;
use pageserver_api::models::OnDivergence;

pub use session::SessionEnd;

/// Settings of every WAL receiver.
#[derive(Debug, Clone)]
pub struct WalReceiverConf {
    /// Standby status updates at least this often (PostgreSQL's
    /// `wal_receiver_status_interval` default is 10 s).
    pub status_interval: Duration,
    /// With no WAL for this long, make what was ingested durable and report
    /// the new flush position (so the slot advances and a stopping primary
    /// is not kept waiting).
    pub idle_flush_after: Duration,
    /// First retry delay; doubles per failed attempt up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// `wal_receiver_timeout`: with no message from the primary for this
    /// long, reconnect; `None`: never.
    pub timeout: Option<Duration>,
    /// `wal_receiver_slot_advance_interval`: how often the slot keeper of a
    /// multi-host source visits the hosts it does not stream from
    /// (`keeper.rs`).
    pub slot_advance_interval: Duration,
}

impl Default for WalReceiverConf {
    /// The defaults of `wal_receiver_status_interval`,
    /// `wal_receiver_idle_flush` and `wal_receiver_timeout`; backoff 100 ms doubling to 10 s.
    fn default() -> Self {
        WalReceiverConf {
            status_interval: Duration::from_secs(10),
            idle_flush_after: Duration::from_secs(10),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            timeout: Some(Duration::from_secs(60)),
            slot_advance_interval: Duration::from_secs(10),
        }
    }
}

/// Start the receiver of `tl` for `source`, with its slot keeper
/// (`keeper.rs`). Both run until the timeline's `cancel` fires or [`stop`]
/// stops them; one that runs already is stopped first (without waiting:
/// use [`stop`] to wait).
/// `tenant` is the timeline's (for `on_divergence = branch`).
pub fn start(
    tenant: &Arc<Tenant>,
    tl: &Arc<Timeline>,
    source: WalSource,
    conf: Arc<WalReceiverConf>,
) {
    debug_assert_eq!(tenant.id(), tl.tenant_id);
    let span = tracing::info_span!(
        "walreceiver",
        tenant_id = %tl.tenant_id,
        timeline_id = %tl.timeline_id
    );
    let task = ReceiverTask { cancel: tl.cancel.child_token(), done: CancellationToken::new() };
    if let Some(old) = tl.receiver_task.lock().unwrap().replace(task.clone()) {
        old.cancel.cancel();
    }
    let tl2 = Arc::clone(tl);
    let tenant = Arc::downgrade(tenant);
    tl.spawn_background(
        async move {
            let _done = task.done.drop_guard();
            let keeper = keeper::run(Arc::clone(&tl2), Arc::clone(&conf), task.cancel.clone());
            tokio::join!(run(tenant, tl2, source, conf, task.cancel), keeper);
        }
        .instrument(span),
    );
}

/// Stop the receiver of `tl`, if one runs, and wait until it has ended.
pub async fn stop(tl: &Timeline) {
    let task = tl.receiver_task.lock().unwrap().take();
    if let Some(task) = task {
        task.cancel.cancel();
        task.done.cancelled().await;
    }
}

/// Start the receiver of every loaded timeline that follows a primary.
pub fn start_all(tenants: &TenantManager, conf: &Arc<WalReceiverConf>) {
    for tenant in tenants.list_tenants() {
        for tl in tenant.list_timelines() {
            if let Some(source) = tl.wal_source() {
                start(&tenant, &tl, source, Arc::clone(conf));
            }
        }
    }
}

/// Refresh the per-timeline receiver gauges from every followed timeline
/// (called at each metrics scrape).
pub fn refresh_metrics(tenants: &TenantManager) {
    let now_us = pq_proto::replication::PgTimestamp::now().0;
    let mut samples = Vec::new();
    for tenant in tenants.list_tenants() {
        for tl in tenant.list_timelines() {
            if tl.wal_source().is_none() {
                continue;
            }
            let status = tl.receiver_status.lock().unwrap().clone();
            let (lag_bytes, lag_ms) = status.lag(tl.get_last_record_lsn(), now_us);
            samples.push(FollowerSample {
                tenant_id: tl.tenant_id.to_string(),
                timeline_id: tl.timeline_id.to_string(),
                lag_bytes,
                lag_seconds: lag_ms as f64 / 1000.0,
                reported: status.reported,
                stopped: status.state == "stopped",
                diverged: status.state == "diverged",
                pg_tli: tl.wal_source().and_then(|s| s.pg_tli),
            });
        }
    }
    METRICS.refresh(&samples);
}

async fn run(
    tenant: Weak<Tenant>,
    tl: Arc<Timeline>,
    source: WalSource,
    conf: Arc<WalReceiverConf>,
    cancel: CancellationToken,
) {
    info!(
        "following {} on slot {} from {}",
        source.redacted_connstring(),
        source.slot,
        tl.get_last_record_lsn()
    );
    let mut backoff = conf.min_backoff;
    // The host of the previous session: tried last by the next one.
    let mut avoid: Option<String> = None;
    loop {
        let ended = session::run(&tl, &source, &conf, &cancel, avoid.as_deref()).await;
        if cancel.is_cancelled() {
            break;
        }
        avoid = tl.receiver_status.lock().unwrap().host.clone();
        match ended {
            Ok(SessionEnd::Cancelled) => break,
            Ok(SessionEnd::Refused(refused)) => {
                error!("WAL refused: {refused}");
                METRICS.refusals.with_label_values(&[refused.reason.label()]).inc();
                let mut status = tl.receiver_status.lock().unwrap();
                status.last_error = Some(refused.to_string());
                status.state = "stopped";
                drop(status);
                info!("WAL receiver stopped at {}", tl.get_last_record_lsn());
                return;
            }
            Ok(SessionEnd::Diverged(d)) => {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = diverged(&tenant, &tl, &source, &d, &conf) => return,
                }
            }
            Ok(SessionEnd::Stalled(what)) => {
                warn!("{what} (wal_receiver_timeout); reconnecting in {backoff:?}");
                METRICS.stalls.inc();
                let mut status = tl.receiver_status.lock().unwrap();
                status.last_error = Some(format!("{what} (wal_receiver_timeout)"));
                status.state = "stalled";
            }
            Ok(end) => {
                info!("replication ended: {end}; reconnecting");
                backoff = conf.min_backoff;
                tl.receiver_status.lock().unwrap().last_error = None;
            }
            Err(e) => {
                warn!("replication failed: {e:#}; retrying in {backoff:?}");
                tl.receiver_status.lock().unwrap().last_error = Some(format!("{e:#}"));
            }
        }
        session::set_state_unless_stalled(&tl, "waiting to reconnect");
        METRICS.reconnects.inc();
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(conf.max_backoff);
    }
    session::set_state(&tl, "stopped");
    info!("WAL receiver stopped at {}", tl.get_last_record_lsn());
}

/// Ingest stops for good: one ERROR line, the state and reason for the
/// timeline detail; with `on_divergence = branch`, the branch that goes on
/// (or why there is none). Not cancel-safe by itself: see `fork.rs`.
async fn diverged(
    tenant: &Weak<Tenant>,
    tl: &Timeline,
    source: &WalSource,
    d: &Divergence,
    conf: &Arc<WalReceiverConf>,
) {
    let mut why = d.to_string();
    if source.on_divergence == OnDivergence::Branch {
        {
            let mut status = tl.receiver_status.lock().unwrap();
            status.last_error = Some(format!("{why}; on_divergence = branch: creating the branch"));
            status.state = "diverged";
        }
        let branched = match tenant.upgrade() {
            Some(tenant) => fork::branch_at_divergence(&tenant, tl, source, d, conf).await,
            None => Err(anyhow::anyhow!("the tenant is shutting down")),
        };
        why = match branched {
            Ok(id) => format!(
                "{why}; on_divergence = branch: continued in timeline {id}, a branch of this \
                 one at {} that follows PostgreSQL timeline {}",
                d.switch_lsn, d.new_tli
            ),
            Err(e) => {
                let id = fork::branch_id(tl.timeline_id, d.switch_lsn, d.new_tli);
                format!("{why}; on_divergence = branch: branch {id} does not follow yet: {e:#}")
            }
        };
    }
    error!("{why}");
    let mut status = tl.receiver_status.lock().unwrap();
    status.last_error = Some(why);
    status.state = "diverged";
}
