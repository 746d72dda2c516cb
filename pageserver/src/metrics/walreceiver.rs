//! WAL receiver and ingest metrics: counters of all timelines together,
//! gauges per followed timeline (refreshed from the timelines at each
//! scrape, so a deleted timeline's series disappear with it).
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `pageserver_wal_ingest_bytes_total` | counter | | WAL bytes received from primaries |
//! | `pageserver_wal_ingest_records_total` | counter | `rmgr` | WAL records ingested, by resource manager |
//! | `pageserver_wal_ingest_batch_seconds` | histogram | | time to ingest and commit the records of one replication message |
//! | `pageserver_wal_receiver_reconnects_total` | counter | | replication sessions that ended and were retried |
//! | `pageserver_wal_receiver_stalls_total` | counter | | sessions dropped because the primary sent nothing for `wal_receiver_timeout` |
//! | `pageserver_wal_receiver_lag_bytes` | gauge | `tenant_id`, `timeline_id` | the primary's latest WAL end minus `last_record_lsn` |
//! | `pageserver_wal_receiver_lag_seconds` | gauge | `tenant_id`, `timeline_id` | while behind: time since the primary sent its latest message |
//! | `pageserver_wal_receiver_refusals_total` | counter | `reason` | sessions that stopped at WAL a standby must refuse (`wal_level_minimal`) |
//! | `pageserver_wal_ingest_full_page_writes_off_total` | counter | | times a followed primary was seen turning `full_page_writes` off |
//! | `pageserver_wal_receiver_stopped` | gauge | `tenant_id`, `timeline_id` | 1 while the receiver of a followed timeline has stopped (refused WAL: the reason is in the timeline detail) |
//! | `pageserver_wal_source_pg_tli` | gauge | `tenant_id`, `timeline_id` | the PostgreSQL timeline (TLI) of the WAL a followed timeline ingests (0 until known) |
//! | `pageserver_wal_source_diverged` | gauge | `tenant_id`, `timeline_id` | 1 while ingest of a followed timeline is stopped because the server's timeline history forked below its `last_record_lsn` (the detail's `last_error` names both LSNs and TLIs) |
//! | `pageserver_wal_receiver_positions` | gauge | `tenant_id`, `timeline_id`, `position` | the last reported `write`, `flush` and `apply` LSNs (as numbers) |
//! | `pageserver_replication_slots_left_total` | counter | `cause` | replication slots left on a primary because they could not be dropped (or the deleted timeline's source could not be read), by `timeline_delete`, `tenant_delete`, `bootstrap_failure`, `source_replaced`; the WARN log line names each slot, its server and the SQL that drops it |
//! | `pageserver_wal_source_host_errors_total` | counter | `op` | failed attempts of the slot keeper of a multi-host source on a host it does not stream from: `connect` (reach it, check its cluster), `create` (its slot), `advance` (its slot); the timeline detail names the latest per host |
//! | `pageserver_wal_source_slot_advances_total` | counter | | slots advanced by the slot keeper on hosts a multi-host source does not stream from |

use std::sync::LazyLock;

use postgres_ffi::wal::rmgr::rmgr_name;
use prometheus::{
    register_gauge_vec, register_histogram, register_int_counter, register_int_counter_vec,
    register_int_gauge_vec, GaugeVec, Histogram, IntCounter, IntCounterVec, IntGaugeVec,
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
    pub stalls: IntCounter,
    pub refusals: IntCounterVec,
    pub full_page_writes_off: IntCounter,
    pub slots_left: IntCounterVec,
    pub host_errors: IntCounterVec,
    pub slot_advances: IntCounter,
    stopped: IntGaugeVec,
    diverged: IntGaugeVec,
    pg_tli: IntGaugeVec,
    lag_bytes: IntGaugeVec,
    lag_seconds: GaugeVec,
    positions: IntGaugeVec,
}

/// One followed timeline's receiver state, sampled at scrape time.
pub struct FollowerSample {
    pub tenant_id: String,
    pub timeline_id: String,
    pub lag_bytes: u64,
    pub lag_seconds: f64,
    /// The latest standby status sent: write, flush, apply.
    pub reported: [Lsn; 3],
    /// The receiver has stopped (refused WAL) though the timeline has a source.
    pub stopped: bool,
    /// Ingest stopped: the server's history forked below `last_record_lsn`.
    pub diverged: bool,
    /// The PostgreSQL timeline recorded for the source, if known.
    pub pg_tli: Option<u32>,
}

impl WalReceiverMetrics {
    pub fn record(&self, rmid: u8) {
        self.records[(rmid as usize).min(RMGR_SLOTS - 1)].inc();
    }

