//! SP-GiST redo per record kind on hand-built pages: the tuples, dead
//! tuples, chain links, downlinks and counters PostgreSQL's redo routines
//! produce, and the faults for input they cannot apply.

use bytes::Bytes;
use utils::lsn::Lsn;

use super::page::*;
use crate::consts::BLCKSZ;
use crate::redo::{apply, bufpage, BlockRef, Fault, RedoRecord};
use crate::wal::{rmgr_id, BlockTag};
use crate::PgMajorVersion::{self, V15, V16, V17, V18};

const LSN: Lsn = Lsn(0x3_0000_0028);

fn tag(blkno: u32) -> BlockTag {
    BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16500, fork: 0, blkno }
}

/// A record redoing block id `target`; `blocks` are (id, block number, will_init).
fn record(info: u8, target: u8, blocks: &[(u8, u32, bool)], main: &[u8]) -> RedoRecord {
    RedoRecord {
        rmid: rmgr_id::SPGIST,
        info,
        xid: 800,
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
        block_data: Bytes::new(),
        main_data: Bytes::copy_from_slice(main),
    }
}

fn run(page: &mut [u8], rec: &RedoRecord, version: PgMajorVersion) -> Result<(), Fault> {
    let blkno = rec.target_block().unwrap().tag.blkno;
    apply(page, tag(blkno), LSN, rec, version).map_err(|e| e.fault)
}

/// A live leaf tuple of 24 bytes: `next` in its chain, `key` as datum.
fn leaf(next: u16, key: u8) -> Vec<u8> {
    let mut t = vec![key; 24];
    t[0..4].copy_from_slice(&(24u32 << 2).to_le_bytes());
    t[4..6].copy_from_slice(&next.to_le_bytes());
    t[6..12].copy_from_slice(&[0, 0, 0, 9, key, 0]);
    t
}

/// A live inner tuple with `nodes` 16-byte nodes (downlinks `links`) and
/// an 8-byte prefix.
fn inner(links: &[(u32, u16)]) -> Vec<u8> {
    let size = 16 + 16 * links.len();
    let mut t = vec![0u8; size];
    let word = (links.len() as u32) << 3 | 8 << 16;
    t[0..4].copy_from_slice(&word.to_le_bytes());
    t[4..6].copy_from_slice(&(size as u16).to_le_bytes());
    t[8..16].fill(0xAB);
    for (i, &(blk, off)) in links.iter().enumerate() {
        let n = &mut t[16 + 16 * i..32 + 16 * i];
        n[0..2].copy_from_slice(&((blk >> 16) as u16).to_le_bytes());
        n[2..4].copy_from_slice(&(blk as u16).to_le_bytes());
        n[4..6].copy_from_slice(&off.to_le_bytes());
        n[6..8].copy_from_slice(&16u16.to_le_bytes());
        n[8] = b'a' + i as u8;
    }
    t
}

fn spg_page(flags: u16, items: &[Vec<u8>]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, flags).unwrap();
    for (i, item) in items.iter().enumerate() {
        bufpage::add_item(&mut page, item, i as u16 + 1, false, false).unwrap();
    }
    page
}

fn items(page: &[u8]) -> Vec<Vec<u8>> {
    (1..=bufpage::max_offset(page)).map(|o| bufpage::item(page, o).unwrap().to_vec()).collect()
}

fn counts(page: &[u8]) -> (u16, u16) {
    let o = Opaque::read(page).unwrap();
    (o.n_redirection, o.n_placeholder)
}

fn placeholder() -> Vec<u8> {
    dead_tuple(SPGIST_PLACEHOLDER, 0, 0, 0).to_vec()
}

fn with_counts(mut page: Vec<u8>, redirects: u16, placeholders: u16) -> Vec<u8> {
    modify_opaque(&mut page, |o| {
        o.n_redirection = redirects;
        o.n_placeholder = placeholders;
    })
    .unwrap();
    page
}

/// `spgxlogAddLeaf` and its tuple.
fn add_leaf_main(
    new_page: bool,
    nulls: bool,
    off: u16,
    head: u16,
    parent: u16,
    node: u16,
) -> Vec<u8> {
    let mut m = vec![new_page as u8, nulls as u8];
    for v in [off, head, parent, node] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m
}

