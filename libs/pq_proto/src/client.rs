//! The client side of a libpq session: connect, start up (with any
//! parameters, e.g. `replication=true`), authenticate (cleartext, md5 or
//! SCRAM-SHA-256), run simple queries (rows as text), and enter CopyBoth or
//! CopyOut. Frontend messages are encoded with `postgres-protocol`;
//! backend messages are decoded by [`parse_backend`]. Shared by pagebench,
//! the integration tests and the replication client ([`crate::replication`]).
//!
//! Invariants:
//! - bytes read past the message a call returns stay in the client's
//!   buffer (handed back with the stream by [`Client::into_parts`]), never
//!   dropped;
//! - no backend message longer than [`MAX_BACKEND_MESSAGE_LEN`] is
//!   buffered: the length word is checked before the body is awaited;
//! - reading ([`Client::recv`], [`read_backend`]) and flushing
//!   ([`Client::flush`]) are cancel-safe: a dropped call loses no bytes;
//! - a command interrupted mid-way (an error, or a dropped future) leaves
//!   the session out of step with the server: the client then refuses
//!   further commands ([`ClientError::Desynchronized`]) instead of reading
//!   the previous command's replies as the next one's.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::connstring::ConnString;
use crate::framing::{parse_frame, ErrorFields};

/// Largest backend message a client accepts (a CopyData of WAL is at most
/// a few hundred KiB; a DataRow of a basebackup manifest likewise).
pub const MAX_BACKEND_MESSAGE_LEN: usize = 64 * 1024 * 1024;

/// How much the read buffer grows by when it needs room.
const READ_CHUNK: usize = 64 * 1024;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The cause is in the message, not in `source()`: a chain printed
    /// whole (`{:#}`) names it once.
    #[error("connect to {addr}: {cause}")]
    Connect { addr: String, cause: std::io::Error },
    #[error("{what} timed out after {after:?}")]
    Timeout { what: String, after: Duration },
    /// The socket failed while reading or writing.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The server closed the connection where a message was expected.
    #[error("the server closed the connection {during}")]
    Closed { during: String },
    /// The server sent something this client cannot make sense of.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The server answered with an ErrorResponse (its SQLSTATE in
    /// `fields.code`).
    #[error("{context}: {fields}")]
    Server { context: String, fields: Box<ErrorFields> },
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The server offers something this client does not support.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// An earlier command did not run to completion.
    #[error(
        "the session is out of step with the server after an interrupted command ({0}); reconnect"
    )]
    Desynchronized(String),
    #[error(transparent)]
    ConnString(#[from] crate::connstring::ConnStringError),
}

impl ClientError {
    /// The SQLSTATE of a server error.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            ClientError::Server { fields, .. } => Some(&fields.code),
            _ => None,
        }
    }

    /// The fields of a server error.
    pub fn server_error(&self) -> Option<&ErrorFields> {
        match self {
            ClientError::Server { fields, .. } => Some(fields),
            _ => None,
        }
    }

    /// A server error answering `context`.
    pub fn server(context: impl Into<String>, fields: ErrorFields) -> ClientError {
        ClientError::Server { context: context.into(), fields: Box::new(fields) }
    }

    pub(crate) fn protocol(message: impl Into<String>) -> ClientError {
        ClientError::Protocol(message.into())
    }

    fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ClientError {
        move |source| ClientError::Io { what, source }
    }
}

/// One backend message, decoded as far as a client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendMessage {
    AuthenticationOk,
    AuthenticationCleartextPassword,
    AuthenticationMd5Password([u8; 4]),
    /// AuthenticationSASL with the mechanisms offered.
    AuthenticationSasl(Vec<String>),
    AuthenticationSaslContinue(Bytes),
    AuthenticationSaslFinal(Bytes),
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

fn need(body: &Bytes, n: usize, what: &str) -> Result<(), ClientError> {
    if body.len() < n {
        return Err(ClientError::protocol(format!(
            "truncated {what}: {} bytes, at least {n} expected",
            body.len()
        )));
    }
    Ok(())
}

fn take_cstr(body: &mut Bytes, what: &str) -> Result<String, ClientError> {
    let nul = body
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| ClientError::protocol(format!("{what}: string without a NUL terminator")))?;
    let s = String::from_utf8_lossy(&body[..nul]).into_owned();
    body.advance(nul + 1);
    Ok(s)
}

