//! Heap (rmgr 10) redo on hand-built pages: every record kind, with the
//! expected page written out byte by byte (header fields, line pointers,
//! tuple headers at their exact offsets), plus the faults. The helpers are
//! shared with the Heap2 tests.

use bytes::Bytes;
use utils::lsn::Lsn;

use crate::consts::{BLCKSZ, MAIN_FORKNUM, VISIBILITYMAP_FORKNUM};
use crate::page::PageHeader;
use crate::redo::{apply, BlockRef, Fault, RedoError, RedoRecord};
use crate::wal::{rmgr_id, BlockTag};
use crate::PgMajorVersion;

pub(crate) const LSN: Lsn = Lsn(0x0000_0001_0000_0028);
pub(crate) const XID: u32 = 1000;

pub(crate) fn tag(fork: u8, blkno: u32) -> BlockTag {
    BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16384, fork, blkno }
}

/// A record with blocks (id, fork, blkno, will_init) redoing block `target`.
pub(crate) fn record(
    rmid: u8,
    info: u8,
    target: u8,
    blocks: &[(u8, u8, u32)],
    block_data: &[u8],
    main: &[u8],
) -> RedoRecord {
    RedoRecord {
        rmid,
        info,
        xid: XID,
        target,
        blocks: blocks
            .iter()
            .map(|&(id, fork, blkno)| BlockRef {
                id,
                tag: tag(fork, blkno),
                will_init: info & 0x80 != 0 && id == 0,
                has_image: false,
            })
            .collect(),
        block_data: Bytes::copy_from_slice(block_data),
        main_data: Bytes::copy_from_slice(main),
    }
}

pub(crate) fn run(page: &mut [u8], rec: &RedoRecord, v: PgMajorVersion) -> Result<(), RedoError> {
    apply(page, rec.target_block().unwrap().tag, LSN, rec, v)
}

/// An empty heap page (`PageInit(page, BLCKSZ, 0)`), written field by field.
pub(crate) fn empty_page() -> Vec<u8> {
    let mut p = vec![0u8; BLCKSZ];
    let h = PageHeader {
        lower: 24,
        upper: 8192,
        special: 8192,
        pagesize_version: 0x2004,
        ..Default::default()
    };
    h.encode(&mut p);
    p
}

pub(crate) fn set_header(p: &mut [u8], f: impl FnOnce(&mut PageHeader)) {
    let mut h = PageHeader::decode(p);
    f(&mut h);
    h.encode(p);
}

/// Write line pointer `off` raw (lp_off 15 bits, lp_flags 2, lp_len 15).
pub(crate) fn put_lp(p: &mut [u8], off: usize, lp_off: u32, flags: u32, len: u32) {
    let raw = lp_off | (flags << 15) | (len << 17);
    p[24 + 4 * (off - 1)..][..4].copy_from_slice(&raw.to_le_bytes());
}

/// A tuple: header fields and data after a 24-byte t_hoff (1 pad byte).
pub(crate) fn tuple(
    xmin: u32,
    xmax: u32,
    ctid: (u32, u16),
    im2: u16,
    im: u16,
    data: &[u8],
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&xmin.to_le_bytes());
    t.extend_from_slice(&xmax.to_le_bytes());
    t.extend_from_slice(&0u32.to_le_bytes());
    t.extend_from_slice(&((ctid.0 >> 16) as u16).to_le_bytes());
    t.extend_from_slice(&(ctid.0 as u16).to_le_bytes());
    t.extend_from_slice(&ctid.1.to_le_bytes());
    t.extend_from_slice(&im2.to_le_bytes());
    t.extend_from_slice(&im.to_le_bytes());
    t.push(24);
    t.push(0);
    t.extend_from_slice(data);
    t
}

