//! `pagectl restore`: a PostgreSQL data directory as of an LSN, a moment
//! or the latest state, from the daemon's HTTP `fullbackup`.
//!
//! Steps: check the target directories (empty or absent), resolve the LSN
//! (`--latest` pins the timeline's `last_record_lsn` first, `--time` asks
//! `get_lsn_by_timestamp`), estimate the size for the ETA (the keyspace),
//! mark the data directory incomplete, stream and extract the archive
//! (`extract.rs`), add a `postgresql.conf` if the archive has none, make
//! everything durable, then put `pg_control` in place and remove the mark.
//!
//! An interrupted or failed restore leaves the data directory **marked
//! incomplete, not removed**: it holds `pagectl_restore_incomplete` and no
//! `global/pg_control` (so no PostgreSQL starts on it), and a new restore
//! into it is refused until it is removed. Nothing is deleted on the
//! operator's behalf.

mod durable;
mod extract;
mod progress;

use std::collections::BTreeMap;
use std::io::BufReader;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::{ArgGroup, Args};
use serde::Deserialize;
use serde_json::Value;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::client::{Api, Conn};
use crate::CliError;
use extract::INCOMPLETE_MARKER;
use progress::Progress;

/// Buffer between the HTTP body and the tar reader.
const STREAM_BUFFER_BYTES: usize = 1 << 20;
/// Bytes a key of the keyspace stands for in the size estimate (a page).
const BYTES_PER_KEY: u64 = 8192;

pub const AFTER_HELP: &str = "\
--time takes an RFC 3339 moment (2026-11-28T14:05:00Z) and restores the state as of the \
last commit at or before it (the daemon's get_lsn_by_timestamp, kind \"present\"). A moment \
before the earliest commit the timeline records (\"past\") is refused rather than restored \
as the earliest state: the timeline does not know the database as of that moment; the \
message names the earliest LSN for --lsn. A moment after the latest commit ingested \
(\"future\") and a timeline without commit times (\"nodata\") are refused too.

An interrupted or failed restore leaves PGDATA marked incomplete (the file \
pagectl_restore_incomplete, and no global/pg_control, so PostgreSQL does not start on it); \
remove PGDATA and the mapped tablespace directories before restoring again.

Progress (bytes, pages, rate, ETA) goes to stderr: redrawn on a terminal, a line every 10 s \
otherwise.

Exit codes: 0 done (PGDATA is complete and durable), 1 error, 2 usage error.";

#[derive(Args)]
#[command(group(ArgGroup::new("target").required(true).args(["lsn", "time", "latest"])))]
pub struct RestoreArgs {
    #[command(flatten)]
    conn: Conn,
    /// The tenant (32 hex digits).
    #[arg(long)]
    tenant: TenantId,
    /// The timeline to restore (32 hex digits).
    #[arg(long)]
    timeline: TimelineId,
    /// Restore as of this LSN (X/X, hex).
    #[arg(long)]
    lsn: Option<Lsn>,
    /// Restore as of this moment (RFC 3339, e.g. 2026-11-28T14:05:00Z).
    #[arg(long)]
    time: Option<String>,
    /// Restore the latest state the timeline has ingested.
    #[arg(long)]
    latest: bool,
    /// The data directory to write: absent or empty.
    #[arg(long)]
    pgdata: PathBuf,
    /// Put tablespace OID's files in DIR (absent or empty), with
    /// `pg_tblspc/<OID>` a symlink to it; repeat for each. Unmapped
    /// tablespaces stay in place under `pg_tblspc/<OID>`.
    #[arg(long = "tablespace-map", value_name = "OID=DIR", value_parser = parse_map)]
    tablespace_map: Vec<(u32, PathBuf)>,
    /// `port` written to the new postgresql.conf (the archive has none).
    #[arg(long)]
    port: Option<u16>,
    /// Where PostgreSQL's programs of the timeline's major are, for the
    /// printed start command (default: looked for in the usual places).
    #[arg(long)]
    pg_bin_dir: Option<PathBuf>,
}

