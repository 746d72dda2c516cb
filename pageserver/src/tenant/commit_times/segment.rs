//! One segment file of the commit-time index: a run of [`CommitTime`]s,
//! LSNs strictly increasing, delta-encoded.
//!
//! Name: `<first LSN>-<last LSN>-<max timestamp>.ct` (16 hex digits each;
//! the timestamp as the two's complement of the i64), so start-up and
//! lookups know each segment's range without reading it.
//!
//! Format, version 1 (all integers little-endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | magic `PSCTIME\0` |
//! | 2 | version (1) |
//! | 2 | reserved (0) |
//! | 4 | entry count (1..=[`MAX_SEGMENT_ENTRIES`]) |
//! | 8, 8, 8 | first LSN, last LSN, max timestamp (as in the name) |
//! | … | per entry: LSN delta from the previous (the first from 0), LEB128; timestamp delta from the previous (the first from 0), zigzag LEB128 |
//! | 4 | CRC-32C of everything before it |
//!
//! Decoding checks all of it, and that the header repeats the name: a
//! damaged or misnamed file is an error naming the file, never wrong data.

use std::path::Path;

use utils::lsn::Lsn;

use super::{CommitTime, CommitTimesError};

pub const MAGIC: &[u8; 8] = b"PSCTIME\0";
pub const VERSION: u16 = 1;
/// Most entries of one segment: a sealed (full) segment is this long.
pub const MAX_SEGMENT_ENTRIES: usize = 16384;
const HEADER_BYTES: usize = 40;
const CRC_BYTES: usize = 4;
/// Longest encoding of one entry (two 10-byte LEB128s).
const MAX_ENTRY_BYTES: usize = 20;
/// Largest segment file.
pub const MAX_SEGMENT_BYTES: usize =
    HEADER_BYTES + MAX_SEGMENT_ENTRIES * MAX_ENTRY_BYTES + CRC_BYTES;
pub const SUFFIX: &str = ".ct";

const _: () = assert!(HEADER_BYTES == 8 + 2 + 2 + 4 + 8 * 3);

/// What a segment's name says (and its header repeats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SegmentRange {
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    /// The largest timestamp in the segment.
    pub max_ts: i64,
}

impl SegmentRange {
    pub fn of(entries: &[CommitTime]) -> SegmentRange {
        assert!(!entries.is_empty(), "an empty segment");
        SegmentRange {
            first_lsn: entries[0].lsn,
            last_lsn: entries[entries.len() - 1].lsn,
            max_ts: entries.iter().map(|e| e.ts).max().expect("not empty"),
        }
    }

    pub fn file_name(&self) -> String {
        format!(
            "{:016X}-{:016X}-{:016X}{SUFFIX}",
            self.first_lsn.0, self.last_lsn.0, self.max_ts as u64
        )
    }

    /// The range a file name states; `None` for any other name.
    pub fn parse(name: &str) -> Option<SegmentRange> {
        let stem = name.strip_suffix(SUFFIX)?;
        let mut parts = stem.split('-');
        let mut hex = || -> Option<u64> {
            let p = parts.next()?;
            (p.len() == 16).then_some(())?;
            u64::from_str_radix(p, 16).ok()
        };
        let r =
            SegmentRange { first_lsn: Lsn(hex()?), last_lsn: Lsn(hex()?), max_ts: hex()? as i64 };
        (parts.next().is_none() && r.first_lsn <= r.last_lsn).then_some(r)
    }
}

