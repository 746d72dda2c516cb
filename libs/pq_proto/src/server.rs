//! The server side of a libpq session on a socket: [`FrameReader`] reads
//! the startup packet and tagged frontend messages (decoded by `framing`),
//! [`FrameWriter`] buffers backend messages (encoded by `backend`) and
//! writes them out.
//!
//! Invariants:
//! - [`FrameReader`] never allocates per message: it hands out a borrowed
//!   view of its buffer, valid until the next read; declared lengths are
//!   checked against their bounds before it waits for the bytes;
//! - every socket operation that can block races the caller's cancellation
//!   token, so a peer that stops reading or writing never blocks shutdown;
//! - [`FrameWriter`] only buffers; bytes reach the socket in
//!   [`FrameWriter::flush`]. Bodies given to
//!   [`FrameWriter::copy_data_with_body`] (pagestream pages, SLRU segments)
//!   are not copied: they go out in place with vectored writes, in order.

use std::io::IoSlice;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::sync::CancellationToken;

use crate::error::QueryError;
use crate::framing::{
    parse_frame, parse_startup, violation, FrameHead, StartupPacket, MAX_MESSAGE_LEN,
};

/// Most bytes [`FrameReader::wait_closed`] buffers while watching for EOF.
pub const MAX_READ_AHEAD: usize = 1024 * 1024;
/// Initial (and retained) capacity of the read and write buffers.
const READ_BUF_CAPACITY: usize = 16 * 1024;
const WRITE_BUF_CAPACITY: usize = 64 * 1024;
/// A write buffer that grew beyond this (a big SLRU segment) is released after the flush.
const WRITE_BUF_RETAIN: usize = 1024 * 1024;

/// One tagged frontend message, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub tag: u8,
    pub body: &'a [u8],
}

pub struct FrameReader {
    rd: OwnedReadHalf,
    buf: BytesMut,
    /// Bytes of the frame handed out by the previous call, dropped on the next.
    consumed: usize,
}

impl FrameReader {
    pub fn new(rd: OwnedReadHalf) -> FrameReader {
        FrameReader { rd, buf: BytesMut::with_capacity(READ_BUF_CAPACITY), consumed: 0 }
    }

