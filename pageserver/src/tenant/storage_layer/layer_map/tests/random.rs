//! Random layer maps (strata of L0s and L1s with key gaps, empty strata,
//! images at random LSNs) against brute-force oracles.

use super::*;

const KEYS: u32 = 40;

/// A random map, its layers' values, and every layer for the oracles.
struct World {
    map: Map,
    values: Values,
    /// (level, layer), strata oldest first, then images.
    layers: Vec<(LayerLevel, Arc<LayerDesc>)>,
    end: u64,
}

fn seeded(test: &str) -> (StdRng, u64) {
    let seed: u64 =
        std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("{test} SEED={seed}");
    (StdRng::seed_from_u64(seed), seed)
}

/// Disjoint key ranges in `0..KEYS`, sorted, some adjacent, some with gaps.
fn random_ranges(rng: &mut StdRng, p_layer: f64) -> Vec<Range<u32>> {
    let mut out = Vec::new();
    let mut k = rng.gen_range(0..4);
    while k < KEYS {
        let end = (k + rng.gen_range(1..=10)).min(KEYS);
        if rng.gen_bool(p_layer) {
            out.push(k..end);
        }
        k = end + if rng.gen_bool(0.3) { rng.gen_range(1..4) } else { 0 };
    }
    out
}

fn random_world(rng: &mut StdRng) -> World {
    let mut layers = Vec::new();
    let mut empty = Vec::new();
    let mut values = Values::new();
    let mut lsn = START;
    let n_strata = rng.gen_range(1..12);
    let n_l1 = rng.gen_range(0..=n_strata);
    for i in 0..n_strata {
        let range = lsn..lsn + rng.gen_range(1..6);
        lsn = range.end;
        let (level, keys) = if i < n_l1 {
            (L1, random_ranges(rng, 0.7))
        } else if rng.gen_bool(0.1) {
            (L0, vec![])
        } else {
            let a = rng.gen_range(0..KEYS);
            (L0, std::iter::once(a..rng.gen_range(a + 1..=KEYS + 1)).collect())
        };
        if keys.is_empty() {
            empty.push((level, Lsn(range.start)..Lsn(range.end)));
        }
        for k in keys {
            let d = delta(k.clone(), range.clone());
            let v = k.flat_map(|k| range.clone().map(move |l| (k, l)));
            values.insert(d.layer_name().clone(), v.filter(|_| rng.gen_bool(0.3)).collect());
            layers.push((level, d));
        }
    }
    let mut image_lsns: Vec<u64> =
        (0..rng.gen_range(0..5)).map(|_| rng.gen_range(START..lsn + 3)).collect();
    image_lsns.sort_unstable();
    image_lsns.dedup();
    for i in image_lsns {
        for k in random_ranges(rng, 0.6) {
            layers.push((Image, image(k, i)));
        }
    }
    let map = Map::new(Lsn(START), Lsn(0), layers.clone(), empty);
    World { map, values, layers, end: lsn }
}

/// Brute force: the values of `k` a correct read at `lsn` returns, newest
/// first: those above the newest image covering `k` at or below `lsn`, then
/// that image.
fn oracle(w: &World, k: u32, lsn: u64) -> Vec<(u64, bool)> {
    let covers = |l: &LayerDesc| l.name.key_range.contains(&key(k));
    let img = w
        .layers
        .iter()
        .filter(|(lv, l)| *lv == Image && covers(l) && l.name.image_lsn().0 <= lsn)
        .map(|(_, l)| l.name.image_lsn().0)
        .max();
    let floor = img.unwrap_or(0);
    let mut out: Vec<(u64, bool)> = w
        .values
        .values()
        .flatten()
        .filter(|(vk, vl)| *vk == k && *vl > floor && *vl <= lsn)
        .map(|(_, vl)| (*vl, false))
        .collect();
    out.sort_unstable_by(|a, b| b.cmp(a));
    out.extend(img.map(|i| (i, true)));
    out
}

/// Brute force: the layers a walk must visit, newest first, with floors.
fn oracle_walk(w: &World, k: u32, lsn: u64) -> Vec<(String, Lsn)> {
    let covers = |l: &LayerDesc| l.name.key_range.contains(&key(k));
    let img = w
        .layers
        .iter()
        .filter(|(lv, l)| *lv == Image && covers(l) && l.name.image_lsn().0 <= lsn)
        .max_by_key(|(_, l)| l.name.image_lsn());
    let floor = img.map_or(Lsn(0), |(_, l)| l.name.image_lsn());
    let mut deltas: Vec<&Arc<LayerDesc>> = w
        .layers
        .iter()
        .filter(|(lv, l)| *lv != Image && covers(l))
        .filter(|(_, l)| l.name.lsn_range.start.0 <= lsn && l.name.lsn_range.end.0 - 1 > floor.0)
        .map(|(_, l)| l)
        .collect();
    deltas.sort_by_key(|l| std::cmp::Reverse(l.name.lsn_range.start));
    let mut out: Vec<_> = deltas.iter().map(|l| (l.name.to_string(), floor)).collect();
    out.extend(img.map(|(_, l)| (l.name.to_string(), Lsn(floor.0 - 1))));
    out
}

