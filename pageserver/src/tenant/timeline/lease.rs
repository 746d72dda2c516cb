//! LSN leases: a promise that the history needed to serve reads at an LSN
//! is kept until `valid_until`. A static compute (one pinned to an LSN)
//! takes a lease at its LSN and renews it while it runs; garbage
//! collection (not built yet) must keep every page version visible at
//! [`LeaseMap::min_valid_lsn`] and above.
//!
//! Persisted per timeline in `<timeline>/lsn_leases.json`, so a restart
//! does not let GC remove what a running compute still reads:
//!
//! ```json
//! {"version": 1, "leases": [{"lsn": "0/16B5A50", "valid_until_ms": 1717171717171}]}
//! ```
//!
//! - `valid_until_ms`: milliseconds since the UNIX epoch; in memory the
//!   time is kept at the same precision, so what a client is told is what
//!   is on disk;
//! - renewing extends a lease, never shortens it;
//! - expired leases are dropped when the file is loaded and on every
//!   renewal (so the file holds at most [`MAX_LEASES`] entries);
//! - a file that does not parse is an error naming it: the timeline does
//!   not load (it is Broken, like one with a damaged `wal_source.json`),
//!   because serving without its leases could let GC remove protected history.
//!
//! # Writes and the durability contract ([`LeaseStore`])
//!
//! Clients renew often (a static compute every few seconds or minutes;
//! 100,000 renewals of a hot LSN are plausible), and the file is the whole
//! map, so a renewal must not mean a write:
//!
//! 1. **Acknowledged means durable.** A lease is answered to a client only
//!    once the file holds that LSN with an expiry at least the one answered
//!    (the client is told the durable expiry itself). After a crash the
//!    file is loaded as it is, so every lease any client was told survives
//!    a restart with at least its expiry, and GC keeps what it protects.
//! 2. **Written ahead.** A renewal asks for `now + lsn_lease_length`. If
//!    the durable expiry already reaches that, nothing changed durably:
//!    nothing is written and the renewal answers the durable expiry at
//!    once. Otherwise the lease is set to `now + length * 5/4` ([`WRITE_AHEAD_DIVISOR`])
//!    and written, so a lease renewed continuously costs one write per
//!    quarter length (the default 10 min: one per 2.5 min), however often
//!    it is renewed. The price: a lease can outlast its latest renewal by
//!    up to a quarter length more than `lsn_lease_length`.
//! 3. **Batched.** Renewals that need a write register their change in the
//!    in-memory map and then wait for the one writer (`writer` lock). The
//!    writer writes the map as it is when it starts, so every change
//!    registered before is in that write; a renewal that finds its change
//!    already written (`written >= its sequence number`) returns without
//!    writing. N concurrent renewals cost two writes, not N.
//! 4. **GC sees at least what is durable.** GC reads the in-memory map,
//!    which holds every durable lease and also the ones being written (a
//!    write that fails leaves them there: GC protects more, never less;
//!    the next write includes them). The GC cutoff is raised and a renewal
//!    checks it under the same lock as the map ([`LeaseStore::begin`],
//!    [`LeaseStore::with_min_valid`]), so a lease is either seen by GC or
//!    refused as below its new cutoff.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use io_engine::IoEngine;
use serde::{Deserialize, Serialize};
use utils::lsn::Lsn;

pub const LEASES_FILE: &str = "lsn_leases.json";
/// Valid leases one timeline holds at most.
pub const MAX_LEASES: usize = 1024;
/// A full file is about 80 KiB; anything larger is damage.
const MAX_LEASES_FILE_BYTES: usize = 1024 * 1024;
const FILE_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LsnLease {
    /// Millisecond precision.
    pub valid_until: SystemTime,
}

impl LsnLease {
    /// Milliseconds since the UNIX epoch (what the page service returns).
    pub fn valid_until_ms(&self) -> u64 {
        to_ms(self.valid_until)
    }

    pub fn is_valid(&self, now: SystemTime) -> bool {
        self.valid_until > now
    }
}

/// A lease that `now + length` gives, truncated to milliseconds.
pub fn lease_until(now: SystemTime, length: Duration) -> LsnLease {
    LsnLease { valid_until: from_ms(to_ms(now + length)) }
}

