//! Heap and Heap2 redo against real PostgreSQL 15-18 WAL
//! (`testdata/wal/*.wal.zst`, written with `wal_consistency_checking =
//! 'all'`, so every page-touching record carries the page PostgreSQL
//! produced). Each window is replayed in order, keeping the latest image
//! per block; every Heap/Heap2 block with a consistency-check image (not
//! `BKPIMAGE_APPLY`) whose previous page is known (an earlier image in the
//! window, or zeros for a will-init block) is redone with
//! [`crate::redo::apply`] and compared with that image:
//! - heap pages under PostgreSQL's `heap_mask` ([`crate::redo::mask`], and
//!   a local copy below that must agree with it: LSN and checksum,
//!   `pd_prune_xid`, the hint flags, the hole, tuple hint bits, `t_cid`,
//!   speculative ctids, item padding) must match;
//! - VM pages (which `heap_mask` masks whole) must match byte for byte
//!   but for LSN and checksum;
//! - a stricter heap comparison (page flags, `pd_prune_xid` and all
//!   infomask bits but the four hint bits kept) is counted and printed, not
//!   asserted (`HEAP_REDO_DEBUG=1` prints the differing bytes). Seen so
//!   far: header-only differences (the primary sets `pd_prune_xid` when
//!   pruning and `PD_PAGE_FULL` without WAL; redo does neither) and
//!   `HEAP_COMBOCID`, which the primary keeps and PostgreSQL's redo clears
//!   (`HeapTupleHeaderSetCmax(.., FirstCommandId, false)`), as ours does.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::consts::{BLCKSZ, VISIBILITYMAP_FORKNUM};
use crate::page::PageHeader;
use crate::records::vm_clear_flags;
use crate::redo::mask::mask_page;
use crate::redo::{apply, RedoRecord};
use crate::wal::rmgr::{classify, NativeRecord};
use crate::wal::{rmgr_id, BlockTag, DecodedWalRecord, WalStreamDecoder};
use crate::PgMajorVersion;

const FIXTURES: [(&str, PgMajorVersion); 15] = [
    ("pg15-seqgen", PgMajorVersion::V15),
    ("pg17-seqgen", PgMajorVersion::V17),
    ("pg18-seqgen", PgMajorVersion::V18),
    ("pg15-pglz-seg", PgMajorVersion::V15),
    ("pg15-pglz-switch", PgMajorVersion::V15),
    ("pg15-lz4-seg", PgMajorVersion::V15),
    ("pg15-lz4-switch", PgMajorVersion::V15),
    ("pg15-zstd-seg", PgMajorVersion::V15),
    ("pg15-zstd-switch", PgMajorVersion::V15),
    ("pg16-pglz-seg", PgMajorVersion::V16),
    ("pg16-pglz-switch", PgMajorVersion::V16),
    ("pg17-pglz-seg", PgMajorVersion::V17),
    ("pg17-pglz-switch", PgMajorVersion::V17),
    ("pg18-pglz-seg", PgMajorVersion::V18),
    ("pg18-pglz-switch", PgMajorVersion::V18),
];

/// checked, PostgreSQL-mask mismatches, strict-mask differences, redo errors.
#[derive(Default, Debug, Clone, Copy)]
pub(super) struct Counts {
    pub checked: usize,
    pub mismatches: usize,
    pub strict_diffs: usize,
    /// Strict differences outside the page header (tuples, line pointers).
    pub strict_body_diffs: usize,
    pub errors: usize,
}

