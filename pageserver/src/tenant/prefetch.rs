//! Background download of an attached tenant's remote-only layers, so that
//! reads after an attach soon stop waiting for downloads.
//!
//! Each layer is made resident through `Layer::get_resident()`, as a read
//! would: a read that needs the layer meanwhile shares the download, and a
//! layer evicted later is downloaded again only by the reads that need it.
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

use super::storage_layer::layer::Layer;
use super::Timeline;

/// Layer downloads of one tenant's prefetch in flight at once.
pub const PREFETCH_DOWNLOADS_PER_TENANT: usize = 2;

/// Start the prefetch of every remote-only layer of each of a tenant's
/// `timelines`; the timelines share one bound.
pub fn spawn_prefetch(timelines: Vec<Arc<Timeline>>) {
    let slots = Arc::new(Semaphore::new(PREFETCH_DOWNLOADS_PER_TENANT));
    for tl in timelines {
        let mut layers = tl.historic_layers();
        layers.retain(|l| !l.is_resident());
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

async fn prefetch_timeline(tl: Arc<Timeline>, layers: Vec<Arc<Layer>>, slots: Arc<Semaphore>) {
    let total = layers.len();
    let progress = tl.start_progress("attach_prefetch", "layers");
    progress.set_total(total as u64);
    let downloads = futures::stream::iter(layers).map(|layer| {
        let (slots, progress) = (&slots, &progress);
        async move {
            let _slot = slots.acquire().await.expect("never closed");
            // Tests slow the prefetch down with `sleep(MS)` to watch its progress.
            utils::failpoint::failpoint("prefetch::before-download").ok();
            let res = layer.get_resident().await;
            progress.add(1);
            match res {
                Ok(_) => true,
                Err(e) => {
                    let name = &layer.name;
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
            progress.finish();
            info!("prefetched {ok} of {total} remote layers");
        }
        _ = tl.cancel.cancelled() => info!("prefetch stopped: the timeline is shutting down"),
    }
}
