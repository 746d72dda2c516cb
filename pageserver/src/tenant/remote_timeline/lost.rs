//! Lost objects: of the objects an uploaded index lists that the store
//! lacks, which can be uploaded again from here (recoverable) and which
//! cannot (lost: a layer evicted before the loss is neither on local disk
//! nor in the store).
//!
//! Invariants: a layer is lost only if its local file does not exist when
//! the loss is found (eviction only evicts layers known to be uploaded, and
//! a forgotten layer is not known to be uploaded, so a recoverable layer
//! stays local until it is uploaded again); the index itself and the
//! commit-time segments are always recoverable (rewritten from local state).
//! A loss is logged once per set of lost objects, not at every retry; the
//! upload task retries an index whose only missing objects are lost every
//! `check_period` (or at the next flush), not with the short backoff.
//!
//! Repair: a lost layer is dropped from the index only when an index no
//! longer lists it, that is when GC removes it from the local manifest
//! (it lies at or below the GC cutoff and newer images cover its keys: no
//! read or branch at or above the cutoff needs it). A lost layer GC still
//! needs cannot be repaired from here: its history is needed by reads, and
//! the primary released that WAL when an index listing it was found complete.

use std::collections::HashSet;

use tracing::warn;
use utils::lsn::Lsn;

use super::client::{MissingObject, RemoteTimelineClient};
use super::index_part::IndexPart;
use super::name_objects;

/// Every object the upload found missing is lost: retrying soon cannot help.
#[derive(Debug, thiserror::Error)]
#[error(
    "remote_consistent_lsn stays at {}: {} objects the uploaded index lists are lost ({})",
    remote_lsn.map_or("nothing".to_string(), |l| l.to_string()),
    lost.len(),
    name_objects(lost)
)]
pub(super) struct OnlyLost {
    pub remote_lsn: Option<Lsn>,
    /// Keys with the store's prefix.
    pub lost: Vec<String>,
}

impl RemoteTimelineClient {
    /// `missing` (keys relative to the prefix, of objects `index` lists)
    /// with the store's prefix and whether each can be uploaded again.
    pub(super) async fn classify_missing(
        &self,
        index: &IndexPart,
        missing: &[String],
    ) -> anyhow::Result<Vec<MissingObject>> {
        let missing_set: HashSet<&str> = missing.iter().map(String::as_str).collect();
        let mut lost_keys = HashSet::new();
        for (name, l) in &index.layers {
            let key = self.object_key(name, l.generation);
            if missing_set.contains(key.as_str())
                && !self.engine().exists(&self.dir().join(name)).await?
            {
                lost_keys.insert(key);
            }
        }
        let objects = missing.iter().map(|k| MissingObject {
            key: self.storage().full_key(k),
            recoverable: !lost_keys.contains(k),
        });
        Ok(objects.collect())
    }

    /// Log the lost objects among `objects` once (module comment).
    pub(super) fn log_lost(&self, objects: &[MissingObject]) {
        let lost: Vec<String> =
            objects.iter().filter(|m| !m.recoverable).map(|m| m.key.clone()).collect();
        let mut logged = self.lost_logged.lock().unwrap();
        if lost.is_empty() || *logged == lost {
            return;
        }
        warn!(
            "timeline {}/{}: {} objects its uploaded index lists are lost: missing from {} and \
             not on local disk ({}); they cannot be uploaded again, remote_consistent_lsn stays \
             at {} until an index no longer lists them (GC removes them) or they are restored \
             into the store",
            self.tenant_id,
            self.timeline_id,
            lost.len(),
            self.storage().describe(),
            name_objects(&lost),
            self.remote_consistent_lsn().map_or("nothing".to_string(), |l| l.to_string()),
        );
        *logged = lost;
    }
}
