//! Background download of an attached tenant's remote-only layers, so that
//! reads after an attach soon stop waiting for downloads.
//!
//! Concurrency contract: one task per timeline, run as a background task of
//! the timeline (`Timeline::spawn_background`), so it ends when the
//! timeline's `cancel` fires (shutdown, detach, deletion) and
//! `Timeline::shutdown` waits for it. The tasks of one tenant share one
//! semaphore of [`PREFETCH_DOWNLOADS_PER_TENANT`] permits: at most that many
//! downloads of the tenant are in flight, whatever its timeline count, and
//! a read that needs a layer downloads it itself rather than wait for the
//! prefetch. A failed download is logged and left to the read that needs
//! the layer; the prefetch goes on with the next one.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::Semaphore;
use tracing::{info, warn, Instrument};

use super::storage_layer::LayerName;
use super::Timeline;

/// Layer downloads of one tenant's prefetch in flight at once.
pub const PREFETCH_DOWNLOADS_PER_TENANT: usize = 2;

/// Start the prefetch of `layers` for each timeline of a tenant; the
/// timelines share one bound.
pub fn spawn_prefetch(timelines: Vec<(Arc<Timeline>, Vec<LayerName>)>) {
    let slots = Arc::new(Semaphore::new(PREFETCH_DOWNLOADS_PER_TENANT));
    for (tl, layers) in timelines {
        if layers.is_empty() {
            continue;
        }
        let span = tracing::info_span!(
            "prefetch",
            tenant_id = %tl.tenant_id,
            timeline_id = %tl.timeline_id
        );
        let task = prefetch_timeline(tl.clone(), layers, slots.clone());
        tl.spawn_background(task.instrument(span));
    }
}

async fn prefetch_timeline(tl: Arc<Timeline>, layers: Vec<LayerName>, slots: Arc<Semaphore>) {
    let total = layers.len();
    let downloads = futures::stream::iter(layers).map(|name| {
        let (tl, slots) = (&tl, &slots);
        async move {
            let _slot = slots.acquire().await.expect("never closed");
            match make_resident(tl, &name).await {
                Ok(()) => true,
                Err(e) => {
                    warn!("prefetch of layer {name} failed, a read will fetch it: {e:#}");
                    false
                }
            }
        }
    });
    let all = downloads.buffer_unordered(PREFETCH_DOWNLOADS_PER_TENANT).collect::<Vec<bool>>();
    tokio::select! {
        done = all => {
            let ok = done.iter().filter(|ok| **ok).count();
            info!("prefetched {ok} of {total} remote layers");
        }
        _ = tl.cancel.cancelled() => info!("prefetch stopped: the timeline is shutting down"),
    }
}

/// Make layer `name` resident on local disk.
async fn make_resident(tl: &Timeline, name: &LayerName) -> anyhow::Result<()> {
    // LAYER-RESIDENCY: replace this body with the `get_resident()` of the
    // timeline's `Layer` named `name` (it downloads the file and marks the
    // layer resident). Until then: download the file if it is not on disk.
    let Some(client) = tl.remote_client() else { return Ok(()) };
    if tl.conf().io_engine.exists(&tl.dir().join(name.to_string())).await? {
        return Ok(());
    }
    client.download_layer(name).await?;
    Ok(())
}
