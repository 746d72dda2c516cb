//! Btree redo against PostgreSQL's own results: real WAL written with
//! `wal_consistency_checking` (every btree record carries an image of each
//! page it touched, as PostgreSQL left it). Each window is replayed in
//! order keeping the latest image per block; a btree block whose image is
//! for checking only (not `BKPIMAGE_APPLY`) and whose previous version is
//! known (an earlier image in the window, or zeros when will_init) is
//! redone with [`crate::redo::apply`] (on the record's stored form) and
//! compared with the image under `btree_mask` ([`crate::redo::mask`]).
//!
//! Windows: the shared fixtures `testdata/wal/*.wal.zst` (all majors,
//! `wal_consistency_checking = 'all'`), the btree fixtures
//! `testdata/wal/btree/*.wal.zst` (every btree record kind; made by
//! `testdata/wal/btree/make.sh`), and, when `BTREE_WAL_DIR` is set, the
//! bigger uncommitted windows that script leaves in `<dir>/pgNN/window.wal`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use utils::lsn::Lsn;

use super::record_name;
use crate::consts::BLCKSZ;
use crate::redo::mask::mask_page;
use crate::redo::{apply, RedoRecord};
use crate::wal::{rmgr_id, BlockTag, DecodedWalRecord, WalStreamDecoder};
use crate::PgMajorVersion;

/// Per record kind: pages checked, pages that differed, blocks skipped
/// (previous version unknown).
#[derive(Default, Debug)]
struct Counts {
    checked: usize,
    mismatched: usize,
    skipped: usize,
}

fn decode_window(start: Lsn, wal: &[u8], version: PgMajorVersion) -> Vec<DecodedWalRecord> {
    let mut decoder = WalStreamDecoder::new(start, version);
    decoder.feed_bytes(wal);
    let mut records = Vec::new();
    let end = start.0 + wal.len() as u64;
    loop {
        match decoder.poll_decode() {
            Ok(Some(r)) => records.push(r),
            Ok(None) => return records,
            // The zeros after the last record of a window cut at a page end.
            Err(e) if e.lsn.0 / 8192 + 1 == end / 8192 && e.msg.contains("is zero") => {
                return records
            }
            Err(e) => panic!("decoding: {e:?}"),
        }
    }
}

/// Redo one block of a btree record on its previous version; `Err` with
/// a description when it fails or differs from PostgreSQL's image.
fn check_block(
    rec: &DecodedWalRecord,
    i: usize,
    prev: &[u8],
    image: &[u8],
    version: PgMajorVersion,
) -> Result<(), String> {
    let blk = &rec.blocks[i];
    let mut page = prev.to_vec();
    // Through the stored form, as the storage engine keeps it.
    let mut stored = Vec::new();
    RedoRecord::from_decoded(rec, i).encode(&mut stored);
    let redo = RedoRecord::decode(&bytes::Bytes::from(stored)).map_err(|e| e.to_string())?;
    apply(&mut page, blk.tag, rec.end_lsn, &redo, version).map_err(|e| e.to_string())?;
    let mut expected = image.to_vec();
    mask_page(&mut page, rmgr_id::BTREE, blk.tag.blkno, version);
    mask_page(&mut expected, rmgr_id::BTREE, blk.tag.blkno, version);
    if page == expected {
        return Ok(());
    }
    let first = page.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(0);
    Err(format!(
        "first difference at byte {first}: ours {:?} theirs {:?}",
        &page[first..(first + 16).min(BLCKSZ)],
        &expected[first..(first + 16).min(BLCKSZ)]
    ))
}

fn check_window(
    name: &str,
    start: Lsn,
    wal: &[u8],
    version: PgMajorVersion,
) -> BTreeMap<&'static str, Counts> {
    let mut pages: HashMap<BlockTag, Vec<u8>> = HashMap::new();
    let mut counts: BTreeMap<&'static str, Counts> = BTreeMap::new();
    let mut failures = Vec::new();
    for rec in decode_window(start, wal, version) {
        for (i, blk) in rec.blocks.iter().enumerate() {
            let image = blk.image.as_ref().map(|im| im.restore().expect("image").to_vec());
            if rec.rmid == rmgr_id::BTREE && !blk.apply_image {
                if let Some(image) = &image {
                    let c = counts.entry(record_name(rec.info)).or_default();
                    let zeros = vec![0u8; BLCKSZ];
                    let prev = if blk.will_init { Some(&zeros) } else { pages.get(&blk.tag) };
                    match prev {
                        None => c.skipped += 1,
                        Some(prev) => {
                            c.checked += 1;
                            if let Err(e) = check_block(&rec, i, prev, image, version) {
                                c.mismatched += 1;
                                failures.push(format!(
                                    "{name} {} at {} block {}: {e}",
                                    record_name(rec.info),
                                    rec.lsn,
                                    blk.id
                                ));
                            }
                        }
                    }
                }
            }
            match image {
                Some(image) => pages.insert(blk.tag, image),
                None => pages.remove(&blk.tag),
            };
        }
    }
    for f in failures.iter().take(20) {
        eprintln!("{f}");
    }
    counts
}

