//! `BASE_BACKUP` (PostgreSQL 15 and later): one tar archive per tablespace,
//! as a stream of chunks, between the start and end LSNs the server reports.
//!
//! What the server sends (15 through 18 alike; basebackup.c, basebackup_copy.c):
//! 1. a row `(recptr, tli)`: the start LSN and timeline;
//! 2. a row per tablespace `(spcoid, spclocation, size)`, the main one (NULL
//!    oid and location) last, then CommandComplete;
//! 3. one CopyOut whose CopyData payloads begin with a type byte: `n` (a new
//!    archive: name, tablespace path; `<spcoid>.tar` for each other
//!    tablespace in the order of step 2, `base.tar` with an empty path last),
//!    `d` (archive or manifest bytes), `p` (progress: bytes done, int8), `m`
//!    (the manifest follows); CopyDone;
//! 4. a row `(recptr, tli)`: the end LSN; CommandComplete; ReadyForQuery.
//!
//! A tablespace's archive holds `PG_<major>_<catversion>/<dboid>/...`
//! (paths relative to its location); the main archive holds
//! `pg_tblspc/<spcoid>` as a symlink to the location (or, for an in-place
//! tablespace, an empty directory).
//!
//! Invariants: every archive the server opens is one it announced in step
//! 2 (its name, oid and location agree), each at most once, and by
//! CopyDone every announced one, the main one included, has come: anything
//! else is a protocol error. [`BaseBackup::next_part`] returns them all;
//! [`BaseBackup::next_chunk`] and the `AsyncRead` return the first archive
//! only and refuse a second. The manifest is kept only if asked for, and at
//! most [`MAX_MANIFEST_LEN`] bytes of it. Reading is cancel-safe. Pages read
//! from the tars are not consistent below the end LSN: WAL from the start
//! LSN to the end LSN must be applied over them.

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

/// A tablespace other than the main one, as the server announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupTablespace {
    pub oid: u32,
    /// Its directory on the server: absolute, or `pg_tblspc/<oid>` (relative
    /// to the data directory) for an in-place tablespace.
    pub location: String,
}

/// An archive of the backup: the main one (`tablespace` `None`) or that of
/// another tablespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupArchive {
    /// As the server names it: `base.tar`, `<oid>.tar`.
    pub name: String,
    pub tablespace: Option<BackupTablespace>,
}

/// What [`BaseBackup::next_part`] returns: an archive begins, or the next
/// bytes of the current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupPart {
    Archive(BackupArchive),
    Data(Bytes),
}

