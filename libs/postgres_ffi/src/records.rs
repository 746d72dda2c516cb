//! Changes the pageserver applies to pages itself, without a PostgreSQL
//! redo process: CLOG status bits and visibility-map bit clears. Pure
//! functions on one `BLCKSZ` page; the caller checks the page size.

use crate::consts::{BLCKSZ, SIZE_OF_PAGE_HEADER_DATA};
use crate::slru::{clog_position, CLOG_XACTS_PER_PAGE};

/// Visibility map: 2 bits per heap block after the page header.
pub const VM_BITS_PER_HEAPBLOCK: u32 = 2;
pub const VM_HEAPBLOCKS_PER_BYTE: u32 = 4;
pub const VM_HEAPBLOCKS_PER_PAGE: u32 =
    ((BLCKSZ - SIZE_OF_PAGE_HEADER_DATA) as u32) * VM_HEAPBLOCKS_PER_BYTE;
/// `VISIBILITYMAP_ALL_VISIBLE | VISIBILITYMAP_ALL_FROZEN`.
pub const VM_VALID_BITS: u8 = 0b11;

/// Set the 2-bit status of each xid (all on this CLOG page) to `status`.
pub fn clog_set_status(page: &mut [u8], xids: &[u32], status: u8) {
    assert_eq!(page.len(), BLCKSZ);
    for &xid in xids {
        let (_, byte, shift) = clog_position(xid % CLOG_XACTS_PER_PAGE);
        page[byte] = (page[byte] & !(0b11 << shift)) | ((status & 0b11) << shift);
    }
}

/// Clear `flags` of each heap block (all mapped by this VM page).
pub fn vm_clear_flags(page: &mut [u8], heap_blknos: &[u32], flags: u8) {
    assert_eq!(page.len(), BLCKSZ);
    for &blk in heap_blknos {
        let idx = blk % VM_HEAPBLOCKS_PER_PAGE;
        let byte = SIZE_OF_PAGE_HEADER_DATA + (idx / VM_HEAPBLOCKS_PER_BYTE) as usize;
        let shift = (idx % VM_HEAPBLOCKS_PER_BYTE) * VM_BITS_PER_HEAPBLOCK;
        page[byte] &= !((flags & VM_VALID_BITS) << shift);
    }
}

/// Clear both bits of every heap block from `first_heap_blkno` to the end
/// of this VM page (`visibilitymap_prepare_truncate`: the blocks a
/// truncation removed). Blocks before it keep their bits.
pub fn vm_clear_tail(page: &mut [u8], first_heap_blkno: u32) {
    assert_eq!(page.len(), BLCKSZ);
    let idx = first_heap_blkno % VM_HEAPBLOCKS_PER_PAGE;
    let byte = SIZE_OF_PAGE_HEADER_DATA + (idx / VM_HEAPBLOCKS_PER_BYTE) as usize;
    let keep_bits = (idx % VM_HEAPBLOCKS_PER_BYTE) * VM_BITS_PER_HEAPBLOCK;
    page[byte] &= ((1u16 << keep_bits) - 1) as u8;
    page[byte + 1..].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clog_and_vm_bits() {
        let mut page = vec![0u8; BLCKSZ];
        clog_set_status(&mut page, &[5, 32768 + 6], 1);
        assert_eq!(page[1], (0b01 << 2) | (0b01 << 4));
        assert_eq!(page.iter().filter(|b| **b != 0).count(), 1);
        let mut vm = vec![0xffu8; BLCKSZ];
        vm_clear_flags(&mut vm, &[1], 0b11);
        assert_eq!(vm[SIZE_OF_PAGE_HEADER_DATA], 0b1111_0011);
        assert_eq!(vm[SIZE_OF_PAGE_HEADER_DATA + 1], 0xff);

        let mut vm = vec![0xffu8; BLCKSZ];
        vm_clear_tail(&mut vm, VM_HEAPBLOCKS_PER_PAGE + 5);
        assert_eq!(vm[SIZE_OF_PAGE_HEADER_DATA], 0xff, "blocks 0-3 keep their bits");
        assert_eq!(vm[SIZE_OF_PAGE_HEADER_DATA + 1], 0b0000_0011, "block 4 keeps, 5-7 cleared");
        assert!(vm[SIZE_OF_PAGE_HEADER_DATA + 2..].iter().all(|b| *b == 0));
    }
}
