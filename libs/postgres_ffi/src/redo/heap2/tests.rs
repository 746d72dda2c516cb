//! Heap2 (rmgr 9) redo on hand-built pages: prune/vacuum/freeze in each
//! major's layout (the same page change from 15's, 16's and 17/18's
//! records), VISIBLE on both pages, MULTI_INSERT (+INIT, 2-byte
//! alignment of the tuple headers), LOCK_UPDATED, and the faults.

use crate::consts::{BLCKSZ, MAIN_FORKNUM, VISIBILITYMAP_FORKNUM};
use crate::redo::heap::tests::*;
use crate::wal::rmgr_id;
use crate::PgMajorVersion::{self, V15, V16, V17, V18};

const XMAX_INVALID: u16 = 0x0800;

fn four_tuples() -> Vec<u8> {
    let t = |i: u8| tuple(5, 0, (3, i as u16), 2, XMAX_INVALID, &[i; 4]);
    page_with(&[t(1), t(2), t(3), t(4)])
}

fn le16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// 1 → 2 redirected, 3 dead, 4 unused, then `PageRepairFragmentation`.
fn pruned(before: &[u8]) -> Vec<u8> {
    let mut want = before.to_vec();
    want.copy_within(8128..8160, 8160);
    put_lp(&mut want, 1, 2, 2, 0);
    put_lp(&mut want, 2, 8160, 1, 28);
    put_lp(&mut want, 3, 0, 3, 0);
    put_lp(&mut want, 4, 0, 0, 0);
    set_header(&mut want, |h| {
        h.lower = 36;
        h.upper = 8160;
    });
    with_lsn(want)
}

fn prune_record(v: PgMajorVersion) -> crate::redo::RedoRecord {
    let blocks = [(0, MAIN_FORKNUM, 3)];
    match v {
        V15 | V16 => {
            let mut main = 900u32.to_le_bytes().to_vec();
            main.extend_from_slice(&le16(&[1, 1]));
            if v == V16 {
                main.push(0);
            }
            record(rmgr_id::HEAP2, 0x10, 0, &blocks, &le16(&[1, 2, 3, 4]), &main)
        }
        _ => {
            let data = le16(&[1, 1, 2, 1, 3, 1, 4]);
            let main = [0, 0xE4 | 0x08, 1, 2, 3, 4]; // with a conflict horizon
            record(rmgr_id::HEAP2, 0x20, 0, &blocks, &data, &main)
        }
    }
}

#[test]
fn prune_in_every_layout() {
    for v in [V15, V16, V17, V18] {
        let mut page = four_tuples();
        let before = page.clone();
        run(&mut page, &prune_record(v), v).unwrap();
        assert_eq!(page, pruned(&before), "{v:?}");
    }
}

/// 3 and 4 dead, made unused, then the line-pointer array truncated.
fn with_dead_3_4() -> Vec<u8> {
    let mut page = four_tuples();
    put_lp(&mut page, 3, 0, 3, 0);
    put_lp(&mut page, 4, 0, 3, 0);
    page
}

#[test]
fn vacuum_and_cleanup_truncate_line_pointers() {
    let mut want = with_dead_3_4();
    put_lp(&mut want, 3, 0, 0, 0);
    put_lp(&mut want, 4, 0, 0, 0);
    set_header(&mut want, |h| h.lower = 32);
    let want = with_lsn(want);
    let blocks = [(0, MAIN_FORKNUM, 3)];
    for v in [V15, V16] {
        let rec = record(rmgr_id::HEAP2, 0x20, 0, &blocks, &le16(&[3, 4]), &le16(&[2]));
        let mut page = with_dead_3_4();
        run(&mut page, &rec, v).unwrap();
        assert_eq!(page, want, "{v:?}");
    }
    for v in [V17, V18] {
        let rec = record(rmgr_id::HEAP2, 0x30, 0, &blocks, &le16(&[2, 3, 4]), &[2, 0x80]);
        let mut page = with_dead_3_4();
        run(&mut page, &rec, v).unwrap();
        assert_eq!(page, want, "{v:?}");
    }
}

