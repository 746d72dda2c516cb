//! The commit-time index's files: load at start-up, persist before a
//! manifest, thin after GC (the contract is in the parent module's comment).

use std::path::Path;

use io_engine::IoEngine;
use tracing::{info, warn};
use utils::lsn::Lsn;

use super::segment::{self, SegmentRange, MAX_SEGMENT_ENTRIES};
use super::{io_err, CommitTime, CommitTimes, CommitTimesError, State, COMMIT_TIMES_DIR};

impl CommitTimes {
    /// The index of the timeline in `timeline_dir`, whose manifest says
    /// `disk_consistent_lsn`: what lies above it is dropped (it is ingested
    /// again), a half-done tail rewrite is resolved.
    pub async fn load(
        engine: IoEngine,
        timeline_dir: &Path,
        disk_consistent_lsn: Lsn,
    ) -> Result<CommitTimes, CommitTimesError> {
        let dir = timeline_dir.join(COMMIT_TIMES_DIR);
        if !engine.exists(&dir).await.map_err(io_err(&dir))? {
            let state = State { durable_lsn: disk_consistent_lsn, ..State::default() };
            return Ok(CommitTimes::from_state(engine, timeline_dir, state));
        }
        let ranges = list_segments(&engine, &dir).await?;
        let ct = CommitTimes::empty(engine, timeline_dir);
        let mut sealed = ct.drop_beyond(ranges, disk_consistent_lsn).await?;
        let mut state = State::default();
        if let Some(last) = sealed.pop() {
            let mut entries = ct.read_segment(last).await?;
            let kept = entries.partition_point(|e| e.lsn <= disk_consistent_lsn);
            if kept < entries.len() {
                entries.truncate(kept);
                // `drop_beyond` kept only segments starting at or below D.
                assert!(
                    !entries.is_empty(),
                    "segment {} starts above {disk_consistent_lsn}",
                    last.file_name()
                );
                let new = ct.write_segment(&entries).await?;
                ct.remove(&[last]).await?;
                info!(
                    "commit-time index: dropped entries above {disk_consistent_lsn} from {}",
                    last.file_name()
                );
                state.tail_file = Some(new);
            } else {
                state.tail_file = Some(last);
            }
            if entries.len() == MAX_SEGMENT_ENTRIES {
                sealed.push(state.tail_file.take().expect("set above"));
            } else {
                state.tail = entries;
            }
        }
        state.sealed = sealed;
        state.durable_lsn = disk_consistent_lsn;
        *ct.state.lock().unwrap() = state;
        Ok(ct)
    }

    /// Of `ranges` (sorted, without same-first duplicates), remove the
    /// files of those that start above `lsn`; the rest.
    async fn drop_beyond(
        &self,
        mut ranges: Vec<SegmentRange>,
        lsn: Lsn,
    ) -> Result<Vec<SegmentRange>, CommitTimesError> {
        let n = ranges.partition_point(|r| r.first_lsn <= lsn);
        let beyond = ranges.split_off(n);
        if !beyond.is_empty() {
            info!("commit-time index: removing {} segments above {lsn}", beyond.len());
            self.remove(&beyond).await?;
        }
        Ok(ranges)
    }

    /// Make every entry at or below `up_to` durable (before a manifest
    /// with that `disk_consistent_lsn` is written). On error nothing is
    /// lost: the entries stay pending for the next attempt.
    pub async fn persist(&self, up_to: Lsn) -> Result<(), CommitTimesError> {
        let (new, tail, old_tail) = {
            let mut st = self.state.lock().unwrap();
            let n = st.pending.partition_point(|e| e.lsn <= up_to);
            if n == 0 {
                st.durable_lsn = st.durable_lsn.max(up_to);
                return Ok(());
            }
            let new: Vec<CommitTime> = st.pending.drain(..n).collect();
            (new, st.tail.clone(), st.tail_file)
        };
        match self.write_appended(tail, &new).await {
            Ok((sealed, tail, tail_file)) => {
                {
                    let mut st = self.state.lock().unwrap();
                    st.sealed.extend(sealed);
                    st.tail = tail;
                    st.tail_file = tail_file;
                    st.durable_lsn = st.durable_lsn.max(up_to);
                }
                if let Some(old) = old_tail {
                    // The new files hold its entries; a leftover is resolved at load.
                    self.remove(&[old]).await?;
                }
                Ok(())
            }
            Err(e) => {
                let mut st = self.state.lock().unwrap();
                st.pending.splice(0..0, new);
                Err(e)
            }
        }
    }

