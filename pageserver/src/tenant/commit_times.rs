//! The commit-time index of a timeline: for every COMMIT, COMMIT_PREPARED,
//! ABORT and ABORT_PREPARED record ingested, its end LSN and its
//! `xact_time` (PostgreSQL's `TimestampTz`: microseconds since 2000-01-01
//! UTC, the primary's clock). It answers "which LSN has exactly the
//! transactions that ended by time T" (`get_lsn_by_timestamp`) and "when
//! did the last transaction at or before LSN L end" (`get_timestamp_of_lsn`).
//!
//! It sits beside `lsn_by_time.rs`, and does not replace it: that record
//! says which LSN was *durable here* by which wall-clock time of this
//! daemon, for GC's `pitr_interval`; it exists even when no transaction
//! commits, is bounded to 1024 samples in the manifest, and is never exact
//! to a commit. This index is the primary's own times, one entry per
//! transaction, on disk in its own files.
//!
//! On disk: `<timeline>/commit_times/`, segment files (`segment.rs`: named
//! by their LSN range, delta-encoded, CRC'd), LSNs strictly increasing
//! across segments. Every segment but the newest is sealed (holds
//! [`MAX_SEGMENT_ENTRIES`]); the newest (the tail) is rewritten, under a
//! new name, as entries are added. In memory: the sealed segments' ranges
//! (24 bytes each: a day at 1000 commits/s is 5,300 segments, 127 KiB),
//! the tail's entries and the entries not yet durable (`pending`, those in
//! unflushed WAL).
//!
//! Invariants and durability contract:
//! - Entries reach `pending` under the timeline's writer lock, before
//!   `finish_write` makes their LSN ingested (`DatadirModification::commit`),
//!   so when a manifest with `disk_consistent_lsn = D` is written, every
//!   entry at or below D is in `pending` or on disk.
//! - [`CommitTimes::persist`] (called by the flush before the manifest is
//!   written) writes every entry at or below D durably (file fsync, rename,
//!   directory fsync); only then is the manifest published. So the index is
//!   never behind the manifest.
//! - It may be ahead (a crash between the two): start-up ([`CommitTimes::load`])
//!   drops entries above the manifest's D; ingest then adds them again from
//!   the WAL. Entries at or below the newest known LSN are ignored, so
//!   re-ingest never duplicates.
//! - A crash while the tail is rewritten leaves two files with the same
//!   first LSN: start-up keeps the longer one (it holds the other's entries).
//!   Any other overlap is an error naming both files.
//! - GC ([`CommitTimes::thin`]) deletes sealed segments that lie wholly
//!   below a segment that ends at or below the GC cutoff: the newest entry
//!   at or below the cutoff is always kept, so every answer at or above the
//!   cutoff stays exact; a timestamp older than what is kept answers `past`.
//!
//! Remote storage (`remote_timeline/commit_times.rs`): every manifest
//! scheduled for upload carries a [`CommitTimesSnapshot`] taken right
//! after `persist` (sealed segments GC at the manifest's cutoff keeps,
//! and the tail's entries); the upload queue uploads the segments the
//! store lacks before the index that lists them, so an index never
//! vouches for a `disk_consistent_lsn` its segments do not cover. Attach
//! downloads them all before the timeline loads (then `load` as above).
//!
//! Memory bound (no separate cap): `pending` holds the entries above the
//! last persisted LSN, i.e. of WAL whose layers are still in memory (open
//! or frozen, not flushed). Each entry (16 bytes, at most 32 with the
//! `Vec`'s growth) comes with at least one CLOG value of its commit or
//! abort record in those layers (key, LSN and record: more than 32 bytes),
//! so `pending` is at most as large as the timeline's unflushed in-memory
//! layers, which ingest's backpressure already bounds
//! (`timeline/writer.rs`: at most `MAX_FROZEN_LAYERS` frozen layers plus
//! the open one, each cut at `checkpoint_distance`, and in-memory bytes
//! over all timelines at most twice `in_memory_layers_budget`). A failed
//! persist keeps its entries pending, but then the flush failed too and
//! the same backpressure stops ingest. The tail holds at most
//! [`MAX_SEGMENT_ENTRIES`] entries (256 KiB), and each upload target a
//! copy of it (the current one and the one being uploaded).

