//! Configuration types shared by the daemon and tools.
//!
//! `pg_auth_type`, `http_auth_type`: `"trust"` or `"jwt"` ([`AuthType`]).
//!
//! `page_service_pipelining` (TOML), in Neon's shape:
//! `{ mode = "serial" }` or `{ mode = "pipelined", max_batch_size = 32,
//! execution = "concurrent-futures" | "tasks", batching = "uniform-lsn" | "scattered-lsn",
//! max_batches_in_flight = 2 }` (the last key is ours).

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

/// How page service clients (`pg_auth_type`) or HTTP API clients
/// (`http_auth_type`) authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthType {
    /// Anyone who can connect is let in.
    Trust,
    /// The password (page service) or the `Authorization: Bearer` token
    /// (HTTP) is a JWT signed with EdDSA, checked against
    /// `auth_validation_public_key_path`; its claims scope the tenant.
    Jwt,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case", from = "PipeliningInput")]
pub enum PageServicePipeliningConfig {
    Serial,
    Pipelined(PageServicePipeliningConfigPipelined),
}

/// What deserializes: serde ignores unknown fields beside the tag of a unit
/// variant even with `deny_unknown_fields`, so `Serial` is read as an empty
/// struct that refuses every field (`{mode = "serial", max_batch_size = 4}`
/// is an error, as the same field with a typo in pipelined mode is).
#[derive(Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
enum PipeliningInput {
    Serial(SerialFields),
    Pipelined(PageServicePipeliningConfigPipelined),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SerialFields {}

impl From<PipeliningInput> for PageServicePipeliningConfig {
    fn from(input: PipeliningInput) -> Self {
        match input {
            PipeliningInput::Serial(SerialFields {}) => PageServicePipeliningConfig::Serial,
            PipeliningInput::Pipelined(p) => PageServicePipeliningConfig::Pipelined(p),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageServicePipeliningConfigPipelined {
    /// GetPages per batch (one vectored get), at most.
    pub max_batch_size: NonZeroUsize,
    pub execution: PageServiceProtocolPipelinedExecutionStrategy,
    #[serde(default)]
    pub batching: PageServiceProtocolPipelinedBatchingStrategy,
    /// Batches a connection executes at once (answered in order). A batch
    /// starts beside others only once it holds `max_batch_size /
    /// max_batches_in_flight` (rounded up) GetPages; with nothing executing
    /// it starts at once. More batches in flight keep a cold disk busy
    /// while the first batch's answers go out and the client's next
    /// requests come in; on a warm cache batches stay whole.
    #[serde(default = "default_batches_in_flight")]
    pub max_batches_in_flight: NonZeroUsize,
}

fn default_batches_in_flight() -> NonZeroUsize {
    NonZeroUsize::new(DEFAULT_BATCHES_IN_FLIGHT).unwrap()
}

pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageServiceProtocolPipelinedExecutionStrategy {
    ConcurrentFutures,
    Tasks,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageServiceProtocolPipelinedBatchingStrategy {
    UniformLsn,
    #[default]
    ScatteredLsn,
}

impl Default for PageServicePipeliningConfig {
    fn default() -> Self {
        PageServicePipeliningConfig::Pipelined(PageServicePipeliningConfigPipelined {
            max_batch_size: NonZeroUsize::new(32).unwrap(),
            execution: PageServiceProtocolPipelinedExecutionStrategy::ConcurrentFutures,
            batching: PageServiceProtocolPipelinedBatchingStrategy::ScatteredLsn,
            max_batches_in_flight: default_batches_in_flight(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<PageServicePipeliningConfig, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn pipelining_shapes() {
        assert_eq!(parse(r#"{"mode": "serial"}"#).unwrap(), PageServicePipeliningConfig::Serial);
        let p =
            parse(r#"{"mode": "pipelined", "max_batch_size": 8, "execution": "tasks"}"#).unwrap();
        let PageServicePipeliningConfig::Pipelined(p) = p else { panic!("not pipelined") };
        assert_eq!(p.max_batch_size.get(), 8);
        assert_eq!(p.execution, PageServiceProtocolPipelinedExecutionStrategy::Tasks);
        assert_eq!(p.batching, PageServiceProtocolPipelinedBatchingStrategy::ScatteredLsn);
        let p = parse(
            r#"{"mode": "pipelined", "max_batch_size": 1, "execution": "concurrent-futures",
                "batching": "uniform-lsn"}"#,
        )
        .unwrap();
        let PageServicePipeliningConfig::Pipelined(p) = p else { panic!("not pipelined") };
        assert_eq!(p.batching, PageServiceProtocolPipelinedBatchingStrategy::UniformLsn);
    }

    #[test]
    fn pipelining_rejects_bad_shapes() {
        for bad in [
            r#"{"mode": "eager"}"#,
            r#"{"mode": "pipelined", "max_batch_size": 0, "execution": "tasks"}"#,
            r#"{"mode": "pipelined", "execution": "tasks"}"#,
            r#"{"mode": "pipelined", "max_batch_size": 4, "execution": "threads"}"#,
            r#"{"mode": "pipelined", "max_batch_size": 4, "execution": "tasks", "x": 1}"#,
            r#"{"mode": "serial", "max_batch_size": 4}"#,
            r#"{"mode": "serial", "execution": "threads"}"#,
            r#"{"mode": "serial", "typo": true}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad} must be rejected");
        }
    }

    #[test]
    fn default_is_pipelined_32_concurrent_futures_scattered() {
        let d = PageServicePipeliningConfig::default();
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"mode": "pipelined", "max_batch_size": 32,
                               "execution": "concurrent-futures", "batching": "scattered-lsn",
                               "max_batches_in_flight": 2})
        );
        assert_eq!(serde_json::from_value::<PageServicePipeliningConfig>(json).unwrap(), d);
        // Neon's shape, without our key, reads as the same default.
        let neon =
            r#"{"mode": "pipelined", "max_batch_size": 32, "execution": "concurrent-futures"}"#;
        assert_eq!(parse(neon).unwrap(), d);
    }
}
