//! [`Unfinished`]: a layer file being written, removed if its write fails.
//!
//! A layer file is written under a temp name, then renamed to its final
//! name (`finish_file`); nothing lists it until its layer is installed. A
//! write that fails (ENOSPC, EIO, a failed read of the inputs, shutdown) or
//! whose future is dropped must not leave the file behind until the next
//! start-up: on a full disk it holds the very space that ran out, and the
//! next attempt would fail for it.
//!
//! The guard is made with the temp file and, dropped before [`Unfinished::keep`],
//! removes the temp name and, once [`Unfinished::renaming_to`] announced the
//! rename, the final name too (a commit can fail after its rename). That
//! covers every error path, `?` and panic alike. The removal is an unlink
//! through [`IoEngine::remove_from_drop`] (a destructor cannot await); a
//! value write still in flight keeps the unlinked file open until it ends,
//! then the space is free.
//!
//! Invariant: the final name given to `renaming_to` is one no manifest lists
//! (a new layer's name: `LayerWriter::finish_with_key_range` checks it is
//! free, and an L0's frozen layer is still queued, so its file is unlisted).

use std::path::{Path, PathBuf};

use io_engine::{IoEngine, TempFile};
use tracing::info;

#[must_use = "dropped, the guard removes the file"]
pub(super) struct Unfinished {
    engine: IoEngine,
    temp: PathBuf,
    renamed_to: Option<PathBuf>,
    armed: bool,
}

impl Unfinished {
    pub(super) fn new(engine: &IoEngine, temp: &TempFile) -> Unfinished {
        Unfinished {
            engine: engine.clone(),
            temp: temp.temp_path().to_path_buf(),
            renamed_to: None,
            armed: true,
        }
    }

    /// The temp file is about to be renamed to `path`: on failure from here
    /// on, remove that name too.
    pub(super) fn renaming_to(&mut self, path: &Path) {
        self.renamed_to = Some(path.to_path_buf());
    }

    /// The layer file is complete and renamed: keep it.
    pub(super) fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.engine.remove_from_drop(&self.temp);
        if let Some(path) = &self.renamed_to {
            self.engine.remove_from_drop(path);
        }
        info!("removed the unfinished layer file {}", self.temp.display());
    }
}
