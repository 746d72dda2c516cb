use std::path::Path;

use io_engine::{IoEngine, IoEngineKind};
use utils::lsn::Lsn;

use super::segment::{self, SegmentRange, MAX_SEGMENT_ENTRIES};
use super::{CommitTime, CommitTimes, CommitTimesError, LsnForTimestamp, COMMIT_TIMES_DIR};

fn engine() -> IoEngine {
    IoEngine::new(IoEngineKind::StdFs).unwrap()
}

fn ct(lsn: u64, ts: i64) -> CommitTime {
    CommitTime { lsn: Lsn(lsn), ts }
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join(COMMIT_TIMES_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn segments_round_trip_and_varints_cover_extremes() {
    let entries = vec![ct(0x100, -5), ct(0x101, i64::MAX), ct(u64::MAX, i64::MIN)];
    let range = SegmentRange::of(&entries);
    assert_eq!(SegmentRange::parse(&range.file_name()), Some(range));
    let bytes = segment::encode(&entries);
    assert_eq!(segment::decode(Path::new("x"), range, &bytes).unwrap(), entries);
    for v in [0, 1, 127, 128, u64::MAX] {
        assert_eq!(segment::varint_roundtrip(v), Some(v));
    }
    for v in [0, -1, 1, i64::MIN, i64::MAX] {
        assert_eq!(segment::zigzag_roundtrip(v), v);
    }
    assert_eq!(SegmentRange::parse("0000000000000001-0000000000000002.ct"), None);
    // A range whose first LSN is above its last is not a segment name.
    assert_eq!(SegmentRange::parse("0000000000000003-0000000000000002-0000000000000000.ct"), None);
}

/// Every damage is an error naming the file; none decodes to other data.
#[test]
fn damaged_segments_are_errors_naming_the_file() {
    let entries: Vec<CommitTime> = (1..100).map(|i| ct(i * 0x40, i as i64 * 1000)).collect();
    let range = SegmentRange::of(&entries);
    let good = segment::encode(&entries);
    let path = Path::new("/tl/commit_times/seg.ct");
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        let err = segment::decode(path, range, &bad).unwrap_err();
        assert!(
            err.to_string().starts_with("commit-time segment /tl/commit_times/seg.ct: "),
            "{err}"
        );
    }
    let err = segment::decode(path, range, &good[..good.len() - 1]).unwrap_err();
    assert!(err.to_string().contains("CRC-32C"), "{err}");
    let mut other = range;
    other.max_ts += 1;
    let err = segment::decode(path, other, &good).unwrap_err();
    assert!(err.to_string().contains("the header says"), "{err}");
}

async fn lookup(idx: &CommitTimes, ts: i64, min: u64) -> LsnForTimestamp {
    idx.lsn_for_timestamp(ts, Lsn(min)).await.unwrap()
}

/// Each kind, at exact boundaries: a commit at exactly T is included.
#[tokio::test]
async fn lookups_at_exact_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let idx = CommitTimes::empty(engine(), dir.path());
    use LsnForTimestamp::*;
    assert_eq!(lookup(&idx, 100, 0x10).await, NoData(Lsn(0x10)));
    // Timestamps not monotonic: 300 is before 250 in LSN order.
    idx.record([ct(0x100, 100), ct(0x200, 200), ct(0x300, 300), ct(0x400, 250), ct(0x500, 400)]);
    assert_eq!(lookup(&idx, 99, 0x10).await, Past(Lsn(0x10)));
    assert_eq!(lookup(&idx, 100, 0x10).await, Present(Lsn(0x100)));
    assert_eq!(lookup(&idx, 199, 0x10).await, Present(Lsn(0x100)));
    assert_eq!(lookup(&idx, 200, 0x10).await, Present(Lsn(0x200)));
    // 0x400 (250) is after 0x300 (300): the prefix ending at 0x200 is the longest <= 260.
    assert_eq!(lookup(&idx, 260, 0x10).await, Present(Lsn(0x200)));
    assert_eq!(lookup(&idx, 300, 0x10).await, Present(Lsn(0x400)));
    assert_eq!(lookup(&idx, 400, 0x10).await, Future(Lsn(0x500)));
    // Below the lowest restorable LSN: raised to it while no commit lies between.
    assert_eq!(lookup(&idx, 200, 0x250).await, Present(Lsn(0x250)));
    assert_eq!(lookup(&idx, 150, 0x250).await, Past(Lsn(0x250)));
    assert_eq!(lookup(&idx, 150, 0x200).await, Past(Lsn(0x200)));
    assert_eq!(idx.timestamp_of_lsn(Lsn(0xff)).await.unwrap(), None);
    assert_eq!(idx.timestamp_of_lsn(Lsn(0x100)).await.unwrap(), Some(100));
    assert_eq!(idx.timestamp_of_lsn(Lsn(0x3ff)).await.unwrap(), Some(300));
    assert_eq!(idx.timestamp_of_lsn(Lsn(u64::MAX)).await.unwrap(), Some(400));
    // Durable: the same answers from the files after a reload.
    idx.persist(Lsn(0x500)).await.unwrap();
    let idx = CommitTimes::load(engine(), dir.path(), Lsn(0x500)).await.unwrap();
    assert_eq!(lookup(&idx, 260, 0x10).await, Present(Lsn(0x200)));
    assert_eq!(lookup(&idx, 400, 0x10).await, Future(Lsn(0x500)));
}