fn frozen(xvac: Option<u32>) -> Vec<u8> {
    let mut want = four_tuples();
    for (off, at) in [(1, 8160), (2, 8128)] {
        if off == 2 || xvac.is_some() {
            want[at + 20..at + 22].copy_from_slice(&0x0B00u16.to_le_bytes());
            want[at + 18..at + 20].copy_from_slice(&2u16.to_le_bytes());
            want[at + 8..at + 12].copy_from_slice(&xvac.unwrap_or(0).to_le_bytes());
        }
    }
    with_lsn(want)
}

#[test]
fn freeze_in_every_layout() {
    let blocks = [(0, MAIN_FORKNUM, 3)];
    // 15: one xl_heap_freeze_tuple for offset 2.
    let mut data = 0u32.to_le_bytes().to_vec();
    data.extend_from_slice(&le16(&[2, 2, 0x0B00]));
    data.extend_from_slice(&[0, 0]);
    let mut main = 900u32.to_le_bytes().to_vec();
    main.extend_from_slice(&le16(&[1]));
    let rec = record(rmgr_id::HEAP2, 0x30, 0, &blocks, &data, &main);
    let mut page = four_tuples();
    run(&mut page, &rec, V15).unwrap();
    assert_eq!(page, frozen(None));
    // 16: one plan (XLH_FREEZE_XVAC) for offsets 1 and 2.
    let mut plan = 0u32.to_le_bytes().to_vec();
    plan.extend_from_slice(&le16(&[2, 0x0B00]));
    plan.extend_from_slice(&[0x02, 0]);
    plan.extend_from_slice(&le16(&[2]));
    let mut data = plan.clone();
    data.extend_from_slice(&le16(&[1, 2]));
    main.push(0);
    let rec = record(rmgr_id::HEAP2, 0x30, 0, &blocks, &data, &main);
    let mut page = four_tuples();
    run(&mut page, &rec, V16).unwrap();
    assert_eq!(page, frozen(Some(2)));
    // 17/18: nplans, 2 pad bytes, the plan, the offsets.
    let mut data = le16(&[1, 0]);
    data.extend_from_slice(&plan);
    data.extend_from_slice(&le16(&[1, 2]));
    for v in [V17, V18] {
        let rec = record(rmgr_id::HEAP2, 0x20, 0, &blocks, &data, &[0, 0x10]);
        let mut page = four_tuples();
        run(&mut page, &rec, v).unwrap();
        assert_eq!(page, frozen(Some(2)), "{v:?}");
        // One offset short: malformed, page not trusted.
        let rec = record(rmgr_id::HEAP2, 0x20, 0, &blocks, &data[..data.len() - 2], &[0, 0x10]);
        assert!(run(&mut four_tuples(), &rec, v).is_err());
    }
}

#[test]
fn prune_faults() {
    let blocks = [(0, MAIN_FORKNUM, 3)];
    // Redirect from offset 9 of a 4-item page.
    let rec = record(rmgr_id::HEAP2, 0x10, 0, &blocks, &le16(&[1, 9, 2]), &[0, 0x24]);
    assert!(run(&mut four_tuples(), &rec, V17).is_err());
    // Counts beyond the data.
    let rec = record(rmgr_id::HEAP2, 0x10, 0, &blocks, &le16(&[5, 1]), &[0, 0x44]);
    assert!(run(&mut four_tuples(), &rec, V18).is_err());
    let mut main = 900u32.to_le_bytes().to_vec();
    main.extend_from_slice(&le16(&[3, 0]));
    let rec = record(rmgr_id::HEAP2, 0x10, 0, &blocks, &le16(&[1, 2]), &main);
    assert!(run(&mut four_tuples(), &rec, V15).is_err());
    // REWRITE and NEW_CID have no page.
    for op in [0x00, 0x70] {
        let rec = record(rmgr_id::HEAP2, op, 0, &blocks, &[], &[0; 32]);
        assert!(run(&mut four_tuples(), &rec, V16).is_err());
    }
}