fn parse_map(s: &str) -> Result<(u32, PathBuf), String> {
    let (oid, dir) = s.split_once('=').ok_or_else(|| format!("'{s}' is not OID=DIR"))?;
    let oid = oid.parse().map_err(|_| format!("tablespace OID '{oid}' is not a number"))?;
    if dir.is_empty() {
        return Err(format!("tablespace {oid}: empty directory"));
    }
    Ok((oid, PathBuf::from(dir)))
}

pub fn run(args: RestoreArgs) -> Result<(), CliError> {
    let pgdata = absolute(&args.pgdata)?;
    refuse_non_empty(&pgdata, "the data directory")?;
    let mut map = BTreeMap::new();
    for (oid, dir) in &args.tablespace_map {
        let dir = absolute(dir)?;
        refuse_non_empty(&dir, &format!("the directory of tablespace {oid}"))?;
        if dir.starts_with(&pgdata) {
            return Err(anyhow!(
                "tablespace {oid}: {} is inside the data directory",
                dir.display()
            )
            .into());
        }
        if map.insert(*oid, dir).is_some() {
            return Err(anyhow!("tablespace {oid} is mapped twice").into());
        }
    }
    let api = Api::new(&args.conn)?;
    let tl_path = format!("/v1/tenant/{}/timeline/{}", args.tenant, args.timeline);
    let detail = api.get(&tl_path)?;
    let major = detail.get("pg_version").and_then(Value::as_u64).unwrap_or_default();
    let lsn = resolve_lsn(&api, &tl_path, &args, &detail)?;
    let total = estimate_bytes(&api, &tl_path, lsn);
    eprintln!(
        "restoring {}/{} at {lsn} (PostgreSQL {major}) into {}",
        args.tenant,
        args.timeline,
        pgdata.display()
    );
    restore_into(&api, &tl_path, lsn, &pgdata, &map, total, args.port).map_err(|e| {
        anyhow!(
            "{e:#}\n{} is incomplete (marked by {INCOMPLETE_MARKER}, no global/pg_control): \
             remove it{} before restoring again",
            pgdata.display(),
            if map.is_empty() { "" } else { " and the mapped tablespace directories" }
        )
    })?;
    println!("restored {}/{} at {lsn} into {}", args.tenant, args.timeline, pgdata.display());
    println!("start it with: {}", start_command(major, args.pg_bin_dir.as_deref(), &pgdata));
    Ok(())
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("{}", p.display()))
}

fn refuse_non_empty(dir: &Path, what: &str) -> anyhow::Result<()> {
    let mut entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("{what} {}", dir.display())),
    };
    if entries.next().is_none() {
        return Ok(());
    }
    if dir.join(INCOMPLETE_MARKER).exists() {
        bail!("{what} {} holds an incomplete restore: remove it and restore again", dir.display());
    }
    bail!("{what} {} is not empty: restore into an empty or new directory", dir.display())
}

/// The answer of `get_lsn_by_timestamp` (Neon's shape).
#[derive(Deserialize)]
struct LsnByTimestamp {
    lsn: Lsn,
    kind: String,
}

fn resolve_lsn(
    api: &Api,
    tl_path: &str,
    args: &RestoreArgs,
    detail: &Value,
) -> anyhow::Result<Lsn> {
    if let Some(lsn) = args.lsn {
        return Ok(lsn);
    }
    let Some(time) = &args.time else {
        let lsn = detail
            .get("last_record_lsn")
            .cloned()
            .context("no last_record_lsn in the timeline detail")?;
        return serde_json::from_value(lsn).context("last_record_lsn of the timeline detail");
    };
    let query: String = time.replace('%', "%25").replace('+', "%2B").replace(' ', "%20");
    let path = format!("{tl_path}/get_lsn_by_timestamp?timestamp={query}");
    let answer = api.get(&path).with_context(|| format!("the LSN of --time {time}"))?;
    let found: LsnByTimestamp = crate::client::decode(answer, "get_lsn_by_timestamp")?;
    match found.kind.as_str() {
        "present" => Ok(found.lsn),
        "past" => bail!(
            "--time {time} is before the earliest commit the timeline records (kind \"past\"): it \
             does not hold the database as of then; its earliest state is at {}: restore \
             --lsn {} for that",
            found.lsn,
            found.lsn
        ),
        "future" => bail!(
            "--time {time} is after the latest commit the timeline has ingested (kind \"future\", \
             at {}): use --latest, or wait until the timeline catches up",
            found.lsn
        ),
        "nodata" => {
            bail!("the timeline records no commit times (kind \"nodata\"): give --lsn or --latest")
        }
        other => bail!("get_lsn_by_timestamp answered an unknown kind \"{other}\""),
    }
}

