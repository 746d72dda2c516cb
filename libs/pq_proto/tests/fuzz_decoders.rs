//! Fuzzing of every decoder of untrusted bytes, on stable Rust: the libpq
//! decoders (startup packet, frames, error fields, backend messages) and
//! the pagestream decoders (requests and responses, v2 and v3).
//!
//! Inputs: random bytes, and valid messages mutated (bit flips, byte
//! insertions and deletions, truncations, length words overwritten with
//! boundary values). Seeded; prints its seed (`FUZZ_SEED=<n>` reproduces).
//! Checked per input: no panic (the harness catches none: a panic fails
//! the test), no hang (each input within `MAX_INPUT_TIME`), bounded
//! allocation (a counting global allocator: peak bytes live during one
//! input at most `ALLOC_BOUND_FACTOR` x its length + `ALLOC_SLACK`).
//!
//! `cargo test -p pq_proto --test fuzz_decoders` runs 20,000 inputs;
//! `FUZZ_INPUTS=1000000 cargo test --release -p pq_proto --test fuzz_decoders -- --nocapture`
//! is the long run recorded in docs/testing.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pageserver_api::pagestream::{
    PagestreamBeMessage, PagestreamFeMessage, PagestreamProtocolVersion,
};
use pq_proto::client::parse_backend;
use pq_proto::{parse_frame, parse_startup, ErrorFields, MAX_MESSAGE_LEN};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: forwarding to the system allocator with the same layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MAX_INPUT_TIME: Duration = Duration::from_millis(250);
const ALLOC_BOUND_FACTOR: usize = 4;
const ALLOC_SLACK: usize = 64 * 1024;

/// Valid messages to mutate: frontend and backend libpq frames, startup
/// packets, pagestream requests and responses.
fn seeds() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![
        b"Q\0\0\0\x0dselect 1\0".to_vec(),
        b"X\0\0\0\x04".to_vec(),
        b"p\0\0\0\x08pwd\0".to_vec(),
        b"E\0\0\0\x20SERROR\0VERROR\0CXX000\0Mboom\0\0".to_vec(),
        b"T\0\0\0\x1d\0\x01col\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0".to_vec(),
        b"D\0\0\0\x0f\0\x02\0\0\0\x01x\xff\xff\xff\xff".to_vec(),
        b"W\0\0\0\x07\0\0\0".to_vec(),
        b"d\0\0\0\x08abcd".to_vec(),
        vec![0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f],
        [&[0u8, 0, 0, 0x1b, 0, 3, 0, 0][..], b"user\0u\0database\0d\0\0"].concat(),
    ];
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../pageserver_api/testdata/pagestream_golden.json"
        ))
        .unwrap(),
    )
    .unwrap();
    for e in golden["entries"].as_array().unwrap() {
        let mut b = hex::decode(e["hex"].as_str().unwrap()).unwrap();
        b.truncate(64 + b.len() % 64); // the head is what decoders look at
        v.push(b);
    }
    v
}

fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    if rng.gen_bool(0.25) {
        let len = if rng.gen_bool(0.01) { rng.gen_range(0..70_000) } else { rng.gen_range(0..256) };
        return (0..len).map(|_| rng.gen()).collect();
    }
    let mut b = seeds[rng.gen_range(0..seeds.len())].clone();
    for _ in 0..rng.gen_range(1..4) {
        match rng.gen_range(0..5) {
            0 if !b.is_empty() => {
                let i = rng.gen_range(0..b.len());
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let i = rng.gen_range(0..=b.len());
                b.insert(i, rng.gen());
            }
            2 if !b.is_empty() => {
                b.remove(rng.gen_range(0..b.len()));
            }
            3 => b.truncate(rng.gen_range(0..=b.len())),
            _ if b.len() >= 5 => {
                let at = if rng.gen_bool(0.5) { 0 } else { 1 };
                let v: u32 = *[0, 3, 4, 5, 7, 8, 10_000, 10_001, 65_540, u32::MAX, rng.gen()]
                    .get(rng.gen_range(0..11))
                    .unwrap();
                b[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            _ => {}
        }
    }
    b
}

fn decode_all(input: &[u8]) {
    let _ = parse_startup(input);
    let _ = parse_frame(input, MAX_MESSAGE_LEN);
    let _ = ErrorFields::parse(input);
    let mut buf = BytesMut::from(input);
    while let Ok(Some(_)) = parse_backend(&mut buf) {}
    for v in [PagestreamProtocolVersion::V2, PagestreamProtocolVersion::V3] {
        let _ = PagestreamFeMessage::parse(input, v);
        let _ = PagestreamBeMessage::deserialize(Bytes::copy_from_slice(input), v);
    }
}

#[test]
fn decoders_survive_random_and_mutated_input() {
    let inputs: u64 =
        std::env::var("FUZZ_INPUTS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let seed: u64 =
        std::env::var("FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("fuzz_decoders FUZZ_SEED={seed} FUZZ_INPUTS={inputs}");
    let mut rng = StdRng::seed_from_u64(seed);
    let seeds = seeds();
    let started = Instant::now();
    let (mut max_time, mut max_alloc) = (Duration::ZERO, 0usize);
    for i in 0..inputs {
        let input = mutate(&mut rng, &seeds);
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let t = Instant::now();
        decode_all(&input);
        let (took, peak) = (t.elapsed(), PEAK.load(Ordering::Relaxed).saturating_sub(base));
        assert!(
            took <= MAX_INPUT_TIME,
            "input {i} took {took:?} (FUZZ_SEED={seed}): {:?}",
            &input[..input.len().min(64)]
        );
        let bound = ALLOC_BOUND_FACTOR * input.len() + ALLOC_SLACK;
        assert!(
            peak <= bound,
            "input {i} of {} bytes allocated {peak} bytes (FUZZ_SEED={seed})",
            input.len()
        );
        max_time = max_time.max(took);
        max_alloc = max_alloc.max(peak);
    }
    println!(
        "fuzz_decoders: {inputs} inputs in {:?}, slowest {max_time:?}, largest allocation peak {max_alloc} bytes",
        started.elapsed()
    );
}
