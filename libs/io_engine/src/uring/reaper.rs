//! The reaper of a runtime: a task per tokio runtime that has waiting
//! parties, woken by the ring's eventfd (registered with that runtime's
//! reactor), that reaps the CQ and wakes the futures whose operations
//! completed. It makes the ring live whatever its callers do: a future
//! polled once and then kept without being polled again delays nobody,
//! because no future is needed to reap for the others.
//!
//! Life: `State::current_reg` creates a registration (and its reaper) the
//! first time a party of a runtime waits; the task is spawned after the
//! state mutex is released (`Deferred::run`). It ends when its
//! registration is dropped (`stop`: a new runtime registered while this
//! one had nobody waiting, or the ring is dropped), when its runtime's
//! reactor fails, or when its runtime shuts down (the task is dropped).
//! Whatever ends it, `Unregister` removes its registration if it is still
//! the current one and wakes that runtime's parties, which register again
//! wherever they are polled next.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Weak};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::runtime;
use tokio::sync::Notify;

use super::ring::Ring;
use super::state::Deferred;

/// A reaper to spawn once the state mutex is released.
pub(super) struct Reaper {
    pub handle: runtime::Handle,
    pub ring: Weak<Ring>,
    pub fd: AsyncFd<OwnedFd>,
    pub rt: runtime::Id,
    /// Which registration of `rt` this reaper serves (a runtime may
    /// register again after its registration was dropped).
    pub key: u64,
    pub stop: Arc<Notify>,
}

impl Reaper {
    /// Spawn on its runtime. On a runtime that is shutting down the task
    /// is dropped at once, which unregisters it (`Unregister`); so never
    /// called under the state mutex.
    pub fn spawn(self) {
        let Reaper { handle, ring, fd, rt, key, stop } = self;
        // Moved into the task before it first runs, so it unregisters
        // even if the task is dropped unpolled.
        let unregister = Unregister { ring: ring.clone(), rt, key };
        drop(handle.spawn(async move {
            let _unregister = unregister;
            reap_until_stopped(ring, fd, stop).await;
        }));
    }
}

/// Reap after every signal of the eventfd until stopped, the reactor
/// fails or the ring is gone.
async fn reap_until_stopped(ring: Weak<Ring>, fd: AsyncFd<OwnedFd>, stop: Arc<Notify>) {
    loop {
        tokio::select! {
            biased;
            () = stop.notified() => return,
            ready = fd.readable() => match ready {
                Ok(mut guard) => {
                    // Cleared before draining: an eventfd write after
                    // the drain is a new edge, so no completion is missed.
                    guard.clear_ready();
                    drain_eventfd(fd.get_ref());
                }
                Err(e) => {
                    tracing::debug!("io-uring: the reactor dropped the eventfd: {e}");
                    return;
                }
            },
        }
        let Some(ring) = ring.upgrade() else { return };
        ring.reap_and_wake();
    }
}

/// Removes a reaper's registration when the reaper ends, however it ends.
struct Unregister {
    ring: Weak<Ring>,
    rt: runtime::Id,
    key: u64,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        let Some(ring) = self.ring.upgrade() else { return };
        let mut d = Deferred::default();
        if let Ok(mut st) = ring.state_lock_for_drop() {
            st.reaper_gone(self.rt, self.key, &mut d);
        }
        d.run();
    }
}

/// A duplicate of the eventfd registered with the current runtime's
/// reactor; None (logged) if that fails. tokio panics when the runtime has
/// IO disabled: caught here, so the state mutex is not poisoned (the
/// caller then waits by blocking).
pub(super) fn register(eventfd: &OwnedFd) -> Option<AsyncFd<OwnedFd>> {
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
