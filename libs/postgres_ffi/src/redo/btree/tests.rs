//! Btree redo per record kind on hand-built pages, with the exact pages
//! (items, line pointers, header bounds, special space, metapage bytes)
//! PostgreSQL's redo routines produce.

use bytes::Bytes;
use utils::lsn::Lsn;

use super::page::*;
use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::{apply, bufpage, BlockRef, Fault, RedoRecord};
use crate::wal::{rmgr_id, BlockTag};
use crate::PgMajorVersion;

fn tag(blkno: u32) -> BlockTag {
    BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16384, fork: 0, blkno }
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
        rmid: rmgr_id::BTREE,
        info,
        xid: 700,
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

fn run(page: &mut [u8], rec: &RedoRecord, version: PgMajorVersion) -> Result<(), Fault> {
    let blkno = rec.target_block().unwrap().tag.blkno;
    apply(page, tag(blkno), Lsn(0x1_0000_0028), rec, version).map_err(|e| e.fault)
}

/// An int4 index tuple: TID (blk, off), t_info 16, the key, padding.
fn tuple(blk: u32, off: u16, key: u32) -> Vec<u8> {
    let mut t = vec![0u8; 16];
    set_tid_block(&mut t, blk);
    t[4..6].copy_from_slice(&off.to_le_bytes());
    t[6..8].copy_from_slice(&16u16.to_le_bytes());
    t[8..12].copy_from_slice(&key.to_le_bytes());
    t
}

fn tids(list: &[(u32, u16)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(blk, off) in list {
        out.extend_from_slice(&((blk >> 16) as u16).to_le_bytes());
        out.extend_from_slice(&(blk as u16).to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
    }
    out
}

/// A posting list tuple of key `key` with `list` as TIDs.
fn posting_tuple(key: u32, list: &[(u32, u16)]) -> Vec<u8> {
    form_posting(&tuple(0, 0, key), &tids(list)).unwrap()
}

fn btree_page(opaque: Opaque, items: &[Vec<u8>]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, opaque).unwrap();
    for (i, item) in items.iter().enumerate() {
        bufpage::add_item(&mut page, item, i as u16 + 1, false, false).unwrap();
    }
    page
}

fn leaf(prev: u32, next: u32) -> Opaque {
    Opaque { prev, next, level: 0, flags: BTP_LEAF, cycleid: 0 }
}

fn items(page: &[u8]) -> Vec<Vec<u8>> {
    (1..=bufpage::max_offset(page)).map(|o| bufpage::item(page, o).unwrap().to_vec()).collect()
}

fn header(page: &[u8]) -> PageHeader {
    PageHeader::decode(page)
}

/// The page PostgreSQL would build by adding `items` in order to a fresh
/// page with `opaque` (what every rebuilt page must equal, byte for byte,
/// apart from the LSN).
fn expect_page(page: &[u8], opaque: Opaque, items: &[Vec<u8>]) {
    let mut expected = btree_page(opaque, items);
    let mut ours = page.to_vec();
    for p in [&mut expected, &mut ours] {
        p[0..8].fill(0);
    }
    expect_items(page, opaque, items);
    let first = ours.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first, None, "first differing byte");
}

/// The special space and the items in item order (pages changed in place).
fn expect_items(page: &[u8], opaque: Opaque, items: &[Vec<u8>]) {
    assert_eq!(Opaque::read(page).unwrap(), opaque);
    assert_eq!(self::items(page), items);
}

#[test]
fn insert_leaf_shifts_later_items() {
    let mut page = btree_page(leaf(0, 0), &[tuple(1, 1, 10), tuple(1, 3, 30)]);
    let rec = record(0x00, 0, &[(0, 3, false)], &tuple(1, 2, 20), &2u16.to_le_bytes());
    run(&mut page, &rec, PgMajorVersion::V15).unwrap();
    assert_eq!(items(&page), [tuple(1, 1, 10), tuple(1, 2, 20), tuple(1, 3, 30)]);
    let h = header(&page);
    assert_eq!((h.lower, h.upper, h.lsn), (24 + 3 * 4, 8176 - 48, 0x1_0000_0028));
    // The new item is stored lowest, its line pointer second.
    assert_eq!(bufpage::item_id(&page, 2).unwrap().off, 8176 - 48);
}

