//! A full disk during ingest, on the simulated file system: ENOSPC at the
//! N-th write of the in-memory layer's file (for several N, with and
//! without direct IO). The write fails with the error, nothing panics, a
//! checkpoint under the full disk returns; once space is back the same LSNs
//! are ingested again (in other message boundaries, as a reconnected WAL
//! receiver would) and every value reads back equal to what was written,
//! from the in-memory layer and after a flush.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use io_engine::sim::{Fault, FaultRule, OpKind, SimFs};
use io_engine::IoEngine;
use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::tenant::mgr::TenantManager;
use crate::tenant::timeline::Timeline;
use crate::tenant::value::image;
use crate::tenant::StorageConf;

const START: Lsn = Lsn(0x1000);
const RECORDS: u64 = 60;
const VALUES_PER_RECORD: u64 = 3;
const KEYS: u64 = 50;

fn lsn_of(record: u64) -> Lsn {
    START + (record + 1) * 0x100
}

fn key_of(i: u64) -> Key {
    Key::rel_block(RelTag::new(1663, 5, 16384, 0), i as u32)
}

/// The values of one WAL record: 8 KiB pages whose bytes name key and LSN.
fn record(r: u64) -> Vec<(Key, Lsn, Bytes)> {
    (0..VALUES_PER_RECORD)
        .map(|j| {
            let k = (r * 7 + j * 13) % KEYS;
            let page: Vec<u8> = (0..8192u64).map(|b| (b * 31 + r * 7 + k) as u8).collect();
            (key_of(k), lsn_of(r), Bytes::from(page))
        })
        .collect()
}

/// Ingest `records` as one message: one `put_batch` per record, one
/// `finish_write` at the end (as the WAL receiver's modification does).
async fn ingest(tl: &Timeline, records: std::ops::Range<u64>) -> anyhow::Result<()> {
    let mut w = tl.writer().await;
    for r in records.clone() {
        let batch: Vec<_> = record(r).into_iter().map(|(k, l, v)| (k, l, image(&v))).collect();
        w.put_batch(&batch).await?;
    }
    w.finish_write(lsn_of(records.end - 1));
    Ok(())
}

/// Every key at `lsn` reads as the last record at or below it wrote.
async fn check(tl: &Timeline, upto: u64, what: &str) {
    let mut want = std::collections::BTreeMap::new();
    for r in 0..upto {
        for (k, _, v) in record(r) {
            want.insert(k, v);
        }
    }
    let lsn = lsn_of(upto - 1);
    for (k, v) in want {
        let got = tl.get(k, lsn).await.unwrap_or_else(|e| panic!("{what}: read {k} at {lsn}: {e}"));
        assert!(got == v, "{what}: {k} at {lsn} differs");
    }
}

async fn setup(direct_io: bool) -> (Arc<SimFs>, Arc<TenantManager>, Arc<Timeline>) {
    let fs = SimFs::new(7);
    let mut conf = StorageConf::for_tests(Path::new("/work"));
    conf.io_engine = IoEngine::simulated(fs.clone());
    conf.direct_io = direct_io;
    let conf = Arc::new(conf);
    let mgr = TenantManager::load(conf, CancellationToken::new()).await.unwrap();
    let tenant = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = tenant.create_empty_timeline(TimelineId::generate(), START, 15).await.unwrap();
    (fs, mgr, tl)
}

fn is_ephemeral(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ephemeral-"))
}

#[tokio::test]
async fn enospc_at_the_nth_write_then_the_same_lsns_again_read_back_equal() {
    for direct_io in [false, true] {
        for n in [0, 1, 2, 4] {
            enospc_at_nth_write(n, direct_io).await;
        }
    }
}

async fn enospc_at_nth_write(n: u64, direct_io: bool) {
    let case = format!("ENOSPC at ephemeral write {n}, direct IO {direct_io}");
    let (fs, mgr, tl) = setup(direct_io).await;
    // The disk fills at the n-th write of an in-memory layer and stays full.
    fs.inject(
        FaultRule::new(Fault::NoSpace).on(OpKind::Write).matching(is_ephemeral).skip(n).forever(),
    );
    let mut next = 0;
    let err = loop {
        assert!(next < RECORDS, "{case}: the disk never filled");
        let end = (next + 4).min(RECORDS);
        match ingest(&tl, next..end).await {
            Ok(()) => next = end,
            Err(e) => break e,
        }
    };
    let msg = format!("{err:#}");
    assert!(msg.contains("no space left on device"), "{case}: {msg}");
    let last = if next == 0 { START } else { lsn_of(next - 1) };
    assert_eq!(tl.get_last_record_lsn(), last, "{case}: nothing of the failed message published");
    // Retrying under the full disk fails again, the same way.
    let e = ingest(&tl, next..next + 1).await.unwrap_err();
    assert!(format!("{e:#}").contains("no space left"), "{case}: {e:#}");
    // A checkpoint under the full disk returns (its L0 writes have space).
    let cp = tokio::time::timeout(Duration::from_secs(10), tl.freeze_and_flush()).await;
    let cp = cp.unwrap_or_else(|_| panic!("{case}: checkpoint hangs"));
    assert_eq!(cp.unwrap(), last, "{case}");
    if next > 0 {
        check(&tl, next, &format!("{case}, before space returns")).await;
    }
    // Space is back: ingest again from last_record_lsn, one record per
    // message this time (other boundaries than before the failure).
    fs.clear_faults();
    for r in next..RECORDS {
        ingest(&tl, r..r + 1).await.unwrap_or_else(|e| panic!("{case}: record {r}: {e:#}"));
    }
    check(&tl, RECORDS, &format!("{case}, in memory")).await;
    tl.freeze_and_flush().await.unwrap();
    check(&tl, RECORDS, &format!("{case}, flushed")).await;
    assert!(fs.faults_fired() >= 2, "{case}");
    mgr.shutdown().await;
}

/// A writer dropped between `put_batch` and `finish_write` (a cancelled
/// ingest) leaves nothing behind: the next writer writes the same LSNs.
#[tokio::test]
async fn a_dropped_writer_abandons_its_unfinished_lsns() {
    let (_fs, mgr, tl) = setup(false).await;
    ingest(&tl, 0..2).await.unwrap();
    {
        let mut w = tl.writer().await;
        for r in 2..5 {
            let batch: Vec<_> = record(r).into_iter().map(|(k, l, v)| (k, l, image(&v))).collect();
            w.put_batch(&batch).await.unwrap();
        }
    }
    // A checkpoint does not wait for the abandoned LSNs.
    let cp = tokio::time::timeout(Duration::from_secs(10), tl.freeze_and_flush()).await;
    assert_eq!(cp.expect("checkpoint returns").unwrap(), lsn_of(1));
    ingest(&tl, 2..3).await.unwrap();
    ingest(&tl, 3..RECORDS).await.unwrap();
    check(&tl, RECORDS, "after a dropped writer").await;
    mgr.shutdown().await;
}
