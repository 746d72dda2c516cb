//! Full-page images in WAL records (`XLogRecordBlockImageHeader`): the
//! header's flag bits per major version, and rebuilding the stored bytes
//! into a whole `BLCKSZ` page.
//!
//! A stored image omits the page's "hole" (the free space between
//! `pd_lower` and `pd_upper`, all zeros) and may be compressed. Rebuilding:
//! decompress to exactly `BLCKSZ - hole_length` bytes, then put back
//! `hole_length` zero bytes at `hole_offset`.
//!
//! Invariants: a rebuilt image is exactly `BLCKSZ` bytes; a decompressed
//! size other than `BLCKSZ - hole_length` is an error; decompression never
//! writes more than `BLCKSZ` bytes whatever the input claims.

use bytes::Bytes;

use super::pglz::pglz_decompress;
use crate::consts::BLCKSZ;
use crate::PgMajorVersion;

/// How the image bytes are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageCompression {
    None,
    /// PostgreSQL's LZ (`pg_lzcompress.c`).
    Pglz,
    /// An LZ4 raw block (no frame).
    Lz4,
    /// A zstd frame.
    Zstd,
}

/// `bimg_info` bits of one major version (`xlogrecord.h`).
#[derive(Debug, Clone, Copy)]
pub struct ImageInfoBits {
    pub has_hole: u8,
    pub apply: u8,
    pub pglz: u8,
    pub lz4: u8,
    pub zstd: u8,
}

/// The `bimg_info` bits of `version`. Identical for 15 to 18 (checked in
/// each version's `xlogrecord.h`); 14 and older used other values.
pub const fn image_info_bits(version: PgMajorVersion) -> ImageInfoBits {
    match version {
        PgMajorVersion::V15 | PgMajorVersion::V16 | PgMajorVersion::V17 | PgMajorVersion::V18 => {
            ImageInfoBits { has_hole: 0x01, apply: 0x02, pglz: 0x04, lz4: 0x08, zstd: 0x10 }
        }
    }
}

/// A block image header, validated (see [`ImageHeader::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageHeader {
    /// Bytes stored in the record (`bimg_len`).
    pub stored_len: u16,
    pub hole_offset: u16,
    pub hole_length: u16,
    pub compression: ImageCompression,
    /// `BKPIMAGE_APPLY`: redo restores this image.
    pub apply: bool,
}

impl ImageHeader {
    /// Interpret the fields of `XLogRecordBlockImageHeader` (plus the
    /// `hole_length` that follows when compressed with a hole) with the
    /// checks PostgreSQL's reader makes, and that the hole lies in the page.
    pub fn new(
        version: PgMajorVersion,
        stored_len: u16,
        hole_offset: u16,
        info: u8,
        compressed_hole_length: Option<u16>,
    ) -> Result<ImageHeader, String> {
        let bits = image_info_bits(version);
        let compression = compression_of(info, bits)?;
        let has_hole = info & bits.has_hole != 0;
        let blcksz = BLCKSZ as u16;
        let hole_length = match compression {
            ImageCompression::None => blcksz.checked_sub(stored_len).ok_or_else(|| {
                format!("uncompressed image of {stored_len} bytes exceeds BLCKSZ")
            })?,
            _ => compressed_hole_length.unwrap_or(0),
        };
        if has_hole && (hole_offset == 0 || hole_length == 0 || stored_len == blcksz) {
            return Err(format!(
                "image with hole: offset {hole_offset}, length {hole_length}, stored {stored_len}"
            ));
        }
        if !has_hole && (hole_offset != 0 || hole_length != 0) {
            return Err(format!("image without hole: offset {hole_offset}, length {hole_length}"));
        }
        if compression != ImageCompression::None && stored_len == blcksz {
            return Err("compressed image of BLCKSZ bytes".to_string());
        }
        if hole_offset as usize + hole_length as usize > BLCKSZ {
            return Err(format!("hole {hole_offset}+{hole_length} beyond the page"));
        }
        let apply = info & bits.apply != 0;
        Ok(ImageHeader { stored_len, hole_offset, hole_length, compression, apply })
    }

