//! Hash redo on hand-made records: what the real-WAL fixtures cannot reach
//! (a new bitmap page from ADD_OVFL_PAGE, the metapage arithmetic of large
//! indexes, malformed input, wrong blocks and forks, pages of the wrong
//! kind), with the exact bytes PostgreSQL's redo writes.

use bytes::Bytes;
use utils::lsn::Lsn;

use super::page::*;
use crate::consts::BLCKSZ;
use crate::page::PageHeader;
use crate::redo::{apply, bufpage, BlockRef, Fault, RedoRecord};
use crate::wal::{rmgr_id, BlockTag};
use crate::PgMajorVersion;

fn tag(fork: u8, blkno: u32) -> BlockTag {
    BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16390, fork, blkno }
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
        rmid: rmgr_id::HASH,
        info,
        xid: 700,
        target,
        blocks: blocks
            .iter()
            .map(|&(id, blkno, will_init)| BlockRef {
                id,
                tag: tag(0, blkno),
                will_init,
                has_image: false,
            })
            .collect(),
        block_data: Bytes::copy_from_slice(data),
        main_data: Bytes::copy_from_slice(main),
    }
}

fn run(page: &mut [u8], rec: &RedoRecord, version: PgMajorVersion) -> Result<(), Fault> {
    let t = rec.target_block().unwrap().tag;
    apply(page, t, Lsn(0x1_0000_0028), rec, version).map_err(|e| e.fault)
}

fn init_meta_main(num_tuples: f64, ffactor: u16) -> Vec<u8> {
    let mut m = num_tuples.to_le_bytes().to_vec();
    m.extend_from_slice(&425u32.to_le_bytes());
    m.extend_from_slice(&ffactor.to_le_bytes());
    m
}

fn metapage(num_tuples: f64) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    let rec = record(0x00, 0, &[(0, 0, true)], &[], &init_meta_main(num_tuples, 307));
    run(&mut page, &rec, PgMajorVersion::V16).unwrap();
    page
}

fn get_u32(page: &[u8], at: usize) -> u32 {
    u32_at(page, at).unwrap()
}

/// A 16-byte hash index tuple holding hash code `code`.
fn tuple(code: u32) -> Vec<u8> {
    let mut t = vec![0u8; 16];
    t[6..8].copy_from_slice(&16u16.to_le_bytes());
    t[8..12].copy_from_slice(&code.to_le_bytes());
    t
}

fn bucket_page(n: u32) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    init_page(&mut page, Opaque { prev: 1, next: INVALID, bucket: 0, flag: 2 }).unwrap();
    for i in 0..n {
        bufpage::add_item(&mut page, &tuple(i), 0, false, false).unwrap();
    }
    page
}

#[test]
fn init_meta_page_matches_postgresql() {
    let page = metapage(0.0);
    let h = PageHeader::decode(&page);
    assert_eq!((h.lower, h.upper, h.special), (4568, 8176, 8176));
    assert_eq!(get_u32(&page, meta::MAGIC), 0x0644_0640);
    assert_eq!(u16_at(&page, meta::FFACTOR).unwrap(), 307);
    assert_eq!(u16_at(&page, meta::BSIZE).unwrap(), 8152);
    assert_eq!(u16_at(&page, meta::BMSIZE).unwrap(), 4096);
    assert_eq!(u16_at(&page, meta::BMSHIFT).unwrap(), 15);
    assert_eq!(get_u32(&page, meta::MAXBUCKET), 1);
    assert_eq!((get_u32(&page, meta::HIGHMASK), get_u32(&page, meta::LOWMASK)), (3, 1));
    assert_eq!(get_u32(&page, meta::OVFLPOINT), 1);
    assert_eq!(get_u32(&page, meta::SPARES + 4), 1);
    assert_eq!(Opaque::read(&page).unwrap().flag, LH_META_PAGE);
    // 1,000,000 tuples at 307 per bucket: 3258 buckets round up to the
    // splitpoint phase holding 3584 (groups of four phases past 2^10).
    let page = metapage(1_000_000.0);
    assert_eq!(get_u32(&page, meta::MAXBUCKET), 3583);
    assert_eq!(get_u32(&page, meta::HIGHMASK), 4095);
    assert_eq!(get_u32(&page, meta::OVFLPOINT), spare_index(3584));
}

