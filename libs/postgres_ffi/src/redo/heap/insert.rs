//! Heap INSERT (rmgr 10, 0x00) and Heap2 MULTI_INSERT (rmgr 9, 0x50), both
//! with `XLOG_HEAP_INIT_PAGE`. Same layouts in 15-18:
//! - `xl_heap_insert` (main data, 3 bytes): offnum u16, flags u8; block 0
//!   data: `xl_heap_header` (5 bytes) then the tuple after its fixed header.
//! - `xl_heap_multi_insert` (main data): flags u8 @0, ntuples u16 @2,
//!   offsets u16[ntuples] @4 (absent with INIT_PAGE: offsets are 1..);
//!   block 0 data: per tuple, at a 2-aligned position, an
//!   `xl_multi_insert_tuple` (datalen u16, infomask2 u16, infomask u16,
//!   hoff u8) and `datalen` bytes; nothing may follow the last tuple.
//!
//! Invariants: each tuple goes in at exactly its logged offset (overwrite
//! of an unused line pointer or one past the end, as `PageAddItem(...,
//! overwrite = true, is_heap = true)`), xmin = the record's xid, cmin 0,
//! ctid = its own TID; `PD_ALL_VISIBLE` is cleared by
//! `XLH_INSERT_ALL_VISIBLE_CLEARED` and set by `XLH_INSERT_ALL_FROZEN_SET`
//! (multi-insert only).

use super::htup::{page_set_all_visible, write_tuple, XlHeader, HEADER_LEN, XL_HEAP_HEADER_LEN};
use super::{block_no, Fields, XLOG_HEAP_INIT_PAGE};
use crate::redo::bufpage;
use crate::redo::{Ctx, Fault};

const XLH_INSERT_ALL_VISIBLE_CLEARED: u8 = 0x01;
const XLH_INSERT_ALL_FROZEN_SET: u8 = 0x20;
/// `MaxHeapTupleSize` for 8 KiB pages.
const MAX_HEAP_TUPLE_BYTES: usize = 8160;
const MULTI_INSERT_TUPLE_LEN: usize = 7;

/// Redo of Heap INSERT on block 0.
#[inline]
pub(super) fn insert(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let main = Fields { b: ctx.rec.main_data, what: "Heap INSERT main data" };
    let (offnum, flags) = (main.u16(0)?, main.u8(2)?);
    if ctx.rec.info & XLOG_HEAP_INIT_PAGE != 0 {
        bufpage::page_init(page, 0);
    }
    let data = ctx.rec.block_data;
    if data.len() <= XL_HEAP_HEADER_LEN || data.len() - XL_HEAP_HEADER_LEN > MAX_HEAP_TUPLE_BYTES {
        return Err(Fault::malformed(format!("Heap INSERT: {} bytes of tuple data", data.len())));
    }
    let header = XlHeader::decode(data)?;
    let body = &data[XL_HEAP_HEADER_LEN..];
    put_tuple_with(page, HEADER_LEN + body.len(), offnum, |t| {
        write_tuple(t, header, body, ctx.rec.xid, ctx.tag.blkno, offnum)
    })?;
    if flags & XLH_INSERT_ALL_VISIBLE_CLEARED != 0 {
        page_set_all_visible(page, false);
    }
    Ok(())
}

/// `PageAddItem(page, tuple, offnum, overwrite, is_heap)` after checking the
/// offset is at most one past the end, as heap redo does.
pub(super) fn put_tuple(page: &mut [u8], tuple: &[u8], offnum: u16) -> Result<(), Fault> {
    put_tuple_with(page, tuple.len(), offnum, |dst| dst.copy_from_slice(tuple))
}

/// [`put_tuple`] of a `len`-byte tuple that `fill` writes in place.
#[inline]
fn put_tuple_with(
    page: &mut [u8],
    len: usize,
    offnum: u16,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), Fault> {
    let max = bufpage::max_offset(page);
    if u32::from(offnum) > u32::from(max) + 1 {
        return Err(Fault::page(format!("tuple offset {offnum} is past {max} + 1")));
    }
    let got = bufpage::add_item_with(page, len, offnum, true, true, fill)?;
    if got != offnum {
        return Err(Fault::page(format!("tuple went to offset {got}, not {offnum}")));
    }
    Ok(())
}

/// `xl_heap_multi_insert`, decoded.
pub(crate) struct MultiInsert<'a> {
    pub flags: u8,
    pub ntuples: u16,
    /// The logged offsets (empty with INIT_PAGE).
    pub offsets: Fields<'a>,
}

impl MultiInsert<'_> {
    pub fn decode(main: &[u8], init: bool) -> Result<MultiInsert<'_>, Fault> {
        let m = Fields { b: main, what: "Heap2 MULTI_INSERT main data" };
        let (flags, ntuples) = (m.u8(0)?, m.u16(2)?);
        let offsets = Fields { b: &main[4..], what: "Heap2 MULTI_INSERT offsets" };
        if !init {
            offsets.need(2 * ntuples as usize)?;
        }
        Ok(MultiInsert { flags, ntuples, offsets })
    }

    fn offset(&self, i: u16, init: bool) -> Result<u16, Fault> {
        if init {
            return Ok(i + 1);
        }
        self.offsets.u16(2 * i as usize)
    }
}

/// Redo of Heap2 MULTI_INSERT on block 0.
pub(crate) fn multi_insert(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let init = ctx.rec.info & XLOG_HEAP_INIT_PAGE != 0;
    let rec = MultiInsert::decode(ctx.rec.main_data, init)?;
    let blkno = block_no(ctx, 0, "Heap2 MULTI_INSERT")?;
    if init {
        bufpage::page_init(page, 0);
    }
    let data = ctx.rec.block_data;
    let mut at = 0usize;
    for i in 0..rec.ntuples {
        let offnum = rec.offset(i, init)?;
        at += at & 1;
        let d = Fields { b: data.get(at..).unwrap_or(&[]), what: "Heap2 MULTI_INSERT tuple" };
        d.need(MULTI_INSERT_TUPLE_LEN)?;
        let datalen = d.u16(0)? as usize;
        let header = XlHeader::decode(&d.b[2..])?;
        d.need(MULTI_INSERT_TUPLE_LEN + datalen)?;
        let body = &d.b[MULTI_INSERT_TUPLE_LEN..MULTI_INSERT_TUPLE_LEN + datalen];
        put_tuple_with(page, HEADER_LEN + body.len(), offnum, |t| {
            write_tuple(t, header, body, ctx.rec.xid, blkno, offnum)
        })?;
        at += MULTI_INSERT_TUPLE_LEN + datalen;
    }
    if at != data.len() {
        return Err(Fault::malformed(format!(
            "Heap2 MULTI_INSERT: tuples end at {at} of {} bytes",
            data.len()
        )));
    }
    if rec.flags & XLH_INSERT_ALL_VISIBLE_CLEARED != 0 {
        page_set_all_visible(page, false);
    }
    if rec.flags & XLH_INSERT_ALL_FROZEN_SET != 0 {
        page_set_all_visible(page, true);
    }
    Ok(())
}
