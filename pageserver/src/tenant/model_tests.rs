//! Seeded randomized model test of the storage engine against a `BTreeMap`
//! oracle: random puts of images and records over a few hundred keys, random
//! freezes, flushes, graceful restarts and crash restarts, and thousands of
//! reads (single and vectored) at random LSNs, with compaction, image
//! creation and GC at random points (reads below the GC cutoff must fail).
//! Runs `MODEL_RUNS` seeds (default 25) and prints each; `SEED=<n>
//! MODEL_RUNS=1` reproduces a run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::mgr::TenantManager;
use super::timeline::compaction::CompactOptions;
use super::value::{Record, Value};
use super::{PageReconstructError, ReadKind, StorageConf, Timeline};

#[cfg(feature = "testing")]
mod sim_crash;

type Oracle = BTreeMap<Key, Vec<(Lsn, Value)>>;

/// How `random_batch` draws a "WAL record".
#[derive(Clone, Copy)]
struct BatchShape {
    /// Values per batch: 1..max_values (fewer if a key repeats).
    max_values: usize,
    max_image_len: usize,
    /// Chance that a record re-initializes its key.
    will_init: f64,
}

impl BatchShape {
    const MODEL: BatchShape = BatchShape { max_values: 6, max_image_len: 300, will_init: 0.05 };
}

/// A few values at `lsn`, on distinct keys: images (an 8 KiB page one time
/// in five) or test records appending to an existing value.
fn random_batch(
    rng: &mut StdRng,
    keys: &[Key],
    oracle: &Oracle,
    lsn: Lsn,
    shape: BatchShape,
) -> Vec<(Key, Lsn, Value)> {
    let mut batch: Vec<(Key, Lsn, Value)> = Vec::new();
    for _ in 0..rng.gen_range(1..shape.max_values) {
        let key = keys[rng.gen_range(0..keys.len())];
        if batch.iter().any(|(k, _, _)| *k == key) {
            continue;
        }
        let has_base = oracle.get(&key).is_some_and(|h| !h.is_empty());
        let v = if !has_base || rng.gen_bool(0.3) {
            let len = if rng.gen_bool(0.2) { 8192 } else { rng.gen_range(1..shape.max_image_len) };
            Value::Image((0..len).map(|_| rng.gen()).collect::<Vec<u8>>().into())
        } else {
            let append: Vec<u8> = (0..rng.gen_range(1..20)).map(|_| rng.gen()).collect();
            Value::Record(Record::Test {
                append: append.into(),
                will_init: rng.gen_bool(shape.will_init),
            })
        };
        batch.push((key, lsn, v));
    }
    batch
}

fn expected(oracle: &Oracle, key: Key, lsn: Lsn) -> Option<Vec<u8>> {
    let mut state: Option<Vec<u8>> = None;
    for (l, v) in oracle.get(&key)?.iter().take_while(|(l, _)| *l <= lsn) {
        let _ = l;
        match v {
            Value::Image(b) => state = Some(b.to_vec()),
            Value::Record(Record::Test { append, will_init }) => {
                if *will_init {
                    state = Some(append.to_vec());
                } else {
                    state
                        .as_mut()
                        .expect("model never appends to nothing")
                        .extend_from_slice(append);
                }
            }
            other => unreachable!("model does not generate {other:?}"),
        }
    }
    state
}

fn check(
    oracle: &Oracle,
    key: Key,
    lsn: Lsn,
    gc_cutoff: Lsn,
    got: &Result<Bytes, PageReconstructError>,
    seed: u64,
) {
    if lsn < gc_cutoff {
        // History below the GC cutoff is gone: the read must say so.
        assert!(
            matches!(got, Err(PageReconstructError::GarbageCollected { .. })),
            "key {key} at {lsn} below the GC cutoff {gc_cutoff}: got {got:?} (SEED={seed})"
        );
        return;
    }
    match (expected(oracle, key, lsn), got) {
        (Some(want), Ok(got)) => {
            assert_eq!(&got[..], &want[..], "key {key} at {lsn} (SEED={seed})")
        }
        (None, Err(PageReconstructError::MissingKey { .. })) => {}
        (want, got) => panic!("key {key} at {lsn}: expected {want:?}, got {got:?} (SEED={seed})"),
    }
}

