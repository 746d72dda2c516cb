//! The state of a ring behind its mutex: the slot table, the queue of
//! futures waiting for slots, the per-runtime eventfd registrations, and
//! the protocol that makes whoever polls reap (see the module doc of
//! `uring`).
//!
//! Invariants, true whenever the mutex is released:
//! - every reaped completion has been applied to its slot (`reap` runs
//!   before any decision);
//! - slots are taken in FIFO order: a request takes slots directly only
//!   when nobody is queued, else it queues (`may_take`); when the first in
//!   line can have its slots it is woken (`wake_queue_front`);
//! - `Reg::waiting` counts the waiting parties of that runtime: in-flight
//!   slots with a waiter, and queued slot waiters registered with it;
//! - (the poller invariant) a registration with waiting parties has a
//!   `poller`: one of them, whose waker is registered with the
//!   registration's `AsyncFd` by a `poll_read_ready` that returned
//!   `Pending` after the last reap. So the next completion, which signals
//!   the eventfd, wakes a party that will reap.
//!
//! Wakers are never called and resources never dropped under the mutex:
//! they are collected in `Deferred` and released after it.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::task::{Context, Poll, Waker};

use io_uring::IoUring;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::runtime;

use super::slots::{Completed, Held, Slot, Slots, Waiter};
use super::CANCEL_USER_DATA;

/// A party that waits on the ring: an operation's future, or a future
/// waiting for a slot (by its key in `slot_waiters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Party {
    Op(u32),
    SlotWaiter(u32),
}

/// The ring's eventfd registered with one runtime's reactor.
struct Reg {
    rt: runtime::Id,
    fd: AsyncFd<OwnedFd>,
    poller: Option<Party>,
    waiting: usize,
}

/// A future waiting for `needed` free slots. `rt` is set while it is a
/// waiting party registered with that runtime's reactor.
struct SlotWaiter {
    waker: Waker,
    needed: usize,
    rt: Option<runtime::Id>,
}

/// Wakers to call and resources to drop once the state mutex is released.
/// Each wake names its party: several parties may share one waker (the
/// futures of one task under `join_all`), so a wake is skipped only for
/// the very party being polled, never because its waker looks the same.
#[derive(Default)]
pub(super) struct Deferred {
    pub wakes: Vec<(Party, Waker)>,
    pub garbage: Vec<Held>,
}

impl Deferred {
    pub fn run(self) {
        drop(self.garbage);
        for (_, w) in self.wakes {
            w.wake();
        }
    }
}

/// The outcome of polling a party.
pub(super) enum Polled<T> {
    Ready(T),
    Pending,
    /// Not inside a tokio runtime with IO enabled: the caller waits by blocking.
    NoReactor,
}

pub(super) struct State {
    pub slots: Slots,
    /// Slot waiters by key; `slot_queue` holds their keys in FIFO order.
    slot_waiters: Vec<Option<SlotWaiter>>,
    free_waiter_keys: Vec<u32>,
    slot_queue: VecDeque<u32>,
    regs: Vec<Reg>,
}

impl State {
    pub fn new(max_in_flight: u32) -> State {
        State {
            slots: Slots::new(max_in_flight),
            slot_waiters: Vec::new(),
            free_waiter_keys: Vec::new(),
            slot_queue: VecDeque::new(),
            regs: Vec::new(),
        }
    }

    /// Apply every completion in the CQ to its slot.
    pub fn reap(&mut self, uring: &IoUring, d: &mut Deferred) {
        // SAFETY: the CQ is only accessed here, under the state mutex.
        let cq = unsafe { uring.completion_shared() };
        for cqe in cq {
            if cqe.user_data() == CANCEL_USER_DATA {
                continue;
            }
            let i = u32::try_from(cqe.user_data()).expect("user_data is a slot index");
            match self.slots.complete(i, cqe.result()) {
                Completed::Done(Some(w)) => {
                    stop_waiting(&mut self.regs, Party::Op(i), w.rt);
                    d.wakes.push((Party::Op(i), w.waker));
                }
                Completed::Done(None) => {}
                Completed::Freed(held) => d.garbage.push(held),
            }
        }
    }

