//! L0 -> L1 compaction: the oldest run of L0 layers is merged into L1
//! delta layers partitioned by key range, covering the run's LSN range.
//!
//! The merge reads every input's index in (key, LSN) order (leaf by leaf,
//! never the whole index at once), reads the values in batches (coalesced,
//! all inputs at once) and copies their serialized bytes verbatim into the
//! outputs: nothing is decoded or re-encoded. An output ends once it holds
//! `compaction_target_size` bytes of values (or `MAX_L1_INDEX_BYTES` of
//! index), always at a key boundary, so all of a key's history in the run
//! is in one L1. The L1s of a run tile the key space (`Key::MIN` to
//! `Key::MAX`), so their names never equal an L0's (whose range is its
//! keys'), and their boundaries partition the key space for images.
//!
//! The inputs must be resident: an L0 only in remote storage is downloaded
//! first, and the merge reads the open files it holds (an eviction meanwhile
//! does not affect it). The outputs are resident.
//!
//! Crash safety (the order is the contract; failpoints mark each step):
//! 1. write the L1 files (temp, fsync, rename; unlisted until step 3, so a
//!    crash before it leaves files start-up removes);
//! 2. swap them into the layer map in place of the L0s (readers holding a
//!    snapshot keep reading the L0s: their files stay open);
//! 3. persist the manifest (temp, fsync, rename, fsync dir);
//! 4. delete the L0 files (`Layer::delete_local`; a crash before that
//!    leaves unlisted files, removed at start-up).
//!
//! A failed compaction leaves no file behind: the L1s written so far are
//! removed, and so is the one being written (`LayerWriter`'s guard), so a
//! compaction that ran out of disk space gives the space back at once.
//!
//! Errors: each context names one step, once ("write L1 layers"); what it
//! wraps names the rest (the IO engine names the operation and the file).
//! [`Timeline::compact`] names which of its two parts failed; its callers
//! (the background loop, `PUT .../compact`) add nothing that repeats it.
//!
//! Concurrency: compaction, image creation and GC of a timeline run one at
//! a time under its `maintenance` mutex; flushes go on beside them (they
//! only add L0s on top, the map's swap is under its lock).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use pageserver_api::key::{CompactKey, Key};
use tracing::{error, info};
use utils::failpoint::failpoint;
use utils::lsn::Lsn;
use utils::progress::{Progress, ProgressInfo};

use super::super::storage_layer::layer::Layer;
use super::super::storage_layer::layer_file::{EntryCursor, LayerFile, LayerWriter};
use super::super::storage_layer::{BlobRef, LayerKind};
use super::Timeline;
use crate::metrics::compaction::{self as metrics, Task};

/// Largest index of one L1 layer (about 250k entries): bounds the memory a
/// layer writer buffers when the values are small.
pub const MAX_L1_INDEX_BYTES: u64 = 8 * 1024 * 1024;
/// Merged entries whose values are read together.
const BATCH_ENTRIES: usize = 4096;
/// Value bytes read together at most (one batch).
const BATCH_VALUE_BYTES: u64 = 16 * 1024 * 1024;

/// What `PUT .../compact` or the background task asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompactOptions {
    /// Compact any L0s, not only once `compaction_threshold` are there.
    pub force_l0_compaction: bool,
    /// Write image layers for every key range, not only deep ones.
    pub force_image_layer_creation: bool,
}

/// What a compaction run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CompactionReport {
    pub l0_layers_compacted: usize,
    pub l1_layers_written: usize,
    pub l1_bytes_written: u64,
    pub image_layers_written: usize,
    pub image_bytes_written: u64,
    /// The progress of each part that ran (`compaction`: value bytes
    /// merged of the L0s' bytes; `image_creation`: key ranges).
    pub progress: Vec<ProgressInfo>,
}

/// One merge input: an L0's entries, a leaf at a time.
struct Input<'a> {
    layer: &'a LayerFile,
    cursor: EntryCursor<'a>,
    pending: VecDeque<(CompactKey, Lsn, BlobRef)>,
}

