use super::*;
use crate::controlfile::CheckPoint;
use crate::wal::rmgr::xlog::XLOG_CHECKPOINT_SHUTDOWN;
use crate::wal::{WalStreamDecoder, WAL_SEGMENT_SIZE};

fn params(version: PgMajorVersion) -> SegmentParams {
    SegmentParams { version, system_id: 7_000_000_000_123, timeline: 1, seg_size: WAL_SEGMENT_SIZE }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

#[test]
fn names_and_positions() {
    let seg = WAL_SEGMENT_SIZE;
    assert_eq!(wal_file_name(1, Lsn(0x0000_0001_0300_0028), seg), "000000010000000100000003");
    assert_eq!(wal_file_name(2, Lsn(0x0FFF_FFFF), seg), "00000002000000000000000F");
    assert_eq!(normalize_lsn(Lsn(0x0300_0000), seg), Lsn(0x0300_0028));
    assert_eq!(normalize_lsn(Lsn(0x0300_2000), seg), Lsn(0x0300_2018));
    assert_eq!(normalize_lsn(Lsn(0x0300_2060), seg), Lsn(0x0300_2060));
    assert_eq!(normalize_lsn(Lsn(0x0300_0010), seg), Lsn(0x0300_0028));
    assert_eq!(normalize_lsn(Lsn(0x0300_2010), seg), Lsn(0x0300_2018));
    assert_eq!(normalize_lsn(Lsn(0x0300_0028), seg), Lsn(0x0300_0028));
    // The last bytes of a segment cannot hold the record: next segment.
    assert_eq!(checkpoint_record_lsn(Lsn(0x03FF_FFC0), seg), Lsn(0x0400_0028));
    assert_eq!(checkpoint_record_lsn(Lsn(0x03FF_E000), seg), Lsn(0x03FF_E018));
}

/// Page headers up to the start, each with the continuation length that
/// makes a reader skip to the start exactly.
#[test]
fn headers_up_to_the_start() {
    let p = params(PgMajorVersion::V16);
    let start = Lsn(0x0300_0000 + 3 * 8192 + 200);
    let seg = generate_segment(&p, start, None);
    assert_eq!(seg.len(), WAL_SEGMENT_SIZE as usize);
    assert_eq!(u16_at(&seg, 0), 0xD113);
    assert_eq!(u16_at(&seg, 2), XLP_LONG_HEADER | XLP_FIRST_IS_CONTRECORD);
    assert_eq!(u64_at(&seg, 8), 0x0300_0000);
    assert_eq!(u64_at(&seg, 24), p.system_id);
    assert_eq!(u32_at(&seg, 32), WAL_SEGMENT_SIZE as u32);
    assert_eq!(u32_at(&seg, 36), 8192);
    // Walk the continuation as a reader does: page by page.
    let mut left = u32_at(&seg, 16) as usize;
    for page in 1..=3usize {
        let room = 8192 - if page == 1 { 40 } else { 24 };
        left -= room;
        let h = page * 8192;
        assert_eq!(u32_at(&seg, h + 16) as usize, left, "page {page}");
        assert_eq!(u64_at(&seg, h + 8), 0x0300_0000 + h as u64);
        assert_eq!(u16_at(&seg, h + 2), XLP_FIRST_IS_CONTRECORD);
    }
    assert_eq!(24 + left, 200, "the continuation ends at the start position");
    assert!(seg[4 * 8192..].iter().all(|&b| b == 0), "nothing after the start's page header");
    // A start right after a page header: no continuation on that page.
    let seg = generate_segment(&p, Lsn(0x0300_2018), None);
    assert_eq!(u16_at(&seg, 8192 + 2), 0);
    assert_eq!(u32_at(&seg, 8192 + 16), 0);
}

fn sample_checkpoint(v: PgMajorVersion, redo: Lsn) -> Vec<u8> {
    let cp = CheckPoint {
        redo: redo.0,
        this_timeline_id: 1,
        prev_timeline_id: 1,
        full_page_writes: true,
        next_xid: 900,
        next_oid: 24576,
        next_multi: 1,
        oldest_xid: 716,
        oldest_xid_db: 1,
        oldest_multi: 1,
        oldest_multi_db: 1,
        ..Default::default()
    };
    let mut b = vec![0u8; CHECKPOINT_SIZE];
    cp.encode_into(&mut b, v);
    b
}

/// The checkpoint record decodes with this crate's own WAL reader (page
/// headers, lengths, CRC-32C), also when it crosses a page boundary.
#[test]
fn checkpoint_record_decodes() {
    for v in PgMajorVersion::ALL {
        for lsn in [Lsn(0x0300_0028), Lsn(0x0300_2000 - 64), Lsn(0x0300_5A08), Lsn(0x0300_0000)] {
            let p = params(v);
            let start = checkpoint_record_lsn(lsn, p.seg_size);
            let cp = sample_checkpoint(v, start);
            let rec = checkpoint_shutdown_record(&cp, Lsn(0x0200_0100));
            let seg = generate_segment(&p, start, Some(&rec));
            let mut dec = WalStreamDecoder::new(start, v);
            dec.set_system_id(p.system_id);
            dec.feed_bytes(&seg[(start.0 % p.seg_size) as usize..]);
            let got = dec.poll_decode().unwrap().expect("one whole record");
            assert_eq!(got.lsn, start, "{v:?} {lsn}");
            assert_eq!(got.rmid, rmgr_id::XLOG);
            assert_eq!(got.rmgr_info(), XLOG_CHECKPOINT_SHUTDOWN);
            assert_eq!(got.prev_lsn, Lsn(0x0200_0100));
            assert_eq!(&got.main_data[..], &cp[..]);
            assert_eq!(CheckPoint::decode(&got.main_data, v).redo, start.0);
        }
    }
}

/// A reader that starts at the segment's first page skips the fake
/// continuation and finds the record.
#[test]
fn reader_from_segment_start_skips_to_the_record() {
    let v = PgMajorVersion::V15;
    let p = params(v);
    let start = Lsn(0x0300_0000 + 2 * 8192 + 512);
    let rec = checkpoint_shutdown_record(&sample_checkpoint(v, start), Lsn(0));
    let seg = generate_segment(&p, start, Some(&rec));
    // What PostgreSQL's XLogFindNextRecord does: follow xlp_rem_len.
    let mut pos = 40usize;
    let mut left = u32_at(&seg, 16) as usize;
    while left > 0 {
        let room = 8192 - pos % 8192;
        if left <= room {
            pos += left;
            left = 0;
        } else {
            left -= room;
            pos += room + 24;
            assert_eq!(u32_at(&seg, pos - 24 + 16) as usize, left);
        }
    }
    assert_eq!(pos as u64, start.0 % p.seg_size);
    assert_eq!(u32_at(&seg, pos), CHECKPOINT_RECORD_LEN as u32);
}

/// The whole segment in memory, from its pages.
fn generate_segment(p: &SegmentParams, start: Lsn, record: Option<&[u8]>) -> Vec<u8> {
    let stub = SegmentStub::new(p, start, record);
    let mut seg = vec![0u8; p.seg_size as usize];
    for (page, out) in seg.chunks_exact_mut(XLOG_BLCKSZ).enumerate() {
        stub.page(page, out);
    }
    seg
}
