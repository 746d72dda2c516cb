//! `on_divergence = branch`: when the server a timeline follows has a
//! PostgreSQL timeline history that forked below what the timeline
//! ingested (`history::Divergence`), the daemon goes on in a new timeline,
//! a branch of the diverged one at the fork (the switch LSN), that follows
//! the server's history from there. The diverged timeline keeps what it
//! ingested, readable, with state `diverged`; its `last_error` names the
//! branch, whose detail names it back (`ancestor_timeline_id`,
//! `ancestor_lsn`).
//!
//! Invariants:
//! - One branch per fork: its id is derived from (diverged timeline, switch
//!   LSN, new TLI) ([`branch_id`]), and a timeline with that id which is a
//!   branch of the diverged one at the switch LSN counts as done. So a
//!   restart (clean or kill -9) after any step finds what the steps before
//!   it left and goes on from there; it never makes a second branch. A
//!   timeline with that id and another ancestor is an error, never reused.
//! - The switch LSN is a record boundary on both histories (the end of the
//!   last record the promoted server replayed) and at most the diverged
//!   timeline's `last_record_lsn` (that is what diverged means), so the
//!   branch starts at a point the diverged timeline has, and its own
//!   ingest starts on a record boundary of the new history.
//! - The slot: a new one on the server, `pageserver_<branch id>`, created
//!   with `RESERVE_WAL` (one that exists already, left by a crash between
//!   its creation and the source being recorded, is adopted). A fresh slot
//!   retains WAL only from its creation, not from the switch LSN: the
//!   branch's receiver streams from the switch LSN, and if the server no
//!   longer has that WAL, `START_REPLICATION` fails and the branch's
//!   `last_error` says so (retried; the branch stays). The slot is the
//!   branch's (`SlotOrigin::Created`): deleting the branch drops it.
//!
//! Steps (each durable before the next): create the branch
//! (`Tenant::create_branch`), create the slot, record the branch's source
//! (`wal_source.json`), start its receiver.
//!
//! Task contract: this runs in the diverged timeline's receiver task after
//! its session ended, so nothing ingests into the diverged timeline while
//! `create_branch` flushes it and (with remote storage) waits, bounded, for
//! its upload; the receiver holds no lock of the timeline meanwhile. The
//! caller races it against the receiver's cancel token: a timeline that
//! shuts down, or a `PUT .../source` that stops the receiver, drops it at
//! an await point. A creation dropped that way leaves no branch or a whole
//! one on disk (`tenant/branch.rs`), which the next start-up loads and
//! this module then finds by its id.

use std::sync::Arc;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};
use tracing::info;
use utils::id::TimelineId;
use utils::lsn::Lsn;

use super::history::Divergence;
use super::{bootstrap, WalReceiverConf};
use crate::tenant::timeline::wal_source::{SlotOrigin, WalSource};
use crate::tenant::{Tenant, TenantError, Timeline};
use pq_proto::connstring::ConnString;
use pq_proto::replication::ReplicationClient;

/// The id of the branch that follows the server's history after `old`
/// diverged at `switch_lsn` onto `new_tli`: the first 16 bytes of a
/// SHA-256 of the three (versioned by its prefix).
pub fn branch_id(old: TimelineId, switch_lsn: Lsn, new_tli: u32) -> TimelineId {
    let mut h = Sha256::new();
    h.update(b"pageserver on_divergence branch v1\0");
    h.update(old.as_bytes());
    h.update(switch_lsn.0.to_be_bytes());
    h.update(new_tli.to_be_bytes());
    let digest = h.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    TimelineId(id)
}

