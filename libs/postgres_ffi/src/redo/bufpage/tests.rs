//! Pages built with known contents, checked byte for byte after each
//! primitive; then every real page image of the WAL fixtures.

use super::*;

const SPECIAL: usize = 16;
const END: usize = BLCKSZ - SPECIAL;

/// Item `k`: `len` bytes all equal to `k`.
fn it(k: u8, len: usize) -> Vec<u8> {
    vec![k; len]
}

/// A page with `SPECIAL` bytes of special space (filled with 0xEE) and
/// items `(k, len)` appended in order.
fn page_with(items: &[(u8, usize)]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    page_init(&mut page, SPECIAL);
    special_mut(&mut page).unwrap().fill(0xEE);
    for (n, &(k, len)) in items.iter().enumerate() {
        assert_eq!(add_item(&mut page, &it(k, len), 0, false, false).unwrap(), n as u16 + 1);
    }
    page
}

fn hdr(page: &[u8]) -> PageHeader {
    PageHeader::decode(page)
}

fn lps(page: &[u8]) -> Vec<ItemId> {
    (1..=max_offset(page)).map(|o| item_id(page, o).unwrap()).collect()
}

fn set_flags(page: &mut [u8], flags: u16) {
    let mut h = hdr(page);
    h.flags = flags;
    h.encode(page);
}

/// What a packed tuple space holds: `items` (item byte, len) from `END` down,
/// each taking `maxalign(len)` bytes, padding as given (`None`: not checked).
fn assert_packed(page: &[u8], items: &[(u8, usize, Option<u8>)]) {
    let mut at = END;
    for &(k, len, pad) in items {
        at -= maxalign(len);
        assert!(page[at..at + len].iter().all(|&b| b == k), "item {k} at {at}");
        let padding = &page[at + len..at + maxalign(len)];
        assert!(pad.is_none_or(|p| padding.iter().all(|&b| b == p)), "pad of {k}");
    }
    assert_eq!(hdr(page).upper as usize, at);
    assert!(page[END..].iter().all(|&b| b == 0xEE), "special space untouched");
}

#[test]
fn maxalign_and_item_id_bits() {
    assert_eq!([maxalign(0), maxalign(1), maxalign(8), maxalign(9)], [0, 8, 8, 16]);
    let id = ItemId { off: 8152, flags: LP_NORMAL, len: 40 };
    assert_eq!(id.to_raw(), 8152 | (1 << 15) | (40 << 17));
    assert_eq!(ItemId::from_raw(id.to_raw()), id);
    assert_eq!(ItemId::from_raw(0xFFFF_FFFF), ItemId { off: 0x7FFF, flags: 3, len: 0x7FFF });
    let redirect = ItemId { off: 7, flags: LP_REDIRECT, len: 0 };
    assert!(redirect.is_used() && !redirect.has_storage());
}

#[test]
fn page_init_lays_out_an_empty_page() {
    let mut page = vec![0xAAu8; BLCKSZ];
    page_init(&mut page, 13);
    let h = hdr(&page);
    assert_eq!((h.lower, h.upper, h.special, h.flags, h.lsn), (24, 8176, 8176, 0, 0));
    assert_eq!(h.pagesize_version, 8192 | 4);
    assert!(page[24..].iter().all(|&b| b == 0));
    assert_eq!(max_offset(&page), 0);
    assert_eq!(special(&page).unwrap().len(), 16);
    check_invariants(&page).unwrap();
    page_init(&mut page, BLCKSZ);
    assert!(matches!(check_invariants(&page), Err(Fault::Page(_))));
}

