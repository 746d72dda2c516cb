//! Heap (rmgr 10) redo (`heapam_xlog.h`; redo in `heapam.c` in 15-17,
//! `heapam_xlog.c` in 18). Opcode is `info & 0x70`; 0x80 is
//! `XLOG_HEAP_INIT_PAGE` (the page starts from `PageInit` with no special
//! space). The heap-page logic and every record layout it reads are the
//! same in 15-18 (16 renamed `xl_heap_lock.locking_xid`; 18 added
//! invalidation messages after `xl_heap_inplace.offnum`, which redo of the
//! page does not read).
//!
//! | record | main-fork block | VM block (18 only, fork 2) |
//! |---|---|---|
//! | INSERT 0x00 | 0 | 1 |
//! | DELETE 0x10 | 0 | 1 |
//! | UPDATE 0x20 / HOT_UPDATE 0x40 | 0 new, 1 old (if another page) | 2 new, 3 old |
//! | TRUNCATE 0x30 | none | none |
//! | CONFIRM 0x50 | 0 | none |
//! | LOCK 0x60 | 0 | 1 |
//! | INPLACE 0x70 | 0 | none |
//!
//! Invariants: only the target block is written, and only in the fork its
//! block id names; an offset, flag or length the page or record does not
//! back is a `Fault`, where PostgreSQL would PANIC. In 15-17 the server
//! clears VM bits itself (no VM block reference); in 18 redo of the VM
//! block reference clears them here ([`vm`]).

pub(crate) mod htup;
mod insert;
mod tuple_ops;
mod update;
pub(crate) mod vm;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use htup::normal_tuple_mut;
pub(crate) use insert::multi_insert;
pub(crate) use tuple_ops::lock_updated;

use super::{Ctx, Fault};
use crate::consts::{MAIN_FORKNUM, VISIBILITYMAP_FORKNUM};
use crate::PgMajorVersion;

pub const XLOG_HEAP_INIT_PAGE: u8 = 0x80;
const HEAP_OPMASK: u8 = 0x70;
const XLOG_HEAP_INSERT: u8 = 0x00;
const XLOG_HEAP_DELETE: u8 = 0x10;
const XLOG_HEAP_UPDATE: u8 = 0x20;
const XLOG_HEAP_TRUNCATE: u8 = 0x30;
const XLOG_HEAP_HOT_UPDATE: u8 = 0x40;
const XLOG_HEAP_CONFIRM: u8 = 0x50;
const XLOG_HEAP_LOCK: u8 = 0x60;
const XLOG_HEAP_INPLACE: u8 = 0x70;

pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let op = ctx.rec.info & HEAP_OPMASK;
    if ctx.tag.fork == VISIBILITYMAP_FORKNUM {
        return vm::redo_heap_record(page, ctx, op);
    }
    match op {
        XLOG_HEAP_INSERT => {
            expect_main_block(ctx, "Heap INSERT", &[0])?;
            insert::insert(page, ctx)
        }
        XLOG_HEAP_DELETE => {
            expect_main_block(ctx, "Heap DELETE", &[0])?;
            tuple_ops::delete(page, ctx)
        }
        XLOG_HEAP_UPDATE | XLOG_HEAP_HOT_UPDATE => {
            expect_main_block(ctx, "Heap UPDATE", &[0, 1])?;
            update::update(page, ctx, op == XLOG_HEAP_HOT_UPDATE)
        }
        XLOG_HEAP_TRUNCATE => {
            Err(Fault::malformed("Heap TRUNCATE has no page to redo (block references)".into()))
        }
        XLOG_HEAP_CONFIRM => {
            expect_main_block(ctx, "Heap CONFIRM", &[0])?;
            tuple_ops::confirm(page, ctx)
        }
        XLOG_HEAP_LOCK => {
            expect_main_block(ctx, "Heap LOCK", &[0])?;
            tuple_ops::lock(page, ctx)
        }
        XLOG_HEAP_INPLACE => {
            expect_main_block(ctx, "Heap INPLACE", &[0])?;
            tuple_ops::inplace(page, ctx)
        }
        _ => Err(Fault::unsupported(format!("Heap record kind {op:#04x}"))),
    }
}

/// The target must be one of `ids` and in the main fork.
#[inline]
pub(crate) fn expect_main_block(ctx: &Ctx, what: &str, ids: &[u8]) -> Result<(), Fault> {
    if !ids.contains(&ctx.rec.target) || ctx.tag.fork != MAIN_FORKNUM {
        return Err(not_a_main_block(what, ctx.rec.target, ctx.tag.fork));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn not_a_main_block(what: &str, id: u8, fork: u8) -> Fault {
    Fault::malformed(format!(
        "{what}: block {id} of fork {fork} is not a heap page this record writes"
    ))
}

/// The block number of block reference `id` of the record.
pub(crate) fn block_no(ctx: &Ctx, id: u8, what: &str) -> Result<u32, Fault> {
    ctx.rec
        .block(id)
        .map(|b| b.tag.blkno)
        .ok_or_else(|| Fault::malformed(format!("{what}: no block reference {id}")))
}

/// Whether this major registers the VM page in heap records.
pub(crate) fn has_vm_block_refs(version: PgMajorVersion) -> bool {
    version >= PgMajorVersion::V18
}

/// Little-endian reads of fixed record parts, with the record name in errors.
pub(crate) struct Fields<'a> {
    pub b: &'a [u8],
    pub what: &'static str,
}

impl Fields<'_> {
    #[inline]
    pub fn need(&self, len: usize) -> Result<(), Fault> {
        if self.b.len() < len {
            return Err(too_short(self.what, self.b.len(), len));
        }
        Ok(())
    }

    pub fn u8(&self, at: usize) -> Result<u8, Fault> {
        self.need(at + 1)?;
        Ok(self.b[at])
    }

    pub fn u16(&self, at: usize) -> Result<u16, Fault> {
        self.need(at + 2)?;
        Ok(u16::from_le_bytes([self.b[at], self.b[at + 1]]))
    }

    pub fn u32(&self, at: usize) -> Result<u32, Fault> {
        self.need(at + 4)?;
        Ok(u32::from_le_bytes([self.b[at], self.b[at + 1], self.b[at + 2], self.b[at + 3]]))
    }
}

/// The fault of [`Fields::need`]; its arguments by value, so the hot path
/// keeps `Fields` in registers.
#[cold]
#[inline(never)]
fn too_short(what: &str, have: usize, len: usize) -> Fault {
    Fault::malformed(format!("{what}: {have} bytes, needs at least {len}"))
}
