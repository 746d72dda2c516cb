//! A tenant's objects in remote storage, and generations.
//!
//! Object layout (keys relative to the configured prefix):
//! ```text
//! tenants/<tenant>/generations/<gen>                         a claim (see below)
//! tenants/<tenant>/timelines/<timeline>/index_part.json-<gen> the manifest (index_part.rs)
//! tenants/<tenant>/timelines/<timeline>/<layer name>-<gen>    a layer file
//! tenants/<tenant>/timelines/<timeline>/<segment>.ct-<gen>    a commit-time segment (commit_times.rs)
//! ```
//! `<gen>` is the generation as 8 hex digits.
//!
//! Generations (split-brain safety): every attachment of a tenant gets a
//! generation number, larger than any before. A pageserver writes only
//! objects whose key carries its own generation, so it never overwrites
//! another attachment's objects. An attachment first *claims* its
//! generation (writes `generations/<gen>`, refused if a newer claim
//! exists), then reads the newest index of a generation at or below its
//! own. A pageserver deletes objects only after it uploaded an index that
//! no longer lists them, and only if, listed after that upload, no newer
//! claim exists. With the object store's read-after-write consistency
//! (S3, MinIO), either the newer attachment's claim is seen (nothing is
//! deleted) or it came later, and then that attachment reads an index that
//! no longer lists the objects. Objects of a generation above one's own are
//! never deleted (asserted).
//!
//! Completeness: remote storage can lose objects behind our back (a bucket
//! deleted and re-created, a lifecycle rule, an operator). An index is only
//! vouched for (`remote_consistent_lsn` advances to its
//! `disk_consistent_lsn`) once a listing taken *after* it was written shows
//! the index and every layer and commit-time segment object it lists at
//! the size it records
//! ([`missing_objects`]). A loss found then, by a periodic listing, or by a
//! 404 on a download, makes the upload queue forget the lost objects and
//! upload them again from the local layer files before the next index
//! (`upload.rs`); a lost generation claim is written again. A lost layer
//! that is not on local disk either cannot be uploaded again: it is shown
//! as lost and `remote_consistent_lsn` stays until an index no longer
//! lists it (`lost.rs`). An attach
//! refuses an index that lists objects the store does not have, naming
//! them (`tenant/mgr/attach.rs`), before anything is built locally.

pub mod client;
pub mod commit_times;
pub mod index_part;
mod lost;
mod upload;
mod upload_segments;

use std::fmt;

use serde::{Deserialize, Serialize};
use utils::id::{TenantId, TimelineId};

use crate::remote_storage::{ListedObject, RemoteError, RemoteStorage};
use crate::tenant::commit_times::SegmentRange;
use crate::tenant::storage_layer::LayerName;
use index_part::IndexPart;

pub const INDEX_PART_NAME: &str = "index_part.json";

/// An attachment's number; valid ones are 1 and above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Generation(pub u32);

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Generation {
    /// The 8 hex digits object keys carry.
    pub fn suffix(self) -> String {
        format!("{:08x}", self.0)
    }

    fn parse_suffix(s: &str) -> Option<Generation> {
        if s.len() != 8 {
            return None;
        }
        u32::from_str_radix(s, 16).ok().map(Generation)
    }
}

pub fn tenant_prefix(tenant: TenantId) -> String {
    format!("tenants/{tenant}")
}

pub fn timelines_prefix(tenant: TenantId) -> String {
    format!("tenants/{tenant}/timelines")
}

pub fn timeline_prefix(tenant: TenantId, timeline: TimelineId) -> String {
    format!("tenants/{tenant}/timelines/{timeline}")
}

pub fn layer_key(
    tenant: TenantId,
    timeline: TimelineId,
    name: &str,
    generation: Generation,
) -> String {
    format!("{}/{name}-{}", timeline_prefix(tenant, timeline), generation.suffix())
}

