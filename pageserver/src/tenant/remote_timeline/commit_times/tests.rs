use std::collections::BTreeMap;

use utils::lsn::Lsn;

use super::*;
use crate::tenant::commit_times::{CommitTime, CommitTimes};
use crate::tenant::metadata::TimelineMetadata;
use crate::tenant::remote_timeline::index_part::IndexPart;

fn ct(lsn: u64, ts: i64) -> CommitTime {
    CommitTime { lsn: Lsn(lsn), ts }
}

fn seg(first: u64, last: u64, generation: u32) -> (String, IndexSegment) {
    let name = SegmentRange::of(&[ct(first, 1), ct(last, 2)]).file_name();
    (name, IndexSegment { file_size: 10, crc32c: 1, generation: Generation(generation) })
}

/// An index written before `commit_times` existed loads without it; one
/// with it round-trips; the field is refused when it is inconsistent,
/// naming what is wrong.
#[test]
fn the_index_field_is_optional_versioned_and_checked() {
    let md = TimelineMetadata::new_empty(Lsn(0x10), 16);
    let ip = IndexPart::new(Generation(2), &md, &BTreeMap::new(), None);
    let json = String::from_utf8(ip.to_json()).unwrap();
    assert!(!json.contains("commit_times"), "{json}");
    let old = IndexPart::from_json(json.as_bytes()).unwrap();
    assert_eq!(old.commit_times, None);

    let segments: BTreeMap<_, _> = [seg(0x20, 0x40, 1), seg(0x48, 0x80, 2)].into();
    let with = IndexPart { commit_times: Some(IndexCommitTimes::new(segments.clone())), ..ip };
    let back = IndexPart::from_json(&with.to_json()).unwrap();
    assert_eq!(back, with);
    let json = String::from_utf8(with.to_json()).unwrap();
    assert!(json.contains(r#""commit_times":{"version":1,"segments":{"#), "{json}");

    let refused = |f: &dyn Fn(&mut IndexCommitTimes)| {
        let mut ip = with.clone();
        f(ip.commit_times.as_mut().unwrap());
        format!("{:#}", IndexPart::from_json(&ip.to_json()).unwrap_err())
    };
    let e = refused(&|c| c.version = 7);
    assert!(e.contains("commit_times version 7"), "{e}");
    let e = refused(&|c| {
        c.segments.insert("junk.ct".into(), seg(1, 2, 1).1);
    });
    assert!(e.contains("junk.ct, not a segment name"), "{e}");
    let e = refused(&|c| c.segments.values_mut().for_each(|s| s.generation = Generation(3)));
    assert!(e.contains("of generation 3"), "{e}");
    let (name, s) = seg(0x30, 0x50, 1);
    let e = refused(&|c| {
        c.segments.insert(name.clone(), s);
    });
    assert!(e.contains("overlap") && e.contains(&name), "{e}");
    // An unknown key in the field is refused (a newer format).
    let e = String::from_utf8(with.to_json())
        .unwrap()
        .replace(r#""version":1,"#, r#""x":1,"version":1,"#);
    assert!(IndexPart::from_json(e.as_bytes()).is_err());
}

/// Attach's download: segments land where `CommitTimes::load` finds them;
/// a missing, damaged or misrecorded object fails it, naming the object.
#[tokio::test]
async fn downloads_check_each_segment_and_name_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let rs = crate::remote_storage::local_for_tests(&dir.path().join("remote"), "");
    let engine = io_engine::IoEngine::new(io_engine::IoEngineKind::StdFs).unwrap();
    let (t, tl) = (TenantId::generate(), TimelineId::generate());
    let entries: Vec<CommitTime> = (1..=50).map(|i| ct(0x100 + i * 8, i as i64 * 1000)).collect();
    let mut segments = BTreeMap::new();
    for chunk in entries.chunks(25) {
        let name = SegmentRange::of(chunk).file_name();
        let bytes = crate::tenant::commit_times::encode_for_tests(chunk);
        let s = IndexSegment {
            file_size: bytes.len() as u64,
            crc32c: crc32c::crc32c(&bytes),
            generation: Generation(1),
        };
        rs.put(&segment_key(t, tl, &name, Generation(1)), bytes.into()).await.unwrap();
        segments.insert(name, s);
    }
    let index = IndexCommitTimes::new(segments);
    let tl_dir = dir.path().join("tl");
    download_segments(&rs, &engine, (t, tl), &index, &tl_dir).await.unwrap();
    let loaded = CommitTimes::load(engine.clone(), &tl_dir, Lsn(u64::MAX)).await.unwrap();
    assert_eq!(loaded.timestamp_of_lsn(Lsn(0x100 + 30 * 8)).await.unwrap(), Some(30_000));

    let (first, s) = index.segments.iter().next().map(|(n, s)| (n.clone(), *s)).unwrap();
    let key = segment_key(t, tl, &first, Generation(1));
    let other = dir.path().join("other");
    let mut bad = index.clone();
    bad.segments.get_mut(&first).unwrap().crc32c ^= 1;
    let err = download_segments(&rs, &engine, (t, tl), &bad, &other).await.unwrap_err();
    // Typed, so that attach refuses the tenant (409) as for a missing object.
    let damaged = err.downcast_ref::<DamagedSegment>().expect("a DamagedSegment");
    assert!(damaged.key.ends_with(&key), "{damaged}");
    let e = format!("{err:#}");
    assert!(e.contains(&key) && e.contains("CRC-32C"), "{e}");
    // The right CRC of wrong bytes: the format check names the object.
    let junk = vec![7u8; s.file_size as usize];
    rs.put(&key, junk.clone().into()).await.unwrap();
    let mut recorded = index.clone();
    recorded.segments.get_mut(&first).unwrap().crc32c = crc32c::crc32c(&junk);
    let e = format!(
        "{:#}",
        download_segments(&rs, &engine, (t, tl), &recorded, &other).await.unwrap_err()
    );
    assert!(e.contains(&key) && e.contains("commit-time segment"), "{e}");
    rs.delete(&key).await.unwrap();
    let e = format!(
        "{:#}",
        download_segments(&rs, &engine, (t, tl), &index, &other).await.unwrap_err()
    );
    assert!(e.contains(&key) && e.contains("not found"), "{e}");
}

/// The completeness check (upload and attach) covers segments: one the
/// store lacks, or holds at another size, is named like a layer.
#[tokio::test]
async fn the_missing_object_check_names_segments() {
    use crate::tenant::remote_timeline::{check_index_objects, index_key, SizeCheck};
    let dir = tempfile::tempdir().unwrap();
    let rs = crate::remote_storage::local_for_tests(dir.path(), "");
    let (t, tl) = (TenantId::generate(), TimelineId::generate());
    let md = TimelineMetadata::new_empty(Lsn(0x10), 16);
    let (name, s) = seg(0x20, 0x40, 1);
    let ip = IndexPart {
        commit_times: Some(IndexCommitTimes::new([(name.clone(), s)].into())),
        ..IndexPart::new(Generation(1), &md, &BTreeMap::new(), None)
    };
    rs.put(&index_key(t, tl, Generation(1)), ip.to_json().into()).await.unwrap();
    let key = segment_key(t, tl, &name, Generation(1));
    assert!(key.ends_with(&format!("{name}-00000001")), "{key}");
    for sizes in [SizeCheck::Missing, SizeCheck::AtDownload] {
        assert_eq!(check_index_objects(&rs, t, tl, &ip, sizes).await.unwrap(), vec![key.clone()]);
    }
    rs.put(&key, vec![0u8; 3].into()).await.unwrap(); // the index says 10 bytes
    assert_eq!(
        check_index_objects(&rs, t, tl, &ip, SizeCheck::Missing).await.unwrap(),
        vec![key.clone()]
    );
    assert!(check_index_objects(&rs, t, tl, &ip, SizeCheck::AtDownload).await.unwrap().is_empty());
    rs.put(&key, vec![0u8; 10].into()).await.unwrap();
    assert!(check_index_objects(&rs, t, tl, &ip, SizeCheck::Missing).await.unwrap().is_empty());
}
