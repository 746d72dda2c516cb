//! Storage layers: the in-memory layer (open or frozen), and layer files:
//! delta layers (L0 from flushes, L1 from compaction) and image layers.
//! A timeline's historic layers are `layer::Layer`s: a layer file on local
//! disk, or only in remote storage until a read needs it.
//!
//! Both keep values in the same serialized form (`value.rs`) and describe
//! them with a `BlobRef` (offset, length, will_init), so a flush copies the
//! value bytes verbatim and planning a read never needs to read a value.

pub mod block_cache;
pub mod chunks;
pub mod ephemeral_file;
pub mod inmemory_layer;
pub mod layer;
pub mod layer_file;
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

/// What a layer file holds: changes over an LSN range (a delta layer), or
/// every key of its key range materialized at one LSN (an image layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    Delta,
    Image,
}

/// Where a historic layer sits in the layer map and the manifest: an L0
/// delta (one flush: every key, one flush's LSN range), an L1 delta (one key
/// range of a compaction's output) or an image layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayerLevel {
    L0,
    L1,
    Image,
}

impl LayerLevel {
    /// The kind of file a layer of this level is.
    pub fn kind(self) -> LayerKind {
        match self {
            LayerLevel::L0 | LayerLevel::L1 => LayerKind::Delta,
            LayerLevel::Image => LayerKind::Image,
        }
    }
}

impl fmt::Display for LayerLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayerLevel::L0 => "L0",
            LayerLevel::L1 => "L1",
            LayerLevel::Image => "image",
        })
    }
}

/// File name of a layer: a delta layer is `<key start>-<key end>__<lsn
/// start>-<lsn end>`, an image layer `<key start>-<key end>__<lsn>` (36 hex
/// digits per key, 16 per LSN; ranges end-exclusive). An image layer at LSN
/// `l` has `lsn_range` `l..l+1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LayerName {
    pub kind: LayerKind,
    pub key_range: std::ops::Range<Key>,
    pub lsn_range: std::ops::Range<Lsn>,
}

impl fmt::Display for LayerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}__{}",
            self.key_range.start,
            self.key_range.end,
            self.lsn_range.start.to_hex16()
        )?;
        match self.kind {
            LayerKind::Delta => write!(f, "-{}", self.lsn_range.end.to_hex16()),
            LayerKind::Image => Ok(()),
        }
    }
}

impl LayerName {
    pub fn delta(key_range: std::ops::Range<Key>, lsn_range: std::ops::Range<Lsn>) -> LayerName {
        assert!(lsn_range.start < lsn_range.end, "empty LSN range {lsn_range:?}");
        LayerName { kind: LayerKind::Delta, key_range, lsn_range }
    }

    pub fn image(key_range: std::ops::Range<Key>, lsn: Lsn) -> LayerName {
        LayerName { kind: LayerKind::Image, key_range, lsn_range: lsn..lsn + 1 }
    }

    /// The image layer's LSN; panics on a delta layer name.
    pub fn image_lsn(&self) -> Lsn {
        assert_eq!(self.kind, LayerKind::Image, "{self} is not an image layer");
        self.lsn_range.start
    }

    pub fn parse(name: &str) -> Option<LayerName> {
        let (keys, lsns) = name.split_once("__")?;
        let (k0, k1) = keys.split_once('-')?;
        let key_range = k0.parse().ok()?..k1.parse().ok()?;
        match lsns.split_once('-') {
            Some((l0, l1)) => {
                let lsn_range = Lsn::from_hex16(l0).ok()?..Lsn::from_hex16(l1).ok()?;
                (lsn_range.start < lsn_range.end).then_some(LayerName {
                    kind: LayerKind::Delta,
                    key_range,
                    lsn_range,
                })
            }
            None => Some(LayerName::image(key_range, Lsn::from_hex16(lsns).ok()?)),
        }
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
        let n = LayerName::delta(Key::MIN..Key::MAX, Lsn(0x10)..Lsn(0x2000));
        let s = n.to_string();
        assert_eq!(LayerName::parse(&s), Some(n));
        let i = LayerName::image(Key::MIN..Key::MAX, Lsn(0x10));
        let s = i.to_string();
        assert!(!s.ends_with(&Lsn(0x11).to_hex16()), "{s}");
        assert_eq!(LayerName::parse(&s), Some(i.clone()));
        assert_eq!(i.image_lsn(), Lsn(0x10));
        assert_eq!(LayerName::parse("metadata"), None);
        let backwards =
            format!("{}-{}__{}-{}", Key::MIN, Key::MAX, Lsn(5).to_hex16(), Lsn(5).to_hex16());
        assert_eq!(LayerName::parse(&backwards), None, "an empty LSN range is no layer");
    }
}
