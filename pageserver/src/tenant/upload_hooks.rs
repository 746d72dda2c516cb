//! The two calls attach, detach and timeline creation make into a
//! timeline's upload queue, each in one place.
//!
//! UPLOAD-QUEUE: the upload queue of `remote_timeline/` (its
//! `schedule_index_upload` and `wait_uploaded`) takes these over; until it
//! lands, the bodies below are stand-ins that work on remote storage
//! directly, through the public API of `remote_timeline`:
//! - `schedule_index_upload` writes `index_part.json-<generation>` from the
//!   local manifest when every layer it lists is in remote storage already
//!   (after an attach, or for a new empty timeline); otherwise it leaves
//!   the index to the upload queue;
//! - `wait_uploaded` polls the newest remote index (at or below the
//!   generation) until its `disk_consistent_lsn` reaches the timeline's.
//!
//! The stand-ins write only objects of the timeline's own generation.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tracing::debug;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::metadata::{Decoded, TimelineMetadata};
use super::remote_timeline::index_part::IndexPart;
use super::remote_timeline::{download_newest_index, index_key};
use super::Timeline;

/// How often `wait_uploaded` looks at remote storage again.
const UPLOAD_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Why [`wait_uploaded`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum UploadWaitError {
    #[error(
        "timeline {tenant}/{timeline}: flushed up to {local_lsn}, but remote storage has it \
         only up to {} after {waited:?}{}",
        remote_lsn.map_or("nothing".to_string(), |l| l.to_string()),
        last_error.as_ref().map_or(String::new(), |e| format!(" (last error: {e})"))
    )]
    NotUploaded {
        tenant: TenantId,
        timeline: TimelineId,
        local_lsn: Lsn,
        remote_lsn: Option<Lsn>,
        waited: Duration,
        last_error: Option<String>,
    },
    #[error("shutting down")]
    Cancelled,
}

/// Ask the timeline's remote client to upload an index under its
/// generation now: after an attach (the new generation has an index of
/// its own at once) and after a timeline is created (it exists in remote
/// storage from then on). Without remote storage: nothing.
pub async fn schedule_index_upload(tl: &Timeline) -> anyhow::Result<()> {
    // UPLOAD-QUEUE: replace this body with
    //     tl.remote_client().map(|c| c.schedule_index_upload(...));
    let Some(client) = tl.remote_client() else { return Ok(()) };
    let md = match TimelineMetadata::load(&tl.conf().io_engine, tl.dir()).await? {
        Decoded::Manifest(md) => md,
        Decoded::V1(_) => return Ok(()), // converted by the next load
    };
    let mut uploaded = BTreeMap::new();
    for layer in &md.layers {
        let Some(remote) = client.uploaded_layer(&layer.name) else {
            debug!("layer {} is not uploaded yet: the index waits for it", layer.name);
            return Ok(());
        };
        uploaded.insert(layer.name.clone(), remote);
    }
    let ip = IndexPart::new(client.generation, &md, &uploaded, tl.wal_source());
    let key = index_key(client.tenant_id, client.timeline_id, client.generation);
    client.storage().put(&key, ip.to_json().into()).await.with_context(|| format!("upload {key}"))
}

/// Wait up to `timeout` until everything the timeline flushed is in
/// remote storage (`remote_consistent_lsn >= disk_consistent_lsn`).
/// Without remote storage: at once.
pub async fn wait_uploaded(
    tl: &Timeline,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<(), UploadWaitError> {
    // UPLOAD-QUEUE: replace this body with the client's `wait_uploaded`.
    let Some(client) = tl.remote_client() else { return Ok(()) };
    let started = std::time::Instant::now();
    let local_lsn = tl.get_disk_consistent_lsn();
    let (tenant, timeline) = (client.tenant_id, client.timeline_id);
    let mut remote_lsn = None;
    loop {
        let rs = client.storage();
        let last_error = match download_newest_index(rs, tenant, timeline, client.generation).await
        {
            Ok(ip) => {
                remote_lsn = ip.map(|ip| ip.disk_consistent_lsn);
                None
            }
            Err(e) => Some(format!("{e:#}")),
        };
        if remote_lsn.is_some_and(|r| r >= local_lsn) {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(UploadWaitError::NotUploaded {
                tenant,
                timeline,
                local_lsn,
                remote_lsn,
                waited,
                last_error,
            });
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err(UploadWaitError::Cancelled),
            _ = tokio::time::sleep(UPLOAD_POLL_INTERVAL.min(timeout - waited)) => {}
        }
    }
}