pub fn index_key(tenant: TenantId, timeline: TimelineId, generation: Generation) -> String {
    format!("{}/{INDEX_PART_NAME}-{}", timeline_prefix(tenant, timeline), generation.suffix())
}

fn generations_prefix(tenant: TenantId) -> String {
    format!("tenants/{tenant}/generations")
}

/// What the last segment of an object key in a timeline's prefix is.
#[derive(Debug, PartialEq, Eq)]
pub enum TimelineObject {
    Index(Generation),
    Layer(LayerName, Generation),
    CommitTimes(SegmentRange, Generation),
}

impl TimelineObject {
    pub fn parse(file: &str) -> Option<TimelineObject> {
        let (stem, generation) = file.rsplit_once('-')?;
        let generation = Generation::parse_suffix(generation)?;
        if stem == INDEX_PART_NAME {
            return Some(TimelineObject::Index(generation));
        }
        if let Some(r) = SegmentRange::parse(stem) {
            return Some(TimelineObject::CommitTimes(r, generation));
        }
        LayerName::parse(stem).map(|n| TimelineObject::Layer(n, generation))
    }
}

/// Why a generation cannot be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "tenant {tenant}: generation {wanted} is stale, generation {newest} is already attached \
         (attach with a generation above {newest})"
    )]
    Stale { tenant: TenantId, wanted: u32, newest: u32 },
    #[error(transparent)]
    Remote(#[from] RemoteError),
}

/// The newest generation claimed for `tenant`, if any.
pub async fn newest_generation(
    rs: &RemoteStorage,
    tenant: TenantId,
) -> Result<Option<Generation>, RemoteError> {
    let listed = rs.list(&generations_prefix(tenant)).await?;
    let gens = listed.iter().filter_map(|o| {
        let last = o.key.rsplit('/').next()?;
        Generation::parse_suffix(last)
    });
    Ok(gens.max())
}

/// Claim `generation` for `tenant` (see the module comment): refused when
/// a newer one is claimed; claiming the newest again is allowed (a
/// restart of the same attachment).
pub async fn claim_generation(
    rs: &RemoteStorage,
    tenant: TenantId,
    generation: Generation,
) -> Result<(), ClaimError> {
    assert!(generation.0 >= 1, "generation 0 is not valid");
    if let Some(newest) = newest_generation(rs, tenant).await? {
        if newest > generation {
            let (wanted, newest) = (generation.0, newest.0);
            return Err(ClaimError::Stale { tenant, wanted, newest });
        }
    }
    let key = format!("{}/{}", generations_prefix(tenant), generation.suffix());
    let body = serde_json::json!({ "generation": generation.0 }).to_string();
    rs.put(&key, body.into()).await?;
    Ok(())
}

/// The timelines `tenant` has in remote storage.
pub async fn list_timelines(
    rs: &RemoteStorage,
    tenant: TenantId,
) -> Result<Vec<TimelineId>, RemoteError> {
    let dirs = rs.list_dirs(&timelines_prefix(tenant)).await?;
    Ok(dirs.iter().filter_map(|d| d.parse().ok()).collect())
}

/// The newest index of `timeline` written by a generation at or below
/// `at_most`, with that generation; `None` if there is none.
pub async fn download_newest_index(
    rs: &RemoteStorage,
    tenant: TenantId,
    timeline: TimelineId,
    at_most: Generation,
) -> anyhow::Result<Option<IndexPart>> {
    Ok(download_newest_index_listed(rs, tenant, timeline, at_most).await?.0)
}

