//! SLRU geometry (`clog.c`, `multixact.c`): where a transaction's status or
//! a multixact's offset lives.

use crate::consts::{BLCKSZ, SLRU_PAGES_PER_SEGMENT};

/// CLOG: 2 status bits per transaction, 4 per byte.
pub const CLOG_BITS_PER_XACT: u32 = 2;
pub const CLOG_XACTS_PER_BYTE: u32 = 4;
pub const CLOG_XACTS_PER_PAGE: u32 = BLCKSZ as u32 * CLOG_XACTS_PER_BYTE;

/// Transaction status values in the CLOG.
pub const TRANSACTION_STATUS_IN_PROGRESS: u8 = 0x00;
pub const TRANSACTION_STATUS_COMMITTED: u8 = 0x01;
pub const TRANSACTION_STATUS_ABORTED: u8 = 0x02;
pub const TRANSACTION_STATUS_SUB_COMMITTED: u8 = 0x03;

/// Multixact offsets: one u32 per multixact id.
pub const MULTIXACT_OFFSETS_PER_PAGE: u32 = (BLCKSZ / 4) as u32;

/// Where a transaction's status is: (page number, byte in page, bit shift).
pub fn clog_position(xid: u32) -> (u32, usize, u32) {
    let page = xid / CLOG_XACTS_PER_PAGE;
    let index = xid % CLOG_XACTS_PER_PAGE;
    (
        page,
        (index / CLOG_XACTS_PER_BYTE) as usize,
        (index % CLOG_XACTS_PER_BYTE) * CLOG_BITS_PER_XACT,
    )
}

/// (segment number, page within the segment) of an SLRU page number.
pub fn segment_of_page(page: u32) -> (u32, u32) {
    (page / SLRU_PAGES_PER_SEGMENT, page % SLRU_PAGES_PER_SEGMENT)
}

/// Page of the multixact offsets SLRU holding `multi`, and the byte offset in it.
pub fn multixact_offset_position(multi: u32) -> (u32, usize) {
    (multi / MULTIXACT_OFFSETS_PER_PAGE, (multi % MULTIXACT_OFFSETS_PER_PAGE) as usize * 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry() {
        assert_eq!(CLOG_XACTS_PER_PAGE, 32768);
        assert_eq!(clog_position(5), (0, 1, 2));
        assert_eq!(clog_position(32768 + 6), (1, 1, 4));
        assert_eq!(segment_of_page(33), (1, 1));
        assert_eq!(multixact_offset_position(2049), (1, 4));
    }
}
