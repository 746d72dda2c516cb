//! Test support shared by the `wal_*` tests: a WAL writer that lays records
//! out the way PostgreSQL does (page headers, long headers at segment
//! starts, continuation flags, 8-byte alignment, XLOG SWITCH padding),
//! record bodies, and feeding a decoder in random chunks.
#![allow(dead_code)]

use postgres_ffi::wal::stream::xlog_page_magic;
use postgres_ffi::wal::{
    DecodedWalRecord, WalDecodeError, WalStreamDecoder, WAL_SEGMENT_SIZE, XLOG_BLCKSZ,
    XLOG_LONG_PHD_LEN, XLOG_RECORD_HEADER_LEN, XLOG_SHORT_PHD_LEN,
};
use postgres_ffi::PgMajorVersion;
use rand::Rng;
use utils::lsn::Lsn;

pub const SYSTEM_ID: u64 = 0x7300_1122_3344_5566;

/// Where the bytes of one written record are.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub lsn: Lsn,
    /// End of the record's last byte (unaligned).
    pub end: Lsn,
    pub tot_len: usize,
}

impl Written {
    /// The LSN of byte `k` of the record (skipping page headers).
    pub fn byte_lsn(&self, k: usize) -> Lsn {
        assert!(k < self.tot_len);
        let (mut pos, mut left) = (self.lsn.0, k as u64);
        loop {
            let page_left = XLOG_BLCKSZ as u64 - pos % XLOG_BLCKSZ as u64;
            if left < page_left {
                return Lsn(pos + left);
            }
            left -= page_left;
            pos += page_left;
            pos += if pos.is_multiple_of(WAL_SEGMENT_SIZE) {
                XLOG_LONG_PHD_LEN
            } else {
                XLOG_SHORT_PHD_LEN
            } as u64;
        }
    }
}

/// Builds a WAL byte stream starting at `start`.
pub struct WalWriter {
    pub version: PgMajorVersion,
    pub start: Lsn,
    pub out: Vec<u8>,
    pub prev: Lsn,
    pub records: Vec<Written>,
    /// Byte ranges (stream offsets) of the checked page-header fields.
    pub page_headers: Vec<(usize, usize)>,
}

impl WalWriter {
    /// `start` must be a page boundary or an 8-aligned position after the
    /// page header.
    pub fn new(start: Lsn, version: PgMajorVersion) -> WalWriter {
        WalWriter {
            version,
            start,
            out: Vec::new(),
            prev: Lsn(0),
            records: Vec::new(),
            page_headers: Vec::new(),
        }
    }

    pub fn lsn(&self) -> Lsn {
        self.start + self.out.len() as u64
    }

    /// Append a record with this body (sub-headers and payload); returns its LSN.
    pub fn record(&mut self, rmid: u8, info: u8, xid: u32, body: &[u8]) -> Lsn {
        self.page_header_if_needed(0);
        let lsn = self.lsn();
        let tot_len = (XLOG_RECORD_HEADER_LEN + body.len()) as u32;
        let mut header = [0u8; XLOG_RECORD_HEADER_LEN];
        header[0..4].copy_from_slice(&tot_len.to_le_bytes());
        header[4..8].copy_from_slice(&xid.to_le_bytes());
        header[8..16].copy_from_slice(&self.prev.0.to_le_bytes());
        header[16] = info;
        header[17] = rmid;
        let crc = crc32c::crc32c_append(crc32c::crc32c(body), &header[..20]);
        header[20..24].copy_from_slice(&crc.to_le_bytes());
        let mut left = tot_len as usize;
        for part in [&header[..], body] {
            let mut rest = part;
            while !rest.is_empty() {
                self.page_header_if_needed(left);
                let page_left = XLOG_BLCKSZ - (self.lsn().0 % XLOG_BLCKSZ as u64) as usize;
                let n = page_left.min(rest.len());
                self.out.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                left -= n;
            }
        }
        self.records.push(Written { lsn, end: self.lsn(), tot_len: tot_len as usize });
        self.prev = lsn;
        let aligned = self.lsn().align();
        self.out.resize(self.out.len() + (aligned.0 - self.lsn().0) as usize, 0);
        lsn
    }

    /// An XLOG SWITCH record, then zero padding up to the next segment.
    pub fn switch(&mut self) -> Lsn {
        let lsn = self.record(0, 0x40, 0, &[]);
        let next_seg = self.lsn().0.div_ceil(WAL_SEGMENT_SIZE) * WAL_SEGMENT_SIZE;
        self.out.resize(self.out.len() + (next_seg - self.lsn().0) as usize, 0);
        lsn
    }

    /// A record of exactly `tot_len` bytes (>= 26) with main data only.
    pub fn record_of_len(&mut self, tot_len: usize, fill: u8) -> Lsn {
        let body = main_data_body(tot_len - XLOG_RECORD_HEADER_LEN, fill);
        self.record(21, 0x00, 7, &body)
    }

