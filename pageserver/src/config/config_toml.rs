//! `ConfigToml`: the TOML document as the operator wrote it, before validation.
//!
//! Sources, later ones winning per top-level key: built-in defaults
//! (`defaults.rs`), the config file, then each `-c key=value` override in
//! command-line order. An override replaces the whole value of its top-level
//! key (`-c 'page_service_pipelining={mode="serial"}'` replaces the table).
//!
//! Invariant: every error names the key it is about. Serde's own message for
//! a whole document does not (a `toml::Value` has no spans), so on failure
//! each key is deserialized alone to find the culprit; keys are independent,
//! so a key that deserializes alone is valid in the document too.

use std::path::PathBuf;
use std::time::Duration;

use bytesize::ByteSize;
use io_engine::IoEngineKind;
use pageserver_api::config::PageServicePipeliningConfig;
use serde::Deserialize;

use super::defaults::*;
use super::remote::EvictionToml;
use super::{AuthType, ConfigError, LogFormat};
use crate::remote_storage::RemoteStorageToml;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigToml {
    pub listen_pg_addr: String,
    pub listen_http_addr: String,
    #[serde(with = "humantime_serde")]
    pub wait_lsn_timeout: Duration,
    #[serde(deserialize_with = "de_size")]
    pub checkpoint_distance: ByteSize,
    #[serde(with = "humantime_serde")]
    pub checkpoint_timeout: Duration,
    pub max_get_vectored_keys: usize,
    #[serde(deserialize_with = "de_size")]
    pub in_memory_layers_budget: ByteSize,
    pub io_engine: IoEngineKind,
    /// Layer and ephemeral files with `O_DIRECT`.
    pub direct_io: bool,
    /// Files the IO engine keeps open at most; default: see `max_open_files`
    /// in `config/mod.rs`.
    pub max_open_files: Option<usize>,
    pub log_format: LogFormat,
    pub page_service_pipelining: PageServicePipeliningConfig,
    pub pg_auth_type: AuthType,
    pub auth_validation_public_key_path: Option<PathBuf>,
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// How long a page service client may take from connecting to being
    /// authenticated (startup packet, and the JWT with `pg_auth_type = "jwt"`).
    #[serde(with = "humantime_serde")]
    pub authentication_timeout: Duration,
    /// Default: see `config/fd_budget.rs`.
    pub page_service_max_connections: Option<usize>,
    /// Page service connection threads; default: one per CPU; 0: none.
    pub page_service_threads: Option<usize>,
    /// The benchmark floor: every GetPage answered with a constant page,
    /// no storage read. Builds with the `testing` feature only.
    pub page_service_constant_pages: bool,
    /// Default: see `config/fd_budget.rs`.
    pub http_max_connections: Option<usize>,
    pub http_max_concurrent_requests: usize,
    #[serde(with = "humantime_serde")]
    pub http_header_read_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub http_body_read_timeout: Duration,
    /// HTTP API auth: `"trust"` or `"jwt"` (`Authorization: Bearer`, checked
    /// with `auth_validation_public_key_path`).
    pub http_auth_type: AuthType,
    /// Routes that need no token with `http_auth_type = "jwt"`.
    pub http_auth_open_routes: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub wal_receiver_status_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub wal_receiver_idle_flush: Duration,
    /// Reconnect when the primary sent nothing for this long; 0: never.
    #[serde(with = "humantime_serde")]
    pub wal_receiver_timeout: Duration,
    /// How often the slot keeper of a multi-host source visits its hosts.
    #[serde(with = "humantime_serde")]
    pub wal_receiver_slot_advance_interval: Duration,
    /// Check native redo against PostgreSQL's consistency images.
    pub wal_redo_check: bool,
    /// Backups (basebackup, fullbackup) generated at once, in all and per tenant.
    pub max_concurrent_backups: usize,
    pub max_concurrent_backups_per_tenant: usize,
    /// How long an LSN lease lasts from its latest renewal.
    #[serde(with = "humantime_serde")]
    pub lsn_lease_length: Duration,
    pub compaction_threshold: usize,
    #[serde(deserialize_with = "de_size")]
    pub compaction_target_size: ByteSize,
    #[serde(with = "humantime_serde")]
    pub compaction_period: Duration,
    pub image_creation_threshold: usize,
    pub max_record_chain: usize,
    pub l0_flush_delay_threshold: usize,
    pub l0_flush_stall_threshold: usize,
    #[serde(deserialize_with = "de_size")]
    pub gc_horizon: ByteSize,
    #[serde(with = "humantime_serde")]
    pub pitr_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub gc_period: Duration,
    #[serde(deserialize_with = "de_size")]
    pub layer_index_cache_size: ByteSize,
    /// Where the durable copy of the tenants lives; none: local disk only.
    pub remote_storage: Option<RemoteStorageToml>,
    /// Eviction of local layer files that are in remote storage; none: never.
    pub disk_usage_based_eviction: Option<EvictionToml>,
}