    /// Write `tail` + `new` as sealed segments and a new tail; returns
    /// (sealed, tail entries, tail file).
    async fn write_appended(
        &self,
        mut all: Vec<CommitTime>,
        new: &[CommitTime],
    ) -> Result<(Vec<SegmentRange>, Vec<CommitTime>, Option<SegmentRange>), CommitTimesError> {
        debug_assert!(all.last().is_none_or(|l| l.lsn < new[0].lsn), "entries out of order");
        all.extend_from_slice(new);
        if !self.engine.exists(&self.dir).await.map_err(io_err(&self.dir))? {
            self.engine.create_dir_all(&self.dir).await.map_err(io_err(&self.dir))?;
            let parent = self.dir.parent().expect("a timeline directory");
            self.engine.fsync_dir(parent).await.map_err(io_err(parent))?;
        }
        let mut sealed = Vec::new();
        let full = all.len() / MAX_SEGMENT_ENTRIES * MAX_SEGMENT_ENTRIES;
        for chunk in all[..full].chunks(MAX_SEGMENT_ENTRIES) {
            sealed.push(self.write_segment(chunk).await?);
        }
        let tail = all.split_off(full);
        let tail_file = match tail.is_empty() {
            true => None,
            false => Some(self.write_segment(&tail).await?),
        };
        Ok((sealed, tail, tail_file))
    }

    /// Write a segment durably (temp file, fsync, rename, directory fsync).
    async fn write_segment(
        &self,
        entries: &[CommitTime],
    ) -> Result<SegmentRange, CommitTimesError> {
        let range = SegmentRange::of(entries);
        let path = self.dir.join(range.file_name());
        let bytes = segment::encode(entries);
        self.engine.write_file_durably(&path, &bytes).await.map_err(io_err(&path))?;
        Ok(range)
    }

    /// Delete segment files, oldest first, then fsync the directory.
    async fn remove(&self, ranges: &[SegmentRange]) -> Result<(), CommitTimesError> {
        for r in ranges {
            let path = self.dir.join(r.file_name());
            self.engine.remove_file(&path).await.map_err(io_err(&path))?;
        }
        self.engine.fsync_dir(&self.dir).await.map_err(io_err(&self.dir))
    }

    /// After GC raised the cutoff to `cutoff` (and the manifest says so):
    /// delete the sealed segments wholly older than the newest sealed one
    /// that ends at or below it. Returns how many were deleted.
    pub async fn thin(&self, cutoff: Lsn) -> Result<usize, CommitTimesError> {
        let _files = self.files.write().await;
        let doomed: Vec<SegmentRange> = {
            let st = self.state.lock().unwrap();
            st.sealed[..thin_from(&st.sealed, cutoff)].to_vec()
        };
        if doomed.is_empty() {
            return Ok(0);
        }
        self.remove(&doomed).await?;
        self.state.lock().unwrap().sealed.drain(..doomed.len());
        info!("commit-time index: GC at {cutoff} removed {} segments", doomed.len());
        Ok(doomed.len())
    }
}

/// How many of `sealed` (oldest first) GC at `cutoff` deletes: those
/// wholly older than the newest one that ends at or below it.
pub(super) fn thin_from(sealed: &[SegmentRange], cutoff: Lsn) -> usize {
    sealed.partition_point(|s| s.last_lsn <= cutoff).saturating_sub(1)
}

/// The segment files of `dir`, sorted by LSN, without leftovers: temp files
/// are removed, and of two files with the same first LSN (a tail rewrite
/// cut short) the shorter. Any other overlap is an error.
async fn list_segments(
    engine: &IoEngine,
    dir: &Path,
) -> Result<Vec<SegmentRange>, CommitTimesError> {
    let listing = engine.read_dir(dir).await.map_err(io_err(dir))?;
    let mut ranges = Vec::with_capacity(listing.len());
    for entry in listing {
        let name = entry.name_lossy();
        let path = dir.join(&entry.name);
        if segment::is_temp(&name) {
            engine.remove_file(&path).await.map_err(io_err(&path))?;
        } else if let Some(r) = SegmentRange::parse(&name) {
            ranges.push(r);
        } else {
            warn!("ignoring unexpected file {}", path.display());
        }
    }
    ranges.sort();
    let mut kept: Vec<SegmentRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match kept.last() {
            Some(prev) if prev.first_lsn == r.first_lsn => {
                let path = dir.join(prev.file_name());
                info!(
                    "commit-time index: removing {} (rewritten as {})",
                    path.display(),
                    r.file_name()
                );
                engine.remove_file(&path).await.map_err(io_err(&path))?;
                kept.pop();
            }
            Some(prev) if r.first_lsn <= prev.last_lsn => {
                return Err(CommitTimesError::Overlap {
                    a: dir.join(prev.file_name()),
                    b: dir.join(r.file_name()),
                });
            }
            _ => {}
        }
        kept.push(r);
    }
    engine.fsync_dir(dir).await.map_err(io_err(dir))?;
    Ok(kept)
}
