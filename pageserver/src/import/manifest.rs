//! Verifying a base backup against its backup manifest, and its relation
//! pages against their data checksums, as the import streams it.
//!
//! The bootstrap asks `BASE_BACKUP` for a manifest with CRC-32C checksums
//! (`MANIFEST 'yes', MANIFEST_CHECKSUMS 'CRC32C'`; every supported major,
//! 15 to 18, has both). The manifest arrives after the tar, so while the
//! import reads the tar a [`FileDigests`] observer keeps each regular file's
//! size and CRC-32C, and [`BackupChecks::verify`] compares them with the
//! manifest at the end, before the timeline becomes visible.
//!
//! Invariants:
//! - memory is bounded by the number of files, never by their size: per file
//!   a path, a size and a CRC; per relation file at most one partial page;
//!   at most [`MAX_LISTED`] failures are listed (all are counted);
//! - every regular file of the tar is in the manifest with the same size
//!   and CRC-32C, and every file of the manifest is in the tar;
//! - the manifest is intact: its `Manifest-Checksum` (SHA-256 over the text
//!   up to and including its second-to-last newline, as `pg_verifybackup`
//!   computes it) matches. Versions 1 (15-17) and 2 (18, which adds
//!   `System-Identifier`, checked against `IDENTIFY_SYSTEM`) are read;
//! - when `global/pg_control` says the cluster has data checksums, every
//!   relation page (all forks) older than the backup's start LSN carries a
//!   correct one. Pages at or above it were being written while the server
//!   read them and may be torn; WAL replay from the start LSN rewrites them
//!   (PostgreSQL's own `BASE_BACKUP` skips them the same way). New (zeroed)
//!   pages have no checksum.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use postgres_ffi::page::{page_lsn, verify_page_checksum};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use utils::lsn::Lsn;

use super::pg_files::{classify, parse_control, PgFile};
use super::tar_reader::{Entry, EntryObserver};
use crate::pgdatadir_mapping::{BLCKSZ, RELSEG_SIZE};

/// Failures listed by name in an error (the rest are counted).
pub const MAX_LISTED: usize = 10;
/// The `global/pg_control` path, kept to learn whether pages have checksums.
const CONTROL_PATH: &str = "global/pg_control";
const CONTROL_MAX_BYTES: u64 = BLCKSZ as u64;

/// Why a base backup is not what its server sent.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The manifest is missing, unreadable or corrupt.
    #[error("backup manifest: {0}")]
    Manifest(String),
    /// Files differ from the manifest, or pages fail their checksums.
    #[error("{0}")]
    Corrupt(String),
}

/// A parsed, checksum-verified backup manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupManifest {
    /// `PostgreSQL-Backup-Manifest-Version`: 1 (15-17) or 2 (18).
    pub version: u32,
    /// Version 2 only.
    pub system_identifier: Option<u64>,
    pub files: Vec<ManifestFile>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    pub path: String,
    pub size: u64,
    /// The CRC-32C as the manifest writes it: the hex of the value's bytes
    /// in the server's memory order (little-endian here; a big-endian
    /// server's byte-swapped value is accepted too, see `crc_matches`).
    pub crc32c: u32,
}

/// Whether `computed` is the manifest's `listed` checksum, read as the
/// bytes of a little-endian or of a big-endian server.
fn crc_matches(computed: u32, listed: u32) -> bool {
    computed == listed || computed.swap_bytes() == listed
}

#[derive(Deserialize)]
struct RawManifest {
    #[serde(rename = "PostgreSQL-Backup-Manifest-Version")]
    version: u32,
    #[serde(rename = "System-Identifier")]
    system_identifier: Option<u64>,
    #[serde(rename = "Files")]
    files: Vec<RawFile>,
}

#[derive(Deserialize)]
struct RawFile {
    #[serde(rename = "Path")]
    path: Option<String>,
    /// Hex of a path that is not valid UTF-8.
    #[serde(rename = "Encoded-Path")]
    encoded_path: Option<String>,
    #[serde(rename = "Size")]
    size: u64,
    #[serde(rename = "Checksum-Algorithm")]
    algorithm: Option<String>,
    #[serde(rename = "Checksum")]
    checksum: Option<String>,
}

