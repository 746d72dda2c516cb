//! Cancellation under load: many reads and writes started together, half
//! of them dropped at random poll points (some before their first poll,
//! some while the kernel works on them). Afterwards every block holds its
//! old or its new content (new if its write finished), every read saw the
//! old content, and the engine has nothing left in flight.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use io_engine::{File, OpenMode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{pattern, read, write, Variant};

const FILES: usize = 8;
const BLOCKS: usize = 64;
const BLOCK: usize = 8192;

fn old(f: usize, b: usize) -> Vec<u8> {
    pattern((f * BLOCKS + b) as u64, BLOCK)
}

fn new(f: usize, b: usize) -> Vec<u8> {
    pattern((1000 + f * BLOCKS + b) as u64, BLOCK)
}

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// A future and when to drop it: `Some(n)` drops it before its `n+1`-th poll.
struct Entry<'a> {
    fut: Option<Task<'a>>,
    drop_before_poll: Option<u32>,
    polls: u32,
    finished: bool,
}

pub async fn dropped_futures_under_load(v: Variant) {
    let seed: u64 = rand::random();
    println!("{v:?}: seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let mut files: Vec<File> = Vec::new();
    for f in 0..FILES {
        let file = e.open(&dir.path().join(format!("f{f}")), v.mode(OpenMode::CREATE_NEW)).await;
        let file = file.unwrap();
        let content: Vec<u8> = (0..BLOCKS).flat_map(|b| old(f, b)).collect();
        write(&file, &content, 0).await;
        files.push(file);
    }
    // Even blocks are written (once each), odd blocks read (never written).
    let mut entries = Vec::new();
    let mut writes = Vec::new();
    for (f, file) in files.iter().enumerate() {
        for b in 0..BLOCKS {
            let offset = (b * BLOCK) as u64;
            let fut: Task<'_> = if b % 2 == 0 {
                writes.push((f, b, entries.len()));
                Box::pin(async move { write(file, &new(f, b), offset).await })
            } else {
                Box::pin(async move {
                    assert!(read(file, offset, BLOCK).await.unwrap() == old(f, b), "{f}/{b}");
                })
            };
            let drop_before_poll = rng.gen_bool(0.5).then(|| rng.gen_range(0..4));
            entries.push(Entry { fut: Some(fut), drop_before_poll, polls: 0, finished: false });
        }
    }
    drive(&mut entries).await;
    wait_for_no_ops_in_flight(&e).await;
    for (f, file) in files.iter().enumerate() {
        for b in 0..BLOCKS {
            let got = read(file, (b * BLOCK) as u64, BLOCK).await.unwrap();
            let finished_write =
                writes.iter().any(|&(wf, wb, k)| (wf, wb) == (f, b) && entries[k].finished);
            let ok = if finished_write {
                got == new(f, b)
            } else {
                got == old(f, b) || got == new(f, b)
            };
            assert!(ok, "{v:?} seed {seed}: file {f} block {b}");
        }
    }
}

/// Poll every live future on each wake-up, dropping each at its chosen poll.
async fn drive(entries: &mut [Entry<'_>]) {
    std::future::poll_fn(|cx| {
        let mut live = 0;
        for en in entries.iter_mut() {
            let Some(fut) = en.fut.as_mut() else { continue };
            if en.drop_before_poll == Some(en.polls) {
                en.fut = None;
                continue;
            }
            en.polls += 1;
            match fut.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    en.finished = true;
                    en.fut = None;
                }
                Poll::Pending => live += 1,
            }
        }
        if live == 0 {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

pub async fn wait_for_no_ops_in_flight(e: &io_engine::IoEngine) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.in_flight_ops() > 0 {
        assert!(Instant::now() < deadline, "{} operations still in flight", e.in_flight_ops());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
