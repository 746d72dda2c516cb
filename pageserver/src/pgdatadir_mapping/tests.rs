//! Tests of the PostgreSQL-level API against a real timeline.

use std::sync::Arc;

use bytes::Bytes;
use pageserver_api::key::Key;
use pageserver_api::reltag::{RelTag, SlruKind};
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::*;
use crate::tenant::mgr::TenantManager;
use crate::tenant::{ReadKind, StorageConf, Timeline};

struct Env {
    _dir: tempfile::TempDir,
    _mgr: Arc<TenantManager>,
    tl: Arc<Timeline>,
}

async fn env(max_keys: usize) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut conf = StorageConf::for_tests(dir.path());
    conf.max_get_vectored_keys = max_keys;
    let mgr = TenantManager::load(Arc::new(conf), CancellationToken::new()).await.unwrap();
    let tenant = mgr.create_tenant(TenantId::generate()).await.unwrap();
    let tl = tenant.create_empty_timeline(TimelineId::generate(), Lsn(0x10), 15).await.unwrap();
    Env { _dir: dir, _mgr: mgr, tl }
}

fn page(tag: u8, blk: u32) -> Bytes {
    let mut p = vec![tag; BLCKSZ];
    p[..4].copy_from_slice(&blk.to_le_bytes());
    Bytes::from(p)
}

const A: RelTag = RelTag { spcnode: 1663, dbnode: 5, relnode: 16384, forknum: 0 };
const B: RelTag = RelTag { spcnode: 1663, dbnode: 5, relnode: 16390, forknum: 0 };

/// LSN 0x20: db 1663/5 with relmap, A = 3 pages, B empty, A's FSM 1 page.
async fn base(tl: &Timeline) {
    let mut m = tl.begin_modification(Lsn(0x20));
    m.init_empty().await.unwrap();
    m.put_relmap_file(1663, 5, Bytes::from(vec![7u8; 512])).await.unwrap();
    m.put_rel_creation(A, 0).await.unwrap();
    for blk in 0..3 {
        m.put_rel_page_image(A, blk, page(1, blk)).await.unwrap();
    }
    m.put_rel_creation(B, 0).await.unwrap();
    m.put_rel_page_image(A.with_fork(1), 0, page(9, 0)).await.unwrap();
    assert!(m.put_rel_creation(B, 0).await.unwrap_err().to_string().contains("already exists"));
    m.commit().await.unwrap();
}

#[tokio::test]
async fn rel_reads_and_batches() {
    let e = env(32).await;
    let tl = &e.tl;
    base(tl).await;
    let l = Lsn(0x20);
    assert_eq!(tl.get_last_record_lsn(), l);
    assert!(get_rel_exists(tl, ReadKind::HttpRequest, A, l).await.unwrap());
    assert!(!get_rel_exists(tl, ReadKind::HttpRequest, A.with_fork(2), l).await.unwrap());
    assert_eq!(get_rel_size(tl, ReadKind::HttpRequest, A, l).await.unwrap(), 3);
    assert_eq!(get_rel_size(tl, ReadKind::HttpRequest, B, l).await.unwrap(), 0);
    let err = get_rel_size(tl, ReadKind::HttpRequest, A.with_fork(2), l).await.unwrap_err();
    assert!(matches!(err, DatadirError::RelNotFound { .. }));
    assert!(
        err.to_string().contains("1663/5/16384_vm") && err.to_string().contains("0/20"),
        "{err}"
    );
    assert_eq!(
        get_db_size(tl, ReadKind::HttpRequest, 1663, 5, l).await.unwrap(),
        4 * BLCKSZ as u64
    );
    assert!(matches!(
        get_db_size(tl, ReadKind::HttpRequest, 1663, 6, l).await,
        Err(DatadirError::DbNotFound { .. })
    ));

    let unknown = RelTag::new(1663, 5, 99999, 0);
    let zero_rel = RelTag::new(1663, 5, 0, 0);
    let reqs =
        [(A, 0, l), (A, 2, l), (A, 5, l), (B, 0, l), (unknown, 0, l), (zero_rel, 1, l), (A, 0, l)];
    let out = get_rel_pages_batched(tl, ReadKind::HttpRequest, &reqs).await.unwrap();
    assert_eq!(out[0].as_ref().unwrap(), &page(1, 0));
    assert_eq!(out[1].as_ref().unwrap(), &page(1, 2));
    assert_eq!(out[2].as_ref().unwrap(), &zero_page(), "past the end reads zeros");
    assert_eq!(out[3].as_ref().unwrap(), &zero_page());
    assert!(matches!(out[4], Err(DatadirError::RelNotFound { rel, .. }) if rel == unknown));
    assert!(matches!(out[5], Err(DatadirError::RelNotFound { .. })));
    assert_eq!(out[6].as_ref().unwrap(), &page(1, 0));
    // The sizes read at the latest LSN are now cached: same answers.
    assert!(tl.rel_size_cache.lookup(A, l).is_some());
    let again = get_rel_pages_batched(tl, ReadKind::HttpRequest, &reqs).await.unwrap();
    for (a, b) in out.iter().zip(&again) {
        assert_eq!(a.as_ref().ok(), b.as_ref().ok());
    }
    // Reads below the data's LSN find nothing.
    assert!(!get_rel_exists(tl, ReadKind::HttpRequest, A, Lsn(0x10)).await.unwrap());
}

