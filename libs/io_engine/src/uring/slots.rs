//! The slot table of a ring: one slot per operation the kernel may be
//! working on, indexed by the SQE's `user_data`.
//!
//! Invariants:
//! - A slot owns the memory and the file descriptor of its operation
//!   (`Held`) from the push of its SQE until its completion is reaped; only
//!   then can the buffer, the fd and the in-flight permit be freed, so the
//!   kernel never writes into freed memory or reads from a closed (or
//!   reused) descriptor, whatever happened to the future.
//! - `free` lists exactly the `Free` slots; a slot leaves `Free` only
//!   through `insert` and comes back through `take_done` or `complete` of an
//!   abandoned slot.
//! - At most `slots.len()` operations are in flight: a request takes a slot
//!   only when one is free (`free_count`), else it waits (`state.rs`).
//!
//! Not thread-safe by itself: the ring keeps it under its state mutex.

use std::fs;
use std::sync::Arc;
use std::task::Waker;

use tokio::runtime;

use crate::AlignedBuf;

/// What an operation's slot keeps alive while the kernel may use it.
pub(super) struct Held {
    pub buf: Option<AlignedBuf>,
    pub file: Arc<fs::File>,
}

/// A future waiting for its operation: its waker, and the runtime whose
/// reactor will signal the ring's eventfd to it.
pub(super) struct Waiter {
    pub waker: Waker,
    pub rt: runtime::Id,
}

pub(super) enum Slot {
    Free,
    /// Pushed to the SQ; the kernel may be using `held`. `waiter` is set
    /// while the future waits for the completion (it is a waiting party).
    InFlight {
        held: Held,
        waiter: Option<Waiter>,
    },
    /// The future was dropped: the slot is freed when the completion is reaped.
    Abandoned {
        held: Held,
    },
    /// The completion is reaped; the future takes the result.
    Done {
        held: Held,
        result: i32,
    },
}

/// What reaping a completion did to its slot.
pub(super) enum Completed {
    /// The future is to be woken (if it was waiting).
    Done(Option<Waiter>),
    /// The future was gone: the resources are now free.
    Freed(Held),
}

pub(super) struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Slots {
    pub fn new(n: u32) -> Slots {
        Slots {
            slots: (0..n).map(|_| Slot::Free).collect(),
            // Popped from the back: low indices first.
            free: (0..n).rev().collect(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Slots not `Free`: in flight, abandoned, or done and not yet taken.
    pub fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn get(&self, i: u32) -> &Slot {
        &self.slots[i as usize]
    }

    pub fn get_mut(&mut self, i: u32) -> &mut Slot {
        &mut self.slots[i as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.slots.iter().enumerate().map(|(i, s)| (i as u32, s))
    }

    /// Take a free slot for an operation about to be pushed.
    pub fn insert(&mut self, held: Held) -> u32 {
        let i = self.free.pop().expect("callers check free_count");
        debug_assert!(matches!(self.slots[i as usize], Slot::Free));
        self.slots[i as usize] = Slot::InFlight { held, waiter: None };
        i
    }

    /// Undo `insert` for an SQE that could not be pushed (the kernel never saw it).
    pub fn remove_unsubmitted(&mut self, i: u32) -> Held {
        match self.replace(i, Slot::Free) {
            Slot::InFlight { held, waiter: None } => {
                self.free.push(i);
                held
            }
            _ => panic!("slot {i} was not freshly inserted"),
        }
    }

    /// The completion of slot `i` was reaped.
    pub fn complete(&mut self, i: u32, result: i32) -> Completed {
        match self.replace(i, Slot::Free) {
            Slot::InFlight { held, waiter } => {
                self.slots[i as usize] = Slot::Done { held, result };
                Completed::Done(waiter)
            }
            Slot::Abandoned { held } => {
                self.free.push(i);
                Completed::Freed(held)
            }
            Slot::Free | Slot::Done { .. } => {
                panic!("completion for slot {i}, which has no operation in flight")
            }
        }
    }

    /// The result of slot `i` if its completion is reaped; the slot is freed.
    pub fn take_done(&mut self, i: u32) -> Option<(i32, Held)> {
        if !matches!(self.slots[i as usize], Slot::Done { .. }) {
            return None;
        }
        let Slot::Done { held, result } = self.replace(i, Slot::Free) else { unreachable!() };
        self.free.push(i);
        Some((result, held))
    }

    /// The future of slot `i` is dropped: a done slot is freed (its
    /// resources returned), an in-flight one is marked abandoned.
    pub fn abandon(&mut self, i: u32) -> Option<Held> {
        match self.replace(i, Slot::Free) {
            Slot::Done { held, .. } => {
                self.free.push(i);
                Some(held)
            }
            Slot::InFlight { held, .. } => {
                self.slots[i as usize] = Slot::Abandoned { held };
                None
            }
            Slot::Free | Slot::Abandoned { .. } => panic!("slot {i} abandoned twice"),
        }
    }

    /// Every slot's resources, for a ring that is dropped: the caller must
    /// know the kernel is done with them (or leak them).
    pub fn drain(&mut self) -> Vec<Held> {
        let mut out = Vec::new();
        for i in 0..self.slots.len() as u32 {
            match self.replace(i, Slot::Free) {
                Slot::Free => continue,
                Slot::InFlight { held, .. }
                | Slot::Abandoned { held }
                | Slot::Done { held, .. } => out.push(held),
            }
            self.free.push(i);
        }
        out
    }

    fn replace(&mut self, i: u32, s: Slot) -> Slot {
        std::mem::replace(&mut self.slots[i as usize], s)
    }
}
