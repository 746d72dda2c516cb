//! Files of the io-uring engine: transfer loops over ring operations
//! (short transfers go on, EOF before `len` is `UnexpectedEof`), fsync
//! through the ring, and batches submitted with one `io_uring_enter`.
//! Reads that do not block and some buffered writes skip the ring
//! (`inline.rs`).
//!
//! `open`, `len` and `set_len` are synchronous std calls, as in std-fs
//! (`select.rs` owns the descriptor).

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::inline::InlinePaths;
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

/// Run transfers of one direction as batches of at most `BATCH_MAX_OPS`:
/// reads first try their inline attempt; what is left of a batch is
/// pushed under one lock and submitted with one `io_uring_enter`, then
/// awaited before the next batch (so a batch never waits for slots its own
/// finished operations hold). Short transfers go on one by one. Results
/// are in the order of `items`. Every item has `len > 0`.
pub(crate) async fn transfer_many(ring: &Ring, dir: Dir, items: Vec<Transfer<'_>>) -> Vec<Outcome> {
    let mut out: Vec<Option<Outcome>> = Vec::with_capacity(items.len());
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let chunk: Vec<Transfer<'_>> = items.by_ref().take(BATCH_MAX_OPS).collect();
        run_batch(ring, dir, chunk, &mut out).await;
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

async fn run_batch<'a>(
    ring: &Ring,
    dir: Dir,
    chunk: Vec<Transfer<'a>>,
    out: &mut Vec<Option<Outcome>>,
) {
    let mut rest = Vec::with_capacity(chunk.len());
    let mut reqs = Vec::with_capacity(chunk.len());
    for Transfer { file, mut buf, offset, len } in chunk {
        assert!(len > 0, "empty transfers are not submitted");
        let mut done = 0;
        if dir == Dir::Read {
            if let Some(end) = file.read_inline(&mut buf, offset, len, &mut done) {
                out.push(Some((buf, end)));
                continue;
            }
        }
        if done == len {
            out.push(Some((buf, Ok(()))));
            continue;
        }
        rest.push(Rest { at: out.len(), file, offset, len, done });
        out.push(None);
        reqs.push(request(dir, &file.file, buf, offset, done, len));
    }
    if reqs.is_empty() {
        return;
    }
    let ops = ring.start(reqs).await;
    for (op, Rest { at, file, offset, len, mut done }) in ops.into_iter().zip(rest) {
        let (res, buf) = op.await;
        let buf = buf.expect("a transfer gets its buffer back");
        out[at] = Some(match advance(dir, file.direct, res, &mut done, len) {
            Some(end) => (buf, end),
            None => file.transfer(dir, buf, offset, len, done).await,
        });
    }
}