fn records(name: &str, version: PgMajorVersion) -> Vec<DecodedWalRecord> {
    if let Some(path) = name.strip_prefix("extra:") {
        return extra_records(path, version);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal");
    let wal =
        zstd::stream::decode_all(&std::fs::read(dir.join(format!("{name}.wal.zst"))).unwrap()[..])
            .unwrap();
    let tsv = std::fs::read_to_string(dir.join(format!("{name}.tsv"))).unwrap();
    let start = tsv.lines().next().unwrap().strip_prefix("# start\t").unwrap().parse().unwrap();
    let mut decoder = WalStreamDecoder::new(start, version);
    decoder.feed_bytes(&wal);
    let mut out = Vec::new();
    while let Some(rec) = decoder.poll_decode().unwrap() {
        out.push(rec);
    }
    out
}

/// WAL cut by hand: `PATH.wal` (whole segments) and `PATH.start` (the LSN
/// of its first byte); decoded up to the first record that does not decode
/// (the end of what was written).
fn extra_records(path: &str, version: PgMajorVersion) -> Vec<DecodedWalRecord> {
    let wal = std::fs::read(format!("{path}.wal")).unwrap();
    let start = std::fs::read_to_string(format!("{path}.start")).unwrap().trim().parse().unwrap();
    let mut decoder = WalStreamDecoder::new(start, version);
    decoder.feed_bytes(&wal);
    let mut out = Vec::new();
    while let Ok(Some(rec)) = decoder.poll_decode() {
        out.push(rec);
    }
    out
}

/// The record kind's name in this major (`heapdesc.c`).
fn kind(rec: &DecodedWalRecord, version: PgMajorVersion) -> String {
    let op = (rec.info & 0x70) >> 4;
    let new_prune = version >= PgMajorVersion::V17;
    let name = match (rec.rmid, op) {
        (rmgr_id::HEAP, _) => {
            ["INSERT", "DELETE", "UPDATE", "TRUNCATE", "HOT_UPDATE", "CONFIRM", "LOCK", "INPLACE"]
                [op as usize]
        }
        (_, 1) if new_prune => "PRUNE_ON_ACCESS",
        (_, 2) if new_prune => "PRUNE_VACUUM_SCAN",
        (_, 3) if new_prune => "PRUNE_VACUUM_CLEANUP",
        (_, 1) => "PRUNE",
        (_, 2) => "VACUUM",
        (_, 3) => "FREEZE_PAGE",
        _ => ["REWRITE", "", "", "", "VISIBLE", "MULTI_INSERT", "LOCK_UPDATED", "NEW_CID"]
            [op as usize],
    };
    let rmgr = if rec.rmid == rmgr_id::HEAP { "Heap" } else { "Heap2" };
    let init = if rec.info & 0x80 != 0 { "+INIT" } else { "" };
    format!("{rmgr} {name}{init}")
}

/// Replay one window; add its counts per kind to `out`.
fn check_window(
    name: &str,
    version: PgMajorVersion,
    out: &mut BTreeMap<(u32, String), Counts>,
    failures: &mut Vec<String>,
) {
    let mut latest: HashMap<BlockTag, Vec<u8>> = HashMap::new();
    for rec in records(name, version) {
        let heap = rec.rmid == rmgr_id::HEAP || rec.rmid == rmgr_id::HEAP2;
        if version < PgMajorVersion::V18 {
            server_vm_clears(&rec, version, &mut latest);
        }
        for (i, block) in rec.blocks.iter().enumerate() {
            let Some(image) = &block.image else {
                latest.remove(&block.tag);
                continue;
            };
            let after = image.restore().unwrap().to_vec();
            let before = if block.will_init {
                Some(vec![0u8; BLCKSZ])
            } else {
                latest.get(&block.tag).cloned()
            };
            if heap && !block.apply_image {
                if let Some(mut page) = before {
                    let vm = if block.tag.fork == VISIBILITYMAP_FORKNUM { " [VM]" } else { "" };
                    let key = (version as u32, format!("{}{vm}", kind(&rec, version)));
                    let counts = out.entry(key).or_default();
                    let redo = RedoRecord::from_decoded(&rec, i);
                    let what =
                        format!("{name} {} at {} block {}", kind(&rec, version), rec.lsn, block.id);
                    match apply(&mut page, block.tag, rec.end_lsn, &redo, version) {
                        Ok(()) => {
                            let pg_mask = |p: &[u8]| {
                                let mut p = p.to_vec();
                                mask_page(&mut p, rec.rmid, block.tag.blkno, version);
                                p
                            };
                            let same = pg_mask(&page) == pg_mask(&after);
                            compare(&page, &after, block.tag, same, counts, &what, failures)
                        }
                        Err(e) => {
                            counts.errors += 1;
                            failures.push(format!("{what}: {e}"));
                        }
                    }
                }
            }
            latest.insert(block.tag, after);
        }
    }
}

/// 15-17: the VM bits heap records clear without a VM block reference,
/// which the server applies itself (`wal::rmgr::heap`); without them a
/// later VISIBLE record's VM page would start from stale bits.
fn server_vm_clears(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
    latest: &mut HashMap<BlockTag, Vec<u8>>,
) {
    if let Ok(NativeRecord::HeapVmClear { vm_clears, .. }) = classify(rec, version) {
        for clear in vm_clears {
            if let Some(page) = latest.get_mut(&clear.vm_page()) {
                vm_clear_flags(page, &[clear.heap_block.blkno], clear.flags);
            }
        }
    }
}

/// `pg_same`: equal under PostgreSQL's mask ([`crate::redo::mask`]).
fn compare(
    ours: &[u8],
    theirs: &[u8],
    tag: BlockTag,
    pg_same: bool,
    counts: &mut Counts,
    what: &str,
    failures: &mut Vec<String>,
) {
    counts.checked += 1;
    let same = if tag.fork == VISIBILITYMAP_FORKNUM {
        masked(ours, tag.blkno, Mask::LsnOnly) == masked(theirs, tag.blkno, Mask::LsnOnly)
    } else {
        let (mut a, mut b) =
            (masked(ours, tag.blkno, Mask::Strict), masked(theirs, tag.blkno, Mask::Strict));
        counts.strict_diffs += usize::from(a != b);
        a[..24].fill(0);
        b[..24].fill(0);
        counts.strict_body_diffs += usize::from(a != b);
        if a != b && std::env::var("HEAP_REDO_DEBUG").is_ok() {
            let d: Vec<_> =
                (24..BLCKSZ).filter(|&i| a[i] != b[i]).map(|i| (i, a[i], b[i])).collect();
            eprintln!("{what}: strict body diff {:?}", &d[..d.len().min(8)]);
        }
        let local =
            masked(ours, tag.blkno, Mask::Postgres) == masked(theirs, tag.blkno, Mask::Postgres);
        assert_eq!(local, pg_same, "{what}: the local heap_mask and redo::mask disagree");
        pg_same
    };
    if !same {
        counts.mismatches += 1;
        let (a, b) =
            (masked(ours, tag.blkno, Mask::Postgres), masked(theirs, tag.blkno, Mask::Postgres));
        let first = a.iter().zip(&b).position(|(x, y)| x != y);
        failures.push(format!("{what}: differs (first masked byte {first:?})"));
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mask {
    LsnOnly,
    Postgres,
    Strict,
}

const MASK_MARKER: u8 = 0;
const HEAP_XACT_MASK: u16 = 0xFFF0;
const HEAP_HINT_BITS: u16 = 0x0F00;
const HEAP_XMIN_FROZEN: u16 = 0x0300;
const HEAP_XMAX_HINTS: u16 = 0x0C00;

/// `heap_mask` (and `mask_page_lsn_and_checksum`, `mask_page_hint_bits`,
/// `mask_unused_space` of `bufmask.c`), or the stricter variant.
fn masked(page: &[u8], blkno: u32, how: Mask) -> Vec<u8> {
    let mut p = page.to_vec();
    let mut h = PageHeader::decode(&p);
    h.lsn = 0;
    h.checksum = 0;
    if how == Mask::Postgres {
        h.prune_xid = 0;
        h.flags &= !(0x1 | 0x2 | 0x4);
    }
    h.encode(&mut p);
    if how == Mask::LsnOnly {
        return p;
    }
    let (lower, upper) = (h.lower as usize, h.upper as usize);
    if lower <= upper && upper <= BLCKSZ {
        p[lower..upper].fill(MASK_MARKER);
    }
    let nitems = lower.saturating_sub(24) / 4;
    for off in 1..=nitems {
        let raw = u32::from_le_bytes(p[24 + 4 * (off - 1)..][..4].try_into().unwrap());
        let (lp_off, flags, len) = ((raw & 0x7fff) as usize, (raw >> 15) & 3, (raw >> 17) as usize);
        if lp_off + len > BLCKSZ {
            continue;
        }
        if flags == 1 && len >= 23 {
            let t = &mut p[lp_off..lp_off + len];
            let mut infomask = u16::from_le_bytes([t[20], t[21]]);
            if how == Mask::Strict {
                infomask &= !HEAP_HINT_BITS;
            } else if infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN {
                infomask &= !HEAP_XACT_MASK;
            } else {
                infomask &= !HEAP_XMAX_HINTS;
            }
            t[20..22].copy_from_slice(&infomask.to_le_bytes());
            t[8..12].fill(MASK_MARKER);
            if u16::from_le_bytes([t[16], t[17]]) == 0xFFFE {
                t[12..14].copy_from_slice(&((blkno >> 16) as u16).to_le_bytes());
                t[14..16].copy_from_slice(&(blkno as u16).to_le_bytes());
                t[16..18].copy_from_slice(&(off as u16).to_le_bytes());
            }
        }
        if len > 0 {
            let pad_end = ((lp_off + len + 7) & !7).min(BLCKSZ);
            p[lp_off + len..pad_end].fill(MASK_MARKER);
        }
    }
    p
}

#[test]
fn heap_redo_matches_postgres_on_real_wal() {
    let mut counts = BTreeMap::new();
    let mut failures = Vec::new();
    for (name, version) in FIXTURES {
        check_window(name, version, &mut counts, &mut failures);
    }
    report(&counts, &failures);
    for major in [15, 16, 17, 18] {
        for kind in
            ["Heap2 MULTI_INSERT+INIT", "Heap2 VISIBLE", "Heap2 VISIBLE [VM]", "Heap INPLACE"]
        {
            let c = counts.get(&(major, kind.to_string())).copied().unwrap_or_default();
            assert!(c.checked > 0, "PG{major} {kind}: nothing checked");
        }
    }
}

/// More WAL, not in the repository: `HEAP_REDO_EXTRA_WAL=DIR` holding
/// `pg15.wal`/`pg15.start` .. `pg18.*`, written by `extra_wal.sh` (next to
/// this file: deletes, cold and HOT updates, every row lock, LOCK_UPDATED,
/// CONFIRM, COPY, vacuum and freeze, 18's VM block references). Skipped
/// when unset.
#[test]
fn heap_redo_matches_postgres_on_extra_wal() {
    let Ok(dir) = std::env::var("HEAP_REDO_EXTRA_WAL") else {
        return;
    };
    let mut counts = BTreeMap::new();
    let mut failures = Vec::new();
    for version in PgMajorVersion::ALL {
        let path = format!("{dir}/pg{}", version as u32);
        if Path::new(&format!("{path}.wal")).exists() {
            check_window(&format!("extra:{path}"), version, &mut counts, &mut failures);
        }
    }
    report(&counts, &failures);
}

fn report(counts: &BTreeMap<(u32, String), Counts>, failures: &[String]) {
    for ((major, kind), c) in counts {
        eprintln!(
            "PG{major} {kind:<34} checked {:>4}  mismatches {}  errors {}  strict-diffs {} (body {})",
            c.checked, c.mismatches, c.errors, c.strict_diffs, c.strict_body_diffs
        );
    }
    for f in failures.iter().take(30) {
        eprintln!("{f}");
    }
    assert!(failures.is_empty(), "{} failures", failures.len());
}
