//! `Layer`: a historic layer of a timeline (the layer map's entry), whose
//! file is on local disk (*resident*: an open, verified [`LayerFile`]) or
//! only in remote storage (*remote-only*: downloaded on first use).
//!
//! A layer knows its name, size and local path for its whole life; only its
//! residence changes:
//! ```text
//!   remote-only --get_resident (download, load)--> resident
//!   resident    --evict (remove the local file)--> remote-only
//!   either      --delete_local (replaced by compaction or GC)--> deleted
//! ```
//! A layer without a remote client is created resident and stays so (it
//! cannot be evicted). Eviction needs the remote client to list the layer
//! as uploaded with the same size.
//!
//! Concurrency contract:
//! - `state` (a std mutex, never held across an await) holds the resident
//!   handle; [`Layer::try_resident`] clones it and never waits.
//! - `transition` (an async mutex) is held across every change of
//!   residence: a download and load, an eviction, a deletion. So one
//!   download at a time per layer; callers of [`Layer::get_resident`]
//!   queue behind it and then find the layer resident, or, if that download
//!   failed, get its error (a caller that arrives later tries again). An
//!   eviction or deletion waits for a download in progress, and a download
//!   for them: the layer is never half evicted or half downloaded.
//! - Cancellation: a `get_resident` dropped mid-download (a read whose
//!   client left) releases `transition` with the layer unchanged; the
//!   download's temp file is removed by the next attempt or at start-up,
//!   and the next caller downloads again.
//! - Readers hold an `Arc<LayerFile>` for as long as they read. Eviction
//!   and deletion unlink the local file and drop only the layer's handle:
//!   the open descriptor keeps the data readable for those readers. (The
//!   simulated IO engine reads by path, so tests on it do not evict.)
//! - A deleted layer keeps its resident handle (readers of an older
//!   snapshot still read it) but is never downloaded again: such a read
//!   gets [`LayerAccessError::Replaced`] and is retried on a fresh snapshot.
//! - `pageserver_resident_physical_size` counts the layer's bytes exactly
//!   while it is resident and not deleted: added when it becomes resident,
//!   subtracted on eviction, deletion, or drop (the layer left the map and
//!   every snapshot).
//! - The last access time (on every successful `try_resident` and
//!   `get_resident`) orders eviction, least recently used first.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use io_engine::IoEngine;
use tracing::{info, warn};

use super::layer_file::LayerFile;
use super::LayerName;
use crate::metrics::remote::RESIDENT_BYTES;
use crate::tenant::remote_timeline::client::RemoteTimelineClient;

/// An error's whole chain (`{:#}`), shared by every read that waited for
/// the same download: the chain is what names the object and the cause.
#[derive(Clone)]
pub struct Cause(Arc<anyhow::Error>);

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Why a layer's file could not be made resident.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LayerAccessError {
    /// The download failed (after the client's retries); the cause names
    /// the object and what was wrong.
    #[error("layer {layer} is not on local disk and its download failed: {cause}")]
    Download { layer: String, cause: Cause },
    /// The downloaded file is not a usable layer file.
    #[error("layer {layer} was downloaded but cannot be opened: {cause}")]
    Open { layer: String, cause: Cause },
    /// Compaction or GC replaced the layer and removed its local file: a
    /// read from a snapshot older than that must use a fresh snapshot.
    #[error("layer {layer} was replaced by compaction or GC and is no longer on local disk")]
    Replaced { layer: String },
}

struct State {
    /// The open file while resident; kept after deletion (see the module
    /// comment).
    file: Option<Arc<LayerFile>>,
    deleted: bool,
    /// Downloads finished (either way) so far.
    downloads_finished: u64,
    /// The error of the last download, if it failed.
    last_failure: Option<LayerAccessError>,
}

impl State {
    fn new(file: Option<Arc<LayerFile>>) -> State {
        State { file, deleted: false, downloads_finished: 0, last_failure: None }
    }

    /// Whether the layer's bytes are in `pageserver_resident_physical_size`.
    fn counted(&self) -> bool {
        self.file.is_some() && !self.deleted
    }
}

