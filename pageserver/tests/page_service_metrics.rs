//! Behaviour observed through the page service metrics. This is its own test
//! binary and its tests take `METRICS_LOCK`, so the process-global metrics
//! only count one test's traffic:
//! - pipelined getpages fold into one vectored get per batch, batches break
//!   for the documented reasons, duplicates within a batch are all answered;
//! - tenant deletion closes the connection of a client that never reads
//!   (the live-connections gauge drops without the client reading a byte).

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
use pageserver_api::pagestream::PagestreamProtocolVersion::V3;
use pageserver_api::pagestream::{PagestreamBeMessage, PagestreamFeMessage};
use utils::lsn::Lsn;

/// Serializes the tests of this binary (metrics are process-global).
static METRICS_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn pipelined(max: usize, batching: Batching) -> PageServiceConf {
    pipelined_in_flight(max, batching, 1)
}

fn pipelined_in_flight(max: usize, batching: Batching, in_flight: usize) -> PageServiceConf {
    PageServiceConf {
        pipelining: PageServicePipeliningConfig::Pipelined(PageServicePipeliningConfigPipelined {
            max_batch_size: NonZeroUsize::new(max).unwrap(),
            execution: Execution::ConcurrentFutures,
            batching,
            max_batches_in_flight: NonZeroUsize::new(in_flight).unwrap(),
        }),
        ..PageServiceConf::default()
    }
}

/// The value of one sample line (`name{labels}`) of the metrics text.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Snapshot {
    batches: f64,
    batched_pages: f64,
    vectored_gets: f64,
    started: f64,
    executed: f64,
    full: f64,
    non_uniform: f64,
    same_page: f64,
    non_batchable: f64,
}

fn snapshot() -> Snapshot {
    let t = pageserver::metrics::encode_text().unwrap();
    Snapshot {
        batches: sample(&t, "pageserver_page_service_batch_size_count"),
        batched_pages: sample(&t, "pageserver_page_service_batch_size_sum"),
        vectored_gets: sample(
            &t,
            "pageserver_get_vectored_seconds_count{task_kind=\"PageRequestHandler\"}",
        ),
        started: sample(
            &t,
            "pageserver_smgr_query_started_count{smgr_query_type=\"get_page_at_lsn\"}",
        ),
        executed: sample(
            &t,
            "pageserver_smgr_query_seconds_count{smgr_query_type=\"get_page_at_lsn\"}",
        ),
        full: sample(&t, "pageserver_page_service_batch_break_reason_total{reason=\"batch_full\"}"),
        non_uniform: sample(
            &t,
            "pageserver_page_service_batch_break_reason_total{reason=\"non_uniform_lsn\"}",
        ),
        same_page: sample(
            &t,
            "pageserver_page_service_batch_break_reason_total{reason=\"same_page_different_lsn\"}",
        ),
        non_batchable: sample(
            &t,
            "pageserver_page_service_batch_break_reason_total{reason=\"non_batchable_request\"}",
        ),
    }
}

fn delta(after: Snapshot, before: Snapshot) -> Snapshot {
    Snapshot {
        batches: after.batches - before.batches,
        batched_pages: after.batched_pages - before.batched_pages,
        vectored_gets: after.vectored_gets - before.vectored_gets,
        started: after.started - before.started,
        executed: after.executed - before.executed,
        full: after.full - before.full,
        non_uniform: after.non_uniform - before.non_uniform,
        same_page: after.same_page - before.same_page,
        non_batchable: after.non_batchable - before.non_batchable,
    }
}

/// Sends `reqs` in one write on a fresh stream; checks every page; returns
/// the metric deltas.
async fn run(env: &TestEnv, addr: std::net::SocketAddr, reqs: &[PagestreamFeMessage]) -> Snapshot {
    let mut c = PgConn::connect(addr).await;
    c.startup(None).await.unwrap();
    c.start_pagestream(env.tenant_id, env.timeline_id, V3).await.unwrap();
    let before = snapshot();
    let resps = c.pipeline(reqs, V3).await;
    let d = delta(snapshot(), before);
    for (r, resp) in reqs.iter().zip(&resps) {
        assert_eq!(resp.request_header(), r.header());
        if let (PagestreamFeMessage::GetPage(g), PagestreamBeMessage::GetPage(p)) = (r, resp) {
            let lsn = g.hdr.request_lsn.min(L2);
            assert!(p.page == expected_page(g.rel, g.blkno, lsn).unwrap(), "{r:?}");
        }
    }
    d
}

fn pages(blocks: impl IntoIterator<Item = (u32, Lsn)>) -> Vec<PagestreamFeMessage> {
    blocks
        .into_iter()
        .enumerate()
        .map(|(i, (blk, lsn))| get_page(hdr(i as u64, lsn, Lsn(0)), REL_A, blk))
        .collect()
}

