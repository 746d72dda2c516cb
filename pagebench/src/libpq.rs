//! The libpq part of a page-service connection: startup, authentication, the
//! `pagestream_v2|v3 <tenant> <timeline>` query, and CopyData framing once the
//! stream is in CopyBoth mode. Messages are built and parsed with
//! postgres-protocol.
//!
//! Invariant: [`connect_pagestream`] returns only once the server has answered
//! the pagestream query with CopyBothResponse; bytes it read past that point
//! are handed back in the returned buffer, never dropped.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Bytes, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ErrorResponseBody, Header, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use utils::id::{TenantId, TimelineId};

use crate::connstring::ConnString;

/// Bound on the whole connection setup (TCP connect, startup, query).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Protocol version requested with the pagestream query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    V2,
    V3,
}

impl Protocol {
    pub fn query_word(self) -> &'static str {
        match self {
            Protocol::V2 => "pagestream_v2",
            Protocol::V3 => "pagestream_v3",
        }
    }
}

/// "SEVERITY SQLSTATE: message" of an ErrorResponse.
pub fn describe_error(body: &ErrorResponseBody) -> String {
    let mut severity = String::new();
    let mut code = String::new();
    let mut message = String::new();
    let mut fields = body.fields();
    loop {
        match fields.next() {
            Ok(Some(f)) => match f.type_() {
                b'S' => severity = String::from_utf8_lossy(f.value_bytes()).into_owned(),
                b'C' => code = String::from_utf8_lossy(f.value_bytes()).into_owned(),
                b'M' => message = String::from_utf8_lossy(f.value_bytes()).into_owned(),
                _ => {}
            },
            Ok(None) => break,
            Err(e) => return format!("malformed ErrorResponse: {e}"),
        }
    }
    format!("{severity} {code}: {message}")
}

/// A backend message: postgres-protocol's `Message`, plus CopyBothResponse,
/// which its parser does not know.
pub enum Backend {
    CopyBothResponse,
    Msg(Message),
}

/// Parses one complete message from the front of `buf`, if there is one.
fn parse_backend(buf: &mut BytesMut) -> anyhow::Result<Option<Backend>> {
    if buf.first() == Some(&b'W') {
        let Some(header) = Header::parse(buf).context("parse message header")? else {
            return Ok(None);
        };
        let total = 1 + header.len() as usize;
        if buf.len() < total {
            return Ok(None);
        }
        let _ = buf.split_to(total);
        return Ok(Some(Backend::CopyBothResponse));
    }
    Ok(Message::parse(buf).context("parse backend message")?.map(Backend::Msg))
}

/// Reads one backend message, filling `buf` from `reader` as needed.
/// `Ok(None)` means a clean EOF at a message boundary.
pub async fn read_message<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> anyhow::Result<Option<Backend>> {
    loop {
        if let Some(msg) = parse_backend(buf)? {
            return Ok(Some(msg));
        }
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        let n = reader.read_buf(buf).await.context("read from page service")?;
        if n == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            bail!("connection closed in the middle of a message ({} bytes pending)", buf.len());
        }
    }
}

