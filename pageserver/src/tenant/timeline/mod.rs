//! `Timeline`: one branch of a tenant's page history, and its ingest and
//! flush machinery.
//!
//! LSNs: `last_record_lsn` — everything up to it is ingested and readable;
//! `disk_consistent_lsn` — everything up to it is in layer files on disk and
//! recorded in the metadata file. `disk_consistent_lsn <= last_record_lsn`.
//! `gc_cutoff` — reads below it are refused (0 until GC first runs).
//!
//! Concurrency contract:
//! - Writes go through `TimelineWriter`, a guard of the async `writer` mutex:
//!   one writer at a time. A writer puts values at LSNs above
//!   `last_record_lsn`, then calls `finish_write(lsn)` once all values of
//!   `lsn` are in; only then do readers see them and may a freeze happen, so
//!   layers always end at an LSN boundary. (A writer whose write failed, or
//!   that is dropped between `put` and `finish_write`, abandons its
//!   unfinished LSNs: ingest writes them again; see `writer.rs`.)
//! - Freezing (size, budget, timeout, checkpoint) moves the open layer to the
//!   frozen queue under the `layers` lock, with the writer lock held.
//! - One flush task per timeline flushes frozen layers oldest first: write L0
//!   (temp, fsync, rename, fsync dir), swap it into the layer map in place of
//!   the frozen layer, then persist `disk_consistent_lsn` in the metadata.
//!   A failed flush is retried; ingest waits (backpressure) rather than lose
//!   anything.
//! - Readers take a snapshot of the layer map (`ReadSnapshot`: an Arc of the
//!   immutable historic part plus the in-memory layers) under the `layers`
//!   lock and read without it; a layer replaced or removed meanwhile stays
//!   readable until the snapshot is dropped (if it was resident; one that
//!   was only in remote storage is read again on a fresh snapshot). A
//!   historic layer may be only in remote storage: the read downloads it
//!   (`storage_layer/layer.rs` states its own contract). The snapshot carries the GC
//!   cutoff it is valid for, so a read checks its LSN against the same
//!   state it reads.
//! - Manifest writes (flush, and compaction/GC through `persist_manifest`)
//!   serialize on the async `manifest_write` mutex and list one snapshot
//!   of the map each.
//! - The GC cutoff is raised (`set_gc_cutoff`) under the lease store's
//!   lock (a std mutex, never held across an await), and lease renewals
//!   check it under the same lock: a lease below a new cutoff is refused,
//!   never silently unprotected.
//! - LSN leases (`lease.rs`, whose header states the contract): a lease is
//!   acknowledged only once the file holds it (it would survive a crash);
//!   renewals that change nothing durable write nothing, and the ones that
//!   do share writes. GC sees every durable lease and the ones being written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn, Instrument};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;
use utils::seqwait::SeqWait;

mod backpressure;
pub mod branch;
mod cluster;
mod commit_lookup;
pub mod compaction;
mod flush;
pub mod gc;
mod images;
mod import_images;
pub mod lease;
mod load;
mod log_limit;
mod read;
mod rel_size_cache;
pub(crate) mod residency;
pub mod wal_source;

use wal_source::{ReceiverStatus, ReceiverTask, WalSource};
mod writer;

use branch::Ancestor;
use lease::{Begun, LeaseMap, LeaseStore, LsnLease, TooManyLeases, WriteError};
pub use load::{verify_dir, DirReport};
use log_limit::PerKeyLogLimit;
pub use read::LsnNotReadable;
pub use rel_size_cache::RelSizeCache;
pub use writer::TimelineWriter;

use writer::WriterState;

use super::commit_times::CommitTimes;
use super::lsn_by_time::LsnTimeRecord;
use super::metadata::TimelineMetadata;
use super::remote_timeline::client::RemoteTimelineClient;
use super::storage_layer::layer_map::{HistoricStats, LayerMap};
use super::{Globals, StorageConf};

