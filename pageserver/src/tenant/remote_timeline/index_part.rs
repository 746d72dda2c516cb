//! `index_part.json`: a timeline's manifest in remote storage.
//!
//! It is the local manifest (`metadata.rs`) plus what remote storage needs:
//! per layer its size, CRC-32C and the generation whose object holds it
//! (`<layer name>-<generation>`), the generation that wrote the index, and
//! the timeline's WAL source (so a pageserver that attaches the tenant
//! resumes ingest; the connection string is stored as in the local
//! `wal_source.json`).
//!
//! ```json
//! {"version": 1, "generation": 3, "disk_consistent_lsn": "0/16B5A50",
//!  "initial_lsn": "0/14EE2C8", "pg_version": 16, "gc_cutoff": "0/0",
//!  "layers": {"000..-FFF..__00000000014EE2C9-00000000016B5A51":
//!      {"level": "L0", "file_size": 270336, "crc32c": 3735928559, "generation": 1}},
//!  "empty_strata": [], "lsn_by_time": [[1763900000, "0/16B5A50"]],
//!  "wal_source": null,
//!  "ancestor_timeline_id": "...", "ancestor_lsn": "0/14EE2C8"}
//! ```
//!
//! `commit_times` (`commit_times.rs`, versioned on its own) lists the
//! commit-time index's segment objects; indexes written before it existed
//! load without it.
//!
//! `ancestor_timeline_id` and `ancestor_lsn` are only there for a branch
//! (indexes written before branches existed load as timelines without an
//! ancestor); a branch's `ancestor_lsn` must be its `initial_lsn`.
//!
//! Decoding checks what start-up checks of a local manifest
//! (`load::check_manifest`, by the caller) plus: the version, every name a
//! layer name, no layer of a generation above the index's own.

use std::collections::BTreeMap;

use anyhow::{ensure, Context};
use serde::{Deserialize, Serialize};
use utils::id::TimelineId;
use utils::lsn::Lsn;

use super::commit_times::IndexCommitTimes;
use super::Generation;
use crate::remote_storage::ObjectCheck;
use crate::tenant::lsn_by_time::LsnTimeRecord;
use crate::tenant::metadata::{LayerEntry, TimelineMetadata};
use crate::tenant::storage_layer::{LayerLevel, LayerName};
use crate::tenant::timeline::wal_source::WalSource;

pub const INDEX_PART_VERSION: u32 = 1;
/// Largest index_part.json accepted (a thousand layers are about 250 KiB).
pub const MAX_INDEX_PART_BYTES: usize = 256 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexLevel {
    L0,
    L1,
    Image,
}

impl From<LayerLevel> for IndexLevel {
    fn from(l: LayerLevel) -> IndexLevel {
        match l {
            LayerLevel::L0 => IndexLevel::L0,
            LayerLevel::L1 => IndexLevel::L1,
            LayerLevel::Image => IndexLevel::Image,
        }
    }
}

impl From<IndexLevel> for LayerLevel {
    fn from(l: IndexLevel) -> LayerLevel {
        match l {
            IndexLevel::L0 => LayerLevel::L0,
            IndexLevel::L1 => LayerLevel::L1,
            IndexLevel::Image => LayerLevel::Image,
        }
    }
}

/// One layer in remote storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexLayer {
    pub level: IndexLevel,
    pub file_size: u64,
    pub crc32c: u32,
    /// The generation of the pageserver that uploaded it: the object is
    /// `<name>-<generation>`.
    pub generation: Generation,
}

