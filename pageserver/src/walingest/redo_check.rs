//! The redo-check mode (`wal_redo_check`): PostgreSQL itself as the oracle
//! of native redo, record by record.
//!
//! Under `wal_consistency_checking` every block a record changes carries
//! PostgreSQL's own image of the page after the record. For each such block
//! of an rmgr with native redo, the check redoes the record on the page as
//! it stood before (zeros for a block the record initialises), masks both
//! pages as PostgreSQL's consistency check does (`postgres_ffi::redo::mask`)
//! and compares. Counts go to `pageserver_redo_check_*`; a mismatch or a
//! redo error is logged at WARN with LSN, rmgr, record kind, relation, block
//! and the first differing byte range. What is stored does not change.
//!
//! The page before a record: the check keeps the latest page it saw of
//! each block, from the WAL's own images (which, under consistency
//! checking, cover every change of a relation page). A block changed in a
//! way no image shows (a reference without an image, visibility-map bits
//! cleared natively, a truncation, a drop, a database copy) is forgotten,
//! and its next check is skipped (`pageserver_redo_check_skipped_total`)
//! until an image shows it again. Memory: at most [`MAX_PAGES`] pages; past
//! that the check forgets everything and starts over.

use std::collections::HashMap;

use bytes::Bytes;
use postgres_ffi::redo::{self, mask, RedoRecord};
use postgres_ffi::wal::rmgr::{classify, rmgr_name, NativeRecord, XactRecord};
use postgres_ffi::wal::{BlockTag, DecodedBlock, DecodedWalRecord};
use postgres_ffi::{PgMajorVersion, BLCKSZ};
use tracing::warn;

use crate::metrics::redo as metrics;

/// Pages the check keeps at most (64 MiB).
pub const MAX_PAGES: usize = 8192;

/// The pages the check knows; see the module comment.
pub struct RedoCheck {
    version: PgMajorVersion,
    pages: HashMap<BlockTag, Bytes>,
}

impl RedoCheck {
    pub fn new(version: PgMajorVersion) -> RedoCheck {
        RedoCheck { version, pages: HashMap::new() }
    }

    /// Check `rec`'s blocks, then remember what it leaves behind.
    pub fn observe(&mut self, rec: &DecodedWalRecord) {
        self.forget_native_changes(rec);
        for (i, blk) in rec.blocks.iter().enumerate() {
            let Some(img) = &blk.image else {
                self.pages.remove(&blk.tag);
                continue;
            };
            let after = match img.restore() {
                Ok(page) => page,
                Err(_) => {
                    self.pages.remove(&blk.tag); // ingest reports the bad image
                    continue;
                }
            };
            if !blk.apply_image && redo::has_native_redo(rec.rmid) {
                self.check(rec, i, blk, &after);
            }
            if self.pages.len() >= MAX_PAGES {
                self.pages.clear();
            }
            self.pages.insert(blk.tag, after);
        }
    }

    /// Redo block `i` of `rec` on the page before it and compare with `after`.
    fn check(&self, rec: &DecodedWalRecord, i: usize, blk: &DecodedBlock, after: &[u8]) {
        let rmgr = rmgr_name(rec.rmid);
        let record = redo::names::record_name(rec.rmid, rec.info, self.version);
        let mut page = if blk.will_init {
            vec![0u8; BLCKSZ]
        } else if let Some(before) = self.pages.get(&blk.tag) {
            before.to_vec()
        } else {
            metrics::SKIPPED.with_label_values(&[rmgr]).inc();
            return;
        };
        metrics::CHECKED.with_label_values(&[rmgr, record]).inc();
        let redo_rec = RedoRecord::from_decoded(rec, i);
        let outcome = match redo::apply(&mut page, blk.tag, rec.end_lsn, &redo_rec, self.version) {
            Err(e) => Some(format!("native redo failed: {e}")),
            Ok(()) => self.compare(rec.rmid, blk.tag.blkno, &page, after),
        };
        if let Some(what) = outcome {
            metrics::MISMATCHES.with_label_values(&[rmgr, record]).inc();
            let t = &blk.tag;
            warn!(
                "redo check: {rmgr} {record} record at {} (ends {}) on block {} of relation {}/{}/{} fork {}: {what}",
                rec.lsn, rec.end_lsn, t.blkno, t.spc_oid, t.db_oid, t.rel_number, t.fork
            );
        }
    }

    /// `None` if `ours` and PostgreSQL's `theirs` are equal under the masks.
    fn compare(&self, rmid: u8, blkno: u32, ours: &[u8], theirs: &[u8]) -> Option<String> {
        let (mut ours, mut theirs) = (ours.to_vec(), theirs.to_vec());
        mask::mask_page(&mut ours, rmid, blkno, self.version);
        mask::mask_page(&mut theirs, rmid, blkno, self.version);
        let range = mask::first_difference(&ours, &theirs)?;
        let shown = range.start..range.end.min(range.start + 16);
        Some(format!(
            "differs from PostgreSQL's image at bytes {range:?}: ours {:02x?}, PostgreSQL's {:02x?}",
            &ours[shown.clone()],
            &theirs[shown]
        ))
    }

    /// Forget pages that `rec` changes without an image.
    fn forget_native_changes(&mut self, rec: &DecodedWalRecord) {
        let Ok(native) = classify(rec, self.version) else { return };
        match native {
            NativeRecord::Storage(_) | NativeRecord::Database(_) => self.pages.clear(),
            NativeRecord::Xact(XactRecord::Commit(c) | XactRecord::Abort(c))
                if !c.dropped_rels.is_empty() =>
            {
                self.pages.clear()
            }
            NativeRecord::HeapVmClear { vm_clears, .. } => {
                for clear in vm_clears {
                    self.pages.remove(&clear.vm_page());
                }
            }
            _ => {}
        }
    }
}
