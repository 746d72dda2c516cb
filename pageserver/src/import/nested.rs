//! The output directory of `pg_basebackup -Ft` sent as one tar (`tar -C
//! <dir> -cf - .`), as the importer's stream of [`TarPart`]s.
//!
//! The outer tar's entries are archives, read as they stream: `base.tar`
//! (no prefix) and `<oid>.tar` per tablespace (its paths under
//! `pg_tblspc/<oid>/`, the in-place layout of `backup_parts`), in any order;
//! `pg_wal.tar` and `backup_manifest` are skipped with a log line (WAL is
//! not imported; the manifest is not verified: `pg_verifybackup` does that
//! before the upload). Compressed archives (`-z`, `--compress`) are refused
//! naming the file, as is any other entry, an archive that comes twice, an
//! empty one, and an outer tar without `base.tar`. Whether every tablespace
//! `base.tar`'s `tablespace_map` names has its archive is the importer's
//! check (`tablespaces`).
//!
//! [`body_parts`] tells the two forms of a request body apart by the first
//! entry names: a plain base-backup tar is passed on unchanged (its bytes
//! replayed from the start); an outer tar's first entry other than its root
//! directory is one of the names above. `backup_manifest` is in both (a
//! plain-format backup has one at its root), so after it the next entry
//! decides.
//!
//! Invariants: archive bytes are passed on one chunk at a time (at most
//! [`ARCHIVE_CHUNK`]), never held; while the form is not known, the chunks
//! received are kept to be replayed, at most [`MAX_PEEK_BYTES`] of them,
//! and none once it is.

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tracing::info;

use super::tar_reader::{Entry, EntryKind, TarError, TarPart, TarReader};
use super::ImportError;

/// Most bytes of an archive passed on in one part.
pub const ARCHIVE_CHUNK: usize = 256 * 1024;
/// Most body bytes kept while the form is not known (a leading
/// `backup_manifest`).
pub const MAX_PEEK_BYTES: u64 = 64 * 1024 * 1024;

/// The importer's parts of a request body.
pub type Parts = Pin<Box<dyn Stream<Item = Result<TarPart, io::Error>> + Send>>;

/// What an entry of the outer tar is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OuterEntry {
    /// `.` or `./`.
    Root,
    /// `base.tar` (prefix "") or `<oid>.tar` (prefix `pg_tblspc/<oid>/`).
    Archive {
        prefix: String,
    },
    Wal,
    Manifest,
}

fn outer_entry(entry: &Entry) -> Result<OuterEntry, String> {
    let name = entry.path.as_str();
    if matches!(entry.kind, EntryKind::Dir) && (name.is_empty() || name == ".") {
        return Ok(OuterEntry::Root);
    }
    let expected = "(a pg_basebackup -Ft directory holds base.tar, <tablespace oid>.tar, \
                    pg_wal.tar and backup_manifest)";
    if !matches!(entry.kind, EntryKind::File) {
        return Err(format!("'{name}' in the outer tar is not a regular file {expected}"));
    }
    if let Some(archive) = compressed_archive(name) {
        return Err(format!(
            "'{name}' is compressed: compressed archives (pg_basebackup -z/--compress) are \
             not supported; decompress it to {archive}, or take the backup without compression"
        ));
    }
    match name {
        "base.tar" => Ok(OuterEntry::Archive { prefix: String::new() }),
        "pg_wal.tar" => Ok(OuterEntry::Wal),
        "backup_manifest" => Ok(OuterEntry::Manifest),
        _ => match tablespace_oid(name) {
            Some(oid) => Ok(OuterEntry::Archive { prefix: format!("pg_tblspc/{oid}/") }),
            None => Err(format!("unexpected entry '{name}' in the outer tar {expected}")),
        },
    }
}

/// `<oid>.tar` -> oid.
fn tablespace_oid(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".tar")?;
    if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `base.tar.gz` and the like -> the archive's own name.
fn compressed_archive(name: &str) -> Option<&str> {
    let (archive, suffix) = name.split_at(name.find(".tar.")? + 4);
    let known = ["gz", "lz4", "zst"].iter().any(|s| suffix.strip_prefix('.') == Some(s));
    let archive_name = archive == "base.tar" || archive == "pg_wal.tar";
    (known && (archive_name || tablespace_oid(archive).is_some())).then_some(archive)
}

/// Passes a stream on, keeping what it yields while `recorded` is `Some`.
struct Recorder<S> {
    inner: S,
    recorded: Option<Vec<Bytes>>,
    recorded_bytes: u64,
    /// The body went past [`MAX_PEEK_BYTES`] while the form was not known.
    overflowed: bool,
}

impl<S> Stream for Recorder<S>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Unpin,
{
    type Item = Result<Bytes, io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let item = std::task::ready!(this.inner.poll_next_unpin(cx));
        if let (Some(Ok(chunk)), Some(recorded)) = (&item, this.recorded.as_mut()) {
            this.recorded_bytes += chunk.len() as u64;
            if this.recorded_bytes > MAX_PEEK_BYTES {
                this.overflowed = true;
                return Poll::Ready(Some(Err(io::Error::other("peek limit"))));
            }
            recorded.push(chunk.clone());
        }
        Poll::Ready(item)
    }
}

/// The form of the body, from its first entries.
enum Form {
    Plain,
    /// The first entry that is not the root directory (and not a leading
    /// `backup_manifest`, already skipped).
    Nested(Entry),
}