/// Layer counts and bytes: in memory, and the layer files per level.
#[derive(Debug, Clone, Copy, Default)]
pub struct LayerStats {
    pub in_memory_layers: usize,
    pub in_memory_bytes: u64,
    pub files: HistoricStats,
}

#[derive(Clone, Debug, Default)]
struct FlushState {
    disk_consistent_lsn: Lsn,
    /// The last flush error, cleared by the next successful flush.
    error: Option<Arc<String>>,
}

pub struct Timeline {
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    pub pg_version: u32,
    /// Cancelled when the timeline shuts down or is deleted.
    pub cancel: CancellationToken,
    pub rel_size_cache: RelSizeCache,
    conf: Arc<StorageConf>,
    globals: Arc<Globals>,
    dir: PathBuf,
    initial_lsn: Lsn,
    last_record_lsn: SeqWait,
    flush_state: watch::Sender<FlushState>,
    layers: RwLock<LayerMap>,
    writer: tokio::sync::Mutex<WriterState>,
    flush_wakeup: Notify,
    /// LSN to record as disk-consistent once the frozen queue is drained
    /// (a checkpoint with nothing in memory).
    pending_advance: Mutex<Option<Lsn>>,
    ephemeral_seq: AtomicU64,
    tasks: TaskTracker,
    /// Chunk reads of this timeline in flight (`vectored_read::ReadLimits`).
    read_slots: tokio::sync::Semaphore,
    /// Rate limit of corruption ERROR lines, per layer file.
    corruption_log: PerKeyLogLimit,
    /// The primary this timeline follows, if any (`wal_source.json`).
    wal_source: Mutex<Option<WalSource>>,
    /// Held across each read-modify-write of `wal_source` by the receiver's
    /// tasks (`walreceiver::hosts::edit_source`), so the session and the
    /// slot keeper never lose each other's changes.
    pub source_edit: tokio::sync::Mutex<()>,
    /// `min_readable_lsn()`, kept beside `wal_source` (written under its
    /// lock) so that the per-request LSN check takes no lock.
    min_readable_lsn: AtomicU64,
    /// The layer map's GC cutoff, mirrored for the per-request LSN check
    /// (raised under the `layers` lock, after the map's).
    gc_cutoff: AtomicU64,
    /// Held across each manifest write (`flush.rs`), so writes do not
    /// interleave.
    manifest_write: tokio::sync::Mutex<()>,
    /// Whether the cluster has data checksums, as its `pg_control` says
    /// (`cluster.rs`: unknown until first needed or set by ingest).
    data_checksums: cluster::ChecksumsKnown,
    /// Which LSN was durable when, as in the manifest (`lsn_by_time.rs`).
    lsn_by_time: Mutex<LsnTimeRecord>,
    /// The end LSN and time of every transaction (`commit_times.rs`).
    pub commit_times: CommitTimes,
    /// Set by the WAL receiver, read by the API.
    pub receiver_status: Mutex<ReceiverStatus>,
    /// The running WAL receiver, to stop it when the source is replaced.
    pub receiver_task: Mutex<Option<ReceiverTask>>,
    /// (end, start) of the last WAL record of each of the latest
    /// `RECENT_RECORDS` batches the WAL receiver committed, oldest first;
    /// empty after imports and restarts. Not persisted: only a base backup
    /// at exactly such an `end` uses it (`PREV LSN`), and otherwise says
    /// `none`. Kept for more than the last batch so that two backups at the
    /// same LSN agree while WAL keeps arriving.
    last_records: Mutex<std::collections::VecDeque<(Lsn, Lsn)>>,
    /// LSN leases and their file (see the concurrency contract above).
    leases: LeaseStore,
    /// Held by compaction, image creation and GC: one at a time.
    maintenance: tokio::sync::Mutex<()>,
    /// Wakes the compaction task (a flush found compaction due).
    compaction_wakeup: Notify,
    /// Signalled when compaction changed the L0 count (stalled flushes).
    l0_count_changed: Notify,
    /// The timeline's remote storage link, when remote storage is
    /// configured (`remote_timeline/`).
    remote: Option<Arc<RemoteTimelineClient>>,
    /// For a branch: the timeline it reads its history at or below the
    /// branch point from (`branch.rs`).
    ancestor: Option<Ancestor>,
    /// This timeline's branches and their branch points, which GC keeps
    /// (`branch.rs`; changed under the lease store's lock).
    branch_points: Mutex<std::collections::BTreeMap<TimelineId, Lsn>>,
}

