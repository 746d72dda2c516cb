//! Remote storage: the durable copy of layer files and manifests in an
//! object store (S3 and compatibles, or a local directory), through the
//! `object_store` crate.
//!
//! [`RemoteStorage`] is a thin layer over `ObjectStore`: object keys are
//! relative to the configured prefix; transfers stream between the object
//! store and files written through the IO engine (temp file, fsync,
//! rename, fsync dir), computing each object's CRC-32C on the way; every
//! error names the operation, the object and the store (never the
//! credentials, which only the environment holds). Transfers in flight are
//! bounded by `concurrency` (a semaphore shared by all tenants).
//!
//! Retries: the S3 client retries a failed request briefly (2 retries
//! within 10 s); callers (the upload queue, downloads) retry with their own
//! capped backoff, so an outage never fails a request forever.

pub mod config;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use io_engine::{AlignedBuf, IoEngine, OpenMode};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig, WriteMultipart};
use tokio::sync::Semaphore;

pub use config::{RemoteStorageConfig, RemoteStorageKind, RemoteStorageToml};

/// Bytes a transfer reads from or writes to the local file at a time (and
/// the part size of a multipart upload).
const TRANSFER_CHUNK_BYTES: usize = 8 * 1024 * 1024;
/// Multipart parts uploaded at once per upload.
const PARTS_IN_FLIGHT: usize = 4;

/// Why a remote operation failed; names the object and the store.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("object {key} not found in {store}")]
    NotFound { key: String, store: String },
    /// The object's bytes differ from what the manifest recorded.
    #[error("object {key} in {store} is corrupt: {detail}")]
    Corrupt { key: String, store: String, detail: String },
    #[error("{op} object {key} in {store}: {source}")]
    Store {
        op: &'static str,
        key: String,
        store: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{op} object {key}: local file {path}: {source}")]
    Local {
        op: &'static str,
        key: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{op} object {key} in {store}: no answer within {timeout:?}")]
    Timeout { op: &'static str, key: String, store: String, timeout: Duration },
}

impl RemoteError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, RemoteError::NotFound { .. })
    }

    /// The store could not be reached or refused the request (network,
    /// timeout, credentials, a missing bucket): trying again later may
    /// work. Not found, corrupt and local errors are not.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, RemoteError::Store { .. } | RemoteError::Timeout { .. })
    }
}

/// An object's size and CRC-32C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectCheck {
    pub size_bytes: u64,
    pub crc32c: u32,
}

/// One object of a listing: its key (relative to the prefix) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub key: String,
    pub size_bytes: u64,
}

pub struct RemoteStorage {
    store: Arc<dyn ObjectStore>,
    conf: RemoteStorageConfig,
    /// "s3 bucket B at E" or "local directory D": what errors name.
    describe: String,
    transfers: Semaphore,
    /// LIST requests sent (`list`, `list_dirs`), also counted in
    /// `pageserver_remote_list_requests_total`.
    list_requests: AtomicU64,
}

impl std::fmt::Debug for RemoteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteStorage({})", self.describe)
    }
}

impl RemoteStorage {
    /// Connect as `conf` says; S3 credentials come from the environment.
    /// Nothing is sent yet: a store that is down shows in the first use.
    pub fn new(conf: RemoteStorageConfig) -> anyhow::Result<RemoteStorage> {
        let (store, describe): (Arc<dyn ObjectStore>, String) = match &conf.kind {
            RemoteStorageKind::LocalFs { path } => {
                std::fs::create_dir_all(path).map_err(|e| {
                    anyhow::anyhow!("remote_storage local_path {}: {e}", path.display())
                })?;
                let fs = LocalFileSystem::new_with_prefix(path).map_err(|e| {
                    anyhow::anyhow!("remote_storage local_path {}: {e}", path.display())
                })?;
                (Arc::new(fs), format!("local directory {}", path.display()))
            }
            RemoteStorageKind::S3 { endpoint, bucket, region } => {
                let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(e) = endpoint {
                    b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
                }
                b = b.with_region(region.clone().unwrap_or_else(|| "us-east-1".into()));
                let retry = RetryConfig {
                    backoff: BackoffConfig::default(),
                    max_retries: 2,
                    retry_timeout: Duration::from_secs(10),
                };
                // Client options replace the builder's own: allow_http must be
                // set on them, or an http:// endpoint refuses every request.
                let allow_http = endpoint.as_deref().is_some_and(|e| e.starts_with("http://"));
                let client = ClientOptions::new()
                    .with_allow_http(allow_http)
                    .with_timeout(conf.timeout)
                    .with_connect_timeout(Duration::from_secs(5));
                let s3 = b
                    .with_retry(retry)
                    .with_client_options(client)
                    .build()
                    .map_err(|e| anyhow::anyhow!("remote_storage: S3 bucket {bucket}: {e}"))?;
                let at = endpoint.as_deref().unwrap_or("AWS");
                (Arc::new(s3), format!("S3 bucket {bucket} at {at}"))
            }
        };
        let transfers = Semaphore::new(conf.concurrency);
        let list_requests = AtomicU64::new(0);
        Ok(RemoteStorage { store, conf, describe, transfers, list_requests })
    }

