//! Storage layers: the in-memory layer (open or frozen) and L0 delta files
//! (with a `KeyIndex` hash table over each delta file's sorted index).
//!
//! Both keep values in the same serialized form (`value.rs`) and describe
//! them with a `BlobRef` (offset, length, will_init), so a flush copies the
//! value bytes verbatim and planning a read never needs to read a value.

pub mod delta_layer;
pub mod ephemeral_file;
pub mod inmemory_layer;
pub mod key_index;
pub mod layer_map;

use std::fmt;

use pageserver_api::key::Key;
use utils::lsn::Lsn;

/// Location of one serialized value: offset (39 bits), length (24 bits) and
/// `will_init` (1 bit) packed in a u64 so indexes stay compact.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlobRef(u64);

const LEN_BITS: u32 = 24;
const OFFSET_BITS: u32 = 39;

/// Largest serialized value a layer can hold (16 MiB - 1).
pub const MAX_BLOB_LEN: usize = (1 << LEN_BITS) - 1;
/// Largest offset of a value within a layer (512 GiB).
pub const MAX_BLOB_OFFSET: u64 = (1 << OFFSET_BITS) - 1;

impl BlobRef {
    pub fn new(offset: u64, len: usize, will_init: bool) -> BlobRef {
        assert!(len <= MAX_BLOB_LEN, "value of {len} bytes exceeds the {MAX_BLOB_LEN} limit");
        assert!(offset <= MAX_BLOB_OFFSET, "layer offset {offset} beyond the 512 GiB limit");
        BlobRef((offset << (LEN_BITS + 1)) | ((len as u64) << 1) | will_init as u64)
    }
    pub fn from_raw(raw: u64) -> BlobRef {
        BlobRef(raw)
    }
    pub fn raw(self) -> u64 {
        self.0
    }
    pub fn offset(self) -> u64 {
        self.0 >> (LEN_BITS + 1)
    }
    pub fn len(self) -> usize {
        ((self.0 >> 1) & ((1 << LEN_BITS) - 1)) as usize
    }
    pub fn will_init(self) -> bool {
        self.0 & 1 == 1
    }
    pub fn end(self) -> u64 {
        self.offset() + self.len() as u64
    }
}

impl fmt::Debug for BlobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BlobRef({}+{}{})",
            self.offset(),
            self.len(),
            if self.will_init() { ",init" } else { "" }
        )
    }
}

/// File name of a delta layer: `<key start>-<key end>__<lsn start>-<lsn end>`
/// (36 hex digits per key, 16 per LSN; both ranges end-exclusive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaLayerName {
    pub key_range: std::ops::Range<Key>,
    pub lsn_range: std::ops::Range<Lsn>,
}

impl fmt::Display for DeltaLayerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}__{}-{}",
            self.key_range.start,
            self.key_range.end,
            self.lsn_range.start.to_hex16(),
            self.lsn_range.end.to_hex16()
        )
    }
}

impl DeltaLayerName {
    pub fn parse(name: &str) -> Option<DeltaLayerName> {
        let (keys, lsns) = name.split_once("__")?;
        let (k0, k1) = keys.split_once('-')?;
        let (l0, l1) = lsns.split_once('-')?;
        Some(DeltaLayerName {
            key_range: k0.parse().ok()?..k1.parse().ok()?,
            lsn_range: Lsn::from_hex16(l0).ok()?..Lsn::from_hex16(l1).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ref_packs() {
        let b = BlobRef::new(MAX_BLOB_OFFSET, MAX_BLOB_LEN, true);
        assert_eq!((b.offset(), b.len(), b.will_init()), (MAX_BLOB_OFFSET, MAX_BLOB_LEN, true));
        let b = BlobRef::new(12345, 8197, false);
        assert_eq!((b.offset(), b.len(), b.will_init(), b.end()), (12345, 8197, false, 20542));
    }

    #[test]
    fn layer_name_round_trip() {
        let n = DeltaLayerName { key_range: Key::MIN..Key::MAX, lsn_range: Lsn(0x10)..Lsn(0x2000) };
        let s = n.to_string();
        assert_eq!(DeltaLayerName::parse(&s), Some(n));
        assert_eq!(DeltaLayerName::parse("metadata"), None);
    }
}
