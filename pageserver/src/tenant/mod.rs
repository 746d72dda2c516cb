//! Tenants and timelines: the layered page store.
//!
//! On disk: `<workdir>/tenants/<tenant_id>/timelines/<timeline_id>/` holds a
//! timeline's `metadata` (the layer manifest) and its layer files (plus `ephemeral-*` files of
//! in-memory layers, which are not durable and deleted at start-up).
//! Directories being created carry the suffix `.___temp` and directories
//! being deleted `.___deleted`; start-up removes both, so a crash during
//! creation or deletion leaves nothing half-made behind.
//!
//! With remote storage, `<tenant_id>/tenant.json` holds the tenant's
//! generation (`attachment.rs`), and every timeline of a loaded tenant has
//! a remote client (`Timeline::remote_client`), built before the timeline
//! is loaded; the load makes the manifest its first upload target. A
//! timeline being created (`UninitializedTimeline`) has none: nothing of
//! it is uploaded before `finish()`, whose reload gets one (and so uploads
//! the whole new timeline). The remote steps of a load (the claim, each
//! timeline's index) run before any timeline is loaded, so a store that
//! cannot be reached fails the load as a whole and the manager tries it
//! again (the tenant is Activating: `mgr/activation.rs`).

pub mod attachment;
pub mod branch;
pub mod commit_times;
pub mod eviction;
pub mod lsn_by_time;
pub mod metadata;
pub mod mgr;
pub mod prefetch;
pub mod reconstruct;
pub mod remote_timeline;
pub mod storage_layer;
pub mod timeline;
pub mod value;
pub mod vectored_read;
pub mod wal_image;

#[cfg(test)]
mod model_tests;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

pub use timeline::{LayerStats, Timeline, TimelineWriter};

use crate::basebackup::limits::{BackupLimits, BackupSlots};
use crate::metrics::storage as metrics;
use attachment::RemoteIndex;
use metadata::TimelineMetadata;
use remote_timeline::index_part::IndexPart;
use remote_timeline::Generation;
use storage_layer::layer_file::LayerFile;

/// Storage settings, derived from the daemon's config.
#[derive(Debug, Clone)]
pub struct StorageConf {
    pub workdir: PathBuf,
    pub checkpoint_distance: u64,
    pub checkpoint_timeout: Duration,
    pub wait_lsn_timeout: Duration,
    pub max_get_vectored_keys: usize,
    /// Global bound on bytes held by in-memory layers of all timelines.
    pub in_memory_layers_budget: u64,
    /// Ingest redoes every natively redone record whose block carries
    /// PostgreSQL's consistency image too, and compares (`walingest/redo_check.rs`).
    pub wal_redo_check: bool,
    /// Concurrent backups (`basebackup/limits.rs`).
    pub backup_limits: BackupLimits,
    pub io_engine: io_engine::IoEngine,
    /// Layer and ephemeral files use direct IO (`O_DIRECT`).
    pub direct_io: bool,
    /// How long an LSN lease lasts from its latest renewal.
    pub lsn_lease_length: Duration,
    pub compaction: CompactionConf,
    /// Bytes of layer index blocks cached in memory (all layers together).
    pub layer_index_cache_size: u64,
    /// Where the durable copy of the tenants is kept, if anywhere
    /// (`remote_storage` in the config).
    pub remote_storage: Option<Arc<crate::remote_storage::RemoteStorage>>,
    /// When local layer files are evicted (only with remote storage).
    pub eviction: EvictionConf,
}

/// `disk_usage_based_eviction`: local layer files that are in remote
/// storage are removed, least recently used first, while they take more
/// than `max_resident_bytes` or the file system of the workdir has less
/// than `min_avail_bytes` free; checked every `period`.
#[derive(Debug, Clone, Default)]
pub struct EvictionConf {
    pub max_resident_bytes: Option<u64>,
    pub min_avail_bytes: Option<u64>,
    /// Zero: never.
    pub period: Duration,
}