/// Many segments: answers come from sealed files, the tail and pending
/// entries alike; a reload drops what the manifest does not cover, and
/// ingest adds it again without duplicates.
#[tokio::test]
async fn sealed_segments_reload_and_drop_beyond_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let idx = CommitTimes::empty(engine(), dir.path());
    let n = MAX_SEGMENT_ENTRIES as u64 * 2 + 10;
    let all: Vec<CommitTime> = (1..=n).map(|i| ct(i * 8, i as i64 * 10)).collect();
    idx.record(all[..100].iter().copied());
    idx.persist(Lsn(50 * 8)).await.unwrap();
    idx.record(all.iter().copied()); // the first 100 again: ignored
    idx.persist(Lsn((n - 5) * 8)).await.unwrap();
    assert_eq!(files(dir.path()).len(), 3, "two sealed segments and a tail");
    assert_eq!(idx.stats(), (10, 2), "a tail of 5 and 5 pending");
    for i in [1, 2, 16384, 16385, 16386, n - 6, n - 5, n - 4, n] {
        let want = if i == n {
            LsnForTimestamp::Future(Lsn(n * 8))
        } else {
            LsnForTimestamp::Present(Lsn(i * 8))
        };
        assert_eq!(lookup(&idx, i as i64 * 10 + 5, 0).await, want, "entry {i}");
        assert_eq!(idx.timestamp_of_lsn(Lsn(i * 8 + 7)).await.unwrap(), Some(i as i64 * 10));
    }
    // A crash after the index but before the manifest: the manifest says n-20.
    let idx = CommitTimes::load(engine(), dir.path(), Lsn((n - 20) * 8)).await.unwrap();
    assert_eq!(lookup(&idx, i64::MAX, 0).await, LsnForTimestamp::Future(Lsn((n - 20) * 8)));
    idx.record(all.iter().copied());
    assert_eq!(lookup(&idx, i64::MAX, 0).await, LsnForTimestamp::Future(Lsn(n * 8)));
    idx.persist(Lsn(n * 8)).await.unwrap();
    let idx = CommitTimes::load(engine(), dir.path(), Lsn(n * 8)).await.unwrap();
    assert_eq!(lookup(&idx, 55, 0).await, LsnForTimestamp::Present(Lsn(5 * 8)));
    assert_eq!(
        lookup(&idx, (n as i64 - 1) * 10, 0).await,
        LsnForTimestamp::Present(Lsn((n - 1) * 8))
    );
}

/// A tail rewrite cut short leaves the old tail beside the new one: the
/// longer wins. A real overlap is an error naming both files.
#[tokio::test]
async fn half_done_rewrites_resolve_and_overlaps_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let idx = CommitTimes::empty(engine(), dir.path());
    idx.record([ct(0x10, 1), ct(0x20, 2)]);
    idx.persist(Lsn(0x20)).await.unwrap();
    let old = files(dir.path());
    let old_bytes = std::fs::read(dir.path().join(COMMIT_TIMES_DIR).join(&old[0])).unwrap();
    idx.record([ct(0x30, 3)]);
    idx.persist(Lsn(0x30)).await.unwrap();
    let ct_dir = dir.path().join(COMMIT_TIMES_DIR);
    std::fs::write(ct_dir.join(&old[0]), &old_bytes).unwrap();
    std::fs::write(ct_dir.join("x.ct.___temp"), b"junk").unwrap();
    let idx = CommitTimes::load(engine(), dir.path(), Lsn(0x30)).await.unwrap();
    assert_eq!(files(dir.path()).len(), 1);
    assert_eq!(idx.timestamp_of_lsn(Lsn(0x30)).await.unwrap(), Some(3));

    let overlapping = [ct(0x18, 9), ct(0x28, 9)];
    let name = SegmentRange::of(&overlapping).file_name();
    std::fs::write(ct_dir.join(&name), segment::encode(&overlapping)).unwrap();
    let err = CommitTimes::load(engine(), dir.path(), Lsn(0x30)).await.err().unwrap();
    assert!(matches!(err, CommitTimesError::Overlap { .. }), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
}