#[test]
fn insert_post_swaps_the_posting_list_tid() {
    let opost = posting_tuple(7, &[(1, 1), (1, 3), (1, 5)]);
    let mut page = btree_page(leaf(0, 0), &[opost.clone(), tuple(2, 1, 9)]);
    let mut data = 1u16.to_le_bytes().to_vec();
    data.extend(tuple(1, 2, 7));
    let rec = record(0x50, 0, &[(0, 3, false)], &data, &2u16.to_le_bytes());
    run(&mut page, &rec, PgMajorVersion::V16).unwrap();
    let got = items(&page);
    assert_eq!(got[0], posting_tuple(7, &[(1, 1), (1, 2), (1, 3)]));
    assert_eq!(got[1], tuple(1, 5, 7), "the new item takes the old maximum TID");
    assert_eq!(got[2], tuple(2, 1, 9));
    // Out of range posting offsets are refused.
    let mut bad = 3u16.to_le_bytes().to_vec();
    bad.extend(tuple(1, 2, 7));
    let rec = record(0x50, 0, &[(0, 3, false)], &bad, &2u16.to_le_bytes());
    assert!(matches!(run(&mut page.clone(), &rec, PgMajorVersion::V16), Err(Fault::Page(_))));
}

fn metadata(root: u32, level: u32) -> Vec<u8> {
    let mut d = Vec::new();
    for v in [4u32, root, level, root, level, 3] {
        d.extend_from_slice(&v.to_le_bytes());
    }
    d.extend_from_slice(&[1, 0, 0, 0]);
    d
}

fn check_meta(page: &[u8], root: u32, level: u32) {
    let h = header(page);
    assert_eq!((h.lower, h.upper, h.special, h.pagesize_version), (72, 8176, 8176, 8196));
    let words: Vec<u32> = (0..7).map(|i| u32_at(page, 24 + 4 * i).unwrap()).collect();
    assert_eq!(words, [BTREE_MAGIC, 4, root, level, root, level, 3]);
    assert_eq!(u64_at(page, 56).unwrap(), (-1.0f64).to_bits());
    assert_eq!(page[64], 1);
    assert_eq!(Opaque::read(page).unwrap(), Opaque { flags: BTP_META, ..Opaque::default() });
    assert!(page[65..8176].iter().all(|&b| b == 0));
}

#[test]
fn insert_upper_and_meta_blocks() {
    let blocks = [(0, 3, false), (1, 5, false), (2, 0, false)];
    let main = 1u16.to_le_bytes();
    let internal = Opaque { prev: 0, next: 0, level: 1, flags: BTP_ROOT, cycleid: 0 };
    let mut parent = btree_page(internal, &[tuple(5, 0, 0)]);
    run(&mut parent, &record(0x20, 0, &blocks, &tuple(6, 0, 50), &main), PgMajorVersion::V17)
        .unwrap();
    assert_eq!(items(&parent), [tuple(6, 0, 50), tuple(5, 0, 0)]);
    let child_opaque =
        Opaque { prev: 0, next: 6, level: 0, flags: BTP_LEAF | BTP_INCOMPLETE_SPLIT, cycleid: 4 };
    let mut child = btree_page(child_opaque, &[tuple(1, 1, 1)]);
    run(&mut child, &record(0x20, 1, &blocks, &[], &main), PgMajorVersion::V17).unwrap();
    assert_eq!(Opaque::read(&child).unwrap(), Opaque { flags: BTP_LEAF, ..child_opaque });
    let mut meta = vec![0xAAu8; BLCKSZ];
    run(&mut meta, &record(0x20, 2, &blocks, &metadata(3, 1), &main), PgMajorVersion::V17).unwrap();
    check_meta(&meta, 3, 1);
    // INSERT_UPPER has no metapage block.
    assert!(run(&mut meta, &record(0x10, 2, &blocks, &metadata(3, 1), &main), PgMajorVersion::V17)
        .is_err());
}