#[tokio::test]
async fn truncate_extend_drop_history() {
    let e = env(32).await;
    let tl = &e.tl;
    base(tl).await;

    let mut m = tl.begin_modification(Lsn(0x30));
    m.put_rel_truncation(A, 1).await.unwrap();
    m.commit().await.unwrap();

    // Re-extend by writing block 2 only: block 1 must read as zeros, not
    // the page from before the truncation.
    let mut m = tl.begin_modification(Lsn(0x40));
    m.put_rel_page_image(A, 2, page(2, 2)).await.unwrap();
    assert_eq!(m.rel_size(A).await.unwrap(), Some(3));
    m.commit().await.unwrap();

    let mut m = tl.begin_modification(Lsn(0x50));
    m.put_rel_drop(B).await.unwrap();
    m.put_rel_drop(RelTag::new(1663, 5, 424242, 0)).await.unwrap(); // absent: no-op
    m.commit().await.unwrap();

    for (lsn, size) in [(0x20, 3), (0x30, 1), (0x40, 3), (0x50, 3)] {
        assert_eq!(
            get_rel_size(tl, ReadKind::HttpRequest, A, Lsn(lsn)).await.unwrap(),
            size,
            "at {lsn:#x}"
        );
    }
    let at = |blk, lsn| (A, blk, Lsn(lsn));
    let out = get_rel_pages_batched(
        tl,
        ReadKind::HttpRequest,
        &[at(1, 0x20), at(1, 0x30), at(1, 0x40), at(2, 0x40), at(2, 0x20)],
    )
    .await
    .unwrap();
    assert_eq!(out[0].as_ref().unwrap(), &page(1, 1));
    assert_eq!(out[1].as_ref().unwrap(), &zero_page(), "past the end after truncation");
    assert_eq!(out[2].as_ref().unwrap(), &zero_page(), "gap after re-extension is zero-filled");
    assert_eq!(out[3].as_ref().unwrap(), &page(2, 2));
    assert_eq!(out[4].as_ref().unwrap(), &page(1, 2));

    assert!(get_rel_exists(tl, ReadKind::HttpRequest, B, Lsn(0x40)).await.unwrap());
    assert!(!get_rel_exists(tl, ReadKind::HttpRequest, B, Lsn(0x50)).await.unwrap());
    assert!(list_rels(tl, ReadKind::HttpRequest, 1663, 5, Lsn(0x50))
        .await
        .unwrap()
        .iter()
        .all(|r| *r != B));
    let out = get_rel_pages_batched(tl, ReadKind::HttpRequest, &[(B, 0, Lsn(0x50))]).await.unwrap();
    assert!(matches!(out[0], Err(DatadirError::RelNotFound { .. })));

    // Errors of the write side name the relation.
    let mut m = tl.begin_modification(Lsn(0x60));
    let err = m.put_rel_extend(B, 5).await.unwrap_err().to_string();
    assert!(err.contains("16390") && err.contains("does not exist"), "{err}");
    assert!(m.put_rel_page_image(A, 0, Bytes::from_static(b"short")).await.is_err());
    m.put_rel_page_image(A, 0, page(3, 0)).await.unwrap();
    m.flush().await.unwrap();
    let err = m.put_rel_page_image(A.with_fork(3), 0, page(3, 0)).await; // new fork, ok
    assert!(err.is_ok());
    m.commit().await.unwrap();
}

