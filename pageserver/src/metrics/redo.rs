//! Native WAL redo: the redo-check mode's counts (`wal_redo_check`), per
//! PostgreSQL rmgr and record kind (PostgreSQL's names, as `pg_waldump`
//! prints them); the records each read applies, and the images ingest
//! writes to keep that bounded (`max_record_chain`).

use std::sync::LazyLock;

use prometheus::{
    register_histogram, register_int_counter, register_int_counter_vec, Histogram, IntCounter,
    IntCounterVec,
};

/// Records applied by one reconstruction: 0, then powers of two to 16384.
pub const RECORDS_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0,
];

pub static READ_RECORDS_APPLIED: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "pageserver_read_records_applied",
        "Records applied to build one page (or other value) on a read, after its image or \
         initializing record; bounded by max_record_chain",
        RECORDS_BUCKETS.to_vec()
    )
    .expect("register metric")
});

pub static CHAIN_IMAGES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_chain_images_total",
        "Images ingest wrote for keys whose chain of records since their last image reached \
         max_record_chain"
    )
    .expect("register metric")
});

pub static CHAIN_IMAGE_ERRORS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "pageserver_chain_image_errors_total",
        "Keys with a long chain whose image could not be built (the read failed); their \
         records keep serving them"
    )
    .expect("register metric")
});

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
    LazyLock::force(&READ_RECORDS_APPLIED);
    LazyLock::force(&CHAIN_IMAGES);
    LazyLock::force(&CHAIN_IMAGE_ERRORS);
}
