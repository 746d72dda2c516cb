//! The `pageserver` binary: start-up, the two listeners, graceful shutdown.
//!
//! `pageserver --workdir DIR [--config FILE] [-c key=value ...]`
//!
//! Start-up order: parse the command line, create and lock DIR (one daemon
//! per workdir), raise the open-file limit to its hard limit, load and
//! validate the config (an error names the key and
//! exits 1 before anything else happens), set up logging, register metrics,
//! bind both listeners, load the tenants, start the WAL receivers and
//! eviction (if configured), then serve. "pageserver started"
//! is logged once both listeners accept connections.
//!
//! Shutdown (SIGINT or SIGTERM), every stage bounded by `shutdown_timeout`
//! and logged with what it waits for:
//! 1. cancel the root token: the page service and the HTTP server stop
//!    accepting; page service connections end, HTTP requests in flight finish;
//! 2. wait for the page service, then the HTTP server;
//! 3. stop the eviction task, then `TenantManager::shutdown()`: stop ingest,
//!    flush in-memory layers, wait for background tasks;
//! 4. exit 0. A second signal during shutdown exits 1 at once. If a service
//!    fails on its own, the daemon shuts down the same way and exits 1.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};

use pageserver::config::{LogFormat, PageServerConf};
use pageserver::http::{self, HttpState};
use pageserver::metrics;

/// jemalloc: freed memory is reused across threads and given back to the
/// system by its background threads within about a second (`MALLOC_CONF`),
/// so RSS follows live memory. With glibc's malloc, importing a base backup
/// of N bytes left the daemon at about N/2 of RSS until a restart (freed
/// chunks kept by per-thread arenas; docs/benchmarks.md, "Memory").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's `malloc_conf` (read at its initialisation; the crate's symbols
/// carry the `_rjem_` prefix). `_RJEM_MALLOC_CONF` in the environment
/// overrides it.
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000".as_ptr());

/// A C string pointer jemalloc reads (`const char *malloc_conf`).
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);
// SAFETY: it points at a static, immutable C string literal.
unsafe impl Sync for MallocConf {}
use pageserver::page_service;
use pageserver::tenant::mgr::TenantManager;

