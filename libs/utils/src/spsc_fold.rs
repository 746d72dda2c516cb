//! `spsc_fold`: a single-producer single-consumer channel whose buffer is one
//! *pending value* into which the sender folds new items.
//!
//! It is the hand-off between the page service's request reader and its
//! executor: while the executor is busy, the reader folds incoming getpage
//! requests into the pending batch; when the executor becomes free it takes the
//! whole batch at once. No timers are involved: batches only form while the
//! consumer is busy.
//!
//! Semantics:
//! - [`Sender::send`] puts the item as the pending value if there is none.
//!   Otherwise it calls the caller's `try_fold(&mut pending, item)`; `Ok` means
//!   the item was merged into the pending value, `Err(item)` hands it back and
//!   `send` then waits until the receiver has taken the pending value, and puts
//!   the item there. A refused item is never offered to `try_fold` again.
//! - [`Receiver::recv`] takes the whole pending value, waiting while there is
//!   none. [`Receiver::recv_if`] takes it only once it is ready by the
//!   caller's measure or can no longer grow (a fold was refused, or the
//!   sender is gone); every fold, and every refusal, wakes a receiver
//!   waiting so.
//! - Dropping the sender: the receiver still gets the pending value (if any),
//!   then [`RecvError::SenderGone`].
//! - Dropping the receiver: the pending value is dropped, and every current or
//!   future `send` fails with [`SendError::ReceiverGone`], which returns the item.
//! - Dropping a `send` future that is waiting drops its item; the channel stays
//!   usable.
//!
//! Invariants: at most one value is buffered; every state change that can
//! unblock the other side wakes the waker that side registered on its *latest*
//! poll (wakers are replaced on every poll, so a task that moved or re-polled
//! with a new waker is never lost). The lock is held only for short, non-async
//! critical sections and never while calling a waker or dropping a value.

use std::fmt;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Error of [`Sender::send`]: the receiver is gone; the unsent item is returned.
#[derive(PartialEq, Eq)]
pub enum SendError<T> {
    ReceiverGone(T),
}

// Manual impls: the error must be usable (`unwrap`, `?` into anyhow) whatever `T` is.
impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReceiverGone(..)")
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("spsc_fold receiver is gone")
    }
}

impl<T> std::error::Error for SendError<T> {}

impl<T> SendError<T> {
    pub fn into_inner(self) -> T {
        match self {
            SendError::ReceiverGone(v) => v,
        }
    }
}

/// Error of [`Receiver::recv`]: the sender is gone and nothing is pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    #[error("spsc_fold sender is gone")]
    SenderGone,
}

struct State<T> {
    pending: Option<T>,
    sender_alive: bool,
    receiver_alive: bool,
    /// Registered by a `recv` that found nothing pending, or a `recv_if`
    /// whose pending value was not ready.
    rx_waker: Option<Waker>,
    /// Registered by a `send` whose fold was refused.
    tx_waker: Option<Waker>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock cannot leave the state inconsistent
        // (every critical section is a handful of field assignments), so a
        // poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The producing half. `send` takes `&mut self`: one send in flight at a time.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The consuming half. `recv` takes `&mut self`: one recv in flight at a time.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// Creates a connected sender/receiver pair with nothing pending.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            pending: None,
            sender_alive: true,
            receiver_alive: true,
            rx_waker: None,
            tx_waker: None,
        }),
    });
    (Sender { shared: Arc::clone(&shared) }, Receiver { shared })
}