fn split_main(level: u32, firstright: u16, newitemoff: u16, postingoff: u16) -> Vec<u8> {
    let mut m = level.to_le_bytes().to_vec();
    for v in [firstright, newitemoff, postingoff] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m
}

#[test]
fn split_left_right_and_sibling() {
    // Leaf 3 (prev 2, next 9) splits into 3 and the new 7; 9 is the right
    // page's right sibling. Items: hikey 90, then 10, 20, 30, 40.
    let opaque =
        Opaque { prev: 2, next: 9, level: 0, flags: BTP_LEAF | BTP_HAS_GARBAGE, cycleid: 12 };
    let orig =
        [tuple(0, 0, 90), tuple(1, 1, 10), tuple(1, 2, 20), tuple(1, 3, 30), tuple(1, 4, 40)];
    let mut page = btree_page(opaque, &orig);
    let blocks = [(0, 3, false), (1, 7, true), (2, 9, false)];
    // New item 15 goes left at offset 3; the first right item is 4 (30).
    let mut data = tuple(1, 9, 15);
    data.extend(tuple(0, 0, 30));
    let main = split_main(0, 4, 3, 0);
    run(&mut page, &record(0x30, 0, &blocks, &data, &main), PgMajorVersion::V18).unwrap();
    let left_opaque =
        Opaque { prev: 2, next: 7, level: 0, flags: BTP_INCOMPLETE_SPLIT | BTP_LEAF, cycleid: 0 };
    expect_page(
        &page,
        left_opaque,
        &[tuple(0, 0, 30), tuple(1, 1, 10), tuple(1, 9, 15), tuple(1, 2, 20)],
    );

    // The right page from its upper part: highest item first.
    let mut right_data = tuple(1, 4, 40);
    right_data.extend(tuple(1, 3, 30));
    right_data = [tuple(0, 0, 90), right_data].concat();
    let mut right = vec![0x55u8; BLCKSZ];
    run(&mut right, &record(0x30, 1, &blocks, &right_data, &main), PgMajorVersion::V18).unwrap();
    expect_page(&right, leaf(3, 9), &[tuple(1, 3, 30), tuple(1, 4, 40), tuple(0, 0, 90)]);

    let mut sib = btree_page(leaf(3, 0), &[tuple(2, 2, 100)]);
    run(&mut sib, &record(0x30, 2, &blocks, &[], &main), PgMajorVersion::V18).unwrap();
    assert_eq!(Opaque::read(&sib).unwrap(), leaf(7, 0));
}

#[test]
fn split_right_with_posting_split_on_the_left() {
    // Rightmost leaf: 10, posting(20: (1,1) (1,3) (1,5)), 30. The new item
    // 20@(1,2) splits the posting list; it goes right (SPLIT_R) at offset 3.
    let orig = [tuple(1, 0, 10), posting_tuple(20, &[(1, 1), (1, 3), (1, 5)]), tuple(3, 1, 30)];
    let mut page = btree_page(leaf(0, 0), &orig);
    let blocks = [(0, 3, false), (1, 8, true)];
    let mut data = tuple(1, 2, 20);
    data.extend(tuple(0, 0, 20));
    run(&mut page, &record(0x40, 0, &blocks, &data, &split_main(0, 3, 3, 1)), PgMajorVersion::V15)
        .unwrap();
    let left_opaque =
        Opaque { prev: 0, next: 8, level: 0, flags: BTP_INCOMPLETE_SPLIT | BTP_LEAF, cycleid: 0 };
    let np = posting_tuple(20, &[(1, 1), (1, 2), (1, 3)]);
    expect_page(&page, left_opaque, &[tuple(0, 0, 20), tuple(1, 0, 10), np]);
}

