//! Native redo against PostgreSQL itself. The real-WAL fixtures
//! (`testdata/wal/*.wal.zst`, all four majors) were written with
//! `wal_consistency_checking = 'all'`, so every page-touching record carries
//! the image of each page it changed, as it was right after the record.
//!
//! Each window (its records must be those the server listed in the
//! `.tsv`) is replayed in order, keeping the latest known version of every
//! block (from any image: an applied image and a check-only image both
//! show the page after the record; a block a record touches without an
//! image becomes unknown, and so do a truncated relation's blocks). For
//! each record of an rmgr with native redo and each block reference
//! carrying a check-only image, the base page is
//! zeros if the block is `will_init`, else the known page, else the block
//! is skipped (counted as unknown). `redo::apply` runs on the stored form
//! of the record (encoded and decoded back), both pages go through
//! PostgreSQL's mask for the rmgr, and they must be equal.
//!
//! The table printed (`cargo test --test redo_oracle -- --nocapture`)
//! counts per (major, rmgr, record kind): checked, mismatched, redo errors,
//! unsupported, skipped. Mismatches and redo errors must be zero; an
//! `Unsupported` fault is allowed only for rmgrs not in [`STRICT_RMGRS`].

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use postgres_ffi::consts::BLCKSZ;
use postgres_ffi::redo::mask::{first_difference, mask_page};
use postgres_ffi::redo::names::record_name;
use postgres_ffi::redo::{self, Fault, RedoRecord};
use postgres_ffi::wal::{rmgr_id, BlockTag, DecodedWalRecord, WalStreamDecoder};
use postgres_ffi::PgMajorVersion;
use utils::lsn::Lsn;

/// Rmgrs whose redo must cover every record kind the fixtures hold: no
/// `Fault::Unsupported` allowed. Once every branch is merged this lists
/// all five native rmgrs.
const STRICT_RMGRS: &[u8] = &[
    rmgr_id::HEAP,
    rmgr_id::HEAP2,
    rmgr_id::BTREE,
    rmgr_id::SEQUENCE,
    rmgr_id::GENERIC,
    rmgr_id::HASH,
    rmgr_id::GIN,
    rmgr_id::GIST,
    rmgr_id::SPGIST,
    rmgr_id::BRIN,
];

/// How many mismatches and errors to describe in full.
const DETAILS: usize = 20;

#[derive(Default, Clone, Copy)]
struct Counts {
    checked: usize,
    mismatched: usize,
    errors: usize,
    unsupported: usize,
    skipped: usize,
}

/// (major, rmgr id, record kind) → counts.
type Table = BTreeMap<(u32, u8, &'static str), Counts>;

struct Oracle {
    version: PgMajorVersion,
    /// The latest known version of each block.
    pages: HashMap<BlockTag, Bytes>,
    table: Table,
    details: Vec<String>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal")
}

/// One fixture window.
struct Fixture {
    name: String,
    version: PgMajorVersion,
    start: Lsn,
    wal: Vec<u8>,
    /// The record LSNs the server listed (`.tsv`).
    listed: Vec<Lsn>,
}

/// Every fixture window.
fn fixtures() -> Vec<Fixture> {
    let mut names: Vec<String> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".wal.zst").map(str::to_string))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let major: u32 = name[2..4].parse().unwrap_or_else(|_| panic!("{name}: pgNN-"));
            let version = PgMajorVersion::new(major).unwrap();
            let tsv = std::fs::read_to_string(fixture_dir().join(format!("{name}.tsv"))).unwrap();
            let start = tsv.lines().next().and_then(|l| l.strip_prefix("# start\t")).unwrap();
            let listed = tsv
                .lines()
                .filter(|l| !l.starts_with('#'))
                .map(|l| l.split('\t').next().unwrap().parse().unwrap())
                .collect();
            let zst = std::fs::read(fixture_dir().join(format!("{name}.wal.zst"))).unwrap();
            let wal = zstd::stream::decode_all(&zst[..]).unwrap();
            Fixture { name, version, start: start.parse().unwrap(), wal, listed }
        })
        .collect()
}

