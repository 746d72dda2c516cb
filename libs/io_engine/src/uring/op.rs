//! The futures of the ring: `Start` (takes slots, in FIFO order, pushes
//! the SQEs and enters the kernel once) and `Op` (one pushed operation,
//! resolving to its result and buffer). Both are parties of the reaping
//! protocol in `state.rs`; their `Drop` keeps it (an in-flight `Op` leaves
//! its slot abandoned, never freed; a queued `Start` leaves the queue).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::ring::{Request, Ring};
use super::slots::Held;
use super::state::{Deferred, Polled};
use crate::AlignedBuf;

/// One pushed operation. Resolves to the kernel's result (bytes moved, or
/// the errno as an error) and the buffer, if the operation had one.
pub(super) struct Op<'r> {
    ring: &'r Ring,
    state: OpState,
}

enum OpState {
    InFlight(u32),
    /// The SQE could not be pushed; the kernel never saw the buffer.
    Failed(Option<(io::Error, Option<AlignedBuf>)>),
    Finished,
}

pub(super) type OpOutput = (io::Result<usize>, Option<AlignedBuf>);

impl<'r> Op<'r> {
    pub fn in_flight(ring: &'r Ring, slot: u32) -> Op<'r> {
        Op { ring, state: OpState::InFlight(slot) }
    }

    pub fn failed(ring: &'r Ring, e: io::Error, buf: Option<AlignedBuf>) -> Op<'r> {
        Op { ring, state: OpState::Failed(Some((e, buf))) }
    }
}

impl Future for Op<'_> {
    type Output = OpOutput;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OpOutput> {
        let slot = match &mut self.state {
            OpState::InFlight(slot) => *slot,
            OpState::Failed(f) => {
                let (e, buf) = f.take().expect("polled after completion");
                self.state = OpState::Finished;
                return Poll::Ready((Err(e), buf));
            }
            OpState::Finished => panic!("Op polled after completion"),
        };
        let ring = self.ring;
        let mut d = Deferred::default();
        let polled = ring.lock().poll_op(ring.parts(), slot, cx.waker(), &mut d);
        d.run();
        match polled {
            Polled::Ready((result, Held { buf, file })) => {
                self.state = OpState::Finished;
                drop(file);
                let res = if result < 0 {
                    Err(io::Error::from_raw_os_error(-result))
                } else {
                    Ok(result as usize)
                };
                Poll::Ready((res, buf))
            }
            Polled::Pending => Poll::Pending,
            Polled::NoReactor => {
                ring.block_for_completion();
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        let OpState::InFlight(slot) = self.state else { return };
        let mut d = Deferred::default();
        // A poisoned state is left alone: the ring's drop leaks it.
        if let Ok(mut st) = self.ring.state_lock_for_drop() {
            st.drop_op(&self.ring.uring, slot, &mut d);
        }
        d.run();
    }
}

/// What a `Start` pushes: one request (no allocation) or a batch.
pub(super) enum Requests {
    One(Request),
    Many(Vec<Request>),
}

pub(super) enum Started<'r> {
    One(Op<'r>),
    Many(Vec<Op<'r>>),
}

/// Take slots for the requests (waiting, in FIFO order, while too few are
/// free), push them, and enter the kernel once.
pub(super) struct Start<'r> {
    ring: &'r Ring,
    reqs: Option<Requests>,
    /// Its place in the ring's slot queue, once it had to wait.
    key: Option<u32>,
}

impl<'r> Start<'r> {
    pub fn new(ring: &'r Ring, reqs: Requests) -> Start<'r> {
        Start { ring, reqs: Some(reqs), key: None }
    }
}

impl<'r> Future for Start<'r> {
    type Output = Started<'r>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Started<'r>> {
        let ring = self.ring;
        let n = match self.reqs.as_ref().expect("polled after start") {
            Requests::One(_) => 1,
            Requests::Many(v) => v.len(),
        };
        let mut d = Deferred::default();
        let mut st = ring.lock();
        if !st.may_take(self.key, n) {
            let polled = st.wait_for_slots(ring.parts(), &mut self.key, n, cx.waker(), &mut d);
            drop(st);
            d.run();
            if let Polled::NoReactor = polled {
                ring.block_for_completion();
                cx.waker().wake_by_ref();
            }
            return Poll::Pending;
        }
        let started = match self.reqs.take().expect("checked") {
            Requests::One(req) => Started::One(ring.push_locked(&mut st, req, &mut d)),
            Requests::Many(reqs) => Started::Many(
                reqs.into_iter().map(|r| ring.push_locked(&mut st, r, &mut d)).collect(),
            ),
        };
        // After taking the slots: the next in line is woken only if enough remain.
        if let Some(key) = self.key.take() {
            st.leave_queue(&ring.uring, key, &mut d);
        }
        drop(st);
        d.run();
        ring.submit_logged();
        Poll::Ready(started)
    }
}

impl Drop for Start<'_> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut d = Deferred::default();
        if let Ok(mut st) = self.ring.state_lock_for_drop() {
            st.leave_queue(&self.ring.uring, key, &mut d);
        }
        d.run();
    }
}