/// A page holding `tuples` at offsets 1.., placed downward from the end.
pub(crate) fn page_with(tuples: &[Vec<u8>]) -> Vec<u8> {
    let mut p = empty_page();
    let mut upper = BLCKSZ;
    for (i, t) in tuples.iter().enumerate() {
        upper -= (t.len() + 7) & !7;
        p[upper..upper + t.len()].copy_from_slice(t);
        put_lp(&mut p, i + 1, upper as u32, 1, t.len() as u32);
    }
    set_header(&mut p, |h| {
        h.lower = 24 + 4 * tuples.len() as u16;
        h.upper = upper as u16;
    });
    p
}

/// `page` as redo leaves it: LSN stamped.
pub(crate) fn with_lsn(mut page: Vec<u8>) -> Vec<u8> {
    set_header(&mut page, |h| h.lsn = LSN.0);
    page
}

fn xl_header(im2: u16, im: u16, hoff: u8) -> Vec<u8> {
    let mut b = im2.to_le_bytes().to_vec();
    b.extend_from_slice(&im.to_le_bytes());
    b.push(hoff);
    b
}

const V: PgMajorVersion = PgMajorVersion::V16;
const XMAX_INVALID: u16 = 0x0800;
const HOT_UPDATED: u16 = 0x4000;
const KEYS_UPDATED: u16 = 0x2000;

#[test]
fn insert_init_page() {
    let mut data = xl_header(2, 0x0802 | 0x0020, 24);
    data.extend_from_slice(&[0, 0x0b, b'h', b'e', b'l', b'l', b'o']);
    let main = [1, 0, 0]; // offnum 1, flags 0
    let rec = record(rmgr_id::HEAP, 0x80, 0, &[(0, MAIN_FORKNUM, 7)], &data, &main);
    let mut page = vec![0xEEu8; BLCKSZ];
    run(&mut page, &rec, V).unwrap();
    // COMBOCID (0x0020) is cleared by SetCmin.
    let t = tuple(XID, 0, (7, 1), 2, 0x0802, &[0x0b, b'h', b'e', b'l', b'l', b'o']);
    assert_eq!(t.len(), 30);
    assert_eq!(page, with_lsn(page_with(&[t])));
}

#[test]
fn insert_clears_all_visible_and_checks_offset() {
    let old = tuple(5, 0, (3, 1), 1, XMAX_INVALID, &[1, 2, 3, 4]);
    let mut page = page_with(std::slice::from_ref(&old));
    set_header(&mut page, |h| h.flags = 0x4);
    let mut data = xl_header(1, XMAX_INVALID, 24);
    data.extend_from_slice(&[0, 9, 9]);
    let rec = record(rmgr_id::HEAP, 0x00, 0, &[(0, MAIN_FORKNUM, 3)], &data, &[2, 0, 0x01]);
    let before = page.clone();
    run(&mut page, &rec, V).unwrap();
    let mut want = page_with(&[old, tuple(XID, 0, (3, 2), 1, XMAX_INVALID, &[9, 9])]);
    want = with_lsn(want);
    assert_eq!(page, want);
    // Offset 4 is past max + 1: refused, never a panic.
    let rec = record(rmgr_id::HEAP, 0x00, 0, &[(0, MAIN_FORKNUM, 3)], &data, &[4, 0, 0]);
    let mut page = before.clone();
    assert!(matches!(run(&mut page, &rec, V).unwrap_err().fault, Fault::Page(_)));
    // Offset 1 is in use.
    let rec = record(rmgr_id::HEAP, 0x00, 0, &[(0, MAIN_FORKNUM, 3)], &data, &[1, 0, 0]);
    assert!(run(&mut before.clone(), &rec, V).is_err());
}

fn xmax_main(xmax: u32, off: u16, infobits: u8, flags: u8) -> Vec<u8> {
    let mut m = xmax.to_le_bytes().to_vec();
    m.extend_from_slice(&off.to_le_bytes());
    m.extend_from_slice(&[infobits, flags]);
    m
}

