//! Heap2 VISIBLE 0x40 (`heap_xlog_visible`, `visibilitymap_set`). Main data
//! `xl_heap_visible`, the same size in 15-18: conflict xid u32, flags u8
//! @4 (VM bits 0x01 all-visible, 0x02 all-frozen; 16-18 add
//! `VISIBILITYMAP_XLOG_CATALOG_REL` 0x04, never written to the map).
//! Block 0 is the VM page (fork 2), block 1 the heap page (main fork).
//!
//! Invariants: the heap page only gains `PD_ALL_VISIBLE`; the VM page is
//! `PageInit`ed (no special space) when new, then gains the record's bits
//! for heap block 1 and nothing else. PostgreSQL leaves the heap page's
//! LSN alone unless checksums or wal_log_hints are on; [`crate::redo::apply`]
//! stamps it in every case (`pd_lsn` is not compared under masking).

use crate::consts::{MAIN_FORKNUM, SIZE_OF_PAGE_HEADER_DATA, VISIBILITYMAP_FORKNUM};
use crate::page::page_is_new;
use crate::records::{VM_BITS_PER_HEAPBLOCK, VM_HEAPBLOCKS_PER_BYTE, VM_HEAPBLOCKS_PER_PAGE};
use crate::redo::bufpage;
use crate::redo::heap::htup::page_set_all_visible;
use crate::redo::heap::vm::VISIBILITYMAP_VALID_BITS;
use crate::redo::heap::{block_no, Fields};
use crate::redo::{Ctx, Fault};

pub(super) fn visible(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    let flags = Fields { b: ctx.rec.main_data, what: "Heap2 VISIBLE main data" }.u8(4)?;
    match (ctx.rec.target, ctx.tag.fork) {
        (1, MAIN_FORKNUM) => {
            page_set_all_visible(page, true);
            Ok(())
        }
        (0, VISIBILITYMAP_FORKNUM) => {
            let heap_blkno = block_no(ctx, 1, "Heap2 VISIBLE")?;
            if heap_blkno / VM_HEAPBLOCKS_PER_PAGE != ctx.tag.blkno {
                return Err(Fault::malformed(format!(
                    "Heap2 VISIBLE: VM page {} does not map heap block {heap_blkno}",
                    ctx.tag.blkno
                )));
            }
            if page_is_new(page) {
                bufpage::page_init(page, 0);
            }
            vm_set_flags(page, heap_blkno, flags & VISIBILITYMAP_VALID_BITS);
            Ok(())
        }
        (id, fork) => Err(Fault::malformed(format!(
            "Heap2 VISIBLE writes block 0 (VM) and 1 (heap), not block {id} of fork {fork}"
        ))),
    }
}

/// Set `flags` of heap block `heap_blkno` on its VM page.
fn vm_set_flags(page: &mut [u8], heap_blkno: u32, flags: u8) {
    let idx = heap_blkno % VM_HEAPBLOCKS_PER_PAGE;
    let byte = SIZE_OF_PAGE_HEADER_DATA + (idx / VM_HEAPBLOCKS_PER_BYTE) as usize;
    let shift = (idx % VM_HEAPBLOCKS_PER_BYTE) * VM_BITS_PER_HEAPBLOCK;
    page[byte] |= flags << shift;
}
