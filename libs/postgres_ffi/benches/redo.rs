//! Native redo cost, per record kind and per request shaped like Neon's
//! `bench_walredo` (which times its PostgreSQL redo process), on real
//! records: every block reference of the WAL fixtures
//! (`testdata/wal/pgNN-*.wal.zst`, 15-18, and `testdata/wal/btree/`) that
//! carries a check-only image, applied to the page before the record (its
//! previous image in the fixture, zeros for `will_init`). At setup each one
//! is applied once and must match PostgreSQL's image under its mask, as in
//! `tests/redo_oracle.rs`.
//!
//! Group `redo_kind`, one benchmark per (rmgr, record kind; VM-fork blocks
//! apart), time per record: copy the page before the record into a scratch
//! page (8 KiB copy, included) and `redo::apply` the decoded record. Each
//! benchmark cycles over up to [`SAMPLES_PER_KIND`] records of its kind
//! (evenly spaced over the fixtures, each with its own page, ~0.5 MiB in
//! all); `copy_8KiB` (first and last, to see drift) cycles the same way
//! over as many distinct pages and is the floor.
//!
//! Group `redo_request`, one request like Neon's (`ping`, `short`,
//! `medium`): the page is built the way `reconstruct` does on a read, each
//! stored record decoded (`RedoRecordRef::decode`, borrowed) then applied
//! (`redo::apply_in_chain`), and the page checked once after the last
//! (`redo::check_page`):
//! - `empty`: decode + apply of the cheapest real record (Heap2 VISIBLE on
//!   its heap page: one flag), no page copy. Our redo is a function call;
//!   Neon's ping is a round trip to another process, which we do not have.
//! - `short`: a base image copied into a new buffer + 2 Heap records of
//!   the same page (pairs from the fixtures).
//! - `medium`: Neon's `medium` input re-encoded: a new zeroed page, Heap
//!   INSERT+INIT and 225 INSERTs of one-`bigint` rows (the page full), then
//!   Heap2 VISIBLE; made from a real INSERT+INIT and VISIBLE of the
//!   fixtures with their tuple, offset and tags replaced (checked at setup:
//!   226 tuples, the page full, all-visible).
//! - `medium_decode_only`, `medium_apply_only`: `medium`'s two halves;
//!   `medium_checked_per_record`: `medium` with `redo::apply` (the whole
//!   page checked after every record), owned `RedoRecord::decode`;
//! - `medium_fixture`: the longest real chain of the fixtures like it: a
//!   new page, INSERT+INIT then INSERTs of one page (wider rows, fewer).
//! - `copy_8KiB`, `checksum_8KiB`: the floor, and the data checksum a read
//!   from a checksummed cluster adds.
//!
//! `cargo bench -p postgres_ffi --bench redo`

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use postgres_ffi::consts::BLCKSZ;
use postgres_ffi::page::page_checksum;
use postgres_ffi::redo::mask::{first_difference, mask_page};
use postgres_ffi::redo::names::record_name;
use postgres_ffi::redo::{self, RedoRecord, RedoRecordRef};
use postgres_ffi::wal::{rmgr_id, BlockTag, DecodedWalRecord, WalStreamDecoder};
use postgres_ffi::PgMajorVersion;
use utils::lsn::Lsn;

/// Records per kind a benchmark cycles over (each with its own 8 KiB page).
const SAMPLES_PER_KIND: usize = 64;
/// Pairs the `short` request cycles over.
const SHORT_PAIRS: usize = 64;
const VM_FORK: u8 = 2;

/// One block reference of one real record, with the pages around it.
struct Sample {
    version: PgMajorVersion,
    tag: BlockTag,
    lsn: Lsn,
    rmid: u8,
    kind: &'static str,
    /// The stored form (`RedoRecord::encode`), as the daemon keeps it.
    stored: Bytes,
    rec: RedoRecord,
    before: Bytes,
    after: Bytes,
    /// The sample whose image is this one's `before` (same block, the
    /// record just before this one on it), if it is a sample.
    prev: Option<usize>,
}

