//! `Value`: what the page store keeps per (key, LSN), and its serialized form.
//!
//! A value is an image (a full page, or a small metadata blob) or a record
//! that modifies the previous version. Every value knows `will_init`: true
//! when it needs nothing older to be reconstructed.
//!
//! Serialized form (the same bytes in the ephemeral file and in layer files,
//! so flushing copies them without re-encoding):
//! ```text
//!   tag u8 | payload ... | crc32c u32 LE over tag+payload
//! ```
//! tag 0 image (payload = the bytes); tag 1 record (payload = record encoding
//! below); tag 2 a page image as a WAL record stored it (`wal_image.rs`).
//! The CRC makes a torn or corrupted value an error, never wrong data.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::wal_image::WalImage;

/// A record that the pageserver applies itself, in Rust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Set the 2-bit CLOG status of each xid on one CLOG page
    /// (status 1 committed, 2 aborted, 3 sub-committed).
    ClogSetStatus { xids: Vec<u32>, status: u8 },
    /// Clear visibility-map `flags` (bit 0 all-visible, bit 1 all-frozen) of
    /// the listed heap blocks, which all map to this VM page.
    VmClearFlags { heap_blknos: Vec<u32>, flags: u8 },
    /// Clear the visibility-map bits of every heap block from
    /// `first_heap_blkno` to the end of this VM page (a truncation).
    VmClearTail { first_heap_blkno: u32 },
    /// Write each `(offset, bytes)` into the page, in order (multixact
    /// offsets and members). All patches of one page at one LSN are one record.
    SetBytes { patches: Vec<(u16, Bytes)> },
    /// A PostgreSQL WAL record, for one block: `rec` is its
    /// `postgres_ffi::redo::RedoRecord` encoding (versioned), applied by
    /// native redo when read. Empty when written by a version that kept no
    /// body: reading a page that depends on it is an error naming rmgr and LSN.
    Postgres { will_init: bool, rmid: u8, rec: Bytes },
    /// Unit tests: append bytes to the previous value (or start from empty
    /// when `will_init`).
    Test { append: Bytes, will_init: bool },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Image(Bytes),
    /// A page image as its WAL record stored it, rebuilt when read.
    WalImage(WalImage),
    Record(Record),
}

const TAG_IMAGE: u8 = 0;
const TAG_RECORD: u8 = 1;
const TAG_WAL_IMAGE: u8 = 2;

const REC_CLOG: u8 = 0;
const REC_VM_CLEAR: u8 = 1;
const REC_POSTGRES: u8 = 2;
const REC_TEST: u8 = 3;
const REC_SET_BYTES: u8 = 4;
const REC_VM_TAIL: u8 = 5;

