//! Heap2 pruning, vacuuming and freezing of one heap page (block 0).
//!
//! 15 and 16 (`heap_xlog_prune`, `heap_xlog_vacuum`, `heap_xlog_freeze_page`):
//! - PRUNE 0x10, main data: conflict xid u32, nredirected u16 @4, ndead u16
//!   @6 (16 adds isCatalogRel u8 @8); block data: redirected (from, to)
//!   pairs, now-dead offsets, now-unused offsets (the rest). Then
//!   `PageRepairFragmentation`.
//! - VACUUM 0x20, main data: nunused u16; block data: the offsets, each set
//!   LP_UNUSED; then `PageTruncateLinePointerArray`.
//! - FREEZE_PAGE 0x30. 15: main cutoff xid u32, ntuples u16 @4; block data
//!   `xl_heap_freeze_tuple[ntuples]` (12 bytes: xmax u32, offset u16,
//!   infomask2 u16, infomask u16, frzflags u8, pad). 16: main conflict xid
//!   u32, nplans u16 @4, isCatalogRel u8 @6; block data
//!   `xl_heap_freeze_plan[nplans]` (12 bytes: xmax u32, infomask2 u16,
//!   infomask u16, frzflags u8, pad, ntuples u16), then every plan's
//!   offsets u16 in plan order.
//!
//! 17 and 18 (`heap_xlog_prune_freeze`, one layout for 0x10/0x20/0x30):
//! main data `xl_heap_prune` = reason u8, flags u8 (+ conflict xid u32,
//! unaligned, with `XLHP_HAS_CONFLICT_HORIZON`); block data, each part only
//! with its flag: freeze plans (nplans u16, 2 pad, 12-byte
//! `xlhp_freeze_plan`s as in 16), redirected (n u16, pairs), dead (n u16,
//! offsets), unused (n u16, offsets), then the freeze offsets. Line pointers
//! change first; then `PageTruncateLinePointerArray` without
//! `XLHP_CLEANUP_LOCK`, else `PageRepairFragmentation`; then freezing.
//!
//! Invariants: every offset must name a line pointer on the page and every
//! frozen one an `LP_NORMAL` tuple; the block data must be consumed exactly.
//! `pd_prune_xid` is left as is (PostgreSQL does not update it here).

use crate::redo::bufpage::{self, ItemId, LP_DEAD, LP_REDIRECT, LP_UNUSED};
use crate::redo::heap::normal_tuple_mut;
use crate::redo::heap::Fields;
use crate::redo::{Ctx, Fault};
use crate::PgMajorVersion;

const XLHP_CLEANUP_LOCK: u8 = 1 << 2;
const XLHP_HAS_FREEZE_PLANS: u8 = 1 << 4;
const XLHP_HAS_REDIRECTIONS: u8 = 1 << 5;
const XLHP_HAS_DEAD_ITEMS: u8 = 1 << 6;
const XLHP_HAS_NOW_UNUSED_ITEMS: u8 = 1 << 7;
const XLH_FREEZE_XVAC: u8 = 0x02;
const XLH_INVALID_XVAC: u8 = 0x04;
const FROZEN_TRANSACTION_ID: u32 = 2;
const FREEZE_PLAN_LEN: usize = 12;

/// Offsets as logged (little-endian u16s).
fn offsets(b: &[u8], what: &str) -> Result<Vec<u16>, Fault> {
    if !b.len().is_multiple_of(2) {
        return Err(Fault::malformed(format!("{what}: {} bytes of offsets", b.len())));
    }
    Ok(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect())
}