/// One complete tagged message `(tag, body)` from the front of `buf`
/// (consumed), or `None` if more bytes are needed. The declared length is
/// checked against [`MAX_BACKEND_MESSAGE_LEN`] first.
pub fn parse_backend_frame(buf: &mut BytesMut) -> Result<Option<(u8, Bytes)>, ClientError> {
    let head = parse_frame(buf, MAX_BACKEND_MESSAGE_LEN)
        .map_err(|e| ClientError::protocol(format!("backend message: {e}")))?;
    let Some(head) = head else {
        return Ok(None);
    };
    let mut frame = buf.split_to(head.total_len()).freeze();
    frame.advance(5);
    Ok(Some((head.tag, frame)))
}

/// One complete backend message from the front of `buf` (consumed), or
/// `None` if more bytes are needed.
pub fn parse_backend(buf: &mut BytesMut) -> Result<Option<BackendMessage>, ClientError> {
    match parse_backend_frame(buf)? {
        Some((tag, body)) => decode_backend(tag, body).map(Some),
        None => Ok(None),
    }
}

fn decode_auth(mut body: Bytes) -> Result<BackendMessage, ClientError> {
    need(&body, 4, "Authentication")?;
    Ok(match body.get_i32() {
        0 => BackendMessage::AuthenticationOk,
        3 => BackendMessage::AuthenticationCleartextPassword,
        5 => {
            need(&body, 4, "AuthenticationMD5Password salt")?;
            BackendMessage::AuthenticationMd5Password([body[0], body[1], body[2], body[3]])
        }
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let m = take_cstr(&mut body, "AuthenticationSASL")?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m);
            }
            BackendMessage::AuthenticationSasl(mechanisms)
        }
        11 => BackendMessage::AuthenticationSaslContinue(body),
        12 => BackendMessage::AuthenticationSaslFinal(body),
        other => BackendMessage::AuthenticationOther(other),
    })
}

fn error_fields(body: &[u8]) -> Result<ErrorFields, ClientError> {
    ErrorFields::parse(body).map_err(|e| ClientError::protocol(format!("error fields: {e}")))
}

/// Decodes the body of a backend message of type `tag`.
pub fn decode_backend(tag: u8, mut body: Bytes) -> Result<BackendMessage, ClientError> {
    Ok(match tag {
        b'R' => decode_auth(body)?,
        b'S' => BackendMessage::ParameterStatus {
            name: take_cstr(&mut body, "ParameterStatus")?,
            value: take_cstr(&mut body, "ParameterStatus")?,
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
                cols.push(take_cstr(&mut body, "RowDescription")?);
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
        b'C' => BackendMessage::CommandComplete(take_cstr(&mut body, "CommandComplete")?),
        b'I' => BackendMessage::EmptyQueryResponse,
        b'E' => BackendMessage::ErrorResponse(error_fields(&body)?),
        b'N' => BackendMessage::NoticeResponse(error_fields(&body)?),
        b'G' => BackendMessage::CopyInResponse,
        b'H' => BackendMessage::CopyOutResponse,
        b'W' => BackendMessage::CopyBothResponse,
        b'd' => BackendMessage::CopyData(body),
        b'c' => BackendMessage::CopyDone,
        tag => BackendMessage::Other { tag, body },
    })
}

/// Reads one tagged message `(tag, body)`, filling `buf` from `reader` as
/// needed. `Ok(None)` means a clean EOF at a message boundary. Cancel-safe.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> Result<Option<(u8, Bytes)>, ClientError> {
    loop {
        if let Some(frame) = parse_backend_frame(buf)? {
            return Ok(Some(frame));
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let n = reader.read_buf(buf).await.map_err(ClientError::io("read from the server"))?;
        if n == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            return Err(ClientError::Closed {
                during: format!("in the middle of a message ({} bytes pending)", buf.len()),
            });
        }
    }
}