/// Compaction, image creation, GC and L0 backpressure settings (the config
/// keys of the same names; `docs/configuration.md`).
#[derive(Debug, Clone)]
pub struct CompactionConf {
    /// L0 layers that trigger a compaction into L1 layers (>= 2).
    pub compaction_threshold: usize,
    /// Bytes of an L1 layer before compaction starts the next one.
    pub compaction_target_size: u64,
    /// Background compaction checks this often; zero: never.
    pub compaction_period: Duration,
    /// Delta layers above a key range's newest image before a new image.
    pub image_creation_threshold: usize,
    /// Records of one key since its last image after which ingest writes
    /// an image of it (`timeline/writer/chain.rs`); > 0.
    pub max_record_chain: usize,
    /// L0 count at which ingest is delayed (> compaction_threshold).
    pub l0_flush_delay_threshold: usize,
    /// L0 count at which ingest waits for compaction (> delay threshold).
    pub l0_flush_stall_threshold: usize,
    /// Bytes of WAL history GC keeps below `last_record_lsn`.
    pub gc_horizon: u64,
    /// Time of history GC keeps; zero: only `gc_horizon` counts.
    pub pitr_interval: Duration,
    /// Background GC runs this often; zero: never.
    pub gc_period: Duration,
}

impl CompactionConf {
    /// The built-in defaults (`config/defaults.rs`).
    pub fn defaults() -> CompactionConf {
        CompactionConf {
            compaction_threshold: 10,
            compaction_target_size: 128 * 1024 * 1024,
            compaction_period: Duration::from_secs(20),
            image_creation_threshold: 3,
            max_record_chain: 256,
            l0_flush_delay_threshold: 20,
            l0_flush_stall_threshold: 40,
            gc_horizon: 64 * 1024 * 1024,
            pitr_interval: Duration::from_secs(7 * 24 * 3600),
            gc_period: Duration::from_secs(3600),
        }
    }
}

impl StorageConf {
    /// Defaults for tests and benches, rooted at `workdir`. The IO engine
    /// is std-fs, or the one `PAGESERVER_IO_ENGINE` names (run-tests.sh
    /// runs the suites on both).
    pub fn for_tests(workdir: &Path) -> StorageConf {
        StorageConf {
            workdir: workdir.to_path_buf(),
            checkpoint_distance: 256 * 1024 * 1024,
            checkpoint_timeout: Duration::from_secs(600),
            wait_lsn_timeout: Duration::from_secs(10),
            max_get_vectored_keys: 32,
            in_memory_layers_budget: 1024 * 1024 * 1024,
            wal_redo_check: true,
            backup_limits: BackupLimits { total: 64, per_tenant: 16 },
            io_engine: io_engine::IoEngine::new(test_io_engine_kind()).unwrap(),
            direct_io: test_direct_io(),
            lsn_lease_length: Duration::from_secs(600),
            compaction: CompactionConf::defaults(),
            layer_index_cache_size: 64 * 1024 * 1024,
            remote_storage: None,
            eviction: EvictionConf::default(),
        }
    }

    pub fn tenants_dir(&self) -> PathBuf {
        self.workdir.join("tenants")
    }
}

/// Process-wide storage state shared by all timelines.
#[derive(Debug, Default)]
pub struct Globals {
    /// Bytes in all open and frozen in-memory layers.
    pub in_memory_bytes: AtomicU64,
    /// Backups being generated.
    pub backups: BackupSlots,
    /// Long operations running (`utils::progress`), for the API.
    pub operations: utils::progress::Registry,
}

