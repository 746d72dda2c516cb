//! JSON models of the HTTP management API (`pageserver/src/http/`).
//!
//! Shared by the daemon (which serializes them), the load generator and the
//! tests (which deserialize them). Invariants of the wire shapes:
//! - ids are 32 lower-case hex digits, LSNs `X/X`, keys 36 upper-case hex digits;
//! - `TenantInfo` / `TenantDetails` / `KeySpace` follow the shapes Neon's pagebench
//!   reads (see `docs/http-api.md`), so extra fields may be added but none renamed;
//! - request bodies are optional: a missing body or JSON `null` means "all defaults".

use std::ops::Range;

use serde::{Deserialize, Serialize};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::key::Key;

mod lsn_by_timestamp;
pub use lsn_by_timestamp::*;
mod remote;
pub use remote::*;

/// PostgreSQL major version assumed when a timeline create request names none.
pub const DEFAULT_PG_VERSION: u32 = 15;

/// Every error response: `{"msg": "..."}` with a 4xx/5xx status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpErrorBody {
    pub msg: String,
}

/// `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusResponse {
    /// Always `"ok"` while the daemon serves requests.
    pub status: String,
    pub version: String,
}

/// `POST /v1/tenant` body; `null` or `{}` creates a tenant with a random id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantCreateRequest {
    #[serde(default)]
    pub new_tenant_id: Option<TenantId>,
}

/// `POST /v1/tenant` response (status 201).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantCreateResponse {
    pub id: TenantId,
}

/// A `{"slug": "..."}` object, the form Neon uses for tenant state and
/// attachment status; a Broken tenant carries `"data": {"reason": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slug {
    pub slug: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl Slug {
    pub fn new(s: &str) -> Slug {
        Slug { slug: s.to_string(), data: None }
    }

    /// `{"slug": "Broken", "data": {"reason": reason}}`.
    pub fn broken(reason: &str) -> Slug {
        Slug { slug: "Broken".to_string(), data: Some(serde_json::json!({ "reason": reason })) }
    }
}

/// One element of `GET /v1/tenant`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantInfo {
    pub id: TenantId,
    /// `{"slug": "Active"}`, or `{"slug": "Broken", "data": {"reason": ...}}`
    /// for a tenant that could not be loaded.
    pub state: Slug,
    /// Bytes of layer files on disk.
    pub current_physical_size: Option<u64>,
    /// `{"slug": "attached"}`: a single-node pageserver attaches every tenant it has.
    pub attachment_status: Slug,
    /// The generation this pageserver attached the tenant with; `null`
    /// without remote storage.
    pub generation: Option<u32>,
}

/// `PUT /v1/tenant/{tenant}/location_config` body, in Neon's
/// `LocationConfig` shape: `{"mode": "AttachedSingle", "generation": 3,
/// "tenant_conf": {...}}`. `tenant_conf` and `secondary_conf` are accepted
/// whatever they hold, and ignored; the shard fields must describe one
/// unsharded tenant (as Neon sends them: 0, 0, any stripe size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocationConfigRequest {
    pub mode: LocationConfigMode,
    #[serde(default)]
    pub generation: Option<u32>,
    #[serde(default)]
    pub secondary_conf: Option<serde_json::Value>,
    #[serde(default)]
    pub tenant_conf: Option<serde_json::Value>,
    #[serde(default)]
    pub shard_number: u8,
    #[serde(default)]
    pub shard_count: u8,
    #[serde(default)]
    pub shard_stripe_size: u32,
}

/// Neon's location modes; this pageserver serves `AttachedSingle` and
/// `Detached` (the others are refused naming them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocationConfigMode {
    AttachedSingle,
    AttachedMulti,
    AttachedStale,
    Secondary,
    Detached,
}

/// `GET /v1/tenant/{tenant}`: `TenantInfo` plus the timelines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantDetails {
    #[serde(flatten)]
    pub info: TenantInfo,
    /// Always `null`: this pageserver has no WAL redo process.
    pub walredo: Option<serde_json::Value>,
    pub timelines: Vec<TimelineId>,
    /// Long operations running on its timelines (import, compaction, image
    /// creation), with done/total and rate (`utils::progress`).
    #[serde(default)]
    pub operations: Vec<utils::progress::ProgressInfo>,
}

