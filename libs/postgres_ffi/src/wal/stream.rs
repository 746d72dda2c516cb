//! [`WalStreamDecoder`]: whole WAL records out of a byte stream that
//! arrives in arbitrary chunks (as in replication `w` messages).
//!
//! The stream is split into 8 KiB pages, each starting with a page header
//! (24 bytes, or 40 on the first page of a 16 MiB segment). Records are
//! 8-byte aligned, may span any number of pages (their 24-byte header
//! too), and a page whose first bytes continue a record says so
//! (`XLP_FIRST_IS_CONTRECORD`, with the bytes left in `xlp_rem_len`). After
//! an XLOG SWITCH record the rest of the segment is padding.
//!
//! Checks: page magic of the major version, flags, `xlp_pageaddr` equal to
//! the page's LSN, the long header exactly on segment starts with the
//! expected segment and block sizes and one system identifier, the
//! timeline never going back (and, given the timeline history, `xlp_tli`
//! equal to the timeline that wrote the page's LSN:
//! [`WalStreamDecoder::set_timeline_history`]), continuation flags and lengths, record
//! length bounds, `xl_prev` chaining, a known resource manager, CRC-32C.
//!
//! Invariants: a record that fits in its page is handed on as a slice of
//! the fed bytes (no copy); a record spanning pages is assembled in a
//! buffer that grows with the bytes received, never sized from the
//! untrusted `xl_tot_len` alone. Every error names the LSN of the record
//! that cannot be decoded (a bad page header met while assembling a record
//! names the record; one between records names the page), and the decoder
//! then stays failed: no input makes it panic, loop or skip data silently.

use bytes::{Buf, Bytes, BytesMut};
use utils::lsn::Lsn;

use super::record::{decode_record, XLogRecordHeader};
use super::timeline_history::TimelineHistory;
use super::{
    rmgr_id, DecodedWalRecord, WalDecodeError, MAX_RECORD_LEN, WAL_SEGMENT_SIZE, XLOG_BLCKSZ,
    XLOG_LONG_PHD_LEN, XLOG_RECORD_HEADER_LEN, XLOG_SHORT_PHD_LEN,
};
use crate::PgMajorVersion;

/// `xlp_info` bits (`xlog_internal.h`).
pub const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
pub const XLP_LONG_HEADER: u16 = 0x0002;
pub const XLP_BKP_REMOVABLE: u16 = 0x0004;
pub const XLP_FIRST_IS_OVERWRITE_CONTRECORD: u16 = 0x0008;
pub const XLP_ALL_FLAGS: u16 = 0x000F;
/// XLOG rmgr record kind that ends a segment early.
pub const XLOG_SWITCH: u8 = 0x40;
/// Highest built-in resource manager id in 15..=18 (`RM_MAX_BUILTIN_ID`);
/// ids from 128 (`RM_MIN_CUSTOM_ID`) are extensions'.
pub const RM_MAX_BUILTIN_ID: u8 = rmgr_id::LOGICAL_MESSAGE;
pub const RM_MIN_CUSTOM_ID: u8 = 128;

/// First capacity of the buffer of a record that spans pages; it grows as
/// bytes arrive.
const SPANNING_RECORD_INITIAL_CAPACITY: usize = 32 * 1024;

const _: () = assert!(XLOG_SHORT_PHD_LEN.is_multiple_of(8) && XLOG_LONG_PHD_LEN.is_multiple_of(8));
const _: () = assert!(WAL_SEGMENT_SIZE.is_multiple_of(XLOG_BLCKSZ as u64));

/// `XLOG_PAGE_MAGIC` of each major version (`xlog_internal.h`).
pub const fn xlog_page_magic(version: PgMajorVersion) -> u16 {
    match version {
        PgMajorVersion::V15 => 0xD110,
        PgMajorVersion::V16 => 0xD113,
        PgMajorVersion::V17 => 0xD116,
        PgMajorVersion::V18 => 0xD118,
    }
}

/// A record whose bytes span pages, being assembled.
struct SpanningRecord {
    lsn: Lsn,
    tot_len: usize,
    bytes: BytesMut,
}

/// Turns WAL bytes fed in any chunking into whole, checked, decoded records.
pub struct WalStreamDecoder {
    version: PgMajorVersion,
    /// Bytes fed and not consumed yet; `pending[0]` is the WAL byte at `pos`.
    pending: BytesMut,
    pos: Lsn,
    /// Where the next record starts, or (before its page header is read)
    /// the page boundary before it. Bytes from `pos` up to it are padding.
    next_record: Lsn,
    /// Start of the last record returned; `xl_prev` of the next must match.
    prev_record: Option<Lsn>,
    spanning: Option<SpanningRecord>,
    system_id: Option<u64>,
    timeline: Option<u32>,
    /// When set, every page's `xlp_tli` must be `history.tli_at(page)`.
    history: Option<TimelineHistory>,
    failed: Option<WalDecodeError>,
}