#[test]
fn splitpoint_arithmetic() {
    assert_eq!(spare_index(2), 1);
    assert_eq!(spare_index(512), 9);
    assert_eq!(spare_index(1024), 13);
    assert_eq!(spare_index(1025), 14);
    assert_eq!(spare_index(1536), 15);
    assert_eq!(total_buckets(9), 512);
    assert_eq!(total_buckets(10), 640);
    assert_eq!(total_buckets(13), 1024);
    for n in [3, 100, 1000, 5000, 1 << 20] {
        assert!(total_buckets(spare_index(n)) >= n, "{n}");
    }
}

#[test]
fn add_ovfl_page_with_a_new_bitmap_page() {
    // Blocks: 0 the new overflow page 9, 1 its left page 4, 2 the full
    // bitmap (bit 31 set), 3 a new bitmap page 10, 4 the metapage.
    let blocks = [(0, 9, true), (1, 4, false), (2, 3, false), (3, 10, true), (4, 0, false)];
    let main = [0x00, 0x10, 0x00];
    let mut ovfl = vec![0u8; BLCKSZ];
    run(&mut ovfl, &record(0x30, 0, &blocks, &7u32.to_le_bytes(), &main), PgMajorVersion::V17)
        .unwrap();
    assert_eq!(Opaque::read(&ovfl).unwrap(), Opaque { prev: 4, next: INVALID, bucket: 7, flag: 1 });

    let mut map = vec![0u8; BLCKSZ];
    init_bitmap(&mut map, 4096).unwrap();
    set_bitmap_bit(&mut map, 31, false).unwrap();
    assert_eq!(get_u32(&map, 24), 0x7FFF_FFFF);
    run(&mut map, &record(0x30, 2, &blocks, &31u32.to_le_bytes(), &main), PgMajorVersion::V17)
        .unwrap();
    assert_eq!(get_u32(&map, 24), 0xFFFF_FFFF);

    let mut newmap = vec![0u8; BLCKSZ];
    run(&mut newmap, &record(0x30, 3, &blocks, &[], &main), PgMajorVersion::V17).unwrap();
    assert_eq!(PageHeader::decode(&newmap).lower, 24 + 0x1000);
    assert!(!has_line_pointers(&newmap));

    let mut metap = metapage(0.0);
    run(&mut metap, &record(0x30, 4, &blocks, &77u32.to_le_bytes(), &main), PgMajorVersion::V17)
        .unwrap();
    assert_eq!(get_u32(&metap, meta::FIRSTFREE), 77);
    assert_eq!(get_u32(&metap, meta::NMAPS), 1);
    assert_eq!(get_u32(&metap, meta::MAPP), 10);
    assert_eq!(get_u32(&metap, meta::SPARES + 4), 3, "one overflow page and one bitmap page");
}