/// Compaction, image creation or GC at a random point of the model: each
/// forced or not at random; GC with a random horizon over the history.
async fn random_maintenance(
    rng: &mut StdRng,
    tl: &Timeline,
    initial: Lsn,
    lsn: Lsn,
) -> Maintenance {
    if rng.gen_bool(0.6) {
        let opts = CompactOptions {
            force_l0_compaction: rng.gen_bool(0.5),
            force_image_layer_creation: rng.gen_bool(0.3),
        };
        tl.compact(opts).await.unwrap();
        Maintenance::Compaction
    } else {
        let horizon = rng.gen_range(0..=(lsn.0 - initial.0));
        let report = tl.gc(Some(horizon)).await.unwrap();
        assert!(report.gc_cutoff <= lsn, "cutoff {} above the last LSN {lsn}", report.gc_cutoff);
        assert_eq!(report.gc_cutoff, tl.gc_cutoff());
        Maintenance::Gc(report.layers_removed)
    }
}

enum Maintenance {
    Compaction,
    Gc(usize),
}

struct Env {
    dir: tempfile::TempDir,
    conf: Arc<StorageConf>,
    mgr: Arc<TenantManager>,
    tenant_id: TenantId,
    timeline_id: TimelineId,
}

impl Env {
    fn timeline(&self) -> Arc<Timeline> {
        self.mgr.get_timeline(self.tenant_id, self.timeline_id).unwrap()
    }

    async fn restart(&mut self, graceful: bool) {
        if graceful {
            self.mgr.shutdown().await;
        } else {
            // A crash: stop tasks without flushing; in-memory data is lost.
            for t in self.mgr.list_tenants() {
                t.shutdown(false).await;
            }
        }
        self.mgr = TenantManager::load(self.conf.clone(), CancellationToken::new()).await.unwrap();
        let _ = &self.dir;
    }
}