pub const DELETED_SUFFIX: &str = ".___deleted";
const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// The request conflicts with the state here or in remote storage; the
    /// message says which and what to do.
    #[error("{0}")]
    Conflict(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("shutting down")]
    ShuttingDown,
    /// Another change of the tenant is running; retry later.
    #[error("{0}")]
    Busy(String),
    /// The tenant could not be loaded at start-up; only deletion works.
    #[error("tenant {id} is broken: {reason}")]
    Broken { id: TenantId, reason: String },
    /// The tenant's load is waiting for remote storage (claiming its
    /// generation, downloading an index) and is tried again; retry later.
    #[error("tenant {id} is activating: remote storage is unavailable, retrying: {reason}")]
    Activating { id: TenantId, reason: String },
    /// The timeline could not be loaded at start-up; only deletion works.
    #[error("timeline {tenant}/{timeline} is broken: {reason}")]
    TimelineBroken { tenant: TenantId, timeline: TimelineId, reason: String },
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

#[derive(Debug, thiserror::Error, Clone)]
pub enum WaitLsnError {
    #[error(transparent)]
    Timeout(utils::seqwait::SeqWaitError),
    #[error("shutting down")]
    Shutdown,
}

#[derive(Debug, thiserror::Error, Clone)]
pub enum PageReconstructError {
    #[error("key {key} has no value at or below LSN {lsn}")]
    MissingKey { key: Key, lsn: Lsn },
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The LSN is below the GC cutoff: the history a read there needs may
    /// be gone.
    #[error("key {key} at {lsn}: the LSN is below the GC cutoff {gc_cutoff}; that history was garbage collected")]
    GarbageCollected { key: Key, lsn: Lsn, gc_cutoff: Lsn },
    /// A value whose checksum or framing is wrong, in the named layer.
    #[error("corrupt data: key {key} at {lsn} in layer {layer}: {source}")]
    CorruptValue {
        key: Key,
        lsn: Lsn,
        layer: String,
        #[source]
        source: value::ValueDecodeError,
    },
    /// A layer file's index could not be read: an IO error, or a corrupt
    /// index block (the source names the file and the block).
    #[error("reading the index of layer {layer}: {source}")]
    LayerIndex {
        layer: String,
        #[source]
        source: storage_layer::layer_file::LayerReadError,
    },
    /// A layer only in remote storage could not be downloaded (or opened
    /// after it), or was replaced meanwhile; the error names it and the cause.
    #[error(transparent)]
    LayerAccess(#[from] storage_layer::layer::LayerAccessError),
    #[error("IO error reading layer {layer}: {source}")]
    Io {
        layer: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "key {key}: the WAL record at {lsn} (rmgr {} ({rmid})) carries no page image, and \
         this pageserver has no native redo for that rmgr (list it in the primary's \
         wal_consistency_checking; was it switched off for that session?)",
        postgres_ffi::wal::rmgr::rmgr_name(*rmid)
    )]
    NeedsRedo { key: Key, lsn: Lsn, rmid: u8 },
    /// Native redo of a stored WAL record failed: the page at that LSN
    /// cannot be built (the error names LSN, rmgr, record kind and block).
    #[error("key {key}: {source}")]
    Redo {
        key: Key,
        #[source]
        source: postgres_ffi::redo::RedoError,
    },
    #[error(transparent)]
    Vectored(#[from] GetVectoredError),
}

/// Who a read is for: the `task_kind` label of `pageserver_get_vectored_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum ReadKind {
    /// GetPage and friends from a compute (the page service).
    PageRequestHandler,
    /// Reads of the ingest path (imports; the WAL receiver next).
    Ingest,
    /// The management API.
    HttpRequest,
    /// Image layer creation (reads at the image LSN).
    Compaction,
}

impl ReadKind {
    /// Label values indexed by `ReadKind as usize`; start-up registers them
    /// (`metrics::register_all`).
    pub const LABELS: [&'static str; 4] =
        ["PageRequestHandler", "WalReceiverOrImport", "MgmtRequest", "Compaction"];

    pub fn label(self) -> &'static str {
        Self::LABELS[self as usize]
    }
}

#[derive(Debug, thiserror::Error, Clone)]
pub enum GetVectoredError {
    #[error("vectored get of {n} keys exceeds max_get_vectored_keys {max}")]
    TooManyKeys { n: usize, max: usize },
    #[error("timeline is shutting down")]
    Cancelled,
}

