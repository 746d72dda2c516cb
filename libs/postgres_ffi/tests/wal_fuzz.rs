//! Fuzzing the WAL decoder: random bytes and mutated real WAL (bit flips,
//! truncation, splices, huge record lengths, inserted and deleted bytes,
//! sub-header damage behind a recomputed CRC) through `WalStreamDecoder`
//! and `decode_record`. Every input must end in records, `Ok(None)` or an
//! error: no panic, no endless polling, and allocation bounded by a small
//! multiple of the input size (a counting global allocator measures it).
//!
//! `WAL_FUZZ_ITERATIONS` sets the number of inputs (default 3000);
//! `WAL_FUZZ_SEED` the first seed. Each input's seed is its iteration
//! number plus that, printed on failure.

mod wal_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use postgres_ffi::wal::{decode_record, WalStreamDecoder, XLOG_BLCKSZ};
use postgres_ffi::PgMajorVersion;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use utils::lsn::Lsn;

struct CountingAlloc;

static CURRENT_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT_BYTES.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let now = CURRENT_BYTES.fetch_add(new_size - layout.size(), Ordering::Relaxed);
            PEAK_BYTES.fetch_max(now + new_size - layout.size(), Ordering::Relaxed);
        } else {
            CURRENT_BYTES.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// A real WAL window and where its records are.
struct Corpus {
    version: PgMajorVersion,
    start: Lsn,
    wal: Vec<u8>,
    /// Stream offsets of record starts.
    record_offsets: Vec<usize>,
    /// (offset, length) of records that lie within one page.
    single_page_records: Vec<(usize, usize)>,
}

const FIXTURES: [(&str, PgMajorVersion); 6] = [
    ("pg15-pglz-seg", PgMajorVersion::V15),
    ("pg15-lz4-switch", PgMajorVersion::V15),
    ("pg15-zstd-seg", PgMajorVersion::V15),
    ("pg16-pglz-switch", PgMajorVersion::V16),
    ("pg17-pglz-seg", PgMajorVersion::V17),
    ("pg18-pglz-switch", PgMajorVersion::V18),
];

fn load_corpus() -> Vec<Corpus> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal");
    FIXTURES
        .iter()
        .map(|&(name, version)| {
            let wal = zstd::stream::decode_all(
                &std::fs::read(dir.join(format!("{name}.wal.zst"))).unwrap()[..],
            )
            .unwrap();
            let tsv = std::fs::read_to_string(dir.join(format!("{name}.tsv"))).unwrap();
            let start: Lsn =
                tsv.lines().next().unwrap().strip_prefix("# start\t").unwrap().parse().unwrap();
            let mut decoder = WalStreamDecoder::new(start, version);
            decoder.feed_bytes(&wal);
            let mut record_offsets = Vec::new();
            let mut single_page_records = Vec::new();
            while let Some(r) = decoder.poll_decode().unwrap() {
                let at = (r.lsn.0 - start.0) as usize;
                record_offsets.push(at);
                let tot_len = u32::from_le_bytes(wal[at..at + 4].try_into().unwrap()) as usize;
                if r.lsn.0 % 8192 + tot_len as u64 <= 8192 {
                    single_page_records.push((at, tot_len));
                }
            }
            Corpus { version, start, wal, record_offsets, single_page_records }
        })
        .collect()
}

/// One fuzz input: where the bytes claim to start, and the bytes.
struct Input {
    version: PgMajorVersion,
    start: Lsn,
    wal: Vec<u8>,
}

fn random_bytes_input(rng: &mut StdRng) -> Input {
    let version = PgMajorVersion::ALL[rng.gen_range(0..4)];
    let len = rng.gen_range(0..20_000);
    let mut wal: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    let page = rng.gen_range(0..4096u64) * XLOG_BLCKSZ as u64;
    let start = match rng.gen_range(0..3) {
        0 => Lsn(page + 8 * rng.gen_range(0..1024)),
        1 => Lsn(page + rng.gen_range(0..8192)),
        _ => Lsn(page),
    };
    if start.0 == page && wal.len() >= 40 && rng.gen() {
        // A plausible page header, so the bytes after it are parsed as records.
        let magic = postgres_ffi::wal::stream::xlog_page_magic(version);
        wal[0..2].copy_from_slice(&magic.to_le_bytes());
        wal[2..4].copy_from_slice(&(rng.gen::<u16>() & 0x3).to_le_bytes());
        wal[8..16].copy_from_slice(&page.to_le_bytes());
    }
    Input { version, start, wal }
}

