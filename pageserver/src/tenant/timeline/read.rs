//! The timeline's read side: waiting for an LSN, and the vectored get.
//!
//! Readers take a snapshot of the layer map (`ReadSnapshot`) under the
//! `layers` lock and read without it; a layer replaced or removed meanwhile
//! stays readable until the snapshot is dropped. Reads never take the
//! writer lock. An LSN below the GC cutoff is refused twice: early, by
//! `check_lsn_readable` (a lock-free mirror of the cutoff), and by the read
//! itself against its snapshot's cutoff (authoritative: GC raises the cutoff
//! before it removes layers, in the map that snapshots copy).
//!
//! A query that needed a layer that was not resident and that compaction
//! or GC replaced after the snapshot was taken (`LayerAccessError::Replaced`:
//! such a layer is never downloaded again) is read again on a fresh
//! snapshot, which no longer lists that layer (at most `REPLACED_RETRIES`
//! times).

use std::borrow::Cow;
use std::time::Instant;

use bytes::Bytes;
use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use tracing::error;
use utils::lsn::Lsn;
use utils::seqwait::SeqWaitError;

use super::super::storage_layer::layer::LayerAccessError;
use super::super::storage_layer::layer_file::LayerReadError;
use super::super::vectored_read::{self, Ready};
use super::super::{GetVectoredError, PageReconstructError, ReadKind, WaitLsnError};
use super::Timeline;
use crate::metrics::storage as metrics;

/// Fresh snapshots a get takes at most for queries whose layer was
/// replaced while they read (each replacement needs a compaction or GC).
const REPLACED_RETRIES: usize = 3;

/// Why an LSN cannot be read (whatever WAL may still arrive).
#[derive(Debug, Clone, thiserror::Error)]
pub enum LsnNotReadable {
    #[error("LSN {lsn} is below the timeline's first readable LSN {min_readable} (its history starts there)")]
    BeforeStart { lsn: Lsn, min_readable: Lsn },
    #[error("LSN {lsn} is below the timeline's GC cutoff {gc_cutoff}: that history was garbage collected")]
    GarbageCollected { lsn: Lsn, gc_cutoff: Lsn },
}

impl Timeline {
    /// Whether the history at `lsn` is kept: at or above the timeline's
    /// start (for a timeline following a primary, where its base backup
    /// became consistent) and at or above the GC cutoff. The one place for
    /// this rule. `lsn` above `last_record_lsn` is readable once the WAL
    /// arrives (`wait_lsn`).
    pub fn check_lsn_readable(&self, lsn: Lsn) -> Result<(), LsnNotReadable> {
        let min_readable = self.min_readable_lsn();
        if lsn < min_readable {
            return Err(LsnNotReadable::BeforeStart { lsn, min_readable });
        }
        let gc_cutoff = self.gc_cutoff();
        if lsn < gc_cutoff {
            return Err(LsnNotReadable::GarbageCollected { lsn, gc_cutoff });
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

    /// One vectored read of (key, LSN) queries; see `vectored_read`. The
    /// results in query order.
    pub async fn get_vectored(
        &self,
        queries: &[(Key, Lsn)],
        kind: ReadKind,
    ) -> Result<Vec<Result<Bytes, PageReconstructError>>, GetVectoredError> {
        let mut results = vec![None; queries.len()];
        self.get_vectored_each(queries, kind, &mut |i, r| {
            assert!(results[i].replace(r).is_none(), "query {i} answered twice");
        })
        .await?;
        Ok(results.into_iter().map(|r| r.expect("every query is answered")).collect())
    }

    /// [`Timeline::get_vectored`], handing each query's result to `ready`
    /// (with its index in `queries`) as soon as it is known. On `Err`,
    /// nothing was handed out.
    pub async fn get_vectored_each(
        &self,
        queries: &[(Key, Lsn)],
        kind: ReadKind,
        ready: &mut Ready<'_, Result<Bytes, PageReconstructError>>,
    ) -> Result<(), GetVectoredError> {
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
        // Indices (into `queries`) of this round's queries, `None` for all
        // of them (the first round: no copy); a query whose layer was
        // replaced goes to the next round, unless this is the last.
        let mut round: Option<Vec<usize>> = None;
        let mut stats = vectored_read::ReadStats::default();
        for retry in 0..=REPLACED_RETRIES {
            let keys: Cow<'_, [(Key, Lsn)]> = match &round {
                None => Cow::Borrowed(queries),
                Some(r) => Cow::Owned(r.iter().map(|&i| queries[i]).collect()),
            };
            let at = |j: usize| round.as_ref().map_or(j, |r| r[j]);
            let mut again = Vec::new();
            let more = self
                .read_snapshot(&keys, &mut |j, r| {
                    if retry < REPLACED_RETRIES && replaced(&r) {
                        again.push(at(j));
                        return;
                    }
                    self.report_corruption(&r);
                    ready(at(j), r);
                })
                .await;
            (stats.chunks, stats.bytes) = (stats.chunks + more.chunks, stats.bytes + more.bytes);
            if again.is_empty() {
                break;
            }
            round = Some(again);
        }
        metrics::record_vectored_read(
            kind as usize,
            kind.label(),
            started.elapsed(),
            stats.chunks,
            stats.bytes,
        );
        Ok(())
    }

    /// `queries` read on a snapshot of the layer map taken now (and, for a
    /// branch, of its ancestors': `branch.rs`).
    async fn read_snapshot(
        &self,
        queries: &[(Key, Lsn)],
        ready: &mut Ready<'_, Result<Bytes, PageReconstructError>>,
    ) -> vectored_read::ReadStats {
        let snapshots = self.read_snapshots();
        let chain = vectored_read::ReadChain::new(snapshots.iter().map(|(s, cap)| (s, *cap)));
        let limits = vectored_read::ReadLimits {
            timeline: &self.read_slots,
            process: vectored_read::process_read_slots(),
        };
        let cluster = self.cluster_info().await;
        vectored_read::read_each(&self.conf.io_engine, chain, queries, limits, cluster, ready).await
    }

    /// Corruption found while serving is loud: every corrupt value or index
    /// block is counted (`pageserver_layer_corruption_errors_total`) and
    /// logged at ERROR with tenant, timeline, layer file (and key and LSN
    /// of a value), at most once per `CORRUPTION_LOG_INTERVAL` per layer file.
    fn report_corruption(&self, r: &Result<Bytes, PageReconstructError>) {
        let (layer, what) = match r {
            Err(PageReconstructError::CorruptValue { key, lsn, layer, source }) => {
                (layer, format!("corrupt value of key {key} at {lsn}: {source}"))
            }
            Err(PageReconstructError::LayerIndex {
                layer,
                source: e @ LayerReadError::CorruptBlock { .. },
            }) => (layer, format!("corrupt index: {e}")),
            _ => return,
        };
        metrics::LAYER_CORRUPTION_ERRORS.inc();
        if self.corruption_log.should_log(layer) {
            error!(
                tenant_id = %self.tenant_id,
                timeline_id = %self.timeline_id,
                layer = %layer,
                "{what} in layer file {layer}"
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

/// Whether the query failed because a layer it needed was replaced.
fn replaced(r: &Result<Bytes, PageReconstructError>) -> bool {
    matches!(r, Err(PageReconstructError::LayerAccess(LayerAccessError::Replaced { .. })))
}