#[test]
fn visible_sets_page_flag_and_vm_bits() {
    let blocks = [(0, VISIBILITYMAP_FORKNUM, 0), (1, MAIN_FORKNUM, 5)];
    let main = [1, 2, 3, 4, 0x03 | 0x04];
    let rec = record(rmgr_id::HEAP2, 0x40, 1, &blocks, &[], &main);
    let mut page = four_tuples();
    run(&mut page, &rec, V17).unwrap();
    let mut want = with_lsn(four_tuples());
    set_header(&mut want, |h| h.flags = 0x4);
    assert_eq!(page, want);
    // A new VM page is initialised; heap block 5 is byte 25, bits 2-3.
    let rec = record(rmgr_id::HEAP2, 0x40, 0, &blocks, &[], &main);
    let mut vm = vec![0u8; BLCKSZ];
    run(&mut vm, &rec, V15).unwrap();
    let mut want = with_lsn(empty_page());
    want[25] = 0x0C;
    assert_eq!(vm, want);
    // An existing VM page keeps its other bits.
    let mut vm = empty_page();
    vm[25] = 0x41;
    run(&mut vm, &rec, V18).unwrap();
    want[25] = 0x4D;
    assert_eq!(vm, want);
}

#[test]
fn multi_insert_with_offsets_and_init() {
    let existing = tuple(5, 0, (3, 1), 2, XMAX_INVALID, b"old");
    let mut page = page_with(std::slice::from_ref(&existing));
    // flags ALL_FROZEN_SET, ntuples 2, offsets 2, 3.
    let mut main = vec![0x20, 0];
    main.extend_from_slice(&le16(&[2, 2, 3]));
    let mut data = le16(&[4, 2, XMAX_INVALID]);
    data.extend_from_slice(&[24, 0, b'a', b'b', b'c', 0xEE]); // hoff, 4 bytes, 1 pad
    data.extend_from_slice(&le16(&[3, 2, XMAX_INVALID]));
    data.extend_from_slice(&[24, 0, b'x', b'y']);
    let rec = record(rmgr_id::HEAP2, 0x50, 0, &[(0, MAIN_FORKNUM, 3)], &data, &main);
    run(&mut page, &rec, V16).unwrap();
    let new = |off: u16, d: &[u8]| tuple(XID, 0, (3, off), 2, XMAX_INVALID, d);
    let mut want = with_lsn(page_with(&[existing, new(2, b"abc"), new(3, b"xy")]));
    set_header(&mut want, |h| h.flags = 0x4);
    assert_eq!(page, want);
    // INIT_PAGE: no offsets, tuples from offset 1 on a zeroed page.
    let mut data = le16(&[3, 2, XMAX_INVALID]);
    data.extend_from_slice(&[24, 0, b'x', b'y']);
    let rec = record(rmgr_id::HEAP2, 0xD0, 0, &[(0, MAIN_FORKNUM, 8)], &data, &[0, 0, 1, 0]);
    let mut page = vec![0u8; BLCKSZ];
    run(&mut page, &rec, V18).unwrap();
    assert_eq!(page, with_lsn(page_with(&[tuple(XID, 0, (8, 1), 2, XMAX_INVALID, b"xy")])));
    // Trailing bytes after the last tuple.
    let mut long = data.clone();
    long.extend_from_slice(&[0, 0]);
    let rec = record(rmgr_id::HEAP2, 0xD0, 0, &[(0, MAIN_FORKNUM, 8)], &long, &[0, 0, 1, 0]);
    assert!(run(&mut vec![0u8; BLCKSZ], &rec, V18).is_err());
}

#[test]
fn lock_updated_leaves_cid_and_ctid() {
    let mut t = tuple(5, 0, (3, 9), 2, XMAX_INVALID | 0x0020, b"ab");
    t[8..12].copy_from_slice(&0x5555u32.to_le_bytes());
    let mut page = page_with(&[t.clone()]);
    let mut main = XID.to_le_bytes().to_vec();
    main.extend_from_slice(&[1, 0, 0x09, 0]); // offnum 1, IS_MULTI | KEYSHR_LOCK
    let rec = record(rmgr_id::HEAP2, 0x60, 0, &[(0, MAIN_FORKNUM, 3)], &[], &main);
    run(&mut page, &rec, V15).unwrap();
    let mut want_t = t;
    want_t[4..8].copy_from_slice(&XID.to_le_bytes());
    want_t[20..22].copy_from_slice(&(0x0020u16 | 0x1000 | 0x0010).to_le_bytes());
    assert_eq!(page, with_lsn(page_with(&[want_t])));
}
