//! Directory values: the sets that let us enumerate what exists at an LSN.
//!
//! | value | key | contents |
//! |---|---|---|
//! | `DbDirectory` | `Key::dbdir()` | every (spcnode, dbnode) and whether its relmap file exists |
//! | `RelDirectory` | `Key::rel_dir(spc, db)` | every (relnode, forknum) of that database |
//! | `SlruDirectory` | `Key::slru_dir(kind)` | every segment number of that SLRU |
//! | `TwoPhaseDirectory` | `Key::twophase_dir()` | every xid with a two-phase state file |
//!
//! Serialized form (our own, compact, versioned; all integers little-endian):
//! ```text
//!   magic u8 (one per directory kind) | version u8 = 1 | count u32 | count entries
//! ```
//! Entries are written in ascending order, so equal sets serialize to equal
//! bytes and decoding can reject unsorted or duplicated entries as corrupt.
//! Entry layouts: db `spc u32, db u32, flags u8` (bit 0: relmap exists);
//! rel `relnode u32, forknum u8`; SLRU `segno u32`; two-phase `xid u32`.
//! A 100,000-relation database costs 500 KB, decoded in about a millisecond.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes};

const VERSION: u8 = 1;
const MAGIC_DB: u8 = 0xD1;
const MAGIC_REL: u8 = 0xD2;
const MAGIC_SLRU: u8 = 0xD3;
const MAGIC_TWOPHASE: u8 = 0xD4;
const HEADER: usize = 6;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("corrupt {what} directory value: {reason}")]
pub struct DirDecodeError {
    pub what: &'static str,
    pub reason: String,
}

/// Databases: (spcnode, dbnode) -> relmap file exists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DbDirectory {
    pub dbs: BTreeMap<(u32, u32), bool>,
}

/// Relations of one database: (relnode, forknum).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelDirectory {
    pub rels: BTreeSet<(u32, u8)>,
}

/// Segments of one SLRU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlruDirectory {
    pub segments: BTreeSet<u32>,
}

/// Transactions with a two-phase state file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TwoPhaseDirectory {
    pub xids: BTreeSet<u32>,
}

fn header(out: &mut Vec<u8>, magic: u8, count: usize) {
    out.put_u8(magic);
    out.put_u8(VERSION);
    out.put_u32_le(u32::try_from(count).expect("directory with more than 2^32 entries"));
}

/// Check magic and version; return the entry count and the entry bytes,
/// which must be exactly `count * entry_len` long.
fn open<'a>(
    buf: &'a [u8],
    magic: u8,
    entry_len: usize,
    what: &'static str,
) -> Result<(usize, &'a [u8]), DirDecodeError> {
    let err = |reason: String| DirDecodeError { what, reason };
    if buf.len() < HEADER {
        return Err(err(format!("{} bytes, shorter than the header", buf.len())));
    }
    if buf[0] != magic {
        return Err(err(format!("magic {:#04x}, expected {magic:#04x}", buf[0])));
    }
    if buf[1] != VERSION {
        return Err(err(format!("unsupported format version {}", buf[1])));
    }
    let count = u32::from_le_bytes(buf[2..6].try_into().unwrap()) as usize;
    let body = &buf[HEADER..];
    if body.len() != count * entry_len {
        return Err(err(format!(
            "{count} entries need {} bytes, value has {}",
            count * entry_len,
            body.len()
        )));
    }
    Ok((count, body))
}

