//! A ring: the io_uring instance, its eventfd, and the state mutex (whose
//! slot table bounds the operations in flight).
//!
//! Pushing an SQE never enters the kernel by itself: `start` pushes a
//! whole batch under one lock and then calls `io_uring_enter` once.

use std::fs;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use io_uring::types::{Fd, SubmitArgs, Timespec};
use io_uring::{opcode, squeue, IoUring};

use super::op::{Op, Requests, Start, Started};
use super::slots::Held;
use super::state::{Deferred, State};
use super::{
    setup, CANCEL_USER_DATA, DROP_WAIT, MAX_IN_FLIGHT_OPS, MAX_OP_BYTES, SUBMIT_GROUP_OPS,
};
use crate::AlignedBuf;

/// One operation to push: the file, the buffer the slot will own, and what to do.
pub(super) struct Request {
    pub file: Arc<fs::File>,
    pub buf: Option<AlignedBuf>,
    pub kind: Kind,
}

pub(super) enum Kind {
    /// Read into `buf[range]` (of its capacity) from `offset`.
    Read {
        offset: u64,
        range: Range<usize>,
    },
    /// Write `buf[range]` (of its length) at `offset`.
    Write {
        offset: u64,
        range: Range<usize>,
    },
    Fsync,
}

pub(crate) struct Ring {
    pub(super) uring: IoUring,
    pub(super) eventfd: OwnedFd,
    state: Mutex<State>,
    warned_blocking: AtomicBool,
    /// This ring, for the reapers (which must not keep it alive).
    me: Weak<Ring>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("max_in_flight_ops", &MAX_IN_FLIGHT_OPS)
            .finish_non_exhaustive()
    }
}

impl Ring {
    pub fn new() -> io::Result<Arc<Ring>> {
        let (uring, eventfd) = setup::create()?;
        Ok(Arc::new_cyclic(|me| Ring {
            uring,
            eventfd,
            state: Mutex::new(State::new(MAX_IN_FLIGHT_OPS)),
            warned_blocking: AtomicBool::new(false),
            me: me.clone(),
        }))
    }

    /// What the state's waiting calls need of the ring.
    pub(super) fn parts(&self) -> (&IoUring, &OwnedFd, &Weak<Ring>) {
        (&self.uring, &self.eventfd, &self.me)
    }

    /// Reap the CQ and wake the futures whose operations completed (the
    /// reapers' step; a poll does the same as its fast path).
    pub(super) fn reap_and_wake(&self) {
        let mut d = Deferred::default();
        let mut st = self.lock();
        st.settle(&self.uring, &mut d);
        drop(st);
        d.run();
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("io-uring state poisoned by an earlier panic")
    }

    /// The lock for destructors, which must not panic: a poisoned state is
    /// left alone (and leaked by the ring's drop).
    pub(super) fn state_lock_for_drop(&self) -> Result<MutexGuard<'_, State>, ()> {
        self.state.lock().map_err(drop)
    }

    /// Operations whose slot is taken (in flight, or done and not yet
    /// returned to their future). Reaps first, so dropped operations that
    /// completed are not counted.
    pub fn in_flight_ops(&self) -> usize {
        let mut d = Deferred::default();
        let mut st = self.lock();
        st.settle(&self.uring, &mut d);
        let n = st.slots.in_use();
        drop(st);
        d.run();
        n
    }

    /// Push one operation and submit it, once a slot is free.
    pub(super) async fn start_one(&self, req: Request) -> Op<'_> {
        let req = match self.try_start_one(req) {
            Ok(op) => return op,
            Err(req) => req,
        };
        match Start::new(self, Requests::One(req)).await {
            Started::One(op) => op,
            Started::Many(_) => unreachable!("one request"),
        }
    }

    /// The fast path of `start_one`: a slot is free and nobody is queued.
    fn try_start_one(&self, req: Request) -> Result<Op<'_>, Request> {
        let mut d = Deferred::default();
        let mut st = self.lock();
        if !st.may_take(None, 1) {
            return Err(req);
        }
        let op = self.push_locked(&mut st, req, &mut d);
        drop(st);
        d.run();
        self.submit_logged();
        Ok(op)
    }

    /// Push and submit the operations in groups of at most
    /// `SUBMIT_GROUP_OPS`, in order: a group is pushed under one lock once
    /// as many slots are free, then submitted with one `io_uring_enter`
    /// (more only if the SQ fills up), before the next group is pushed. At
    /// most half the slots, so a batch never waits for a full ring.
    pub(super) async fn start(&self, reqs: Vec<Request>) -> Vec<Op<'_>> {
        assert!(reqs.len() <= MAX_IN_FLIGHT_OPS as usize / 2, "batch of {}", reqs.len());
        if reqs.len() <= SUBMIT_GROUP_OPS {
            return self.start_group(reqs).await;
        }
        let mut ops = Vec::with_capacity(reqs.len());
        let mut reqs = reqs.into_iter().peekable();
        while reqs.peek().is_some() {
            let group: Vec<Request> = reqs.by_ref().take(SUBMIT_GROUP_OPS).collect();
            ops.extend(self.start_group(group).await);
        }
        ops
    }

    async fn start_group(&self, reqs: Vec<Request>) -> Vec<Op<'_>> {
        match Start::new(self, Requests::Many(reqs)).await {
            Started::Many(ops) => ops,
            Started::One(_) => unreachable!("a batch"),
        }
    }

    /// Move the request into a slot and push its SQE (the caller holds the lock).
    pub(super) fn push_locked(&self, st: &mut State, mut req: Request, d: &mut Deferred) -> Op<'_> {
        let entry = sqe(&mut req);
        let i = st.slots.insert(Held { buf: req.buf, file: req.file });
        match push(&self.uring, &entry.user_data(u64::from(i))) {
            Ok(()) => Op::in_flight(self, i),
            Err(e) => {
                let Held { buf, file } = st.slots.remove_unsubmitted(i);
                d.garbage.push(Held { buf: None, file });
                Op::failed(self, e, buf)
            }
        }
    }

    /// `io_uring_enter` for whatever is queued. An error leaves the entries
    /// queued: the next waiting future's flush submits them.
    pub(super) fn submit_logged(&self) {
        if let Err(e) = submit(&self.uring) {
            tracing::warn!("io-uring: io_uring_enter failed, will retry: {e}");
        }
    }

    /// Wait in the kernel (at most 1 ms) for a completion: the fallback for
    /// a future polled outside a tokio runtime with IO enabled.
    pub(super) fn block_for_completion(&self) {
        if !self.warned_blocking.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "io-uring engine polled outside a tokio runtime with IO: blocking waits"
            );
        }
        let ts = Timespec::new().nsec(1_000_000);
        // ETIME (timeout) and EINTR are expected; the caller polls again.
        let _ = self.uring.submitter().submit_with_args(1, &SubmitArgs::new().timespec(&ts));
    }
}