/// The steps of the module comment; the branch's id.
pub async fn branch_at_divergence(
    tenant: &Arc<Tenant>,
    tl: &Timeline,
    source: &WalSource,
    d: &Divergence,
    conf: &Arc<WalReceiverConf>,
) -> anyhow::Result<TimelineId> {
    assert!(d.switch_lsn <= d.last_record_lsn, "a divergence forks below what was ingested");
    let id = branch_id(tl.timeline_id, d.switch_lsn, d.new_tli);
    assert_ne!(id, tl.timeline_id);
    let branch = existing_or_new(tenant, tl, id, d.switch_lsn).await?;
    utils::failpoint::failpoint("divergence-branch::after-create")?;
    if branch.wal_source().is_some() {
        return Ok(id); // recorded before a restart: start-up started its receiver
    }
    let slot = bootstrap::slot_name(None, id)?;
    let holding = ensure_slots(source, &slot, conf).await?;
    utils::failpoint::failpoint("divergence-branch::after-slot")?;
    let mut new =
        WalSource::new(source.connstring.clone(), slot, source.system_id, SlotOrigin::Created);
    new.slot_hosts = holding;
    new.on_divergence = source.on_divergence;
    new.consistent_lsn = branch.min_readable_lsn();
    branch.set_wal_source(Some(new.clone())).await.context("record the branch's source")?;
    info!(
        "timeline {id}, a branch at {} of this diverged timeline, follows PostgreSQL timeline {} \
         on slot {}",
        d.switch_lsn, d.new_tli, new.slot
    );
    super::start(tenant, &branch, new, Arc::clone(conf));
    Ok(id)
}

/// The branch `id` at `lsn` of `tl`: found (created before a restart) or
/// created now.
async fn existing_or_new(
    tenant: &Arc<Tenant>,
    tl: &Timeline,
    id: TimelineId,
    lsn: Lsn,
) -> anyhow::Result<Arc<Timeline>> {
    match tenant.get_timeline(id) {
        Ok(branch) => {
            let ancestor = branch.ancestor().map(|(a, l)| (a.timeline_id, l));
            if ancestor != Some((tl.timeline_id, lsn)) {
                bail!(
                    "timeline {id}, the id of the branch at {lsn}, exists already with ancestor \
                     {ancestor:?}"
                );
            }
            Ok(branch)
        }
        Err(TenantError::NotFound(_)) => {
            Ok(tenant.create_branch(id, tl.timeline_id, Some(lsn)).await?)
        }
        Err(e) => Err(e.into()),
    }
}

/// [`ensure_slot`] on each host of `source`; the hosts that hold it (one
/// at least: the error of each otherwise). The slot keeper creates it on
/// the others later.
async fn ensure_slots(
    source: &WalSource,
    slot: &str,
    conf: &WalReceiverConf,
) -> anyhow::Result<Vec<String>> {
    let mut holding = Vec::new();
    let mut errors = Vec::new();
    for cs in source.host_list()?.hosts {
        match ensure_slot(&cs, slot, conf).await {
            Ok(()) => holding.push(cs.addr()),
            Err(e) => errors.push(format!("{}: {e:#}", cs.addr())),
        }
    }
    if holding.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(holding)
}

/// Create the physical slot `slot` with `RESERVE_WAL`, or find it there
/// already; bounded by `wal_receiver_timeout`.
async fn ensure_slot(cs: &ConnString, slot: &str, conf: &WalReceiverConf) -> anyhow::Result<()> {
    let work = async {
        let mut client = ReplicationClient::connect_with(cs).await.context("connect")?;
        match client.create_physical_slot(slot, true).await {
            Ok(_) => {
                info!("created replication slot {slot} for the branch");
                Ok(())
            }
            Err(e) if e.to_string().contains("already exists") => {
                info!("replication slot {slot} of the branch exists already");
                Ok(())
            }
            Err(e) => Err(anyhow::Error::new(e).context("CREATE_REPLICATION_SLOT")),
        }
    };
    let result = match conf.timeout {
        Some(t) => tokio::time::timeout(t, work)
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {} ms", t.as_millis()))),
        None => work.await,
    };
    result.with_context(|| format!("create replication slot {slot} for the branch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_branch_id_depends_on_each_part_only() {
        let old: TimelineId = "11223344556677889900aabbccddeeff".parse().unwrap();
        let other: TimelineId = "ffeeddccbbaa00998877665544332211".parse().unwrap();
        let id = branch_id(old, Lsn(0x1_6000_0000), 2);
        assert_eq!(id, branch_id(old, Lsn(0x1_6000_0000), 2));
        for different in [
            branch_id(other, Lsn(0x1_6000_0000), 2),
            branch_id(old, Lsn(0x1_6000_0008), 2),
            branch_id(old, Lsn(0x1_6000_0000), 3),
        ] {
            assert_ne!(id, different);
        }
        assert_ne!(id, old);
    }
}
