//! Branches, seen from the tenant: creating one at an LSN of an ancestor,
//! loading ancestors before their branches, refusing to delete an ancestor
//! (`docs/branches.md`; the timeline side is `timeline/branch.rs`).
//!
//! Creation ([`Tenant::create_branch`]) copies nothing. Order (each step
//! durable before the next; a crash anywhere leaves no branch or a whole
//! one):
//! 1. reserve the id; check the LSN against the ancestor (ingested, at or
//!    above its first readable LSN) and register the branch point on it,
//!    which checks the GC cutoff under GC's lock (`add_branch_point`);
//! 2. flush the ancestor if its disk does not reach the branch point yet,
//!    so a restart finds the branch's history on disk; with remote
//!    storage, wait (bounded) until its uploaded index reaches it too, so
//!    an attach elsewhere does (503 "retry later" if it does not);
//! 3. write the branch's manifest (version 4, with the ancestor) in
//!    `<id>.___temp` (temp file, fsync, rename, fsync dir), rename the
//!    directory into place and fsync the parent: the branch exists from
//!    this rename on (start-up removes a `.___temp` directory);
//! 4. load it (with remote storage its first index upload starts) and
//!    publish it. A failure after step 1 removes the branch point and the
//!    directory.
//!
//! Start-up and attach load timelines ancestors first; a timeline whose
//! ancestor is missing or broken is Broken with a reason naming it, and so
//! is one whose manifest and remote index disagree about the ancestor.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tracing::{info, warn};
use utils::id::TimelineId;
use utils::lsn::Lsn;

use super::attachment::{self, RemoteIndex};
use super::metadata::{Decoded, TimelineMetadata};
use super::timeline::LsnNotReadable;
use super::{remove_dir_if_present, Tenant, TenantError, Timeline};

/// Why the daemon refuses to create a branch.
#[derive(Debug, thiserror::Error)]
pub enum BranchError {
    /// The ancestor, as `TenantError::NotFound` names a timeline.
    #[error("ancestor {0} not found")]
    AncestorNotFound(String),
    #[error(
        "ancestor_start_lsn {lsn} is above what ancestor timeline {ancestor} has ingested \
         (last_record_lsn {last})"
    )]
    AboveIngested { lsn: Lsn, ancestor: TimelineId, last: Lsn },
    #[error("ancestor_start_lsn {lsn} of ancestor timeline {ancestor}: {source}")]
    NotReadable {
        lsn: Lsn,
        ancestor: TimelineId,
        #[source]
        source: LsnNotReadable,
    },
    #[error("ancestor_start_lsn 0/0 is not a valid LSN to branch at")]
    InvalidLsn,
}

impl From<BranchError> for TenantError {
    fn from(e: BranchError) -> TenantError {
        match e {
            BranchError::AncestorNotFound(what) => {
                TenantError::NotFound(format!("ancestor {what}"))
            }
            _ => TenantError::InvalidArgument(e.to_string()),
        }
    }
}

impl Tenant {
    /// Create timeline `new_id` as a branch of `ancestor_id` at
    /// `ancestor_lsn` (default: the ancestor's `last_record_lsn`): its
    /// pages at or below that LSN are the ancestor's, and it can follow a
    /// source from there (`last_record_lsn` starts at the branch point).
    /// See the module comment for the order and what is refused.
    pub async fn create_branch(
        self: &Arc<Self>,
        new_id: TimelineId,
        ancestor_id: TimelineId,
        ancestor_lsn: Option<Lsn>,
    ) -> Result<Arc<Timeline>, TenantError> {
        let ancestor = match self.get_timeline(ancestor_id) {
            Ok(tl) => tl,
            Err(TenantError::NotFound(what)) => return Err(BranchError::AncestorNotFound(what))?,
            Err(e) => return Err(e),
        };
        let lsn = ancestor_lsn.unwrap_or_else(|| ancestor.get_last_record_lsn());
        self.reserve(new_id)?;
        let _reservation = Reservation { tenant: self, id: new_id };
        check_branch_lsn(&ancestor, lsn)?;
        ancestor.add_branch_point(new_id, lsn).map_err(|source| BranchError::NotReadable {
            lsn,
            ancestor: ancestor_id,
            source,
        })?;
        match self.write_branch(new_id, &ancestor, lsn).await {
            Ok(tl) => {
                self.timelines.write().unwrap().insert(new_id, tl.clone());
                info!(
                    "created timeline {}/{new_id} as a branch of {ancestor_id} at {lsn}",
                    self.id
                );
                Ok(tl)
            }
            Err(e) => {
                ancestor.remove_branch_point(new_id);
                Err(e)
            }
        }
    }