/// An optional size (see [`de_size`]), for keys inside an optional table.
pub(super) fn de_opt_size<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ByteSize>, D::Error> {
    de_size(d).map(Some)
}

/// A size: an integer (bytes) or a string with a unit ("256 MiB"). Replaces
/// bytesize's own deserializer for an error message that shows the expected form.
fn de_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }
    let expected = "a size like \"256 MiB\" or an integer number of bytes";
    match Raw::deserialize(d)
        .map_err(|_| serde::de::Error::custom(format!("expected {expected}")))?
    {
        Raw::Bytes(n) => Ok(ByteSize::b(n)),
        Raw::Text(s) => s
            .trim()
            .parse::<ByteSize>()
            .map_err(|e| serde::de::Error::custom(format!("'{s}' is not {expected}: {e}"))),
    }
}

fn duration(s: &str) -> Duration {
    humantime::parse_duration(s).expect("default durations parse (unit-tested)")
}

fn size(s: &str) -> ByteSize {
    s.parse().expect("default sizes parse (unit-tested)")
}

impl Default for ConfigToml {
    fn default() -> Self {
        ConfigToml {
            listen_pg_addr: DEFAULT_LISTEN_PG_ADDR.to_string(),
            listen_http_addr: DEFAULT_LISTEN_HTTP_ADDR.to_string(),
            wait_lsn_timeout: duration(DEFAULT_WAIT_LSN_TIMEOUT),
            checkpoint_distance: size(DEFAULT_CHECKPOINT_DISTANCE),
            checkpoint_timeout: duration(DEFAULT_CHECKPOINT_TIMEOUT),
            max_get_vectored_keys: DEFAULT_MAX_GET_VECTORED_KEYS,
            in_memory_layers_budget: size(DEFAULT_IN_MEMORY_LAYERS_BUDGET),
            io_engine: IoEngineKind::StdFs,
            direct_io: false,
            max_open_files: None,
            log_format: LogFormat::Plain,
            page_service_pipelining: PageServicePipeliningConfig::default(),
            pg_auth_type: AuthType::Trust,
            auth_validation_public_key_path: None,
            shutdown_timeout: duration(DEFAULT_SHUTDOWN_TIMEOUT),
            authentication_timeout: duration(DEFAULT_AUTHENTICATION_TIMEOUT),
            page_service_max_connections: None,
            page_service_threads: None,
            page_service_constant_pages: false,
            http_max_connections: None,
            http_max_concurrent_requests: DEFAULT_HTTP_MAX_CONCURRENT_REQUESTS,
            http_header_read_timeout: duration(DEFAULT_HTTP_HEADER_READ_TIMEOUT),
            http_body_read_timeout: duration(DEFAULT_HTTP_BODY_READ_TIMEOUT),
            http_auth_type: AuthType::Trust,
            http_auth_open_routes: DEFAULT_HTTP_AUTH_OPEN_ROUTES
                .iter()
                .map(|r| r.to_string())
                .collect(),
            wal_receiver_status_interval: duration(DEFAULT_WAL_RECEIVER_STATUS_INTERVAL),
            wal_receiver_idle_flush: duration(DEFAULT_WAL_RECEIVER_IDLE_FLUSH),
            wal_receiver_timeout: duration(DEFAULT_WAL_RECEIVER_TIMEOUT),
            wal_receiver_slot_advance_interval: duration(
                DEFAULT_WAL_RECEIVER_SLOT_ADVANCE_INTERVAL,
            ),
            wal_redo_check: false,
            max_concurrent_backups: DEFAULT_MAX_CONCURRENT_BACKUPS,
            max_concurrent_backups_per_tenant: DEFAULT_MAX_CONCURRENT_BACKUPS_PER_TENANT,
            lsn_lease_length: duration(DEFAULT_LSN_LEASE_LENGTH),
            compaction_threshold: DEFAULT_COMPACTION_THRESHOLD,
            compaction_target_size: size(DEFAULT_COMPACTION_TARGET_SIZE),
            compaction_period: duration(DEFAULT_COMPACTION_PERIOD),
            image_creation_threshold: DEFAULT_IMAGE_CREATION_THRESHOLD,
            max_record_chain: DEFAULT_MAX_RECORD_CHAIN,
            l0_flush_delay_threshold: DEFAULT_L0_FLUSH_DELAY_THRESHOLD,
            l0_flush_stall_threshold: DEFAULT_L0_FLUSH_STALL_THRESHOLD,
            gc_horizon: size(DEFAULT_GC_HORIZON),
            pitr_interval: duration(DEFAULT_PITR_INTERVAL),
            gc_period: duration(DEFAULT_GC_PERIOD),
            layer_index_cache_size: size(DEFAULT_LAYER_INDEX_CACHE_SIZE),
            remote_storage: None,
            disk_usage_based_eviction: None,
        }
    }
}

