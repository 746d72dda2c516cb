//! The commit-time index (`tenant/commit_times.rs`) in remote storage.
//!
//! Objects: each segment file as `<timeline prefix>/<segment name>-<gen>`
//! (`<first>-<last>-<maxTs>.ct-<gen>`), beside the layers. The index lists
//! them in the field `commit_times` of `index_part.json`:
//! ```json
//! "commit_times": {"version": 1, "segments": {
//!     "00000000016B5A50-0000000001A0C3F8-0002D2A9B1C3E4F0.ct":
//!         {"file_size": 98304, "crc32c": 3735928559, "generation": 1}}}
//! ```
//! The field is absent from indexes written before it existed: such a
//! timeline attaches with an empty commit-time index (times before the
//! attach answer `past`/`nodata`, never a wrong LSN), and its next index
//! has the field.
//!
//! Invariants (the upload queue, `upload.rs`, keeps them):
//! - An index with `disk_consistent_lsn = D` lists segments holding every
//!   transaction end at or below D, except those GC removed below the
//!   index's `gc_cutoff` (the snapshot is taken after `persist(D)` and
//!   asserted to cover D). Segments may hold entries above D (a later
//!   persist); whoever loads them drops those (`CommitTimes::load`).
//! - Sealed segments are uploaded once; the tail (rewritten under a new
//!   name as entries are added) is uploaded from memory when its name
//!   changes. Objects no index lists any more (replaced tails, segments GC
//!   removed) are deleted as replaced layers are, with the same generation
//!   rules.
//! - `remote_consistent_lsn` advances only when a listing after the index
//!   upload shows every segment object it lists at its recorded size (the
//!   same check as for layers, `missing_objects`); a lost one is uploaded
//!   again from local disk (the tail from memory).
//! - Attach downloads every listed segment before the timeline is loaded,
//!   checks each one's size, CRC-32C and format, and refuses the attach
//!   (409, [`DamagedSegment`]) naming the object otherwise.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context};
use futures::{StreamExt, TryStreamExt};
use io_engine::IoEngine;
use serde::{Deserialize, Serialize};
use utils::id::{TenantId, TimelineId};

use super::{layer_key, Generation};
use crate::remote_storage::RemoteStorage;
use crate::tenant::commit_times::{
    check_segment, CommitTimesError, SegmentRange, COMMIT_TIMES_DIR, MAX_SEGMENT_BYTES,
};

pub const INDEX_COMMIT_TIMES_VERSION: u32 = 1;
/// Segment downloads of one timeline in flight at once (attach).
const DOWNLOADS_IN_FLIGHT: usize = 8;

/// The `commit_times` field of `index_part.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexCommitTimes {
    pub version: u32,
    /// By segment file name (the names sort by LSN).
    pub segments: BTreeMap<String, IndexSegment>,
}

/// One segment object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSegment {
    pub file_size: u64,
    pub crc32c: u32,
    /// The generation whose object holds it: `<name>-<generation>`.
    pub generation: Generation,
}

impl IndexCommitTimes {
    pub fn new(segments: BTreeMap<String, IndexSegment>) -> IndexCommitTimes {
        IndexCommitTimes { version: INDEX_COMMIT_TIMES_VERSION, segments }
    }

    /// What decoding an index checks: the version, every name a segment
    /// name, no overlap, no generation above the index's own.
    pub fn check(&self, index_generation: Generation) -> anyhow::Result<()> {
        ensure!(
            self.version == INDEX_COMMIT_TIMES_VERSION,
            "commit_times version {} (this pageserver reads {INDEX_COMMIT_TIMES_VERSION})",
            self.version
        );
        let mut prev: Option<(&str, SegmentRange)> = None;
        for (name, s) in &self.segments {
            let r = SegmentRange::parse(name)
                .with_context(|| format!("commit_times lists {name}, not a segment name"))?;
            ensure!(
                s.generation <= index_generation,
                "commit_times of an index of generation {index_generation} lists {name} of \
                 generation {}",
                s.generation
            );
            if let Some((pname, p)) = prev {
                ensure!(r.first_lsn > p.last_lsn, "commit_times: {pname} and {name} overlap");
            }
            prev = Some((name, r));
        }
        Ok(())
    }
}

/// The object key of segment `name` of generation `generation`.
pub fn segment_key(
    tenant: TenantId,
    timeline: TimelineId,
    name: &str,
    generation: Generation,
) -> String {
    layer_key(tenant, timeline, name, generation)
}

/// Download the segments `ct` lists into `timeline_dir/commit_times`
/// (each checked against the index and decoded, then written durably).
/// Errors name the object.
pub async fn download_segments(
    rs: &RemoteStorage,
    engine: &IoEngine,
    ids: (TenantId, TimelineId),
    ct: &IndexCommitTimes,
    timeline_dir: &Path,
) -> anyhow::Result<()> {
    if ct.segments.is_empty() {
        return Ok(());
    }
    let dir = timeline_dir.join(COMMIT_TIMES_DIR);
    engine.create_dir_all(&dir).await?;
    let todo: Vec<(String, IndexSegment)> =
        ct.segments.iter().map(|(n, s)| (n.clone(), *s)).collect();
    let dir = &dir;
    let downloads = futures::stream::iter(todo).map(|(name, s)| async move {
        let key = segment_key(ids.0, ids.1, &name, s.generation);
        let full = rs.full_key(&key);
        let bytes = rs.get(&key).await?;
        check_object(&full, &name, &s, &bytes)?;
        engine.write_file_durably(&dir.join(&name), &bytes).await?;
        anyhow::Ok(())
    });
    downloads.buffer_unordered(DOWNLOADS_IN_FLIGHT).try_collect::<Vec<()>>().await?;
    engine.fsync_dir(dir).await?;
    engine.fsync_dir(timeline_dir).await?;
    Ok(())
}

/// A segment object whose bytes are not what the index records (attach
/// refuses the tenant with it, as it refuses one with missing objects).
#[derive(Debug, thiserror::Error)]
#[error("commit-time segment object {key} is damaged: {reason}")]
pub struct DamagedSegment {
    /// The object's full key.
    pub key: String,
    pub reason: String,
}

/// The downloaded bytes of segment object `full_key` against its entry.
fn check_object(
    full_key: &str,
    name: &str,
    s: &IndexSegment,
    bytes: &[u8],
) -> Result<(), DamagedSegment> {
    let damaged = |reason: String| DamagedSegment { key: full_key.to_string(), reason };
    if bytes.len() as u64 != s.file_size || bytes.len() > MAX_SEGMENT_BYTES {
        let size = s.file_size;
        return Err(damaged(format!("{} bytes, the index says {size}", bytes.len())));
    }
    let crc = crc32c::crc32c(bytes);
    if crc != s.crc32c {
        return Err(damaged(format!("CRC-32C {crc:08x}, the index says {:08x}", s.crc32c)));
    }
    match check_segment(Path::new(full_key), name, bytes) {
        Ok(_) => Ok(()),
        Err(CommitTimesError::Corrupt { reason, .. }) => Err(damaged(reason)),
        Err(e) => Err(damaged(e.to_string())),
    }
}

#[cfg(test)]
mod tests;