#[test]
fn internal_split_clears_the_childs_incomplete_split() {
    let blocks = [(0, 3, false), (1, 8, true), (3, 4, false)];
    let child_opaque =
        Opaque { prev: 0, next: 11, level: 0, flags: BTP_LEAF | BTP_INCOMPLETE_SPLIT, cycleid: 0 };
    let mut child = btree_page(child_opaque, &[tuple(1, 1, 1)]);
    run(&mut child, &record(0x40, 3, &blocks, &[], &split_main(1, 2, 2, 0)), PgMajorVersion::V15)
        .unwrap();
    assert_eq!(Opaque::read(&child).unwrap(), leaf(0, 11));
    // A leaf split has no child block.
    assert!(run(
        &mut child,
        &record(0x40, 3, &blocks, &[], &split_main(0, 2, 2, 0)),
        PgMajorVersion::V15
    )
    .is_err());
}

#[test]
fn dedup_merges_intervals() {
    let opaque = Opaque { flags: BTP_LEAF | BTP_HAS_GARBAGE, ..leaf(0, 0) };
    let orig = [
        tuple(1, 1, 5),
        tuple(1, 1, 7),
        tuple(1, 4, 7),
        posting_tuple(7, &[(2, 1), (2, 2)]),
        tuple(3, 3, 8),
    ];
    let mut page = btree_page(opaque, &orig);
    let mut intervals = Vec::new();
    for v in [2u16, 3] {
        intervals.extend_from_slice(&v.to_le_bytes());
    }
    run(
        &mut page,
        &record(0x60, 0, &[(0, 3, false)], &intervals, &1u16.to_le_bytes()),
        PgMajorVersion::V18,
    )
    .unwrap();
    let merged = posting_tuple(7, &[(1, 1), (1, 4), (2, 1), (2, 2)]);
    assert_eq!(merged.len(), 40);
    assert_eq!(&merged[0..8], &[0, 0, 16, 0, 4, 0x20, 40, 0x20], "key size 16, 4 TIDs, posting");
    expect_page(&page, leaf(0, 0), &[tuple(1, 1, 5), merged, tuple(3, 3, 8)]);
    // An interval that does not match the page is refused.
    let mut page = btree_page(opaque, &orig);
    let rec = record(0x60, 0, &[(0, 3, false)], &intervals, &2u16.to_le_bytes());
    assert!(run(&mut page, &rec, PgMajorVersion::V18).is_err());
}

/// VACUUM/DELETE block data: deleted offsets, updated offsets, updates.
fn deletion_data(deleted: &[u16], updates: &[(u16, &[u16])]) -> Vec<u8> {
    let mut d: Vec<u8> = deleted.iter().flat_map(|o| o.to_le_bytes()).collect();
    d.extend(updates.iter().flat_map(|u| u.0.to_le_bytes()));
    for (_, positions) in updates {
        d.extend_from_slice(&(positions.len() as u16).to_le_bytes());
        d.extend(positions.iter().flat_map(|p| p.to_le_bytes()));
    }
    d
}

fn deletion_page() -> Vec<u8> {
    let opaque = Opaque { flags: BTP_LEAF | BTP_HAS_GARBAGE, cycleid: 9, ..leaf(0, 0) };
    let orig = [
        tuple(1, 1, 5),
        posting_tuple(7, &[(1, 2), (1, 3), (1, 4)]),
        tuple(1, 5, 8),
        posting_tuple(9, &[(2, 1), (2, 2)]),
    ];
    btree_page(opaque, &orig)
}

#[test]
fn vacuum_updates_posting_lists_then_deletes() {
    let data = deletion_data(&[1, 3], &[(2, &[0, 2]), (4, &[1])]);
    let mut main = 2u16.to_le_bytes().to_vec();
    main.extend_from_slice(&2u16.to_le_bytes());
    for (version, cycleid) in [(PgMajorVersion::V15, 9), (PgMajorVersion::V18, 0)] {
        let mut page = deletion_page();
        run(&mut page, &record(0xC0, 0, &[(0, 3, false)], &data, &main), version).unwrap();
        expect_items(&page, Opaque { cycleid, ..leaf(0, 0) }, &[tuple(1, 3, 7), tuple(2, 1, 9)]);
    }
}

