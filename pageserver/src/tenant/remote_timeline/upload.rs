//! The upload queue of one timeline: after every local manifest write
//! (flush, compaction, image creation, GC), the manifest becomes the
//! upload *target*; one task per timeline makes remote storage match it.
//!
//! Order, per target (the contract remote durability rests on):
//! 1. upload every layer the target lists that remote storage lacks, as
//!    `<name>-<own generation>` (`concurrency` at a time);
//!    Then the commit-time segments it lacks (`upload_segments.rs`);
//! 2. upload `index_part.json-<own generation>` listing exactly the
//!    target's layers and commit-time segments, then list the timeline's objects: only if the index
//!    and every layer object it lists are there (at their sizes) is
//!    `remote_consistent_lsn` now the target's `disk_consistent_lsn`.
//!    Objects missing (the store lost them: a bucket deleted and
//!    re-created) are forgotten as uploaded, the generation claim is
//!    written again if it is gone, and the target is retried, which
//!    uploads them again from the local layer files first;
//! 3. objects no index lists any more (replaced layers, and layers uploaded
//!    for a target that was superseded before its index) are queued for
//!    deletion after `deletion_delay`; when due, they are deleted only if
//!    no newer generation has been claimed (`mod.rs`), and never objects
//!    of a newer generation.
//!
//! Targets coalesce: while one is being uploaded, newer ones replace each
//! other, and the task moves on to the newest (a layer of a skipped
//! target that is gone locally is not needed). Failures are retried with
//! capped backoff (0.1 s doubling to 10 s), forever: nothing is dropped.
//!
//! With nothing to upload, the task lists the timeline's objects every
//! `remote_storage.check_period` (and at once when a download got a 404)
//! and checks the last index the same way; a loss makes the newest target
//! due again. A lost layer that is not on local disk (evicted, or never
//! downloaded after an attach) cannot be restored from here (`lost.rs`):
//! it stays known as uploaded (a download names the object), it is logged
//! once and shown as lost (timeline detail, `pageserver_remote_lost_objects`),
//! the index is retried every `check_period` (or at the next flush), and
//! `remote_consistent_lsn` stays where it is until an index no longer
//! lists it. Eviction only evicts layers known to be uploaded, so a layer
//! forgotten as uploaded stays local.
//!
//! Backpressure: `pending_bytes` is the size of the target's layers not
//! yet uploaded. A flush waits (`wait_for_queue_space`) while it is above
//! `upload_queue_size`, so with the object store down ingest goes on until
//! the queue is full, then frozen layers fill the in-memory budget and
//! ingest waits; nothing acknowledged is dropped.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use utils::lsn::Lsn;

use super::client::{MissingObject, RemoteTimelineClient, UploadTarget};
use super::index_part::{IndexLayer, IndexPart};
use super::lost::OnlyLost;
use super::{
    check_index_objects, index_key, name_objects, newest_generation, restore_claim, Generation,
    SizeCheck,
};
use crate::metrics::remote as metrics;
use crate::remote_storage::RemoteError;
use crate::tenant::metadata::LayerEntry;

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Objects of one index that the next index no longer lists.
pub(super) struct DueDeletion {
    pub due: Instant,
    pub objects: Vec<(String, Generation)>,
}

