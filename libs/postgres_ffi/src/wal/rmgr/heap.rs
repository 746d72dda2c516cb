//! Visibility-map clears of Heap (rmgr 10) and Heap2 (rmgr 9) records
//! (`access/heapam_xlog.h`, `visibilitymapdefs.h`). Opcode is
//! `info & 0x70` in both; 0x80 is `XLOG_HEAP_INIT_PAGE`.
//!
//! | record | flags byte at | bit | heap block | VM bits cleared |
//! |---|---|---|---|---|
//! | Heap INSERT 0x00 (`xl_heap_insert`, 3 bytes) | 2 | 0x01 | block 0 | both |
//! | Heap DELETE 0x10 (`xl_heap_delete`, 8) | 7 | 0x01 | block 0 | both |
//! | Heap UPDATE 0x20 / HOT_UPDATE 0x40 (`xl_heap_update`, 14) | 7 | 0x01 | old: block 1, else block 0 | both |
//! |  |  | 0x02 | new: block 0 | both |
//! | Heap LOCK 0x60 (`xl_heap_lock`, 8) | 7 | 0x01 | block 0 | all-frozen |
//! | Heap2 MULTI_INSERT 0x50 (`xl_heap_multi_insert`) | 0 | 0x01 | block 0 | both |
//! | Heap2 LOCK_UPDATED 0x60 (`xl_heap_lock_updated`, 8) | 7 | 0x01 | block 0 | all-frozen |
//!
//! VM bits: 0x01 all-visible, 0x02 all-frozen. These offsets and values
//! are the same in 15, 16, 17 and 18: 16 renamed `xl_heap_lock.locking_xid`
//! to `xmax` and made `infobits_set` a `uint8` (same size); 17 replaced
//! the Heap2 PRUNE/VACUUM/FREEZE_PAGE records (0x10-0x30) by
//! PRUNE_ON_ACCESS/PRUNE_VACUUM_SCAN/PRUNE_VACUUM_CLEANUP, which clear
//! no VM bits (they are images-only here in every version).
//!
//! PostgreSQL 18 also registers the VM page itself as a block reference
//! (fork 2) in INSERT, DELETE, UPDATE, HOT_UPDATE, LOCK and MULTI_INSERT
//! when it clears bits (`HEAP_*_BLKREF_VM`; UPDATE has one for the new and
//! one for the old heap page, ids 2 and 3). Under consistency checking
//! that reference carries the VM page's image, which then overrides the
//! native clear; without an image, the native clear is its redo. That is
//! why the old heap page of an update is looked up by block id 1, never as
//! "the last block reference".

use super::super::{BlockTag, DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;
use super::NativeRecord;
use crate::consts::{MAIN_FORKNUM, VISIBILITYMAP_FORKNUM};
use crate::records::VM_HEAPBLOCKS_PER_PAGE;
use crate::wal::rmgr_id;

/// Opcode mask of Heap and Heap2 `xl_info`.
pub const HEAP_OPMASK: u8 = 0x70;
pub const XLOG_HEAP_INIT_PAGE: u8 = 0x80;

pub const XLOG_HEAP_INSERT: u8 = 0x00;
pub const XLOG_HEAP_DELETE: u8 = 0x10;
pub const XLOG_HEAP_UPDATE: u8 = 0x20;
pub const XLOG_HEAP_HOT_UPDATE: u8 = 0x40;
pub const XLOG_HEAP_LOCK: u8 = 0x60;
pub const XLOG_HEAP2_MULTI_INSERT: u8 = 0x50;
pub const XLOG_HEAP2_LOCK_UPDATED: u8 = 0x60;

pub const XLH_INSERT_ALL_VISIBLE_CLEARED: u8 = 0x01;
pub const XLH_DELETE_ALL_VISIBLE_CLEARED: u8 = 0x01;
pub const XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED: u8 = 0x01;
pub const XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED: u8 = 0x02;
pub const XLH_LOCK_ALL_FROZEN_CLEARED: u8 = 0x01;

pub const VISIBILITYMAP_ALL_VISIBLE: u8 = 0x01;
pub const VISIBILITYMAP_ALL_FROZEN: u8 = 0x02;
pub const VISIBILITYMAP_VALID_BITS: u8 = VISIBILITYMAP_ALL_VISIBLE | VISIBILITYMAP_ALL_FROZEN;

/// Clear `flags` of heap block `heap_block` in its relation's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmClear {
    /// The heap page (main fork) whose VM bits are cleared.
    pub heap_block: BlockTag,
    /// `VISIBILITYMAP_*` bits to clear.
    pub flags: u8,
}

impl VmClear {
    /// The VM page holding the bits (fork 2 of the same relation).
    pub fn vm_page(&self) -> BlockTag {
        BlockTag {
            fork: VISIBILITYMAP_FORKNUM,
            blkno: self.heap_block.blkno / VM_HEAPBLOCKS_PER_PAGE,
            ..self.heap_block
        }
    }
}