#[test]
fn add_item_appends_below_pd_upper() {
    let mut page = page_with(&[(1, 10)]);
    assert_eq!(lps(&page), vec![ItemId::normal(END as u16 - 16, 10)]);
    assert_eq!(add_item(&mut page, &it(2, 3), 0, false, true).unwrap(), 2);
    let h = hdr(&page);
    assert_eq!((h.lower, h.upper), (32, END as u16 - 24));
    assert_eq!(item_id(&page, 2).unwrap(), ItemId::normal(END as u16 - 24, 3));
    assert_eq!(item(&page, 2).unwrap(), &[2, 2, 2]);
    assert_packed(&page, &[(1, 10, Some(0)), (2, 3, Some(0))]);
    let raw = u32::from_le_bytes(page[28..32].try_into().unwrap());
    assert_eq!(raw, ItemId::normal(END as u16 - 24, 3).to_raw());
    check_invariants(&page).unwrap();
}

#[test]
fn add_item_reuses_the_first_unused_slot_when_hinted() {
    let mut page = page_with(&[(1, 8), (2, 8), (3, 8)]);
    set_item_id(&mut page, 2, ItemId::UNUSED).unwrap();
    // Without the hint the slot is not looked for.
    let mut unhinted = page.clone();
    assert_eq!(add_item(&mut unhinted, &it(4, 8), 0, false, true).unwrap(), 4);
    set_flags(&mut page, PD_HAS_FREE_LINES);
    assert_eq!(add_item(&mut page, &it(4, 8), 0, false, true).unwrap(), 2);
    let h = hdr(&page);
    assert_eq!((h.lower, h.upper, h.flags), (36, END as u16 - 32, PD_HAS_FREE_LINES));
    assert_eq!(item_id(&page, 2).unwrap(), ItemId::normal(END as u16 - 32, 8));
    // A wrong hint is cleared and the item appended.
    assert_eq!(add_item(&mut page, &it(5, 8), 0, false, true).unwrap(), 4);
    assert_eq!(hdr(&page).flags, 0);
    assert_eq!(hdr(&page).lower, 40);
}

#[test]
fn add_item_overwrite_takes_only_an_unused_slot_or_the_end() {
    let mut page = page_with(&[(1, 8), (2, 8)]);
    let err = add_item(&mut page, &it(9, 8), 1, true, false).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("used line pointer 1")), "{err}");
    set_item_id(&mut page, 1, ItemId::UNUSED).unwrap();
    assert_eq!(add_item(&mut page, &it(9, 8), 1, true, false).unwrap(), 1);
    assert_eq!(lps(&page)[0], ItemId::normal(END as u16 - 24, 8));
    assert_eq!(hdr(&page).lower, 32, "no new line pointer");
    assert_eq!(add_item(&mut page, &it(7, 8), 3, true, false).unwrap(), 3);
    assert!(add_item(&mut page, &it(7, 8), 5, true, false).is_err(), "past the end");
    assert!(add_item(&mut page, &it(7, 8), 5, false, false).is_err(), "past the end");
}

#[test]
fn add_item_in_the_middle_shifts_later_line_pointers() {
    let mut page = page_with(&[(1, 8), (2, 8), (3, 8)]);
    let before = lps(&page);
    assert_eq!(add_item(&mut page, &it(9, 5), 2, false, false).unwrap(), 2);
    let new = ItemId::normal(END as u16 - 32, 5);
    assert_eq!(lps(&page), vec![before[0], new, before[1], before[2]]);
    assert_eq!(hdr(&page).lower, 40);
    assert_packed(&page, &[(1, 8, Some(0)), (2, 8, Some(0)), (3, 8, Some(0)), (9, 5, Some(0))]);
}

#[test]
fn add_item_that_does_not_fit_is_a_fault_and_changes_nothing() {
    let mut page = page_with(&[(1, 4000), (2, 4000)]);
    let free = (hdr(&page).upper - hdr(&page).lower) as usize;
    let before = page.clone();
    let err = add_item(&mut page, &it(3, free - 3), 0, false, false).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("no room")), "{err}");
    assert_eq!(page, before);
    // 144 free: a line pointer and 136 bytes fit, 4 bytes stay free.
    assert_eq!(free, 144);
    assert_eq!(add_item(&mut page, &it(3, 133), 0, false, false).unwrap(), 3);
    assert_eq!((hdr(&page).lower, hdr(&page).upper), (36, 40));
}

