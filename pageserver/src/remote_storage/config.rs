//! The `remote_storage` config key: where the durable copy of the tenants
//! lives.
//!
//! ```toml
//! remote_storage = { endpoint = "http://127.0.0.1:9000", bucket = "ps", prefix = "pageserver", region = "us-east-1" }
//! remote_storage = { local_path = "/srv/pageserver-remote" }
//! ```
//!
//! S3 (and compatibles: MinIO) or a local directory (development). The S3
//! credentials come from the environment only (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`): the TOML file has no key
//! for them, and `deny_unknown_fields` refuses one. Optional tuning keys:
//! `concurrency` (transfers in flight per pageserver), `upload_queue_size`
//! (bytes of layer files a timeline may have waiting for upload before its
//! flushes wait), `deletion_delay` (how long replaced objects stay),
//! `timeout` (one request), `retry_max_backoff` (the longest wait
//! between two tries of a tenant's start-up steps while the store cannot
//! be reached) and `check_period` (how often an idle timeline lists its
//! objects to check that its uploaded index is still complete).

use std::path::PathBuf;
use std::time::Duration;

use bytesize::ByteSize;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteStorageToml {
    pub endpoint: Option<String>,
    pub bucket: Option<String>,
    pub prefix: Option<String>,
    pub region: Option<String>,
    pub local_path: Option<PathBuf>,
    pub concurrency: Option<usize>,
    pub upload_queue_size: Option<ByteSize>,
    #[serde(default, with = "humantime_serde")]
    pub deletion_delay: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub retry_max_backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub check_period: Option<Duration>,
}

/// Where the objects are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteStorageKind {
    S3 { endpoint: Option<String>, bucket: String, region: Option<String> },
    LocalFs { path: PathBuf },
}

/// The validated `remote_storage` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteStorageConfig {
    pub kind: RemoteStorageKind,
    /// Every object key starts with it (no leading or trailing '/'); may
    /// be empty.
    pub prefix: String,
    pub concurrency: usize,
    pub upload_queue_bytes: u64,
    pub deletion_delay: Duration,
    pub timeout: Duration,
    /// A tenant whose load found the store unreachable is tried again
    /// after `RETRY_FIRST_BACKOFF` (or this, if shorter), doubling up to
    /// this.
    pub retry_max_backoff: Duration,
    /// How often an idle upload task lists its timeline's objects to check
    /// the last index uploaded (`tenant/remote_timeline/upload.rs`); > 0.
    pub check_period: Duration,
}

pub const DEFAULT_CONCURRENCY: usize = 8;
pub const DEFAULT_UPLOAD_QUEUE_BYTES: u64 = 1 << 30;
pub const DEFAULT_DELETION_DELAY: Duration = Duration::from_secs(60);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
pub const DEFAULT_RETRY_MAX_BACKOFF: Duration = Duration::from_secs(30);
pub const DEFAULT_CHECK_PERIOD: Duration = Duration::from_secs(300);
/// The first wait before a tenant's load is tried again.
pub const RETRY_FIRST_BACKOFF: Duration = Duration::from_secs(1);