/// `MODEL_RUNS` seeds (default 25) from `SEED` (default random) on.
#[tokio::test]
async fn randomized_model() {
    let first: u64 =
        std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let runs: u64 = std::env::var("MODEL_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(25);
    for i in 0..runs {
        model_run(first.wrapping_add(i)).await;
    }
}

async fn model_run(seed: u64) {
    println!("randomized_model SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let dir = tempfile::tempdir().unwrap();
    let mut conf = StorageConf::for_tests(dir.path());
    conf.checkpoint_distance = 48 * 1024; // freeze often
                                          // Compaction and GC only where the model runs them.
    conf.compaction.compaction_threshold = rng.gen_range(2..6);
    conf.compaction.image_creation_threshold = rng.gen_range(1..4);
    conf.compaction.compaction_target_size = rng.gen_range(16..256) * 1024;
    (conf.compaction.compaction_period, conf.compaction.gc_period) =
        (Duration::ZERO, Duration::ZERO);
    conf.compaction.pitr_interval = Duration::ZERO;
    let conf = Arc::new(conf);
    let mgr = TenantManager::load(conf.clone(), CancellationToken::new()).await.unwrap();
    let (tenant_id, timeline_id) = (TenantId::generate(), TimelineId::generate());
    let tenant = mgr.create_tenant(tenant_id).await.unwrap();
    let initial = Lsn(0x100);
    tenant.create_empty_timeline(timeline_id, initial, 15).await.unwrap();
    let mut env = Env { dir, conf, mgr, tenant_id, timeline_id };

    let keys: Vec<Key> = (0..300)
        .map(|i| Key::rel_block(RelTag::new(1663, 5, 16384 + i / 100, 0), i % 100))
        .collect();
    let mut oracle = Oracle::new();
    let mut lsn = initial;
    let mut reads = 0usize;
    let (mut flushes, mut restarts, mut crashes) = (0, 0, 0);
    let (mut compactions, mut gcs, mut gc_removed) = (0, 0, 0);

    for step in 0..1500 {
        // One "WAL record": a few values at a new LSN.
        lsn = lsn + rng.gen_range(1..64) * 8;
        let tl = env.timeline();
        let batch = random_batch(&mut rng, &keys, &oracle, lsn, BatchShape::MODEL);
        {
            let mut w = tl.writer().await;
            w.put_batch(&batch).await.unwrap();
            w.finish_write(lsn);
        }
        for (k, l, v) in batch {
            oracle.entry(k).or_default().push((l, v));
        }

        // Reads at random LSNs, single and vectored; one in ten may fall
        // below the GC cutoff.
        let read_lsn = |rng: &mut StdRng| {
            let floor = if rng.gen_bool(0.1) { initial } else { tl.gc_cutoff().max(initial) };
            Lsn(rng.gen_range(floor.0..=lsn.0))
        };
        for _ in 0..2 {
            let key = keys[rng.gen_range(0..keys.len())];
            let at = read_lsn(&mut rng);
            check(&oracle, key, at, tl.gc_cutoff(), &tl.get(key, at).await, seed);
            reads += 1;
        }
        if step % 10 == 0 {
            let n = rng.gen_range(1..=32);
            let queries: Vec<(Key, Lsn)> =
                (0..n).map(|_| (keys[rng.gen_range(0..keys.len())], read_lsn(&mut rng))).collect();
            let res = tl.get_vectored(&queries, ReadKind::HttpRequest).await.unwrap();
            for ((k, l), r) in queries.iter().zip(&res) {
                check(&oracle, *k, *l, tl.gc_cutoff(), r, seed);
            }
            reads += n;
        }

        match rng.gen_range(0..100) {
            0..=2 => {
                let dc = tl.freeze_and_flush().await.unwrap();
                assert_eq!(dc, lsn);
                flushes += 1;
            }
            3 => {
                drop(tl);
                env.restart(true).await;
                assert_eq!(
                    env.timeline().get_last_record_lsn(),
                    lsn,
                    "graceful restart loses nothing"
                );
                restarts += 1;
            }
            5..=7 => match random_maintenance(&mut rng, &tl, initial, lsn).await {
                Maintenance::Compaction => compactions += 1,
                Maintenance::Gc(removed) => (gcs, gc_removed) = (gcs + 1, gc_removed + removed),
            },
            4 => {
                drop(tl);
                env.restart(false).await;
                let tl = env.timeline();
                let dc = tl.get_disk_consistent_lsn();
                assert_eq!(tl.get_last_record_lsn(), dc);
                // Everything above disk_consistent_lsn was not durable: forget it.
                for hist in oracle.values_mut() {
                    hist.retain(|(l, _)| *l <= dc);
                }
                crashes += 1;
            }
            _ => {}
        }
    }
    // A final full check at the last LSN.
    let tl = env.timeline();
    for &key in &keys {
        check(&oracle, key, lsn, tl.gc_cutoff(), &tl.get(key, lsn).await, seed);
        reads += 1;
    }
    println!(
        "reads={reads} flushes={flushes} restarts={restarts} crashes={crashes} \
         compactions={compactions} gcs={gcs} gc_removed={gc_removed} layers={:?}",
        tl.layer_stats()
    );
    assert!(reads >= 1000);
    assert!(compactions > 0 && gcs > 0, "the model ran no compaction or GC");
}

#[tokio::test]
async fn too_many_keys_and_bad_writes_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    let q: Vec<(Key, Lsn)> = (0..33).map(|i| (Key::MIN.add(i), Lsn(0x10))).collect();
    assert!(matches!(
        tl.get_vectored(&q, ReadKind::HttpRequest).await,
        Err(super::GetVectoredError::TooManyKeys { n: 33, max: 32 })
    ));
    let mut w = tl.writer().await;
    let err = w.put(Key::MIN, Lsn(0x10), &super::value::image(b"x")).await.unwrap_err();
    assert!(err.to_string().contains("at or below last_record_lsn"), "{err}");
    drop(w);
    // Duplicate creation is refused; deletion removes the directory.
    assert!(matches!(
        t.create_empty_timeline(tl.timeline_id, Lsn(0x10), 15).await,
        Err(super::TenantError::AlreadyExists(_))
    ));
    let tdir = tl.dir().to_path_buf();
    t.delete_timeline(tl.timeline_id).await.unwrap();
    assert!(!tdir.exists());
}

#[tokio::test]
async fn abandoned_creation_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let conf = Arc::new(StorageConf::for_tests(dir.path()));
    let mgr = TenantManager::load(conf.clone(), CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let id = TimelineId::generate();
    let uninit = t.begin_timeline_creation(id, Lsn(0x10), 15).await.unwrap();
    {
        let mut w = uninit.timeline().writer().await;
        w.put(Key::MIN, Lsn(0x18), &super::value::image(b"x")).await.unwrap();
        w.finish_write(Lsn(0x18));
    }
    let tmp = uninit.timeline().dir().to_path_buf();
    assert!(t.get_timeline(id).is_err(), "invisible until finished");
    drop(uninit);
    assert!(!tmp.exists());
    // The id can be used again, and a finished creation survives a restart.
    let uninit = t.begin_timeline_creation(id, Lsn(0x10), 15).await.unwrap();
    {
        let mut w = uninit.timeline().writer().await;
        w.put(Key::MIN, Lsn(0x18), &super::value::image(b"y")).await.unwrap();
        w.finish_write(Lsn(0x18));
    }
    uninit.finish().await.unwrap();
    mgr.shutdown().await;
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tl = mgr.get_timeline(t.id(), id).unwrap();
    assert_eq!(tl.get_last_record_lsn(), Lsn(0x18));
    assert_eq!(&tl.get(Key::MIN, Lsn(0x18)).await.unwrap()[..], b"y");
}