/// Decode sorted entries, rejecting disorder and duplicates.
fn decode_sorted<T: Ord + Copy>(
    body: &[u8],
    entry_len: usize,
    what: &'static str,
    parse: impl Fn(&[u8]) -> T,
) -> Result<Vec<T>, DirDecodeError> {
    let mut out: Vec<T> = Vec::with_capacity(body.len() / entry_len.max(1));
    for chunk in body.chunks_exact(entry_len) {
        let e = parse(chunk);
        if let Some(prev) = out.last() {
            if *prev >= e {
                return Err(DirDecodeError {
                    what,
                    reason: format!("entry {} out of order or duplicated", out.len()),
                });
            }
        }
        out.push(e);
    }
    Ok(out)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

impl DbDirectory {
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(HEADER + 9 * self.dbs.len());
        header(&mut out, MAGIC_DB, self.dbs.len());
        for (&(spc, db), &relmap) in &self.dbs {
            out.put_u32_le(spc);
            out.put_u32_le(db);
            out.put_u8(relmap as u8);
        }
        out.into()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, DirDecodeError> {
        let (_, body) = open(buf, MAGIC_DB, 9, "database")?;
        let entries = decode_sorted(body, 9, "database", |c| (u32_at(c, 0), u32_at(c, 4), c[8]))?;
        let mut dbs = BTreeMap::new();
        for (spc, db, flags) in entries {
            if flags > 1 {
                return Err(DirDecodeError {
                    what: "database",
                    reason: format!("unknown flags {flags:#x} of database {spc}/{db}"),
                });
            }
            dbs.insert((spc, db), flags == 1);
        }
        Ok(DbDirectory { dbs })
    }
}

impl RelDirectory {
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(HEADER + 5 * self.rels.len());
        header(&mut out, MAGIC_REL, self.rels.len());
        for &(relnode, fork) in &self.rels {
            out.put_u32_le(relnode);
            out.put_u8(fork);
        }
        out.into()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, DirDecodeError> {
        let (_, body) = open(buf, MAGIC_REL, 5, "relation")?;
        let entries = decode_sorted(body, 5, "relation", |c| (u32_at(c, 0), c[4]))?;
        Ok(RelDirectory { rels: entries.into_iter().collect() })
    }
}

fn encode_u32_set(magic: u8, set: &BTreeSet<u32>) -> Bytes {
    let mut out = Vec::with_capacity(HEADER + 4 * set.len());
    header(&mut out, magic, set.len());
    set.iter().for_each(|v| out.put_u32_le(*v));
    out.into()
}

fn decode_u32_set(
    buf: &[u8],
    magic: u8,
    what: &'static str,
) -> Result<BTreeSet<u32>, DirDecodeError> {
    let (_, body) = open(buf, magic, 4, what)?;
    Ok(decode_sorted(body, 4, what, |c| u32_at(c, 0))?.into_iter().collect())
}

impl SlruDirectory {
    pub fn encode(&self) -> Bytes {
        encode_u32_set(MAGIC_SLRU, &self.segments)
    }

    pub fn decode(buf: &[u8]) -> Result<Self, DirDecodeError> {
        Ok(SlruDirectory { segments: decode_u32_set(buf, MAGIC_SLRU, "SLRU")? })
    }
}

impl TwoPhaseDirectory {
    pub fn encode(&self) -> Bytes {
        encode_u32_set(MAGIC_TWOPHASE, &self.xids)
    }

    pub fn decode(buf: &[u8]) -> Result<Self, DirDecodeError> {
        Ok(TwoPhaseDirectory { xids: decode_u32_set(buf, MAGIC_TWOPHASE, "two-phase")? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut db = DbDirectory::default();
        db.dbs.insert((1663, 5), true);
        db.dbs.insert((1664, 0), true);
        db.dbs.insert((1663, 1), false);
        assert_eq!(DbDirectory::decode(&db.encode()).unwrap(), db);

        let mut rel = RelDirectory::default();
        for r in [16384u32, 1259, 2619, u32::MAX] {
            for f in 0..3u8 {
                rel.rels.insert((r, f));
            }
        }
        let enc = rel.encode();
        assert_eq!(enc.len(), HEADER + 5 * 12);
        assert_eq!(RelDirectory::decode(&enc).unwrap(), rel);

        let slru = SlruDirectory { segments: [0u32, 1, 0x14078].into_iter().collect() };
        assert_eq!(SlruDirectory::decode(&slru.encode()).unwrap(), slru);
        let tp = TwoPhaseDirectory { xids: [742u32, 900].into_iter().collect() };
        assert_eq!(TwoPhaseDirectory::decode(&tp.encode()).unwrap(), tp);

        // Empty sets are valid and tiny.
        assert_eq!(RelDirectory::decode(&RelDirectory::default().encode()).unwrap().rels.len(), 0);
        assert_eq!(SlruDirectory::default().encode().len(), HEADER);
    }

    #[test]
    fn rejects_corruption() {
        let rel = RelDirectory { rels: [(5, 0), (6, 0)].into_iter().collect() };
        let enc = rel.encode().to_vec();
        // Wrong kind of directory.
        let e = SlruDirectory::decode(&enc).unwrap_err();
        assert!(e.reason.contains("magic"), "{e}");
        // Truncated.
        let e = RelDirectory::decode(&enc[..enc.len() - 1]).unwrap_err();
        assert!(e.to_string().contains("2 entries need 10 bytes"), "{e}");
        // Unknown version.
        let mut bad = enc.clone();
        bad[1] = 9;
        assert!(RelDirectory::decode(&bad).unwrap_err().reason.contains("version 9"));
        // Out of order entries.
        let mut swapped = enc[..HEADER].to_vec();
        swapped.extend_from_slice(&enc[HEADER + 5..]);
        swapped.extend_from_slice(&enc[HEADER..HEADER + 5]);
        assert!(RelDirectory::decode(&swapped).unwrap_err().reason.contains("out of order"));
        assert!(DbDirectory::decode(&[]).is_err());
    }
}
