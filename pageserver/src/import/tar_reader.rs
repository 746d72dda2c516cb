//! A streaming tar reader over an async stream of byte chunks.
//!
//! It never holds more than one incoming chunk plus the bytes the caller
//! asked for: entry data is handed out in pieces (`read_data`) split off the
//! receive buffer without further copies. Supports what PostgreSQL and common
//! tar writers produce: POSIX ustar (with the `prefix` field), GNU long names
//! (`L`/`K`), pax extended headers (`x`: path, linkpath, size; `g` ignored),
//! octal and base-256 sizes.
//!
//! Strictness (a malformed archive is an error naming the entry and offset,
//! never silently partial data): every header checksum is verified; the
//! stream must end with the end-of-archive marker (a zero block), so a tar
//! cut at an entry boundary is detected as truncated; data cut short is
//! reported with the entry's name and the number of missing bytes.
//!
//! An [`EntryObserver`] (optional) sees every byte of every regular file's
//! data exactly once and in order, whether the caller reads it or skips it:
//! `begin`, `data`..., `end` per file, `end` once all of its data has passed.
//!
//! Several archives in one stream (a `BASE_BACKUP` sends one per
//! tablespace): the stream yields [`TarPart`]s, and `TarPart::Archive`
//! ends the current archive (exactly like the end of the stream: it must
//! have ended with its marker) and begins the next, whose entry paths get
//! the archive's prefix (`pg_tblspc/<oid>/`). A `TarPart::Archive` before
//! any byte of the first archive only sets that archive's prefix. A plain
//! stream of `Bytes` is one archive without a prefix.

use std::io;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

pub const BLOCK: usize = 512;

