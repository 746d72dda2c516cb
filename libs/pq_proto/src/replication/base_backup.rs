//! `BASE_BACKUP` (PostgreSQL 15 and later): the tar of the main tablespace
//! as a stream of chunks, between the start and end LSNs the server reports.
//!
//! What the server sends (15 through 18 alike):
//! 1. a row `(recptr, tli)`: the start LSN and timeline;
//! 2. a row per tablespace `(spcoid, spclocation, size)`, the main one (NULL
//!    oid and location) last, then CommandComplete;
//! 3. one CopyOut whose CopyData payloads begin with a type byte: `n` (a new
//!    archive: name, tablespace path), `d` (archive or manifest bytes), `p`
//!    (progress: bytes done, int8), `m` (the manifest follows); CopyDone;
//! 4. a row `(recptr, tli)`: the end LSN; CommandComplete; ReadyForQuery.
//!
//! Invariants: only the main tablespace is accepted (one archive; any other
//! tablespace is refused before a byte of tar is returned); the manifest is
//! kept only if asked for, and at most [`MAX_MANIFEST_LEN`] bytes of it.
//! Reading ([`BaseBackup::next_chunk`], the `AsyncRead`) is cancel-safe.
//! Pages read from the tar are not consistent below the end LSN: WAL from
//! the start LSN to the end LSN must be applied over them.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, ReadBuf};

use super::{format_lsn, parse_lsn_field, parse_num, quote_literal};
use crate::client::{parse_backend, BackendMessage, Client, ClientError};

/// Largest backup manifest kept (it lists every file with a checksum:
/// about 150 bytes per file).
pub const MAX_MANIFEST_LEN: usize = 256 * 1024 * 1024;

/// How the backup is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseBackupOptions {
    /// Shown in `backup_label` and `pg_stat_progress_basebackup`.
    pub label: String,
    /// `CHECKPOINT 'fast'` (an immediate checkpoint) rather than `'spread'`.
    pub fast_checkpoint: bool,
    /// Ask for the backup manifest, returned by [`BaseBackup::finish`].
    pub manifest: bool,
    /// The manifest's per-file checksum algorithm (`MANIFEST_CHECKSUMS`:
    /// `CRC32C`, the server's default, `SHA256`, `NONE`, ...); `None`
    /// leaves it to the server. Only with `manifest`.
    pub manifest_checksums: Option<String>,
}

impl BaseBackupOptions {
    fn command(&self) -> Result<String, ClientError> {
        let checksums = match (&self.manifest_checksums, self.manifest) {
            (Some(algorithm), true) => {
                format!(", MANIFEST_CHECKSUMS {}", quote_literal(algorithm)?)
            }
            (Some(_), false) => {
                return Err(ClientError::Unsupported(
                    "manifest checksums without a manifest".to_string(),
                ))
            }
            (None, _) => String::new(),
        };
        Ok(format!(
            "BASE_BACKUP (LABEL {}, CHECKPOINT '{}', WAL false, MANIFEST '{}'{checksums}, WAIT true)",
            quote_literal(&self.label)?,
            if self.fast_checkpoint { "fast" } else { "spread" },
            if self.manifest { "yes" } else { "no" },
        ))
    }
}

/// What the server reports after the tar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseBackupEnd {
    /// The WAL position up to which WAL must be applied for consistency.
    pub end_lsn: u64,
    pub timeline: u32,
    /// Bytes of tar returned.
    pub tar_bytes: u64,
    /// The backup manifest (JSON), when asked for.
    pub manifest: Option<Bytes>,
    /// The server's warnings (NoticeResponse messages) during the backup.
    pub notices: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Before the first `n`.
    Start,
    Archive,
    Manifest,
    /// After CopyDone.
    Done,
}

/// Most notices kept (each is a line of the server's warnings).
const MAX_NOTICES: usize = 100;

/// A running base backup: the tar of the main tablespace, then
/// [`BaseBackup::finish`] for the end LSN.
pub struct BaseBackup<'a> {
    client: &'a mut Client,
    /// Where WAL replay has to start from.
    pub start_lsn: u64,
    pub timeline: u32,
    /// The archive's name as the server gives it (`base.tar`).
    pub archive_name: Option<String>,
    /// Bytes done according to the server's last progress message.
    pub server_progress_bytes: u64,
    section: Section,
    /// The rest of a chunk partly returned through `AsyncRead`.
    pending: Bytes,
    tar_bytes: u64,
    manifest: Option<BytesMut>,
    notices: Vec<String>,
}

