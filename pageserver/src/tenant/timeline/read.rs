//! The timeline's read side: waiting for an LSN, and the vectored get.
//!
//! Readers snapshot the layer list (Arcs) under the `layers` lock and read
//! without it; a frozen layer being flushed stays readable until dropped.
//! Reads never take the writer lock.

use std::time::Instant;

use bytes::Bytes;
use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use tracing::error;
use utils::lsn::Lsn;
use utils::seqwait::SeqWaitError;

use super::super::storage_layer::layer_file::LayerReadError;
use super::super::{vectored_read, GetVectoredError, PageReconstructError, ReadKind, WaitLsnError};
use super::Timeline;
use crate::metrics::storage as metrics;

/// Why an LSN cannot be read (whatever WAL may still arrive).
#[derive(Debug, Clone, thiserror::Error)]
#[error("LSN {lsn} is below the timeline's first readable LSN {min_readable} (its history starts there)")]
pub struct LsnNotReadable {
    pub lsn: Lsn,
    pub min_readable: Lsn,
}

impl Timeline {
    /// Whether the history at `lsn` is kept: at or above the timeline's
    /// start (for a timeline following a primary, where its base backup
    /// became consistent). The one place for this rule: a GC cutoff will be
    /// checked here too. `lsn` above `last_record_lsn` is readable once
    /// the WAL arrives (`wait_lsn`).
    pub fn check_lsn_readable(&self, lsn: Lsn) -> Result<(), LsnNotReadable> {
        let min_readable = self.min_readable_lsn();
        if lsn < min_readable {
            return Err(LsnNotReadable { lsn, min_readable });
        }
        Ok(())
    }

    pub async fn wait_lsn(&self, lsn: Lsn, cancel: &CancellationToken) -> Result<(), WaitLsnError> {
        let res = tokio::select! {
            r = self.last_record_lsn.wait_for(lsn, self.conf.wait_lsn_timeout, cancel) => r,
            _ = self.cancel.cancelled() => Err(SeqWaitError::Cancelled),
        };
        match res {
            Ok(_) => Ok(()),
            Err(SeqWaitError::Cancelled) => Err(WaitLsnError::Shutdown),
            Err(e @ SeqWaitError::Timeout { .. }) => Err(WaitLsnError::Timeout(e)),
        }
    }

    /// One vectored read of (key, LSN) queries; see `vectored_read`.
    pub async fn get_vectored(
        &self,
        queries: &[(Key, Lsn)],
        kind: ReadKind,
    ) -> Result<Vec<Result<Bytes, PageReconstructError>>, GetVectoredError> {
        let started = Instant::now();
        if queries.len() > self.conf.max_get_vectored_keys {
            return Err(GetVectoredError::TooManyKeys {
                n: queries.len(),
                max: self.conf.max_get_vectored_keys,
            });
        }
        if self.cancel.is_cancelled() {
            return Err(GetVectoredError::Cancelled);
        }
        let layers = self.layers.read().unwrap().newest_first();
        let limits = vectored_read::ReadLimits {
            timeline: &self.read_slots,
            process: vectored_read::process_read_slots(),
        };
        let (results, stats) =
            vectored_read::read(&self.conf.io_engine, &layers, queries, limits).await;
        metrics::record_vectored_read(
            kind as usize,
            kind.label(),
            started.elapsed(),
            stats.chunks,
            stats.bytes,
        );
        self.report_corruption(&results);
        Ok(results)
    }

    /// Corruption found while serving is loud: every corrupt value or index
    /// block is counted (`pageserver_layer_corruption_errors_total`) and
    /// logged at ERROR with tenant, timeline, layer file (and key and LSN
    /// of a value), at most once per `CORRUPTION_LOG_INTERVAL` per layer file.
    fn report_corruption(&self, results: &[Result<Bytes, PageReconstructError>]) {
        for r in results {
            if let Err(PageReconstructError::LayerIndex { layer, source }) = r {
                self.report_corrupt_index(layer, source);
            }
            let Err(PageReconstructError::CorruptValue { key, lsn, layer, source }) = r else {
                continue;
            };
            metrics::LAYER_CORRUPTION_ERRORS.inc();
            if self.corruption_log.should_log(layer) {
                error!(
                    tenant_id = %self.tenant_id,
                    timeline_id = %self.timeline_id,
                    layer = %layer,
                    key = %key,
                    lsn = %lsn,
                    "corrupt value in layer file {layer}: {source}"
                );
            }
        }
    }

    fn report_corrupt_index(&self, layer: &str, err: &LayerReadError) {
        if !matches!(err, LayerReadError::CorruptBlock { .. }) {
            return;
        }
        metrics::LAYER_CORRUPTION_ERRORS.inc();
        if self.corruption_log.should_log(layer) {
            error!(
                tenant_id = %self.tenant_id,
                timeline_id = %self.timeline_id,
                layer = %layer,
                "corrupt index in layer file {layer}: {err}"
            );
        }
    }

    pub async fn get(&self, key: Key, lsn: Lsn) -> Result<Bytes, PageReconstructError> {
        match self.get_vectored(&[(key, lsn)], ReadKind::HttpRequest).await {
            Ok(mut v) => v.pop().expect("one result per query"),
            Err(e) => Err(PageReconstructError::Vectored(e)),
        }
    }
}
