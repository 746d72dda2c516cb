//! Fuzzing native redo: records into `postgres_ffi::redo::apply` on real
//! and random pages. Every input must end in `Ok` or `Err`: no panic, no
//! hang (a watchdog aborts with the input after `REDO_FUZZ_STALL_SECS`,
//! default 60), and after every `Ok` the page is still `BLCKSZ` bytes,
//! carries the record's LSN and keeps `bufpage::check_invariants`
//! (`bufpage::check_header` for pages without line pointers: Generic's,
//! btree's metapage).
//!
//! Inputs, rmgr-agnostic (whatever `apply` dispatches to is covered):
//! - every block of every record of the real-WAL fixtures (15-18, every
//!   `testdata/wal/{,btree/}pgNN-*.wal.zst`), made with `RedoRecord::from_decoded`,
//!   unmutated, on the block's page before the record (its previous image
//!   in the fixture, zeros for `will_init`) and on the record's own image;
//! - one random record for every rmgr id 0..=21 and every `xl_info`;
//! - `REDO_FUZZ_ITERATIONS` (default 20,000) seeded inputs: real records
//!   with byte mutations (flip, set, truncate, extend, splice, insert,
//!   delete, interesting 16/32-bit values) of block data, main data, info,
//!   version, target and page; and fully random records on real, empty,
//!   zero and garbage pages; one in eight goes through its stored form
//!   (`RedoRecord::encode`, mutated, `RedoRecord::decode`). Input `i` is
//!   generated from seed `REDO_FUZZ_SEED + i` (default seed 0), printed
//!   with any failure;
//!   `REDO_FUZZ_SEED=<that> REDO_FUZZ_ITERATIONS=1` replays it.
//!
//! Every input also goes through the read path (`RedoRecordRef::decode` of
//! the stored form, `apply_in_chain`, `check_page`): it must refuse what
//! `apply` refuses and make the same page from what `apply` accepts.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use postgres_ffi::page::page_lsn;
use postgres_ffi::redo::{
    apply, apply_in_chain, bufpage, check_page, rmgr_name, BlockRef, Fault, RedoRecord,
    RedoRecordRef,
};
use postgres_ffi::wal::{BlockTag, WalStreamDecoder};
use postgres_ffi::{PgMajorVersion, BLCKSZ};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use utils::lsn::Lsn;

/// Every fixture `testdata/wal/pgNN-*.wal.zst`, with its major.
fn fixtures() -> Vec<(PathBuf, PgMajorVersion)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/wal");
    let mut out: Vec<(PathBuf, PgMajorVersion)> = Vec::new();
    for d in [dir.clone(), dir.join("btree")] {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        out.extend(entries.filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let stem = name.strip_suffix(".wal.zst")?;
            let major = stem.strip_prefix("pg")?.get(..2)?.parse().ok()?;
            Some((d.join(stem), PgMajorVersion::new(major).ok()?))
        }));
    }
    out.sort();
    assert!(out.len() >= 12, "fixtures: {out:?}");
    out
}

const N_RMGRS: u8 = 22;

/// One block reference of one real record.
struct RealBlock {
    rec: RedoRecord,
    tag: BlockTag,
    lsn: Lsn,
    version: PgMajorVersion,
    /// The block before the record: its previous image in the fixture.
    before: Option<usize>,
    /// The record's own image of the block (the block after it).
    after: Option<usize>,
}

/// The real inputs, and every page image (shared) by the rmgr that logged it.
struct Corpus {
    blocks: Vec<RealBlock>,
    pages: Vec<Arc<Vec<u8>>>,
    pages_by_rmid: Vec<Vec<usize>>,
}

/// A fixture's start LSN (its `.tsv`'s first line, or its `.start`) and WAL.
fn fixture_files(stem: &Path) -> (Lsn, Vec<u8>) {
    let with = |ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
    let start = match std::fs::read_to_string(with("tsv")) {
        Ok(tsv) => tsv.lines().next().unwrap().strip_prefix("# start\t").unwrap().to_string(),
        Err(_) => std::fs::read_to_string(with("start")).unwrap().trim().to_string(),
    };
    let start = start.parse().unwrap();
    let compressed = std::fs::read(with("wal.zst")).unwrap();
    (start, zstd::stream::decode_all(&compressed[..]).unwrap())
}

