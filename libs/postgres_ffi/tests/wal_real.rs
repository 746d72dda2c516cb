//! `WalStreamDecoder` on WAL written by real PostgreSQL 15 (pglz, lz4 and
//! zstd image compression), 16, 17 and 18 (pglz), cut by
//! `testdata/wal/make_fixtures.sh`, compared with what the server's own
//! pg_walinspect (or pg_waldump) listed: LSNs, prev, xid, rmgr, record
//! kind, length, main data length, block and image counts. Every image
//! must rebuild to a page with a sane header.

mod wal_common;

use std::path::{Path, PathBuf};

use postgres_ffi::page::PageHeader;
use postgres_ffi::wal::{DecodedWalRecord, WalStreamDecoder, WAL_SEGMENT_SIZE, XLOG_BLCKSZ};
use postgres_ffi::PgMajorVersion;
use rand::rngs::StdRng;
use rand::SeedableRng;
use utils::lsn::Lsn;

/// One line of a fixture's `.tsv`; `None` where the tool did not say.
struct ExpectedRecord {
    lsn: Lsn,
    end_lsn: Option<Lsn>,
    prev: Lsn,
    xid: u32,
    rmgr: String,
    kind: String,
    tot_len: usize,
    main_len: Option<usize>,
    blocks: usize,
    images: usize,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal")
}

fn load(name: &str) -> (Lsn, Vec<u8>, Vec<ExpectedRecord>) {
    let dir = fixture_dir();
    let compressed = std::fs::read(dir.join(format!("{name}.wal.zst"))).unwrap();
    let wal = zstd::stream::decode_all(&compressed[..]).unwrap();
    let tsv = std::fs::read_to_string(dir.join(format!("{name}.tsv"))).unwrap();
    let mut lines = tsv.lines();
    let start = lines.next().unwrap().strip_prefix("# start\t").unwrap().parse().unwrap();
    let expected = lines.filter(|l| !l.starts_with('#')).map(parse_line).collect();
    (start, wal, expected)
}

fn opt(s: &str) -> Option<&str> {
    (s != "-").then_some(s)
}

fn parse_line(line: &str) -> ExpectedRecord {
    let c: Vec<&str> = line.split('\t').collect();
    assert_eq!(c.len(), 11, "{line}");
    ExpectedRecord {
        lsn: c[0].parse().unwrap(),
        end_lsn: opt(c[1]).map(|s| s.parse().unwrap()),
        prev: c[2].parse().unwrap(),
        xid: c[3].parse().unwrap(),
        rmgr: c[4].to_string(),
        kind: c[5].to_string(),
        tot_len: c[6].parse().unwrap(),
        main_len: opt(c[7]).map(|s| s.parse().unwrap()),
        blocks: c[9].parse().unwrap(),
        images: c[10].parse().unwrap(),
    }
}

fn rmgr_id(name: &str) -> u8 {
    const NAMES: [&str; 22] = [
        "XLOG",
        "Transaction",
        "Storage",
        "CLOG",
        "Database",
        "Tablespace",
        "MultiXact",
        "RelMap",
        "Standby",
        "Heap2",
        "Heap",
        "Btree",
        "Hash",
        "Gin",
        "Gist",
        "Sequence",
        "SPGist",
        "BRIN",
        "CommitTs",
        "ReplicationOrigin",
        "Generic",
        "LogicalMessage",
    ];
    NAMES.iter().position(|n| *n == name).unwrap_or_else(|| panic!("rmgr {name}")) as u8
}

/// The rmgr-specific info bits (and the mask they are compared under) of
/// the record kinds these fixtures hold, from each version's rmgr headers.
fn expected_info(rmgr: &str, kind: &str, version: PgMajorVersion) -> Option<(u8, u8)> {
    let (base, init) = match kind.strip_suffix("+INIT") {
        Some(base) => (base, 0x80),
        None => (kind, 0),
    };
    let new_prune = version >= PgMajorVersion::V17;
    let info = match (rmgr, base) {
        ("XLOG", "CHECKPOINT_ONLINE") => 0x10,
        ("XLOG", "SWITCH") => 0x40,
        ("XLOG", "FPI_FOR_HINT") => 0xA0,
        ("XLOG", "FPI") => 0xB0,
        ("Heap", "INSERT") => 0x00,
        ("Heap", "DELETE") => 0x10,
        ("Heap", "UPDATE") => 0x20,
        ("Heap", "HOT_UPDATE") => 0x40,
        ("Heap", "INPLACE") => 0x70,
        ("Heap2", "PRUNE") if !new_prune => 0x10,
        ("Heap2", "VACUUM") if !new_prune => 0x20,
        ("Heap2", "PRUNE_ON_ACCESS") if new_prune => 0x10,
        ("Heap2", "PRUNE_VACUUM_SCAN") if new_prune => 0x20,
        ("Heap2", "PRUNE_VACUUM_CLEANUP") if new_prune => 0x30,
        ("Heap2", "VISIBLE") => 0x40,
        ("Heap2", "MULTI_INSERT") => 0x50,
        ("Heap2", "NEW_CID") => 0x70,
        ("Btree", "INSERT_LEAF") => 0x00,
        ("Btree", "INSERT_UPPER") => 0x10,
        ("Btree", "SPLIT_R") => 0x40,
        ("Btree", "NEWROOT") => 0xA0,
        ("Storage", "CREATE") => 0x10,
        ("Standby", "LOCK") => 0x00,
        ("Standby", "RUNNING_XACTS") => 0x10,
        ("Standby", "INVALIDATIONS") => 0x20,
        // The transaction kind is under mask 0x70 (0x80: has xinfo).
        ("Transaction", "COMMIT") => return Some((0x00, 0x70)),
        ("Transaction", "INVALIDATION") => return Some((0x60, 0x70)),
        _ => return None,
    };
    Some((info | init, 0xF0))
}

