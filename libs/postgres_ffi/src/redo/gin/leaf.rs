//! Posting-tree leaf changes (`ginRedoRecompress`), the same in
//! PostgreSQL 15-18: block data of INSERT on a data leaf and of
//! VACUUM_DATA_LEAF_PAGE is `ginxlogRecompressDataLeaf`: `nactions` (u16),
//! then per action the segment number (u8), the action (u8) and its
//! payload: a whole new segment for INSERT and REPLACE, a u16 count and
//! that many 6-byte TIDs for ADDITEMS (merged into the old segment and
//! re-encoded), nothing for DELETE. UNMODIFIED (0) never appears in WAL.
//!
//! Actions name segments of the page as it was, in ascending order; the
//! segments between them are kept. As in PostgreSQL, the old segments
//! after the last action are kept only if some action touched an existing
//! segment (the page's posting data otherwise ends at the last action).
//! A leaf in the pre-9.4 uncompressed format (`maxoff` plain TIDs) is
//! compressed into one segment first.
//!
//! The result is written from the posting-list start and `pd_lower` set
//! to its end; bytes past it keep what they held, as in PostgreSQL.

use super::page::{
    modify_opaque, posting_list_size, set_data_size, Opaque, DATA_MAX_SIZE, DATA_OFF,
    GIN_COMPRESSED,
};
use super::posting::{compress, decode_segment, merge, segment_len, Tid, TID_SIZE};
use crate::redo::Fault;

const GIN_SEGMENT_UNMODIFIED: u8 = 0;
const GIN_SEGMENT_DELETE: u8 = 1;
const GIN_SEGMENT_INSERT: u8 = 2;
const GIN_SEGMENT_REPLACE: u8 = 3;
const GIN_SEGMENT_ADDITEMS: u8 = 4;

/// One logged segment action.
enum Action<'a> {
    Delete,
    Insert(&'a [u8]),
    Replace(&'a [u8]),
    AddItems(Vec<Tid>),
}

/// A cursor over `ginxlogRecompressDataLeaf`.
struct Wal<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Wal<'a> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], Fault> {
        let bytes = self.data.get(self.at..self.at.saturating_add(len)).ok_or_else(|| {
            Fault::malformed(format!("leaf recompression data cut short in {what}"))
        })?;
        self.at += len;
        Ok(bytes)
    }

    fn u16(&mut self, what: &str) -> Result<u16, Fault> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// The next action and its segment number.
    fn action(&mut self) -> Result<(usize, Action<'a>), Fault> {
        let head = self.take(2, "an action header")?;
        let (segno, kind) = (head[0] as usize, head[1]);
        let action = match kind {
            GIN_SEGMENT_DELETE => Action::Delete,
            GIN_SEGMENT_INSERT | GIN_SEGMENT_REPLACE => {
                let len = segment_len(&self.data[self.at..]).ok_or_else(|| {
                    Fault::malformed("a logged posting-list segment is cut short".to_string())
                })?;
                let seg = self.take(len, "a new segment")?;
                if kind == GIN_SEGMENT_INSERT {
                    Action::Insert(seg)
                } else {
                    Action::Replace(seg)
                }
            }
            GIN_SEGMENT_ADDITEMS => {
                let n = self.u16("an ADDITEMS count")? as usize;
                let raw = self.take(n * TID_SIZE, "ADDITEMS items")?;
                Action::AddItems(raw.chunks_exact(TID_SIZE).map(Tid::read).collect())
            }
            GIN_SEGMENT_UNMODIFIED => {
                return Err(Fault::malformed("an UNMODIFIED leaf segment action".to_string()))
            }
            other => return Err(Fault::malformed(format!("unknown GIN leaf action {other}"))),
        };
        Ok((segno, action))
    }
}

/// The old segments, read one at a time.
struct OldSegments<'a> {
    data: &'a [u8],
    at: usize,
    segno: usize,
}