impl RemoteTimelineClient {
    /// The upload task: runs until `cancel` fires.
    pub async fn upload_loop(self: Arc<Self>, cancel: CancellationToken) {
        let mut rx = self.target_rx();
        let mut backoff = MIN_BACKOFF;
        let mut next_check = Instant::now() + self.check_period;
        loop {
            let target = rx.borrow_and_update().clone();
            let uploaded_seq = self.uploaded_seq.load(Ordering::Acquire);
            let check_due =
                Instant::now() >= next_check || self.check_requested.load(Ordering::Acquire);
            let work = match target {
                Some(t) if t.seq > uploaded_seq => {
                    self.upload_target(&t, &cancel).await.map(|()| false)
                }
                _ if check_due => {
                    next_check = Instant::now() + self.check_period;
                    self.check_requested.store(false, Ordering::Release);
                    let checked = self.check_uploaded().await;
                    if checked.is_err() {
                        self.check_requested.store(true, Ordering::Release); // retried
                    }
                    checked
                }
                _ => self.run_due_deletions().await.map(|()| false),
            };
            let wait = match work {
                Ok(true) => Some(Duration::ZERO), // a target is due again
                Ok(false) => {
                    backoff = MIN_BACKOFF;
                    let check = next_check.saturating_duration_since(Instant::now());
                    Some(self.until_next_deletion().map_or(check, |d| d.min(check)))
                }
                // Logged once (`lost.rs`); retrying soon cannot help.
                Err(e) if e.is::<OnlyLost>() => Some(self.check_period),
                Err(e) => {
                    metrics::OPERATION_ERRORS.with_label_values(&["upload"]).inc();
                    if cancel.is_cancelled() {
                        return;
                    }
                    warn!("remote upload failed, retrying in {backoff:?}: {e:#}");
                    let wait = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    Some(wait)
                }
            };
            let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = rx.changed() => if r.is_err() { return },
                _ = self.check_wake.notified() => {}
                _ = sleep => {}
            }
        }
    }

    /// Steps 1-3 of the module comment for `target`.
    async fn upload_target(
        &self,
        target: &UploadTarget,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        let missing: Vec<(String, u64)> = {
            let uploaded = self.uploaded.lock().unwrap();
            missing(target, &uploaded).map(|l| (l.name.clone(), l.size_bytes)).collect()
        };
        let concurrency = self.storage().conf().concurrency;
        let uploads = futures::stream::iter(missing.into_iter().map(|(name, size)| async move {
            anyhow::ensure!(!cancel.is_cancelled(), "the timeline is shutting down");
            if self.superseded(target) {
                return Ok(()); // the newest target is uploaded next instead
            }
            self.upload_layer(&name, size, target).await
        }))
        .buffer_unordered(concurrency);
        let results: Vec<anyhow::Result<()>> = uploads.collect().await;
        results.into_iter().collect::<anyhow::Result<()>>()?;
        self.upload_segments(target, cancel).await?;
        if self.superseded(target) {
            return Ok(());
        }
        self.upload_index(target).await
    }

    pub(super) fn superseded(&self, target: &UploadTarget) -> bool {
        self.target_rx().borrow().as_ref().is_some_and(|t| t.seq > target.seq)
    }

    async fn upload_layer(
        &self,
        name: &str,
        size: u64,
        target: &UploadTarget,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let key = self.object_key(name, self.generation);
        let local = self.dir().join(name);
        let got = match self.storage().upload_file(self.engine(), &local, &key).await {
            Ok(got) => got,
            // Replaced and deleted locally since: the newer target does not
            // list it (or the error stands and is retried).
            Err(_) if self.superseded(target) => return Ok(()),
            Err(e @ RemoteError::Local { .. }) if !self.engine().exists(&local).await? => {
                anyhow::bail!(
                    "layer {name} of timeline {}/{} must be uploaded (remote storage does not \
                     have it) but it is not on local disk: {e}",
                    self.tenant_id,
                    self.timeline_id
                );
            }
            Err(e) => return Err(e.into()),
        };
        anyhow::ensure!(
            got.size_bytes == size,
            "layer file {} is {} bytes, the manifest says {size}",
            local.display(),
            got.size_bytes
        );
        metrics::record_upload("layer", size, started.elapsed());
        let level = target.layer(name).expect("listed").level;
        let layer = IndexLayer {
            level: level.into(),
            file_size: size,
            crc32c: got.crc32c,
            generation: self.generation,
        };
        self.record_uploaded(name, layer);
        Ok(())
    }

    /// Record `name` as uploaded and take its bytes off `pending_bytes` if
    /// they are counted there: O(1), where a recount per upload made the
    /// layers of one target cost O(layers²). If the newest target is not
    /// the one counted, its recount (`update_pending`, right after it was
    /// scheduled) is still to come and will see this upload.
    fn record_uploaded(&self, name: &str, layer: IndexLayer) {
        let mut uploaded = self.uploaded.lock().unwrap();
        let size = layer.file_size;
        let was_missing =
            uploaded.insert(name.to_string(), layer).is_none_or(|r| r.file_size != size);
        let target = self.current_target();
        let current =
            target.as_ref().map_or(0, |t| t.seq) == self.pending_seq.load(Ordering::Acquire);
        let listed = target.as_ref().and_then(|t| t.layer(name));
        if was_missing && current && listed.is_some_and(|l| l.size_bytes == size) {
            let before = self.pending_bytes.fetch_sub(size, Ordering::AcqRel);
            assert!(before >= size, "{before} pending bytes, {size} uploaded");
            metrics::UPLOAD_QUEUE_BYTES.sub(size as i64);
        }
        debug_assert!(
            !current
                || self.pending_bytes.load(Ordering::Acquire)
                    == missing_bytes(target.as_deref(), &uploaded),
            "pending bytes drifted from a recount"
        );
        drop(uploaded);
        self.queue_space.notify_waiters();
    }

    /// Step 2, then step 3's queueing.
    async fn upload_index(&self, target: &UploadTarget) -> anyhow::Result<()> {
        let started = Instant::now();
        let index = {
            let uploaded = self.uploaded.lock().unwrap();
            IndexPart::new(self.generation, &target.md, &uploaded, target.wal_source.clone())
        };
        let index = IndexPart { commit_times: Some(self.index_commit_times(target)), ..index };
        let key = index_key(self.tenant_id, self.timeline_id, self.generation);
        self.storage().put(&key, index.to_json().into()).await?;
        metrics::record_upload("index", 0, started.elapsed());
        let (t, tl) = (self.tenant_id, self.timeline_id);
        let missing = check_index_objects(self.storage(), t, tl, &index, SizeCheck::Missing)
            .await
            .context("list the objects after uploading the index")?;
        if !missing.is_empty() {
            let objects = self.forget_missing(&index, &missing).await?;
            if objects.iter().all(|m| !m.recoverable) {
                let lost = objects.into_iter().map(|m| m.key).collect();
                return Err(OnlyLost { remote_lsn: self.remote_consistent_lsn(), lost }.into());
            }
            anyhow::bail!(
                "remote_consistent_lsn stays at {}: {} objects index {} lists are missing from \
                 {} ({}); uploading them again",
                self.remote_consistent_lsn().map_or("nothing".to_string(), |l| l.to_string()),
                missing.len(),
                self.storage().full_key(&key),
                self.storage().describe(),
                name_objects(&missing)
            );
        }
        let mut unlisted: Vec<(String, Generation)> = {
            let mut uploaded = self.uploaded.lock().unwrap();
            let gone: Vec<String> =
                uploaded.keys().filter(|n| !index.layers.contains_key(*n)).cloned().collect();
            gone.into_iter()
                .map(|n| {
                    let g = uploaded.remove(&n).expect("listed").generation;
                    (n, g)
                })
                .collect()
        };
        unlisted.extend(self.unlisted_segments(&index));
        if !unlisted.is_empty() {
            let due = Instant::now() + self.storage().conf().deletion_delay;
            self.deletions.lock().unwrap().push(DueDeletion { due, objects: unlisted });
        }
        let lsn = index.disk_consistent_lsn;
        *self.last_index.lock().unwrap() = Some(Arc::new(index));
        self.uploaded_seq.store(target.seq, Ordering::Release);
        self.set_remote_consistent_lsn(lsn);
        self.update_pending();
        Ok(())
    }

    /// The check of the last index uploaded (module comment): returns
    /// whether objects were missing, so that the newest target is due again.
    async fn check_uploaded(&self) -> anyhow::Result<bool> {
        let Some(index) = self.last_index.lock().unwrap().clone() else { return Ok(false) };
        let (t, tl) = (self.tenant_id, self.timeline_id);
        self.restore_claim_if_lost().await?;
        let missing = check_index_objects(self.storage(), t, tl, &index, SizeCheck::Missing)
            .await
            .context("check the uploaded objects")?;
        if missing.is_empty() {
            return Ok(false);
        }
        let objects = self.forget_missing(&index, &missing).await?;
        let recoverable: Vec<String> =
            objects.into_iter().filter(|m| m.recoverable).map(|m| m.key).collect();
        if !recoverable.is_empty() {
            warn!(
                "timeline {t}/{tl}: {} objects the uploaded index lists are missing from {} ({}); \
                 uploading them again",
                recoverable.len(),
                self.storage().describe(),
                name_objects(&recoverable)
            );
        }
        self.uploaded_seq.store(0, Ordering::Release);
        Ok(self.current_target().is_some())
    }

    /// `missing` (keys of objects `index` lists) are not in the store:
    /// record them (`remote_consistent_lsn` stays), forget the layers on
    /// local disk as uploaded so the next target uploads them again, log
    /// the lost ones once (`lost.rs`), and write the generation claim again
    /// if the store lost it too. Returns them, classified.
    async fn forget_missing(
        &self,
        index: &IndexPart,
        missing: &[String],
    ) -> anyhow::Result<Vec<MissingObject>> {
        // Only layers on local disk can be uploaded again; one that is not
        // stays known (its download names the object) and lost.
        let objects = self.classify_missing(index, missing).await?;
        {
            let recoverable: std::collections::HashSet<&str> =
                objects.iter().filter(|m| m.recoverable).map(|m| m.key.as_str()).collect();
            let mut uploaded = self.uploaded.lock().unwrap();
            for (name, l) in &index.layers {
                let key = self.storage().full_key(&self.object_key(name, l.generation));
                let local = recoverable.contains(key.as_str());
                if local && uploaded.get(name).is_some_and(|u| u.generation == l.generation) {
                    uploaded.remove(name);
                }
            }
        }
        self.forget_missing_segments(index, missing);
        self.update_pending();
        self.log_lost(&objects);
        self.set_missing(objects.clone());
        self.restore_claim_if_lost().await?;
        Ok(objects)
    }

    /// Write this generation's claim again if the store lost it.
    async fn restore_claim_if_lost(&self) -> anyhow::Result<()> {
        let (t, g) = (self.tenant_id, self.generation);
        match restore_claim(self.storage(), t, g).await {
            Ok(true) => {
                warn!("the claim of generation {g} of tenant {t} was missing: written again")
            }
            Ok(false) => {}
            Err(super::ClaimError::Stale { .. }) => {} // a newer attachment owns the tenant
            Err(super::ClaimError::Remote(e)) => return Err(e.into()),
        }
        Ok(())
    }

    /// When the next queued deletion is due (`None`: none queued).
    fn until_next_deletion(&self) -> Option<Duration> {
        let deletions = self.deletions.lock().unwrap();
        let next = deletions.iter().map(|d| d.due).min()?;
        Some(next.saturating_duration_since(Instant::now()))
    }

    /// Step 3's deletions that are due, if no newer generation exists.
    async fn run_due_deletions(&self) -> anyhow::Result<()> {
        let now = Instant::now();
        let due: Vec<(String, Generation)> = {
            let deletions = self.deletions.lock().unwrap();
            let due = deletions.iter().filter(|d| d.due <= now);
            due.flat_map(|d| d.objects.iter().cloned()).collect()
        };
        if due.is_empty() {
            return Ok(());
        }
        let newest = newest_generation(self.storage(), self.tenant_id).await?;
        let stale = newest.is_some_and(|n| n > self.generation);
        if stale {
            info!(
                "generation {} of tenant {} is attached elsewhere: not deleting {} replaced objects",
                newest.expect("stale"),
                self.tenant_id,
                due.len()
            );
        } else {
            for (name, generation) in &due {
                assert!(*generation <= self.generation, "{name}: an object of a newer generation");
                let started = Instant::now();
                let key = self.object_key(name, *generation);
                if let Err(e) = self.storage().delete(&key).await {
                    metrics::OPERATION_ERRORS.with_label_values(&["delete"]).inc();
                    return Err(e.into()); // retried; deleted ones are gone already
                }
                let took = started.elapsed().as_secs_f64();
                metrics::OPERATION_SECONDS.with_label_values(&["layer", "delete"]).observe(took);
            }
        }
        self.deletions.lock().unwrap().retain(|d| d.due > now);
        Ok(())
    }

    /// Recount the newest target's bytes not yet uploaded, and wake
    /// waiters. Under the `uploaded` lock, so an upload recorded meanwhile
    /// is counted exactly once (`record_uploaded`).
    pub(super) fn update_pending(&self) {
        let uploaded = self.uploaded.lock().unwrap();
        let target = self.current_target();
        let pending = missing_bytes(target.as_deref(), &uploaded);
        self.pending_seq.store(target.map_or(0, |t| t.seq), Ordering::Release);
        let before = self.pending_bytes.swap(pending, Ordering::AcqRel);
        metrics::UPLOAD_QUEUE_BYTES.add(pending as i64 - before as i64);
        drop(uploaded);
        self.queue_space.notify_waiters();
    }

    /// Layers the uploaded index lists (a copy), for tests and the API.
    pub fn uploaded_layers(&self) -> BTreeMap<String, IndexLayer> {
        let last = self.last_index.lock().unwrap();
        last.as_ref().map(|ip| ip.layers.clone()).unwrap_or_default()
    }

    pub fn remote_consistent_lsn(&self) -> Option<Lsn> {
        self.remote_consistent.borrow().lsn
    }
}

/// The layers of `target` that `uploaded` lacks (or holds at another size).
fn missing<'a>(
    target: &'a UploadTarget,
    uploaded: &'a BTreeMap<String, IndexLayer>,
) -> impl Iterator<Item = &'a LayerEntry> {
    let has = |l: &&LayerEntry| uploaded.get(&l.name).is_some_and(|r| r.file_size == l.size_bytes);
    target.md.layers.iter().filter(move |l| !has(l))
}

/// Bytes of the layers of `target` that `uploaded` lacks.
fn missing_bytes(target: Option<&UploadTarget>, uploaded: &BTreeMap<String, IndexLayer>) -> u64 {
    target.map_or(0, |t| missing(t, uploaded).map(|l| l.size_bytes).sum())
}
