//! The layer map with layers that are only names: every mutation's
//! invariant checks, and seeded randomized tests of `walk` and
//! `gc_candidates` against brute-force oracles (they print their seed;
//! `SEED=<n>` replays one).

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use io_engine::{IoEngine, IoEngineKind};
use pageserver_api::key::Key;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use utils::lsn::Lsn;

use super::{HistoricLayer, LayerDesc, LayerMap, ReadSnapshot, ReadableLayer};
use crate::tenant::storage_layer::inmemory_layer::InMemoryLayer;
use crate::tenant::storage_layer::LayerLevel::{self, Image, L0, L1};
use crate::tenant::storage_layer::{LayerKind, LayerName};

mod random;

type Map = LayerMap<LayerDesc>;
const START: u64 = 0x10;

fn key(i: u32) -> Key {
    Key::MIN.add(i)
}

fn delta(keys: Range<u32>, lsns: Range<u64>) -> Arc<LayerDesc> {
    let name = LayerName::delta(key(keys.start)..key(keys.end), Lsn(lsns.start)..Lsn(lsns.end));
    Arc::new(LayerDesc { name, file_size: 100 })
}

fn image(keys: Range<u32>, lsn: u64) -> Arc<LayerDesc> {
    let name = LayerName::image(key(keys.start)..key(keys.end), Lsn(lsn));
    Arc::new(LayerDesc { name, file_size: 1000 })
}