/// The window's records, which must be the ones the server listed.
fn decode_all(f: &Fixture) -> Vec<DecodedWalRecord> {
    let mut decoder = WalStreamDecoder::new(f.start, f.version);
    decoder.feed_bytes(&f.wal);
    let mut records = Vec::new();
    while let Some(rec) = decoder.poll_decode().unwrap_or_else(|e| panic!("{}: {e}", f.name)) {
        records.push(rec);
    }
    let lsns: Vec<Lsn> = records.iter().map(|r| r.lsn).collect();
    assert_eq!(lsns, f.listed, "{}: records decoded", f.name);
    assert!(records.len() > 50, "{}: {} records", f.name, records.len());
    records
}

impl Oracle {
    fn new(version: PgMajorVersion, table: Table) -> Oracle {
        Oracle { version, pages: HashMap::new(), table, details: Vec::new() }
    }

    fn counts(&mut self, rec: &DecodedWalRecord) -> &mut Counts {
        let kind = record_name(rec.rmid, rec.info, self.version);
        self.table.entry((self.version.number(), rec.rmid, kind)).or_default()
    }

    /// Check the record's blocks against its images, then remember them.
    fn record(&mut self, rec: &DecodedWalRecord) {
        if redo::has_native_redo(rec.rmid) {
            for (index, block) in rec.blocks.iter().enumerate() {
                match &block.image {
                    Some(image) if !block.apply_image => {
                        let want = image.restore().unwrap();
                        self.check(rec, index, &want);
                    }
                    _ => {}
                }
            }
        }
        if let Some(rel) = truncated_relation(rec) {
            self.pages.retain(|tag, _| (tag.spc_oid, tag.db_oid, tag.rel_number) != rel);
        }
        for block in &rec.blocks {
            match &block.image {
                Some(image) => {
                    self.pages.insert(block.tag, image.restore().unwrap());
                }
                None => {
                    self.pages.remove(&block.tag);
                }
            }
        }
    }

    /// Redo block reference `index` of `rec` and compare with `want`.
    fn check(&mut self, rec: &DecodedWalRecord, index: usize, want: &[u8]) {
        let block = &rec.blocks[index];
        let mut page = if block.will_init {
            vec![0u8; BLCKSZ]
        } else if let Some(known) = self.pages.get(&block.tag) {
            known.to_vec()
        } else {
            self.counts(rec).skipped += 1;
            return;
        };
        let mut stored = Vec::new();
        RedoRecord::from_decoded(rec, index).encode(&mut stored);
        let redo_rec = RedoRecord::decode(&Bytes::from(stored)).unwrap();
        let result = redo::apply(&mut page, block.tag, rec.end_lsn, &redo_rec, self.version);
        let version = self.version;
        let counts = self.counts(rec);
        match result {
            Err(e) if matches!(e.fault, Fault::Unsupported(_)) => counts.unsupported += 1,
            Err(e) => {
                counts.errors += 1;
                self.details.push(format!("{e}"));
            }
            Ok(()) => {
                counts.checked += 1;
                let mut want = want.to_vec();
                mask_page(&mut page, rec.rmid, block.tag.blkno, version);
                mask_page(&mut want, rec.rmid, block.tag.blkno, version);
                if let Some(diff) = first_difference(&page, &want) {
                    counts.mismatched += 1;
                    let detail = describe_mismatch(rec, index, &page, &want, diff, version);
                    self.details.push(detail);
                }
            }
        }
    }
}

