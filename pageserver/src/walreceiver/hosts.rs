//! The hosts of a source (libpq's multi-host connection strings,
//! `pq_proto::connstring::HostList`): which one a session streams from.
//!
//! Choice, at the start of each session:
//! - hosts are tried in the listed order, except that the host of the
//!   previous session, when that session failed or ended, goes last (so
//!   after a host goes away the next session streams from another);
//! - `target_session_attrs` says which roles qualify, pass by pass
//!   (`TargetSessionAttrs::next_step`); the default is `prefer-standby`:
//!   a daemon fed by a standby can never be ahead of a standby that is
//!   promoted, so a failover never makes it diverge;
//! - a host qualifies only with the timeline's cluster (system id), a
//!   history that holds what was ingested (`session::check_against`: the
//!   TLI that holds `last_record_lsn`), and WAL up to `last_record_lsn`.
//!   One that does not is skipped, its reason kept; when no host
//!   qualifies the session fails naming each host's reason (retried).
//!   A host whose history forked below `last_record_lsn` ends the session
//!   as diverged, as with one host.
//!
//! Invariant: every read-modify-write of a timeline's `WalSource` by the
//! receiver's tasks (history, slot hosts) goes through [`edit_source`],
//! under the timeline's `source_edit` lock, so the session and the slot
//! keeper never lose each other's changes.

use anyhow::{bail, Context};
use postgres_ffi::wal::TimelineHistory;
use pq_proto::connstring::{ConnString, Role, Step};
use pq_proto::replication::{IdentifySystem, ReplicationClient};
use tracing::info;
use utils::lsn::Lsn;

use super::session::{bounded, check_against, stalled, SessionEnd};
use super::{history, WalReceiverConf};
use crate::tenant::timeline::wal_source::WalSource;
use crate::tenant::Timeline;

/// Change the timeline's source with `edit` (which says whether it
/// changed anything) and persist it; under the timeline's `source_edit`.
pub async fn edit_source(
    tl: &Timeline,
    edit: impl FnOnce(&mut WalSource) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let _edit = tl.source_edit.lock().await;
    let Some(mut source) = tl.wal_source() else {
        bail!("the timeline no longer follows a source");
    };
    if edit(&mut source)? {
        tl.set_wal_source(Some(source)).await?;
    }
    Ok(())
}

/// The order to try `n` hosts in: as listed, `avoid` last.
pub fn order(n: usize, avoid: Option<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).filter(|&i| Some(i) != avoid).collect();
    order.extend(avoid.filter(|&i| i < n));
    order
}

/// The role of the server of `client`, from its `in_hot_standby`
/// (reported at start-up since PostgreSQL 14; asked otherwise).
pub async fn role(client: &mut ReplicationClient) -> anyhow::Result<Role> {
    let reported = client.client().server_parameter("in_hot_standby").map(str::to_string);
    let value = match reported {
        Some(v) => v,
        None => client.show("in_hot_standby").await.context("SHOW in_hot_standby")?,
    };
    Ok(if value == "on" { Role::Standby } else { Role::Primary })
}

/// A host a session streams from, ready for `START_REPLICATION`.
pub struct Chosen {
    pub client: ReplicationClient,
    /// `host:port`.
    pub addr: String,
    pub id: IdentifySystem,
    pub server: TimelineHistory,
    /// The TLI that holds `last_record_lsn` in the server's history.
    pub tli: u32,
}

/// Choose the host to stream from (module comment); `avoid` is the host
/// of the previous session. `Err(end)`: the session ends (diverged).
pub async fn choose(
    tl: &Timeline,
    source: &WalSource,
    conf: &WalReceiverConf,
    avoid: Option<&str>,
) -> anyhow::Result<Result<Chosen, SessionEnd>> {
    let list = source.host_list()?;
    let addrs: Vec<String> = list.hosts.iter().map(ConnString::addr).collect();
    let order = order(addrs.len(), addrs.iter().position(|a| Some(a.as_str()) == avoid));
    let attrs = list.attrs();
    let mut probed: Vec<Option<Option<Role>>> = vec![None; addrs.len()];
    let mut clients: Vec<Option<(ReplicationClient, IdentifySystem)>> =
        (0..addrs.len()).map(|_| None).collect();
    let mut skipped: Vec<String> = Vec::new();
    loop {
        match attrs.next_step(&order, &probed) {
            Step::Probe(i) => match bounded(conf.timeout, probe(&list.hosts[i], source)).await {
                Some(Ok((client, id, role))) => {
                    probed[i] = Some(Some(role));
                    clients[i] = Some((client, id));
                }
                Some(Err(e)) => {
                    probed[i] = Some(None);
                    skipped.push(format!("{}: {e:#}", addrs[i]));
                }
                None if addrs.len() == 1 => return Ok(Err(stalled("connecting", conf))),
                None => {
                    probed[i] = Some(None);
                    skipped.push(format!("{}: {}", addrs[i], stalled("connecting", conf)));
                }
            },
            Step::Take(i) => {
                let (client, id) = clients[i].take().expect("a probed host has its client");
                let several = addrs.len() > 1;
                match bounded(conf.timeout, prepare(tl, client, id, several)).await {
                    Some(Ok(Ok((client, id, server, tli)))) => {
                        let addr = addrs[i].clone();
                        return Ok(Ok(Chosen { client, addr, id, server, tli }));
                    }
                    Some(Ok(Err(end))) => return Ok(Err(end)),
                    Some(Err(e)) => skipped.push(format!("{}: {e:#}", addrs[i])),
                    None if addrs.len() == 1 => return Ok(Err(stalled("TIMELINE_HISTORY", conf))),
                    None => {
                        skipped.push(format!("{}: {}", addrs[i], stalled("TIMELINE_HISTORY", conf)))
                    }
                }
                probed[i] = Some(None);
            }
            Step::Exhausted if addrs.len() == 1 => bail!("{}", skipped.join("; ")),
            Step::Exhausted => {
                let want = attrs.as_str();
                bail!(
                    "no host to stream from (target_session_attrs {want}): {}",
                    skipped.join("; ")
                )
            }
        }
        debug_assert!(skipped.len() <= addrs.len(), "a host is skipped at most once");
    }
}

