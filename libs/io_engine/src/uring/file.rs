//! Files of the io-uring engine: transfer loops over ring operations
//! (short transfers go on, EOF before `len` is `UnexpectedEof`), fsync
//! through the ring, and batches submitted together (`Ring::start`).
//! Reads that do not block and some buffered writes skip the ring
//! (`inline.rs`).
//!
//! `open`, `len` and `set_len` are synchronous std calls, as in std-fs
//! (`select.rs` owns the descriptor).

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use futures::stream::{self, FuturesUnordered, Stream, StreamExt};

use super::inline::InlinePaths;
use super::op::Op;
use super::ring::{Kind, Request, Ring};
use super::{BATCH_MAX_OPS, MAX_OP_BYTES};
use crate::direct_io::{eof, short_read_hit_eof, write_zero};
use crate::{AlignedBuf, OpenMode, UringInline};

/// An open file: the descriptor is shared (`Arc`) with the slots of its
/// operations in flight, so dropping the file while the kernel still uses
/// the descriptor does not close it.
pub(crate) struct UringFile {
    file: Arc<fs::File>,
    ring: Arc<Ring>,
    direct: bool,
    inline: InlinePaths,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// One positional transfer of a batch: `len` bytes of `buf` (for a write,
/// `len == buf.len()`) at `offset` of `file`.
pub(crate) struct Transfer<'a> {
    pub file: &'a UringFile,
    pub buf: AlignedBuf,
    pub offset: u64,
    pub len: usize,
}

pub(crate) type Outcome = (AlignedBuf, io::Result<()>);

impl UringFile {
    /// io-uring state for an open descriptor (shared with its std-fs use).
    pub fn over(
        file: &Arc<fs::File>,
        ring: &Arc<Ring>,
        mode: OpenMode,
        policy: UringInline,
    ) -> io::Result<UringFile> {
        let inline = InlinePaths::for_file(file, mode, policy)?;
        Ok(UringFile { file: file.clone(), ring: ring.clone(), direct: mode.direct, inline })
    }

    /// Whether writes to this file go through the ring (see `inline.rs`).
    pub fn ring_writes(&self) -> bool {
        !self.inline.writes()
    }

    pub async fn read_exact_at(&self, buf: AlignedBuf, offset: u64, len: usize) -> Outcome {
        self.transfer(Dir::Read, buf, offset, len, 0).await
    }

    pub async fn write_all_at(&self, buf: AlignedBuf, offset: u64) -> Outcome {
        if self.inline.writes() {
            let res = self.file.write_all_at(&buf, offset);
            return (buf, res);
        }
        let len = buf.len();
        self.transfer(Dir::Write, buf, offset, len, 0).await
    }

    pub async fn sync_all(&self) -> io::Result<()> {
        loop {
            let req = Request { file: self.file.clone(), buf: None, kind: Kind::Fsync };
            match self.ring.start_one(req).await.await.0 {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                res => return res.map(drop),
            }
        }
    }

    /// A read's inline attempt (`inline.rs`) from byte `done`: `Some` ends
    /// the transfer with that result; else `done` tells how far it got.
    fn read_inline(
        &self,
        buf: &mut AlignedBuf,
        offset: u64,
        len: usize,
        done: &mut usize,
    ) -> Option<io::Result<()>> {
        let range = *done..len.min(*done + MAX_OP_BYTES);
        let res = self.inline.try_read(&self.file, buf, offset + *done as u64, range)?;
        advance(Dir::Read, self.direct, res, done, len)
    }

    /// Move bytes `done..len` of a transfer whose first `done` bytes moved.
    async fn transfer(
        &self,
        dir: Dir,
        mut buf: AlignedBuf,
        offset: u64,
        len: usize,
        mut done: usize,
    ) -> Outcome {
        if dir == Dir::Read && done < len {
            if let Some(end) = self.read_inline(&mut buf, offset, len, &mut done) {
                return (buf, end);
            }
        }
        while done < len {
            let req = request(dir, &self.file, buf, offset, done, len);
            let (res, returned) = self.ring.start_one(req).await.await;
            buf = returned.expect("a transfer gets its buffer back");
            if let Some(end) = advance(dir, self.direct, res, &mut done, len) {
                return (buf, end);
            }
        }
        (buf, Ok(()))
    }
}

/// The next operation of a transfer: bytes `done..` (at most `MAX_OP_BYTES`).
fn request(
    dir: Dir,
    file: &Arc<fs::File>,
    buf: AlignedBuf,
    offset: u64,
    done: usize,
    len: usize,
) -> Request {
    let range = done..len.min(done + MAX_OP_BYTES);
    let offset = offset + done as u64;
    let kind = match dir {
        Dir::Read => Kind::Read { offset, range },
        Dir::Write => Kind::Write { offset, range },
    };
    Request { file: file.clone(), buf: Some(buf), kind }
}

