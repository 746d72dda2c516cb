//! Redo of the Sequence rmgr (`commands/sequence.c` `seq_redo`), the same
//! in 15-18: its one record kind, `XLOG_SEQ_LOG` (0x00), rebuilds block 0
//! of the sequence (main fork, or the init fork of an unlogged sequence)
//! from scratch: `PageInit` with a `sequence_magic` special space
//! (`SEQ_MAGIC`, MAXALIGNed to 8 bytes), then the record's tuple added as
//! item 1.
//!
//! Record layout: main data = `xl_seq_rec` (the relation's locator, three
//! OIDs, 12 bytes in every major) followed by the whole tuple
//! (`HeapTupleHeader` and data). Block 0 is registered `REGBUF_WILL_INIT`.
//!
//! Invariants: the old page is ignored; the result holds exactly one
//! normal line pointer and the tuple at the top of the free space, the rest
//! zeros. A tuple that does not fit is `Fault::Malformed` (PostgreSQL
//! panics).

use super::{Ctx, Fault};
use crate::consts::{BLCKSZ, INIT_FORKNUM, MAIN_FORKNUM, SIZE_OF_PAGE_HEADER_DATA};
use crate::page::{set_page_lsn, PageHeader};

/// `XLOG_SEQ_LOG`.
const XLOG_SEQ_LOG: u8 = 0x00;
/// `sizeof(xl_seq_rec)`: `RelFileNode`/`RelFileLocator`, three OIDs.
const XL_SEQ_REC_SIZE: usize = 12;
/// `SEQ_MAGIC`, the only field of `sequence_magic`.
const SEQ_MAGIC: u32 = 0x1717;
/// `MAXALIGN(sizeof(sequence_magic))`.
const SPECIAL_SIZE: usize = 8;
/// `PG_PAGE_LAYOUT_VERSION`.
const PAGE_LAYOUT_VERSION: u16 = 4;
/// `sizeof(ItemIdData)`.
const ITEM_ID_SIZE: usize = 4;
const LP_NORMAL: u32 = 1;

pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    if ctx.rec.rmgr_info() != XLOG_SEQ_LOG {
        return Err(Fault::malformed(format!("Sequence: unknown op code {:#04x}", ctx.rec.info)));
    }
    if ctx.rec.target != 0 {
        return Err(Fault::malformed(format!(
            "Sequence LOG redoes block 0, not {}",
            ctx.rec.target
        )));
    }
    if ctx.tag.fork != MAIN_FORKNUM && ctx.tag.fork != INIT_FORKNUM {
        return Err(Fault::malformed(format!("Sequence LOG on fork {}", ctx.tag.fork)));
    }
    let tuple = ctx.rec.main_data.get(XL_SEQ_REC_SIZE..).ok_or_else(|| {
        Fault::malformed(format!("Sequence LOG main data of {} bytes", ctx.rec.main_data.len()))
    })?;
    build_page(page, tuple)?;
    set_page_lsn(page, ctx.lsn.0);
    Ok(())
}