    /// Page bytes the stored image holds once decompressed.
    pub fn raw_len(&self) -> usize {
        BLCKSZ - self.hole_length as usize
    }
}

fn compression_of(info: u8, bits: ImageInfoBits) -> Result<ImageCompression, String> {
    let methods = [
        (bits.pglz, ImageCompression::Pglz),
        (bits.lz4, ImageCompression::Lz4),
        (bits.zstd, ImageCompression::Zstd),
    ];
    let mut found = ImageCompression::None;
    for (bit, method) in methods {
        if info & bit != 0 {
            if found != ImageCompression::None {
                return Err(format!("several compression methods in bimg_info {info:#04x}"));
            }
            found = method;
        }
    }
    Ok(found)
}

/// An image as a record stores it: the header and the stored bytes (hole
/// removed, maybe compressed). Rebuilding is deferred to [`Self::restore`],
/// so a consumer may keep the compact form (the record's CRC has vouched
/// for the bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockImage {
    pub header: ImageHeader,
    /// Exactly `header.stored_len` bytes.
    pub stored: Bytes,
}

impl BlockImage {
    pub fn new(header: ImageHeader, stored: Bytes) -> BlockImage {
        assert_eq!(stored.len(), header.stored_len as usize, "image of bimg_len bytes");
        BlockImage { header, stored }
    }

    /// A whole page stored uncompressed, without a hole (tests, tools).
    pub fn uncompressed(page: Bytes) -> BlockImage {
        assert_eq!(page.len(), BLCKSZ, "a whole page");
        let header = ImageHeader {
            stored_len: BLCKSZ as u16,
            hole_offset: 0,
            hole_length: 0,
            compression: ImageCompression::None,
            apply: true,
        };
        BlockImage { header, stored: page }
    }

    /// The whole `BLCKSZ` page (see [`restore_image`]).
    pub fn restore(&self) -> Result<Bytes, String> {
        restore_image(&self.header, self.stored.clone())
    }
}

/// Rebuild the `BLCKSZ` page from the `stored` bytes of an image.
/// Zero-copy when the image is stored whole and uncompressed.
pub fn restore_image(header: &ImageHeader, stored: Bytes) -> Result<Bytes, String> {
    assert_eq!(stored.len(), header.stored_len as usize, "caller slices bimg_len bytes");
    if header.compression == ImageCompression::None && header.hole_length == 0 {
        debug_assert_eq!(stored.len(), BLCKSZ);
        return Ok(stored);
    }
    let raw_len = header.raw_len();
    let mut page = vec![0u8; BLCKSZ];
    match header.compression {
        ImageCompression::None => page[..raw_len].copy_from_slice(&stored),
        ImageCompression::Pglz => {
            pglz_decompress(&stored, &mut page[..raw_len]).map_err(|e| e.to_string())?
        }
        ImageCompression::Lz4 => decompress_lz4(&stored, &mut page[..raw_len])?,
        ImageCompression::Zstd => decompress_zstd(&stored, &mut page[..raw_len])?,
    }
    fill_hole(&mut page, header.hole_offset as usize, header.hole_length as usize);
    Ok(Bytes::from(page))
}

/// `page[..BLCKSZ - hole_length]` holds the image without its hole: move
/// the part after `hole_offset` up and zero the hole.
fn fill_hole(page: &mut [u8], hole_offset: usize, hole_length: usize) {
    debug_assert_eq!(page.len(), BLCKSZ);
    debug_assert!(hole_offset + hole_length <= BLCKSZ);
    if hole_length == 0 {
        return;
    }
    let raw_len = BLCKSZ - hole_length;
    page.copy_within(hole_offset..raw_len, hole_offset + hole_length);
    page[hole_offset..hole_offset + hole_length].fill(0);
}

fn decompress_lz4(src: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let n = lz4_flex::block::decompress_into(src, dst).map_err(|e| format!("lz4: {e}"))?;
    if n != dst.len() {
        return Err(format!("lz4: decompressed {n} bytes, expected {}", dst.len()));
    }
    Ok(())
}

