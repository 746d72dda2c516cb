//! Masks on hand-built pages, compared with the exact bytes PostgreSQL's
//! masking leaves; garbage pages must not panic.

use super::*;
use crate::consts::BLCKSZ;
use crate::page::PageHeader;

const V: PgMajorVersion = PgMajorVersion::V15;

/// A page whose header has every field set (so masking shows), the hole
/// between `lower` and `upper` filled with 0xAA and the rest with 0x55.
fn page(lower: u16, upper: u16, special: u16) -> Vec<u8> {
    let mut p = vec![0x55u8; BLCKSZ];
    PageHeader {
        lsn: 0x1_0000_0020,
        checksum: 0x1234,
        flags: PD_ALL_VISIBLE | PD_PAGE_FULL | PD_HAS_FREE_LINES,
        lower,
        upper,
        special,
        pagesize_version: 8192 | 4,
        prune_xid: 777,
    }
    .encode(&mut p);
    p[lower as usize..upper as usize].fill(0xAA);
    p
}

/// Line pointer `off` (1-based) as `ItemIdData` bits.
fn set_lp(p: &mut [u8], off: usize, lp_off: u32, flags: u32, len: u32) {
    let word = lp_off | (flags << 15) | (len << 17);
    p[item_id_at(off)..item_id_at(off) + 4].copy_from_slice(&word.to_le_bytes());
}

fn put16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// The header every mask but seq/generic leaves: LSN, checksum, prune xid
/// zero and the three hint flags cleared.
fn masked_header(p: &mut [u8], lower: u16, upper: u16, special: u16) {
    PageHeader { lower, upper, special, pagesize_version: 8192 | 4, ..Default::default() }
        .encode(p);
}

#[test]
fn heap_mask_tuples_padding_and_hole() {
    let mut p = page(36, 8128, 8192);
    set_lp(&mut p, 1, 8160, 1, 27); // normal, not frozen
    set_lp(&mut p, 2, 8128, 1, 32); // normal, frozen, speculative
    set_lp(&mut p, 3, 1, 2, 0); // redirect to 1
    put16(&mut p, 8160 + 20, 0x0902); // XMAX_INVALID | XMIN_COMMITTED | HASVARWIDTH
    put16(&mut p, 8128 + 20, 0x1F01); // frozen, xmax committed+invalid, multi
    put16(&mut p, 8128 + 16, 0xFFFE); // t_ctid.ip_posid = SpecTokenOffsetNumber
    mask_page(&mut p, rmgr_id::HEAP, 0x0001_0002, V);

    let mut want = vec![0x55u8; BLCKSZ];
    masked_header(&mut want, 36, 8128, 8192);
    want[24..36].copy_from_slice(&p[24..36]); // line pointers unchanged
    want[36..8128].fill(0);
    want[8160 + 8..8160 + 12].fill(0); // t_cid
    put16(&mut want, 8160 + 20, 0x0002);
    want[8187..8192].fill(0); // padding after 27 bytes
    want[8128 + 8..8128 + 12].fill(0);
    want[8128 + 12..8128 + 18].copy_from_slice(&[1, 0, 2, 0, 2, 0]); // (block 0x10002, off 2)
    put16(&mut want, 8128 + 20, 0x1301);
    assert_eq!(first_difference(&p, &want), None);
    assert_eq!(&p[24..36], &[0xE0, 0x9F, 0x36, 0x00, 0xC0, 0x9F, 0x40, 0x00, 1, 0, 1, 0]);
}

#[test]
fn heap_mask_on_a_visibility_map_page_leaves_only_the_header() {
    let mut p = vec![0xFFu8; BLCKSZ];
    PageHeader {
        lsn: 9,
        flags: PD_ALL_VISIBLE,
        lower: 24,
        upper: 8192,
        special: 8192,
        ..Default::default()
    }
    .encode(&mut p);
    mask_page(&mut p, rmgr_id::HEAP2, 0, PgMajorVersion::V18);
    let mut want = vec![0u8; BLCKSZ];
    masked_header(&mut want, 24, 8192, 8192);
    want[18..20].fill(0);
    assert_eq!(p, want);
}