pub struct Tenant {
    id: TenantId,
    /// The generation this pageserver attached the tenant with (claimed in
    /// remote storage); `None` without remote storage.
    generation: Option<Generation>,
    dir: PathBuf,
    conf: Arc<StorageConf>,
    globals: Arc<Globals>,
    pub cancel: CancellationToken,
    timelines: RwLock<HashMap<TimelineId, Arc<Timeline>>>,
    /// Timelines that failed to load at start-up: id -> reason. Disjoint
    /// from `timelines`; an id leaves it only by deletion.
    broken_timelines: RwLock<HashMap<TimelineId, String>>,
    /// Timelines being created (ids reserved until finished or abandoned).
    creating: Mutex<HashSet<TimelineId>>,
}

impl Tenant {
    pub(crate) async fn load(
        conf: Arc<StorageConf>,
        globals: Arc<Globals>,
        id: TenantId,
        dir: PathBuf,
        cancel: CancellationToken,
    ) -> anyhow::Result<Arc<Tenant>> {
        Self::load_with_indexes(conf, globals, id, dir, cancel, HashMap::new()).await
    }

    /// `load`, with the remote indexes of some timelines handed over (by
    /// attach, which wrote their local manifests from them): those are not
    /// downloaded again, so manifest and remote client agree.
    pub(crate) async fn load_with_indexes(
        conf: Arc<StorageConf>,
        globals: Arc<Globals>,
        id: TenantId,
        dir: PathBuf,
        cancel: CancellationToken,
        indexes: HashMap<TimelineId, IndexPart>,
    ) -> anyhow::Result<Arc<Tenant>> {
        let engine = &conf.io_engine;
        let scratch = dir.join("scratch");
        if engine.exists(&scratch).await? {
            engine.remove_dir_all(&scratch).await.context("clear the scratch directory")?;
        }
        engine.create_dir_all(&scratch).await?;
        let generation = attachment::claim_at_load(&conf, id, &dir).await?;
        let tl_dir = dir.join("timelines");
        let mut local = Vec::new();
        for entry in engine.read_dir(&tl_dir).await? {
            let name = entry.name_lossy();
            let path = tl_dir.join(&entry.name);
            if name.ends_with(io_engine::TEMP_SUFFIX) || name.ends_with(DELETED_SUFFIX) {
                info!("removing unfinished timeline directory {}", path.display());
                engine.remove_dir_all(&path).await?;
                continue;
            }
            match name.parse::<TimelineId>() {
                Ok(tlid) => local.push((tlid, path)),
                Err(_) => warn!("ignoring unexpected entry {}", path.display()),
            }
        }
        let ids: Vec<TimelineId> = local.iter().map(|(tlid, _)| *tlid).collect();
        let indexes = attachment::fetch_indexes(&conf, id, generation, &ids, indexes).await?;
        let tenant = Tenant {
            id,
            generation,
            dir,
            conf,
            globals,
            cancel,
            timelines: RwLock::new(HashMap::new()),
            broken_timelines: RwLock::new(HashMap::new()),
            creating: Mutex::new(HashSet::new()),
        };
        tenant.load_timelines_in_order(local, indexes).await;
        metrics::BROKEN_TIMELINES.add(tenant.list_broken_timelines().len() as i64);
        Ok(Arc::new(tenant))
    }

    /// Load timeline `tlid` from `dir` with its remote client (and, for a
    /// branch, its loaded ancestor), and publish it; one that fails
    /// becomes Broken with the reason (counted by the caller).
    async fn load_timeline_or_mark_broken(
        &self,
        tlid: TimelineId,
        dir: PathBuf,
        index: RemoteIndex,
        ancestor: Option<Arc<Timeline>>,
    ) {
        match self.load_timeline(tlid, dir, index, ancestor).await {
            Ok(tl) => {
                self.timelines.write().unwrap().insert(tlid, tl);
            }
            Err(e) => self.mark_broken(tlid, utils::error::report_anyhow(&e)),
        }
    }