#[test]
fn add_item_heap_cap_and_corrupt_pointers() {
    let mut page = page_with(&[]);
    let mut h = hdr(&page);
    h.lower = 24 + 4 * MAX_HEAP_TUPLES_PER_PAGE;
    h.encode(&mut page);
    assert!(add_item(&mut page, &it(1, 8), 0, false, true).is_err());
    assert_eq!(add_item(&mut page, &it(1, 8), 0, false, false).unwrap(), 292);
    h = hdr(&page);
    h.upper = 20;
    h.encode(&mut page);
    let err = add_item(&mut page, &it(1, 8), 0, false, false).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("corrupted page pointers")));
    assert!(add_item(&mut [0u8; 100], &[1], 0, false, false).is_err());
}

#[test]
fn item_accessors_check_storage_and_bounds() {
    let mut page = page_with(&[(1, 8), (2, 8)]);
    assert!(item_id(&page, 0).is_err() && item_id(&page, 3).is_err());
    item_mut(&mut page, 2).unwrap()[0] = 7;
    assert_eq!(item(&page, 2).unwrap(), &[7, 2, 2, 2, 2, 2, 2, 2]);
    set_item_id(&mut page, 1, ItemId { off: 2, flags: LP_REDIRECT, len: 0 }).unwrap();
    assert!(item(&page, 1).is_err(), "a redirect has no storage");
    set_item_id(&mut page, 1, ItemId::normal(8, 8)).unwrap();
    assert!(item(&page, 1).is_err(), "below pd_upper");
    assert!(check_invariants(&page).is_err());
    set_item_id(&mut page, 1, ItemId::normal(END as u16, 8)).unwrap();
    assert!(item(&page, 1).is_err(), "in the special space");
    assert!(set_item_id(&mut page, 1, ItemId::normal(0x8000, 8)).is_err());
}

#[test]
fn check_invariants_accepts_new_pages_and_refuses_broken_ones() {
    let mut page = vec![0u8; BLCKSZ];
    check_invariants(&page).unwrap();
    crate::page::set_page_lsn(&mut page, 0x1234);
    check_invariants(&page).unwrap();
    page[100] = 1;
    assert!(check_invariants(&page).is_err(), "not new, not initialised");
    assert!(check_invariants(&[0u8; 100]).is_err());
    let mut page = page_with(&[(1, 8)]);
    let mut h = hdr(&page);
    h.special = 8180;
    h.upper = 8100;
    h.encode(&mut page);
    assert!(check_invariants(&page).is_err(), "pd_special not maxaligned");
    assert!(check_header(&page).is_err(), "pd_special not maxaligned");
    let mut page = page_with(&[(1, 8)]);
    set_item_id(&mut page, 1, ItemId { off: END as u16 - 8, flags: LP_DEAD, len: 9 }).unwrap();
    assert!(check_invariants(&page).is_err(), "dead item with storage past pd_special");
    check_header(&page).unwrap();
    set_item_id(&mut page, 1, ItemId { off: 3, flags: LP_REDIRECT, len: 0 }).unwrap();
    check_invariants(&page).unwrap();
}

