//! Spill file tests: round trips against an in-memory oracle, across buffer
//! boundaries, with empty and multi-buffer entries; unlinking; misuse.

use rand::{Rng, SeedableRng};

use super::*;

fn engine() -> IoEngine {
    IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap()
}

fn listing(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[tokio::test]
async fn round_trip_and_unlinked() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SpillWriter::create(&engine(), dir.path()).await.unwrap();
    assert_eq!(listing(dir.path()), 0, "unlinked at once");
    w.begin_entry("base/5/16384", false, 10000).await.unwrap();
    w.write_data(&[1u8; 4000]).await.unwrap();
    w.write_data(&[2u8; 6000]).await.unwrap();
    w.begin_entry("base/5", true, 0).await.unwrap();
    w.begin_entry("base/5/16385", false, 3).await.unwrap();
    w.write_data(b"abc").await.unwrap();
    assert_eq!((w.entries, w.bytes), (3, 10003));
    let mut r = w.into_reader().await.unwrap();
    assert_eq!(listing(dir.path()), 0);
    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!((e.path.as_str(), e.is_dir, e.size), ("base/5/16384", false, 10000));
    let d = r.read_data(8192).await.unwrap();
    assert_eq!((d.len(), d[0], d[4000]), (8192, 1, 2));
    // The rest of the entry is skipped by next_entry.
    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!((e.path.as_str(), e.is_dir, e.size), ("base/5", true, 0));
    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!(e.path, "base/5/16385");
    assert_eq!(&r.read_data(100).await.unwrap()[..], b"abc");
    assert_eq!(r.read_data(100).await.unwrap().len(), 0);
    assert!(r.next_entry().await.unwrap().is_none());
    assert!(r.next_entry().await.unwrap().is_none(), "end is sticky");
    drop(r);
    assert_eq!(listing(dir.path()), 0);
}

/// Entries larger than the 1 MiB buffer, an empty entry between them, and
/// a file length that is not a multiple of the buffer.
#[tokio::test]
async fn large_and_empty_entries() {
    let dir = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..3 * SPILL_BUF_SIZE + 123).map(|i| (i % 251) as u8).collect();
    let mut w = SpillWriter::create(&engine(), dir.path()).await.unwrap();
    w.begin_entry("base/1/1259", false, big.len() as u64).await.unwrap();
    for chunk in big.chunks(256 * 1024) {
        w.write_data(chunk).await.unwrap();
    }
    w.begin_entry("base/1/empty", false, 0).await.unwrap();
    w.begin_entry("base/1/1249", false, big.len() as u64).await.unwrap();
    w.write_data(&big).await.unwrap();
    assert_eq!((w.entries, w.bytes), (3, 2 * big.len() as u64));
    let mut r = w.into_reader().await.unwrap();
    let header = |p: &str| (4 + p.len() + 1 + 8) as u64;
    let expect_len = header("base/1/1259")
        + header("base/1/empty")
        + header("base/1/1249")
        + 2 * big.len() as u64;
    assert_eq!(r.len, expect_len);
    assert_eq!(r.file.len().await.unwrap(), expect_len);

    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!((e.path.as_str(), e.size), ("base/1/1259", big.len() as u64));
    let mut got = Vec::new();
    loop {
        let d = r.read_data(300_000).await.unwrap();
        if d.is_empty() {
            break;
        }
        got.extend_from_slice(&d);
    }
    assert!(got == big, "first large entry differs");
    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!((e.path.as_str(), e.is_dir, e.size), ("base/1/empty", false, 0));
    assert!(r.read_data(10).await.unwrap().is_empty());
    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!(e.path, "base/1/1249");
    let d = r.read_data(big.len() + 1).await.unwrap();
    assert!(d[..] == big[..], "second large entry differs");
    assert!(r.next_entry().await.unwrap().is_none());
}

/// Seeded random entries through a one-page buffer: headers, paths and data
/// cross buffer boundaries; the reader reads some entries partly (the rest
/// is skipped, sometimes past whole buffers) and is compared with the oracle.
#[tokio::test]
async fn random_round_trips_small_buffer() {
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SpillWriter::create_with_buf(&engine(), dir.path(), io_engine::BUF_ALIGN)
            .await
            .unwrap();
        let mut oracle = Vec::new();
        for i in 0..rng.gen_range(0..40) {
            let path = format!("base/{i}/{}", "x".repeat(rng.gen_range(0..6000)));
            let is_dir = rng.gen_bool(0.2);
            let size = if is_dir || rng.gen_bool(0.2) { 0 } else { rng.gen_range(1..30_000) };
            let data: Vec<u8> = (0..size).map(|_| rng.gen()).collect();
            w.begin_entry(&path, is_dir, size as u64).await.unwrap();
            let mut rest = &data[..];
            while !rest.is_empty() {
                let n = rng.gen_range(1..=rest.len());
                w.write_data(&rest[..n]).await.unwrap();
                rest = &rest[n..];
            }
            oracle.push((path, is_dir, data));
        }
        let mut r = w.into_reader().await.unwrap();
        for (path, is_dir, data) in &oracle {
            let e = r.next_entry().await.unwrap().expect("entry missing");
            assert_eq!(
                (&e.path, e.is_dir, e.size),
                (path, *is_dir, data.len() as u64),
                "seed {seed}"
            );
            let want = if rng.gen_bool(0.3) { rng.gen_range(0..=data.len()) } else { data.len() };
            let mut got = Vec::new();
            while got.len() < want {
                let d = r.read_data(rng.gen_range(1..10_000).min(want - got.len())).await.unwrap();
                assert!(!d.is_empty(), "seed {seed}");
                got.extend_from_slice(&d);
            }
            assert!(got[..] == data[..want], "data of {path} differs, seed {seed}");
        }
        assert!(r.next_entry().await.unwrap().is_none(), "seed {seed}");
    }
}

#[tokio::test]
async fn misuse_and_truncation_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SpillWriter::create(&engine(), dir.path()).await.unwrap();
    w.begin_entry("a", false, 4).await.unwrap();
    assert!(w.write_data(b"12345").await.is_err(), "more than the declared size");
    w.write_data(b"12").await.unwrap();
    assert!(w.begin_entry("b", false, 0).await.is_err(), "previous entry incomplete");
    w.write_data(b"34").await.unwrap();
    w.begin_entry("b", false, 10).await.unwrap();
    w.write_data(b"0123456789").await.unwrap();

    // A file that ends inside an entry's data or header is an error.
    let mut r = w.into_reader().await.unwrap();
    r.len -= 3;
    assert!(r.next_entry().await.unwrap().is_some());
    let e = r.next_entry().await.unwrap().unwrap();
    assert_eq!(e.path, "b");
    assert_eq!(r.read_data(100).await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);

    let mut w = SpillWriter::create(&engine(), dir.path()).await.unwrap();
    w.begin_entry("a", false, 0).await.unwrap();
    w.begin_entry("b", false, 0).await.unwrap();
    let mut r = w.into_reader().await.unwrap();
    r.len -= 2;
    assert!(r.next_entry().await.unwrap().is_some());
    assert_eq!(r.next_entry().await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);

    let mut w = SpillWriter::create(&engine(), dir.path()).await.unwrap();
    w.begin_entry("a", false, 1).await.unwrap();
    assert!(w.into_reader().await.is_err(), "last entry incomplete");
    assert_eq!(listing(dir.path()), 0);
}
