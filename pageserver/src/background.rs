//! The background runtime: layer flushes (and, later, compaction) run on
//! threads of their own, apart from the request and ingest runtime.
//!
//! Why: a flush copies hundreds of MiB and fsyncs them, and the std-fs
//! engine runs each syscall inline on the calling thread. On the main
//! runtime that blocks one of its (two, on a 2-core machine) workers for up
//! to a second, and a task woken on that worker (the WAL receiver, a
//! GetPage) waits behind it: tokio does not steal a worker's LIFO slot.
//! Here the blocked thread is the background one; the OS scheduler shares
//! the cores.
//!
//! The runtime is created on first use and lives for the process. Tasks on
//! it are cancellation-driven like any other (each timeline's
//! `CancellationToken`), and futures move freely between runtimes: tokio's
//! channels and locks are runtime-agnostic.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

/// Worker threads of the background runtime.
const BACKGROUND_WORKER_THREADS: usize = 2;

/// The background runtime's handle (created on first use).
pub fn handle() -> &'static Handle {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .worker_threads(BACKGROUND_WORKER_THREADS)
                .thread_name("background")
                .enable_all()
                .build()
                .expect("cannot start the background runtime")
        })
        .handle()
}
