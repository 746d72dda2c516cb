//! The server side of the PostgreSQL v3 wire protocol, as much of it as a
//! page service needs: framing of frontend messages off a socket, and
//! encoders for the backend messages it sends.
//!
//! `postgres-protocol` implements the *client* side (frontend encoders,
//! backend parsers); the tests use it as an independent client. The server
//! side is small enough to write here, and writing it here lets the hot path
//! frame responses straight into one output buffer.
//!
//! Invariants:
//! - [`FrameReader`] never allocates per message: it hands out a borrowed view
//!   of its buffer, valid until the next read; frames longer than
//!   [`MAX_MESSAGE_LEN`] (or startup packets outside 8..=10000 bytes) are a
//!   protocol violation, so a client cannot make it buffer without bound;
//! - every socket operation that can block races the caller's cancellation
//!   token, so a peer that stops reading or writing never blocks shutdown;
//! - [`FrameWriter`] only buffers; bytes reach the socket in [`FrameWriter::flush`].
//!   Pagestream pages and SLRU segments are not copied into its buffer: it
//!   keeps the `Bytes` and sends them in place with vectored writes, in the
//!   order they were encoded.

use std::io::IoSlice;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use pageserver_api::pagestream::{PagestreamBeMessage, PagestreamProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::sync::CancellationToken;

use super::error::{sqlstate, QueryError};

/// Upper bound of a tagged frontend message (tag excluded). Pagestream
/// requests are at most 42 bytes, queries and JWTs a few hundred.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;
/// Bounds of a startup packet, length word included (as PostgreSQL's).
pub const MIN_STARTUP_LEN: usize = 8;
pub const MAX_STARTUP_LEN: usize = 10_000;

const PROTOCOL_VERSION_3: u32 = 3 << 16;
const CANCEL_REQUEST_CODE: u32 = (1234 << 16) | 5678;
const SSL_REQUEST_CODE: u32 = (1234 << 16) | 5679;
const GSSENC_REQUEST_CODE: u32 = (1234 << 16) | 5680;

/// Initial (and retained) capacity of the read and write buffers.
const READ_BUF_CAPACITY: usize = 16 * 1024;
const WRITE_BUF_CAPACITY: usize = 64 * 1024;
/// A write buffer that grew beyond this (a big SLRU segment) is released after the flush.
const WRITE_BUF_RETAIN: usize = 1024 * 1024;

/// The first packet of a connection.
#[derive(Debug, PartialEq, Eq)]
pub enum StartupPacket {
    SslRequest,
    GssEncRequest,
    CancelRequest,
    /// Protocol 3.0 with its `name=value` parameters (informational here).
    Startup {
        params: Vec<(String, String)>,
    },
}

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

fn violation(message: impl Into<String>) -> QueryError {
    QueryError::fatal(sqlstate::PROTOCOL_VIOLATION, message)
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
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if !(MIN_STARTUP_LEN..=MAX_STARTUP_LEN).contains(&len) {
                    return Err(violation(format!("invalid startup packet length {len}")));
                }
                if self.buf.len() >= len {
                    let mut body = &self.buf[4..len];
                    let code = body.get_u32();
                    let packet = match code {
                        SSL_REQUEST_CODE => StartupPacket::SslRequest,
                        GSSENC_REQUEST_CODE => StartupPacket::GssEncRequest,
                        CANCEL_REQUEST_CODE => StartupPacket::CancelRequest,
                        PROTOCOL_VERSION_3 => {
                            StartupPacket::Startup { params: parse_params(body)? }
                        }
                        other => {
                            return Err(QueryError::fatal(
                                sqlstate::FEATURE_NOT_SUPPORTED,
                                format!(
                                    "unsupported frontend protocol {}.{}: server supports 3.0",
                                    other >> 16,
                                    other & 0xffff
                                ),
                            ))
                        }
                    };
                    self.buf.advance(len);
                    return Ok(Some(packet));
                }
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
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if len < 4 {
                    return Err(violation(format!("invalid message length {len}")));
                }
                if len - 4 > MAX_MESSAGE_LEN {
                    return Err(violation(format!(
                        "message of {} bytes exceeds the limit of {MAX_MESSAGE_LEN} bytes",
                        len - 4
                    )));
                }
                if self.buf.len() > len {
                    self.consumed = 1 + len;
                    return Ok(Some(Frame { tag: self.buf[0], body: &self.buf[5..1 + len] }));
                }
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

/// `name\0value\0 ... \0` of a StartupMessage.
fn parse_params(mut body: &[u8]) -> Result<Vec<(String, String)>, QueryError> {
    let mut params = Vec::new();
    loop {
        let name = read_cstr(&mut body)?;
        if name.is_empty() {
            break;
        }
        let value = read_cstr(&mut body)?;
        params.push((name.to_string(), value.to_string()));
    }
    if !body.is_empty() {
        return Err(violation("trailing bytes after startup parameters"));
    }
    Ok(params)
}

/// A NUL-terminated UTF-8 string from the front of `body`.
pub fn read_cstr<'a>(body: &mut &'a [u8]) -> Result<&'a str, QueryError> {
    let nul = body
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| violation("missing NUL terminator in a string"))?;
    let s = std::str::from_utf8(&body[..nul]).map_err(|_| violation("string is not UTF-8"))?;
    *body = &body[nul + 1..];
    Ok(s)
}

