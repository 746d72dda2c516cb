//! A short latency/throughput smoke of the page service handler modes over
//! loopback (ignored by default; the real performance matrix is pagebench's,
//! see docs/benchmarks.md). Run it in release mode:
//!
//! ```sh
//! cargo test --release -p pageserver --test page_service_latency -- --ignored --nocapture
//! ```
//!
//! It prints, per mode, the mean and p99 latency at queue depth 1 and the
//! throughput and batching factor at queue depth 32, and asserts only what
//! must hold on any machine: every response is the right page, and pipelined
//! at queue depth 32 batches (factor > 1).

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
use pageserver_api::pagestream::PagestreamBeMessage;
use pageserver_api::pagestream::PagestreamProtocolVersion::V3;

const RUN: Duration = Duration::from_secs(2);

fn batch_counts() -> (f64, f64) {
    let t = pageserver::metrics::encode_text().unwrap();
    let get = |name: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .map(|v| v.trim().parse::<f64>().unwrap())
            .unwrap_or(0.0)
    };
    (get("pageserver_page_service_batch_size_sum"), get("pageserver_page_service_batch_size_count"))
}

async fn qd1(c: &mut PgConn) -> (f64, f64, u64) {
    let mut lat = Vec::new();
    let started = Instant::now();
    let mut i = 0u64;
    while started.elapsed() < RUN {
        let blk = (i % 12) as u32;
        let t = Instant::now();
        let resp = c.request(&get_page(latest(i), REL_A, blk), V3).await;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        let PagestreamBeMessage::GetPage(p) = resp else { panic!("{resp:?}") };
        assert!(p.page == expected_page(REL_A, blk, L2).unwrap());
        i += 1;
    }
    lat.sort_by(f64::total_cmp);
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    (mean, lat[lat.len() * 99 / 100], i)
}

async fn qd32(c: &mut PgConn) -> f64 {
    const DEPTH: u64 = 32;
    let mut sent = 0u64;
    let mut received = 0u64;
    for _ in 0..DEPTH {
        c.push_request(&get_page(latest(sent), REL_A, (sent % 12) as u32), V3);
        sent += 1;
    }
    c.flush().await;
    let started = Instant::now();
    while started.elapsed() < RUN {
        let resp = c.recv_response(V3).await;
        let PagestreamBeMessage::GetPage(p) = &resp else { panic!("{resp:?}") };
        assert_eq!(p.req.hdr.reqid, received);
        received += 1;
        c.push_request(&get_page(latest(sent), REL_A, (sent % 12) as u32), V3);
        sent += 1;
        c.flush().await;
    }
    let rps = received as f64 / started.elapsed().as_secs_f64();
    while received < sent {
        c.recv_response(V3).await;
        received += 1;
    }
    rps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing smoke; run explicitly in release mode"]
async fn latency_and_throughput_smoke() {
    let pipelined = |execution| PageServiceConf {
        pipelining: PageServicePipeliningConfig::Pipelined(PageServicePipeliningConfigPipelined {
            max_batch_size: NonZeroUsize::new(32).unwrap(),
            execution,
            batching: Batching::ScatteredLsn,
        }),
        ..PageServiceConf::default()
    };
    let serial =
        PageServiceConf { pipelining: PageServicePipeliningConfig::Serial, ..Default::default() };
    let mut env = TestEnv::start(serial).await;
    let modes = [
        ("serial", env.addr),
        (
            "pipelined concurrent-futures",
            env.spawn_service(pipelined(Execution::ConcurrentFutures)),
        ),
        ("pipelined tasks", env.spawn_service(pipelined(Execution::Tasks))),
    ];
    let (tenant_id, timeline_id) = (env.tenant_id, env.timeline_id);
    for (name, addr) in modes {
        // The client runs on its own thread and runtime, like a separate process.
        let client = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let mut c = PgConn::connect(addr).await;
                c.startup(None).await.unwrap();
                c.start_pagestream(tenant_id, timeline_id, V3).await.unwrap();
                let (mean, p99, n) = qd1(&mut c).await;
                let (sum0, count0) = batch_counts();
                let rps = qd32(&mut c).await;
                let (sum1, count1) = batch_counts();
                (mean, p99, n, rps, (sum1 - sum0) / (count1 - count0).max(1.0))
            })
        });
        let (mean, p99, n, rps, factor) =
            tokio::task::spawn_blocking(move || client.join().unwrap()).await.unwrap();
        println!(
            "{name:30} qd1: mean {mean:7.1} us  p99 {p99:7.1} us  ({n} requests)   \
             qd32: {rps:9.0} getpage/s  batching factor {factor:5.1}"
        );
        if name != "serial" {
            assert!(factor > 1.0, "{name}: no batching at queue depth 32");
        }
    }
    env.stop().await;
}
