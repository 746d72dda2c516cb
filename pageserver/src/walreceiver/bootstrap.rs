//! Starting to follow a primary: check its settings, create the slot, take
//! a base backup over the replication connection, import it, persist the
//! source with the new timeline, start the receiver. And the reverse:
//! adopting an existing slot (`PUT .../source`). Dropping a slot is
//! `slots.rs`.
//!
//! Failure leaves nothing behind: the timeline is created only by
//! `UninitializedTimeline::finish` (with `wal_source.json` inside it), and
//! a slot this code created is dropped again when a later step fails, over
//! a new connection (the failed session may be in the middle of a
//! `BASE_BACKUP`); if that fails too, the error names the slot left and
//! the SQL that drops it. A retry with the same ids then works.
//!
//! The backup is verified before the timeline becomes visible: every file
//! against the backup manifest's CRC-32C, every relation page against its
//! data checksum when the cluster has them (`import::manifest`). A backup
//! changed in transit fails the bootstrap, naming the file.

use std::sync::Arc;

use anyhow::Context;
use pq_proto::connstring::{ConnString, HostList, Step};
use pq_proto::replication::{validate_slot_name, BaseBackupOptions, ReplicationClient};
use tracing::info;
use utils::id::TimelineId;
use utils::lsn::Lsn;

use postgres_ffi::redo::has_native_redo;
use postgres_ffi::wal::rmgr_id;

use super::slots::{self, Cause};
use super::WalReceiverConf;
use crate::import::manifest::{BackupChecks, FileDigests};
use crate::import::{backup_parts, import_archives_unfinished, ImportError, Seed};
use crate::tenant::mgr::TenantManager;
use crate::tenant::timeline::wal_source::{SlotOrigin, WalSource};
use pageserver_api::models::{OnDivergence, WalSourceRequest};

use super::history::HistoryCheck;
use crate::tenant::{Tenant, Timeline};

/// Resource managers that modify relation pages, by their names in
/// `wal_consistency_checking`. Those without native redo
/// (`postgres_ffi::redo`) must be listed there, so that every change of
/// their pages carries an image.
pub const PAGE_RMGRS: &[(&str, u8)] = &[
    ("heap", rmgr_id::HEAP),
    ("heap2", rmgr_id::HEAP2),
    ("btree", rmgr_id::BTREE),
    ("hash", rmgr_id::HASH),
    ("gin", rmgr_id::GIN),
    ("gist", rmgr_id::GIST),
    ("sequence", rmgr_id::SEQUENCE),
    ("spgist", rmgr_id::SPGIST),
    ("brin", rmgr_id::BRIN),
    ("generic", rmgr_id::GENERIC),
];

/// Why following a primary could not start. Each names what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// Bad request: connection string, slot name, settings of the primary.
    #[error("{0}")]
    Refused(String),
    /// The slot exists already (create), does not (attach), or another
    /// timeline uses it (attach).
    #[error("{0}")]
    Slot(String),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
    /// The bootstrap failed after creating its slot: `note` says that it
    /// was dropped, or names it, its server and the SQL when it could not
    /// be (`left`).
    #[error("{error}; {note}")]
    AfterSlot { error: Box<BootstrapError>, note: String, left: bool },
}

fn refused(msg: impl Into<String>) -> BootstrapError {
    BootstrapError::Refused(msg.into())
}

/// Parse `source.connstring` (one host or several).
fn host_list(connstring: &str) -> Result<HostList, BootstrapError> {
    HostList::parse(connstring).map_err(|e| refused(format!("source.connstring: {e}")))
}

