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

use std::collections::BTreeMap;
use std::path::Path;
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

#[cfg(test)]
mod tests;

#[cfg(test)]
mod timeline_tests;