#[test]
fn add_leaf_on_a_new_nulls_page_and_its_parent() {
    let t = leaf(0, 7);
    let main = [add_leaf_main(true, true, 1, 0, 2, 1), t.clone()].concat();
    let blocks = [(0, 9, true), (1, 4, false)];
    let mut page = vec![0u8; BLCKSZ];
    run(&mut page, &record(0x10, 0, &blocks, &main), V18).unwrap();
    assert_eq!(items(&page), vec![t]);
    assert_eq!(Opaque::read(&page).unwrap().flags, SPGIST_LEAF | SPGIST_NULLS);
    assert_eq!(Opaque::read(&page).unwrap().page_id, SPGIST_PAGE_ID);

    let (a, b) = (inner(&[(1, 1)]), inner(&[(1, 2), (1, 3), (1, 4)]));
    let mut parent = spg_page(0, &[a.clone(), b]);
    run(&mut parent, &record(0x10, 1, &blocks, &main), V18).unwrap();
    assert_eq!(items(&parent), vec![a, inner(&[(1, 2), (9, 1), (1, 4)])]);

    // newPage on a block that is not will_init.
    let err = run(&mut page, &record(0x10, 0, &[(0, 9, false)], &main), V18).unwrap_err();
    assert!(matches!(err, Fault::Malformed(ref m) if m.contains("will_init")), "{err:?}");
}

#[test]
fn add_leaf_chains_replaces_placeholders_and_dead_heads() {
    let (head, other) = (leaf(0, 1), leaf(0, 2));
    let new = leaf(0, 3);
    // Appended, chained after the head at 1.
    let mut page = spg_page(SPGIST_LEAF, &[head.clone(), other.clone()]);
    let main = [add_leaf_main(false, false, 3, 1, 0, 0), new.clone()].concat();
    run(&mut page, &record(0x10, 0, &[(0, 5, false)], &main), V15).unwrap();
    assert_eq!(items(&page), vec![leaf(3, 1), other.clone(), new.clone()]);

    // In place of the placeholder at 2, one placeholder fewer.
    let mut page = with_counts(spg_page(SPGIST_LEAF, &[head.clone(), placeholder()]), 0, 1);
    let main = [add_leaf_main(false, false, 2, 0, 0, 0), new.clone()].concat();
    run(&mut page, &record(0x10, 0, &[(0, 5, false)], &main), V15).unwrap();
    assert_eq!((items(&page), counts(&page)), (vec![head.clone(), new.clone()], (0, 0)));

    // A live tuple is not replaced.
    let mut page = spg_page(SPGIST_LEAF, &[head.clone(), other.clone()]);
    let err = run(&mut page, &record(0x10, 0, &[(0, 5, false)], &main), V15).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("not a placeholder")), "{err:?}");

    // Equal offsets: the dead head at 1 is replaced, nothing chained.
    let dead = dead_tuple(SPGIST_DEAD, 0, 0, 0).to_vec();
    let mut page = spg_page(SPGIST_LEAF, &[dead, other.clone()]);
    let main = [add_leaf_main(false, false, 1, 1, 0, 0), new.clone()].concat();
    run(&mut page, &record(0x10, 0, &[(0, 5, false)], &main), V15).unwrap();
    assert_eq!(items(&page), vec![new, other]);
}

#[test]
fn dead_tuples_are_postgresql_bytes() {
    let r = dead_tuple(SPGIST_REDIRECT, 0x0001_0002, 7, 900);
    assert_eq!(r, [0x41, 0, 0, 0, 0, 0, 1, 0, 2, 0, 7, 0, 0x84, 3, 0, 0]);
    let p = dead_tuple(SPGIST_PLACEHOLDER, 5, 7, 900);
    assert_eq!(p, [0x43, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0]);
}

/// `spgxlogMoveLeafs` header.
fn move_main(
    n_moves: u16,
    new_page: bool,
    replace_dead: bool,
    parent: u16,
    node: u16,
    build: bool,
) -> Vec<u8> {
    let mut m = vec![0u8; 20];
    m[0..2].copy_from_slice(&n_moves.to_le_bytes());
    m[2] = new_page as u8;
    m[3] = replace_dead as u8;
    m[6..8].copy_from_slice(&parent.to_le_bytes());
    m[8..10].copy_from_slice(&node.to_le_bytes());
    m[12..16].copy_from_slice(&900u32.to_le_bytes());
    m[16] = build as u8;
    m
}