/// Reads one backend message, filling `buf` from `reader` as needed.
/// `Ok(None)` means a clean EOF at a message boundary. Cancel-safe.
pub async fn read_backend<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
) -> Result<Option<BackendMessage>, ClientError> {
    match read_frame(reader, buf).await? {
        Some((tag, body)) => decode_backend(tag, body).map(Some),
        None => Ok(None),
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

/// Rows of a simple query, as text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
    /// The CommandComplete tag of the last statement (`SELECT 1`, `SHOW`...).
    pub command_tag: String,
}

/// A libpq session.
pub struct Client {
    stream: TcpStream,
    /// Bytes read from the server and not yet returned.
    buf: BytesMut,
    /// Bytes to send; [`Client::flush`] drains it.
    out: BytesMut,
    /// ParameterStatus values, latest last.
    server_params: Vec<(String, String)>,
    /// The command in progress, if one has not reached its end: set when a
    /// command starts, cleared when it completes.
    in_progress: Option<String>,
}

impl Client {
    /// Connect to `addr`, send a StartupMessage with `params`, authenticate
    /// with `password` if the server asks, and wait for ReadyForQuery; all
    /// within `timeout`.
    pub async fn connect(
        addr: &str,
        params: &[(&str, &str)],
        password: Option<&str>,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        let setup = async {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|cause| ClientError::Connect { addr: addr.to_string(), cause })?;
            let mut c = Client::from_stream(stream)?;
            c.startup(params, password).await?;
            Ok(c)
        };
        tokio::time::timeout(timeout, setup).await.map_err(|_| ClientError::Timeout {
            what: format!("connection setup to {addr}"),
            after: timeout,
        })?
    }

    /// Connect as `cs` says, with `extra` startup parameters after its own.
    pub async fn connect_with(
        cs: &ConnString,
        extra: &[(&str, &str)],
    ) -> Result<Client, ClientError> {
        let mut params = cs.startup_params();
        params.extend_from_slice(extra);
        Client::connect(&cs.addr(), &params, cs.password.as_deref(), cs.connect_timeout).await
    }

    /// A session on an open socket, before the StartupMessage (which
    /// [`Client::startup`] sends; raw bytes such as an SSLRequest may go
    /// first).
    pub fn from_stream(stream: TcpStream) -> Result<Client, ClientError> {
        stream.set_nodelay(true).map_err(ClientError::io("set TCP_NODELAY"))?;
        Ok(Client {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            out: BytesMut::new(),
            server_params: Vec::new(),
            in_progress: None,
        })
    }

    /// Send a StartupMessage with `params` and run the session start up to
    /// ReadyForQuery, answering the server's authentication request with
    /// `password` (cleartext, md5 or SCRAM-SHA-256).
    pub async fn startup(
        &mut self,
        params: &[(&str, &str)],
        password: Option<&str>,
    ) -> Result<(), ClientError> {
        self.begin("startup")?;
        frontend::startup_message(params.iter().copied(), &mut self.out)
            .map_err(|e| ClientError::protocol(format!("encode StartupMessage: {e}")))?;
        self.flush().await?;
        let user = params.iter().find(|(k, _)| *k == "user").map_or("", |(_, v)| *v);
        let mut auth = Authenticator { user, password, scram: None };
        loop {
            match self.recv_expected("during startup").await? {
                BackendMessage::ParameterStatus { name, value } => {
                    self.server_params.push((name, value))
                }
                BackendMessage::BackendKeyData { .. } | BackendMessage::NoticeResponse(_) => {}
                BackendMessage::ReadyForQuery(_) => return self.end(),
                BackendMessage::ErrorResponse(fields) => {
                    return Err(ClientError::server("startup refused", fields))
                }
                auth_msg => {
                    auth.answer(auth_msg, &mut self.out)?;
                    self.flush().await?;
                }
            }
        }
    }

    /// The value of a ParameterStatus the server sent (`server_version`,
    /// `integer_datetimes`...).
    pub fn server_parameter(&self, name: &str) -> Option<&str> {
        self.server_params.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Marks the start of a command; refused while another is unfinished.
    pub(crate) fn begin(&mut self, what: &str) -> Result<(), ClientError> {
        if let Some(prev) = &self.in_progress {
            return Err(ClientError::Desynchronized(prev.clone()));
        }
        self.in_progress = Some(what.to_string());
        Ok(())
    }

    /// Marks the end of the command in progress (the server is at
    /// ReadyForQuery).
    pub(crate) fn end(&mut self) -> Result<(), ClientError> {
        self.in_progress = None;
        Ok(())
    }

    /// Sends everything buffered. Cancel-safe: what was not written stays
    /// buffered and goes first on the next flush.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        while !self.out.is_empty() {
            let n = self
                .stream
                .write(&self.out)
                .await
                .map_err(ClientError::io("send to the server"))?;
            if n == 0 {
                return Err(ClientError::Closed { during: "while sending".into() });
            }
            self.out.advance(n);
        }
        Ok(())
    }

    /// The buffer of bytes to send: `postgres_protocol::message::frontend`
    /// encoders write into it; [`Client::flush`] sends it.
    pub fn write_buf(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    /// Sends `bytes` as they are (after anything already buffered).
    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.out.extend_from_slice(bytes);
        self.flush().await
    }

    /// One byte outside the message framing: the server's answer to an
    /// SSLRequest or GSSENCRequest.
    pub async fn read_raw_byte(&mut self) -> Result<u8, ClientError> {
        while self.buf.is_empty() {
            self.buf.reserve(READ_CHUNK);
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .map_err(ClientError::io("read from the server"))?;
            if n == 0 {
                return Err(ClientError::Closed { during: "instead of a one-byte answer".into() });
            }
        }
        Ok(self.buf.get_u8())
    }

    /// The next message `(tag, body)`, undecoded (`None`: the server closed
    /// the connection). Cancel-safe.
    pub async fn recv_frame(&mut self) -> Result<Option<(u8, Bytes)>, ClientError> {
        read_frame(&mut self.stream, &mut self.buf).await
    }

    /// The next backend message (`None`: the server closed the connection).
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Result<Option<BackendMessage>, ClientError> {
        read_backend(&mut self.stream, &mut self.buf).await
    }

    /// The next backend message; EOF is an error naming `during`.
    pub(crate) async fn recv_expected(
        &mut self,
        during: &str,
    ) -> Result<BackendMessage, ClientError> {
        self.recv().await?.ok_or_else(|| ClientError::Closed { during: during.to_string() })
    }

    /// Sends a Query message (the start of a command).
    pub(crate) async fn send_query(&mut self, query: &str) -> Result<(), ClientError> {
        self.begin(query)?;
        frontend::query(query, &mut self.out)
            .map_err(|e| ClientError::protocol(format!("encode Query '{query}': {e}")))?;
        self.flush().await
    }

    /// Run a simple query to its ReadyForQuery; an ErrorResponse is an
    /// error ([`ClientError::Server`]) and leaves the session usable.
    pub async fn simple_query(&mut self, query: &str) -> Result<QueryResult, ClientError> {
        self.send_query(query).await?;
        let mut res = QueryResult::default();
        let mut error = None;
        loop {
            let Some(msg) = self.recv().await? else {
                // A FATAL error comes before the close: report it.
                return Err(match error {
                    Some(fields) => ClientError::server(format!("'{query}'"), fields),
                    None => ClientError::Closed { during: format!("after '{query}'") },
                });
            };
            match msg {
                BackendMessage::RowDescription(cols) => res.columns = cols,
                BackendMessage::DataRow(vals) => res.rows.push(
                    vals.into_iter()
                        .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                        .collect(),
                ),
                BackendMessage::CommandComplete(tag) => res.command_tag = tag,
                BackendMessage::ErrorResponse(e) => error = Some(e),
                BackendMessage::ReadyForQuery(_) => break,
                BackendMessage::ParameterStatus { name, value } => {
                    self.server_params.push((name, value))
                }
                BackendMessage::CopyInResponse
                | BackendMessage::CopyOutResponse
                | BackendMessage::CopyBothResponse => {
                    return Err(ClientError::protocol(format!(
                        "'{query}' started a COPY, which simple_query does not handle"
                    )))
                }
                _ => {}
            }
        }
        self.end()?;
        match error {
            Some(fields) => Err(ClientError::server(format!("'{query}'"), fields)),
            None => Ok(res),
        }
    }

    /// Send `query` and wait for CopyBothResponse (or CopyOutResponse);
    /// returns which one came. An ErrorResponse is an error (and the
    /// session stays usable). The command stays in progress: the copy
    /// belongs to the caller from here on.
    pub async fn start_copy(&mut self, query: &str) -> Result<BackendMessage, ClientError> {
        self.send_query(query).await?;
        let during = format!("after '{query}'");
        loop {
            match self.recv_expected(&during).await? {
                m @ (BackendMessage::CopyBothResponse | BackendMessage::CopyOutResponse) => {
                    return Ok(m)
                }
                BackendMessage::NoticeResponse(_) | BackendMessage::ParameterStatus { .. } => {}
                BackendMessage::ErrorResponse(fields) => {
                    self.wait_ready(&during).await?;
                    return Err(ClientError::server(format!("'{query}'"), fields));
                }
                other => {
                    return Err(ClientError::protocol(format!(
                        "unexpected reply to '{query}': {other:?}"
                    )))
                }
            }
        }
    }

    /// Reads up to ReadyForQuery (after an ErrorResponse), ending the
    /// command in progress.
    pub(crate) async fn wait_ready(&mut self, during: &str) -> Result<(), ClientError> {
        loop {
            if let BackendMessage::ReadyForQuery(_) = self.recv_expected(during).await? {
                return self.end();
            }
        }
    }

    /// The socket and the read buffer, e.g. to split the socket for
    /// pipelining while reading with [`read_frame`].
    pub fn parts_mut(&mut self) -> (&mut TcpStream, &mut BytesMut) {
        (&mut self.stream, &mut self.buf)
    }

    /// The socket and the bytes already read from it.
    pub fn into_parts(self) -> (TcpStream, BytesMut) {
        (self.stream, self.buf)
    }
}