/// Why [`check_header`] exists: a btree metapage keeps `BTMetaPageData`
/// below `pd_lower`; a root block number past 1 GiB reads as a line
/// pointer with storage outside the tuple space.
#[test]
fn a_btree_metapage_is_not_line_pointers() {
    let mut page = vec![0u8; BLCKSZ];
    page_init(&mut page, 16);
    let fields: [u32; 7] = [0x053162, 4, 0x28000, 3, 0x28000, 3, 0];
    for (i, v) in fields.iter().enumerate() {
        page[24 + 4 * i..28 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    page[56..64].copy_from_slice(&(-1.0f64).to_le_bytes());
    let mut h = hdr(&page);
    h.lower = 24 + 48;
    h.encode(&mut page);
    assert_eq!(item_id(&page, 3).unwrap(), ItemId { off: 0, flags: LP_NORMAL, len: 1 });
    assert!(check_invariants(&page).is_err());
    check_header(&page).unwrap();
}

#[test]
fn repair_fragmentation_packs_items_and_truncates_the_array() {
    // 1 kept, 2 redirect, 3 dead without storage, 4 dead with storage,
    // 5 unused, 6 kept, 7-8 unused at the end.
    let mut page = page_with(&[(1, 8), (2, 20), (3, 8), (4, 12), (5, 8), (6, 30), (7, 8), (8, 8)]);
    let ids = lps(&page);
    set_item_id(&mut page, 2, ItemId { off: 6, flags: LP_REDIRECT, len: 0 }).unwrap();
    set_item_id(&mut page, 3, ItemId { off: 0, flags: LP_DEAD, len: 0 }).unwrap();
    set_item_id(&mut page, 4, ItemId { flags: LP_DEAD, ..ids[3] }).unwrap();
    for off in [5, 7, 8] {
        set_item_id(&mut page, off, ItemId { off: 77, flags: LP_UNUSED, len: 0 }).unwrap();
    }
    repair_fragmentation(&mut page).unwrap();
    let h = hdr(&page);
    assert_eq!((h.lower, h.flags), (24 + 6 * 4, PD_HAS_FREE_LINES));
    let e = END as u16;
    assert_eq!(
        lps(&page),
        vec![
            ItemId::normal(e - 8, 8),
            ItemId { off: 6, flags: LP_REDIRECT, len: 0 },
            ItemId { off: 0, flags: LP_DEAD, len: 0 },
            ItemId { off: e - 24, flags: LP_DEAD, len: 12 },
            ItemId::UNUSED,
            ItemId::normal(e - 56, 30),
        ]
    );
    assert_packed(&page, &[(1, 8, Some(0)), (4, 12, Some(0)), (6, 30, Some(0))]);
    check_invariants(&page).unwrap();
}

#[test]
fn repair_fragmentation_clears_the_hint_and_handles_unsorted_items() {
    let mut page = page_with(&[(1, 8), (2, 16), (3, 8)]);
    set_flags(&mut page, PD_HAS_FREE_LINES);
    // Items 1 and 3 swap places, item 2 goes: not presorted any more.
    let (a, c) = (item_id(&page, 1).unwrap(), item_id(&page, 3).unwrap());
    page.copy_within(a.off as usize..a.off as usize + 8, 0);
    page.copy_within(c.off as usize..c.off as usize + 8, a.off as usize);
    page.copy_within(0..8, c.off as usize);
    page[0..8].fill(0);
    set_item_id(&mut page, 1, c).unwrap();
    set_item_id(&mut page, 3, a).unwrap();
    set_item_id(&mut page, 2, ItemId { off: 0, flags: LP_DEAD, len: 0 }).unwrap();
    repair_fragmentation(&mut page).unwrap();
    let e = END as u16;
    assert_eq!(lps(&page)[0], ItemId::normal(e - 8, 8));
    assert_eq!(lps(&page)[2], ItemId::normal(e - 16, 8));
    assert_packed(&page, &[(1, 8, Some(0)), (3, 8, Some(0))]);
    assert_eq!(hdr(&page).flags, 0);
    assert_eq!(hdr(&page).lower, 36);
}

#[test]
fn repair_fragmentation_of_an_empty_set_and_of_corrupt_pointers() {
    let mut page = page_with(&[(1, 8), (2, 8)]);
    set_item_id(&mut page, 1, ItemId { off: 0, flags: LP_DEAD, len: 0 }).unwrap();
    set_item_id(&mut page, 2, ItemId::UNUSED).unwrap();
    repair_fragmentation(&mut page).unwrap();
    let h = hdr(&page);
    assert_eq!((h.lower, h.upper, h.flags), (28, END as u16, 0));
    let mut page = page_with(&[(1, 8), (2, 8)]);
    set_item_id(&mut page, 2, ItemId::normal(40, 8)).unwrap();
    let err = repair_fragmentation(&mut page).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("corrupted line pointer 2")));
    let mut page = page_with(&[(1, 8), (2, 8)]);
    set_item_id(&mut page, 2, ItemId::normal(END as u16 - 8, 0x7FF0)).unwrap();
    assert!(repair_fragmentation(&mut page).is_err(), "ends past the page");
}