fn offs(list: &[u16]) -> Vec<u8> {
    list.iter().flat_map(|o| o.to_le_bytes()).collect()
}

#[test]
fn move_leafs_fills_dest_redirects_source_and_relinks_parent() {
    let src_items: Vec<_> = (1..=4).map(|k| leaf(0, k)).collect();
    let moved = [leaf(2, 3), leaf(0, 2), leaf(1, 9)];
    let tail = [offs(&[3, 2]), offs(&[1, 2, 3]), moved.concat()].concat();
    let blocks = [(0, 4, false), (1, 8, true), (2, 1, false)];
    for build in [false, true] {
        let main = [move_main(2, true, false, 1, 0, build), tail.clone()].concat();
        let mut dest = vec![0u8; BLCKSZ];
        run(&mut dest, &record(0x20, 1, &blocks, &main), V17).unwrap();
        assert_eq!(items(&dest), moved.to_vec());

        let mut src = spg_page(SPGIST_LEAF, &src_items);
        run(&mut src, &record(0x20, 0, &blocks, &main), V17).unwrap();
        // The first listed (3) becomes the redirect to the last new tuple.
        let first = match build {
            false => dead_tuple(SPGIST_REDIRECT, 8, 3, 900).to_vec(),
            true => placeholder(),
        };
        let want = vec![src_items[0].clone(), placeholder(), first, src_items[3].clone()];
        assert_eq!(items(&src), want);
        assert_eq!(counts(&src), if build { (0, 2) } else { (1, 1) });
    }
    let main = [move_main(2, true, false, 1, 0, false), tail].concat();
    let mut parent = spg_page(0, &[inner(&[(4, 3), (4, 1)])]);
    run(&mut parent, &record(0x20, 2, &blocks, &main), V17).unwrap();
    assert_eq!(items(&parent), vec![inner(&[(8, 3), (4, 1)])]);
}

#[test]
fn move_leafs_replacing_a_dead_head_moves_only_the_new_tuple() {
    let dead = dead_tuple(SPGIST_DEAD, 0, 0, 0).to_vec();
    let new = leaf(0, 5);
    let main =
        [move_main(1, false, true, 1, 0, false), offs(&[2]), offs(&[3]), new.clone()].concat();
    let blocks = [(0, 4, false), (1, 8, false), (2, 1, false)];
    let mut dest = spg_page(SPGIST_LEAF, &[leaf(0, 1), leaf(0, 2)]);
    run(&mut dest, &record(0x20, 1, &blocks, &main), V18).unwrap();
    assert_eq!(items(&dest), vec![leaf(0, 1), leaf(0, 2), new]);
    let mut src = spg_page(SPGIST_LEAF, &[leaf(0, 1), dead]);
    run(&mut src, &record(0x20, 0, &blocks, &main), V18).unwrap();
    let redirect = dead_tuple(SPGIST_REDIRECT, 8, 3, 900).to_vec();
    assert_eq!((items(&src), counts(&src)), (vec![leaf(0, 1), redirect], (1, 0)));
}

/// `spgxlogAddNode` header.
fn add_node_main(
    off: u16,
    new_off: u16,
    new_page: bool,
    parent_blk: i8,
    parent: u16,
    build: bool,
) -> Vec<u8> {
    let mut m = vec![0u8; 20];
    m[0..2].copy_from_slice(&off.to_le_bytes());
    m[2..4].copy_from_slice(&new_off.to_le_bytes());
    m[4] = new_page as u8;
    m[5] = parent_blk as u8;
    m[6..8].copy_from_slice(&parent.to_le_bytes());
    m[8..10].copy_from_slice(&1u16.to_le_bytes());
    m[12..16].copy_from_slice(&900u32.to_le_bytes());
    m[16] = build as u8;
    m
}