pub struct Layer {
    pub name: LayerName,
    pub file_size: u64,
    /// Where the file is (or is downloaded to) on local disk.
    pub path: PathBuf,
    engine: IoEngine,
    /// Open the file with direct IO (as it was, or as the config says).
    direct_io: bool,
    remote: Option<Arc<RemoteTimelineClient>>,
    state: Mutex<State>,
    /// Held across every change of residence (see the module comment).
    transition: tokio::sync::Mutex<()>,
    /// Microseconds since [`EPOCH`] of the last access.
    last_access_us: AtomicU64,
}

/// The origin of last access times (monotonic).
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_us() -> u64 {
    EPOCH.elapsed().as_micros() as u64
}

impl Layer {
    /// A layer whose file is open (just written, or found on local disk).
    pub fn resident(file: LayerFile, remote: Option<Arc<RemoteTimelineClient>>) -> Layer {
        RESIDENT_BYTES.add(file.file_size as i64);
        Layer {
            name: file.name.clone(),
            file_size: file.file_size,
            path: file.path.clone(),
            engine: file.engine().clone(),
            direct_io: file.is_direct_io(),
            remote,
            state: Mutex::new(State::new(Some(Arc::new(file)))),
            transition: tokio::sync::Mutex::new(()),
            last_access_us: AtomicU64::new(now_us()),
        }
    }

    /// A layer of `file_size` bytes that is only in remote storage; it is
    /// downloaded into `dir` on first use (opened with direct IO when
    /// `direct_io` and its format allow it).
    pub fn remote_only(
        name: LayerName,
        file_size: u64,
        dir: &Path,
        engine: IoEngine,
        direct_io: bool,
        remote: Arc<RemoteTimelineClient>,
    ) -> Layer {
        Layer {
            path: dir.join(name.to_string()),
            name,
            file_size,
            engine,
            direct_io,
            remote: Some(remote),
            state: Mutex::new(State::new(None)),
            transition: tokio::sync::Mutex::new(()),
            last_access_us: AtomicU64::new(now_us()),
        }
    }

    /// The open file if the layer is resident; never waits.
    pub fn try_resident(&self) -> Option<Arc<LayerFile>> {
        let file = self.state.lock().unwrap().file.clone();
        if file.is_some() {
            self.touch();
        }
        file
    }

    /// Whether the file is on local disk, without counting as an access.
    pub fn is_resident(&self) -> bool {
        self.state.lock().unwrap().counted()
    }

    /// The open file, downloaded and opened first if the layer is not
    /// resident (see the module comment for concurrent callers).
    pub async fn get_resident(&self) -> Result<Arc<LayerFile>, LayerAccessError> {
        if let Some(file) = self.try_resident() {
            return Ok(file);
        }
        let seen_downloads = self.state.lock().unwrap().downloads_finished;
        let _transition = self.transition.lock().await;
        {
            let st = self.state.lock().unwrap();
            if let Some(file) = &st.file {
                self.touch();
                return Ok(file.clone());
            }
            if st.deleted {
                return Err(LayerAccessError::Replaced { layer: self.name.to_string() });
            }
            if st.downloads_finished != seen_downloads {
                if let Some(e) = &st.last_failure {
                    return Err(e.clone()); // the download this call waited for
                }
            }
        }
        let res = self.download_and_open().await;
        let mut st = self.state.lock().unwrap();
        st.downloads_finished += 1;
        st.last_failure = res.as_ref().err().cloned();
        let file = res?;
        debug_assert!(!st.counted(), "a resident layer is not downloaded");
        st.file = Some(file.clone());
        RESIDENT_BYTES.add(self.file_size as i64);
        self.touch();
        Ok(file)
    }