/// Stores `cx`'s waker in `slot` unless the one already there wakes the same task.
fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl<T> Sender<T> {
    /// Folds `item` into the pending value, or makes it the pending value.
    ///
    /// `try_fold(pending, item)` returns `Ok(())` once it has merged `item`
    /// into `pending`, or `Err(item)` to refuse; after a refusal this waits
    /// until the receiver takes the pending value. It is called under the
    /// channel's lock, so it must be quick and must not touch the channel.
    ///
    /// Cancel safety: dropping the returned future before it completes drops
    /// `item` (unless it was already placed or folded); the channel stays usable.
    pub async fn send<F>(&mut self, item: T, mut try_fold: F) -> Result<(), SendError<T>>
    where
        F: FnMut(&mut T, T) -> Result<(), T>,
    {
        let mut item = Some(item);
        // Set once `try_fold` refused: from then on only an empty slot will do.
        let mut refused = false;
        poll_fn(|cx| self.poll_send(cx, &mut item, &mut refused, &mut try_fold)).await
    }

    fn poll_send<F>(
        &mut self,
        cx: &mut Context<'_>,
        item: &mut Option<T>,
        refused: &mut bool,
        try_fold: &mut F,
    ) -> Poll<Result<(), SendError<T>>>
    where
        F: FnMut(&mut T, T) -> Result<(), T>,
    {
        let mut st = self.shared.lock();
        let value = item.take().expect("poll_send polled after completion");
        if !st.receiver_alive {
            return Poll::Ready(Err(SendError::ReceiverGone(value)));
        }
        match st.pending.as_mut() {
            None => {
                st.pending = Some(value);
                // The receiver may be parked on an empty slot.
                let waker = st.rx_waker.take();
                drop(st);
                if let Some(w) = waker {
                    w.wake();
                }
                Poll::Ready(Ok(()))
            }
            Some(pending) if !*refused => match try_fold(pending, value) {
                // Only a `recv_if` that found the value not ready yet is
                // registered now: the value grew, it looks again.
                Ok(()) => {
                    let waker = st.rx_waker.take();
                    drop(st);
                    if let Some(w) = waker {
                        w.wake();
                    }
                    Poll::Ready(Ok(()))
                }
                Err(value) => {
                    *refused = true;
                    *item = Some(value);
                    register(&mut st.tx_waker, cx);
                    // A `recv_if` waiting for the value to grow takes it now.
                    let waker = st.rx_waker.take();
                    drop(st);
                    if let Some(w) = waker {
                        w.wake();
                    }
                    Poll::Pending
                }
            },
            Some(_) => {
                // Already refused and the receiver has not taken the pending
                // value yet (spurious wake or re-poll): keep waiting, with the
                // waker of this poll.
                *item = Some(value);
                register(&mut st.tx_waker, cx);
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.sender_alive = false;
        st.tx_waker = None;
        let waker = st.rx_waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// Takes the pending value, waiting until there is one.
    ///
    /// After the sender is dropped, a pending value is still returned once;
    /// then `Err(RecvError::SenderGone)`. Cancel safe: a dropped `recv`
    /// future takes nothing.
    pub async fn recv(&mut self) -> Result<T, RecvError> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Poll form of [`Receiver::recv`].
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RecvError>> {
        let mut st = self.shared.lock();
        if let Some(value) = st.pending.take() {
            // A sender whose fold was refused waits for exactly this.
            let waker = st.tx_waker.take();
            drop(st);
            if let Some(w) = waker {
                w.wake();
            }
            return Poll::Ready(Ok(value));
        }
        if !st.sender_alive {
            return Poll::Ready(Err(RecvError::SenderGone));
        }
        register(&mut st.rx_waker, cx);
        Poll::Pending
    }

    /// Takes the pending value once `ready(&pending)` holds, or once it
    /// can no longer grow: a fold into it was refused (the sender waits),
    /// or the sender is gone. Waits otherwise. Errors and cancel safety as
    /// [`Receiver::recv`].
    pub async fn recv_if(&mut self, ready: impl Fn(&T) -> bool) -> Result<T, RecvError> {
        poll_fn(|cx| self.poll_recv_if(cx, &ready)).await
    }

    fn poll_recv_if(
        &mut self,
        cx: &mut Context<'_>,
        ready: impl Fn(&T) -> bool,
    ) -> Poll<Result<T, RecvError>> {
        let st = self.shared.lock();
        let full = st.tx_waker.is_some() || !st.sender_alive;
        match &st.pending {
            Some(pending) if !full && !ready(pending) => {
                let mut st = st;
                register(&mut st.rx_waker, cx);
                Poll::Pending
            }
            _ => {
                drop(st);
                self.poll_recv(cx)
            }
        }
    }

    /// Takes the pending value without waiting, if there is one.
    pub fn try_recv(&mut self) -> Option<T> {
        let mut st = self.shared.lock();
        let value = st.pending.take();
        let waker = if value.is_some() { st.tx_waker.take() } else { None };
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        value
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.receiver_alive = false;
        st.rx_waker = None;
        let pending = st.pending.take();
        let waker = st.tx_waker.take();
        drop(st);
        // Drop the value outside the lock: its destructor may do anything.
        drop(pending);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests;