    /// Replace the per-timeline gauges with `samples` (all followed
    /// timelines; series of the others are dropped).
    pub fn refresh(&self, samples: &[FollowerSample]) {
        self.lag_bytes.reset();
        self.lag_seconds.reset();
        self.positions.reset();
        self.stopped.reset();
        self.diverged.reset();
        self.pg_tli.reset();
        for s in samples {
            let ids = [s.tenant_id.as_str(), s.timeline_id.as_str()];
            self.stopped.with_label_values(&ids).set(s.stopped as i64);
            self.diverged.with_label_values(&ids).set(s.diverged as i64);
            self.pg_tli.with_label_values(&ids).set(i64::from(s.pg_tli.unwrap_or(0)));
            self.lag_bytes.with_label_values(&ids).set(s.lag_bytes as i64);
            self.lag_seconds.with_label_values(&ids).set(s.lag_seconds);
            for (pos, lsn) in ["write", "flush", "apply"].iter().zip(s.reported) {
                let labels = [ids[0], ids[1], pos];
                self.positions.with_label_values(&labels).set(lsn.0 as i64);
            }
        }
    }
}

const TIMELINE_LABELS: &[&str] = &["tenant_id", "timeline_id"];
/// Every `Refusal::label`.
const REFUSAL_REASONS: [&str; 1] = ["wal_level_minimal"];
/// Every `walreceiver::slots::Cause::label`.
const SLOT_LEFT_CAUSES: [&str; 4] =
    ["timeline_delete", "tenant_delete", "bootstrap_failure", "source_replaced"];

pub static METRICS: LazyLock<WalReceiverMetrics> = LazyLock::new(|| {
    let records = register_int_counter_vec!(
        "pageserver_wal_ingest_records_total",
        "WAL records ingested, by resource manager",
        &["rmgr"]
    )
    .expect("register metric");
    let refusals = register_int_counter_vec!(
        "pageserver_wal_receiver_refusals_total",
        "Sessions that stopped at WAL a standby must refuse, by reason",
        &["reason"]
    )
    .expect("register metric");
    for reason in REFUSAL_REASONS {
        refusals.with_label_values(&[reason]).reset(); // a series from the first scrape
    }
    let slots_left = register_int_counter_vec!(
        "pageserver_replication_slots_left_total",
        "Replication slots left on a primary (not dropped) when a following timeline was deleted or \
         its bootstrap failed, by cause",
        &["cause"]
    )
    .expect("register metric");
    for cause in SLOT_LEFT_CAUSES {
        slots_left.with_label_values(&[cause]).reset();
    }
    let host_errors = register_int_counter_vec!(
        "pageserver_wal_source_host_errors_total",
        "Failed attempts of the slot keeper of a multi-host source on a host it does not stream \
         from, by operation",
        &["op"]
    )
    .expect("register metric");
    for op in ["connect", "create", "advance"] {
        host_errors.with_label_values(&[op]).reset();
    }
    WalReceiverMetrics {
        slots_left,
        host_errors,
        slot_advances: register_int_counter!(
            "pageserver_wal_source_slot_advances_total",
            "Slots advanced by the slot keeper on hosts a multi-host source does not stream from"
        )
        .expect("register metric"),
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
        stalls: register_int_counter!(
            "pageserver_wal_receiver_stalls_total",
            "Sessions dropped because the primary sent nothing for wal_receiver_timeout"
        )
        .expect("register metric"),
        refusals,
        full_page_writes_off: register_int_counter!(
            "pageserver_wal_ingest_full_page_writes_off_total",
            "Times a followed primary was seen turning full_page_writes off"
        )
        .expect("register metric"),
        stopped: register_int_gauge_vec!(
            "pageserver_wal_receiver_stopped",
            "1 while the receiver of a followed timeline has stopped (refused WAL)",
            TIMELINE_LABELS
        )
        .expect("register metric"),
        diverged: register_int_gauge_vec!(
            "pageserver_wal_source_diverged",
            "1 while ingest is stopped because the server's timeline history forked below \
             last_record_lsn",
            TIMELINE_LABELS
        )
        .expect("register metric"),
        pg_tli: register_int_gauge_vec!(
            "pageserver_wal_source_pg_tli",
            "The PostgreSQL timeline (TLI) of the WAL a followed timeline ingests (0 until known)",
            TIMELINE_LABELS
        )
        .expect("register metric"),
        lag_bytes: register_int_gauge_vec!(
            "pageserver_wal_receiver_lag_bytes",
            "The primary's latest WAL end minus last_record_lsn",
            TIMELINE_LABELS
        )
        .expect("register metric"),
        lag_seconds: register_gauge_vec!(
            "pageserver_wal_receiver_lag_seconds",
            "While behind: seconds since the primary sent its latest message",
            TIMELINE_LABELS
        )
        .expect("register metric"),
        positions: register_int_gauge_vec!(
            "pageserver_wal_receiver_positions",
            "Last reported standby positions (write, flush, apply) as LSN numbers",
            &["tenant_id", "timeline_id", "position"]
        )
        .expect("register metric"),
    }
});

pub fn register() {
    LazyLock::force(&METRICS);
}
