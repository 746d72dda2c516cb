//! Image layers: every key of a key range materialized at one LSN, so reads
//! at or above it stop there instead of replaying a deep delta chain.
//!
//! When: after compaction, for each key range of the newest L1 stratum
//! (its layers' boundaries, extended to cover the whole key space) with
//! more than `image_creation_threshold` L1 strata holding deltas of the
//! range above its newest image (every range when forced).
//!
//! At what LSN: the last LSN of the newest L1 stratum. Images therefore sit
//! on stratum boundaries and never split a delta layer's LSN range.
//!
//! What: the keys of the range that any layer at or below that LSN holds
//! (keys are never removed from layers), each read at the image LSN
//! through the normal read path, stored as `Value::Image`. A key whose
//! history cannot be reconstructed fails that range's image (logged; the
//! deltas keep serving it), never the others.
//!
//! Layers only in remote storage are downloaded as reads need them: the
//! pages through the read path, the key listing (index leaves) here.
//!
//! Crash safety as compaction's: write the files, add them to the map,
//! persist the manifest; a crash before the manifest leaves unlisted files.
//! A failure does not: a range whose image fails leaves no file (the
//! writer's guard removes it), and the images written are removed if they
//! cannot be added.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use pageserver_api::key::{CompactKey, Key};
use tracing::{info, warn};
use utils::failpoint::failpoint;
use utils::lsn::Lsn;
use utils::progress::Progress;

use super::super::storage_layer::layer::Layer;
use super::super::storage_layer::layer_file::LayerFile;
use super::super::storage_layer::{LayerKind, LayerLevel};
use super::super::value::Value;
use super::super::{PageReconstructError, ReadKind};
use super::Timeline;
use crate::metrics::compaction::{self as metrics, Task};

impl Timeline {
    /// Write image layers where due (every range with `force`); returns
    /// (layers, bytes) written. The caller holds the maintenance lock.
    pub(super) async fn create_image_layers(
        &self,
        force: bool,
        progress: &Progress,
    ) -> anyhow::Result<(usize, u64)> {
        let started = Instant::now();
        let Some((image_lsn, ranges)) = self.image_candidates(force) else { return Ok((0, 0)) };
        progress.set_total(ranges.len() as u64);
        let mut written = Vec::new();
        for range in ranges {
            progress.add(1);
            match self.write_image_layer(range.clone(), image_lsn).await {
                Ok(Some(layer)) => written.push(self.new_resident_layer(layer)),
                Ok(None) => {}
                Err(e) => {
                    warn!("no image layer for {}..{} at {image_lsn}: {e:#}", range.start, range.end)
                }
            }
        }
        if written.is_empty() {
            return Ok((0, 0));
        }
        let bytes: u64 = written.iter().map(|l| l.file_size).sum();
        let n = written.len();
        if let Err(e) = failpoint("image-creation::before-swap") {
            self.delete_replaced(&written).await;
            return Err(e.into());
        }
        self.layers.write().unwrap().add_images(image_lsn, written);
        failpoint("image-creation::before-manifest")?;
        self.persist_manifest().await.context("persist the manifest")?;
        metrics::record_task(Task::ImageCreation, started.elapsed(), n, bytes);
        info!("wrote {n} image layers at {image_lsn} ({bytes} bytes) in {:?}", started.elapsed());
        Ok((n, bytes))
    }

