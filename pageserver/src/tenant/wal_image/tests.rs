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

/// The sample page as PostgreSQL stores it in a record: hole 28..8000 removed.
fn holed(compression: ImageCompression) -> WalImage {
    let page = sample_page();
    let raw: Vec<u8> = [&page[..28], &page[8000..]].concat();
    let stored = match compression {
        ImageCompression::None => Bytes::from(raw),
        ImageCompression::Lz4 => Bytes::from(lz4_flex::block::compress(&raw)),
        ImageCompression::Zstd => Bytes::from(zstd::bulk::compress(&raw, 1).unwrap()),
        ImageCompression::Pglz => unreachable!("no pglz compressor here"),
    };
    WalImage { compression, hole_offset: 28, hole_length: 8000 - 28, data_checksums: true, stored }
}

#[test]
fn images_are_stamped_with_the_end_lsn_and_checksummed() {
    let page = stamp_page(sample_page(), 7, Lsn(0x0300_0128), true);
    assert_eq!(page_lsn(&page), 0x0300_0128);
    assert!(verify_page_checksum(&page, 7));
    assert!(!verify_page_checksum(&page, 8), "the checksum covers the block number");
    assert_eq!(&page[8000..8010], b"tuple data");
    let plain = stamp_page(sample_page(), 7, Lsn(0x0300_0128), false);
    assert_eq!(PageHeader::decode(&plain).checksum, 0);
}

#[test]
fn new_pages_stay_zero() {
    let zero = Bytes::from(vec![0u8; BLCKSZ]);
    assert_eq!(stamp_page(zero.clone(), 1, Lsn(0x100), true), zero);
}

#[test]
fn materialize_restores_hole_and_compression_and_stamps() {
    let expected = stamp_page(sample_page(), 3, Lsn(0x5000), true);
    for c in [ImageCompression::None, ImageCompression::Lz4, ImageCompression::Zstd] {
        let img = holed(c);
        let mut payload = Vec::new();
        img.serialize_into(&mut payload);
        assert_eq!(payload.len(), img.payload_len());
        let decoded = WalImage::decode(Bytes::from(payload)).unwrap();
        assert_eq!(decoded, img);
        assert_eq!(decoded.materialize(3, Lsn(0x5000)).unwrap(), expected, "{c:?}");
    }
}

#[test]
fn malformed_payloads_are_errors() {
    let mut payload = Vec::new();
    holed(ImageCompression::None).serialize_into(&mut payload);
    let bad = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut p = payload.clone();
        edit(&mut p);
        WalImage::decode(Bytes::from(p)).unwrap_err()
    };
    assert_eq!(bad(&|p| p.truncate(3)), "truncated WAL image header");
    assert_eq!(bad(&|p| p[1] = 9), "unknown WAL image compression");
    assert_eq!(
        bad(&|p| p[4..6].copy_from_slice(&9000u16.to_le_bytes())),
        "WAL image hole outside the page"
    );
    assert_eq!(bad(&|p| p.push(0)), "WAL image length does not fit its hole");
    // Damaged compressed bytes decode as a payload but do not materialize.
    let mut z = holed(ImageCompression::Zstd);
    z.stored = Bytes::from_static(b"not zstd");
    assert!(z.materialize(3, Lsn(0x5000)).unwrap_err().contains("zstd"));
}
