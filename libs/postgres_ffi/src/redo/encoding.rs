//! The stored form of a [`RedoRecord`], versioned. Little-endian:
//! ```text
//!   version u8 (= 1) | rmid u8 | info u8 | xid u32 | target u8
//!   | nblocks u8 | nblocks × (id u8 | flags u8 | fork u8 | spc u32 | db u32 | rel u32 | blkno u32)
//!   | block_data_len u32 | block_data | main_data_len u32 | main_data
//! ```
//! `flags`: 0x01 will_init, 0x02 has_image. Decoding checks every length
//! against the bytes that are there and that nothing follows; a newer
//! version is refused by name, never misread.

use bytes::{Buf, BufMut, Bytes};

use super::{BlockRef, BlockRefs, RedoRecord, RedoRecordRef};
use crate::wal::BlockTag;

/// The encoding written today.
pub const ENCODING_VERSION: u8 = 1;
pub(super) const BLOCK_REF_LEN: usize = 3 + 4 * 4;
const FLAG_WILL_INIT: u8 = 0x01;
const FLAG_HAS_IMAGE: u8 = 0x02;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedoDecodeError {
    #[error("no stored record body (written by a version that kept none)")]
    Empty,
    #[error("stored record encoding version {0} is unknown (this build reads {ENCODING_VERSION})")]
    UnknownVersion(u8),
    #[error("stored record is truncated or has trailing bytes: {0}")]
    Malformed(&'static str),
}

impl RedoRecord {
    /// Bytes of [`RedoRecord::encode`].
    pub fn encoded_len(&self) -> usize {
        9 + self.blocks.len() * BLOCK_REF_LEN + 4 + self.block_data.len() + 4 + self.main_data.len()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u8(ENCODING_VERSION);
        out.put_u8(self.rmid);
        out.put_u8(self.info);
        out.put_u32_le(self.xid);
        out.put_u8(self.target);
        out.put_u8(u8::try_from(self.blocks.len()).expect("at most 33 block references"));
        for b in &self.blocks {
            out.put_u8(b.id);
            let flags = (b.will_init as u8 * FLAG_WILL_INIT) | (b.has_image as u8 * FLAG_HAS_IMAGE);
            out.put_u8(flags);
            out.put_u8(b.tag.fork);
            for v in [b.tag.spc_oid, b.tag.db_oid, b.tag.rel_number, b.tag.blkno] {
                out.put_u32_le(v);
            }
        }
        for data in [&self.block_data, &self.main_data] {
            out.put_u32_le(u32::try_from(data.len()).expect("WAL records are under 1 GiB"));
            out.extend_from_slice(data);
        }
        debug_assert_eq!(out.len() - start, self.encoded_len());
    }

    /// Decode what [`RedoRecord::encode`] wrote; data shares `buf`'s memory.
    pub fn decode(buf: &Bytes) -> Result<RedoRecord, RedoDecodeError> {
        let r = RedoRecordRef::decode(buf)?;
        Ok(RedoRecord {
            rmid: r.rmid,
            info: r.info,
            xid: r.xid,
            target: r.target,
            blocks: r.blocks.iter().collect(),
            block_data: buf.slice_ref(r.block_data),
            main_data: buf.slice_ref(r.main_data),
        })
    }
}

impl<'a> RedoRecordRef<'a> {
    /// Decode what [`RedoRecord::encode`] wrote, borrowing `buf`: no
    /// allocation, the block references stay in their stored form (their
    /// length is checked here).
    #[inline]
    pub fn decode(buf: &'a [u8]) -> Result<RedoRecordRef<'a>, RedoDecodeError> {
        use RedoDecodeError::Malformed;
        let mut b = buf;
        let Some(&version) = b.first() else { return Err(RedoDecodeError::Empty) };
        if version != ENCODING_VERSION {
            return Err(RedoDecodeError::UnknownVersion(version));
        }
        if b.len() < 9 {
            return Err(Malformed("header"));
        }
        b.advance(1);
        let (rmid, info, xid, target) = (b.get_u8(), b.get_u8(), b.get_u32_le(), b.get_u8());
        let blocks_len = b.get_u8() as usize * BLOCK_REF_LEN;
        let Some((blocks, mut b)) = b.split_at_checked(blocks_len) else {
            return Err(Malformed("block references"));
        };
        let block_data = take(&mut b)?;
        let main_data = take(&mut b)?;
        if !b.is_empty() {
            return Err(Malformed("trailing bytes"));
        }
        let blocks = BlockRefs::encoded(blocks);
        Ok(RedoRecordRef { rmid, info, xid, target, blocks, block_data, main_data })
    }
}

/// A `u32` length and that many bytes, from the front of `b`.
#[inline]
fn take<'a>(b: &mut &'a [u8]) -> Result<&'a [u8], RedoDecodeError> {
    let Some((len, rest)) = b.split_first_chunk::<4>() else {
        return Err(RedoDecodeError::Malformed("data length"));
    };
    let Some((data, rest)) = rest.split_at_checked(u32::from_le_bytes(*len) as usize) else {
        return Err(RedoDecodeError::Malformed("data"));
    };
    *b = rest;
    Ok(data)
}

/// One stored block reference (`raw` holds at least [`BLOCK_REF_LEN`] bytes).
#[inline]
pub(super) fn block_ref(raw: &[u8]) -> BlockRef {
    let raw: &[u8; BLOCK_REF_LEN] = raw[..BLOCK_REF_LEN].try_into().expect("a block reference");
    let u32_at = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
    let (id, flags, fork) = (raw[0], raw[1], raw[2]);
    BlockRef {
        id,
        tag: BlockTag {
            spc_oid: u32_at(3),
            db_oid: u32_at(7),
            rel_number: u32_at(11),
            fork,
            blkno: u32_at(15),
        },
        will_init: flags & FLAG_WILL_INIT != 0,
        has_image: flags & FLAG_HAS_IMAGE != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RedoRecord {
        let tag = |blkno| BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16384, fork: 0, blkno };
        RedoRecord {
            rmid: 10,
            info: 0x20,
            xid: 777,
            target: 1,
            blocks: vec![
                BlockRef { id: 0, tag: tag(9), will_init: true, has_image: false },
                BlockRef { id: 1, tag: tag(3), will_init: false, has_image: true },
            ],
            block_data: Bytes::from_static(b"tuple"),
            main_data: Bytes::from_static(b"main data"),
        }
    }

    #[test]
    fn round_trip() {
        let rec = sample();
        let mut out = Vec::new();
        rec.encode(&mut out);
        assert_eq!(out.len(), rec.encoded_len());
        assert_eq!(RedoRecord::decode(&Bytes::from(out)).unwrap(), rec);
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        let mut out = Vec::new();
        sample().encode(&mut out);
        for len in 0..out.len() {
            assert!(RedoRecord::decode(&Bytes::copy_from_slice(&out[..len])).is_err(), "{len}");
        }
        out.push(0);
        assert_eq!(
            RedoRecord::decode(&Bytes::from(out)),
            Err(RedoDecodeError::Malformed("trailing bytes"))
        );
        assert_eq!(
            RedoRecord::decode(&Bytes::from_static(&[9])),
            Err(RedoDecodeError::UnknownVersion(9))
        );
    }
}
