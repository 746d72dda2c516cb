//! Timeline metadata and layer manifest: the durable facts of a timeline, in
//! one small file `timelines/<id>/metadata`, replaced atomically (temp,
//! fsync, rename, fsync dir), so the list of live layer files,
//! `disk_consistent_lsn` and the GC cutoff always change together.
//!
//! Format version 4 (little-endian):
//! ```text
//! magic "PSTM", version u16 = 4, pad u16,
//! disk_consistent_lsn u64, initial_lsn u64, pg_version u32, gc_cutoff u64,
//! layer count u32, per layer (canonical order, see below):
//!     level u8 (0 L0 delta, 1 L1 delta, 2 image), name length u16,
//!     name (UTF-8), file size u64;
//! empty stratum count u32, per stratum: level u8 (0 or 1), LSN start u64,
//!     LSN end u64 (start < end);
//! LSN-by-time sample count u32, per sample: unix seconds u64, LSN u64;
//! ancestor flag u8 (0: none; 1: a branch, then ancestor timeline id
//!     16 bytes, ancestor LSN u64);
//! CRC-32C u32 of everything before it.
//! ```
//! Layers are listed strata oldest first (an L1 stratum's layers by key),
//! then images by LSN and key (`Historic::all_historic`); start-up does not
//! rely on the order. Empty strata are LSN ranges without values that keep
//! the strata contiguous (a compaction that found no values; the gaps of a
//! converted version-1 timeline). `gc_cutoff` is 0 until GC first runs.
//!
//! A branch (`docs/branches.md`) names its ancestor timeline and the LSN it
//! branched at, which is its `initial_lsn`: its pages at or below that LSN
//! are the ancestor's. A timeline without an ancestor has flag 0.
//!
//! Version 2 has no gc_cutoff, no level bytes (every layer is an L0), no
//! empty strata and no LSN-by-time record; version 1 (from older daemons)
//! has no layer list either (start-up builds one from the directory and
//! rewrites the file at once). Version 3 is version 4 without the
//! ancestor flag. Versions 1 to 3 have no ancestor; all are still read;
//! the next write is version 4. A mismatch of any kind (length, checksum, count, level,
//! order) is an error naming the file.
//!
//! Start-up trusts the manifest, not the directory listing (see
//! `Timeline::load`).

use std::ops::Range;
use std::path::Path;

use anyhow::{bail, ensure, Context};
use io_engine::IoEngine;
use utils::id::TimelineId;
use utils::lsn::Lsn;

use super::lsn_by_time::{LsnTimeRecord, MAX_LSN_TIME_SAMPLES};
use super::storage_layer::LayerLevel;

const MAGIC: &[u8; 4] = b"PSTM";
const VERSION_V1: u16 = 1;
const VERSION_V2: u16 = 2;
const VERSION_V3: u16 = 3;
const VERSION: u16 = 4;
/// The ancestor of a branch: flag, timeline id, LSN.
const ANCESTOR_LEN: usize = 1 + 16 + 8;
/// Fixed part: magic, version, pad, two LSNs, pg_version.
const FIXED_LEN: usize = 4 + 2 + 2 + 8 + 8 + 4;
const V1_LEN: usize = FIXED_LEN + 4;
/// Most layers plus empty strata one timeline's manifest lists (compaction
/// keeps far fewer).
pub const MAX_MANIFEST_LAYERS: usize = 1 << 20;
/// Longest layer file name (the daemon's names are 86 bytes).
const MAX_NAME_LEN: usize = 255;
const MAX_LAYER_ENTRY: usize = 1 + 2 + MAX_NAME_LEN + 8;
const EMPTY_STRATUM_ENTRY: usize = 1 + 8 + 8;
const _: () = assert!(EMPTY_STRATUM_ENTRY <= MAX_LAYER_ENTRY);
/// Largest manifest file accepted (about 280 MiB; a manifest of a thousand
/// layers is about 100 KiB).
pub const MAX_METADATA_BYTES: usize = FIXED_LEN
    + 8
    + 4
    + MAX_MANIFEST_LAYERS * MAX_LAYER_ENTRY
    + 4
    + 4
    + MAX_LSN_TIME_SAMPLES * 16
    + ANCESTOR_LEN
    + 4;