    /// Submit SQEs that were pushed but not yet seen by the kernel (a
    /// pusher between its push and its `io_uring_enter`, or an enter that
    /// failed), so nobody waits for an operation that was never submitted.
    fn flush(&self, uring: &IoUring) {
        // SAFETY: the SQ is only accessed under the state mutex.
        let pending = unsafe { uring.submission_shared() }.len();
        if pending > 0 {
            // An error leaves the entries queued for the next flush.
            let _ = uring.submitter().submit();
        }
    }

    /// Reap, then restore the poller invariant for every registration.
    pub fn settle(&mut self, uring: &IoUring, d: &mut Deferred) {
        loop {
            self.reap(uring, d);
            if !self.arm_pollers(d) {
                break;
            }
        }
        self.wake_queue_front(d);
        debug_assert!(self.consistent());
    }

    /// Arm a poller for each registration that has waiting parties but
    /// none armed. Returns true if the eventfd was found ready (and the
    /// readiness cleared): completions arrived since the last reap.
    fn arm_pollers(&mut self, d: &mut Deferred) -> bool {
        let mut found_ready = false;
        let mut r = 0;
        while r < self.regs.len() {
            if self.regs[r].poller.is_some() || self.regs[r].waiting == 0 {
                r += 1;
                continue;
            }
            let (party, waker) = self.pick_waiting(self.regs[r].rt).expect("waiting count");
            let reg = &mut self.regs[r];
            match reg.fd.poll_read_ready(&mut Context::from_waker(&waker)) {
                Poll::Pending => reg.poller = Some(party),
                Poll::Ready(Ok(mut guard)) => {
                    guard.clear_ready();
                    drain_eventfd(reg.fd.get_ref());
                    found_ready = true;
                }
                Poll::Ready(Err(e)) => {
                    // The runtime's reactor is gone: its parties register
                    // again wherever they are polled next.
                    tracing::debug!("io-uring: dropping the eventfd registration: {e}");
                    let rt = reg.rt;
                    self.regs.remove(r);
                    self.unregister_all_of(rt, d);
                    continue;
                }
            }
            r += 1;
        }
        found_ready
    }

    /// A waiting party of runtime `rt`, with a clone of its waker.
    fn pick_waiting(&self, rt: runtime::Id) -> Option<(Party, Waker)> {
        let op = self.slots.iter().find_map(|(i, s)| match s {
            Slot::InFlight { waiter: Some(w), .. } if w.rt == rt => {
                Some((Party::Op(i), w.waker.clone()))
            }
            _ => None,
        });
        op.or_else(|| {
            self.slot_waiters.iter().enumerate().find_map(|(k, w)| match w {
                Some(w) if w.rt == Some(rt) => Some((Party::SlotWaiter(k as u32), w.waker.clone())),
                _ => None,
            })
        })
    }

    /// Wake and unregister every party of `rt` (its registration is gone).
    fn unregister_all_of(&mut self, rt: runtime::Id, d: &mut Deferred) {
        for i in 0..self.slots.capacity() as u32 {
            if let Slot::InFlight { waiter, .. } = self.slots.get_mut(i) {
                if waiter.as_ref().is_some_and(|w| w.rt == rt) {
                    d.wakes.push((Party::Op(i), waiter.take().expect("checked").waker));
                }
            }
        }
        for (k, w) in self.slot_waiters.iter_mut().enumerate() {
            let Some(w) = w.as_mut() else { continue };
            if w.rt == Some(rt) {
                w.rt = None;
                d.wakes.push((Party::SlotWaiter(k as u32), w.waker.clone()));
            }
        }
    }

    /// The id of the current runtime, with the eventfd registered with its
    /// reactor (registered on first use). None outside a runtime with IO.
    fn current_reg(&mut self, eventfd: &OwnedFd) -> Option<runtime::Id> {
        let rt = runtime::Handle::try_current().ok()?.id();
        if self.regs.iter().any(|r| r.rt == rt) {
            return Some(rt);
        }
        // Registrations nobody waits on are dropped first, so runtimes that
        // come and go (tests) do not pile up registrations, and an idle
        // runtime's reactor (the daemon's, beside a page service connection
        // thread) is not woken by every completion of another's.
        self.regs.retain(|r| r.waiting > 0);
        let fd = register(eventfd)?;
        self.regs.push(Reg { rt, fd, poller: None, waiting: 0 });
        Some(rt)
    }

