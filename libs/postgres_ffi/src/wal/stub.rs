//! A WAL segment generated for a data directory made at an LSN (a base
//! backup served by the pageserver): the server that starts on it finds the
//! segment holding its checkpoint in `pg_wal`, with valid page headers.
//!
//! Layout of the generated segment (`seg_size` bytes, zero elsewhere):
//! - the long page header on the segment's first page, and the short header
//!   of every following page up to the one holding the start position;
//! - the bytes before the start position are covered by a fake record
//!   continuation (`XLP_FIRST_IS_CONTRECORD`, `xlp_rem_len` counting what is
//!   left of it on each page), so a reader that starts on any of these pages
//!   skips to the start position, as it would in a real segment;
//! - optionally a shutdown checkpoint record at the start position (what
//!   `pg_resetwal` writes): an unmodified PostgreSQL reads its checkpoint
//!   record from there. Without it (Neon's compute format) the compute
//!   starts writing at the start position without reading any record.
//!
//! The start position is [`normalize_lsn`] of the requested LSN: a record
//! never starts inside a page header.

use utils::lsn::Lsn;

use super::rmgr::xlog::XLOG_CHECKPOINT_SHUTDOWN;
use super::stream::{xlog_page_magic, XLP_FIRST_IS_CONTRECORD, XLP_LONG_HEADER};
use super::{rmgr_id, XLOG_BLCKSZ, XLOG_LONG_PHD_LEN, XLOG_RECORD_HEADER_LEN, XLOG_SHORT_PHD_LEN};
use crate::controlfile::CHECKPOINT_SIZE;
use crate::PgMajorVersion;

/// `XLR_BLOCK_ID_DATA_SHORT`: main data of at most 255 bytes follows.
const XLR_BLOCK_ID_DATA_SHORT: u8 = 255;
/// A checkpoint record: header, short main-data header, `CheckPoint`.
pub const CHECKPOINT_RECORD_LEN: usize = XLOG_RECORD_HEADER_LEN + 2 + CHECKPOINT_SIZE;

/// What the generated segment belongs to.
#[derive(Debug, Clone, Copy)]
pub struct SegmentParams {
    pub version: PgMajorVersion,
    pub system_id: u64,
    pub timeline: u32,
    /// `xlog_seg_size` of `pg_control`, bytes: a power of two, at least a page.
    pub seg_size: u64,
}

/// The first position at or after `lsn` where a record can start: past the
/// page header when `lsn` is at a page boundary or inside its header (no
/// record ends inside a header, so the WAL before it is the same).
pub fn normalize_lsn(lsn: Lsn, seg_size: u64) -> Lsn {
    let page_start = lsn.0 - lsn.0 % XLOG_BLCKSZ as u64;
    let header =
        if page_start.is_multiple_of(seg_size) { XLOG_LONG_PHD_LEN } else { XLOG_SHORT_PHD_LEN }
            as u64;
    Lsn(lsn.0.max(page_start + header))
}

/// `XLogFileName`: timeline, then the segment number split as PostgreSQL
/// splits it (segments per 4 GiB "xlogid"), 8 hex digits each.
pub fn wal_file_name(timeline: u32, lsn: Lsn, seg_size: u64) -> String {
    let segno = lsn.0 / seg_size;
    let per_id = 0x1_0000_0000 / seg_size;
    format!("{timeline:08X}{:08X}{:08X}", segno / per_id, segno % per_id)
}

/// Where a checkpoint record written for `lsn` starts: `normalize_lsn(lsn)`,
/// or, when the record would not fit in the rest of that segment, the first
/// record position of the next segment (the returned segment is the one
/// to generate).
pub fn checkpoint_record_lsn(lsn: Lsn, seg_size: u64) -> Lsn {
    let start = normalize_lsn(lsn, seg_size);
    let seg_end = (start.0 / seg_size + 1) * seg_size;
    // Page headers the record may cross add at most one short header.
    let need = (CHECKPOINT_RECORD_LEN + XLOG_SHORT_PHD_LEN) as u64;
    if start.0 + need <= seg_end {
        start
    } else {
        Lsn(seg_end + XLOG_LONG_PHD_LEN as u64)
    }
}