fn describe_mismatch(
    rec: &DecodedWalRecord,
    index: usize,
    got: &[u8],
    want: &[u8],
    diff: std::ops::Range<usize>,
    version: PgMajorVersion,
) -> String {
    let tag = rec.blocks[index].tag;
    let shown = diff.start..diff.end.min(diff.start + 32);
    format!(
        "PG{} {} {} at {} block {}/{}/{} fork {} blk {}: bytes {:?} differ: ours {:02x?} PostgreSQL's {:02x?}",
        version.number(),
        redo::rmgr_name(rec.rmid),
        record_name(rec.rmid, rec.info, version),
        rec.lsn,
        tag.spc_oid,
        tag.db_oid,
        tag.rel_number,
        tag.fork,
        tag.blkno,
        diff,
        &got[shown.clone()],
        &want[shown],
    )
}

fn print_table(table: &Table) -> String {
    let mut out = String::new();
    let header = ("major", "rmgr", "kind", "checked", "mismatch", "errors", "unsupp", "skipped");
    writeln!(
        out,
        "{:<5} {:<9} {:<22} {:>7} {:>8} {:>6} {:>6} {:>7}",
        header.0, header.1, header.2, header.3, header.4, header.5, header.6, header.7
    )
    .unwrap();
    for ((major, rmid, kind), c) in table {
        writeln!(
            out,
            "{:<5} {:<9} {:<22} {:>7} {:>8} {:>6} {:>6} {:>7}",
            major,
            redo::rmgr_name(*rmid),
            kind,
            c.checked,
            c.mismatched,
            c.errors,
            c.unsupported,
            c.skipped
        )
        .unwrap();
    }
    out
}

/// The oracle over every fixture, run once for all tests.
fn oracle_table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = Table::new();
        let mut details = Vec::new();
        for fixture in fixtures() {
            let mut oracle = Oracle::new(fixture.version, table);
            for rec in decode_all(&fixture) {
                oracle.record(&rec);
            }
            table = oracle.table;
            let name = &fixture.name;
            details.extend(oracle.details.into_iter().map(|d| format!("{name}: {d}")));
        }
        println!("{}", print_table(&table));
        for d in details.iter().take(DETAILS) {
            println!("{d}");
        }
        table
    })
}

