//! Where a timeline's WAL comes from: a PostgreSQL primary it follows over
//! physical replication, persisted in `<timeline>/wal_source.json` next to
//! the metadata so that ingest resumes after a restart.
//!
//! ```json
//! {"version": 3, "connstring": "postgres://u@h1:5432,h2:5432/postgres",
//!  "slot": "pageserver_<id>",
//!  "system_id": 7301234567890123456, "consistent_lsn": "0/3000100",
//!  "slot_origin": "created", "pg_tli": 2,
//!  "pg_tli_history": [{"tli": 1, "switch_lsn": "0/5000108"}],
//!  "on_divergence": "stop", "slot_hosts": ["h1:5432", "h2:5432"]}
//! ```
//!
//! - `version`: 3; a file without it is version 1 (no `pg_tli`, no
//!   `on_divergence`), version 2 has no `slot_hosts`; both load as such; a
//!   newer version is refused.
//! - `connstring`: one host, or several (libpq's multi-host forms,
//!   `pq_proto::connstring::HostList`; `walreceiver::hosts`).
//! - `slot_hosts` (version 3): the hosts (`host:port`, as listed) that hold
//!   the slot, in no particular order; a listed host missing here gets
//!   its slot from the slot keeper (`walreceiver::keeper`). A version 1 or
//!   2 source (one host) reads as its host holding the slot
//!   ([`WalSource::slot_hosts`]). The remote index carries the same.
//! - `pg_tli`, `pg_tli_history`: the PostgreSQL timeline of the WAL
//!   ingested and being streamed, and its ancestors (`(tli, switch_lsn)`,
//!   from `TIMELINE_HISTORY`): the history the ingested WAL belongs to, so
//!   that a server whose history forked below `last_record_lsn` is
//!   recognized (`walreceiver::history`). Written durably before any WAL
//!   of a new TLI is ingested. `null` in version 1 files: learned from the
//!   server at the next session. The remote index carries the same.
//! - `on_divergence`: `stop` (default) or `branch`.
//! - `slot_origin`: `created` (the bootstrap created the slot) or `adopted`
//!   (`PUT .../source` took an existing one, which no other timeline of
//!   this pageserver used). Files written before it existed read as
//!   `unknown`. Deleting the timeline drops the slot whatever the origin,
//!   unless another timeline of this pageserver uses it
//!   (`walreceiver::slots`).
//! - `consistent_lsn`: the base backup's end LSN. The imported copy is fuzzy
//!   until WAL up to it is applied, so reads below it are refused.
//! - `system_id`: the primary's `IDENTIFY_SYSTEM` id; a primary with another
//!   id (a different cluster behind the same address) is refused.
//!
//! The file is written with `write_file_durably` (temp, fsync, rename, fsync
//! dir) and holds the connection string, password included: the workdir is
//! the daemon's own, like PostgreSQL's `primary_conninfo` in its data dir.

use std::path::Path;

use anyhow::Context;
use io_engine::IoEngine;
use pageserver_api::models::{OnDivergence, PgTliSwitch};
use postgres_ffi::wal::{TimelineHistory, TliSwitch};
use pq_proto::connstring::HostList;
use serde::{Deserialize, Serialize};
use utils::lsn::Lsn;

pub const WAL_SOURCE_FILE: &str = "wal_source.json";
/// The version written; 1 (no `version` field) still loads.
pub const WAL_SOURCE_VERSION: u32 = 3;
/// A source file is a few hundred bytes; anything larger is damage.
const MAX_WAL_SOURCE_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalSource {
    /// Set to [`WAL_SOURCE_VERSION`] when written.
    #[serde(default = "version_1")]
    pub version: u32,
    pub connstring: String,
    pub slot: String,
    pub system_id: u64,
    pub consistent_lsn: Lsn,
    #[serde(default)]
    pub slot_origin: SlotOrigin,
    #[serde(default)]
    pub pg_tli: Option<u32>,
    #[serde(default)]
    pub pg_tli_history: Vec<PgTliSwitch>,
    #[serde(default)]
    pub on_divergence: OnDivergence,
    /// Version 3: the hosts that hold the slot (module comment).
    #[serde(default)]
    pub slot_hosts: Vec<String>,
}

fn version_1() -> u32 {
    1
}

/// How a timeline came to use its slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotOrigin {
    /// The bootstrap created it (`CREATE_REPLICATION_SLOT`).
    Created,
    /// `PUT .../source` adopted an existing slot no other timeline used.
    Adopted,
    /// Written before the origin was recorded.
    #[default]
    Unknown,
}

