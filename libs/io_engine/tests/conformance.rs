//! One conformance suite, run against every real engine: std-fs and
//! io-uring, each with and without direct IO, and io-uring with every
//! operation forced through the ring (by default it serves page-cache hits
//! and, on ext4, buffered writes inline). Every case is a function
//! taking the variant; `suite!` instantiates it per variant (and per
//! runtime flavor where it matters). Cases only io-uring has (FIFOs,
//! cancellation while the kernel writes, backpressure, ring refusal) live
//! in `conformance/uring_only.rs`; cancellation under load in
//! `conformance/cancel.rs`.

#[path = "conformance/cancel.rs"]
mod cancel;
#[path = "conformance/uring_only.rs"]
mod uring_only;

use std::io;
use std::path::Path;

use cancel::dropped_futures_under_load;
use futures::future::join_all;
use io_engine::{AlignedBuf, File, IoEngine, IoEngineKind, OpenMode, ReadAt, UringInline, WriteAt};

#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub kind: IoEngineKind,
    pub direct: bool,
    pub inline: UringInline,
}

impl Variant {
    pub fn engine(self) -> IoEngine {
        IoEngine::new(self.kind).expect("engine").with_uring_inline(self.inline)
    }

    pub fn mode(self, base: OpenMode) -> OpenMode {
        base.with_direct(self.direct)
    }

    /// Sizes and offsets this variant can transfer (direct IO: aligned only).
    pub fn fits(self, offset: u64, len: usize) -> bool {
        !self.direct || (offset.is_multiple_of(4096) && len.is_multiple_of(4096))
    }
}

const AUTO: UringInline = UringInline::Auto;
pub const STD: Variant = Variant { kind: IoEngineKind::StdFs, direct: false, inline: AUTO };
pub const URING: Variant = Variant { kind: IoEngineKind::IoUring, direct: false, inline: AUTO };
pub const STD_DIRECT: Variant = Variant { kind: IoEngineKind::StdFs, direct: true, inline: AUTO };
pub const URING_DIRECT: Variant =
    Variant { kind: IoEngineKind::IoUring, direct: true, inline: AUTO };
pub const URING_RING_ONLY: Variant =
    Variant { kind: IoEngineKind::IoUring, direct: false, inline: UringInline::Never };

/// Deterministic content: byte `i` of the pattern `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8).collect()
}

pub async fn write(f: &File, data: &[u8], offset: u64) {
    let (_, r) = f.write_all_at(AlignedBuf::from_slice(data), offset).await;
    r.unwrap_or_else(|e| panic!("write {} bytes at {offset}: {e}", data.len()));
}

pub async fn read(f: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let (buf, r) = f.read_exact_at(AlignedBuf::for_read(len), offset, len).await;
    r.map(|_| buf.to_vec())
}

/// A file of `len` pattern bytes written without direct IO, then opened as `v` says.
async fn file_with(v: Variant, e: &IoEngine, path: &Path, len: usize) -> File {
    let plain = e.open(path, OpenMode::CREATE_NEW).await.unwrap();
    write(&plain, &pattern(1, len), 0).await;
    e.open(path, v.mode(OpenMode::READ_WRITE)).await.unwrap()
}

macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod std_fs { $( #[tokio::test] async fn $case() { super::$case(super::STD).await } )* }
        mod io_uring { $( #[tokio::test] async fn $case() { super::$case(super::URING).await } )* }
        mod std_fs_direct {
            $( #[tokio::test] async fn $case() { super::$case(super::STD_DIRECT).await } )*
        }
        mod io_uring_direct {
            $( #[tokio::test] async fn $case() { super::$case(super::URING_DIRECT).await } )*
        }
        mod io_uring_ring_only {
            $( #[tokio::test] async fn $case() { super::$case(super::URING_RING_ONLY).await } )*
        }
        /// The same cases on a multi-thread runtime (their futures may move between threads).
        mod multi_thread {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    for v in [super::STD, super::URING, super::URING_DIRECT, super::URING_RING_ONLY] {
                        super::$case(v).await
                    }
                }
            )*
        }
    };
}

suite!(
    round_trip_many_sizes,
    eof_is_unexpected_eof,
    errors_name_the_path,
    many_concurrent_ops_on_many_files,
    batch_results_in_order,
    batch_each_yields_every_read_once,
    direct_io_misalignment_is_invalid_input,
    fsync_and_set_len,
    dropped_futures_under_load,
);

const SIZES: [usize; 11] =
    [8, 100, 512, 4096, 8192, 12345, 65536, 131072, 131072 + 4096, 500_000, 1 << 20];

async fn round_trip_many_sizes(v: Variant) {
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let f = e.open(&dir.path().join("f"), v.mode(OpenMode::CREATE_NEW)).await.unwrap();
    for (k, &len) in SIZES.iter().enumerate() {
        for offset in [0u64, 3, 4096 * 5] {
            if !v.fits(offset, len) {
                continue;
            }
            let data = pattern(k as u64 + offset, len);
            write(&f, &data, offset).await;
            let got = read(&f, offset, len).await.unwrap();
            assert!(got == data, "{v:?}: {len} bytes at {offset} differ");
        }
    }
    assert_eq!(e.in_flight_ops(), 0);
}

async fn eof_is_unexpected_eof(v: Variant) {
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let len = 10_000;
    let f = file_with(v, &e, &dir.path().join("f"), len).await;
    let full = pattern(1, len);
    // (offset, len, expected): reads ending before, at, across and after EOF.
    let cases: [(u64, usize, Option<&[u8]>); 7] = [
        (0, 8192, Some(&full[..8192])),
        (4096, 4096, Some(&full[4096..8192])),
        (9000, 1000, Some(&full[9000..])),
        (8192, 8192, None),
        (9000, 2000, None),
        (10_000, 1, None),
        (40_960, 4096, None),
    ];
    for (offset, n, want) in cases {
        if !v.fits(offset, n) {
            continue;
        }
        match (read(&f, offset, n).await, want) {
            (Ok(got), Some(want)) => assert_eq!(got, want, "{v:?} {n} at {offset}"),
            (Err(err), None) => {
                assert_eq!(
                    err.kind(),
                    io::ErrorKind::UnexpectedEof,
                    "{v:?} {n} at {offset}: {err}"
                );
                assert!(err.to_string().contains("/f"), "{err}");
            }
            (got, want) => {
                panic!("{v:?} {n} at {offset}: got {:?}, want {want:?}", got.map(|g| g.len()))
            }
        }
    }
    // Zero bytes at (or past) EOF is fine.
    let at = if v.direct { 12_288 } else { 10_000 };
    assert_eq!(read(&f, at, 0).await.unwrap().len(), 0);
}

async fn errors_name_the_path(v: Variant) {
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let p = dir.path().join("ro");
    drop(file_with(v, &e, &p, 8192).await);
    let ro = e.open(&p, v.mode(OpenMode::READ)).await.unwrap();
    let (buf, r) = ro.write_all_at(AlignedBuf::from_slice(&[1; 4096]), 0).await;
    let err = r.unwrap_err();
    assert!(err.to_string().contains("write") && err.to_string().contains("/ro"), "{err}");
    assert_eq!(buf.len(), 4096, "the buffer comes back");
    // A directory opened for reading: reads fail with EISDIR, naming it.
    let d = e.open(dir.path(), OpenMode::READ).await.unwrap();
    let (_, r) = d.read_exact_at(AlignedBuf::with_capacity(4096), 0, 4096).await;
    let err = r.unwrap_err();
    assert_eq!(err.raw_os_error(), None, "wrapped with the path: {err}");
    assert!(err.to_string().contains(&*dir.path().to_string_lossy()), "{err}");
    assert!(err.to_string().to_lowercase().contains("is a directory"), "{err}");
    assert!(e.open(&dir.path().join("missing"), OpenMode::READ).await.is_err());
}

async fn fsync_and_set_len(v: Variant) {
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let f = file_with(v, &e, &dir.path().join("f"), 8192).await;
    f.sync_all().await.unwrap();
    f.set_len(4096).await.unwrap();
    assert_eq!(f.len().await.unwrap(), 4096);
    assert_eq!(read(&f, 0, 4096).await.unwrap(), pattern(1, 4096));
    assert_eq!(read(&f, 0, 8192).await.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    e.write_file_durably(&dir.path().join("g"), b"durable").await.unwrap();
    assert_eq!(e.read_file(&dir.path().join("g"), 100).await.unwrap(), b"durable");
}

/// 1200 reads and writes on 12 files at once: every write lands, every
/// read sees what was written before it started.
async fn many_concurrent_ops_on_many_files(v: Variant) {
    const FILES: usize = 12;
    const BLOCKS: usize = 50;
    const BLOCK: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let mut files = Vec::new();
    for i in 0..FILES {
        let p = dir.path().join(format!("f{i}"));
        files.push(e.open(&p, v.mode(OpenMode::CREATE_NEW)).await.unwrap());
    }
    let seed = |f: usize, b: usize| (f * BLOCKS + b) as u64;
    let writes = (0..FILES * BLOCKS).map(|k| {
        let (f, b) = (k % FILES, k / FILES);
        let file = &files[f];
        async move { write(file, &pattern(seed(f, b), BLOCK), (b * BLOCK) as u64).await }
    });
    join_all(writes).await;
    let reads = (0..FILES * BLOCKS * 2).map(|k| {
        let (f, b) = (k % FILES, (k / FILES) % BLOCKS);
        let file = &files[f];
        async move {
            let got = read(file, (b * BLOCK) as u64, BLOCK).await.unwrap();
            assert!(got == pattern(seed(f, b), BLOCK), "file {f} block {b}");
        }
    });
    join_all(reads).await;
    assert_eq!(e.in_flight_ops(), 0);
}

async fn batch_results_in_order(v: Variant) {
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let a = file_with(v, &e, &dir.path().join("a"), 8192).await;
    let b = file_with(v, &e, &dir.path().join("b"), 3 * 4096).await;
    let full = pattern(1, 3 * 4096);
    // 600 reads (more than one chunk): in range, at EOF, across EOF, empty.
    let mut reads = Vec::new();
    let mut want: Vec<Option<&[u8]>> = Vec::new();
    for k in 0..600usize {
        let (file, offset, len, expect): (&File, u64, usize, Option<&[u8]>) = match k % 5 {
            0 => (&a, 0, 4096, Some(&full[..4096])),
            1 => (&b, 8192, 4096, Some(&full[8192..])),
            2 => (&a, 8192, 4096, None),
            3 => (&b, 4096, 12288, None),
            _ => (&b, 4096, 0, Some(&[])),
        };
        reads.push(ReadAt { file, buf: AlignedBuf::for_read(len.max(1)), offset, len });
        want.push(expect);
    }
    let results = e.read_exact_at_many(reads).await;
    assert_eq!(results.len(), want.len());
    for (k, ((buf, r), want)) in results.into_iter().zip(want).enumerate() {
        match (r, want) {
            (Ok(()), Some(want)) => assert_eq!(&buf[..], want, "read {k}"),
            (Err(err), None) => assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "read {k}"),
            (r, _) => panic!("{v:?} read {k}: {r:?}"),
        }
    }
    // Writes to distinct blocks, then read back in one batch.
    let c = e.open(&dir.path().join("c"), v.mode(OpenMode::CREATE_NEW)).await.unwrap();
    let writes = (0..40u64)
        .map(|k| WriteAt {
            file: &c,
            buf: AlignedBuf::from_slice(&pattern(k, 4096)),
            offset: k * 4096,
        })
        .collect();
    for (k, (buf, r)) in e.write_all_at_many(writes).await.into_iter().enumerate() {
        r.unwrap_or_else(|err| panic!("write {k}: {err}"));
        assert_eq!(&buf[..], &pattern(k as u64, 4096)[..], "the buffer comes back");
    }
    let reads = (0..40u64)
        .map(|k| ReadAt { file: &c, buf: AlignedBuf::for_read(4096), offset: k * 4096, len: 4096 })
        .collect();
    for (k, (buf, r)) in e.read_exact_at_many(reads).await.into_iter().enumerate() {
        r.unwrap();
        assert!(buf[..] == pattern(k as u64, 4096)[..], "block {k}");
    }
    assert_eq!(e.in_flight_ops(), 0);
}

/// `read_exact_at_each`: every read yields exactly once, with its index,
/// and its result is what `read_exact_at_many` gives at that position
/// (data, EOF, a refused misaligned read under direct IO).
async fn batch_each_yields_every_read_once(v: Variant) {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let a = file_with(v, &e, &dir.path().join("a"), 64 * 4096).await;
    let full = pattern(1, 64 * 4096);
    let reads = |n: usize| -> Vec<ReadAt<'_>> {
        (0..n)
            .map(|k| {
                let (offset, len) = match k % 4 {
                    3 => (64 * 4096, 4096),                     // at EOF
                    2 if v.direct => (100, 4096),               // refused
                    _ => (((k * 37) % 64 * 4096) as u64, 4096), // data
                };
                ReadAt { file: &a, buf: AlignedBuf::for_read(4096), offset, len }
            })
            .collect()
    };
    let want = e.read_exact_at_many(reads(300)).await;
    let mut got: Vec<Option<(AlignedBuf, io::Result<()>)>> = (0..300).map(|_| None).collect();
    let mut each = std::pin::pin!(e.read_exact_at_each(reads(300)));
    while let Some((k, outcome)) = each.next().await {
        assert!(got[k].replace(outcome).is_none(), "{v:?}: read {k} yielded twice");
    }
    for (k, (got, (want_buf, want_res))) in got.into_iter().zip(want).enumerate() {
        let (buf, res) = got.unwrap_or_else(|| panic!("{v:?}: read {k} never yielded"));
        match (res, want_res) {
            (Ok(()), Ok(())) => {
                assert_eq!(&buf[..], &want_buf[..], "read {k}");
                let at = ((k * 37) % 64) * 4096;
                assert!(buf[..] == full[at..at + 4096], "read {k}");
            }
            (Err(g), Err(w)) => assert_eq!(g.kind(), w.kind(), "read {k}: {g} / {w}"),
            (g, w) => panic!("{v:?} read {k}: {g:?} against {w:?}"),
        }
    }
    assert_eq!(e.in_flight_ops(), 0);
}

async fn direct_io_misalignment_is_invalid_input(v: Variant) {
    let dir = tempfile::tempdir().unwrap();
    let e = v.engine();
    let f = file_with(v, &e, &dir.path().join("f"), 8192).await;
    // 512 is aligned where the file system reports 512-byte direct IO.
    let misaligned = [(100u64, 4096usize), (0, 100), (4096, 4097)];
    for (offset, len) in misaligned {
        let res = read(&f, offset, len).await;
        let (_, w) = f.write_all_at(AlignedBuf::from_slice(&vec![7; len]), offset).await;
        if !v.direct {
            w.unwrap();
            continue;
        }
        for err in [res.unwrap_err(), w.unwrap_err()] {
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
            let msg = err.to_string();
            assert!(msg.contains(&format!("{len} bytes at offset {offset}")), "{msg}");
            assert!(msg.contains("/f"), "{msg}");
        }
    }
    if v.direct {
        let reads = vec![
            ReadAt { file: &f, buf: AlignedBuf::for_read(4096), offset: 0, len: 4096 },
            ReadAt { file: &f, buf: AlignedBuf::for_read(4096), offset: 100, len: 4096 },
        ];
        let res = e.read_exact_at_many(reads).await;
        assert!(res[0].1.is_ok());
        assert_eq!(res[1].1.as_ref().unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}

#[test]
fn engine_kind_spellings() {
    for (s, kind) in [("std-fs", IoEngineKind::StdFs), ("io-uring", IoEngineKind::IoUring)] {
        assert_eq!(s.parse::<IoEngineKind>().unwrap(), kind);
        let json = format!("\"{s}\"");
        assert_eq!(serde_json::from_str::<IoEngineKind>(&json).unwrap(), kind);
        assert_eq!(serde_json::to_string(&kind).unwrap(), json);
    }
    let err = "uring".parse::<IoEngineKind>().unwrap_err();
    assert!(err.contains("\"std-fs\"") && err.contains("\"io-uring\""), "{err}");
    let err = serde_json::from_str::<IoEngineKind>("\"uring\"").unwrap_err().to_string();
    assert!(err.contains("std-fs") && err.contains("io-uring"), "{err}");
}

/// One io-uring engine, created outside any runtime, used from two
/// runtimes one after the other (its eventfd registers with each).
#[test]
fn one_engine_many_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    let e = URING_RING_ONLY.engine();
    for round in 0..3u64 {
        let rt = if round % 2 == 0 {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        };
        rt.block_on(async {
            let p = dir.path().join(format!("f{round}"));
            let f = e.open(&p, OpenMode::CREATE_NEW).await.unwrap();
            let ops = (0..200u64).map(|k| {
                let f = &f;
                async move {
                    write(f, &pattern(k, 4096), k * 4096).await;
                    assert_eq!(read(f, k * 4096, 4096).await.unwrap(), pattern(k, 4096));
                }
            });
            join_all(ops).await;
        });
        drop(rt);
        assert_eq!(e.in_flight_ops(), 0);
    }
}
