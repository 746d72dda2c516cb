//! Start-up of a timeline from disk: the manifest (the `metadata` file) says
//! which layer files are live, at which level; the directory listing is
//! only checked against it.
//!
//! - the manifest is checked before any layer file is opened, against the
//!   layer map's invariants (`storage_layer/layer_map/historic.rs`): strata
//!   ordered, not overlapping, contiguous from `initial_lsn + 1` except for
//!   gaps at or below the GC cutoff; L1 key ranges disjoint within a
//!   stratum; images disjoint within an LSN; each listed level matching the
//!   file name's kind; every layer ends at or below
//!   `disk_consistent_lsn + 1` (an image's LSN at or below
//!   `disk_consistent_lsn`). A violation fails the load with an error
//!   naming the layer file(s);
//! - a listed layer file that is missing, or whose size differs from the
//!   manifest, fails the load with an error naming the file: never a stale
//!   or empty answer. Except: with a remote client, a missing file whose
//!   remote copy has the manifest's size (evicted, or never downloaded)
//!   becomes a remote-only layer, downloaded when a read first needs it;
//! - a layer file (delta or image) present but not listed was written by a
//!   flush, compaction or image creation that did not reach its manifest
//!   update, or deleted by GC after one: it is removed; temp and ephemeral
//!   files likewise;
//! - a version-1 metadata file (no layer list) gets one from the directory
//!   listing (delta layers ending at or below `disk_consistent_lsn + 1`, as
//!   older daemons did; their gaps become empty L0 strata), and is
//!   rewritten at once. A version-2 file lists L0s only; the next manifest
//!   write makes it version 3.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, ensure, Context};
use io_engine::IoEngine;
use tracing::{info, warn};
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::super::metadata::{Decoded, LayerEntry, TimelineMetadata, METADATA_FILE};
use super::super::remote_timeline::client::RemoteTimelineClient;
use super::super::storage_layer::ephemeral_file::EPHEMERAL_PREFIX;
use super::super::storage_layer::layer::Layer;
use super::super::storage_layer::layer_file::LayerFile;
use super::super::storage_layer::layer_map::{LayerDesc, LayerMap};
use super::super::storage_layer::{LayerKind, LayerLevel, LayerName};
use super::super::StorageConf;

/// The checked manifest and its loaded layers with their levels (the
/// manifest's order).
pub(super) struct Loaded {
    pub md: TimelineMetadata,
    pub layers: Vec<(LayerLevel, Arc<Layer>)>,
}