impl WalSource {
    /// A source with no PostgreSQL timeline recorded yet, its slot taken
    /// to be on every listed host (the bootstrap and `PUT .../source`
    /// set `slot_hosts` to what they did).
    pub fn new(connstring: String, slot: String, system_id: u64, origin: SlotOrigin) -> WalSource {
        let slot_hosts = match HostList::parse(&connstring) {
            Ok(list) => list.hosts.iter().map(|h| h.addr()).collect(),
            Err(_) => Vec::new(),
        };
        WalSource {
            version: WAL_SOURCE_VERSION,
            connstring,
            slot,
            system_id,
            consistent_lsn: Lsn(0),
            slot_origin: origin,
            pg_tli: None,
            pg_tli_history: Vec::new(),
            on_divergence: OnDivergence::default(),
            slot_hosts,
        }
    }

    /// The hosts of the connection string.
    pub fn host_list(&self) -> anyhow::Result<HostList> {
        HostList::parse(&self.connstring).context("source.connstring")
    }

    /// The hosts (`host:port`) that hold the slot; for a source written
    /// before version 3, every host of its connection string.
    pub fn slot_hosts(&self) -> Vec<String> {
        if self.version >= 3 {
            return self.slot_hosts.clone();
        }
        match self.host_list() {
            Ok(list) => list.hosts.iter().map(|h| h.addr()).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Record whether `host` holds the slot; whether that changed.
    pub fn set_slot_host(&mut self, host: &str, holds: bool) -> bool {
        let mut hosts = self.slot_hosts();
        let had = hosts.iter().any(|h| h == host);
        match (had, holds) {
            (false, true) => hosts.push(host.to_string()),
            (true, false) => hosts.retain(|h| h != host),
            _ => return false,
        }
        self.slot_hosts = hosts;
        self.version = WAL_SOURCE_VERSION;
        true
    }

    /// The recorded PostgreSQL timeline history; `None` before the first
    /// session of a version 1 source. A damaged record is an error.
    pub fn history(&self) -> anyhow::Result<Option<TimelineHistory>> {
        let Some(tli) = self.pg_tli else { return Ok(None) };
        let switches = self
            .pg_tli_history
            .iter()
            .map(|s| TliSwitch { tli: s.tli, switch_lsn: s.switch_lsn })
            .collect();
        Ok(Some(TimelineHistory::new(tli, switches)?))
    }

    /// Record `history` as the one of the WAL ingested and streamed.
    pub fn set_history(&mut self, history: &TimelineHistory) {
        self.pg_tli = Some(history.tli());
        self.pg_tli_history = history
            .switches()
            .iter()
            .map(|s| PgTliSwitch { tli: s.tli, switch_lsn: s.switch_lsn })
            .collect();
    }

    /// The source of the timeline in `dir`, if it has one.
    pub async fn load(engine: &IoEngine, dir: &Path) -> anyhow::Result<Option<WalSource>> {
        let path = dir.join(WAL_SOURCE_FILE);
        if !engine.exists(&path).await? {
            return Ok(None);
        }
        let bytes = engine.read_file(&path, MAX_WAL_SOURCE_BYTES).await?;
        let invalid =
            |e: String| anyhow::anyhow!("{} is not a valid WAL source: {e}", path.display());
        let source: WalSource =
            serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if source.version > WAL_SOURCE_VERSION {
            return Err(invalid(format!(
                "version {} (this pageserver reads up to {WAL_SOURCE_VERSION})",
                source.version
            )));
        }
        source.history().map_err(|e| invalid(e.to_string()))?;
        Ok(Some(source))
    }

    /// Write (or replace) the source of the timeline in `dir`, durably.
    pub async fn persist(&self, engine: &IoEngine, dir: &Path) -> anyhow::Result<()> {
        let current = WalSource {
            version: WAL_SOURCE_VERSION,
            slot_hosts: self.slot_hosts(),
            ..self.clone()
        };
        let json = serde_json::to_vec_pretty(&current).expect("a WalSource serializes");
        engine.write_file_durably(&dir.join(WAL_SOURCE_FILE), &json).await?;
        Ok(())
    }

    /// Remove the source of the timeline in `dir`, durably.
    pub async fn remove(engine: &IoEngine, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join(WAL_SOURCE_FILE);
        if engine.exists(&path).await? {
            engine.remove_file(&path).await?;
            engine.fsync_dir(dir).await?;
        }
        Ok(())
    }

    /// The connection string with its password replaced, for the API and logs.
    pub fn redacted_connstring(&self) -> String {
        match HostList::parse(&self.connstring) {
            Ok(list) => list.redacted(),
            Err(_) => "<unparsable connection string>".to_string(),
        }
    }
}

/// A running WAL receiver task: `cancel` stops it (a child of the
/// timeline's token), `done` fires once it has ended.
#[derive(Debug, Clone)]
pub struct ReceiverTask {
    pub cancel: tokio_util::sync::CancellationToken,
    pub done: tokio_util::sync::CancellationToken,
}

/// What the WAL receiver of a timeline is doing, for the API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReceiverStatus {
    /// `connecting`, `streaming`, `waiting to reconnect`, `stalled` (kept
    /// through reconnects until a session streams again), `stopped`,
    /// `diverged` (`walreceiver::history`).
    pub state: &'static str,
    /// When the latest message from the primary (WAL or keepalive) came,
    /// in any session.
    pub last_message_at: Option<std::time::Instant>,
    /// WAL received (fed to the decoder) up to here.
    pub received_lsn: Lsn,
    /// The primary's WAL end as of its latest message.
    pub primary_lsn: Lsn,
    /// When the primary sent its latest message (its clock; PostgreSQL
    /// timestamps: µs since 2000-01-01).
    pub primary_time_us: i64,
    /// The error that ended the latest session, if one did.
    pub last_error: Option<String>,
    /// The latest standby status sent: `write`, `flush`, `apply`.
    pub reported: [Lsn; 3],
    /// The host (`host:port`) of the latest session that streamed.
    pub host: Option<String>,
    /// What the slot keeper (`walreceiver::keeper`) knows of each host,
    /// in the order of the connection string.
    pub hosts: Vec<HostState>,
}

/// One host of a source, as the slot keeper last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostState {
    /// `host:port`.
    pub host: String,
    /// `primary` or `standby`; `None` until it answered once.
    pub role: Option<&'static str>,
    /// The slot there was advanced up to here (never backwards).
    pub advanced_lsn: Option<Lsn>,
    /// Why the latest attempt to reach it, create or advance its slot
    /// failed; `None` after one that worked.
    pub last_error: Option<String>,
    /// Failed attempts so far.
    pub errors: u64,
}

