//! Reading a version 3 index (built by `index_builder.rs`, blocks as in
//! `index_block.rs`).
//!
//! In memory per layer: the shape, the bounds blocks are checked against,
//! the first block of each level, and the root block. Every other block is
//! read on demand through the process-wide block cache (`block_cache.rs`),
//! or, for a sequential scan (`read_leaves`), straight from the file so a
//! compaction does not flush the cache.
//!
//! A block is checked before anything uses it: its own checks (CRC, kind,
//! count, number, order), then its place in the tree: its level is the one
//! its number implies; an internal block's children are consecutive blocks
//! of the level below; a leaf's values lie in the values region, its keys
//! in the layer's key range and its LSNs in the LSN range. Descending, a
//! child's first entry must equal its parent's separator. A block failing
//! any check is a `CorruptBlock` error naming the file and the block.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use io_engine::{AlignedBuf, File};
use pageserver_api::key::{CompactKey, KEY_SIZE};
use utils::lsn::Lsn;

use super::super::block_cache;
use super::super::BlobRef;
use super::header::Header;
use super::index_block::{
    decode_search_key, search_key, Block, ENTRIES_PER_BLOCK, INDEX_BLOCK_BYTES, SEARCH_KEY_BYTES,
};
use super::index_builder::TreeShape;
use super::LayerReadError;

const BLOCK: u64 = INDEX_BLOCK_BYTES as u64;

pub(super) struct TreeIndex {
    /// This open file's key prefix in the block cache.
    cache_id: u64,
    index_offset: u64,
    shape: TreeShape,
    entry_count: u64,
    /// First block of each level, leaves (level 0) first, then the end of
    /// the index: `depth + 1` numbers.
    level_starts: Vec<u64>,
    key_start: [u8; KEY_SIZE],
    key_end: [u8; KEY_SIZE],
    lsn_range: Range<Lsn>,
    values_len: u64,
    root: Bytes,
}

/// `level_starts` of a tree over `leaf_count` leaves.
fn level_starts(leaf_count: u64) -> Vec<u64> {
    let mut starts = vec![0, leaf_count];
    let mut level = leaf_count;
    while level > 1 {
        level = level.div_ceil(ENTRIES_PER_BLOCK as u64);
        starts.push(starts.last().unwrap() + level);
    }
    starts
}

impl TreeIndex {
    /// The index of a file with header `h` (version 3), its root block
    /// read from `file` and checked.
    pub async fn open(file: &File, h: &Header, shape: TreeShape) -> anyhow::Result<TreeIndex> {
        let mut index = TreeIndex::without_root(h, shape)?;
        index.root = index.read_block(file, shape.root_block).await?;
        Ok(index)
    }

    /// The index of a file just written, whose root block is `root`.
    pub fn written(h: &Header, shape: TreeShape, root: &[u8]) -> anyhow::Result<TreeIndex> {
        let mut index = TreeIndex::without_root(h, shape)?;
        index.check(root, shape.root_block).map_err(anyhow::Error::msg)?;
        index.root = Bytes::copy_from_slice(root);
        Ok(index)
    }

    fn without_root(h: &Header, shape: TreeShape) -> anyhow::Result<TreeIndex> {
        let level_starts = level_starts(shape.leaf_count);
        anyhow::ensure!(
            level_starts.len() == shape.depth as usize + 1
                && *level_starts.last().unwrap() == shape.block_count(),
            "index shape {shape:?} is not that of a tree over {} leaves",
            shape.leaf_count
        );
        anyhow::ensure!(
            h.entry_count <= shape.leaf_count * ENTRIES_PER_BLOCK as u64
                && h.entry_count > (shape.leaf_count - 1) * ENTRIES_PER_BLOCK as u64,
            "{} entries do not fill {} leaves",
            h.entry_count,
            shape.leaf_count
        );
        Ok(TreeIndex {
            cache_id: block_cache::next_file_id(),
            index_offset: h.index_offset,
            shape,
            entry_count: h.entry_count,
            level_starts,
            key_start: h.key_range.start.to_be_bytes(),
            key_end: h.key_range.end.to_be_bytes(),
            lsn_range: h.lsn_range.clone(),
            values_len: h.values_len,
            root: Bytes::new(),
        })
    }

    pub fn shape(&self) -> TreeShape {
        self.shape
    }

    pub fn entry_count(&self) -> u64 {
        self.entry_count
    }

    fn corrupt(file: &File, block: u64, reason: String) -> LayerReadError {
        LayerReadError::CorruptBlock { path: file.path().to_path_buf(), block, reason }
    }

    fn level_of(&self, block_no: u64) -> u8 {
        (self.level_starts.partition_point(|&s| s <= block_no) - 1) as u8
    }

    /// Check block `block_no` as a part of this tree (see the module comment).
    fn check(&self, bytes: &[u8], block_no: u64) -> Result<(), String> {
        let b = Block::parse(bytes, block_no)?;
        let level = self.level_of(block_no);
        if b.level != level {
            return Err(format!("level {} where the tree has level {level}", b.level));
        }
        if level > 0 {
            let children = self.level_starts[level as usize - 1]..self.level_starts[level as usize];
            let first = b.value(0);
            let consecutive = (0..b.len()).all(|i| b.value(i) == first + i as u64);
            if !consecutive
                || !children.contains(&first)
                || !children.contains(&(first + b.len() as u64 - 1))
            {
                return Err(format!(
                    "children {first}.. outside level {} ({children:?})",
                    level - 1
                ));
            }
            return Ok(());
        }
        for i in 0..b.len() {
            let sk = b.search_key(i);
            let (_, lsn) = decode_search_key(sk);
            let blob = BlobRef::from_raw(b.value(i));
            let key = &sk[..KEY_SIZE];
            if key < &self.key_start[..] || key >= &self.key_end[..] {
                return Err(format!("entry {i} has a key outside the layer's key range"));
            }
            if !self.lsn_range.contains(&lsn) || blob.end() > self.values_len {
                return Err(format!("entry {i} at {lsn} ({blob:?}) points outside the layer"));
            }
        }
        Ok(())
    }