#[test]
fn delete_keeps_the_cycle_id() {
    let data = deletion_data(&[3], &[(2, &[1])]);
    let mut main = 777u32.to_le_bytes().to_vec();
    main.extend_from_slice(&1u16.to_le_bytes());
    main.extend_from_slice(&1u16.to_le_bytes());
    main.push(0);
    let mut page = deletion_page();
    run(&mut page, &record(0x70, 0, &[(0, 3, false)], &data, &main), PgMajorVersion::V18).unwrap();
    let posting = posting_tuple(7, &[(1, 2), (1, 4)]);
    expect_items(
        &page,
        Opaque { cycleid: 9, ..leaf(0, 0) },
        &[tuple(1, 1, 5), posting, posting_tuple(9, &[(2, 1), (2, 2)])],
    );
    // Deleting every TID of a posting list is not an update.
    let data = deletion_data(&[], &[(2, &[0, 1, 2])]);
    let main = [9, 0, 0, 0, 0, 0, 1, 0, 0];
    let rec = record(0x70, 0, &[(0, 3, false)], &data, &main);
    assert!(run(&mut deletion_page(), &rec, PgMajorVersion::V18).is_err());
}

#[test]
fn mark_page_halfdead_rebuilds_the_leaf_and_fixes_the_parent() {
    let mut main = 2u16.to_le_bytes().to_vec();
    main.extend_from_slice(&[0, 0]);
    for v in [6u32, 5, 8, 4] {
        main.extend_from_slice(&v.to_le_bytes());
    }
    let blocks = [(0, 6, true), (1, 4, false)];
    let mut leafpage = vec![0x77u8; BLCKSZ];
    run(&mut leafpage, &record(0xB0, 0, &blocks, &[], &main), PgMajorVersion::V16).unwrap();
    let dummy = vec![0, 0, 4, 0, 0, 0, 8, 0x20];
    expect_page(
        &leafpage,
        Opaque { prev: 5, next: 8, level: 0, flags: BTP_HALF_DEAD | BTP_LEAF, cycleid: 0 },
        &[dummy],
    );

    let internal = Opaque { prev: 0, next: 0, level: 1, flags: BTP_ROOT, cycleid: 0 };
    let mut parent = btree_page(internal, &[tuple(5, 0, 0), tuple(6, 0, 60), tuple(8, 0, 80)]);
    run(&mut parent, &record(0xB0, 1, &blocks, &[], &main), PgMajorVersion::V16).unwrap();
    // The downlink at poffset now points to the next one's child, which goes.
    let mut moved = tuple(8, 0, 60);
    moved[4..6].copy_from_slice(&0u16.to_le_bytes());
    assert_eq!(items(&parent), [tuple(5, 0, 0), moved]);
}

fn unlink_main(leftsib: u32, rightsib: u32, level: u32) -> Vec<u8> {
    let mut m = Vec::new();
    for v in [leftsib, rightsib, level, 0] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m.extend_from_slice(&0x1_0000_0321u64.to_le_bytes());
    for v in [12u32, 14, 13] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m
}