/// A damaged segment: the lookup that needs it fails naming it.
#[tokio::test]
async fn a_damaged_file_fails_its_lookup_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let idx = CommitTimes::empty(engine(), dir.path());
    let n = MAX_SEGMENT_ENTRIES as u64 + 1;
    idx.record((1..=n).map(|i| ct(i, i as i64)));
    idx.persist(Lsn(n)).await.unwrap();
    let sealed = files(dir.path())[0].clone();
    let path = dir.path().join(COMMIT_TIMES_DIR).join(&sealed);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let err = idx.lsn_for_timestamp(10, Lsn(0)).await.unwrap_err();
    assert!(err.to_string().contains(&sealed) && err.to_string().contains("CRC"), "{err}");
}

/// GC thinning keeps the newest entry at or below the cutoff, so answers
/// at or above it do not change; older times answer `past`.
#[tokio::test]
async fn thinning_keeps_answers_above_the_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let idx = CommitTimes::empty(engine(), dir.path());
    let per = MAX_SEGMENT_ENTRIES as u64;
    let n = per * 4 + 3;
    idx.record((1..=n).map(|i| ct(i * 8, i as i64)));
    idx.persist(Lsn(n * 8)).await.unwrap();
    assert_eq!(idx.thin(Lsn(per * 8 - 1)).await.unwrap(), 0, "no segment ends below the cutoff");
    let cutoff = Lsn((per * 3 + 5) * 8); // inside the fourth segment
    let before: Vec<_> = [per * 3 + 4, per * 3 + 5, per * 4, n].iter().map(|&i| i as i64).collect();
    let mut answers = Vec::new();
    for &t in &before {
        answers.push(lookup(&idx, t, cutoff.0).await);
    }
    assert_eq!(idx.thin(cutoff).await.unwrap(), 2, "the first two of three sealed below");
    assert_eq!(files(dir.path()).len(), 3);
    for (t, a) in before.iter().zip(&answers) {
        assert_eq!(lookup(&idx, *t, cutoff.0).await, *a, "at {t}");
    }
    assert_eq!(lookup(&idx, 5, cutoff.0).await, LsnForTimestamp::Past(cutoff));
    let idx = CommitTimes::load(engine(), dir.path(), Lsn(n * 8)).await.unwrap();
    assert_eq!(idx.stats(), (3, 4 - 2));
}

#[test]
fn pg_timestamps_convert_both_ways() {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
    let ts = super::pg_timestamp(t).unwrap();
    assert_eq!(ts, (1_700_000_000 - 946_684_800) * 1_000_000 + 123_456);
    assert_eq!(super::system_time(ts), Some(t));
    assert_eq!(super::system_time(-946_684_800 * 1_000_000), Some(std::time::UNIX_EPOCH));
    assert_eq!(super::system_time(-946_684_800 * 1_000_000 - 1), None);
}

/// Searches below a ceiling (a branch's ancestor below the branch point)
/// never see an entry above it, wherever the ceiling falls: inside a
/// sealed segment, between segments, in the tail, in pending entries.
#[tokio::test]
async fn searches_below_a_ceiling_never_pass_it() {
    use super::Found;
    let dir = tempfile::tempdir().unwrap();
    let idx = CommitTimes::empty(engine(), dir.path());
    let n = MAX_SEGMENT_ENTRIES as u64 * 2 + 10;
    idx.record((1..=n).map(|i| ct(i * 8, i as i64 * 10)));
    idx.persist(Lsn((n - 5) * 8)).await.unwrap();
    assert_eq!(idx.stats().1, 2, "two sealed segments");
    let full = MAX_SEGMENT_ENTRIES as u64;
    for c in [1, 100, full, full + 1, full + 7, 2 * full, 2 * full + 3, n - 5, n - 2, n] {
        let ceiling = Lsn(c * 8 + 3); // between entries c and c+1
                                      // A time after everything: the last entry at or below the ceiling.
        let found = idx.find_after(i64::MAX, ceiling).await.unwrap();
        assert_eq!(found, Found::AllBefore(Lsn(c * 8)), "ceiling after entry {c}");
        // A time after entry c-1: entry c is the first after it.
        let found = idx.find_after((c as i64 - 1) * 10 + 5, ceiling).await.unwrap();
        let Found::After { first_after, before } = found else { panic!("{found:?}") };
        assert_eq!(first_after, ct(c * 8, c as i64 * 10), "ceiling after entry {c}");
        assert_eq!(before, (c > 1).then(|| Lsn((c - 1) * 8)));
        // A time between entry c and c+1 answers entry c, not c+1.
        let found = idx.find_after(c as i64 * 10 + 5, ceiling).await.unwrap();
        assert_eq!(found, Found::AllBefore(Lsn(c * 8)), "ceiling after entry {c}");
    }
    assert_eq!(idx.find_after(0, Lsn(7)).await.unwrap(), Found::Nothing);
}
