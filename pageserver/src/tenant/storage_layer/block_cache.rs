//! The process-wide cache of layer index blocks (format version 3).
//!
//! Keyed by (file id, block number): every opened layer file draws a fresh
//! id from [`next_file_id`] (a process-wide counter, never reused), so a
//! cached block is never served for another file or a later file of the
//! same name. Values are the immutable bytes of one block, checked (CRC,
//! position in the tree) before they are inserted. Blocks of a dropped
//! layer are not removed; they age out like any other.
//!
//! Bounded in bytes: the weight of an entry is its block's length and the
//! total never exceeds the capacity (`layer_index_cache_size`, set once at
//! start-up by [`init`]; [`DEFAULT_CAPACITY_BYTES`] when the daemon did not,
//! e.g. in tests). Eviction is `quick_cache`'s (CLOCK-Pro-like: a block read
//! once, as by a scan, leaves before blocks read again, as index roots and
//! upper levels are). Per-entry bookkeeping (key, `Bytes` handle, the
//! table) is not counted: about 1% of 8 KiB blocks. A block is admitted
//! only if it fits 97% of a shard (`quick_cache`'s hot section), so a cache
//! below ~9 KiB holds nothing; shards hold at least `MIN_BLOCKS_PER_SHARD`.
//!
//! Concurrency: any number of readers; lookups take one shard's lock for a
//! hash probe and never across an await. `get_cached` only looks (the read
//! path plans from memory first with it); `get_or_read` also reads. Concurrent misses of the same block
//! read it once: the first reader holds a placeholder while it reads, the
//! others wait for it (a failed read leaves no entry; a waiter then reads
//! itself). Metrics (`metrics/storage.rs`) count hits (including waits on
//! another reader's read), misses, and the bytes held.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use bytes::Bytes;
use quick_cache::sync::Cache;
use quick_cache::{OptionsBuilder, Weighter};
use tracing::warn;

use crate::metrics::storage as metrics;

/// Capacity when [`init`] was not called (the config key's default).
pub const DEFAULT_CAPACITY_BYTES: u64 = 64 * 1024 * 1024;
/// The block size the cache is tuned for (item estimate, shard count).
const TYPICAL_BLOCK_BYTES: u64 = 8192;
/// Fewest blocks a shard holds; more shards only for bigger caches.
const MIN_BLOCKS_PER_SHARD: u64 = 64;
const MAX_SHARDS: u64 = 64;

type Key = (u64, u64);

#[derive(Clone)]
struct BytesWeighter;

impl Weighter<Key, Bytes> for BytesWeighter {
    fn weight(&self, _key: &Key, block: &Bytes) -> u64 {
        block.len() as u64
    }
}

pub struct BlockCache {
    cache: Cache<Key, Bytes, BytesWeighter>,
    capacity_bytes: u64,
    /// Whether this is the process-wide cache, which reports to the metrics.
    reports_metrics: bool,
}

static GLOBAL: OnceLock<BlockCache> = OnceLock::new();
static NEXT_FILE_ID: AtomicU64 = AtomicU64::new(1);

/// Size the process-wide cache; call once at start-up, before any layer is
/// read. A later call with another size is ignored with a warning.
pub fn init(capacity_bytes: u64) {
    let cache = GLOBAL.get_or_init(|| BlockCache::new(capacity_bytes, true));
    if cache.capacity_bytes != capacity_bytes {
        warn!(
            "layer index cache already sized {} bytes; ignoring {capacity_bytes}",
            cache.capacity_bytes
        );
    }
}

/// The process-wide cache.
pub fn global() -> &'static BlockCache {
    GLOBAL.get_or_init(|| BlockCache::new(DEFAULT_CAPACITY_BYTES, true))
}

/// A fresh id for an opened layer file: its blocks' key prefix.
pub fn next_file_id() -> u64 {
    NEXT_FILE_ID.fetch_add(1, Ordering::Relaxed)
}

