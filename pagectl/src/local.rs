//! Offline checks of files on disk, with the daemon's own code: `layer
//! info`, `layer verify` (the layer reader: header, index blocks, every
//! value's CRC) and `timeline verify` (start-up's manifest checks).
//!
//! Read only: nothing is written, moved or removed (unlike start-up, which
//! removes unlisted files). A damaged file is `CliError::Damage` (exit 3)
//! naming the first bad offset; a file that cannot be read at all (missing,
//! no permission) is an ordinary error (exit 1).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use io_engine::{IoEngine, IoEngineKind};
use pageserver::tenant::storage_layer::layer_file::{HeaderInfo, LayerFile, LayerReadError};
use pageserver::tenant::storage_layer::BlobRef;
use pageserver::tenant::timeline::verify_dir;
use pageserver::tenant::value::Value;
use pageserver_api::key::Key;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::CliError;

/// Bytes of values `layer verify` reads at once (a leaf's worth, cut here).
const VERIFY_BATCH_BYTES: usize = 8 << 20;

#[derive(Subcommand)]
pub enum LayerCommand {
    /// Show a layer file's header, key and LSN ranges, and a summary of its
    /// index (entries, distinct keys, B-tree shape).
    Info {
        /// The layer file (named as the daemon names it).
        file: PathBuf,
        /// Print the same facts as one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Read every index block and every value of a layer file and check
    /// their CRCs. Exit 3 naming the first bad offset on damage.
    Verify {
        /// The layer file (named as the daemon names it).
        file: PathBuf,
    },
}

pub fn run_layer(cmd: LayerCommand) -> Result<(), CliError> {
    let rt = runtime()?;
    let engine = IoEngine::new(IoEngineKind::StdFs).context("IO engine")?;
    match cmd {
        LayerCommand::Info { file, json } => rt.block_on(layer_info(&engine, &file, json)),
        LayerCommand::Verify { file } => {
            let report = rt.block_on(layer_verify(&engine, &file))?;
            println!("{}: ok: {report}", file.display());
            Ok(())
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("tokio runtime")
}

/// The file must exist and be readable: else an ordinary error, not damage.
fn check_readable(path: &Path) -> anyhow::Result<()> {
    let md = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    anyhow::ensure!(md.is_file(), "{} is not a regular file", path.display());
    std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    Ok(())
}

/// Header, size and load (header against name, index root); damage names
/// its offset.
async fn open_checked(engine: &IoEngine, path: &Path) -> Result<(HeaderInfo, LayerFile), CliError> {
    check_readable(path)?;
    let damage = |offset: u64, what: String| {
        CliError::Damage(format!("{}: at offset {offset}: {what}", path.display()))
    };
    let (h, size) = LayerFile::read_header(engine, path)
        .await
        .map_err(|e| damage(0, format!("header: {:#}", e.root_cause())))?;
    if size != h.expected_file_size {
        let at = size.min(h.expected_file_size);
        let what = format!(
            "the file is {size} bytes, its header says {} (truncated or extended)",
            h.expected_file_size
        );
        return Err(damage(at, what));
    }
    let file =
        LayerFile::load(engine, path, h.tenant_id, h.timeline_id, false).await.map_err(|e| {
            match block_of(&e) {
                Some(block) => damage(h.index_block_offset(block), format!("{:#}", e.root_cause())),
                None => damage(h.index_offset, format!("{e:#}")),
            }
        })?;
    Ok((h, file))
}

fn block_of(e: &anyhow::Error) -> Option<u64> {
    e.chain().find_map(|c| match c.downcast_ref::<LayerReadError>() {
        Some(LayerReadError::CorruptBlock { block, .. }) => Some(*block),
        _ => None,
    })
}

/// Every index block, then every value in (key, LSN) order: the first
/// failure is the damage reported.
async fn layer_verify(engine: &IoEngine, path: &Path) -> Result<String, CliError> {
    let (h, file) = open_checked(engine, path).await?;
    let index_damage = |e: LayerReadError| match e {
        LayerReadError::CorruptBlock { block, reason, .. } => CliError::Damage(format!(
            "{}: at offset {}: index block {block}: {reason}",
            path.display(),
            h.index_block_offset(block)
        )),
        LayerReadError::Io { source, .. } => {
            CliError::Failed(anyhow::anyhow!("{}: reading the index: {source}", path.display()))
        }
    };
    file.verify_index().await.map_err(index_damage)?;
    let mut cursor = file.entry_cursor();
    let (mut values, mut bytes) = (0u64, 0u64);
    while let Some(leaf) = cursor.next_leaf().await.map_err(index_damage)? {
        let mut batch: Vec<(Key, Lsn, BlobRef)> = Vec::new();
        let mut batch_bytes = 0;
        for (key, lsn, blob) in leaf {
            batch.push((Key::from_compact(key), lsn, blob));
            batch_bytes += blob.len();
            if batch_bytes >= VERIFY_BATCH_BYTES {
                check_values(&file, &h, &batch).await?;
                (values, bytes) = (values + batch.len() as u64, bytes + batch_bytes as u64);
                (batch, batch_bytes) = (Vec::new(), 0);
            }
        }
        check_values(&file, &h, &batch).await?;
        (values, bytes) = (values + batch.len() as u64, bytes + batch_bytes as u64);
    }
    let blocks = h.tree.map_or(String::new(), |(_, _, b)| format!(", {b} index blocks"));
    Ok(format!("{values} values ({bytes} bytes) read, every CRC matches{blocks}"))
}

async fn check_values(
    file: &LayerFile,
    h: &HeaderInfo,
    batch: &[(Key, Lsn, BlobRef)],
) -> Result<(), CliError> {
    let blobs: Vec<BlobRef> = batch.iter().map(|e| e.2).collect();
    let raw = file
        .read_raw_values(&blobs)
        .await
        .map_err(|e| CliError::Failed(anyhow::anyhow!("reading values: {e}")))?;
    for ((key, lsn, blob), bytes) in batch.iter().zip(raw) {
        if let Err(e) = Value::deserialize_bytes(&bytes) {
            return Err(CliError::Damage(format!(
                "{}: at offset {}: the value of key {key} at {lsn} ({} bytes): {e}",
                file.path.display(),
                h.values_offset + blob.offset(),
                blob.len()
            )));
        }
    }
    Ok(())
}

async fn layer_info(engine: &IoEngine, path: &Path, json: bool) -> Result<(), CliError> {
    let (h, file) = open_checked(engine, path).await?;
    let s = summarize(&file).await?;
    if json {
        let v = layer_info_json(path, file.file_size, &h, &s);
        println!("{}", serde_json::to_string_pretty(&v).context("encode the JSON output")?);
        return Ok(());
    }
    println!("file            {} ({} bytes)", path.display(), file.file_size);
    println!("format version  {}", h.format_version);
    println!("kind            {:?}", h.kind);
    println!("tenant          {}", h.tenant_id);
    println!("timeline        {}", h.timeline_id);
    println!("keys            {}..{}", h.key_range.start, h.key_range.end);
    println!("LSNs            {}..{}", h.lsn_range.start, h.lsn_range.end);
    println!("values          offset {}, {} bytes", h.values_offset, h.values_len);
    let shape = match h.tree {
        Some((depth, leaves, blocks)) => {
            format!("B-tree of depth {depth}: {leaves} leaves, {blocks} blocks of 8 KiB")
        }
        None => "flat list (format 1 or 2)".to_string(),
    };
    println!("index           offset {}, {} bytes, {shape}", h.index_offset, h.index_bytes);
    println!("entries         {} ({} distinct keys, {} will_init)", h.entry_count, s.keys, s.inits);
    if let Some((first, last)) = s.first_last {
        println!("entry keys      {first} ..= {last}");
    }
    if let Some((lo, hi)) = s.lsns {
        println!("entry LSNs      {lo} ..= {hi}");
    }
    Ok(())
}

/// `layer info --json`: the same facts as the text output, keys and LSNs
/// as the text prints them (hex keys, `X/X` LSNs), sizes in bytes; ranges
/// are `{"start", "end"}` (end exclusive), entry ranges `{"first", "last"}`
/// (inclusive, `null` for a layer without entries).
fn layer_info_json(path: &Path, file_size: u64, h: &HeaderInfo, s: &Summary) -> serde_json::Value {
    let tree = h.tree.map(|(depth, leaves, blocks)| {
        serde_json::json!({"depth": depth, "leaves": leaves, "blocks": blocks, "block_bytes": 8192})
    });
    let kind = match h.kind {
        pageserver::tenant::storage_layer::LayerKind::Delta => "delta",
        pageserver::tenant::storage_layer::LayerKind::Image => "image",
    };
    serde_json::json!({
        "file": path.display().to_string(),
        "file_size_bytes": file_size,
        "format_version": h.format_version,
        "kind": kind,
        "tenant_id": h.tenant_id.to_string(),
        "timeline_id": h.timeline_id.to_string(),
        "key_range": {"start": h.key_range.start.to_string(), "end": h.key_range.end.to_string()},
        "lsn_range": {"start": h.lsn_range.start.to_string(), "end": h.lsn_range.end.to_string()},
        "values": {"offset": h.values_offset, "bytes": h.values_len},
        "index": {"offset": h.index_offset, "bytes": h.index_bytes, "btree": tree},
        "entries": h.entry_count,
        "distinct_keys": s.keys,
        "will_init": s.inits,
        "entry_keys": s.first_last.map(|(f, l)| serde_json::json!({"first": f.to_string(), "last": l.to_string()})),
        "entry_lsns": s.lsns.map(|(lo, hi)| serde_json::json!({"first": lo.to_string(), "last": hi.to_string()})),
    })
}

#[derive(Default)]
struct Summary {
    keys: u64,
    inits: u64,
    first_last: Option<(Key, Key)>,
    lsns: Option<(Lsn, Lsn)>,
}

async fn summarize(file: &LayerFile) -> Result<Summary, CliError> {
    let mut s = Summary::default();
    let mut cursor = file.entry_cursor();
    let mut prev = None;
    while let Some(leaf) = cursor.next_leaf().await.map_err(|e| CliError::Damage(e.to_string()))? {
        for (key, lsn, blob) in leaf {
            let key = Key::from_compact(key);
            if prev != Some(key) {
                s.keys += 1;
                prev = Some(key);
            }
            s.inits += blob.will_init() as u64;
            s.first_last = Some((s.first_last.map_or(key, |f| f.0), key));
            s.lsns = Some(s.lsns.map_or((lsn, lsn), |(lo, hi)| (lo.min(lsn), hi.max(lsn))));
        }
    }
    Ok(s)
}

/// `timeline verify`: start-up's checks, read only (`verify_dir`).
pub fn verify_timeline(
    workdir: &Path,
    tenant: TenantId,
    timeline: TimelineId,
) -> Result<(), CliError> {
    let dir = workdir
        .join("tenants")
        .join(tenant.to_string())
        .join("timelines")
        .join(timeline.to_string());
    let md =
        std::fs::metadata(&dir).with_context(|| format!("timeline directory {}", dir.display()))?;
    if !md.is_dir() {
        return Err(anyhow::anyhow!("{} is not a directory", dir.display()).into());
    }
    let engine = IoEngine::new(IoEngineKind::StdFs).context("IO engine")?;
    let report = runtime()?
        .block_on(verify_dir(&engine, &dir, (tenant, timeline)))
        .map_err(|e| CliError::Damage(format!("timeline {tenant}/{timeline}: {e:#}")))?;
    println!(
        "timeline {tenant}/{timeline}: ok: {} layer files ({} bytes) as the manifest lists them; \
         disk_consistent_lsn {}",
        report.layers, report.layer_bytes, report.md.disk_consistent_lsn
    );
    for f in &report.leftovers {
        println!("note: {f} is not in the manifest: start-up removes it");
    }
    Ok(())
}