#[test]
fn vacuum_one_page_reads_ntuples_per_major() {
    let mut main15 = 0u32.to_le_bytes().to_vec();
    main15.extend_from_slice(&2i32.to_le_bytes());
    main15.extend_from_slice(&[2, 0, 3, 0]);
    let mut main16 = 0u32.to_le_bytes().to_vec();
    main16.extend_from_slice(&[2, 0, 1, 0, 2, 0, 3, 0]);
    let blocks = [(0, 1, false), (1, 0, false)];
    for (version, main) in [(PgMajorVersion::V15, &main15), (PgMajorVersion::V16, &main16)] {
        let mut page = bucket_page(4);
        modify_opaque(&mut page, |o| o.flag |= LH_PAGE_HAS_DEAD_TUPLES).unwrap();
        run(&mut page, &record(0xC0, 0, &blocks, &[], main), version).unwrap();
        assert_eq!(bufpage::max_offset(&page), 2);
        assert_eq!(bufpage::item(&page, 2).unwrap(), &tuple(3)[..]);
        assert_eq!(Opaque::read(&page).unwrap().flag, 2);
        let mut metap = metapage(0.0);
        Meta::open(&mut metap).unwrap().set_ntuples(10.0);
        run(&mut metap, &record(0xC0, 1, &blocks, &[], main), version).unwrap();
        assert_eq!(f64_at(&metap, meta::NTUPLES).unwrap(), 8.0);
    }
}

#[test]
fn squeeze_moves_tuples_and_frees_the_page() {
    // Write page 1 is the freed page 5's predecessor; 2 tuples move.
    let mut main = 1u32.to_le_bytes().to_vec();
    main.extend_from_slice(&INVALID.to_le_bytes());
    main.extend_from_slice(&[2, 0, 1, 1]);
    let blocks = [(1, 1, false), (2, 5, false), (5, 3, false), (6, 0, false)];
    let mut data = vec![3, 0, 4, 0];
    data.extend(tuple(8));
    data.extend(tuple(9));
    let mut page = bucket_page(2);
    modify_opaque(&mut page, |o| o.next = 5).unwrap();
    run(&mut page, &record(0x80, 1, &blocks, &data, &main), PgMajorVersion::V18).unwrap();
    assert_eq!(bufpage::max_offset(&page), 4);
    assert_eq!(bufpage::item(&page, 4).unwrap(), &tuple(9)[..]);
    assert_eq!(Opaque::read(&page).unwrap().next, INVALID);
    let mut freed = bucket_page(2);
    run(&mut freed, &record(0x80, 2, &blocks, &[], &main), PgMajorVersion::V18).unwrap();
    assert_eq!(
        Opaque::read(&freed).unwrap(),
        Opaque { prev: INVALID, next: INVALID, bucket: INVALID, flag: 0 }
    );
    assert_eq!(bufpage::max_offset(&freed), 0);
    // Block 3 is not written when the write page is the predecessor.
    let mut other = bucket_page(1);
    let with3 = [(1, 1, false), (2, 5, false), (3, 2, false)];
    let err =
        run(&mut other, &record(0x80, 3, &with3, &[], &main), PgMajorVersion::V18).unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("block id 3")));
}

#[test]
fn malformed_records_are_refused() {
    let v = PgMajorVersion::V15;
    // Short main data of INSERT.
    let mut page = bucket_page(1);
    let err = run(&mut page, &record(0x20, 0, &[(0, 1, false)], &tuple(1), &[1]), v).unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("main data of 1 bytes")));
    // A tuple list whose size field runs past the data.
    let mut data = vec![1, 0];
    data.extend(&tuple(1)[..12]);
    let err = run(&mut page, &record(0x70, 1, &[(1, 1, false)], &data, &[1, 0, 1]), v).unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("cut short")));
    // More tuples than ntups.
    let mut data = vec![2, 0];
    data.extend(tuple(1));
    data.extend(tuple(2));
    let err = run(&mut page, &record(0x70, 1, &[(1, 1, false)], &data, &[1, 0, 1]), v).unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("more than 1 tuples")));
    // An odd delete list.
    let err =
        run(&mut page, &record(0x90, 1, &[(1, 1, false)], &[1, 0, 2], &[0, 1]), v).unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("odd offset list")));
    // A fill factor of zero.
    let mut fresh = vec![0u8; BLCKSZ];
    let err = run(&mut fresh, &record(0x00, 0, &[(0, 0, true)], &[], &init_meta_main(5.0, 0)), v)
        .unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("fill factor 0")));
    // A bitmap larger than the page.
    let err =
        run(&mut fresh, &record(0x10, 0, &[(0, 3, true)], &[], &[0xF0, 0x1F]), v).unwrap_err();
    assert!(matches!(err, Fault::Malformed(m) if m.contains("bitmap of 8176 bytes")));
}

