//! GIN redo per record kind on hand-built pages: the bytes PostgreSQL's
//! redo routines produce (posting-list encoding, segment actions, posting
//! items, list pages, the metapage), and the fault for every input they
//! refuse.

use bytes::Bytes;
use utils::lsn::Lsn;

use super::page::*;
use super::posting::{compress, decode_segment, merge, Tid};
use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::{apply, bufpage, check_page, BlockRef, Fault, RedoRecord};
use crate::wal::{rmgr_id, BlockTag};
use crate::PgMajorVersion;

fn tag(blkno: u32) -> BlockTag {
    BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16384, fork: 0, blkno }
}

/// A record redoing block id `target`; `blocks` are (id, block number,
/// will_init).
fn record(
    info: u8,
    target: u8,
    blocks: &[(u8, u32, bool)],
    data: &[u8],
    main: &[u8],
) -> RedoRecord {
    RedoRecord {
        rmid: rmgr_id::GIN,
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

fn run(page: &mut [u8], rec: &RedoRecord) -> Result<(), Fault> {
    let blkno = rec.target_block().unwrap().tag.blkno;
    apply(page, tag(blkno), Lsn(0x2_0000_0040), rec, PgMajorVersion::V17).map_err(|e| e.fault)
}

fn tid(block: u32, offset: u16) -> Tid {
    Tid { block, offset }
}

fn tids(list: &[(u32, u16)]) -> Vec<Tid> {
    list.iter().map(|&(b, o)| tid(b, o)).collect()
}

fn tid_bytes(list: &[(u32, u16)]) -> Vec<u8> {
    let mut out = Vec::new();
    for t in tids(list) {
        t.write(&mut out);
    }
    out
}

fn seg(list: &[(u32, u16)]) -> Vec<u8> {
    compress(&tids(list)).unwrap()
}

/// A compressed posting-tree leaf holding `segments`.
fn data_leaf(segments: &[Vec<u8>]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, GIN_DATA | GIN_LEAF | GIN_COMPRESSED).unwrap();
    let all = segments.concat();
    set_data_size(&mut page, all.len()).unwrap();
    page[DATA_OFF..DATA_OFF + all.len()].copy_from_slice(&all);
    page
}

fn leaf_data(page: &[u8]) -> Vec<u8> {
    page[DATA_OFF..DATA_OFF + posting_list_size(page).unwrap()].to_vec()
}

/// An internal posting-tree page with `items` (child, key TID).
fn data_internal(items: &[(u32, (u32, u16))]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, GIN_DATA).unwrap();
    for &(child, key) in items {
        add_posting_item(&mut page, &posting_item(child, key), 0).unwrap();
    }
    page
}

fn posting_item(child: u32, key: (u32, u16)) -> Vec<u8> {
    let mut b = vec![0u8; 4];
    set_block_id(&mut b, child);
    b.extend(tid_bytes(&[key]));
    b
}

fn children(page: &[u8]) -> Vec<u32> {
    let n = Opaque::read(page).unwrap().maxoff as usize;
    (0..n).map(|i| block_id(&page[DATA_OFF + i * POSTING_ITEM_SIZE..])).collect()
}

/// A 16-byte entry tuple: TID (block, offset), size 16, an int4 key.
fn entry_tuple(block: u32, offset: u16, key: u32) -> Vec<u8> {
    let mut t = tid_bytes(&[(block, offset)]);
    t.extend(16u16.to_le_bytes());
    t.extend(key.to_le_bytes());
    t.extend([0u8; 4]);
    t
}

fn entry_page(flags: u16, tuples: &[Vec<u8>]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, flags).unwrap();
    for t in tuples {
        bufpage::add_item(&mut page, t, 0, false, false).unwrap();
    }
    page
}

fn items(page: &[u8]) -> Vec<Vec<u8>> {
    (1..=bufpage::max_offset(page)).map(|o| bufpage::item(page, o).unwrap().to_vec()).collect()
}