#[test]
fn btree_leaf_and_internal() {
    for (flags, lp_masked) in [(0x0063u16, true), (0x0062, false)] {
        let mut p = page(32, 8160, 8176);
        set_lp(&mut p, 1, 8168, 3, 8); // LP_DEAD
        set_lp(&mut p, 2, 8160, 1, 8);
        put16(&mut p, 8176 + 12, flags); // LEAF? | ROOT | SPLIT_END | HAS_GARBAGE
        put16(&mut p, 8176 + 14, 7);
        mask_page(&mut p, rmgr_id::BTREE, 1, V);
        let mut want = vec![0x55u8; BLCKSZ];
        masked_header(&mut want, 32, 8160, 8176);
        if lp_masked {
            set_lp(&mut want, 1, 8168, 0, 8);
            set_lp(&mut want, 2, 8160, 0, 8);
        } else {
            set_lp(&mut want, 1, 8168, 3, 8);
            set_lp(&mut want, 2, 8160, 1, 8);
        }
        want[32..8160].fill(0);
        put16(&mut want, 8176 + 12, flags & 0x0003);
        put16(&mut want, 8176 + 14, 0);
        assert_eq!(first_difference(&p, &want), None, "flags {flags:#x}");
    }
}

#[test]
fn hash_unused_and_bucket_pages() {
    let mut p = page(28, 8160, 8176);
    put16(&mut p, 8176 + 12, 0x0080); // unused page with HAS_DEAD_TUPLES
    mask_page(&mut p, rmgr_id::HASH, 3, V);
    let mut want = vec![0u8; BLCKSZ];
    masked_header(&mut want, 0, 0, 8176);
    assert_eq!(first_difference(&p, &want), None);

    let mut p = page(28, 8160, 8176);
    set_lp(&mut p, 1, 8160, 3, 16);
    put16(&mut p, 8176 + 12, 0x0082); // bucket page with HAS_DEAD_TUPLES
    mask_page(&mut p, rmgr_id::HASH, 3, V);
    let mut want = vec![0x55u8; BLCKSZ];
    masked_header(&mut want, 28, 8160, 8176);
    set_lp(&mut want, 1, 8160, 0, 16);
    want[28..8160].fill(0);
    put16(&mut want, 8176 + 12, 0x0002);
    assert_eq!(first_difference(&p, &want), None);
}

#[test]
fn gin_deleted_and_unset_lower() {
    let mut p = page(40, 8184, 8184);
    put16(&mut p, 8184 + 6, 0x0004); // GIN_DELETED
    mask_page(&mut p, rmgr_id::GIN, 0, V);
    let mut want = vec![0u8; BLCKSZ];
    masked_header(&mut want, 0, 0, 8184);
    assert_eq!(first_difference(&p, &want), None);

    // pd_lower left at the header (GIN data pages before 9.4 style): no hole masking.
    let mut p = page(24, 8000, 8184);
    put16(&mut p, 8184 + 6, 0x0001);
    mask_page(&mut p, rmgr_id::GIN, 0, V);
    let mut want = page(24, 8000, 8184);
    put16(&mut want, 8184 + 6, 0x0001);
    masked_header(&mut want, 24, 8000, 8184);
    assert_eq!(first_difference(&p, &want), None);
}

