//! Handler modes over real sockets: serial and every pipelined variant give
//! identical answers to 1,000 pipelined mixed requests (checked against the
//! model too); waiting for WAL (arrives / times out); and a client that never
//! reads its responses does not hold up daemon shutdown (tenant deletion:
//! see `page_service_metrics.rs`).

mod page_service_support;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use page_service_support::req::*;
use page_service_support::*;
use pageserver::page_service::PageServiceConf;
use pageserver_api::config::{
    PageServicePipeliningConfig, PageServicePipeliningConfigPipelined,
    PageServiceProtocolPipelinedBatchingStrategy as Batching,
    PageServiceProtocolPipelinedExecutionStrategy as Execution,
};
use pageserver_api::pagestream::PagestreamProtocolVersion::{V2, V3};
use pageserver_api::pagestream::{PagestreamBeMessage, PagestreamFeMessage};
use pageserver_api::reltag::RelTag;
use rand::{Rng, SeedableRng};
use utils::lsn::Lsn;

fn pipelined(max: usize, execution: Execution, batching: Batching) -> PageServiceConf {
    pipelined_in_flight(max, execution, batching, 1)
}

fn pipelined_in_flight(
    max: usize,
    execution: Execution,
    batching: Batching,
    in_flight: usize,
) -> PageServiceConf {
    PageServiceConf {
        pipelining: PageServicePipeliningConfig::Pipelined(PageServicePipeliningConfigPipelined {
            max_batch_size: NonZeroUsize::new(max).unwrap(),
            execution,
            batching,
            max_batches_in_flight: NonZeroUsize::new(in_flight).unwrap(),
        }),
        ..PageServiceConf::default()
    }
}

fn serial() -> PageServiceConf {
    PageServiceConf {
        pipelining: PageServicePipeliningConfig::Serial,
        ..PageServiceConf::default()
    }
}

fn all_modes() -> Vec<PageServiceConf> {
    vec![
        serial(),
        pipelined(32, Execution::ConcurrentFutures, Batching::ScatteredLsn),
        pipelined(32, Execution::Tasks, Batching::ScatteredLsn),
        pipelined(32, Execution::ConcurrentFutures, Batching::UniformLsn),
        pipelined(4, Execution::Tasks, Batching::UniformLsn),
        pipelined(1, Execution::ConcurrentFutures, Batching::ScatteredLsn),
        pipelined_in_flight(32, Execution::ConcurrentFutures, Batching::ScatteredLsn, 2),
        pipelined_in_flight(32, Execution::Tasks, Batching::UniformLsn, 4),
        pipelined_in_flight(3, Execution::ConcurrentFutures, Batching::ScatteredLsn, 3),
    ]
}