#[tokio::test]
async fn pipelined_getpages_batch_into_vectored_gets() {
    let _lock = METRICS_LOCK.lock().await;
    let mut env = TestEnv::start(pipelined(32, Batching::ScatteredLsn)).await;
    let scattered = env.addr;
    let small = env.spawn_service(pipelined(4, Batching::ScatteredLsn));
    let uniform = env.spawn_service(pipelined(32, Batching::UniformLsn));
    let two = env.spawn_service(pipelined_in_flight(32, Batching::ScatteredLsn, 2));

    // 32 getpages arriving together: one or two batches, one vectored get each.
    let d = run(&env, scattered, &pages((0..32).map(|i| (i % 12, Lsn::MAX)))).await;
    assert_eq!((d.started, d.executed, d.batched_pages), (32.0, 32.0, 32.0), "{d:?}");
    assert!(d.batches <= 2.0, "32 requests in one write should batch: {d:?}");
    assert_eq!(d.vectored_gets, d.batches, "one vectored get per batch: {d:?}");

    // Two in flight, data in memory: every batch is done before the next is
    // taken, so batches stay whole (not 16 pages each): 64 requests in 2-3.
    let d = run(&env, two, &pages((0..64).map(|i| (i % 12, Lsn::MAX)))).await;
    assert_eq!(d.batched_pages, 64.0, "{d:?}");
    assert!(d.batches <= 3.0, "warm batches beside none must stay whole: {d:?}");

    // max_batch_size 4: at least 8 batches, broken because full.
    let d = run(&env, small, &pages((0..32).map(|i| (i % 12, Lsn::MAX)))).await;
    assert_eq!(d.batched_pages, 32.0, "{d:?}");
    assert!(d.batches >= 8.0 && d.full >= 7.0, "{d:?}");

    // Alternating LSNs: uniform-lsn breaks at every change, scattered-lsn does not.
    let alternating: Vec<(u32, Lsn)> =
        (0..8).map(|i| (i, if i / 2 % 2 == 0 { L1 } else { L2 })).collect();
    let d = run(&env, uniform, &pages(alternating.clone())).await;
    assert!(d.batches >= 4.0 && d.non_uniform >= 3.0, "{d:?}");
    let d = run(&env, scattered, &pages(alternating)).await;
    assert_eq!(d.non_uniform, 0.0, "{d:?}");
    assert!(d.batches <= 2.0, "{d:?}");

    // scattered-lsn: the same page at another LSN breaks the batch.
    let d = run(&env, scattered, &pages([(1, L1), (2, L1), (1, L2), (2, L2)])).await;
    assert!(d.batches >= 2.0 && d.same_page >= 1.0, "{d:?}");

    // Other request types break batches and are answered in order.
    let mut mixed = pages([(0, Lsn::MAX), (1, Lsn::MAX)]);
    mixed.push(nblocks(hdr(2, Lsn::MAX, Lsn(0)), REL_A));
    mixed.extend(pages([(3, Lsn::MAX), (4, Lsn::MAX)]));
    let d = run(&env, scattered, &mixed).await;
    assert!(d.non_batchable >= 1.0 && d.batches >= 2.0, "{d:?}");

    // Duplicates in one batch: every request gets its page.
    let d = run(&env, scattered, &pages([(7, Lsn::MAX); 5])).await;
    assert_eq!(d.batched_pages, 5.0, "{d:?}");
    env.stop().await;
}

fn live_connections() -> f64 {
    let t = pageserver::metrics::encode_text().unwrap();
    sample(&t, "pageserver_live_connections{pageserver_connection_kind=\"page_service\"}")
}

async fn wait_for_live_connections(n: f64, within: Duration) -> Result<(), f64> {
    let deadline = Instant::now() + within;
    loop {
        let now = live_connections();
        if now == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(now);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_deletion_closes_connections_of_clients_that_never_read() {
    let _lock = METRICS_LOCK.lock().await;
    for conf in [
        PageServiceConf { pipelining: PageServicePipeliningConfig::Serial, ..Default::default() },
        pipelined(32, Batching::ScatteredLsn),
        PageServiceConf {
            pipelining: PageServicePipeliningConfig::Pipelined(
                PageServicePipeliningConfigPipelined {
                    max_batch_size: NonZeroUsize::new(32).unwrap(),
                    execution: Execution::Tasks,
                    batching: Batching::ScatteredLsn,
                    max_batches_in_flight: NonZeroUsize::MIN,
                },
            ),
            ..Default::default()
        },
    ] {
        let what = format!("{:?}", conf.pipelining);
        let env = TestEnv::start(conf).await;
        let base = live_connections();
        let flooders = [slow_reader(&env, env.addr).await, slow_reader(&env, env.addr).await];
        wait_for_live_connections(base + 2.0, Duration::from_secs(5)).await.unwrap();
        // Let the server fill the socket buffers and block on its writes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(live_connections(), base + 2.0, "{what}: connections must still be open");

        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), env.tenants.delete_tenant(env.tenant_id))
            .await
            .unwrap_or_else(|_| panic!("{what}: tenant deletion blocked"))
            .unwrap();
        // The clients read nothing, yet their connections end promptly.
        wait_for_live_connections(base, Duration::from_secs(2))
            .await
            .unwrap_or_else(|n| panic!("{what}: {n} connections still open after deletion"));
        assert!(started.elapsed() < Duration::from_secs(3), "{what}: {:?}", started.elapsed());
        for (writer, _read_half) in flooders {
            tokio::time::timeout(TEST_TIMEOUT, writer).await.unwrap().unwrap();
        }
        env.stop().await;
    }
}
