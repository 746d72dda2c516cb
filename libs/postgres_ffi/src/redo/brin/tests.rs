//! BRIN redo on hand-made records: what the real-WAL fixtures cannot reach
//! (malformed input, wrong blocks and forks, pages of the wrong type, the
//! revmap entry of a range past the first revmap page), with the exact
//! bytes PostgreSQL's redo writes.

use bytes::Bytes;
use utils::lsn::Lsn;

use super::page::*;
use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::{apply, bufpage, BlockRef, Fault, RedoRecord};
use crate::wal::{rmgr_id, BlockTag};
use crate::PgMajorVersion;

const V: PgMajorVersion = PgMajorVersion::V17;

fn tag(blkno: u32) -> BlockTag {
    BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16400, fork: 0, blkno }
}

/// A record redoing block `target`; `blocks` are (id, block number, will_init).
fn record(
    info: u8,
    target: u8,
    blocks: &[(u8, u32, bool)],
    data: &[u8],
    main: &[u8],
) -> RedoRecord {
    RedoRecord {
        rmid: rmgr_id::BRIN,
        info,
        xid: 900,
        target,
        blocks: blocks
            .iter()
            .map(|&(id, blkno, will_init)| BlockRef {
                id,
                tag: tag(blkno),
                will_init,
                has_image: false,
            })
            .collect(),
        block_data: Bytes::copy_from_slice(data),
        main_data: Bytes::copy_from_slice(main),
    }
}

fn run(page: &mut [u8], rec: &RedoRecord) -> Result<(), Fault> {
    let t = rec.target_block().unwrap().tag;
    apply(page, t, Lsn(0x2_0000_0050), rec, V).map_err(|e| e.fault)
}

fn insert_main(heap_blk: u32, pages_per_range: u32, offnum: u16) -> Vec<u8> {
    let mut m = heap_blk.to_le_bytes().to_vec();
    m.extend_from_slice(&pages_per_range.to_le_bytes());
    m.extend_from_slice(&offnum.to_le_bytes());
    m
}

/// A 16-byte summary tuple for heap block `blk`.
fn tuple(blk: u32, fill: u8) -> Vec<u8> {
    let mut t = vec![fill; 16];
    t[0..4].copy_from_slice(&blk.to_le_bytes());
    t
}

fn page_of(page_type: u16) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, page_type);
    page
}

fn revmap_tid(page: &[u8], index: usize) -> [u8; 6] {
    page[24 + 6 * index..30 + 6 * index].try_into().unwrap()
}

#[test]
fn create_index_and_revmap_extend() {
    let mut meta = vec![0u8; BLCKSZ];
    let main = [4, 0, 0, 0, 1, 0];
    run(&mut meta, &record(0x00, 0, &[(0, 0, true)], &[], &main)).unwrap();
    let h = PageHeader::decode(&meta);
    assert_eq!((h.lower, h.upper, h.special), (40, 8184, 8184));
    assert_eq!(&meta[24..40], &[0xFA, 0x9C, 0x10, 0xA8, 1, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(page_type(&meta), Some(BRIN_PAGETYPE_META));
    assert!(!has_line_pointers(&meta));

    let blocks = [(0, 0, false), (1, 1, true)];
    run(&mut meta, &record(0x40, 0, &blocks, &[], &1u32.to_le_bytes())).unwrap();
    assert_eq!(&meta[36..40], &[1, 0, 0, 0]);
    let mut revmap = vec![0xAAu8; BLCKSZ];
    run(&mut revmap, &record(0x40, 1, &blocks, &[], &1u32.to_le_bytes())).unwrap();
    assert_eq!(page_type(&revmap), Some(BRIN_PAGETYPE_REVMAP));
    assert!(revmap[24..8184].iter().all(|&b| b == 0));
    // The logged target must be block 1's block.
    let err = run(&mut revmap, &record(0x40, 1, &blocks, &[], &2u32.to_le_bytes())).unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("another block 1")));
}

