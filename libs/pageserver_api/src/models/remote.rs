//! The timeline detail's view of remote storage's copy: whether it is
//! complete, and the objects an uploaded index lists that the store lacks.
//!
//! Invariants: `remote_missing_objects >= remote_lost_objects`;
//! `remote_missing` names at most [`MAX_NAMED_MISSING`] of them, lost ones
//! first; `remote_state` is `complete` exactly when nothing is missing and
//! `incomplete` exactly when something is lost.

use serde::{Deserialize, Serialize};

/// Most objects the detail names.
pub const MAX_NAMED_MISSING: usize = 10;

/// What remote storage has of a timeline, as far as the pageserver knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteState {
    /// Nothing an uploaded index lists is known to be missing.
    Complete,
    /// Objects are missing, and every one of them is being uploaded again
    /// from local files; `remote_consistent_lsn` advances once they are there.
    Repairing,
    /// Objects are missing that are not on local disk either (lost): the
    /// remote copy cannot be completed from here, `remote_consistent_lsn`
    /// stays until an index no longer lists them (GC removes them) or they
    /// are restored into the store.
    Incomplete,
}

/// One missing object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteMissingObject {
    /// Its key in the store (with the configured prefix).
    pub key: String,
    /// Its content is on local disk and is being uploaded again; `false`:
    /// lost.
    pub recoverable: bool,
}

/// Fields of `TimelineInfo` (flattened into it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RemoteInfo {
    /// `null` without remote storage (and for a broken timeline).
    pub remote_state: Option<RemoteState>,
    /// Objects an uploaded index lists that the store was found to lack.
    pub remote_missing_objects: u64,
    /// Of these, the ones that are lost (not on local disk either).
    pub remote_lost_objects: u64,
    /// Up to [`MAX_NAMED_MISSING`] of them, lost ones first.
    pub remote_missing: Vec<RemoteMissingObject>,
}