fn to_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn from_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeasesFile {
    version: u32,
    leases: Vec<LeaseEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseEntry {
    lsn: Lsn,
    valid_until_ms: u64,
}

/// The leases of one timeline, by LSN.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseMap {
    leases: BTreeMap<Lsn, LsnLease>,
}

/// Why a lease cannot be added to the map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "timeline holds {MAX_LEASES} valid LSN leases, the most it keeps; a new LSN can be \
     leased once one expires"
)]
pub struct TooManyLeases;

impl LeaseMap {
    /// Grant or extend the lease at `lsn` to `lease` (a lease is never
    /// shortened); expired leases are dropped first. Returns the lease now held.
    pub fn renew(
        &mut self,
        lsn: Lsn,
        lease: LsnLease,
        now: SystemTime,
    ) -> Result<LsnLease, TooManyLeases> {
        self.prune(now);
        if !self.leases.contains_key(&lsn) && self.leases.len() >= MAX_LEASES {
            return Err(TooManyLeases);
        }
        let held = self.leases.entry(lsn).or_insert(lease);
        *held = (*held).max(lease);
        Ok(*held)
    }

    /// Drop the leases that expired by `now`; returns how many.
    pub fn prune(&mut self, now: SystemTime) -> usize {
        let before = self.leases.len();
        self.leases.retain(|_, l| l.is_valid(now));
        before - self.leases.len()
    }

    /// The lowest LSN with a lease valid at `now`: GC keeps what reads at
    /// it need.
    pub fn min_valid_lsn(&self, now: SystemTime) -> Option<Lsn> {
        self.leases.iter().find(|(_, l)| l.is_valid(now)).map(|(lsn, _)| *lsn)
    }

    /// The lease held at `lsn`, valid or not.
    pub fn get(&self, lsn: Lsn) -> Option<LsnLease> {
        self.leases.get(&lsn).copied()
    }

    /// Leases valid at `now`, by LSN.
    pub fn valid(&self, now: SystemTime) -> Vec<(Lsn, LsnLease)> {
        self.leases.iter().filter(|(_, l)| l.is_valid(now)).map(|(k, v)| (*k, *v)).collect()
    }

    /// The leases of the timeline in `dir` still valid at `now` (none if
    /// it has no lease file).
    pub async fn load(engine: &IoEngine, dir: &Path, now: SystemTime) -> anyhow::Result<LeaseMap> {
        let path = dir.join(LEASES_FILE);
        if !engine.exists(&path).await? {
            return Ok(LeaseMap::default());
        }
        let bytes = engine.read_file(&path, MAX_LEASES_FILE_BYTES).await?;
        let file: LeasesFile = serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("LSN lease file {} is damaged: {e}", path.display()))?;
        anyhow::ensure!(
            file.version == FILE_VERSION,
            "LSN lease file {} has version {}, this pageserver reads version {FILE_VERSION}",
            path.display(),
            file.version
        );
        let mut map = LeaseMap::default();
        for e in file.leases {
            let lease = LsnLease { valid_until: from_ms(e.valid_until_ms) };
            let held = map.leases.entry(e.lsn).or_insert(lease);
            *held = (*held).max(lease);
        }
        map.prune(now);
        Ok(map)
    }

    /// Write the map to the timeline in `dir`, durably (temp file, fsync,
    /// rename, fsync of the directory).
    pub async fn persist(&self, engine: &IoEngine, dir: &Path) -> anyhow::Result<()> {
        let file = LeasesFile {
            version: FILE_VERSION,
            leases: self
                .leases
                .iter()
                .map(|(lsn, l)| LeaseEntry { lsn: *lsn, valid_until_ms: l.valid_until_ms() })
                .collect(),
        };
        let json = serde_json::to_vec(&file).expect("a lease file serializes");
        engine.write_file_durably(&dir.join(LEASES_FILE), &json).await?;
        Ok(())
    }
}

/// A lease is written `length / WRITE_AHEAD_DIVISOR` beyond what the
/// renewal asked for (see the module comment, point 2).
pub const WRITE_AHEAD_DIVISOR: u32 = 4;

/// The leases of one timeline, with their file (the module comment states
/// the contract).
pub struct LeaseStore {
    /// `lsn_lease_length`.
    length: Duration,
    state: Mutex<StoreState>,
    /// Held by the renewal writing the file (across the write).
    writer: tokio::sync::Mutex<()>,
    /// Successful file writes.
    file_writes: AtomicU64,
}