    /// Build the remote client of timeline `tlid` (with remote storage),
    /// then load the timeline from `dir`.
    async fn load_timeline(
        &self,
        tlid: TimelineId,
        dir: PathBuf,
        index: RemoteIndex,
        ancestor: Option<Arc<Timeline>>,
    ) -> anyhow::Result<Arc<Timeline>> {
        let ids = (self.id, tlid);
        let client = attachment::timeline_client(&self.conf, ids, self.generation, &dir, index)
            .await
            .context("remote storage")?;
        let cancel = self.cancel.child_token();
        let (conf, globals) = (self.conf.clone(), self.globals.clone());
        Timeline::load(conf, globals, self.id, tlid, dir, cancel, client, ancestor).await
    }

    pub fn id(&self) -> TenantId {
        self.id
    }

    /// The generation this pageserver attached the tenant with; `None`
    /// without remote storage.
    pub fn generation(&self) -> Option<Generation> {
        self.generation
    }

    pub fn conf(&self) -> &StorageConf {
        &self.conf
    }

    /// Track a long operation on timeline `timeline_id` (listed in the
    /// tenant's detail while the returned value lives).
    pub fn start_progress(
        &self,
        operation: &'static str,
        unit: &'static str,
        timeline_id: TimelineId,
    ) -> Arc<utils::progress::Progress> {
        let subject = format!("{}/{timeline_id}", self.id);
        let p = Arc::new(utils::progress::Progress::new(operation, unit, subject));
        self.globals.operations.register(&p);
        p
    }

    /// The long operations running on this tenant's timelines.
    pub fn operations(&self) -> Vec<utils::progress::ProgressInfo> {
        self.globals.operations.list(&format!("{}/", self.id))
    }

    /// Scratch space for work files of this tenant (e.g. an import's spill
    /// file); emptied at start-up.
    pub fn scratch_dir(&self) -> PathBuf {
        self.dir.join("scratch")
    }

    fn timeline_dir(&self, id: TimelineId) -> PathBuf {
        self.dir.join("timelines").join(id.to_string())
    }

    pub fn get_timeline(&self, id: TimelineId) -> Result<Arc<Timeline>, TenantError> {
        if let Some(tl) = self.timelines.read().unwrap().get(&id) {
            return Ok(tl.clone());
        }
        match self.broken_timelines.read().unwrap().get(&id) {
            Some(reason) => Err(TenantError::TimelineBroken {
                tenant: self.id,
                timeline: id,
                reason: reason.clone(),
            }),
            None => Err(TenantError::NotFound(format!("timeline {}/{id}", self.id))),
        }
    }

    /// Timelines that could not be loaded, with the reason, sorted by id.
    pub fn list_broken_timelines(&self) -> Vec<(TimelineId, String)> {
        let mut v: Vec<_> =
            self.broken_timelines.read().unwrap().iter().map(|(id, r)| (*id, r.clone())).collect();
        v.sort();
        v
    }

    pub fn list_timelines(&self) -> Vec<Arc<Timeline>> {
        let mut v: Vec<_> = self.timelines.read().unwrap().values().cloned().collect();
        v.sort_by_key(|t| t.timeline_id);
        v
    }

    /// Bytes of layer files of all timelines.
    pub fn physical_size(&self) -> u64 {
        self.list_timelines().iter().map(|t| t.layer_stats().files.bytes()).sum()
    }

    fn reserve(&self, id: TimelineId) -> Result<(), TenantError> {
        if self.cancel.is_cancelled() {
            return Err(TenantError::ShuttingDown);
        }
        if self.timelines.read().unwrap().contains_key(&id)
            || self.broken_timelines.read().unwrap().contains_key(&id)
            || !self.creating.lock().unwrap().insert(id)
        {
            return Err(TenantError::AlreadyExists(format!("timeline {}/{id}", self.id)));
        }
        Ok(())
    }

