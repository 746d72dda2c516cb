//! WAL receiver and ingest metrics (all timelines together).
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `pageserver_wal_ingest_bytes_total` | counter | | WAL bytes received from primaries |
//! | `pageserver_wal_ingest_records_total` | counter | `rmgr` | WAL records ingested, by resource manager |
//! | `pageserver_wal_ingest_batch_seconds` | histogram | | time to ingest and commit the records of one replication message |
//! | `pageserver_wal_receiver_reconnects_total` | counter | | replication sessions that ended and were retried |
//! | `pageserver_wal_receiver_lag_bytes` | gauge | | the primary's WAL end minus `last_record_lsn`, at the latest message of any receiver |
//! | `pageserver_wal_receiver_positions` | gauge | `position` | the last reported `write`, `flush` and `apply` LSNs (as numbers) of any receiver |

use std::sync::LazyLock;

use postgres_ffi::wal::rmgr::rmgr_name;
use prometheus::{
    register_histogram, register_int_counter, register_int_counter_vec, register_int_gauge,
    register_int_gauge_vec, Histogram, IntCounter, IntGauge,
};
use utils::lsn::Lsn;

use super::SLOW_SECONDS_BUCKETS;

/// Resource manager ids 0..=21 have names; others count as `other`.
const RMGR_SLOTS: usize = 23;

pub struct WalReceiverMetrics {
    pub wal_bytes: IntCounter,
    records: [IntCounter; RMGR_SLOTS],
    pub ingest_seconds: Histogram,
    pub reconnects: IntCounter,
    lag_bytes: IntGauge,
    positions: [IntGauge; 3],
}

impl WalReceiverMetrics {
    pub fn record(&self, rmid: u8) {
        self.records[(rmid as usize).min(RMGR_SLOTS - 1)].inc();
    }

    /// The primary's WAL end as of a message, against what is ingested.
    pub fn observe_primary_end(&self, primary_end: u64, last_record_lsn: Lsn) {
        self.lag_bytes.set(primary_end.saturating_sub(last_record_lsn.0) as i64);
    }

    pub fn observe_positions(&self, write: Lsn, flush: Lsn, apply: Lsn) {
        for (g, lsn) in self.positions.iter().zip([write, flush, apply]) {
            g.set(lsn.0 as i64);
        }
    }
}

pub static METRICS: LazyLock<WalReceiverMetrics> = LazyLock::new(|| {
    let records = register_int_counter_vec!(
        "pageserver_wal_ingest_records_total",
        "WAL records ingested, by resource manager",
        &["rmgr"]
    )
    .expect("register metric");
    let positions = register_int_gauge_vec!(
        "pageserver_wal_receiver_positions",
        "Last reported standby positions (write, flush, apply) as LSN numbers",
        &["position"]
    )
    .expect("register metric");
    WalReceiverMetrics {
        wal_bytes: register_int_counter!(
            "pageserver_wal_ingest_bytes_total",
            "WAL bytes received from primaries"
        )
        .expect("register metric"),
        records: std::array::from_fn(|i| {
            let name = if i < RMGR_SLOTS - 1 { rmgr_name(i as u8) } else { "other" };
            records.with_label_values(&[name])
        }),
        ingest_seconds: register_histogram!(
            "pageserver_wal_ingest_batch_seconds",
            "Time to ingest and commit the records of one replication message",
            SLOW_SECONDS_BUCKETS.to_vec()
        )
        .expect("register metric"),
        reconnects: register_int_counter!(
            "pageserver_wal_receiver_reconnects_total",
            "Replication sessions that ended and were retried"
        )
        .expect("register metric"),
        lag_bytes: register_int_gauge!(
            "pageserver_wal_receiver_lag_bytes",
            "The primary's WAL end minus last_record_lsn at the latest message"
        )
        .expect("register metric"),
        positions: ["write", "flush", "apply"].map(|p| positions.with_label_values(&[p])),
    }
});

pub fn register() {
    LazyLock::force(&METRICS);
}