/// Bytes of framing around a value: tag and CRC.
pub const VALUE_OVERHEAD: usize = 1 + 4;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ValueDecodeError {
    #[error("value checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("malformed value: {0}")]
    Malformed(&'static str),
}

impl Record {
    pub fn will_init(&self) -> bool {
        match self {
            Record::ClogSetStatus { .. }
            | Record::VmClearFlags { .. }
            | Record::VmClearTail { .. }
            | Record::SetBytes { .. } => false,
            Record::Postgres { will_init, .. } | Record::Test { will_init, .. } => *will_init,
        }
    }
}

impl Value {
    /// A whole page (or blob) as it is, not a change to one.
    pub fn is_image(&self) -> bool {
        matches!(self, Value::Image(_) | Value::WalImage(_))
    }

    pub fn will_init(&self) -> bool {
        match self {
            Value::Image(_) | Value::WalImage(_) => true,
            Value::Record(r) => r.will_init(),
        }
    }

    /// Serialized length including tag and CRC.
    pub fn serialized_len(&self) -> usize {
        VALUE_OVERHEAD
            + match self {
                Value::Image(img) => img.len(),
                Value::WalImage(img) => img.payload_len(),
                Value::Record(r) => {
                    1 + match r {
                        Record::ClogSetStatus { xids, .. } => 1 + 4 + 4 * xids.len(),
                        Record::VmClearFlags { heap_blknos, .. } => 1 + 4 + 4 * heap_blknos.len(),
                        Record::Postgres { rec, .. } => 2 + rec.len(),
                        Record::Test { append, .. } => 1 + append.len(),
                        Record::SetBytes { patches } => {
                            2 + patches.iter().map(|(_, b)| 4 + b.len()).sum::<usize>()
                        }
                        Record::VmClearTail { .. } => 4,
                    }
                }
            }
    }

    /// Append the serialized form to `out`.
    pub fn serialize_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        match self {
            Value::Image(img) => {
                out.push(TAG_IMAGE);
                out.extend_from_slice(img);
            }
            Value::WalImage(img) => {
                out.push(TAG_WAL_IMAGE);
                img.serialize_into(out);
            }
            Value::Record(r) => {
                out.push(TAG_RECORD);
                match r {
                    Record::ClogSetStatus { xids, status } => {
                        out.put_u8(REC_CLOG);
                        out.put_u8(*status);
                        out.put_u32_le(xids.len() as u32);
                        xids.iter().for_each(|x| out.put_u32_le(*x));
                    }
                    Record::VmClearFlags { heap_blknos, flags } => {
                        out.put_u8(REC_VM_CLEAR);
                        out.put_u8(*flags);
                        out.put_u32_le(heap_blknos.len() as u32);
                        heap_blknos.iter().for_each(|x| out.put_u32_le(*x));
                    }
                    Record::Postgres { will_init, rmid, rec } => {
                        out.put_u8(REC_POSTGRES);
                        out.put_u8(*will_init as u8);
                        out.put_u8(*rmid);
                        out.extend_from_slice(rec);
                    }
                    Record::Test { append, will_init } => {
                        out.put_u8(REC_TEST);
                        out.put_u8(*will_init as u8);
                        out.extend_from_slice(append);
                    }
                    Record::VmClearTail { first_heap_blkno } => {
                        out.put_u8(REC_VM_TAIL);
                        out.put_u32_le(*first_heap_blkno);
                    }
                    Record::SetBytes { patches } => {
                        out.put_u8(REC_SET_BYTES);
                        out.put_u16_le(u16::try_from(patches.len()).expect("patches of one page"));
                        for (offset, bytes) in patches {
                            out.put_u16_le(*offset);
                            out.put_u16_le(u16::try_from(bytes.len()).expect("within a page"));
                            out.extend_from_slice(bytes);
                        }
                    }
                }
            }
        }
        let crc = crc32c::crc32c(&out[start..]);
        out.put_u32_le(crc);
        debug_assert_eq!(out.len() - start, self.serialized_len());
    }

    pub fn serialize(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.serialized_len());
        self.serialize_into(&mut v);
        v
    }

    /// Check the CRC and decode. `buf` is exactly one serialized value.
    pub fn deserialize(buf: &[u8]) -> Result<Value, ValueDecodeError> {
        Self::deserialize_bytes(&Bytes::copy_from_slice(buf))
    }

    /// Like `deserialize`, but an image shares `buf`'s memory (no copy).
    pub fn deserialize_bytes(buf: &Bytes) -> Result<Value, ValueDecodeError> {
        if buf.len() < VALUE_OVERHEAD {
            return Err(ValueDecodeError::Malformed("shorter than tag and checksum"));
        }
        let (body, crc) = buf.split_at(buf.len() - 4);
        let stored = u32::from_le_bytes(crc.try_into().unwrap());
        let computed = crc32c::crc32c(body);
        if stored != computed {
            return Err(ValueDecodeError::Checksum { stored, computed });
        }
        let mut b = &body[1..];
        match body[0] {
            TAG_IMAGE => Ok(Value::Image(buf.slice(1..buf.len() - 4))),
            TAG_WAL_IMAGE => WalImage::decode(buf.slice(1..buf.len() - 4))
                .map(Value::WalImage)
                .map_err(ValueDecodeError::Malformed),
            TAG_RECORD => {
                let need = |b: &[u8], n: usize| {
                    if b.len() < n {
                        Err(ValueDecodeError::Malformed("truncated record"))
                    } else {
                        Ok(())
                    }
                };
                need(b, 1)?;
                let rec = match b.get_u8() {
                    kind @ (REC_CLOG | REC_VM_CLEAR) => {
                        need(b, 5)?;
                        let byte = b.get_u8();
                        let n = b.get_u32_le() as usize;
                        if b.len() != 4 * n {
                            return Err(ValueDecodeError::Malformed("bad record list length"));
                        }
                        let list: Vec<u32> = (0..n).map(|_| b.get_u32_le()).collect();
                        if kind == REC_CLOG {
                            Record::ClogSetStatus { xids: list, status: byte }
                        } else {
                            Record::VmClearFlags { heap_blknos: list, flags: byte }
                        }
                    }
                    REC_POSTGRES => {
                        need(b, 2)?;
                        let will_init = b.get_u8() != 0;
                        let rmid = b.get_u8();
                        Record::Postgres { will_init, rmid, rec: Bytes::copy_from_slice(b) }
                    }
                    REC_VM_TAIL => {
                        if b.len() != 4 {
                            return Err(ValueDecodeError::Malformed("bad VM tail record length"));
                        }
                        Record::VmClearTail { first_heap_blkno: b.get_u32_le() }
                    }
                    REC_SET_BYTES => {
                        need(b, 2)?;
                        let n = b.get_u16_le() as usize;
                        let mut patches = Vec::with_capacity(n.min(b.len() / 4));
                        for _ in 0..n {
                            need(b, 4)?;
                            let offset = b.get_u16_le();
                            let len = b.get_u16_le() as usize;
                            need(b, len)?;
                            patches.push((offset, Bytes::copy_from_slice(&b[..len])));
                            b.advance(len);
                        }
                        if !b.is_empty() {
                            return Err(ValueDecodeError::Malformed("bytes after the patches"));
                        }
                        Record::SetBytes { patches }
                    }
                    REC_TEST => {
                        need(b, 1)?;
                        let will_init = b.get_u8() != 0;
                        Record::Test { append: Bytes::copy_from_slice(b), will_init }
                    }
                    _ => return Err(ValueDecodeError::Malformed("unknown record kind")),
                };
                Ok(Value::Record(rec))
            }
            _ => Err(ValueDecodeError::Malformed("unknown value tag")),
        }
    }
}