struct StoreState {
    /// Every lease durable or being written: what GC protects and the
    /// next write writes. Each lease here is at least its `durable` one.
    held: LeaseMap,
    /// The map as of the latest successful write.
    durable: LeaseMap,
    /// Bumped by every renewal that needs a write.
    changes: u64,
    /// `changes` as of the start of the latest successful write.
    written: u64,
}

/// What [`LeaseStore::begin`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// Already durable: answer it.
    Durable(LsnLease),
    /// Registered: wait for [`LeaseStore::make_durable`] with this number.
    Pending(u64),
}

/// Why a lease was not made durable.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cancelled while waiting to write the lease file")]
    Cancelled,
    #[error("could not write the LSN lease file: {0:#}")]
    Write(anyhow::Error),
}

impl LeaseStore {
    /// The store of leases loaded from the file (`map`, all durable).
    pub fn new(map: LeaseMap, length: Duration) -> LeaseStore {
        let state = StoreState { held: map.clone(), durable: map, changes: 0, written: 0 };
        LeaseStore {
            length,
            state: Mutex::new(state),
            writer: tokio::sync::Mutex::new(()),
            file_writes: AtomicU64::new(0),
        }
    }

    /// Start a renewal of `lsn` at `now`: `check` runs first, under the
    /// lock GC holds while it raises its cutoff ([`Self::with_min_valid`]).
    pub fn begin<E: From<TooManyLeases>>(
        &self,
        lsn: Lsn,
        now: SystemTime,
        check: impl FnOnce() -> Result<(), E>,
    ) -> Result<Begun, E> {
        let mut st = self.state.lock().unwrap();
        check()?;
        let wanted = lease_until(now, self.length);
        if let Some(durable) = st.durable.get(lsn) {
            if durable >= wanted {
                return Ok(Begun::Durable(durable));
            }
        }
        let ahead = lease_until(now, self.length + self.length / WRITE_AHEAD_DIVISOR);
        st.held.renew(lsn, ahead, now)?;
        st.changes += 1;
        Ok(Begun::Pending(st.changes))
    }

    /// Wait until change `seq` (from [`Self::begin`] of `lsn`) is in the
    /// file, writing it (and every other pending change) if no other
    /// renewal has; returns the durable lease at `lsn`.
    pub async fn make_durable(
        &self,
        engine: &IoEngine,
        dir: &Path,
        lsn: Lsn,
        seq: u64,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<LsnLease, WriteError> {
        let _writing = tokio::select! {
            w = self.writer.lock() => w,
            _ = cancel.cancelled() => return Err(WriteError::Cancelled),
        };
        let (snapshot, snapshot_seq) = {
            let st = self.state.lock().unwrap();
            if st.written >= seq {
                return durable_lease(&st.durable, lsn);
            }
            (st.held.clone(), st.changes)
        };
        snapshot.persist(engine, dir).await.map_err(WriteError::Write)?;
        self.file_writes.fetch_add(1, Ordering::Relaxed);
        crate::metrics::storage::LEASE_FILE_WRITES.inc();
        let mut st = self.state.lock().unwrap();
        st.durable = snapshot;
        st.written = st.written.max(snapshot_seq);
        durable_lease(&st.durable, lsn)
    }

    /// `f` of the lowest LSN with a lease valid at `now` (durable or being
    /// written), called with the lock [`Self::begin`] checks under held.
    pub fn with_min_valid<R>(&self, now: SystemTime, f: impl FnOnce(Option<Lsn>) -> R) -> R {
        let st = self.state.lock().unwrap();
        f(st.held.min_valid_lsn(now))
    }

    /// The leases valid at `now` (durable or being written), by LSN.
    pub fn valid(&self, now: SystemTime) -> Vec<(Lsn, LsnLease)> {
        self.state.lock().unwrap().held.valid(now)
    }

    /// Successful writes of the lease file since this store was created.
    pub fn file_writes(&self) -> u64 {
        self.file_writes.load(Ordering::Relaxed)
    }
}

/// The lease at `lsn` in a map just written.
fn durable_lease(durable: &LeaseMap, lsn: Lsn) -> Result<LsnLease, WriteError> {
    durable.get(lsn).ok_or_else(|| {
        WriteError::Write(anyhow::anyhow!(
            "the lease at {lsn} expired before the lease file was written"
        ))
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod timeline_tests;