/// The segment holding `start` (a [`normalize_lsn`] position), page by
/// page: the page headers up to `start` and, if given, `record` (whole
/// record bytes) at it. Memory is the pages the record touches (at most
/// two), whatever the segment size. Panics if `start` is not a record
/// position or the record does not fit in the segment (callers use
/// [`checkpoint_record_lsn`]).
pub struct SegmentStub {
    p: SegmentParams,
    seg_start: u64,
    start_off: usize,
    start_page: usize,
    /// Pages `start_page..start_page + tail.len() / XLOG_BLCKSZ` as written.
    tail: Vec<u8>,
}

impl SegmentStub {
    /// Panics as the type says.
    pub fn new(p: &SegmentParams, start: Lsn, record: Option<&[u8]>) -> SegmentStub {
        assert!(p.seg_size.is_power_of_two() && p.seg_size >= XLOG_BLCKSZ as u64);
        assert_eq!(start, normalize_lsn(start, p.seg_size), "{start} is inside a page header");
        let seg_start = start.0 - start.0 % p.seg_size;
        let start_off = (start.0 - seg_start) as usize;
        let start_page = start_off / XLOG_BLCKSZ;
        let rec_len = record.map_or(0, <[u8]>::len);
        // The record and the short headers of the pages it continues on.
        let end_off = start_off + rec_len + rec_len.div_ceil(XLOG_BLCKSZ) * XLOG_SHORT_PHD_LEN;
        let pages = (end_off.div_ceil(XLOG_BLCKSZ) - start_page).max(1);
        assert!(
            start_page + pages <= (p.seg_size as usize) / XLOG_BLCKSZ,
            "a record crossing into the next segment"
        );
        let mut stub = SegmentStub {
            p: *p,
            seg_start,
            start_off,
            start_page,
            tail: vec![0; pages * XLOG_BLCKSZ],
        };
        let mut tail = std::mem::take(&mut stub.tail);
        stub.header(&mut tail[..XLOG_BLCKSZ], start_page);
        if let Some(rec) = record {
            stub.write_record(&mut tail, rec);
        }
        stub.tail = tail;
        stub
    }

    /// Pages in the segment.
    pub fn page_count(&self) -> usize {
        self.p.seg_size as usize / XLOG_BLCKSZ
    }

    /// Pages from this one on are all zeros.
    pub fn zeros_from_page(&self) -> usize {
        self.start_page + self.tail.len() / XLOG_BLCKSZ
    }

    /// Page `page` of the segment into `out` (`XLOG_BLCKSZ` bytes).
    pub fn page(&self, page: usize, out: &mut [u8]) {
        assert_eq!(out.len(), XLOG_BLCKSZ);
        if page < self.start_page {
            out.fill(0);
            self.header(out, page);
        } else if page < self.zeros_from_page() {
            let at = (page - self.start_page) * XLOG_BLCKSZ;
            out.copy_from_slice(&self.tail[at..at + XLOG_BLCKSZ]);
        } else {
            out.fill(0);
        }
    }

    /// The header of a page up to the start page: a continuation of the
    /// fake record that ends at `start`.
    fn header(&self, out: &mut [u8], page: usize) {
        let data_from = page * XLOG_BLCKSZ + header_len(page);
        // Fake-record bytes left from this page's data start to `start`,
        // page headers excluded.
        let rem = self.start_off - data_from - (self.start_page - page) * XLOG_SHORT_PHD_LEN;
        write_page_header(out, &self.p, self.seg_start, page, rem as u32);
    }