fn decompress_zstd(src: &[u8], dst: &mut [u8]) -> Result<(), String> {
    thread_local! {
        static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let expected = dst.len();
    let n = DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
        }
        let decompressor = slot.as_mut().expect("just set");
        decompressor.decompress_to_buffer(src, dst).map_err(|e| format!("zstd: {e}"))
    })?;
    if n != expected {
        return Err(format!("zstd: decompressed {n} bytes, expected {expected}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(stored: u16, hole_off: u16, hole_len: u16, c: ImageCompression) -> ImageHeader {
        ImageHeader {
            stored_len: stored,
            hole_offset: hole_off,
            hole_length: hole_len,
            compression: c,
            apply: true,
        }
    }

    fn sample_page() -> Vec<u8> {
        let mut page = vec![0u8; BLCKSZ];
        for (i, b) in page[..100].iter_mut().enumerate() {
            *b = i as u8;
        }
        for (i, b) in page[6000..].iter_mut().enumerate() {
            *b = (i % 251) as u8 + 1;
        }
        page
    }

    fn without_hole(page: &[u8]) -> Vec<u8> {
        [&page[..100], &page[6000..]].concat()
    }

    #[test]
    fn uncompressed_with_and_without_hole() {
        let page = sample_page();
        let whole =
            restore_image(&header(8192, 0, 0, ImageCompression::None), Bytes::from(page.clone()));
        assert_eq!(whole.unwrap(), page);
        let stored = without_hole(&page);
        let h = header(stored.len() as u16, 100, 5900, ImageCompression::None);
        assert_eq!(restore_image(&h, Bytes::from(stored)).unwrap(), page);
    }

    #[test]
    fn lz4_and_zstd_with_hole() {
        let page = sample_page();
        let raw = without_hole(&page);
        let lz4 = lz4_flex::block::compress(&raw);
        let h = header(lz4.len() as u16, 100, 5900, ImageCompression::Lz4);
        assert_eq!(restore_image(&h, Bytes::from(lz4)).unwrap(), page);
        let zst = zstd::bulk::compress(&raw, 3).unwrap();
        let h = header(zst.len() as u16, 100, 5900, ImageCompression::Zstd);
        assert_eq!(restore_image(&h, Bytes::from(zst)).unwrap(), page);
    }

    #[test]
    fn wrong_decompressed_size_is_an_error() {
        let raw = without_hole(&sample_page());
        let zst = zstd::bulk::compress(&raw, 3).unwrap();
        // Claims a smaller hole than the image was cut with.
        let h = header(zst.len() as u16, 100, 5000, ImageCompression::Zstd);
        assert!(restore_image(&h, Bytes::from(zst)).is_err());
        let lz4 = lz4_flex::block::compress(&raw);
        let h = header(lz4.len() as u16, 100, 6000, ImageCompression::Lz4);
        assert!(restore_image(&h, Bytes::from(lz4)).is_err());
    }

    #[test]
    fn header_checks() {
        let v = PgMajorVersion::V16;
        assert!(ImageHeader::new(v, 8192, 0, 0x02, None).unwrap().apply);
        assert_eq!(ImageHeader::new(v, 2292, 100, 0x01, None).unwrap().hole_length, 5900);
        assert!(ImageHeader::new(v, 8000, 0, 0x00, None).is_err(), "hole without flag");
        assert!(ImageHeader::new(v, 8193, 0, 0x00, None).is_err());
        assert!(ImageHeader::new(v, 8192, 0, 0x04, None).is_err(), "compressed full size");
        assert!(ImageHeader::new(v, 300, 8000, 0x05, Some(500)).is_err(), "hole past page end");
        assert!(ImageHeader::new(v, 300, 0, 0x0C, None).is_err(), "two methods");
        assert!(ImageHeader::new(v, 300, 100, 0x05, Some(0)).is_err(), "empty hole");
    }
}
