//! The futures of the ring: `Op` (one pushed operation, resolving to its
//! result and buffer) and `SlotWait` (waiting for slot permits). Both are
//! parties of the reaping protocol in `state.rs`; their `Drop` keeps it
//! (an in-flight `Op` leaves its slot abandoned, never freed).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{AcquireError, OwnedSemaphorePermit};

use super::ring::Ring;
use super::slots::Held;
use super::state::{Deferred, Polled};
use crate::AlignedBuf;

/// One pushed operation. Resolves to the kernel's result (bytes moved, or
/// the errno as an error) and the buffer, if the operation had one.
pub(super) struct Op {
    ring: Arc<Ring>,
    state: OpState,
}

enum OpState {
    InFlight(u32),
    /// The SQE could not be pushed; the kernel never saw the buffer.
    Failed(Option<(io::Error, Option<AlignedBuf>)>),
    Finished,
}

pub(super) type OpOutput = (io::Result<usize>, Option<AlignedBuf>);

impl Op {
    pub fn in_flight(ring: Arc<Ring>, slot: u32) -> Op {
        Op { ring, state: OpState::InFlight(slot) }
    }

    pub fn failed(ring: Arc<Ring>, e: io::Error, buf: Option<AlignedBuf>) -> Op {
        Op { ring, state: OpState::Failed(Some((e, buf))) }
    }
}

impl Future for Op {
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
        let ring = &self.ring;
        let mut d = Deferred::default();
        let polled = ring.lock().poll_op(&ring.uring, &ring.eventfd, slot, cx.waker(), &mut d);
        d.run();
        match polled {
            Polled::Ready((result, Held { buf, file, permit })) => {
                self.state = OpState::Finished;
                drop((file, permit));
                let res = if result < 0 {
                    Err(io::Error::from_raw_os_error(-result))
                } else {
                    Ok(result as usize)
                };
                Poll::Ready((res, buf))
            }
            Polled::Pending => Poll::Pending,
            Polled::NoReactor => {
                self.ring.block_for_completion();
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

impl Drop for Op {
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

type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// Waiting for slot permits while the ring is full. While it waits it is a
/// party of the reaping protocol: it reaps, so slots of dropped operations
/// are freed even if no other future polls the ring.
pub(super) struct SlotWait {
    ring: Arc<Ring>,
    acquire: Acquire,
    /// Its key among the ring's slot waiters, once it has waited.
    key: Option<u32>,
}

impl SlotWait {
    pub fn new(ring: Arc<Ring>, acquire: Acquire) -> SlotWait {
        SlotWait { ring, acquire, key: None }
    }

    fn unregister(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut d = Deferred::default();
        if let Ok(mut st) = self.ring.state_lock_for_drop() {
            st.remove_slot_waiter(&self.ring.uring, key, &mut d);
        }
        d.run();
    }
}

impl Future for SlotWait {
    type Output = OwnedSemaphorePermit;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OwnedSemaphorePermit> {
        if let Poll::Ready(permit) = self.acquire.as_mut().poll(cx) {
            self.unregister();
            return Poll::Ready(permit.expect("the slot semaphore is never closed"));
        }
        let this = &mut *self;
        let ring = &this.ring;
        let mut d = Deferred::default();
        let polled = ring.lock().poll_slot_waiter(
            &ring.uring,
            &ring.eventfd,
            &mut this.key,
            cx.waker(),
            &mut d,
        );
        // Reaping may free slots: their permits go to the semaphore here,
        // which wakes this future if it is first in line.
        d.run();
        if let Polled::NoReactor = polled {
            ring.block_for_completion();
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl Drop for SlotWait {
    fn drop(&mut self) {
        self.unregister();
    }
}