    /// Copy `rec` into the tail from `start`, continuing after the header
    /// of each page it crosses.
    fn write_record(&self, tail: &mut [u8], rec: &[u8]) {
        let base = self.start_page * XLOG_BLCKSZ;
        let mut off = self.start_off;
        let mut left = rec;
        while !left.is_empty() {
            if off.is_multiple_of(XLOG_BLCKSZ) {
                let page = off / XLOG_BLCKSZ;
                let at = off - base;
                write_page_header(
                    &mut tail[at..at + XLOG_BLCKSZ],
                    &self.p,
                    self.seg_start,
                    page,
                    left.len() as u32,
                );
                off += XLOG_SHORT_PHD_LEN;
            }
            let room = XLOG_BLCKSZ - off % XLOG_BLCKSZ;
            let n = room.min(left.len());
            tail[off - base..off - base + n].copy_from_slice(&left[..n]);
            off += n;
            left = &left[n..];
        }
    }
}

fn header_len(page: usize) -> usize {
    if page == 0 {
        XLOG_LONG_PHD_LEN
    } else {
        XLOG_SHORT_PHD_LEN
    }
}

/// `XLogPageHeaderData` (+ the long part on page 0) of segment page `page`
/// into `out`, that page's bytes. `rem_len` > 0 marks the page as starting
/// with a continuation of `rem_len` bytes.
fn write_page_header(out: &mut [u8], p: &SegmentParams, seg_start: u64, page: usize, rem: u32) {
    let mut info = if rem > 0 { XLP_FIRST_IS_CONTRECORD } else { 0 };
    if page == 0 {
        info |= XLP_LONG_HEADER;
    }
    let h = &mut out[..header_len(page)];
    h[0..2].copy_from_slice(&xlog_page_magic(p.version).to_le_bytes());
    h[2..4].copy_from_slice(&info.to_le_bytes());
    h[4..8].copy_from_slice(&p.timeline.to_le_bytes());
    h[8..16].copy_from_slice(&(seg_start + (page * XLOG_BLCKSZ) as u64).to_le_bytes());
    h[16..20].copy_from_slice(&rem.to_le_bytes());
    // 20..24: padding (MAXALIGN of the short header).
    if page == 0 {
        h[24..32].copy_from_slice(&p.system_id.to_le_bytes());
        h[32..36].copy_from_slice(&(p.seg_size as u32).to_le_bytes());
        h[36..40].copy_from_slice(&(XLOG_BLCKSZ as u32).to_le_bytes());
    }
}

/// An `XLOG_CHECKPOINT_SHUTDOWN` record holding `checkpoint` (the encoded
/// `CheckPoint`), with `xl_prev` = `prev` (0 when unknown, as pg_resetwal
/// writes it; PostgreSQL only checks that it is below the record).
pub fn checkpoint_shutdown_record(checkpoint: &[u8], prev: Lsn) -> Vec<u8> {
    assert_eq!(checkpoint.len(), CHECKPOINT_SIZE, "a CheckPoint is {CHECKPOINT_SIZE} bytes");
    let mut r = vec![0u8; CHECKPOINT_RECORD_LEN];
    r[0..4].copy_from_slice(&(CHECKPOINT_RECORD_LEN as u32).to_le_bytes());
    // xl_xid 4..8 = 0.
    r[8..16].copy_from_slice(&prev.0.to_le_bytes());
    r[16] = XLOG_CHECKPOINT_SHUTDOWN;
    r[17] = rmgr_id::XLOG;
    // 18..20 padding, 20..24 CRC.
    r[24] = XLR_BLOCK_ID_DATA_SHORT;
    r[25] = CHECKPOINT_SIZE as u8;
    r[26..].copy_from_slice(checkpoint);
    // CRC-32C of the payload, then of the header up to xl_crc.
    let crc = crc32c::crc32c_append(crc32c::crc32c(&r[XLOG_RECORD_HEADER_LEN..]), &r[..20]);
    r[20..24].copy_from_slice(&crc.to_le_bytes());
    r
}

#[cfg(test)]
mod tests;
