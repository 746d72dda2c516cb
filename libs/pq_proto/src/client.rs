//! The client side of a libpq session: connect, start up (with any
//! parameters, e.g. `replication=true`), authenticate with a cleartext
//! password, run simple queries (rows as text), and enter CopyBoth or
//! CopyOut. Frontend messages are encoded with `postgres-protocol`;
//! backend messages are decoded by [`parse_backend`].
//!
//! Invariant: bytes read past the message a call returns stay in the
//! client's buffer (handed back with the stream by [`Client::into_parts`]),
//! never dropped.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::framing::{parse_frame, ErrorFields};

/// Largest backend message a client accepts (a CopyData of WAL is at most
/// a few hundred KiB; a DataRow of a basebackup manifest likewise).
pub const MAX_BACKEND_MESSAGE_LEN: usize = 64 * 1024 * 1024;

/// One backend message, decoded as far as a client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendMessage {
    AuthenticationOk,
    AuthenticationCleartextPassword,
    /// Any other authentication request (by its code): unsupported here.
    AuthenticationOther(i32),
    ParameterStatus {
        name: String,
        value: String,
    },
    BackendKeyData {
        pid: i32,
        key: i32,
    },
    ReadyForQuery(u8),
    RowDescription(Vec<String>),
    DataRow(Vec<Option<Bytes>>),
    CommandComplete(String),
    EmptyQueryResponse,
    ErrorResponse(ErrorFields),
    NoticeResponse(ErrorFields),
    CopyInResponse,
    CopyOutResponse,
    CopyBothResponse,
    CopyData(Bytes),
    CopyDone,
    /// Any other message type, undecoded.
    Other {
        tag: u8,
        body: Bytes,
    },
}

fn need(body: &Bytes, n: usize, what: &str) -> anyhow::Result<()> {
    if body.len() < n {
        bail!("truncated {what}: {} bytes", body.len());
    }
    Ok(())
}

fn take_cstr(body: &mut Bytes) -> anyhow::Result<String> {
    let nul = body.iter().position(|&b| b == 0).context("string without a NUL terminator")?;
    let s = String::from_utf8_lossy(&body[..nul]).into_owned();
    body.advance(nul + 1);
    Ok(s)
}

/// One complete backend message from the front of `buf` (consumed), or
/// `None` if more bytes are needed. The declared length is checked against
/// [`MAX_BACKEND_MESSAGE_LEN`] first.
pub fn parse_backend(buf: &mut BytesMut) -> anyhow::Result<Option<BackendMessage>> {
    let Some(head) = parse_frame(buf, MAX_BACKEND_MESSAGE_LEN).map_err(|e| anyhow!("{e}"))? else {
        return Ok(None);
    };
    let mut frame = buf.split_to(head.total_len()).freeze();
    frame.advance(5);
    decode_backend(head.tag, frame).map(Some)
}

fn decode_backend(tag: u8, mut body: Bytes) -> anyhow::Result<BackendMessage> {
    Ok(match tag {
        b'R' => {
            need(&body, 4, "Authentication")?;
            match body.get_i32() {
                0 => BackendMessage::AuthenticationOk,
                3 => BackendMessage::AuthenticationCleartextPassword,
                other => BackendMessage::AuthenticationOther(other),
            }
        }
        b'S' => BackendMessage::ParameterStatus {
            name: take_cstr(&mut body)?,
            value: take_cstr(&mut body)?,
        },
        b'K' => {
            need(&body, 8, "BackendKeyData")?;
            BackendMessage::BackendKeyData { pid: body.get_i32(), key: body.get_i32() }
        }
        b'Z' => {
            need(&body, 1, "ReadyForQuery")?;
            BackendMessage::ReadyForQuery(body[0])
        }
        b'T' => {
            need(&body, 2, "RowDescription")?;
            let n = body.get_i16().max(0) as usize;
            let mut cols = Vec::with_capacity(n.min(body.len() / 19 + 1));
            for _ in 0..n {
                cols.push(take_cstr(&mut body)?);
                need(&body, 18, "RowDescription field")?;
                body.advance(18);
            }
            BackendMessage::RowDescription(cols)
        }
        b'D' => {
            need(&body, 2, "DataRow")?;
            let n = body.get_i16().max(0) as usize;
            let mut vals = Vec::with_capacity(n.min(body.len() / 4 + 1));
            for _ in 0..n {
                need(&body, 4, "DataRow value length")?;
                let len = body.get_i32();
                if len < 0 {
                    vals.push(None);
                } else {
                    need(&body, len as usize, "DataRow value")?;
                    vals.push(Some(body.split_to(len as usize)));
                }
            }
            BackendMessage::DataRow(vals)
        }
        b'C' => BackendMessage::CommandComplete(take_cstr(&mut body)?),
        b'I' => BackendMessage::EmptyQueryResponse,
        b'E' => {
            BackendMessage::ErrorResponse(ErrorFields::parse(&body).map_err(|e| anyhow!("{e}"))?)
        }
        b'N' => {
            BackendMessage::NoticeResponse(ErrorFields::parse(&body).map_err(|e| anyhow!("{e}"))?)
        }
        b'G' => BackendMessage::CopyInResponse,
        b'H' => BackendMessage::CopyOutResponse,
        b'W' => BackendMessage::CopyBothResponse,
        b'd' => BackendMessage::CopyData(body),
        b'c' => BackendMessage::CopyDone,
        tag => BackendMessage::Other { tag, body },
    })
}