/// The request body as the importer's parts: a plain tar as it is, or the
/// archives of a `pg_basebackup -Ft` directory (see the module comment).
pub async fn body_parts<S>(body: S) -> Result<Parts, ImportError>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static,
{
    let recorder =
        Recorder { inner: body, recorded: Some(Vec::new()), recorded_bytes: 0, overflowed: false };
    let mut outer = TarReader::new(recorder);
    let form = detect(&mut outer).await;
    if outer.stream_mut().overflowed {
        return Err(ImportError::BadTar(format!(
            "the tar begins with a backup_manifest of more than {MAX_PEEK_BYTES} bytes: put \
             base.tar before backup_manifest in the outer tar of a pg_basebackup -Ft directory"
        )));
    }
    match form {
        Err(TarError::Io(e)) => Err(TarError::Io(e).into()),
        // A malformed tar is reported by the import as it reads it again.
        Ok(Form::Plain) | Err(TarError::Malformed(_)) => {
            let mut recorder = outer.into_stream();
            let recorded = recorder.recorded.take().unwrap_or_default();
            let replay = futures::stream::iter(recorded.into_iter().map(Ok)).chain(recorder.inner);
            Ok(Box::pin(replay.map(|r| r.map(TarPart::Data))))
        }
        Ok(Form::Nested(first)) => {
            outer.stream_mut().recorded = None;
            info!("the body is a pg_basebackup -Ft directory: importing its archives");
            Ok(nested_parts(outer, first))
        }
    }
}

async fn detect<S>(outer: &mut TarReader<Recorder<S>>) -> Result<Form, TarError>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Unpin,
{
    let mut after_manifest = false;
    while let Some(entry) = outer.next_entry().await? {
        let name = entry.path.as_str();
        let nested = match (&entry.kind, outer_entry(&entry)) {
            (_, Ok(OuterEntry::Root)) => continue,
            (EntryKind::File, Ok(OuterEntry::Manifest)) if !after_manifest => {
                after_manifest = true;
                continue;
            }
            (_, Ok(_)) => true,
            // Compressed archives: refused as part of the outer tar.
            (EntryKind::File, Err(_)) => compressed_archive(name).is_some(),
            (_, Err(_)) => false,
        };
        if !nested {
            return Ok(Form::Plain);
        }
        if after_manifest {
            info!("skipping backup_manifest: not verified (pg_verifybackup checks a backup)");
        }
        return Ok(Form::Nested(entry));
    }
    Ok(Form::Plain)
}

/// Reads the outer tar; see the module comment.
struct Nested<S> {
    outer: TarReader<S>,
    /// The entry read by `detect`, not yet handled.
    pending: Option<Entry>,
    /// The outer entry whose data is passed on.
    in_archive: bool,
    /// Archives begun, by name.
    seen: HashSet<String>,
    done: bool,
}

/// A malformed outer tar, as the stream error the importer's tar reader
/// reports as malformed (`TarError::from_stream`).
fn outer_error(e: TarError) -> io::Error {
    match e {
        TarError::Io(e) => e,
        TarError::Malformed(m) => TarError::Malformed(format!("the outer tar: {m}")).into_io(),
    }
}

impl<S> Nested<S>
where
    S: Stream<Item = Result<Bytes, io::Error>> + Unpin,
{
    async fn next_part(&mut self) -> Result<Option<TarPart>, io::Error> {
        loop {
            if self.in_archive {
                let chunk = self.outer.read_data(ARCHIVE_CHUNK).await.map_err(outer_error)?;
                if !chunk.is_empty() {
                    return Ok(Some(TarPart::Data(chunk)));
                }
                self.in_archive = false;
            }
            let entry = match self.pending.take() {
                Some(e) => e,
                None => match self.outer.next_entry().await.map_err(outer_error)? {
                    Some(e) => e,
                    None if self.seen.contains("base.tar") => return Ok(None),
                    None => return Err(self.malformed("it has no base.tar".into())),
                },
            };
            let kind = outer_entry(&entry).map_err(|m| self.malformed(m))?;
            match kind {
                OuterEntry::Root => {}
                OuterEntry::Wal => info!("skipping pg_wal.tar ({} bytes): WAL is not imported", entry.size),
                OuterEntry::Manifest => info!(
                    "skipping backup_manifest ({} bytes): not verified (pg_verifybackup checks a backup)",
                    entry.size
                ),
                OuterEntry::Archive { prefix } => return self.begin_archive(&entry, prefix).map(Some),
            }
        }
    }

    fn begin_archive(&mut self, entry: &Entry, prefix: String) -> Result<TarPart, io::Error> {
        let name = &entry.path;
        if !self.seen.insert(name.clone()) {
            return Err(self.malformed(format!("'{name}' appears twice in the outer tar")));
        }
        if entry.size == 0 {
            return Err(self.malformed(format!("'{name}' is empty: not a tar archive")));
        }
        info!(
            "archive {name} ({} bytes){}",
            entry.size,
            match prefix.as_str() {
                "" => String::new(),
                p => format!(": its entries go under {p}"),
            }
        );
        self.in_archive = true;
        Ok(TarPart::Archive { prefix })
    }

    fn malformed(&self, msg: String) -> io::Error {
        TarError::Malformed(format!("pg_basebackup -Ft directory: {msg}")).into_io()
    }
}

fn nested_parts<S>(outer: TarReader<S>, first: Entry) -> Parts
where
    S: Stream<Item = Result<Bytes, io::Error>> + Send + Unpin + 'static,
{
    let state = Nested {
        outer,
        pending: Some(first),
        in_archive: false,
        seen: HashSet::new(),
        done: false,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        match st.next_part().await {
            Ok(Some(part)) => Some((Ok(part), st)),
            Ok(None) => None,
            Err(e) => {
                st.done = true;
                Some((Err(e), st))
            }
        }
    }))
}

#[cfg(test)]
mod tests;