    /// Reads more bytes into the buffer. `Ok(false)` on EOF.
    async fn fill(&mut self, cancel: &CancellationToken) -> Result<bool, QueryError> {
        if self.buf.capacity() - self.buf.len() < 1024 {
            self.buf.reserve(READ_BUF_CAPACITY);
        }
        let n = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(QueryError::Shutdown),
            r = self.rd.read_buf(&mut self.buf) => r?,
        };
        Ok(n > 0)
    }

    /// Returns once the client has closed its side of the connection (EOF
    /// or a socket error); never returns while it stays connected. Bytes
    /// that arrive meanwhile are kept in the buffer for the next
    /// `read_message` (up to [`MAX_READ_AHEAD`]; beyond that the socket is
    /// left unread, so a client that keeps sending meets backpressure).
    /// Cancel-safe: race it with the work it guards.
    pub async fn wait_closed(&mut self) {
        loop {
            if self.buf.len() >= MAX_READ_AHEAD {
                return std::future::pending().await;
            }
            self.buf.reserve(READ_BUF_CAPACITY);
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Lingering close after a fatal error: discards what the client still
    /// sends until it closes its side, for at most `timeout` or `limit`
    /// bytes. Closing a socket with unread input makes the kernel send RST,
    /// which can destroy the ErrorResponse before the client reads it.
    pub async fn drain(&mut self, timeout: Duration, limit: usize) {
        self.consumed = 0;
        let mut total = 0;
        let _ = tokio::time::timeout(timeout, async {
            loop {
                total += self.buf.len();
                self.buf.clear();
                if total > limit {
                    return;
                }
                self.buf.reserve(READ_BUF_CAPACITY);
                match self.rd.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }

    /// Reads the startup packet. `Ok(None)` if the client closed the
    /// connection before sending anything.
    pub async fn read_startup(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<StartupPacket>, QueryError> {
        self.buf.advance(std::mem::take(&mut self.consumed));
        loop {
            if let Some((packet, len)) = parse_startup(&self.buf)? {
                self.buf.advance(len);
                return Ok(Some(packet));
            }
            if !self.fill(cancel).await? {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(violation("connection closed in the middle of the startup packet"));
            }
        }
    }

    /// Reads one tagged message. `Ok(None)` on EOF at a message boundary.
    /// Returns at once, without polling the socket or `cancel`, when a
    /// complete message is already buffered.
    pub async fn read_message(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Frame<'_>>, QueryError> {
        self.buf.advance(std::mem::take(&mut self.consumed));
        loop {
            if let Some(FrameHead { tag, body_len }) = parse_frame(&self.buf, MAX_MESSAGE_LEN)? {
                self.consumed = 5 + body_len;
                return Ok(Some(Frame { tag, body: &self.buf[5..5 + body_len] }));
            }
            if !self.fill(cancel).await? {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(violation("connection closed in the middle of a message"));
            }
        }
    }
}

/// Most slices one `writev` takes (Linux `IOV_MAX`).
const MAX_IOVECS: usize = 1024;

/// Buffered backend messages and the write half they go out on.
pub struct FrameWriter {
    wr: OwnedWriteHalf,
    buf: BytesMut,
    /// Bodies sent in place: `(at, body)` goes out right after `buf[..at]`;
    /// `at` never decreases.
    bodies: Vec<(usize, Bytes)>,
}

impl FrameWriter {
    pub fn new(wr: OwnedWriteHalf) -> FrameWriter {
        FrameWriter { wr, buf: BytesMut::with_capacity(WRITE_BUF_CAPACITY), bodies: Vec::new() }
    }

    /// The output buffer, for the `be` encoders.
    pub fn buf(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Appends one CopyData whose payload is what `write_head` appends
    /// followed by the body it returns, which is not copied: it goes out in
    /// place, with a vectored write, right after the head. `len` is the
    /// whole payload's length (head and body).
    pub fn copy_data_with_body(
        &mut self,
        len: usize,
        write_head: impl FnOnce(&mut BytesMut) -> Option<Bytes>,
    ) {
        let len32 = u32::try_from(4 + len).expect("CopyData payload fits in a message");
        self.buf.reserve(5 + 64);
        self.buf.put_u8(b'd');
        self.buf.put_u32(len32);
        let start = self.buf.len();
        let body = write_head(&mut self.buf);
        let head = self.buf.len() - start;
        debug_assert_eq!(head + body.as_ref().map_or(0, |b| b.len()), len);
        if let Some(body) = body.filter(|b| !b.is_empty()) {
            self.bodies.push((self.buf.len(), body));
        }
    }

    /// Sends FIN after everything written so far (a half close).
    pub async fn shutdown(&mut self) {
        let _ = self.wr.shutdown().await;
    }

    /// Writes everything buffered to the socket.
    pub async fn flush(&mut self, cancel: &CancellationToken) -> Result<(), QueryError> {
        if self.bodies.is_empty() {
            if self.buf.is_empty() {
                return Ok(());
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(QueryError::Shutdown),
                r = self.wr.write_all(&self.buf) => r?,
            }
        } else {
            let mut slices = Vec::with_capacity(2 * self.bodies.len() + 1);
            let mut from = 0;
            for (at, body) in &self.bodies {
                if *at > from {
                    slices.push(IoSlice::new(&self.buf[from..*at]));
                }
                slices.push(IoSlice::new(body));
                from = *at;
            }
            if from < self.buf.len() {
                slices.push(IoSlice::new(&self.buf[from..]));
            }
            let mut rest = &mut slices[..];
            while !rest.is_empty() {
                let n = rest.len().min(MAX_IOVECS);
                let written = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(QueryError::Shutdown),
                    r = self.wr.write_vectored(&rest[..n]) => r?,
                };
                if written == 0 {
                    return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
                }
                IoSlice::advance_slices(&mut rest, written);
            }
            self.bodies.clear();
        }
        self.buf.clear();
        if self.buf.capacity() > WRITE_BUF_RETAIN {
            self.buf = BytesMut::with_capacity(WRITE_BUF_CAPACITY);
        }
        Ok(())
    }
}