/// `ginxlogRecompressDataLeaf` from (segno, action, payload).
fn actions(list: &[(u8, u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = (list.len() as u16).to_le_bytes().to_vec();
    for (segno, action, payload) in list {
        out.extend([*segno, *action]);
        out.extend(payload);
    }
    out
}

fn additems(list: &[(u32, u16)]) -> Vec<u8> {
    let mut out = (list.len() as u16).to_le_bytes().to_vec();
    out.extend(tid_bytes(list));
    out
}

const INSERT: u8 = 0x20;
const LEAF_DATA_FLAGS: u16 = 0x03;

fn leaf_insert(data: &[u8]) -> RedoRecord {
    record(INSERT, 0, &[(0, 9, false)], data, &LEAF_DATA_FLAGS.to_le_bytes())
}

#[test]
fn posting_lists_encode_as_postgresql_does() {
    let list = tids(&[(0, 1), (0, 2), (1, 1)]);
    // First TID unpacked, nbytes 3, deltas 1 and (1 << 11 | 1) - 2 = 2047
    // as varbytes, one zero pad byte.
    let want = [0, 0, 0, 0, 1, 0, 3, 0, 0x01, 0xFF, 0x0F, 0x00];
    assert_eq!(compress(&list).unwrap(), want);
    assert_eq!(decode_segment(&want).unwrap(), list);
    let far = tids(&[(0, 1), (0x1234_5678, 7)]);
    assert_eq!(decode_segment(&compress(&far).unwrap()).unwrap(), far);
    assert!(matches!(compress(&tids(&[(1, 2), (1, 2)])), Err(Fault::Page(_))));
    assert!(matches!(compress(&[]), Err(Fault::Page(_))));
    // A varbyte whose continuation bit runs past nbytes.
    assert!(matches!(decode_segment(&[0, 0, 0, 0, 1, 0, 1, 0, 0x81, 0]), Err(Fault::Page(_))));
}

#[test]
fn merge_keeps_one_copy_and_order() {
    let a = tids(&[(1, 1), (1, 3), (2, 1)]);
    let b = tids(&[(1, 2), (1, 3), (3, 1)]);
    assert_eq!(merge(&a, &b), tids(&[(1, 1), (1, 2), (1, 3), (2, 1), (3, 1)]));
    assert_eq!(merge(&b[2..], &a), tids(&[(1, 1), (1, 3), (2, 1), (3, 1)]));
    assert_eq!(merge(&[], &a), a);
}

#[test]
fn leaf_actions_rewrite_the_segments() {
    let (s0, s1, s2) = (seg(&[(1, 1), (1, 4)]), seg(&[(2, 1), (2, 2)]), seg(&[(3, 1)]));
    let mut page = data_leaf(&[s0, s1.clone(), s2.clone()]);
    let new = seg(&[(4, 1), (4, 2)]);
    let data = actions(&[
        (0, 4, additems(&[(1, 2), (1, 3)])),
        (1, 1, vec![]),
        (2, 3, new.clone()),
        (3, 2, seg(&[(5, 5)])),
    ]);
    run(&mut page, &leaf_insert(&data)).unwrap();
    let want = [seg(&[(1, 1), (1, 2), (1, 3), (1, 4)]), new, seg(&[(5, 5)])].concat();
    assert_eq!(leaf_data(&page), want);
    assert_eq!(PageHeader::decode(&page).lower as usize, DATA_OFF + want.len());
    assert!(!has_line_pointers_of(&page));
    // An insert before segment 1 keeps it and everything after it.
    let mut page = data_leaf(&[seg(&[(1, 1)]), s1.clone(), s2.clone()]);
    run(&mut page, &leaf_insert(&actions(&[(1, 2, seg(&[(1, 9)]))]))).unwrap();
    assert_eq!(leaf_data(&page), [seg(&[(1, 1)]), seg(&[(1, 9)]), s1, s2].concat());
}

fn has_line_pointers_of(page: &[u8]) -> bool {
    super::has_line_pointers(page)
}

#[test]
fn leaf_actions_only_at_the_end_drop_nothing_before_them() {
    let s0 = seg(&[(1, 1)]);
    let mut page = data_leaf(std::slice::from_ref(&s0));
    run(&mut page, &leaf_insert(&actions(&[(1, 2, seg(&[(2, 1)]))]))).unwrap();
    assert_eq!(leaf_data(&page), [s0, seg(&[(2, 1)])].concat());
}

#[test]
fn leaf_actions_on_missing_segments_or_malformed_data_are_faults() {
    let leaf = data_leaf(&[seg(&[(1, 1)])]);
    let cases: [(Vec<u8>, bool); 7] = [
        (actions(&[(1, 1, vec![])]), false),
        (actions(&[(3, 3, seg(&[(1, 2)]))]), false),
        (actions(&[(0, 4, additems(&[(1, 1)]))]), false),
        (actions(&[(0, 0, vec![])]), true),
        (actions(&[(0, 9, vec![])]), true),
        (actions(&[(0, 1, vec![]), (0, 1, vec![])]), true),
        (actions(&[(0, 4, vec![5, 0, 1])]), true),
    ];
    for (data, malformed) in cases {
        let mut page = leaf.clone();
        let got = run(&mut page, &leaf_insert(&data));
        match (got, malformed) {
            (Err(Fault::Malformed(_)), true) | (Err(Fault::Page(_)), false) => {}
            (other, _) => panic!("{data:?}: {other:?}"),
        }
    }
    let mut entry = entry_page(GIN_LEAF, &[]);
    let got = run(&mut entry, &leaf_insert(&actions(&[(0, 1, vec![])])));
    assert!(matches!(got, Err(Fault::Page(m)) if m.contains("data leaf")));
}

#[test]
fn an_uncompressed_leaf_is_compressed_first() {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, GIN_DATA | GIN_LEAF).unwrap();
    let old = tid_bytes(&[(1, 1), (1, 2), (2, 7)]);
    page[DATA_OFF..DATA_OFF + old.len()].copy_from_slice(&old);
    modify_opaque(&mut page, |o| o.maxoff = 3).unwrap();
    let data = actions(&[(0, 4, additems(&[(1, 5)]))]);
    let rec = record(0x90, 0, &[(0, 4, false)], &data, &[]);
    run(&mut page, &rec).unwrap();
    assert_eq!(leaf_data(&page), seg(&[(1, 1), (1, 2), (1, 5), (2, 7)]));
    let o = Opaque::read(&page).unwrap();
    assert_eq!((o.maxoff, o.flags), (0, GIN_DATA | GIN_LEAF | GIN_COMPRESSED));
}

#[test]
fn create_ptree_builds_a_compressed_root_leaf() {
    let list = seg(&[(1, 1), (1, 2), (9, 3)]);
    let mut main = (list.len() as u32).to_le_bytes().to_vec();
    main.extend(&list);
    let mut page = vec![0xAAu8; BLCKSZ];
    run(&mut page, &record(0x10, 0, &[(0, 12, true)], &[], &main)).unwrap();
    assert_eq!(leaf_data(&page), list);
    let o = Opaque::read(&page).unwrap();
    assert_eq!(o, Opaque { rightlink: INVALID_BLOCK, maxoff: 0, flags: 0x83 });
    assert_eq!(&page[24..32], &[0u8; 8], "the right bound stays zero");
    let too_big = [(DATA_MAX_SIZE as u32 + 2).to_le_bytes().to_vec(), vec![0; DATA_MAX_SIZE + 2]];
    let got = run(&mut page, &record(0x10, 0, &[(0, 12, true)], &[], &too_big.concat()));
    assert!(matches!(got, Err(Fault::Page(_))), "{got:?}");
    let got = run(&mut page, &record(0x10, 0, &[(0, 12, true)], &[], &main[..8]));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
    let got = run(&mut page, &record(0x10, 0, &[(0, 12, false)], &[], &main));
    assert!(matches!(got, Err(Fault::Malformed(m)) if m.contains("will_init")));
}

#[test]
fn entry_leaf_insert_replaces_a_tuple() {
    let mut page = entry_page(GIN_LEAF, &[entry_tuple(0, 1, 10), entry_tuple(0, 1, 20)]);
    let mut data = vec![2, 0, 1, 0];
    data.extend(entry_tuple(0, 2, 20));
    let main = 0x02u16.to_le_bytes();
    run(&mut page, &record(INSERT, 0, &[(0, 1, false)], &data, &main)).unwrap();
    assert_eq!(items(&page), [entry_tuple(0, 1, 10), entry_tuple(0, 2, 20)]);
    // Cut short, or with bytes past the tuple.
    for bad in [&data[..3], &[data.as_slice(), &[0]].concat()[..]] {
        let got = run(&mut page, &record(INSERT, 0, &[(0, 1, false)], bad, &main));
        assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
    }
}

#[test]
fn entry_internal_insert_moves_the_downlink_and_clears_the_child() {
    let mut page = entry_page(0, &[entry_tuple(3, 0, 10), entry_tuple(4, 0, 99)]);
    let mut data = vec![2, 0, 0, 0];
    data.extend(entry_tuple(5, 0, 50));
    let mut main = 0u16.to_le_bytes().to_vec();
    main.extend([0, 0, 5, 0, 0, 0, 6, 0]); // left child 5, right child 6
    let blocks = [(0, 1, false), (1, 5, false)];
    run(&mut page, &record(INSERT, 0, &blocks, &data, &main)).unwrap();
    assert_eq!(items(&page), [entry_tuple(3, 0, 10), entry_tuple(5, 0, 50), entry_tuple(6, 0, 99)]);
    let mut child = entry_page(GIN_LEAF | GIN_INCOMPLETE_SPLIT, &[entry_tuple(0, 1, 1)]);
    run(&mut child, &record(INSERT, 1, &blocks, &[], &main)).unwrap();
    assert_eq!(Opaque::read(&child).unwrap().flags, GIN_LEAF);
    // A leaf insert has no child block.
    let got = run(&mut child, &record(INSERT, 1, &blocks, &[], &0x02u16.to_le_bytes()));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
}

#[test]
fn data_internal_insert_adds_a_posting_item() {
    let mut page = data_internal(&[(3, (10, 1)), (4, (0xFFFF_FFFF, 0xFFFF))]);
    let mut data = 2u16.to_le_bytes().to_vec();
    data.extend(posting_item(4, (20, 1)));
    let mut main = 0x01u16.to_le_bytes().to_vec();
    main.extend([0, 0, 4, 0, 0, 0, 7, 0]);
    let blocks = [(0, 2, false), (1, 4, false)];
    run(&mut page, &record(INSERT, 0, &blocks, &data, &main)).unwrap();
    assert_eq!(children(&page), [3, 4, 7]);
    assert_eq!(Opaque::read(&page).unwrap().maxoff, 3);
    assert_eq!(PageHeader::decode(&page).lower as usize, DATA_OFF + 3 * POSTING_ITEM_SIZE);
    data[0] = 9;
    let got = run(&mut page, &record(INSERT, 0, &blocks, &data, &main));
    assert!(matches!(got, Err(Fault::Page(_))), "{got:?}");
    let got = run(&mut page, &record(INSERT, 0, &blocks, &data[..11], &main));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
}

#[test]
fn delete_page_marks_unlinks_and_relinks() {
    let main = [
        2u16.to_le_bytes().to_vec(),
        vec![0, 0],
        8u32.to_le_bytes().to_vec(),
        777u32.to_le_bytes().to_vec(),
    ]
    .concat();
    let blocks = [(0, 6, false), (1, 2, false), (2, 5, false)];
    let mut dead = data_leaf(&[]);
    run(&mut dead, &record(0x50, 0, &blocks, &[], &main)).unwrap();
    assert!(Opaque::read(&dead).unwrap().is(GIN_DELETED));
    assert_eq!(PageHeader::decode(&dead).prune_xid, 777);
    let mut parent = data_internal(&[(5, (1, 1)), (6, (2, 1)), (8, (3, 1))]);
    run(&mut parent, &record(0x50, 1, &blocks, &[], &main)).unwrap();
    assert_eq!(children(&parent), [5, 8]);
    let mut left = data_leaf(&[seg(&[(1, 1)])]);
    run(&mut left, &record(0x50, 2, &blocks, &[], &main)).unwrap();
    assert_eq!(Opaque::read(&left).unwrap().rightlink, 8);
    // The parent must be an internal data page holding that offset.
    let got = run(&mut left, &record(0x50, 1, &blocks, &[], &main));
    assert!(matches!(got, Err(Fault::Page(_))), "{got:?}");
    let got = run(&mut parent, &record(0x50, 1, &blocks, &[], &main[..6]));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
}

/// `ginxlogUpdateMeta` with a recognisable metadata block.
fn update_meta_main(prev_tail: u32, new_rightlink: u32, ntuples: i32) -> Vec<u8> {
    let mut main = vec![0u8; 16];
    main.extend((0..META_SIZE as u8).collect::<Vec<u8>>());
    main.extend(prev_tail.to_le_bytes());
    main.extend(new_rightlink.to_le_bytes());
    main.extend(ntuples.to_le_bytes());
    main.extend([0u8; 4]);
    main
}

#[test]
fn update_meta_rebuilds_the_metapage_and_appends_to_the_tail() {
    let main = update_meta_main(INVALID_BLOCK, INVALID_BLOCK, 2);
    let blocks = [(0, 0, true), (1, 7, false)];
    let mut meta = vec![0u8; BLCKSZ];
    run(&mut meta, &record(0x60, 0, &blocks, &[], &main)).unwrap();
    assert_eq!(&meta[24..24 + META_SIZE], &main[16..16 + META_SIZE]);
    assert_eq!(PageHeader::decode(&meta).lower, 80);
    assert_eq!(Opaque::read(&meta).unwrap().flags, GIN_META);
    assert!(!has_line_pointers_of(&meta));
    let mut tail = entry_page(GIN_LIST, &[entry_tuple(0, 1, 1)]);
    modify_opaque(&mut tail, |o| o.maxoff = 1).unwrap();
    let data = [entry_tuple(0, 2, 1), entry_tuple(0, 2, 2)].concat();
    run(&mut tail, &record(0x60, 1, &blocks, &data, &main)).unwrap();
    assert_eq!(items(&tail), [entry_tuple(0, 1, 1), entry_tuple(0, 2, 1), entry_tuple(0, 2, 2)]);
    assert_eq!(Opaque::read(&tail).unwrap().maxoff, 2);
    let got = run(&mut tail, &record(0x60, 1, &blocks, &data[..16], &main));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
    // A new sublist: the old tail links to it.
    let main = update_meta_main(7, 12, 0);
    run(&mut tail, &record(0x60, 1, &blocks, &[], &main)).unwrap();
    assert_eq!(Opaque::read(&tail).unwrap().rightlink, 12);
    // No tail to change; a metapage that is not block 0.
    let main = update_meta_main(INVALID_BLOCK, INVALID_BLOCK, 0);
    let got = run(&mut tail, &record(0x60, 1, &blocks, &[], &main));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
    let got = run(&mut meta, &record(0x60, 0, &[(0, 3, true)], &[], &main));
    assert!(matches!(got, Err(Fault::Malformed(m)) if m.contains("block 3")));
}

#[test]
fn insert_list_page_builds_a_list_page() {
    let data = [entry_tuple(0, 1, 1), entry_tuple(0, 1, 2)].concat();
    let main = [INVALID_BLOCK.to_le_bytes(), 2u32.to_le_bytes()].concat();
    let mut page = vec![0u8; BLCKSZ];
    run(&mut page, &record(0x70, 0, &[(0, 4, true)], &data, &main)).unwrap();
    assert_eq!(items(&page), [entry_tuple(0, 1, 1), entry_tuple(0, 1, 2)]);
    let o = Opaque::read(&page).unwrap();
    assert_eq!(
        o,
        Opaque { rightlink: INVALID_BLOCK, maxoff: 1, flags: GIN_LIST | GIN_LIST_FULLROW }
    );
    assert!(has_line_pointers_of(&page));
    let main = [5u32.to_le_bytes(), 3u32.to_le_bytes()].concat();
    let got = run(&mut page, &record(0x70, 0, &[(0, 4, true)], &data, &main));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
}

#[test]
fn delete_list_pages_rebuilds_the_deleted_pages() {
    let mut main = vec![7u8; META_SIZE];
    main.extend(2i32.to_le_bytes());
    main.extend([0u8; 4]);
    let blocks = [(0, 0, true), (1, 4, true), (2, 5, true)];
    let mut page = entry_page(GIN_LIST, &[entry_tuple(0, 1, 1)]);
    run(&mut page, &record(0x80, 2, &blocks, &[], &main)).unwrap();
    assert_eq!(Opaque::read(&page).unwrap().flags, GIN_DELETED);
    assert_eq!(bufpage::max_offset(&page), 0);
    let mut meta = vec![0u8; BLCKSZ];
    run(&mut meta, &record(0x80, 0, &blocks, &[], &main)).unwrap();
    assert_eq!(&meta[24..24 + META_SIZE], &main[..META_SIZE]);
    let blocks = [(0, 0, true), (1, 4, true), (2, 5, true), (3, 6, true)];
    let got = run(&mut page, &record(0x80, 3, &blocks, &[], &main));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
}

#[test]
fn split_redoes_only_the_child() {
    let mut main = vec![0u8; 24];
    main.extend(0u16.to_le_bytes());
    main.extend([0u8; 2]);
    let blocks = [(0, 1, false), (1, 2, false), (3, 9, false)];
    let mut child = entry_page(GIN_LEAF | GIN_INCOMPLETE_SPLIT, &[]);
    run(&mut child, &record(0x30, 3, &blocks, &[], &main)).unwrap();
    assert_eq!(Opaque::read(&child).unwrap().flags, GIN_LEAF);
    for target in [0, 1] {
        let got = run(&mut child, &record(0x30, target, &blocks, &[], &main));
        assert!(matches!(got, Err(Fault::Malformed(m)) if m.contains("full-page image")));
    }
    main[24] = 0x02; // a leaf split has no child
    let got = run(&mut child, &record(0x30, 3, &blocks, &[], &main));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
    let got = run(&mut child, &record(0x40, 0, &[(0, 1, false)], &[], &[]));
    assert!(matches!(got, Err(Fault::Malformed(m)) if m.contains("full-page image")));
}

#[test]
fn other_forks_and_unknown_kinds_are_refused() {
    let mut page = entry_page(GIN_LIST, &[]);
    let mut rec = record(0x70, 0, &[(0, 4, true)], &[], &[0xFF; 8]);
    rec.blocks[0].tag.fork = 1;
    let got = apply(&mut page, rec.blocks[0].tag, Lsn(0x100), &rec, PgMajorVersion::V15);
    assert!(matches!(got.map_err(|e| e.fault), Err(Fault::Malformed(m)) if m.contains("fork 1")));
    let got = run(&mut page, &record(0xA0, 0, &[(0, 4, false)], &[], &[]));
    assert!(matches!(got, Err(Fault::Unsupported(_))), "{got:?}");
    let got = run(&mut page, &record(0x10, 1, &[(0, 3, true), (1, 4, true)], &[], &[]));
    assert!(matches!(got, Err(Fault::Malformed(_))), "{got:?}");
}

#[test]
fn page_checks_follow_the_page_kind() {
    // A data page's bytes below pd_lower are posting data, not line
    // pointers: only the header is checked.
    let leaf = data_leaf(&[seg(&[(1, 1), (700, 3)])]);
    assert!(!has_line_pointers_of(&leaf));
    assert!(check_page(&leaf, rmgr_id::GIN).is_ok());
    let list = entry_page(GIN_LIST, &[entry_tuple(0, 1, 1)]);
    assert!(has_line_pointers_of(&list));
}
