//! `SeqWait`: a monotonically advancing LSN that tasks can wait on.
//!
//! Waiters are kept in a priority queue ordered by the LSN they wait for (a
//! `BTreeMap` keyed by (LSN, waiter id), so a waiter that leaves — timeout,
//! cancellation, or its future dropped — is removed in O(log n)). `advance`
//! pops and wakes exactly the waiters whose LSN is now reached; no other
//! waiter is woken.
//!
//! Invariants: the value never goes backwards (`advance` to a lower value
//! is a bug: it panics in debug builds and is ignored in release builds);
//! no wake-up is lost (see `SeqWait::waiting` for the ordering argument);
//! `advance` takes no lock when nobody waits.
//! Waiting is bounded by a timeout and by a cancellation token.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::lsn::Lsn;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SeqWaitError {
    #[error("timed out after {timeout:?} waiting for LSN {wanted}; last record LSN is {current}")]
    Timeout { wanted: Lsn, current: Lsn, timeout: Duration },
    #[error("shutting down")]
    Cancelled,
}

struct Queue {
    /// (wanted LSN, waiter id) -> the waiter's wake-up.
    waiters: BTreeMap<(Lsn, u64), oneshot::Sender<Lsn>>,
    next_id: u64,
}

pub struct SeqWait {
    /// The current value; written only by `advance`, read without a lock.
    current: AtomicU64,
    /// Waiters in `queue` (or about to be). Lets `advance` skip the lock
    /// when nobody waits — the common case on the ingest path (one
    /// `advance` per WAL record). Lost wake-ups are impossible: a waiter
    /// increments this (SeqCst) *before* it re-reads `current` (SeqCst), and
    /// `advance` stores `current` (SeqCst) *before* it reads this (SeqCst);
    /// in the single total order either `advance` sees the waiter (and then
    /// takes the lock, which the waiter holds until it is queued), or the
    /// waiter sees the new value and does not queue.
    waiting: AtomicUsize,
    queue: Mutex<Queue>,
}

