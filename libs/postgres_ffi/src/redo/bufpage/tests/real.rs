//! The primitives on every page image of the real-WAL fixtures
//! (`testdata/wal`, PostgreSQL 15-18): the invariants hold, and compaction
//! keeps every item's bytes and flags.

use std::path::{Path, PathBuf};

use utils::lsn::Lsn;

use super::*;
use crate::wal::{rmgr_id, WalStreamDecoder};
use crate::PgMajorVersion;

/// Every fixture `testdata/wal/{,btree/}pgNN-*.wal.zst`: its path
/// without the extension, and its major.
fn fixtures() -> Vec<(PathBuf, PgMajorVersion)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal");
    let mut out = Vec::new();
    for d in [dir.clone(), dir.join("btree")] {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        out.extend(entries.filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let stem = name.strip_suffix(".wal.zst")?;
            let major = stem.strip_prefix("pg")?.get(..2)?.parse().ok()?;
            Some((d.join(stem), PgMajorVersion::new(major).ok()?))
        }));
    }
    out.sort();
    assert!(out.len() >= 12, "fixtures: {out:?}");
    out
}

/// A fixture's start LSN (its `.tsv`'s first line, or its `.start`) and WAL.
fn fixture_files(stem: &Path) -> (Lsn, Vec<u8>) {
    let with = |ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
    let start = match std::fs::read_to_string(with("tsv")) {
        Ok(tsv) => tsv.lines().next().unwrap().strip_prefix("# start\t").unwrap().to_string(),
        Err(_) => std::fs::read_to_string(with("start")).unwrap().trim().to_string(),
    };
    let compressed = std::fs::read(with("wal.zst")).unwrap();
    (start.parse().unwrap(), zstd::stream::decode_all(&compressed[..]).unwrap())
}

/// Rmgrs whose pages all keep line pointers below `pd_lower` (btree's
/// metapage does not, but its fields read as line pointers without storage).
const LINE_POINTER_RMGRS: [u8; 4] =
    [rmgr_id::HEAP, rmgr_id::HEAP2, rmgr_id::BTREE, rmgr_id::SEQUENCE];

/// Every page image of every fixture: (rmid, fork, blkno, page).
fn real_images() -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for (stem, version) in fixtures() {
        let (start, wal) = fixture_files(&stem);
        let mut decoder = WalStreamDecoder::new(start, version);
        decoder.feed_bytes(&wal);
        // A fixture cut from a whole segment ends in zeros: stop there.
        while let Ok(Some(rec)) = decoder.poll_decode() {
            for b in &rec.blocks {
                if let Some(image) = &b.image {
                    let page = image.restore().unwrap().to_vec();
                    out.push((rec.rmid, b.tag.fork, b.tag.blkno, page));
                }
            }
        }
    }
    out
}

/// (line pointer, its bytes) of every item with storage.
fn items_of(page: &[u8]) -> Vec<(ItemId, Vec<u8>)> {
    (1..=max_offset(page))
        .map(|o| item_id(page, o).unwrap())
        .filter(|id| id.has_storage())
        .map(|id| (id, page[id.off as usize..id.off as usize + id.len as usize].to_vec()))
        .collect()
}

#[test]
fn invariants_hold_on_every_real_image_and_compaction_keeps_items() {
    let images = real_images();
    eprintln!("real images: {}", images.len());
    let mut counts = [0usize; 3]; // line-pointer pages, heap repaired, btree multi-deleted
    for (rmid, fork, blkno, page) in &images {
        check_header(page).unwrap_or_else(|e| panic!("rmgr {rmid} block {blkno}: {e}"));
        if !LINE_POINTER_RMGRS.contains(rmid) {
            continue;
        }
        check_invariants(page).unwrap_or_else(|e| panic!("rmgr {rmid} block {blkno}: {e}"));
        counts[0] += 1;
        let is_new = crate::page::page_is_new(page);
        if *fork == 0 && !is_new && [rmgr_id::HEAP, rmgr_id::HEAP2].contains(rmid) {
            check_repair(page);
            counts[1] += 1;
        }
        if *fork == 0 && !is_new && *rmid == rmgr_id::BTREE && *blkno != 0 && max_offset(page) >= 4
        {
            check_multi_delete(page);
            counts[2] += 1;
        }
    }
    eprintln!(
        "real images: {} checked, {} heap repaired, {} btree multi-deleted",
        counts[0], counts[1], counts[2]
    );
    assert!(counts[0] > 2000 && counts[1] > 500 && counts[2] > 50, "{counts:?}");
}

/// `repair_fragmentation` of a real heap page keeps every line pointer's
/// flags and length and every item's bytes, packed from `pd_special` down
/// in line-pointer order.
fn check_repair(page: &[u8]) {
    let before = items_of(page);
    let mut repaired = page.to_vec();
    repair_fragmentation(&mut repaired).unwrap();
    check_invariants(&repaired).unwrap();
    let after = items_of(&repaired);
    assert_eq!(before.len(), after.len());
    let mut at = hdr(page).special as usize;
    for ((b, bytes_b), (a, bytes_a)) in before.iter().zip(&after) {
        assert_eq!((b.flags, b.len), (a.flags, a.len));
        assert_eq!(bytes_b, bytes_a);
        at -= maxalign(a.len as usize);
        assert_eq!(a.off as usize, at);
    }
    assert_eq!(hdr(&repaired).upper as usize, at);
    // A real page is already packed, so a second repair changes nothing.
    let mut again = repaired.clone();
    repair_fragmentation(&mut again).unwrap();
    assert!(again == repaired, "a second repair changed the page");
}

/// Deleting the first, a middle and the last item of a real btree page
/// keeps the others' bytes in order; overwriting an item with itself
/// changes nothing.
fn check_multi_delete(page: &[u8]) {
    let n = max_offset(page);
    let mut same = page.to_vec();
    let mid = n / 2;
    let mid_bytes = item(page, mid).unwrap().to_vec();
    index_tuple_overwrite(&mut same, mid, &mid_bytes).unwrap();
    assert!(same == page, "overwriting an item with itself changed the page");
    let before = items_of(page);
    let mut deleted = page.to_vec();
    index_multi_delete(&mut deleted, &[1, mid, n]).unwrap();
    check_invariants(&deleted).unwrap();
    let after = items_of(&deleted);
    let kept: Vec<_> = (1..=n).filter(|o| ![1, mid, n].contains(o)).collect();
    assert_eq!(after.len(), kept.len());
    for (o, (a, bytes_a)) in kept.iter().zip(&after) {
        let (b, bytes_b) = &before[*o as usize - 1];
        assert_eq!((b.flags, b.len, bytes_b), (a.flags, a.len, bytes_a));
    }
}