#[test]
fn walk_matches_brute_force() {
    let (mut rng, seed) = seeded("walk_matches_brute_force");
    for round in 0..300 {
        let w = random_world(&mut rng);
        let s = w.map.snapshot();
        for _ in 0..100 {
            let (k, lsn) = (rng.gen_range(0..KEYS + 2), rng.gen_range(0..w.end + 5));
            let ctx = format!("key {k} at {lsn:#x}, round {round} (SEED={seed})");
            assert_eq!(walk_names(&s, k, lsn), oracle_walk(&w, k, lsn), "{ctx}");
            assert_eq!(read(&s, &w.values, k, lsn), oracle(&w, k, lsn), "{ctx}");
        }
        // The manifest's view rebuilds the same map.
        let h = w.map.historic();
        let again = Map::try_new(Lsn(START), Lsn(0), h.all_historic(), h.empty_strata()).unwrap();
        assert_eq!(again.historic().all_historic().len(), w.layers.len());
        assert_eq!(again.next_layer_start(), Lsn(w.end), "SEED={seed}");
    }
}

/// Brute force: the layers GC may delete at `cutoff`.
fn oracle_gc(w: &World, cutoff: u64) -> BTreeSet<String> {
    let images: Vec<&LayerDesc> =
        w.layers.iter().filter(|(lv, _)| *lv == Image).map(|(_, l)| &**l).collect();
    // Every key of `l` has an image with an LSN in `lsns`.
    let covered = |l: &LayerDesc, lsns: Range<u64>| {
        (0..KEYS + 2).filter(|k| l.name.key_range.contains(&key(*k))).all(|k| {
            images
                .iter()
                .any(|i| i.name.key_range.contains(&key(k)) && lsns.contains(&i.name.image_lsn().0))
        })
    };
    let mut out = BTreeSet::new();
    for (lv, l) in &w.layers {
        let r = &l.name.lsn_range;
        let removable = match lv {
            Image => covered(l, r.start.0 + 1..cutoff + 1),
            _ => r.end.0 - 1 <= cutoff && covered(l, r.end.0 - 1..cutoff + 1),
        };
        if removable {
            out.insert(l.name.to_string());
        }
    }
    out
}

#[test]
fn gc_candidates_match_brute_force_and_keep_reads_above_the_cutoff() {
    let (mut rng, seed) = seeded("gc_candidates_match_brute_force");
    for round in 0..300 {
        let w = random_world(&mut rng);
        let cutoff = rng.gen_range(START..w.end + 4);
        let ctx = format!("cutoff {cutoff:#x}, round {round} (SEED={seed})");
        let h = w.map.historic().clone();
        let cands = h.gc_candidates(Lsn(cutoff));
        let got: BTreeSet<String> = cands.iter().map(|l| l.name.to_string()).collect();
        assert_eq!(got, oracle_gc(&w, cutoff), "{ctx}");
        for k in 0..KEYS + 2 {
            if let Some((_, newest)) = h.newest_image(key(k), Lsn(cutoff)) {
                assert!(!got.contains(&newest.name.to_string()), "key {k}: {ctx}");
            }
        }
        let before = w.map.snapshot();
        let mut map = Map::new(Lsn(START), Lsn(0), h.all_historic(), h.empty_strata());
        map.set_gc_cutoff(Lsn(cutoff));
        map.remove(&cands);
        let after = map.snapshot();
        assert_eq!(map.next_layer_start(), Lsn(w.end), "{ctx}");
        for k in 0..KEYS + 2 {
            for lsn in cutoff..w.end + 4 {
                let want = oracle(&w, k, lsn);
                assert_eq!(read(&after, &w.values, k, lsn), want, "key {k} at {lsn:#x}: {ctx}");
                assert_eq!(read(&before, &w.values, k, lsn), want, "snapshot: {ctx}");
            }
        }
        // What GC leaves is a valid manifest: it loads back.
        let h = map.historic();
        Map::try_new(Lsn(START), Lsn(cutoff), h.all_historic(), h.empty_strata()).unwrap();
    }
}

/// Snapshots are copies: compaction, image creation and GC after one leave
/// its walks as they were.
#[test]
fn snapshots_do_not_see_later_changes() {
    let (mut rng, seed) = seeded("snapshots_do_not_see_later_changes");
    for _ in 0..100 {
        let mut w = random_world(&mut rng);
        let s = w.map.snapshot();
        let probes: Vec<(u32, u64)> =
            (0..50).map(|_| (rng.gen_range(0..KEYS), rng.gen_range(0..w.end + 5))).collect();
        let walks: Vec<_> = probes.iter().map(|&(k, l)| walk_names(&s, k, l)).collect();
        let l0s: Vec<_> = w.map.historic().l0_layers().cloned().collect();
        if !l0s.is_empty() {
            let first = w.map.historic().strata().find(|s| s.level() == L0).unwrap();
            let start = first.lsn_range().start.0;
            let end = l0s[0].name.lsn_range.end.0;
            w.map.replace_l0s(&l0s[..1], vec![delta(0..KEYS, start..end)]);
        }
        w.map.add_images(Lsn(w.end + 10), vec![image(0..KEYS, w.end + 10)]);
        w.map.set_gc_cutoff(Lsn(w.end + 10));
        let cands = w.map.historic().gc_candidates(Lsn(w.end + 10));
        w.map.remove(&cands);
        let again: Vec<_> = probes.iter().map(|&(k, l)| walk_names(&s, k, l)).collect();
        assert_eq!(walks, again, "SEED={seed}");
    }
}
