//! `RemoteStorage` on a local directory (the S3 backend is exercised by the
//! pytest suite against MinIO): transfers, checks, listings, errors.

use super::*;

fn storage(root: &Path, prefix: &str) -> RemoteStorage {
    local_for_tests(root, &format!("prefix = '{prefix}'"))
}

fn engine() -> IoEngine {
    crate::tenant::StorageConf::for_tests(Path::new("/")).io_engine
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 8191) as u8).collect()
}

#[tokio::test]
async fn files_round_trip_small_and_multipart() {
    let dir = tempfile::tempdir().unwrap();
    let rs = storage(&dir.path().join("remote"), "pfx");
    let engine = engine();
    for (i, len) in [0usize, 1, 8192, TRANSFER_CHUNK_BYTES + 12345, 2 * TRANSFER_CHUNK_BYTES]
        .into_iter()
        .enumerate()
    {
        let src = dir.path().join(format!("src{i}"));
        let bytes = data(len);
        std::fs::write(&src, &bytes).unwrap();
        let key = format!("tenants/t/obj{i}");
        let up = rs.upload_file(&engine, &src, &key).await.unwrap();
        assert_eq!(up, ObjectCheck { size_bytes: len as u64, crc32c: crc32c::crc32c(&bytes) });
        assert!(dir.path().join("remote/pfx").join(&key).exists(), "under the prefix");
        let dst = dir.path().join(format!("dst{i}"));
        let down = rs.download_file(&engine, &key, &dst, Some(up)).await.unwrap();
        assert_eq!(down, up);
        assert_eq!(std::fs::read(&dst).unwrap(), bytes, "length {len}");
        assert!(!io_engine::temp_path(&dst).exists());
    }
}

#[tokio::test]
async fn a_corrupt_object_is_refused_naming_it_and_nothing_is_placed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("remote");
    let rs = storage(&root, "");
    let engine = engine();
    let src = dir.path().join("src");
    std::fs::write(&src, data(100_000)).unwrap();
    let up = rs.upload_file(&engine, &src, "a/layer").await.unwrap();
    let mut bad = data(100_000);
    bad[5000] ^= 1;
    std::fs::write(root.join("a/layer"), &bad).unwrap();
    let dst = dir.path().join("dst");
    let err = rs.download_file(&engine, "a/layer", &dst, Some(up)).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RemoteError::Corrupt { .. }), "{msg}");
    assert!(msg.contains("a/layer") && msg.contains("CRC-32C"), "{msg}");
    assert!(!dst.exists() && !io_engine::temp_path(&dst).exists());
}

#[tokio::test]
async fn listings_gets_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let rs = storage(&dir.path().join("remote"), "p/q");
    for key in ["tenants/a/timelines/x/l1", "tenants/a/timelines/y/l2", "tenants/b/g"] {
        rs.put(key, Bytes::from_static(b"hello")).await.unwrap();
    }
    let mut dirs = rs.list_dirs("tenants/a/timelines").await.unwrap();
    dirs.sort();
    assert_eq!(dirs, vec!["x", "y"]);
    let mut keys: Vec<_> = rs.list("tenants/a").await.unwrap().into_iter().map(|o| o.key).collect();
    keys.sort();
    assert_eq!(keys, vec!["tenants/a/timelines/x/l1", "tenants/a/timelines/y/l2"]);
    assert_eq!(rs.get("tenants/b/g").await.unwrap(), Bytes::from_static(b"hello"));
    rs.delete("tenants/b/g").await.unwrap();
    rs.delete("tenants/b/g").await.unwrap(); // already gone: fine
    let err = rs.get("tenants/b/g").await.unwrap_err();
    assert!(err.is_not_found() && err.to_string().contains("tenants/b/g"), "{err}");
    assert!(rs.list("tenants/none").await.unwrap().is_empty());
}