#[test]
fn truncate_line_pointer_array_keeps_one_and_sets_the_hint() {
    let mut page = page_with(&[(1, 8), (2, 8), (3, 8), (4, 8)]);
    for off in [2, 3, 4] {
        set_item_id(&mut page, off, ItemId { off: 5, flags: LP_UNUSED, len: 0 }).unwrap();
    }
    let stale = page[28..40].to_vec();
    truncate_line_pointer_array(&mut page);
    assert_eq!((hdr(&page).lower, hdr(&page).flags), (28, 0));
    assert_eq!(page[28..40], stale[..], "dropped slots keep their bytes");
    set_item_id(&mut page, 1, ItemId::UNUSED).unwrap();
    truncate_line_pointer_array(&mut page);
    assert_eq!((hdr(&page).lower, hdr(&page).flags), (28, PD_HAS_FREE_LINES));
    let mut page = page_with(&[(1, 8), (2, 8), (3, 8)]);
    set_item_id(&mut page, 1, ItemId::UNUSED).unwrap();
    set_item_id(&mut page, 3, ItemId::UNUSED).unwrap();
    truncate_line_pointer_array(&mut page);
    assert_eq!((hdr(&page).lower, hdr(&page).flags), (32, PD_HAS_FREE_LINES));
}

#[test]
fn index_tuple_delete_closes_both_gaps() {
    for victim in 1..=3u16 {
        let mut page = page_with(&[(1, 8), (2, 16), (3, 8)]);
        index_tuple_delete(&mut page, victim).unwrap();
        let left: Vec<(u8, usize, Option<u8>)> =
            [(1, 8, Some(0)), (2, 16, Some(0)), (3, 8, Some(0))]
                .into_iter()
                .filter(|t| t.0 as u16 != victim)
                .collect();
        assert_packed(&page, &left);
        assert_eq!(max_offset(&page), 2);
        for (off, &(k, len, _)) in (1..).zip(&left) {
            assert_eq!(item(&page, off).unwrap(), &it(k, len)[..]);
        }
    }
    let mut page = page_with(&[(1, 8)]);
    index_tuple_delete(&mut page, 1).unwrap();
    assert_eq!((hdr(&page).lower, hdr(&page).upper), (24, END as u16));
    assert!(index_tuple_delete(&mut page, 1).is_err());
}

#[test]
fn index_multi_delete_first_middle_last() {
    let items = [(1, 8), (2, 16), (3, 8), (4, 24), (5, 8), (6, 8)];
    let mut page = page_with(&items);
    index_multi_delete(&mut page, &[1, 3, 6]).unwrap();
    let e = END as u16;
    assert_eq!(
        lps(&page),
        vec![ItemId::normal(e - 16, 16), ItemId::normal(e - 40, 24), ItemId::normal(e - 48, 8)]
    );
    assert_packed(&page, &[(2, 16, Some(0)), (4, 24, Some(0)), (5, 8, Some(0))]);
    assert_eq!(hdr(&page).lower, 36);
    // Two offsets go the retail way (last first), to the same packed layout.
    let mut two = page_with(&items);
    index_multi_delete(&mut two, &[1, 3]).unwrap();
    let want = [(16, 16), (40, 24), (48, 8), (56, 8)];
    let want: Vec<ItemId> = want.iter().map(|&(o, l)| ItemId::normal(e - o, l)).collect();
    assert_eq!(lps(&two), want);
    assert_packed(&two, &[(2, 16, Some(0)), (4, 24, Some(0)), (5, 8, Some(0)), (6, 8, Some(0))]);
    let mut all = page_with(&items[..3]);
    index_multi_delete(&mut all, &[1, 2, 3]).unwrap();
    assert_eq!((hdr(&all).lower, hdr(&all).upper), (24, END as u16));
}