/// The host of `list` to take the base backup from or check a slot on:
/// the first that `target_session_attrs` accepts (`hosts.rs`), connected
/// and checked ([`connect_and_check`]). Returns the client, the server's
/// major version and the host (`host:port`). With several hosts, the
/// error names each host's reason.
pub async fn connect_chosen(
    list: &HostList,
) -> Result<(ReplicationClient, u32, String), BootstrapError> {
    if list.hosts.len() == 1 {
        let (client, major) = connect_and_check(&list.hosts[0]).await?;
        return Ok((client, major, list.hosts[0].addr()));
    }
    let order: Vec<usize> = (0..list.hosts.len()).collect();
    let mut probed = vec![None; list.hosts.len()];
    let mut clients: Vec<Option<(ReplicationClient, u32)>> = order.iter().map(|_| None).collect();
    let mut skipped = Vec::new();
    loop {
        match list.attrs().next_step(&order, &probed) {
            Step::Probe(i) => {
                let checked = match connect_and_check(&list.hosts[i]).await {
                    Ok((mut client, major)) => match super::hosts::role(&mut client).await {
                        Ok(role) => Ok((client, major, role)),
                        Err(e) => Err(format!("{e:#}")),
                    },
                    Err(e) => Err(e.to_string()),
                };
                match checked {
                    Ok((client, major, role)) => {
                        probed[i] = Some(Some(role));
                        clients[i] = Some((client, major));
                    }
                    Err(e) => {
                        probed[i] = Some(None);
                        skipped.push(format!("{}: {e}", list.hosts[i].addr()));
                    }
                }
            }
            Step::Take(i) => {
                let (client, major) = clients[i].take().expect("a probed host has its client");
                return Ok((client, major, list.hosts[i].addr()));
            }
            Step::Exhausted => {
                return Err(refused(format!(
                    "no listed host fits (target_session_attrs {}): {}",
                    list.attrs().as_str(),
                    skipped.join("; ")
                )))
            }
        }
    }
}

/// Create `source.slot` on each host of `list` but `except` (before the
/// base backup, so each holds the WAL from at or below its start);
/// returns the hosts that hold it now. A host that cannot be reached or
/// refuses is logged and left to the slot keeper (`keeper.rs`).
async fn slots_on_other_hosts(
    list: &HostList,
    except: &str,
    source: &WalSource,
    conf: &WalReceiverConf,
) -> Vec<String> {
    let mut holding = Vec::new();
    for cs in list.hosts.iter().filter(|cs| cs.addr() != except) {
        let addr = cs.addr();
        let work = async {
            let (mut client, _) = super::hosts::connect_checked(cs, source).await?;
            super::keeper::create(&mut client, &source.slot).await
        };
        match super::session::bounded(conf.timeout, work).await {
            Some(Ok(())) => {
                info!("created replication slot {} on {addr}", source.slot);
                holding.push(addr);
            }
            Some(Err(e)) => info!(
                "replication slot {} not created on {addr} now ({e:#}); the slot keeper retries",
                source.slot
            ),
            None => info!(
                "replication slot {} not created on {addr} now (no answer); the slot keeper \
                 retries",
                source.slot
            ),
        }
    }
    holding
}

/// Connect with `replication=true` and check the primary's settings.
/// Returns the client and the server's major version.
pub async fn connect_and_check(
    cs: &ConnString,
) -> Result<(ReplicationClient, u32), BootstrapError> {
    let mut client = ReplicationClient::connect_with(cs)
        .await
        .map_err(|e| refused(format!("cannot connect to the primary {}: {e}", cs.redacted())))?;
    let show = |v: Result<String, pq_proto::client::ClientError>, name: &str| {
        v.map_err(|e| refused(format!("cannot read the primary's {name}: {e}")))
    };
    let version_num = show(client.show("server_version_num").await, "server_version_num")?;
    let major = version_num.trim().parse::<u32>().map(|n| n / 10000).unwrap_or(0);
    if !(15..=18).contains(&major) {
        return Err(refused(format!(
            "the primary runs PostgreSQL server_version_num {version_num}; supported: 15 to 18"
        )));
    }
    let wal_level = show(client.show("wal_level").await, "wal_level")?;
    if wal_level != "replica" && wal_level != "logical" {
        return Err(refused(format!(
            "the primary has wal_level = {wal_level}; it must be replica or logical"
        )));
    }
    let checking = show(client.show("wal_consistency_checking").await, "wal_consistency_checking")?;
    check_consistency_checking(&checking)?;
    Ok((client, major))
}

/// `wal_consistency_checking` must be `all` or name every page rmgr that
/// has no native redo.
pub fn check_consistency_checking(value: &str) -> Result<(), BootstrapError> {
    let listed: Vec<String> =
        value.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect();
    if listed.iter().any(|s| s == "all") {
        return Ok(());
    }
    let missing: Vec<&str> = PAGE_RMGRS
        .iter()
        .filter(|(name, id)| !has_native_redo(*id) && !listed.iter().any(|s| s == name))
        .map(|(name, _)| *name)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let needed: Vec<&str> =
        PAGE_RMGRS.iter().filter(|(_, id)| !has_native_redo(*id)).map(|(n, _)| *n).collect();
    Err(refused(format!(
        "the primary has wal_consistency_checking = '{value}', which leaves out {}: this \
         pageserver has no native redo for those rmgrs yet, so their page changes must carry \
         images; set wal_consistency_checking = '{}' (it costs nothing while no such index is \
         written)",
        missing.join(", "),
        needed.join(",")
    )))
}