/// Build an image value from a slice (helper for callers holding `&[u8]`).
pub fn image(data: &[u8]) -> Value {
    let mut b = BytesMut::with_capacity(data.len());
    b.extend_from_slice(data);
    Value::Image(b.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checksum() {
        let values = [
            image(b"page"),
            Value::Record(Record::ClogSetStatus { xids: vec![3, 4], status: 1 }),
            Value::Record(Record::VmClearFlags { heap_blknos: vec![7], flags: 3 }),
            Value::Record(Record::Postgres {
                will_init: false,
                rmid: 10,
                rec: Bytes::from_static(b"xx"),
            }),
            Value::Record(Record::Test { append: Bytes::from_static(b"ab"), will_init: true }),
            Value::Record(Record::SetBytes {
                patches: vec![(4, Bytes::from_static(b"xyz")), (9, Bytes::from_static(b"q"))],
            }),
            Value::Record(Record::VmClearTail { first_heap_blkno: 40_000 }),
            Value::WalImage(WalImage {
                compression: postgres_ffi::wal::image::ImageCompression::None,
                hole_offset: 100,
                hole_length: 8092,
                data_checksums: true,
                stored: Bytes::from(vec![7u8; 100]),
            }),
        ];
        for v in values {
            let mut s = v.serialize();
            assert_eq!(s.len(), v.serialized_len());
            assert_eq!(Value::deserialize(&s).unwrap(), v);
            s[1] ^= 0xff;
            assert!(matches!(Value::deserialize(&s), Err(ValueDecodeError::Checksum { .. })));
        }
        assert!(Value::deserialize(&[0, 1]).is_err());
    }
}