/// `POST /v1/tenant/{tenant}/timeline` body; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineCreateRequest {
    /// Random when absent.
    #[serde(default)]
    pub new_timeline_id: Option<TimelineId>,
    /// `DEFAULT_PG_VERSION` when absent.
    #[serde(default)]
    pub pg_version: Option<u32>,
    /// `0/0` when absent: the timeline starts empty at this LSN.
    #[serde(default)]
    pub initial_lsn: Option<Lsn>,
    /// Follow this primary: base backup over replication, then WAL. With a
    /// source, `pg_version` and `initial_lsn` must be absent (the primary
    /// decides them).
    #[serde(default)]
    pub source: Option<WalSourceRequest>,
    /// Create a branch of this timeline (`docs/branches.md`): its pages at
    /// or below `ancestor_start_lsn` are the ancestor's. Excludes
    /// `pg_version`, `initial_lsn` and `source`.
    #[serde(default)]
    pub ancestor_timeline_id: Option<TimelineId>,
    /// Where the branch starts; the ancestor's `last_record_lsn` when absent.
    #[serde(default)]
    pub ancestor_start_lsn: Option<Lsn>,
}

/// A primary to follow (`POST .../timeline` `source`, `PUT .../source`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalSourceRequest {
    /// `postgres://user:password@host:port/db` or `host=... port=...`.
    pub connstring: String,
    /// Physical replication slot; created on `POST` (default
    /// `pageserver_<timeline_id>`), must exist for `PUT .../source`.
    #[serde(default)]
    pub slot: Option<String>,
    /// What to do when the server's history forked below what was
    /// ingested (default `stop`).
    #[serde(default)]
    pub on_divergence: Option<OnDivergence>,
}

/// What a following timeline does when the server it follows has a
/// PostgreSQL timeline history that forked below the timeline's
/// `last_record_lsn` (a failover lost WAL this timeline ingested).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDivergence {
    /// Stop ingest (state `diverged`); what was ingested stays readable.
    #[default]
    Stop,
    /// Stop as `stop` does, and create a branch at the switch LSN (with
    /// its own new slot) that follows the new history; `last_error` of the
    /// diverged timeline names it.
    Branch,
}

/// One ancestor of a PostgreSQL timeline: `tli` ended at `switch_lsn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PgTliSwitch {
    pub tli: u32,
    pub switch_lsn: Lsn,
}

/// The primary a timeline follows, as the timeline detail shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalSourceInfo {
    /// The connection string without its password.
    pub connstring: String,
    pub slot: String,
    pub system_id: u64,
    /// Reads below this LSN are refused (the base backup's end).
    pub consistent_lsn: Lsn,
    /// `connecting`, `streaming`, `waiting to reconnect`, `stalled` (the
    /// primary sent nothing for `wal_receiver_timeout`: reconnecting, until
    /// a session streams again), `flush failing` (ingested WAL cannot be
    /// written to disk; `last_error` says why), `stopped`, or `diverged`
    /// (the server's history forked below `last_record_lsn`: ingest
    /// stopped; `last_error` names both LSNs and both timelines).
    pub state: String,
    /// The PostgreSQL timeline (TLI) of the WAL being ingested; `None`
    /// until the first session of a source recorded before TLIs were.
    #[serde(default)]
    pub pg_tli: Option<u32>,
    /// Its ancestors, oldest first.
    #[serde(default)]
    pub pg_tli_history: Vec<PgTliSwitch>,
    #[serde(default)]
    pub on_divergence: OnDivergence,
    /// WAL received up to here (ingested: `last_record_lsn`; durable and
    /// acknowledged to the primary: `disk_consistent_lsn`).
    pub received_lsn: Lsn,
    /// The primary's WAL end as of its latest message.
    pub primary_lsn: Lsn,
    /// `primary_lsn - last_record_lsn`.
    pub lag_bytes: u64,
    /// While behind: milliseconds since the primary sent its latest message.
    pub lag_ms: u64,
    /// Milliseconds since the latest message from the primary (WAL or
    /// keepalive), in any session; `None` before the first.
    #[serde(default)]
    pub last_message_age_ms: Option<u64>,
    /// Why the latest session ended, if it failed; while flushing fails,
    /// the flush error.
    pub last_error: Option<String>,
    /// The host (`host:port`) the latest session streamed from; `None`
    /// before the first.
    #[serde(default)]
    pub host: Option<String>,
    /// Each host of the connection string, as listed.
    #[serde(default)]
    pub hosts: Vec<WalSourceHostInfo>,
}

/// One host of a source (a multi-host connection string lists several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalSourceHostInfo {
    /// `host:port`.
    pub host: String,
    /// The slot is recorded as present there.
    pub slot_present: bool,
    /// `primary` or `standby`, once the slot keeper has reached it.
    pub role: Option<String>,
    /// The slot keeper advanced the slot there up to here.
    pub advanced_lsn: Option<Lsn>,
    /// The latest failure to reach it, create or advance its slot there.
    pub last_error: Option<String>,
    /// Failures so far.
    pub errors: u64,
}

