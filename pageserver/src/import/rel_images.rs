//! The large relation files of an import, written straight to image layers
//! at the import's LSN instead of through the in-memory layer, so that the
//! import's memory does not grow with the data: the in-memory layer's index
//! costs about 100 bytes per page until the flush at the end, while an image
//! layer writer keeps one 1 MiB value buffer and 34 bytes of index per page
//! of its own file only (`layer_file::index_builder`), and a finished image
//! layer keeps its header and root index block (8 KiB).
//!
//! A relation segment file holds consecutive blocks of one relation, so its
//! pages arrive in key order; each image layer holds one segment's blocks,
//! or a run of at most `pages_per_layer` of them (the compaction target
//! size), and is named by exactly that key range. Ranges of different
//! files are disjoint (a tar entry is imported once: `check_duplicate`).
//!
//! Files below `MIN_PAGES` stay on the in-memory path: a database has many
//! small relations, and one image layer each would be many tiny files. So
//! what the import holds in memory grows with the number of small files
//! (at most `MIN_PAGES - 1` pages each), not with the bytes imported.
//!
//! The layers are installed by `UninitializedTimeline::finish`, once the
//! import's LSN is durable (`Timeline::install_import_images`); a failed
//! import drops them with the timeline's temporary directory.

use std::io;

use futures::Stream;
use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;
use utils::lsn::Lsn;

use super::basebackup::Source;
use super::tar_reader::TarPart;
use super::ImportError;
use crate::pgdatadir_mapping::BLCKSZ;
use crate::tenant::storage_layer::layer_file::LayerFile;
use crate::tenant::value::Value;
use crate::tenant::{TenantError, Timeline};

/// Relation files with fewer pages go through the in-memory layer.
pub(super) const MIN_PAGES: u32 = 128;

/// The image layers written so far, all at `lsn`.
pub(super) struct RelImages {
    lsn: Lsn,
    pages_per_layer: u32,
    files: Vec<LayerFile>,
}

impl RelImages {
    pub(super) fn new(tl: &Timeline, lsn: Lsn) -> RelImages {
        let target_bytes = tl.compaction_target_size_bytes();
        let pages_per_layer = (target_bytes / BLCKSZ as u64).clamp(1, u32::MAX as u64) as u32;
        RelImages { lsn, pages_per_layer, files: Vec::new() }
    }

    /// Whether a relation file of `pages` pages is written here.
    pub(super) fn wants(pages: u32) -> bool {
        pages >= MIN_PAGES
    }

    /// Write blocks `first..first + n` of `rel` from `src` (the current
    /// entry, `path`), `n` pages.
    pub(super) async fn write_segment<S>(
        &mut self,
        tl: &Timeline,
        (rel, first, n): (RelTag, u32, u32),
        path: &str,
        src: &mut Source<'_, S>,
    ) -> Result<(), ImportError>
    where
        S: Stream<Item = Result<TarPart, io::Error>> + Unpin,
    {
        let end = first.checked_add(n).expect("the caller checked the segment's block range");
        let mut raw = Vec::with_capacity(BLCKSZ + 16);
        let mut start = first;
        while start < end {
            if tl.cancel.is_cancelled() {
                return Err(ImportError::Tenant(TenantError::ShuttingDown));
            }
            let stop = end.min(start.saturating_add(self.pages_per_layer));
            let mut writer = tl.new_import_image_writer(self.lsn).await?;
            for blk in start..stop {
                let page = src.read_exact(BLCKSZ, path).await?;
                raw.clear();
                Value::Image(page).serialize_into(&mut raw);
                let key = Key::rel_block(rel, blk).to_compact();
                writer.put_raw(key, self.lsn, &raw, true).await?;
            }
            let keys = Key::rel_block(rel, start)..Key::rel_block(rel, stop);
            self.files.push(writer.finish_with_key_range(keys).await?);
            start = stop;
        }
        Ok(())
    }

    /// The layers written, and their LSN.
    pub(super) fn into_files(self) -> (Lsn, Vec<LayerFile>) {
        (self.lsn, self.files)
    }
}