impl BackupManifest {
    /// Checks the manifest's own checksum, then reads it. Every file must
    /// carry a CRC-32C checksum.
    pub fn parse(text: &[u8]) -> Result<BackupManifest, VerifyError> {
        let bad = VerifyError::Manifest;
        check_manifest_checksum(text).map_err(bad)?;
        let raw: RawManifest =
            serde_json::from_slice(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        match (raw.version, raw.system_identifier) {
            (1, _) | (2, Some(_)) => {}
            (2, None) => return Err(bad("version 2 without a System-Identifier".into())),
            (v, _) => return Err(bad(format!("version {v} is not supported (1 and 2 are)"))),
        }
        let files =
            raw.files.into_iter().map(manifest_file).collect::<Result<_, _>>().map_err(bad)?;
        Ok(BackupManifest { version: raw.version, system_identifier: raw.system_identifier, files })
    }
}

fn manifest_file(f: RawFile) -> Result<ManifestFile, String> {
    let path = match (f.path, f.encoded_path) {
        (Some(p), None) => p,
        (None, Some(hex_path)) => {
            let bytes = hex::decode(&hex_path)
                .map_err(|e| format!("Encoded-Path {hex_path:?} is not hex: {e}"))?;
            // The tar reader names entries the same lossy way.
            String::from_utf8_lossy(&bytes).into_owned()
        }
        _ => return Err("a file entry needs exactly one of Path and Encoded-Path".into()),
    };
    let crc32c = match (f.algorithm.as_deref(), f.checksum.as_deref()) {
        (Some("CRC32C"), Some(hex_crc)) if hex_crc.len() == 8 => {
            let mut bytes = [0u8; 4];
            hex::decode_to_slice(hex_crc, &mut bytes)
                .map_err(|_| format!("'{path}': checksum {hex_crc:?} is not 8 hex digits"))?;
            u32::from_le_bytes(bytes)
        }
        (Some("CRC32C"), other) => {
            return Err(format!("'{path}': CRC32C checksum {other:?} is not 8 hex digits"))
        }
        (algorithm, _) => {
            return Err(format!(
                "'{path}' has checksum algorithm {}, not CRC32C as requested",
                algorithm.unwrap_or("NONE")
            ))
        }
    };
    Ok(ManifestFile { path, size: f.size, crc32c })
}

/// `Manifest-Checksum`: SHA-256 of everything up to and including the
/// second-to-last newline; the last line (which holds it) ends the text.
fn check_manifest_checksum(text: &[u8]) -> Result<(), String> {
    let Some(body) = text.strip_suffix(b"\n") else {
        return Err("it does not end with a newline: truncated".into());
    };
    let Some(last_start) = body.iter().rposition(|&b| b == b'\n').map(|i| i + 1) else {
        return Err("it has fewer than two lines".into());
    };
    let last = String::from_utf8_lossy(&body[last_start..]);
    let stored = last
        .trim()
        .strip_prefix("\"Manifest-Checksum\":")
        .and_then(|rest| rest.trim().strip_suffix('}'))
        .map(|v| v.trim().trim_matches('"').to_ascii_lowercase())
        .ok_or_else(|| format!("its last line is not the Manifest-Checksum: {last:.100}"))?;
    let computed = hex::encode(Sha256::digest(&text[..last_start]));
    if stored != computed {
        return Err(format!(
            "its Manifest-Checksum {stored} does not match the SHA-256 {computed} of its text: \
             the manifest was corrupted"
        ));
    }
    Ok(())
}

/// What the tar held of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDigest {
    pub size: u64,
    pub crc32c: u32,
}

/// The file being observed.
struct Current {
    path: String,
    digest: FileDigest,
    /// Relation files: the block number of `page`'s first byte.
    next_blkno: Option<u32>,
    /// A partial page of a relation file, or the bytes of `pg_control`.
    partial: Vec<u8>,
    is_control: bool,
}

