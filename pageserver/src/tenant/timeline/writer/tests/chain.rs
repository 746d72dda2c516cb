//! Bounded record chains (`chain.rs`): a key written far more often than
//! `max_record_chain` gets images from ingest, reads at every LSN return
//! the same bytes as the records alone would, and no read of the open
//! layer applies more than the bound.

use std::sync::Arc;

use bytes::Bytes;
use pageserver_api::key::Key;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::chain::{ChainCounts, MAX_TRACKED_KEYS};
use crate::tenant::mgr::TenantManager;
use crate::tenant::timeline::Timeline;
use crate::tenant::value::{image, Record, Value};
use crate::tenant::StorageConf;

const BOUND: usize = 16;

async fn timeline(dir: &tempfile::TempDir) -> (Arc<TenantManager>, Arc<Timeline>) {
    let mut conf = StorageConf::for_tests(dir.path());
    conf.compaction.max_record_chain = BOUND;
    let mgr = TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    (mgr, tl)
}

fn record(byte: u8) -> Value {
    Value::Record(Record::Test { append: Bytes::copy_from_slice(&[byte]), will_init: false })
}

/// Records of `key` a read at `lsn` applies from the open layer, if its
/// chain starts there (`None`: it continues in an older layer).
fn open_layer_chain(tl: &Timeline, key: Key, lsn: Lsn) -> Option<usize> {
    let open = tl.layers.read().unwrap().open_layer().cloned()?;
    let mut out = Vec::new();
    let reached = open.collect(key.to_compact(), lsn, Lsn(0), &mut out);
    reached.then(|| out.len() - 1)
}

/// Two hot keys, 1,000 records each (60x the bound), in batches of 1 to 40
/// values with several values of a key per batch, a flush in the middle:
/// every LSN reads the bytes of the records up to it, and reads of the
/// open layer apply at most the bound.
#[tokio::test]
async fn hot_keys_get_images_and_keep_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, tl) = timeline(&dir).await;
    let keys = [Key::MIN.add(1), Key::MIN.add(7)];
    let mut lsn = Lsn(0x18);
    let mut w = tl.writer().await;
    for k in keys {
        w.put(k, lsn, &image(b"")).await.unwrap();
    }
    w.finish_write(lsn);
    drop(w);
    // Expected bytes of each key after each LSN (the oracle).
    let mut expect: Vec<(Lsn, [Vec<u8>; 2])> = vec![(lsn, [Vec::new(), Vec::new()])];
    let mut written = 0usize;
    let mut batch_len = 1usize;
    while written < 1000 {
        let mut batch = Vec::new();
        for _ in 0..batch_len {
            lsn = lsn + 8;
            let mut state = expect.last().unwrap().1.clone();
            for (i, k) in keys.iter().enumerate() {
                let b = (written % 251) as u8 + i as u8;
                batch.push((*k, lsn, record(b)));
                state[i].push(b);
            }
            written += 1;
            expect.push((lsn, state));
        }
        let mut w = tl.writer().await;
        w.put_batch(&batch).await.unwrap();
        w.finish_write(lsn);
        drop(w);
        if (500..500 + batch_len).contains(&written) {
            tl.freeze_and_flush().await.unwrap();
        }
        batch_len = batch_len % 40 + 7;
    }
    for (at, state) in &expect {
        for (i, k) in keys.iter().enumerate() {
            let page = tl.get(*k, *at).await.unwrap();
            assert_eq!(&page[..], &state[i][..], "key {k} at {at}");
            if let Some(chain) = open_layer_chain(&tl, *k, *at) {
                assert!(chain <= BOUND, "key {k} at {at}: a read applies {chain} records");
            }
        }
    }
    let last = expect.last().unwrap().0;
    let chain = open_layer_chain(&tl, keys[0], last).expect("the open layer holds an image");
    assert!(chain < BOUND, "{chain}");
    // And after everything is flushed, the same bytes.
    tl.freeze_and_flush().await.unwrap();
    for (at, state) in expect.iter().step_by(37) {
        assert_eq!(&tl.get(keys[1], *at).await.unwrap()[..], &state[1][..], "at {at}");
    }
    mgr.shutdown().await;
}

/// A key whose page cannot be built (a PostgreSQL record with no body)
/// keeps its records, and ingest goes on.
#[tokio::test]
async fn an_unreadable_chain_does_not_stop_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, tl) = timeline(&dir).await;
    let key = Key::MIN.add(3);
    let rec = Value::Record(Record::Postgres { will_init: false, rmid: 10, rec: Bytes::new() });
    let mut w = tl.writer().await;
    w.put(key, Lsn(0x18), &image(&[0; 8192])).await.unwrap();
    for i in 0..3 * BOUND as u64 {
        w.put(key, Lsn(0x20 + 8 * i), &rec).await.unwrap();
    }
    w.finish_write(Lsn(0x20 + 8 * 3 * BOUND as u64));
    drop(w);
    assert!(tl.get(key, Lsn(0x18)).await.is_ok());
    assert!(tl.get(key, Lsn(0x20)).await.is_err(), "the record cannot be redone");
    mgr.shutdown().await;
}

fn entries(vals: &[(u32, u64, bool)]) -> Vec<(Key, Lsn, std::ops::Range<usize>, bool)> {
    vals.iter().map(|&(k, l, init)| (Key::MIN.add(k), Lsn(l), 0..0, init)).collect()
}

#[test]
fn counts_reset_at_images_and_stay_bounded() {
    let mut c = ChainCounts::default();
    let due = c.count(&entries(&[(1, 1, false), (1, 2, false), (2, 2, false)]), 3, true);
    assert!(due.is_empty());
    assert_eq!((c.get(Key::MIN.add(1)), c.get(Key::MIN.add(2))), (2, 1));
    // The third record is due; the count starts again after it.
    let due = c.count(&entries(&[(1, 3, false), (1, 4, false), (2, 4, true)]), 3, true);
    assert_eq!(due, vec![(Key::MIN.add(1), Lsn(3))]);
    assert_eq!((c.get(Key::MIN.add(1)), c.get(Key::MIN.add(2)), c.len()), (1, 0, 1));
    // Twice in one batch; an initializing value ends the count.
    let vals: Vec<_> = (5..12).map(|l| (5, l, false)).chain([(5, 12, true)]).collect();
    let due = c.count(&entries(&vals), 3, true);
    assert_eq!(due, vec![(Key::MIN.add(5), Lsn(7)), (Key::MIN.add(5), Lsn(10))]);
    assert_eq!(c.get(Key::MIN.add(5)), 0);
    // Many keys written once: the map stays within its bound.
    let many: Vec<_> = (0..MAX_TRACKED_KEYS as u32 + 100).map(|k| (k, 9, false)).collect();
    assert!(c.count(&entries(&many), 1000, true).is_empty());
    assert!(c.len() <= MAX_TRACKED_KEYS, "{}", c.len());
}

#[test]
fn a_batch_without_images_leaves_keys_due_for_the_next() {
    let mut c = ChainCounts::default();
    // Into a layer readers cannot see yet: counts go past the bound.
    let vals: Vec<_> = (1..6).map(|l| (1, l, false)).collect();
    assert!(c.count(&entries(&vals), 3, false).is_empty());
    assert_eq!(c.get(Key::MIN.add(1)), 5);
    // The key's first value of the next batch is due.
    let due = c.count(&entries(&[(1, 6, false), (1, 7, false)]), 3, true);
    assert_eq!(due, vec![(Key::MIN.add(1), Lsn(6))]);
    assert_eq!(c.get(Key::MIN.add(1)), 1);
}