/// The archive's size, roughly: a page per key of the keyspace at `lsn`.
/// `None` (no ETA) if the daemon does not say.
fn estimate_bytes(api: &Api, tl_path: &str, lsn: Lsn) -> Option<u64> {
    let answer = api.get(&format!("{tl_path}/keyspace?at_lsn={lsn}")).ok()?;
    let ranges = answer.get("keys")?.as_array()?;
    let mut keys = 0u64;
    for r in ranges {
        let (start, end) = (r.get(0)?.as_str()?, r.get(1)?.as_str()?);
        keys += key_count(start, end);
    }
    Some(keys * BYTES_PER_KEY)
}

/// Keys in `start..end` (36 hex digits each) when they differ only in the
/// last field (a relation's blocks, an SLRU's segments); else 1.
fn key_count(start: &str, end: &str) -> u64 {
    if start.len() != 36 || end.len() != 36 || start[..28] != end[..28] {
        return 1;
    }
    let field = |k: &str| u64::from_str_radix(&k[28..], 16).unwrap_or(0);
    field(end).saturating_sub(field(start)).max(1)
}

fn restore_into(
    api: &Api,
    tl_path: &str,
    lsn: Lsn,
    pgdata: &Path,
    map: &BTreeMap<u32, PathBuf>,
    total: Option<u64>,
    port: Option<u16>,
) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(pgdata)
        .with_context(|| format!("create {}", pgdata.display()))?;
    let marker = format!("pagectl restore of {tl_path} at {lsn} did not finish\n");
    std::fs::write(pgdata.join(INCOMPLETE_MARKER), marker)
        .with_context(|| format!("write {}", pgdata.join(INCOMPLETE_MARKER).display()))?;
    extract::fsync_dir(pgdata)?;
    let body = api.get_stream(&format!("{tl_path}/fullbackup?lsn={lsn}"))?;
    let mut progress = Progress::new(total);
    let reader = BufReader::with_capacity(STREAM_BUFFER_BYTES, body);
    let mut out =
        extract::extract(reader, pgdata, map, &mut progress).context("the fullbackup stream")?;
    progress.finish();
    if let Some(oid) = map.keys().find(|oid| !out.tablespaces.contains(oid)) {
        bail!("--tablespace-map names tablespace {oid}, which the backup at {lsn} does not have");
    }
    if !out.has_postgresql_conf {
        let mut conf = String::from(
            "# Written by pagectl restore (the backup holds no postgresql.conf): add your settings.\n",
        );
        if let Some(port) = port {
            conf.push_str(&format!("port = {port}\n"));
        }
        out.add_file("postgresql.conf", &conf)?;
    }
    let mut parents: Vec<PathBuf> =
        map.values().filter_map(|d| d.parent().map(Path::to_path_buf)).collect();
    parents.extend(pgdata.parent().map(Path::to_path_buf));
    out.seal(&parents)
}

/// `pg_ctl -D DIR start`, with PostgreSQL `major`'s bin directory when known.
fn start_command(major: u64, bin_dir: Option<&Path>, pgdata: &Path) -> String {
    let known = [
        format!("/usr/lib/postgresql/{major}/bin"),
        format!("/usr/pgsql-{major}/bin"),
        format!("/usr/local/pgsql-{major}/bin"),
    ];
    let bin = bin_dir
        .map(Path::to_path_buf)
        .or_else(|| known.iter().map(PathBuf::from).find(|d| d.join("pg_ctl").exists()));
    let (pg_ctl, note) = match bin {
        Some(dir) => (quote(&dir.join("pg_ctl").to_string_lossy()), String::new()),
        None => ("pg_ctl".to_string(), format!("  # PostgreSQL {major}'s pg_ctl")),
    };
    format!("{pg_ctl} -D {} start{note}", quote(&pgdata.to_string_lossy()))
}

/// A shell word: as is when safe, else single-quoted.
fn quote(s: &str) -> String {
    let safe = s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c));
    if safe && !s.is_empty() {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