/// `GET /v1/tenant/{tenant}/timeline/{timeline}` (and the create response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineInfo {
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    /// `"Active"`, or `{"Broken": {"reason": ..., "backtrace": ""}}` (Neon's
    /// shape) for a timeline that could not be loaded; then every other
    /// field is zero.
    #[serde(default)]
    pub state: TimelineState,
    /// The primary this timeline follows, if any.
    #[serde(default)]
    pub wal_source: Option<WalSourceInfo>,
    /// Everything up to here is ingested and readable.
    pub last_record_lsn: Lsn,
    /// Everything up to here is in layer files on disk.
    pub disk_consistent_lsn: Lsn,
    /// Everything up to here is in remote storage (the newest uploaded
    /// index); null without remote storage or before the first upload.
    #[serde(default)]
    pub remote_consistent_lsn: Option<Lsn>,
    /// Whether remote storage's copy is complete, and what it lacks.
    #[serde(flatten)]
    pub remote: RemoteInfo,
    pub pg_version: u32,
    /// Reads below this LSN are refused.
    pub initial_lsn: Lsn,
    /// Open plus frozen in-memory layers.
    pub in_memory_layers: u64,
    pub in_memory_bytes: u64,
    pub l0_layers: u64,
    pub l0_bytes: u64,
    /// L1 delta layers (from compaction) and image layers.
    #[serde(default)]
    pub l1_layers: u64,
    #[serde(default)]
    pub l1_bytes: u64,
    #[serde(default)]
    pub image_layers: u64,
    #[serde(default)]
    pub image_bytes: u64,
    /// Reads below this LSN are refused (GC may have removed their
    /// history); 0/0 until GC first runs.
    #[serde(default)]
    pub gc_cutoff: Lsn,
    /// LSN leases valid now, by LSN.
    #[serde(default)]
    pub lsn_leases: Vec<LsnLeaseInfo>,
    /// For a branch: the timeline it branched from, and where.
    #[serde(default)]
    pub ancestor_timeline_id: Option<TimelineId>,
    #[serde(default)]
    pub ancestor_lsn: Option<Lsn>,
}

/// One valid LSN lease of a timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LsnLeaseInfo {
    pub lsn: Lsn,
    /// RFC 3339 with milliseconds, UTC (`2024-05-01T12:00:00.123Z`).
    pub valid_until: String,
}

/// `POST .../lsn_lease` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LsnLeaseRequest {
    pub lsn: Lsn,
}

/// `POST .../lsn_lease` response, as Neon's pageserver answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LsnLeaseResponse {
    /// RFC 3339 with milliseconds, UTC.
    pub valid_until: String,
}

/// The state of a timeline, serialized as Neon's `TimelineState`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimelineState {
    #[default]
    Active,
    Broken {
        reason: String,
        #[serde(default)]
        backtrace: String,
    },
}

/// `GET .../keyspace[?at_lsn=X/X]`: end-exclusive ranges of every key that
/// exists at `at_lsn`, serialized as `[["<start>", "<end>"], ...]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySpace {
    #[serde(with = "key_ranges")]
    pub keys: Vec<Range<Key>>,
    /// Always empty: there are no sparse (aux) keys yet.
    #[serde(with = "key_ranges")]
    pub sparse_keys: Vec<Range<Key>>,
    pub at_lsn: Lsn,
}

/// `PUT|POST .../checkpoint` response: the LSN now durable on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointResponse {
    pub disk_consistent_lsn: Lsn,
}

/// One element of the `PUT /v1/failpoints` body (testing builds only).
/// `actions` is a failpoint action: `off`, `exit`, `panic`, `return`, `sleep(MS)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailpointConfig {
    pub name: String,
    pub actions: String,
}

/// `POST .../testing/ingest` body (testing builds only): values written at
/// `lsn` through the timeline writer, then `finish_write(lsn)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestingIngestRequest {
    pub lsn: Lsn,
    pub values: Vec<TestingIngestValue>,
}

/// A value to ingest: a full image, or a test record appending bytes to the
/// previous version (`will_init` = start from empty). Byte strings are hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum TestingIngestValue {
    Image { key: Key, image: String },
    Append { key: Key, append: String, will_init: bool },
}

/// `POST .../testing/ingest` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestingIngestResponse {
    pub last_record_lsn: Lsn,
}

/// `GET .../testing/get?key=..&lsn=..` response: the reconstructed value, hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestingGetResponse {
    pub value: String,
}