/// The relation (tablespace, database, relfilenode) a Storage TRUNCATE
/// (`xl_smgr_truncate`: block count, locator, flags) cuts; its known pages
/// are forgotten, every fork (conservative).
fn truncated_relation(rec: &DecodedWalRecord) -> Option<(u32, u32, u32)> {
    const XLOG_SMGR_TRUNCATE: u8 = 0x20;
    if rec.rmid != rmgr_id::STORAGE || rec.rmgr_info() != XLOG_SMGR_TRUNCATE {
        return None;
    }
    let oid = |at: usize| {
        rec.main_data.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    Some((oid(4)?, oid(8)?, oid(12)?))
}

/// The rows where `f` is not zero, as "PG15 Heap INSERT: 3".
fn rows_with(table: &Table, f: fn(&Counts) -> usize) -> Vec<String> {
    let named = |(major, rmid, kind): &(u32, u8, &str), n| {
        format!("PG{major} {} {kind}: {n}", redo::rmgr_name(*rmid))
    };
    table.iter().filter(|(_, c)| f(c) > 0).map(|(k, c)| named(k, f(c))).collect()
}

#[test]
fn native_redo_matches_postgresql_images() {
    let table = oracle_table();
    let mismatched = rows_with(table, |c| c.mismatched);
    assert!(mismatched.is_empty(), "pages differ from PostgreSQL's: {mismatched:?}");
    let errors = rows_with(table, |c| c.errors);
    assert!(errors.is_empty(), "redo failed: {errors:?}");
    let unsupported = rows_with(table, |c| c.unsupported);
    for &rmid in STRICT_RMGRS {
        let name = format!(" {} ", redo::rmgr_name(rmid));
        let rows: Vec<_> = unsupported.iter().filter(|r| r.contains(&name)).collect();
        assert!(rows.is_empty(), "unsupported record kinds: {rows:?}");
    }
}

/// The fixtures hold records of every strict rmgr, and each was checked.
#[test]
fn strict_rmgrs_are_covered() {
    let table = oracle_table();
    for &rmid in STRICT_RMGRS {
        let checked: usize =
            table.iter().filter(|((_, r, _), _)| *r == rmid).map(|(_, c)| c.checked).sum();
        assert!(checked > 0, "no {} record checked", redo::rmgr_name(rmid));
    }
}

/// The flags of a hash or GiST page's special space (both 16 bytes, the
/// flags at byte 12).
fn special_flags(page: &[u8]) -> u16 {
    u16::from_le_bytes([page[BLCKSZ - 4], page[BLCKSZ - 3]])
}

/// Blocks PostgreSQL changes after restoring their image
/// (`redo::redo_after_image`), applied to the fixtures' images: a GiST left
/// child loses `F_FOLLOW_RIGHT` (the primary cleared it after taking the
/// image) and gets the record's LSN as NSN; a hash bucket gets the flags the
/// record names. Nothing else on the page changes but `pd_lsn`.
#[test]
fn records_applied_after_their_image() {
    const F_FOLLOW_RIGHT: u16 = 0x8;
    let mut applied: BTreeMap<(u32, &str), usize> = BTreeMap::new();
    let mut gist_follow_right_in_image = 0;
    for f in fixtures() {
        for rec in decode_all(&f) {
            for (i, b) in rec.blocks.iter().enumerate() {
                let Some(image) = &b.image else { continue };
                if !redo::redo_after_image(rec.rmid, rec.info, b.id) {
                    continue;
                }
                let before = image.restore().unwrap().to_vec();
                let mut page = before.clone();
                let r = RedoRecord::from_decoded(&rec, i);
                redo::apply(&mut page, b.tag, rec.end_lsn, &r, f.version)
                    .unwrap_or_else(|e| panic!("{}: {e}", f.name));
                let special = BLCKSZ - 16;
                assert_eq!(
                    page[8..special],
                    before[8..special],
                    "{}: {e} beyond the special space",
                    f.name,
                    e = rec.end_lsn
                );
                let flags = special_flags(&page);
                let kind = if rec.rmid == rmgr_id::GIST {
                    gist_follow_right_in_image +=
                        usize::from(special_flags(&before) & F_FOLLOW_RIGHT != 0);
                    assert_eq!(flags & F_FOLLOW_RIGHT, 0, "{}: {}", f.name, rec.end_lsn);
                    // A PageXLogRecPtr: the high half, then the low half.
                    let half = |at: usize| u32::from_le_bytes(page[at..at + 4].try_into().unwrap());
                    let nsn = (u64::from(half(special)) << 32) | u64::from(half(special + 4));
                    assert_eq!(Lsn(nsn), rec.end_lsn, "{}: the NSN", f.name);
                    "Gist"
                } else {
                    // SPLIT_ALLOCATE_PAGE: new bucket u32, then the old
                    // bucket's flag; SPLIT_COMPLETE: old flag, new flag.
                    let at = if rec.info & 0xF0 == 0x40 { 4 } else { 2 * b.id as usize };
                    let want = u16::from_le_bytes([rec.main_data[at], rec.main_data[at + 1]]);
                    assert_eq!(flags, want, "{}: {} block {}", f.name, rec.end_lsn, b.id);
                    "Hash"
                };
                *applied.entry((f.version.number(), kind)).or_default() += 1;
            }
        }
    }
    println!("applied after their image: {applied:?}; GiST images with F_FOLLOW_RIGHT set: {gist_follow_right_in_image}");
    for major in 15..=18 {
        for kind in ["Gist", "Hash"] {
            assert!(
                applied.get(&(major, kind)).is_some_and(|n| *n > 0),
                "no {kind} block of PG{major}"
            );
        }
    }
    assert!(
        gist_follow_right_in_image > 0,
        "the fixtures show the primary's image with F_FOLLOW_RIGHT set"
    );
}