#[test]
fn wrong_pages_blocks_and_forks_are_refused() {
    let v = PgMajorVersion::V16;
    // The metapage's count on a bucket page.
    let mut page = bucket_page(1);
    let rec = record(0x20, 1, &[(0, 1, false), (1, 0, false)], &[], &[1, 0]);
    assert!(
        matches!(run(&mut page, &rec, v), Err(Fault::Page(m)) if m.contains("not a hash metapage"))
    );
    // A metapage elsewhere than block 0.
    let rec = record(0x20, 1, &[(0, 1, false), (1, 2, false)], &[], &[1, 0]);
    assert!(
        matches!(run(&mut page, &rec, v), Err(Fault::Malformed(m)) if m.contains("metapage at block 2"))
    );
    // A flag change on a page that is not a hash page (a new page, a
    // page with another special space).
    let mut zeros = vec![0u8; BLCKSZ];
    let rec = record(0xA0, 0, &[(0, 1, false)], &[], &[]);
    assert!(matches!(run(&mut zeros, &rec, v), Err(Fault::Page(m)) if m.contains("pd_special 0")));
    let mut other = vec![0u8; BLCKSZ];
    bufpage::page_init(&mut other, 16);
    assert!(
        matches!(run(&mut other, &rec, v), Err(Fault::Page(m)) if m.contains("not a hash page"))
    );
    // A bucket page locked only, by DELETE: unchanged, but a hash page.
    let rec = record(0x90, 0, &[(0, 1, false), (1, 7, false)], &[], &[1, 0]);
    assert!(
        matches!(run(&mut other, &rec, v), Err(Fault::Page(m)) if m.contains("not a hash page"))
    );
    let mut bucket = bucket_page(3);
    let before = bucket.clone();
    run(&mut bucket, &rec, v).unwrap();
    assert_eq!(bucket[8..], before[8..], "only pd_lsn changes");
    // A bitmap bit past the bitmap.
    let mut map = vec![0u8; BLCKSZ];
    init_bitmap(&mut map, 64).unwrap();
    assert!(
        matches!(set_bitmap_bit(&mut map, 512, true), Err(Fault::Page(m)) if m.contains("past the bitmap"))
    );
    // SPLIT_COMPLETE has no block 2; SPLIT_PAGE is never redone without its image.
    let rec = record(0x60, 2, &[(2, 1, false)], &[], &[0, 0, 0, 0]);
    assert!(
        matches!(run(&mut page, &rec, v), Err(Fault::Malformed(m)) if m.contains("block id 2"))
    );
    let rec = record(0x50, 0, &[(0, 1, false)], &[], &[]);
    assert!(
        matches!(run(&mut page, &rec, v), Err(Fault::Malformed(m)) if m.contains("full-page image"))
    );
    // An unknown kind.
    let rec = record(0xD0, 0, &[(0, 1, false)], &[], &[]);
    assert!(matches!(run(&mut page, &rec, v), Err(Fault::Unsupported(_))));
    // The init fork only for the records that build an unlogged index.
    let mut rec = record(0xA0, 0, &[(0, 1, false)], &[], &[]);
    rec.blocks[0].tag.fork = 3;
    assert!(matches!(run(&mut page, &rec, v), Err(Fault::Malformed(m)) if m.contains("fork 3")));
    let mut rec = record(0x00, 0, &[(0, 0, true)], &[], &init_meta_main(0.0, 307));
    rec.blocks[0].tag.fork = 3;
    run(&mut zeros, &rec, v).unwrap();
    assert_eq!(PageHeader::decode(&zeros).lower, 4568);
}
