//! Native WAL redo: the redo-check mode's counts (`wal_redo_check`), per
//! PostgreSQL rmgr and record kind (PostgreSQL's names, as `pg_waldump`
//! prints them).

use std::sync::LazyLock;

use prometheus::{register_int_counter_vec, IntCounterVec};

pub static CHECKED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_redo_check_records_total",
        "Blocks of WAL records redone natively and compared with PostgreSQL's own image \
         (wal_redo_check), by rmgr and record kind",
        &["rmgr", "record"]
    )
    .expect("register metric")
});

pub static MISMATCHES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_redo_check_mismatches_total",
        "Of those, the blocks whose native redo failed or differed from PostgreSQL's image \
         under PostgreSQL's masks, by rmgr and record kind",
        &["rmgr", "record"]
    )
    .expect("register metric")
});

pub static SKIPPED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "pageserver_redo_check_skipped_total",
        "Blocks with a consistency image that could not be checked: the page before the \
         record was not known to the check (first seen, or changed without an image), by rmgr",
        &["rmgr"]
    )
    .expect("register metric")
});

/// Pre-creates a series for every record kind of every natively redone
/// rmgr (PostgreSQL's names across 15-18), so `/metrics` lists them all
/// from the first scrape.
pub fn register() {
    use postgres_ffi::redo::{names::record_name, rmgr_name, NATIVE_RMGRS};
    use postgres_ffi::PgMajorVersion;
    for rmid in NATIVE_RMGRS {
        let rmgr = rmgr_name(rmid);
        SKIPPED.with_label_values(&[rmgr]);
        for version in PgMajorVersion::ALL {
            for info in (0..=u8::MAX).step_by(16) {
                let record = record_name(rmid, info, version);
                if record != "UNKNOWN" {
                    CHECKED.with_label_values(&[rmgr, record]);
                    MISMATCHES.with_label_values(&[rmgr, record]);
                }
            }
        }
    }
}