/// Where a record keeps its VM-clear flags: (name, flags offset, bit, which
/// heap block, VM bits).
struct Rule {
    offset: usize,
    bit: u8,
    target: Target,
    vm_bits: u8,
}

#[derive(Clone, Copy)]
enum Target {
    /// Block 0.
    New,
    /// Block 1 if the record has one, else block 0 (same page).
    Old,
}

const fn rule(offset: usize, bit: u8, target: Target, vm_bits: u8) -> Rule {
    Rule { offset, bit, target, vm_bits }
}

fn rules(rmid: u8, op: u8) -> Option<(&'static str, usize, &'static [Rule])> {
    const BOTH: u8 = VISIBILITYMAP_VALID_BITS;
    const FROZEN: u8 = VISIBILITYMAP_ALL_FROZEN;
    static INSERT: [Rule; 1] = [rule(2, XLH_INSERT_ALL_VISIBLE_CLEARED, Target::New, BOTH)];
    static DELETE: [Rule; 1] = [rule(7, XLH_DELETE_ALL_VISIBLE_CLEARED, Target::New, BOTH)];
    static UPDATE: [Rule; 2] = [
        rule(7, XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED, Target::Old, BOTH),
        rule(7, XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED, Target::New, BOTH),
    ];
    static LOCK: [Rule; 1] = [rule(7, XLH_LOCK_ALL_FROZEN_CLEARED, Target::New, FROZEN)];
    static MULTI_INSERT: [Rule; 1] = [rule(0, XLH_INSERT_ALL_VISIBLE_CLEARED, Target::New, BOTH)];
    // (record name, sizeof the fixed main data, rules)
    Some(match (rmid, op) {
        (rmgr_id::HEAP, XLOG_HEAP_INSERT) => ("Heap INSERT", 3, &INSERT),
        (rmgr_id::HEAP, XLOG_HEAP_DELETE) => ("Heap DELETE", 8, &DELETE),
        (rmgr_id::HEAP, XLOG_HEAP_UPDATE) => ("Heap UPDATE", 14, &UPDATE),
        (rmgr_id::HEAP, XLOG_HEAP_HOT_UPDATE) => ("Heap HOT_UPDATE", 14, &UPDATE),
        (rmgr_id::HEAP, XLOG_HEAP_LOCK) => ("Heap LOCK", 8, &LOCK),
        (rmgr_id::HEAP2, XLOG_HEAP2_MULTI_INSERT) => ("Heap2 MULTI_INSERT", 4, &MULTI_INSERT),
        (rmgr_id::HEAP2, XLOG_HEAP2_LOCK_UPDATED) => ("Heap2 LOCK_UPDATED", 8, &LOCK),
        _ => return None,
    })
}

/// `Some(HeapVmClear)` if the record clears VM bits, `None` otherwise
/// (images only).
pub(crate) fn decode(rec: &DecodedWalRecord) -> Result<Option<NativeRecord>, WalDecodeError> {
    let Some((what, fixed_len, rules)) = rules(rec.rmid, rec.info & HEAP_OPMASK) else {
        return Ok(None);
    };
    let mut c = Cursor::new(rec, what);
    let fixed = c.bytes(fixed_len, "fixed part")?;
    let mut vm_clears: Vec<VmClear> = Vec::new();
    for r in rules {
        if fixed[r.offset] & r.bit == 0 {
            continue;
        }
        let heap_block = heap_block(rec, &c, r.target)?;
        match vm_clears.iter_mut().find(|v| v.heap_block == heap_block) {
            Some(v) => v.flags |= r.vm_bits,
            None => vm_clears.push(VmClear { heap_block, flags: r.vm_bits }),
        }
    }
    if vm_clears.is_empty() {
        return Ok(None);
    }
    let without_image = rec
        .blocks
        .iter()
        .filter(|b| b.image.is_none())
        .filter(|b| {
            b.tag.fork != VISIBILITYMAP_FORKNUM || !vm_clears.iter().any(|v| v.vm_page() == b.tag)
        })
        .map(|b| b.tag)
        .collect();
    Ok(Some(NativeRecord::HeapVmClear { vm_clears, without_image }))
}

fn heap_block(
    rec: &DecodedWalRecord,
    c: &Cursor,
    target: Target,
) -> Result<BlockTag, WalDecodeError> {
    let find = |id: u8| rec.blocks.iter().find(|b| b.id == id);
    let block = match target {
        Target::New => find(0),
        Target::Old => find(1).or_else(|| find(0)),
    };
    let Some(block) = block else {
        return Err(c.error("clears visibility-map bits but has no heap block reference 0"));
    };
    if block.tag.fork != MAIN_FORKNUM {
        return Err(c.error(format_args!(
            "clears visibility-map bits of block {} of fork {}, not of a heap page",
            block.id, block.tag.fork
        )));
    }
    Ok(block.tag)
}

