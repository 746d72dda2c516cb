//! The timeline's side of layer residency (`storage_layer/layer.rs`): new
//! layers are resident and know the timeline's remote client; the listing
//! eviction (`tenant/eviction.rs`) chooses from.
//!
//! The lists are of the layer map as of the call: a layer replaced right
//! after is still in them, and `Layer::evict` then refuses it (it is
//! deleted).

use std::sync::Arc;

use super::super::storage_layer::layer::Layer;
use super::super::storage_layer::layer_file::LayerFile;
use super::Timeline;

impl Timeline {
    /// A layer file this timeline just wrote, as a (resident) layer.
    pub(super) fn new_resident_layer(&self, file: LayerFile) -> Arc<Layer> {
        Arc::new(Layer::resident(file, self.remote.clone()))
    }

    /// The open files of `layers`, in order, downloading those that are
    /// not resident (concurrently).
    pub(super) async fn resident_files(
        layers: &[Arc<Layer>],
    ) -> anyhow::Result<Vec<Arc<LayerFile>>> {
        let files = layers.iter().map(|l| l.get_resident());
        Ok(futures::future::try_join_all(files).await?)
    }

    /// Every historic layer of the layer map now, in the manifest's order.
    pub fn historic_layers(&self) -> Vec<Arc<Layer>> {
        let historic = self.layers.read().unwrap().historic().clone();
        historic.all_historic().into_iter().map(|(_, l)| l).collect()
    }

    /// The historic layers whose files are on local disk now (listing them
    /// does not count as an access).
    pub fn resident_layers(&self) -> Vec<Arc<Layer>> {
        let mut layers = self.historic_layers();
        layers.retain(|l| l.is_resident());
        layers
    }

    /// Bytes of the historic layer files on local disk now.
    pub fn resident_bytes(&self) -> u64 {
        self.resident_layers().iter().map(|l| l.file_size).sum()
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