fn load_corpus() -> Corpus {
    let mut c = Corpus {
        blocks: Vec::new(),
        pages: Vec::new(),
        pages_by_rmid: vec![Vec::new(); N_RMGRS as usize],
    };
    for (name, version) in fixtures() {
        let (start, wal) = fixture_files(&name);
        let mut decoder = WalStreamDecoder::new(start, version);
        decoder.feed_bytes(&wal);
        let mut last_image: HashMap<BlockTag, usize> = HashMap::new();
        // A fixture cut from a whole segment ends in zeros: stop there.
        while let Ok(Some(rec)) = decoder.poll_decode() {
            for (i, b) in rec.blocks.iter().enumerate() {
                let after = b.image.as_ref().map(|image| {
                    c.pages.push(Arc::new(image.restore().unwrap().to_vec()));
                    if let Some(list) = c.pages_by_rmid.get_mut(rec.rmid as usize) {
                        list.push(c.pages.len() - 1);
                    }
                    c.pages.len() - 1
                });
                let before = last_image.get(&b.tag).copied();
                if let Some(after) = after {
                    last_image.insert(b.tag, after);
                }
                let redo = RedoRecord::from_decoded(&rec, i);
                c.blocks.push(RealBlock {
                    rec: redo,
                    tag: b.tag,
                    lsn: rec.end_lsn,
                    version,
                    before,
                    after,
                });
            }
        }
    }
    c
}

/// One input to `apply`.
struct Case {
    rec: RedoRecord,
    tag: BlockTag,
    lsn: Lsn,
    version: PgMajorVersion,
    page: Vec<u8>,
    /// How it was made, for the report.
    how: String,
    /// The record's stored form, mutated: decoded (inside the panic
    /// guard) and applied instead of `rec` when present.
    stored: Option<Vec<u8>>,
}

impl Case {
    fn describe(&self) -> String {
        let hex = |b: &[u8]| -> String {
            let s: String = b.iter().take(400).map(|x| format!("{x:02x}")).collect();
            if b.len() > 400 {
                format!("{s}... ({} bytes)", b.len())
            } else {
                s
            }
        };
        let h = postgres_ffi::page::PageHeader::decode(&self.page);
        let stored =
            self.stored.as_ref().map(|b| format!(" stored form [{}]", hex(b))).unwrap_or_default();
        format!(
            "{}: rmgr {} ({}) info {:#04x} {:?} target {} blocks {:?} lsn {} block_data [{}] main_data [{}] page lower {} upper {} special {}{stored}",
            self.how,
            self.rec.rmid,
            rmgr_name(self.rec.rmid),
            self.rec.info,
            self.version,
            self.rec.target,
            self.rec.blocks,
            self.lsn,
            hex(&self.rec.block_data),
            hex(&self.rec.main_data),
            h.lower,
            h.upper,
            h.special
        )
    }
}

// ---------------------------------------------------------------- mutation

const INTERESTING_16: [u16; 12] = [0, 1, 2, 3, 0x7FFF, 0x8000, 0xFFFF, 8191, 8192, 8193, 291, 408];
const INTERESTING_32: [u32; 6] = [0, 1, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 8192];