fn real_wal_input(rng: &mut StdRng, corpus: &[Corpus]) -> Input {
    let c = &corpus[rng.gen_range(0..corpus.len())];
    let first = rng.gen_range(0..c.record_offsets.len());
    let from = c.record_offsets[first];
    let max_len = [2_000, 20_000, 100_000, 400_000][rng.gen_range(0..4)];
    let to = (from + rng.gen_range(1..max_len)).min(c.wal.len());
    let mut wal = c.wal[from..to].to_vec();
    for _ in 0..rng.gen_range(1..4) {
        mutate(rng, c, from, &mut wal);
    }
    Input { version: c.version, start: c.start + from as u64, wal }
}

/// One mutation of `wal`, a window of `c.wal` starting at offset `from`.
fn mutate(rng: &mut StdRng, c: &Corpus, from: usize, wal: &mut Vec<u8>) {
    if wal.is_empty() {
        return;
    }
    let at = rng.gen_range(0..wal.len());
    match rng.gen_range(0..7) {
        0 => wal[at] ^= 1 << rng.gen_range(0..8),
        1 => wal.truncate(at),
        2 => {
            let src = rng.gen_range(0..c.wal.len());
            let n = rng.gen_range(1..2000).min(c.wal.len() - src).min(wal.len() - at);
            wal[at..at + n].copy_from_slice(&c.wal[src..src + n]);
        }
        3 => {
            // A huge or odd xl_tot_len at a record start in the window.
            let starts: Vec<usize> = c
                .record_offsets
                .iter()
                .filter(|&&o| o >= from && o + 4 <= from + wal.len())
                .map(|o| o - from)
                .collect();
            if let Some(&o) = starts.get(rng.gen_range(0..starts.len().max(1))) {
                let len: u32 = [
                    u32::MAX,
                    1020 * 1024 * 1024,
                    1020 * 1024 * 1024 + 1,
                    0x7FFF_FFFF,
                    23,
                    8192 * 300,
                    rng.gen(),
                ][rng.gen_range(0..7)];
                wal[o..o + 4].copy_from_slice(&len.to_le_bytes());
            }
        }
        4 => {
            let n = rng.gen_range(1..64);
            wal.splice(at..at, (0..n).map(|_| rng.gen::<u8>()));
        }
        5 => {
            let n = rng.gen_range(1..64).min(wal.len() - at);
            wal.drain(at..at + n);
        }
        _ => damage_behind_valid_crc(rng, c, from, wal),
    }
}

/// Damage the sub-headers or payload of a one-page record and recompute its CRC.
fn damage_behind_valid_crc(rng: &mut StdRng, c: &Corpus, from: usize, wal: &mut [u8]) {
    let inside: Vec<(usize, usize)> = c
        .single_page_records
        .iter()
        .filter(|&&(o, len)| o >= from && o + len <= from + wal.len() && len > 24)
        .map(|&(o, len)| (o - from, len))
        .collect();
    if inside.is_empty() {
        return;
    }
    let (o, len) = inside[rng.gen_range(0..inside.len())];
    let record = &mut wal[o..o + len];
    damage_record(rng, record);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&record[24..]), &record[..20]);
    record[20..24].copy_from_slice(&crc.to_le_bytes());
}

/// Change a few bytes of a record body, mostly among its sub-headers.
fn damage_record(rng: &mut StdRng, record: &mut [u8]) {
    for _ in 0..rng.gen_range(1..4) {
        let at = if rng.gen_range(0..3) > 0 {
            24 + rng.gen_range(0..(record.len() - 24).min(48))
        } else {
            rng.gen_range(24..record.len())
        };
        record[at] = match rng.gen_range(0..3) {
            0 => record[at] ^ (1 << rng.gen_range(0..8)),
            1 => rng.gen(),
            _ => [0, 0xFF, 0x20, 0x10, 0x80, 0x04, 0x08, 32, 33, 252, 253, 254, 255]
                [rng.gen_range(0..13)],
        };
    }
}