#[cfg(test)]
mod tests {
    use super::super::classify;
    use super::super::testutil::*;
    use super::*;
    use crate::PgMajorVersion;

    fn heap_record(rmid: u8, info: u8, main: &[u8], heap_blocks: &[(u8, u32)]) -> DecodedWalRecord {
        let mut rec = record(rmid, info, main);
        for &(id, blkno) in heap_blocks {
            rec.blocks.push(block(id, MAIN_FORKNUM, blkno, true));
        }
        rec
    }

    fn clears(rec: &DecodedWalRecord) -> Vec<(u32, u8)> {
        let mut out = None;
        for v in PgMajorVersion::ALL {
            let got = match classify(rec, v).unwrap() {
                NativeRecord::HeapVmClear { vm_clears, .. } => {
                    vm_clears.iter().map(|c| (c.heap_block.blkno, c.flags)).collect()
                }
                NativeRecord::ImagesOnly { .. } => vec![],
                other => panic!("{other:?}"),
            };
            if let Some(prev) = &out {
                assert_eq!(prev, &got, "same in every version");
            }
            out = Some(got);
        }
        out.unwrap()
    }

    #[test]
    fn insert() {
        let main = Le::new().u16(3).u8(XLH_INSERT_ALL_VISIBLE_CLEARED);
        let rec = heap_record(rmgr_id::HEAP, XLOG_HEAP_INSERT, main.bytes(), &[(0, 40)]);
        assert_eq!(clears(&rec), vec![(40, VISIBILITYMAP_VALID_BITS)]);
        // INIT_PAGE does not change the opcode.
        let rec = heap_record(
            rmgr_id::HEAP,
            XLOG_HEAP_INSERT | XLOG_HEAP_INIT_PAGE,
            main.bytes(),
            &[(0, 41)],
        );
        assert_eq!(clears(&rec), vec![(41, 3)]);
        let none = Le::new().u16(3).u8(0x02); // XLH_INSERT_LAST_IN_MULTI: no clear
        let rec = heap_record(rmgr_id::HEAP, XLOG_HEAP_INSERT, none.bytes(), &[(0, 40)]);
        assert_eq!(clears(&rec), vec![]);
        assert_truncations_fail(main.bytes(), |m| {
            classify(
                &heap_record(rmgr_id::HEAP, XLOG_HEAP_INSERT, m, &[(0, 1)]),
                PgMajorVersion::V15,
            )
        });
    }

    #[test]
    fn delete_and_lock() {
        // xmax, offnum, infobits_set, flags
        let main = Le::new().u32(900).u16(2).u8(0x10).u8(0x01);
        let rec = heap_record(rmgr_id::HEAP, XLOG_HEAP_DELETE, main.bytes(), &[(0, 7)]);
        assert_eq!(clears(&rec), vec![(7, VISIBILITYMAP_VALID_BITS)]);
        let rec = heap_record(rmgr_id::HEAP, XLOG_HEAP_LOCK, main.bytes(), &[(0, 7)]);
        assert_eq!(clears(&rec), vec![(7, VISIBILITYMAP_ALL_FROZEN)]);
        let rec = heap_record(rmgr_id::HEAP2, XLOG_HEAP2_LOCK_UPDATED, main.bytes(), &[(0, 8)]);
        assert_eq!(clears(&rec), vec![(8, VISIBILITYMAP_ALL_FROZEN)]);
        // The infobits byte (6) is not the flags byte (7).
        let main = Le::new().u32(900).u16(2).u8(0x01).u8(0x00);
        let rec = heap_record(rmgr_id::HEAP, XLOG_HEAP_DELETE, main.bytes(), &[(0, 7)]);
        assert_eq!(clears(&rec), vec![]);
        let err = classify(
            &heap_record(rmgr_id::HEAP, XLOG_HEAP_LOCK, &main.bytes()[..7], &[(0, 7)]),
            PgMajorVersion::V16,
        );
        assert_err(err.unwrap_err(), "Heap LOCK: main data is 7 bytes");
    }

    fn update_main(flags: u8) -> Le {
        // old_xmax, old_offnum, old_infobits_set, flags, new_xmax, new_offnum
        Le::new().u32(900).u16(2).u8(0).u8(flags).u32(0).u16(5)
    }