/// One random change to `bytes`; `donor` supplies spliced bytes.
fn mutate_bytes(rng: &mut StdRng, bytes: &mut Vec<u8>, donor: &[u8]) {
    let at = |rng: &mut StdRng, len: usize| if len == 0 { 0 } else { rng.gen_range(0..len) };
    match rng.gen_range(0..9) {
        0 => {
            for _ in 0..rng.gen_range(1..8) {
                let i = at(rng, bytes.len());
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= 1 << rng.gen_range(0..8);
                }
            }
        }
        1 => {
            let i = at(rng, bytes.len());
            if let Some(b) = bytes.get_mut(i) {
                *b = rng.gen();
            }
        }
        2 => {
            let keep = at(rng, bytes.len() + 1);
            bytes.truncate(keep);
        }
        3 => {
            let n = if rng.gen_bool(0.9) { rng.gen_range(1..64) } else { rng.gen_range(64..9000) };
            let from = bytes.len();
            bytes.resize(from + n, 0);
            rng.fill(&mut bytes[from..]);
        }
        4 if !donor.is_empty() => {
            let from = rng.gen_range(0..donor.len());
            let to = rng.gen_range(from..=donor.len());
            let i = at(rng, bytes.len() + 1);
            let j = rng.gen_range(i..=bytes.len());
            bytes.splice(i..j, donor[from..to].iter().copied());
        }
        5 => {
            let i = at(rng, bytes.len() + 1);
            let n = rng.gen_range(1..16);
            bytes.splice(i..i, (0..n).map(|_| rng.gen::<u8>()));
        }
        6 if !bytes.is_empty() => {
            let i = at(rng, bytes.len());
            let j = rng.gen_range(i..=bytes.len().min(i + 16));
            bytes.drain(i..j);
        }
        7 if bytes.len() >= 2 => {
            let i = rng.gen_range(0..bytes.len() - 1);
            let v = INTERESTING_16[rng.gen_range(0..INTERESTING_16.len())];
            bytes[i..i + 2].copy_from_slice(&v.to_le_bytes());
        }
        8 if bytes.len() >= 4 => {
            let i = rng.gen_range(0..bytes.len() - 3);
            let v = INTERESTING_32[rng.gen_range(0..INTERESTING_32.len())];
            bytes[i..i + 4].copy_from_slice(&v.to_le_bytes());
        }
        _ => bytes.push(rng.gen()),
    }
}

/// One random change to a page, biased to the header and line pointers.
fn mutate_page(rng: &mut StdRng, page: &mut [u8]) {
    match rng.gen_range(0..5) {
        0 => {
            // pd_flags, pd_lower, pd_upper or pd_special
            let field = 10 + 2 * rng.gen_range(0..4);
            let v = if rng.gen() { INTERESTING_16[rng.gen_range(0..12)] } else { rng.gen() };
            page[field..field + 2].copy_from_slice(&v.to_le_bytes());
        }
        1 => {
            let lp = 24 + 4 * rng.gen_range(0..64);
            page[lp..lp + 4].copy_from_slice(&rng.gen::<u32>().to_le_bytes());
        }
        2 => {
            for _ in 0..rng.gen_range(1..16) {
                let i = rng.gen_range(0..BLCKSZ);
                page[i] ^= 1 << rng.gen_range(0..8);
            }
        }
        3 => {
            let i = rng.gen_range(0..BLCKSZ - 1);
            let v = INTERESTING_16[rng.gen_range(0..12)];
            page[i..i + 2].copy_from_slice(&v.to_le_bytes());
        }
        _ => {
            let from = rng.gen_range(0..BLCKSZ);
            let to = rng.gen_range(from..=BLCKSZ.min(from + 512));
            page[from..to].fill(rng.gen());
        }
    }
}

// ---------------------------------------------------------------- inputs

fn pick<'a, T>(rng: &mut StdRng, v: &'a [T]) -> Option<&'a T> {
    (!v.is_empty()).then(|| &v[rng.gen_range(0..v.len())])
}

/// The page a real block is redone on without mutation: what the server
/// would give (zeros for `will_init`, else the block's previous version),
/// or the record's own result.
fn real_page(c: &Corpus, b: &RealBlock, own_image: bool) -> Option<Vec<u8>> {
    if b.rec.will_init() && !own_image {
        return Some(vec![0u8; BLCKSZ]);
    }
    let which = if own_image { b.after } else { b.before };
    which.map(|i| c.pages[i].to_vec())
}

/// A page for a mutated or random input.
fn any_page(rng: &mut StdRng, c: &Corpus, rmid: u8) -> (Vec<u8>, &'static str) {
    let same_rmgr = c.pages_by_rmid.get(rmid as usize).map(Vec::as_slice).unwrap_or(&[]);
    match rng.gen_range(0..10) {
        0..=3 => match pick(rng, same_rmgr) {
            Some(&i) => (c.pages[i].to_vec(), "a real page of the rmgr"),
            None => (c.pages[rng.gen_range(0..c.pages.len())].to_vec(), "a real page"),
        },
        4..=5 => (c.pages[rng.gen_range(0..c.pages.len())].to_vec(), "a real page"),
        6 => (vec![0u8; BLCKSZ], "zeros"),
        7..=8 => {
            let mut page = vec![0u8; BLCKSZ];
            bufpage::page_init(&mut page, [0, 8, 16, 24][rng.gen_range(0..4)]);
            (page, "an empty page")
        }
        _ => {
            let mut page = vec![0u8; BLCKSZ];
            rng.fill(&mut page[..]);
            (page, "garbage")
        }
    }
}

