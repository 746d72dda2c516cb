//! Tests of `spsc_fold`: fold/refuse behaviour, every drop order, and wake-ups
//! delivered to the waker of the *latest* poll.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use super::*;

/// A waker that counts how often it was woken.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<CountingWaker>, Waker) {
    let c = Arc::new(CountingWaker::default());
    let w = Waker::from(Arc::clone(&c));
    (c, w)
}

fn wakes(c: &CountingWaker) -> usize {
    c.0.load(Ordering::SeqCst)
}

fn poll_with<F: Future>(fut: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(waker))
}

/// Sums numbers, refusing once the pending sum would exceed `limit`.
fn sum_up_to(limit: u64) -> impl FnMut(&mut u64, u64) -> Result<(), u64> {
    move |pending, item| {
        if *pending + item > limit {
            Err(item)
        } else {
            *pending += item;
            Ok(())
        }
    }
}

/// Counts live instances so tests can check that values are dropped exactly once.
struct Tracked(Arc<AtomicUsize>);

impl Tracked {
    fn new(live: &Arc<AtomicUsize>) -> Tracked {
        live.fetch_add(1, Ordering::SeqCst);
        Tracked(Arc::clone(live))
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn refuse_tracked(_: &mut Tracked, item: Tracked) -> Result<(), Tracked> {
    Err(item)
}

#[tokio::test]
async fn send_then_recv_and_fold() {
    let (mut tx, mut rx) = channel::<u64>();
    tx.send(1, sum_up_to(100)).await.unwrap();
    tx.send(2, sum_up_to(100)).await.unwrap();
    tx.send(3, sum_up_to(100)).await.unwrap();
    assert_eq!(rx.recv().await, Ok(6));
    assert_eq!(rx.try_recv(), None);
    tx.send(7, sum_up_to(100)).await.unwrap();
    assert_eq!(rx.try_recv(), Some(7));
}

#[test]
fn refused_fold_waits_until_pending_is_taken() {
    let (mut tx, mut rx) = channel::<u64>();
    {
        let (_, noop) = counting();
        let mut first = pin!(tx.send(60, sum_up_to(100)));
        assert_eq!(poll_with(first.as_mut(), &noop), Poll::Ready(Ok(())));
    }

    let (tx_wakes, tx_waker) = counting();
    let calls = std::cell::Cell::new(0);
    let mut second = pin!(tx.send(50, |p: &mut u64, i: u64| {
        calls.set(calls.get() + 1);
        sum_up_to(100)(p, i)
    }));
    assert!(poll_with(second.as_mut(), &tx_waker).is_pending());
    // A spurious re-poll keeps waiting and does not offer the item again.
    assert!(poll_with(second.as_mut(), &tx_waker).is_pending());
    assert_eq!(wakes(&tx_wakes), 0);

    assert_eq!(rx.try_recv(), Some(60));
    assert_eq!(wakes(&tx_wakes), 1, "taking the pending value wakes the refused sender");
    assert_eq!(poll_with(second.as_mut(), &tx_waker), Poll::Ready(Ok(())));

    assert_eq!(calls.get(), 1, "a refused item is offered to try_fold exactly once");
    assert_eq!(rx.try_recv(), Some(50));
}

#[test]
fn sender_dropped_with_pending_value_receiver_drains_it() {
    let (mut tx, mut rx) = channel::<u64>();
    futures::executor::block_on(tx.send(5, sum_up_to(10))).unwrap();
    drop(tx);
    let (_, w) = counting();
    {
        let mut r = pin!(rx.recv());
        assert_eq!(poll_with(r.as_mut(), &w), Poll::Ready(Ok(5)));
    }
    let mut r = pin!(rx.recv());
    assert_eq!(poll_with(r.as_mut(), &w), Poll::Ready(Err(RecvError::SenderGone)));
}

#[test]
fn sender_dropped_without_pending_value() {
    let (tx, mut rx) = channel::<u64>();
    drop(tx);
    assert_eq!(futures::executor::block_on(rx.recv()), Err(RecvError::SenderGone));
    assert_eq!(rx.try_recv(), None);
}

#[test]
fn sender_dropped_while_receiver_waits_wakes_it() {
    let (tx, mut rx) = channel::<u64>();
    let (rx_wakes, w) = counting();
    let mut r = pin!(rx.recv());
    assert!(poll_with(r.as_mut(), &w).is_pending());
    drop(tx);
    assert_eq!(wakes(&rx_wakes), 1);
    assert_eq!(poll_with(r.as_mut(), &w), Poll::Ready(Err(RecvError::SenderGone)));
}

#[test]
fn receiver_dropped_send_fails_and_returns_item() {
    let live = Arc::new(AtomicUsize::new(0));
    let (mut tx, rx) = channel::<Tracked>();
    futures::executor::block_on(tx.send(Tracked::new(&live), refuse_tracked)).unwrap();
    assert_eq!(live.load(Ordering::SeqCst), 1);
    drop(rx);
    assert_eq!(live.load(Ordering::SeqCst), 0, "dropping the receiver drops the pending value");
    let err = futures::executor::block_on(tx.send(Tracked::new(&live), refuse_tracked));
    match err {
        Err(SendError::ReceiverGone(item)) => {
            assert_eq!(live.load(Ordering::SeqCst), 1);
            drop(item);
        }
        Ok(()) => panic!("send must fail once the receiver is gone"),
    }
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

#[test]
fn receiver_dropped_while_sender_waits_wakes_it_with_error() {
    let live = Arc::new(AtomicUsize::new(0));
    let (mut tx, rx) = channel::<Tracked>();
    futures::executor::block_on(tx.send(Tracked::new(&live), refuse_tracked)).unwrap();
    let (tx_wakes, w) = counting();
    let mut s = pin!(tx.send(Tracked::new(&live), refuse_tracked));
    assert!(poll_with(s.as_mut(), &w).is_pending());
    assert_eq!(live.load(Ordering::SeqCst), 2);
    drop(rx);
    assert_eq!(wakes(&tx_wakes), 1);
    assert_eq!(live.load(Ordering::SeqCst), 1, "only the waiting sender's item is still alive");
    match poll_with(s.as_mut(), &w) {
        Poll::Ready(Err(e)) => drop(e.into_inner()),
        _ => panic!("the waiting sender must fail once the receiver is gone"),
    }
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

#[test]
fn both_dropped_in_either_order_drop_pending_exactly_once() {
    for sender_first in [true, false] {
        let live = Arc::new(AtomicUsize::new(0));
        let (mut tx, rx) = channel::<Tracked>();
        futures::executor::block_on(tx.send(Tracked::new(&live), refuse_tracked)).unwrap();
        if sender_first {
            drop(tx);
            assert_eq!(live.load(Ordering::SeqCst), 1, "receiver could still drain it");
            drop(rx);
        } else {
            drop(rx);
            drop(tx);
        }
        assert_eq!(live.load(Ordering::SeqCst), 0, "sender_first={sender_first}");
    }
}

#[test]
fn dropped_send_future_drops_its_item_and_channel_stays_usable() {
    let live = Arc::new(AtomicUsize::new(0));
    let (mut tx, mut rx) = channel::<Tracked>();
    futures::executor::block_on(tx.send(Tracked::new(&live), refuse_tracked)).unwrap();
    {
        let (_, w) = counting();
        let mut s = pin!(tx.send(Tracked::new(&live), refuse_tracked));
        assert!(poll_with(s.as_mut(), &w).is_pending());
        assert_eq!(live.load(Ordering::SeqCst), 2);
    }
    assert_eq!(live.load(Ordering::SeqCst), 1, "the cancelled send dropped its item");
    // The cancelled send left no waker behind that a recv would have to serve.
    let first = rx.try_recv().expect("the first item is still pending");
    drop(first);
    futures::executor::block_on(tx.send(Tracked::new(&live), refuse_tracked)).unwrap();
    assert!(rx.try_recv().is_some());
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

#[test]
fn dropped_recv_future_takes_nothing() {
    let (mut tx, mut rx) = channel::<u64>();
    {
        let (_, w) = counting();
        let mut r = pin!(rx.recv());
        assert!(poll_with(r.as_mut(), &w).is_pending());
    }
    futures::executor::block_on(tx.send(3, sum_up_to(10))).unwrap();
    assert_eq!(futures::executor::block_on(rx.recv()), Ok(3));
}

#[test]
fn receiver_wakeup_goes_to_latest_waker() {
    let (mut tx, mut rx) = channel::<u64>();
    let (a_wakes, a) = counting();
    let (b_wakes, b) = counting();
    let mut r = pin!(rx.recv());
    assert!(poll_with(r.as_mut(), &a).is_pending());
    // The task moved (or was re-polled by a different executor): new waker.
    assert!(poll_with(r.as_mut(), &b).is_pending());
    futures::executor::block_on(tx.send(9, sum_up_to(10))).unwrap();
    assert_eq!(wakes(&b_wakes), 1, "the latest waker must be woken");
    assert_eq!(wakes(&a_wakes), 0);
    assert_eq!(poll_with(r.as_mut(), &b), Poll::Ready(Ok(9)));
}

#[test]
fn sender_wakeup_goes_to_latest_waker() {
    let (mut tx, mut rx) = channel::<u64>();
    futures::executor::block_on(tx.send(9, sum_up_to(10))).unwrap();
    let (a_wakes, a) = counting();
    let (b_wakes, b) = counting();
    let mut s = pin!(tx.send(5, sum_up_to(10)));
    assert!(poll_with(s.as_mut(), &a).is_pending());
    assert!(poll_with(s.as_mut(), &b).is_pending());
    assert_eq!(rx.try_recv(), Some(9));
    assert_eq!(wakes(&b_wakes), 1, "the latest waker must be woken");
    assert_eq!(wakes(&a_wakes), 0);
    assert_eq!(poll_with(s.as_mut(), &b), Poll::Ready(Ok(())));

    assert_eq!(rx.try_recv(), Some(5));
}

#[test]
fn drop_wakeups_go_to_latest_waker() {
    // Sender dropped: the receiver's latest waker is woken.
    let (tx, mut rx) = channel::<u64>();
    let (a_wakes, a) = counting();
    let (b_wakes, b) = counting();
    let mut r = pin!(rx.recv());
    assert!(poll_with(r.as_mut(), &a).is_pending());
    assert!(poll_with(r.as_mut(), &b).is_pending());
    drop(tx);
    assert_eq!((wakes(&a_wakes), wakes(&b_wakes)), (0, 1));

    // Receiver dropped: the refused sender's latest waker is woken.
    let (mut tx, rx) = channel::<u64>();
    futures::executor::block_on(tx.send(9, sum_up_to(10))).unwrap();
    let (a_wakes, a) = counting();
    let (b_wakes, b) = counting();
    let mut s = pin!(tx.send(5, sum_up_to(10)));
    assert!(poll_with(s.as_mut(), &a).is_pending());
    assert!(poll_with(s.as_mut(), &b).is_pending());
    drop(rx);
    assert_eq!((wakes(&a_wakes), wakes(&b_wakes)), (0, 1));
    assert_eq!(poll_with(s.as_mut(), &b), Poll::Ready(Err(SendError::ReceiverGone(5))));
}

/// Two tasks on a multi-threaded runtime: every item arrives exactly once and
/// in order, batches never exceed their bound, and nothing hangs (a lost
/// wake-up would hang this test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_stress_preserves_order_and_bound() {
    const N: u64 = 200_000;
    const MAX_BATCH: usize = 8;
    let (mut tx, mut rx) = channel::<Vec<u64>>();
    let producer = tokio::spawn(async move {
        for i in 0..N {
            tx.send(vec![i], |batch: &mut Vec<u64>, mut item: Vec<u64>| {
                if batch.len() < MAX_BATCH {
                    batch.append(&mut item);
                    Ok(())
                } else {
                    Err(item)
                }
            })
            .await
            .unwrap();
            if i.is_multiple_of(1024) {
                tokio::task::yield_now().await;
            }
        }
    });
    let consumer = tokio::spawn(async move {
        let mut next = 0u64;
        let mut batches = 0u64;
        while let Ok(batch) = rx.recv().await {
            assert!(!batch.is_empty() && batch.len() <= MAX_BATCH);
            for v in batch {
                assert_eq!(v, next);
                next += 1;
            }
            batches += 1;
            if batches.is_multiple_of(512) {
                tokio::task::yield_now().await;
            }
        }
        (next, batches)
    });
    let timeout = std::time::Duration::from_secs(60);
    tokio::time::timeout(timeout, producer).await.expect("producer hung").unwrap();
    let (received, batches) =
        tokio::time::timeout(timeout, consumer).await.expect("consumer hung").unwrap();
    assert_eq!(received, N);
    assert!(batches <= N);
}

/// `recv_if` waits while the pending value is not ready, is woken by each
/// fold, and takes it once ready.
#[test]
fn recv_if_takes_once_ready() {
    let (mut tx, mut rx) = channel::<u64>();
    let (rc, rw) = counting();
    assert!(poll_with(pin!(tx.send(1, sum_up_to(10))), &rw).is_ready());
    let mut recv = Box::pin(rx.recv_if(|v| *v >= 3));
    assert!(poll_with(recv.as_mut(), &rw).is_pending());
    assert!(poll_with(pin!(tx.send(1, sum_up_to(10))), &rw).is_ready());
    assert_eq!(wakes(&rc), 1, "a fold wakes the waiting receiver");
    assert!(poll_with(recv.as_mut(), &rw).is_pending());
    assert!(poll_with(pin!(tx.send(1, sum_up_to(10))), &rw).is_ready());
    assert_eq!(wakes(&rc), 2);
    assert_eq!(poll_with(recv.as_mut(), &rw), Poll::Ready(Ok(3)));
}

/// A value that cannot grow is taken even if not ready: a fold was refused
/// (the sender waits for the slot), or the sender is gone.
#[test]
fn recv_if_takes_what_cannot_grow() {
    let (mut tx, mut rx) = channel::<u64>();
    let (_, w) = counting();
    let (rc, rw) = counting();
    assert!(poll_with(pin!(tx.send(4, sum_up_to(5))), &w).is_ready());
    let mut recv = Box::pin(rx.recv_if(|_| false));
    assert!(poll_with(recv.as_mut(), &rw).is_pending());
    let mut refused = Box::pin(tx.send(4, sum_up_to(5)));
    assert!(poll_with(refused.as_mut(), &w).is_pending());
    assert_eq!(wakes(&rc), 1, "a refusal wakes the receiver waiting for growth");
    assert_eq!(poll_with(recv.as_mut(), &rw), Poll::Ready(Ok(4)));
    drop(recv);
    assert!(poll_with(refused.as_mut(), &w).is_ready());
    drop(refused);
    drop(tx);
    assert_eq!(poll_with(pin!(rx.recv_if(|_| false)), &w), Poll::Ready(Ok(4)));
    assert_eq!(poll_with(pin!(rx.recv_if(|_| false)), &w), Poll::Ready(Err(RecvError::SenderGone)));
}

/// With nothing pending, `recv_if` waits like `recv` and is woken by a send.
#[test]
fn recv_if_waits_for_a_value() {
    let (mut tx, mut rx) = channel::<u64>();
    let (rc, rw) = counting();
    let mut recv = Box::pin(rx.recv_if(|v| *v >= 1));
    assert!(poll_with(recv.as_mut(), &rw).is_pending());
    assert!(poll_with(pin!(tx.send(2, sum_up_to(10))), &rw).is_ready());
    assert_eq!(wakes(&rc), 1);
    assert_eq!(poll_with(recv.as_mut(), &rw), Poll::Ready(Ok(2)));
}
