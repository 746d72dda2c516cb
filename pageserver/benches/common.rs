//! Helpers shared by the storage benches: a fresh tenant manager on a temp
//! dir and an ingest loop that writes `total` bytes of `value_size` values.

use std::sync::Arc;

use pageserver::tenant::mgr::TenantManager;
use pageserver::tenant::value::Value;
use pageserver::tenant::{StorageConf, Timeline};
use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

pub const INITIAL_LSN: Lsn = Lsn(0x1000);

pub struct Env {
    pub _dir: tempfile::TempDir,
    pub mgr: Arc<TenantManager>,
    pub tl: Arc<Timeline>,
}

pub async fn env(checkpoint_distance: u64) -> Env {
    // Benches run in the target dir's filesystem, not tmpfs, so IO is real.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut conf = StorageConf::for_tests(dir.path());
    conf.checkpoint_distance = checkpoint_distance;
    conf.in_memory_layers_budget = 4 << 30;
    let mgr = TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap();
    let t = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = t.create_empty_timeline(TimelineId::generate(), INITIAL_LSN, 15).await.unwrap();
    Env { _dir: dir, mgr, tl }
}

pub fn rel_key(i: u32) -> Key {
    Key::rel_block(RelTag::new(1663, 5, 16384 + i / 1_000_000, 0), i % 1_000_000)
}

/// Put `total` bytes of `value_size`-byte images on sequential keys, one LSN
/// per value, in batches of `batch` values. Returns the last LSN.
pub async fn ingest(tl: &Timeline, total: usize, value_size: usize, batch: usize) -> Lsn {
    let payload = bytes::Bytes::from(vec![0xAB; value_size]);
    let n = total / value_size;
    let mut lsn = INITIAL_LSN;
    let mut w = tl.writer().await;
    let mut buf = Vec::with_capacity(batch);
    let mut i = 0;
    while i < n {
        buf.clear();
        for _ in 0..batch.min(n - i) {
            lsn = lsn + 8;
            buf.push((rel_key(i as u32), lsn, Value::Image(payload.clone())));
            i += 1;
        }
        w.put_batch(&buf).await.unwrap();
        w.finish_write(lsn);
    }
    lsn
}