fn mutated_real(rng: &mut StdRng, c: &Corpus) -> Case {
    let b = &c.blocks[rng.gen_range(0..c.blocks.len())];
    let mut rec = b.rec.clone();
    let mut tag = b.tag;
    let (mut page, mut how) = match real_page(c, b, rng.gen_bool(0.3)) {
        Some(p) => (p, "mutated real record on its page".to_string()),
        None => {
            let (p, what) = any_page(rng, c, rec.rmid);
            (p, format!("mutated real record on {what}"))
        }
    };
    let donor = &c.blocks[rng.gen_range(0..c.blocks.len())].rec;
    let mut version = b.version;
    for _ in 0..rng.gen_range(1..4) {
        match rng.gen_range(0..12) {
            0..=3 => {
                let mut data = rec.block_data.to_vec();
                mutate_bytes(rng, &mut data, &donor.block_data);
                rec.block_data = Bytes::from(data);
            }
            4..=5 => {
                let mut data = rec.main_data.to_vec();
                mutate_bytes(rng, &mut data, &donor.main_data);
                rec.main_data = Bytes::from(data);
            }
            6 => {
                rec.info = if rng.gen() { rec.info ^ (1 << rng.gen_range(0..8)) } else { rng.gen() }
            }
            7..=8 => mutate_page(rng, &mut page),
            9 => version = PgMajorVersion::ALL[rng.gen_range(0..4)],
            10 => {
                // Redo another block of the record with this block's data.
                if let Some(other) = pick(rng, &rec.blocks) {
                    rec.target = other.id;
                    tag = other.tag;
                }
            }
            _ => {
                for blk in &mut rec.blocks {
                    blk.will_init = rng.gen();
                }
                how.push_str(" (will_init changed)");
            }
        }
    }
    Case { rec, tag, lsn: b.lsn, version, page, how, stored: None }
}

/// Random bytes, many of them small 16-bit numbers (plausible offsets).
fn random_data(rng: &mut StdRng) -> Bytes {
    let len = match rng.gen_range(0..5) {
        0 => 0,
        1 => rng.gen_range(1..8),
        2 => rng.gen_range(1..64),
        3 => rng.gen_range(1..400),
        _ => rng.gen_range(1..9000),
    };
    let mut data = vec![0u8; len];
    rng.fill(&mut data[..]);
    // About half the 16-bit words small.
    for word in data.chunks_exact_mut(2) {
        if word[0] & 1 == 0 {
            word.copy_from_slice(&(u16::from(word[1]) % 300).to_le_bytes());
        }
    }
    Bytes::from(data)
}

fn random_record(rng: &mut StdRng, c: &Corpus, rmid: u8, info: u8) -> Case {
    let nblocks = rng.gen_range(1..=3u8);
    let blocks: Vec<BlockRef> = (0..nblocks)
        .map(|id| BlockRef {
            id,
            tag: BlockTag {
                spc_oid: 1663,
                db_oid: 5,
                rel_number: 16384 + rng.gen_range(0..3),
                fork: if rng.gen_bool(0.8) { 0 } else { rng.gen_range(0..4) },
                blkno: rng.gen_range(0..10),
            },
            will_init: rng.gen_bool(0.3),
            has_image: rng.gen_bool(0.1),
        })
        .collect();
    let target = blocks[rng.gen_range(0..blocks.len())];
    let rec = RedoRecord {
        rmid,
        info,
        xid: rng.gen_range(0..2000),
        target: target.id,
        blocks,
        block_data: random_data(rng),
        main_data: random_data(rng),
    };
    let (page, what) = any_page(rng, c, rmid);
    let version = PgMajorVersion::ALL[rng.gen_range(0..4)];
    let lsn = Lsn(rng.gen_range(0x0100_0000..0x1_0000_0000u64) & !7);
    let how = format!("random record on {what}");
    Case { rec, tag: target.tag, lsn, version, page, how, stored: None }
}

fn fuzz_case(seed: u64, c: &Corpus) -> Case {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut case = plain_case(&mut rng, c);
    if rng.gen_bool(0.125) {
        let mut stored = Vec::new();
        case.rec.encode(&mut stored);
        for _ in 0..rng.gen_range(0..4) {
            mutate_bytes(&mut rng, &mut stored, &[]);
        }
        case.stored = Some(stored);
        case.how.push_str(", through its stored form");
    }
    case
}

