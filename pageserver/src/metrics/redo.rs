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

pub fn register() {
    LazyLock::force(&CHECKED);
    LazyLock::force(&MISMATCHES);
    LazyLock::force(&SKIPPED);
}