    /// Download the file (the client checks its size and CRC-32C against
    /// the remote index) and open it. The caller holds `transition`. A file
    /// that downloads but does not open is removed again, so that a restart
    /// finds the layer remote-only rather than a broken file.
    async fn download_and_open(&self) -> Result<Arc<LayerFile>, LayerAccessError> {
        let remote = self.remote.as_ref().expect("a layer that is not resident has a remote");
        let layer = self.name.to_string();
        let started = Instant::now();
        let path = remote.download_layer(&self.name).await.map_err(|e| {
            LayerAccessError::Download { layer: layer.clone(), cause: Cause(Arc::new(e)) }
        })?;
        assert_eq!(path, self.path, "layer {layer} downloaded to another path");
        let ids = (remote.tenant_id, remote.timeline_id);
        let loaded = LayerFile::load(&self.engine, &path, ids.0, ids.1, self.direct_io).await;
        let file = loaded.and_then(|f| {
            anyhow::ensure!(
                f.file_size == self.file_size,
                "{} bytes, the layer map says {}",
                f.file_size,
                self.file_size
            );
            Ok(f)
        });
        match file {
            Ok(f) => {
                info!(
                    "downloaded layer {layer} ({} bytes) in {:?}",
                    f.file_size,
                    started.elapsed()
                );
                Ok(Arc::new(f))
            }
            Err(e) => {
                if let Err(re) = self.engine.remove_file(&self.path).await {
                    warn!("could not remove the unusable download of {layer}: {re}");
                }
                Err(LayerAccessError::Open { layer, cause: Cause(Arc::new(e)) })
            }
        }
    }

    /// Whether [`Self::evict`] would evict the layer now: resident, not
    /// deleted, and uploaded with the same size.
    pub fn is_evictable(&self) -> bool {
        let uploaded = self.remote.as_ref().and_then(|r| r.uploaded_layer(&self.name.to_string()));
        uploaded.is_some_and(|u| u.file_size == self.file_size) && self.is_resident()
    }

    /// Remove the local file and drop the resident handle, if the layer is
    /// evictable (else `false`, as when the removal fails: logged). Readers
    /// holding the file keep reading it; the next `get_resident` downloads
    /// it again.
    pub async fn evict(&self) -> bool {
        let _transition = self.transition.lock().await;
        if !self.is_evictable() {
            return false;
        }
        match self.engine.remove_file(&self.path).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                warn!("layer {} was already gone from local disk", self.name);
            }
            Err(e) => {
                warn!("could not evict layer {}: {e}", self.name);
                return false;
            }
        }
        // Not durable by itself (no directory fsync): after a crash the
        // file may be back, complete, and start-up finds it resident.
        let file = {
            let mut st = self.state.lock().unwrap();
            debug_assert!(st.counted());
            st.file.take()
        };
        RESIDENT_BYTES.sub(self.file_size as i64);
        drop(file); // the descriptor closes once the last reader is done
        true
    }

    /// The layer was replaced (compaction) or collected (GC) and no
    /// manifest lists it any more: remove its local file (best effort:
    /// start-up removes unlisted files) and never download it again.
    pub async fn delete_local(&self) {
        let _transition = self.transition.lock().await;
        let was_counted = {
            let mut st = self.state.lock().unwrap();
            let counted = st.counted();
            st.deleted = true;
            counted
        };
        if was_counted {
            RESIDENT_BYTES.sub(self.file_size as i64);
        }
        match self.engine.remove_file(&self.path).await {
            Ok(()) => {}
            Err(e) if !was_counted && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!("could not remove replaced layer file {}: {e}", self.path.display()),
        }
    }

    /// When the layer was last read (or became resident).
    pub fn last_access(&self) -> Instant {
        *EPOCH + Duration::from_micros(self.last_access_us.load(Ordering::Relaxed))
    }

    /// Bytes this layer adds to `pageserver_resident_physical_size` now.
    pub fn resident_bytes_counted(&self) -> u64 {
        if self.state.lock().unwrap().counted() {
            self.file_size
        } else {
            0
        }
    }

    fn touch(&self) {
        self.last_access_us.fetch_max(now_us(), Ordering::Relaxed);
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if st.counted() {
            RESIDENT_BYTES.sub(self.file_size as i64);
        }
    }
}

impl fmt::Debug for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resident = if self.is_resident() { "resident" } else { "remote-only" };
        write!(f, "Layer({}, {} bytes, {resident})", self.name, self.file_size)
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
