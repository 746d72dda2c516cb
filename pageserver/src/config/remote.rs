//! The keys `remote_storage` and `disk_usage_based_eviction`: validated
//! into the one `RemoteStorage` of the daemon and the `EvictionConf`.
//!
//! ```toml
//! remote_storage = { endpoint = "http://127.0.0.1:9000", bucket = "ps", region = "us-east-1" }
//! disk_usage_based_eviction = { max_resident_bytes = "10 GiB", min_avail_bytes = "1 GiB", period = "10 s" }
//! ```
//!
//! Invariants: every error names its key; the S3 credentials come from the
//! environment only (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`: the table has no key for them) and are never in a
//! message or log line; eviction is configured only together with remote
//! storage (only layer files that are in remote storage are evicted).

use std::sync::Arc;
use std::time::Duration;

use bytesize::ByteSize;
use serde::Deserialize;

use super::config_toml::de_opt_size;
use super::{defaults, key_err, ConfigError};
use crate::remote_storage::{RemoteStorage, RemoteStorageToml};
use crate::tenant::EvictionConf;

const REMOTE_STORAGE_KEY: &str = "remote_storage";
const EVICTION_KEY: &str = "disk_usage_based_eviction";

/// `disk_usage_based_eviction` as written; every field optional.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvictionToml {
    #[serde(default, deserialize_with = "de_opt_size")]
    pub max_resident_bytes: Option<ByteSize>,
    #[serde(default, deserialize_with = "de_opt_size")]
    pub min_avail_bytes: Option<ByteSize>,
    #[serde(default, with = "humantime_serde")]
    pub period: Option<Duration>,
}

/// Validate `remote_storage` and connect (no request is sent yet: a store
/// that is down shows in its first use). `None`: local disk only.
pub(super) fn check_remote_storage(
    toml: Option<RemoteStorageToml>,
) -> Result<Option<Arc<RemoteStorage>>, ConfigError> {
    let Some(toml) = toml else { return Ok(None) };
    let conf = toml.validate().map_err(|msg| key_err(REMOTE_STORAGE_KEY, msg))?;
    let storage =
        RemoteStorage::new(conf).map_err(|e| key_err(REMOTE_STORAGE_KEY, format!("{e:#}")))?;
    Ok(Some(Arc::new(storage)))
}

/// Validate `disk_usage_based_eviction`; absent: never evict.
pub(super) fn check_eviction(
    toml: Option<EvictionToml>,
    remote_storage: bool,
) -> Result<EvictionConf, ConfigError> {
    let Some(t) = toml else { return Ok(EvictionConf::default()) };
    if !remote_storage {
        return Err(key_err(
            EVICTION_KEY,
            "needs remote_storage: only layer files that are in remote storage are evicted",
        ));
    }
    if t.max_resident_bytes.is_none() && t.min_avail_bytes.is_none() {
        return Err(key_err(
            EVICTION_KEY,
            "give max_resident_bytes or min_avail_bytes (or both); leave the key out to \
             never evict",
        ));
    }
    if t.max_resident_bytes.is_some_and(|b| b.as_u64() == 0) {
        return Err(key_err(EVICTION_KEY, "max_resident_bytes must be greater than 0"));
    }
    let default_period =
        humantime::parse_duration(defaults::DEFAULT_EVICTION_PERIOD).expect("unit-tested");
    let period = t.period.unwrap_or(default_period);
    if period.is_zero() {
        return Err(key_err(
            EVICTION_KEY,
            "period must be greater than 0; leave the key out to never evict",
        ));
    }
    Ok(EvictionConf {
        max_resident_bytes: t.max_resident_bytes.map(|b| b.as_u64()),
        min_avail_bytes: t.min_avail_bytes.map(|b| b.as_u64()),
        period,
    })
}