/// `PageInit(page, BLCKSZ, sizeof(sequence_magic))`, the magic, and
/// `PageAddItem(tuple, FirstOffsetNumber)` on the empty page.
fn build_page(page: &mut [u8], tuple: &[u8]) -> Result<(), Fault> {
    let special = BLCKSZ - SPECIAL_SIZE;
    let lower = SIZE_OF_PAGE_HEADER_DATA + ITEM_ID_SIZE;
    let aligned = tuple.len().div_ceil(8) * 8;
    let upper = special.checked_sub(aligned).filter(|&u| u >= lower).ok_or_else(|| {
        Fault::malformed(format!("a sequence tuple of {} bytes does not fit a page", tuple.len()))
    })?;
    page.fill(0);
    PageHeader {
        lsn: 0,
        checksum: 0,
        flags: 0,
        lower: lower as u16,
        upper: upper as u16,
        special: special as u16,
        pagesize_version: BLCKSZ as u16 | PAGE_LAYOUT_VERSION,
        prune_xid: 0,
    }
    .encode(page);
    let item_id = upper as u32 | (LP_NORMAL << 15) | ((tuple.len() as u32) << 17);
    page[SIZE_OF_PAGE_HEADER_DATA..lower].copy_from_slice(&item_id.to_le_bytes());
    page[upper..upper + tuple.len()].copy_from_slice(tuple);
    page[special..special + 4].copy_from_slice(&SEQ_MAGIC.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use utils::lsn::Lsn;

    use super::*;
    use crate::redo::{BlockRef, RedoRecord};
    use crate::wal::BlockTag;
    use crate::PgMajorVersion;

    fn record(info: u8, fork: u8, main_data: Vec<u8>) -> RedoRecord {
        let tag = BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16400, fork, blkno: 0 };
        RedoRecord {
            rmid: crate::wal::rmgr_id::SEQUENCE,
            info,
            xid: 0,
            target: 0,
            blocks: vec![BlockRef { id: 0, tag, will_init: true, has_image: false }],
            block_data: Bytes::new(),
            main_data: Bytes::from(main_data),
        }
    }

    fn run(rec: &RedoRecord, page: &mut [u8]) -> Result<(), Fault> {
        let tag = rec.blocks[0].tag;
        let ctx =
            Ctx { rec: &rec.as_ref(), tag, lsn: Lsn(0x1_0000_0040), version: PgMajorVersion::V16 };
        redo(page, &ctx)
    }

    #[test]
    fn log_rebuilds_the_page_from_the_tuple() {
        let mut main = vec![0x7F, 6, 0, 0, 5, 0, 0, 0, 0x10, 0x40, 0, 0]; // locator 1663/5/16400
        let tuple: Vec<u8> = (1..=41).collect(); // 41 bytes: MAXALIGN 48
        main.extend_from_slice(&tuple);
        let mut page = vec![0xEEu8; BLCKSZ]; // the old page is ignored
        run(&record(0x00, MAIN_FORKNUM, main), &mut page).unwrap();

        let mut want = vec![0u8; BLCKSZ];
        want[0..8].copy_from_slice(&[1, 0, 0, 0, 0x40, 0, 0, 0]); // pd_lsn
        want[12..14].copy_from_slice(&28u16.to_le_bytes()); // pd_lower
        want[14..16].copy_from_slice(&8136u16.to_le_bytes()); // pd_upper = 8184 - 48
        want[16..18].copy_from_slice(&8184u16.to_le_bytes()); // pd_special
        want[18..20].copy_from_slice(&8196u16.to_le_bytes()); // 8192 | version 4
        want[24..28].copy_from_slice(&[0xC8, 0x9F, 0x52, 0x00]); // lp 1: off 8136, normal, len 41
        want[8136..8177].copy_from_slice(&tuple);
        want[8184..8188].copy_from_slice(&[0x17, 0x17, 0, 0]);
        assert_eq!(page, want);
    }

    #[test]
    fn unlogged_sequence_init_fork() {
        let mut main = vec![0u8; 12];
        main.extend_from_slice(&[9u8; 24]);
        let mut page = vec![0u8; BLCKSZ];
        run(&record(0x00, INIT_FORKNUM, main), &mut page).unwrap();
        assert_eq!(&page[8160..8184], &[9u8; 24]);
        assert_eq!(&page[24..28], &(8160u32 | 1 << 15 | 24 << 17).to_le_bytes());
    }

    #[test]
    fn refusals() {
        let mut page = vec![0u8; BLCKSZ];
        let short = record(0x00, MAIN_FORKNUM, vec![0u8; 11]);
        assert!(matches!(run(&short, &mut page), Err(Fault::Malformed(_))));
        let unknown = record(0x10, MAIN_FORKNUM, vec![0u8; 40]);
        assert!(matches!(run(&unknown, &mut page), Err(Fault::Malformed(_))));
        let vm = record(0x00, 2, vec![0u8; 40]);
        assert!(matches!(run(&vm, &mut page), Err(Fault::Malformed(_))));
        let huge = record(0x00, MAIN_FORKNUM, vec![0u8; 12 + 8153]);
        assert!(matches!(run(&huge, &mut page), Err(Fault::Malformed(_))));
        // The largest tuple that fits: MAXALIGN(len) <= 8184 - 28.
        let largest = record(0x00, MAIN_FORKNUM, vec![0u8; 12 + 8152]);
        run(&largest, &mut page).unwrap();
        assert_eq!(&page[12..16], &[28, 0, 32, 0]);
    }
}