impl ConfigToml {
    /// Parse the text of a config file. `origin` names it in errors.
    pub fn parse_document(origin: &str, text: &str) -> Result<toml::Table, ConfigError> {
        text.parse::<toml::Table>()
            .map_err(|e| ConfigError::Syntax { origin: origin.to_string(), msg: e.to_string() })
    }

    /// Apply one `key=value` override (TOML syntax for the value) to `table`.
    pub fn apply_override(table: &mut toml::Table, spec: &str) -> Result<(), ConfigError> {
        let origin = format!("-c {spec}");
        let key = spec.split_once('=').map(|(k, _)| k.trim()).unwrap_or("").to_string();
        if key.is_empty() {
            return Err(ConfigError::Syntax {
                origin,
                msg: "expected key=value, e.g. -c checkpoint_distance=\"64 MiB\"".to_string(),
            });
        }
        let parsed = spec.parse::<toml::Table>().map_err(|e| ConfigError::Key {
            key: key.clone(),
            msg: format!(
                "override '{spec}' is not valid TOML (strings need quotes, \
                 e.g. {key}=\"...\"): {}",
                e.message()
            ),
        })?;
        for (k, v) in parsed {
            table.insert(k, v);
        }
        Ok(())
    }

    /// Deserialize a merged table; missing keys take their defaults.
    pub fn from_table(table: toml::Table) -> Result<ConfigToml, ConfigError> {
        match ConfigToml::deserialize(toml::Value::Table(table.clone())) {
            Ok(conf) => Ok(conf),
            Err(whole) => {
                for (key, value) in table {
                    let mut single = toml::Table::new();
                    single.insert(key.clone(), value);
                    if let Err(e) = ConfigToml::deserialize(toml::Value::Table(single)) {
                        return Err(ConfigError::Key { key, msg: e.message().to_string() });
                    }
                }
                // Unreachable while keys are independent; keep the message anyway.
                Err(ConfigError::Syntax { origin: "config".to_string(), msg: whole.to_string() })
            }
        }
    }
}
