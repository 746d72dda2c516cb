//! Branches, seen from a timeline: a branch's ancestor, and an ancestor's
//! branch points (`docs/branches.md`).
//!
//! A branch starts at its branch point (`ancestor_lsn`, its `initial_lsn`)
//! with no layers: a read of a key at LSN `L` that its own layers do not
//! reconstruct goes on in the ancestor at `min(L, ancestor_lsn)`, and so on
//! up the ancestors ([`Timeline::read_snapshots`], `vectored_read::ReadChain`).
//!
//! Invariants:
//! - the ancestor is loaded before the branch and outlives it (the branch
//!   holds an `Arc`); an ancestor is not deleted while it has branches
//!   (the tenant refuses it);
//! - an ancestor's GC cutoff is never above a branch point of one of its
//!   branches: a branch point is registered ([`Timeline::add_branch_point`])
//!   under the lease store's lock, checked against the cutoff there, and
//!   `set_gc_cutoff` caps the cutoff at the lowest branch point under the
//!   same lock, exactly as for leases. So the ancestor's versions at every
//!   branch point survive GC; compaction copies values verbatim and image
//!   creation only adds layers, so they survive those too;
//! - the ancestor's history up to the branch point is on its disk before
//!   the branch's manifest is written (the tenant flushes it first), so a
//!   restart never finds a branch above what its ancestor holds; start-up
//!   checks it.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{bail, ensure};
use utils::id::TimelineId;
use utils::lsn::Lsn;

use super::super::metadata::TimelineMetadata;
use super::super::storage_layer::layer_map::ReadSnapshot;
use super::{LsnNotReadable, Timeline};

/// A branch's ancestor and the LSN it branched at.
pub struct Ancestor {
    pub timeline: Arc<Timeline>,
    pub lsn: Lsn,
}

impl Timeline {
    /// The ancestor and the branch point, for a branch.
    pub fn ancestor(&self) -> Option<(&Arc<Timeline>, Lsn)> {
        self.ancestor.as_ref().map(|a| (&a.timeline, a.lsn))
    }

    pub fn ancestor_timeline_id(&self) -> Option<TimelineId> {
        self.ancestor.as_ref().map(|a| a.timeline.timeline_id)
    }

    /// The layer map snapshots a read walks: this timeline's (with no LSN
    /// cap), then each ancestor's with its branch point. Taken branch
    /// first: an ancestor's history at or below a branch point does not
    /// change (GC and compaction keep it), so later snapshots of it agree.
    pub(crate) fn read_snapshots(&self) -> Vec<(ReadSnapshot, Lsn)> {
        let mut links = vec![(self.layers.read().unwrap().snapshot(), Lsn::MAX)];
        let mut next = self.ancestor.as_ref();
        while let Some(a) = next {
            links.push((a.timeline.layers.read().unwrap().snapshot(), a.lsn));
            next = a.timeline.ancestor.as_ref();
        }
        links
    }

    /// Keep the history at `lsn` for branch `child`: refused if GC may
    /// already have removed it (below the GC cutoff), checked under the
    /// lock GC raises the cutoff under (see the module comment).
    pub fn add_branch_point(&self, child: TimelineId, lsn: Lsn) -> Result<(), LsnNotReadable> {
        self.leases.with_min_valid(SystemTime::now(), |_| {
            let gc_cutoff = self.gc_cutoff();
            if lsn < gc_cutoff {
                return Err(LsnNotReadable::GarbageCollected { lsn, gc_cutoff });
            }
            self.branch_points.lock().unwrap().insert(child, lsn);
            Ok(())
        })
    }

    /// Branch `child` is gone (deleted, or its creation failed).
    pub fn remove_branch_point(&self, child: TimelineId) {
        self.leases.with_min_valid(SystemTime::now(), |_| {
            self.branch_points.lock().unwrap().remove(&child);
        })
    }

    /// The branches of this timeline and their branch points, by id.
    pub fn branch_points(&self) -> Vec<(TimelineId, Lsn)> {
        self.branch_points.lock().unwrap().iter().map(|(id, lsn)| (*id, *lsn)).collect()
    }

    /// The lowest branch point; the caller holds the lease store's lock.
    pub(super) fn min_branch_point(&self) -> Option<Lsn> {
        self.branch_points.lock().unwrap().values().min().copied()
    }
}

/// The ancestor of a timeline whose manifest is `md`, checked against the
/// one the tenant loaded (`given`): the ids match, and the ancestor holds
/// the history at the branch point (on disk, and not garbage collected).
pub(super) fn check_ancestor(
    md: &TimelineMetadata,
    given: Option<Arc<Timeline>>,
) -> anyhow::Result<Option<Ancestor>> {
    let (id, lsn, timeline) = match (md.ancestor(), given) {
        (None, None) => return Ok(None),
        (Some((id, lsn)), Some(tl)) if tl.timeline_id == id => (id, lsn, tl),
        (wanted, given) => bail!(
            "the manifest names ancestor {}, the tenant gave {}",
            wanted.map_or("none".to_string(), |(id, _)| id.to_string()),
            given.map_or("none".to_string(), |t| t.timeline_id.to_string())
        ),
    };
    let held = timeline.get_disk_consistent_lsn();
    ensure!(
        held >= lsn,
        "ancestor timeline {id} holds history up to {held} only, below the branch point {lsn}"
    );
    let gc_cutoff = timeline.gc_cutoff();
    ensure!(
        gc_cutoff <= lsn,
        "ancestor timeline {id} has GC cutoff {gc_cutoff}, above the branch point {lsn}"
    );
    Ok(Some(Ancestor { timeline, lsn }))
}
