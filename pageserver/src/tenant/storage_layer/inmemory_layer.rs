//! `InMemoryLayer`: the layer that receives writes.
//!
//! Values are serialized once and appended raw to an `EphemeralFile`; the
//! index maps key -> list of (LSN, `BlobRef`) sorted by LSN. A layer covers
//! `[start_lsn, end_lsn)`; it is *open* (end unknown, receiving writes) until
//! frozen at an LSN boundary, then *frozen* (immutable) until flushed to an
//! L0 delta file.
//!
//! Concurrency contract: one writer at a time (the timeline writer lock).
//! The writer appends the bytes first and then publishes the index entries,
//! so any entry a reader can see points at bytes already appended. Readers
//! take the index lock shortly to plan, then read without it.
//!
//! Failed writes: an append that fails (a full disk) leaves the file as it
//! was and indexes nothing (`EphemeralFile::append` is all or nothing).
//! Entries of LSNs that were never finished (the timeline writer gave up on
//! them) are dropped with `discard_above`; their bytes stay in the file,
//! unreferenced, and go away with it.

use std::collections::BTreeMap;
use std::sync::{OnceLock, RwLock};
use std::time::Instant;

use io_engine::{AlignedBuf, IoEngine};
use pageserver_api::key::{CompactKey, Key};
use smallvec::SmallVec;
use utils::lsn::Lsn;

use super::ephemeral_file::EphemeralFile;
use super::BlobRef;

/// Per key, (LSN, value location) sorted by LSN; almost always one entry.
pub type KeyHistory = SmallVec<[(Lsn, BlobRef); 1]>;

pub struct InMemoryLayer {
    pub start_lsn: Lsn,
    /// Set once when frozen: the exclusive end of the layer's LSN range.
    end_lsn: OnceLock<Lsn>,
    pub opened_at: Instant,
    file: EphemeralFile,
    index: RwLock<BTreeMap<CompactKey, KeyHistory>>,
}

impl InMemoryLayer {
    pub async fn create(
        engine: &IoEngine,
        dir: &std::path::Path,
        seq: u64,
        start_lsn: Lsn,
        direct_io: bool,
    ) -> std::io::Result<InMemoryLayer> {
        Ok(InMemoryLayer {
            start_lsn,
            end_lsn: OnceLock::new(),
            opened_at: Instant::now(),
            file: EphemeralFile::create(engine, dir, seq, direct_io).await?,
            index: RwLock::new(BTreeMap::new()),
        })
    }

    pub fn end_lsn(&self) -> Option<Lsn> {
        self.end_lsn.get().copied()
    }

    /// Freeze: no more writes; the layer covers `[start_lsn, end)`.
    pub fn freeze(&self, end: Lsn) {
        assert!(end > self.start_lsn, "freeze at {end} <= start {}", self.start_lsn);
        self.end_lsn.set(end).expect("layer frozen twice");
    }

    /// Bytes of serialized values held.
    pub fn size(&self) -> u64 {
        self.file.len()
    }

    pub fn is_empty(&self) -> bool {
        self.file.is_empty()
    }

    /// Append already-serialized values (`buf` holds them back to back) and
    /// index them. `entries` gives each value's key, LSN, position in `buf`
    /// and will_init. LSNs must be >= start_lsn, and per key non-decreasing.
    pub async fn put_serialized(
        &self,
        buf: &[u8],
        entries: &[(Key, Lsn, std::ops::Range<usize>, bool)],
    ) -> anyhow::Result<()> {
        if let Some(end) = self.end_lsn() {
            anyhow::bail!("write into the layer from {} frozen at {end}", self.start_lsn);
        }
        let base = self.file.append(buf).await?;
        let mut index = self.index.write().unwrap();
        for (key, lsn, range, will_init) in entries {
            debug_assert!(*lsn >= self.start_lsn);
            let blob = BlobRef::new(base + range.start as u64, range.len(), *will_init);
            let hist = index.entry(key.to_compact()).or_default();
            match hist.last_mut() {
                // Same key written twice at one LSN: the later write wins.
                Some(last) if last.0 == *lsn => last.1 = blob,
                Some(last) if last.0 > *lsn => {
                    anyhow::bail!("key {key} written at {lsn} after {}", last.0)
                }
                _ => hist.push((*lsn, blob)),
            }
        }
        Ok(())
    }

    /// Replace values already in this (open) layer by others at the same
    /// key and LSN, all `will_init` (images of keys with long chains:
    /// `timeline/writer/chain.rs`). `buf` holds the new values back to back;
    /// `entries` gives each one's key, LSN and position in `buf`. A reader
    /// sees the old or the new value, which must reconstruct alike.
    pub async fn replace_with_images(
        &self,
        buf: &[u8],
        entries: &[(Key, Lsn, std::ops::Range<usize>)],
    ) -> anyhow::Result<()> {
        if let Some(end) = self.end_lsn() {
            anyhow::bail!("write into the layer from {} frozen at {end}", self.start_lsn);
        }
        let base = self.file.append(buf).await?;
        let mut index = self.index.write().unwrap();
        for (key, lsn, range) in entries {
            let blob = BlobRef::new(base + range.start as u64, range.len(), true);
            let hist = index.get_mut(&key.to_compact());
            let at = hist.as_ref().and_then(|h| h.binary_search_by_key(lsn, |(l, _)| *l).ok());
            match (hist, at) {
                (Some(h), Some(i)) => h[i].1 = blob,
                _ => anyhow::bail!("no value of key {key} at {lsn} in the layer to replace"),
            }
        }
        Ok(())
    }

    /// Drop the index entries above `lsn` (values of LSNs the writer
    /// abandoned, never visible to readers); returns how many.
    pub fn discard_above(&self, lsn: Lsn) -> usize {
        let mut index = self.index.write().unwrap();
        let mut removed = 0;
        index.retain(|_, hist| {
            let keep = hist.partition_point(|(l, _)| *l <= lsn);
            removed += hist.len() - keep;
            hist.truncate(keep);
            !hist.is_empty()
        });
        removed
    }

    /// Whether the index is empty (the file may still hold discarded bytes).
    pub fn has_no_values(&self) -> bool {
        self.index.read().unwrap().is_empty()
    }

    /// Values of `key` with `floor < LSN <= lsn`, newest first, up to and
    /// including the first `will_init` one. Returns whether a `will_init`
    /// was reached.
    pub fn collect(
        &self,
        key: CompactKey,
        lsn: Lsn,
        floor: Lsn,
        out: &mut Vec<(Lsn, BlobRef)>,
    ) -> bool {
        let index = self.index.read().unwrap();
        let Some(hist) = index.get(&key) else { return false };
        for &(l, blob) in hist.iter().rev() {
            if l > lsn {
                continue;
            }
            if l <= floor {
                break;
            }
            out.push((l, blob));
            if blob.will_init() {
                return true;
            }
        }
        false
    }

    pub async fn read_chunk(&self, offset: u64, len: usize) -> std::io::Result<AlignedBuf> {
        self.file.read_at(AlignedBuf::try_for_read(len)?, offset, len).await
    }

    /// Every index entry sorted by (key, LSN); for the flush of a frozen layer.
    pub fn sorted_entries(&self) -> Vec<(CompactKey, Lsn, BlobRef)> {
        let index = self.index.read().unwrap();
        let mut out = Vec::with_capacity(index.len());
        for (k, hist) in index.iter() {
            out.extend(hist.iter().map(|(l, b)| (*k, *l, *b)));
        }
        out
    }

    pub fn ephemeral_file(&self) -> &EphemeralFile {
        &self.file
    }
}