#[test]
fn unlink_page_rebuilds_target_and_leaf_and_fixes_siblings() {
    let main = unlink_main(5, 9, 1);
    let blocks = [(0, 7, true), (1, 5, false), (2, 9, false), (3, 13, true), (4, 0, true)];
    let mut target = vec![0x11u8; BLCKSZ];
    run(&mut target, &record(0x90, 0, &blocks, &[], &main), PgMajorVersion::V18).unwrap();
    let h = header(&target);
    assert_eq!((h.lower, h.upper, h.special), (32, 8176, 8176));
    assert_eq!(u64_at(&target, 24).unwrap(), 0x1_0000_0321);
    let deleted =
        Opaque { prev: 5, next: 9, level: 1, flags: BTP_DELETED | BTP_HAS_FULLXID, cycleid: 0 };
    assert_eq!(Opaque::read(&target).unwrap(), deleted);
    assert!(target[32..8176].iter().all(|&b| b == 0));

    let mut left = btree_page(Opaque { level: 1, ..leaf(2, 7) }, &[tuple(1, 0, 1)]);
    run(&mut left, &record(0x90, 1, &blocks, &[], &main), PgMajorVersion::V18).unwrap();
    assert_eq!(Opaque::read(&left).unwrap(), Opaque { level: 1, ..leaf(2, 9) });
    let mut right = btree_page(Opaque { level: 1, ..leaf(7, 0) }, &[tuple(1, 0, 1)]);
    run(&mut right, &record(0x90, 2, &blocks, &[], &main), PgMajorVersion::V18).unwrap();
    assert_eq!(Opaque::read(&right).unwrap(), Opaque { level: 1, ..leaf(5, 0) });

    let mut leafpage = vec![0u8; BLCKSZ];
    run(&mut leafpage, &record(0x90, 3, &blocks, &[], &main), PgMajorVersion::V18).unwrap();
    let halfdead =
        Opaque { prev: 12, next: 14, level: 0, flags: BTP_HALF_DEAD | BTP_LEAF, cycleid: 0 };
    expect_page(&leafpage, halfdead, &[vec![0, 0, 13, 0, 0, 0, 8, 0x20]]);

    let mut meta = vec![0u8; BLCKSZ];
    run(&mut meta, &record(0x90, 4, &blocks, &metadata(9, 1), &main), PgMajorVersion::V18).unwrap();
    check_meta(&meta, 9, 1);
    // Plain UNLINK_PAGE has no metapage; a leaf target gets BTP_LEAF.
    assert!(run(&mut meta, &record(0x80, 4, &blocks, &metadata(9, 1), &main), PgMajorVersion::V18)
        .is_err());
    let mut target = vec![0u8; BLCKSZ];
    run(&mut target, &record(0x80, 0, &blocks, &[], &unlink_main(0, 9, 0)), PgMajorVersion::V15)
        .unwrap();
    assert_eq!(Opaque::read(&target).unwrap().flags, BTP_DELETED | BTP_HAS_FULLXID | BTP_LEAF);
}

#[test]
fn newroot_and_meta_cleanup() {
    let mut main = 3u32.to_le_bytes().to_vec();
    main.extend_from_slice(&1u32.to_le_bytes());
    let blocks = [(0, 3, true), (1, 1, false), (2, 0, true)];
    // Root data: the upper part of the root, highest item first.
    let data = [tuple(2, 0, 50), tuple(1, 0, 0)[..8].to_vec()].concat();
    let mut root = vec![0u8; BLCKSZ];
    let short = run(&mut root, &record(0xA0, 0, &blocks, &data, &main), PgMajorVersion::V17);
    assert!(matches!(short, Err(Fault::Malformed(_))), "a tuple longer than the data is refused");
    let opaque = Opaque { prev: 0, next: 0, level: 1, flags: BTP_ROOT, cycleid: 0 };
    // The 8-byte minus-infinity item is restored as 8 bytes.
    let minus_inf = {
        let mut t = tuple(1, 0, 0);
        t[6..8].copy_from_slice(&8u16.to_le_bytes());
        t.truncate(8);
        t
    };
    let data = [tuple(2, 0, 50), minus_inf.clone()].concat();
    run(&mut root, &record(0xA0, 0, &blocks, &data, &main), PgMajorVersion::V17).unwrap();
    expect_page(&root, opaque, &[minus_inf, tuple(2, 0, 50)]);

    let child_opaque = Opaque { flags: BTP_LEAF | BTP_INCOMPLETE_SPLIT, ..leaf(0, 2) };
    let mut child = btree_page(child_opaque, &[tuple(1, 1, 1)]);
    run(&mut child, &record(0xA0, 1, &blocks, &[], &main), PgMajorVersion::V17).unwrap();
    assert_eq!(Opaque::read(&child).unwrap(), leaf(0, 2));

    let mut meta = vec![0u8; BLCKSZ];
    run(&mut meta, &record(0xA0, 2, &blocks, &metadata(3, 1), &main), PgMajorVersion::V17).unwrap();
    check_meta(&meta, 3, 1);
    let mut meta = vec![0u8; BLCKSZ];
    run(&mut meta, &record(0xE0, 0, &[(0, 0, true)], &metadata(3, 1), &[]), PgMajorVersion::V15)
        .unwrap();
    check_meta(&meta, 3, 1);

    // A level-0 root is an empty leaf root.
    let mut main0 = 1u32.to_le_bytes().to_vec();
    main0.extend_from_slice(&0u32.to_le_bytes());
    let mut root = vec![0u8; BLCKSZ];
    run(
        &mut root,
        &record(0xA0, 0, &[(0, 1, true), (2, 0, true)], &[], &main0),
        PgMajorVersion::V17,
    )
    .unwrap();
    expect_page(&root, Opaque { flags: BTP_ROOT | BTP_LEAF, ..leaf(0, 0) }, &[]);
}