impl Input<'_> {
    /// Make `pending` non-empty unless the layer has no more entries.
    async fn refill(&mut self) -> anyhow::Result<()> {
        while self.pending.is_empty() {
            match self.cursor.next_leaf().await? {
                Some(entries) => self.pending.extend(entries),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    fn head(&self, i: usize) -> Option<Reverse<(CompactKey, Lsn, usize)>> {
        self.pending.front().map(|&(k, l, _)| Reverse((k, l, i)))
    }
}

/// A merged entry and the input it came from.
struct Merged {
    key: CompactKey,
    lsn: Lsn,
    blob: BlobRef,
    input: usize,
}

impl Timeline {
    /// Compact the L0s if due (or now, `force`), then write image layers
    /// where due. Serialized with image creation and GC.
    pub async fn compact(&self, opts: CompactOptions) -> anyhow::Result<CompactionReport> {
        let _maintenance = self.maintenance.lock().await;
        let mut report = CompactionReport::default();
        let l0s: Vec<Arc<Layer>> =
            self.layers.read().unwrap().historic().l0_layers().cloned().collect();
        let due = l0s.len() >= self.conf.compaction.compaction_threshold;
        if due || (opts.force_l0_compaction && !l0s.is_empty()) {
            let started = Instant::now();
            let progress = self.start_progress("compaction", "bytes");
            progress.set_total(l0s.iter().map(|l| l.file_size).sum());
            let written = self.compact_l0s(&l0s, &progress).await.context("L0 compaction")?;
            progress.finish();
            report.progress.push(progress.info());
            report.l0_layers_compacted = l0s.len();
            report.l1_layers_written = written.len();
            report.l1_bytes_written = written.iter().map(|l| l.file_size).sum();
            metrics::record_task(
                Task::Compaction,
                started.elapsed(),
                report.l1_layers_written,
                report.l1_bytes_written,
            );
            info!(
                "compacted {} L0 layers into {} L1 layers ({} bytes) in {:?}",
                l0s.len(),
                written.len(),
                report.l1_bytes_written,
                started.elapsed()
            );
            self.l0_count_changed.notify_waiters();
        }
        let progress = self.start_progress("image_creation", "key ranges");
        let (images, bytes) = self
            .create_image_layers(opts.force_image_layer_creation, &progress)
            .await
            .context("image layer creation")?;
        (report.image_layers_written, report.image_bytes_written) = (images, bytes);
        if progress.info().total.is_some() {
            progress.finish();
            report.progress.push(progress.info());
        }
        Ok(report)
    }

    /// Merge `l0s` (the oldest run of L0s, oldest first) into L1 layers and
    /// install them (steps 1-4 of the module comment).
    async fn compact_l0s(
        &self,
        l0s: &[Arc<Layer>],
        progress: &Progress,
    ) -> anyhow::Result<Vec<Arc<Layer>>> {
        assert!(!l0s.is_empty());
        let lsn_range = l0s[0].name.lsn_range.start..l0s[l0s.len() - 1].name.lsn_range.end;
        let files = Self::resident_files(l0s).await.context("download the L0s")?;
        let written =
            self.merge_into_l1s(&files, lsn_range, progress).await.context("write L1 layers")?;
        if let Err(e) = failpoint("compaction::before-swap") {
            self.delete_replaced(&written).await;
            return Err(e.into());
        }
        self.layers.write().unwrap().replace_l0s(l0s, written.clone());
        failpoint("compaction::before-manifest")?;
        self.persist_manifest().await.context("persist the manifest")?;
        failpoint("compaction::before-delete")?;
        self.delete_replaced(l0s).await;
        Ok(written)
    }

    /// Steps 1 of the module comment: the merged L1 files, written and
    /// renamed into place (not yet listed anywhere). On error the files
    /// already written are removed (the one being written removes itself).
    async fn merge_into_l1s(
        &self,
        l0s: &[Arc<LayerFile>],
        lsn_range: std::ops::Range<Lsn>,
        progress: &Progress,
    ) -> anyhow::Result<Vec<Arc<Layer>>> {
        let mut written: Vec<Arc<Layer>> = Vec::new();
        let res = self.merge_loop(l0s, lsn_range, &mut written, progress).await;
        if let Err(e) = res {
            self.delete_replaced(&written).await;
            return Err(e);
        }
        Ok(written)
    }

    async fn merge_loop(
        &self,
        l0s: &[Arc<LayerFile>],
        lsn_range: std::ops::Range<Lsn>,
        written: &mut Vec<Arc<Layer>>,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let mut inputs = Vec::with_capacity(l0s.len());
        let mut heap = BinaryHeap::with_capacity(l0s.len());
        for (i, layer) in l0s.iter().enumerate() {
            let mut input = Input { layer, cursor: layer.entry_cursor(), pending: VecDeque::new() };
            input.refill().await?;
            heap.extend(input.head(i));
            inputs.push(input);
        }
        let mut writer: Option<LayerWriter> = None;
        let mut prev_key: Option<CompactKey> = None;
        // The L1s tile the whole key space: the first starts at Key::MIN,
        // each next one where the previous ends, the last ends at Key::MAX.
        let mut range_start = Key::MIN;
        let mut batch: Vec<Merged> = Vec::with_capacity(BATCH_ENTRIES);
        loop {
            batch.clear();
            let mut batch_bytes = 0u64;
            while batch.len() < BATCH_ENTRIES && batch_bytes < BATCH_VALUE_BYTES {
                let Some(Reverse((key, lsn, i))) = heap.pop() else { break };
                let (k, l, blob) = inputs[i].pending.pop_front().expect("the heap mirrors heads");
                debug_assert_eq!((k, l), (key, lsn));
                batch_bytes += blob.len() as u64;
                batch.push(Merged { key, lsn, blob, input: i });
                inputs[i].refill().await?;
                heap.extend(inputs[i].head(i));
            }
            if batch.is_empty() {
                break;
            }
            // Shutdown waits for this task: stop at the next batch.
            anyhow::ensure!(!self.cancel.is_cancelled(), "timeline is shutting down");
            progress.add(batch_bytes);
            let values = read_batch_values(&inputs, &batch).await?;
            for (m, raw) in batch.iter().zip(values) {
                let boundary = prev_key.is_some_and(|p| p != m.key);
                if boundary && writer.as_ref().is_some_and(|w| self.l1_is_full(w)) {
                    let w = writer.take().expect("checked");
                    let end = Key::from_compact(m.key);
                    let l1 = w.finish_with_key_range(range_start..end).await?;
                    written.push(self.new_resident_layer(l1));
                    range_start = end;
                }
                if writer.is_none() {
                    writer =
                        Some(self.new_layer_writer(LayerKind::Delta, lsn_range.clone()).await?);
                }
                let w = writer.as_mut().expect("just created");
                w.put_raw(m.key, m.lsn, &raw, m.blob.will_init()).await?;
                prev_key = Some(m.key);
            }
        }
        if let Some(w) = writer {
            let l1 = w.finish_with_key_range(range_start..Key::MAX).await?;
            written.push(self.new_resident_layer(l1));
        }
        Ok(())
    }

    fn l1_is_full(&self, w: &LayerWriter) -> bool {
        w.bytes_written() >= self.conf.compaction.compaction_target_size
            || w.index_bytes() >= MAX_L1_INDEX_BYTES
    }

    pub(super) async fn new_layer_writer(
        &self,
        kind: LayerKind,
        lsn_range: std::ops::Range<Lsn>,
    ) -> anyhow::Result<LayerWriter> {
        LayerWriter::new(
            &self.conf.io_engine,
            &self.dir,
            self.tenant_id,
            self.timeline_id,
            kind,
            lsn_range,
            self.conf.direct_io,
        )
        .await
    }

    /// Remove the local files of layers no manifest lists any more (best
    /// effort: start-up removes whatever is left).
    pub(super) async fn delete_replaced(&self, layers: &[Arc<Layer>]) {
        for l in layers {
            l.delete_local().await;
        }
    }

    /// Background compaction: every `compaction_period`, and at once when a
    /// flush finds the L0 count at the threshold. Idle when the period is
    /// zero (then only `PUT .../compact` compacts).
    pub(super) async fn compaction_loop(self: Arc<Self>) {
        let period = self.conf.compaction.compaction_period;
        if period.is_zero() {
            return;
        }
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = self.compaction_wakeup.notified() => {}
                _ = tokio::time::sleep(period) => {}
            }
            if let Err(e) = self.compact(CompactOptions::default()).await {
                if self.cancel.is_cancelled() {
                    return;
                }
                metrics::TASK_ERRORS.inc();
                error!("compaction failed, will retry: {e:#}");
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = tokio::time::sleep(period.min(Duration::from_secs(10))) => {}
                }
            }
        }
    }
}

/// The serialized values of a batch, in batch order: each input's share
/// read as one coalesced batch, all inputs at once.
async fn read_batch_values(inputs: &[Input<'_>], batch: &[Merged]) -> anyhow::Result<Vec<Bytes>> {
    let mut per_input: Vec<(Vec<usize>, Vec<BlobRef>)> =
        vec![(Vec::new(), Vec::new()); inputs.len()];
    for (pos, m) in batch.iter().enumerate() {
        per_input[m.input].0.push(pos);
        per_input[m.input].1.push(m.blob);
    }
    let reads = per_input.iter().enumerate().filter(|(_, (p, _))| !p.is_empty()).map(
        |(i, (positions, blobs))| async move {
            let values = inputs[i].layer.read_raw_values(blobs).await?;
            anyhow::Ok((positions, values))
        },
    );
    let mut out = vec![Bytes::new(); batch.len()];
    for res in futures::future::join_all(reads).await {
        let (positions, values) = res?;
        assert_eq!(positions.len(), values.len(), "one value per blob");
        for (&pos, v) in positions.iter().zip(values) {
            out[pos] = v;
        }
    }
    Ok(out)
}