#[test]
fn delete_sets_xmax_ctid_prunable() {
    let t = tuple(5, 77, (9, 9), 3 | HOT_UPDATED, XMAX_INVALID | 0x0100 | 0x0020, &[1, 2]);
    let mut page = page_with(&[t]);
    set_header(&mut page, |h| h.flags = 0x4);
    let main = xmax_main(XID, 1, 0x10, 0x01); // KEYS_UPDATED; ALL_VISIBLE_CLEARED
    let rec = record(rmgr_id::HEAP, 0x10, 0, &[(0, MAIN_FORKNUM, 4)], &[], &main);
    run(&mut page, &rec, V).unwrap();
    let want_t = tuple(5, XID, (4, 1), 3 | KEYS_UPDATED, 0x0100, &[1, 2]);
    let mut want = with_lsn(page_with(&[want_t]));
    set_header(&mut want, |h| h.prune_xid = XID);
    assert_eq!(page, want);

    // Super-deletion clears xmin; a partition move marks ctid moved.
    let t = tuple(5, 0, (4, 1), 3, XMAX_INVALID, &[1, 2]);
    let mut page = page_with(&[t]);
    let rec =
        record(rmgr_id::HEAP, 0x10, 0, &[(0, MAIN_FORKNUM, 4)], &[], &xmax_main(0, 1, 0, 0x18));
    run(&mut page, &rec, V).unwrap();
    let mut want = with_lsn(page_with(&[tuple(0, 0, (u32::MAX, 0xFFFD), 3, 0, &[1, 2])]));
    set_header(&mut want, |h| h.prune_xid = XID);
    assert_eq!(page, want);
}

#[test]
fn delete_of_a_dead_line_pointer_is_a_fault() {
    let mut page = page_with(&[tuple(5, 0, (4, 1), 3, XMAX_INVALID, &[1, 2])]);
    put_lp(&mut page, 1, 0, 3, 0);
    let rec = record(rmgr_id::HEAP, 0x10, 0, &[(0, MAIN_FORKNUM, 4)], &[], &xmax_main(9, 1, 0, 0));
    assert!(matches!(run(&mut page, &rec, V).unwrap_err().fault, Fault::Page(_)));
    let rec = record(rmgr_id::HEAP, 0x10, 0, &[(0, MAIN_FORKNUM, 4)], &[], &[1, 2, 3]);
    assert!(matches!(run(&mut page, &rec, V).unwrap_err().fault, Fault::Malformed(_)));
}

fn update_main(old_xmax: u32, old_off: u16, infobits: u8, flags: u8, new_off: u16) -> Vec<u8> {
    let mut m = xmax_main(old_xmax, old_off, infobits, flags);
    m.extend_from_slice(&0u32.to_le_bytes());
    m.extend_from_slice(&new_off.to_le_bytes());
    m
}

#[test]
fn hot_update_same_page_with_prefix_and_suffix() {
    let old = tuple(5, 0, (2, 1), 0x8002, XMAX_INVALID, b"abcdefgh");
    let mut page = page_with(&[old]);
    // flags: PREFIX 0x20 | SUFFIX 0x40; prefix 2, suffix 3.
    let main = update_main(XID, 1, 0, 0x60, 2);
    let mut data = vec![2, 0, 3, 0];
    data.extend_from_slice(&xl_header(0x8002, 0x2000 | XMAX_INVALID, 24));
    data.extend_from_slice(&[0, b'X', b'Y']);
    let rec = record(rmgr_id::HEAP, 0x40, 0, &[(0, MAIN_FORKNUM, 2)], &data, &main);
    run(&mut page, &rec, V).unwrap();
    let old_after = tuple(5, XID, (2, 2), 0x8002 | HOT_UPDATED, 0, b"abcdefgh");
    let new = tuple(XID, 0, (2, 2), 0x8002, 0x2000 | XMAX_INVALID, b"abXYfgh");
    let mut want = with_lsn(page_with(&[old_after, new]));
    set_header(&mut want, |h| h.prune_xid = XID);
    assert_eq!(page, want);
}

