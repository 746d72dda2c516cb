//! `RemoteTimelineClient`: one timeline's link to remote storage: what is
//! uploaded (the remote layer set), downloads of layers on demand, and the
//! upload queue (`upload.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use io_engine::IoEngine;
use tracing::warn;
use utils::id::{TenantId, TimelineId};

use super::index_part::{IndexLayer, IndexPart};
use super::{layer_key, Generation};
use crate::remote_storage::{RemoteError, RemoteStorage};
use crate::tenant::storage_layer::LayerName;

/// Attempts of one layer download (a corrupt or failed transfer is tried
/// again) before the read that needs it gets the error.
const DOWNLOAD_ATTEMPTS: u32 = 4;

pub struct RemoteTimelineClient {
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    pub generation: Generation,
    storage: Arc<RemoteStorage>,
    engine: IoEngine,
    /// The timeline's local directory.
    dir: PathBuf,
    /// Layers in remote storage this client knows of: those of the newest
    /// uploaded index plus those uploaded since (by name). Only grows by
    /// uploads and shrinks by deletions this client makes.
    pub(super) uploaded: Mutex<BTreeMap<String, IndexLayer>>,
    /// The last index uploaded (or downloaded at attach), if any.
    pub(super) last_index: Mutex<Option<Arc<IndexPart>>>,
}

impl RemoteTimelineClient {
    /// A client for a timeline whose remote state is `index` (the newest
    /// index at or below `generation`, `None` for a timeline not yet in
    /// remote storage).
    pub fn new(
        storage: Arc<RemoteStorage>,
        engine: IoEngine,
        ids: (TenantId, TimelineId),
        generation: Generation,
        dir: PathBuf,
        index: Option<IndexPart>,
    ) -> RemoteTimelineClient {
        let uploaded = index.as_ref().map(|ip| ip.layers.clone()).unwrap_or_default();
        RemoteTimelineClient {
            tenant_id: ids.0,
            timeline_id: ids.1,
            generation,
            storage,
            engine,
            dir,
            uploaded: Mutex::new(uploaded),
            last_index: Mutex::new(index.map(Arc::new)),
        }
    }

    pub fn storage(&self) -> &Arc<RemoteStorage> {
        &self.storage
    }

    /// The remote copy of layer `name`, if it is uploaded.
    pub fn uploaded_layer(&self, name: &str) -> Option<IndexLayer> {
        self.uploaded.lock().unwrap().get(name).copied()
    }

    /// The object key of an uploaded layer.
    pub fn object_key(&self, name: &str, generation: Generation) -> String {
        layer_key(self.tenant_id, self.timeline_id, name, generation)
    }

    /// Download layer `name` into the timeline's directory (temp file,
    /// fsync, rename, fsync dir), its size and CRC-32C checked against the
    /// remote index. A failed or corrupt transfer is retried a few times;
    /// the error then names the object and what was wrong.
    pub async fn download_layer(&self, name: &LayerName) -> anyhow::Result<PathBuf> {
        let fname = name.to_string();
        let Some(remote) = self.uploaded_layer(&fname) else {
            anyhow::bail!(
                "layer {fname} of timeline {}/{} is neither on local disk nor in remote storage",
                self.tenant_id,
                self.timeline_id
            );
        };
        let key = self.object_key(&fname, remote.generation);
        let local = self.dir.join(&fname);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.download_once(&key, &local, remote).await {
                Ok(()) => return Ok(local),
                Err(e) if attempt >= DOWNLOAD_ATTEMPTS || e.is_not_found() => {
                    return Err(e).with_context(|| format!("download layer {fname}"));
                }
                Err(e) => {
                    warn!("download of {key} failed (attempt {attempt}), retrying: {e}");
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                }
            }
        }
    }

    async fn download_once(
        &self,
        key: &str,
        local: &Path,
        remote: IndexLayer,
    ) -> Result<(), RemoteError> {
        let started = std::time::Instant::now();
        let got =
            self.storage.download_file(&self.engine, key, local, Some(remote.check())).await?;
        crate::metrics::remote::record_download(got.size_bytes, started.elapsed());
        Ok(())
    }
}
