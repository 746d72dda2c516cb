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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink(String),
    HardLink(String),
    /// Devices, FIFOs, ...: skipped by callers.
    Other(u8),
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

impl<S> TarReader<S>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Unpin,
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
        }
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
            match self.stream.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(TarError::Io(e)),
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
        TarError::Malformed(format!("tar is truncated: it ends after {received} bytes, {what}"))
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
        if self.finished {
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
            let path = clean_path(&ext.path.take().unwrap_or(path));
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
mod tests {
    use super::*;

    fn stream_of(
        data: Vec<u8>,
        chunk: usize,
    ) -> impl Stream<Item = Result<Bytes, io::Error>> + Unpin {
        let chunks: Vec<Result<Bytes, io::Error>> =
            data.chunks(chunk.max(1)).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        futures::stream::iter(chunks)
    }

    fn build(entries: &[(&str, &[u8])], long_name: bool) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o600);
            h.set_entry_type(tar::EntryType::Regular);
            if long_name {
                b.append_data(&mut h, path, *data).unwrap();
            } else {
                h.set_path(path).unwrap();
                h.set_cksum();
                b.append(&h, *data).unwrap();
            }
        }
        let mut dir = tar::Header::new_ustar();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_size(0);
        dir.set_mode(0o700);
        dir.set_path("base/5/").unwrap();
        dir.set_cksum();
        b.append(&dir, std::io::empty()).unwrap();
        b.into_inner().unwrap()
    }

    async fn read_all<S: Stream<Item = Result<Bytes, io::Error>> + Unpin>(
        r: &mut TarReader<S>,
    ) -> Result<Vec<(String, EntryKind, Vec<u8>)>, TarError> {
        let mut out = Vec::new();
        while let Some(e) = r.next_entry().await? {
            let mut data = Vec::new();
            loop {
                let d = r.read_data(1000).await?;
                if d.is_empty() {
                    break;
                }
                data.extend_from_slice(&d);
            }
            assert_eq!(data.len() as u64, e.size);
            out.push((e.path, e.kind, data));
        }
        Ok(out)
    }

    #[tokio::test]
    async fn reads_entries_across_chunk_boundaries() {
        let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let long = format!("pg_tblspc/16385/PG_15_202209061/{}/16390.1", "9".repeat(80));
        let tar = build(
            &[
                ("backup_label", b"START WAL LOCATION: 0/2000028\n"),
                ("base/5/16384", &big),
                (&long, b"x"),
            ],
            true,
        );
        for chunk in [1, 7, 512, 4096, 1 << 20] {
            let mut r = TarReader::new(stream_of(tar.clone(), chunk));
            let got = read_all(&mut r).await.unwrap();
            assert_eq!(got.len(), 4, "chunk {chunk}");
            assert_eq!(got[0].0, "backup_label");
            assert_eq!(got[1].2, big);
            assert_eq!(got[2].0, long, "GNU long name");
            assert_eq!(got[3].0, "base/5");
            assert_eq!(got[3].1, EntryKind::Dir);
            assert_eq!(r.offset(), tar.len() as u64, "trailer drained");
        }
    }

    #[tokio::test]
    async fn skips_unread_data() {
        let tar = build(&[("a", &[1u8; 3000]), ("b", b"bb")], false);
        let mut r = TarReader::new(stream_of(tar, 100));
        assert_eq!(r.next_entry().await.unwrap().unwrap().path, "a");
        assert_eq!(r.read_data(10).await.unwrap().len(), 10);
        let e = r.next_entry().await.unwrap().unwrap();
        assert_eq!((e.path.as_str(), e.size), ("b", 2));
        assert_eq!(&r.read_data(100).await.unwrap()[..], b"bb");
        assert_eq!(r.next_entry().await.unwrap().unwrap().kind, EntryKind::Dir);
        assert!(r.next_entry().await.unwrap().is_none());
        assert!(r.next_entry().await.unwrap().is_none());
    }

    /// Records what it is shown: (path, data) per file, `end` checked.
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>, bool)>>>);

    impl EntryObserver for Recorder {
        fn begin(&mut self, entry: &Entry) {
            self.0.lock().unwrap().push((entry.path.clone(), Vec::new(), false));
        }
        fn data(&mut self, bytes: &[u8]) {
            let mut files = self.0.lock().unwrap();
            let last = files.last_mut().unwrap();
            assert!(!last.2, "data after end");
            last.1.extend_from_slice(bytes);
        }
        fn end(&mut self) {
            self.0.lock().unwrap().last_mut().unwrap().2 = true;
        }
    }

    #[tokio::test]
    async fn observer_sees_read_and_skipped_data_once() {
        let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let entries: &[(&str, &[u8])] = &[("a", &big), ("empty", b""), ("b", &big[..700])];
        let tar = build(entries, false);
        for (chunk, read) in [(1, 0), (100, 10), (4096, 8192), (1 << 20, 1 << 20)] {
            let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut r = TarReader::with_observer(
                stream_of(tar.clone(), chunk),
                Box::new(Recorder(seen.clone())),
            );
            // The caller reads part of "a", all of "b", nothing of "empty".
            r.next_entry().await.unwrap().unwrap();
            r.read_data(read).await.unwrap();
            r.next_entry().await.unwrap().unwrap();
            r.next_entry().await.unwrap().unwrap();
            while !r.read_data(333).await.unwrap().is_empty() {}
            assert_eq!(r.next_entry().await.unwrap().unwrap().kind, EntryKind::Dir);
            assert!(r.next_entry().await.unwrap().is_none());
            let seen = seen.lock().unwrap();
            let want: Vec<(String, Vec<u8>, bool)> =
                entries.iter().map(|(p, d)| (p.to_string(), d.to_vec(), true)).collect();
            assert_eq!(*seen, want, "chunk {chunk}, read {read}: directories are not files");
        }
    }

    #[tokio::test]
    async fn pax_and_base256() {
        let mut tar = Vec::new();
        let path = format!("base/1/{}", "1".repeat(150));
        let pax = format!(" path={path}\n");
        let rec = format!("{}{}", pax.len() + 3, pax); // 3 digits of length
        assert_eq!(rec.len(), rec[..3].parse::<usize>().unwrap());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_size(rec.len() as u64);
        h.set_path("PaxHeader").unwrap();
        h.set_cksum();
        tar.extend_from_slice(h.as_bytes());
        tar.extend_from_slice(rec.as_bytes());
        tar.resize(tar.len().div_ceil(512) * 512, 0);
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_path("short").unwrap();
        // base-256 size field
        let hb = h.as_mut_bytes();
        hb[124..136].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
        h.set_cksum();
        tar.extend_from_slice(h.as_bytes());
        tar.extend_from_slice(b"hello");
        tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
        let mut r = TarReader::new(stream_of(tar, 333));
        let got = read_all(&mut r).await.unwrap();
        assert_eq!(got, vec![(path, EntryKind::File, b"hello".to_vec())]);
    }

    #[tokio::test]
    async fn malformed_and_truncated() {
        let tar =
            build(&[("base/5/16384", &[7u8; 8192]), ("global/pg_control", &[1u8; 100])], false);
        // Corrupt header checksum of the second entry.
        let mut bad = tar.clone();
        bad[512 + 8192 + 10] ^= 0xff;
        let err = read_all(&mut TarReader::new(stream_of(bad, 4096))).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("offset 8704") && msg.contains("base/5/16384") && msg.contains("checksum"),
            "{msg}"
        );

        // Cut in the middle of data.
        let err = read_all(&mut TarReader::new(stream_of(tar[..512 + 5000].to_vec(), 4096)))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("truncated")
                && msg.contains("base/5/16384")
                && msg.contains("3192 bytes missing"),
            "{msg}"
        );

        // Cut exactly at an entry boundary: no end marker.
        let err = read_all(&mut TarReader::new(stream_of(tar[..512 + 8192].to_vec(), 4096)))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("without the end-of-archive marker"), "{err}");

        // Not a tar at all.
        let err =
            read_all(&mut TarReader::new(stream_of(vec![b'x'; 2000], 4096))).await.unwrap_err();
        assert!(err.to_string().contains("not a tar archive"), "{err}");

        // Empty body.
        let err = read_all(&mut TarReader::new(stream_of(Vec::new(), 4096))).await.unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}