/// `heap_page_prune_execute`.
fn prune_execute(
    page: &mut [u8],
    lp_truncate_only: bool,
    redirected: &[u16],
    dead: &[u16],
    unused: &[u16],
) -> Result<(), Fault> {
    for pair in redirected.chunks_exact(2) {
        set_lp(page, pair[0], ItemId { off: pair[1], flags: LP_REDIRECT, len: 0 })?;
    }
    for &off in dead {
        set_lp(page, off, ItemId { off: 0, flags: LP_DEAD, len: 0 })?;
    }
    for &off in unused {
        set_lp(page, off, ItemId { off: 0, flags: LP_UNUSED, len: 0 })?;
    }
    if lp_truncate_only {
        bufpage::truncate_line_pointer_array(page);
        Ok(())
    } else {
        bufpage::repair_fragmentation(page)
    }
}

fn set_lp(page: &mut [u8], off: u16, id: ItemId) -> Result<(), Fault> {
    bufpage::item_id(page, off)?;
    bufpage::set_item_id(page, off, id)
}

/// One freeze plan: what `heap_execute_freeze_tuple` writes.
#[derive(Clone, Copy)]
struct FreezePlan {
    xmax: u32,
    infomask2: u16,
    infomask: u16,
    frzflags: u8,
}

fn freeze_tuple(page: &mut [u8], off: u16, plan: FreezePlan) -> Result<(), Fault> {
    use crate::redo::heap::htup as f;
    let t = normal_tuple_mut(page, off)?;
    f::set_xmax(t, plan.xmax);
    if plan.frzflags & XLH_FREEZE_XVAC != 0 {
        f::set_xvac(t, FROZEN_TRANSACTION_ID);
    }
    if plan.frzflags & XLH_INVALID_XVAC != 0 {
        f::set_xvac(t, 0);
    }
    f::set_infomask(t, plan.infomask);
    f::set_infomask2(t, plan.infomask2);
    Ok(())
}

/// 16-18's 12-byte plan: xmax, infomask2, infomask, frzflags, pad, ntuples.
fn decode_plans(b: &Fields, nplans: usize) -> Result<Vec<(FreezePlan, u16)>, Fault> {
    b.need(nplans * FREEZE_PLAN_LEN)?;
    (0..nplans)
        .map(|i| {
            let at = i * FREEZE_PLAN_LEN;
            let plan = FreezePlan {
                xmax: b.u32(at)?,
                infomask2: b.u16(at + 4)?,
                infomask: b.u16(at + 6)?,
                frzflags: b.u8(at + 8)?,
            };
            Ok((plan, b.u16(at + 10)?))
        })
        .collect()
}

/// Freeze per plan, taking each plan's offsets in turn from `offs`, which
/// must be used up exactly.
fn execute_plans(
    page: &mut [u8],
    plans: &[(FreezePlan, u16)],
    offs: &[u16],
    what: &str,
) -> Result<(), Fault> {
    let total: usize = plans.iter().map(|(_, n)| *n as usize).sum();
    if total != offs.len() {
        return Err(Fault::malformed(format!(
            "{what}: plans freeze {total} tuples, {} offsets logged",
            offs.len()
        )));
    }
    let mut next = offs.iter();
    for (plan, n) in plans {
        for &off in next.by_ref().take(*n as usize) {
            freeze_tuple(page, off, *plan)?;
        }
    }
    Ok(())
}

/// 15/16 PRUNE.
pub(super) fn prune_v15(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let main = Fields { b: ctx.rec.main_data, what: "Heap2 PRUNE main data" };
    main.need(if ctx.version == PgMajorVersion::V15 { 8 } else { 9 })?;
    let (nredirected, ndead) = (main.u16(4)? as usize, main.u16(6)? as usize);
    let all = offsets(ctx.rec.block_data, "Heap2 PRUNE")?;
    if all.len() < 2 * nredirected + ndead {
        return Err(Fault::malformed(format!(
            "Heap2 PRUNE: {} offsets for {nredirected} redirects and {ndead} dead",
            all.len()
        )));
    }
    let (redirected, rest) = all.split_at(2 * nredirected);
    let (dead, unused) = rest.split_at(ndead);
    prune_execute(page, false, redirected, dead, unused)
}