    /// Steps 2 to 4 of the module comment; on failure nothing of the
    /// branch is left on disk.
    async fn write_branch(
        &self,
        id: TimelineId,
        ancestor: &Arc<Timeline>,
        lsn: Lsn,
    ) -> Result<Arc<Timeline>, TenantError> {
        attachment::refuse_if_remote(&self.conf, (self.id, id)).await?;
        if ancestor.get_disk_consistent_lsn() < lsn {
            ancestor.freeze_and_flush().await.context("flush the ancestor")?;
        }
        wait_ancestor_uploaded(ancestor, lsn).await?;
        let final_dir = self.timeline_dir(id);
        let temp_dir = io_engine::temp_path(&final_dir);
        let engine = &self.conf.io_engine;
        let result = async {
            remove_dir_if_present(engine, &temp_dir).await?;
            let md = TimelineMetadata::new_branch(ancestor.timeline_id, lsn, ancestor.pg_version);
            Timeline::create_on_disk(&self.conf, &temp_dir, &md).await?;
            utils::failpoint::failpoint("branch-create::before-rename")?;
            engine.rename(&temp_dir, &final_dir).await?;
            engine.fsync_dir(final_dir.parent().unwrap()).await?;
            utils::failpoint::failpoint("branch-create::after-rename")?;
            let index = RemoteIndex::Given(None);
            self.load_timeline(id, final_dir.clone(), index, Some(ancestor.clone())).await
        }
        .await;
        if let Err(e) = &result {
            warn!("creating branch {}/{id} failed, removing it: {e:#}", self.id);
            for dir in [&temp_dir, &final_dir] {
                if let Err(e) = remove_dir_if_present(engine, dir).await {
                    warn!("could not remove {} of the failed branch: {e}", dir.display());
                }
            }
        }
        result.map_err(|e| TenantError::Other(e.context(format!("create branch {}/{id}", self.id))))
    }

    /// Load the timelines of `local` (id, directory), ancestors before
    /// their branches, each with its remote index; see the module comment.
    pub(super) async fn load_timelines_in_order(
        &self,
        local: Vec<(TimelineId, PathBuf)>,
        mut indexes: HashMap<TimelineId, RemoteIndex>,
    ) {
        let mut pending = Vec::with_capacity(local.len());
        for (id, dir) in local {
            let index = indexes.remove(&id).expect("fetch_indexes answers every timeline");
            let ancestor = read_ancestor(&self.conf, &dir).await;
            pending.push((id, dir, index, ancestor));
        }
        while !pending.is_empty() {
            let waiting: Vec<TimelineId> = pending.iter().map(|p| p.0).collect();
            // Those whose ancestor is not waiting itself (none, loaded,
            // broken or missing); none at all only for a cycle.
            let (ready, rest): (Vec<_>, Vec<_>) =
                pending.into_iter().partition(|p| p.3.is_none_or(|(a, _)| !waiting.contains(&a)));
            let cycle = ready.is_empty();
            let (now, later) = if cycle { (rest, Vec::new()) } else { (ready, rest) };
            for (id, dir, index, ancestor) in now {
                let ancestor = match self.resolve_ancestor(id, ancestor, &index, cycle) {
                    Ok(a) => a,
                    Err(reason) => {
                        self.mark_broken(id, reason);
                        continue;
                    }
                };
                self.load_timeline_or_mark_broken(id, dir, index, ancestor).await;
            }
            pending = later;
        }
    }

    /// The loaded ancestor of timeline `id` (whose manifest names
    /// `ancestor`), with its branch point registered; or why it cannot be
    /// loaded.
    fn resolve_ancestor(
        &self,
        id: TimelineId,
        ancestor: Option<(TimelineId, Lsn)>,
        index: &RemoteIndex,
        cycle: bool,
    ) -> Result<Option<Arc<Timeline>>, String> {
        if let RemoteIndex::Given(Some(ip)) = index {
            let remote = ip.ancestor_timeline_id.zip(ip.ancestor_lsn);
            if remote != ancestor {
                return Err(format!(
                    "its manifest names ancestor {ancestor:?}, its remote index {remote:?}"
                ));
            }
        }
        let Some((ancestor_id, lsn)) = ancestor else { return Ok(None) };
        if cycle {
            return Err(format!("its ancestors {ancestor_id}, ... form a cycle"));
        }
        let tl = match self.get_timeline(ancestor_id) {
            Ok(tl) => tl,
            Err(TenantError::TimelineBroken { reason, .. }) => {
                return Err(format!("its ancestor timeline {ancestor_id} is broken: {reason}"))
            }
            Err(_) => return Err(format!("its ancestor timeline {ancestor_id} is missing")),
        };
        tl.add_branch_point(id, lsn)
            .map_err(|e| format!("its branch point on ancestor timeline {ancestor_id}: {e}"))?;
        Ok(Some(tl))
    }

