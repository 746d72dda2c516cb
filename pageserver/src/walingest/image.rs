//! Full-page images of WAL records as page values.
//!
//! Under `wal_consistency_checking` every page a record changes comes with an
//! image of the page *after* the change. Its `pd_lsn` is the page's previous
//! LSN (PostgreSQL stamps the record's end LSN only after taking the image),
//! and its `pd_checksum` is stale. So the stored page gets `pd_lsn` = the
//! record's end LSN, as PostgreSQL's own copy has after redo, and, in a
//! cluster with data checksums, a checksum recomputed for its block number.
//! An all-zero (new) page is stored as is: PostgreSQL neither stamps nor
//! checksums it.

use bytes::{Bytes, BytesMut};
use postgres_ffi::page::{page_checksum, page_is_new, set_page_lsn, PageHeader};
use postgres_ffi::BLCKSZ;
use utils::lsn::Lsn;

/// The page to store for an image of block `blkno` taken by a record that
/// ends at `end_lsn`. `image` is `BLCKSZ` bytes (the decoder rebuilds holes
/// and decompresses).
pub fn page_from_image(image: &Bytes, blkno: u32, end_lsn: Lsn, data_checksums: bool) -> Bytes {
    assert_eq!(image.len(), BLCKSZ, "the WAL decoder rebuilds images to BLCKSZ");
    if page_is_new(image) {
        return image.clone();
    }
    let mut page = BytesMut::from(&image[..]);
    set_page_lsn(&mut page, end_lsn.0);
    if data_checksums {
        let mut header = PageHeader::decode(&page);
        header.checksum = page_checksum(&page, blkno);
        header.encode(&mut page);
    }
    page.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_ffi::page::{page_lsn, verify_page_checksum};

    fn sample_page() -> Bytes {
        let mut p = vec![0u8; BLCKSZ];
        let h = PageHeader {
            lsn: 0x1234,
            lower: 28,
            upper: 8000,
            special: 8192,
            pagesize_version: 8192 | 4,
            ..PageHeader::default()
        };
        h.encode(&mut p);
        p[8000..8010].copy_from_slice(b"tuple data");
        Bytes::from(p)
    }

    #[test]
    fn images_are_stamped_with_the_end_lsn_and_checksummed() {
        let page = page_from_image(&sample_page(), 7, Lsn(0x0300_0128), true);
        assert_eq!(page_lsn(&page), 0x0300_0128);
        assert!(verify_page_checksum(&page, 7));
        assert!(!verify_page_checksum(&page, 8), "the checksum covers the block number");
        assert_eq!(&page[8000..8010], b"tuple data");
        let plain = page_from_image(&sample_page(), 7, Lsn(0x0300_0128), false);
        assert_eq!(PageHeader::decode(&plain).checksum, 0);
    }

    #[test]
    fn new_pages_stay_zero() {
        let zero = Bytes::from(vec![0u8; BLCKSZ]);
        assert_eq!(page_from_image(&zero, 1, Lsn(0x100), true), zero);
    }
}