/// 15/16 VACUUM.
pub(super) fn vacuum_v15(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let nunused = Fields { b: ctx.rec.main_data, what: "Heap2 VACUUM main data" }.u16(0)?;
    let all = offsets(ctx.rec.block_data, "Heap2 VACUUM")?;
    let Some(unused) = all.get(..nunused as usize) else {
        return Err(Fault::malformed(format!("Heap2 VACUUM: {} of {nunused} offsets", all.len())));
    };
    for &off in unused {
        set_lp(page, off, ItemId { off: 0, flags: LP_UNUSED, len: 0 })?;
    }
    bufpage::truncate_line_pointer_array(page);
    Ok(())
}

/// 15/16 FREEZE_PAGE.
pub(super) fn freeze_page_v15(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let main = Fields { b: ctx.rec.main_data, what: "Heap2 FREEZE_PAGE main data" };
    let n = main.u16(4)? as usize;
    let data = Fields { b: ctx.rec.block_data, what: "Heap2 FREEZE_PAGE block data" };
    if ctx.version == PgMajorVersion::V16 {
        main.need(7)?;
        let plans = decode_plans(&data, n)?;
        let offs = offsets(&data.b[n * FREEZE_PLAN_LEN..], "Heap2 FREEZE_PAGE")?;
        return execute_plans(page, &plans, &offs, "Heap2 FREEZE_PAGE");
    }
    data.need(n * FREEZE_PLAN_LEN)?;
    for i in 0..n {
        let at = i * FREEZE_PLAN_LEN;
        let plan = FreezePlan {
            xmax: data.u32(at)?,
            infomask2: data.u16(at + 6)?,
            infomask: data.u16(at + 8)?,
            frzflags: data.u8(at + 10)?,
        };
        freeze_tuple(page, data.u16(at + 4)?, plan)?;
    }
    Ok(())
}

/// 17/18 PRUNE_ON_ACCESS, PRUNE_VACUUM_SCAN, PRUNE_VACUUM_CLEANUP.
pub(super) fn prune_freeze_v17(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let flags = Fields { b: ctx.rec.main_data, what: "Heap2 PRUNE main data" }.u8(1)?;
    let data = ctx.rec.block_data;
    let mut at = 0usize;
    let mut plans = Vec::new();
    if flags & XLHP_HAS_FREEZE_PLANS != 0 {
        let b = Fields { b: data, what: "Heap2 PRUNE freeze plans" };
        let nplans = b.u16(0)? as usize;
        plans = decode_plans(&Fields { b: &data[4.min(data.len())..], what: b.what }, nplans)?;
        at = 4 + nplans * FREEZE_PLAN_LEN;
    }
    let mut parts: [Vec<u16>; 3] = Default::default();
    let kinds =
        [(XLHP_HAS_REDIRECTIONS, 2), (XLHP_HAS_DEAD_ITEMS, 1), (XLHP_HAS_NOW_UNUSED_ITEMS, 1)];
    for (part, (flag, per)) in parts.iter_mut().zip(kinds) {
        if flags & flag == 0 {
            continue;
        }
        let b = Fields { b: data.get(at..).unwrap_or(&[]), what: "Heap2 PRUNE items" };
        let n = b.u16(0)? as usize * per;
        b.need(2 + 2 * n)?;
        *part = offsets(&b.b[2..2 + 2 * n], b.what)?;
        at += 2 + 2 * n;
    }
    if at > data.len() {
        return Err(Fault::malformed(format!("Heap2 PRUNE: parts end at {at} of {}", data.len())));
    }
    let [redirected, dead, unused] = &parts;
    if !redirected.is_empty() || !dead.is_empty() || !unused.is_empty() {
        let truncate_only = flags & XLHP_CLEANUP_LOCK == 0;
        prune_execute(page, truncate_only, redirected, dead, unused)?;
    }
    let frz = offsets(data.get(at..).unwrap_or(&[]), "Heap2 PRUNE freeze offsets")?;
    execute_plans(page, &plans, &frz, "Heap2 PRUNE")
}
