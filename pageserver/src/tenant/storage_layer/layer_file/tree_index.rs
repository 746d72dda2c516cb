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

/// How a walk gets index blocks other than the root.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Fetch {
    /// From the block cache, reading (and caching) those it lacks.
    ReadMisses,
    /// From the block cache only: a walk that needs another block stops.
    /// Such a walk never waits, so it completes in its first poll.
    CachedOnly,
}

/// Where a descent ended.
enum Descent {
    /// The leaf, its number, and how many of its entries are `<= target`.
    Leaf(Bytes, u64, usize),
    /// Every entry is above the target.
    BelowFirst,
    /// A block on the way is not cached (`Fetch::CachedOnly`).
    NotCached,
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

    /// `read_blocks`, for a check of the whole index (`inspect.rs`).
    pub async fn read_blocks_checked(
        &self,
        file: &File,
        first: u64,
        count: u64,
    ) -> Result<(), LayerReadError> {
        self.read_blocks(file, first, count).await.map(drop)
    }

    async fn read_block(&self, file: &File, block_no: u64) -> Result<Bytes, LayerReadError> {
        Ok(self.read_blocks(file, block_no, 1).await?.pop().expect("one block"))
    }

    /// Block `block_no`, checked, through the block cache; `None` when it
    /// is not cached and `fetch` is `CachedOnly`.
    async fn block(
        &self,
        file: &File,
        block_no: u64,
        fetch: Fetch,
    ) -> Result<Option<Bytes>, LayerReadError> {
        if block_no == self.shape.root_block {
            return Ok(Some(self.root.clone()));
        }
        let cache = block_cache::global();
        match fetch {
            Fetch::CachedOnly => Ok(cache.get_cached(self.cache_id, block_no)),
            Fetch::ReadMisses => {
                let read = || self.read_block(file, block_no);
                cache.get_or_read(self.cache_id, block_no, read).await.map(Some)
            }
        }
    }

    /// Descend to the leaf holding the last entry `<= target`.
    async fn find_leaf(
        &self,
        file: &File,
        target: &[u8; SEARCH_KEY_BYTES],
        fetch: Fetch,
    ) -> Result<Descent, LayerReadError> {
        let (mut bytes, mut block_no) = (self.root.clone(), self.shape.root_block);
        loop {
            let b = Block::view(&bytes);
            let below = b.partition_point(target);
            if below == 0 {
                // Only the root's first entry can be above a target: each
                // child starts with its separator, which is <= target.
                debug_assert_eq!(block_no, self.shape.root_block);
                return Ok(Descent::BelowFirst);
            }
            if b.level == 0 {
                return Ok(Descent::Leaf(bytes, block_no, below));
            }
            let child = b.value(below - 1);
            let Some(child_bytes) = self.block(file, child, fetch).await? else {
                return Ok(Descent::NotCached);
            };
            if Block::view(&child_bytes).search_key(0) != b.search_key(below - 1) {
                let reason = format!("its first entry is not its separator in block {block_no}");
                return Err(Self::corrupt(file, child, reason));
            }
            (bytes, block_no) = (child_bytes, child);
        }
    }

    /// Same contract as `LayerFile::collect`: walk back from the last entry
    /// `<= (key, lsn)` over the entries of `key` above `floor`, across leaf
    /// boundaries (the leaf before leaf `n` is block `n - 1`). `None` when
    /// `fetch` is `CachedOnly` and a block the walk needs is not cached
    /// (`out` may then hold some entries: the caller discards them).
    pub async fn collect(
        &self,
        file: &File,
        (key, lsn, floor): (CompactKey, Lsn, Lsn),
        out: &mut Vec<(Lsn, BlobRef)>,
        fetch: Fetch,
    ) -> Result<Option<bool>, LayerReadError> {
        let target = search_key(key, lsn);
        let (mut bytes, mut block_no, mut pos) = match self.find_leaf(file, &target, fetch).await? {
            Descent::Leaf(bytes, block_no, pos) => (bytes, block_no, pos),
            Descent::BelowFirst => return Ok(Some(false)),
            Descent::NotCached => return Ok(None),
        };
        loop {
            let b = Block::view(&bytes);
            while pos > 0 {
                pos -= 1;
                let sk = b.search_key(pos);
                if sk[..KEY_SIZE] != target[..KEY_SIZE] {
                    return Ok(Some(false));
                }
                let entry_lsn = Lsn(u64::from_be_bytes(sk[KEY_SIZE..].try_into().unwrap()));
                if entry_lsn <= floor {
                    return Ok(Some(false));
                }
                let blob = BlobRef::from_raw(b.value(pos));
                out.push((entry_lsn, blob));
                if blob.will_init() {
                    return Ok(Some(true));
                }
            }
            if block_no == 0 {
                return Ok(Some(false));
            }
            block_no -= 1;
            let Some(prev) = self.block(file, block_no, fetch).await? else { return Ok(None) };
            pos = Block::view(&prev).len();
            bytes = prev;
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
