//! GiST redo per record kind on hand-built pages: the items, flags, right
//! links and NSNs PostgreSQL's redo routines produce, and the faults for
//! input they cannot apply.

use bytes::Bytes;
use utils::lsn::Lsn;

use super::page::*;
use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::{apply, bufpage, BlockRef, Fault, RedoRecord};
use crate::wal::{rmgr_id, BlockTag};
use crate::PgMajorVersion::{self, V15, V16, V18};

const LSN: Lsn = Lsn(0x2_0000_0040);

fn tag(blkno: u32) -> BlockTag {
    BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16400, fork: 0, blkno }
}

/// A record redoing block id `target`; `blocks` are (id, block number, will_init).
fn record(
    info: u8,
    target: u8,
    blocks: &[(u8, u32, bool)],
    data: &[u8],
    main: &[u8],
) -> RedoRecord {
    RedoRecord {
        rmid: rmgr_id::GIST,
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

fn run(page: &mut [u8], rec: &RedoRecord, version: PgMajorVersion) -> Result<(), Fault> {
    let blkno = rec.target_block().unwrap().tag.blkno;
    apply(page, tag(blkno), LSN, rec, version).map_err(|e| e.fault)
}

/// An index tuple of `len` bytes (a multiple of 8) filled with `key`.
fn tuple(key: u8, len: usize) -> Vec<u8> {
    let mut t = vec![key; len];
    t[0..6].copy_from_slice(&[0, 0, 0, 7, key, 0]);
    t[6..8].copy_from_slice(&(len as u16).to_le_bytes());
    t
}

fn gist_page(opaque: Opaque, items: &[Vec<u8>]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, opaque).unwrap();
    for (i, item) in items.iter().enumerate() {
        bufpage::add_item(&mut page, item, i as u16 + 1, false, false).unwrap();
    }
    page
}

fn leaf() -> Opaque {
    Opaque::new(F_LEAF)
}

fn items(page: &[u8]) -> Vec<Vec<u8>> {
    (1..=bufpage::max_offset(page)).map(|o| bufpage::item(page, o).unwrap().to_vec()).collect()
}

/// The page must be what adding `items` in order to a fresh page with
/// `opaque` gives: the same bytes apart from the LSN and the free space
/// between `pd_lower` and `pd_upper` (stale after deletions, as in
/// PostgreSQL).
fn expect_page(page: &[u8], opaque: Opaque, items: &[Vec<u8>]) {
    assert_eq!(Opaque::read(page).unwrap(), opaque);
    assert_eq!(self::items(page), items);
    let mut expected = gist_page(opaque, items);
    let mut ours = page.to_vec();
    for p in [&mut expected, &mut ours] {
        let h = PageHeader::decode(p);
        p[0..8].fill(0);
        p[h.lower as usize..h.upper as usize].fill(0);
    }
    assert_eq!(ours.iter().zip(&expected).position(|(a, b)| a != b), None);
}

fn update_main(ntodelete: u16, ntoinsert: u16) -> Vec<u8> {
    [ntodelete.to_le_bytes(), ntoinsert.to_le_bytes()].concat()
}

fn offsets(offs: &[u16]) -> Vec<u8> {
    offs.iter().flat_map(|o| o.to_le_bytes()).collect()
}

#[test]
fn page_update_appends_tuples() {
    let (a, b, c, d) = (tuple(1, 24), tuple(2, 32), tuple(3, 24), tuple(4, 40));
    let mut page = gist_page(leaf(), &[a.clone(), b.clone()]);
    let rec =
        record(0x00, 0, &[(0, 3, false)], &[c.clone(), d.clone()].concat(), &update_main(0, 2));
    run(&mut page, &rec, V15).unwrap();
    expect_page(&page, leaf(), &[a, b, c, d]);
    assert_eq!(PageHeader::decode(&page).lsn, LSN.0);
}

#[test]
fn page_update_one_for_one_overwrites_in_place() {
    let (a, b, c) = (tuple(1, 24), tuple(2, 32), tuple(3, 24));
    let internal = Opaque::new(0);
    let mut page = gist_page(internal, &[a.clone(), b, c.clone()]);
    let new = tuple(9, 48);
    let data = [offsets(&[2]), new.clone()].concat();
    run(&mut page, &record(0x00, 0, &[(0, 0, false)], &data, &update_main(1, 1)), V18).unwrap();
    assert_eq!(items(&page), vec![a, new, c]);
    assert_eq!(Opaque::read(&page).unwrap(), internal);
}

#[test]
fn page_update_deletes_then_appends_and_marks_leaf() {
    let t: Vec<_> = (1..=4).map(|k| tuple(k, 24)).collect();
    let new = tuple(7, 16);
    for (opaque, marked) in [(leaf(), true), (Opaque::new(0), false)] {
        let mut page = gist_page(opaque, &t);
        let data = [offsets(&[1, 3]), new.clone()].concat();
        run(&mut page, &record(0x00, 0, &[(0, 2, false)], &data, &update_main(2, 1)), V16).unwrap();
        assert_eq!(items(&page), vec![t[1].clone(), t[3].clone(), new.clone()]);
        let flags = Opaque::read(&page).unwrap().flags;
        assert_eq!(flags & F_TUPLES_DELETED != 0, marked);
    }
}

#[test]
fn page_update_clears_follow_right_on_the_left_child() {
    let mut opaque = leaf();
    opaque.flags |= F_FOLLOW_RIGHT;
    opaque.nsn = 0x1234;
    opaque.rightlink = 8;
    let a = tuple(1, 24);
    let mut page = gist_page(opaque, std::slice::from_ref(&a));
    let rec = record(0x00, 1, &[(0, 0, false), (1, 5, false)], &[], &update_main(0, 1));
    run(&mut page, &rec, V18).unwrap();
    let want = Opaque { nsn: LSN.0, flags: F_LEAF, ..opaque };
    expect_page(&page, want, &[a]);
}

#[test]
fn delete_offsets_move_with_is_catalog_rel() {
    let t: Vec<_> = (1..=3).map(|k| tuple(k, 24)).collect();
    let mut garbage = leaf();
    garbage.flags |= F_HAS_GARBAGE;
    let after = Opaque { flags: F_LEAF | F_TUPLES_DELETED, ..garbage };
    // 15: xid, ntodelete, offsets at 6.
    let main15 = [&77u32.to_le_bytes()[..], &2u16.to_le_bytes(), &offsets(&[1, 3])].concat();
    // 16 on: xid, ntodelete, isCatalogRel, pad, offsets at 8.
    let main16 =
        [&77u32.to_le_bytes()[..], &2u16.to_le_bytes(), &[0, 0], &offsets(&[1, 3])].concat();
    for (version, main) in [(V15, main15), (V16, main16.clone()), (V18, main16)] {
        let mut page = gist_page(garbage, &t);
        run(&mut page, &record(0x10, 0, &[(0, 4, false)], &[], &main), version).unwrap();
        expect_page(&page, after, std::slice::from_ref(&t[1]));
    }
    // 15 without offsets after the header deletes nothing.
    let mut page = gist_page(garbage, &t);
    let main = [&77u32.to_le_bytes()[..], &2u16.to_le_bytes()].concat();
    run(&mut page, &record(0x10, 0, &[(0, 4, false)], &[], &main), V15).unwrap();
    expect_page(&page, after, &t);
}

/// PAGE_SPLIT main data.
fn split_main(origrlink: u32, orignsn: u64, origleaf: bool, npage: u16, follow: bool) -> Vec<u8> {
    let mut m = vec![0u8; 24];
    m[0..4].copy_from_slice(&origrlink.to_le_bytes());
    m[8..16].copy_from_slice(&orignsn.to_le_bytes());
    m[16] = origleaf as u8;
    m[18..20].copy_from_slice(&npage.to_le_bytes());
    m[20] = follow as u8;
    m
}

fn split_data(tuples: &[Vec<u8>]) -> Vec<u8> {
    [(tuples.len() as i32).to_le_bytes().to_vec(), tuples.concat()].concat()
}

#[test]
fn split_of_a_leaf_links_halves_and_marks_follow_right() {
    let blocks = [(0, 2, false), (1, 6, true), (2, 11, true), (3, 12, true)];
    let main = split_main(30, 0x55, true, 3, true);
    let halves = [vec![tuple(1, 24), tuple(2, 32)], vec![tuple(3, 24)], vec![tuple(4, 16)]];
    let links = [11, 12, 30];
    for (i, half) in halves.iter().enumerate() {
        let id = i as u8 + 1;
        let mut page = vec![0u8; BLCKSZ];
        run(&mut page, &record(0x30, id, &blocks, &split_data(half), &main), V18).unwrap();
        let mut want = Opaque { nsn: 0x55, rightlink: links[i], ..leaf() };
        if i < 2 {
            want.flags |= F_FOLLOW_RIGHT;
        }
        expect_page(&page, want, half);
    }
    // Block 0, the left half of the split below, is done with its split.
    let mut child = gist_page(Opaque { flags: F_LEAF | F_FOLLOW_RIGHT, ..leaf() }, &[]);
    run(&mut child, &record(0x30, 0, &blocks, &[], &main), V18).unwrap();
    assert_eq!(Opaque::read(&child).unwrap(), Opaque { nsn: LSN.0, ..leaf() });
}

#[test]
fn root_split_keeps_the_root_internal_and_no_follow_right() {
    let blocks = [(1, 0, true), (2, 4, true), (3, 5, true)];
    let main = split_main(INVALID_BLOCK, 0x77, true, 3, true);
    let root = vec![tuple(1, 40), tuple(2, 40)];
    let mut page = vec![0u8; BLCKSZ];
    run(&mut page, &record(0x30, 1, &blocks, &split_data(&root), &main), V15).unwrap();
    expect_page(&page, Opaque { nsn: 0x77, ..Opaque::new(0) }, &root);
    let left = vec![tuple(3, 24)];
    run(&mut page, &record(0x30, 2, &blocks, &split_data(&left), &main), V15).unwrap();
    expect_page(&page, Opaque { nsn: 0x77, rightlink: 5, ..leaf() }, &left);
}

#[test]
fn split_faults() {
    let blocks = [(1, 6, true), (2, 7, true)];
    let main = split_main(9, 0, true, 2, false);
    let data = split_data(&[tuple(1, 24)]);
    let mut page = vec![0u8; BLCKSZ];
    let not_init = [(1, 6, false), (2, 7, true)];
    let cases = [
        record(0x30, 1, &not_init, &data, &main),
        record(0x30, 1, &blocks, &data, &main[..20]),
        record(0x30, 1, &blocks, &data[..data.len() - 8], &main),
        record(0x30, 1, &blocks, &[&2i32.to_le_bytes()[..], &tuple(1, 24)].concat(), &main),
        record(0x30, 1, &[(1, 6, true)], &data, &main),
        record(0x30, 2, &[(1, 6, true), (2, 0, true)], &data, &main),
        record(0x30, 3, &[(1, 6, true), (2, 7, true), (3, 8, true)], &data, &main),
    ];
    for rec in cases {
        let err = run(&mut page, &rec, V18).unwrap_err();
        assert!(matches!(err, Fault::Malformed(_)), "{err:?} for {rec:?}");
    }
}

#[test]
fn page_delete_marks_the_leaf_and_drops_the_downlink() {
    let main = [&0x0000_0001_0000_0300u64.to_le_bytes()[..], &2u16.to_le_bytes()].concat();
    let blocks = [(0, 7, false), (1, 1, false)];
    let mut page = gist_page(leaf(), &[]);
    run(&mut page, &record(0x60, 0, &blocks, &[], &main), V18).unwrap();
    let h = PageHeader::decode(&page);
    assert_eq!((h.lower, h.upper), (32, (BLCKSZ - OPAQUE_SIZE) as u16));
    assert_eq!(&page[24..32], &0x0000_0001_0000_0300u64.to_le_bytes());
    assert_eq!(Opaque::read(&page).unwrap().flags, F_LEAF | F_DELETED);
    assert!(!super::has_line_pointers(&page));

    let t: Vec<_> = (1..=3).map(|k| tuple(k, 40)).collect();
    let mut parent = gist_page(Opaque::new(0), &t);
    run(&mut parent, &record(0x60, 1, &blocks, &[], &main), V18).unwrap();
    expect_page(&parent, Opaque::new(0), &[t[0].clone(), t[2].clone()]);
    assert!(super::has_line_pointers(&parent));

    // A leaf that still holds tuples is not what the record expects.
    let mut full = gist_page(leaf(), &t);
    let err = run(&mut full, &record(0x60, 0, &blocks, &[], &main), V18).unwrap_err();
    assert!(matches!(err, Fault::Page(_)), "{err:?}");
}

#[test]
fn wrong_fork_block_or_kind_is_refused() {
    let a = tuple(1, 24);
    let mut page = gist_page(leaf(), &[]);
    let mut rec = record(0x00, 0, &[(0, 3, false)], &a, &update_main(0, 1));
    rec.blocks[0].tag.fork = 1;
    let err = apply(&mut page, rec.blocks[0].tag, LSN, &rec, V18).unwrap_err().fault;
    assert!(matches!(err, Fault::Malformed(ref m) if m.contains("fork 1")), "{err:?}");

    let cases = [
        (record(0x00, 2, &[(0, 3, false), (2, 4, false)], &a, &update_main(0, 1)), "block id 2"),
        (record(0x10, 1, &[(1, 3, false)], &[], &[0; 8]), "block id 1"),
        (record(0x20, 0, &[(0, 3, false)], &[], &[0; 24]), "PAGE_REUSE"),
        (record(0x70, 0, &[(0, 3, false)], &[], &[0; 4]), "ASSIGN_LSN"),
        (record(0x60, 2, &[(2, 3, false)], &[], &[0; 10]), "block id 2"),
    ];
    for (rec, what) in cases {
        let err = run(&mut page, &rec, V18).unwrap_err();
        assert!(matches!(err, Fault::Malformed(ref m) if m.contains(what)), "{err:?}");
    }
    let err = run(&mut page, &record(0x40, 0, &[(0, 3, false)], &[], &[]), V18).unwrap_err();
    assert!(matches!(err, Fault::Unsupported(_)), "{err:?}");
}

#[test]
fn malformed_updates_are_refused() {
    let t: Vec<_> = (1..=2).map(|k| tuple(k, 24)).collect();
    let blocks = [(0, 3, false)];
    let cases = [
        // Short main data.
        (record(0x00, 0, &blocks, &t[0], &[1, 0]), "gistxlogPageUpdate"),
        // Two tuples announced, one sent.
        (record(0x00, 0, &blocks, &t[0], &update_main(0, 2)), "holds 1"),
        // A tuple claiming more bytes than the data has.
        (record(0x00, 0, &blocks, &t[0][..16], &update_main(0, 1)), "index tuple of 24"),
        // Offsets cut short.
        (record(0x00, 0, &blocks, &[1], &update_main(1, 0)), "1 offsets"),
        // DELETE offsets past the main data.
        (record(0x10, 0, &blocks, &[], &[0, 0, 0, 0, 3, 0, 0, 0, 1, 0]), "3 offsets"),
        (record(0x60, 0, &blocks, &[], &[0; 9]), "gistxlogPageDelete"),
    ];
    for (rec, what) in cases {
        let mut page = gist_page(leaf(), &t);
        let err = run(&mut page, &rec, V18).unwrap_err();
        assert!(matches!(err, Fault::Malformed(ref m) if m.contains(what)), "{what}: {err:?}");
    }
    // Deleting an offset the page does not have.
    let mut page = gist_page(leaf(), &t);
    let rec = record(0x00, 0, &blocks, &offsets(&[5, 6]), &update_main(2, 0));
    assert!(matches!(run(&mut page, &rec, V18), Err(Fault::Page(_))));
    // A page that is not a GiST page (a 24-byte special space).
    let mut page = vec![0u8; BLCKSZ];
    bufpage::page_init(&mut page, 24);
    let rec = record(0x00, 1, &[(0, 0, false), (1, 3, false)], &[], &update_main(0, 0));
    let err = run(&mut page, &rec, V18).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("special space")), "{err:?}");
}