/// (rmgr, kind, VM fork).
type KindKey = (u8, &'static str, bool);

struct Corpus {
    samples: Vec<Sample>,
    /// `next[i]`: the sample that follows sample `i` on its block.
    next: Vec<Option<usize>>,
}

/// Every fixture window: (name, major, start LSN, WAL).
fn fixtures() -> Vec<(String, PgMajorVersion, Lsn, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal");
    let mut out = Vec::new();
    for (sub, start_of) in [("", tsv_start as fn(&Path, &str) -> Lsn), ("btree", start_file)] {
        let d: PathBuf = dir.join(sub);
        let mut names: Vec<String> = std::fs::read_dir(&d)
            .expect("fixture dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".wal.zst").map(str::to_string))
            .collect();
        names.sort();
        for name in names {
            let major = name[2..4].parse().expect("pgNN-");
            let version = PgMajorVersion::new(major).expect("supported major");
            let zst = std::fs::read(d.join(format!("{name}.wal.zst"))).expect("fixture");
            let wal = zstd::stream::decode_all(&zst[..]).expect("fixture decompresses");
            out.push((name.clone(), version, start_of(&d, &name), wal));
        }
    }
    out
}

fn tsv_start(dir: &Path, name: &str) -> Lsn {
    let tsv = std::fs::read_to_string(dir.join(format!("{name}.tsv"))).expect("fixture tsv");
    let first = tsv.lines().next().and_then(|l| l.strip_prefix("# start\t")).expect("start");
    first.parse().expect("an LSN")
}

fn start_file(dir: &Path, name: &str) -> Lsn {
    let s = std::fs::read_to_string(dir.join(format!("{name}.start"))).expect("fixture start");
    s.trim().parse().expect("an LSN")
}

/// The relation a Storage TRUNCATE cuts (as `tests/redo_oracle.rs`).
fn truncated_relation(rec: &DecodedWalRecord) -> Option<(u32, u32, u32)> {
    const XLOG_SMGR_TRUNCATE: u8 = 0x20;
    if rec.rmid != rmgr_id::STORAGE || rec.rmgr_info() != XLOG_SMGR_TRUNCATE {
        return None;
    }
    let oid = |at: usize| {
        rec.main_data.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    Some((oid(4)?, oid(8)?, oid(12)?))
}

/// Whether `page` is `want` under the rmgr's mask.
fn matches_image(page: &[u8], want: &[u8], s: &Sample) -> bool {
    let (mut got, mut want) = (page.to_vec(), want.to_vec());
    mask_page(&mut got, s.rmid, s.tag.blkno, s.version);
    mask_page(&mut want, s.rmid, s.tag.blkno, s.version);
    first_difference(&got, &want).is_none()
}

fn load() -> Corpus {
    let zeros = Bytes::from(vec![0u8; BLCKSZ]);
    let mut samples: Vec<Sample> = Vec::new();
    let mut rejected = 0;
    for (name, version, start, wal) in fixtures() {
        let mut decoder = WalStreamDecoder::new(start, version);
        decoder.feed_bytes(&wal);
        // The latest known version of each block, and the sample it is the
        // image of (if the record that wrote it was one).
        let mut known: HashMap<BlockTag, (Bytes, Option<usize>)> = HashMap::new();
        let end = start.0 + wal.len() as u64;
        loop {
            let rec = match decoder.poll_decode() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                // The zeros after the last record of a window cut at a page
                // end (the btree fixtures).
                Err(e) if e.lsn.0 / 8192 + 1 == end / 8192 && e.msg.contains("is zero") => break,
                Err(e) => panic!("{name}: {e}"),
            };
            let mut made: Vec<Option<usize>> = vec![None; rec.blocks.len()];
            for (i, block) in rec.blocks.iter().enumerate() {
                let Some(image) = block.image.as_ref().filter(|_| !block.apply_image) else {
                    continue;
                };
                if !redo::has_native_redo(rec.rmid) {
                    continue;
                }
                let (before, prev) = if block.will_init {
                    (zeros.clone(), None)
                } else if let Some((page, prev)) = known.get(&block.tag) {
                    (page.clone(), *prev)
                } else {
                    continue;
                };
                let mut stored = Vec::new();
                RedoRecord::from_decoded(&rec, i).encode(&mut stored);
                let stored = Bytes::from(stored);
                let sample = Sample {
                    version,
                    tag: block.tag,
                    lsn: rec.end_lsn,
                    rmid: rec.rmid,
                    kind: record_name(rec.rmid, rec.info, version),
                    rec: RedoRecord::decode(&stored).expect("decodes"),
                    stored,
                    before,
                    after: image.restore().expect("image restores"),
                    prev,
                };
                let mut page = sample.before.to_vec();
                let ok = redo::apply(&mut page, sample.tag, sample.lsn, &sample.rec, version)
                    .is_ok()
                    && matches_image(&page, &sample.after, &sample);
                if ok {
                    made[i] = Some(samples.len());
                    samples.push(sample);
                } else {
                    rejected += 1;
                }
            }
            if let Some(rel) = truncated_relation(&rec) {
                known.retain(|tag, _| (tag.spc_oid, tag.db_oid, tag.rel_number) != rel);
            }
            for (block, made) in rec.blocks.iter().zip(made) {
                match &block.image {
                    Some(image) => {
                        let page = image.restore().expect("image restores");
                        known.insert(block.tag, (page, made));
                    }
                    None => {
                        known.remove(&block.tag);
                    }
                }
            }
        }
    }
    assert_eq!(rejected, 0, "records that do not redo to PostgreSQL's image");
    let mut next = vec![None; samples.len()];
    for (i, s) in samples.iter().enumerate() {
        if let Some(p) = s.prev {
            next[p] = Some(i);
        }
    }
    Corpus { samples, next }
}

/// Up to `n` of `items`, evenly spaced.
fn spread<T: Copy>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n {
        return items.to_vec();
    }
    (0..n).map(|k| items[k * items.len() / n]).collect()
}

fn kind_label(rmid: u8, kind: &str, vm: bool) -> (String, String) {
    let kind = if vm { format!("{kind}.vm") } else { kind.to_string() };
    (redo::rmgr_name(rmid).to_string(), kind)
}

/// The floor: one 8 KiB copy per iteration, cycling over `pages`.
fn bench_copy(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, pages: &[Bytes]) {
    let mut page = vec![0u8; BLCKSZ];
    let mut at = 0;
    group.bench_function(name, |b| {
        b.iter(|| {
            page.copy_from_slice(&pages[at]);
            at = (at + 1) % pages.len();
            std::hint::black_box(&mut page);
        })
    });
}

/// One record per iteration: copy its page before, apply it.
fn bench_kinds(c: &mut Criterion, corpus: &Corpus) {
    let mut kinds: BTreeMap<KindKey, Vec<usize>> = BTreeMap::new();
    for (i, s) in corpus.samples.iter().enumerate() {
        kinds.entry((s.rmid, s.kind, s.tag.fork == VM_FORK)).or_default().push(i);
    }
    eprintln!("redo_kind: {} records of {} kinds", corpus.samples.len(), kinds.len());
    for ((rmid, kind, vm), list) in &kinds {
        let bytes: usize = list.iter().map(|&i| corpus.samples[i].stored.len()).sum();
        let (r, k) = kind_label(*rmid, kind, *vm);
        eprintln!("  {r} {k}: {} records, mean stored size {} B", list.len(), bytes / list.len());
    }
    let mut group = c.benchmark_group("redo_kind");
    group.throughput(Throughput::Elements(1));
    let all: Vec<usize> = (0..corpus.samples.len()).collect();
    let floor_pages: Vec<Bytes> = spread(&all, SAMPLES_PER_KIND)
        .into_iter()
        .map(|i| corpus.samples[i].before.clone())
        .collect();
    bench_copy(&mut group, "copy_8KiB", &floor_pages);
    for ((rmid, kind, vm), list) in &kinds {
        let chosen: Vec<&Sample> =
            spread(list, SAMPLES_PER_KIND).into_iter().map(|i| &corpus.samples[i]).collect();
        let (r, k) = kind_label(*rmid, kind, *vm);
        let mut page = vec![0u8; BLCKSZ];
        let mut at = 0;
        group.bench_function(BenchmarkId::new(r, k), |b| {
            b.iter(|| {
                let s = chosen[at];
                at = (at + 1) % chosen.len();
                page.copy_from_slice(&s.before);
                redo::apply(&mut page, s.tag, s.lsn, &s.rec, s.version).expect("redo");
                std::hint::black_box(&mut page);
            })
        });
    }
    bench_copy(&mut group, "copy_8KiB_again", &floor_pages);
    group.finish();
}

/// What `reconstruct` does per stored record: decode it, apply it (the
/// page check comes once per read: [`check_read`]).
fn redo_stored(page: &mut [u8], s: &Sample) {
    let rec = RedoRecordRef::decode(&s.stored).expect("decodes");
    redo::apply_in_chain(page, s.tag, s.lsn, &rec, s.version).expect("redo");
}

/// The page check `reconstruct` runs after a read's last record.
fn check_read(page: &[u8], last: &Sample) {
    redo::check_page(page, last.rmid).expect("the page check");
}

/// Pairs (a, b): two Heap records one after the other on a page a does not
/// initialise.
fn short_pairs(corpus: &Corpus) -> Vec<(usize, usize)> {
    let heap = |s: &Sample| s.rmid == rmgr_id::HEAP && s.tag.fork == 0;
    let pairs: Vec<(usize, usize)> = (0..corpus.samples.len())
        .filter_map(|a| Some((a, corpus.next[a]?)))
        .filter(|&(a, b)| {
            let (sa, sb) = (&corpus.samples[a], &corpus.samples[b]);
            heap(sa) && heap(sb) && !sa.rec.will_init() && !sb.rec.will_init()
        })
        .collect();
    spread(&pairs, SHORT_PAIRS)
}

/// The longest chain INSERT+INIT, INSERT, INSERT... of Heap records on one
/// page.
fn insert_chain(corpus: &Corpus) -> Vec<usize> {
    let is = |i: usize, kind: &str| {
        let s = &corpus.samples[i];
        s.rmid == rmgr_id::HEAP && s.tag.fork == 0 && s.kind == kind
    };
    let mut best = Vec::new();
    for start in (0..corpus.samples.len()).filter(|&i| is(i, "INSERT+INIT")) {
        let mut chain = vec![start];
        while let Some(n) = corpus.next[*chain.last().unwrap()].filter(|&n| is(n, "INSERT")) {
            chain.push(n);
        }
        if chain.len() > best.len() {
            best = chain;
        }
    }
    best
}

fn bench_requests(c: &mut Criterion, corpus: &Corpus) {
    let samples = &corpus.samples;
    let mut group = c.benchmark_group("redo_request");
    let base = samples[0].before.clone();
    let mut page = vec![0u8; BLCKSZ];
    group.bench_function("copy_8KiB", |b| {
        b.iter(|| {
            page.copy_from_slice(std::hint::black_box(&base));
            std::hint::black_box(&mut page);
        })
    });
    group.bench_function("checksum_8KiB", |b| {
        b.iter(|| page_checksum(std::hint::black_box(&base), std::hint::black_box(7)))
    });

    // empty: one flag, in place (idempotent), on each record's own page.
    let visible: Vec<usize> = (0..samples.len())
        .filter(|&i| samples[i].rmid == rmgr_id::HEAP2 && samples[i].kind == "VISIBLE")
        .filter(|&i| samples[i].tag.fork == 0)
        .collect();
    let visible = spread(&visible, SAMPLES_PER_KIND);
    let mut pages: Vec<Vec<u8>> = visible.iter().map(|&i| samples[i].before.to_vec()).collect();
    let mut at = 0;
    eprintln!("redo_request/empty: Heap2 VISIBLE, {} records", visible.len());
    group.bench_function("empty", |b| {
        b.iter(|| {
            redo_stored(&mut pages[at], &samples[visible[at]]);
            check_read(&pages[at], &samples[visible[at]]);
            at = (at + 1) % visible.len();
        })
    });

    // short: base image + 2 Heap records.
    let pairs = short_pairs(corpus);
    let mut kinds: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for &(a, b) in &pairs {
        *kinds.entry((samples[a].kind, samples[b].kind)).or_default() += 1;
        let mut page = samples[a].before.to_vec();
        redo_stored(&mut page, &samples[a]);
        redo_stored(&mut page, &samples[b]);
        assert!(matches_image(&page, &samples[b].after, &samples[b]), "short request");
    }
    let pair_bytes: usize =
        pairs.iter().map(|&(a, b)| samples[a].stored.len() + samples[b].stored.len()).sum();
    eprintln!(
        "redo_request/short: {} pairs, mean {} B stored per pair: {kinds:?}",
        pairs.len(),
        pair_bytes / pairs.len()
    );
    let mut at = 0;
    group.bench_function("short", |b| {
        b.iter(|| {
            let (a, b2) = pairs[at];
            at = (at + 1) % pairs.len();
            let mut page = samples[a].before.to_vec();
            redo_stored(&mut page, &samples[a]);
            redo_stored(&mut page, &samples[b2]);
            check_read(&page, &samples[b2]);
            std::hint::black_box(page)
        })
    });

    // medium: a new page + a page's worth of inserts, + VISIBLE.
    let medium = neon_medium(corpus);
    let chain: Vec<&Sample> = medium.iter().collect();
    check_neon_medium(&run_chain(&chain));
    describe_chain("medium", &chain);
    group.throughput(Throughput::Elements(chain.len() as u64));
    group.bench_function("medium", |b| b.iter(|| std::hint::black_box(run_chain(&chain))));
    // Its two halves: decoding the stored records, applying decoded ones.
    group.bench_function("medium_decode_only", |b| {
        b.iter(|| {
            for s in &chain {
                std::hint::black_box(RedoRecordRef::decode(&s.stored).expect("decodes"));
            }
        })
    });
    let decoded: Vec<RedoRecordRef> =
        chain.iter().map(|s| RedoRecordRef::decode(&s.stored).expect("decodes")).collect();
    group.bench_function("medium_apply_only", |b| {
        b.iter(|| {
            let mut page = vec![0u8; BLCKSZ];
            for (s, rec) in chain.iter().zip(&decoded) {
                redo::apply_in_chain(&mut page, s.tag, s.lsn, rec, s.version).expect("redo");
            }
            check_read(&page, chain.last().expect("a chain"));
            std::hint::black_box(page)
        })
    });
    // The same with the page check after every record (before: `apply`).
    group.bench_function("medium_checked_per_record", |b| {
        b.iter(|| std::hint::black_box(run_chain_checked_per_record(&chain)))
    });

    let chain: Vec<&Sample> = insert_chain(corpus).into_iter().map(|i| &samples[i]).collect();
    let last = chain.last().expect("an INSERT+INIT chain");
    assert!(matches_image(&run_chain(&chain), &last.after, last), "medium_fixture request");
    describe_chain("medium_fixture", &chain);
    group.throughput(Throughput::Elements(chain.len() as u64));
    group.bench_function("medium_fixture", |b| b.iter(|| std::hint::black_box(run_chain(&chain))));
    group.finish();
}

/// A read of a page built from records only: a new page, each decoded and
/// applied.
fn run_chain(chain: &[&Sample]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    for s in chain {
        redo_stored(&mut page, s);
    }
    check_read(&page, chain.last().expect("a chain"));
    page
}

/// `run_chain` with `redo::apply`, which checks the page after each record.
fn run_chain_checked_per_record(chain: &[&Sample]) -> Vec<u8> {
    let mut page = vec![0u8; BLCKSZ];
    for s in chain {
        let rec = RedoRecord::decode(&s.stored).expect("decodes");
        redo::apply(&mut page, s.tag, s.lsn, &rec, s.version).expect("redo");
    }
    page
}

fn describe_chain(name: &str, chain: &[&Sample]) {
    let last = chain.last().expect("a chain");
    let stored: usize = chain.iter().map(|s| s.stored.len()).sum();
    let data: usize = chain.iter().map(|s| s.rec.block_data.len() + s.rec.main_data.len()).sum();
    eprintln!(
        "redo_request/{name}: {:?} rel {} blk {}: {} records, {stored} B stored ({data} B of record data)",
        last.version,
        last.tag.rel_number,
        last.tag.blkno,
        chain.len()
    );
}

/// Rows of Neon's `medium` input: one `bigint` column (tuple 32 bytes with
/// its header, 36 with its line pointer: 226 fill a page).
const NEON_MEDIUM_ROWS: u16 = 226;

/// Neon's `medium` request on our record form: Heap INSERT+INIT, 225 Heap
/// INSERTs (`xl_heap_header` infomask2 1, infomask `HEAP_XMAX_INVALID`,
/// hoff 24; data: 1 pad byte + the row's `bigint`), then Heap2 VISIBLE of
/// the heap page. Built from a real INSERT+INIT and VISIBLE of one major.
fn neon_medium(corpus: &Corpus) -> Vec<Sample> {
    let samples = &corpus.samples;
    let init = samples
        .iter()
        .find(|s| s.rmid == rmgr_id::HEAP && s.kind == "INSERT+INIT" && s.tag.fork == 0)
        .expect("a Heap INSERT+INIT");
    let visible = samples
        .iter()
        .find(|s| s.kind == "VISIBLE" && s.tag.fork == 0 && s.version == init.version)
        .expect("a Heap2 VISIBLE of the same major");
    let mut out = Vec::new();
    let sample = |rec: RedoRecord, lsn: Lsn, kind| {
        let mut stored = Vec::new();
        rec.encode(&mut stored);
        let stored = Bytes::from(stored);
        Sample {
            version: init.version,
            tag: init.tag,
            lsn,
            rmid: rec.rmid,
            kind,
            rec,
            stored,
            before: Bytes::new(),
            after: Bytes::new(),
            prev: None,
        }
    };
    for row in 0..NEON_MEDIUM_ROWS {
        let mut rec = init.rec.clone();
        rec.info = (init.rec.info & 0x0F) | if row == 0 { 0x80 } else { 0x00 };
        let target = rec.target;
        for b in rec.blocks.iter_mut().filter(|b| b.id == target) {
            b.will_init = row == 0;
        }
        let mut data = vec![0x01, 0x00, 0x00, 0x08, 24, 0];
        data.extend_from_slice(&i64::from(row).to_le_bytes());
        rec.block_data = Bytes::from(data);
        let mut main = (row + 1).to_le_bytes().to_vec();
        main.push(0);
        rec.main_data = Bytes::from(main);
        let lsn = Lsn(init.lsn.0 + 0x48 * u64::from(row));
        out.push(sample(rec, lsn, if row == 0 { "INSERT+INIT" } else { "INSERT" }));
    }
    let mut rec = visible.rec.clone();
    rec.blocks.retain(|b| b.id <= 1);
    for b in rec.blocks.iter_mut() {
        b.tag = init.tag;
        if b.id == 0 {
            b.tag.fork = VM_FORK;
            b.tag.blkno = 0;
        }
    }
    let lsn = Lsn(init.lsn.0 + 0x48 * u64::from(NEON_MEDIUM_ROWS));
    out.push(sample(rec, lsn, "VISIBLE"));
    out
}

/// The page of [`neon_medium`]: 226 tuples, no room for another, all-visible.
fn check_neon_medium(page: &[u8]) {
    const PD_ALL_VISIBLE: u16 = 0x0004;
    let h = postgres_ffi::page::PageHeader::decode(page);
    assert_eq!(redo::bufpage::max_offset(page), NEON_MEDIUM_ROWS, "medium: tuples");
    assert!(h.upper - h.lower < 36, "medium: {} bytes free", h.upper - h.lower);
    assert!(h.flags & PD_ALL_VISIBLE != 0, "medium: all-visible");
    redo::bufpage::check_invariants(page).expect("medium: page invariants");
}

fn bench_redo(c: &mut Criterion) {
    let corpus = load();
    bench_kinds(c, &corpus);
    bench_requests(c, &corpus);
}

criterion_group!(benches, bench_redo);
criterion_main!(benches);