/// The slot name for a new timeline: as given, or `pageserver_<timeline>`.
pub fn slot_name(given: Option<&str>, timeline: TimelineId) -> Result<String, BootstrapError> {
    let name = given.map(str::to_string).unwrap_or_else(|| format!("pageserver_{timeline}"));
    validate_slot_name(&name).map_err(|e| refused(format!("source.slot: {e}")))?;
    Ok(name)
}

/// `POST .../timeline` with a source: the whole bootstrap (module comment).
pub async fn create_following_timeline(
    tenant: Arc<Tenant>,
    timeline_id: TimelineId,
    connstring: String,
    slot: Option<String>,
    on_divergence: OnDivergence,
    conf: Arc<WalReceiverConf>,
) -> Result<Arc<Timeline>, BootstrapError> {
    let slot = slot_name(slot.as_deref(), timeline_id)?;
    let list = host_list(&connstring)?;
    let (mut client, major, backup_host) = connect_chosen(&list).await?;
    let id = client.identify_system().await.context("IDENTIFY_SYSTEM")?;
    client.create_physical_slot(&slot, true).await.map_err(|e| {
        let e = e.to_string();
        let hint = if e.contains("already exists") {
            format!(
                " (a slot no timeline uses, e.g. one left by a bootstrap that crashed, is \
                 dropped with {})",
                slots::drop_sql(&slot)
            )
        } else {
            String::new()
        };
        BootstrapError::Slot(format!(
            "cannot create replication slot {slot} on the primary: {e}{hint}"
        ))
    })?;
    // `consistent_lsn` and the PostgreSQL timeline: set from the backup's end.
    let mut source = WalSource::new(connstring, slot, id.systemid, SlotOrigin::Created);
    source.on_divergence = on_divergence;
    source.slot_hosts = vec![backup_host.clone()];
    if list.hosts.len() > 1 {
        let others = slots_on_other_hosts(&list, &backup_host, &source, &conf).await;
        source.slot_hosts.extend(others);
    }
    info!(
        "created slot {} (PostgreSQL {major}) on {}; taking a base backup from {backup_host}",
        source.slot,
        source.slot_hosts.join(", ")
    );
    let result = backup_and_import(&mut client, &tenant, timeline_id, source.clone(), major).await;
    match result {
        Ok((tl, source)) => {
            super::start(&tenant, &tl, source, conf);
            Ok(tl)
        }
        Err(e) => {
            // This session may be out of step (an interrupted BASE_BACKUP):
            // close it, drop the slot over a new one.
            drop(client);
            Err(drop_after_failure(&source, e).await)
        }
    }
}

/// Drop the slot a failed bootstrap created; `error` is why it failed.
async fn drop_after_failure(source: &WalSource, error: BootstrapError) -> BootstrapError {
    let left = slots::drop_everywhere(source, Cause::BootstrapFailure).await;
    if left.is_empty() {
        info!("dropped replication slot {} after the failed bootstrap", source.slot);
        let note = format!("replication slot {} on the primary was dropped again", source.slot);
        return BootstrapError::AfterSlot { error: Box::new(error), note, left: false };
    }
    BootstrapError::AfterSlot { error: Box::new(error), note: left.join("; "), left: true }
}