#[test]
fn malformed_records_are_faults() {
    let mut page = btree_page(leaf(0, 0), &[tuple(1, 1, 10)]);
    // REUSE_PAGE registers no block; no main data; other forks; short metadata.
    assert!(matches!(
        run(&mut page, &record(0xD0, 0, &[(0, 3, false)], &[], &[]), PgMajorVersion::V18),
        Err(Fault::Malformed(_))
    ));
    assert!(matches!(
        run(
            &mut page,
            &record(0x00, 0, &[(0, 3, false)], &tuple(1, 2, 2), &[]),
            PgMajorVersion::V18
        ),
        Err(Fault::Malformed(_))
    ));
    let mut rec = record(0x00, 0, &[(0, 3, false)], &tuple(1, 2, 2), &2u16.to_le_bytes());
    rec.blocks[0].tag.fork = 1;
    let other_fork = BlockTag { fork: 1, ..tag(3) };
    assert!(apply(&mut page, other_fork, Lsn(8), &rec, PgMajorVersion::V18).is_err());
    let mut meta = vec![0u8; BLCKSZ];
    assert!(run(&mut meta, &record(0xE0, 0, &[(0, 0, true)], &[0; 20], &[]), PgMajorVersion::V15)
        .is_err());
    // A split whose left data is cut short.
    let rec =
        record(0x30, 0, &[(0, 3, false), (1, 7, true)], &tuple(1, 9, 15), &split_main(0, 2, 2, 0));
    assert!(run(&mut page, &rec, PgMajorVersion::V18).is_err());
}

#[test]
#[ignore = "apply() runs bufpage::check_invariants on every page; deleted btree pages and \
            metapages need bufpage::check_header (mod.rs, the seam's owner)"]
fn deleted_page_and_metapage_contents_are_not_line_pointers() {
    // A safexid or a root block number that would read as a line pointer
    // with storage (lp_flags 1, lp_len > 0) must not trip the invariant
    // check: below pd_lower these pages hold no line pointers.
    let mut main = unlink_main(5, 9, 0);
    main[16..24].copy_from_slice(&0x0003_8000u64.to_le_bytes());
    let blocks = [(0, 7, true), (2, 9, false)];
    let mut target = vec![0u8; BLCKSZ];
    run(&mut target, &record(0x80, 0, &blocks, &[], &main), PgMajorVersion::V18).unwrap();
    assert_eq!(u64_at(&target, 24).unwrap(), 0x0003_8000);
    let mut meta = vec![0u8; BLCKSZ];
    let rec = record(0xE0, 0, &[(0, 0, true)], &metadata(0x0003_8000, 2), &[]);
    run(&mut meta, &rec, PgMajorVersion::V18).unwrap();
    check_meta(&meta, 0x0003_8000, 2);
}

#[test]
fn posting_lists_that_do_not_fit_their_tuple_are_faults() {
    // t_info says 16 bytes, the posting list claims 3 TIDs after 16.
    let mut bogus = posting_tuple(7, &[(1, 1), (1, 3), (1, 5)]);
    bogus[6..8].copy_from_slice(&(16u16 | 0x2000).to_le_bytes());
    let mut page = btree_page(leaf(0, 0), &[bogus]);
    let mut data = 1u16.to_le_bytes().to_vec();
    data.extend(tuple(1, 2, 7));
    let rec = record(0x50, 0, &[(0, 3, false)], &data, &2u16.to_le_bytes());
    assert!(matches!(run(&mut page, &rec, PgMajorVersion::V16), Err(Fault::Page(_))));
    assert!(form_posting(&tuple(0, 0, 1), &[0; 7]).is_err());
}