    pub fn conf(&self) -> &RemoteStorageConfig {
        &self.conf
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// LIST requests this store sent so far.
    pub fn list_requests(&self) -> u64 {
        self.list_requests.load(Ordering::Relaxed)
    }

    fn count_list(&self) {
        self.list_requests.fetch_add(1, Ordering::Relaxed);
        crate::metrics::remote::LIST_REQUESTS.inc();
    }

    fn path(&self, key: &str) -> ObjectPath {
        debug_assert!(!key.starts_with('/') && !key.ends_with('/'), "key {key}");
        match self.conf.prefix.is_empty() {
            true => ObjectPath::from(key),
            false => ObjectPath::from(format!("{}/{key}", self.conf.prefix)),
        }
    }

    /// A failure of the local side of a transfer, naming object and file.
    fn local_error(
        &self,
        op: &'static str,
        key: &str,
        local: &Path,
        source: std::io::Error,
    ) -> RemoteError {
        let (key, path) = (self.full_key(key), local.display().to_string());
        RemoteError::Local { op, key, path, source }
    }

    /// `key` as the store names it (with the prefix), for messages.
    pub fn full_key(&self, key: &str) -> String {
        self.path(key).to_string()
    }

    /// `key` of an object path listed under the prefix.
    fn key_of(&self, path: &ObjectPath) -> String {
        let s = path.as_ref();
        match self.conf.prefix.is_empty() {
            true => s.to_string(),
            false => s.strip_prefix(&self.conf.prefix).unwrap_or(s).trim_start_matches('/').into(),
        }
    }

    fn store_error(&self, op: &'static str, key: &str, source: object_store::Error) -> RemoteError {
        match source {
            object_store::Error::NotFound { .. } => {
                RemoteError::NotFound { key: self.full_key(key), store: self.describe.clone() }
            }
            source => RemoteError::Store {
                op,
                key: self.full_key(key),
                store: self.describe.clone(),
                source,
            },
        }
    }

    /// `fut`, bounded by the request timeout.
    async fn timed<T>(
        &self,
        op: &'static str,
        key: &str,
        fut: impl std::future::Future<Output = Result<T, object_store::Error>>,
    ) -> Result<T, RemoteError> {
        match tokio::time::timeout(self.conf.timeout, fut).await {
            Ok(r) => r.map_err(|e| self.store_error(op, key, e)),
            Err(_) => Err(RemoteError::Timeout {
                op,
                key: self.full_key(key),
                store: self.describe.clone(),
                timeout: self.conf.timeout,
            }),
        }
    }

    /// Write a small object whole (a manifest, a marker).
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), RemoteError> {
        let _slot = self.transfers.acquire().await.expect("never closed");
        let path = self.path(key);
        self.timed("put", key, self.store.put(&path, bytes.into())).await?;
        Ok(())
    }

    /// Read a small object whole.
    pub async fn get(&self, key: &str) -> Result<Bytes, RemoteError> {
        let _slot = self.transfers.acquire().await.expect("never closed");
        let path = self.path(key);
        let got = self.timed("get", key, self.store.get(&path)).await?;
        self.timed("get", key, got.bytes()).await
    }

