//! What reading needs to know of the timeline's PostgreSQL cluster: its
//! major version (record layouts for native redo) and whether it has data
//! checksums (pages built from records get theirs recomputed).
//!
//! The major is the timeline's `pg_version`. Checksums come from the
//! timeline's `pg_control` (`data_checksum_version`): ingest and import,
//! which read or write it, set them ([`Timeline::set_data_checksums`]);
//! otherwise the first read that needs them reads the control file once.
//! A timeline without a control file (never imported) has none.

use std::sync::atomic::{AtomicU8, Ordering};

use pageserver_api::key::Key;
use postgres_ffi::controlfile::ControlFileData;
use postgres_ffi::PgMajorVersion;

use super::super::reconstruct::ClusterInfo;
use super::super::vectored_read;
use super::Timeline;

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// Data checksums of the cluster: unknown, off or on.
#[derive(Debug, Default)]
pub(super) struct ChecksumsKnown(AtomicU8);

impl Timeline {
    /// Record what the cluster's `pg_control` says (ingest, import).
    pub fn set_data_checksums(&self, on: bool) {
        self.data_checksums.0.store(if on { ON } else { OFF }, Ordering::Release);
    }

    /// The timeline's major; PostgreSQL 15 for a timeline created without
    /// a supported one (only tests do: creation checks the version).
    pub fn pg_major(&self) -> PgMajorVersion {
        PgMajorVersion::new(self.pg_version).unwrap_or(PgMajorVersion::V15)
    }

    /// How this timeline's pages are reconstructed.
    pub(super) async fn cluster_info(&self) -> ClusterInfo {
        let version = self.pg_major();
        let known = self.data_checksums.0.load(Ordering::Acquire);
        let data_checksums = match known {
            UNKNOWN => {
                let on = self.read_data_checksums().await;
                self.data_checksums
                    .0
                    .compare_exchange(
                        UNKNOWN,
                        if on { ON } else { OFF },
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .ok();
                on
            }
            v => v == ON,
        };
        ClusterInfo { version, data_checksums }
    }

    /// `pg_control`'s checksum version at the last record, read directly
    /// (not through `get_vectored`, which needs this answer first).
    async fn read_data_checksums(&self) -> bool {
        let lsn = self.get_last_record_lsn();
        let snapshots = self.read_snapshots();
        let chain = vectored_read::ReadChain::new(snapshots.iter().map(|(s, cap)| (s, *cap)));
        let limits = vectored_read::ReadLimits {
            timeline: &self.read_slots,
            process: vectored_read::process_read_slots(),
        };
        // The control file is no relation page: checksums do not apply to it.
        let plain = ClusterInfo { version: self.pg_major(), data_checksums: false };
        let query = [(Key::control_file(), lsn)];
        let (mut res, _) =
            vectored_read::read(&self.conf.io_engine, chain, &query, limits, plain).await;
        match res.pop().expect("one result per query") {
            Ok(bytes) => ControlFileData::decode(&bytes, self.pg_major())
                .map(|c| c.data_checksum_version != 0)
                .unwrap_or(false),
            Err(_) => false,
        }
    }
}
