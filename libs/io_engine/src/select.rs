//! Which engine runs a file's operations, switchable at runtime
//! ([`crate::IoEngine::set_kind`], the daemon's `PUT /v1/io_engine`).
//!
//! Both real engines work on the same descriptor, so a file opened under
//! one engine is used by the other after a switch: every operation looks at
//! the engine selected *when it starts* (one relaxed atomic load).
//! Operations already running finish on the engine they started on.
//!
//! Concurrency contract: the ring is created at most once per engine (under
//! `ring_init`) and published before the kind says `IoUring`, so whoever
//! reads `IoUring` finds the ring. A file builds its io-uring state (an
//! `fstat`/`fstatfs` for the inline paths) on its first io-uring operation,
//! at most once (`OnceLock`; a racing builder's copy is dropped).

use std::fs;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::std_fs::StdFile;
use crate::uring::{Ring, UringFile};
use crate::{IoEngineKind, OpenMode, UringInline};

/// The engine selection shared by an engine's clones and its files.
#[derive(Debug)]
pub(crate) struct Selected {
    kind: AtomicU8,
    ring: OnceLock<Arc<Ring>>,
    ring_init: Mutex<()>,
}

const STD_FS: u8 = 0;
const IO_URING: u8 = 1;

impl Selected {
    pub fn new(kind: IoEngineKind) -> io::Result<Selected> {
        let s = Selected {
            kind: AtomicU8::new(STD_FS),
            ring: OnceLock::new(),
            ring_init: Mutex::new(()),
        };
        s.set(kind)?;
        Ok(s)
    }

    pub fn kind(&self) -> IoEngineKind {
        match self.kind.load(Ordering::Acquire) {
            STD_FS => IoEngineKind::StdFs,
            _ => IoEngineKind::IoUring,
        }
    }

    /// Select `kind`; switching to io-uring creates the ring the first time
    /// (and fails, changing nothing, if the kernel refuses it).
    pub fn set(&self, kind: IoEngineKind) -> io::Result<()> {
        let code = match kind {
            IoEngineKind::StdFs => STD_FS,
            IoEngineKind::IoUring => {
                let _init = self.ring_init.lock().unwrap();
                if self.ring.get().is_none() {
                    let ring = Ring::new()?;
                    self.ring.set(ring).expect("created once, under ring_init");
                }
                IO_URING
            }
        };
        self.kind.store(code, Ordering::Release);
        Ok(())
    }

    /// The ring, if io-uring was ever selected.
    pub fn ring(&self) -> Option<&Arc<Ring>> {
        self.ring.get()
    }
}

/// A file on a real file system: one descriptor, used by whichever engine
/// is selected when an operation starts.
pub(crate) struct RealFile {
    std: StdFile,
    uring: OnceLock<UringFile>,
    mode: OpenMode,
    policy: UringInline,
    selected: Arc<Selected>,
}

/// The engine an operation runs on.
pub(crate) enum Backend<'a> {
    Std(&'a StdFile),
    Uring(&'a UringFile),
}

impl RealFile {
    pub fn new(
        file: fs::File,
        mode: OpenMode,
        policy: UringInline,
        selected: Arc<Selected>,
    ) -> RealFile {
        RealFile { std: StdFile::new(file, mode), uring: OnceLock::new(), mode, policy, selected }
    }

    pub fn backend(&self) -> io::Result<Backend<'_>> {
        match self.selected.kind() {
            IoEngineKind::StdFs => Ok(Backend::Std(&self.std)),
            IoEngineKind::IoUring => self.uring_file().map(Backend::Uring),
        }
    }

    fn uring_file(&self) -> io::Result<&UringFile> {
        if let Some(f) = self.uring.get() {
            return Ok(f);
        }
        let ring = self.selected.ring().expect("the ring exists once io-uring is selected");
        let f = UringFile::over(self.std.shared(), ring, self.mode, self.policy)?;
        Ok(self.uring.get_or_init(|| f))
    }

    /// `len` and `set_len` are plain syscalls for both engines.
    pub fn std(&self) -> &StdFile {
        &self.std
    }
}