fn plain_case(rng: &mut StdRng, c: &Corpus) -> Case {
    match rng.gen_range(0..10) {
        0..=5 => mutated_real(rng, c),
        6 => {
            let b = &c.blocks[rng.gen_range(0..c.blocks.len())];
            let (page, what) = any_page(rng, c, b.rec.rmid);
            let how = format!("real record on {what}");
            Case {
                rec: b.rec.clone(),
                tag: b.tag,
                lsn: b.lsn,
                version: b.version,
                page,
                how,
                stored: None,
            }
        }
        _ => {
            let rmid = rng.gen_range(0..N_RMGRS);
            let info = rng.gen();
            random_record(rng, c, rmid, info)
        }
    }
}

// ---------------------------------------------------------------- running

thread_local! {
    static IN_FUZZ: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Panics inside `apply` are recorded, not printed; others print as usual.
fn install_panic_hook() {
    let default = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if IN_FUZZ.with(Cell::get) {
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string()));
        } else {
            default(info);
        }
    }));
}

#[derive(Default)]
struct Tally {
    inputs: u64,
    ok: BTreeMap<&'static str, u64>,
    faults: BTreeMap<&'static str, u64>,
    /// Failure (panic location or broken check) → count and first input.
    failures: BTreeMap<String, (u64, String)>,
}

impl Tally {
    fn fail(&mut self, key: String, input: String) {
        let entry = self.failures.entry(key).or_insert((0, input));
        entry.0 += 1;
    }
}

/// Shared with the watchdog: the input under way and since when.
struct Progress {
    index: AtomicU64,
    started_ms: AtomicU64,
    epoch: Instant,
}

fn run_case(case: &Case, label: &str, tally: &mut Tally, progress: &Progress) {
    progress.started_ms.store(progress.epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
    progress.index.fetch_add(1, Ordering::SeqCst);
    let mut page = case.page.clone();
    IN_FUZZ.with(|f| f.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let rec = match &case.stored {
            Some(stored) => RedoRecord::decode(&Bytes::copy_from_slice(stored)).ok()?,
            None => case.rec.clone(),
        };
        let result = apply(&mut page, case.tag, case.lsn, &rec, case.version);
        Some((rec, result))
    }));
    if let Ok(outcome) = &result {
        let applied_ok = outcome.as_ref().map(|(_, r)| r.is_ok());
        read_path_agrees(case, &page, applied_ok, label, tally);
    }
    IN_FUZZ.with(|f| f.set(false));
    tally.inputs += 1;
    match result {
        Ok(None) => *tally.faults.entry("stored form refused").or_default() += 1,
        Err(_) => {
            let msg = LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_default();
            let key = msg.lines().next().unwrap_or("panic").to_string();
            tally.fail(format!("panic: {key}"), format!("{label} {}", case.describe()));
        }
        Ok(Some((_, Err(e)))) => {
            let kind = match e.fault {
                Fault::Malformed(_) => "malformed",
                Fault::Page(_) => "page",
                Fault::Unsupported(_) => "unsupported",
            };
            *tally.faults.entry(kind).or_default() += 1;
        }
        Ok(Some((rec, Ok(())))) => {
            *tally.ok.entry(rmgr_name(rec.rmid)).or_default() += 1;
            let broken = if page.len() != BLCKSZ {
                Some(format!("page is {} bytes", page.len()))
            } else if page_lsn(&page) != case.lsn.0 {
                Some("pd_lsn is not the record's LSN".to_string())
            } else {
                // The checks apply() promises, per rmgr and page kind.
                check_page(&page, case.rec.rmid).err().map(|e| e.to_string())
            };
            if let Some(why) = broken {
                tally.fail(format!("Ok but {why}"), format!("{label} {}", case.describe()));
            }
        }
    }
}

