//! Where a timeline's WAL comes from: a PostgreSQL primary it follows over
//! physical replication, persisted in `<timeline>/wal_source.json` next to
//! the metadata so that ingest resumes after a restart.
//!
//! ```json
//! {"connstring": "postgres://...", "slot": "pageserver_<id>",
//!  "system_id": 7301234567890123456, "consistent_lsn": "0/3000100",
//!  "slot_origin": "created"}
//! ```
//!
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

use io_engine::IoEngine;
use serde::{Deserialize, Serialize};
use utils::lsn::Lsn;

pub const WAL_SOURCE_FILE: &str = "wal_source.json";
/// A source file is a few hundred bytes; anything larger is damage.
const MAX_WAL_SOURCE_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalSource {
    pub connstring: String,
    pub slot: String,
    pub system_id: u64,
    pub consistent_lsn: Lsn,
    #[serde(default)]
    pub slot_origin: SlotOrigin,
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
    /// The source of the timeline in `dir`, if it has one.
    pub async fn load(engine: &IoEngine, dir: &Path) -> anyhow::Result<Option<WalSource>> {
        let path = dir.join(WAL_SOURCE_FILE);
        if !engine.exists(&path).await? {
            return Ok(None);
        }
        let bytes = engine.read_file(&path, MAX_WAL_SOURCE_BYTES).await?;
        let source = serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("{} is not a valid WAL source: {e}", path.display()))?;
        Ok(Some(source))
    }

    /// Write (or replace) the source of the timeline in `dir`, durably.
    pub async fn persist(&self, engine: &IoEngine, dir: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self).expect("a WalSource serializes");
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
        match pq_proto::connstring::ConnString::parse(&self.connstring) {
            Ok(cs) => cs.redacted(),
            Err(_) => "<unparsable connection string>".to_string(),
        }
    }
}

/// What the WAL receiver of a timeline is doing, for the API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReceiverStatus {
    /// `connecting`, `streaming`, `waiting to reconnect`, `stalled` (kept
    /// through reconnects until a session streams again), `stopped`.
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
}

impl ReceiverStatus {
    /// The state and error to show, given the timeline's flush error (a
    /// flush that keeps failing outranks every state but `stopped`: WAL
    /// may still arrive, but nothing becomes durable or is acknowledged).
    pub fn shown(&self, flush_error: Option<&str>) -> (&'static str, Option<String>) {
        match flush_error {
            Some(e) if self.state != "stopped" => {
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
        let s = WalSource {
            connstring: "postgres://u:secret@127.0.0.1:5432/postgres".to_string(),
            slot: "pageserver_x".to_string(),
            system_id: 7,
            consistent_lsn: Lsn(0x3000100),
            slot_origin: SlotOrigin::Created,
        };
        s.persist(&engine, dir.path()).await.unwrap();
        assert_eq!(WalSource::load(&engine, dir.path()).await.unwrap(), Some(s.clone()));
        assert!(!s.redacted_connstring().contains("secret"));
        // A file written before `slot_origin` existed.
        let old = br#"{"connstring": "postgres://127.0.0.1/postgres", "slot": "s",
                        "system_id": 7, "consistent_lsn": "0/3000100"}"#;
        std::fs::write(dir.path().join(WAL_SOURCE_FILE), old).unwrap();
        let loaded = WalSource::load(&engine, dir.path()).await.unwrap().unwrap();
        assert_eq!(loaded.slot_origin, SlotOrigin::Unknown);
        std::fs::write(dir.path().join(WAL_SOURCE_FILE), b"{\"connstring\": 1}").unwrap();
        let err = WalSource::load(&engine, dir.path()).await.unwrap_err().to_string();
        assert!(err.contains(WAL_SOURCE_FILE), "{err}");
        WalSource::remove(&engine, dir.path()).await.unwrap();
        assert_eq!(WalSource::load(&engine, dir.path()).await.unwrap(), None);
    }
}
