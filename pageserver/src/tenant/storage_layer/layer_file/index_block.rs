//! One block of a version 3 layer index: the on-disk format, building a
//! block, and checking and searching a block read back.
//!
//! Block layout (`INDEX_BLOCK_BYTES` = 8 KiB):
//! ```text
//! [0]             kind: 1 = leaf, 2 = internal
//! [1]             level: 0 for a leaf, 1 + the children's level otherwise
//! [2, 4)          entry count, u16 LE, 1..=ENTRIES_PER_BLOCK
//! [4, 8)          the block's own number in the index, u32 LE
//! [8, 8+34*n)     entries: search key (key 18 B BE, lsn 8 B BE), then u64 BE:
//!                 the value's BlobRef (leaf) or the child's block number
//!                 (internal); sorted strictly by search key
//! [.., 8188)      zero padding
//! [8188, 8192)    CRC-32C (LE) of bytes [0, 8188)
//! ```
//! The search key's bytes sort like `(CompactKey, Lsn)` (a test checks it),
//! so a search compares bytes and never decodes an entry it skips.
//!
//! Invariant: a [`Block`] exists only for bytes that passed [`Block::parse`]
//! (CRC, kind, level, count, own number, strict order); callers check what
//! depends on the tree (children, value locations) on top.

use pageserver_api::key::{CompactKey, Key, KEY_SIZE};
use utils::lsn::Lsn;

/// Size of an index block; blocks start at 4 KiB multiples, so a block is
/// a valid direct IO read for either alignment (512 or 4096).
pub const INDEX_BLOCK_BYTES: usize = 8192;
const BLOCK_HEADER_BYTES: usize = 8;
const CRC_BYTES: usize = 4;
const CRC_AT: usize = INDEX_BLOCK_BYTES - CRC_BYTES;
/// Bytes of a search key: key (18, big-endian) then LSN (8, big-endian).
pub const SEARCH_KEY_BYTES: usize = KEY_SIZE + 8;
/// Bytes of one entry: search key, then a u64 (BlobRef or child block).
pub const ENTRY_BYTES: usize = SEARCH_KEY_BYTES + 8;
/// Entries a block holds at most (240).
pub const ENTRIES_PER_BLOCK: usize = (CRC_AT - BLOCK_HEADER_BYTES) / ENTRY_BYTES;
const _: () = assert!(ENTRIES_PER_BLOCK == 240 && ENTRIES_PER_BLOCK <= u16::MAX as usize);
const _: () = assert!(INDEX_BLOCK_BYTES.is_multiple_of(io_engine::DIRECT_IO_ALIGN));

/// `(key, lsn)` as the bytes an index compares.
pub type SearchKey = [u8; SEARCH_KEY_BYTES];

/// A search key as two overlapping big-endian integers, bytes `0..16` and
/// `10..26`: the pairs compare like the bytes (when the first 16 bytes are
/// equal, so are bytes 10..16, and the second integer compares bytes
/// 16..26), in two integer comparisons instead of a `memcmp` call.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SortInts(u128, u128);

impl SortInts {
    fn of(sk: &[u8]) -> SortInts {
        let (head, tail) = (&sk[..16], &sk[SEARCH_KEY_BYTES - 16..SEARCH_KEY_BYTES]);
        SortInts(
            u128::from_be_bytes(head.try_into().unwrap()),
            u128::from_be_bytes(tail.try_into().unwrap()),
        )
    }
}

pub fn search_key(key: CompactKey, lsn: Lsn) -> SearchKey {
    let mut sk = [0u8; SEARCH_KEY_BYTES];
    Key::from_compact(key).write_be((&mut sk[..KEY_SIZE]).try_into().unwrap());
    sk[KEY_SIZE..].copy_from_slice(&lsn.0.to_be_bytes());
    sk
}

pub fn decode_search_key(sk: &[u8]) -> (CompactKey, Lsn) {
    let key = Key::from_be_bytes(sk[..KEY_SIZE].try_into().unwrap()).to_compact();
    (key, Lsn(u64::from_be_bytes(sk[KEY_SIZE..SEARCH_KEY_BYTES].try_into().unwrap())))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    Leaf = 1,
    Internal = 2,
}

/// A block being filled, entry by entry, in search key order.
pub struct BlockBuilder {
    buf: Box<[u8; INDEX_BLOCK_BYTES]>,
    count: usize,
}