impl<'a> BaseBackup<'a> {
    pub(crate) async fn start(
        client: &'a mut Client,
        opts: &BaseBackupOptions,
    ) -> Result<BaseBackup<'a>, ClientError> {
        let cmd = opts.command()?;
        client.send_query(&cmd).await?;
        let mut rows = Vec::new();
        loop {
            match client.recv_expected("before the base backup's tar").await? {
                BackendMessage::DataRow(vals) => rows.push(vals),
                BackendMessage::CopyOutResponse => break,
                BackendMessage::ErrorResponse(fields) => {
                    client.wait_ready("after a refused BASE_BACKUP").await?;
                    return Err(ClientError::server(cmd, fields));
                }
                BackendMessage::RowDescription(_)
                | BackendMessage::CommandComplete(_)
                | BackendMessage::NoticeResponse(_)
                | BackendMessage::ParameterStatus { .. } => {}
                other => {
                    return Err(ClientError::protocol(format!(
                        "unexpected {other:?} before the base backup's tar"
                    )))
                }
            }
        }
        let (start_lsn, timeline) = start_row(&rows)?;
        refuse_other_tablespaces(&rows[1..])?;
        Ok(BaseBackup {
            client,
            start_lsn,
            timeline,
            archive_name: None,
            server_progress_bytes: 0,
            section: Section::Start,
            pending: Bytes::new(),
            tar_bytes: 0,
            manifest: opts.manifest.then(BytesMut::new),
            notices: Vec::new(),
        })
    }

    /// The next chunk of tar; `None` after its last byte. Cancel-safe.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, ClientError> {
        if !self.pending.is_empty() {
            return Ok(Some(std::mem::take(&mut self.pending)));
        }
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, ClientError>> {
        loop {
            if self.section == Section::Done {
                return Poll::Ready(Ok(None));
            }
            let (stream, buf) = self.client.parts_mut();
            let Some(msg) = parse_backend(buf)? else {
                if buf.capacity() - buf.len() < 16 * 1024 {
                    buf.reserve(64 * 1024);
                }
                let n = ready!(tokio_util::io::poll_read_buf(Pin::new(stream), cx, buf))
                    .map_err(|source| ClientError::Io { what: "read the base backup", source })?;
                if n == 0 {
                    return Poll::Ready(Err(ClientError::Closed {
                        during: format!("in the base backup after {} bytes of tar", self.tar_bytes),
                    }));
                }
                continue;
            };
            if let Some(chunk) = self.handle(msg)? {
                self.tar_bytes += chunk.len() as u64;
                return Poll::Ready(Ok(Some(chunk)));
            }
        }
    }

    /// Acts on one message of the CopyOut; returns tar bytes if it has any.
    fn handle(&mut self, msg: BackendMessage) -> Result<Option<Bytes>, ClientError> {
        match msg {
            BackendMessage::CopyData(body) => self.handle_copy_data(body),
            BackendMessage::CopyDone => {
                if self.section == Section::Start {
                    return Err(ClientError::protocol("the base backup ended without an archive"));
                }
                self.section = Section::Done;
                Ok(None)
            }
            BackendMessage::NoticeResponse(n) => {
                if self.notices.len() < MAX_NOTICES {
                    self.notices.push(n.to_string());
                }
                Ok(None)
            }
            BackendMessage::ErrorResponse(fields) => Err(ClientError::server(
                format!("base backup, after {} bytes of tar", self.tar_bytes),
                fields,
            )),
            other => Err(ClientError::protocol(format!("unexpected {other:?} in the base backup"))),
        }
    }

    fn handle_copy_data(&mut self, mut body: Bytes) -> Result<Option<Bytes>, ClientError> {
        if body.is_empty() {
            return Err(ClientError::protocol("empty CopyData in the base backup"));
        }
        let kind = body.get_u8();
        match (kind, self.section) {
            (b'n', Section::Start) => {
                let mut fields = body.split(|&b| b == 0);
                let name = fields.next().map(String::from_utf8_lossy).unwrap_or_default();
                self.archive_name = Some(name.into_owned());
                self.section = Section::Archive;
                Ok(None)
            }
            (b'n', _) => {
                let text = String::from_utf8_lossy(&body).replace('\0', " ");
                Err(ClientError::Unsupported(format!(
                    "a second archive in the base backup: {text}"
                )))
            }
            (b'd', Section::Archive) => Ok((!body.is_empty()).then_some(body)),
            (b'd', Section::Manifest) => {
                if let Some(m) = &mut self.manifest {
                    if m.len() + body.len() > MAX_MANIFEST_LEN {
                        return Err(ClientError::Unsupported(format!(
                            "a backup manifest over {MAX_MANIFEST_LEN} bytes"
                        )));
                    }
                    m.extend_from_slice(&body);
                }
                Ok(None)
            }
            (b'p', _) => {
                if body.len() != 8 {
                    return Err(ClientError::protocol(format!(
                        "progress message of {} bytes, expected 8",
                        body.len()
                    )));
                }
                self.server_progress_bytes = body.get_u64();
                Ok(None)
            }
            (b'm', Section::Archive) => {
                self.section = Section::Manifest;
                Ok(None)
            }
            (kind, section) => Err(ClientError::protocol(format!(
                "CopyData of type {:?} in section {section:?} of the base backup",
                kind as char
            ))),
        }
    }

    /// Reads what is left of the tar (discarding it), then the end LSN up
    /// to ReadyForQuery; the client is usable again afterwards.
    pub async fn finish(mut self) -> Result<BaseBackupEnd, ClientError> {
        self.pending.clear();
        while self.next_chunk().await?.is_some() {}
        let mut end = None;
        loop {
            match self.client.recv_expected("after the base backup's tar").await? {
                BackendMessage::DataRow(vals) => end = Some(vals),
                BackendMessage::ReadyForQuery(_) => break,
                BackendMessage::ErrorResponse(fields) => {
                    return Err(ClientError::server("end of the base backup", fields))
                }
                BackendMessage::NoticeResponse(n) if self.notices.len() < MAX_NOTICES => {
                    self.notices.push(n.to_string())
                }
                _ => {}
            }
        }
        self.client.end()?;
        let end = end.ok_or_else(|| ClientError::protocol("the base backup sent no end LSN"))?;
        let (end_lsn, timeline) = lsn_row(&end, "end")?;
        if end_lsn < self.start_lsn {
            return Err(ClientError::protocol(format!(
                "the base backup ends at {} before its start {}",
                format_lsn(end_lsn),
                format_lsn(self.start_lsn)
            )));
        }
        Ok(BaseBackupEnd {
            end_lsn,
            timeline,
            tar_bytes: self.tar_bytes,
            manifest: self.manifest.take().map(BytesMut::freeze),
            notices: std::mem::take(&mut self.notices),
        })
    }
}