impl ReceiverStatus {
    /// The state and error to show, given the timeline's flush error (a
    /// flush that keeps failing outranks every state but `stopped`: WAL
    /// may still arrive, but nothing becomes durable or is acknowledged).
    pub fn shown(&self, flush_error: Option<&str>) -> (&'static str, Option<String>) {
        match flush_error {
            Some(e) if self.state != "stopped" && self.state != "diverged" => {
                ("flush failing", Some(format!("flushing ingested WAL to disk fails: {e}")))
            }
            _ => {
                let state = if self.state.is_empty() { "starting" } else { self.state };
                (state, self.last_error.clone())
            }
        }
    }

    /// Milliseconds since the latest message from the primary.
    pub fn last_message_age_ms(&self) -> Option<u64> {
        self.last_message_at.map(|at| at.elapsed().as_millis() as u64)
    }

    /// How far `applied` (`last_record_lsn`) is behind the primary: bytes
    /// to its latest WAL end, and while behind, milliseconds since the
    /// primary sent its latest message (`now_us` on PostgreSQL's clock).
    pub fn lag(&self, applied: Lsn, now_us: i64) -> (u64, u64) {
        let bytes = self.primary_lsn.0.saturating_sub(applied.0);
        let behind_ms =
            if bytes > 0 { (now_us - self.primary_time_us).max(0) as u64 / 1000 } else { 0 };
        (bytes, behind_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let engine = IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap();
        assert_eq!(WalSource::load(&engine, dir.path()).await.unwrap(), None);
        let mut s = WalSource::new(
            "postgres://u:secret@127.0.0.1:5432/postgres".to_string(),
            "pageserver_x".to_string(),
            7,
            SlotOrigin::Created,
        );
        s.consistent_lsn = Lsn(0x3000100);
        let history = TimelineHistory::parse(2, "1\t0/5000108\tx\n").unwrap();
        s.set_history(&history);
        s.persist(&engine, dir.path()).await.unwrap();
        let loaded = WalSource::load(&engine, dir.path()).await.unwrap().unwrap();
        assert_eq!(loaded, s);
        assert_eq!(loaded.history().unwrap(), Some(history));
        assert!(!s.redacted_connstring().contains("secret"));
        // A file written before `slot_origin` existed.
        let old = br#"{"connstring": "postgres://127.0.0.1/postgres", "slot": "s",
                        "system_id": 7, "consistent_lsn": "0/3000100"}"#;
        std::fs::write(dir.path().join(WAL_SOURCE_FILE), old).unwrap();
        let loaded = WalSource::load(&engine, dir.path()).await.unwrap().unwrap();
        assert_eq!(loaded.slot_origin, SlotOrigin::Unknown);
        assert_eq!((loaded.version, loaded.pg_tli, loaded.history().unwrap()), (1, None, None));
        assert_eq!(loaded.on_divergence, OnDivergence::Stop);
        // Its host holds the slot; written again, it is version 3 and says so.
        assert_eq!(loaded.slot_hosts(), ["127.0.0.1:5432"]);
        loaded.persist(&engine, dir.path()).await.unwrap();
        let again = WalSource::load(&engine, dir.path()).await.unwrap().unwrap();
        assert_eq!(again.version, WAL_SOURCE_VERSION);
        assert_eq!(again.slot_hosts, ["127.0.0.1:5432"]);
        // A newer version, and a history that breaks its invariants.
        for (bad, needle) in [
            (r#""version": 4"#, "version 4 (this pageserver reads up to 3)"),
            (
                r#""version": 2, "pg_tli": 1, "pg_tli_history": [{"tli": 1, "switch_lsn": "0/1"}]"#,
                "ancestor timeline 1 is not below 1",
            ),
        ] {
            let json = format!(
                r#"{{{bad}, "connstring": "c", "slot": "s", "system_id": 7, "consistent_lsn": "0/1"}}"#
            );
            std::fs::write(dir.path().join(WAL_SOURCE_FILE), json).unwrap();
            let err = WalSource::load(&engine, dir.path()).await.unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains(WAL_SOURCE_FILE), "{err}");
        }
        std::fs::write(dir.path().join(WAL_SOURCE_FILE), b"{\"connstring\": 1}").unwrap();
        let err = WalSource::load(&engine, dir.path()).await.unwrap_err().to_string();
        assert!(err.contains(WAL_SOURCE_FILE), "{err}");
        WalSource::remove(&engine, dir.path()).await.unwrap();
        assert_eq!(WalSource::load(&engine, dir.path()).await.unwrap(), None);
    }