/// The panic message of `f`, which must panic.
fn panic_of(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn assert_panics_naming(f: impl FnOnce(), parts: &[&str]) {
    let msg = panic_of(f);
    for p in parts {
        assert!(msg.contains(p), "panic message {msg:?} lacks {p:?}");
    }
}

/// One walk as (layer name or "mem@start", floor).
fn walk_names(s: &ReadSnapshot<LayerDesc>, k: u32, lsn: u64) -> Vec<(String, Lsn)> {
    let name = |l: &ReadableLayer<LayerDesc>| match l {
        ReadableLayer::InMemory(m) => format!("mem@{}", m.start_lsn),
        ReadableLayer::Historic(l) => l.layer_name().to_string(),
    };
    s.walk(key(k), Lsn(lsn)).map(|(l, floor)| (name(&l), floor)).collect()
}

/// L1 stratum 0x10..0x20 (keys 0..10, 20..30), L0s 0x20..0x30, 0x30..0x40,
/// 0x40..0x50; an image at 0x25 (keys 0..5).
fn small_map() -> (Map, Vec<Arc<LayerDesc>>) {
    let l = vec![
        delta(0..10, 0x10..0x20),
        delta(20..30, 0x10..0x20),
        delta(0..40, 0x20..0x30),
        delta(5..6, 0x30..0x40),
        delta(0..40, 0x40..0x50),
        image(0..5, 0x25),
    ];
    let levels = [L1, L1, L0, L0, L0, Image];
    let layers = levels.iter().zip(&l).map(|(lv, l)| (*lv, l.clone())).collect();
    (Map::new(Lsn(START), Lsn(0), layers, vec![]), l)
}

#[test]
fn walk_visits_strata_newest_first_down_to_the_image() {
    let (map, l) = small_map();
    let s = map.snapshot();
    let n = |i: usize| l[i].layer_name().to_string();
    // Key 2: an image at 0x25; the L0 0x20..0x30 holds LSNs above it.
    let w = walk_names(&s, 2, 0x48);
    assert_eq!(w, vec![(n(4), Lsn(0x25)), (n(2), Lsn(0x25)), (n(5), Lsn(0x24))]);
    // Below the image: no image floor.
    assert_eq!(walk_names(&s, 2, 0x24), vec![(n(2), Lsn(0)), (n(0), Lsn(0))]);
    // Key 5 is in no image; 0x30..0x40 holds it.
    assert_eq!(walk_names(&s, 5, 0x35), vec![(n(3), Lsn(0)), (n(2), Lsn(0)), (n(0), Lsn(0))]);
    // Key 15 falls in the L1 stratum's key gap.
    assert_eq!(walk_names(&s, 15, 0x100), vec![(n(4), Lsn(0)), (n(2), Lsn(0))]);
    assert_eq!(walk_names(&s, 15, 0x0f), vec![]);
    let h = map.historic();
    assert_eq!(h.l0_count(), 3);
    assert_eq!(h.stats().l1_layers, 2);
    assert_eq!(h.stats().image_bytes, 1000);
}

#[tokio::test]
async fn in_memory_layers_come_first_and_flush_into_l0_strata() {
    let dir = tempfile::tempdir().unwrap();
    let engine = IoEngine::new(IoEngineKind::StdFs).unwrap();
    let mem =
        |seq: u64, start: u64| InMemoryLayer::create(&engine, dir.path(), seq, Lsn(start), false);
    let l0 = delta(0..10, 0x10..0x20);
    let mut map = Map::new(Lsn(START), Lsn(0), vec![(L0, l0.clone())], vec![]);
    map.add_images(Lsn(0x35), vec![image(2..3, 0x35)]);
    let a = Arc::new(mem(1, 0x20).await.unwrap());
    map.set_open(a.clone());
    assert!(map.freeze_open(Lsn(0x30)));
    let b = Arc::new(mem(2, 0x30).await.unwrap());
    map.set_open(b.clone());
    let s = map.snapshot();
    let l0n = l0.layer_name().to_string();
    let (am, bm) = ("mem@0/20".to_string(), "mem@0/30".to_string());
    assert_eq!(
        walk_names(&s, 1, 0x40),
        vec![(bm.clone(), Lsn(0)), (am.clone(), Lsn(0)), (l0n.clone(), Lsn(0))]
    );
    assert_eq!(walk_names(&s, 1, 0x25), vec![(am.clone(), Lsn(0)), (l0n.clone(), Lsn(0))]);
    // The image at 0x35 hides the frozen layer and the L0 from key 2.
    let img = image(2..3, 0x35).layer_name().to_string();
    assert_eq!(walk_names(&s, 2, 0x40), vec![(bm, Lsn(0x35)), (img, Lsn(0x34))]);

    assert!(map.freeze_open(Lsn(0x40)));
    assert_panics_naming(|| map.replace_flushed(&b, None), &["oldest first"]);
    let wrong = delta(0..4, 0x20..0x31);
    assert_panics_naming(
        || map.replace_flushed(&a, Some(wrong)),
        &["does not cover the flushed layer", "0/20..0/30"],
    );
    let flushed = delta(0..4, 0x20..0x30);
    map.replace_flushed(&a, Some(flushed.clone()));
    map.replace_flushed(&b, None); // held no values: an empty L0 stratum
    assert_eq!(map.next_layer_start(), Lsn(0x40));
    let h = map.historic();
    assert_eq!(h.l0_layers().cloned().collect::<Vec<_>>().len(), 2);
    assert_eq!(h.empty_strata(), vec![(L0, Lsn(0x30)..Lsn(0x40))]);
    // The snapshot taken before still sees the in-memory layers.
    assert_eq!(walk_names(&s, 1, 0x25), vec![(am, Lsn(0)), (l0n.clone(), Lsn(0))]);
    let now = map.snapshot();
    let fln = flushed.layer_name().to_string();
    assert_eq!(walk_names(&now, 1, 0x25), vec![(fln, Lsn(0)), (l0n, Lsn(0))]);
}

#[test]
fn replace_l0s_takes_the_oldest_run_in_order() {
    let (map, l) = small_map();
    let (a, b, c) = (&l[2], &l[3], &l[4]);
    let name = |l: &Arc<LayerDesc>| l.layer_name().to_string();
    let mut m = Map::new(Lsn(START), Lsn(0), map.historic().all_historic(), vec![]);
    let new = vec![delta(0..3, 0x20..0x40), delta(3..9, 0x20..0x40)];
    for (old, parts) in [
        (vec![b.clone()], vec![name(a), name(b)]),
        (vec![b.clone(), a.clone()], vec![name(a), name(b)]),
        (vec![l[0].clone()], vec![name(a), name(&l[0])]),
        (
            vec![a.clone(), b.clone(), c.clone(), l[5].clone()],
            vec![name(&l[5]), "not an L0".into()],
        ),
    ] {
        let parts: Vec<&str> = parts.iter().map(|s| s.as_str()).collect();
        assert_panics_naming(|| m.replace_l0s(&old, new.clone()), &parts);
    }
    let bad = [
        (vec![delta(0..3, 0x20..0x50)], "does not span its stratum"),
        (vec![delta(0..3, 0x20..0x40), delta(2..5, 0x20..0x40)], "overlap in keys"),
        (vec![image(0..3, 0x20)], "is not a delta layer"),
    ];
    for (l1s, msg) in bad {
        let named = name(&l1s[l1s.len() - 1]);
        assert_panics_naming(|| m.replace_l0s(&[a.clone(), b.clone()], l1s), &[msg, &named]);
    }
    m.replace_l0s(&[a.clone(), b.clone()], new.clone());
    let h = m.historic().clone();
    let strata: Vec<_> = h.strata().map(|s| (s.level(), s.lsn_range().clone())).collect();
    let r = |a: u64, b: u64| Lsn(a)..Lsn(b);
    assert_eq!(strata, vec![(L1, r(0x10, 0x20)), (L1, r(0x20, 0x40)), (L0, r(0x40, 0x50))]);
    assert_eq!(h.l0_count(), 1);
    // No values left: an empty L1 stratum, kept through a manifest round trip.
    m.replace_l0s(std::slice::from_ref(c), vec![]);
    assert_eq!(m.historic().empty_strata(), vec![(L1, r(0x40, 0x50))]);
    let h = m.historic();
    let again = Map::try_new(Lsn(START), Lsn(0), h.all_historic(), h.empty_strata()).unwrap();
    assert_eq!(walk_names(&again.snapshot(), 1, 0x60), walk_names(&m.snapshot(), 1, 0x60));
    assert_eq!(again.next_layer_start(), Lsn(0x50));
}

#[test]
fn uncovered_by_images_at_leaves_the_gaps_of_that_lsn_only() {
    let (mut map, _) = small_map();
    map.add_images(Lsn(0x25), vec![image(10..12, 0x25), image(20..30, 0x25)]);
    let h = map.historic();
    let gaps = |keys: Range<u32>, lsn: u64| {
        let r = h.uncovered_by_images_at(Lsn(lsn), key(keys.start)..key(keys.end));
        r.iter().map(|g| (g.start, g.end)).collect::<Vec<_>>()
    };
    // Images at 0x25 cover 0..5, 10..12 and 20..30.
    assert_eq!(gaps(0..40, 0x25), vec![(key(5), key(10)), (key(12), key(20)), (key(30), key(40))]);
    assert_eq!(gaps(3..11, 0x25), vec![(key(5), key(10))]);
    assert_eq!(gaps(21..29, 0x25), vec![]);
    // Another LSN has no images: all of it.
    assert_eq!(gaps(0..40, 0x26), vec![(key(0), key(40))]);
}

#[test]
fn add_images_keeps_each_lsn_disjoint() {
    let (mut map, _) = small_map();
    let existing = image(0..5, 0x25).layer_name().to_string();
    let overlapping = image(4..8, 0x25);
    let named = overlapping.layer_name().to_string();
    assert_panics_naming(
        || map.add_images(Lsn(0x25), vec![overlapping]),
        &["overlap in keys", &existing, &named],
    );
    let elsewhere = image(0..5, 0x26).layer_name().to_string();
    assert_panics_naming(
        || map.add_images(Lsn(0x25), vec![image(0..5, 0x26)]),
        &[&elsewhere, "not an image layer at 0/25"],
    );
    assert_panics_naming(
        || map.add_images(Lsn(0x25), vec![delta(0..5, 0x25..0x26)]),
        &["not an image layer"],
    );
    // Overlaps across LSNs are normal; within one LSN, adjacent is fine.
    map.add_images(Lsn(0x26), vec![image(0..10, 0x26), image(10..12, 0x26)]);
    map.add_images(Lsn(0x25), vec![image(5..8, 0x25)]);
    assert_eq!(map.historic().newest_image(key(6), Lsn(0x25)).unwrap().0, Lsn(0x25));
    assert_eq!(map.historic().newest_image(key(6), Lsn(0x100)).unwrap().0, Lsn(0x26));
    assert!(map.historic().newest_image(key(12), Lsn(0x100)).is_none());
}

#[test]
fn gc_removes_only_candidates_and_never_lowers_the_cutoff() {
    let (mut map, l) = small_map();
    map.add_images(Lsn(0x2f), vec![image(0..40, 0x2f)]);
    map.set_gc_cutoff(Lsn(0x30));
    assert_panics_naming(|| map.set_gc_cutoff(Lsn(0x2f)), &["moves backwards", "0/30"]);
    let h = map.historic().clone();
    let names = |v: &[Arc<LayerDesc>]| v.iter().map(|l| l.layer_name().to_string()).collect();
    let cands: BTreeSet<String> = names(&h.gc_candidates(Lsn(0x30)));
    let want: BTreeSet<String> = names(&[l[0].clone(), l[1].clone(), l[2].clone(), l[5].clone()]);
    assert_eq!(cands, want);
    let needed = l[3].layer_name().to_string();
    assert_panics_naming(|| map.remove(&[l[3].clone()]), &[&needed, "may still need it"]);
    let stranger = delta(0..1, 0x60..0x61);
    let named = stranger.layer_name().to_string();
    assert_panics_naming(|| map.remove(&[stranger]), &[&named, "not in the layer map"]);
    let before = map.snapshot();
    map.remove(&h.gc_candidates(Lsn(0x30)));
    let h = map.historic();
    let strata: Vec<_> = h.strata().map(|s| s.lsn_range().start).collect();
    assert_eq!(strata, vec![Lsn(0x30), Lsn(0x40)], "strata left empty at or below the cutoff go");
    assert_eq!(h.images().count(), 1);
    // The old snapshot still sees everything; the new one reads the same above the cutoff.
    assert_eq!(walk_names(&before, 2, 0x24).len(), 2);
    assert_eq!(map.snapshot().gc_cutoff(), Lsn(0x30));
    assert_eq!(map.next_layer_start(), Lsn(0x50));
}

#[test]
fn construction_refuses_broken_layouts_naming_the_files() {
    let try_new = |layers: Vec<(LayerLevel, Arc<LayerDesc>)>, cutoff: u64| {
        let err = Map::try_new(Lsn(START), Lsn(cutoff), layers, vec![]).err();
        err.map(|e| e.to_string()).unwrap_or_default()
    };
    let (a, b) = (delta(0..9, 0x10..0x20), delta(0..9, 0x18..0x30));
    let err = try_new(vec![(L0, a.clone()), (L0, b.clone())], 0);
    assert!(err.contains("overlap") && err.contains(&b.layer_name().to_string()), "{err}");
    let gap = delta(0..9, 0x21..0x30);
    let err = try_new(vec![(L0, a.clone()), (L0, gap.clone())], 0x1f);
    assert!(err.contains("gap 0/20..0/21") && err.contains(&gap.layer_name().to_string()), "{err}");
    assert_eq!(try_new(vec![(L0, a.clone()), (L0, gap.clone())], 0x20), "", "a gap at the cutoff");
    let late = delta(0..9, 0x20..0x30);
    let err = try_new(vec![(L0, a.clone()), (L1, late.clone())], 0);
    assert!(err.contains("lies above") && err.contains(&a.layer_name().to_string()), "{err}");
    let err = try_new(vec![(Image, a.clone())], 0);
    assert!(err.contains("listed as image") && err.contains(&a.layer_name().to_string()), "{err}");
    let (i1, i2) = (image(0..5, 0x15), image(4..6, 0x15));
    let err = try_new(vec![(L0, a.clone()), (Image, i1), (Image, i2.clone())], 0);
    assert!(err.contains("overlap in keys") && err.contains(&i2.layer_name().to_string()), "{err}");
    let twin = delta(10..12, 0x10..0x20);
    let err = try_new(vec![(L0, a.clone()), (L0, twin.clone())], 0);
    assert!(err.contains(&twin.layer_name().to_string()), "{err}");
    let low = delta(0..9, 0x08..0x10);
    assert!(try_new(vec![(L0, low)], 0x100).contains("the timeline's start"));
    assert_eq!(LayerLevel::L1.kind(), LayerKind::Delta);
}

#[test]
fn deltas_above_image_counts_overlapping_layers_per_stratum() {
    let (mut map, _) = small_map();
    let d = map.historic().deltas_above_image(&(key(0)..key(5)));
    assert_eq!(d.image_lsn, Some(Lsn(0x25)));
    let counts: Vec<_> = d.strata.iter().map(|s| (s.level, s.overlapping_layers)).collect();
    assert_eq!(counts, vec![(L0, 1), (L0, 0), (L0, 1)]);
    let d = map.historic().deltas_above_image(&(key(8)..key(25)));
    assert_eq!(d.image_lsn, None, "keys 5.. have no image");
    assert_eq!(d.strata[0].overlapping_layers, 2);
    map.add_images(Lsn(0x45), vec![image(0..100, 0x45)]);
    let d = map.historic().deltas_above_image(&(key(8)..key(25)));
    assert_eq!((d.image_lsn, d.strata.len()), (Some(Lsn(0x45)), 1));
}

/// Values of fake layers: per layer name, (key, LSN) pairs.
type Values = HashMap<LayerName, Vec<(u32, u64)>>;

/// What a reader collects through `walk`: (LSN, from an image), newest first.
fn read(s: &ReadSnapshot<LayerDesc>, values: &Values, k: u32, lsn: u64) -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    for (layer, floor) in s.walk(key(k), Lsn(lsn)) {
        let ReadableLayer::Historic(l) = layer else { panic!("no in-memory layers here") };
        let name = l.layer_name();
        if name.kind == LayerKind::Image {
            let at = name.image_lsn().0;
            assert!(floor.0 < at && at <= lsn, "image {name} with floor {floor}");
            out.push((at, true));
            continue;
        }
        let mut found: Vec<u64> = values[name]
            .iter()
            .filter(|(vk, vl)| *vk == k && *vl > floor.0 && *vl <= lsn)
            .map(|(_, vl)| *vl)
            .collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        out.extend(found.into_iter().map(|l| (l, false)));
    }
    out
}