impl BlockBuilder {
    pub fn new() -> BlockBuilder {
        BlockBuilder { buf: Box::new([0; INDEX_BLOCK_BYTES]), count: 0 }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_full(&self) -> bool {
        self.count == ENTRIES_PER_BLOCK
    }

    /// Append an entry; its search key must exceed the previous one's.
    pub fn push(&mut self, sk: &SearchKey, value: u64) {
        assert!(!self.is_full(), "index block overflow");
        let at = BLOCK_HEADER_BYTES + self.count * ENTRY_BYTES;
        if self.count > 0 {
            let prev = &self.buf[at - ENTRY_BYTES..at - 8];
            assert!(prev < &sk[..], "index entries must be pushed in strictly increasing order");
        }
        self.buf[at..at + SEARCH_KEY_BYTES].copy_from_slice(sk);
        self.buf[at + SEARCH_KEY_BYTES..at + ENTRY_BYTES].copy_from_slice(&value.to_be_bytes());
        self.count += 1;
    }

    /// The first entry's search key (the parent's separator for this block).
    pub fn first_key(&self) -> SearchKey {
        assert!(self.count > 0, "an empty block has no first key");
        self.buf[BLOCK_HEADER_BYTES..BLOCK_HEADER_BYTES + SEARCH_KEY_BYTES].try_into().unwrap()
    }

    /// The finished block (header and CRC filled in), appended to `out`;
    /// the builder is empty again.
    pub fn finish_into(&mut self, kind: BlockKind, level: u8, block_no: u64, out: &mut Vec<u8>) {
        assert!(self.count > 0, "an index block holds at least one entry");
        assert_eq!(kind == BlockKind::Leaf, level == 0, "leaves and only leaves are level 0");
        let block_no = u32::try_from(block_no).expect("index of fewer than 2^32 blocks");
        self.buf[0] = kind as u8;
        self.buf[1] = level;
        self.buf[2..4].copy_from_slice(&(self.count as u16).to_le_bytes());
        self.buf[4..8].copy_from_slice(&block_no.to_le_bytes());
        let crc = crc32c::crc32c(&self.buf[..CRC_AT]);
        self.buf[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&self.buf[..]);
        self.buf.fill(0);
        self.count = 0;
    }
}

/// A checked view of one index block.
#[derive(Clone, Copy)]
pub struct Block<'a> {
    bytes: &'a [u8],
    pub kind: BlockKind,
    pub level: u8,
    count: usize,
}

impl std::fmt::Debug for Block<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Block({:?}, level {}, {} entries)", self.kind, self.level, self.count)
    }
}

