use super::*;
use crate::tenant::lsn_by_time::unix_secs;

fn sample() -> TimelineMetadata {
    let mut lsn_by_time = LsnTimeRecord::default();
    lsn_by_time.record(unix_secs(1_700_000_000), Lsn(0x100));
    lsn_by_time.record(unix_secs(1_700_000_060), Lsn(0x1234));
    TimelineMetadata {
        disk_consistent_lsn: Lsn(0x1234),
        initial_lsn: Lsn(0x10),
        pg_version: 15,
        layers: vec![
            LayerEntry { name: "a__b".into(), size_bytes: 4096, level: LayerLevel::L1 },
            LayerEntry { name: "c__d".into(), size_bytes: 1 << 33, level: LayerLevel::L0 },
            LayerEntry { name: "e__f".into(), size_bytes: 8192, level: LayerLevel::Image },
        ],
        empty_strata: vec![(LayerLevel::L1, Lsn(0x20)..Lsn(0x30))],
        gc_cutoff: Lsn(0x40),
        lsn_by_time,
        ancestor_timeline_id: None,
        ancestor_lsn: Lsn(0),
    }
}

/// `sample()` as a branch of another timeline at its `initial_lsn`.
fn branch_sample() -> TimelineMetadata {
    TimelineMetadata {
        ancestor_timeline_id: Some(TimelineId([7; 16])),
        ancestor_lsn: Lsn(0x10),
        ..sample()
    }
}

/// `b` with its last four bytes replaced by a valid checksum of the rest,
/// so only the structure checks can refuse it.
fn with_crc(mut b: Vec<u8>) -> Vec<u8> {
    if b.len() >= 4 {
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
    }
    b
}

fn encode_v2(md: &TimelineMetadata) -> Vec<u8> {
    md.encode_v2()
}

#[test]
fn round_trip_and_corruption() {
    let m = sample();
    let mut b = m.encode();
    assert_eq!(TimelineMetadata::decode(&b).unwrap(), Decoded::Manifest(m));
    b[9] ^= 1;
    assert!(TimelineMetadata::decode(&b).unwrap_err().to_string().contains("checksum"));
    assert!(TimelineMetadata::decode(&b[..10]).is_err());
    let empty = TimelineMetadata::new_empty(Lsn(0x10), 16);
    assert_eq!(TimelineMetadata::decode(&empty.encode()).unwrap(), Decoded::Manifest(empty));
}

#[test]
fn every_bit_flip_is_refused() {
    let b = sample().encode();
    for i in 0..b.len() * 8 {
        let mut t = b.clone();
        t[i / 8] ^= 1 << (i % 8);
        assert!(TimelineMetadata::decode(&t).is_err(), "bit {i} flipped was accepted");
    }
}

#[test]
fn every_truncation_is_refused() {
    for b in [sample().encode(), encode_v2(&sample())] {
        for len in 0..b.len() {
            let t = with_crc(b[..len].to_vec());
            assert!(TimelineMetadata::decode(&t).is_err(), "truncated to {len} bytes was accepted");
        }
        // Trailing bytes too.
        let t = with_crc([&b[..], &[0; 5]].concat());
        assert!(TimelineMetadata::decode(&t).is_err(), "trailing bytes were accepted");
    }
}

/// Fields that pass the checksum but break the format are refused, each
/// with a message saying which.
#[test]
fn bad_fields_are_refused() {
    let good = sample().encode();
    let first_level = FIXED_LEN + 8 + 4;
    let layers_end = first_level + sample().layers.iter().map(|l| 11 + l.name.len()).sum::<usize>();
    let cases: Vec<(usize, Vec<u8>, &str)> = vec![
        (first_level, vec![3], "unknown level 3"),
        (layers_end + 4, vec![2], "bad level 2"),
        // The empty stratum's end at its start.
        (layers_end + 4 + 9, 0x20u64.to_le_bytes().to_vec(), "empty range"),
        (FIXED_LEN + 8, u32::MAX.to_le_bytes().to_vec(), "layer count"),
        (4, 9u16.to_le_bytes().to_vec(), "unsupported metadata version 9"),
    ];
    for (at, bytes, msg) in cases {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(&bytes);
        let err = format!("{:#}", TimelineMetadata::decode(&with_crc(b)).unwrap_err());
        assert!(err.contains(msg), "patch at {at}: {err}");
    }
    // LSN-by-time samples out of order.
    let mut md = sample();
    md.lsn_by_time = LsnTimeRecord::default();
    let mut b = md.encode();
    b.truncate(b.len() - 9); // the count, the ancestor flag, the checksum
    b.extend_from_slice(&2u32.to_le_bytes());
    for (t, lsn) in [(10u64, 5u64), (9, 6)] {
        b.extend_from_slice(&t.to_le_bytes());
        b.extend_from_slice(&lsn.to_le_bytes());
    }
    let err =
        format!("{:#}", TimelineMetadata::decode(&with_crc([b, vec![0; 5]].concat())).unwrap_err());
    assert!(err.contains("out of order"), "{err}");
}