/// The read path (`RedoRecordRef::decode` of the stored form, no
/// allocation; `apply_in_chain`, which checks only the header; `check_page`
/// once at the end) must end as `apply` did: both refuse, or both accept
/// and make the same page.
/// `applied_ok`: `apply`'s outcome, `None` when the stored form was refused.
fn read_path_agrees(
    case: &Case,
    applied: &[u8],
    applied_ok: Option<bool>,
    label: &str,
    tally: &mut Tally,
) {
    let mut page = case.page.clone();
    IN_FUZZ.with(|f| f.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let rec = match &case.stored {
            Some(stored) => RedoRecordRef::decode(stored).ok()?,
            None => case.rec.as_ref(),
        };
        let r = apply_in_chain(&mut page, case.tag, case.lsn, &rec, case.version);
        Some(r.is_ok() && check_page(&page, rec.rmid).is_ok())
    }));
    IN_FUZZ.with(|f| f.set(false));
    let why = match result {
        Err(_) => Some("the read path panicked".to_string()),
        Ok(ok) if ok != applied_ok => Some(format!("read path {ok:?}, apply {applied_ok:?}")),
        Ok(Some(true)) if page != applied => Some("read path made another page".to_string()),
        Ok(_) => None,
    };
    if let Some(why) = why {
        tally.fail(why, format!("{label} {}", case.describe()));
    }
}

/// Aborts the process if one input runs longer than `limit`.
fn start_watchdog(progress: Arc<Progress>, limit: Duration) {
    std::thread::spawn(move || {
        let mut seen = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let index = progress.index.load(Ordering::SeqCst);
            let started = progress.started_ms.load(Ordering::SeqCst);
            let now = progress.epoch.elapsed().as_millis() as u64;
            if index == seen && now.saturating_sub(started) > limit.as_millis() as u64 {
                eprintln!("redo_fuzz: input #{index} has run for over {limit:?}: a hang");
                std::process::abort();
            }
            seen = index;
        }
    });
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn redo_never_panics_and_keeps_page_invariants() {
    let iterations = env_u64("REDO_FUZZ_ITERATIONS", 20_000);
    let seed = env_u64("REDO_FUZZ_SEED", 0);
    let stall = Duration::from_secs(env_u64("REDO_FUZZ_STALL_SECS", 60));
    eprintln!("redo_fuzz: seed {seed}, {iterations} iterations");
    let began = Instant::now();
    let corpus = load_corpus();
    eprintln!(
        "redo_fuzz: corpus of {} real blocks, {} pages, loaded in {:.1?}",
        corpus.blocks.len(),
        corpus.pages.len(),
        began.elapsed()
    );
    install_panic_hook();
    let progress = Arc::new(Progress {
        index: AtomicU64::new(0),
        started_ms: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    start_watchdog(progress.clone(), stall);
    let mut tally = Tally::default();

    for (i, b) in corpus.blocks.iter().enumerate() {
        for own_image in [false, true] {
            let Some(page) = real_page(&corpus, b, own_image) else { continue };
            let how =
                if own_image { "real record on its own image" } else { "real record on its page" };
            let case = Case {
                rec: b.rec.clone(),
                tag: b.tag,
                lsn: b.lsn,
                version: b.version,
                page,
                how: how.into(),
                stored: None,
            };
            run_case(&case, &format!("real block #{i}"), &mut tally, &progress);
        }
    }
    let real_inputs = tally.inputs;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED);
    for rmid in 0..N_RMGRS {
        for info in 0..=255u8 {
            let case = random_record(&mut rng, &corpus, rmid, info);
            run_case(
                &case,
                &format!("every-info rmgr {rmid} info {info:#04x}"),
                &mut tally,
                &progress,
            );
        }
    }
    for i in 0..iterations {
        let case = fuzz_case(seed.wrapping_add(i), &corpus);
        let label = format!("input {i} (REDO_FUZZ_SEED={})", seed.wrapping_add(i));
        run_case(&case, &label, &mut tally, &progress);
    }

    eprintln!(
        "redo_fuzz: {} inputs ({real_inputs} unmutated real, {} every-info, {iterations} seeded) in {:.1?}; Ok by rmgr {:?}; faults {:?}",
        tally.inputs,
        N_RMGRS as u64 * 256,
        began.elapsed(),
        tally.ok,
        tally.faults
    );
    if !tally.failures.is_empty() {
        let mut report = String::new();
        for (key, (count, input)) in &tally.failures {
            report.push_str(&format!("\n{count} x {key}\n  first: {input}\n"));
        }
        panic!("redo_fuzz found {} kinds of failure:{report}", tally.failures.len());
    }
}