impl AsyncRead for BaseBackup<'_> {
    /// The tar's bytes; EOF after the last. Errors are
    /// `io::Error::other(ClientError)`.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.pending.is_empty() {
            match ready!(this.poll_chunk(cx)) {
                Ok(Some(chunk)) => this.pending = chunk,
                Ok(None) => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(std::io::Error::other(e))),
            }
        }
        let n = this.pending.len().min(out.remaining());
        out.put_slice(&this.pending[..n]);
        this.pending.advance(n);
        Poll::Ready(Ok(()))
    }
}

fn lsn_row(row: &[Option<Bytes>], what: &str) -> Result<(u64, u32), ClientError> {
    let text = |i: usize| -> Result<String, ClientError> {
        row.get(i)
            .and_then(|v| v.as_ref())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .ok_or_else(|| ClientError::protocol(format!("the {what} row lacks column {i}")))
    };
    let lsn = parse_lsn_field(&text(0)?, &format!("{what} LSN"))?;
    let tli = parse_num(&text(1)?, &format!("{what} timeline"))?;
    Ok((lsn, tli))
}

fn start_row(rows: &[Vec<Option<Bytes>>]) -> Result<(u64, u32), ClientError> {
    let first = rows.first().ok_or_else(|| ClientError::protocol("no start LSN row"))?;
    lsn_row(first, "start")
}

/// Refuses tablespace rows with a location (anything but the main one).
fn refuse_other_tablespaces(rows: &[Vec<Option<Bytes>>]) -> Result<(), ClientError> {
    let text = |v: &Option<Bytes>| v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    let others: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let location = text(row.get(1)?)?;
            let oid = row.first().and_then(text).unwrap_or_default();
            Some(format!("{oid} at {location}"))
        })
        .collect();
    if others.is_empty() {
        Ok(())
    } else {
        Err(ClientError::Unsupported(format!(
            "tablespaces other than the default: {}",
            others.join(", ")
        )))
    }
}