/// A running base backup: the tars ([`BaseBackup::next_part`]), then
/// [`BaseBackup::finish`] for the end LSN.
pub struct BaseBackup<'a> {
    client: &'a mut Client,
    /// Where WAL replay has to start from.
    pub start_lsn: u64,
    pub timeline: u32,
    /// The tablespaces other than the main one, as announced, in the order
    /// of their archives.
    pub tablespaces: Vec<BackupTablespace>,
    /// The current archive's name as the server gives it (`base.tar`).
    pub archive_name: Option<String>,
    /// Archives begun so far (`None`: the main one).
    archives: Vec<Option<u32>>,
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
        let tablespaces = tablespace_rows(&rows[1..])?;
        Ok(BaseBackup {
            client,
            start_lsn,
            timeline,
            tablespaces,
            archive_name: None,
            archives: Vec::new(),
            server_progress_bytes: 0,
            section: Section::Start,
            pending: Bytes::new(),
            tar_bytes: 0,
            manifest: opts.manifest.then(BytesMut::new),
            notices: Vec::new(),
        })
    }

    /// The next chunk of the first archive's tar; `None` after its last
    /// byte; an error if the server sends a second archive (read those with
    /// [`BaseBackup::next_part`]). Cancel-safe.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, ClientError> {
        if !self.pending.is_empty() {
            return Ok(Some(std::mem::take(&mut self.pending)));
        }
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// The next part of the backup: each archive's start, then its bytes;
    /// `None` after the last archive. Cancel-safe.
    pub async fn next_part(&mut self) -> Result<Option<BackupPart>, ClientError> {
        if !self.pending.is_empty() {
            return Ok(Some(BackupPart::Data(std::mem::take(&mut self.pending))));
        }
        std::future::poll_fn(|cx| self.poll_part(cx)).await
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, ClientError>> {
        loop {
            match ready!(self.poll_part(cx))? {
                Some(BackupPart::Data(chunk)) => return Poll::Ready(Ok(Some(chunk))),
                Some(BackupPart::Archive(_)) if self.archives.len() == 1 => continue,
                Some(BackupPart::Archive(a)) => {
                    return Poll::Ready(Err(ClientError::Unsupported(format!(
                        "a second archive in the base backup ({}): read the archives with \
                         next_part",
                        a.name
                    ))))
                }
                None => return Poll::Ready(Ok(None)),
            }
        }
    }

    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<BackupPart>, ClientError>> {
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
            if let Some(part) = self.handle(msg)? {
                if let BackupPart::Data(chunk) = &part {
                    self.tar_bytes += chunk.len() as u64;
                }
                return Poll::Ready(Ok(Some(part)));
            }
        }
    }

    /// Acts on one message of the CopyOut; returns an archive's start or
    /// its bytes.
    fn handle(&mut self, msg: BackendMessage) -> Result<Option<BackupPart>, ClientError> {
        match msg {
            BackendMessage::CopyData(body) => self.handle_copy_data(body),
            BackendMessage::CopyDone => {
                self.check_all_archives()?;
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

    fn handle_copy_data(&mut self, mut body: Bytes) -> Result<Option<BackupPart>, ClientError> {
        if body.is_empty() {
            return Err(ClientError::protocol("empty CopyData in the base backup"));
        }
        let kind = body.get_u8();
        match (kind, self.section) {
            (b'n', Section::Start | Section::Archive) => {
                let archive = self.new_archive(&body)?;
                self.archive_name = Some(archive.name.clone());
                self.section = Section::Archive;
                Ok(Some(BackupPart::Archive(archive)))
            }
            (b'd', Section::Archive) => Ok((!body.is_empty()).then_some(BackupPart::Data(body))),
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

    /// An `n` message (`name\0path\0`): the archive it opens, checked
    /// against the announced tablespaces (module comment).
    fn new_archive(&mut self, body: &[u8]) -> Result<BackupArchive, ClientError> {
        let mut fields = body.split(|&b| b == 0).map(|f| String::from_utf8_lossy(f).into_owned());
        let name = fields.next().unwrap_or_default();
        let path = fields.next().unwrap_or_default();
        let tablespace = if path.is_empty() {
            None
        } else {
            let oid = name.strip_suffix(".tar").and_then(|o| o.parse::<u32>().ok());
            let announced = self.tablespaces.iter().find(|t| Some(t.oid) == oid);
            match announced {
                Some(t) if t.location == path => Some(t.clone()),
                _ => {
                    return Err(ClientError::protocol(format!(
                        "the base backup sent archive {name} of {path}, which is not one of the \
                         tablespaces it announced"
                    )))
                }
            }
        };
        let key = tablespace.as_ref().map(|t| t.oid);
        if self.archives.contains(&key) {
            return Err(ClientError::protocol(format!(
                "the base backup sent archive {name} twice"
            )));
        }
        self.archives.push(key);
        Ok(BackupArchive { name, tablespace })
    }

    /// At CopyDone: every announced archive has come.
    fn check_all_archives(&self) -> Result<(), ClientError> {
        if !self.archives.contains(&None) {
            return Err(ClientError::protocol(
                "the base backup ended without the main archive (base.tar)",
            ));
        }
        let missing: Vec<String> = self
            .tablespaces
            .iter()
            .filter(|t| !self.archives.contains(&Some(t.oid)))
            .map(|t| format!("{} at {}", t.oid, t.location))
            .collect();
        if !missing.is_empty() {
            return Err(ClientError::protocol(format!(
                "the base backup ended without the archives of tablespaces {}",
                missing.join(", ")
            )));
        }
        Ok(())
    }

    /// Reads what is left of the archives (discarding it), then the end LSN
    /// up to ReadyForQuery; the client is usable again afterwards.
    pub async fn finish(mut self) -> Result<BaseBackupEnd, ClientError> {
        self.pending.clear();
        while self.next_part().await?.is_some() {}
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

/// The tablespace rows after the start row: those with an oid and a
/// location (the main one has neither).
fn tablespace_rows(rows: &[Vec<Option<Bytes>>]) -> Result<Vec<BackupTablespace>, ClientError> {
    let text = |v: Option<&Option<Bytes>>| {
        v.and_then(|v| v.as_ref()).map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let mut out = Vec::new();
    for row in rows {
        match (text(row.first()), text(row.get(1))) {
            (None, None) => {}
            (Some(oid), Some(location)) if !location.is_empty() => {
                let oid = parse_num(&oid, "tablespace oid")?;
                out.push(BackupTablespace { oid, location });
            }
            (oid, location) => {
                return Err(ClientError::protocol(format!(
                    "a tablespace row with oid {oid:?} and location {location:?}"
                )))
            }
        }
    }
    Ok(out)
}