/// The bootstrap after the slot: base backup, import, verification,
/// `source` persisted (with the backup's end as `consistent_lsn`), the
/// timeline published. The import is seeded with the backup's start LSN
/// and the server's `major`, so the tablespace archives, which come before
/// `backup_label`, are imported as they arrive, not spilled.
async fn backup_and_import(
    client: &mut ReplicationClient,
    tenant: &Arc<Tenant>,
    timeline_id: TimelineId,
    mut source: WalSource,
    major: u32,
) -> Result<(Arc<Timeline>, WalSource), BootstrapError> {
    let system_id = source.system_id;
    let opts = BaseBackupOptions {
        label: format!("pageserver {}/{timeline_id}", tenant.id()),
        fast_checkpoint: true,
        manifest: true,
        manifest_checksums: Some("CRC32C".to_string()),
    };
    let mut backup = client.base_backup_with(&opts).await.context("BASE_BACKUP")?;
    let start_lsn = Lsn(backup.start_lsn);
    let digests = FileDigests::new(start_lsn);
    let uninit = {
        // Every tablespace's archive, under pg_tblspc/<oid>/.
        let stream = Box::pin(backup_parts(&mut backup));
        let observer = Some(digests.observer());
        let seed = Some(Seed { start_lsn, pg_version: major });
        import_archives_unfinished(tenant.clone(), timeline_id, stream, observer, seed).await?
    };
    let end = backup.finish().await.context("the end of the base backup")?;
    let checks = BackupChecks {
        digests: &digests,
        manifest: end.manifest.as_deref(),
        system_identifier: system_id,
    };
    let verified = checks.verify().context("BASE_BACKUP verification")?;
    info!(
        "base backup verified: {} files, {} bytes match manifest version {}; {} relation page \
         checksums checked",
        verified.files, verified.bytes, verified.manifest_version, verified.pages_checked
    );
    source.consistent_lsn = Lsn(end.end_lsn);
    let tli_history = super::history::fetch(client, end.timeline).await?;
    source.set_history(&tli_history);
    let engine = &tenant.conf().io_engine;
    source.persist(engine, uninit.timeline().dir()).await?;
    // `finish` loads the timeline from its final directory, source included.
    let tl = uninit.finish().await.map_err(|e| BootstrapError::Other(e.into()))?;
    info!(
        "timeline {}/{timeline_id} follows the primary from {start_lsn}; readable from {}",
        tenant.id(),
        source.consistent_lsn
    );
    Ok((tl, source))
}

/// `PUT .../source`: check the server (settings, same cluster as the
/// timeline's control file), its PostgreSQL timeline history against the
/// timeline's (`history::check`), and the slot (exists, no other timeline
/// of this pageserver uses it, still holds the WAL from the timeline's
/// `last_record_lsn`; not checked when the histories diverged: ingest
/// stops there anyway), then stop the running receiver, if any, and
/// persist the source as adopted. A replaced source's slot, on another
/// server or with another name, is dropped ([`release_replaced`]).
///
/// Several hosts: the checks run on the host `target_session_attrs`
/// chooses ([`connect_chosen`]); every other listed host that does not
/// hold the slot yet (it joins, or the slot is another) gets it now, or
/// from the slot keeper when it cannot be reached; hosts that leave the
/// list have the old slot dropped. Returns the source and a message per
/// slot that could not be dropped (with the SQL that drops it).
pub async fn attach_source(
    tenants: &TenantManager,
    tl: &Arc<Timeline>,
    req: WalSourceRequest,
    conf: &WalReceiverConf,
) -> Result<(WalSource, Vec<String>), BootstrapError> {
    let existing = tl.wal_source();
    let slot =
        req.slot.ok_or_else(|| refused("source.slot: required (an existing physical slot)"))?;
    validate_slot_name(&slot).map_err(|e| refused(format!("source.slot: {e}")))?;
    let list = host_list(&req.connstring)?;
    let (mut client, major, checked_host) = connect_chosen(&list).await?;
    if major != tl.pg_version {
        return Err(refused(format!(
            "the primary runs PostgreSQL {major}, the timeline holds PostgreSQL {}",
            tl.pg_version
        )));
    }
    let id = client.identify_system().await.context("IDENTIFY_SYSTEM")?;
    let lsn = tl.get_last_record_lsn();
    let control = crate::walingest::read_control_file(tl, lsn).await?;
    if control.system_identifier != id.systemid {
        return Err(refused(format!(
            "the primary is cluster {}, the timeline was imported from cluster {}",
            id.systemid, control.system_identifier
        )));
    }
    let server = super::history::fetch(&mut client, id.timeline).await?;
    let own = existing.as_ref().map(|s| s.history()).transpose()?.flatten();
    let diverged =
        matches!(super::history::check(own.as_ref(), &server, lsn), HistoryCheck::Diverged(_));
    let _adoption = slots::ADOPTION.lock().await;
    slots::check_unused(tenants, id.systemid, &slot, (tl.tenant_id, tl.timeline_id))
        .await
        .map_err(BootstrapError::Slot)?;
    check_slot(&mut client, &slot, lsn, diverged).await?;
    drop(client);
    let mut source = WalSource::new(req.connstring, slot, id.systemid, SlotOrigin::Adopted);
    source.consistent_lsn = tl.min_readable_lsn();
    source.slot_hosts = vec![checked_host.clone()];
    if list.hosts.len() > 1 {
        let kept = existing.as_ref().filter(|old| old.slot == source.slot);
        let kept = kept.map(|old| old.slot_hosts()).unwrap_or_default();
        let joined: Vec<&ConnString> = list
            .hosts
            .iter()
            .filter(|cs| cs.addr() != checked_host && !kept.contains(&cs.addr()))
            .collect();
        let joining = HostList { hosts: joined.into_iter().cloned().collect(), ..list.clone() };
        source.slot_hosts.extend(slots_on_other_hosts(&joining, "", &source, conf).await);
        let listed: Vec<String> = list.hosts.iter().map(ConnString::addr).collect();
        let still = kept.into_iter().filter(|h| listed.contains(h) && *h != checked_host);
        source.slot_hosts.extend(still);
    }
    if let Some(old) = &existing {
        source.pg_tli = old.pg_tli;
        source.pg_tli_history = old.pg_tli_history.clone();
        source.on_divergence = old.on_divergence;
        super::stop(tl).await;
    }
    if let Some(on_divergence) = req.on_divergence {
        source.on_divergence = on_divergence;
    }
    tl.set_wal_source(Some(source.clone())).await?;
    let left = match existing {
        Some(old) => release_replaced(&old, &source, conf).await,
        None => Vec::new(),
    };
    Ok((source, left))
}