/// Account one operation's result: `Some` ends the transfer with that result.
fn advance(
    dir: Dir,
    direct: bool,
    res: io::Result<usize>,
    done: &mut usize,
    len: usize,
) -> Option<io::Result<()>> {
    let ended = || match dir {
        Dir::Read => eof(),
        Dir::Write => write_zero(),
    };
    match res {
        Ok(0) => Some(Err(ended())),
        Ok(n) => {
            assert!(n <= len - *done, "the kernel moved {n} bytes, {} were asked", len - *done);
            *done += n;
            short_read_hit_eof(direct, *done, len).then(|| Err(ended()))
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
        Err(e) => Some(Err(e)),
    }
}

/// Run transfers of one direction as batches of at most `BATCH_MAX_OPS`;
/// yields each transfer's result with its index in `items` as soon as it
/// is done. Reads first try their inline attempt (those done inline come
/// first); what is left of a batch is pushed and submitted (`Ring::start`:
/// one `io_uring_enter` per group of 2), and the batch is finished before the next is
/// pushed (so a batch never waits for slots its own finished operations
/// hold). Short transfers go on one by one. Every item has `len > 0`.
pub(crate) fn transfer_each<'a>(
    ring: &'a Ring,
    dir: Dir,
    items: Vec<Transfer<'a>>,
) -> impl Stream<Item = (usize, Outcome)> + Send + 'a {
    let items = items.into_iter().enumerate().peekable();
    stream::unfold(items, move |mut items| async move {
        items.peek()?;
        let batch: Vec<_> = items.by_ref().take(BATCH_MAX_OPS).collect();
        Some((start_batch(ring, dir, batch).await, items))
    })
    .flatten()
}

/// [`transfer_each`], collected: results in the order of `items`.
pub(crate) async fn transfer_many(ring: &Ring, dir: Dir, items: Vec<Transfer<'_>>) -> Vec<Outcome> {
    let mut out: Vec<Option<Outcome>> = (0..items.len()).map(|_| None).collect();
    let mut each = std::pin::pin!(transfer_each(ring, dir, items));
    while let Some((at, outcome)) = each.next().await {
        assert!(out[at].replace(outcome).is_none(), "transfer {at} finished twice");
    }
    out.into_iter().map(|o| o.expect("every transfer has a result")).collect()
}

/// A transfer of a batch that goes to the ring, from byte `done`.
struct Rest<'a> {
    at: usize,
    file: &'a UringFile,
    offset: u64,
    len: usize,
    done: usize,
}

/// Push one batch (after the reads' inline attempts) and submit it; the
/// stream of its results, those done inline first. Nothing is allocated
/// for the ring when every read is done inline.
async fn start_batch<'a>(
    ring: &'a Ring,
    dir: Dir,
    batch: Vec<(usize, Transfer<'a>)>,
) -> impl Stream<Item = (usize, Outcome)> + Send + 'a {
    let mut done_inline = Vec::new();
    let (mut rest, mut reqs) = (Vec::new(), Vec::new());
    for (at, Transfer { file, mut buf, offset, len }) in batch {
        assert!(len > 0, "empty transfers are not submitted");
        let mut done = 0;
        if dir == Dir::Read {
            if let Some(end) = file.read_inline(&mut buf, offset, len, &mut done) {
                done_inline.push((at, (buf, end)));
                continue;
            }
        }
        if done == len {
            done_inline.push((at, (buf, Ok(()))));
            continue;
        }
        reqs.push(request(dir, &file.file, buf, offset, done, len));
        rest.push(Rest { at, file, offset, len, done });
    }
    let done_inline = stream::iter(done_inline);
    if reqs.is_empty() {
        return done_inline.left_stream();
    }
    let ops = ring.start(reqs).await;
    let running: FuturesUnordered<_> =
        ops.into_iter().zip(rest).map(|(op, rest)| finish(dir, op, rest)).collect();
    done_inline.chain(running).right_stream()
}

/// Await a submitted operation; go on with the transfer if it was short.
async fn finish(dir: Dir, op: Op<'_>, rest: Rest<'_>) -> (usize, Outcome) {
    let Rest { at, file, offset, len, mut done } = rest;
    let (res, buf) = op.await;
    let buf = buf.expect("a transfer gets its buffer back");
    let outcome = match advance(dir, file.direct, res, &mut done, len) {
        Some(end) => (buf, end),
        None => file.transfer(dir, buf, offset, len, done).await,
    };
    (at, outcome)
}