impl<'a> Block<'a> {
    /// Check `bytes` as block number `block_no`; the error says what is wrong.
    pub fn parse(bytes: &'a [u8], block_no: u64) -> Result<Block<'a>, String> {
        if bytes.len() != INDEX_BLOCK_BYTES {
            return Err(format!("{} bytes, expected {INDEX_BLOCK_BYTES}", bytes.len()));
        }
        let stored = u32::from_le_bytes(bytes[CRC_AT..].try_into().unwrap());
        let computed = crc32c::crc32c(&bytes[..CRC_AT]);
        if stored != computed {
            return Err(format!("checksum mismatch: stored {stored:#x}, computed {computed:#x}"));
        }
        let b = Block::view(bytes);
        let kind = match bytes[0] {
            1 => BlockKind::Leaf,
            2 => BlockKind::Internal,
            k => return Err(format!("unknown block kind {k}")),
        };
        if (kind == BlockKind::Leaf) != (b.level == 0) {
            return Err(format!("{kind:?} block at level {}", b.level));
        }
        if b.count == 0 || b.count > ENTRIES_PER_BLOCK {
            return Err(format!("{} entries", b.count));
        }
        let own = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as u64;
        if own != block_no {
            return Err(format!("holds block {own}"));
        }
        if !(1..b.count).all(|i| b.search_key(i - 1) < b.search_key(i)) {
            return Err("entries out of order".to_string());
        }
        Ok(b)
    }

    /// A view of bytes that passed `parse` before (cached blocks).
    pub fn view(bytes: &'a [u8]) -> Block<'a> {
        debug_assert_eq!(bytes.len(), INDEX_BLOCK_BYTES);
        let kind =
            if bytes[0] == BlockKind::Leaf as u8 { BlockKind::Leaf } else { BlockKind::Internal };
        let count = u16::from_le_bytes([bytes[2], bytes[3]]) as usize;
        Block { bytes, kind, level: bytes[1], count: count.min(ENTRIES_PER_BLOCK) }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn search_key(&self, i: usize) -> &'a [u8] {
        let at = BLOCK_HEADER_BYTES + i * ENTRY_BYTES;
        &self.bytes[at..at + SEARCH_KEY_BYTES]
    }

    /// The entry's u64: a BlobRef (leaf) or a child block number (internal).
    pub fn value(&self, i: usize) -> u64 {
        let at = BLOCK_HEADER_BYTES + i * ENTRY_BYTES + SEARCH_KEY_BYTES;
        u64::from_be_bytes(self.bytes[at..at + 8].try_into().unwrap())
    }

    /// How many entries have a search key `<= target`.
    pub fn partition_point(&self, target: &SearchKey) -> usize {
        let target = SortInts::of(target);
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if SortInts::of(self.search_key(mid)) <= target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_key_bytes_sort_like_compact_key_and_lsn() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            rng
        };
        let mut pairs = Vec::new();
        for _ in 0..2000 {
            let (a, b) = (next(), next());
            // Compactable keys: field1 below 0x80, field2 < 0xffff or 0xffffffff.
            let f2 = if a & 7 == 0 { 0xffff_ffff } else { (a >> 3) as u32 % 0xffff };
            let key = Key {
                field1: (a >> 20) as u8 & 0x7f,
                field2: f2,
                field3: (a >> 32) as u32 & 0xff,
                field4: b as u32 & 0xffff,
                field5: (b >> 32) as u8 & 3,
                field6: (b >> 40) as u32 & 0xff,
            };
            let lsn = match next() % 4 {
                0 => Lsn(0),
                1 => Lsn(u64::MAX),
                _ => Lsn(next() % 1000),
            };
            pairs.push((key.to_compact(), lsn));
        }
        pairs.push((Key::MIN.to_compact(), Lsn(0)));
        pairs.push((Key::MAX.to_compact(), Lsn(u64::MAX)));
        for w in pairs.windows(2) {
            let (x, y) = (w[0], w[1]);
            assert_eq!(x.cmp(&y), search_key(x.0, x.1).cmp(&search_key(y.0, y.1)), "{x:?} {y:?}");
            assert_eq!(decode_search_key(&search_key(x.0, x.1)), x);
            let (a, b) = (search_key(x.0, x.1), search_key(y.0, y.1));
            assert_eq!(a.cmp(&b), SortInts::of(&a).cmp(&SortInts::of(&b)));
        }
    }

    fn block_of(n: u64, kind: BlockKind, level: u8, block_no: u64) -> Vec<u8> {
        let mut b = BlockBuilder::new();
        for i in 0..n {
            b.push(&search_key((i as CompactKey + 1) * 2, Lsn(i)), i + 100);
        }
        let mut out = Vec::new();
        b.finish_into(kind, level, block_no, &mut out);
        out
    }

    #[test]
    fn blocks_round_trip_and_search() {
        let bytes = block_of(ENTRIES_PER_BLOCK as u64, BlockKind::Leaf, 0, 7);
        let b = Block::parse(&bytes, 7).unwrap();
        assert_eq!((b.kind, b.level, b.len()), (BlockKind::Leaf, 0, ENTRIES_PER_BLOCK));
        assert_eq!(decode_search_key(b.search_key(3)), (8, Lsn(3)));
        assert_eq!(b.value(3), 103);
        assert_eq!(b.partition_point(&search_key(8, Lsn(3))), 4);
        assert_eq!(b.partition_point(&search_key(8, Lsn(2))), 3);
        assert_eq!(b.partition_point(&search_key(9, Lsn(0))), 4);
        assert_eq!(b.partition_point(&search_key(1, Lsn(u64::MAX))), 0);
        assert_eq!(b.partition_point(&search_key(1 << 20, Lsn(0))), ENTRIES_PER_BLOCK);
        let internal = block_of(2, BlockKind::Internal, 3, 9);
        assert_eq!(Block::parse(&internal, 9).unwrap().level, 3);
    }

    #[test]
    fn damaged_blocks_are_refused() {
        let good = block_of(5, BlockKind::Leaf, 0, 2);
        assert!(Block::parse(&good, 3).unwrap_err().contains("holds block 2"));
        let mut flipped = good.clone();
        flipped[100] ^= 1;
        assert!(Block::parse(&flipped, 2).unwrap_err().contains("checksum mismatch"));
        assert!(Block::parse(&good[..4096], 2).is_err());
    }

    #[test]
    #[should_panic(expected = "strictly increasing")]
    fn builder_refuses_out_of_order_entries() {
        let mut b = BlockBuilder::new();
        b.push(&search_key(5, Lsn(1)), 0);
        b.push(&search_key(5, Lsn(1)), 0);
    }
}
