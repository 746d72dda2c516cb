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

use super::{BlockRef, RedoRecord};
use crate::wal::BlockTag;

/// The encoding written today.
pub const ENCODING_VERSION: u8 = 1;
const BLOCK_REF_LEN: usize = 3 + 4 * 4;
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
        use RedoDecodeError::Malformed;
        let mut b = &buf[..];
        let Some(&version) = b.first() else { return Err(RedoDecodeError::Empty) };
        if version != ENCODING_VERSION {
            return Err(RedoDecodeError::UnknownVersion(version));
        }
        if b.len() < 9 {
            return Err(Malformed("header"));
        }
        b.advance(1);
        let (rmid, info, xid, target) = (b.get_u8(), b.get_u8(), b.get_u32_le(), b.get_u8());
        let nblocks = b.get_u8() as usize;
        if b.len() < nblocks * BLOCK_REF_LEN {
            return Err(Malformed("block references"));
        }
        let blocks = (0..nblocks)
            .map(|_| {
                let (id, flags, fork) = (b.get_u8(), b.get_u8(), b.get_u8());
                let tag = BlockTag {
                    spc_oid: b.get_u32_le(),
                    db_oid: b.get_u32_le(),
                    rel_number: b.get_u32_le(),
                    fork,
                    blkno: b.get_u32_le(),
                };
                let will_init = flags & FLAG_WILL_INIT != 0;
                BlockRef { id, tag, will_init, has_image: flags & FLAG_HAS_IMAGE != 0 }
            })
            .collect();
        let take = |b: &mut &[u8]| -> Result<Bytes, RedoDecodeError> {
            if b.len() < 4 {
                return Err(Malformed("data length"));
            }
            let len = b.get_u32_le() as usize;
            if b.len() < len {
                return Err(Malformed("data"));
            }
            let at = buf.len() - b.len();
            b.advance(len);
            Ok(buf.slice(at..at + len))
        };
        let block_data = take(&mut b)?;
        let main_data = take(&mut b)?;
        if !b.is_empty() {
            return Err(Malformed("trailing bytes"));
        }
        Ok(RedoRecord { rmid, info, xid, target, blocks, block_data, main_data })
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