#[test]
fn insert_update_and_desummarize() {
    // INSERT+INIT of range 1363 (pages_per_range 1): offset 1 of new page 7,
    // revmap entry 3 of the second revmap page.
    let blocks = [(0, 7, true), (1, 2, false)];
    let rec = |target| record(0x90, target, &blocks, &tuple(1363, 1), &insert_main(1363, 1, 1));
    let mut regular = vec![0u8; BLCKSZ];
    run(&mut regular, &rec(0)).unwrap();
    assert_eq!(bufpage::item(&regular, 1).unwrap(), &tuple(1363, 1)[..]);
    let mut revmap = page_of(BRIN_PAGETYPE_REVMAP);
    run(&mut revmap, &rec(1)).unwrap();
    assert_eq!(revmap_tid(&revmap, 3), [0, 0, 7, 0, 1, 0]);

    // SAMEPAGE_UPDATE overwrites in place.
    let same = record(0x30, 0, &[(0, 7, false)], &tuple(1363, 2), &[1, 0]);
    run(&mut regular, &same).unwrap();
    assert_eq!(bufpage::item(&regular, 1).unwrap(), &tuple(1363, 2)[..]);

    // UPDATE moves the tuple from page 7 (block 2) to page 9 (block 0).
    let mut main = vec![1, 0, 0, 0];
    main.extend(insert_main(1363, 1, 1));
    let blocks = [(0, 9, false), (1, 2, false), (2, 7, false)];
    let mut old = regular.clone();
    run(&mut old, &record(0x20, 2, &blocks, &[], &main)).unwrap();
    assert_eq!(bufpage::max_offset(&old), 0, "the last line pointer is dropped");
    let mut new = page_of(BRIN_PAGETYPE_REGULAR);
    run(&mut new, &record(0x20, 0, &blocks, &tuple(1363, 3), &main)).unwrap();
    run(&mut revmap, &record(0x20, 1, &blocks, &[], &main)).unwrap();
    assert_eq!(revmap_tid(&revmap, 3), [0, 0, 9, 0, 1, 0]);

    // DESUMMARIZE: an invalid TID in the revmap, an unused line pointer.
    let mut main = 1u32.to_le_bytes().to_vec();
    main.extend_from_slice(&1363u32.to_le_bytes());
    main.extend_from_slice(&1u16.to_le_bytes());
    let blocks = [(0, 2, false), (1, 9, false)];
    run(&mut revmap, &record(0x50, 0, &blocks, &[], &main)).unwrap();
    assert_eq!(revmap_tid(&revmap, 3), [0xFF, 0xFF, 0xFF, 0xFF, 0, 0]);
    bufpage::add_item(&mut new, &tuple(1364, 4), 0, false, false).unwrap();
    run(&mut new, &record(0x50, 1, &blocks, &[], &main)).unwrap();
    assert_eq!(bufpage::max_offset(&new), 2);
    assert!(!bufpage::item_id(&new, 1).unwrap().is_used());
}

#[test]
fn insert_refuses_a_used_or_distant_offset() {
    let blocks = [(0, 7, false), (1, 1, false)];
    let mut page = page_of(BRIN_PAGETYPE_REGULAR);
    bufpage::add_item(&mut page, &tuple(0, 1), 0, false, false).unwrap();
    let used = record(0x10, 0, &blocks, &tuple(1, 1), &insert_main(1, 1, 1));
    assert!(
        matches!(run(&mut page, &used), Err(Fault::Page(m)) if m.contains("used line pointer"))
    );
    let far = record(0x10, 0, &blocks, &tuple(1, 1), &insert_main(1, 1, 3));
    assert!(matches!(run(&mut page, &far), Err(Fault::Page(m)) if m.contains("offset 3")));
}

#[test]
fn malformed_records_and_wrong_pages_are_refused() {
    // Short main data.
    let mut page = page_of(BRIN_PAGETYPE_REGULAR);
    let rec = record(0x10, 0, &[(0, 7, false)], &tuple(1, 1), &[0; 9]);
    assert!(matches!(run(&mut page, &rec), Err(Fault::Malformed(m)) if m.contains("9 bytes")));
    // A summary tuple on a revmap page, a revmap entry on a regular page.
    let blocks = [(0, 7, false), (1, 1, false)];
    let mut revmap = page_of(BRIN_PAGETYPE_REVMAP);
    let rec = record(0x10, 0, &blocks, &tuple(1, 1), &insert_main(1, 1, 1));
    assert!(matches!(run(&mut revmap, &rec), Err(Fault::Page(m)) if m.contains("0xf093")));
    let rec = record(0x10, 1, &blocks, &[], &insert_main(1, 1, 1));
    assert!(matches!(run(&mut page, &rec), Err(Fault::Page(m)) if m.contains("0xf092")));
    // Zero pages per range.
    let rec = record(0x10, 1, &blocks, &[], &insert_main(1, 0, 1));
    assert!(
        matches!(run(&mut revmap, &rec), Err(Fault::Malformed(m)) if m.contains("0 pages per range"))
    );
    // The metapage elsewhere than block 0; blocks a kind does not write.
    let mut fresh = vec![0u8; BLCKSZ];
    let rec = record(0x00, 0, &[(0, 3, true)], &[], &[1, 0, 0, 0, 1, 0]);
    assert!(matches!(run(&mut fresh, &rec), Err(Fault::Malformed(m)) if m.contains("block 3")));
    let rec = record(0x30, 1, &[(1, 7, false)], &tuple(1, 1), &[1, 0]);
    assert!(matches!(run(&mut page, &rec), Err(Fault::Malformed(m)) if m.contains("block id 1")));
    let rec = record(0x10, 2, &[(0, 7, false), (2, 8, false)], &[], &insert_main(1, 1, 1));
    assert!(matches!(run(&mut page, &rec), Err(Fault::Malformed(m)) if m.contains("block id 2")));
    // Another fork; an unknown kind.
    let mut rec = record(0x30, 0, &[(0, 7, false)], &tuple(1, 1), &[1, 0]);
    rec.blocks[0].tag.fork = 3;
    assert!(matches!(run(&mut page, &rec), Err(Fault::Malformed(m)) if m.contains("fork 3")));
    let rec = record(0x60, 0, &[(0, 7, false)], &[], &[]);
    assert!(matches!(run(&mut page, &rec), Err(Fault::Unsupported(_))));
}
