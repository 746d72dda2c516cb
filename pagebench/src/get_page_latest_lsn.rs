//! `pagebench get-page-latest-lsn`: resolves targets and keyspaces through the
//! management API, runs `--num-clients` connections per timeline for
//! `--runtime`, prints a progress line per second on stderr and the JSON
//! report on stdout.
//!
//! Shutdown contract: when the runtime is over (or on Ctrl-C) the shared
//! cancellation token fires; every connection stops issuing requests, drains
//! the responses still in flight (bounded by `DRAIN_TIMEOUT`), sends Terminate
//! and returns its statistics. The report is printed only after every
//! connection has returned, so each request is counted exactly once.

use std::num::NonZeroUsize;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pq_proto::ConnString;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::client::{run_client, ClientParams};
use crate::keyspace::RelBlockSpace;
use crate::mgmt_api::MgmtApiClient;
use crate::pagestream_conn::Protocol;
use crate::stats::{progress_line, LiveCounters, Report, RequestStats};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Base URL of the management API.
    #[arg(long, default_value = "http://127.0.0.1:9898")]
    mgmt_api_endpoint: String,
    /// JWT for the management API (`http_auth_type = "jwt"`): scope
    /// `pageserverapi` to list the tenants, or a tenant's token with targets.
    #[arg(long)]
    pageserver_jwt: Option<String>,
    /// libpq URL of the page service (a password is sent as the JWT if asked).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:64000")]
    page_service_connstring: String,
    /// Connections per target timeline.
    #[arg(long, default_value = "1")]
    num_clients: NonZeroUsize,
    /// Requests kept in flight on each connection.
    #[arg(long, default_value = "1")]
    queue_depth: NonZeroUsize,
    /// How long to run (e.g. "10s", "1m"); without it, until Ctrl-C.
    #[arg(long)]
    runtime: Option<humantime::Duration>,
    /// Requests per second per connection (default: as fast as possible).
    #[arg(long)]
    per_client_rate: Option<f64>,
    /// Probability that a request asks for the latest LSN (Lsn::MAX) rather
    /// than the keyspace's LSN; not_modified_since is always the keyspace's LSN.
    #[arg(long, default_value = "1.0")]
    req_latest_probability: f64,
    /// Pagestream protocol version.
    #[arg(long, value_enum, default_value = "v3")]
    protocol: Protocol,
    /// Seed of the per-connection random generators (default: random).
    #[arg(long)]
    seed: Option<u64>,
    /// Tokio worker threads (default: min(connections, CPUs)).
    #[arg(long)]
    worker_threads: Option<NonZeroUsize>,
    /// `tenant_id/timeline_id` targets; default: every timeline of every tenant.
    targets: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Target {
    tenant: TenantId,
    timeline: TimelineId,
}

impl FromStr for Target {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Target> {
        let (t, tl) =
            s.split_once('/').with_context(|| format!("target '{s}' is not tenant/timeline"))?;
        Ok(Target {
            tenant: t.parse().with_context(|| format!("bad tenant id in '{s}'"))?,
            timeline: tl.parse().with_context(|| format!("bad timeline id in '{s}'"))?,
        })
    }
}

pub fn main(args: Args) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&args.req_latest_probability) {
        bail!("--req-latest-probability must be within [0, 1]");
    }
    if let Some(rate) = args.per_client_rate {
        if !(rate > 0.0 && rate.is_finite()) {
            bail!("--per-client-rate must be a positive number");
        }
    }
    let mut cs = ConnString::parse(&args.page_service_connstring)?;
    cs.application_name.get_or_insert_with(|| "pagebench".to_string());
    let targets =
        args.targets.iter().map(|s| s.parse::<Target>()).collect::<anyhow::Result<Vec<_>>>()?;

    // Resolving targets is a handful of HTTP calls: a small runtime of its own.
    let setup_rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let work = setup_rt.block_on(resolve_work(&args, targets))?;
    drop(setup_rt);

    let connections = work.len() * args.num_clients.get();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = args.worker_threads.map(|n| n.get()).unwrap_or_else(|| connections.min(cpus));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    let report = rt.block_on(run(&args, cs, work))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

struct TimelineWork {
    target: Target,
    at_lsn: Lsn,
    space: Arc<RelBlockSpace>,
}