impl IndexLayer {
    pub fn check(&self) -> ObjectCheck {
        ObjectCheck { size_bytes: self.file_size, crc32c: self.crc32c }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmptyStratum {
    pub level: IndexLevel,
    pub start: Lsn,
    pub end: Lsn,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexPart {
    pub version: u32,
    /// The generation that wrote this index.
    pub generation: Generation,
    pub disk_consistent_lsn: Lsn,
    pub initial_lsn: Lsn,
    pub pg_version: u32,
    pub gc_cutoff: Lsn,
    pub layers: BTreeMap<String, IndexLayer>,
    pub empty_strata: Vec<EmptyStratum>,
    /// (unix seconds, LSN) samples, as in the local manifest.
    pub lsn_by_time: Vec<(u64, Lsn)>,
    pub wal_source: Option<WalSource>,
    /// The timeline a branch branched from (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ancestor_timeline_id: Option<TimelineId>,
    /// Where a branch branched (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ancestor_lsn: Option<Lsn>,
    /// The commit-time index's segments (absent in older indexes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_times: Option<IndexCommitTimes>,
}

impl IndexPart {
    /// The index of `md`, whose layers are all uploaded as `remote` says
    /// (panics if one is missing: the caller uploads first).
    pub fn new(
        generation: Generation,
        md: &TimelineMetadata,
        remote: &BTreeMap<String, IndexLayer>,
        wal_source: Option<WalSource>,
    ) -> IndexPart {
        let layers = md.layers.iter().map(|l| {
            let r = remote.get(&l.name).unwrap_or_else(|| panic!("layer {} not uploaded", l.name));
            assert_eq!(r.file_size, l.size_bytes, "uploaded size of {}", l.name);
            assert!(r.generation <= generation, "layer {} of a newer generation", l.name);
            (l.name.clone(), IndexLayer { level: l.level.into(), ..*r })
        });
        let empty = md.empty_strata.iter().map(|(level, r)| EmptyStratum {
            level: (*level).into(),
            start: r.start,
            end: r.end,
        });
        IndexPart {
            version: INDEX_PART_VERSION,
            generation,
            disk_consistent_lsn: md.disk_consistent_lsn,
            initial_lsn: md.initial_lsn,
            pg_version: md.pg_version,
            gc_cutoff: md.gc_cutoff,
            layers: layers.collect(),
            empty_strata: empty.collect(),
            lsn_by_time: md.lsn_by_time.samples().to_vec(),
            wal_source,
            ancestor_timeline_id: md.ancestor_timeline_id,
            ancestor_lsn: md.ancestor().map(|(_, lsn)| lsn),
            commit_times: None,
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an index part serializes")
    }

    /// Decode and check (see the module comment); errors name what is wrong.
    pub fn from_json(bytes: &[u8]) -> anyhow::Result<IndexPart> {
        ensure!(bytes.len() <= MAX_INDEX_PART_BYTES, "index_part.json of {} bytes", bytes.len());
        let ip: IndexPart =
            serde_json::from_slice(bytes).context("index_part.json is not valid")?;
        ensure!(
            ip.version == INDEX_PART_VERSION,
            "index_part.json version {} (this pageserver reads {INDEX_PART_VERSION})",
            ip.version
        );
        for (name, l) in &ip.layers {
            ensure!(LayerName::parse(name).is_some(), "index_part.json lists {name}, not a layer");
            ensure!(
                l.generation <= ip.generation,
                "index_part.json of generation {} lists {name} of generation {}",
                ip.generation,
                l.generation
            );
        }
        if let Some(ct) = &ip.commit_times {
            ct.check(ip.generation).context("index_part.json")?;
        }
        match (ip.ancestor_timeline_id, ip.ancestor_lsn) {
            (None, None) => {}
            (Some(id), Some(lsn)) => ensure!(
                lsn == ip.initial_lsn,
                "index_part.json: a branch of {id} at {lsn} starts at {}",
                ip.initial_lsn
            ),
            (id, lsn) => anyhow::bail!(
                "index_part.json has ancestor_timeline_id {id:?} and ancestor_lsn {lsn:?}: \
                 a branch needs both"
            ),
        }
        Ok(ip)
    }

    /// The local manifest this index describes (start-up's checks are the
    /// caller's: `load::check_manifest`).
    pub fn to_metadata(&self) -> anyhow::Result<TimelineMetadata> {
        let layers = self.layers.iter().map(|(name, l)| LayerEntry {
            name: name.clone(),
            size_bytes: l.file_size,
            level: l.level.into(),
        });
        let empty = self.empty_strata.iter().map(|s| (s.level.into(), s.start..s.end));
        Ok(TimelineMetadata {
            disk_consistent_lsn: self.disk_consistent_lsn,
            initial_lsn: self.initial_lsn,
            pg_version: self.pg_version,
            layers: layers.collect(),
            empty_strata: empty.collect(),
            gc_cutoff: self.gc_cutoff,
            lsn_by_time: LsnTimeRecord::from_samples(self.lsn_by_time.clone())
                .context("index_part.json lsn_by_time")?,
            ancestor_timeline_id: self.ancestor_timeline_id,
            ancestor_lsn: self.ancestor_lsn.unwrap_or(Lsn(0)),
        })
    }
}

#[cfg(test)]
mod tests {
    use pageserver_api::key::Key;

    use super::*;

    fn md() -> TimelineMetadata {
        let name = LayerName::delta(Key::MIN..Key::MAX, Lsn(0x11)..Lsn(0x40)).to_string();
        TimelineMetadata {
            layers: vec![LayerEntry { name, size_bytes: 8192, level: LayerLevel::L0 }],
            empty_strata: vec![(LayerLevel::L0, Lsn(0x40)..Lsn(0x50))],
            lsn_by_time: LsnTimeRecord::from_samples(vec![(1000, Lsn(0x4f))]).unwrap(),
            disk_consistent_lsn: Lsn(0x4f),
            ..TimelineMetadata::new_empty(Lsn(0x10), 16)
        }
    }

    #[test]
    fn round_trips_through_json_and_back_to_the_manifest() {
        let md = md();
        let uploaded: BTreeMap<_, _> = md
            .layers
            .iter()
            .map(|l| {
                let il = IndexLayer {
                    level: IndexLevel::L0,
                    file_size: l.size_bytes,
                    crc32c: 7,
                    generation: Generation(2),
                };
                (l.name.clone(), il)
            })
            .collect();
        let ip = IndexPart::new(Generation(3), &md, &uploaded, None);
        let back = IndexPart::from_json(&ip.to_json()).unwrap();
        assert_eq!(back, ip);
        assert_eq!(back.to_metadata().unwrap(), md);
        // Without an ancestor the fields are absent, as older indexes are.
        let json = String::from_utf8(ip.to_json()).unwrap();
        assert!(!json.contains("ancestor"), "{json}");
        // A branch's ancestor round-trips.
        let branch = TimelineMetadata {
            ancestor_timeline_id: Some(TimelineId([3; 16])),
            ancestor_lsn: Lsn(0x10),
            ..md.clone()
        };
        let ip = IndexPart::new(Generation(3), &branch, &uploaded, None);
        let back = IndexPart::from_json(&ip.to_json()).unwrap();
        assert_eq!(back.to_metadata().unwrap(), branch);
        let mut half = ip.clone();
        half.ancestor_lsn = None;
        let e = format!("{:#}", IndexPart::from_json(&half.to_json()).unwrap_err());
        assert!(e.contains("a branch needs both"), "{e}");
        half.ancestor_lsn = Some(Lsn(0x20));
        let e = format!("{:#}", IndexPart::from_json(&half.to_json()).unwrap_err());
        assert!(e.contains("starts at 0/10"), "{e}");
    }

    #[test]
    fn bad_indexes_are_refused_naming_the_problem() {
        let md = md();
        let mut uploaded = BTreeMap::new();
        let l = &md.layers[0];
        let il = IndexLayer {
            level: IndexLevel::L0,
            file_size: 8192,
            crc32c: 1,
            generation: Generation(1),
        };
        uploaded.insert(l.name.clone(), il);
        let mut ip = IndexPart::new(Generation(1), &md, &uploaded, None);
        ip.layers.get_mut(&l.name).unwrap().generation = Generation(2);
        let e = format!("{:#}", IndexPart::from_json(&ip.to_json()).unwrap_err());
        assert!(e.contains("generation 2") && e.contains(&l.name), "{e}");
        let e = format!("{:#}", IndexPart::from_json(b"{\"version\": 1}").unwrap_err());
        assert!(e.contains("index_part.json"), "{e}");
        ip.layers.clear();
        ip.version = 9;
        let e = format!("{:#}", IndexPart::from_json(&ip.to_json()).unwrap_err());
        assert!(e.contains("version 9"), "{e}");
    }
}