    /// Poll the future of slot `i` (an operation in flight or done).
    pub fn poll_op(
        &mut self,
        uring: &IoUring,
        eventfd: &OwnedFd,
        i: u32,
        waker: &Waker,
        d: &mut Deferred,
    ) -> Polled<(i32, Held)> {
        // The polled party stops waiting first: a reap must not wake it,
        // and if it was the poller its registration may have fired.
        self.set_op_waiter(i, None);
        self.reap(uring, d);
        let mut reactor = true;
        if matches!(self.slots.get(i), Slot::InFlight { .. }) {
            match self.current_reg(eventfd) {
                Some(rt) => {
                    self.flush(uring);
                    self.set_op_waiter(i, Some(Waiter { waker: waker.clone(), rt }));
                }
                None => reactor = false,
            }
        }
        self.settle(uring, d);
        match self.slots.take_done(i) {
            Some(done) => {
                // Its own completion needs no wake: it is being polled.
                d.wakes.retain(|(p, _)| *p != Party::Op(i));
                self.wake_queue_front(d);
                Polled::Ready(done)
            }
            None if reactor => Polled::Pending,
            None => Polled::NoReactor,
        }
    }

    /// The future of slot `i` is dropped.
    pub fn drop_op(&mut self, uring: &IoUring, i: u32, d: &mut Deferred) {
        self.set_op_waiter(i, None);
        if let Some(held) = self.slots.abandon(i) {
            d.garbage.push(held);
        }
        self.settle(uring, d);
    }

    /// Whether a request for `n` slots may take them now: nobody is queued
    /// ahead of it (`key`: its place in the queue, if it queued) and `n`
    /// slots are free.
    pub fn may_take(&self, key: Option<u32>, n: usize) -> bool {
        let first = match key {
            None => self.slot_queue.is_empty(),
            Some(k) => self.slot_queue.front() == Some(&k),
        };
        first && self.slots.free_count() >= n
    }

    /// A request for `n` slots could not take them: queue it (first call)
    /// and make it a waiting party (so it reaps, which frees slots of
    /// dropped futures even if nothing else polls the ring).
    pub fn wait_for_slots(
        &mut self,
        uring: &IoUring,
        eventfd: &OwnedFd,
        key: &mut Option<u32>,
        n: usize,
        waker: &Waker,
        d: &mut Deferred,
    ) -> Polled<()> {
        let k = *key.get_or_insert_with(|| self.enqueue(n, waker));
        self.set_slot_waiter_rt(k, None);
        let w = self.slot_waiters[k as usize].as_mut().expect("queued");
        if !w.waker.will_wake(waker) {
            w.waker = waker.clone();
        }
        let reactor = match self.current_reg(eventfd) {
            Some(rt) => {
                self.flush(uring);
                self.set_slot_waiter_rt(k, Some(rt));
                true
            }
            None => false,
        };
        self.settle(uring, d);
        if reactor {
            Polled::Pending
        } else {
            Polled::NoReactor
        }
    }

    fn enqueue(&mut self, n: usize, waker: &Waker) -> u32 {
        let k = self.free_waiter_keys.pop().unwrap_or_else(|| {
            self.slot_waiters.push(None);
            (self.slot_waiters.len() - 1) as u32
        });
        self.slot_waiters[k as usize] =
            Some(SlotWaiter { waker: waker.clone(), needed: n, rt: None });
        self.slot_queue.push_back(k);
        k
    }

    /// A queued request took its slots, or was dropped: it leaves the
    /// queue, and the next in line is woken if its slots are free.
    pub fn leave_queue(&mut self, uring: &IoUring, key: u32, d: &mut Deferred) {
        self.set_slot_waiter_rt(key, None);
        self.slot_waiters[key as usize] = None;
        self.free_waiter_keys.push(key);
        let pos = self.slot_queue.iter().position(|&k| k == key).expect("queued");
        self.slot_queue.remove(pos);
        self.settle(uring, d);
    }