#[tokio::test]
async fn slru_twophase_control_and_keyspace() {
    let e = env(32).await;
    let tl = &e.tl;
    base(tl).await;
    let mut m = tl.begin_modification(Lsn(0x30));
    m.put_slru_segment_creation(SlruKind::Clog, 0, 2).await.unwrap();
    m.put_slru_page_image(SlruKind::Clog, 0, 0, page(4, 0)).await.unwrap();
    m.put_slru_page_image(SlruKind::Clog, 0, 1, page(4, 1)).await.unwrap();
    m.put_twophase_file(742, Bytes::from_static(b"state")).await.unwrap();
    m.put_control_file(Bytes::from(vec![1u8; 8192]));
    m.put_checkpoint(Bytes::from(vec![2u8; 88]));
    m.put_relmap_file(1664, 0, Bytes::from(vec![8u8; 512])).await.unwrap();
    m.commit().await.unwrap();
    let l = Lsn(0x30);

    let seg = get_slru_segment(tl, ReadKind::HttpRequest, SlruKind::Clog, 0, l).await.unwrap();
    assert_eq!(seg.len(), 2 * BLCKSZ);
    assert_eq!(&seg[BLCKSZ..], &page(4, 1)[..]);
    let err = get_slru_segment(tl, ReadKind::HttpRequest, SlruKind::MultiXactOffsets, 0, l)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("pg_multixact/offsets"), "{err}");
    assert_eq!(
        list_slru_segments(tl, ReadKind::HttpRequest, SlruKind::Clog, l).await.unwrap(),
        vec![0]
    );

    let ks = collect_keyspace(tl, ReadKind::HttpRequest, l).await.unwrap();
    // Every listed key must be readable, and the list must be sorted and merged.
    let mut n_keys = 0u32;
    for w in ks.windows(2) {
        assert!(w[0].end < w[1].start, "sorted, merged: {:?} {:?}", w[0], w[1]);
    }
    for r in &ks {
        let mut k = r.start;
        while k < r.end {
            tl.get(k, l).await.unwrap_or_else(|e| panic!("key {k} listed but unreadable: {e}"));
            n_keys += 1;
            k = k.next();
        }
    }
    // dbdir, 2 relmaps, 2 reldirs, A (3 blocks + size), A fsm (1 + size), B size,
    // 3 SLRU dirs, clog (2 blocks + size), twophase dir + file, control, checkpoint.
    assert_eq!(n_keys, 1 + 2 + 2 + 4 + 2 + 1 + 3 + 3 + 2 + 2);
    let contains = |k: Key| ks.iter().any(|r| r.contains(&k));
    assert!(contains(Key::rel_block(A, 2)) && !contains(Key::rel_block(A, 3)));
    assert!(contains(Key::twophase_file(742)) && contains(Key::checkpoint()));

    // Dropping the database removes it and its relations from the keyspace.
    let mut m = tl.begin_modification(Lsn(0x40));
    m.drop_db(1663, 5).await.unwrap();
    m.drop_slru_segment(SlruKind::Clog, 0).await.unwrap();
    m.drop_twophase_file(742).await.unwrap();
    m.commit().await.unwrap();
    let ks = collect_keyspace(tl, ReadKind::HttpRequest, Lsn(0x40)).await.unwrap();
    let contains = |k: Key| ks.iter().any(|r| r.contains(&k));
    assert!(!contains(Key::rel_block(A, 0)) && !contains(Key::rel_dir(1663, 5)));
    assert!(!contains(Key::slru_block(SlruKind::Clog, 0, 0)) && !contains(Key::twophase_file(742)));
    assert!(contains(Key::relmap_file(1664, 0)));
    assert!(matches!(
        get_db_size(tl, ReadKind::HttpRequest, 1663, 5, Lsn(0x40)).await,
        Err(DatadirError::DbNotFound { .. })
    ));
    assert!(!get_rel_exists(tl, ReadKind::HttpRequest, A, Lsn(0x40)).await.unwrap());
    assert!(get_rel_exists(tl, ReadKind::HttpRequest, A, Lsn(0x30)).await.unwrap());
}

