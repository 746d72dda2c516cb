//! GIN compressed posting lists (`ginpostinglist.c`), the same in
//! PostgreSQL 15-18: a segment (`GinPostingList`) is the first TID
//! unpacked (6 bytes), `nbytes` (u16), then each next TID as the varbyte
//! encoding of its distance from the previous one, a TID counted as
//! `block << 11 | offset`. A segment takes `8 + SHORTALIGN(nbytes)` bytes;
//! an odd `nbytes` is followed by one zero byte.
//!
//! Decoding checks every byte it reads against the segment; encoding
//! needs strictly ascending TIDs (what PostgreSQL asserts), else a
//! [`Fault`].

use crate::redo::Fault;

/// `sizeof(ItemPointerData)`.
pub(super) const TID_SIZE: usize = 6;
/// `offsetof(GinPostingList, bytes)`.
pub(super) const SEGMENT_HEADER: usize = 8;
/// `MaxHeapTuplesPerPageBits`: bits of a TID's offset in its integer form.
const OFFSET_BITS: u32 = 11;
/// `MaxBytesPerInteger`.
const MAX_VARBYTE_LEN: usize = 7;
/// `SHORTALIGN_DOWN(BLCKSZ) - offsetof(GinPostingList, bytes)`: the most
/// encoded bytes redo's `ginCompressPostingList(.., BLCKSZ, ..)` writes.
const MAX_ENCODED_BYTES: usize = crate::consts::BLCKSZ - SEGMENT_HEADER;

/// `ItemPointerData`; ordered as `ginCompareItemPointers` orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Tid {
    pub block: u32,
    pub offset: u16,
}

impl Tid {
    /// The 6 bytes at the start of `b` (`BlockIdData`, then the offset).
    pub fn read(b: &[u8]) -> Tid {
        Tid { block: super::page::block_id(b), offset: u16::from_le_bytes([b[4], b[5]]) }
    }

    pub fn write(self, out: &mut Vec<u8>) {
        let mut b = [0u8; TID_SIZE];
        super::page::set_block_id(&mut b, self.block);
        b[4..6].copy_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&b);
    }

    /// `itemptr_to_uint64`.
    fn to_u64(self) -> u64 {
        (self.block as u64) << OFFSET_BITS | self.offset as u64
    }

    /// `uint64_to_itemptr`.
    fn from_u64(v: u64) -> Tid {
        Tid { block: (v >> OFFSET_BITS) as u32, offset: (v & ((1 << OFFSET_BITS) - 1)) as u16 }
    }
}

/// `SizeOfGinPostingList` of the segment starting `data`, if its header
/// is there and it fits.
pub(super) fn segment_len(data: &[u8]) -> Option<usize> {
    let nbytes = u16::from_le_bytes([*data.get(6)?, *data.get(7)?]) as usize;
    let len = SEGMENT_HEADER + nbytes + (nbytes & 1);
    (len <= data.len()).then_some(len)
}

/// `ginPostingListDecode` of one whole segment.
pub(super) fn decode_segment(seg: &[u8]) -> Result<Vec<Tid>, Fault> {
    if segment_len(seg).is_none() {
        return Err(Fault::page(format!(
            "a posting-list segment cut short at {} bytes",
            seg.len()
        )));
    }
    let nbytes = u16::from_le_bytes([seg[6], seg[7]]) as usize;
    let first = Tid::read(seg);
    let mut items = vec![first];
    let bytes = &seg[SEGMENT_HEADER..SEGMENT_HEADER + nbytes];
    let mut val = first.to_u64();
    let mut at = 0;
    while at < bytes.len() {
        let (delta, used) = decode_varbyte(&bytes[at..])?;
        val = val.wrapping_add(delta);
        items.push(Tid::from_u64(val));
        at += used;
    }
    Ok(items)
}

/// `decode_varbyte`: the value and the bytes it took (at most 7; the
/// seventh keeps all 8 bits).
fn decode_varbyte(b: &[u8]) -> Result<(u64, usize), Fault> {
    let mut val = 0u64;
    for (i, &c) in b.iter().enumerate().take(MAX_VARBYTE_LEN) {
        let c = c as u64;
        if i == MAX_VARBYTE_LEN - 1 {
            return Ok((val | c << (7 * i), i + 1));
        }
        val |= (c & 0x7F) << (7 * i);
        if c & 0x80 == 0 {
            return Ok((val, i + 1));
        }
    }
    Err(Fault::page("a varbyte integer runs past its segment".to_string()))
}

fn encode_varbyte(mut val: u64, out: &mut Vec<u8>) {
    while val > 0x7F {
        out.push(0x80 | (val & 0x7F) as u8);
        val >>= 7;
    }
    out.push(val as u8);
}

/// `ginCompressPostingList(items, n, BLCKSZ, ..)` where all items must fit
/// (redo asserts they do): one segment, zero-padded to an even length.
pub(super) fn compress(items: &[Tid]) -> Result<Vec<u8>, Fault> {
    let Some(&first) = items.first() else {
        return Err(Fault::page("an empty posting list to compress".to_string()));
    };
    let mut bytes = Vec::new();
    let mut prev = first.to_u64();
    for &tid in &items[1..] {
        let val = tid.to_u64();
        if val <= prev {
            return Err(Fault::page(format!("posting list TIDs not ascending at {tid:?}")));
        }
        encode_varbyte(val - prev, &mut bytes);
        prev = val;
    }
    if bytes.len() > MAX_ENCODED_BYTES {
        return Err(Fault::page(format!("{} TIDs do not fit one segment", items.len())));
    }
    let mut seg = Vec::with_capacity(SEGMENT_HEADER + bytes.len() + 1);
    first.write(&mut seg);
    seg.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    seg.extend_from_slice(&bytes);
    if bytes.len() % 2 == 1 {
        seg.push(0);
    }
    Ok(seg)
}

/// `ginMergeItemPointers(a, b)`: two ascending lists as one, a TID in both
/// kept once (appended whole when they do not overlap).
pub(super) fn merge(a: &[Tid], b: &[Tid]) -> Vec<Tid> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    match (a.first(), a.last(), b.first(), b.last()) {
        (Some(_), Some(a_last), Some(b_first), Some(_)) if a_last >= b_first => {}
        _ => {
            out.extend_from_slice(a);
            out.extend_from_slice(b);
            return out;
        }
    }
    if b.last() < a.first() {
        out.extend_from_slice(b);
        out.extend_from_slice(a);
        return out;
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(b[j]);
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}