    /// Wake the first queued request if its slots are free.
    fn wake_queue_front(&self, d: &mut Deferred) {
        let Some(&k) = self.slot_queue.front() else { return };
        let w = self.slot_waiters[k as usize].as_ref().expect("queued");
        if self.slots.free_count() >= w.needed {
            d.wakes.push((Party::SlotWaiter(k), w.waker.clone()));
        }
    }

    fn set_op_waiter(&mut self, i: u32, new: Option<Waiter>) {
        let Slot::InFlight { waiter, .. } = self.slots.get_mut(i) else {
            assert!(new.is_none(), "slot {i} is not in flight");
            return;
        };
        let old = std::mem::replace(waiter, new);
        let new_rt = waiter.as_ref().map(|w| w.rt);
        switch_waiting(&mut self.regs, Party::Op(i), old.map(|w| w.rt), new_rt);
    }

    fn set_slot_waiter_rt(&mut self, k: u32, new: Option<runtime::Id>) {
        let w = self.slot_waiters[k as usize].as_mut().expect("queued");
        let old = std::mem::replace(&mut w.rt, new);
        switch_waiting(&mut self.regs, Party::SlotWaiter(k), old, new);
    }

    /// Check the counting and poller invariants (debug builds).
    fn consistent(&self) -> bool {
        for reg in &self.regs {
            let ops = self.slots.iter().filter(
                |(_, s)| matches!(s, Slot::InFlight { waiter: Some(w), .. } if w.rt == reg.rt),
            );
            let waiters = self.slot_waiters.iter().flatten().filter(|w| w.rt == Some(reg.rt));
            let n = ops.count() + waiters.count();
            assert_eq!(n, reg.waiting, "waiting parties of a runtime");
            assert_eq!(reg.poller.is_some(), n > 0, "a poller exactly when parties wait");
        }
        true
    }

    /// Every slot's resources, for the ring's drop.
    pub fn drain(&mut self) -> Vec<Held> {
        self.regs.clear();
        self.slots.drain()
    }
}

/// Move a party's count from runtime `old` to `new`; it stops being a
/// poller (its waker may change, and a poller must be re-armed).
fn switch_waiting(
    regs: &mut [Reg],
    party: Party,
    old: Option<runtime::Id>,
    new: Option<runtime::Id>,
) {
    if let Some(rt) = old {
        stop_waiting(regs, party, rt);
    }
    if let Some(rt) = new {
        let reg = regs.iter_mut().find(|r| r.rt == rt).expect("registered before waiting");
        reg.waiting += 1;
    }
}

fn stop_waiting(regs: &mut [Reg], party: Party, rt: runtime::Id) {
    // The registration is gone if its reactor shut down (unregister_all_of).
    let Some(reg) = regs.iter_mut().find(|r| r.rt == rt) else { return };
    assert!(reg.waiting > 0, "waiting count underflow");
    reg.waiting -= 1;
    if reg.poller == Some(party) {
        reg.poller = None;
    }
}

/// A duplicate of the eventfd registered with the current runtime's
/// reactor; None (logged) if that fails. tokio panics when the runtime has
/// IO disabled: caught here, so the state mutex is not poisoned (the
/// caller then waits by blocking).
fn register(eventfd: &OwnedFd) -> Option<AsyncFd<OwnedFd>> {
    let dup = eventfd.try_clone().ok()?;
    // SAFETY: `dup` is an open descriptor owned by the AsyncFd for its whole life.
    let reg = || unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(reg)) {
        Ok(Ok(fd)) => Some(fd),
        Ok(Err(e)) => {
            tracing::warn!("io-uring: cannot register the eventfd with the runtime: {e}");
            None
        }
        Err(_) => {
            tracing::warn!("io-uring: the tokio runtime has IO disabled: waits block the thread");
            None
        }
    }
}

/// Reset the eventfd's counter (tokio's readiness is edge-triggered; the
/// value itself carries nothing: the CQ is the truth).
fn drain_eventfd(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a u64 we own; the fd is a non-blocking eventfd.
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}