    /// Read `count` consecutive blocks from `first` straight from the file,
    /// each checked.
    async fn read_blocks(
        &self,
        file: &File,
        first: u64,
        count: u64,
    ) -> Result<Vec<Bytes>, LayerReadError> {
        assert!(
            first + count <= self.shape.block_count(),
            "blocks {first}+{count} beyond the index"
        );
        let len = (count * BLOCK) as usize;
        let offset = self.index_offset + first * BLOCK;
        let (buf, res) = file.read_exact_at(AlignedBuf::for_read(len), offset, len).await;
        res.map_err(|e| LayerReadError::Io {
            path: file.path().to_path_buf(),
            source: Arc::new(e),
        })?;
        let all = Bytes::from_owner(buf);
        let mut blocks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let bytes = all.slice((i * BLOCK) as usize..((i + 1) * BLOCK) as usize);
            self.check(&bytes, first + i).map_err(|r| Self::corrupt(file, first + i, r))?;
            blocks.push(bytes);
        }
        Ok(blocks)
    }

    async fn read_block(&self, file: &File, block_no: u64) -> Result<Bytes, LayerReadError> {
        Ok(self.read_blocks(file, block_no, 1).await?.pop().expect("one block"))
    }

    /// Block `block_no`, checked, through the block cache.
    async fn block(&self, file: &File, block_no: u64) -> Result<Bytes, LayerReadError> {
        if block_no == self.shape.root_block {
            return Ok(self.root.clone());
        }
        block_cache::global()
            .get_or_read(self.cache_id, block_no, self.read_block(file, block_no))
            .await
    }

    /// Descend to the leaf holding the last entry `<= target`; returns it,
    /// its number, and how many of its entries are `<= target`. `None`
    /// when every entry is above `target`.
    async fn find_leaf(
        &self,
        file: &File,
        target: &[u8; SEARCH_KEY_BYTES],
    ) -> Result<Option<(Bytes, u64, usize)>, LayerReadError> {
        let (mut bytes, mut block_no) = (self.root.clone(), self.shape.root_block);
        loop {
            let b = Block::view(&bytes);
            let below = b.partition_point(target);
            if below == 0 {
                // Only the root's first entry can be above a target: each
                // child starts with its separator, which is <= target.
                debug_assert_eq!(block_no, self.shape.root_block);
                return Ok(None);
            }
            if b.level == 0 {
                return Ok(Some((bytes, block_no, below)));
            }
            let child = b.value(below - 1);
            let child_bytes = self.block(file, child).await?;
            if Block::view(&child_bytes).search_key(0) != b.search_key(below - 1) {
                let reason = format!("its first entry is not its separator in block {block_no}");
                return Err(Self::corrupt(file, child, reason));
            }
            (bytes, block_no) = (child_bytes, child);
        }
    }

    /// Same contract as `LayerFile::collect`: walk back from the last entry
    /// `<= (key, lsn)` over the entries of `key` above `floor`, across leaf
    /// boundaries (the leaf before leaf `n` is block `n - 1`).
    pub async fn collect(
        &self,
        file: &File,
        key: CompactKey,
        lsn: Lsn,
        floor: Lsn,
        out: &mut Vec<(Lsn, BlobRef)>,
    ) -> Result<bool, LayerReadError> {
        let target = search_key(key, lsn);
        let Some((mut bytes, mut block_no, mut pos)) = self.find_leaf(file, &target).await? else {
            return Ok(false);
        };
        loop {
            let b = Block::view(&bytes);
            while pos > 0 {
                pos -= 1;
                let sk = b.search_key(pos);
                if sk[..KEY_SIZE] != target[..KEY_SIZE] {
                    return Ok(false);
                }
                let entry_lsn = Lsn(u64::from_be_bytes(sk[KEY_SIZE..].try_into().unwrap()));
                if entry_lsn <= floor {
                    return Ok(false);
                }
                let blob = BlobRef::from_raw(b.value(pos));
                out.push((entry_lsn, blob));
                if blob.will_init() {
                    return Ok(true);
                }
            }
            if block_no == 0 {
                return Ok(false);
            }
            block_no -= 1;
            bytes = self.block(file, block_no).await?;
            pos = Block::view(&bytes).len();
        }
    }

    /// Leaves `first..first + count`, checked, read straight from the file
    /// (not through the cache).
    pub async fn read_leaves(
        &self,
        file: &File,
        first: u64,
        count: u64,
    ) -> Result<Vec<Bytes>, LayerReadError> {
        assert!(first + count <= self.shape.leaf_count, "leaves {first}+{count} beyond the leaves");
        self.read_blocks(file, first, count).await
    }
}

/// The entries of a checked leaf.
pub(super) fn leaf_entries(bytes: &[u8]) -> Vec<(CompactKey, Lsn, BlobRef)> {
    let b = Block::view(bytes);
    debug_assert_eq!(b.level, 0);
    (0..b.len())
        .map(|i| {
            let (key, lsn) = decode_search_key(b.search_key(i));
            (key, lsn, BlobRef::from_raw(b.value(i)))
        })
        .collect()
}