#[test]
fn add_node_in_place_and_moved() {
    let (a, old) = (inner(&[(3, 1)]), inner(&[(3, 2)]));
    let grown = inner(&[(3, 2), (0xFFFF_FFFF, 0)]);
    // In place: no block 1.
    let mut page = spg_page(0, &[a.clone(), old.clone()]);
    let main = [add_node_main(2, 0, false, -1, 0, false), grown.clone()].concat();
    run(&mut page, &record(0x30, 0, &[(0, 5, false)], &main), V16).unwrap();
    assert_eq!(items(&page), vec![a.clone(), grown.clone()]);

    // Moved to block 6 (new page), the parent on the old page (parentBlk 0).
    let blocks = [(0, 5, false), (1, 6, true)];
    let main = [add_node_main(2, 1, true, 0, 1, false), grown.clone()].concat();
    let mut new = vec![0u8; BLCKSZ];
    run(&mut new, &record(0x30, 1, &blocks, &main), V16).unwrap();
    assert_eq!((items(&new), Opaque::read(&new).unwrap().flags), (vec![grown.clone()], 0));
    let mut page = spg_page(0, &[inner(&[(3, 1), (3, 9)]), old.clone()]);
    run(&mut page, &record(0x30, 0, &blocks, &main), V16).unwrap();
    let redirect = dead_tuple(SPGIST_REDIRECT, 6, 1, 900).to_vec();
    assert_eq!(items(&page), vec![inner(&[(3, 1), (6, 1)]), redirect]);
    assert_eq!(counts(&page), (1, 0));

    // The parent on a third page (parentBlk 2); building leaves a placeholder.
    let blocks = [(0, 5, false), (1, 6, false), (2, 7, false)];
    let main = [add_node_main(2, 1, false, 2, 1, true), grown].concat();
    let mut parent = spg_page(0, &[inner(&[(3, 1), (5, 2)])]);
    run(&mut parent, &record(0x30, 2, &blocks, &main), V16).unwrap();
    assert_eq!(items(&parent), vec![inner(&[(3, 1), (6, 1)])]);
    let mut page = spg_page(0, &[a.clone(), old]);
    run(&mut page, &record(0x30, 0, &blocks, &main), V16).unwrap();
    assert_eq!((items(&page), counts(&page)), (vec![a, placeholder()], (0, 1)));
}

#[test]
fn split_tuple_on_one_or_two_pages() {
    let (old, prefix, postfix) = (inner(&[(3, 1)]), inner(&[(0, 0)]), inner(&[(3, 1), (4, 4)]));
    let head = |same: bool, new_page: bool| {
        let mut m = vec![0u8; 6];
        m[0..2].copy_from_slice(&1u16.to_le_bytes());
        m[2..4].copy_from_slice(&(if same { 2u16 } else { 1 }).to_le_bytes());
        m[4] = new_page as u8;
        m[5] = same as u8;
        [m, prefix.clone(), postfix.clone()].concat()
    };
    let mut page = spg_page(0, std::slice::from_ref(&old));
    run(&mut page, &record(0x40, 0, &[(0, 5, false)], &head(true, false)), V18).unwrap();
    assert_eq!(items(&page), vec![prefix.clone(), postfix.clone()]);

    let blocks = [(0, 5, false), (1, 11, true)];
    let mut page = spg_page(0, std::slice::from_ref(&old));
    run(&mut page, &record(0x40, 0, &blocks, &head(false, true)), V18).unwrap();
    assert_eq!(items(&page), vec![prefix.clone()]);
    let mut other = vec![0u8; BLCKSZ];
    run(&mut other, &record(0x40, 1, &blocks, &head(false, true)), V18).unwrap();
    assert_eq!(items(&other), vec![postfix.clone()]);
    // With the postfix on the same page there is no block 1.
    let err = run(&mut other, &record(0x40, 1, &blocks, &head(true, false)), V18).unwrap_err();
    assert!(matches!(err, Fault::Malformed(ref m) if m.contains("block id 1")), "{err:?}");
}

