//! Building a version 3 index: leaves are filled as entries arrive (in
//! `(key, lsn)` order); at the end the internal levels are built bottom-up
//! (each entry: the first search key of a child, and the child's block
//! number) until one block, the root, remains.
//!
//! Block numbers: leaves are `0..leaf_count` in key order (so the leaf
//! before leaf `n` is block `n - 1`), then each internal level in order, the
//! root last (`root_block = block count - 1`). A child's number is always
//! below its parent's.
//!
//! Memory: the finished blocks stay in memory until the layer is written
//! (34 bytes per entry, like the entries themselves; `index_bytes` lets a
//! writer bound it by splitting its output).

use pageserver_api::key::{CompactKey, Key};
use utils::lsn::Lsn;

use super::super::BlobRef;
use super::index_block::{
    decode_search_key, search_key, BlockBuilder, BlockKind, SearchKey, ENTRIES_PER_BLOCK,
    INDEX_BLOCK_BYTES,
};

/// Where a version 3 index's blocks are (recorded in the header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    /// The root's block number: the last block of the index.
    pub root_block: u64,
    /// Levels, leaves included (1: the root is the only leaf).
    pub depth: u8,
    /// Leaves are blocks `0..leaf_count`.
    pub leaf_count: u64,
}

impl TreeShape {
    pub fn block_count(&self) -> u64 {
        self.root_block + 1
    }

    pub fn index_bytes(&self) -> u64 {
        self.block_count() * INDEX_BLOCK_BYTES as u64
    }
}

/// Blocks of a tree over `leaves` leaves (all levels).
fn blocks_for(leaves: u64) -> u64 {
    let (mut total, mut level) = (leaves, leaves);
    while level > 1 {
        level = level.div_ceil(ENTRIES_PER_BLOCK as u64);
        total += level;
    }
    total
}

pub struct IndexBuilder {
    /// Finished leaves, back to back.
    leaves: Vec<u8>,
    leaf: BlockBuilder,
    /// The first search key of every finished leaf.
    leaf_firsts: Vec<SearchKey>,
    last: Option<SearchKey>,
    entry_count: u64,
}

/// A finished index: its blocks (leaves first, root last) and shape.
pub struct BuiltIndex {
    pub blocks: Vec<u8>,
    pub shape: TreeShape,
    pub entry_count: u64,
}

impl BuiltIndex {
    pub fn root(&self) -> &[u8] {
        &self.blocks[self.blocks.len() - INDEX_BLOCK_BYTES..]
    }
}

impl IndexBuilder {
    pub fn new() -> IndexBuilder {
        IndexBuilder {
            leaves: Vec::new(),
            leaf: BlockBuilder::new(),
            leaf_firsts: Vec::new(),
            last: None,
            entry_count: 0,
        }
    }

    /// Add the next entry. Panics unless `(key, lsn)` is above the previous
    /// entry's: an index is written sorted, without duplicates.
    pub fn push(&mut self, key: CompactKey, lsn: Lsn, blob: BlobRef) {
        let sk = search_key(key, lsn);
        if let Some(last) = &self.last {
            let (lk, ll) = decode_search_key(last);
            assert!(
                last < &sk,
                "layer index entries must be strictly increasing: {} at {lsn} after {} at {ll}",
                Key::from_compact(key),
                Key::from_compact(lk)
            );
        }
        if self.leaf.is_full() {
            self.finish_leaf();
        }
        self.leaf.push(&sk, blob.raw());
        self.last = Some(sk);
        self.entry_count += 1;
    }

    /// Bytes the index would take if finished now (all levels).
    pub fn index_bytes(&self) -> u64 {
        let leaves = self.leaf_firsts.len() as u64 + (self.leaf.len() > 0) as u64;
        blocks_for(leaves) * INDEX_BLOCK_BYTES as u64
    }

    fn finish_leaf(&mut self) {
        let block_no = self.leaf_firsts.len() as u64;
        self.leaf_firsts.push(self.leaf.first_key());
        self.leaf.finish_into(BlockKind::Leaf, 0, block_no, &mut self.leaves);
    }