/// The file of `entries` (1..=MAX_SEGMENT_ENTRIES, LSNs strictly increasing:
/// asserted, the caller keeps them so).
pub fn encode(entries: &[CommitTime]) -> Vec<u8> {
    assert!((1..=MAX_SEGMENT_ENTRIES).contains(&entries.len()), "{} entries", entries.len());
    let range = SegmentRange::of(entries);
    let mut out = Vec::with_capacity(HEADER_BYTES + entries.len() * 6 + CRC_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&range.first_lsn.0.to_le_bytes());
    out.extend_from_slice(&range.last_lsn.0.to_le_bytes());
    out.extend_from_slice(&range.max_ts.to_le_bytes());
    let (mut lsn, mut ts) = (0u64, 0i64);
    for (i, e) in entries.iter().enumerate() {
        assert!(i == 0 || e.lsn.0 > lsn, "LSNs not increasing at {}", e.lsn);
        put_uleb(&mut out, e.lsn.0 - lsn);
        put_uleb(&mut out, zigzag(e.ts.wrapping_sub(ts)));
        (lsn, ts) = (e.lsn.0, e.ts);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The entries of the segment file `path` holding `bytes`, whose name
/// said `named`.
pub fn decode(
    path: &Path,
    named: SegmentRange,
    bytes: &[u8],
) -> Result<Vec<CommitTime>, CommitTimesError> {
    let bad = |reason: String| CommitTimesError::Corrupt { path: path.to_path_buf(), reason };
    if bytes.len() < HEADER_BYTES + CRC_BYTES {
        return Err(bad(format!("{} bytes, shorter than a header", bytes.len())));
    }
    let (body, crc) = bytes.split_at(bytes.len() - CRC_BYTES);
    let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(bad(format!("CRC-32C {computed:08x}, the file says {stored:08x}")));
    }
    if &body[..8] != MAGIC {
        return Err(bad("not a commit-time segment (bad magic)".into()));
    }
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let version = u16::from_le_bytes([body[8], body[9]]);
    if version != VERSION {
        return Err(bad(format!("format version {version}, this build reads {VERSION}")));
    }
    let count = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")) as usize;
    let header = SegmentRange {
        first_lsn: Lsn(u64_at(16)),
        last_lsn: Lsn(u64_at(24)),
        max_ts: u64_at(32) as i64,
    };
    if header != named {
        return Err(bad(format!("the header says {header:?}, the name {named:?}")));
    }
    if !(1..=MAX_SEGMENT_ENTRIES).contains(&count) {
        return Err(bad(format!("{count} entries, 1 to {MAX_SEGMENT_ENTRIES} expected")));
    }
    let entries = decode_entries(&body[HEADER_BYTES..], count).map_err(bad)?;
    if SegmentRange::of(&entries) != header {
        return Err(bad(format!(
            "the entries span {:?}, the header says {header:?}",
            SegmentRange::of(&entries)
        )));
    }
    Ok(entries)
}

fn decode_entries(mut body: &[u8], count: usize) -> Result<Vec<CommitTime>, String> {
    let mut entries = Vec::with_capacity(count);
    let (mut lsn, mut ts) = (0u64, 0i64);
    for i in 0..count {
        let lsn_delta = get_uleb(&mut body).ok_or_else(|| format!("entry {i}: truncated"))?;
        let ts_delta = get_uleb(&mut body).ok_or_else(|| format!("entry {i}: truncated"))?;
        if lsn_delta == 0 && i > 0 {
            return Err(format!("entry {i}: LSN does not increase"));
        }
        lsn = lsn.checked_add(lsn_delta).ok_or_else(|| format!("entry {i}: LSN overflows"))?;
        ts = ts.wrapping_add(unzigzag(ts_delta));
        entries.push(CommitTime { lsn: Lsn(lsn), ts });
    }
    if !body.is_empty() {
        return Err(format!("{} bytes after the last of {count} entries", body.len()));
    }
    Ok(entries)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_uleb(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One LEB128 value off the front of `buf`; `None` if truncated or longer
/// than a u64.
fn get_uleb(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        let bits = u64::from(b & 0x7f);
        if i == 9 && bits > 1 {
            return None;
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

/// Whether `name` is a segment file's temp leftover.
pub fn is_temp(name: &str) -> bool {
    name.ends_with(io_engine::TEMP_SUFFIX)
}

#[cfg(test)]
pub(super) fn varint_roundtrip(v: u64) -> Option<u64> {
    let mut out = Vec::new();
    put_uleb(&mut out, v);
    let mut s = &out[..];
    let r = get_uleb(&mut s);
    assert!(s.is_empty());
    r
}

#[cfg(test)]
pub(super) fn zigzag_roundtrip(v: i64) -> i64 {
    unzigzag(zigzag(v))
}