/// Feed `input` in random chunks, dropping records as they come; returns
/// the number of records. Panics if polling does not come to rest.
fn run_stream(input: &Input, rng: &mut StdRng) -> usize {
    let mut decoder = WalStreamDecoder::new(input.start, input.version);
    let mut x = rng.gen::<u64>() | 1;
    let max_chunk = [1, 100, 8192, 1 << 20][rng.gen_range(0..4)];
    let (mut at, mut records) = (0, 0usize);
    while at < input.wal.len() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (1 + (x % max_chunk) as usize).min(input.wal.len() - at);
        decoder.feed_bytes(&input.wal[at..at + n]);
        at += n;
        loop {
            match decoder.poll_decode() {
                Ok(Some(rec)) => {
                    // Each record consumes at least its 24-byte header.
                    records += 1;
                    // Images are rebuilt on demand: any stored bytes give a
                    // page or an error, never a panic or a bigger buffer.
                    for img in rec.blocks.iter().filter_map(|b| b.image.as_ref()) {
                        if let Ok(page) = img.restore() {
                            assert_eq!(page.len(), postgres_ffi::BLCKSZ);
                        }
                    }
                    assert!(records <= at / 24 + 1, "records out of nothing");
                }
                Ok(None) => break,
                Err(e) => {
                    assert_eq!(decoder.poll_decode(), Err(e), "errors are sticky");
                    return records;
                }
            }
        }
    }
    records
}

/// Decode one damaged one-page record directly.
fn run_record(rng: &mut StdRng, corpus: &[Corpus]) {
    let c = &corpus[rng.gen_range(0..corpus.len())];
    let (o, len) = c.single_page_records[rng.gen_range(0..c.single_page_records.len())];
    let mut record = c.wal[o..o + len].to_vec();
    if len > 24 {
        damage_record(rng, &mut record);
    }
    let lsn = c.start + o as u64;
    // Damaged records reach `decode_record` directly (no CRC check), so
    // their images' stored bytes are damaged too: rebuild them.
    if let Ok(rec) = decode_record(lsn, lsn.align(), Bytes::from(record), c.version) {
        for img in rec.blocks.iter().filter_map(|b| b.image.as_ref()) {
            if let Ok(page) = img.restore() {
                assert_eq!(page.len(), postgres_ffi::BLCKSZ);
            }
        }
    }
}

#[test]
fn fuzz_wal_decoder() {
    let iterations: u64 =
        std::env::var("WAL_FUZZ_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(3000);
    let first_seed: u64 =
        std::env::var("WAL_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let corpus = load_corpus();
    let started = std::time::Instant::now();
    let (mut bytes, mut records) = (0usize, 0usize);
    for seed in first_seed..first_seed + iterations {
        let mut rng = StdRng::seed_from_u64(seed);
        let kind = rng.gen_range(0..10);
        if kind == 0 {
            run_record(&mut rng, &corpus);
            continue;
        }
        let input = if kind == 1 {
            random_bytes_input(&mut rng)
        } else {
            real_wal_input(&mut rng, &corpus)
        };
        let base = CURRENT_BYTES.load(Ordering::Relaxed);
        PEAK_BYTES.store(base, Ordering::Relaxed);
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_stream(&input, &mut rng)));
        let n = outcome.unwrap_or_else(|_| panic!("seed {seed}: panicked"));
        let used = PEAK_BYTES.load(Ordering::Relaxed) - base;
        let bound = 4 * input.wal.len() + (1 << 20);
        assert!(
            used <= bound,
            "seed {seed}: {used} bytes allocated for {} input bytes",
            input.wal.len()
        );
        bytes += input.wal.len();
        records += n;
    }
    println!(
        "{iterations} inputs, {bytes} bytes, {records} records decoded, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