pub(super) async fn load_layers(
    conf: &StorageConf,
    dir: &Path,
    ids: (TenantId, TimelineId),
    remote: Option<&Arc<RemoteTimelineClient>>,
) -> anyhow::Result<Loaded> {
    let engine = &conf.io_engine;
    let Manifest { md, from_v1, listing, names } = read_manifest(engine, dir).await?;
    remove_unlisted(engine, dir, &listing, &names).await?;
    let mut layers = Vec::with_capacity(md.layers.len());
    for (entry, name) in md.layers.iter().zip(&names) {
        let present = listing.iter().any(|e| e.name_lossy() == entry.name);
        let layer = match present {
            true => load_local(conf, dir, entry, ids, remote).await?,
            false => remote_only(conf, dir, entry, name, remote)?,
        };
        debug_assert_eq!(&layer.name, name);
        layers.push((entry.level, Arc::new(layer)));
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

/// Open the local file of a listed layer; its size must be the manifest's.
async fn load_local(
    conf: &StorageConf,
    dir: &Path,
    entry: &LayerEntry,
    (tenant_id, timeline_id): (TenantId, TimelineId),
    remote: Option<&Arc<RemoteTimelineClient>>,
) -> anyhow::Result<Layer> {
    let engine = &conf.io_engine;
    let path = dir.join(&entry.name);
    check_size(engine, &path, entry).await?;
    let file = LayerFile::load(engine, &path, tenant_id, timeline_id, conf.direct_io).await?;
    Ok(Layer::resident(file, remote.cloned()))
}

async fn check_size(engine: &IoEngine, path: &Path, entry: &LayerEntry) -> anyhow::Result<()> {
    let size_bytes = engine.open(path, io_engine::OpenMode::READ).await?.len().await?;
    ensure!(
        size_bytes == entry.size_bytes,
        "layer file {} is {size_bytes} bytes, the manifest says {}",
        path.display(),
        entry.size_bytes
    );
    Ok(())
}

/// What [`verify_dir`] found: the manifest's layers (all sound) and the
/// files start-up would remove.
#[derive(Debug)]
pub struct DirReport {
    pub md: TimelineMetadata,
    /// Listed layer files and their bytes, all present and loadable.
    pub layers: usize,
    pub layer_bytes: u64,
    /// Temp, ephemeral and unlisted layer files (start-up removes them).
    pub leftovers: Vec<String>,
}

/// Start-up's checks of a timeline directory, read only (for `pagectl
/// timeline verify`): the manifest as `check_manifest` checks it, then
/// every listed layer file present, of the manifest's size, and loadable
/// (header and index root checked). The errors are start-up's; a listed
/// file missing here is an error even where a remote copy would serve.
pub async fn verify_dir(
    engine: &IoEngine,
    dir: &Path,
    (tenant_id, timeline_id): (TenantId, TimelineId),
) -> anyhow::Result<DirReport> {
    let Manifest { md, listing, names, .. } = read_manifest(engine, dir).await?;
    for entry in &md.layers {
        let path = dir.join(&entry.name);
        if !listing.iter().any(|e| e.name_lossy() == entry.name) {
            bail!("layer file {} listed in the manifest is missing", path.display());
        }
        check_size(engine, &path, entry).await?;
        LayerFile::load(engine, &path, tenant_id, timeline_id, false).await?;
    }
    let leftovers = listing
        .iter()
        .map(|e| e.name_lossy())
        .filter(|f| {
            f.ends_with(io_engine::TEMP_SUFFIX)
                || f.starts_with(EPHEMERAL_PREFIX)
                || LayerName::parse(f).is_some_and(|n| !names.contains(&n))
        })
        .collect();
    let layer_bytes = md.layers.iter().map(|e| e.size_bytes).sum();
    Ok(DirReport { layers: md.layers.len(), layer_bytes, md, leftovers })
}

/// A listed layer missing on local disk: remote-only if the remote client
/// has it with the manifest's size, else the error naming the file.
fn remote_only(
    conf: &StorageConf,
    dir: &Path,
    entry: &LayerEntry,
    name: &LayerName,
    remote: Option<&Arc<RemoteTimelineClient>>,
) -> anyhow::Result<Layer> {
    let path = dir.join(&entry.name);
    let Some(remote) = remote else {
        bail!("layer file {} listed in the manifest is missing", path.display());
    };
    match remote.uploaded_layer(&entry.name) {
        Some(r) if r.file_size == entry.size_bytes => Ok(Layer::remote_only(
            name.clone(),
            entry.size_bytes,
            dir,
            conf.io_engine.clone(),
            conf.direct_io,
            remote.clone(),
        )),
        Some(r) => bail!(
            "layer file {} listed in the manifest is missing, and its remote copy is {} bytes, \
             the manifest says {}",
            path.display(),
            r.file_size,
            entry.size_bytes
        ),
        None => bail!(
            "layer file {} listed in the manifest is missing, and remote storage has no copy",
            path.display()
        ),
    }
}

/// A timeline directory's manifest as start-up reads it, checked.
struct Manifest {
    md: TimelineMetadata,
    /// A version-1 file: its layer list came from the directory.
    from_v1: bool,
    listing: Vec<io_engine::DirEntry>,
    /// The layer names of `md.layers`, in order.
    names: Vec<LayerName>,
}

/// Read and check the manifest in `dir` (start-up and `verify_dir`): a
/// version-1 file gets its layers and gaps from the directory listing.
async fn read_manifest(engine: &IoEngine, dir: &Path) -> anyhow::Result<Manifest> {
    let (mut md, from_v1) = match TimelineMetadata::load(engine, dir).await? {
        Decoded::Manifest(md) => (md, false),
        Decoded::V1(md) => (md, true),
    };
    let listing = engine.read_dir(dir).await?;
    if from_v1 {
        md.layers = layers_from_listing(engine, dir, &listing, md.disk_consistent_lsn).await?;
        md.empty_strata = v1_gaps(&md)?;
    }
    let names = check_manifest(&md)?;
    Ok(Manifest { md, from_v1, listing, names })
}

/// Parse and check the listed names and levels against the layer map's
/// invariants and `disk_consistent_lsn` (see the module comment); the
/// names, in the manifest's order.
pub(super) fn check_manifest(md: &TimelineMetadata) -> anyhow::Result<Vec<LayerName>> {
    let dcl = md.disk_consistent_lsn;
    let mut names = Vec::with_capacity(md.layers.len());
    let mut descs = Vec::with_capacity(md.layers.len());
    for entry in &md.layers {
        let Some(name) = LayerName::parse(&entry.name) else {
            bail!("manifest lists {}, which is not a layer file name", entry.name);
        };
        ensure!(
            name.kind == entry.level.kind(),
            "manifest lists layer file {} as {}, but it is named as {} layer",
            entry.name,
            entry.level,
            match name.kind {
                LayerKind::Delta => "a delta",
                LayerKind::Image => "an image",
            }
        );
        if name.kind == LayerKind::Image {
            ensure!(
                name.image_lsn() <= dcl,
                "image layer file {} is at an LSN beyond disk_consistent_lsn {dcl}",
                entry.name
            );
        }
        ensure!(
            name.lsn_range.end <= dcl + 1,
            "layer file {} ends beyond disk_consistent_lsn {dcl}",
            entry.name
        );
        let desc = LayerDesc { name: name.clone(), file_size: entry.size_bytes };
        descs.push((entry.level, Arc::new(desc)));
        names.push(name);
    }
    for (level, r) in &md.empty_strata {
        ensure!(
            r.end <= dcl + 1,
            "the empty {level} stratum {}..{} ends beyond disk_consistent_lsn {dcl}",
            r.start,
            r.end
        );
    }
    LayerMap::try_new(md.initial_lsn + 1, md.gc_cutoff, descs, md.empty_strata.clone())
        .context("manifest refused")?;
    Ok(names)
}

/// The LSN ranges a version-1 listing (sorted by start) leaves uncovered
/// from `initial_lsn + 1`: older daemons opened a layer at
/// `last_record_lsn + 1` after a checkpoint, so there are no values there.
fn v1_gaps(md: &TimelineMetadata) -> anyhow::Result<Vec<(LayerLevel, Range<Lsn>)>> {
    let mut gaps = Vec::new();
    let mut expected = md.initial_lsn + 1;
    for entry in &md.layers {
        let name = LayerName::parse(&entry.name).context("listed by name")?;
        if name.lsn_range.start > expected {
            gaps.push((LayerLevel::L0, expected..name.lsn_range.start));
        }
        expected = expected.max(name.lsn_range.end);
    }
    Ok(gaps)
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
            || fname == crate::tenant::commit_times::COMMIT_TIMES_DIR
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

/// A version-1 timeline's layer list: the delta layer files present that
/// end at or below `disk_consistent_lsn + 1`, oldest first, all L0s.
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
        if name.kind == LayerKind::Delta && name.lsn_range.end <= disk_consistent_lsn + 1 {
            let file = engine.open(&dir.join(&entry.name), io_engine::OpenMode::READ).await?;
            let size_bytes = file.len().await?;
            let entry = LayerEntry { name: fname, size_bytes, level: LayerLevel::L0 };
            by_start.insert(name.lsn_range.start, entry);
        }
    }
    Ok(by_start.into_values().collect())
}

#[cfg(test)]
mod tests {
    use pageserver_api::key::Key;

    use super::*;
    use crate::tenant::lsn_by_time::LsnTimeRecord;

    fn delta(keys: Range<u32>, lsns: Range<u64>) -> String {
        let k = |i| Key::MIN.add(i);
        LayerName::delta(k(keys.start)..k(keys.end), Lsn(lsns.start)..Lsn(lsns.end)).to_string()
    }

    fn image(keys: Range<u32>, lsn: u64) -> String {
        let k = |i| Key::MIN.add(i);
        LayerName::image(k(keys.start)..k(keys.end), Lsn(lsn)).to_string()
    }

    /// A manifest of `layers` for a timeline from 0x10 to 0x50.
    fn manifest(layers: &[(LayerLevel, &str)]) -> TimelineMetadata {
        let entries = layers.iter().map(|(level, name)| LayerEntry {
            name: name.to_string(),
            size_bytes: 8192,
            level: *level,
        });
        TimelineMetadata {
            disk_consistent_lsn: Lsn(0x4f),
            initial_lsn: Lsn(0xf),
            pg_version: 16,
            layers: entries.collect(),
            empty_strata: Vec::new(),
            gc_cutoff: Lsn(0),
            lsn_by_time: LsnTimeRecord::default(),
            ancestor_timeline_id: None,
            ancestor_lsn: Lsn(0),
        }
    }

    fn refusal(md: &TimelineMetadata) -> String {
        format!("{:#}", check_manifest(md).expect_err("the manifest was accepted"))
    }

    #[test]
    fn a_sound_manifest_passes() {
        use LayerLevel::*;
        let (a, b, c) = (delta(0..5, 0x10..0x30), delta(5..9, 0x10..0x30), delta(0..9, 0x30..0x50));
        let i = image(0..9, 0x4f);
        let md = manifest(&[(L1, &a), (L1, &b), (L0, &c), (Image, &i)]);
        assert_eq!(check_manifest(&md).unwrap().len(), 4);
    }

    #[test]
    fn overlapping_strata_are_refused_naming_the_file() {
        let (a, b) = (delta(0..5, 0x10..0x30), delta(0..9, 0x20..0x40));
        let err = refusal(&manifest(&[(LayerLevel::L0, &a), (LayerLevel::L0, &b)]));
        assert!(err.contains(&b) && err.contains("overlap"), "{err}");
        // L1s of one stratum overlapping in keys.
        let (c, d) = (delta(0..5, 0x10..0x30), delta(4..9, 0x10..0x30));
        let err = refusal(&manifest(&[(LayerLevel::L1, &c), (LayerLevel::L1, &d)]));
        assert!(err.contains(&c) && err.contains(&d) && err.contains("overlap in keys"), "{err}");
        // A gap above the GC cutoff: a lost layer.
        let e = delta(0..9, 0x31..0x40);
        let err = refusal(&manifest(&[(LayerLevel::L0, &a), (LayerLevel::L0, &e)]));
        assert!(err.contains(&e) && err.contains("gap"), "{err}");
    }

    #[test]
    fn bad_levels_are_refused_naming_the_file() {
        let (a, i) = (delta(0..5, 0x10..0x30), image(0..5, 0x20));
        let err = refusal(&manifest(&[(LayerLevel::Image, &a)]));
        assert!(err.contains(&a) && err.contains("as image"), "{err}");
        let err = refusal(&manifest(&[(LayerLevel::L0, &a), (LayerLevel::L1, &i)]));
        assert!(err.contains(&i) && err.contains("as L1"), "{err}");
        // An L1 stratum above an L0.
        let b = delta(0..5, 0x30..0x40);
        let err = refusal(&manifest(&[(LayerLevel::L0, &a), (LayerLevel::L1, &b)]));
        assert!(err.contains(&a) && err.contains(&b) && err.contains("lies above"), "{err}");
    }

    #[test]
    fn layers_beyond_disk_consistent_lsn_are_refused_naming_the_file() {
        let a = delta(0..5, 0x10..0x50);
        let late_image = image(0..5, 0x50);
        let err = refusal(&manifest(&[(LayerLevel::L0, &a), (LayerLevel::Image, &late_image)]));
        assert!(err.contains(&late_image) && err.contains("disk_consistent_lsn"), "{err}");
        let late = delta(0..5, 0x10..0x51);
        let err = refusal(&manifest(&[(LayerLevel::L0, &late)]));
        assert!(err.contains(&late) && err.contains("disk_consistent_lsn"), "{err}");
        let mut md = manifest(&[(LayerLevel::L0, &a)]);
        md.empty_strata.push((LayerLevel::L0, Lsn(0x50)..Lsn(0x60)));
        assert!(refusal(&md).contains("empty L0 stratum"));
    }

    #[test]
    fn version_1_gaps_become_empty_l0_strata() {
        let (a, b) = (delta(0..5, 0x12..0x20), delta(0..5, 0x28..0x30));
        let mut md = manifest(&[(LayerLevel::L0, &a), (LayerLevel::L0, &b)]);
        md.empty_strata = v1_gaps(&md).unwrap();
        let r = |s: u64, e: u64| (LayerLevel::L0, Lsn(s)..Lsn(e));
        assert_eq!(md.empty_strata, vec![r(0x10, 0x12), r(0x20, 0x28)]);
        check_manifest(&md).unwrap();
    }
}