/// Serde for `Vec<Range<Key>>` as a list of `[start, end]` pairs.
mod key_ranges {
    use std::ops::Range;

    use serde::{Deserialize, Deserializer, Serializer};

    use crate::key::Key;

    pub fn serialize<S: Serializer>(ranges: &[Range<Key>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(ranges.iter().map(|r| (r.start, r.end)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Range<Key>>, D::Error> {
        let pairs = Vec::<(Key, Key)>::deserialize(d)?;
        Ok(pairs.into_iter().map(|(start, end)| start..end).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_shape() {
        let start: Key = "000000067F00000005000040000000000000".parse().unwrap();
        let end: Key = "000000067F00000005000040000000000008".parse().unwrap();
        let ks = KeySpace { keys: vec![start..end], sparse_keys: vec![], at_lsn: Lsn(0x16B3748) };
        let json = serde_json::to_value(&ks).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "keys": [["000000067F00000005000040000000000000",
                          "000000067F00000005000040000000000008"]],
                "sparse_keys": [],
                "at_lsn": "0/16B3748",
            })
        );
        assert_eq!(serde_json::from_value::<KeySpace>(json).unwrap(), ks);
    }

    #[test]
    fn tenant_details_flatten() {
        let id = TenantId::generate();
        let tl = TimelineId::generate();
        let d = TenantDetails {
            info: TenantInfo {
                id,
                state: Slug::new("Active"),
                current_physical_size: Some(8192),
                attachment_status: Slug::new("attached"),
                generation: Some(1),
            },
            walredo: None,
            timelines: vec![tl],
            operations: Vec::new(),
        };
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["id"], id.to_string());
        assert_eq!(json["state"]["slug"], "Active");
        assert_eq!(json["attachment_status"]["slug"], "attached");
        assert_eq!(json["walredo"], serde_json::Value::Null);
        assert_eq!(json["timelines"][0], tl.to_string());
        assert_eq!(serde_json::from_value::<TenantDetails>(json).unwrap(), d);
    }

    #[test]
    fn ingest_values_untagged() {
        let body = r#"{"lsn": "0/10", "values": [
            {"key": "000000067F00000005000040000000000001", "image": "00ff"},
            {"key": "000000067F00000005000040000000000001", "append": "01", "will_init": false}
        ]}"#;
        let req: TestingIngestRequest = serde_json::from_str(body).unwrap();
        assert_eq!(req.lsn, Lsn(0x10));
        assert!(
            matches!(&req.values[0], TestingIngestValue::Image { image, .. } if image == "00ff")
        );
        assert!(matches!(
            &req.values[1],
            TestingIngestValue::Append { append, will_init: false, .. } if append == "01"
        ));
        let bad = r#"{"lsn": "0/10", "values": [{"key": "00", "image": "00"}]}"#;
        assert!(serde_json::from_str::<TestingIngestRequest>(bad).is_err());
        let mixed = r#"{"lsn": "0/10", "values": [
            {"key": "000000067F00000005000040000000000001", "image": "00", "will_init": true}]}"#;
        assert!(serde_json::from_str::<TestingIngestRequest>(mixed).is_err());
    }

    #[test]
    fn location_config_takes_neons_shape() {
        let neon = r#"{"mode": "AttachedSingle", "generation": 3, "secondary_conf": null,
            "shard_number": 0, "shard_count": 0, "shard_stripe_size": 32768,
            "tenant_conf": {"pitr_interval": "7 days", "some_future_knob": 1}}"#;
        let r: LocationConfigRequest = serde_json::from_str(neon).unwrap();
        assert_eq!((r.mode, r.generation), (LocationConfigMode::AttachedSingle, Some(3)));
        assert_eq!(r.tenant_conf.unwrap()["some_future_knob"], 1);
        let r: LocationConfigRequest = serde_json::from_str(r#"{"mode": "Detached"}"#).unwrap();
        assert_eq!((r.mode, r.generation, r.shard_count), (LocationConfigMode::Detached, None, 0));
        let bad = r#"{"mode": "Detached", "bogus": 1}"#;
        assert!(serde_json::from_str::<LocationConfigRequest>(bad).is_err());
    }

    #[test]
    fn create_requests_accept_empty_objects() {
        assert_eq!(
            serde_json::from_str::<TenantCreateRequest>("{}").unwrap(),
            TenantCreateRequest::default()
        );
        let t: TimelineCreateRequest = serde_json::from_str(r#"{"pg_version": 16}"#).unwrap();
        assert_eq!(t.pg_version, Some(16));
        assert!(serde_json::from_str::<TimelineCreateRequest>(r#"{"bogus": 1}"#).is_err());
    }
}