#[test]
fn index_multi_delete_refuses_bad_offsets() {
    let items = [(1, 8), (2, 8), (3, 8), (4, 8)];
    for offs in [&[1u16, 3, 2][..], &[1, 2, 5], &[0, 1, 2], &[2, 2, 3]] {
        let mut page = page_with(&items);
        let err = index_multi_delete(&mut page, offs).unwrap_err();
        assert!(matches!(err, Fault::Page(ref m) if m.contains("incorrect index offsets")));
    }
    let mut page = page_with(&items);
    set_item_id(&mut page, 4, ItemId::normal(END as u16 - 4, 8)).unwrap();
    assert!(index_multi_delete(&mut page, &[1, 2, 3]).is_err(), "unaligned item");
}

#[test]
fn index_tuple_delete_no_compact_leaves_an_unused_pointer() {
    let mut page = page_with(&[(1, 8), (2, 16), (3, 8)]);
    index_tuple_delete_no_compact(&mut page, 2).unwrap();
    let e = END as u16;
    assert_eq!(
        lps(&page),
        vec![ItemId::normal(e - 8, 8), ItemId::UNUSED, ItemId::normal(e - 16, 8)]
    );
    assert_packed(&page, &[(1, 8, Some(0)), (3, 8, Some(0))]);
    index_tuple_delete_no_compact(&mut page, 3).unwrap();
    assert_eq!(lps(&page), vec![ItemId::normal(e - 8, 8), ItemId::UNUSED]);
    assert_eq!(hdr(&page).upper, e - 8);
    assert!(index_tuple_delete_no_compact(&mut page, 2).is_err(), "no storage: corrupted");
}

#[test]
fn index_tuple_overwrite_moves_earlier_data() {
    let e = END as u16;
    let mut page = page_with(&[(1, 8), (2, 16), (3, 8)]);
    let old = item_id(&page, 2).unwrap();
    set_item_id(&mut page, 2, ItemId { flags: LP_DEAD, ..old }).unwrap();
    index_tuple_overwrite(&mut page, 2, &it(9, 30)).unwrap();
    assert_eq!(
        lps(&page),
        vec![
            ItemId::normal(e - 8, 8),
            ItemId { off: e - 40, flags: LP_DEAD, len: 30 },
            ItemId::normal(e - 48, 8)
        ]
    );
    assert_packed(&page, &[(1, 8, Some(0)), (9, 30, Some(2)), (3, 8, Some(0))]);
    index_tuple_overwrite(&mut page, 2, &it(8, 3)).unwrap();
    assert_eq!(lps(&page)[1], ItemId { off: e - 16, flags: LP_DEAD, len: 3 });
    assert_eq!(lps(&page)[2], ItemId::normal(e - 24, 8));
    assert_packed(&page, &[(1, 8, Some(0)), (8, 3, None), (3, 8, Some(0))]);
    assert_eq!(page[(e - 13) as usize..(e - 8) as usize], [9, 9, 9, 2, 2], "stale padding");
    let before = page.clone();
    index_tuple_overwrite(&mut page, 2, &it(7, 8)).unwrap();
    assert_eq!(lps(&page)[1], ItemId { off: e - 16, flags: LP_DEAD, len: 8 });
    assert!(page[36..(e - 16) as usize] == before[36..(e - 16) as usize], "no data moved");
    let free = (hdr(&page).upper - hdr(&page).lower) as usize;
    let most = (free + 8) & !7;
    let err = index_tuple_overwrite(&mut page, 2, &it(7, most + 1)).unwrap_err();
    assert!(matches!(err, Fault::Page(ref m) if m.contains("no room")), "{err}");
    index_tuple_overwrite(&mut page, 2, &it(7, most)).unwrap();
    assert_eq!(hdr(&page).upper - hdr(&page).lower, (free + 8 - most) as u16);
    assert_packed(&page, &[(1, 8, Some(0)), (7, most, None), (3, 8, Some(0))]);
}

mod model;
mod real;