    /// The image LSN (the newest L1 stratum's last LSN) and the key ranges
    /// that need an image there, if any.
    fn image_candidates(&self, force: bool) -> Option<(Lsn, Vec<Range<Key>>)> {
        let historic = self.layers.read().unwrap().historic().clone();
        let newest_l1 = historic
            .strata()
            .rev()
            .find(|s| s.level() == LayerLevel::L1 && !s.layers().is_empty())?;
        let image_lsn = Lsn(newest_l1.lsn_range().end.0 - 1);
        let starts = newest_l1.layers().iter().skip(1).map(|l| l.name.key_range.start);
        let bounds: Vec<Key> =
            std::iter::once(Key::MIN).chain(starts).chain(std::iter::once(Key::MAX)).collect();
        let threshold = self.conf.compaction.image_creation_threshold;
        let ranges = bounds
            .windows(2)
            .map(|w| w[0]..w[1])
            .filter(|r| {
                let above = historic.deltas_above_image(r);
                if above.image_lsn.is_some_and(|i| i >= image_lsn) {
                    return false; // every key already has an image here
                }
                let deep = above
                    .strata
                    .iter()
                    .filter(|s| s.level == LayerLevel::L1 && s.lsn_range.end <= image_lsn + 1)
                    .filter(|s| s.overlapping_layers > 0)
                    .count();
                force || deep > threshold
            })
            .flat_map(|r| historic.uncovered_by_images_at(image_lsn, r))
            .collect::<Vec<_>>();
        (!ranges.is_empty()).then_some((image_lsn, ranges))
    }

    /// One image layer of `range` at `lsn`; `None` when no key of the range
    /// exists there.
    async fn write_image_layer(
        &self,
        range: Range<Key>,
        lsn: Lsn,
    ) -> anyhow::Result<Option<LayerFile>> {
        let keys = self.keys_in_range(&range, lsn).await?;
        if keys.is_empty() {
            return Ok(None);
        }
        let mut writer = self.new_layer_writer(LayerKind::Image, lsn..lsn + 1).await?;
        let max_keys = self.conf.max_get_vectored_keys;
        for chunk in keys.chunks(max_keys) {
            let queries: Vec<(Key, Lsn)> =
                chunk.iter().map(|&k| (Key::from_compact(k), lsn)).collect();
            let pages = self.get_vectored(&queries, ReadKind::Compaction).await?;
            for (&key, page) in chunk.iter().zip(pages) {
                match page {
                    Ok(page) => {
                        let raw = Value::Image(page).serialize();
                        writer.put_raw(key, lsn, &raw, true).await?;
                    }
                    Err(PageReconstructError::MissingKey { .. }) => {}
                    Err(e) => return Err(e).context("reconstruct a page for an image layer"),
                }
            }
            if self.cancel.is_cancelled() {
                anyhow::bail!("timeline is shutting down");
            }
        }
        if writer.is_empty() {
            return Ok(None);
        }
        Ok(Some(writer.finish_with_key_range(range).await?))
    }

    /// The keys of `range` that a layer at or below `lsn` holds, sorted.
    async fn keys_in_range(&self, range: &Range<Key>, lsn: Lsn) -> anyhow::Result<Vec<CompactKey>> {
        let historic = self.layers.read().unwrap().historic().clone();
        let deltas = historic
            .strata()
            .filter(|s| s.lsn_range().start <= lsn)
            .flat_map(|s| s.overlapping(range).iter().cloned());
        let images = historic
            .images()
            .filter(|(at, _)| *at <= lsn)
            .flat_map(|(_, ls)| ls.iter().cloned())
            .filter(|l| l.name.key_range.start < range.end && range.start < l.name.key_range.end);
        let layers: Vec<Arc<Layer>> = deltas.chain(images).collect();
        let (start, end) = (range.start.to_compact(), range.end.to_compact());
        let mut keys = BTreeSet::new();
        for layer in layers {
            let file = layer.get_resident().await?;
            let mut cursor = file.entry_cursor();
            while let Some(entries) = cursor.next_leaf().await? {
                let in_range =
                    entries.iter().filter(|(k, l, _)| *k >= start && *k < end && *l <= lsn);
                keys.extend(in_range.map(|(k, _, _)| *k));
                if entries.last().is_some_and(|(k, _, _)| *k >= end) {
                    break;
                }
            }
        }
        Ok(keys.into_iter().collect())
    }
}