    pub(super) fn mark_broken(&self, id: TimelineId, reason: String) {
        tracing::error!("timeline {}/{id} is broken and will not be served: {reason}", self.id);
        self.broken_timelines.write().unwrap().insert(id, reason);
    }

    /// The timelines that are branches of `id`, by id.
    pub fn branches_of(&self, id: TimelineId) -> Vec<TimelineId> {
        let timelines = self.timelines.read().unwrap();
        let mut v: Vec<_> = timelines
            .values()
            .filter(|t| t.ancestor_timeline_id() == Some(id))
            .map(|t| t.timeline_id)
            .collect();
        v.sort();
        v
    }

    /// Refuse to delete a timeline that has branches (409, naming them):
    /// the loaded ones and those registered on it (being created, or
    /// Broken after their ancestor loaded).
    pub(super) fn refuse_if_branched(&self, id: TimelineId) -> Result<(), TenantError> {
        let mut branches = self.branches_of(id);
        if let Ok(tl) = self.get_timeline(id) {
            branches.extend(tl.branch_points().into_iter().map(|(b, _)| b));
        }
        branches.sort();
        branches.dedup();
        if branches.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = branches.iter().map(|b| b.to_string()).collect();
        Err(TenantError::Conflict(format!(
            "timeline {}/{id} has branches ({}): delete them first",
            self.id,
            names.join(", ")
        )))
    }

    /// Timeline `id` is deleted: if it was a branch, its ancestor keeps
    /// its branch point no longer.
    pub(super) fn forget_branch(&self, id: TimelineId) {
        for tl in self.timelines.read().unwrap().values() {
            tl.remove_branch_point(id);
        }
    }
}

/// With remote storage, wait (up to `BRANCH_UPLOAD_WAIT`) until the
/// ancestor's uploaded index reaches the branch point, so a pageserver
/// that attaches the tenant finds the history the branch reads.
async fn wait_ancestor_uploaded(ancestor: &Timeline, lsn: Lsn) -> Result<(), TenantError> {
    let Some(remote) = ancestor.remote_client() else { return Ok(()) };
    if remote.wait_uploaded(lsn, BRANCH_UPLOAD_WAIT).await {
        return Ok(());
    }
    let uploaded = remote.remote_consistent_lsn().map_or("none".to_string(), |l| l.to_string());
    Err(TenantError::Busy(format!(
        "the remote copy of ancestor timeline {} does not reach the branch point {lsn} yet \
         (remote_consistent_lsn {uploaded} after {BRANCH_UPLOAD_WAIT:?}): retry later",
        ancestor.timeline_id
    )))
}

/// How long a branch creation waits for the ancestor's upload.
const BRANCH_UPLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Why `ancestor` cannot be branched at `lsn` (the GC cutoff is checked
/// when the branch point is registered, under GC's lock).
fn check_branch_lsn(ancestor: &Timeline, lsn: Lsn) -> Result<(), BranchError> {
    let id = ancestor.timeline_id;
    if lsn == Lsn(0) {
        return Err(BranchError::InvalidLsn);
    }
    let last = ancestor.get_last_record_lsn();
    if lsn > last {
        return Err(BranchError::AboveIngested { lsn, ancestor: id, last });
    }
    if let Err(source) = ancestor.check_lsn_readable(lsn) {
        return Err(BranchError::NotReadable { lsn, ancestor: id, source });
    }
    Ok(())
}

/// The ancestor a timeline's manifest names; `None` also when it cannot
/// be read: the timeline's load then fails naming why (logged there, once).
async fn read_ancestor(
    conf: &super::StorageConf,
    dir: &std::path::Path,
) -> Option<(TimelineId, Lsn)> {
    match TimelineMetadata::load(&conf.io_engine, dir).await {
        Ok(Decoded::Manifest(md)) => md.ancestor(),
        Ok(Decoded::V1(_)) | Err(_) => None,
    }
}

/// Releases a reserved timeline id when dropped.
struct Reservation<'t> {
    tenant: &'t Tenant,
    id: TimelineId,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.tenant.creating.lock().unwrap().remove(&self.id);
    }
}

#[cfg(test)]
mod tests;