    /// Version 2 (TLIs, one host) and version 3 (several hosts, the ones
    /// holding the slot) load; version 3 round-trips.
    #[tokio::test]
    async fn versions_2_and_3_load() {
        let dir = tempfile::tempdir().unwrap();
        let engine = IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap();
        let v2 = br#"{"version": 2, "connstring": "host=a port=5433", "slot": "s",
                       "system_id": 7, "consistent_lsn": "0/3000100", "slot_origin": "created",
                       "pg_tli": 2, "pg_tli_history": [{"tli": 1, "switch_lsn": "0/5000108"}],
                       "on_divergence": "branch"}"#;
        std::fs::write(dir.path().join(WAL_SOURCE_FILE), v2).unwrap();
        let loaded = WalSource::load(&engine, dir.path()).await.unwrap().unwrap();
        assert_eq!((loaded.version, loaded.pg_tli), (2, Some(2)));
        assert_eq!(loaded.on_divergence, OnDivergence::Branch);
        assert_eq!(loaded.slot_hosts(), ["a:5433"]);

        let mut s = WalSource::new(
            "postgres://u:secret@h1:5432,h2:5433/postgres?target_session_attrs=any".to_string(),
            "pageserver_x".to_string(),
            7,
            SlotOrigin::Created,
        );
        assert_eq!(s.slot_hosts(), ["h1:5432", "h2:5433"]);
        assert!(s.set_slot_host("h1:5432", false));
        assert!(s.set_slot_host("h2:5433", false));
        assert!(s.set_slot_host("h2:5433", true));
        assert!(!s.set_slot_host("h2:5433", true));
        s.persist(&engine, dir.path()).await.unwrap();
        let loaded = WalSource::load(&engine, dir.path()).await.unwrap().unwrap();
        assert_eq!(loaded, s);
        assert_eq!(loaded.slot_hosts(), ["h2:5433"]);
        assert_eq!(
            loaded.redacted_connstring(),
            "postgres://u@h1:5432,h2:5433/postgres?target_session_attrs=any"
        );
        let hosts = loaded.host_list().unwrap();
        assert_eq!(hosts.hosts.len(), 2);
        let json = std::fs::read_to_string(dir.path().join(WAL_SOURCE_FILE)).unwrap();
        assert!(json.contains(r#""version": 3"#) && json.contains(r#""slot_hosts""#), "{json}");
    }
}