const _: () = assert!(MAX_METADATA_BYTES < 300 << 20, "a manifest is read whole");

pub const METADATA_FILE: &str = "metadata";

/// One live layer file of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerEntry {
    pub name: String,
    pub size_bytes: u64,
    pub level: LayerLevel,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineMetadata {
    /// Everything up to and including this LSN is in the listed layer files.
    pub disk_consistent_lsn: Lsn,
    /// The timeline starts here; reads below it are refused.
    pub initial_lsn: Lsn,
    pub pg_version: u32,
    /// The live layer files (see the module comment for the order).
    pub layers: Vec<LayerEntry>,
    /// Strata without layers, oldest first.
    pub empty_strata: Vec<(LayerLevel, Range<Lsn>)>,
    /// Reads below it are refused; 0 until GC first runs.
    pub gc_cutoff: Lsn,
    pub lsn_by_time: LsnTimeRecord,
    /// The timeline this one branched from (`None`: not a branch).
    pub ancestor_timeline_id: Option<TimelineId>,
    /// Where it branched: `initial_lsn` for a branch, 0 otherwise.
    pub ancestor_lsn: Lsn,
}

/// What a metadata file decoded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// Version 2 to 4: the manifest is authoritative.
    Manifest(TimelineMetadata),
    /// Version 1: no layer list (`layers` is empty); the caller builds one.
    V1(TimelineMetadata),
}

fn level_byte(level: LayerLevel) -> u8 {
    match level {
        LayerLevel::L0 => 0,
        LayerLevel::L1 => 1,
        LayerLevel::Image => 2,
    }
}

fn level_of(b: u8) -> Option<LayerLevel> {
    match b {
        0 => Some(LayerLevel::L0),
        1 => Some(LayerLevel::L1),
        2 => Some(LayerLevel::Image),
        _ => None,
    }
}

impl TimelineMetadata {
    /// A new timeline's: no layers, everything up to `initial_lsn` durable.
    pub fn new_empty(initial_lsn: Lsn, pg_version: u32) -> TimelineMetadata {
        TimelineMetadata {
            disk_consistent_lsn: initial_lsn,
            initial_lsn,
            pg_version,
            layers: Vec::new(),
            empty_strata: Vec::new(),
            gc_cutoff: Lsn(0),
            lsn_by_time: LsnTimeRecord::default(),
            ancestor_timeline_id: None,
            ancestor_lsn: Lsn(0),
        }
    }

    /// A new branch's: no layers, starting at `ancestor_lsn`, where its
    /// ancestor's history continues.
    pub fn new_branch(ancestor: TimelineId, ancestor_lsn: Lsn, pg_version: u32) -> Self {
        TimelineMetadata {
            ancestor_timeline_id: Some(ancestor),
            ancestor_lsn,
            ..TimelineMetadata::new_empty(ancestor_lsn, pg_version)
        }
    }

    /// The ancestor and the branch point, for a branch.
    pub fn ancestor(&self) -> Option<(TimelineId, Lsn)> {
        self.ancestor_timeline_id.map(|id| (id, self.ancestor_lsn))
    }