/// `spgxlogPickSplit` deleting leaves 3 and 2 of the source: new leaf a
/// stays (at `src_off`), b goes to the destination (offset 1); the inner
/// tuple goes to offset 1 of block 2, a new nulls page; the parent link is
/// node 0 at offset 1.
fn pick_split_main(
    root: bool,
    init_src: bool,
    inner_is_parent: bool,
    src_off: u16,
    leaves: &[Vec<u8>],
) -> Vec<u8> {
    let mut m = vec![0u8; 28];
    m[0] = root as u8;
    m[2..4].copy_from_slice(&2u16.to_le_bytes());
    m[4..6].copy_from_slice(&2u16.to_le_bytes());
    m[6] = init_src as u8;
    m[7] = 1;
    m[8..10].copy_from_slice(&1u16.to_le_bytes());
    m[10] = 1;
    m[11] = 1;
    m[12] = inner_is_parent as u8;
    m[14..16].copy_from_slice(&1u16.to_le_bytes());
    m[16..18].copy_from_slice(&0u16.to_le_bytes());
    m[20..24].copy_from_slice(&900u32.to_le_bytes());
    let inserts = offs(&[src_off, 1]);
    [m, offs(&[3, 2]), inserts, vec![0, 1], inner(&[(4, 2), (8, 1)]), leaves.concat()].concat()
}

#[test]
fn pick_split_source_dest_inner_and_parent() {
    let (a, b) = (leaf(0, 0xA), leaf(0, 0xB));
    let main = pick_split_main(false, false, false, 2, &[a.clone(), b.clone()]);
    let blocks = [(0, 4, false), (1, 8, true), (2, 12, true), (3, 1, false)];
    let src_items: Vec<_> = (1..=3).map(|k| leaf(0, k)).collect();
    let mut src = spg_page(SPGIST_LEAF, &src_items);
    run(&mut src, &record(0x50, 0, &blocks, &main), V18).unwrap();
    let redirect = dead_tuple(SPGIST_REDIRECT, 12, 1, 900).to_vec();
    assert_eq!(items(&src), vec![src_items[0].clone(), a, redirect]);
    assert_eq!(counts(&src), (1, 0));

    let mut dest = vec![0u8; BLCKSZ];
    run(&mut dest, &record(0x50, 1, &blocks, &main), V18).unwrap();
    assert_eq!(items(&dest), vec![b]);
    assert_eq!(Opaque::read(&dest).unwrap().flags, SPGIST_LEAF | SPGIST_NULLS);

    let mut inner_page = vec![0u8; BLCKSZ];
    run(&mut inner_page, &record(0x50, 2, &blocks, &main), V18).unwrap();
    assert_eq!(items(&inner_page), vec![inner(&[(4, 2), (8, 1)])]);
    assert_eq!(Opaque::read(&inner_page).unwrap().flags, SPGIST_NULLS);

    let mut parent = spg_page(0, &[inner(&[(4, 3)])]);
    run(&mut parent, &record(0x50, 3, &blocks, &main), V18).unwrap();
    assert_eq!(items(&parent), vec![inner(&[(12, 1)])]);

    // A root split registers no source page.
    let main = pick_split_main(true, false, false, 2, &[leaf(0, 1), leaf(0, 2)]);
    let err = run(&mut src, &record(0x50, 0, &blocks, &main), V18).unwrap_err();
    assert!(matches!(err, Fault::Malformed(ref m) if m.contains("block id 0")), "{err:?}");
}

#[test]
fn pick_split_inner_is_parent_and_reinit_source() {
    let (a, b) = (leaf(0, 0xA), leaf(0, 0xB));
    let blocks = [(0, 4, true), (1, 8, true), (2, 12, false)];
    // The source re-initialised (a nulls leaf) holds only its new leaf.
    let main = pick_split_main(false, true, true, 1, &[a.clone(), b.clone()]);
    let mut src = spg_page(SPGIST_LEAF, &[leaf(0, 1), leaf(0, 2), leaf(0, 3)]);
    run(&mut src, &record(0x50, 0, &blocks, &main), V18).unwrap();
    assert_eq!(items(&src), vec![a.clone()]);
    assert_eq!(Opaque::read(&src).unwrap().flags, SPGIST_LEAF | SPGIST_NULLS);
    // A leaf meant for offset 2 of a re-initialised page cannot land there.
    let main = pick_split_main(false, true, true, 2, &[a.clone(), b.clone()]);
    let err = run(&mut src, &record(0x50, 0, &blocks, &main), V18).unwrap_err();
    assert!(matches!(err, Fault::Page(_)), "{err:?}");
    // The inner tuple into an existing page that holds its parent at 1.
    let mut main = pick_split_main(false, true, true, 1, &[a, b]);
    main[10] = 0;
    main[8..10].copy_from_slice(&2u16.to_le_bytes());
    let mut page = spg_page(0, &[inner(&[(4, 3)])]);
    run(&mut page, &record(0x50, 2, &blocks, &main), V18).unwrap();
    assert_eq!(items(&page), vec![inner(&[(12, 2)]), inner(&[(4, 2), (8, 1)])]);
    // Block 3 is only for a parent on another page; the record has none.
    let err = run(&mut page, &record(0x50, 3, &[(2, 12, false), (3, 1, false)], &[0; 8]), V18);
    assert!(matches!(err, Err(Fault::Malformed(_))), "{err:?}");
}