    /// Records on the current page so that the next record starts at
    /// `target` (same page, at least 32 bytes ahead, 8-aligned).
    pub fn fill_to(&mut self, target: Lsn) {
        self.page_header_if_needed(0);
        let gap = (target.0 - self.lsn().0) as usize;
        assert!(gap >= 32 && gap.is_multiple_of(8) && target.0 / 8192 == self.lsn().0 / 8192);
        self.record_of_len(gap, 0xAB);
        assert_eq!(self.lsn(), target);
    }

    /// At a page boundary: write its header, continuing a record with
    /// `rem_len` bytes left (0: none).
    fn page_header_if_needed(&mut self, rem_len: usize) {
        let lsn = self.lsn();
        if !lsn.0.is_multiple_of(XLOG_BLCKSZ as u64) {
            return;
        }
        let long = lsn.0.is_multiple_of(WAL_SEGMENT_SIZE);
        let mut info: u16 = if rem_len > 0 { 0x0001 } else { 0 };
        if long {
            info |= 0x0002;
        }
        let at = self.out.len();
        self.out.extend_from_slice(&xlog_page_magic(self.version).to_le_bytes());
        self.out.extend_from_slice(&info.to_le_bytes());
        self.out.extend_from_slice(&1u32.to_le_bytes());
        self.out.extend_from_slice(&lsn.0.to_le_bytes());
        self.out.extend_from_slice(&(rem_len as u32).to_le_bytes());
        self.out.extend_from_slice(&[0u8; 4]);
        self.page_headers.push((at, at + 2));
        self.page_headers.push((at + 8, at + 16));
        if rem_len > 0 {
            self.page_headers.push((at + 16, at + 20));
        }
        if long {
            self.out.extend_from_slice(&SYSTEM_ID.to_le_bytes());
            self.out.extend_from_slice(&(WAL_SEGMENT_SIZE as u32).to_le_bytes());
            self.out.extend_from_slice(&(XLOG_BLCKSZ as u32).to_le_bytes());
            self.page_headers.push((at + 24, at + 40));
        }
        debug_assert_eq!(
            self.out.len() - at,
            if long { XLOG_LONG_PHD_LEN } else { XLOG_SHORT_PHD_LEN }
        );
    }
}

/// The body (everything after the record header) of a record with only
/// main data, exactly `body_len` bytes long.
pub fn main_data_body(body_len: usize, fill: u8) -> Vec<u8> {
    assert!(body_len >= 2);
    let mut body = Vec::with_capacity(body_len);
    if body_len - 2 <= 255 {
        body.extend_from_slice(&[255, (body_len - 2) as u8]);
    } else {
        assert!(body_len >= 5);
        body.push(254);
        body.extend_from_slice(&((body_len - 5) as u32).to_le_bytes());
    }
    let mut x = fill;
    while body.len() < body_len {
        body.push(x);
        x = x.wrapping_mul(31).wrapping_add(7);
    }
    body
}

/// A body with one block reference carrying a whole uncompressed image
/// and `data_len` bytes of block data, then `main_len` bytes of main data.
pub fn image_body(blkno: u32, data_len: u16, main_len: u8) -> Vec<u8> {
    let mut body = vec![0u8, 0x10 | if data_len > 0 { 0x20 } else { 0 }];
    body.extend_from_slice(&data_len.to_le_bytes());
    body.extend_from_slice(&8192u16.to_le_bytes()); // bimg_len
    body.extend_from_slice(&0u16.to_le_bytes()); // hole_offset
    body.push(0x02); // apply
    for v in [1663u32, 5, 16384, blkno] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(&[255, main_len]);
    body.extend(test_page(blkno));
    body.extend((0..data_len).map(|i| i as u8));
    body.extend((0..main_len).map(|i| i.wrapping_mul(3)));
    body
}

/// A page with a plausible header (pd_lower 28, pd_upper 8000) and content.
pub fn test_page(seed: u32) -> Vec<u8> {
    let mut page = vec![0u8; 8192];
    page[12..14].copy_from_slice(&28u16.to_le_bytes());
    page[14..16].copy_from_slice(&8000u16.to_le_bytes());
    page[16..18].copy_from_slice(&8192u16.to_le_bytes());
    page[18..20].copy_from_slice(&(8192u16 | 4).to_le_bytes());
    for (i, b) in page[8000..].iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(seed | 1) as u8;
    }
    page
}

/// Feed `wal` to `decoder` in random chunks (sometimes single bytes),
/// polling after each; all records decoded, or the first error.
pub fn decode_in_chunks(
    decoder: &mut WalStreamDecoder,
    wal: &[u8],
    rng: &mut impl Rng,
) -> (Vec<DecodedWalRecord>, Option<WalDecodeError>) {
    let mut records = Vec::new();
    let max_chunk = [1, 16, 700, 8192, 70_000, 200_000][rng.gen_range(0..6)];
    // A cheap generator for the many chunk sizes (ChaCha is slow in debug builds).
    let mut x: u64 = rng.gen::<u64>() | 1;
    let mut at = 0;
    while at < wal.len() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (1 + (x % max_chunk) as usize).min(wal.len() - at);
        decoder.feed_bytes(&wal[at..at + n]);
        at += n;
        loop {
            match decoder.poll_decode() {
                Ok(Some(r)) => records.push(r),
                Ok(None) => break,
                Err(e) => return (records, Some(e)),
            }
        }
    }
    (records, None)
}