#[tokio::test]
async fn batch_over_the_key_limit_is_split_by_the_configured_limit() {
    // 4 keys per vectored get: 4 pages of 2 uncached relations need 6 keys.
    let e = env(4).await;
    let tl = &e.tl;
    base(tl).await;
    let l = Lsn(0x20);
    let fsm = A.with_fork(1);
    let reqs = [(A, 0, l), (fsm, 0, l), (A, 1, l), (fsm, 3, l)];
    let out = get_rel_pages_batched(tl, ReadKind::HttpRequest, &reqs).await.unwrap();
    assert_eq!(out[0].as_ref().unwrap(), &page(1, 0));
    assert_eq!(out[1].as_ref().unwrap(), &page(9, 0));
    assert_eq!(out[2].as_ref().unwrap(), &page(1, 1));
    assert_eq!(out[3].as_ref().unwrap(), &zero_page());
    // Chunked helpers adapt to the limit too.
    assert!(!collect_keyspace(tl, ReadKind::HttpRequest, l).await.unwrap().is_empty());
    assert_eq!(
        get_db_size(tl, ReadKind::HttpRequest, 1663, 5, l).await.unwrap(),
        4 * BLCKSZ as u64
    );
    // A batch whose pages and sizes exceed the limit is split by the
    // configured limit (5 pages + 5 sizes = 10 keys > 4), never refused.
    let distinct: Vec<_> = (0..5).map(|i| (RelTag::new(1663, 5, 30000 + i, 0), 0, l)).collect();
    let out = get_rel_pages_batched(tl, ReadKind::HttpRequest, &distinct).await.unwrap();
    assert_eq!(out.len(), 5);
    assert!(out.iter().all(|r| matches!(r, Err(DatadirError::RelNotFound { .. }))), "{out:?}");
}

#[tokio::test]
async fn large_modification_flushes_in_batches() {
    let e = env(32).await;
    let tl = &e.tl;
    let big = RelTag::new(1663, 5, 20000, 0);
    let n = (modification::FLUSH_BYTES / BLCKSZ) as u32 * 2 + 7;
    let mut m = tl.begin_modification(Lsn(0x20));
    m.init_empty().await.unwrap();
    // Written out of order, as segments of a tar can be.
    for blk in (n / 2..n).chain(0..n / 2) {
        m.put_rel_page_image(big, blk, page(5, blk)).await.unwrap();
        assert!(m.pending_bytes() < modification::FLUSH_BYTES + BLCKSZ);
    }
    let err = m.put_rel_page_image(big, 3, page(5, 3)).await.unwrap_err().to_string();
    assert!(err.contains("written twice"), "{err}");
    m.commit().await.unwrap();
    assert_eq!(get_rel_size(tl, ReadKind::HttpRequest, big, Lsn(0x20)).await.unwrap(), n);
    let reqs: Vec<_> = [0, n / 2 - 1, n / 2, n - 1].iter().map(|&b| (big, b, Lsn(0x20))).collect();
    let out = get_rel_pages_batched(tl, ReadKind::HttpRequest, &reqs).await.unwrap();
    for (r, (_, b, _)) in out.iter().zip(&reqs) {
        assert_eq!(r.as_ref().unwrap(), &page(5, *b));
    }
}