impl<'a> OldSegments<'a> {
    /// The segment at the cursor, which must exist.
    fn current(&self, why: &str) -> Result<&'a [u8], Fault> {
        let rest = &self.data[self.at..];
        if rest.is_empty() {
            return Err(Fault::page(format!("{why} segment {} past the leaf's last", self.segno)));
        }
        let len = segment_len(rest).ok_or_else(|| {
            Fault::page(format!("leaf segment {} overruns the posting data", self.segno))
        })?;
        Ok(&rest[..len])
    }

    fn advance(&mut self, seg: &[u8]) {
        self.at += seg.len();
        self.segno += 1;
    }
}

/// `ginRedoRecompress` on a data leaf page.
pub(super) fn recompress(page: &mut [u8], data: &[u8]) -> Result<(), Fault> {
    if !Opaque::read(page)?.is(GIN_COMPRESSED) {
        compress_old_format(page)?;
    }
    let size = posting_list_size(page)?;
    let old_data = page[DATA_OFF..DATA_OFF + size].to_vec();
    let mut old = OldSegments { data: &old_data, at: 0, segno: 0 };
    let mut wal = Wal { data, at: 0 };
    let mut out = Vec::with_capacity(DATA_MAX_SIZE);
    let mut touched_old = false;
    for _ in 0..wal.u16("nactions")? {
        let (segno, action) = wal.action()?;
        if segno < old.segno {
            return Err(Fault::malformed(format!(
                "leaf action on segment {segno} after segment {}",
                old.segno
            )));
        }
        while old.segno < segno {
            let seg = old.current("an action skips to")?;
            out.extend_from_slice(seg);
            old.advance(seg);
        }
        touched_old |= old.at < old_data.len();
        apply_action(&mut old, action, &mut out)?;
    }
    if touched_old {
        out.extend_from_slice(&old_data[old.at..]);
    }
    set_data_size(page, out.len())?;
    page[DATA_OFF..DATA_OFF + out.len()].copy_from_slice(&out);
    Ok(())
}

fn apply_action(old: &mut OldSegments, action: Action, out: &mut Vec<u8>) -> Result<(), Fault> {
    match action {
        Action::Insert(seg) => out.extend_from_slice(seg),
        Action::Delete => {
            let seg = old.current("DELETE of")?;
            old.advance(seg);
        }
        Action::Replace(new) => {
            let seg = old.current("REPLACE of")?;
            out.extend_from_slice(new);
            old.advance(seg);
        }
        Action::AddItems(items) => {
            let seg = old.current("ADDITEMS to")?;
            let old_items = decode_segment(seg)?;
            let merged = merge(&items, &old_items);
            if merged.len() != items.len() + old_items.len() {
                return Err(Fault::page(format!(
                    "ADDITEMS to segment {}: added TIDs already there",
                    old.segno
                )));
            }
            out.extend_from_slice(&compress(&merged)?);
            old.advance(seg);
        }
    }
    if out.len() > DATA_MAX_SIZE {
        return Err(Fault::page(format!("{} bytes of leaf segments overflow the page", out.len())));
    }
    Ok(())
}

/// A pre-9.4 leaf (`maxoff` plain TIDs) as one compressed segment, the
/// page marked compressed with `maxoff` 0.
fn compress_old_format(page: &mut [u8]) -> Result<(), Fault> {
    let n = Opaque::read(page)?.maxoff as usize;
    let end = DATA_OFF + n * TID_SIZE;
    let raw = page
        .get(DATA_OFF..end)
        .ok_or_else(|| Fault::page(format!("{n} uncompressed TIDs overrun the page")))?;
    let items: Vec<Tid> = raw.chunks_exact(TID_SIZE).map(Tid::read).collect();
    let seg = if items.is_empty() { Vec::new() } else { compress(&items)? };
    set_data_size(page, seg.len())?;
    page[DATA_OFF..DATA_OFF + seg.len()].copy_from_slice(&seg);
    modify_opaque(page, |o| {
        o.flags |= GIN_COMPRESSED;
        o.maxoff = 0;
    })
}
