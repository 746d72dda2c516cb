//! The state of a ring behind its mutex: the slot table, the queue of
//! futures waiting for slots, the per-runtime eventfd registrations (each
//! with its reaper, `reaper.rs`), and the reaping protocol (see the module
//! doc of `uring`).
//!
//! Invariants, true whenever the mutex is released:
//! - every reaped completion has been applied to its slot (`reap` runs
//!   before any decision);
//! - slots are taken in FIFO order: a request takes slots directly only
//!   when nobody is queued, else it queues (`may_take`); when the first in
//!   line can have its slots it is woken (`wake_queue_front`);
//! - `Reg::waiting` counts the waiting parties of that runtime: in-flight
//!   slots with a waiter, and queued slot waiters registered with it;
//! - (the liveness invariant) a party waits only with a registration of
//!   its runtime, and every registration has a reaper that was spawned or
//!   is about to be (in the `Deferred` of the call that created it). A
//!   reaper that ends removes its registration and wakes that runtime's
//!   parties. So the next completion, which signals the eventfd, wakes a
//!   reaper that reaps and wakes the party, whatever the parties' own
//!   futures do.
//!
//! Wakers are never called, tasks never spawned or stopped and resources
//! never dropped under the mutex: they are collected in `Deferred` and
//! released after it.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Weak};
use std::task::Waker;

use io_uring::IoUring;
use tokio::runtime;
use tokio::sync::Notify;

use super::reaper::{register, Reaper};
use super::ring::Ring;
use super::slots::{Completed, Held, Slot, Slots, Waiter};
use super::CANCEL_USER_DATA;

/// A party that waits on the ring: an operation's future, or a future
/// waiting for a slot (by its key in `slot_waiters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Party {
    Op(u32),
    SlotWaiter(u32),
}

/// The ring's eventfd registered with one runtime's reactor: its reaper
/// task owns the `AsyncFd`.
struct Reg {
    rt: runtime::Id,
    /// Tells the reaper of this registration from a later one of `rt`.
    key: u64,
    /// Ends the reaper (a permit is kept if it is not waiting yet).
    stop: Arc<Notify>,
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
    reapers: Vec<Reaper>,
    stops: Vec<Arc<Notify>>,
}

impl Deferred {
    pub fn run(self) {
        drop(self.garbage);
        for stop in self.stops {
            stop.notify_one();
        }
        for reaper in self.reapers {
            reaper.spawn();
        }
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
    next_reg_key: u64,
}

impl State {
    pub fn new(max_in_flight: u32) -> State {
        State {
            slots: Slots::new(max_in_flight),
            slot_waiters: Vec::new(),
            free_waiter_keys: Vec::new(),
            slot_queue: VecDeque::new(),
            regs: Vec::new(),
            next_reg_key: 0,
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
                    stop_waiting(&mut self.regs, w.rt);
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

    /// Reap, and wake the first queued request if its slots are free.
    pub fn settle(&mut self, uring: &IoUring, d: &mut Deferred) {
        self.reap(uring, d);
        self.wake_queue_front(d);
        debug_assert!(self.consistent());
    }

    /// The reaper of registration `key` of `rt` ended: that registration
    /// is gone (if it is still the current one), its parties are woken to
    /// register again.
    pub fn reaper_gone(&mut self, rt: runtime::Id, key: u64, d: &mut Deferred) {
        let Some(r) = self.regs.iter().position(|r| r.rt == rt && r.key == key) else { return };
        self.regs.remove(r);
        self.unregister_all_of(rt, d);
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
    /// reactor and a reaper for it (both on first use; the reaper is
    /// spawned by `d`). None outside a runtime with IO.
    fn current_reg(
        &mut self,
        eventfd: &OwnedFd,
        ring: &Weak<Ring>,
        d: &mut Deferred,
    ) -> Option<runtime::Id> {
        let handle = runtime::Handle::try_current().ok()?;
        let rt = handle.id();
        if self.regs.iter().any(|r| r.rt == rt) {
            return Some(rt);
        }
        // Registrations nobody waits on are dropped first (their reapers
        // stop), so runtimes that come and go (tests) do not pile up
        // registrations, and an idle runtime (the daemon's, beside a page
        // service connection thread) is not woken by every completion of
        // another's.
        self.regs.retain(|r| {
            if r.waiting == 0 {
                d.stops.push(Arc::clone(&r.stop));
            }
            r.waiting > 0
        });
        let fd = register(eventfd)?;
        let (key, stop) = (self.next_reg_key, Arc::new(Notify::new()));
        self.next_reg_key += 1;
        self.regs.push(Reg { rt, key, stop: Arc::clone(&stop), waiting: 0 });
        d.reapers.push(Reaper { handle, ring: ring.clone(), fd, rt, key, stop });
        Some(rt)
    }

    /// Poll the future of slot `i` (an operation in flight or done).
    pub fn poll_op(
        &mut self,
        (uring, eventfd, ring): (&IoUring, &OwnedFd, &Weak<Ring>),
        i: u32,
        waker: &Waker,
        d: &mut Deferred,
    ) -> Polled<(i32, Held)> {
        // The polled party stops waiting first: a reap must not wake it.
        self.set_op_waiter(i, None);
        self.reap(uring, d);
        let mut reactor = true;
        if matches!(self.slots.get(i), Slot::InFlight { .. }) {
            match self.current_reg(eventfd, ring, d) {
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
        (uring, eventfd, ring): (&IoUring, &OwnedFd, &Weak<Ring>),
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
        let reactor = match self.current_reg(eventfd, ring, d) {
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
        switch_waiting(&mut self.regs, old.map(|w| w.rt), new_rt);
    }

    fn set_slot_waiter_rt(&mut self, k: u32, new: Option<runtime::Id>) {
        let w = self.slot_waiters[k as usize].as_mut().expect("queued");
        let old = std::mem::replace(&mut w.rt, new);
        switch_waiting(&mut self.regs, old, new);
    }

    /// Check the counting invariant (debug builds).
    fn consistent(&self) -> bool {
        for reg in &self.regs {
            let ops = self.slots.iter().filter(
                |(_, s)| matches!(s, Slot::InFlight { waiter: Some(w), .. } if w.rt == reg.rt),
            );
            let waiters = self.slot_waiters.iter().flatten().filter(|w| w.rt == Some(reg.rt));
            let n = ops.count() + waiters.count();
            assert_eq!(n, reg.waiting, "waiting parties of a runtime");
        }
        true
    }

    /// Every slot's resources, for the ring's drop.
    pub fn drain(&mut self) -> Vec<Held> {
        self.slots.drain()
    }

    /// Stop every reaper (the ring is dropped); the caller notifies after
    /// releasing the state.
    pub fn stop_reapers(&mut self) -> Vec<Arc<Notify>> {
        self.regs.drain(..).map(|r| r.stop).collect()
    }
}

/// Move a party's count from runtime `old` to `new`.
fn switch_waiting(regs: &mut [Reg], old: Option<runtime::Id>, new: Option<runtime::Id>) {
    if let Some(rt) = old {
        stop_waiting(regs, rt);
    }
    if let Some(rt) = new {
        let reg = regs.iter_mut().find(|r| r.rt == rt).expect("registered before waiting");
        reg.waiting += 1;
    }
}

fn stop_waiting(regs: &mut [Reg], rt: runtime::Id) {
    // The registration is gone if its reactor shut down (unregister_all_of).
    let Some(reg) = regs.iter_mut().find(|r| r.rt == rt) else { return };
    assert!(reg.waiting > 0, "waiting count underflow");
    reg.waiting -= 1;
}
