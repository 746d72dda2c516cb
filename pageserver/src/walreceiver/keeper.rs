//! The slot keeper of a multi-host source: keeps the timeline's slot on
//! every listed host that can hold one (a primary or a physical standby),
//! and advances it there to the durable position, so that any of them can
//! serve the next session and none retains WAL for nothing.
//!
//! Every `slot_advance_interval` (`wal_receiver_slot_advance_interval`),
//! for each host but the one a session streams from (its slot is advanced
//! by the session's status updates), one at a time, bounded by
//! `wal_receiver_timeout`:
//! 1. connect (replication), check the cluster (system id), learn the
//!    role (`in_hot_standby`);
//! 2. a host not recorded as holding the slot (`WalSource::slot_hosts`:
//!    unreachable at bootstrap, or joined by `PUT .../source`) gets it
//!    (`CREATE_REPLICATION_SLOT ... RESERVE_WAL`; an existing one of that
//!    name is taken as ours), recorded durably (`hosts::edit_source`);
//! 3. over a normal connection, `pg_replication_slot_advance` to
//!    `Timeline::durable_lsn`, the `flush` position the streaming session
//!    reports, only when the slot is below it: never backwards. A slot
//!    recorded but missing there is recorded as missing (step 2 creates
//!    it again next time).
//!
//! Errors are per host: shown in the timeline detail (`HostState`),
//! counted (`pageserver_wal_source_host_errors_total{op}`), logged at
//! INFO once per change of error, never fatal to ingest. A source with one
//! host has nothing to keep: the keeper does nothing for it.
//!
//! Lifecycle: runs with the receiver (`walreceiver::start`), on its token.

use std::sync::Arc;

use anyhow::Context;
use pq_proto::client::Client;
use pq_proto::connstring::{ConnString, Role};
use pq_proto::replication::ReplicationClient;
use tokio_util::sync::CancellationToken;
use tracing::info;
use utils::lsn::Lsn;

use super::hosts::{self, edit_source};
use super::session::bounded;
use super::WalReceiverConf;
use crate::metrics::walreceiver::METRICS;
use crate::tenant::timeline::wal_source::{HostState, WalSource};
use crate::tenant::Timeline;

/// Run until `cancel` (module comment).
pub async fn run(tl: Arc<Timeline>, conf: Arc<WalReceiverConf>, cancel: CancellationToken) {
    let mut timer = tokio::time::interval(conf.slot_advance_interval);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = timer.tick() => {}
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick(&tl, &conf) => {}
        }
    }
}

/// One round over the hosts.
async fn tick(tl: &Timeline, conf: &WalReceiverConf) {
    let Some(source) = tl.wal_source() else { return };
    let Ok(list) = source.host_list() else { return };
    if list.hosts.len() < 2 {
        return;
    }
    let streaming = {
        let status = tl.receiver_status.lock().unwrap();
        status.host.clone().filter(|_| status.state == "streaming")
    };
    for cs in &list.hosts {
        let addr = cs.addr();
        if streaming.as_deref() == Some(addr.as_str()) {
            update(tl, &list.hosts, &addr, |_| {}); // listed, its slot the session's
            continue;
        }
        let Some(source) = tl.wal_source() else { return };
        let target = tl.durable_lsn();
        let kept = match bounded(conf.timeout, keep(tl, &source, cs, target)).await {
            Some(kept) => kept,
            None => Kept { role: None, result: Err(("connect", anyhow::anyhow!("no answer"))) },
        };
        record(tl, &list.hosts, &addr, kept);
    }
}

