//! Random sequences of primitives against a model of the page's items:
//! after every step the items (in line-pointer order) are the model's, the
//! tuple space is packed where PostgreSQL keeps it packed, the invariants
//! hold, and a refused step leaves the page as it was.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// Line pointer order: `Some(bytes)` for an item with storage, `None` for
/// an unused line pointer.
type Model = Vec<Option<Vec<u8>>>;

/// What a step does to the model when it succeeds.
type Expect = Box<dyn Fn(&mut Model)>;

fn items(page: &[u8]) -> Model {
    (1..=max_offset(page))
        .map(|o| {
            let id = item_id(page, o).unwrap();
            id.has_storage().then(|| item(page, o).unwrap().to_vec())
        })
        .collect()
}

/// The tuple space holds exactly the items, with no gaps.
fn assert_packed(page: &[u8]) {
    let h = hdr(page);
    let total: usize = (1..=max_offset(page))
        .map(|o| item_id(page, o).unwrap())
        .filter(|id| id.has_storage())
        .map(|id| maxalign(id.len as usize))
        .sum();
    assert_eq!(h.special as usize - h.upper as usize, total, "tuple space not packed");
}

fn random_item(rng: &mut StdRng) -> Vec<u8> {
    let len = if rng.gen_bool(0.9) { rng.gen_range(1..120) } else { rng.gen_range(120..3000) };
    let k: u8 = rng.gen();
    (0..len).map(|i| k.wrapping_add(i as u8)).collect()
}

/// One random index-page step, applied to both page and model.
fn index_step(rng: &mut StdRng, page: &mut [u8], model: &mut Model) {
    let before = page.to_vec();
    let n = model.len() as u16;
    let off = rng.gen_range(0..=n + 2);
    let step = rng.gen_range(0..5);
    let mut atomic = true;
    let (result, expect): (Result<(), Fault>, Expect) = match step {
        0 => {
            let it = random_item(rng);
            let res = add_item(page, &it, off, false, false).map(|_| ());
            let at = if off == 0 { n } else { off.saturating_sub(1) } as usize;
            (res, Box::new(move |m: &mut Model| m.insert(at, Some(it.clone()))))
        }
        1 => {
            let res = index_tuple_delete(page, off);
            (res, Box::new(move |m: &mut Model| drop(m.remove(off as usize - 1))))
        }
        2 => {
            let mut offs: Vec<u16> = (1..=n).filter(|_| rng.gen_bool(0.3)).collect();
            offs.truncate(rng.gen_range(0..=offs.len()));
            // Up to two offsets are deleted one by one, as in PostgreSQL:
            // the second may fail after the first was deleted.
            atomic = offs.len() > 2;
            let res = index_multi_delete(page, &offs);
            let gone = offs.clone();
            (res, Box::new(move |m: &mut Model| delete_all(m, &gone)))
        }
        3 => {
            let it = random_item(rng);
            let res = index_tuple_overwrite(page, off, &it);
            (res, Box::new(move |m: &mut Model| m[off as usize - 1] = Some(it.clone())))
        }
        _ => {
            let res = index_tuple_delete_no_compact(page, off);
            let last = off == n;
            (res, Box::new(move |m: &mut Model| no_compact(m, off, last)))
        }
    };
    match result {
        Ok(()) => expect(model),
        Err(_) if !atomic => {
            *model = items(page);
            return;
        }
        Err(e) => assert!(page == &before[..], "refused step {step} changed the page: {e}"),
    }
    let summary = |m: &Model| -> Vec<Option<(u8, usize)>> {
        m.iter().map(|i| i.as_ref().map(|b| (b[0], b.len()))).collect()
    };
    let got = items(page);
    let first = got.iter().zip(model.iter()).position(|(a, b)| a != b);
    assert!(
        &got == model,
        "step {step} off {off}: page {:?} model {:?}; first difference at {first:?}; ids before {:?} after {:?}; header before {:?} after {:?}",
        summary(&got),
        summary(model),
        lps(&before),
        lps(page),
        hdr(&before),
        hdr(page)
    );
    assert_packed(page);
    check_invariants(page).unwrap();
}

fn delete_all(m: &mut Model, offs: &[u16]) {
    for &o in offs.iter().rev() {
        m.remove(o as usize - 1);
    }
}

fn no_compact(m: &mut Model, off: u16, last: bool) {
    if last {
        m.pop();
    } else {
        m[off as usize - 1] = None;
    }
}

#[test]
fn index_page_steps_match_the_model() {
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut page = vec![0u8; BLCKSZ];
        page_init(&mut page, 16);
        let mut model = Model::new();
        for _ in 0..200 {
            index_step(&mut rng, &mut page, &mut model);
        }
    }
}

/// Heap pages: items added with the free-line hint, some made dead,
/// redirected or unused, then repaired; items keep their bytes, unused
/// ones at the end go, and the hint says whether unused ones remain.
#[test]
fn heap_prune_and_repair_match_the_model() {
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut page = vec![0u8; BLCKSZ];
        page_init(&mut page, 0);
        for _ in 0..30 {
            while add_item(&mut page, &random_item(&mut rng), 0, false, true).is_ok() {
                if rng.gen_bool(0.2) {
                    break;
                }
            }
            prune_randomly(&mut rng, &mut page);
            let want = expected_after_repair(&page);
            repair_fragmentation(&mut page).unwrap();
            assert_eq!(lps(&page), want.ids);
            for (o, bytes) in want.bytes {
                assert_eq!(item(&page, o).unwrap(), &bytes[..]);
            }
            assert_eq!(hdr(&page).flags & PD_HAS_FREE_LINES != 0, want.hint);
            assert_packed(&page);
            check_invariants(&page).unwrap();
        }
    }
}

fn prune_randomly(rng: &mut StdRng, page: &mut [u8]) {
    for o in 1..=max_offset(page) {
        let id = item_id(page, o).unwrap();
        let new = match rng.gen_range(0..8) {
            0 => ItemId { off: rng.gen_range(0..0x8000), flags: LP_UNUSED, len: 0 },
            1 => ItemId { off: 0, flags: LP_DEAD, len: 0 },
            2 => ItemId { off: 1, flags: LP_REDIRECT, len: 0 },
            3 if id.has_storage() => ItemId { flags: LP_DEAD, ..id },
            _ => continue,
        };
        set_item_id(page, o, new).unwrap();
    }
}

/// What repair must leave.
struct Repaired {
    /// Unused zeroed, trailing unused dropped, offsets packed from pd_special.
    ids: Vec<ItemId>,
    /// The bytes each item with storage keeps.
    bytes: Vec<(u16, Vec<u8>)>,
    /// `PD_HAS_FREE_LINES`: unused line pointers remain.
    hint: bool,
}

fn expected_after_repair(page: &[u8]) -> Repaired {
    let mut ids = lps(page);
    let keep = ids.iter().rposition(|id| id.is_used()).map_or(0, |i| i + 1);
    ids.truncate(keep);
    let mut at = hdr(page).special;
    let mut bytes = Vec::new();
    for (i, id) in ids.iter_mut().enumerate() {
        if !id.is_used() {
            *id = ItemId::UNUSED;
        } else if id.has_storage() {
            bytes.push((i as u16 + 1, item(page, i as u16 + 1).unwrap().to_vec()));
            at -= maxalign(id.len as usize) as u16;
            id.off = at;
        }
    }
    let hint = ids.iter().any(|id| !id.is_used());
    Repaired { ids, bytes, hint }
}