/// The SQE of a request, pointing into the buffer the slot will own (the
/// heap memory of an `AlignedBuf` does not move with it).
fn sqe(req: &mut Request) -> squeue::Entry {
    let fd = Fd(req.file.as_raw_fd());
    match &req.kind {
        Kind::Read { offset, range } => {
            let buf = req.buf.as_mut().expect("a read has a buffer");
            let dst = &mut buf.spare_full_mut()[range.clone()];
            assert!(dst.len() <= MAX_OP_BYTES);
            opcode::Read::new(fd, dst.as_mut_ptr(), dst.len() as u32).offset(*offset).build()
        }
        Kind::Write { offset, range } => {
            let src = &req.buf.as_ref().expect("a write has a buffer")[range.clone()];
            assert!(src.len() <= MAX_OP_BYTES);
            opcode::Write::new(fd, src.as_ptr(), src.len() as u32).offset(*offset).build()
        }
        Kind::Fsync => opcode::Fsync::new(fd).build(),
    }
}

/// Push one SQE (the caller holds the state lock); a full SQ is submitted
/// and the push retried once.
fn push(uring: &IoUring, entry: &squeue::Entry) -> io::Result<()> {
    for _ in 0..2 {
        // SAFETY: the SQ is only accessed under the state mutex. The memory
        // and fd the entry points to are owned by its slot until the
        // completion is reaped (see `slots.rs`).
        if unsafe { uring.submission_shared().push(entry) }.is_ok() {
            return Ok(());
        }
        submit(uring)?;
    }
    Err(io::Error::other("io-uring: the submission queue stays full after a submit"))
}

fn submit(uring: &IoUring) -> io::Result<()> {
    loop {
        match uring.submitter().submit() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            res => return res.map(drop),
        }
    }
}

impl Drop for Ring {
    /// Every future is gone (each holds the ring), so the slots still in
    /// use are abandoned operations: cancel them and wait for their
    /// completions; leak what the kernel may still use after `DROP_WAIT`.
    fn drop(&mut self) {
        let st = match self.state.get_mut() {
            Ok(st) => st,
            Err(poisoned) => {
                // The slot table may be inconsistent: free nothing.
                std::mem::forget(std::mem::replace(poisoned.into_inner(), State::new(0)));
                return;
            }
        };
        let mut d = Deferred::default();
        let stops = st.stop_reapers();
        st.reap(&self.uring, &mut d);
        if st.slots.in_use() > 0 {
            cancel_and_wait(&self.uring, st, &mut d);
        }
        let left = st.slots.in_use();
        if left > 0 {
            tracing::warn!(
                "io-uring: {left} operations still in flight at drop: leaking their buffers"
            );
            std::mem::forget(st.drain());
        }
        d.run();
        for stop in stops {
            stop.notify_one();
        }
    }
}

fn cancel_and_wait(uring: &IoUring, st: &mut State, d: &mut Deferred) {
    let in_use: Vec<u32> = st
        .slots
        .iter()
        .filter(|(_, s)| !matches!(s, super::slots::Slot::Free))
        .map(|(i, _)| i)
        .collect();
    for i in in_use {
        let cancel = opcode::AsyncCancel::new(u64::from(i)).build().user_data(CANCEL_USER_DATA);
        if let Err(e) = push(uring, &cancel) {
            tracing::warn!("io-uring: cannot cancel an operation at drop: {e}");
        }
    }
    let deadline = Instant::now() + DROP_WAIT;
    let ts = Timespec::new().nsec(10_000_000);
    while st.slots.in_use() > 0 && Instant::now() < deadline {
        let _ = uring.submitter().submit_with_args(1, &SubmitArgs::new().timespec(&ts));
        st.reap(uring, d);
    }
}