/// What one host said.
struct Kept {
    role: Option<Role>,
    /// The LSN the slot is at now (advanced or not), or the failed
    /// operation (the metric's `op`) and why.
    result: Result<Lsn, (&'static str, anyhow::Error)>,
}

/// Steps 1 to 3 of the module comment on one host.
async fn keep(tl: &Timeline, source: &WalSource, cs: &ConnString, target: Lsn) -> Kept {
    let addr = cs.addr();
    let mut client = match hosts::connect_checked(cs, source).await.map(|(c, _)| c) {
        Ok(c) => c,
        Err(e) => return Kept { role: None, result: Err(("connect", e)) },
    };
    let role = match hosts::role(&mut client).await {
        Ok(r) => r,
        Err(e) => return Kept { role: None, result: Err(("connect", e)) },
    };
    if !source.slot_hosts().contains(&addr) {
        if let Err(e) = create(&mut client, &source.slot).await {
            return Kept { role: Some(role), result: Err(("create", e)) };
        }
        info!("created replication slot {} on {addr} ({})", source.slot, role.as_str());
        let recorded = edit_source(tl, |s| Ok(s.set_slot_host(&addr, true))).await;
        if let Err(e) = recorded {
            return Kept { role: Some(role), result: Err(("create", e)) };
        }
    }
    drop(client);
    match advance(cs, &source.slot, target).await {
        Ok(Some(at)) => Kept { role: Some(role), result: Ok(at) },
        Ok(None) => {
            let forgot = edit_source(tl, |s| Ok(s.set_slot_host(&addr, false))).await;
            let why = anyhow::anyhow!("replication slot {} is missing there", source.slot);
            let why = forgot.err().map_or(why, |e| e.context("record the missing slot"));
            Kept { role: Some(role), result: Err(("advance", why)) }
        }
        Err(e) => Kept { role: Some(role), result: Err(("advance", e)) },
    }
}

/// Create the physical slot `slot` with `RESERVE_WAL`; one of that name
/// there already is taken as ours.
pub async fn create(client: &mut ReplicationClient, slot: &str) -> anyhow::Result<()> {
    match client.create_physical_slot(slot, true).await {
        Ok(_) => Ok(()),
        Err(e) if e.sqlstate() == Some("42710") => Ok(()), // duplicate_object
        Err(e) => Err(anyhow::Error::new(e).context("CREATE_REPLICATION_SLOT")),
    }
}

/// Advance `slot` on `cs` to `target` if it is below; where it is now, or
/// `None` when there is no such slot.
async fn advance(cs: &ConnString, slot: &str, target: Lsn) -> anyhow::Result<Option<Lsn>> {
    let plain = ConnString { replication: None, ..cs.clone() };
    let mut client = Client::connect_with(&plain, &[]).await.context("connect (SQL)")?;
    // The name passed `validate_slot_name` (lower case, digits, `_`).
    let q = format!("SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'");
    let res = client.simple_query(&q).await.context("read the slot")?;
    let Some(row) = res.rows.first() else { return Ok(None) };
    let at = row.first().cloned().flatten().and_then(|s| s.parse::<Lsn>().ok()).unwrap_or(Lsn(0));
    if at >= target {
        return Ok(Some(at));
    }
    let q = format!("SELECT end_lsn FROM pg_replication_slot_advance('{slot}', '{target}')");
    let res = client.simple_query(&q).await.context("pg_replication_slot_advance")?;
    let end = res.rows.first().and_then(|r| r.first().cloned().flatten());
    let end = end.and_then(|s| s.parse::<Lsn>().ok()).unwrap_or(target);
    METRICS.slot_advances.inc();
    Ok(Some(end.max(at)))
}

/// Apply `f` to the state of `addr`, the list rebuilt in the order of
/// `hosts` (entries of hosts no longer listed dropped); whether `addr` is
/// listed.
fn update(tl: &Timeline, hosts: &[ConnString], addr: &str, f: impl FnOnce(&mut HostState)) -> bool {
    let mut status = tl.receiver_status.lock().unwrap();
    let old = std::mem::take(&mut status.hosts);
    status.hosts = hosts
        .iter()
        .map(|cs| {
            let a = cs.addr();
            old.iter()
                .find(|h| h.host == a)
                .cloned()
                .unwrap_or(HostState { host: a, ..HostState::default() })
        })
        .collect();
    match status.hosts.iter_mut().find(|h| h.host == addr) {
        Some(h) => {
            f(h);
            true
        }
        None => false,
    }
}

/// Record what `addr` said: the detail, the metric, a log line when its
/// error changes.
fn record(tl: &Timeline, hosts: &[ConnString], addr: &str, kept: Kept) {
    update(tl, hosts, addr, |h| {
        if let Some(role) = kept.role {
            h.role = Some(role.as_str());
        }
        match kept.result {
            Ok(at) => {
                h.advanced_lsn = Some(h.advanced_lsn.map_or(at, |a| a.max(at)));
                if h.last_error.take().is_some() {
                    info!("host {addr} of the source answers again; its slot is at {at}");
                }
            }
            Err((op, e)) => {
                METRICS.host_errors.with_label_values(&[op]).inc();
                h.errors += 1;
                let msg = format!("{op}: {e:#}");
                if h.last_error.as_deref() != Some(msg.as_str()) {
                    info!("slot keeper, host {addr}: {msg}");
                }
                h.last_error = Some(msg);
            }
        }
    });
}
