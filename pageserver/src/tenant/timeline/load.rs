//! Start-up of a timeline from disk: the manifest (the `metadata` file) says
//! which layer files are live; the directory listing is only checked
//! against it.
//!
//! - a listed layer file that is missing, or whose size differs from the
//!   manifest, fails the load with an error naming the file: never a stale
//!   or empty answer;
//! - listed layers must be ordered, contiguous from `initial_lsn + 1`, and
//!   end at or below `disk_consistent_lsn + 1`; a gap or overlap names the
//!   layers around it;
//! - a layer file present but not listed was written by a flush that did not
//!   reach its manifest update (so it is beyond `disk_consistent_lsn`): it
//!   is removed; temp and ephemeral files likewise;
//! - a version-1 metadata file (no layer list) gets one from the directory
//!   listing (layers ending at or below `disk_consistent_lsn + 1`, as older
//!   daemons did), and is rewritten as version 2 at once.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, ensure};
use io_engine::IoEngine;
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::metadata::{Decoded, LayerEntry, TimelineMetadata, METADATA_FILE};
use super::super::storage_layer::ephemeral_file::EPHEMERAL_PREFIX;
use super::super::storage_layer::layer_file::LayerFile;
use super::super::storage_layer::LayerName;
use super::super::StorageConf;

/// The checked manifest and the loaded L0 layers, oldest first.
pub(super) struct Loaded {
    pub md: TimelineMetadata,
    pub layers: Vec<Arc<LayerFile>>,
}

pub(super) async fn load_layers(
    conf: &StorageConf,
    dir: &Path,
    tenant_id: TenantId,
    timeline_id: TimelineId,
) -> anyhow::Result<Loaded> {
    let engine = &conf.io_engine;
    let (mut md, from_v1) = match TimelineMetadata::load(engine, dir).await? {
        Decoded::Manifest(md) => (md, false),
        Decoded::V1(md) => (md, true),
    };
    let listing = engine.read_dir(dir).await?;
    if from_v1 {
        md.layers = layers_from_listing(engine, dir, &listing, md.disk_consistent_lsn).await?;
    }
    let names = check_manifest(&md, from_v1)?;
    remove_unlisted(engine, dir, &listing, &names).await?;
    let mut layers = Vec::with_capacity(md.layers.len());
    for (entry, name) in md.layers.iter().zip(&names) {
        let path = dir.join(&entry.name);
        if !listing.iter().any(|e| e.name_lossy() == entry.name) {
            bail!("layer file {} listed in the manifest is missing", path.display());
        }
        let size_bytes = engine.open(&path, io_engine::OpenMode::READ).await?.len().await?;
        ensure!(
            size_bytes == entry.size_bytes,
            "layer file {} is {size_bytes} bytes, the manifest says {}",
            path.display(),
            entry.size_bytes
        );
        let layer = LayerFile::load(engine, &path, tenant_id, timeline_id, conf.direct_io).await?;
        debug_assert_eq!(&layer.name, name);
        layers.push(Arc::new(layer));
    }
    if from_v1 {
        md.persist(engine, dir).await?;
        info!(
            "converted {} to a layer manifest ({} layers)",
            dir.join(METADATA_FILE).display(),
            layers.len()
        );
    }
    Ok(Loaded { md, layers })
}

/// Parse and check the listed names: ordered, contiguous from
/// `initial_lsn + 1` (version-1 listings may have gaps), not beyond
/// `disk_consistent_lsn + 1`.
fn check_manifest(md: &TimelineMetadata, from_v1: bool) -> anyhow::Result<Vec<LayerName>> {
    let mut names = Vec::with_capacity(md.layers.len());
    let mut expected_start = md.initial_lsn + 1;
    for entry in &md.layers {
        let Some(name) = LayerName::parse(&entry.name) else {
            bail!("manifest lists {}, which is not a layer file name", entry.name);
        };
        let start = name.lsn_range.start;
        if start != expected_start && !(from_v1 && start > expected_start) {
            bail!(
                "manifest layers do not cover the timeline: layer file {} starts at {start}, expected {expected_start}",
                entry.name
            );
        }
        ensure!(
            name.lsn_range.end <= md.disk_consistent_lsn + 1,
            "layer file {} ends beyond disk_consistent_lsn {}",
            entry.name,
            md.disk_consistent_lsn
        );
        expected_start = name.lsn_range.end;
        names.push(name);
    }
    Ok(names)
}

/// Remove temp, ephemeral and unlisted layer files (fsyncing the directory
/// once if anything was removed).
async fn remove_unlisted(
    engine: &IoEngine,
    dir: &Path,
    listing: &[io_engine::DirEntry],
    listed: &[LayerName],
) -> anyhow::Result<()> {
    let mut removed = false;
    for entry in listing {
        let fname = entry.name_lossy();
        let path = dir.join(&entry.name);
        if fname == METADATA_FILE
            || fname == super::wal_source::WAL_SOURCE_FILE
            || fname == super::lease::LEASES_FILE
        {
            continue;
        }
        let leftover =
            fname.ends_with(io_engine::TEMP_SUFFIX) || fname.starts_with(EPHEMERAL_PREFIX);
        let unlisted = LayerName::parse(&fname).is_some_and(|n| !listed.contains(&n));
        if leftover || unlisted {
            if unlisted {
                info!("removing layer file {fname}: not in the manifest (written after the last durable flush)");
            }
            engine.remove_file(&path).await?;
            removed = true;
        } else if LayerName::parse(&fname).is_none() {
            warn!("ignoring unexpected file {}", path.display());
        }
    }
    if removed {
        engine.fsync_dir(dir).await?;
    }
    Ok(())
}

/// A version-1 timeline's layer list: the layer files present that end at
/// or below `disk_consistent_lsn + 1`, oldest first.
async fn layers_from_listing(
    engine: &IoEngine,
    dir: &Path,
    listing: &[io_engine::DirEntry],
    disk_consistent_lsn: Lsn,
) -> anyhow::Result<Vec<LayerEntry>> {
    let mut by_start = BTreeMap::new();
    for entry in listing {
        let fname = entry.name_lossy();
        let Some(name) = LayerName::parse(&fname) else { continue };
        if name.lsn_range.end <= disk_consistent_lsn + 1 {
            let file = engine.open(&dir.join(&entry.name), io_engine::OpenMode::READ).await?;
            let size_bytes = file.len().await?;
            by_start.insert(name.lsn_range.start, LayerEntry { name: fname, size_bytes });
        }
    }
    Ok(by_start.into_values().collect())
}