#[test]
fn vacuum_leaf_dead_placeholder_move_and_chain() {
    let t: Vec<_> = (1..=6).map(|k| leaf(0, k)).collect();
    let mut page = spg_page(SPGIST_LEAF, &t);
    let mut main = vec![0u8; 16];
    for (i, n) in [1u16, 1, 1, 1].iter().enumerate() {
        main[2 * i..2 * i + 2].copy_from_slice(&n.to_le_bytes());
    }
    // 2 dead, 3 placeholder, 6 moves to 4 (4 then a placeholder), 1 → next 4.
    main.extend([offs(&[2]), offs(&[3]), offs(&[6]), offs(&[4]), offs(&[1]), offs(&[4])].concat());
    run(&mut page, &record(0x60, 0, &[(0, 3, false)], &main), V18).unwrap();
    let dead = dead_tuple(SPGIST_DEAD, 0, 0, 0).to_vec();
    let want = vec![leaf(4, 1), dead, placeholder(), t[5].clone(), t[4].clone(), placeholder()];
    assert_eq!(items(&page), want);
    assert_eq!(counts(&page), (0, 2));
}

#[test]
fn vacuum_root_deletes() {
    let t: Vec<_> = (1..=4).map(|k| leaf(0, k)).collect();
    let mut page = spg_page(SPGIST_LEAF, &t);
    let main = [&2u16.to_le_bytes()[..], &[0; 10], &offs(&[1, 3])].concat();
    run(&mut page, &record(0x70, 0, &[(0, 1, false)], &main), V15).unwrap();
    assert_eq!(items(&page), vec![t[1].clone(), t[3].clone()]);
}

#[test]
fn vacuum_redirect_offsets_move_with_is_catalog_rel() {
    let r = |off| dead_tuple(SPGIST_REDIRECT, 9, off, 700).to_vec();
    let converted = {
        let mut p = dead_tuple(SPGIST_PLACEHOLDER, 0, 0, 0);
        p[12..16].copy_from_slice(&700u32.to_le_bytes());
        p.to_vec()
    };
    let head = |n: u16, first: u16| [n.to_le_bytes(), first.to_le_bytes()].concat();
    let main15 = [head(2, 4), 55u32.to_le_bytes().to_vec(), offs(&[1, 3])].concat();
    let main16 = [head(2, 4), 55u32.to_le_bytes().to_vec(), vec![0, 0], offs(&[1, 3])].concat();
    for (version, main) in [(V15, main15), (V16, main16.clone()), (V18, main16)] {
        let page = spg_page(0, &[r(1), inner(&[(1, 1)]), r(3), placeholder(), placeholder()]);
        let mut page = with_counts(page, 2, 2);
        run(&mut page, &record(0x80, 0, &[(0, 3, false)], &main), version).unwrap();
        assert_eq!(items(&page), vec![converted.clone(), inner(&[(1, 1)]), converted.clone()]);
        assert_eq!(counts(&page), (0, 2), "{version:?}");
    }
    // A tuple that is not a redirect, and counters that do not add up.
    let main = [head(1, 0), 55u32.to_le_bytes().to_vec(), vec![0, 0], offs(&[2])].concat();
    let mut page = with_counts(spg_page(0, &[r(1), leaf(0, 1)]), 1, 0);
    let err = run(&mut page, &record(0x80, 0, &[(0, 3, false)], &main), V18).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("not a redirect")), "{err:?}");
    let main = [head(1, 0), 55u32.to_le_bytes().to_vec(), vec![0, 0], offs(&[1])].concat();
    let mut page = spg_page(0, &[r(1)]);
    let err = run(&mut page, &record(0x80, 0, &[(0, 3, false)], &main), V18).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("counts 0")), "{err:?}");
}