#[test]
fn update_across_pages_old_and_init_new() {
    let old = tuple(5, 0, (2, 3), 2, XMAX_INVALID, b"old!");
    let filler = tuple(5, 0, (2, 1), 2, XMAX_INVALID, b"x");
    let blocks = [(0, MAIN_FORKNUM, 9), (1, MAIN_FORKNUM, 2)];
    let main = update_main(XID, 2, 0x10, 0x03, 1);
    // Old page (block 1): no data.
    let mut page = page_with(&[filler.clone(), old]);
    set_header(&mut page, |h| h.flags = 0x4);
    let rec = record(rmgr_id::HEAP, 0xA0, 1, &blocks, &[], &main);
    run(&mut page, &rec, V).unwrap();
    let mut want =
        with_lsn(page_with(&[filler, tuple(5, XID, (9, 1), 2 | KEYS_UPDATED, 0, b"old!")]));
    set_header(&mut want, |h| h.prune_xid = XID);
    assert_eq!(page, want);
    // New page (block 0, INIT_PAGE): from zeros.
    let mut data = xl_header(2, XMAX_INVALID, 24);
    data.extend_from_slice(&[0, b'n', b'e', b'w']);
    let rec = record(rmgr_id::HEAP, 0xA0, 0, &blocks, &data, &main);
    let mut page = vec![0u8; BLCKSZ];
    run(&mut page, &rec, V).unwrap();
    assert_eq!(page, with_lsn(page_with(&[tuple(XID, 0, (9, 1), 2, XMAX_INVALID, b"new")])));
    // A prefix from another page is malformed.
    let main = update_main(XID, 2, 0, 0x20, 1);
    let mut pdata = vec![1, 0];
    pdata.extend_from_slice(&data);
    let rec = record(rmgr_id::HEAP, 0x20, 0, &blocks, &pdata, &main);
    assert!(run(&mut empty_page(), &rec, V).is_err());
}

#[test]
fn lock_confirm_inplace() {
    let t = tuple(5, 0, (3, 7), 1 | HOT_UPDATED, XMAX_INVALID, b"abcd");
    let page0 = page_with(&[t]);
    // LOCK, LOCK_ONLY | EXCL_LOCK: locked only, so HOT_UPDATED off, ctid = self.
    let mut page = page0.clone();
    let rec =
        record(rmgr_id::HEAP, 0x60, 0, &[(0, MAIN_FORKNUM, 3)], &[], &xmax_main(XID, 1, 0x06, 0));
    run(&mut page, &rec, V).unwrap();
    let want = with_lsn(page_with(&[tuple(5, XID, (3, 1), 1, 0x0080 | 0x0040, b"abcd")]));
    assert_eq!(page, want);
    // CONFIRM: the speculative token becomes the TID.
    let mut page = page_with(&[tuple(5, 0, (1234, 0xFFFE), 1, XMAX_INVALID, b"abcd")]);
    let rec = record(rmgr_id::HEAP, 0x50, 0, &[(0, MAIN_FORKNUM, 3)], &[], &[1, 0]);
    run(&mut page, &rec, V).unwrap();
    assert_eq!(page, with_lsn(page_with(&[tuple(5, 0, (3, 1), 1, XMAX_INVALID, b"abcd")])));
    // INPLACE: same-length data after t_hoff (18 appends messages to main data).
    let mut page = page0.clone();
    let main = [1, 0, 9, 9, 9, 9];
    let rec = record(rmgr_id::HEAP, 0x70, 0, &[(0, MAIN_FORKNUM, 3)], b"WXYZ", &main);
    run(&mut page, &rec, PgMajorVersion::V18).unwrap();
    let want = with_lsn(page_with(&[tuple(5, 0, (3, 7), 1 | HOT_UPDATED, XMAX_INVALID, b"WXYZ")]));
    assert_eq!(page, want);
    let rec = record(rmgr_id::HEAP, 0x70, 0, &[(0, MAIN_FORKNUM, 3)], b"short", &main);
    assert!(run(&mut page0.clone(), &rec, V).is_err());
}