/// Appends one CopyData message to `out` whose payload `write` appends in
/// place (no intermediate buffer); the length is patched in afterwards.
pub fn put_copy_data_with(out: &mut BytesMut, write: impl FnOnce(&mut BytesMut)) {
    use bytes::BufMut;
    let start = out.len();
    out.put_u8(b'd');
    out.put_i32(0);
    write(out);
    let len = i32::try_from(out.len() - start - 1).expect("CopyData payload fits in i32");
    out[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
}

/// Opens a libpq session and switches it to the pagestream sub-protocol.
/// Returns the socket and any bytes already read after CopyBothResponse.
pub async fn connect_pagestream(
    cs: &ConnString,
    tenant: TenantId,
    timeline: TimelineId,
    protocol: Protocol,
) -> anyhow::Result<(TcpStream, BytesMut)> {
    tokio::time::timeout(SETUP_TIMEOUT, setup(cs, tenant, timeline, protocol)).await.map_err(
        |_| anyhow!("connection setup to {} timed out after {SETUP_TIMEOUT:?}", cs.addr()),
    )?
}

async fn setup(
    cs: &ConnString,
    tenant: TenantId,
    timeline: TimelineId,
    protocol: Protocol,
) -> anyhow::Result<(TcpStream, BytesMut)> {
    let mut stream =
        TcpStream::connect(cs.addr()).await.with_context(|| format!("connect to {}", cs.addr()))?;
    stream.set_nodelay(true).context("set TCP_NODELAY")?;

    let mut out = BytesMut::new();
    frontend::startup_message(cs.startup_params(), &mut out).context("encode StartupMessage")?;
    stream.write_all(&out).await.context("send StartupMessage")?;
    out.clear();

    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let msg = read_message(&mut stream, &mut buf)
            .await?
            .context("server closed the connection during startup")?;
        let Backend::Msg(msg) = msg else { bail!("CopyBothResponse during startup") };
        match msg {
            Message::AuthenticationOk
            | Message::ParameterStatus(_)
            | Message::BackendKeyData(_)
            | Message::NoticeResponse(_) => {}
            Message::AuthenticationCleartextPassword => {
                let pw = cs
                    .password
                    .as_deref()
                    .context("server asks for a password (JWT) but the connstring has none")?;
                frontend::password_message(pw.as_bytes(), &mut out).context("encode password")?;
                stream.write_all(&out).await.context("send password")?;
                out.clear();
            }
            Message::ReadyForQuery(_) => break,
            Message::ErrorResponse(e) => bail!("startup refused: {}", describe_error(&e)),
            _ => bail!("unexpected message during startup"),
        }
    }

    let query = format!("{} {} {}", protocol.query_word(), tenant, timeline);
    frontend::query(&query, &mut out).context("encode Query")?;
    stream.write_all(&out).await.context("send pagestream query")?;
    loop {
        let msg = read_message(&mut stream, &mut buf)
            .await?
            .with_context(|| format!("server closed the connection after '{query}'"))?;
        let msg = match msg {
            Backend::CopyBothResponse => return Ok((stream, buf)),
            Backend::Msg(m) => m,
        };
        match msg {
            Message::NoticeResponse(_) | Message::ParameterStatus(_) => {}
            Message::ErrorResponse(e) => bail!("'{query}' refused: {}", describe_error(&e)),
            _ => bail!("unexpected reply to '{query}'"),
        }
    }
}

/// Terminate message, sent before closing a healthy stream.
pub fn terminate_message() -> Bytes {
    let mut out = BytesMut::new();
    frontend::terminate(&mut out);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_data_framing() {
        let mut out = BytesMut::from(&b"xy"[..]);
        put_copy_data_with(&mut out, |b| b.extend_from_slice(b"hello"));
        assert_eq!(&out[..], b"xyd\x00\x00\x00\x09hello");
        let mut parsed = BytesMut::from(&out[2..]);
        match parse_backend(&mut parsed).unwrap() {
            Some(Backend::Msg(Message::CopyData(body))) => assert_eq!(body.data(), b"hello"),
            _ => panic!("not a CopyData"),
        }
        assert!(parsed.is_empty());
    }

    #[test]
    fn copy_both_response_is_recognised() {
        // 'W', len 7, format 0, 0 columns; then the first byte of a CopyData.
        let mut buf = BytesMut::from(&b"W\x00\x00\x00\x07\x00\x00\x00d"[..]);
        assert!(matches!(parse_backend(&mut buf).unwrap(), Some(Backend::CopyBothResponse)));
        assert_eq!(&buf[..], b"d");
        assert!(parse_backend(&mut buf).unwrap().is_none());
        let mut partial = BytesMut::from(&b"W\x00\x00\x00\x07\x00"[..]);
        assert!(parse_backend(&mut partial).unwrap().is_none());
        assert_eq!(partial.len(), 6);
    }
}