/// `xl_tot_len` bytes starting at `lsn` end (aligned) at `end_lsn`: the
/// bytes between them are the record plus the page headers it crosses.
fn spans_tot_len(rec: &DecodedWalRecord, tot_len: usize) -> bool {
    let (mut pos, mut left) = (rec.lsn.0, tot_len as u64);
    let page = XLOG_BLCKSZ as u64;
    while left > page - pos % page {
        left -= page - pos % page;
        pos += page - pos % page;
        pos += if pos.is_multiple_of(WAL_SEGMENT_SIZE) { 40 } else { 24 };
    }
    Lsn(pos + left).align() == rec.end_lsn || (rec.rmid == 0 && rec.info & 0xF0 == 0x40)
}

/// A rebuilt image looks like a page: the header's bounds make sense
/// (or the page is all zeros, a new page).
fn check_image(rec: &DecodedWalRecord, image: &[u8]) {
    assert_eq!(image.len(), 8192, "record at {}", rec.lsn);
    let h = PageHeader::decode(image);
    if h.upper == 0 && image.iter().all(|&b| b == 0) {
        return;
    }
    let sane = 24 <= h.lower && h.lower <= h.upper && h.upper <= h.special && h.special <= 8192;
    assert!(sane, "record at {}: image header {h:?}", rec.lsn);
    assert_eq!(h.pagesize_version & 0xFF00, 8192, "record at {}", rec.lsn);
}

fn check_record(rec: &DecodedWalRecord, exp: &ExpectedRecord, version: PgMajorVersion) {
    let at = rec.lsn;
    assert_eq!(rec.lsn, exp.lsn);
    if let Some(end) = exp.end_lsn {
        assert_eq!(rec.end_lsn, end, "end of record at {at}");
    }
    assert_eq!(rec.prev_lsn, exp.prev, "prev of {at}");
    assert_eq!(rec.xid, exp.xid, "xid of {at}");
    assert_eq!(rec.rmid, rmgr_id(&exp.rmgr), "rmgr of {at}");
    if let Some((info, mask)) = expected_info(&exp.rmgr, &exp.kind, version) {
        assert_eq!(rec.info & mask, info, "{}/{} at {at}", exp.rmgr, exp.kind);
    }
    assert!(spans_tot_len(rec, exp.tot_len), "length of {at}");
    if let Some(main_len) = exp.main_len {
        assert_eq!(rec.main_data.len(), main_len, "main data of {at}");
    }
    assert_eq!(rec.blocks.len(), exp.blocks, "blocks of {at}");
    let images: Vec<_> = rec.blocks.iter().filter_map(|b| b.image.as_ref()).collect();
    assert_eq!(images.len(), exp.images, "images of {at}");
    for image in images {
        let page = image.restore().unwrap_or_else(|e| panic!("record at {}: {e}", rec.lsn));
        check_image(rec, &page);
    }
}

fn check_fixture(name: &str, version: PgMajorVersion) {
    let (start, wal, expected) = load(name);
    assert!(expected.len() > 50, "{name}: {} records", expected.len());
    for seed in 0..3 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut decoder = WalStreamDecoder::new(start, version);
        let (records, err) = wal_common::decode_in_chunks(&mut decoder, &wal, &mut rng);
        assert_eq!(err, None, "{name}");
        assert_eq!(records.len(), expected.len(), "{name}: records decoded");
        for (rec, exp) in records.iter().zip(&expected) {
            check_record(rec, exp, version);
        }
        assert!(decoder.system_id().is_some(), "{name}: a long page header was seen");
    }
}

#[test]
fn pg15_pglz() {
    check_fixture("pg15-pglz-seg", PgMajorVersion::V15);
    check_fixture("pg15-pglz-switch", PgMajorVersion::V15);
}

#[test]
fn pg15_lz4() {
    check_fixture("pg15-lz4-seg", PgMajorVersion::V15);
    check_fixture("pg15-lz4-switch", PgMajorVersion::V15);
}

#[test]
fn pg15_zstd() {
    check_fixture("pg15-zstd-seg", PgMajorVersion::V15);
    check_fixture("pg15-zstd-switch", PgMajorVersion::V15);
}

#[test]
fn pg16_pglz() {
    check_fixture("pg16-pglz-seg", PgMajorVersion::V16);
    check_fixture("pg16-pglz-switch", PgMajorVersion::V16);
}

#[test]
fn pg17_pglz() {
    check_fixture("pg17-pglz-seg", PgMajorVersion::V17);
    check_fixture("pg17-pglz-switch", PgMajorVersion::V17);
}

#[test]
fn pg18_pglz() {
    check_fixture("pg18-pglz-seg", PgMajorVersion::V18);
    check_fixture("pg18-pglz-switch", PgMajorVersion::V18);
}

#[test]
fn wrong_version_is_refused_at_the_first_page() {
    let (start, wal, _) = load("pg16-pglz-seg");
    let mut decoder = WalStreamDecoder::new(start, PgMajorVersion::V17);
    decoder.feed_bytes(&wal);
    let mut result = decoder.poll_decode();
    while let Ok(Some(_)) = result {
        result = decoder.poll_decode();
    }
    let err = result.unwrap_err();
    assert!(err.msg.contains("page header at") && err.msg.contains("magic"), "{err}");
}
