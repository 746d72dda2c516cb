//! `pagebench`: load generator for the page service, in the spirit of Neon's
//! tool of the same name. One subcommand, `get-page-latest-lsn`, drives
//! GetPage requests over the pagestream protocol and reports throughput and
//! latency percentiles as JSON on stdout (progress goes to stderr).

mod client;
mod get_page_latest_lsn;
mod keyspace;
mod mgmt_api;
mod pagestream_conn;
mod stats;

use clap::Parser;

#[derive(Parser)]
#[command(name = "pagebench", about = "Load generator for the pageserver page service")]
enum Command {
    /// Random GetPage requests over the relation blocks of the targets.
    GetPageLatestLsn(get_page_latest_lsn::Args),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match Command::parse() {
        Command::GetPageLatestLsn(args) => get_page_latest_lsn::main(args),
    }
}
