//! Full-page images as the WAL carries them, kept as page values.
//!
//! Under `wal_consistency_checking` every page a record changes comes with an
//! image of the page *after* the change, stored in the record with its hole
//! (the free space between `pd_lower` and `pd_upper`) removed and usually
//! compressed (pglz, lz4, zstd): a few hundred bytes for an 8 KiB page.
//! Ingest keeps those bytes as they are ([`WalImage`]) instead of rebuilding
//! each page: a record costs the daemon a copy of its image bytes, and the
//! in-memory and L0 layers grow like the WAL, not 8 KiB per changed page.
//! A read rebuilds the page ([`WalImage::materialize`]): decompress, put the
//! hole back, then [`stamp_page`].
//!
//! Stamping: an image's `pd_lsn` is the page's previous LSN (PostgreSQL
//! stamps the record's end LSN only after taking the image) and its
//! `pd_checksum` is stale. The page served gets `pd_lsn` = the record's end
//! LSN (the value's LSN), as PostgreSQL's own copy has after redo, and, in a
//! cluster with data checksums, a checksum recomputed for its block number.
//! An all-zero (new) page is served as is: PostgreSQL neither stamps nor
//! checksums it.
//!
//! Serialized payload (inside a value's tag and CRC, see `value.rs`):
//! ```text
//!   flags u8 (bit 0: data checksums) | compression u8 (0 none, 1 pglz,
//!   2 lz4, 3 zstd) | hole_offset u16 LE | hole_length u16 LE | stored bytes
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_ffi::page::{page_checksum, page_is_new, set_page_lsn, PageHeader};
use postgres_ffi::wal::image::{restore_image, BlockImage, ImageCompression, ImageHeader};
use postgres_ffi::BLCKSZ;
use utils::lsn::Lsn;

/// Bytes before the stored image in the serialized payload.
pub const WAL_IMAGE_HEADER_LEN: usize = 6;

const FLAG_DATA_CHECKSUMS: u8 = 1;

/// A page image as stored in a WAL record; see the module comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalImage {
    pub compression: ImageCompression,
    pub hole_offset: u16,
    pub hole_length: u16,
    /// The cluster has data checksums: materialized pages get one.
    pub data_checksums: bool,
    /// Hole removed, compressed as `compression` says.
    pub stored: Bytes,
}

impl WalImage {
    pub fn from_block(img: &BlockImage, data_checksums: bool) -> WalImage {
        WalImage {
            compression: img.header.compression,
            hole_offset: img.header.hole_offset,
            hole_length: img.header.hole_length,
            data_checksums,
            stored: img.stored.clone(),
        }
    }

    pub fn payload_len(&self) -> usize {
        WAL_IMAGE_HEADER_LEN + self.stored.len()
    }

    pub fn serialize_into(&self, out: &mut Vec<u8>) {
        out.put_u8(if self.data_checksums { FLAG_DATA_CHECKSUMS } else { 0 });
        out.put_u8(compression_code(self.compression));
        out.put_u16_le(self.hole_offset);
        out.put_u16_le(self.hole_length);
        out.extend_from_slice(&self.stored);
    }

    /// Decode a payload (its CRC already checked); `payload` is shared.
    pub fn decode(payload: Bytes) -> Result<WalImage, &'static str> {
        if payload.len() < WAL_IMAGE_HEADER_LEN {
            return Err("truncated WAL image header");
        }
        let mut h = &payload[..WAL_IMAGE_HEADER_LEN];
        let flags = h.get_u8();
        let compression = compression_of(h.get_u8()).ok_or("unknown WAL image compression")?;
        let hole_offset = h.get_u16_le();
        let hole_length = h.get_u16_le();
        let stored = payload.slice(WAL_IMAGE_HEADER_LEN..);
        let image = WalImage {
            compression,
            hole_offset,
            hole_length,
            data_checksums: flags & FLAG_DATA_CHECKSUMS != 0,
            stored,
        };
        image.check()?;
        Ok(image)
    }

    /// The shape checks `restore_image` relies on.
    fn check(&self) -> Result<(), &'static str> {
        let hole_end = self.hole_offset as usize + self.hole_length as usize;
        if hole_end > BLCKSZ || (self.hole_length == 0 && self.hole_offset != 0) {
            return Err("WAL image hole outside the page");
        }
        let fits = match self.compression {
            ImageCompression::None => self.stored.len() + self.hole_length as usize == BLCKSZ,
            _ => self.stored.len() < BLCKSZ,
        };
        if !fits {
            return Err("WAL image length does not fit its hole");
        }
        Ok(())
    }

    /// The page of block `blkno` as of `lsn` (the value's LSN): rebuilt
    /// and stamped. An error names what did not decompress.
    pub fn materialize(&self, blkno: u32, lsn: Lsn) -> Result<Bytes, String> {
        let header = ImageHeader {
            stored_len: u16::try_from(self.stored.len()).expect("checked: below BLCKSZ"),
            hole_offset: self.hole_offset,
            hole_length: self.hole_length,
            compression: self.compression,
            apply: true,
        };
        let page = restore_image(&header, self.stored.clone())?;
        Ok(stamp_page(page, blkno, lsn, self.data_checksums))
    }
}

fn compression_code(c: ImageCompression) -> u8 {
    match c {
        ImageCompression::None => 0,
        ImageCompression::Pglz => 1,
        ImageCompression::Lz4 => 2,
        ImageCompression::Zstd => 3,
    }
}

fn compression_of(code: u8) -> Option<ImageCompression> {
    Some(match code {
        0 => ImageCompression::None,
        1 => ImageCompression::Pglz,
        2 => ImageCompression::Lz4,
        3 => ImageCompression::Zstd,
        _ => return None,
    })
}

/// `image` (`BLCKSZ` bytes) as the page of block `blkno` after the record
/// ending at `end_lsn`: `pd_lsn` set, checksum recomputed if the cluster
/// has data checksums; an all-zero page unchanged. Stamps in place when
/// `image` is the only handle to its bytes (a freshly rebuilt page).
pub fn stamp_page(image: Bytes, blkno: u32, end_lsn: Lsn, data_checksums: bool) -> Bytes {
    assert_eq!(image.len(), BLCKSZ, "images are rebuilt to BLCKSZ");
    if page_is_new(&image) {
        return image;
    }
    let mut page = image.try_into_mut().unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    set_page_lsn(&mut page, end_lsn.0);
    if data_checksums {
        let mut header = PageHeader::decode(&page);
        header.checksum = page_checksum(&page, blkno);
        header.encode(&mut page);
    }
    page.freeze()
}

#[cfg(test)]
mod tests;