    /// Remove an object; one already gone is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), RemoteError> {
        let path = self.path(key);
        match self.timed("delete", key, self.store.delete(&path)).await {
            Err(RemoteError::NotFound { .. }) => Ok(()),
            r => r,
        }
    }

    /// Every object whose key starts with `prefix/` (recursively).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>, RemoteError> {
        let path = self.path(prefix);
        self.count_list();
        let listing = self.store.list(Some(&path)).try_collect::<Vec<_>>();
        let metas = self.timed("list", prefix, listing).await?;
        let objects = metas
            .into_iter()
            .map(|m| ListedObject { key: self.key_of(&m.location), size_bytes: m.size });
        Ok(objects.collect())
    }

    /// The names of the "directories" directly under `prefix/`.
    pub async fn list_dirs(&self, prefix: &str) -> Result<Vec<String>, RemoteError> {
        let path = self.path(prefix);
        self.count_list();
        let res = self.timed("list", prefix, self.store.list_with_delimiter(Some(&path))).await?;
        let names = res.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_string));
        Ok(names.collect())
    }

    /// Upload the file at `local` as `key`, streaming it (multipart above
    /// one chunk); returns its size and CRC-32C as uploaded.
    pub async fn upload_file(
        &self,
        engine: &IoEngine,
        local: &Path,
        key: &str,
    ) -> Result<ObjectCheck, RemoteError> {
        let _slot = self.transfers.acquire().await.expect("never closed");
        let local_err = |source| self.local_error("upload", key, local, source);
        let file = engine.open(local, OpenMode::READ).await.map_err(local_err)?;
        let size_bytes = file.len().await.map_err(local_err)?;
        let path = self.path(key);
        let mut crc = 0u32;
        if size_bytes <= TRANSFER_CHUNK_BYTES as u64 {
            let len = size_bytes as usize;
            let (buf, res) = file.read_exact_at(AlignedBuf::for_read(len), 0, len).await;
            res.map_err(local_err)?;
            crc = crc32c::crc32c(&buf[..len]);
            let bytes = Bytes::copy_from_slice(&buf[..len]);
            self.timed("upload", key, self.store.put(&path, bytes.into())).await?;
            return Ok(ObjectCheck { size_bytes, crc32c: crc });
        }
        let upload = self.timed("upload", key, self.store.put_multipart(&path)).await?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, TRANSFER_CHUNK_BYTES);
        let mut offset = 0u64;
        while offset < size_bytes {
            let len = (size_bytes - offset).min(TRANSFER_CHUNK_BYTES as u64) as usize;
            let (buf, res) = file.read_exact_at(AlignedBuf::for_read(len), offset, len).await;
            if let Err(e) = res {
                w.abort().await.ok();
                return Err(local_err(e));
            }
            crc = crc32c::crc32c_append(crc, &buf[..len]);
            let wait = w.wait_for_capacity(PARTS_IN_FLIGHT);
            if let Err(e) = self.timed("upload", key, wait).await {
                w.abort().await.ok();
                return Err(e);
            }
            w.write(&buf[..len]);
            offset += len as u64;
        }
        self.timed("upload", key, w.finish()).await?;
        Ok(ObjectCheck { size_bytes, crc32c: crc })
    }

    /// Download `key` into `local` crash-safely (temp file, fsync, rename,
    /// fsync dir). With `expected`, the object's size and CRC-32C must
    /// match it, else nothing is renamed into place and the error is
    /// `Corrupt`, naming both.
    pub async fn download_file(
        &self,
        engine: &IoEngine,
        key: &str,
        local: &Path,
        expected: Option<ObjectCheck>,
    ) -> Result<ObjectCheck, RemoteError> {
        let _slot = self.transfers.acquire().await.expect("never closed");
        let local_err = |source| self.local_error("download", key, local, source);
        let path = self.path(key);
        let got = self.timed("download", key, self.store.get(&path)).await?;
        let tmp = engine.create_temp(local).await.map_err(local_err)?;
        let mut stream = got.into_stream();
        let mut buf = AlignedBuf::with_capacity(TRANSFER_CHUNK_BYTES);
        let (mut offset, mut crc) = (0u64, 0u32);
        loop {
            let next = self.timed("download", key, stream.try_next()).await;
            let chunk = match next {
                Ok(c) => c,
                Err(e) => {
                    engine.remove_file(tmp.temp_path()).await.ok();
                    return Err(e);
                }
            };
            let done = chunk.is_none();
            if let Some(c) = &chunk {
                crc = crc32c::crc32c_append(crc, c);
            }
            let mut data: &[u8] = chunk.as_deref().unwrap_or(&[]);
            while !data.is_empty() || (done && !buf.is_empty()) {
                let take = data.len().min(buf.remaining());
                buf.extend_from_slice(&data[..take]);
                data = &data[take..];
                if buf.remaining() == 0 || (done && data.is_empty()) {
                    let len = buf.len() as u64;
                    let (b, res) = tmp.file().write_all_at(buf, offset).await;
                    res.map_err(local_err)?;
                    offset += len;
                    buf = b;
                    buf.clear();
                }
            }
            if done {
                break;
            }
        }
        let got = ObjectCheck { size_bytes: offset, crc32c: crc };
        if let Some(want) = expected.filter(|w| *w != got) {
            engine.remove_file(tmp.temp_path()).await.ok();
            return Err(RemoteError::Corrupt {
                key: self.full_key(key),
                store: self.describe.clone(),
                detail: format!(
                    "{} bytes with CRC-32C {:08x}, the manifest says {} bytes with {:08x}",
                    got.size_bytes, got.crc32c, want.size_bytes, want.crc32c
                ),
            });
        }
        tmp.commit().await.map_err(local_err)?;
        Ok(got)
    }
}

/// A store in the local directory `root`, for tests; `extra` is more of its
/// TOML table (for example `prefix = 'a/'` or `deletion_delay = '0s'`).
#[cfg(test)]
pub(crate) fn local_for_tests(root: &std::path::Path, extra: &str) -> RemoteStorage {
    let text = format!("local_path = '{}'\n{extra}", root.display());
    let t: RemoteStorageToml = toml::from_str(&text).expect("test store config parses");
    RemoteStorage::new(t.validate().expect("test store config is valid")).expect("test store")
}

#[cfg(test)]
mod tests;