/// A pageserver: keeps every version of every page of PostgreSQL clusters and
/// serves GetPage@LSN over libpq.
#[derive(Parser, Debug)]
#[command(name = "pageserver", version)]
struct Args {
    /// Working directory: tenants and their layer files live here. Created if missing.
    #[arg(short = 'D', long)]
    workdir: PathBuf,
    /// TOML config file; without one, built-in defaults apply (see config/pageserver.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Override one config key, TOML value syntax: -c checkpoint_distance="64 MiB".
    /// Repeatable; applied after the config file, later ones win.
    #[arg(short = 'c', long = "config-override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Logging is configured by the config, so errors up to here go to stderr.
    let (conf, _lock) = match prepare(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("pageserver: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    init_logging(conf.log_format);
    #[cfg(feature = "testing")]
    if let Ok(spec) = std::env::var("FAILPOINTS") {
        if let Err(e) = utils::failpoint::configure_from_str(&spec) {
            error!("invalid FAILPOINTS environment variable: {e}");
            return ExitCode::FAILURE;
        }
        info!("failpoints configured from the environment: {spec}");
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pageserver-worker")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(Arc::new(conf)));
    // Tasks abandoned by a timed-out shutdown stage must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => {
            info!("pageserver stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!("pageserver failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Create and lock the workdir, load the config.
fn prepare(args: &Args) -> anyhow::Result<(PageServerConf, std::fs::File)> {
    std::fs::create_dir_all(&args.workdir)
        .with_context(|| format!("cannot create workdir {}", args.workdir.display()))?;
    let lock = lock_workdir(&args.workdir)?;
    // Before the config is validated: its descriptor budget is checked
    // against the limit in force.
    pageserver::config::fd_budget::raise_nofile_limit();
    let conf = PageServerConf::load(&args.workdir, args.config.as_deref(), &args.overrides)?;
    Ok((conf, lock))
}

/// Hold an exclusive `flock` on the workdir directory itself for the life
/// of the process, so two daemons never share a workdir. A lock file could
/// be deleted under a running daemon (a second one would then lock a new
/// file of the same name); the directory cannot be replaced while this
/// daemon's files are in it, and a second daemon given any path to it
/// (symlink, `..`) opens the same inode. The kernel drops the lock when the
/// process dies, however it dies.
fn lock_workdir(workdir: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(workdir)
        .with_context(|| format!("cannot open workdir {}", workdir.display()))?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        anyhow::bail!(
            "cannot lock workdir {}: {err} (is another pageserver running there?)",
            workdir.display()
        );
    }
    Ok(dir)
}

/// Logs go to stderr, plain text or JSON; `RUST_LOG` filters (default `info`).
fn init_logging(format: LogFormat) {
    let filter =
        EnvFilter::builder().with_default_directive(LevelFilter::INFO.into()).from_env_lossy();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().with_current_span(true).init(),
    }
}

async fn run(conf: Arc<PageServerConf>) -> anyhow::Result<()> {
    metrics::register_all(&http::route_list(), &pageserver::tenant::ReadKind::LABELS);
    info!(
        workdir = %conf.workdir.display(),
        io_engine = ?conf.io_engine_kind(),
        direct_io = conf.direct_io,
        page_service_pipelining = ?conf.page_service_pipelining,
        // The store's description only: credentials stay in the environment.
        remote_storage = conf.remote_storage.as_ref().map_or("none", |r| r.describe()),
        "starting pageserver"
    );

    if conf.direct_io {
        conf.io_engine.check_direct_io(&conf.workdir).await.context("direct_io = true")?;
    }

    let pg_listener = TcpListener::bind(&conf.listen_pg_addr)
        .await
        .with_context(|| format!("cannot listen on listen_pg_addr {}", conf.listen_pg_addr))?;
    let http_listener = TcpListener::bind(&conf.listen_http_addr)
        .await
        .with_context(|| format!("cannot listen on listen_http_addr {}", conf.listen_http_addr))?;
    let pg_addr = pg_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;

    // The tenants get their own token: they must outlive the services that use
    // them and are stopped by `TenantManager::shutdown()`, not by the root token.
    let tenants_cancel = CancellationToken::new();
    // Before any layer is loaded: the cache of layer index blocks.
    pageserver::tenant::storage_layer::block_cache::init(conf.layer_index_cache_size);
    let tenants = TenantManager::load(Arc::new(conf.storage_conf()), tenants_cancel.clone())
        .await
        .context("cannot load tenants")?;

    // Disk-usage-based eviction (only with remote storage; off unless
    // configured). Stopped before the tenants shut down.
    let eviction_cancel = tenants_cancel.child_token();
    let eviction = pageserver::tenant::eviction::spawn_eviction_loop(
        tenants.clone(),
        conf.eviction.clone(),
        conf.workdir.clone(),
        eviction_cancel.clone(),
    );

    let walreceiver_conf = Arc::new(conf.walreceiver.clone());
    pageserver::walreceiver::start_all(&tenants, &walreceiver_conf);
    // Tenants whose load waits for remote storage start theirs once Active.
    let on_active_conf = walreceiver_conf.clone();
    tenants.start_activation(Box::new(move |tenant| {
        for tl in tenant.list_timelines() {
            if let Some(source) = tl.wal_source() {
                pageserver::walreceiver::start(tenant, &tl, source, on_active_conf.clone());
            }
        }
    }));

    let root = CancellationToken::new();
    let page_service_conf = Arc::new(conf.page_service_conf());
    let mut page_service: Option<JoinHandle<_>> =
        Some(tokio::spawn(page_service::page_service_main(
            page_service_conf,
            tenants.clone(),
            pg_listener,
            root.child_token(),
        )));
    let mut http_state = HttpState::new(tenants.clone(), root.child_token(), &conf.http);
    http_state.walreceiver = walreceiver_conf;
    let mut http_server: Option<JoinHandle<_>> =
        Some(tokio::spawn(http::serve(http_listener, http_state, conf.http.clone())));
    info!(listen_pg_addr = %pg_addr, listen_http_addr = %http_addr, "pageserver started");

    let mut sigint = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    // Which service ended on its own, if any (it must not be awaited again).
    let (failure, ps_done, http_done) = tokio::select! {
        _ = sigint.recv() => { info!("received SIGINT, shutting down"); (None, false, false) }
        _ = sigterm.recv() => { info!("received SIGTERM, shutting down"); (None, false, false) }
        r = page_service.as_mut().expect("running") => {
            (Some(format!("page service stopped on its own: {}", describe_exit(r))), true, false)
        }
        r = http_server.as_mut().expect("running") => {
            (Some(format!("HTTP server stopped on its own: {}", describe_exit(r))), false, true)
        }
    };
    if ps_done {
        page_service = None;
    }
    if http_done {
        http_server = None;
    }
    if let Some(f) = &failure {
        error!("{f}; shutting down");
    }

    // A second signal means "now": skip the remaining bounded waits.
    tokio::spawn(async move {
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
        }
        warn!("second signal during shutdown, exiting immediately");
        std::process::exit(1);
    });

    root.cancel();
    let limit = conf.shutdown_timeout;
    if let Some(h) = page_service {
        wait_bounded("page service connections to close", h, limit).await;
    }
    if let Some(h) = http_server {
        wait_bounded("HTTP requests in flight to finish", h, limit).await;
    }
    eviction_cancel.cancel();
    if let Some(h) = eviction {
        wait_bounded("the eviction task to stop", h, limit).await;
    }
    let n = tenants.list_tenants().len();
    info!("waiting for {n} tenants to shut down (stop ingest, flush in-memory layers)");
    let start = Instant::now();
    match tokio::time::timeout(limit, tenants.shutdown()).await {
        Ok(()) => info!("tenants shut down in {:.3} s", start.elapsed().as_secs_f64()),
        Err(_) => warn!("tenants did not shut down within {limit:?}; exiting without waiting"),
    }
    tenants_cancel.cancel();

    match failure {
        Some(f) => Err(anyhow::anyhow!(f)),
        None => Ok(()),
    }
}

fn describe_exit<T: std::fmt::Debug>(r: Result<T, tokio::task::JoinError>) -> String {
    match r {
        Ok(v) => format!("returned {v:?}"),
        Err(e) => format!("task failed: {e}"),
    }
}

/// Wait up to `limit` for a service task; log what was waited for and how long.
async fn wait_bounded<T: std::fmt::Debug>(what: &str, handle: JoinHandle<T>, limit: Duration) {
    info!("waiting for {what}");
    let start = Instant::now();
    let abort = handle.abort_handle();
    match tokio::time::timeout(limit, handle).await {
        Ok(r) => info!(
            "done waiting for {what} after {:.3} s ({})",
            start.elapsed().as_secs_f64(),
            describe_exit(r)
        ),
        Err(_) => {
            warn!("{what}: still busy after {limit:?}; abandoning");
            abort.abort();
        }
    }
}