#[derive(Default)]
struct DigestState {
    files: HashMap<String, FileDigest>,
    current: Option<Current>,
    /// Relation pages below this LSN must have a valid checksum.
    start_lsn: Lsn,
    control: Option<Vec<u8>>,
    bad_pages: Vec<String>,
    bad_pages_total: u64,
    pages_checked: u64,
    duplicate: Option<String>,
}

impl DigestState {
    fn check_page(&mut self, path: &str, blkno: u32, page: &[u8]) {
        debug_assert_eq!(page.len(), BLCKSZ);
        if page_lsn(page) >= self.start_lsn.0 {
            return; // written during the backup: WAL replay rewrites it
        }
        self.pages_checked += 1;
        if !verify_page_checksum(page, blkno) {
            self.bad_pages_total += 1;
            if self.bad_pages.len() < MAX_LISTED {
                self.bad_pages.push(format!("'{path}' block {blkno}"));
            }
        }
    }

    fn data(&mut self, mut bytes: &[u8]) {
        let Some(mut cur) = self.current.take() else { return };
        cur.digest.size += bytes.len() as u64;
        cur.digest.crc32c = crc32c::crc32c_append(cur.digest.crc32c, bytes);
        if cur.is_control {
            cur.partial.extend_from_slice(bytes);
        } else if let Some(blkno) = cur.next_blkno.as_mut() {
            while !bytes.is_empty() {
                if cur.partial.is_empty() && bytes.len() >= BLCKSZ {
                    self.check_page(&cur.path, *blkno, &bytes[..BLCKSZ]);
                    bytes = &bytes[BLCKSZ..];
                } else {
                    let n = (BLCKSZ - cur.partial.len()).min(bytes.len());
                    cur.partial.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if cur.partial.len() < BLCKSZ {
                        break;
                    }
                    self.check_page(&cur.path, *blkno, &cur.partial);
                    cur.partial.clear();
                }
                *blkno = blkno.wrapping_add(1);
            }
        }
        self.current = Some(cur);
    }
}

/// The per-file sizes and CRC-32Cs of a streamed backup, and the checks of
/// its relation pages. Clones share the state: hand
/// [`FileDigests::observer`] to the import, keep one for [`BackupChecks`].
#[derive(Clone)]
pub struct FileDigests(Arc<Mutex<DigestState>>);

impl FileDigests {
    /// `start_lsn`: the backup's start (pages at or above it are not checked).
    pub fn new(start_lsn: Lsn) -> FileDigests {
        FileDigests(Arc::new(Mutex::new(DigestState { start_lsn, ..Default::default() })))
    }

    pub fn observer(&self) -> Box<dyn EntryObserver> {
        Box::new(self.clone())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DigestState> {
        // Only this module locks it, and nothing in it panics while locked.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The files seen so far (tests).
    pub fn files(&self) -> HashMap<String, FileDigest> {
        self.state().files.clone()
    }
}

impl EntryObserver for FileDigests {
    fn begin(&mut self, entry: &Entry) {
        let next_blkno = match classify(&entry.path, false) {
            PgFile::Rel { segno, .. } => Some(segno.wrapping_mul(RELSEG_SIZE)),
            _ => None,
        };
        let is_control = entry.path == CONTROL_PATH && entry.size <= CONTROL_MAX_BYTES;
        self.state().current = Some(Current {
            path: entry.path.clone(),
            digest: FileDigest { size: 0, crc32c: 0 },
            next_blkno,
            partial: Vec::new(),
            is_control,
        });
    }

    fn data(&mut self, bytes: &[u8]) {
        self.state().data(bytes);
    }

    fn end(&mut self) {
        let mut st = self.state();
        let Some(cur) = st.current.take() else { return };
        if cur.is_control {
            st.control = Some(cur.partial);
        }
        // A relation file that is not whole pages is refused by the import.
        if st.files.insert(cur.path.clone(), cur.digest).is_some() && st.duplicate.is_none() {
            st.duplicate = Some(cur.path);
        }
    }
}

/// What [`BackupChecks::verify`] found, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    pub files: usize,
    pub bytes: u64,
    /// Relation pages whose checksum was checked (0 without data checksums).
    pub pages_checked: u64,
    pub manifest_version: u32,
}

/// The checks of a finished backup stream.
pub struct BackupChecks<'a> {
    pub digests: &'a FileDigests,
    /// The manifest as the server sent it; `None` if it sent none.
    pub manifest: Option<&'a [u8]>,
    /// The primary's `IDENTIFY_SYSTEM` system identifier.
    pub system_identifier: u64,
}

