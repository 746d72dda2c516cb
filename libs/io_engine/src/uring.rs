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
//! `reaper.rs` the per-runtime tasks that reap on their own;
//! `ring.rs` pushes and submits SQEs and bounds the operations in flight;
//! `op.rs` holds the futures; `file.rs` the transfer loops and batches;
//! `inline.rs` the paths that skip the ring.
//!
//! # Concurrency contract
//!
//! One ring per engine (shared by its clones and files), one mutex over its
//! SQ, CQ and slot table. `io_uring_enter` is called outside the mutex.
//! There is no completion thread: the kernel signals every completion on
//! an eventfd registered with the ring (`IORING_REGISTER_EVENTFD`), and
//! completions are reaped two ways:
//!
//! - by a **reaper**, a task per tokio runtime whose futures wait on the
//!   ring, woken by that eventfd through the runtime's reactor (an
//!   `AsyncFd` per runtime): it reaps the whole CQ and wakes every future
//!   whose operation completed. This is what makes the engine live: a
//!   waiting future needs nothing but its waker, so no caller's polling
//!   pattern (a future polled once and then kept, a `select!` that drops
//!   or starves a branch) can delay another's operation.
//! - by any poll, as the fast path: a polled future reaps the CQ first
//!   and returns at once if its own operation is done.
//!
//! The protocol:
//!
//! 1. Submitting: under the mutex a future takes a free slot (in FIFO
//!    order; when `MAX_IN_FLIGHT_OPS` are in use it queues and waits
//!    asynchronously), pushes its SQE and moves its buffer and an `Arc` of
//!    its file into the slot; then it enters the kernel, once per single
//!    operation or once per group of a batch (`SUBMIT_GROUP_OPS`). A full
//!    SQ is submitted and the push retried.
//! 2. Polling: a future reaps the whole CQ (marking slots done and waking
//!    their futures), then returns its result if its own slot is done, or
//!    stores its waker in its slot and returns `Pending`. The first time a
//!    future of a runtime waits, the eventfd is registered with that
//!    runtime's reactor and its reaper is spawned.
//! 3. Reapers: a runtime's reaper lives while its registration does. A
//!    registration nobody of its runtime waits on is dropped (and its
//!    reaper stopped) when another runtime registers, so an idle runtime
//!    is not woken by every completion of another's; a runtime whose
//!    reaper ended (its reactor shut down) has its waiting futures woken,
//!    to register again where they are polled next.
//! 4. Cancellation: a future dropped in flight leaves its slot `Abandoned`;
//!    the slot keeps the buffer and the fd until its completion is reaped
//!    (by a reaper, a poll, a submission or `in_flight_ops()`), then frees
//!    them.
//! 5. Dropping the last handle to a ring stops its reapers and, with
//!    operations still in flight, cancels them (`IORING_OP_ASYNC_CANCEL`)
//!    and waits up to `DROP_WAIT`; memory the kernel may still use after
//!    that is leaked, never freed.
//!
//! Polled outside a tokio runtime with IO enabled, a waiting future blocks
//! its thread in `io_uring_enter` (in 1 ms rounds) instead of using the
//! reactor: there it is its own reaper.
//!
//! The kernel runs part of an operation's completion (IRQ-completed direct
//! IO, FIFO reads) as task work on the thread that submitted it; an
//! operation submitted from a thread that exits before it completes is
//! cancelled by the kernel (`ECANCELED`). tokio worker threads live as long
//! as their runtime.

mod file;
mod inline;
mod op;
mod reaper;
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
