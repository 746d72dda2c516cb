//! Batched reads and writes: many positional operations, possibly on many
//! files, issued together.
//!
//! Every operation passes the same checks as a single one (its failpoint,
//! direct IO alignment) and gets the same result; results come back in the
//! order of the requests. With the io-uring engine, the operations on its
//! files are pushed together and submitted with one `io_uring_enter` per
//! group of 2 (`uring/ring.rs`) and run concurrently: overlapping writes
//! in one batch leave either one's bytes. By default reads the page cache
//! serves are done inline first, and only the rest is submitted; buffered
//! writes io-uring runs inline (`uring/inline.rs`) run one after another,
//! as every operation does with std-fs and the simulated engine.

use std::io;

use futures::stream::{self, Stream, StreamExt};

use crate::uring::{self, Dir, Transfer};
use crate::{named, AlignedBuf, File, IoEngine, Op};

/// One read of a batch: `len` bytes at `offset` of `file` into `buf`
/// (`len` must fit its capacity), as [`File::read_exact_at`].
pub struct ReadAt<'a> {
    pub file: &'a File,
    pub buf: AlignedBuf,
    pub offset: u64,
    pub len: usize,
}

/// One write of a batch: all of `buf` at `offset` of `file`, as
/// [`File::write_all_at`].
pub struct WriteAt<'a> {
    pub file: &'a File,
    pub buf: AlignedBuf,
    pub offset: u64,
}

type Outcome = (AlignedBuf, io::Result<()>);

impl IoEngine {
    /// Run `reads` as one batch; the result of each, in order, is what
    /// `read_exact_at` would have returned.
    pub async fn read_exact_at_many(&self, reads: Vec<ReadAt<'_>>) -> Vec<Outcome> {
        let mut results: Vec<Option<Outcome>> = (0..reads.len()).map(|_| None).collect();
        let mut each = std::pin::pin!(self.read_exact_at_each(reads));
        while let Some((i, outcome)) = each.next().await {
            assert!(results[i].replace(outcome).is_none(), "read {i} finished twice");
        }
        results.into_iter().map(|r| r.expect("every read has a result")).collect()
    }

    /// Run `reads` as one batch, as [`IoEngine::read_exact_at_many`], but
    /// yield each read's result (with its index in `reads`) as soon as it
    /// is done: a caller can use the first pages while the others are still
    /// on the disk. Every read yields exactly once. Reads refused by the
    /// checks come first; with io-uring, reads on the ring then complete in
    /// any order, beside the others (run one after another).
    pub fn read_exact_at_each<'a>(
        &'a self,
        reads: Vec<ReadAt<'a>>,
    ) -> impl Stream<Item = (usize, Outcome)> + Send + 'a {
        let mut refused = Vec::new();
        let mut elsewhere = Vec::new();
        let mut on_ring = Vec::new();
        let mut transfers = Vec::new();
        for (i, r) in reads.into_iter().enumerate() {
            let ReadAt { file, mut buf, offset, len } = r;
            if let Err(e) = file.check_read(&buf, offset, len) {
                buf.set_len(0);
                refused.push((i, (buf, Err(e))));
                continue;
            }
            match file.op() {
                Ok(Op::Uring(f)) if len > 0 => {
                    on_ring.push((i, file, len));
                    transfers.push(Transfer { file: f, buf, offset, len });
                }
                _ => elsewhere.push((i, file, buf, offset, len)),
            }
        }
        let ring_reads = match self.selected.ring() {
            Some(ring) if !transfers.is_empty() => {
                Some(uring::transfer_each(ring, Dir::Read, transfers))
            }
            _ => {
                assert!(transfers.is_empty(), "ring transfers without a ring");
                None
            }
        };
        let ring_reads = stream::iter(ring_reads).flatten().map(move |(at, (buf, res))| {
            let (i, file, len) = on_ring[at];
            (i, file.finish_read(buf, len, res))
        });
        let other_reads = stream::iter(elsewhere).then(|(i, file, buf, offset, len)| async move {
            let (buf, res) = file.read_checked(buf, offset, len).await;
            (i, file.finish_read(buf, len, res))
        });
        stream::iter(refused).chain(stream::select(ring_reads, other_reads))
    }

    /// Run `writes` as one batch; the result of each, in order, is what
    /// `write_all_at` would have returned.
    pub async fn write_all_at_many(&self, writes: Vec<WriteAt<'_>>) -> Vec<Outcome> {
        let mut results: Vec<Option<Outcome>> = Vec::with_capacity(writes.len());
        let mut on_ring = Vec::new();
        let mut transfers = Vec::new();
        for (i, w) in writes.into_iter().enumerate() {
            results.push(None);
            let WriteAt { file, buf, offset } = w;
            if let Err(e) = file.check_write(&buf, offset) {
                results[i] = Some((buf, Err(e)));
                continue;
            }
            match file.op() {
                Ok(Op::Uring(f)) if !buf.is_empty() && f.ring_writes() => {
                    on_ring.push((i, file));
                    let len = buf.len();
                    transfers.push(Transfer { file: f, buf, offset, len });
                }
                _ => {
                    let (buf, res) = file.write_checked(buf, offset).await;
                    results[i] = Some((buf, res.map_err(named("write", &file.path))));
                }
            }
        }
        let done = self.run_on_ring(Dir::Write, transfers).await;
        for ((i, file), (buf, res)) in on_ring.into_iter().zip(done) {
            results[i] = Some((buf, res.map_err(named("write", &file.path))));
        }
        results.into_iter().map(|r| r.expect("every write has a result")).collect()
    }

    async fn run_on_ring(&self, dir: Dir, transfers: Vec<Transfer<'_>>) -> Vec<Outcome> {
        match self.selected.ring() {
            Some(ring) if !transfers.is_empty() => uring::transfer_many(ring, dir, transfers).await,
            _ => {
                assert!(transfers.is_empty(), "ring transfers without a ring");
                Vec::new()
            }
        }
    }
}