impl BackupChecks<'_> {
    /// Every file against the manifest, then the pages against their
    /// checksums (if `pg_control` says the cluster has them). The error
    /// names the files (and blocks) that failed.
    pub fn verify(&self) -> Result<Verified, VerifyError> {
        let text = self.manifest.ok_or_else(|| {
            VerifyError::Manifest("the server sent none, though it was asked for one".into())
        })?;
        let manifest = BackupManifest::parse(text)?;
        if let Some(id) = manifest.system_identifier.filter(|&id| id != self.system_identifier) {
            return Err(VerifyError::Manifest(format!(
                "it is of cluster {id}, the primary is cluster {}",
                self.system_identifier
            )));
        }
        let st = self.digests.state();
        if let Some(path) = &st.duplicate {
            return Err(VerifyError::Corrupt(format!("'{path}' appears twice in the tar")));
        }
        compare_files(&manifest, &st.files)?;
        let data_checksums = match &st.control {
            Some(c) => {
                parse_control(c)
                    .map_err(|e| VerifyError::Corrupt(format!("'{CONTROL_PATH}': {e}")))?
                    .data_checksums
            }
            None => return Err(VerifyError::Corrupt(format!("no '{CONTROL_PATH}' in the tar"))),
        };
        if data_checksums && st.bad_pages_total > 0 {
            return Err(VerifyError::Corrupt(format!(
                "{} relation page(s) fail their data checksum: {}{}",
                st.bad_pages_total,
                st.bad_pages.join(", "),
                more(st.bad_pages_total, st.bad_pages.len())
            )));
        }
        Ok(Verified {
            files: st.files.len(),
            bytes: st.files.values().map(|d| d.size).sum(),
            pages_checked: if data_checksums { st.pages_checked } else { 0 },
            manifest_version: manifest.version,
        })
    }
}

fn more(total: u64, listed: usize) -> String {
    if total > listed as u64 {
        format!(" and {} more", total - listed as u64)
    } else {
        String::new()
    }
}

/// Same files, sizes and CRC-32Cs on both sides.
fn compare_files(
    manifest: &BackupManifest,
    seen: &HashMap<String, FileDigest>,
) -> Result<(), VerifyError> {
    let mut problems = Vec::new();
    let mut total = 0u64;
    let mut note = |p: String| {
        total += 1;
        if problems.len() < MAX_LISTED {
            problems.push(p);
        }
    };
    let mut listed = std::collections::HashSet::with_capacity(manifest.files.len());
    for f in &manifest.files {
        listed.insert(f.path.as_str());
        match seen.get(&f.path) {
            None => note(format!("'{}' is in the manifest but not in the tar", f.path)),
            Some(d) if d.size != f.size => note(format!(
                "'{}' is {} bytes in the tar, {} in the manifest",
                f.path, d.size, f.size
            )),
            Some(d) if !crc_matches(d.crc32c, f.crc32c) => note(format!(
                "'{}' has CRC-32C {}, the manifest says {}",
                f.path,
                hex::encode(d.crc32c.to_le_bytes()),
                hex::encode(f.crc32c.to_le_bytes())
            )),
            Some(_) => {}
        }
    }
    let mut extra: Vec<&String> = seen.keys().filter(|p| !listed.contains(p.as_str())).collect();
    extra.sort();
    for p in extra {
        note(format!("'{p}' is in the tar but not in the manifest"));
    }
    if total == 0 {
        return Ok(());
    }
    Err(VerifyError::Corrupt(format!(
        "files differ from the backup manifest: {}{}",
        problems.join("; "),
        more(total, problems.len())
    )))
}

#[cfg(test)]
mod tests;
