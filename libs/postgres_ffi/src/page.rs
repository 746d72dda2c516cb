//! The page header every relation page starts with (`bufpage.h`), and the
//! data checksum (`checksum_impl.h`: FNV-1a-based, 32 interleaved sums).

use crate::consts::{BLCKSZ, SIZE_OF_PAGE_HEADER_DATA};

/// `PageHeaderData` without the line pointers. Little-endian on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageHeader {
    /// LSN of the last change (`PageXLogRecPtr`: high word, then low word).
    pub lsn: u64,
    pub checksum: u16,
    pub flags: u16,
    pub lower: u16,
    pub upper: u16,
    pub special: u16,
    pub pagesize_version: u16,
    pub prune_xid: u32,
}

/// Byte offset of `pd_flags` in `PageHeaderData`.
pub const PD_FLAGS_OFFSET: usize = 10;

impl PageHeader {
    /// Decode the first 24 bytes of `page`. Panics on a shorter slice.
    #[inline]
    pub fn decode(page: &[u8]) -> PageHeader {
        let u16_at = |o: usize| u16::from_le_bytes([page[o], page[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(page[o..o + 4].try_into().unwrap());
        PageHeader {
            lsn: ((u32_at(0) as u64) << 32) | u32_at(4) as u64,
            checksum: u16_at(8),
            flags: u16_at(PD_FLAGS_OFFSET),
            lower: u16_at(12),
            upper: u16_at(14),
            special: u16_at(16),
            pagesize_version: u16_at(18),
            prune_xid: u32_at(20),
        }
    }

    /// Write the header into the first 24 bytes of `page`.
    #[inline]
    pub fn encode(&self, page: &mut [u8]) {
        page[0..4].copy_from_slice(&((self.lsn >> 32) as u32).to_le_bytes());
        page[4..8].copy_from_slice(&(self.lsn as u32).to_le_bytes());
        for (o, v) in [
            (8, self.checksum),
            (10, self.flags),
            (12, self.lower),
            (14, self.upper),
            (16, self.special),
            (18, self.pagesize_version),
        ] {
            page[o..o + 2].copy_from_slice(&v.to_le_bytes());
        }
        page[20..24].copy_from_slice(&self.prune_xid.to_le_bytes());
    }
}

/// `PageIsNew`: an all-zero header (`pd_upper == 0`), never checksummed.
pub fn page_is_new(page: &[u8]) -> bool {
    PageHeader::decode(page).upper == 0
}

/// The LSN a page carries.
pub fn page_lsn(page: &[u8]) -> u64 {
    PageHeader::decode(page).lsn
}

/// Set the LSN of a page.
pub fn set_page_lsn(page: &mut [u8], lsn: u64) {
    page[0..4].copy_from_slice(&((lsn >> 32) as u32).to_le_bytes());
    page[4..8].copy_from_slice(&(lsn as u32).to_le_bytes());
}

const N_SUMS: usize = 32;
const FNV_PRIME: u32 = 16_777_619;
/// The initial value of each of the 32 partial sums.
const BASE_OFFSETS: [u32; N_SUMS] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E, 0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];

fn mix(sum: u32, value: u32) -> u32 {
    let t = sum ^ value;
    t.wrapping_mul(FNV_PRIME) ^ (t >> 17)
}

/// The data checksum of block `blkno` holding `page` (its stored checksum
/// field is treated as zero), as PostgreSQL computes it with
/// `data_checksums` on. Panics unless `page` is `BLCKSZ` bytes.
pub fn page_checksum(page: &[u8], blkno: u32) -> u16 {
    assert_eq!(page.len(), BLCKSZ, "a page is {BLCKSZ} bytes");
    let mut sums = BASE_OFFSETS;
    for (row, chunk) in page.chunks_exact(4 * N_SUMS).enumerate() {
        for (j, sum) in sums.iter_mut().enumerate() {
            let at = j * 4;
            let mut word = u32::from_le_bytes(chunk[at..at + 4].try_into().unwrap());
            if row == 0 && at == 8 {
                word &= 0xFFFF_0000; // pd_checksum (bytes 8-9) counts as zero
            }
            *sum = mix(*sum, word);
        }
    }
    for _ in 0..2 {
        for sum in sums.iter_mut() {
            *sum = mix(*sum, 0);
        }
    }
    let folded = sums.iter().fold(0u32, |acc, s| acc ^ s) ^ blkno;
    ((folded % 65535) + 1) as u16
}

/// Whether a page's stored checksum is right (new pages have none).
pub fn verify_page_checksum(page: &[u8], blkno: u32) -> bool {
    page_is_new(page) || PageHeader::decode(page).checksum == page_checksum(page, blkno)
}

const _: () = assert!(SIZE_OF_PAGE_HEADER_DATA == 24 && BLCKSZ % (4 * N_SUMS) == 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = PageHeader {
            lsn: 0x1_0000_2345,
            checksum: 0xBEEF,
            flags: 4,
            lower: 40,
            upper: 8000,
            special: 8192,
            pagesize_version: 8192 | 4,
            prune_xid: 77,
        };
        let mut page = vec![0u8; BLCKSZ];
        h.encode(&mut page);
        assert_eq!(PageHeader::decode(&page), h);
        assert_eq!(&page[0..8], &[1, 0, 0, 0, 0x45, 0x23, 0, 0]);
        assert!(!page_is_new(&page));
        assert!(page_is_new(&[0u8; BLCKSZ]));
        set_page_lsn(&mut page, 7);
        assert_eq!(page_lsn(&page), 7);
    }

    #[test]
    fn checksum_ignores_its_own_field_and_covers_everything_else() {
        let mut page: Vec<u8> = (0..BLCKSZ).map(|i| (i * 7 % 251) as u8).collect();
        let c = page_checksum(&page, 3);
        page[8] ^= 0xff; // the checksum field itself
        assert_eq!(page_checksum(&page, 3), c);
        assert_ne!(page_checksum(&page, 4), c, "the block number is mixed in");
        page[100] ^= 1;
        assert_ne!(page_checksum(&page, 3), c);
        assert_ne!(c, 0, "never zero");
    }
}