impl BlockCache {
    /// A cache of at most `capacity_bytes` (> 0) of blocks. Only the
    /// process-wide one reports metrics; tests make their own.
    pub fn new(capacity_bytes: u64, reports_metrics: bool) -> BlockCache {
        assert!(capacity_bytes > 0, "a block cache has room");
        let blocks = (capacity_bytes / TYPICAL_BLOCK_BYTES).max(1);
        let shards = (blocks / MIN_BLOCKS_PER_SHARD).clamp(1, MAX_SHARDS);
        let shards = if shards.is_power_of_two() { shards } else { shards.next_power_of_two() / 2 };
        // Each shard gets an equal share, so the shards never add up to
        // more than the capacity.
        let weight_capacity = capacity_bytes / shards * shards;
        let options = OptionsBuilder::new()
            .shards(shards as usize)
            .estimated_items_capacity(blocks as usize)
            .weight_capacity(weight_capacity)
            .build()
            .expect("valid cache options");
        let cache =
            Cache::with_options(options, BytesWeighter, Default::default(), Default::default());
        assert!(cache.capacity() <= capacity_bytes, "shards fit the capacity");
        BlockCache { cache, capacity_bytes, reports_metrics }
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Bytes of blocks held now (at most the capacity).
    pub fn held_bytes(&self) -> u64 {
        self.cache.weight()
    }

    /// Block `block` of file `file_id` if it is cached (counted as a hit;
    /// the caller that then reads it counts the miss).
    pub fn get_cached(&self, file_id: u64, block: u64) -> Option<Bytes> {
        let bytes = self.cache.get(&(file_id, block));
        if bytes.is_some() && self.reports_metrics {
            metrics::LAYER_INDEX_CACHE_HITS.inc();
        }
        bytes
    }

    /// Block `block` of file `file_id`: from the cache, or `read()` it (a
    /// checked block) and insert it. An error of `read` is returned and
    /// nothing is cached. The read's future is boxed, so a caller's future
    /// stays small on the (common) hit.
    pub async fn get_or_read<E, F>(
        &self,
        file_id: u64,
        block: u64,
        read: impl FnOnce() -> F,
    ) -> Result<Bytes, E>
    where
        F: Future<Output = Result<Bytes, E>>,
    {
        let guard = match self.cache.get_value_or_guard_async(&(file_id, block)).await {
            Ok(bytes) => {
                if self.reports_metrics {
                    metrics::LAYER_INDEX_CACHE_HITS.inc();
                }
                return Ok(bytes);
            }
            Err(guard) => guard,
        };
        if self.reports_metrics {
            metrics::LAYER_INDEX_CACHE_MISSES.inc();
        }
        let bytes = Box::pin(read()).await?;
        let _ = guard.insert(bytes.clone());
        if self.reports_metrics {
            metrics::LAYER_INDEX_CACHE_BYTES.set(self.held_bytes() as i64);
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fill(cache: &BlockCache, file_id: u64, blocks: u64) {
        for b in 0..blocks {
            let read = || async move { Ok::<_, ()>(Bytes::from(vec![b as u8; 8192])) };
            let got = cache.get_or_read(file_id, b, read).await.unwrap();
            assert_eq!(got[0], b as u8);
        }
    }

    #[tokio::test]
    async fn stays_within_its_capacity() {
        for capacity in [3 * 8192, 100_000, 1 << 20, (4 << 20) + 123] {
            let cache = BlockCache::new(capacity, false);
            fill(&cache, 1, capacity / 8192 * 3 + 10).await;
            assert!(cache.held_bytes() <= capacity, "{} > {capacity}", cache.held_bytes());
            assert!(cache.held_bytes() > 0);
        }
    }

    #[tokio::test]
    async fn hits_are_served_without_reading() {
        let cache = BlockCache::new(1 << 20, false);
        fill(&cache, 7, 10).await;
        let got = cache.get_or_read(7, 3, || async { Err::<Bytes, _>("must not read") }).await;
        assert_eq!(got.unwrap()[0], 3);
        // Another file's block 3 is another entry; a failed read caches nothing.
        assert_eq!(cache.get_or_read(8, 3, || async { Err::<Bytes, _>("io") }).await, Err("io"));
        assert!(cache.get_cached(8, 3).is_none());
        let again = cache.get_or_read(8, 3, || async { Ok::<_, ()>(Bytes::from_static(b"x")) });
        assert_eq!(&again.await.unwrap()[..], b"x");
        assert_eq!(&cache.get_cached(8, 3).unwrap()[..], b"x");
    }

    #[tokio::test]
    async fn the_global_cache_counts_hits_and_misses() {
        let (hits, misses) =
            (metrics::LAYER_INDEX_CACHE_HITS.get(), metrics::LAYER_INDEX_CACHE_MISSES.get());
        let id = next_file_id();
        for _ in 0..2 {
            let read = || async { Ok::<_, ()>(Bytes::from(vec![1; 8192])) };
            global().get_or_read(id, 0, read).await.unwrap();
        }
        // Other tests use the global cache at the same time: at least ours moved.
        assert!(metrics::LAYER_INDEX_CACHE_HITS.get() > hits);
        assert!(metrics::LAYER_INDEX_CACHE_MISSES.get() > misses);
        assert!(metrics::LAYER_INDEX_CACHE_BYTES.get() > 0);
    }
}