/// One modification covering three LSNs: each LSN reads as the state after
/// its own changes, nothing is visible before the commit, and the size
/// cache never answers for an LSN between two changes.
#[tokio::test]
async fn modification_over_several_lsns() {
    let e = env(32).await;
    let tl = &e.tl;
    base(tl).await;
    const C: RelTag = RelTag { spcnode: 1663, dbnode: 5, relnode: 16400, forknum: 0 };
    let rk = ReadKind::HttpRequest;
    // Fill the cache with A's size at the latest LSN.
    assert_eq!(get_rel_size(tl, rk, A, Lsn(0x20)).await.unwrap(), 3);

    let mut m = tl.begin_modification(Lsn(0x30));
    m.put_rel_creation(C, 0).await.unwrap();
    m.put_rel_page_image(C, 0, page(3, 0)).await.unwrap();
    m.put_rel_page_image(C, 1, page(3, 1)).await.unwrap();
    m.set_lsn(Lsn(0x40)).await.unwrap();
    m.put_rel_page_image(A, 4, page(4, 4)).await.unwrap(); // extends A to 5, block 3 zero
    m.put_rel_page_image(C, 0, page(5, 0)).await.unwrap(); // same block, new LSN: allowed
    m.set_lsn(Lsn(0x50)).await.unwrap();
    m.put_rel_drop(B).await.unwrap();
    m.put_rel_truncation(A, 4).await.unwrap();
    assert_eq!(m.rel_size(A).await.unwrap(), Some(4), "reads inside see pending changes");
    assert_eq!(tl.get_last_record_lsn(), Lsn(0x20), "nothing is visible before the commit");
    m.commit().await.unwrap();
    assert_eq!(tl.get_last_record_lsn(), Lsn(0x50));

    let pages = |rel, blk, lsn| (rel, blk, Lsn(lsn));
    let got = get_rel_pages_batched(
        tl,
        rk,
        &[
            pages(C, 0, 0x30),
            pages(C, 0, 0x40),
            pages(A, 3, 0x40),
            pages(A, 4, 0x40),
            pages(C, 1, 0x50),
        ],
    )
    .await
    .unwrap();
    assert_eq!(got[0].as_ref().unwrap(), &page(3, 0));
    assert_eq!(got[1].as_ref().unwrap(), &page(5, 0));
    assert_eq!(got[2].as_ref().unwrap(), &zero_page());
    assert_eq!(got[3].as_ref().unwrap(), &page(4, 4));
    assert_eq!(got[4].as_ref().unwrap(), &page(3, 1));
    for (lsn, a_size, b_exists, c_exists) in [
        (0x20, 3, true, false),
        (0x30, 3, true, true),
        (0x3f, 3, true, true),
        (0x40, 5, true, true),
        (0x50, 4, false, true),
    ] {
        let at = Lsn(lsn);
        assert_eq!(get_rel_size(tl, rk, A, at).await.unwrap(), a_size, "A at {at}");
        assert_eq!(get_rel_exists(tl, rk, B, at).await.unwrap(), b_exists, "B at {at}");
        assert_eq!(get_rel_exists(tl, rk, C, at).await.unwrap(), c_exists, "C at {at}");
    }
}

#[tokio::test]
#[should_panic(expected = "modification LSNs must increase")]
async fn modification_lsns_must_increase() {
    let e = env(32).await;
    base(&e.tl).await;
    let mut m = e.tl.begin_modification(Lsn(0x30));
    m.set_lsn(Lsn(0x30)).await.unwrap();
}