    /// The whole index; panics when no entry was pushed.
    pub fn finish(mut self) -> BuiltIndex {
        assert!(self.entry_count > 0, "an index holds at least one entry");
        if self.leaf.len() > 0 {
            self.finish_leaf();
        }
        let leaf_count = self.leaf_firsts.len() as u64;
        let mut blocks = std::mem::take(&mut self.leaves);
        blocks.reserve_exact((blocks_for(leaf_count) - leaf_count) as usize * INDEX_BLOCK_BYTES);
        let mut children: Vec<(SearchKey, u64)> =
            self.leaf_firsts.iter().enumerate().map(|(i, k)| (*k, i as u64)).collect();
        let (mut level, mut next_block) = (0u8, leaf_count);
        while children.len() > 1 {
            level += 1;
            let mut parents = Vec::with_capacity(children.len().div_ceil(ENTRIES_PER_BLOCK));
            for group in children.chunks(ENTRIES_PER_BLOCK) {
                let mut b = BlockBuilder::new();
                for (sk, child) in group {
                    b.push(sk, *child);
                }
                parents.push((b.first_key(), next_block));
                b.finish_into(BlockKind::Internal, level, next_block, &mut blocks);
                next_block += 1;
            }
            children = parents;
        }
        let shape = TreeShape { root_block: next_block - 1, depth: level + 1, leaf_count };
        assert_eq!(blocks.len() as u64, shape.index_bytes(), "every block was written once");
        assert_eq!(shape.block_count(), blocks_for(leaf_count));
        BuiltIndex { blocks, shape, entry_count: self.entry_count }
    }
}

#[cfg(test)]
mod tests {
    use super::super::index_block::Block;
    use super::*;

    fn build(n: u64) -> BuiltIndex {
        let mut b = IndexBuilder::new();
        for i in 0..n {
            b.push(i as CompactKey, Lsn(1), BlobRef::new(i, 1, true));
        }
        let estimate = b.index_bytes();
        let built = b.finish();
        assert_eq!(estimate, built.shape.index_bytes(), "index_bytes predicts the size");
        built
    }

    #[test]
    fn shapes_by_entry_count() {
        let e = ENTRIES_PER_BLOCK as u64;
        let one = build(1).shape;
        assert_eq!(one, TreeShape { root_block: 0, depth: 1, leaf_count: 1 });
        assert_eq!(build(e).shape, one, "a full leaf is still one block");
        let two = build(e + 1).shape;
        assert_eq!(two, TreeShape { root_block: 2, depth: 2, leaf_count: 2 });
        let three = build(e * e + 1).shape;
        assert_eq!(three.depth, 3);
        assert_eq!(three.leaf_count, e + 1);
        assert_eq!(three.block_count(), e + 1 + 2 + 1);
    }

    #[test]
    fn internal_entries_are_the_first_keys_of_their_children() {
        let built = build(ENTRIES_PER_BLOCK as u64 * 3 + 7);
        let block = |n: u64| {
            let at = n as usize * INDEX_BLOCK_BYTES;
            Block::parse(&built.blocks[at..at + INDEX_BLOCK_BYTES], n).unwrap()
        };
        let root = block(built.shape.root_block);
        assert_eq!((root.level, root.len()), (1, 4));
        for i in 0..root.len() {
            let child = block(root.value(i));
            assert_eq!(child.level, 0);
            assert_eq!(child.search_key(0), root.search_key(i));
        }
        assert_eq!(built.root(), &built.blocks[built.blocks.len() - INDEX_BLOCK_BYTES..]);
    }

    #[test]
    #[should_panic(expected = "strictly increasing")]
    fn refuses_a_smaller_key() {
        let mut b = IndexBuilder::new();
        b.push(5, Lsn(1), BlobRef::new(0, 1, true));
        b.push(4, Lsn(9), BlobRef::new(0, 1, true));
    }
}