/// Reads one backend message, filling `buf` from `reader` as needed.
/// `Ok(None)` means a clean EOF at a message boundary.
pub async fn read_backend<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> anyhow::Result<Option<BackendMessage>> {
    loop {
        if let Some(msg) = parse_backend(buf)? {
            return Ok(Some(msg));
        }
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(64 * 1024);
        }
        let n = reader.read_buf(buf).await.context("read from the server")?;
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
    let start = out.len();
    out.put_u8(b'd');
    out.put_i32(0);
    write(out);
    let len = i32::try_from(out.len() - start - 1).expect("CopyData payload fits in i32");
    out[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
}

/// The Terminate message.
pub fn terminate_message() -> Bytes {
    let mut out = BytesMut::new();
    frontend::terminate(&mut out);
    out.freeze()
}

/// A started-up libpq session.
pub struct Client {
    stream: TcpStream,
    buf: BytesMut,
    out: BytesMut,
}

/// Rows of a simple query, as text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl Client {
    /// Connect to `addr`, send a StartupMessage with `params`, answer a
    /// cleartext password request with `password`, and wait for
    /// ReadyForQuery; all within `timeout`.
    pub async fn connect(
        addr: &str,
        params: &[(&str, &str)],
        password: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<Client> {
        tokio::time::timeout(timeout, Self::connect_inner(addr, params, password))
            .await
            .map_err(|_| anyhow!("connection setup to {addr} timed out after {timeout:?}"))?
    }

    async fn connect_inner(
        addr: &str,
        params: &[(&str, &str)],
        password: Option<&str>,
    ) -> anyhow::Result<Client> {
        let stream =
            TcpStream::connect(addr).await.with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true).context("set TCP_NODELAY")?;
        let mut c =
            Client { stream, buf: BytesMut::with_capacity(64 * 1024), out: BytesMut::new() };
        frontend::startup_message(params.iter().copied(), &mut c.out)
            .context("encode StartupMessage")?;
        c.send().await?;
        loop {
            match c.recv().await?.context("server closed the connection during startup")? {
                BackendMessage::AuthenticationOk
                | BackendMessage::ParameterStatus { .. }
                | BackendMessage::BackendKeyData { .. }
                | BackendMessage::NoticeResponse(_) => {}
                BackendMessage::AuthenticationCleartextPassword => {
                    let pw =
                        password.context("the server asks for a password and none was given")?;
                    frontend::password_message(pw.as_bytes(), &mut c.out)
                        .context("encode password")?;
                    c.send().await?;
                }
                BackendMessage::AuthenticationOther(code) => {
                    bail!("the server asks for authentication method {code}, which this client does not speak")
                }
                BackendMessage::ReadyForQuery(_) => return Ok(c),
                BackendMessage::ErrorResponse(e) => bail!("startup refused: {e}"),
                other => bail!("unexpected message during startup: {other:?}"),
            }
        }
    }

    async fn send(&mut self) -> anyhow::Result<()> {
        self.stream.write_all(&self.out).await.context("send to the server")?;
        self.out.clear();
        Ok(())
    }

    /// The next backend message (`None`: the server closed the connection).
    pub async fn recv(&mut self) -> anyhow::Result<Option<BackendMessage>> {
        read_backend(&mut self.stream, &mut self.buf).await
    }

    /// Run a simple query to its ReadyForQuery; an ErrorResponse is an error.
    pub async fn simple_query(&mut self, query: &str) -> anyhow::Result<QueryResult> {
        frontend::query(query, &mut self.out).context("encode Query")?;
        self.send().await?;
        let mut res = QueryResult::default();
        let mut error = None;
        loop {
            match self
                .recv()
                .await?
                .with_context(|| format!("server closed the connection after '{query}'"))?
            {
                BackendMessage::RowDescription(cols) => res.columns = cols,
                BackendMessage::DataRow(vals) => res.rows.push(
                    vals.into_iter()
                        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                        .collect(),
                ),
                BackendMessage::ErrorResponse(e) => error = Some(e),
                BackendMessage::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        match error {
            Some(e) => bail!("'{query}' failed: {e}"),
            None => Ok(res),
        }
    }

    /// Send `query` and wait for CopyBothResponse (or CopyOutResponse);
    /// returns which one came. An ErrorResponse is an error.
    pub async fn start_copy(&mut self, query: &str) -> anyhow::Result<BackendMessage> {
        frontend::query(query, &mut self.out).context("encode Query")?;
        self.send().await?;
        loop {
            match self
                .recv()
                .await?
                .with_context(|| format!("server closed the connection after '{query}'"))?
            {
                m @ (BackendMessage::CopyBothResponse | BackendMessage::CopyOutResponse) => {
                    return Ok(m)
                }
                BackendMessage::NoticeResponse(_) | BackendMessage::ParameterStatus { .. } => {}
                BackendMessage::ErrorResponse(e) => bail!("'{query}' refused: {e}"),
                other => bail!("unexpected reply to '{query}': {other:?}"),
            }
        }
    }

    /// The socket and the bytes already read from it.
    pub fn into_parts(self) -> (TcpStream, BytesMut) {
        (self.stream, self.buf)
    }
}
