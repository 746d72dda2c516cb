//! `SeqWait`: a monotonically advancing LSN that tasks can wait on.
//!
//! Invariant: the value never goes backwards (`advance` to a lower value is a
//! bug and panics in debug builds, and is ignored in release builds).
//! Waiting is bounded by a timeout and by a cancellation token.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::lsn::Lsn;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SeqWaitError {
    #[error("timed out after {timeout:?} waiting for LSN {wanted}; last record LSN is {current}")]
    Timeout { wanted: Lsn, current: Lsn, timeout: Duration },
    #[error("shutting down")]
    Cancelled,
}

pub struct SeqWait {
    tx: watch::Sender<Lsn>,
}

impl SeqWait {
    pub fn new(initial: Lsn) -> Self {
        SeqWait { tx: watch::Sender::new(initial) }
    }

    pub fn load(&self) -> Lsn {
        *self.tx.borrow()
    }

    /// Move the value forward and wake every waiter whose target is reached.
    pub fn advance(&self, to: Lsn) {
        self.tx.send_if_modified(|cur| {
            debug_assert!(to >= *cur, "SeqWait moved backwards: {cur} -> {to}");
            if to > *cur {
                *cur = to;
                true
            } else {
                false
            }
        });
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
            return Ok(cur); // fast path: no allocation, no timer
        }
        let mut rx = self.tx.subscribe();
        let wait = rx.wait_for(|v| *v >= wanted);
        tokio::select! {
            res = tokio::time::timeout(timeout, wait) => match res {
                Ok(Ok(v)) => Ok(*v),
                // The sender lives as long as `self`, so the channel cannot close here.
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
        tokio::time::sleep(Duration::from_millis(10)).await;
        sw.advance(Lsn(15));
        sw.advance(Lsn(25));
        assert_eq!(waiter.await.unwrap(), Ok(Lsn(25)));
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
    }
}
