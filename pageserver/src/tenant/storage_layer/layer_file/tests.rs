use std::path::Path;

use io_engine::{IoEngine, IoEngineKind};
use pageserver_api::key::Key;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

use super::header::{Header, Layout};
use super::{DeltaLayer, InMemoryLayer, INDEX_ENTRY_SIZE};

const TENANT: TenantId = TenantId([1; 16]);
const TIMELINE: TimelineId = TimelineId([2; 16]);

/// Values of pseudo-random sizes (some span several 4 KiB blocks), two
/// LSNs per key.
fn values() -> Vec<(Key, Lsn, Vec<u8>)> {
    let mut rng = 7u64;
    let mut out = Vec::new();
    for k in 0..150u32 {
        for lsn in [0x20, 0x30] {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = (rng >> 33) as usize % 10_000 + 1;
            let v: Vec<u8> = (0..len).map(|i| (i as u32 ^ k ^ lsn) as u8).collect();
            out.push((Key::MIN.add(k), Lsn(lsn as u64), v));
        }
    }
    out
}

async fn write_layer(engine: &IoEngine, dir: &Path, direct: bool) -> DeltaLayer {
    let mem = InMemoryLayer::create(engine, dir, 1, Lsn(0x10), direct).await.unwrap();
    for (key, lsn, v) in values() {
        mem.put_serialized(&v, &[(key, lsn, 0..v.len(), true)]).await.unwrap();
    }
    mem.freeze(Lsn(0x40));
    DeltaLayer::write_from_inmemory(engine, dir, TENANT, TIMELINE, &mem, direct).await.unwrap()
}

/// Every value reads back through aligned chunk reads.
async fn check_values(layer: &DeltaLayer) {
    let align = layer.read_align();
    for (key, lsn, expected) in values() {
        let mut found = Vec::new();
        layer.collect(key.to_compact(), lsn, &mut found);
        let (got_lsn, blob) = found[0];
        assert_eq!(got_lsn, lsn);
        let start = blob.offset() / align * align;
        let end = blob.end().next_multiple_of(align);
        let chunk = layer.read_chunk(start, (end - start) as usize).await.unwrap();
        let at = (blob.offset() - start) as usize;
        assert_eq!(&chunk[at..at + blob.len()], &expected[..], "{key} at {lsn}");
    }
}

#[tokio::test]
async fn values_read_back_buffered_and_direct() {
    let engine = IoEngine::new(IoEngineKind::StdFs).unwrap();
    for direct in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let layer = write_layer(&engine, dir.path(), direct).await;
        assert_eq!(layer.file_size % 4096, 0, "version 2 files are whole blocks");
        // Direct IO aligns to what the file system asks (512 or 4096).
        let expected = if direct { [512, 4096].as_slice() } else { [512].as_slice() };
        assert!(expected.contains(&layer.read_align()), "{}", layer.read_align());
        check_values(&layer).await;
        let path = layer.path.clone();
        drop(layer);
        let loaded = DeltaLayer::load(&engine, &path, TENANT, TIMELINE, direct).await.unwrap();
        check_values(&loaded).await;
    }
}

/// Rewrite a version 2 file in the version 1 layout (512-byte header,
/// values at 512, index 512-aligned, no padding at the end).
fn downgrade_to_v1(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let mut h = Header::decode(&bytes[..512]).unwrap();
    let v2 = h.layout;
    let values = &bytes[v2.values_offset() as usize..][..h.values_len as usize];
    let index_bytes = h.entry_count as usize * INDEX_ENTRY_SIZE + 4;
    let index = &bytes[h.index_offset as usize..][..index_bytes];
    h.layout = Layout::V1;
    h.index_offset = Layout::V1.index_offset(h.values_len);
    let mut out = h.encode();
    out.extend_from_slice(values);
    out.resize(h.index_offset as usize, 0);
    out.extend_from_slice(index);
    std::fs::write(path, out).unwrap();
}

#[tokio::test]
async fn version_1_files_read_through_the_page_cache() {
    let engine = IoEngine::new(IoEngineKind::StdFs).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_layer(&engine, dir.path(), false).await.path.clone();
    downgrade_to_v1(&path);
    assert_ne!(std::fs::metadata(&path).unwrap().len() % 4096, 0, "a version 1 file");
    for direct in [false, true] {
        let layer = DeltaLayer::load(&engine, &path, TENANT, TIMELINE, direct).await.unwrap();
        assert_eq!(layer.read_align(), 512, "version 1 is read buffered even with direct_io");
        check_values(&layer).await;
    }
}

#[tokio::test]
async fn a_truncated_padding_is_an_error() {
    let engine = IoEngine::new(IoEngineKind::StdFs).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_layer(&engine, dir.path(), false).await.path.clone();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 100).unwrap();
    let err = DeltaLayer::load(&engine, &path, TENANT, TIMELINE, true).await.err().unwrap();
    let text = format!("{err:#}");
    assert!(text.contains("does not match its header") && text.contains("unusable"), "{text}");
}