fn report(name: &str, counts: &BTreeMap<&'static str, Counts>) -> usize {
    let mut bad = 0;
    for (kind, c) in counts {
        println!(
            "{name}\t{kind}\tchecked {}\tmismatched {}\tskipped {}",
            c.checked, c.mismatched, c.skipped
        );
        bad += c.mismatched;
    }
    bad
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal")
}

fn version_of(name: &str) -> PgMajorVersion {
    match &name[..4] {
        "pg15" => PgMajorVersion::V15,
        "pg16" => PgMajorVersion::V16,
        "pg17" => PgMajorVersion::V17,
        _ => PgMajorVersion::V18,
    }
}

fn read_zst(path: &Path) -> Vec<u8> {
    zstd::stream::decode_all(&std::fs::read(path).unwrap()[..]).unwrap()
}

/// The shared fixtures: the start LSN is the `.tsv`'s first line.
#[test]
fn shared_fixtures_match_postgres() {
    let mut bad = 0;
    let mut names: Vec<_> = std::fs::read_dir(testdata())
        .unwrap()
        .filter_map(|e| {
            e.ok()?.file_name().into_string().ok()?.strip_suffix(".wal.zst").map(String::from)
        })
        .collect();
    names.sort();
    for name in names {
        let tsv = std::fs::read_to_string(testdata().join(format!("{name}.tsv"))).unwrap();
        let start = tsv.lines().next().unwrap().strip_prefix("# start\t").unwrap().parse().unwrap();
        let wal = read_zst(&testdata().join(format!("{name}.wal.zst")));
        let counts = check_window(&name, start, &wal, version_of(&name));
        bad += report(&name, &counts);
    }
    assert_eq!(bad, 0, "pages that differ from PostgreSQL's");
}

/// The btree fixtures: `<name>.wal.zst` starts at a segment start, which
/// `<name>.start` names.
#[test]
fn btree_fixtures_match_postgres() {
    let dir = testdata().join("btree");
    let mut bad = 0;
    let mut seen = BTreeMap::new();
    for v in ["pg15", "pg16", "pg17", "pg18"] {
        let path = dir.join(format!("{v}-btree.wal.zst"));
        if !path.exists() {
            continue;
        }
        let start = std::fs::read_to_string(dir.join(format!("{v}-btree.start"))).unwrap();
        let counts =
            check_window(v, start.trim().parse().unwrap(), &read_zst(&path), version_of(v));
        bad += report(v, &counts);
        for (kind, c) in counts {
            *seen.entry(kind).or_insert(0) += c.checked;
        }
    }
    assert_eq!(bad, 0, "pages that differ from PostgreSQL's");
    // Every kind that touches a page (REUSE_PAGE touches none).
    for kind in [
        "INSERT_LEAF",
        "INSERT_UPPER",
        "INSERT_META",
        "INSERT_POST",
        "SPLIT_L",
        "SPLIT_R",
        "DEDUP",
        "VACUUM",
        "DELETE",
        "MARK_PAGE_HALFDEAD",
        "UNLINK_PAGE",
        "UNLINK_PAGE_META",
        "NEWROOT",
        "META_CLEANUP",
    ] {
        assert!(seen.get(kind).copied().unwrap_or(0) > 0, "no {kind} checked");
    }
}

/// The bigger local windows of `make.sh` (not committed), when present.
#[test]
fn local_windows_match_postgres() {
    let Ok(dir) = std::env::var("BTREE_WAL_DIR") else { return };
    let mut bad = 0;
    for v in ["pg15", "pg16", "pg17", "pg18"] {
        let d = Path::new(&dir).join(v);
        let Ok(wal) = std::fs::read(d.join("window.wal")) else { continue };
        let start = std::fs::read_to_string(d.join("window.start")).unwrap();
        let counts = check_window(v, start.trim().parse().unwrap(), &wal, version_of(v));
        bad += report(v, &counts);
    }
    assert_eq!(bad, 0, "pages that differ from PostgreSQL's");
}
