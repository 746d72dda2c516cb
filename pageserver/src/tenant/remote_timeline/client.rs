//! `RemoteTimelineClient`: one timeline's link to remote storage: what is
//! uploaded (the remote layer set), downloads of layers on demand, and the
//! upload queue (`upload.rs`).
//!
//! `remote_consistent_lsn` and completeness: the watch `remote_consistent`
//! holds the `disk_consistent_lsn` of the newest index known to be
//! complete in the store (it and every layer object it lists were listed
//! after it was written), and the objects found missing since, which the
//! upload queue is uploading again, or, those it has no local copy of,
//! cannot (lost). While any are missing the LSN does not advance and
//! `wait_uploaded` does not return true.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use io_engine::IoEngine;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::warn;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::commit_times::IndexSegment;
use super::index_part::{IndexLayer, IndexPart};
use super::upload::DueDeletion;
use super::{layer_key, Generation};
use crate::metrics::remote as metrics;
use crate::remote_storage::{RemoteError, RemoteStorage};
use crate::tenant::commit_times::CommitTimesSnapshot;
use crate::tenant::metadata::{LayerEntry, TimelineMetadata};
use crate::tenant::storage_layer::LayerName;
use crate::tenant::timeline::wal_source::WalSource;

/// A manifest to make remote storage match (`upload.rs`).
pub struct UploadTarget {
    /// Increases with every target scheduled.
    pub seq: u64,
    pub md: TimelineMetadata,
    pub wal_source: Option<WalSource>,
    /// The commit-time index's segments to list with it
    /// (`commit_times.rs`); they cover `md.disk_consistent_lsn` (asserted).
    pub commit_times: CommitTimesSnapshot,
    /// Position in `md.layers` by layer name.
    by_name: HashMap<String, usize>,
}

impl UploadTarget {
    fn new(
        seq: u64,
        md: TimelineMetadata,
        wal_source: Option<WalSource>,
        commit_times: CommitTimesSnapshot,
    ) -> UploadTarget {
        assert!(
            commit_times.durable_lsn >= md.disk_consistent_lsn,
            "the commit-time index is durable to {}, the manifest says {}",
            commit_times.durable_lsn,
            md.disk_consistent_lsn
        );
        let by_name = md.layers.iter().enumerate().map(|(i, l)| (l.name.clone(), i)).collect();
        UploadTarget { seq, md, wal_source, commit_times, by_name }
    }

    /// The target's entry for the layer `name`.
    pub fn layer(&self, name: &str) -> Option<&LayerEntry> {
        self.by_name.get(name).map(|&i| &self.md.layers[i])
    }
}

/// What remote storage is known to have of the timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteConsistency {
    /// `disk_consistent_lsn` of the newest index known to be complete.
    pub lsn: Option<Lsn>,
    /// Objects an uploaded index lists that the store was found to lack,
    /// not uploaded again yet, in the order of the index.
    pub missing: Vec<MissingObject>,
}

impl RemoteConsistency {
    /// The missing objects that cannot be uploaded again from here.
    pub fn lost(&self) -> impl Iterator<Item = &MissingObject> {
        self.missing.iter().filter(|m| !m.recoverable)
    }
}