impl RemoteStorageToml {
    /// Check the table; the error says what is wrong with which key (the
    /// caller prefixes `remote_storage`).
    pub fn validate(&self) -> Result<RemoteStorageConfig, String> {
        let kind = match (&self.local_path, &self.bucket) {
            (Some(_), Some(_)) => {
                return Err("give either local_path or bucket (S3), not both".into());
            }
            (None, None) => {
                return Err(
                    "give local_path (a directory) or bucket (S3, with endpoint and region)".into(),
                );
            }
            (Some(path), None) => {
                if self.endpoint.is_some() || self.region.is_some() {
                    return Err(
                        "endpoint and region are S3 settings; local_path takes neither".into()
                    );
                }
                if !path.is_absolute() {
                    return Err(format!("local_path {} must be absolute", path.display()));
                }
                RemoteStorageKind::LocalFs { path: path.clone() }
            }
            (None, Some(bucket)) => {
                if bucket.is_empty() || bucket.contains('/') {
                    return Err(format!("bucket '{bucket}' is not a bucket name"));
                }
                if let Some(e) = &self.endpoint {
                    if !(e.starts_with("http://") || e.starts_with("https://")) {
                        return Err(format!("endpoint '{e}' must start with http:// or https://"));
                    }
                }
                RemoteStorageKind::S3 {
                    endpoint: self.endpoint.clone(),
                    bucket: bucket.clone(),
                    region: self.region.clone(),
                }
            }
        };
        let prefix = self.prefix.clone().unwrap_or_default();
        let prefix = prefix.trim_matches('/').to_string();
        if prefix.split('/').any(|s| s == "." || s == "..") {
            return Err(format!("prefix '{prefix}' may not contain . or .. segments"));
        }
        let concurrency = self.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        if !(1..=256).contains(&concurrency) {
            return Err(format!("concurrency {concurrency} must be 1 to 256"));
        }
        let upload_queue_bytes = self.upload_queue_size.map_or(DEFAULT_UPLOAD_QUEUE_BYTES, |b| b.0);
        if upload_queue_bytes == 0 {
            return Err("upload_queue_size must be above 0".into());
        }
        let timeout = self.timeout.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            return Err("timeout must be above 0".into());
        }
        let retry_max_backoff = self.retry_max_backoff.unwrap_or(DEFAULT_RETRY_MAX_BACKOFF);
        if retry_max_backoff.is_zero() {
            return Err("retry_max_backoff must be above 0".into());
        }
        let check_period = self.check_period.unwrap_or(DEFAULT_CHECK_PERIOD);
        if check_period.is_zero() {
            return Err("check_period must be above 0".into());
        }
        Ok(RemoteStorageConfig {
            kind,
            prefix,
            concurrency,
            upload_queue_bytes,
            deletion_delay: self.deletion_delay.unwrap_or(DEFAULT_DELETION_DELAY),
            timeout,
            retry_max_backoff,
            check_period,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<RemoteStorageConfig, String> {
        let t: RemoteStorageToml = toml::from_str(s).map_err(|e| e.to_string())?;
        t.validate()
    }

    #[test]
    fn s3_and_local_parse() {
        let c = parse(
            "endpoint = 'http://127.0.0.1:9000'\nbucket = 'b'\nprefix = '/p/q/'\nregion = 'us-east-1'",
        )
        .unwrap();
        assert_eq!(c.prefix, "p/q");
        assert!(matches!(c.kind, RemoteStorageKind::S3 { ref bucket, .. } if bucket == "b"));
        let c = parse("local_path = '/tmp/x'\ndeletion_delay = '2s'").unwrap();
        assert_eq!(c.kind, RemoteStorageKind::LocalFs { path: "/tmp/x".into() });
        assert_eq!(c.deletion_delay, Duration::from_secs(2));
        assert_eq!(c.retry_max_backoff, DEFAULT_RETRY_MAX_BACKOFF);
        let c = parse("local_path = '/tmp/x'\nretry_max_backoff = '500ms'").unwrap();
        assert_eq!(c.retry_max_backoff, Duration::from_millis(500));
        assert_eq!(c.check_period, DEFAULT_CHECK_PERIOD);
        let c = parse("local_path = '/tmp/x'\ncheck_period = '200ms'").unwrap();
        assert_eq!(c.check_period, Duration::from_millis(200));
    }

    #[test]
    fn bad_tables_are_refused_naming_the_key() {
        assert!(parse("bucket = 'b'\nlocal_path = '/x'").unwrap_err().contains("not both"));
        assert!(parse("prefix = 'p'").unwrap_err().contains("local_path"));
        assert!(parse("local_path = 'rel'").unwrap_err().contains("absolute"));
        assert!(parse("bucket = 'b'\nendpoint = 'minio:9000'").unwrap_err().contains("endpoint"));
        assert!(parse("bucket = 'b'\nconcurrency = 0").unwrap_err().contains("concurrency"));
        let e = parse("bucket = 'b'\nretry_max_backoff = '0s'").unwrap_err();
        assert!(e.contains("retry_max_backoff"), "{e}");
        let e = parse("bucket = 'b'\ncheck_period = '0s'").unwrap_err();
        assert!(e.contains("check_period must be above 0"), "{e}");
        // Credentials are never read from the file.
        let e = parse("bucket = 'b'\naccess_key_id = 'x'").unwrap_err();
        assert!(e.contains("access_key_id"), "{e}");
    }
}