mod segment;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use io_engine::IoEngine;
use utils::lsn::Lsn;

pub use segment::{SegmentRange, MAX_SEGMENT_BYTES, MAX_SEGMENT_ENTRIES};

/// The index's directory inside the timeline's.
pub const COMMIT_TIMES_DIR: &str = "commit_times";

/// A transaction's end: the end LSN of its commit or abort record and its
/// timestamp (microseconds since 2000-01-01 UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitTime {
    pub lsn: Lsn,
    pub ts: i64,
}

/// Neon's answer to "the LSN at time T" (`kind` and `lsn` of the route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LsnForTimestamp {
    /// The end LSN of the last transaction that ended by T (raised to the
    /// lowest restorable LSN if below it, when no transaction ended between).
    Present(Lsn),
    /// Every transaction known ended after T, or the answer is below the
    /// lowest restorable LSN: that LSN.
    Past(Lsn),
    /// Every transaction known ended by T: the last one's end LSN.
    Future(Lsn),
    /// No transaction known: the lowest restorable LSN.
    NoData(Lsn),
}

#[derive(Debug, thiserror::Error)]
pub enum CommitTimesError {
    #[error("commit-time segment {}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("commit-time segments {} and {} overlap", a.display(), b.display())]
    Overlap { a: PathBuf, b: PathBuf },
    #[error("commit-time index {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CommitTimesError + '_ {
    move |source| CommitTimesError::Io { path: path.to_path_buf(), source }
}

#[derive(Debug, Default)]
struct State {
    /// Sealed segments on disk, oldest first.
    sealed: Vec<SegmentRange>,
    /// The entries of the tail segment file (`tail_file`), durable.
    tail: Vec<CommitTime>,
    tail_file: Option<SegmentRange>,
    /// Ingested, not yet durable; above every durable entry.
    pending: Vec<CommitTime>,
    /// Every entry at or below this LSN is durable (the last `persist`'s
    /// `up_to`, or the manifest's LSN at load).
    durable_lsn: Lsn,
}

impl State {
    fn last_lsn(&self) -> Option<Lsn> {
        let mem = self.pending.last().or(self.tail.last()).map(|e| e.lsn);
        mem.or(self.sealed.last().map(|s| s.last_lsn))
    }
}

/// See the module comment.
pub struct CommitTimes {
    engine: IoEngine,
    dir: PathBuf,
    state: Mutex<State>,
    /// Shared by lookups while they read a sealed segment, exclusive while
    /// GC deletes some.
    files: tokio::sync::RwLock<()>,
}

/// Where "the first entry after T" is (among the entries at or below a
/// ceiling LSN: a branch's ancestor is searched below the branch point).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Nothing,
    /// Every entry is at or before T; the last one's LSN.
    AllBefore(Lsn),
    /// The first entry after T, and the LSN of the one before it.
    After {
        first_after: CommitTime,
        before: Option<Lsn>,
    },
}

mod lookup;
mod store;

impl CommitTimes {
    /// An empty index (for a new timeline, and tests).
    pub fn empty(engine: IoEngine, timeline_dir: &Path) -> CommitTimes {
        CommitTimes::from_state(engine, timeline_dir, State::default())
    }

    fn from_state(engine: IoEngine, timeline_dir: &Path, state: State) -> CommitTimes {
        CommitTimes {
            engine,
            dir: timeline_dir.join(COMMIT_TIMES_DIR),
            state: Mutex::new(state),
            files: tokio::sync::RwLock::new(()),
        }
    }

    /// Add ingested entries (LSN order). Those at or below the newest
    /// known LSN are ignored (WAL ingested again after a restart).
    pub fn record(&self, entries: impl IntoIterator<Item = CommitTime>) {
        let mut st = self.state.lock().unwrap();
        for e in entries {
            if st.last_lsn().is_none_or(|last| e.lsn > last) {
                st.pending.push(e);
            }
        }
    }

    /// Entries in memory (tail and pending) and sealed segments.
    pub fn stats(&self) -> (usize, usize) {
        let st = self.state.lock().unwrap();
        (st.tail.len() + st.pending.len(), st.sealed.len())
    }