    #[test]
    fn update_old_and_new_pages() {
        let both = XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED | XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED;
        let rec = heap_record(
            rmgr_id::HEAP,
            XLOG_HEAP_UPDATE,
            update_main(both).bytes(),
            &[(0, 12), (1, 3)],
        );
        assert_eq!(clears(&rec), vec![(3, 3), (12, 3)]);
        let old = XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED;
        let rec = heap_record(
            rmgr_id::HEAP,
            XLOG_HEAP_UPDATE,
            update_main(old).bytes(),
            &[(0, 12), (1, 3)],
        );
        assert_eq!(clears(&rec), vec![(3, 3)]);
        let new = XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED;
        let rec = heap_record(
            rmgr_id::HEAP,
            XLOG_HEAP_UPDATE,
            update_main(new).bytes(),
            &[(0, 12), (1, 3)],
        );
        assert_eq!(clears(&rec), vec![(12, 3)]);
        // Same page (HOT): the old page is block 0, one merged clear.
        let rec =
            heap_record(rmgr_id::HEAP, XLOG_HEAP_HOT_UPDATE, update_main(both).bytes(), &[(0, 12)]);
        assert_eq!(clears(&rec), vec![(12, 3)]);
        let err = classify(
            &heap_record(
                rmgr_id::HEAP,
                XLOG_HEAP_UPDATE,
                &update_main(both).bytes()[..13],
                &[(0, 1)],
            ),
            PgMajorVersion::V17,
        );
        assert_err(err.unwrap_err(), "Heap UPDATE");
    }

    #[test]
    fn pg18_vm_block_refs_are_not_the_old_page() {
        // 18: blocks 0 new heap, 1 old heap, 2 VM (new), 3 VM (old), no images.
        let both = XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED | XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED;
        let mut rec = heap_record(
            rmgr_id::HEAP,
            XLOG_HEAP_UPDATE,
            update_main(both).bytes(),
            &[(0, 40_000), (1, 3)],
        );
        rec.blocks.push(block(2, VISIBILITYMAP_FORKNUM, 1, false));
        rec.blocks.push(block(3, VISIBILITYMAP_FORKNUM, 0, false));
        let NativeRecord::HeapVmClear { vm_clears, without_image } =
            classify(&rec, PgMajorVersion::V18).unwrap()
        else {
            panic!()
        };
        assert_eq!(vm_clears.len(), 2);
        assert_eq!(vm_clears[0].heap_block.blkno, 3);
        assert_eq!(vm_clears[0].vm_page().blkno, 0);
        assert_eq!(vm_clears[1].vm_page().blkno, 40_000 / VM_HEAPBLOCKS_PER_PAGE);
        assert_eq!(vm_clears[1].vm_page().fork, VISIBILITYMAP_FORKNUM);
        // The VM references are covered by the native clears.
        assert_eq!(without_image, vec![]);
        // A heap page without image is reported.
        rec.blocks[1].image = None;
        let NativeRecord::HeapVmClear { without_image, .. } =
            classify(&rec, PgMajorVersion::V18).unwrap()
        else {
            panic!()
        };
        assert_eq!(without_image, vec![rec.blocks[1].tag]);
    }

    #[test]
    fn multi_insert() {
        let main = Le::new().u8(XLH_INSERT_ALL_VISIBLE_CLEARED).u8(0).u16(3).u16(1).u16(2).u16(3);
        let rec = heap_record(
            rmgr_id::HEAP2,
            XLOG_HEAP2_MULTI_INSERT | XLOG_HEAP_INIT_PAGE,
            main.bytes(),
            &[(0, 99)],
        );
        assert_eq!(clears(&rec), vec![(99, 3)]);
    }

    #[test]
    fn missing_or_wrong_block_is_an_error() {
        let main = Le::new().u16(3).u8(XLH_INSERT_ALL_VISIBLE_CLEARED);
        let rec = heap_record(rmgr_id::HEAP, XLOG_HEAP_INSERT, main.bytes(), &[]);
        assert_err(classify(&rec, PgMajorVersion::V15).unwrap_err(), "no heap block reference 0");
        let mut rec = heap_record(rmgr_id::HEAP, XLOG_HEAP_INSERT, main.bytes(), &[]);
        rec.blocks.push(block(0, VISIBILITYMAP_FORKNUM, 0, true));
        assert_err(classify(&rec, PgMajorVersion::V18).unwrap_err(), "not of a heap page");
    }

    #[test]
    fn other_heap_records_are_images_only() {
        for (rmid, info) in [
            (rmgr_id::HEAP, 0x30),
            (rmgr_id::HEAP, 0x50),
            (rmgr_id::HEAP, 0x70),
            (rmgr_id::HEAP2, 0x10),
            (rmgr_id::HEAP2, 0x40),
            (rmgr_id::HEAP2, 0x70),
        ] {
            let mut rec = record(rmid, info, &[0xFF; 16]);
            rec.blocks.push(block(0, MAIN_FORKNUM, 5, false));
            let got = classify(&rec, PgMajorVersion::V17).unwrap();
            assert_eq!(got, NativeRecord::ImagesOnly { without_image: vec![rec.blocks[0].tag] });
        }
    }
}