#[test]
fn gist_leaf() {
    let mut p = page(28, 8160, 8176);
    set_lp(&mut p, 1, 8160, 3, 16);
    p[8176..8184].fill(0x77); // nsn
    put16(&mut p, 8176 + 12, 0x0015); // LEAF | TUPLES_DELETED | HAS_GARBAGE
    mask_page(&mut p, rmgr_id::GIST, 0, V);
    let mut want = vec![0x55u8; BLCKSZ];
    masked_header(&mut want, 28, 8160, 8176);
    set_lp(&mut want, 1, 8160, 0, 16);
    want[28..8160].fill(0);
    want[8176..8184].fill(0);
    put16(&mut want, 8176 + 12, 0x0009); // LEAF | FOLLOW_RIGHT
    assert_eq!(first_difference(&p, &want), None);
}

#[test]
fn brin_regular_and_revmap() {
    for (page_type, hole_masked) in [(0xF093u16, true), (0xF092, false), (0xF091, true)] {
        let mut p = page(28, 8000, 8184);
        put16(&mut p, 8184 + 4, 0x0001); // EVACUATE
        put16(&mut p, 8184 + 6, page_type);
        mask_page(&mut p, rmgr_id::BRIN, 0, V);
        let mut want = page(28, 8000, 8184);
        masked_header(&mut want, 28, 8000, 8184);
        if hole_masked {
            want[28..8000].fill(0);
        }
        put16(&mut want, 8184 + 4, 0);
        put16(&mut want, 8184 + 6, page_type);
        assert_eq!(first_difference(&p, &want), None, "type {page_type:#x}");
    }
}

#[test]
fn spgist_sequence_and_generic() {
    let mut p = page(28, 8000, 8184);
    mask_page(&mut p, rmgr_id::SPGIST, 0, V);
    let mut want = page(28, 8000, 8184);
    masked_header(&mut want, 28, 8000, 8184);
    want[28..8000].fill(0);
    assert_eq!(first_difference(&p, &want), None);

    for rmid in [rmgr_id::SEQUENCE, rmgr_id::GENERIC] {
        let mut p = page(28, 8000, 8184);
        mask_page(&mut p, rmid, 0, V);
        let mut want = page(28, 8000, 8184);
        want[0..10].fill(0); // LSN and checksum only: hints stay
        want[28..8000].fill(0);
        assert_eq!(first_difference(&p, &want), None, "rmgr {rmid}");
    }
}

#[test]
fn rmgrs_without_mask_leave_the_page() {
    let mut p = page(28, 8000, 8184);
    mask_page(&mut p, rmgr_id::XLOG, 0, V);
    assert_eq!(p, page(28, 8000, 8184));
}

#[test]
fn inconsistent_bounds_skip_the_hole() {
    let mut p = page(28, 8000, 8184);
    put16(&mut p, PD_LOWER, 8100); // lower > upper: PostgreSQL would raise an error
    mask_page(&mut p, rmgr_id::SEQUENCE, 0, V);
    assert!(p[28..8000].iter().all(|&b| b == 0xAA));
}

#[test]
fn garbage_pages_do_not_panic() {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for len in [0, 3, 23, 24, 100, BLCKSZ] {
        for round in 0..200 {
            let mut p: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            if round % 2 == 0 && len >= 24 {
                put16(&mut p, PD_LOWER, 0x7FF0); // huge item count
                put16(&mut p, PD_SPECIAL, 8190);
            }
            for rmid in 0..=21 {
                let mut q = p.clone();
                mask_page(&mut q, rmid, u32::MAX, PgMajorVersion::V17);
                assert_eq!(q.len(), len);
            }
        }
    }
}

#[test]
fn first_difference_ranges() {
    assert_eq!(first_difference(b"abcdef", b"abcdef"), None);
    assert_eq!(first_difference(b"abcdef", b"abXYef"), Some(2..4));
    assert_eq!(first_difference(b"abcdef", b"abXdeY"), Some(2..3));
    assert_eq!(first_difference(b"abcdef", b"abcdXY"), Some(4..6));
    assert_eq!(first_difference(b"abc", b"abcde"), Some(3..5));
    assert_eq!(first_difference(b"abX", b"abcde"), Some(2..5));
    assert_eq!(first_difference(b"", b""), None);
}