enum Step {
    NeedMore,
    Progress,
    Done(DecodedWalRecord),
}

impl WalStreamDecoder {
    /// A decoder for WAL starting at `start_lsn`: a record start, or the
    /// page boundary just before a page's first record (then the page
    /// header comes first). The first bytes fed are the byte at `start_lsn`.
    pub fn new(start_lsn: Lsn, version: PgMajorVersion) -> Self {
        WalStreamDecoder {
            version,
            pending: BytesMut::new(),
            pos: start_lsn,
            next_record: start_lsn,
            prev_record: None,
            spanning: None,
            system_id: None,
            timeline: None,
            history: None,
            failed: None,
        }
    }

    /// Require each page header's `xlp_tli` to be the timeline that
    /// `history` says wrote the page's LSN (the page holding a switch LSN
    /// was begun by the old timeline, so it carries the old TLI). Replaced
    /// when the stream continues on a newer timeline.
    pub fn set_timeline_history(&mut self, history: TimelineHistory) {
        self.history = Some(history);
    }

    /// Require this system identifier in long page headers (else the first
    /// one seen is required from then on).
    pub fn set_system_id(&mut self, system_id: u64) {
        self.system_id = Some(system_id);
    }

    /// The system identifier of the long page headers seen so far.
    pub fn system_id(&self) -> Option<u64> {
        self.system_id
    }

    /// Drop what was fed past `lsn`, the end of the last record returned
    /// (the caller knows it), and decode from there: the bytes after it were the
    /// start of a record the server never completed (it switched timeline
    /// at `lsn`). The checks on the next record's `xl_prev` and the
    /// timeline and system id seen stay.
    pub fn restart_at(&mut self, lsn: Lsn) {
        assert!(lsn <= self.fed_lsn(), "restart at {lsn}, fed up to {}", self.fed_lsn());
        self.pending.clear();
        self.spanning = None;
        self.pos = lsn;
        self.next_record = lsn;
        self.failed = None;
    }

