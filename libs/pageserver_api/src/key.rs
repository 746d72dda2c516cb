//! `Key`: the address of one value in the page store, in Neon's 18-byte layout.
//!
//! Fields: field1 u8, field2..4 u32, field5 u8, field6 u32. On disk the key is
//! those 18 bytes big-endian; its text form is 36 upper-case hex digits
//! (2+8+8+8+2+8). In memory it packs into a `CompactKey` (i128) whose order is
//! the order of the 18-byte form; that requires field1 < 0x80 and field2 to be
//! < 0xFFFF or 0xFFFFFFFF (the only values the key space below uses).
//!
//! Key space (same as Neon's):
//! | what | layout |
//! |---|---|
//! | database directory | `00 0 0 0 00 0` |
//! | relmap file of (spc, db) | `00 spc db 0 00 0` |
//! | relation directory of (spc, db) | `00 spc db 0 00 1` |
//! | relation block | `00 spc db rel fork blk` |
//! | relation size | `00 spc db rel fork FFFFFFFF` |
//! | SLRU directory | `01 kind 0 0 00 0` |
//! | SLRU block | `01 kind 1 segno 00 blk` |
//! | SLRU segment size | `01 kind 1 segno 00 FFFFFFFF` |
//! | two-phase directory | `02 0 0 0 00 0` |
//! | two-phase file of xid | `02 0 0 0 00 xid` |
//! | control file | `03 0 0 0 00 0` |
//! | checkpoint | `03 0 0 0 00 1` |

use std::fmt;
use std::str::FromStr;

use crate::reltag::{RelTag, SlruKind};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub field1: u8,
    pub field2: u32,
    pub field3: u32,
    pub field4: u32,
    pub field5: u8,
    pub field6: u32,
}

/// A `Key` packed into 128 bits; ordered like the key itself.
pub type CompactKey = i128;

pub const KEY_SIZE: usize = 18;

#[derive(Debug, thiserror::Error)]
#[error("invalid key '{0}': expected 36 hex digits")]
pub struct KeyParseError(pub String);

impl Key {
    pub const MIN: Key = Key { field1: 0, field2: 0, field3: 0, field4: 0, field5: 0, field6: 0 };
    /// Largest key that still packs into a `CompactKey`.
    pub const MAX: Key = Key {
        field1: 0x7f,
        field2: 0xffff_ffff,
        field3: 0xffff_ffff,
        field4: 0xffff_ffff,
        field5: 0xff,
        field6: 0xffff_ffff,
    };

    /// Whether this key fits the compact form losslessly.
    pub fn is_compactable(&self) -> bool {
        self.field1 < 0x80 && (self.field2 < 0xffff || self.field2 == 0xffff_ffff)
    }

    pub fn to_compact(&self) -> CompactKey {
        debug_assert!(self.is_compactable(), "key {self} does not fit the compact form");
        let f2: u128 =
            if self.field2 == 0xffff_ffff { 0xffff } else { (self.field2 & 0xffff) as u128 };
        // 16 bits of field2: 0xffff stands for 0xffffffff (is_compactable()
        // excludes a real 0xffff).
        (((self.field1 as u128 & 0x7f) << 120)
            | (f2 << 104)
            | ((self.field3 as u128) << 72)
            | ((self.field4 as u128) << 40)
            | ((self.field5 as u128) << 32)
            | self.field6 as u128) as i128
    }

    pub fn from_compact(k: CompactKey) -> Key {
        let k = k as u128;
        let f2 = ((k >> 104) & 0xffff) as u32;
        Key {
            field1: ((k >> 120) & 0x7f) as u8,
            field2: if f2 == 0xffff { 0xffff_ffff } else { f2 },
            field3: (k >> 72) as u32,
            field4: (k >> 40) as u32,
            field5: (k >> 32) as u8,
            field6: k as u32,
        }
    }

    pub fn write_be(&self, out: &mut [u8; KEY_SIZE]) {
        out[0] = self.field1;
        out[1..5].copy_from_slice(&self.field2.to_be_bytes());
        out[5..9].copy_from_slice(&self.field3.to_be_bytes());
        out[9..13].copy_from_slice(&self.field4.to_be_bytes());
        out[13] = self.field5;
        out[14..18].copy_from_slice(&self.field6.to_be_bytes());
    }

    pub fn to_be_bytes(&self) -> [u8; KEY_SIZE] {
        let mut out = [0u8; KEY_SIZE];
        self.write_be(&mut out);
        out
    }

    pub fn from_be_bytes(b: &[u8; KEY_SIZE]) -> Key {
        let u = |r: std::ops::Range<usize>| u32::from_be_bytes(b[r].try_into().unwrap());
        Key {
            field1: b[0],
            field2: u(1..5),
            field3: u(5..9),
            field4: u(9..13),
            field5: b[13],
            field6: u(14..18),
        }
    }

    /// The next key in order (used for end-exclusive ranges).
    pub fn next(&self) -> Key {
        self.add(1)
    }

    /// `self + n` with carry across fields, in the 18-byte order.
    pub fn add(&self, n: u32) -> Key {
        let mut k = *self;
        let (f6, c) = k.field6.overflowing_add(n);
        k.field6 = f6;
        if c {
            let (f5, c) = k.field5.overflowing_add(1);
            k.field5 = f5;
            if c {
                let (f4, c) = k.field4.overflowing_add(1);
                k.field4 = f4;
                if c {
                    let (f3, c) = k.field3.overflowing_add(1);
                    k.field3 = f3;
                    if c {
                        let (f2, c) = k.field2.overflowing_add(1);
                        k.field2 = f2;
                        if c {
                            k.field1 = k.field1.wrapping_add(1);
                        }
                    }
                }
            }
        }
        k
    }

