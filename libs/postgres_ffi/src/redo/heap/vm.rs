//! Visibility-map pages (fork 2) registered in heap records, PostgreSQL 18
//! only (`HEAP_*_BLKREF_VM`, `heap_xlog_vm_clear` and the inline update
//! case in `heapam_xlog.c`). 15-17 register no VM page in these records:
//! there the server clears the bits itself (`wal::rmgr::heap`), and a VM
//! block reference in them is malformed.
//!
//! | record | VM block id | heap block whose bits clear | bits | flag (byte, bit) |
//! |---|---|---|---|---|
//! | Heap INSERT | 1 | block 0 | both | (2, 0x01) |
//! | Heap DELETE | 1 | block 0 | both | (7, 0x01) |
//! | Heap LOCK, Heap2 LOCK_UPDATED | 1 | block 0 | all-frozen | (7, 0x01) |
//! | Heap2 MULTI_INSERT | 1 | block 0 | both | (0, 0x01) |
//! | Heap UPDATE / HOT_UPDATE | 2 (new) | new block; and old block if its flag is set and it maps to this VM page | both | (7, 0x02), (7, 0x01) |
//! | | 3 (old) | old block | both | (7, 0x01) |
//!
//! Invariants: only the 2 bits of the named heap block(s) on this VM page
//! change (`visibilitymap_clear_locked`); the VM page must be the one
//! mapping that heap block (PostgreSQL: "wrong buffer passed").

use super::update::{new_and_old_blocks, XlUpdate};
use super::update::{XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED, XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED};
use super::{block_no, has_vm_block_refs, Fields};
use crate::records::{vm_clear_flags, VM_HEAPBLOCKS_PER_PAGE};
use crate::redo::{Ctx, Fault};

pub(crate) const VISIBILITYMAP_ALL_FROZEN: u8 = 0x02;
pub(crate) const VISIBILITYMAP_VALID_BITS: u8 = 0x03;
const XLH_ALL_VISIBLE_CLEARED: u8 = 0x01;

/// Redo of a Heap (rmgr 10) record on its VM block reference.
pub(super) fn redo_heap_record(page: &mut [u8], ctx: &Ctx, op: u8) -> Result<(), Fault> {
    let main = ctx.rec.main_data;
    match op {
        0x00 => clear_for_block0(page, ctx, "Heap INSERT", main, 2, VISIBILITYMAP_VALID_BITS),
        0x10 => clear_for_block0(page, ctx, "Heap DELETE", main, 7, VISIBILITYMAP_VALID_BITS),
        0x60 => clear_for_block0(page, ctx, "Heap LOCK", main, 7, VISIBILITYMAP_ALL_FROZEN),
        0x20 | 0x40 => update(page, ctx),
        _ => Err(Fault::malformed(format!("Heap record {op:#04x} has no VM block to redo"))),
    }
}

/// Redo of a VM block reference (id 1) that clears `bits` of heap block 0
/// when the flag byte at `flag_at` of the main data has
/// `XLH_*_ALL_VISIBLE_CLEARED` / `XLH_LOCK_ALL_FROZEN_CLEARED` (0x01).
pub(crate) fn clear_for_block0(
    page: &mut [u8],
    ctx: &Ctx,
    what: &'static str,
    main: &[u8],
    flag_at: usize,
    bits: u8,
) -> Result<(), Fault> {
    expect_vm_block(ctx, what, &[1])?;
    let flags = Fields { b: main, what }.u8(flag_at)?;
    if flags & XLH_ALL_VISIBLE_CLEARED == 0 {
        return Err(Fault::malformed(format!("{what}: a VM block but no VM bits cleared")));
    }
    redo_vm_clear(page, ctx, block_no(ctx, 0, what)?, bits)
}

fn update(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    expect_vm_block(ctx, "Heap UPDATE", &[2, 3])?;
    let rec = XlUpdate::decode(ctx.rec.main_data)?;
    let (newblk, oldblk) = new_and_old_blocks(ctx)?;
    let old_cleared = rec.flags & XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED != 0;
    if ctx.rec.target == 3 {
        if !old_cleared {
            return Err(Fault::malformed("Heap UPDATE: VM_OLD without old VM clear".into()));
        }
        return redo_vm_clear(page, ctx, oldblk, VISIBILITYMAP_VALID_BITS);
    }
    if rec.flags & XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED == 0 {
        return Err(Fault::malformed("Heap UPDATE: VM_NEW without new VM clear".into()));
    }
    if old_cleared && maps(ctx.tag.blkno, oldblk) {
        redo_vm_clear(page, ctx, oldblk, VISIBILITYMAP_VALID_BITS)?;
    }
    redo_vm_clear(page, ctx, newblk, VISIBILITYMAP_VALID_BITS)
}

fn expect_vm_block(ctx: &Ctx, what: &str, ids: &[u8]) -> Result<(), Fault> {
    if !has_vm_block_refs(ctx.version) || !ids.contains(&ctx.rec.target) {
        return Err(Fault::malformed(format!(
            "{what}: block {} is a VM page, which PostgreSQL {} does not register here",
            ctx.rec.target, ctx.version as u32
        )));
    }
    Ok(())
}

/// VM page `vm_blkno` holds heap block `heap_blkno`'s bits.
fn maps(vm_blkno: u32, heap_blkno: u32) -> bool {
    heap_blkno / VM_HEAPBLOCKS_PER_PAGE == vm_blkno
}

/// `visibilitymap_clear_locked(heap_blkno, bits)` on the VM page `page`
/// (block `ctx.tag`).
pub(crate) fn redo_vm_clear(
    page: &mut [u8],
    ctx: &Ctx,
    heap_blkno: u32,
    bits: u8,
) -> Result<(), Fault> {
    if !maps(ctx.tag.blkno, heap_blkno) {
        return Err(Fault::malformed(format!(
            "VM page {} does not map heap block {heap_blkno}",
            ctx.tag.blkno
        )));
    }
    vm_clear_flags(page, &[heap_blkno], bits);
    Ok(())
}