    pub async fn create_empty_timeline(
        self: &Arc<Self>,
        id: TimelineId,
        initial_lsn: Lsn,
        pg_version: u32,
    ) -> Result<Arc<Timeline>, TenantError> {
        self.begin_timeline_creation(id, initial_lsn, pg_version).await?.finish().await
    }

    /// A new timeline in a temp directory; see `UninitializedTimeline`.
    pub async fn begin_timeline_creation(
        self: &Arc<Self>,
        id: TimelineId,
        initial_lsn: Lsn,
        pg_version: u32,
    ) -> Result<UninitializedTimeline, TenantError> {
        self.reserve(id)?;
        let mut uninit =
            UninitializedTimeline { tenant: self.clone(), id, timeline: None, import_images: None };
        attachment::refuse_if_remote(&self.conf, (self.id, id)).await?;
        let temp_dir = io_engine::temp_path(&self.timeline_dir(id));
        let engine = &self.conf.io_engine;
        if engine.exists(&temp_dir).await.context("create timeline")? {
            engine.remove_dir_all(&temp_dir).await.context("remove leftover temp directory")?;
        }
        let md = TimelineMetadata::new_empty(initial_lsn, pg_version);
        Timeline::create_on_disk(&self.conf, &temp_dir, &md).await?;
        // No remote client: nothing is uploaded before `finish`.
        let tl = Timeline::load(
            self.conf.clone(),
            self.globals.clone(),
            self.id,
            id,
            temp_dir,
            self.cancel.child_token(),
            None,
            None,
        )
        .await?;
        uninit.timeline = Some(tl);
        Ok(uninit)
    }

    /// Stops and removes a timeline, Broken ones included; refused for a
    /// timeline that has branches.
    pub async fn delete_timeline(&self, id: TimelineId) -> Result<(), TenantError> {
        self.refuse_if_branched(id)?;
        let removed = self.timelines.write().unwrap().remove(&id);
        match removed {
            Some(tl) => tl.shutdown(false, Duration::ZERO).await,
            None => {
                if self.broken_timelines.write().unwrap().remove(&id).is_none() {
                    return Err(TenantError::NotFound(format!("timeline {}/{id}", self.id)));
                }
                metrics::BROKEN_TIMELINES.dec();
            }
        }
        let dir = self.timeline_dir(id);
        remove_dir_durably(&self.conf, &dir).await?;
        self.forget_branch(id);
        info!("deleted timeline {}/{id}", self.id);
        Ok(())
    }

    /// Stop all timelines; with `flush`, write in-memory data to disk first.
    pub async fn shutdown(&self, flush: bool) {
        let timelines = self.list_timelines();
        futures::future::join_all(
            timelines.iter().map(|t| t.shutdown(flush, SHUTDOWN_FLUSH_TIMEOUT)),
        )
        .await;
        self.cancel.cancel();
    }
}

/// Rename `dir` to `<dir>.___deleted`, make that durable, then remove it. A
/// crash in between leaves a `.___deleted` directory that start-up removes.
pub(crate) async fn remove_dir_durably(conf: &StorageConf, dir: &Path) -> anyhow::Result<()> {
    let mut deleted = dir.as_os_str().to_owned();
    deleted.push(DELETED_SUFFIX);
    let deleted = PathBuf::from(deleted);
    let engine = &conf.io_engine;
    engine.rename(dir, &deleted).await?;
    engine.fsync_dir(dir.parent().expect("a tenant or timeline directory has a parent")).await?;
    engine.remove_dir_all(&deleted).await?;
    Ok(())
}

async fn remove_dir_if_present(engine: &io_engine::IoEngine, dir: &Path) -> std::io::Result<()> {
    if engine.exists(dir).await? {
        engine.remove_dir_all(dir).await?;
    }
    Ok(())
}