#[test]
fn wrong_fork_block_or_kind_is_refused() {
    let main = [add_leaf_main(false, false, 1, 0, 0, 0), leaf(0, 1)].concat();
    let mut page = spg_page(SPGIST_LEAF, &[]);
    let mut rec = record(0x10, 0, &[(0, 3, false)], &main);
    rec.blocks[0].tag.fork = 2;
    let err = apply(&mut page, rec.blocks[0].tag, LSN, &rec, V18).unwrap_err().fault;
    assert!(matches!(err, Fault::Malformed(ref m) if m.contains("fork 2")), "{err:?}");
    // ADD_LEAF's block 1 only when there is a parent to link.
    let err = run(&mut page, &record(0x10, 1, &[(0, 3, false), (1, 4, false)], &main), V18);
    assert!(matches!(err, Err(Fault::Malformed(ref m)) if m.contains("block id 1")), "{err:?}");
    for kind in [0x60, 0x70, 0x80] {
        let err = run(&mut page, &record(kind, 1, &[(1, 3, false)], &[0; 20]), V18).unwrap_err();
        assert!(matches!(err, Fault::Malformed(ref m) if m.contains("block id 1")), "{err:?}");
    }
    for kind in [0x00, 0x90] {
        let err = run(&mut page, &record(kind, 0, &[(0, 3, false)], &main), V18).unwrap_err();
        assert!(matches!(err, Fault::Unsupported(_)), "{err:?}");
    }
    // The metapage keeps metadata below pd_lower.
    let meta = spg_page(SPGIST_META, &[]);
    assert!(!super::has_line_pointers(&meta));
    assert!(super::has_line_pointers(&page));
}

#[test]
fn malformed_records_are_refused() {
    let t = leaf(0, 1);
    let blocks = [(0, 3, false), (1, 4, false), (2, 5, false)];
    let cases = [
        // Cut before the tuple, or in it.
        record(0x10, 0, &blocks, &add_leaf_main(false, false, 1, 0, 0, 0)),
        record(
            0x10,
            0,
            &blocks,
            &[add_leaf_main(false, false, 1, 0, 0, 0), t[..20].to_vec()].concat(),
        ),
        // MOVE_LEAFS with fewer tuples than offsets.
        record(
            0x20,
            1,
            &blocks,
            &[move_main(1, false, false, 1, 0, false), offs(&[1, 1, 2]), t.clone()].concat(),
        ),
        // Offsets cut short.
        record(0x60, 0, &blocks, &[vec![3, 0, 0, 0, 0, 0, 0, 0], vec![0; 8], offs(&[1])].concat()),
        record(0x70, 0, &blocks, &[vec![2, 0], vec![0; 10], offs(&[1])].concat()),
        // SPLIT_TUPLE without its postfix tuple.
        record(0x40, 0, &blocks, &[vec![1, 0, 2, 0, 0, 1], inner(&[(1, 1)])].concat()),
        // ADD_NODE header cut short.
        record(0x30, 0, &blocks, &[0; 5]),
    ];
    for rec in cases {
        let mut page = spg_page(SPGIST_LEAF, &[leaf(0, 1), leaf(0, 2)]);
        let err = run(&mut page, &rec, V18).unwrap_err();
        assert!(matches!(err, Fault::Malformed(_)), "{err:?} for info {:#x}", rec.info);
    }
    // A downlink to a node the inner tuple does not have.
    let main = [add_leaf_main(false, false, 1, 0, 1, 5), t].concat();
    let mut parent = spg_page(0, &[inner(&[(1, 1)])]);
    let err = run(&mut parent, &record(0x10, 1, &blocks, &main), V18).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("no node 5")), "{err:?}");
}