#[test]
fn records_without_a_page_or_in_the_wrong_fork_are_refused() {
    let rec = record(rmgr_id::HEAP, 0x30, 0, &[(0, MAIN_FORKNUM, 1)], &[], &[0; 9]);
    assert!(matches!(run(&mut empty_page(), &rec, V).unwrap_err().fault, Fault::Malformed(_)));
    // An INSERT whose target is a VM page, before 18.
    let blocks = [(0, MAIN_FORKNUM, 1), (1, VISIBILITYMAP_FORKNUM, 0)];
    let rec = record(rmgr_id::HEAP, 0x00, 1, &blocks, &[], &[1, 0, 1]);
    assert!(run(&mut empty_page(), &rec, PgMajorVersion::V17).is_err());
}

/// A VM page with every bit set.
pub(crate) fn full_vm_page() -> Vec<u8> {
    let mut p = empty_page();
    p[24..].fill(0xFF);
    p
}

#[test]
fn pg18_vm_block_references_clear_bits() {
    // INSERT on heap block 6: VM byte 24 + 1, bits 4-5.
    let blocks = [(0, MAIN_FORKNUM, 6), (1, VISIBILITYMAP_FORKNUM, 0)];
    let rec = record(rmgr_id::HEAP, 0x00, 1, &blocks, &[], &[1, 0, 0x01]);
    let mut vm = full_vm_page();
    run(&mut vm, &rec, PgMajorVersion::V18).unwrap();
    let mut want = with_lsn(full_vm_page());
    want[25] = 0b1100_1111;
    assert_eq!(vm, want);
    // LOCK clears all-frozen only (bit 5).
    let rec = record(rmgr_id::HEAP, 0x60, 1, &blocks, &[], &xmax_main(XID, 1, 0, 0x01));
    let mut vm = full_vm_page();
    run(&mut vm, &rec, PgMajorVersion::V18).unwrap();
    want[25] = 0b1101_1111;
    assert_eq!(vm, want);
    // UPDATE: VM_NEW (id 2) also clears the old block's bits on the same VM page.
    let blocks = [(0, MAIN_FORKNUM, 6), (1, MAIN_FORKNUM, 1), (2, VISIBILITYMAP_FORKNUM, 0)];
    let rec = record(rmgr_id::HEAP, 0x20, 2, &blocks, &[], &update_main(XID, 1, 0, 0x03, 1));
    let mut vm = full_vm_page();
    run(&mut vm, &rec, PgMajorVersion::V18).unwrap();
    want[24] = 0b1111_0011;
    want[25] = 0b1100_1111;
    assert_eq!(vm, want);
    // VM_OLD (id 3) on another VM page: heap block 40000 is on VM page 1.
    let blocks = [(0, MAIN_FORKNUM, 6), (1, MAIN_FORKNUM, 40_000), (3, VISIBILITYMAP_FORKNUM, 1)];
    let rec = record(rmgr_id::HEAP, 0x20, 3, &blocks, &[], &update_main(XID, 1, 0, 0x01, 1));
    let mut vm = full_vm_page();
    run(&mut vm, &rec, PgMajorVersion::V18).unwrap();
    let idx = 40_000 - 32_672;
    let mut want = with_lsn(full_vm_page());
    want[24 + idx / 4] &= !(0b11 << ((idx % 4) * 2));
    assert_eq!(vm, want);
    // A VM page that does not map the heap block is refused.
    let blocks = [(0, MAIN_FORKNUM, 40_000), (1, VISIBILITYMAP_FORKNUM, 0)];
    let rec = record(rmgr_id::HEAP, 0x10, 1, &blocks, &[], &xmax_main(XID, 1, 0, 0x01));
    assert!(run(&mut full_vm_page(), &rec, PgMajorVersion::V18).is_err());
}