    // ---- the key space --------------------------------------------------

    pub fn dbdir() -> Key {
        Key::MIN
    }

    pub fn relmap_file(spcnode: u32, dbnode: u32) -> Key {
        Key { field2: spcnode, field3: dbnode, ..Key::MIN }
    }

    pub fn rel_dir(spcnode: u32, dbnode: u32) -> Key {
        Key { field2: spcnode, field3: dbnode, field6: 1, ..Key::MIN }
    }

    pub fn rel_block(rel: RelTag, blkno: u32) -> Key {
        Key {
            field1: 0,
            field2: rel.spcnode,
            field3: rel.dbnode,
            field4: rel.relnode,
            field5: rel.forknum,
            field6: blkno,
        }
    }

    pub fn rel_size(rel: RelTag) -> Key {
        Key::rel_block(rel, 0xffff_ffff)
    }

    /// Keys of every block of `rel`: `[rel_block(rel, 0), rel_size(rel))`.
    pub fn rel_block_range(rel: RelTag) -> std::ops::Range<Key> {
        Key::rel_block(rel, 0)..Key::rel_size(rel)
    }

    pub fn slru_dir(kind: SlruKind) -> Key {
        Key { field1: 1, field2: kind as u32, ..Key::MIN }
    }

    pub fn slru_block(kind: SlruKind, segno: u32, blkno: u32) -> Key {
        Key { field1: 1, field2: kind as u32, field3: 1, field4: segno, field5: 0, field6: blkno }
    }

    pub fn slru_segment_size(kind: SlruKind, segno: u32) -> Key {
        Key::slru_block(kind, segno, 0xffff_ffff)
    }

    pub fn twophase_dir() -> Key {
        Key { field1: 2, ..Key::MIN }
    }

    pub fn twophase_file(xid: u32) -> Key {
        Key { field1: 2, field6: xid, ..Key::MIN }
    }

    pub fn control_file() -> Key {
        Key { field1: 3, ..Key::MIN }
    }

    pub fn checkpoint() -> Key {
        Key { field1: 3, field6: 1, ..Key::MIN }
    }

    /// Is this a block of a relation (not a size or directory key)?
    pub fn is_rel_block(&self) -> bool {
        self.field1 == 0 && self.field4 != 0 && self.field6 != 0xffff_ffff
    }

    /// The relation of a relation block or size key.
    pub fn rel_tag(&self) -> Option<RelTag> {
        (self.field1 == 0 && self.field4 != 0)
            .then(|| RelTag::new(self.field2, self.field3, self.field4, self.field5))
    }

    pub fn is_slru_block(&self) -> bool {
        self.field1 == 1 && self.field3 == 1 && self.field6 != 0xffff_ffff
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02X}{:08X}{:08X}{:08X}{:02X}{:08X}",
            self.field1, self.field2, self.field3, self.field4, self.field5, self.field6
        )
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Key {
    type Err = KeyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut b = [0u8; KEY_SIZE];
        if s.len() != 2 * KEY_SIZE {
            return Err(KeyParseError(s.to_string()));
        }
        hex::decode_to_slice(s, &mut b).map_err(|_| KeyParseError(s.to_string()))?;
        Ok(Key::from_be_bytes(&b))
    }
}

impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn text_and_bytes_round_trip() {
        let rel = RelTag::new(1663, 5, 16384, 0);
        let k = Key::rel_block(rel, 7);
        assert_eq!(k.to_string(), "000000067F00000005000040000000000007");
        assert_eq!(k.to_string().len(), 36);
        assert_eq!(k.to_string().parse::<Key>().unwrap(), k);
        assert_eq!(Key::from_be_bytes(&k.to_be_bytes()), k);
        assert!("00".parse::<Key>().is_err());
    }

    #[test]
    fn compact_preserves_order_and_value() {
        let mut rng = rand::thread_rng();
        let mut keys: Vec<Key> = (0..2000)
            .map(|_| Key {
                field1: rng.gen_range(0..4),
                field2: if rng.gen_bool(0.1) { 0xffff_ffff } else { rng.gen_range(0..0xfffe) },
                field3: rng.gen(),
                field4: rng.gen(),
                field5: rng.gen(),
                field6: if rng.gen_bool(0.1) { 0xffff_ffff } else { rng.gen() },
            })
            .collect();
        for k in &keys {
            assert_eq!(Key::from_compact(k.to_compact()), *k);
        }
        let mut compact: Vec<_> = keys.iter().map(|k| k.to_compact()).collect();
        keys.sort();
        compact.sort();
        assert_eq!(keys, compact.into_iter().map(Key::from_compact).collect::<Vec<_>>());
    }

    #[test]
    fn add_carries() {
        let k = Key { field6: 0xffff_ffff, ..Key::MIN };
        assert_eq!(k.next(), Key { field5: 1, ..Key::MIN });
        let rel = RelTag::new(1663, 1, 2, 0);
        assert!(Key::rel_block(rel, 5) < Key::rel_size(rel));
        assert!(Key::rel_size(rel) < Key::rel_block(rel.with_fork(1), 0));
    }
}
