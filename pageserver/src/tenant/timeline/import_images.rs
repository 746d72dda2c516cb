//! Image layers an import writes itself, for the large relation files of a
//! base backup, so that the import's memory does not grow with the data
//! (the in-memory layer's index holds about 100 bytes per page; see
//! `crate::import`, `rel_images`).
//!
//! Contract with the layer map (`layer_map.rs`): the images are all at the
//! import's LSN, their key ranges are disjoint (one relation segment's
//! blocks each, or a part of one), and they are installed only once that
//! LSN is durable in layers (`disk_consistent_lsn` reached it), as image
//! creation does. The in-memory layer of the same import holds values at
//! that LSN for other keys only (metadata, small files), so a read of a
//! key finds its value in exactly one place. Image creation never writes
//! at an LSN where a range it would cover already has an image (see
//! `images.rs`), so later images do not collide with these.
//!
//! Installed on a timeline that is not yet visible (`UninitializedTimeline`
//! before its rename), so no reader races with it; the manifest written
//! here is the one the renamed directory is loaded from.

use anyhow::{ensure, Context};
use utils::lsn::Lsn;

use super::super::storage_layer::layer_file::{LayerFile, LayerWriter};
use super::super::storage_layer::LayerKind;
use super::Timeline;

impl Timeline {
    /// Bytes of values a compaction output (or an import's image) layer
    /// holds at most.
    pub(crate) fn compaction_target_size_bytes(&self) -> u64 {
        self.conf.compaction.compaction_target_size
    }

    /// A writer of one image layer at `lsn` (an import's).
    pub(crate) async fn new_import_image_writer(&self, lsn: Lsn) -> anyhow::Result<LayerWriter> {
        self.new_layer_writer(LayerKind::Image, lsn..lsn + 1).await
    }

    /// Add the image layers an import wrote at `lsn` to the layer map and
    /// persist the manifest. `lsn` must be durable already (the caller
    /// flushed the import's in-memory layer).
    pub(crate) async fn install_import_images(
        &self,
        lsn: Lsn,
        files: Vec<LayerFile>,
    ) -> anyhow::Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        let durable = self.get_disk_consistent_lsn();
        ensure!(
            durable >= lsn,
            "import images at {lsn} installed before {lsn} is durable ({durable})"
        );
        let layers: Vec<_> = files.into_iter().map(|f| self.new_resident_layer(f)).collect();
        self.layers.write().unwrap().add_images(lsn, layers);
        self.persist_manifest().await.context("persist the manifest with the import's images")
    }
}
