//! Timeline metadata and layer manifest: the durable facts of a timeline, in
//! one small file `timelines/<id>/metadata`, replaced atomically (temp,
//! fsync, rename, fsync dir), so the list of live layer files and
//! `disk_consistent_lsn` always change together.
//!
//! Format version 2 (little-endian): magic "PSTM", version u16, pad u16,
//! disk_consistent_lsn u64, initial_lsn u64, pg_version u32, layer count
//! u32, then per layer (oldest first) name length u16, name (UTF-8), file
//! size u64; last a CRC-32C u32 of everything before it. Version 1 (from
//! older daemons) has no layer list; it is still read, and start-up rewrites
//! it as version 2. A mismatch of any kind is an error naming the file.
//!
//! Start-up trusts the manifest, not the directory listing (see
//! `Timeline::load`).

use std::path::Path;

use anyhow::{ensure, Context};
use io_engine::IoEngine;
use utils::lsn::Lsn;

const MAGIC: &[u8; 4] = b"PSTM";
const VERSION_V1: u16 = 1;
const VERSION: u16 = 2;
/// Fixed part: magic, version, pad, two LSNs, pg_version.
const FIXED_LEN: usize = 4 + 2 + 2 + 8 + 8 + 4;
const V1_LEN: usize = FIXED_LEN + 4;
/// Most layers one timeline's manifest lists (compaction keeps far fewer).
pub const MAX_MANIFEST_LAYERS: usize = 1 << 20;
/// Longest layer file name (the daemon's names are 86 bytes).
const MAX_NAME_LEN: usize = 255;
/// Largest manifest file accepted.
pub const MAX_METADATA_BYTES: usize =
    FIXED_LEN + 4 + MAX_MANIFEST_LAYERS * (2 + MAX_NAME_LEN + 8) + 4;

pub const METADATA_FILE: &str = "metadata";

/// One live layer file of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerEntry {
    pub name: String,
    pub size_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineMetadata {
    /// Everything up to and including this LSN is in the listed layer files.
    pub disk_consistent_lsn: Lsn,
    /// The timeline starts here; reads below it are refused.
    pub initial_lsn: Lsn,
    pub pg_version: u32,
    /// The live layer files, oldest first.
    pub layers: Vec<LayerEntry>,
}

/// What a metadata file decoded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// Version 2: the manifest is authoritative.
    Manifest(TimelineMetadata),
    /// Version 1: no layer list (`layers` is empty); the caller builds one.
    V1(TimelineMetadata),
}

impl TimelineMetadata {
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.layers.len() <= MAX_MANIFEST_LAYERS, "too many layers for a manifest");
        let mut b = Vec::with_capacity(FIXED_LEN + 8 + self.layers.len() * 100);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.disk_consistent_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.initial_lsn.0.to_le_bytes());
        b.extend_from_slice(&self.pg_version.to_le_bytes());
        b.extend_from_slice(&(self.layers.len() as u32).to_le_bytes());
        for l in &self.layers {
            assert!(l.name.len() <= MAX_NAME_LEN, "layer name too long: {}", l.name);
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
            layers: Vec::new(),
        };
        match version {
            VERSION_V1 => {
                ensure!(
                    b.len() == V1_LEN,
                    "version 1 metadata is {} bytes, expected {V1_LEN}",
                    b.len()
                );
                Ok(Decoded::V1(md))
            }
            VERSION => {
                md.layers = decode_layers(&body[FIXED_LEN..])?;
                Ok(Decoded::Manifest(md))
            }
            v => anyhow::bail!("unsupported metadata version {v}"),
        }
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

/// The layer list: count, then (name length, name, size) entries, exactly.
fn decode_layers(mut b: &[u8]) -> anyhow::Result<Vec<LayerEntry>> {
    let mut take = |n: usize, what: &str| -> anyhow::Result<&[u8]> {
        ensure!(b.len() >= n, "layer list truncated in {what}");
        let (head, rest) = b.split_at(n);
        b = rest;
        Ok(head)
    };
    let count = u32::from_le_bytes(take(4, "the count")?.try_into().unwrap()) as usize;
    ensure!(count <= MAX_MANIFEST_LAYERS, "layer count {count} above {MAX_MANIFEST_LAYERS}");
    let mut layers = Vec::with_capacity(count.min(4096));
    for i in 0..count {
        let len = u16::from_le_bytes(take(2, "a name length")?.try_into().unwrap()) as usize;
        ensure!(len <= MAX_NAME_LEN, "layer {i}: name of {len} bytes");
        let name = std::str::from_utf8(take(len, "a name")?)
            .with_context(|| format!("layer {i}: name is not UTF-8"))?
            .to_string();
        let size_bytes = u64::from_le_bytes(take(8, "a size")?.try_into().unwrap());
        layers.push(LayerEntry { name, size_bytes });
    }
    ensure!(take(0, "")?.is_empty(), "trailing bytes after the layer list");
    Ok(layers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TimelineMetadata {
        TimelineMetadata {
            disk_consistent_lsn: Lsn(0x1234),
            initial_lsn: Lsn(0x10),
            pg_version: 15,
            layers: vec![
                LayerEntry { name: "a__b".into(), size_bytes: 4096 },
                LayerEntry { name: "c__d".into(), size_bytes: 1 << 33 },
            ],
        }
    }

    #[test]
    fn round_trip_and_corruption() {
        let m = sample();
        let mut b = m.encode();
        assert_eq!(TimelineMetadata::decode(&b).unwrap(), Decoded::Manifest(m));
        b[9] ^= 1;
        assert!(TimelineMetadata::decode(&b).unwrap_err().to_string().contains("checksum"));
        assert!(TimelineMetadata::decode(&b[..10]).is_err());
    }

    #[test]
    fn every_truncation_is_refused() {
        let b = sample().encode();
        for len in 0..b.len() {
            let mut t = b[..len].to_vec();
            if t.len() >= 4 {
                // A valid checksum over the truncated body: only the
                // structure checks can catch it.
                let n = t.len() - 4;
                let crc = crc32c::crc32c(&t[..n]);
                t[n..].copy_from_slice(&crc.to_le_bytes());
            }
            assert!(TimelineMetadata::decode(&t).is_err(), "truncated to {len} bytes was accepted");
        }
    }

    #[test]
    fn version_1_is_read_without_layers() {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION_V1.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&0x1234u64.to_le_bytes());
        b.extend_from_slice(&0x10u64.to_le_bytes());
        b.extend_from_slice(&15u32.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let Decoded::V1(md) = TimelineMetadata::decode(&b).unwrap() else { panic!("not v1") };
        assert_eq!(
            (md.disk_consistent_lsn, md.initial_lsn, md.layers.len()),
            (Lsn(0x1234), Lsn(0x10), 0)
        );
    }
}