/// Connect to `cs`, check the cluster, learn the role.
async fn probe(
    cs: &ConnString,
    source: &WalSource,
) -> anyhow::Result<(ReplicationClient, IdentifySystem, Role)> {
    let (mut client, id) = connect_checked(cs, source).await?;
    let role = role(&mut client).await?;
    Ok((client, id, role))
}

/// A replication connection to a host of `source`'s cluster (its system
/// id checked), with the host's `IDENTIFY_SYSTEM`.
pub async fn connect_checked(
    cs: &ConnString,
    source: &WalSource,
) -> anyhow::Result<(ReplicationClient, IdentifySystem)> {
    // The client's error names the address and the cause.
    let mut client = ReplicationClient::connect_with(cs).await?;
    let id = client.identify_system().await.context("IDENTIFY_SYSTEM")?;
    if id.systemid != source.system_id {
        bail!(
            "another cluster: system id {}, this timeline follows {}",
            id.systemid,
            source.system_id
        );
    }
    Ok((client, id))
}

type Prepared = (ReplicationClient, IdentifySystem, TimelineHistory, u32);

/// The history and WAL checks of a host the attributes chose.
async fn prepare(
    tl: &Timeline,
    mut client: ReplicationClient,
    id: IdentifySystem,
    several: bool,
) -> anyhow::Result<Result<Prepared, SessionEnd>> {
    let start = tl.get_last_record_lsn();
    let server = history::fetch(&mut client, id.timeline).await?;
    // First: a divergence is one whatever the server's WAL end (a promoted
    // standby may be below what the old primary sent).
    let tli = match check_against(tl, &server, start).await? {
        Ok(tli) => tli,
        Err(end) => return Ok(Err(end)),
    };
    // With one host, `START_REPLICATION` says it (as before several hosts).
    if several && Lsn(id.xlogpos) < start {
        bail!(
            "it has WAL only up to {} (on timeline {}), this timeline ingested up to {start}",
            Lsn(id.xlogpos),
            id.timeline
        );
    }
    Ok(Ok((client, id, server, tli)))
}

/// Log the host a session streams from.
pub fn log_chosen(chosen: &Chosen, n_hosts: usize) {
    if n_hosts > 1 {
        info!(
            "streaming from host {} of {n_hosts} (on PostgreSQL timeline {})",
            chosen.addr, chosen.id.timeline
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pq_proto::connstring::{HostList, TargetSessionAttrs};

    /// The host of a failed session goes last; the attributes then pick
    /// among the hosts in that order.
    #[test]
    fn host_choice() {
        assert_eq!(order(3, None), [0, 1, 2]);
        assert_eq!(order(3, Some(0)), [1, 2, 0]);
        assert_eq!(order(3, Some(2)), [0, 1, 2]);
        assert_eq!(order(1, Some(0)), [0]);
        let list = HostList::parse("host=p,s port=5432").unwrap();
        assert_eq!(list.attrs(), TargetSessionAttrs::PreferStandby);
        let (p, s) = (Some(Some(Role::Primary)), Some(Some(Role::Standby)));
        // Both up: the standby, even listed second.
        assert_eq!(list.attrs().next_step(&order(2, None), &[p, s]), Step::Take(1));
        // The standby went away (its session failed, so it is tried last
        // and does not answer): the primary.
        let o = order(2, Some(1));
        assert_eq!(list.attrs().next_step(&o, &[None, None]), Step::Probe(0));
        assert_eq!(list.attrs().next_step(&o, &[p, None]), Step::Probe(1));
        assert_eq!(list.attrs().next_step(&o, &[p, Some(None)]), Step::Take(0));
        // `any`: the other host first after a failure.
        let any = TargetSessionAttrs::Any;
        assert_eq!(any.next_step(&order(2, Some(0)), &[p, s]), Step::Take(1));
    }
}