/// An object an uploaded index lists that the store lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingObject {
    /// Its key, with the store's prefix.
    pub key: String,
    /// Its content is here (a local layer file, a commit-time segment) and
    /// is being uploaded again; otherwise it is lost: neither on local disk
    /// nor in the store (a layer evicted before the loss).
    pub recoverable: bool,
}

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
    /// uploads and shrinks by deletions this client makes. Lock order:
    /// this lock, then (briefly) a borrow of `target`, never the reverse.
    pub(super) uploaded: Mutex<BTreeMap<String, IndexLayer>>,
    /// The same for commit-time segments (by file name). Lock order: after
    /// `uploaded` if both are held.
    pub(super) uploaded_segments: Mutex<BTreeMap<String, IndexSegment>>,
    /// The last index uploaded (or downloaded at attach), if any.
    pub(super) last_index: Mutex<Option<Arc<IndexPart>>>,
    /// The newest manifest to upload; `seq` of the last one uploaded.
    target: watch::Sender<Option<Arc<UploadTarget>>>,
    next_seq: AtomicU64,
    pub(super) uploaded_seq: AtomicU64,
    /// Objects to delete once due (`upload.rs`, step 3).
    pub(super) deletions: Mutex<Vec<DueDeletion>>,
    /// Bytes of the layers of target `pending_seq` not uploaded yet
    /// (backpressure). Both change only under the `uploaded` lock.
    pub(super) pending_bytes: AtomicU64,
    pub(super) pending_seq: AtomicU64,
    pub(super) queue_space: Notify,
    /// See the module comment.
    pub(super) remote_consistent: watch::Sender<RemoteConsistency>,
    /// A listing check is wanted now (a download got a 404); `check_wake`
    /// wakes the upload task for it.
    pub(super) check_requested: AtomicBool,
    pub(super) check_wake: Notify,
    /// How often the upload task checks the last index
    /// (`remote_storage.check_period`).
    pub(super) check_period: Duration,
    /// The lost objects last logged, so that a loss is logged once, not at
    /// every retry (`upload.rs`).
    pub(super) lost_logged: Mutex<Vec<String>>,
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
        let segments = index.as_ref().and_then(|ip| ip.commit_times.as_ref());
        let uploaded_segments = segments.map(|ct| ct.segments.clone()).unwrap_or_default();
        let lsn = index.as_ref().map(|ip| ip.disk_consistent_lsn);
        let remote_consistent = RemoteConsistency { lsn, missing: Vec::new() };
        RemoteTimelineClient {
            tenant_id: ids.0,
            timeline_id: ids.1,
            generation,
            engine,
            dir,
            uploaded: Mutex::new(uploaded),
            uploaded_segments: Mutex::new(uploaded_segments),
            last_index: Mutex::new(index.map(Arc::new)),
            target: watch::Sender::new(None),
            next_seq: AtomicU64::new(1),
            uploaded_seq: AtomicU64::new(0),
            deletions: Mutex::new(Vec::new()),
            pending_bytes: AtomicU64::new(0),
            pending_seq: AtomicU64::new(0),
            queue_space: Notify::new(),
            remote_consistent: watch::Sender::new(remote_consistent),
            check_requested: AtomicBool::new(false),
            check_wake: Notify::new(),
            check_period: storage.conf().check_period,
            lost_logged: Mutex::new(Vec::new()),
            storage,
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(super) fn engine(&self) -> &IoEngine {
        &self.engine
    }

    pub(super) fn target_rx(&self) -> watch::Receiver<Option<Arc<UploadTarget>>> {
        self.target.subscribe()
    }

    /// The newest target (the borrow ends before this returns).
    pub(super) fn current_target(&self) -> Option<Arc<UploadTarget>> {
        self.target.borrow().clone()
    }

    /// Make remote storage match `md` (just written as the local manifest),
    /// `wal_source` and `commit_times` (taken after the index was made
    /// durable to `md`'s LSN): replaces any target not yet uploaded.
    pub fn schedule_index_upload(
        &self,
        md: TimelineMetadata,
        wal_source: Option<WalSource>,
        commit_times: CommitTimesSnapshot,
    ) {
        let seq = self.next_seq.fetch_add(1, Ordering::AcqRel);
        let target = UploadTarget::new(seq, md, wal_source, commit_times);
        self.target.send_replace(Some(Arc::new(target)));
        self.update_pending();
    }

    /// An index with `disk_consistent_lsn` `lsn` was found complete in the
    /// store: nothing it lists is missing any more.
    pub(super) fn set_remote_consistent_lsn(&self, lsn: Lsn) {
        self.remote_consistent.send_modify(|s| {
            s.lsn = Some(s.lsn.map_or(lsn, |old| old.max(lsn)));
            metrics::MISSING_OBJECTS.sub(s.missing.len() as i64);
            metrics::LOST_OBJECTS.sub(s.lost().count() as i64);
            s.missing.clear();
        });
        self.lost_logged.lock().unwrap().clear();
    }

    /// `objects` were found missing from the store: `remote_consistent_lsn`
    /// stays where it is until they are uploaded again (or, lost ones, an
    /// index no longer lists them).
    pub(super) fn set_missing(&self, objects: Vec<MissingObject>) {
        metrics::MISSING_OBJECTS_FOUND.inc_by(objects.len() as u64);
        let lost = objects.iter().filter(|m| !m.recoverable).count() as i64;
        self.remote_consistent.send_modify(|s| {
            metrics::MISSING_OBJECTS.add(objects.len() as i64 - s.missing.len() as i64);
            metrics::LOST_OBJECTS.add(lost - s.lost().count() as i64);
            s.missing = objects;
        });
    }

    /// Ask the upload task to check the store's listing now.
    pub fn request_check(&self) {
        self.check_requested.store(true, Ordering::Release);
        self.check_wake.notify_one();
    }

    /// What remote storage is known to have (module comment).
    pub fn remote_consistency(&self) -> RemoteConsistency {
        self.remote_consistent.borrow().clone()
    }

    /// Bytes of layer files waiting for upload.
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes.load(Ordering::Acquire)
    }

    /// Wait while the upload queue holds more than `upload_queue_size`
    /// bytes (backpressure for flushes); returns how long it waited.
    pub async fn wait_for_queue_space(&self, cancel: &CancellationToken) -> Duration {
        let started = Instant::now();
        let limit = self.storage.conf().upload_queue_bytes;
        let mut logged = false;
        loop {
            let space = self.queue_space.notified();
            if self.pending_bytes() <= limit || cancel.is_cancelled() {
                break;
            }
            if !logged {
                warn!(
                    "upload queue of {}/{} is full ({} bytes waiting, upload_queue_size {limit}): \
                     flushes wait for remote storage",
                    self.tenant_id,
                    self.timeline_id,
                    self.pending_bytes()
                );
                logged = true;
            }
            let slept = Instant::now();
            tokio::select! {
                _ = space => {}
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            // Counted as it goes, so the counter moves during an outage.
            metrics::UPLOAD_QUEUE_WAIT.inc_by(slept.elapsed().as_micros() as u64);
        }
        started.elapsed()
    }

    /// Wait until an index with `disk_consistent_lsn >= lsn` is uploaded
    /// and nothing is known missing, at most `timeout`; returns whether.
    pub async fn wait_uploaded(&self, lsn: Lsn, timeout: Duration) -> bool {
        let mut rx = self.remote_consistent.subscribe();
        let complete =
            |s: &RemoteConsistency| s.missing.is_empty() && s.lsn.is_some_and(|l| l >= lsn);
        let reached = async { rx.wait_for(complete).await.is_ok() };
        tokio::time::timeout(timeout, reached).await.unwrap_or(false)
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
                Err(e) if e.is_not_found() => {
                    // The index lists it: the store lost it. The upload task
                    // checks the listing and uploads what it still has.
                    self.request_check();
                    return Err(e).with_context(|| format!("download layer {fname}"));
                }
                Err(e) if attempt >= DOWNLOAD_ATTEMPTS => {
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
        metrics::record_download(got.size_bytes, started.elapsed());
        Ok(())
    }
}

impl Drop for RemoteTimelineClient {
    fn drop(&mut self) {
        metrics::UPLOAD_QUEUE_BYTES.sub(*self.pending_bytes.get_mut() as i64);
        let state = self.remote_consistent.borrow();
        metrics::MISSING_OBJECTS.sub(state.missing.len() as i64);
        metrics::LOST_OBJECTS.sub(state.lost().count() as i64);
    }
}