/// The slot exists, and (unless `diverged`) still holds WAL from `lsn`.
async fn check_slot(
    client: &mut ReplicationClient,
    slot: &str,
    lsn: Lsn,
    diverged: bool,
) -> Result<(), BootstrapError> {
    let info = client.read_slot(slot).await.context("READ_REPLICATION_SLOT")?;
    let Some(info) = info else {
        return Err(BootstrapError::Slot(format!("replication slot {slot} does not exist")));
    };
    match info.restart_lsn {
        _ if diverged => Ok(()),
        Some(restart) if Lsn(restart) <= lsn => Ok(()),
        other => Err(BootstrapError::Slot(format!(
            "replication slot {slot} no longer holds WAL from {lsn} (restart_lsn {}): the \
             timeline cannot catch up from it",
            other.map(|l| Lsn(l).to_string()).unwrap_or_else(|| "none".to_string())
        ))),
    }
}

/// Drop the old slot on each host of a source that `PUT .../source`
/// replaced where the new source does not use it (the host left the list,
/// or the slot is another); bounded by `wal_receiver_timeout` (after a
/// failover a host may be gone). One that cannot be dropped is named with
/// the SQL that drops it (WARN), counted, and returned.
async fn release_replaced(old: &WalSource, new: &WalSource, conf: &WalReceiverConf) -> Vec<String> {
    let listed: Vec<String> = match new.host_list() {
        Ok(l) => l.hosts.iter().map(ConnString::addr).collect(),
        Err(_) => Vec::new(),
    };
    let mut left = Vec::new();
    for addr in old.slot_hosts() {
        if old.slot == new.slot && listed.contains(&addr) {
            continue;
        }
        // The stopped receiver's walsender may hold the slot a moment longer.
        let dropped = slots::drop_at(old, &addr, true);
        let result = match super::session::bounded(conf.timeout, dropped).await {
            Some(r) => r,
            None => Err(anyhow::anyhow!("no answer within {:?}", conf.timeout)),
        };
        match result {
            Ok(()) => info!(
                "dropped replication slot {} on {addr}, which the new source does not use",
                old.slot
            ),
            Err(e) => left.push(slots::left_at(old, &addr, &e, Cause::SourceReplaced)),
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::walreceiver::METRICS;

    /// The primary is gone when the failed bootstrap drops its slot: the
    /// error keeps the cause and names the slot, the server and the SQL,
    /// and the slot is counted.
    #[tokio::test]
    async fn a_slot_that_cannot_be_dropped_is_named() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        }; // closed again: connections are refused
        let source = WalSource::new(
            format!("postgres://u:secret@127.0.0.1:{port}/postgres"),
            "pageserver_gone".to_string(),
            7,
            SlotOrigin::Created,
        );
        let counter = METRICS.slots_left.with_label_values(&[Cause::BootstrapFailure.label()]);
        let before = counter.get();
        let cause = BootstrapError::Other(anyhow::anyhow!("the import failed"));
        let e = drop_after_failure(&source, cause).await;
        assert!(matches!(e, BootstrapError::AfterSlot { left: true, .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.starts_with("the import failed; replication slot pageserver_gone on "),
            "{msg}"
        );
        assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
        assert!(msg.contains("SELECT pg_drop_replication_slot('pageserver_gone')"), "{msg}");
        assert!(!msg.contains("secret"), "{msg}");
        assert!(counter.get() > before);
    }
}