/// Bytes drained after the end-of-archive marker (trailing zero blocks and
/// record padding), so the client sees its whole body consumed.
const MAX_TRAILER: u64 = 1024 * 1024;
/// Largest extended header (GNU long name, pax) we accept.
const MAX_EXT_HEADER: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TarError {
    #[error("{0}")]
    Malformed(String),
    #[error("reading the tar stream: {0}")]
    Io(#[from] io::Error),
}

impl TarError {
    /// As a stream error of the bytes of an archive: a malformed stream (the
    /// outer tar of archives, `super::nested`) stays malformed for the
    /// reader of the archive ([`TarError::from_stream`]).
    pub fn into_io(self) -> io::Error {
        match self {
            TarError::Io(e) => e,
            malformed => io::Error::new(io::ErrorKind::InvalidData, malformed),
        }
    }

    /// A stream error: the `TarError` it carries, or `Io`.
    pub fn from_stream(e: io::Error) -> TarError {
        e.downcast::<TarError>().unwrap_or_else(TarError::Io)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink(String),
    HardLink(String),
    /// Devices, FIFOs, ...: skipped by callers.
    Other(u8),
}

/// What the stream carries: archive bytes, or the start of the next archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TarPart {
    Data(Bytes),
    /// A new archive; `prefix` (empty, or ending in `/`) goes before the
    /// paths of its entries.
    Archive {
        prefix: String,
    },
}

impl From<Bytes> for TarPart {
    fn from(b: Bytes) -> Self {
        TarPart::Data(b)
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    /// Path without a leading `./` or trailing `/`.
    pub path: String,
    pub kind: EntryKind,
    pub size: u64,
    /// Offset of the entry's header in the archive.
    pub offset: u64,
}

/// Sees the data of every regular file of the archive as it passes
/// (checksums of the files, checks of their pages): see the module comment.
pub trait EntryObserver: Send {
    /// A regular file begins; `entry.size` bytes of data follow.
    fn begin(&mut self, entry: &Entry);
    /// The next bytes of its data.
    fn data(&mut self, bytes: &[u8]);
    /// All of its data has passed.
    fn end(&mut self);
}

pub struct TarReader<S> {
    stream: S,
    observer: Option<Box<dyn EntryObserver>>,
    /// The observer has seen `begin` of the current entry, not yet `end`.
    observing: bool,
    buf: BytesMut,
    stream_done: bool,
    /// Archive offset of the first byte in `buf`.
    offset: u64,
    /// Data bytes of the current entry not yet handed out.
    remaining: u64,
    /// Padding after the current entry's data.
    padding: u64,
    current: Option<String>,
    finished: bool,
    /// The current archive's path prefix.
    prefix: String,
    /// A byte of the current archive has been received.
    archive_started: bool,
    /// The prefix of the archive that follows the current one, once the
    /// stream has said so.
    next_archive: Option<String>,
    /// Prefixes of the archives begun, in order.
    archives: Vec<String>,
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    let s: &[u8] = {
        let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
        &field[..end]
    };
    let s = std::str::from_utf8(s).ok()?.trim_matches(' ');
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

/// A numeric field: octal text, or base-256 (GNU) when the high bit is set.
fn parse_number(field: &[u8]) -> Option<u64> {
    if field[0] & 0x80 != 0 {
        if field[0] & 0x40 != 0 {
            return None; // negative
        }
        let mut v: u64 = (field[0] & 0x3f) as u64;
        for &b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(b as u64)?;
        }
        Some(v)
    } else {
        parse_octal(field)
    }
}

fn pad(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

fn clean_path(p: &str) -> String {
    let mut s = p;
    while let Some(rest) = s.strip_prefix("./") {
        s = rest;
    }
    s.trim_end_matches('/').to_string()
}

/// Overrides from extended headers for the next entry.
#[derive(Default)]
struct Ext {
    path: Option<String>,
    link: Option<String>,
    size: Option<u64>,
}

impl<S, P> TarReader<S>
where
    S: Stream<Item = Result<P, io::Error>> + Unpin,
    P: Into<TarPart>,
{
    pub fn new(stream: S) -> Self {
        TarReader {
            stream,
            observer: None,
            observing: false,
            buf: BytesMut::new(),
            stream_done: false,
            offset: 0,
            remaining: 0,
            padding: 0,
            current: None,
            finished: false,
            prefix: String::new(),
            archive_started: false,
            next_archive: None,
            archives: Vec::new(),
        }
    }

    /// The stream it reads.
    pub fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The stream, without what was received and not yet consumed.
    pub fn into_stream(self) -> S {
        self.stream
    }

    /// Prefixes of the archives begun so far (`TarPart::Archive`), in order.
    pub fn archives(&self) -> &[String] {
        &self.archives
    }

    /// A reader whose `observer` sees the data of every regular file.
    pub fn with_observer(stream: S, observer: Box<dyn EntryObserver>) -> Self {
        TarReader { observer: Some(observer), ..TarReader::new(stream) }
    }

    /// Bytes of the archive consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Make `buf` hold at least `n` bytes; false if the stream ended first.
    async fn fill(&mut self, n: usize) -> Result<bool, TarError> {
        while self.buf.len() < n {
            if self.stream_done {
                return Ok(false);
            }
            match self.stream.next().await.map(|r| r.map(Into::into)) {
                Some(Ok(TarPart::Data(chunk))) => {
                    self.archive_started |= !chunk.is_empty();
                    self.buf.extend_from_slice(&chunk)
                }
                Some(Ok(TarPart::Archive { prefix })) => {
                    assert!(prefix.is_empty() || prefix.ends_with('/'), "prefix {prefix:?}");
                    self.archives.push(prefix.clone());
                    if self.archive_started || self.finished {
                        self.next_archive = Some(prefix);
                        self.stream_done = true;
                    } else {
                        self.prefix = prefix;
                    }
                }
                Some(Err(e)) => return Err(TarError::from_stream(e)),
                None => self.stream_done = true,
            }
        }
        Ok(true)
    }

    fn take(&mut self, n: usize) -> Bytes {
        self.offset += n as u64;
        self.buf.split_to(n).freeze()
    }

    /// Hands entry data to the observer, if it is watching this entry.
    fn observe(&mut self, data: &[u8]) {
        if let (true, Some(o)) = (self.observing, self.observer.as_mut()) {
            o.data(data);
        }
    }

    /// Discard `n` bytes (entry data if `is_data`); false if the stream
    /// ended first.
    async fn skip(&mut self, mut n: u64, is_data: bool) -> Result<bool, TarError> {
        while n > 0 {
            if self.buf.is_empty() && !self.fill(1).await? {
                return Ok(false);
            }
            let k = n.min(self.buf.len() as u64) as usize;
            let skipped = self.take(k);
            if is_data {
                self.observe(&skipped);
            }
            n -= k as u64;
        }
        Ok(true)
    }

    fn truncated(&self, what: &str) -> TarError {
        let received = self.offset + self.buf.len() as u64;
        let archive = if self.prefix.is_empty() {
            String::new()
        } else {
            format!(" (the archive of {})", self.prefix.trim_end_matches('/'))
        };
        TarError::Malformed(format!(
            "tar is truncated{archive}: it ends after {received} bytes, {what}"
        ))
    }

    /// After an archive's end marker: begin the next archive, if the stream
    /// has one.
    fn begin_next_archive(&mut self) -> bool {
        let Some(prefix) = self.next_archive.take() else { return false };
        if !self.buf.is_empty() {
            tracing::warn!(
                "ignoring {} bytes after the end-of-archive marker before the archive of {prefix}",
                self.buf.len()
            );
            self.buf.clear();
        }
        self.prefix = prefix;
        self.finished = false;
        self.stream_done = false;
        self.archive_started = false;
        self.current = None;
        true
    }

    /// Skip what is left of the current entry (data and padding).
    async fn finish_entry(&mut self) -> Result<(), TarError> {
        let (data, padding) = (self.remaining, self.padding);
        if !self.skip(data, true).await? || !self.skip(padding, false).await? {
            let name = self.current.clone().unwrap_or_default();
            return Err(self.truncated(&format!("inside the data of entry '{name}'")));
        }
        self.remaining = 0;
        self.padding = 0;
        if std::mem::take(&mut self.observing) {
            if let Some(o) = self.observer.as_mut() {
                o.end();
            }
        }
        Ok(())
    }

    /// Read a whole extended-header payload of `size` bytes.
    async fn read_ext(&mut self, size: u64, what: &str, at: u64) -> Result<Bytes, TarError> {
        if size > MAX_EXT_HEADER {
            return Err(TarError::Malformed(format!(
                "{what} header at offset {at} is {size} bytes, above the {MAX_EXT_HEADER}-byte limit"
            )));
        }
        let total = (size + pad(size)) as usize;
        if !self.fill(total).await? {
            return Err(self.truncated(&format!("inside the {what} header at offset {at}")));
        }
        let data = self.take(size as usize);
        self.take(total - size as usize);
        Ok(data)
    }

    /// The next entry, after skipping the rest of the current one; `None` at
    /// the end-of-archive marker.
    pub async fn next_entry(&mut self) -> Result<Option<Entry>, TarError> {
        if self.finished && !self.begin_next_archive() {
            return Ok(None);
        }
        self.finish_entry().await?;
        let mut ext = Ext::default();
        loop {
            let at = self.offset;
            if !self.fill(BLOCK).await? {
                return Err(if self.buf.is_empty() {
                    self.truncated("without the end-of-archive marker")
                } else {
                    self.truncated(&format!("inside the header at offset {at}"))
                });
            }
            let header = self.take(BLOCK);
            if header.iter().all(|&b| b == 0) {
                self.finished = true;
                self.current = None;
                self.drain_trailer().await?;
                if self.begin_next_archive() {
                    continue;
                }
                return Ok(None);
            }
            let h: &[u8] = &header;
            let stored = parse_octal(&h[148..156]);
            let computed: u64 = h
                .iter()
                .enumerate()
                .map(|(i, &b)| if (148..156).contains(&i) { b' ' as u64 } else { b as u64 })
                .sum();
            if stored != Some(computed) {
                return Err(TarError::Malformed(format!(
                    "bad tar header at offset {at} (after entry '{}'): checksum {} does not match computed {computed}; \
                     not a tar archive or corrupt",
                    self.current.as_deref().unwrap_or("<none>"),
                    stored.map_or("unreadable".to_string(), |s| s.to_string()),
                )));
            }
            let size = parse_number(&h[124..136]).ok_or_else(|| {
                TarError::Malformed(format!("bad size field in the tar header at offset {at}"))
            })?;
            let typeflag = h[156];
            let ustar = &h[257..263] == b"ustar\0";
            match typeflag {
                b'L' => {
                    let data = self.read_ext(size, "GNU long name", at).await?;
                    ext.path = Some(cstr(&data));
                    continue;
                }
                b'K' => {
                    let data = self.read_ext(size, "GNU long link", at).await?;
                    ext.link = Some(cstr(&data));
                    continue;
                }
                b'x' => {
                    let data = self.read_ext(size, "pax", at).await?;
                    parse_pax(&data, &mut ext, at)?;
                    continue;
                }
                b'g' => {
                    self.read_ext(size, "pax global", at).await?;
                    continue;
                }
                _ => {}
            }
            let mut path = cstr(&h[0..100]);
            if ustar {
                let prefix = cstr(&h[345..500]);
                if !prefix.is_empty() {
                    path = format!("{prefix}/{path}");
                }
            }
            let path = format!("{}{}", self.prefix, clean_path(&ext.path.take().unwrap_or(path)));
            let size = ext.size.take().unwrap_or(size);
            let link = ext.link.take().unwrap_or_else(|| cstr(&h[157..257]));
            let kind = match typeflag {
                b'0' | 0 | b'7' => EntryKind::File,
                b'5' => EntryKind::Dir,
                b'2' => EntryKind::Symlink(link),
                b'1' => EntryKind::HardLink(link),
                other => EntryKind::Other(other),
            };
            // Only regular files carry data (GNU tar sets size 0 for others).
            let size = if matches!(kind, EntryKind::File | EntryKind::Other(_)) { size } else { 0 };
            self.remaining = size;
            self.padding = pad(size);
            self.current = Some(path.clone());
            let entry = Entry { path, kind, size, offset: at };
            if let (EntryKind::File, Some(o)) = (&entry.kind, self.observer.as_mut()) {
                o.begin(&entry);
                self.observing = true;
            }
            return Ok(Some(entry));
        }
    }

    /// Up to `max` bytes of the current entry's data (fewer only at its end;
    /// empty when it is all read).
    pub async fn read_data(&mut self, max: usize) -> Result<Bytes, TarError> {
        let n = (self.remaining.min(max as u64)) as usize;
        if n == 0 {
            return Ok(Bytes::new());
        }
        if !self.fill(n).await? {
            let name = self.current.clone().unwrap_or_default();
            let missing = self.remaining - self.buf.len() as u64;
            return Err(self.truncated(&format!(
                "inside the data of entry '{name}' ({missing} bytes missing)"
            )));
        }
        self.remaining -= n as u64;
        let data = self.take(n);
        self.observe(&data);
        Ok(data)
    }

    /// After the end marker: consume trailing zero blocks (bounded).
    async fn drain_trailer(&mut self) -> Result<(), TarError> {
        let mut drained = 0u64;
        while drained < MAX_TRAILER {
            if self.buf.is_empty() && !self.fill(1).await? {
                break;
            }
            let n = self.buf.len().min((MAX_TRAILER - drained) as usize);
            let chunk = self.take(n);
            if chunk.iter().any(|&b| b != 0) {
                tracing::warn!(
                    "ignoring non-zero data after the tar end-of-archive marker at offset {}",
                    self.offset
                );
                break;
            }
            drained += n as u64;
        }
        Ok(())
    }
}

/// pax records: "<len> <key>=<value>\n".
fn parse_pax(data: &[u8], ext: &mut Ext, at: u64) -> Result<(), TarError> {
    let bad = |why: &str| TarError::Malformed(format!("bad pax header at offset {at}: {why}"));
    let mut rest = data;
    while !rest.is_empty() {
        let sp =
            rest.iter().position(|&b| b == b' ').ok_or_else(|| bad("record without length"))?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("record length is not a number"))?;
        if len <= sp + 1 || len > rest.len() {
            return Err(bad("record length out of range"));
        }
        let record = &rest[sp + 1..len];
        let record = record.strip_suffix(b"\n").ok_or_else(|| bad("record without newline"))?;
        let eq = record.iter().position(|&b| b == b'=').ok_or_else(|| bad("record without '='"))?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        let value_str = String::from_utf8_lossy(value).into_owned();
        match key {
            b"path" => ext.path = Some(value_str),
            b"linkpath" => ext.link = Some(value_str),
            b"size" => ext.size = Some(value_str.parse().map_err(|_| bad("size is not a number"))?),
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests;
