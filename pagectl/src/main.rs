//! `pagectl`: the operator's tool for a pageserver.
//!
//! - `restore`: a data directory as of an LSN or a moment, from the
//!   daemon's HTTP `fullbackup` (`restore/`);
//! - `layer info|verify`, `timeline verify`: offline checks of files on
//!   disk, with the daemon's own reader and start-up checks (`local.rs`);
//! - `tenant ...`, `timeline ...`: thin wrappers over the HTTP API (`api.rs`).
//!
//! Exit codes (also in `--help`): 0 success, 1 error, 2 usage (clap's),
//! 3 a check found damage. Every failure prints one line on stderr naming
//! what was wrong, each cause once.

mod api;
mod client;
mod local;
mod restore;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A check found a damaged file (`layer verify`, `timeline verify`).
pub const EXIT_DAMAGE: u8 = 3;

const EXIT_CODES: &str = "Exit codes:
  0  success
  1  error (the server refused or failed, a file could not be read or written, ...)
  2  usage error (unknown option, missing or conflicting arguments)
  3  verification found damage (layer verify, timeline verify)";

#[derive(Parser)]
#[command(
    name = "pagectl",
    version,
    about = "Operate a pageserver: restore a data directory at any LSN or moment, check layer \
             files and timelines on disk, manage tenants and timelines",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a PostgreSQL data directory as of an LSN, a moment or the latest
    /// state, from the pageserver's fullbackup (an unmodified PostgreSQL of the
    /// timeline's major starts on it without recovery).
    #[command(after_help = restore::AFTER_HELP)]
    Restore(restore::RestoreArgs),
    /// Inspect or check one layer file (offline, read only).
    #[command(subcommand, after_help = EXIT_CODES)]
    Layer(local::LayerCommand),
    /// Tenants of a running pageserver (HTTP API).
    #[command(subcommand, after_help = EXIT_CODES)]
    Tenant(api::TenantCommand),
    /// Timelines: list, create, follow a primary, delete (HTTP API), or check
    /// one on disk (verify).
    #[command(subcommand, after_help = EXIT_CODES)]
    Timeline(api::TimelineCommand),
}

/// How a command failed; each maps to one exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A check found damage (exit 3).
    #[error("{0}")]
    Damage(String),
    /// Anything else (exit 1).
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

fn main() -> ExitCode {
    let cli = Cli::parse(); // usage errors exit 2 here
    let result = match cli.command {
        Command::Restore(args) => restore::run(args),
        Command::Layer(cmd) => local::run_layer(cmd),
        Command::Tenant(cmd) => api::run_tenant(cmd),
        Command::Timeline(cmd) => api::run_timeline(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Damage(msg)) => {
            eprintln!("pagectl: damage found: {msg}");
            ExitCode::from(EXIT_DAMAGE)
        }
        Err(CliError::Failed(e)) => {
            eprintln!("pagectl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
