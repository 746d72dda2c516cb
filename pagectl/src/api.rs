//! `pagectl tenant ...` and `pagectl timeline ...`: thin wrappers over the
//! HTTP API, one request each. Tables for people; `--json` prints the
//! daemon's answer as it is (pretty), for scripts. `timeline verify` is the
//! exception: an offline check of the files (`local.rs`).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use pageserver_api::models::{TenantInfo, TimelineInfo, TimelineState};
use reqwest::Method;
use serde_json::{json, Value};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::client::{decode, Api, Conn};
use crate::CliError;

#[derive(Args)]
pub struct Output {
    /// Print the daemon's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum TenantCommand {
    /// List the tenants (id, state, generation, bytes of layer files).
    List {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        out: Output,
    },
    /// Create a tenant; prints its id.
    Create {
        #[command(flatten)]
        conn: Conn,
        /// The new tenant's id (32 hex digits); random when absent.
        #[arg(long)]
        id: Option<TenantId>,
        #[command(flatten)]
        out: Output,
    },
    /// Delete a tenant and every timeline of it (and their replication slots).
    Delete {
        #[command(flatten)]
        conn: Conn,
        tenant: TenantId,
        #[command(flatten)]
        out: Output,
    },
}

#[derive(Subcommand)]
pub enum TimelineCommand {
    /// List a tenant's timelines (id, state, major, LSNs, WAL source).
    List {
        #[command(flatten)]
        conn: Conn,
        #[arg(long)]
        tenant: TenantId,
        #[command(flatten)]
        out: Output,
    },
    /// Create an empty timeline (to import a base backup into).
    Create {
        #[command(flatten)]
        conn: Conn,
        #[arg(long)]
        tenant: TenantId,
        /// The new timeline's id; random when absent.
        #[arg(long)]
        id: Option<TimelineId>,
        /// PostgreSQL major of the timeline.
        #[arg(long)]
        pg_version: Option<u32>,
        /// The timeline starts (empty) at this LSN.
        #[arg(long)]
        initial_lsn: Option<Lsn>,
        #[command(flatten)]
        out: Output,
    },
    /// Create a timeline that follows a running primary: the daemon creates a
    /// replication slot, takes a base backup and streams WAL from then on.
    Follow {
        #[command(flatten)]
        conn: Conn,
        #[arg(long)]
        tenant: TenantId,
        /// The primary, e.g. `postgres://user:pw@host:5432/postgres`.
        #[arg(long)]
        connstring: String,
        /// The replication slot to create (default `pageserver_<timeline>`).
        #[arg(long)]
        slot: Option<String>,
        /// The new timeline's id; random when absent.
        #[arg(long)]
        id: Option<TimelineId>,
        #[command(flatten)]
        out: Output,
    },
    /// Delete a timeline (a followed primary's slot is dropped).
    Delete {
        #[command(flatten)]
        conn: Conn,
        #[arg(long)]
        tenant: TenantId,
        #[arg(long)]
        timeline: TimelineId,
        #[command(flatten)]
        out: Output,
    },
    /// Check a timeline on disk as start-up would (offline, read only: run it
    /// on a copy, or with the daemon stopped): the manifest, then every listed
    /// layer file present, of the listed size, and loadable. Exit 3 on damage,
    /// with start-up's error.
    Verify {
        /// The daemon's working directory (holds `tenants/`).
        #[arg(long)]
        workdir: PathBuf,
        #[arg(long)]
        tenant: TenantId,
        #[arg(long)]
        timeline: TimelineId,
    },
}

pub fn run_tenant(cmd: TenantCommand) -> Result<(), CliError> {
    match cmd {
        TenantCommand::List { conn, out } => {
            let answer = Api::new(&conn)?.get("/v1/tenant")?;
            print_or(out, &answer, || tenant_table(&answer))
        }
        TenantCommand::Create { conn, id, out } => {
            let body = json!({ "new_tenant_id": id });
            let answer = Api::new(&conn)?.json(Method::POST, "/v1/tenant", Some(&body))?;
            print_or(out, &answer, || Ok(format!("{}\n", field(&answer, "id")?)))
        }
        TenantCommand::Delete { conn, tenant, out } => {
            let answer =
                Api::new(&conn)?.json(Method::DELETE, &format!("/v1/tenant/{tenant}"), None)?;
            print_or(out, &answer, || Ok(format!("deleted tenant {tenant}\n{}", slots(&answer))))
        }
    }
}