/// Removes its waiter from the queue when the wait ends in any way.
struct Registration<'a> {
    sw: &'a SeqWait,
    key: (Lsn, u64),
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.sw.queue.lock().unwrap().waiters.remove(&self.key);
        self.sw.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SeqWait {
    pub fn new(initial: Lsn) -> Self {
        SeqWait {
            current: AtomicU64::new(initial.0),
            waiting: AtomicUsize::new(0),
            queue: Mutex::new(Queue { waiters: BTreeMap::new(), next_id: 0 }),
        }
    }

    pub fn load(&self) -> Lsn {
        Lsn(self.current.load(Ordering::Acquire))
    }

    /// Waiters currently queued (for tests and metrics).
    pub fn waiter_count(&self) -> usize {
        self.queue.lock().unwrap().waiters.len()
    }

    /// Move the value forward and wake exactly the waiters whose LSN is
    /// now reached. One caller at a time (the timeline's single writer).
    pub fn advance(&self, to: Lsn) {
        let cur = self.load();
        debug_assert!(to >= cur, "SeqWait moved backwards: {cur} -> {to}");
        if to <= cur {
            return;
        }
        self.current.store(to.0, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut q = self.queue.lock().unwrap();
        while let Some(entry) = q.waiters.first_entry() {
            if entry.key().0 > to {
                break;
            }
            let _ = entry.remove().send(to); // a waiter that just left is fine
        }
    }

    /// Wait until the value is at least `wanted`; returns the value seen.
    pub async fn wait_for(
        &self,
        wanted: Lsn,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Lsn, SeqWaitError> {
        let cur = self.load();
        if cur >= wanted {
            return Ok(cur); // fast path: no lock, no allocation, no timer
        }
        let (rx, _registration) = {
            let mut q = self.queue.lock().unwrap();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let cur = Lsn(self.current.load(Ordering::SeqCst)); // see `waiting`
            if cur >= wanted {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                return Ok(cur);
            }
            let (tx, rx) = oneshot::channel();
            let key = (wanted, q.next_id);
            q.next_id += 1;
            q.waiters.insert(key, tx);
            (rx, Registration { sw: self, key })
        };
        tokio::select! {
            res = tokio::time::timeout(timeout, rx) => match res {
                Ok(Ok(v)) => Ok(v),
                // The sender is dropped only by `advance` after sending.
                Ok(Err(_)) => Err(SeqWaitError::Cancelled),
                Err(_) => Err(SeqWaitError::Timeout { wanted, current: self.load(), timeout }),
            },
            _ = cancel.cancelled() => Err(SeqWaitError::Cancelled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn wakes_on_advance() {
        let sw = Arc::new(SeqWait::new(Lsn(10)));
        let cancel = CancellationToken::new();
        assert_eq!(sw.wait_for(Lsn(5), Duration::from_secs(1), &cancel).await, Ok(Lsn(10)));
        let sw2 = sw.clone();
        let c2 = cancel.clone();
        let waiter =
            tokio::spawn(async move { sw2.wait_for(Lsn(20), Duration::from_secs(10), &c2).await });
        while sw.waiter_count() == 0 {
            tokio::task::yield_now().await;
        }
        sw.advance(Lsn(15));
        assert_eq!(sw.waiter_count(), 1, "a waiter below its LSN stays queued");
        sw.advance(Lsn(25));
        assert_eq!(waiter.await.unwrap(), Ok(Lsn(25)));
        assert_eq!(sw.waiter_count(), 0);
    }

    #[tokio::test]
    async fn wakes_only_the_waiters_that_are_reached() {
        let sw = Arc::new(SeqWait::new(Lsn(0)));
        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        for lsn in [30u64, 10, 20] {
            let (sw, c) = (sw.clone(), cancel.clone());
            tasks.push((
                lsn,
                tokio::spawn(
                    async move { sw.wait_for(Lsn(lsn), Duration::from_secs(10), &c).await },
                ),
            ));
        }
        while sw.waiter_count() < 3 {
            tokio::task::yield_now().await;
        }
        sw.advance(Lsn(20));
        assert_eq!(sw.waiter_count(), 1, "only the waiter for 30 is left");
        for (lsn, t) in tasks.iter_mut().filter(|(l, _)| *l <= 20) {
            assert_eq!((&mut *t).await.unwrap(), Ok(Lsn(20)), "waiter for {lsn}");
        }
        assert!(!tasks[0].1.is_finished());
        sw.advance(Lsn(30));
        assert_eq!((&mut tasks[0].1).await.unwrap(), Ok(Lsn(30)));
    }

    #[tokio::test]
    async fn times_out_and_cancels() {
        let sw = SeqWait::new(Lsn(1));
        let cancel = CancellationToken::new();
        let err = sw.wait_for(Lsn(2), Duration::from_millis(20), &cancel).await.unwrap_err();
        assert!(matches!(err, SeqWaitError::Timeout { current: Lsn(1), .. }));
        cancel.cancel();
        let err = sw.wait_for(Lsn(2), Duration::from_secs(10), &cancel).await.unwrap_err();
        assert_eq!(err, SeqWaitError::Cancelled);
        assert_eq!(sw.waiter_count(), 0);
    }

    /// Racing waiters and an advancer on several threads: every waiter
    /// wakes (none is lost between its check and its queueing).
    #[test]
    fn no_lost_wakeups_under_races() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            for round in 0..200u64 {
                let sw = Arc::new(SeqWait::new(Lsn(0)));
                let cancel = CancellationToken::new();
                let waiters: Vec<_> = (1..=8u64)
                    .map(|i| {
                        let (sw, c) = (sw.clone(), cancel.clone());
                        tokio::spawn(async move {
                            sw.wait_for(Lsn(i), Duration::from_secs(5), &c).await
                        })
                    })
                    .collect();
                for i in 1..=8u64 {
                    sw.advance(Lsn(i));
                    tokio::task::yield_now().await;
                }
                for w in waiters {
                    assert!(w.await.unwrap().is_ok(), "round {round}: a waiter was not woken");
                }
                assert_eq!(sw.waiter_count(), 0);
            }
        });
    }

    #[tokio::test]
    async fn waiters_that_leave_do_not_leak() {
        let sw = Arc::new(SeqWait::new(Lsn(1)));
        let cancel = CancellationToken::new();
        let waits = (0..1000u64).map(|i| {
            let (sw, c) = (sw.clone(), cancel.clone());
            async move { sw.wait_for(Lsn(100 + i), Duration::from_millis(10), &c).await }
        });
        for r in futures::future::join_all(waits).await {
            assert!(matches!(r, Err(SeqWaitError::Timeout { .. })));
        }
        assert_eq!(sw.waiter_count(), 0);
        // A dropped wait future leaves nothing behind either.
        let fut = sw.wait_for(Lsn(5), Duration::from_secs(10), &cancel);
        let _ = tokio::time::timeout(Duration::from_millis(5), fut).await;
        assert_eq!(sw.waiter_count(), 0);
    }
}