    /// What remote storage gets of the index with a manifest whose GC
    /// cutoff is `gc_cutoff` (taken right after `persist`): the sealed
    /// segments GC at that cutoff keeps and the tail's entries.
    pub fn snapshot(&self, gc_cutoff: Lsn) -> CommitTimesSnapshot {
        let st = self.state.lock().unwrap();
        let keep_from = store::thin_from(&st.sealed, gc_cutoff);
        let tail = st.tail_file.map(|r| {
            debug_assert_eq!(SegmentRange::of(&st.tail), r, "the tail file holds the tail");
            (r, Arc::new(st.tail.clone()))
        });
        CommitTimesSnapshot {
            sealed: st.sealed[keep_from..].to_vec(),
            tail,
            durable_lsn: st.durable_lsn,
        }
    }

    /// The file of sealed segment `r`.
    pub fn segment_path(&self, r: &SegmentRange) -> PathBuf {
        self.dir.join(r.file_name())
    }

    async fn read_segment(&self, seg: SegmentRange) -> Result<Vec<CommitTime>, CommitTimesError> {
        let path = self.dir.join(seg.file_name());
        let bytes = self
            .engine
            .read_file(&path, segment::MAX_SEGMENT_BYTES)
            .await
            .map_err(io_err(&path))?;
        segment::decode(&path, seg, &bytes)
    }
}

/// Check a segment file's bytes, named `name` (a download; errors name
/// `origin`, e.g. the object): its range.
pub fn check_segment(
    origin: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<SegmentRange, CommitTimesError> {
    let corrupt = |reason: String| CommitTimesError::Corrupt { path: origin.into(), reason };
    let range = SegmentRange::parse(name)
        .ok_or_else(|| corrupt(format!("{name} is not a commit-time segment name")))?;
    segment::decode(origin, range, bytes)?;
    Ok(range)
}

/// A segment file's bytes (tests of other modules).
#[cfg(test)]
pub fn encode_for_tests(entries: &[CommitTime]) -> Vec<u8> {
    segment::encode(entries)
}

/// The index as remote storage gets it with one manifest
/// ([`CommitTimes::snapshot`], `remote_timeline/commit_times.rs`).
#[derive(Debug, Clone, Default)]
pub struct CommitTimesSnapshot {
    /// Sealed segments, oldest first: their files stay until a GC whose
    /// manifest no longer lists them.
    pub sealed: Vec<SegmentRange>,
    /// The tail segment and its entries: uploaded from memory, since its
    /// file is replaced (under a new name) as entries are added.
    pub tail: Option<(SegmentRange, Arc<Vec<CommitTime>>)>,
    /// Every entry at or below this LSN is in these segments (or was
    /// removed by GC below the cutoff).
    pub durable_lsn: Lsn,
}

impl CommitTimesSnapshot {
    /// The segments' file names, oldest first.
    pub fn names(&self) -> Vec<String> {
        let tail = self.tail.iter().map(|(r, _)| r);
        self.sealed.iter().chain(tail).map(SegmentRange::file_name).collect()
    }

    /// The tail segment's name and file bytes.
    pub fn tail_file(&self) -> Option<(String, Vec<u8>)> {
        self.tail.as_ref().map(|(r, entries)| (r.file_name(), segment::encode(entries)))
    }
}

/// PostgreSQL's epoch (2000-01-01 UTC) in unix seconds.
const PG_EPOCH_UNIX_SECS: u64 = 946_684_800;

/// `t` as a PostgreSQL timestamp (µs since 2000-01-01, negative before);
/// `None` before 1970 or past the year 294,000.
pub fn pg_timestamp(t: std::time::SystemTime) -> Option<i64> {
    let unix_us = i64::try_from(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_micros()).ok()?;
    Some(unix_us - PG_EPOCH_UNIX_SECS as i64 * 1_000_000)
}

/// The time of PostgreSQL timestamp `ts`; `None` before 1970.
pub fn system_time(ts: i64) -> Option<std::time::SystemTime> {
    let pg_epoch = std::time::UNIX_EPOCH + std::time::Duration::from_secs(PG_EPOCH_UNIX_SECS);
    if ts >= 0 {
        Some(pg_epoch + std::time::Duration::from_micros(ts as u64))
    } else {
        pg_epoch
            .checked_sub(std::time::Duration::from_micros(ts.unsigned_abs()))
            .filter(|t| *t >= std::time::UNIX_EPOCH)
    }
}
