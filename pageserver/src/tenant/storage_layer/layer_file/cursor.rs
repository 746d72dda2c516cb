//! `EntryCursor`: every index entry of a layer in (key, LSN) order, leaf by
//! leaf, for compaction and checks.
//!
//! Version 3: leaves are read in order straight from the file,
//! `CURSOR_READ_LEAVES` at a time (one read), not through the block cache,
//! so a scan does not evict the blocks GetPage needs. Versions 1 and 2: the
//! in-memory index in pieces of a leaf's size. Either way the order is
//! checked again across leaves, and the count against the header.

use pageserver_api::key::CompactKey;
use utils::lsn::Lsn;

use super::super::BlobRef;
use super::index_block::ENTRIES_PER_BLOCK;
use super::tree_index::leaf_entries;
use super::{Index, LayerFile, LayerReadError};

/// Leaves one read of a cursor fetches (128 KiB).
const CURSOR_READ_LEAVES: u64 = 16;

pub type Entry = (CompactKey, Lsn, BlobRef);

pub struct EntryCursor<'a> {
    layer: &'a LayerFile,
    /// Next leaf to read (version 3) or next entry position (legacy).
    next: u64,
    /// Leaves read ahead, not yet returned (version 3).
    ahead: std::collections::VecDeque<bytes::Bytes>,
    last: Option<(CompactKey, Lsn)>,
    returned: u64,
}

impl<'a> EntryCursor<'a> {
    pub(super) fn new(layer: &'a LayerFile) -> EntryCursor<'a> {
        EntryCursor { layer, next: 0, ahead: Default::default(), last: None, returned: 0 }
    }

    /// The next leaf's entries (at most 240), or `None` after the last.
    pub async fn next_leaf(&mut self) -> Result<Option<Vec<Entry>>, LayerReadError> {
        let entries = match &self.layer.index {
            Index::Tree(tree) => {
                if self.ahead.is_empty() {
                    let leaves = tree.shape().leaf_count;
                    let count = (leaves - self.next).min(CURSOR_READ_LEAVES);
                    if count == 0 {
                        return Ok(None);
                    }
                    let blocks = tree.read_leaves(&self.layer.file, self.next, count).await?;
                    self.ahead.extend(blocks);
                    self.next += count;
                }
                let leaf = self.ahead.pop_front().expect("read ahead");
                leaf_entries(&leaf)
            }
            Index::Legacy(legacy) => {
                let all = legacy.entries();
                let start = self.next as usize;
                if start == all.len() {
                    return Ok(None);
                }
                let end = (start + ENTRIES_PER_BLOCK).min(all.len());
                self.next = end as u64;
                all[start..end].to_vec()
            }
        };
        self.check(&entries)?;
        Ok(Some(entries))
    }

    /// Order across leaves, and the count at the end (pairs the writer's
    /// assertions).
    fn check(&mut self, entries: &[Entry]) -> Result<(), LayerReadError> {
        let first = entries.first().map(|e| (e.0, e.1));
        let ordered = self.last.is_none_or(|last| first.is_some_and(|f| last < f));
        self.returned += entries.len() as u64;
        let total = self.layer.entry_count();
        let at_end = match &self.layer.index {
            Index::Tree(tree) => self.next == tree.shape().leaf_count && self.ahead.is_empty(),
            Index::Legacy(_) => self.next == total,
        };
        if !ordered || (at_end && self.returned != total) {
            let block = self.next.saturating_sub(1 + self.ahead.len() as u64);
            let reason = format!(
                "leaf out of order or entry count wrong ({} of {total} entries read)",
                self.returned
            );
            return Err(LayerReadError::CorruptBlock {
                path: self.layer.path.clone(),
                block,
                reason,
            });
        }
        self.last = entries.last().map(|e| (e.0, e.1));
        Ok(())
    }
}