    /// Append WAL that continues exactly where the previous bytes ended.
    pub fn feed_bytes(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Where the next record starts (see [`WalStreamDecoder::new`] for the
    /// page-boundary case); the start of a record being assembled.
    pub fn lsn(&self) -> Lsn {
        match &self.spanning {
            Some(s) => s.lsn,
            None => self.next_record,
        }
    }

    /// The end of the bytes fed so far.
    pub fn fed_lsn(&self) -> Lsn {
        self.pos + self.pending.len() as u64
    }

    /// The next whole record, or `Ok(None)` until more bytes are fed.
    /// After an error every call returns the same error.
    pub fn poll_decode(&mut self) -> Result<Option<DecodedWalRecord>, WalDecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.decode_next();
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn decode_next(&mut self) -> Result<Option<DecodedWalRecord>, WalDecodeError> {
        loop {
            if self.spanning.is_none() && !self.skip_padding() {
                return Ok(None);
            }
            let step = if self.pos.0.is_multiple_of(XLOG_BLCKSZ as u64) {
                self.read_page_header()?
            } else if self.spanning.is_none() {
                self.start_record()?
            } else {
                self.continue_record()?
            };
            match step {
                Step::NeedMore => return Ok(None),
                Step::Progress => continue,
                Step::Done(record) => return Ok(Some(record)),
            }
        }
    }

    /// Drop bytes up to `next_record`; true once there.
    fn skip_padding(&mut self) -> bool {
        debug_assert!(self.pos <= self.next_record);
        let skip = (self.next_record.0 - self.pos.0).min(self.pending.len() as u64);
        self.pending.advance(skip as usize);
        self.pos = self.pos + skip;
        self.pos == self.next_record
    }

    fn fail<T>(&self, lsn: Lsn, msg: String) -> Result<T, WalDecodeError> {
        Err(WalDecodeError { lsn, msg })
    }
}

/// A page header's fields (`XLogPageHeaderData`, `XLogLongPageHeaderData`).
struct PageHeader {
    magic: u16,
    info: u16,
    timeline: u32,
    pageaddr: u64,
    rem_len: u32,
    /// sysid, seg_size, xlog_blcksz of a long header.
    long: Option<(u64, u32, u32)>,
}

impl PageHeader {
    fn decode(b: &[u8], long: bool) -> PageHeader {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        PageHeader {
            magic: u16::from_le_bytes([b[0], b[1]]),
            info: u16::from_le_bytes([b[2], b[3]]),
            timeline: u32_at(4),
            pageaddr: u64_at(8),
            rem_len: u32_at(16),
            long: long.then(|| (u64_at(24), u32_at(32), u32_at(36))),
        }
    }
}

impl WalStreamDecoder {
    /// At a page boundary: check and consume the page header.
    fn read_page_header(&mut self) -> Result<Step, WalDecodeError> {
        let page_lsn = self.pos;
        let first_in_segment = page_lsn.0.is_multiple_of(WAL_SEGMENT_SIZE);
        let len = if first_in_segment { XLOG_LONG_PHD_LEN } else { XLOG_SHORT_PHD_LEN };
        if self.pending.len() < len {
            return Ok(Step::NeedMore);
        }
        let header = PageHeader::decode(&self.pending[..len], first_in_segment);
        // A bad page in the middle of a record: the record is what cannot be decoded.
        let at_fault = self.spanning.as_ref().map_or(page_lsn, |s| s.lsn);
        self.check_page_header(page_lsn, &header)
            .or_else(|msg| self.fail(at_fault, format!("page header at {page_lsn}: {msg}")))?;
        self.check_continuation(page_lsn, &header)?;
        self.pending.advance(len);
        self.pos = self.pos + len as u64;
        if self.spanning.is_none() {
            self.next_record = self.next_record.max(self.pos);
        }
        Ok(Step::Progress)
    }

    fn check_page_header(&mut self, page_lsn: Lsn, h: &PageHeader) -> Result<(), String> {
        let magic = xlog_page_magic(self.version);
        if h.magic != magic {
            return Err(format!(
                "magic {:#06x}, expected {magic:#06x} (PostgreSQL {})",
                h.magic,
                self.version.number()
            ));
        }
        if h.info & !XLP_ALL_FLAGS != 0 {
            return Err(format!("unknown flags in xlp_info {:#06x}", h.info));
        }
        if (h.info & XLP_LONG_HEADER != 0) != h.long.is_some() {
            return Err(format!(
                "xlp_info {:#06x}: long header flag wrong for the segment position",
                h.info
            ));
        }
        if h.pageaddr != page_lsn.0 {
            return Err(format!("xlp_pageaddr is {}", Lsn(h.pageaddr)));
        }
        if self.timeline.is_some_and(|tli| h.timeline < tli) {
            return Err(format!(
                "timeline {} after timeline {}",
                h.timeline,
                self.timeline.unwrap()
            ));
        }
        if let Some(history) = &self.history {
            let expected = history.tli_at(page_lsn);
            if h.timeline != expected {
                return Err(format!(
                    "xlp_tli is timeline {}, but the history of timeline {} says timeline \
                     {expected} wrote {page_lsn}",
                    h.timeline,
                    history.tli()
                ));
            }
        }
        self.timeline = Some(h.timeline);
        if let Some((sysid, seg_size, blcksz)) = h.long {
            if seg_size as u64 != WAL_SEGMENT_SIZE || blcksz as usize != XLOG_BLCKSZ {
                return Err(format!("segment size {seg_size} / block size {blcksz} not supported"));
            }
            if self.system_id.is_some_and(|id| id != sysid) {
                return Err(format!("system id {sysid}, expected {}", self.system_id.unwrap()));
            }
            self.system_id = Some(sysid);
        }
        Ok(())
    }

    /// The page continues the record being assembled, exactly; or, when
    /// none is, it does not claim to continue one. A page flagged
    /// `XLP_FIRST_IS_OVERWRITE_CONTRECORD` ends the record being assembled
    /// instead: the server crashed while writing it, never completed it,
    /// and after recovery wrote new records from this page on (the first
    /// one an `XLOG_OVERWRITE_CONTRECORD` naming it). The partial record is
    /// dropped, as PostgreSQL's own reader does; nothing of it was handed
    /// out, and `xl_prev` of the next record names the record before it.
    fn check_continuation(&mut self, page_lsn: Lsn, h: &PageHeader) -> Result<(), WalDecodeError> {
        let is_cont = h.info & XLP_FIRST_IS_CONTRECORD != 0;
        let overwrites = h.info & XLP_FIRST_IS_OVERWRITE_CONTRECORD != 0;
        if overwrites && !is_cont {
            if self.spanning.take().is_some() {
                self.next_record = page_lsn;
            }
            return Ok(());
        }
        match &self.spanning {
            Some(s) => {
                let left = s.tot_len - s.bytes.len();
                if !is_cont || h.rem_len as usize != left {
                    let overwritten = if h.info & XLP_FIRST_IS_OVERWRITE_CONTRECORD != 0 {
                        " (the server abandoned this record: XLP_FIRST_IS_OVERWRITE_CONTRECORD)"
                    } else {
                        ""
                    };
                    return self.fail(s.lsn, format!(
                        "page {page_lsn} should continue this record with {left} bytes: xlp_info {:#06x}, xlp_rem_len {}{overwritten}",
                        h.info, h.rem_len
                    ));
                }
            }
            None if is_cont => {
                return self.fail(page_lsn, format!(
                    "page begins with the rest ({} bytes) of a record, expected a record start at {}",
                    h.rem_len, self.next_record.max(page_lsn + XLOG_SHORT_PHD_LEN as u64)
                ));
            }
            None => {}
        }
        Ok(())
    }

    /// At a record start within a page: hand out a record that fits in the
    /// page, or begin assembling one that spans pages.
    fn start_record(&mut self) -> Result<Step, WalDecodeError> {
        let lsn = self.pos;
        if !lsn.0.is_multiple_of(8) {
            return self.fail(lsn, "record start is not 8-byte aligned".to_string());
        }
        let page_offset = (lsn.0 % XLOG_BLCKSZ as u64) as usize;
        let header_len = if lsn.0 % WAL_SEGMENT_SIZE < XLOG_BLCKSZ as u64 {
            XLOG_LONG_PHD_LEN
        } else {
            XLOG_SHORT_PHD_LEN
        };
        if page_offset < header_len {
            return self
                .fail(lsn, format!("record start inside the {header_len}-byte page header"));
        }
        if self.pending.len() < 4 {
            return Ok(Step::NeedMore);
        }
        // 8-byte alignment leaves at least 8 bytes of the page: xl_tot_len is here.
        let tot_len = u32::from_le_bytes(self.pending[..4].try_into().unwrap());
        if tot_len == 0 {
            return self.fail(lsn, "xl_tot_len is zero where a record should start".to_string());
        }
        if (tot_len as usize) < XLOG_RECORD_HEADER_LEN || tot_len > MAX_RECORD_LEN {
            return self.fail(lsn, format!("xl_tot_len {tot_len} out of range"));
        }
        let tot_len = tot_len as usize;
        if tot_len > XLOG_BLCKSZ - page_offset {
            let capacity = tot_len.min(SPANNING_RECORD_INITIAL_CAPACITY);
            self.spanning =
                Some(SpanningRecord { lsn, tot_len, bytes: BytesMut::with_capacity(capacity) });
            return Ok(Step::Progress);
        }
        if self.pending.len() < tot_len {
            return Ok(Step::NeedMore);
        }
        let bytes = self.pending.split_to(tot_len).freeze();
        self.pos = self.pos + tot_len as u64;
        self.finish_record(lsn, bytes).map(Step::Done)
    }

    /// Copy what the current page holds of the record being assembled.
    fn continue_record(&mut self) -> Result<Step, WalDecodeError> {
        let page_left = XLOG_BLCKSZ - (self.pos.0 % XLOG_BLCKSZ as u64) as usize;
        let spanning = self.spanning.as_mut().expect("a record is being assembled");
        let wanted = spanning.tot_len - spanning.bytes.len();
        let n = wanted.min(page_left).min(self.pending.len());
        if n == 0 {
            return Ok(Step::NeedMore);
        }
        spanning.bytes.extend_from_slice(&self.pending[..n]);
        self.pending.advance(n);
        self.pos = self.pos + n as u64;
        if spanning.bytes.len() < spanning.tot_len {
            return Ok(Step::Progress);
        }
        let done = self.spanning.take().expect("checked above");
        self.finish_record(done.lsn, done.bytes.freeze()).map(Step::Done)
    }

    /// All bytes of the record at `lsn` are here (`self.pos` is its end):
    /// check its header and CRC, find the next record's start, decode.
    fn finish_record(
        &mut self,
        lsn: Lsn,
        bytes: Bytes,
    ) -> Result<DecodedWalRecord, WalDecodeError> {
        let header = XLogRecordHeader::decode(&bytes);
        debug_assert_eq!(header.tot_len as usize, bytes.len());
        if let Some(prev) = self.prev_record {
            if header.prev != prev {
                return self.fail(
                    lsn,
                    format!("xl_prev {} but the previous record is at {prev}", header.prev),
                );
            }
        }
        if header.rmid > RM_MAX_BUILTIN_ID && header.rmid < RM_MIN_CUSTOM_ID {
            return self.fail(lsn, format!("unknown resource manager id {}", header.rmid));
        }
        let crc =
            crc32c::crc32c_append(crc32c::crc32c(&bytes[XLOG_RECORD_HEADER_LEN..]), &bytes[..20]);
        if crc != header.crc {
            return self
                .fail(lsn, format!("CRC-32C {crc:#010x}, record says {:#010x}", header.crc));
        }
        let mut end_lsn = self.pos.align();
        if header.rmid == rmgr_id::XLOG && header.info & 0xF0 == XLOG_SWITCH {
            end_lsn = Lsn(end_lsn.0.div_ceil(WAL_SEGMENT_SIZE) * WAL_SEGMENT_SIZE);
        }
        self.next_record = end_lsn;
        self.prev_record = Some(lsn);
        decode_record(lsn, end_lsn, bytes, self.version)
    }
}
