//! The `io-uring` engine: positional reads, writes and fsyncs through one
//! io_uring per engine, with completions driven from tokio's reactor.
//!
//! What goes through the ring: `read_exact_at`, `write_all_at` (looping on
//! short transfers: a short read before EOF continues, EOF before `len` is
//! `UnexpectedEof` as with std-fs), `sync_all` (`IORING_OP_FSYNC`), and the
//! batch API. What stays synchronous std calls on the calling thread, as in
//! std-fs: `open`, `len`, `set_len` and the namespace operations. By
//! default (`UringInline::Auto`, see `inline.rs`) reads that the page cache
//! serves without blocking, and buffered writes on file systems where
//! io_uring would hand them to a kernel worker thread (ext4), run inline
//! too: the same work io_uring would do, without its overhead.
//!
//! Structure: `setup.rs` creates the ring and words the kernel's refusals;
//! `slots.rs` is the slot table (who owns what while the kernel works);
//! `state.rs` is the state behind the mutex and the reaping protocol;
//! `ring.rs` pushes and submits SQEs and bounds the operations in flight;
//! `op.rs` holds the futures; `file.rs` the transfer loops and batches;
//! `inline.rs` the paths that skip the ring.
//!
//! # Concurrency contract
//!
//! One ring per engine (shared by its clones and files), one mutex over its
//! SQ, CQ and slot table. `io_uring_enter` is called outside the mutex.
//! There is no completion thread and no per-operation thread hop: the
//! kernel signals every completion on an eventfd registered with the ring
//! (`IORING_REGISTER_EVENTFD`), wrapped in a `tokio::io::unix::AsyncFd` per
//! runtime that polls the engine, and **whoever polls reaps**:
//!
//! 1. Submitting: under the mutex a future takes a free slot (in FIFO
//!    order; when `MAX_IN_FLIGHT_OPS` are in use it queues and waits
//!    asynchronously), pushes its SQE and moves its buffer and an `Arc` of
//!    its file into the slot; then it enters the kernel, once per single
//!    operation or once per group of a batch (`SUBMIT_GROUP_OPS`). A full
//!    SQ is submitted and the push retried.
//! 2. Polling: a future reaps the whole CQ (marking slots done and waking
//!    their futures), then returns its result if its own slot is done, or
//!    registers its waker in its slot and returns `Pending`.
//! 3. The poller: tokio's `AsyncFd` wakes only the last waker registered by
//!    `poll_read_ready`, so the ring keeps, per runtime, one waiting future
//!    (the poller) whose waker is registered there after the last reap.
//!    When the poller finishes or is dropped, another waiting future's
//!    waker is registered in its place; an eventfd edge thus always wakes a
//!    future that reaps and wakes the others.
//! 4. Cancellation: a future dropped in flight leaves its slot `Abandoned`;
//!    the slot keeps the buffer and the fd until its completion is reaped
//!    by any later poll, submission or `in_flight_ops()`, then frees them.
//!    Futures queued for a slot are waiting parties too, so slots of
//!    dropped futures are reaped even when nothing else runs.
//! 5. Dropping the last handle to a ring with operations still in flight
//!    cancels them (`IORING_OP_ASYNC_CANCEL`) and waits up to
//!    `DROP_WAIT`; memory the kernel may still use after that is leaked,
//!    never freed.
//!
//! A future that was polled and is then kept without being polled again
//! can hold the poller role: once its registration has fired, no further
//! completion wakes anyone on that runtime until some waiting future is
//! polled for another reason, so other futures' completions can be delayed
//! indefinitely (the same holds for any future holding a lock). Code that
//! awaits several operations at once polls all of them on every wake-up
//! (`join!`, `FuturesUnordered`), never polls one once and then awaits
//! another (a read path built that way stalled in testing). Polled outside a tokio runtime
//! with IO enabled, a waiting future blocks its thread in
//! `io_uring_enter` (in 1 ms rounds) instead of using the reactor.
//!
//! The kernel runs part of an operation's completion (IRQ-completed direct
//! IO, FIFO reads) as task work on the thread that submitted it; an
//! operation submitted from a thread that exits before it completes is
//! cancelled by the kernel (`ECANCELED`). tokio worker threads live as long
//! as their runtime.

mod file;
mod inline;
mod op;
mod ring;
mod setup;
mod slots;
mod state;

pub(crate) use file::{transfer_each, transfer_many, Dir, Transfer, UringFile};
pub(crate) use ring::Ring;

/// Operations in flight per ring (per engine); beyond it, operations wait
/// for a slot.
pub const MAX_IN_FLIGHT_OPS: u32 = 512;
/// SQ entries: smaller than the in-flight bound (a full SQ is submitted
/// and the push retried).
const SQ_ENTRIES: u32 = 128;
/// CQ entries: at least the in-flight bound, so the CQ never overflows.
const CQ_ENTRIES: u32 = MAX_IN_FLIGHT_OPS;
const _: () = assert!(CQ_ENTRIES >= MAX_IN_FLIGHT_OPS && SQ_ENTRIES.is_power_of_two());
/// The most operations of a batch pushed together; a larger batch is run
/// in chunks, each awaited before the next. A chunk is submitted with one
/// `io_uring_enter` when it fits the SQ, else with one per SQ-full.
const BATCH_MAX_OPS: usize = 2 * SQ_ENTRIES as usize;
const _: () = assert!(BATCH_MAX_OPS <= MAX_IN_FLIGHT_OPS as usize / 2);
/// Operations of a batch submitted per `io_uring_enter`. Inside the call
/// the kernel prepares each direct-IO read (~4 µs here) and holds the
/// prepared ones back (plugged) until the call ends, so one call for 32
/// reads would start the device on the first ~130 µs late, and the device
/// here serves reads that arrive a few at a time faster than a burst (fio,
/// 32 in flight, all completions awaited: 0.94 of continuous fio submitting
/// 2 per call, 0.72 submitting 32). Groups of 2 against 8: 1.08x cold
/// reads at depth 32 (docs/benchmarks.md, cold reads).
const SUBMIT_GROUP_OPS: usize = 2;
/// The largest transfer of one SQE; longer ones are split.
const MAX_OP_BYTES: usize = 1 << 30;
/// `user_data` of cancellation SQEs (slot indices are below `MAX_IN_FLIGHT_OPS`).
const CANCEL_USER_DATA: u64 = u64::MAX;
/// How long dropping a ring waits for the cancelled operations.
const DROP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