    pub fn encode(&self) -> Vec<u8> {
        let strata = self.layers.len() + self.empty_strata.len();
        assert!(strata <= MAX_MANIFEST_LAYERS, "too many layers for a manifest: {strata}");
        let mut b = Vec::with_capacity(FIXED_LEN + 32 + self.layers.len() * 100);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.disk_consistent_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.initial_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.pg_version.to_le_bytes());
        b.extend_from_slice(&self.gc_cutoff.0.to_le_bytes());
        b.extend_from_slice(&(self.layers.len() as u32).to_le_bytes());
        for l in &self.layers {
            assert!(l.name.len() <= MAX_NAME_LEN, "layer name too long: {}", l.name);
            b.push(level_byte(l.level));
            b.extend_from_slice(&(l.name.len() as u16).to_le_bytes());
            b.extend_from_slice(l.name.as_bytes());
            b.extend_from_slice(&l.size_bytes.to_le_bytes());
        }
        b.extend_from_slice(&(self.empty_strata.len() as u32).to_le_bytes());
        for (level, r) in &self.empty_strata {
            assert!(*level != LayerLevel::Image && r.start < r.end, "bad empty stratum {r:?}");
            b.push(level_byte(*level));
            b.extend_from_slice(&r.start.0.to_le_bytes());
            b.extend_from_slice(&r.end.0.to_le_bytes());
        }
        let samples = self.lsn_by_time.samples();
        b.extend_from_slice(&(samples.len() as u32).to_le_bytes());
        for (secs, lsn) in samples {
            b.extend_from_slice(&secs.to_le_bytes());
            b.extend_from_slice(&lsn.0.to_le_bytes());
        }
        match self.ancestor() {
            None => b.push(0),
            Some((id, lsn)) => {
                assert_eq!(lsn, self.initial_lsn, "a branch starts at its branch point");
                b.push(1);
                b.extend_from_slice(id.as_bytes());
                b.extend_from_slice(&lsn.0.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        debug_assert!(b.len() <= MAX_METADATA_BYTES);
        b
    }

    /// The version-3 file of `self` (no ancestor), as the previous daemon
    /// wrote it.
    #[cfg(test)]
    pub fn encode_v3(&self) -> Vec<u8> {
        assert!(self.ancestor_timeline_id.is_none(), "version 3 has no ancestor");
        let mut b = self.encode();
        b.truncate(b.len() - 5); // the ancestor flag and the checksum
        b[4..6].copy_from_slice(&VERSION_V3.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// The version-2 file of `self` (levels, empty strata, GC cutoff and
    /// LSN-by-time record dropped), as the previous daemon wrote it.
    #[cfg(test)]
    pub fn encode_v2(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION_V2.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.disk_consistent_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.initial_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.pg_version.to_le_bytes());
        b.extend_from_slice(&(self.layers.len() as u32).to_le_bytes());
        for l in &self.layers {
            b.extend_from_slice(&(l.name.len() as u16).to_le_bytes());
            b.extend_from_slice(l.name.as_bytes());
            b.extend_from_slice(&l.size_bytes.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> anyhow::Result<Decoded> {
        ensure!(b.len() >= V1_LEN, "metadata is {} bytes, shorter than any version", b.len());
        ensure!(&b[..4] == MAGIC, "bad magic");
        let body = &b[..b.len() - 4];
        let stored = u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap());
        let computed = crc32c::crc32c(body);
        ensure!(
            stored == computed,
            "checksum mismatch: stored {stored:#x}, computed {computed:#x}"
        );
        let version = u16::from_le_bytes([b[4], b[5]]);
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let mut md = TimelineMetadata {
            disk_consistent_lsn: Lsn(u64_at(8)),
            initial_lsn: Lsn(u64_at(16)),
            pg_version: u32::from_le_bytes(b[24..28].try_into().unwrap()),
            ..TimelineMetadata::new_empty(Lsn(0), 0)
        };
        let mut r = Reader(&body[FIXED_LEN..]);
        match version {
            VERSION_V1 => {
                ensure!(
                    b.len() == V1_LEN,
                    "version 1 metadata is {} bytes, expected {V1_LEN}",
                    b.len()
                );
                return Ok(Decoded::V1(md));
            }
            VERSION_V2 => md.layers = r.layers(false)?,
            VERSION_V3 | VERSION => {
                md.gc_cutoff = Lsn(r.u64("the GC cutoff")?);
                md.layers = r.layers(true)?;
                md.empty_strata = r.empty_strata(MAX_MANIFEST_LAYERS - md.layers.len())?;
                md.lsn_by_time = r.lsn_by_time()?;
                if version == VERSION {
                    (md.ancestor_timeline_id, md.ancestor_lsn) = r.ancestor()?;
                    ensure!(
                        md.ancestor_timeline_id.is_none() || md.ancestor_lsn == md.initial_lsn,
                        "a branch at {} starts at {}, not at its branch point",
                        md.ancestor_lsn,
                        md.initial_lsn
                    );
                }
            }
            v => bail!("unsupported metadata version {v}"),
        }
        ensure!(r.0.is_empty(), "{} trailing bytes after the manifest", r.0.len());
        Ok(Decoded::Manifest(md))
    }

    pub async fn load(engine: &IoEngine, dir: &Path) -> anyhow::Result<Decoded> {
        let path = dir.join(METADATA_FILE);
        let b = engine
            .read_file(&path, MAX_METADATA_BYTES)
            .await
            .with_context(|| format!("read {}", path.display()))?;
        Self::decode(&b).with_context(|| format!("timeline metadata {} is corrupt", path.display()))
    }

    pub async fn persist(&self, engine: &IoEngine, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join(METADATA_FILE);
        engine
            .write_file_durably(&path, &self.encode())
            .await
            .with_context(|| format!("persist {}", path.display()))
    }
}

/// Decoding cursor: every read is bounds-checked, naming what was cut off.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> anyhow::Result<&'a [u8]> {
        ensure!(self.0.len() >= n, "manifest truncated in {what}");
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> anyhow::Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> anyhow::Result<u16> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }

    fn u32(&mut self, what: &str) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn u64(&mut self, what: &str) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }

    /// The layer list: count, then (level if `with_levels`, name length,
    /// name, size) entries. Without levels every layer is an L0.
    fn layers(&mut self, with_levels: bool) -> anyhow::Result<Vec<LayerEntry>> {
        let count = self.u32("the layer count")? as usize;
        ensure!(count <= MAX_MANIFEST_LAYERS, "layer count {count} above {MAX_MANIFEST_LAYERS}");
        let mut layers = Vec::with_capacity(count.min(4096));
        for i in 0..count {
            let level = match with_levels {
                false => LayerLevel::L0,
                true => {
                    let b = self.u8("a level")?;
                    level_of(b).with_context(|| format!("layer {i}: unknown level {b}"))?
                }
            };
            let len = self.u16("a name length")? as usize;
            ensure!(len <= MAX_NAME_LEN, "layer {i}: name of {len} bytes");
            let name = std::str::from_utf8(self.take(len, "a name")?)
                .with_context(|| format!("layer {i}: name is not UTF-8"))?
                .to_string();
            let size_bytes = self.u64("a size")?;
            layers.push(LayerEntry { name, size_bytes, level });
        }
        Ok(layers)
    }

    /// At most `max` (level, LSN range) entries, each a delta level and a
    /// non-empty range.
    fn empty_strata(&mut self, max: usize) -> anyhow::Result<Vec<(LayerLevel, Range<Lsn>)>> {
        let count = self.u32("the empty stratum count")? as usize;
        ensure!(count <= max, "{count} empty strata: more than {max} strata in all");
        let mut out = Vec::with_capacity(count.min(4096));
        for i in 0..count {
            let b = self.u8("a stratum level")?;
            let level = level_of(b).filter(|l| *l != LayerLevel::Image);
            let level = level.with_context(|| format!("empty stratum {i}: bad level {b}"))?;
            let range = Lsn(self.u64("a stratum start")?)..Lsn(self.u64("a stratum end")?);
            ensure!(range.start < range.end, "empty stratum {i}: empty range {range:?}");
            out.push((level, range));
        }
        Ok(out)
    }

    fn lsn_by_time(&mut self) -> anyhow::Result<LsnTimeRecord> {
        let count = self.u32("the LSN-by-time count")? as usize;
        ensure!(count <= MAX_LSN_TIME_SAMPLES, "{count} LSN-by-time samples");
        let mut samples = Vec::with_capacity(count);
        for _ in 0..count {
            samples.push((self.u64("a sample time")?, Lsn(self.u64("a sample LSN")?)));
        }
        LsnTimeRecord::from_samples(samples)
    }

    /// The ancestor flag and, for a branch, its ancestor and branch point.
    fn ancestor(&mut self) -> anyhow::Result<(Option<TimelineId>, Lsn)> {
        match self.u8("the ancestor flag")? {
            0 => Ok((None, Lsn(0))),
            1 => {
                let id = TimelineId(self.take(16, "the ancestor id")?.try_into().unwrap());
                let lsn = Lsn(self.u64("the ancestor LSN")?);
                ensure!(lsn != Lsn(0), "ancestor {id} at LSN 0/0");
                Ok((Some(id), lsn))
            }
            b => bail!("bad ancestor flag {b}"),
        }
    }
}

#[cfg(test)]
mod tests;