/// Committed WAL batches whose last record `prev_record_lsn` remembers.
const RECENT_RECORDS: usize = 4096;

/// Why an LSN lease is not granted.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("LSN 0/0 is not a valid LSN to lease")]
    InvalidLsn,
    /// Reads at the LSN cannot be served (below the start of the history;
    /// later, below the GC cutoff): a lease cannot bring that history back.
    #[error(
        "LSN {lsn} is below the history timeline {tenant}/{timeline} can serve, which starts \
         at {floor}: a lease cannot protect it"
    )]
    BelowHistory { lsn: Lsn, floor: Lsn, tenant: TenantId, timeline: TimelineId },
    #[error(transparent)]
    TooMany(#[from] TooManyLeases),
    #[error("the LSN lease could not be made durable: {0:#}")]
    Persist(anyhow::Error),
    #[error("timeline is shutting down")]
    ShuttingDown,
}

impl Timeline {
    /// Create the directory of a new timeline with its metadata.
    pub(crate) async fn create_on_disk(
        conf: &StorageConf,
        dir: &Path,
        md: &TimelineMetadata,
    ) -> anyhow::Result<()> {
        conf.io_engine.create_dir_all(dir).await?;
        md.persist(&conf.io_engine, dir).await?;
        conf.io_engine.fsync_dir(dir.parent().unwrap()).await?;
        Ok(())
    }