/// The body of a message that is exactly one C string (Query, PasswordMessage).
pub fn single_cstr(mut body: &[u8]) -> Result<&str, QueryError> {
    let s = read_cstr(&mut body)?;
    if !body.is_empty() {
        return Err(violation("trailing bytes after a string message"));
    }
    Ok(s)
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

    /// Appends one pagestream response in one CopyData; a page or SLRU
    /// segment is referenced, not copied.
    pub fn pagestream(&mut self, msg: &PagestreamBeMessage, v: PagestreamProtocolVersion) {
        let len = msg.serialized_len(v);
        self.buf.reserve(5 + 64);
        self.buf.put_u8(b'd');
        self.buf.put_u32(4 + len as u32);
        let start = self.buf.len();
        let body = msg.serialize_head_into(&mut self.buf, v);
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

/// Encoders of backend messages, appending to a buffer.
pub mod be {
    use super::*;

    /// Appends `tag`, a length placeholder, the body written by `f`, then
    /// patches the length (which counts itself, not the tag).
    fn frame(buf: &mut BytesMut, tag: u8, f: impl FnOnce(&mut BytesMut)) {
        buf.put_u8(tag);
        let at = buf.len();
        buf.put_u32(0);
        f(buf);
        let len = (buf.len() - at) as u32;
        buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn put_cstr(buf: &mut BytesMut, s: &str) {
        for &b in s.as_bytes() {
            buf.put_u8(if b == 0 { b' ' } else { b });
        }
        buf.put_u8(0);
    }

    /// The single byte answering SSLRequest / GSSENCRequest: not supported.
    pub fn encryption_refused(buf: &mut BytesMut) {
        buf.put_u8(b'N');
    }

    pub fn auth_ok(buf: &mut BytesMut) {
        frame(buf, b'R', |b| b.put_i32(0));
    }

    pub fn auth_cleartext_password(buf: &mut BytesMut) {
        frame(buf, b'R', |b| b.put_i32(3));
    }

    pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
        frame(buf, b'S', |b| {
            put_cstr(b, name);
            put_cstr(b, value);
        });
    }

    /// ReadyForQuery, idle.
    pub fn ready_for_query(buf: &mut BytesMut) {
        frame(buf, b'Z', |b| b.put_u8(b'I'));
    }

    pub fn empty_query_response(buf: &mut BytesMut) {
        frame(buf, b'I', |_| {});
    }

    /// ErrorResponse with fields S and V (`severity`), C (`code`), M.
    pub fn error_response(buf: &mut BytesMut, severity: &str, code: &[u8; 5], message: &str) {
        frame(buf, b'E', |b| {
            b.put_u8(b'S');
            put_cstr(b, severity);
            b.put_u8(b'V');
            put_cstr(b, severity);
            b.put_u8(b'C');
            b.put_slice(code);
            b.put_u8(0);
            b.put_u8(b'M');
            put_cstr(b, message);
            b.put_u8(0);
        });
    }

    /// CopyBothResponse: overall format 0 (text), 0 columns.
    pub fn copy_both_response(buf: &mut BytesMut) {
        frame(buf, b'W', |b| {
            b.put_u8(0);
            b.put_i16(0);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_message_layouts() {
        let mut b = BytesMut::new();
        be::auth_ok(&mut b);
        assert_eq!(&b[..], b"R\0\0\0\x08\0\0\0\0");
        b.clear();
        be::ready_for_query(&mut b);
        assert_eq!(&b[..], b"Z\0\0\0\x05I");
        b.clear();
        be::copy_both_response(&mut b);
        assert_eq!(&b[..], b"W\0\0\0\x07\0\0\0");
        b.clear();
        be::parameter_status(&mut b, "a", "bc");
        assert_eq!(&b[..], b"S\0\0\0\x09a\0bc\0");
        b.clear();
        be::error_response(&mut b, "ERROR", b"XX000", "boom");
        assert_eq!(&b[..], b"E\0\0\0\x20SERROR\0VERROR\0CXX000\0Mboom\0\0");
    }

    #[test]
    fn params_parse_and_reject_garbage() {
        let p = parse_params(b"user\0u\0database\0d\0\0").unwrap();
        assert_eq!(p, vec![("user".into(), "u".into()), ("database".into(), "d".into())]);
        assert!(parse_params(b"user\0u\0\0x").is_err());
        assert!(parse_params(b"user\0u").is_err());
        assert!(single_cstr(b"select 1\0").is_ok());
        assert!(single_cstr(b"select 1\0\0").is_err());
        assert!(single_cstr(b"select 1").is_err());
    }
}
