//! WAL decoding throughput on real WAL (the `testdata/wal` fixtures of
//! PostgreSQL 15 with pglz, lz4 and zstd images and of 18 with pglz), fed
//! in 128 KiB chunks as replication messages arrive. Each fixture is
//! measured four ways in the same run:
//! - `copy`: copying the bytes into one buffer (the floor for touching them);
//! - `crc32c`: CRC-32C over the bytes (the decoder's unavoidable cost);
//! - `decode`: records decoded, images kept as stored (what ingest does);
//! - `decode+restore`: and every image rebuilt to a page (decompressed).
//!
//! `cargo bench -p postgres_ffi --bench decode`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use postgres_ffi::wal::WalStreamDecoder;
use postgres_ffi::PgMajorVersion;
use utils::lsn::Lsn;

const FIXTURES: &[&str] = &["pg15-pglz-seg", "pg15-lz4-seg", "pg15-zstd-seg", "pg18-pglz-seg"];
const CHUNK_BYTES: usize = 128 * 1024;

/// The fixture's start LSN and WAL bytes.
fn load(name: &str) -> (Lsn, Vec<u8>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal");
    let compressed = std::fs::read(dir.join(format!("{name}.wal.zst"))).expect("fixture");
    let wal = zstd::stream::decode_all(&compressed[..]).expect("fixture decompresses");
    let tsv = std::fs::read_to_string(dir.join(format!("{name}.tsv"))).expect("fixture");
    let first = tsv.lines().next().expect("start line");
    let start = first.strip_prefix("# start\t").expect("start line").parse().expect("an LSN");
    (start, wal)
}

fn version_of(name: &str) -> PgMajorVersion {
    PgMajorVersion::new(name[2..4].parse().expect("pgNN")).expect("supported")
}

/// Decode all of `wal`; returns the number of records (and images restored).
fn decode(start: Lsn, wal: &[u8], version: PgMajorVersion, restore: bool) -> (usize, usize) {
    let mut decoder = WalStreamDecoder::new(start, version);
    let (mut records, mut images) = (0, 0);
    for chunk in wal.chunks(CHUNK_BYTES) {
        decoder.feed_bytes(chunk);
        while let Some(rec) = decoder.poll_decode().expect("fixture decodes") {
            records += 1;
            if restore {
                for img in rec.blocks.iter().filter_map(|b| b.image.as_ref()) {
                    std::hint::black_box(img.restore().expect("image restores"));
                    images += 1;
                }
            }
            std::hint::black_box(&rec);
        }
    }
    (records, images)
}

fn bench_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("wal_decode");
    group.sample_size(10);
    for name in FIXTURES {
        let (start, wal) = load(name);
        let version = version_of(name);
        group.throughput(Throughput::Bytes(wal.len() as u64));
        let mut copy_dst = vec![0u8; wal.len()];
        group.bench_function(BenchmarkId::new("copy", name), |b| {
            b.iter(|| {
                for (dst, src) in copy_dst.chunks_mut(CHUNK_BYTES).zip(wal.chunks(CHUNK_BYTES)) {
                    dst.copy_from_slice(src);
                }
                std::hint::black_box(&copy_dst);
            })
        });
        group.bench_function(BenchmarkId::new("crc32c", name), |b| {
            b.iter(|| std::hint::black_box(crc32c::crc32c(&wal)))
        });
        group.bench_function(BenchmarkId::new("decode", name), |b| {
            b.iter(|| decode(start, &wal, version, false))
        });
        group.bench_function(BenchmarkId::new("decode+restore", name), |b| {
            b.iter(|| decode(start, &wal, version, true))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_decode);
criterion_main!(benches);