    /// Load a timeline from `dir` as its manifest says (see `load.rs`) and
    /// start its background tasks. A branch's `ancestor` is loaded first
    /// and must be the one its manifest names.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn load(
        conf: Arc<StorageConf>,
        globals: Arc<Globals>,
        tenant_id: TenantId,
        timeline_id: TimelineId,
        dir: PathBuf,
        cancel: CancellationToken,
        remote: Option<Arc<RemoteTimelineClient>>,
        ancestor: Option<Arc<Timeline>>,
    ) -> anyhow::Result<Arc<Timeline>> {
        let load::Loaded { md, layers } =
            load::load_layers(&conf, &dir, (tenant_id, timeline_id), remote.as_ref()).await?;
        let ancestor = branch::check_ancestor(&md, ancestor)?;
        let layer_map =
            LayerMap::try_new(md.initial_lsn + 1, md.gc_cutoff, layers, md.empty_strata.clone())?;
        let wal_source = WalSource::load(&conf.io_engine, &dir).await?;
        let leases = LeaseMap::load(&conf.io_engine, &dir, SystemTime::now()).await?;
        let leases = LeaseStore::new(leases, conf.lsn_lease_length);
        let commit_times =
            CommitTimes::load(conf.io_engine.clone(), &dir, md.disk_consistent_lsn).await?;
        let tl = Arc::new(Timeline {
            tenant_id,
            timeline_id,
            pg_version: md.pg_version,
            cancel,
            rel_size_cache: RelSizeCache::default(),
            conf,
            globals,
            dir,
            initial_lsn: md.initial_lsn,
            last_record_lsn: SeqWait::new(md.disk_consistent_lsn),
            flush_state: watch::Sender::new(FlushState {
                disk_consistent_lsn: md.disk_consistent_lsn,
                error: None,
            }),
            layers: RwLock::new(layer_map),
            writer: tokio::sync::Mutex::new(WriterState::default()),
            flush_wakeup: Notify::new(),
            pending_advance: Mutex::new(None),
            ephemeral_seq: AtomicU64::new(0),
            tasks: TaskTracker::new(),
            read_slots: tokio::sync::Semaphore::new(super::vectored_read::TIMELINE_CHUNK_READS),
            corruption_log: PerKeyLogLimit::default(),
            min_readable_lsn: AtomicU64::new(readable_from(md.initial_lsn, &wal_source).0),
            gc_cutoff: AtomicU64::new(md.gc_cutoff.0),
            manifest_write: tokio::sync::Mutex::new(()),
            lsn_by_time: Mutex::new(md.lsn_by_time.clone()),
            commit_times,
            data_checksums: cluster::ChecksumsKnown::default(),
            wal_source: Mutex::new(wal_source),
            source_edit: tokio::sync::Mutex::new(()),
            receiver_status: Mutex::new(ReceiverStatus::default()),
            receiver_task: Mutex::new(None),
            last_records: Mutex::new(std::collections::VecDeque::new()),
            leases,
            maintenance: tokio::sync::Mutex::new(()),
            compaction_wakeup: Notify::new(),
            l0_count_changed: Notify::new(),
            remote,
            ancestor,
            branch_points: Mutex::new(std::collections::BTreeMap::new()),
        });
        let span =
            tracing::info_span!("timeline", tenant_id = %tenant_id, timeline_id = %timeline_id);
        tl.tasks.spawn_on(
            tl.clone().flush_loop().instrument(span.clone()),
            crate::background::handle(),
        );
        let background = crate::background::handle();
        tl.tasks.spawn_on(tl.clone().compaction_loop().instrument(span.clone()), background);
        tl.tasks.spawn_on(tl.clone().gc_loop().instrument(span.clone()), background);
        if let Some(remote) = &tl.remote {
            // Remote storage catches up with the manifest as loaded (after a
            // restart, or under a new generation after an attach).
            let commit_times = tl.commit_times.snapshot(md.gc_cutoff);
            remote.schedule_index_upload(md, tl.wal_source(), commit_times);
            let upload = remote.clone().upload_loop(tl.cancel.clone());
            tl.tasks.spawn_on(upload.instrument(span.clone()), background);
        }
        tl.tasks.spawn(tl.clone().checkpoint_timeout_loop().instrument(span));
        Ok(tl)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn get_last_record_lsn(&self) -> Lsn {
        self.last_record_lsn.load()
    }

    pub fn get_disk_consistent_lsn(&self) -> Lsn {
        self.flush_state.borrow().disk_consistent_lsn
    }

    /// The error of the latest flush, while flushing fails (cleared by the
    /// next successful flush).
    pub fn flush_error(&self) -> Option<Arc<String>> {
        self.flush_state.borrow().error.clone()
    }

    pub fn get_initial_lsn(&self) -> Lsn {
        self.initial_lsn
    }

    /// The lowest LSN reads may ask for: the start, or, for a timeline that
    /// follows a primary, the LSN where its base backup became consistent.
    pub fn min_readable_lsn(&self) -> Lsn {
        Lsn(self.min_readable_lsn.load(Ordering::Acquire))
    }

    /// Reads below this LSN are refused: GC may have removed the history
    /// they need. 0 until GC first runs.
    pub fn gc_cutoff(&self) -> Lsn {
        Lsn(self.gc_cutoff.load(Ordering::Acquire))
    }

    /// Raise the GC cutoff towards `wanted`, but never above the lowest
    /// lease valid at `now` or branch point, nor below the current cutoff; returns the
    /// cutoff now in force (in memory: the next manifest write persists
    /// it). Holds the lease store's lock, which lease renewals check the
    /// cutoff under, so a lease is either seen here or refused there.
    pub async fn set_gc_cutoff(&self, wanted: Lsn, now: SystemTime) -> Lsn {
        self.leases.with_min_valid(now, |leased| {
            let cutoff = leased.map_or(wanted, |leased| wanted.min(leased));
            let cutoff = self.min_branch_point().map_or(cutoff, |b| cutoff.min(b));
            let mut lm = self.layers.write().unwrap();
            let cutoff = cutoff.max(lm.historic().gc_cutoff());
            lm.set_gc_cutoff(cutoff);
            self.gc_cutoff.store(cutoff.0, Ordering::Release);
            cutoff
        })
    }

    /// The newest LSN known durable at time `at` (the LSN-by-time record),
    /// for GC's `pitr_interval`.
    pub fn lsn_at_or_before(&self, at: SystemTime) -> Option<Lsn> {
        self.lsn_by_time.lock().unwrap().lsn_at_or_before(at)
    }

    /// The WAL receiver committed a record that started at `start` and
    /// ended at `end` (= `last_record_lsn` now).
    pub fn set_last_record(&self, end: Lsn, start: Lsn) {
        debug_assert!(start < end, "record {start}..{end}");
        let mut recent = self.last_records.lock().unwrap();
        if recent.back().is_some_and(|&(last_end, _)| last_end >= end) {
            recent.clear(); // not after the last one: a new stream, start over
        }
        if recent.len() == RECENT_RECORDS {
            recent.pop_front();
        }
        recent.push_back((end, start));
    }

    /// Start of the record that ends at `lsn`, when known: the record
    /// before a compute's first (`xl_prev`).
    pub fn prev_record_lsn(&self, lsn: Lsn) -> Option<Lsn> {
        let recent = self.last_records.lock().unwrap();
        let i = recent.partition_point(|&(end, _)| end < lsn);
        recent.get(i).filter(|&&(end, _)| end == lsn).map(|&(_, start)| start)
    }

    /// The primary this timeline follows, if any.
    pub fn wal_source(&self) -> Option<WalSource> {
        self.wal_source.lock().unwrap().clone()
    }

    /// Persist `source` (or its removal) and use it from now on.
    pub async fn set_wal_source(&self, source: Option<WalSource>) -> anyhow::Result<()> {
        match &source {
            Some(s) => s.persist(&self.conf.io_engine, &self.dir).await?,
            None => WalSource::remove(&self.conf.io_engine, &self.dir).await?,
        }
        {
            let mut current = self.wal_source.lock().unwrap();
            let floor = readable_from(self.initial_lsn, &source);
            self.min_readable_lsn.store(floor.0, Ordering::Release);
            *current = source;
        }
        if self.remote.is_some() {
            self.persist_manifest().await?; // the remote index carries the source
        }
        Ok(())
    }

    /// The highest LSN up to which everything is durable: on local disk
    /// (`disk_consistent_lsn`) and, with remote storage, in an uploaded
    /// index (`remote_consistent_lsn`; 0 before the first upload). The WAL
    /// receiver lets the primary release WAL only up to here.
    pub fn durable_lsn(&self) -> Lsn {
        let disk = self.get_disk_consistent_lsn();
        match &self.remote {
            None => disk,
            Some(r) => disk.min(r.remote_consistent_lsn().unwrap_or(Lsn(0))),
        }
    }

    /// The timeline's remote storage link (none without remote storage).
    pub fn remote_client(&self) -> Option<&Arc<RemoteTimelineClient>> {
        self.remote.as_ref()
    }

    pub fn conf(&self) -> &StorageConf {
        &self.conf
    }

    /// Track a long operation on this timeline (listed in the tenant's
    /// detail while the returned value lives).
    pub fn start_progress(
        &self,
        operation: &'static str,
        unit: &'static str,
    ) -> Arc<utils::progress::Progress> {
        let subject = format!("{}/{}", self.tenant_id, self.timeline_id);
        let p = Arc::new(utils::progress::Progress::new(operation, unit, subject));
        self.globals.operations.register(&p);
        p
    }

    /// Process-wide storage state shared by all timelines.
    pub fn globals(&self) -> &Arc<Globals> {
        &self.globals
    }

    /// Grant a lease at `lsn` for `lsn_lease_length` from now, or extend
    /// the one held (never shorten it); returns the lease held once it is
    /// durable (its expiry may be later than asked: `lease.rs` point 2).
    ///
    /// Refused: LSN 0, and an LSN below what the timeline can serve
    /// ([`Self::min_readable_lsn`], [`Self::gc_cutoff`]), whose history is
    /// gone; the cutoff is checked under the lease store's lock, which GC
    /// holds while it raises the cutoff (`set_gc_cutoff`). An LSN above
    /// `last_record_lsn` is granted, as Neon's pageserver does: a static
    /// compute may ask for its LSN before this pageserver ingested it
    /// (after a restart or a move), and such a lease costs nothing, since
    /// GC never removes history that newer reads still need.
    pub async fn lease_lsn(&self, lsn: Lsn) -> Result<LsnLease, LeaseError> {
        if lsn == Lsn(0) {
            return Err(LeaseError::InvalidLsn);
        }
        let below_history = |floor: Lsn| {
            let (tenant, timeline) = (self.tenant_id, self.timeline_id);
            LeaseError::BelowHistory { lsn, floor, tenant, timeline }
        };
        if lsn < self.min_readable_lsn() {
            return Err(below_history(self.min_readable_lsn()));
        }
        let now = SystemTime::now();
        let begun = self.leases.begin(lsn, now, || {
            if lsn < self.gc_cutoff() {
                return Err(below_history(self.gc_cutoff()));
            }
            Ok(())
        })?;
        let seq = match begun {
            Begun::Durable(lease) => return Ok(lease),
            Begun::Pending(seq) => seq,
        };
        let engine = &self.conf.io_engine;
        match self.leases.make_durable(engine, &self.dir, lsn, seq, &self.cancel).await {
            Ok(lease) => Ok(lease),
            Err(WriteError::Cancelled) => Err(LeaseError::ShuttingDown),
            Err(WriteError::Write(e)) => Err(LeaseError::Persist(e)),
        }
    }

    /// Successful writes of the lease file since the timeline was loaded.
    pub fn lease_file_writes(&self) -> u64 {
        self.leases.file_writes()
    }

    /// The lowest LSN with a lease valid at `now`: GC must keep the history
    /// that reads at it need.
    pub fn min_valid_lease_lsn(&self, now: SystemTime) -> Option<Lsn> {
        self.leases.with_min_valid(now, |lsn| lsn)
    }

    /// The leases valid at `now`, by LSN.
    pub fn valid_leases(&self, now: SystemTime) -> Vec<(Lsn, LsnLease)> {
        self.leases.valid(now)
    }

    /// Wait until `lsn` is ingested, up to `wait_lsn_timeout`.
    pub async fn writer(&self) -> TimelineWriter<'_> {
        TimelineWriter { tl: self, state: self.writer.lock().await }
    }

    pub fn layer_stats(&self) -> LayerStats {
        let (in_memory_layers, in_memory_bytes, historic) = {
            let lm = self.layers.read().unwrap();
            (lm.in_memory_layer_count(), lm.in_memory_bytes(), lm.historic().clone())
        };
        LayerStats { in_memory_layers, in_memory_bytes, files: historic.stats() }
    }

    /// Run `task` as one of this timeline's background tasks: `shutdown`
    /// cancels `self.cancel` and waits for it, so it must end promptly
    /// once that token fires.
    pub fn spawn_background<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(task);
    }

    /// Stop the background tasks; with `flush`, first make everything
    /// ingested durable (bounded by `timeout`).
    pub async fn shutdown(&self, flush: bool, timeout: Duration) {
        if flush && !self.cancel.is_cancelled() {
            match tokio::time::timeout(timeout, self.freeze_and_flush()).await {
                Ok(Ok(lsn)) => info!("flushed up to {lsn} on shutdown"),
                Ok(Err(e)) => warn!("flush on shutdown failed: {e:#}"),
                Err(_) => warn!("flush on shutdown did not finish within {timeout:?}"),
            }
        }
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// The lowest readable LSN: the start, or, for a timeline that follows a
/// primary, the LSN where its base backup became consistent.
fn readable_from(initial_lsn: Lsn, source: &Option<WalSource>) -> Lsn {
    initial_lsn.max(source.as_ref().map_or(Lsn(0), |s| s.consistent_lsn))
}

#[cfg(test)]
mod tests;