/// A random mix of every request type, including failing ones.
fn random_requests(seed: u64, n: usize) -> Vec<PagestreamFeMessage> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let rels = [REL_A, REL_A, REL_A, REL_B, REL_UNKNOWN, RelTag { relnode: 0, ..REL_A }];
    let lsns = [L1, Lsn(L1.0 + 0x10), L2, Lsn::MAX, Lsn::MAX, Lsn::MAX];
    (0..n as u64)
        .map(|reqid| {
            let mut h = hdr(reqid, lsns[rng.gen_range(0..lsns.len())], Lsn(0));
            match rng.gen_range(0..100) {
                0 => h.request_lsn = Lsn(0),
                1 => (h.request_lsn, h.not_modified_since) = (L1, L2),
                2 => h.request_lsn = Lsn(INITIAL_LSN.0 - 1),
                _ => {}
            }
            let rel = rels[rng.gen_range(0..rels.len())];
            match rng.gen_range(0..100) {
                0..=69 => get_page(h, rel, rng.gen_range(0..14)),
                70..=79 => exists(h, rel),
                80..=89 => nblocks(h, rel),
                90..=94 => db_size(h, if rng.gen_bool(0.9) { DB } else { 77 }),
                _ => slru(h, if rng.gen_bool(0.9) { 0 } else { 9 }, rng.gen_range(0..2)),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_and_pipelined_answer_identically() {
    let seed = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("SEED={seed}");
    let reqs = random_requests(seed, 1000);
    let mut env = TestEnv::start(serial()).await;
    let mut reference: Option<Vec<PagestreamBeMessage>> = None;
    for conf in all_modes() {
        let what = format!("{:?}", conf.pipelining);
        let addr = env.spawn_service(conf);
        for v in [V3, V2] {
            let mut c = PgConn::connect(addr).await;
            c.startup(None).await.unwrap();
            c.start_pagestream(env.tenant_id, env.timeline_id, v).await.unwrap();
            let resps = c.pipeline(&reqs, v).await;
            assert_eq!(resps.len(), reqs.len());
            for (i, (r, resp)) in reqs.iter().zip(&resps).enumerate() {
                check_against_model(r, resp, &format!("{what} {v:?} request {i} (SEED={seed})"));
            }
            if v == V3 {
                for (r, resp) in reqs.iter().zip(&resps) {
                    assert_eq!(resp.request_header(), r.header(), "{what}: order or echo");
                }
                match &reference {
                    None => reference = Some(resps),
                    Some(want) => {
                        assert!(*want == resps, "{what} differs from serial (SEED={seed})")
                    }
                }
            }
        }
    }
    env.stop().await;
}

/// The model's answer to `r`, or that it is an in-band error.
fn check_against_model(r: &PagestreamFeMessage, resp: &PagestreamBeMessage, what: &str) {
    let h = r.header();
    let valid = h.request_lsn != Lsn(0)
        && h.request_lsn >= h.not_modified_since
        && h.request_lsn >= INITIAL_LSN;
    let lsn = h.request_lsn.min(L2);
    match (r, resp) {
        (_, PagestreamBeMessage::Error(e)) => {
            let expected_error = !valid
                || match r {
                    PagestreamFeMessage::GetPage(g) => expected_page(g.rel, g.blkno, lsn).is_none(),
                    PagestreamFeMessage::Nblocks(n) => expected_nblocks(n.rel, lsn).is_none(),
                    PagestreamFeMessage::DbSize(d) => d.dbnode != DB || lsn < L1,
                    PagestreamFeMessage::GetSlruSegment(s) => {
                        s.kind != 0 || s.segno != 0 || lsn < L1
                    }
                    PagestreamFeMessage::Exists(_) => false,
                };
            assert!(expected_error, "{what}: unexpected error '{}' for {r:?}", e.message);
        }
        (PagestreamFeMessage::GetPage(g), PagestreamBeMessage::GetPage(p)) => {
            assert!(valid, "{what}");
            assert!(p.page == expected_page(g.rel, g.blkno, lsn).unwrap(), "{what}: {r:?}");
        }
        (PagestreamFeMessage::Exists(e), PagestreamBeMessage::Exists(x)) => {
            assert_eq!(x.exists, expected_nblocks(e.rel, lsn).is_some(), "{what}")
        }
        (PagestreamFeMessage::Nblocks(n), PagestreamBeMessage::Nblocks(x)) => {
            assert_eq!(Some(x.n_blocks), expected_nblocks(n.rel, lsn), "{what}")
        }
        (PagestreamFeMessage::DbSize(_), PagestreamBeMessage::DbSize(x)) => {
            let blocks = expected_nblocks(REL_A, lsn).unwrap() + 3;
            assert_eq!(x.db_size, blocks as i64 * 8192, "{what}");
        }
        (PagestreamFeMessage::GetSlruSegment(_), PagestreamBeMessage::GetSlruSegment(x)) => {
            assert_eq!(x.segment, expected_clog_segment(), "{what}")
        }
        _ => panic!("{what}: response {resp:?} does not match request {r:?}"),
    }
}

/// Commits version 3 of block 5 of REL_A at `lsn` (after a delay).
async fn write_version3(tl: &pageserver::tenant::Timeline, lsn: Lsn) {
    let mut m = tl.begin_modification(lsn);
    m.put_rel_page_image(REL_A, 5, page_image(REL_A.relnode, 5, 3)).await.unwrap();
    m.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_wal_then_answers_or_times_out() {
    let l3 = Lsn(0x0400_0000);
    let mut env =
        TestEnv::start_with(serial(), |c| c.wait_lsn_timeout = Duration::from_millis(500)).await;
    let addrs = [
        env.addr,
        env.spawn_service(pipelined(32, Execution::ConcurrentFutures, Batching::ScatteredLsn)),
        env.spawn_service(pipelined(32, Execution::Tasks, Batching::UniformLsn)),
        env.spawn_service(pipelined_in_flight(
            32,
            Execution::ConcurrentFutures,
            Batching::ScatteredLsn,
            2,
        )),
    ];
    for (i, addr) in addrs.into_iter().enumerate() {
        let mut c = PgConn::connect(addr).await;
        c.startup(None).await.unwrap();
        c.start_pagestream(env.tenant_id, env.timeline_id, V3).await.unwrap();

        // not_modified_since in the future: the batch waits for it.
        let target = Lsn(l3.0 + i as u64 * 0x100);
        // The Nblocks does not wait: with batches in flight it is done
        // first, and still answered after the pages.
        let reqs = [
            get_page(hdr(1, Lsn::MAX, target), REL_A, 5),
            get_page(hdr(2, Lsn::MAX, target), REL_A, 6),
            nblocks(latest(3), REL_A),
        ];
        let tl = env.timeline.clone();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            write_version3(&tl, target).await;
        });
        let started = Instant::now();
        let resps = c.pipeline(&reqs, V3).await;
        assert!(started.elapsed() >= Duration::from_millis(90), "answered before the WAL arrived");
        writer.await.unwrap();
        let PagestreamBeMessage::GetPage(p) = &resps[0] else { panic!("{:?}", resps[0]) };
        assert_eq!(p.page, page_image(REL_A.relnode, 5, 3));
        let PagestreamBeMessage::GetPage(p) = &resps[1] else { panic!("{:?}", resps[1]) };
        assert_eq!(p.page, page_image(REL_A.relnode, 6, 1));
        assert!(matches!(&resps[2], PagestreamBeMessage::Nblocks(_)), "{:?}", resps[2]);

        // WAL that never arrives: in-band error after wait_lsn_timeout.
        let started = Instant::now();
        let never = Lsn(0x7000_0000);
        let resp = c.request(&get_page(hdr(4, Lsn::MAX, never), REL_A, 0), V3).await;
        assert!(error_message(&resp).contains("timed out"), "{resp:?}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(450) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        // The stream is still usable.
        let resp = c.request(&nblocks(latest(5), REL_A), V3).await;
        assert!(matches!(resp, PagestreamBeMessage::Nblocks(n) if n.n_blocks == 12));
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_never_reads_does_not_block_shutdown() {
    for conf in [
        serial(),
        pipelined(32, Execution::ConcurrentFutures, Batching::ScatteredLsn),
        pipelined(32, Execution::Tasks, Batching::ScatteredLsn),
        pipelined_in_flight(32, Execution::ConcurrentFutures, Batching::ScatteredLsn, 4),
    ] {
        let what = format!("{:?}", conf.pipelining);
        let mut env = TestEnv::start(conf).await;
        let flooders = [slow_reader(&env, env.addr).await, slow_reader(&env, env.addr).await];
        // Let the server fill the socket buffers and block on its writes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let took = env.stop_page_service().await;
        assert!(took < Duration::from_secs(2), "{what}: shutdown took {took:?}");
        // The server closed the connections, so the flooding writes ended too.
        for (writer, _read_half) in flooders {
            tokio::time::timeout(TEST_TIMEOUT, writer).await.unwrap().unwrap();
        }
        env.stop().await;
    }
}