/// Answers the server's authentication requests during startup.
struct Authenticator<'a> {
    user: &'a str,
    password: Option<&'a str>,
    scram: Option<ScramSha256>,
}

impl Authenticator<'_> {
    fn password(&self, method: &str) -> Result<&str, ClientError> {
        self.password.ok_or_else(|| {
            ClientError::Auth(format!("the server asks for a {method} password and none was given"))
        })
    }

    /// Encodes the answer to `msg` into `out`.
    fn answer(&mut self, msg: BackendMessage, out: &mut BytesMut) -> Result<(), ClientError> {
        let encode = |e: std::io::Error| ClientError::protocol(format!("encode auth reply: {e}"));
        match msg {
            BackendMessage::AuthenticationOk if self.scram.is_some() => {
                return Err(ClientError::Auth(
                    "the server accepted before proving it knows the SCRAM secret".into(),
                ))
            }
            BackendMessage::AuthenticationOk => {}
            BackendMessage::AuthenticationCleartextPassword => {
                let pw = self.password("cleartext")?;
                frontend::password_message(pw.as_bytes(), out).map_err(encode)?;
            }
            BackendMessage::AuthenticationMd5Password(salt) => {
                let pw = self.password("md5")?;
                let hash = md5_hash(self.user.as_bytes(), pw.as_bytes(), salt);
                frontend::password_message(hash.as_bytes(), out).map_err(encode)?;
            }
            BackendMessage::AuthenticationSasl(mechanisms) => {
                if !mechanisms.iter().any(|m| m == SCRAM_SHA_256) {
                    return Err(ClientError::Unsupported(format!(
                        "SASL mechanisms {mechanisms:?}: only {SCRAM_SHA_256} is supported"
                    )));
                }
                let pw = self.password("SCRAM-SHA-256")?;
                // No TLS, hence no channel binding.
                let scram = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                frontend::sasl_initial_response(SCRAM_SHA_256, scram.message(), out)
                    .map_err(encode)?;
                self.scram = Some(scram);
            }
            BackendMessage::AuthenticationSaslContinue(data) => {
                let scram = self.scram.as_mut().ok_or_else(|| {
                    ClientError::protocol("SASLContinue without a SASL exchange")
                })?;
                scram
                    .update(&data)
                    .map_err(|e| ClientError::Auth(format!("SCRAM server-first message: {e}")))?;
                frontend::sasl_response(scram.message(), out).map_err(encode)?;
            }
            BackendMessage::AuthenticationSaslFinal(data) => {
                let mut scram = self
                    .scram
                    .take()
                    .ok_or_else(|| ClientError::protocol("SASLFinal without a SASL exchange"))?;
                scram.finish(&data).map_err(|e| {
                    ClientError::Auth(format!("the server's SCRAM signature does not verify: {e}"))
                })?;
            }
            BackendMessage::AuthenticationOther(code) => {
                return Err(ClientError::Unsupported(format!(
                    "authentication method {code} (this client speaks cleartext, md5 and SCRAM-SHA-256)"
                )))
            }
            other => {
                return Err(ClientError::protocol(format!(
                    "unexpected message during startup: {other:?}"
                )))
            }
        }
        Ok(())
    }
}