/// [`download_newest_index`], and the listing of the timeline's prefix it
/// chose the index from (taken before the index was read, so it holds
/// every object uploaded before that index), for [`missing_objects`]
/// without a second listing.
pub async fn download_newest_index_listed(
    rs: &RemoteStorage,
    tenant: TenantId,
    timeline: TimelineId,
    at_most: Generation,
) -> anyhow::Result<(Option<IndexPart>, Vec<ListedObject>)> {
    let listed = rs.list(&timeline_prefix(tenant, timeline)).await?;
    let newest = listed
        .iter()
        .filter_map(|o| match TimelineObject::parse(o.key.rsplit('/').next()?) {
            Some(TimelineObject::Index(g)) if g <= at_most => Some(g),
            _ => None,
        })
        .max();
    let Some(generation) = newest else { return Ok((None, listed)) };
    let key = index_key(tenant, timeline, generation);
    let bytes = rs.get(&key).await?;
    let ip = IndexPart::from_json(&bytes).map_err(|e| e.context(format!("object {key}")))?;
    anyhow::ensure!(
        ip.generation == generation,
        "object {key} says it was written by generation {}",
        ip.generation
    );
    Ok((Some(ip), listed))
}

/// Whether an object of another size than the index records counts as
/// missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeCheck {
    /// Yes: the uploader has the layer and uploads it again.
    Missing,
    /// No: the download's size and CRC-32C check names it (attach).
    AtDownload,
}

/// The objects `index` needs that `listed` (a listing of the timeline's
/// prefix) lacks (or, with `SizeCheck::Missing`, holds at another size):
/// the index itself, then its layers, then its commit-time segments, as
/// keys relative to the prefix.
pub fn missing_objects(
    tenant: TenantId,
    timeline: TimelineId,
    index: &IndexPart,
    listed: &[ListedObject],
    sizes: SizeCheck,
) -> Vec<String> {
    let listed_sizes: std::collections::HashMap<&str, u64> =
        listed.iter().map(|o| (o.key.as_str(), o.size_bytes)).collect();
    let mut missing = Vec::new();
    let index_key = index_key(tenant, timeline, index.generation);
    if !listed_sizes.contains_key(index_key.as_str()) {
        missing.push(index_key);
    }
    for (name, l) in &index.layers {
        let key = layer_key(tenant, timeline, name, l.generation);
        let size = listed_sizes.get(key.as_str());
        if size.is_none() || (sizes == SizeCheck::Missing && size != Some(&l.file_size)) {
            missing.push(key);
        }
    }
    let segments = index.commit_times.iter().flat_map(|ct| &ct.segments);
    for (name, s) in segments {
        let key = commit_times::segment_key(tenant, timeline, name, s.generation);
        let size = listed_sizes.get(key.as_str());
        if size.is_none() || (sizes == SizeCheck::Missing && size != Some(&s.file_size)) {
            missing.push(key);
        }
    }
    missing
}

/// [`missing_objects`] of `index` against a listing taken now.
pub async fn check_index_objects(
    rs: &RemoteStorage,
    tenant: TenantId,
    timeline: TimelineId,
    index: &IndexPart,
    sizes: SizeCheck,
) -> Result<Vec<String>, RemoteError> {
    let listed = rs.list(&timeline_prefix(tenant, timeline)).await?;
    Ok(missing_objects(tenant, timeline, index, &listed, sizes))
}

/// Write `generation`'s claim again if the store lost it (and no newer
/// generation is claimed: then it is not ours to restore). Returns whether
/// it was written.
pub async fn restore_claim(
    rs: &RemoteStorage,
    tenant: TenantId,
    generation: Generation,
) -> Result<bool, ClaimError> {
    let listed = rs.list(&generations_prefix(tenant)).await?;
    let ours = generations_prefix(tenant) + "/" + &generation.suffix();
    if listed.iter().any(|o| o.key == ours) {
        return Ok(false);
    }
    claim_generation(rs, tenant, generation).await?;
    Ok(true)
}

/// `keys` for a message: the first `MAX_NAMED` of them, then how many more.
pub fn name_objects(keys: &[String]) -> String {
    const MAX_NAMED: usize = 10;
    let mut s = keys.iter().take(MAX_NAMED).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > MAX_NAMED {
        s += &format!(" and {} more", keys.len() - MAX_NAMED);
    }
    s
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod upload_tests;

#[cfg(test)]
mod lost_tests;