pub fn run_timeline(cmd: TimelineCommand) -> Result<(), CliError> {
    match cmd {
        TimelineCommand::List { conn, tenant, out } => {
            let answer = Api::new(&conn)?.get(&format!("/v1/tenant/{tenant}/timeline"))?;
            print_or(out, &answer, || timeline_table(&answer))
        }
        TimelineCommand::Create { conn, tenant, id, pg_version, initial_lsn, out } => {
            let body = json!({ "new_timeline_id": id, "pg_version": pg_version, "initial_lsn": initial_lsn });
            create_timeline(&conn, tenant, &body, out)
        }
        TimelineCommand::Follow { conn, tenant, connstring, slot, id, out } => {
            let source = json!({ "connstring": connstring, "slot": slot });
            let body = json!({ "new_timeline_id": id, "source": source });
            create_timeline(&conn, tenant, &body, out)
        }
        TimelineCommand::Delete { conn, tenant, timeline, out } => {
            let path = format!("/v1/tenant/{tenant}/timeline/{timeline}");
            let answer = Api::new(&conn)?.json(Method::DELETE, &path, None)?;
            let text = || Ok(format!("deleted timeline {tenant}/{timeline}\n{}", slots(&answer)));
            print_or(out, &answer, text)
        }
        TimelineCommand::Verify { workdir, tenant, timeline } => {
            crate::local::verify_timeline(&workdir, tenant, timeline)
        }
    }
}

fn create_timeline(
    conn: &Conn,
    tenant: TenantId,
    body: &Value,
    out: Output,
) -> Result<(), CliError> {
    // Absent options are left out: the daemon's defaults apply.
    let body: serde_json::Map<String, Value> = body
        .as_object()
        .expect("an object")
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let path = format!("/v1/tenant/{tenant}/timeline");
    let answer = Api::new(conn)?.json(Method::POST, &path, Some(&Value::Object(body)))?;
    print_or(out, &answer, || Ok(format!("{}\n", field(&answer, "timeline_id")?)))
}

fn print_or(
    out: Output,
    answer: &Value,
    text: impl FnOnce() -> anyhow::Result<String>,
) -> Result<(), CliError> {
    if out.json {
        let pretty = serde_json::to_string_pretty(answer).context("JSON output")?;
        println!("{pretty}");
    } else {
        print!("{}", text()?);
    }
    Ok(())
}

fn field(v: &Value, name: &str) -> anyhow::Result<String> {
    v.get(name)
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("the answer has no \"{name}\": {v}"))
}

/// The slots a delete released or left (`docs/http-api.md`), one line each.
fn slots(answer: &Value) -> String {
    let Some(slots) = answer.get("slots").and_then(Value::as_array) else { return String::new() };
    let mut text = String::new();
    for s in slots {
        let line = match (s.get("slot_dropped").and_then(Value::as_str), s.get("warning")) {
            (Some(slot), _) => format!("dropped replication slot {slot}"),
            (None, Some(Value::String(w))) => format!("warning: {w}"),
            _ => format!("slot: {s}"),
        };
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Rows as columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn tenant_table(answer: &Value) -> anyhow::Result<String> {
    let tenants: Vec<TenantInfo> = decode(answer.clone(), "GET /v1/tenant")?;
    let rows: Vec<Vec<String>> = tenants
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                t.state.slug.clone(),
                t.generation.map_or("-".into(), |g| g.to_string()),
                t.current_physical_size.map_or("-".into(), |b| b.to_string()),
            ]
        })
        .collect();
    Ok(table(&["TENANT", "STATE", "GENERATION", "LAYER BYTES"], &rows))
}

fn timeline_table(answer: &Value) -> anyhow::Result<String> {
    let timelines: Vec<TimelineInfo> = decode(answer.clone(), "GET .../timeline")?;
    let rows: Vec<Vec<String>> = timelines
        .iter()
        .map(|t| {
            let state = match &t.state {
                TimelineState::Active => "Active".to_string(),
                TimelineState::Broken { reason, .. } => format!("Broken: {reason}"),
            };
            let source = t.wal_source.as_ref().map_or("-".into(), |s| s.state.clone());
            vec![
                t.timeline_id.to_string(),
                state,
                t.pg_version.to_string(),
                t.last_record_lsn.to_string(),
                t.disk_consistent_lsn.to_string(),
                source,
            ]
        })
        .collect();
    let header =
        ["TIMELINE", "STATE", "PG", "LAST RECORD LSN", "DISK CONSISTENT LSN", "WAL SOURCE"];
    Ok(table(&header, &rows))
}
