//! Remote storage for tests of layers, timelines and eviction: a
//! `RemoteStorage` on a local directory, layer files uploaded to it with
//! `upload_file`, and a timeline client whose index lists them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use io_engine::IoEngine;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use crate::remote_storage::RemoteStorage;
use crate::tenant::remote_timeline::client::RemoteTimelineClient;
use crate::tenant::remote_timeline::index_part::{IndexLayer, IndexLevel, IndexPart};
use crate::tenant::remote_timeline::{layer_key, Generation};

pub(crate) const GENERATION: Generation = Generation(1);

/// Remote storage in the local directory `root`.
pub(crate) fn local_storage(root: &Path) -> Arc<RemoteStorage> {
    Arc::new(crate::remote_storage::local_for_tests(root, ""))
}

/// Upload the layer files `names` of the timeline directory `dir`; what an
/// index lists of them.
pub(crate) async fn upload(
    rs: &RemoteStorage,
    engine: &IoEngine,
    (tenant, timeline): (TenantId, TimelineId),
    dir: &Path,
    names: &[String],
) -> BTreeMap<String, IndexLayer> {
    let mut uploaded = BTreeMap::new();
    for name in names {
        let key = layer_key(tenant, timeline, name, GENERATION);
        let check = rs.upload_file(engine, &dir.join(name), &key).await.unwrap();
        let layer = IndexLayer {
            level: IndexLevel::L0, // the client does not look at levels
            file_size: check.size_bytes,
            crc32c: check.crc32c,
            generation: GENERATION,
        };
        uploaded.insert(name.clone(), layer);
    }
    uploaded
}

/// A client of the timeline in `dir` whose remote index lists `layers`.
pub(crate) fn client(
    rs: &Arc<RemoteStorage>,
    engine: &IoEngine,
    ids: (TenantId, TimelineId),
    dir: &Path,
    layers: BTreeMap<String, IndexLayer>,
) -> Arc<RemoteTimelineClient> {
    let index = IndexPart {
        version: crate::tenant::remote_timeline::index_part::INDEX_PART_VERSION,
        generation: GENERATION,
        disk_consistent_lsn: Lsn(0),
        initial_lsn: Lsn(0),
        pg_version: 16,
        gc_cutoff: Lsn(0),
        layers,
        empty_strata: Vec::new(),
        lsn_by_time: Vec::new(),
        wal_source: None,
        ancestor_timeline_id: None,
        ancestor_lsn: None,
        commit_times: None,
    };
    let dir = dir.to_path_buf();
    Arc::new(RemoteTimelineClient::new(
        rs.clone(),
        engine.clone(),
        ids,
        GENERATION,
        dir,
        Some(index),
    ))
}

/// Where the local remote storage under `root` keeps layer `name`.
pub(crate) fn object_path(root: &Path, ids: (TenantId, TimelineId), name: &str) -> PathBuf {
    root.join(layer_key(ids.0, ids.1, name, GENERATION))
}

/// Flip one byte of the object at `path` in the middle (same size).
pub(crate) fn corrupt(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(path, &bytes).unwrap();
}