async fn resolve_work(args: &Args, mut targets: Vec<Target>) -> anyhow::Result<Vec<TimelineWork>> {
    let api = MgmtApiClient::new(&args.mgmt_api_endpoint, args.pageserver_jwt.as_deref())?;
    if targets.is_empty() {
        for tenant in api.list_tenants().await? {
            for timeline in api.list_timelines(tenant).await? {
                targets.push(Target { tenant, timeline });
            }
        }
        if targets.is_empty() {
            bail!("the pageserver at {} has no timelines", args.mgmt_api_endpoint);
        }
    }
    let mut work = Vec::new();
    for target in targets {
        let ks = api.keyspace(target.tenant, target.timeline).await?;
        let space = RelBlockSpace::from_key_ranges(&ks.keys)
            .with_context(|| format!("keyspace of {}/{}", target.tenant, target.timeline))?;
        if space.is_empty() {
            warn!("{}/{} has no relation blocks; skipped", target.tenant, target.timeline);
            continue;
        }
        info!(
            "{}/{}: {} relation blocks in {} spans at {}",
            target.tenant,
            target.timeline,
            space.total_blocks(),
            space.spans().len(),
            ks.at_lsn
        );
        work.push(TimelineWork { target, at_lsn: ks.at_lsn, space: Arc::new(space) });
    }
    if work.is_empty() {
        bail!("no target has any relation block to request");
    }
    Ok(work)
}

async fn run(args: &Args, cs: ConnString, work: Vec<TimelineWork>) -> anyhow::Result<Report> {
    let cancel = CancellationToken::new();
    let live = Arc::new(LiveCounters::default());
    let cs = Arc::new(cs);
    let base_seed = args.seed.unwrap_or_else(rand::random);
    info!("seed {base_seed}");

    let start = Instant::now();
    let mut handles = Vec::new();
    for (i, w) in work.iter().enumerate() {
        for c in 0..args.num_clients.get() {
            let params = ClientParams {
                connstring: Arc::clone(&cs),
                tenant: w.target.tenant,
                timeline: w.target.timeline,
                protocol: args.protocol,
                queue_depth: args.queue_depth.get(),
                per_client_rate: args.per_client_rate,
                req_latest_probability: args.req_latest_probability,
                at_lsn: w.at_lsn,
                space: Arc::clone(&w.space),
                seed: base_seed.wrapping_add((i * args.num_clients.get() + c) as u64),
            };
            handles.push(tokio::spawn(run_client(params, cancel.clone(), Arc::clone(&live))));
        }
    }

    let progress = tokio::spawn(report_progress(Arc::clone(&live), cancel.clone()));
    let deadline = args.runtime.map(|d| start + *d);
    tokio::select! {
        _ = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        } => {}
        res = tokio::signal::ctrl_c() => {
            res.context("wait for Ctrl-C")?;
            info!("interrupted");
        }
    }
    cancel.cancel();

    let mut total = RequestStats::default();
    for h in handles {
        let stats = h.await.context("client task panicked")?;
        total.merge(&stats);
    }
    let elapsed = start.elapsed();
    let _ = progress.await;
    Ok(Report::new(&total, elapsed))
}

async fn report_progress(live: Arc<LiveCounters>, cancel: CancellationToken) {
    let mut prev = live.snapshot();
    let mut prev_at = Instant::now();
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = cancel.cancelled() => return,
        }
        let now = live.snapshot();
        let at = Instant::now();
        eprintln!("{}", progress_line(prev, now, at - prev_at));
        prev = now;
        prev_at = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let t = TenantId::generate();
        let tl = TimelineId::generate();
        let target: Target = format!("{t}/{tl}").parse().unwrap();
        assert_eq!(target, Target { tenant: t, timeline: tl });
        assert!("abc".parse::<Target>().is_err());
        assert!(format!("{t}/xyz").parse::<Target>().is_err());
    }

    #[test]
    fn cli_defaults_match_neon() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.args.mgmt_api_endpoint, "http://127.0.0.1:9898");
        assert_eq!(cli.args.page_service_connstring, "postgres://postgres@127.0.0.1:64000");
        assert_eq!(cli.args.num_clients.get(), 1);
        assert_eq!(cli.args.queue_depth.get(), 1);
        assert_eq!(cli.args.protocol, Protocol::V3);
        let cli = Cli::try_parse_from(["x", "--runtime", "5s", "--protocol", "v2"]).unwrap();
        assert_eq!(*cli.args.runtime.unwrap(), Duration::from_secs(5));
        assert_eq!(cli.args.protocol, Protocol::V2);
    }
}