#[test]
fn version_2_is_read_as_all_l0() {
    let mut md = sample();
    let Decoded::Manifest(v2) = TimelineMetadata::decode(&encode_v2(&md)).unwrap() else {
        panic!("not a manifest")
    };
    for l in &mut md.layers {
        l.level = LayerLevel::L0;
    }
    md.empty_strata.clear();
    md.gc_cutoff = Lsn(0);
    md.lsn_by_time = LsnTimeRecord::default();
    assert_eq!(v2, md);
    // Written back, it is version 4.
    assert_eq!(u16::from_le_bytes(v2.encode()[4..6].try_into().unwrap()), VERSION);
}

#[test]
fn version_1_is_read_without_layers() {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION_V1.to_le_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&0x1234u64.to_le_bytes());
    b.extend_from_slice(&0x10u64.to_le_bytes());
    b.extend_from_slice(&15u32.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    let Decoded::V1(md) = TimelineMetadata::decode(&b).unwrap() else { panic!("not v1") };
    assert_eq!(
        (md.disk_consistent_lsn, md.initial_lsn, md.layers.len()),
        (Lsn(0x1234), Lsn(0x10), 0)
    );
}

#[test]
fn the_size_bound_holds_a_full_manifest() {
    let entry = MAX_LAYER_ENTRY;
    let full = FIXED_LEN
        + 8
        + 4
        + MAX_MANIFEST_LAYERS * entry
        + 4
        + 4
        + MAX_LSN_TIME_SAMPLES * 16
        + 25
        + 4;
    assert_eq!(full, MAX_METADATA_BYTES);
}

#[test]
fn a_branch_round_trips_and_damage_is_refused() {
    let m = branch_sample();
    let b = m.encode();
    assert_eq!(u16::from_le_bytes(b[4..6].try_into().unwrap()), 4);
    assert_eq!(TimelineMetadata::decode(&b).unwrap(), Decoded::Manifest(m.clone()));
    assert_eq!(m.ancestor(), Some((TimelineId([7; 16]), Lsn(0x10))));
    for i in 0..b.len() * 8 {
        let mut t = b.clone();
        t[i / 8] ^= 1 << (i % 8);
        assert!(TimelineMetadata::decode(&t).is_err(), "bit {i} flipped was accepted");
    }
    let flag = b.len() - 4 - 25;
    let cases: Vec<(usize, Vec<u8>, &str)> = vec![
        (flag, vec![2], "bad ancestor flag 2"),
        (flag + 17, 0u64.to_le_bytes().to_vec(), "at LSN 0/0"),
        (flag + 17, 0x11u64.to_le_bytes().to_vec(), "not at its branch point"),
    ];
    for (at, bytes, msg) in cases {
        let mut t = b.clone();
        t[at..at + bytes.len()].copy_from_slice(&bytes);
        let err = format!("{:#}", TimelineMetadata::decode(&with_crc(t)).unwrap_err());
        assert!(err.contains(msg), "patch at {at}: {err}");
    }
    for len in 0..b.len() {
        let t = with_crc(b[..len].to_vec());
        assert!(TimelineMetadata::decode(&t).is_err(), "truncated to {len} bytes was accepted");
    }
}

/// A version-3 manifest (the previous daemon's) loads as a timeline
/// without an ancestor, and is written back as version 4.
#[test]
fn version_3_loads_without_ancestor() {
    let md = sample();
    let v3 = md.encode_v3();
    assert_eq!(u16::from_le_bytes(v3[4..6].try_into().unwrap()), 3);
    assert_eq!(v3.len() + 1, md.encode().len());
    let Decoded::Manifest(back) = TimelineMetadata::decode(&v3).unwrap() else {
        panic!("not a manifest")
    };
    assert_eq!(back, md);
    assert_eq!(back.ancestor(), None);
    // Trailing bytes after a version-3 manifest are refused too.
    let t = with_crc([&v3[..], &[0; 5]].concat());
    assert!(TimelineMetadata::decode(&t).is_err());
}
