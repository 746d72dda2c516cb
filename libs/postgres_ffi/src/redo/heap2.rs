//! Heap2 (rmgr 9) redo (`heapam_xlog.h`; redo in `heapam.c` in 15-17,
//! `heapam_xlog.c` in 18; `pruneheap.c`, `visibilitymap.c`). Opcode is
//! `info & 0x70`; 0x80 is `XLOG_HEAP_INIT_PAGE` (MULTI_INSERT only).
//!
//! | opcode | 15, 16 | 17, 18 | blocks |
//! |---|---|---|---|
//! | 0x00 | REWRITE | REWRITE | none |
//! | 0x10 | PRUNE | PRUNE_ON_ACCESS | 0 heap |
//! | 0x20 | VACUUM | PRUNE_VACUUM_SCAN | 0 heap |
//! | 0x30 | FREEZE_PAGE | PRUNE_VACUUM_CLEANUP | 0 heap |
//! | 0x40 | VISIBLE | VISIBLE | 0 VM, 1 heap |
//! | 0x50 | MULTI_INSERT | MULTI_INSERT | 0 heap (18: 1 VM) |
//! | 0x60 | LOCK_UPDATED | LOCK_UPDATED | 0 heap (18: 1 VM) |
//! | 0x70 | NEW_CID | NEW_CID | none |
//!
//! The prune/vacuum/freeze layouts differ per major ([`prune`]); VISIBLE,
//! MULTI_INSERT and LOCK_UPDATED are the same in 15-18.
//!
//! Invariants: as for Heap ([`super::heap`]): only the target block, in the
//! fork its block id names, is written; what the page or record does not
//! back is a `Fault`.

mod prune;
mod visible;

#[cfg(test)]
mod tests;

use super::heap::{self, expect_main_block};
use super::{Ctx, Fault};
use crate::consts::VISIBILITYMAP_FORKNUM;
use crate::PgMajorVersion;

const HEAP_OPMASK: u8 = 0x70;

pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let op = ctx.rec.info & HEAP_OPMASK;
    let vm = ctx.tag.fork == VISIBILITYMAP_FORKNUM;
    let old_prune = ctx.version <= PgMajorVersion::V16;
    match op {
        0x10..=0x30 if old_prune => {
            expect_main_block(ctx, "Heap2 PRUNE/VACUUM/FREEZE_PAGE", &[0])?;
            match op {
                0x10 => prune::prune_v15(page, ctx),
                0x20 => prune::vacuum_v15(page, ctx),
                _ => prune::freeze_page_v15(page, ctx),
            }
        }
        0x10..=0x30 => {
            expect_main_block(ctx, "Heap2 PRUNE", &[0])?;
            prune::prune_freeze_v17(page, ctx)
        }
        0x40 => visible::visible(page, ctx),
        0x50 if vm => {
            let main = ctx.rec.main_data;
            let bits = heap::vm::VISIBILITYMAP_VALID_BITS;
            heap::vm::clear_for_block0(page, ctx, "Heap2 MULTI_INSERT", main, 0, bits)
        }
        0x50 => {
            expect_main_block(ctx, "Heap2 MULTI_INSERT", &[0])?;
            heap::multi_insert(page, ctx)
        }
        0x60 if vm => {
            let main = ctx.rec.main_data;
            let bits = heap::vm::VISIBILITYMAP_ALL_FROZEN;
            heap::vm::clear_for_block0(page, ctx, "Heap2 LOCK_UPDATED", main, 7, bits)
        }
        0x60 => {
            expect_main_block(ctx, "Heap2 LOCK_UPDATED", &[0])?;
            heap::lock_updated(page, ctx)
        }
        _ => Err(Fault::malformed(format!("Heap2 record {op:#04x} has no page to redo"))),
    }
}