/// A timeline being created (by an import, or empty). It lives in
/// `<id>.___temp` and is invisible to readers until `finish()`, which flushes
/// everything, renames the directory into place durably and publishes the
/// timeline. Dropped unfinished, it removes its directory; after a crash,
/// start-up does.
pub struct UninitializedTimeline {
    tenant: Arc<Tenant>,
    id: TimelineId,
    timeline: Option<Arc<Timeline>>,
    /// Image layers an import wrote at an LSN (`import::rel_images`),
    /// installed by `finish` once that LSN is flushed.
    import_images: Option<(Lsn, Vec<LayerFile>)>,
}

impl UninitializedTimeline {
    pub fn timeline(&self) -> &Arc<Timeline> {
        self.timeline.as_ref().expect("present until finish or drop")
    }

    /// Image layers written at `lsn` into the timeline's directory, to be
    /// part of the timeline when `finish` publishes it. Once per timeline.
    pub fn add_import_images(&mut self, (lsn, files): (Lsn, Vec<LayerFile>)) {
        assert!(self.import_images.is_none(), "import images added twice");
        self.import_images = Some((lsn, files));
    }

    pub async fn finish(mut self) -> Result<Arc<Timeline>, TenantError> {
        let tenant = self.tenant.clone();
        let tl = self.timeline.take().expect("finish once");
        let temp_dir = tl.dir().to_path_buf();
        let result = async {
            tl.freeze_and_flush().await.context("flush the new timeline")?;
            anyhow::ensure!(
                tl.get_disk_consistent_lsn() == tl.get_last_record_lsn(),
                "new timeline not fully flushed"
            );
            if let Some((lsn, files)) = self.import_images.take() {
                tl.install_import_images(lsn, files).await?;
            }
            tl.shutdown(false, Duration::ZERO).await;
            let final_dir = tenant.timeline_dir(self.id);
            tenant.conf.io_engine.rename(&temp_dir, &final_dir).await?;
            tenant.conf.io_engine.fsync_dir(final_dir.parent().unwrap()).await?;
            utils::failpoint::failpoint("timeline-create::after-rename")?;
            tenant.load_timeline(self.id, final_dir, RemoteIndex::Given(None), None).await
        }
        .await;
        match result {
            Ok(tl) => {
                tenant.timelines.write().unwrap().insert(self.id, tl.clone());
                tenant.creating.lock().unwrap().remove(&self.id);
                info!("created timeline {}/{} at {}", tenant.id, self.id, tl.get_last_record_lsn());
                Ok(tl)
            }
            Err(e) => {
                tl.cancel.cancel();
                // Drop removes the reservation; remove whichever directory exists.
                let engine = &tenant.conf.io_engine;
                for dir in [temp_dir, tenant.timeline_dir(self.id)] {
                    if let Err(e) = remove_dir_if_present(engine, &dir).await {
                        warn!("could not remove the failed timeline's directory: {e}");
                    }
                }
                Err(TenantError::Other(e))
            }
        }
    }
}

impl Drop for UninitializedTimeline {
    fn drop(&mut self) {
        if let Some(tl) = self.timeline.take() {
            tl.cancel.cancel();
            // Start-up removes it too (a `.___temp` directory) if this cannot.
            self.tenant.conf.io_engine.remove_from_drop(tl.dir());
        }
        self.tenant.creating.lock().unwrap().remove(&self.id);
    }
}

/// The engine tests run on: `PAGESERVER_IO_ENGINE` or std-fs.
fn test_io_engine_kind() -> io_engine::IoEngineKind {
    match std::env::var("PAGESERVER_IO_ENGINE") {
        Ok(name) => name.parse().unwrap_or_else(|e| panic!("PAGESERVER_IO_ENGINE: {e}")),
        Err(_) => io_engine::IoEngineKind::StdFs,
    }
}

/// Direct IO for `StorageConf::for_tests`: on when `PAGESERVER_DIRECT_IO`
/// is `true` (run-tests.sh runs the suites both ways).
fn test_direct_io() -> bool {
    match std::env::var("PAGESERVER_DIRECT_IO") {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("PAGESERVER_DIRECT_IO: '{v}' is not a bool")),
        Err(_) => false,
    }
}
