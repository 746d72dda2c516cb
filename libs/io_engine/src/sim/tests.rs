use std::collections::HashSet;
use std::path::Path;

use super::*;
use crate::{AlignedBuf, IoEngine};

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

async fn write(e: &IoEngine, path: &Path, data: &[u8], sync: bool) {
    let f = e.open(path, OpenMode { write: true, create: true, ..OpenMode::READ }).await.unwrap();
    let (_, r) = f.write_all_at(AlignedBuf::from_slice(data), 0).await;
    r.unwrap();
    if sync {
        f.sync_all().await.unwrap();
    }
}

async fn read(e: &IoEngine, path: &Path) -> Option<Vec<u8>> {
    match e.read_file(path, 1 << 20).await {
        Ok(b) => Some(b),
        Err(err) if err.kind() == io::ErrorKind::NotFound => None,
        Err(err) => panic!("{err}"),
    }
}

#[tokio::test]
async fn synced_data_and_fsynced_entries_survive_every_crash() {
    for seed in 0..50 {
        let fs = SimFs::new(seed);
        let e = IoEngine::simulated(fs.clone());
        e.create_dir_all(&p("/d")).await.unwrap();
        e.fsync_dir(&p("/")).await.unwrap();
        write(&e, &p("/d/f"), b"durable", true).await;
        e.fsync_dir(&p("/d")).await.unwrap();
        fs.crash();
        assert_eq!(read(&e, &p("/d/f")).await.as_deref(), Some(&b"durable"[..]), "seed {seed}");
    }
}

#[tokio::test]
async fn unsynced_writes_are_kept_dropped_or_torn_at_sector_boundaries() {
    let data: Vec<u8> = (0..4 * SECTOR).map(|i| (i % 251) as u8 + 1).collect();
    let mut outcomes = HashSet::new();
    for seed in 0..200 {
        let fs = SimFs::new(seed);
        let e = IoEngine::simulated(fs.clone());
        write(&e, &p("/f"), b"", true).await; // an empty, durable file
        e.fsync_dir(&p("/")).await.unwrap();
        let f = e.open(&p("/f"), OpenMode::READ_WRITE).await.unwrap();
        let (_, r) = f.write_all_at(AlignedBuf::from_slice(&data), 0).await;
        r.unwrap();
        fs.crash();
        let got = read(&e, &p("/f")).await.expect("the entry was fsynced");
        assert!(
            got.len() % SECTOR == 0 && got[..] == data[..got.len()],
            "seed {seed}: {} bytes",
            got.len()
        );
        outcomes.insert(got.len());
        // The handle opened before the crash is stale.
        let (_, r) = f.read_exact_at(AlignedBuf::with_capacity(1), 0, 1).await;
        assert!(r.unwrap_err().to_string().contains("stale"));
    }
    assert!(outcomes.contains(&0) && outcomes.contains(&data.len()), "{outcomes:?}");
    assert!(outcomes.len() > 2, "some writes were torn: {outcomes:?}");
}

#[tokio::test]
async fn a_rename_survives_only_after_the_directory_fsync() {
    let (mut undone, mut kept) = (0, 0);
    for seed in 0..100 {
        let fs = SimFs::new(seed);
        let e = IoEngine::simulated(fs.clone());
        write(&e, &p("/a"), b"x", true).await;
        e.fsync_dir(&p("/")).await.unwrap();
        e.rename(&p("/a"), &p("/b")).await.unwrap();
        fs.crash();
        match (read(&e, &p("/a")).await, read(&e, &p("/b")).await) {
            (Some(_), None) => undone += 1,
            (None, Some(_)) => kept += 1,
            other => panic!("seed {seed}: {other:?}"),
        }
        e.rename(&p(if read(&e, &p("/a")).await.is_some() { "/a" } else { "/b" }), &p("/c"))
            .await
            .unwrap();
        e.fsync_dir(&p("/")).await.unwrap();
        fs.crash();
        assert!(read(&e, &p("/c")).await.is_some(), "seed {seed}");
    }
    assert!(undone > 0 && kept > 0, "undone {undone}, kept {kept}");
}

#[tokio::test]
async fn a_new_file_in_an_unsynced_directory_may_vanish() {
    let mut vanished = 0;
    for seed in 0..50 {
        let fs = SimFs::new(seed);
        let e = IoEngine::simulated(fs.clone());
        write(&e, &p("/f"), b"data", true).await; // file synced, directory not
        fs.crash();
        if read(&e, &p("/f")).await.is_none() {
            vanished += 1;
        }
    }
    assert!(vanished > 0);
}

#[tokio::test]
async fn power_off_fails_every_later_operation_until_the_crash() {
    let fs = SimFs::new(1);
    let e = IoEngine::simulated(fs.clone());
    fs.power_off_after(2);
    e.create_dir_all(&p("/d")).await.unwrap();
    e.fsync_dir(&p("/")).await.unwrap();
    let err = e.create_dir_all(&p("/e")).await.unwrap_err();
    assert!(err.to_string().contains("simulated power loss"), "{err}");
    assert!(fs.is_powered_off());
    assert!(e.exists(&p("/d")).await.is_err());
    fs.crash();
    assert!(e.exists(&p("/d")).await.unwrap());
    assert!(!e.exists(&p("/e")).await.unwrap());
}

#[tokio::test]
async fn a_skipped_fsync_loses_the_write() {
    let mut lost = 0;
    for seed in 0..50 {
        let fs = SimFs::new(seed);
        fs.skip_sync_matching(|path| path == Path::new("/f"));
        let e = IoEngine::simulated(fs.clone());
        write(&e, &p("/f"), b"", true).await;
        e.fsync_dir(&p("/")).await.unwrap();
        write(&e, &p("/f"), b"acknowledged", true).await;
        fs.crash();
        if read(&e, &p("/f")).await.as_deref() != Some(&b"acknowledged"[..]) {
            lost += 1;
        }
    }
    assert!(lost > 0);
}

#[tokio::test]
async fn namespace_operations_and_listing() {
    let e = IoEngine::simulated(SimFs::new(7));
    e.create_dir_all(&p("/t/a.___temp/timelines")).await.unwrap();
    write(&e, &p("/t/a.___temp/timelines/x"), b"1", false).await;
    e.rename(&p("/t/a.___temp"), &p("/t/a")).await.unwrap();
    let names: Vec<_> =
        e.read_dir(&p("/t")).await.unwrap().into_iter().map(|d| d.name_lossy()).collect();
    assert_eq!(names, ["a"]);
    assert_eq!(read(&e, &p("/t/a/timelines/x")).await.as_deref(), Some(&b"1"[..]));
    assert!(e.open(&p("/t/a/timelines/x"), OpenMode::CREATE_NEW).await.is_err());
    assert_eq!(e.remove_file(&p("/nope")).await.unwrap_err().kind(), io::ErrorKind::NotFound);
    e.remove_dir_all(&p("/t/a")).await.unwrap();
    assert!(e.read_dir(&p("/t")).await.unwrap().is_empty());
}

#[tokio::test]
async fn batches_run_in_order_with_single_operation_results() {
    use crate::{ReadAt, WriteAt};
    let e = IoEngine::simulated(SimFs::new(3));
    let f = e.open(&p("/f"), OpenMode::CREATE_NEW).await.unwrap();
    let writes = vec![
        WriteAt { file: &f, buf: AlignedBuf::from_slice(b"hello"), offset: 0 },
        WriteAt { file: &f, buf: AlignedBuf::from_slice(b"world"), offset: 5 },
    ];
    assert!(e.write_all_at_many(writes).await.iter().all(|(_, r)| r.is_ok()));
    let reads = vec![
        ReadAt { file: &f, buf: AlignedBuf::for_read(5), offset: 5, len: 5 },
        ReadAt { file: &f, buf: AlignedBuf::for_read(5), offset: 8, len: 5 },
        ReadAt { file: &f, buf: AlignedBuf::for_read(5), offset: 0, len: 5 },
    ];
    let res = e.read_exact_at_many(reads).await;
    assert_eq!(&res[0].0[..], b"world");
    assert_eq!(res[1].1.as_ref().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(&res[2].0[..], b"hello");
    assert_eq!(e.in_flight_ops(), 0);
}

#[tokio::test]
async fn direct_io_alignment_is_checked_like_the_real_engines() {
    let e = IoEngine::simulated(SimFs::new(4));
    let mode = OpenMode::CREATE_NEW.with_direct(true);
    let f = e.open(&p("/f"), mode).await.unwrap();
    let (_, r) = f.write_all_at(AlignedBuf::from_slice(&[1; 4096]), 0).await;
    r.unwrap();
    let (_, r) = f.write_all_at(AlignedBuf::from_slice(&[1; 100]), 0).await;
    let err = r.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("100 bytes at offset 0 of /f"), "{err}");
    let (_, r) = f.read_exact_at(AlignedBuf::for_read(4096), 512, 4096).await;
    assert_eq!(r.unwrap_err().kind(), io::ErrorKind::InvalidInput);
    let (buf, r) = f.read_exact_at(AlignedBuf::for_read(4096), 0, 4096).await;
    r.unwrap();
    assert!(buf.iter().all(|&b| b == 1));
}

#[tokio::test]
async fn injected_faults_fail_the_chosen_operation_with_its_error() {
    let fs = SimFs::new(9);
    let e = IoEngine::simulated(fs.clone());
    let f = e.open(&p("/f"), OpenMode::CREATE_NEW).await.unwrap();
    // The third write fails with ENOSPC; the others succeed.
    fs.inject(FaultRule::new(Fault::NoSpace).on(OpKind::Write).skip(2));
    let mut results = Vec::new();
    for i in 0..4u64 {
        let (_, r) = f.write_all_at(AlignedBuf::from_slice(&[i as u8 + 1; 1024]), i * 1024).await;
        results.push(r.map_err(|e| (e.kind(), e.to_string())));
    }
    assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok(), "{results:?}");
    let (kind, msg) = results[2].clone().unwrap_err();
    assert_eq!(kind, io::ErrorKind::StorageFull);
    assert!(msg.contains("write /f") && msg.contains("injected ENOSPC"), "{msg}");
    assert_eq!(fs.faults_fired(), 1);
    // A full disk: every fsync fails with EIO until cleared, other ops work.
    fs.inject(FaultRule::new(Fault::Io).on(OpKind::Fsync).forever());
    for _ in 0..3 {
        assert_eq!(f.sync_all().await.unwrap_err().kind(), io::ErrorKind::Other);
    }
    assert_eq!(read(&e, &p("/f")).await.unwrap().len(), 4096);
    fs.clear_faults();
    f.sync_all().await.unwrap();
    // By path: only the matching file's open fails.
    fs.inject(FaultRule::new(Fault::NoSpace).on(OpKind::Open).matching(|p| p.ends_with("x")));
    let err = e.open(&p("/x"), OpenMode::CREATE_NEW).await.err().unwrap();
    assert!(err.to_string().contains("open /x: no space left"), "{err}");
    assert!(!e.exists(&p("/x")).await.unwrap(), "a failed open creates nothing");
    e.open(&p("/x"), OpenMode::CREATE_NEW).await.unwrap();
}

#[tokio::test]
async fn an_injected_write_fault_leaves_at_most_a_sector_prefix() {
    let data: Vec<u8> = (0..8 * SECTOR).map(|i| (i % 253) as u8 + 1).collect();
    let mut prefixes = HashSet::new();
    for seed in 0..40 {
        let fs = SimFs::new(seed);
        let e = IoEngine::simulated(fs.clone());
        let f = e.open(&p("/f"), OpenMode::CREATE_NEW).await.unwrap();
        fs.inject(FaultRule::new(Fault::NoSpace).on(OpKind::Write));
        let (_, r) = f.write_all_at(AlignedBuf::from_slice(&data), 0).await;
        assert!(r.is_err());
        let got = read(&e, &p("/f")).await.unwrap();
        assert!(got.len() % SECTOR == 0 && got[..] == data[..got.len()], "seed {seed}");
        prefixes.insert(got.len());
        // Rewriting the same range after the fault gives the full content.
        let (_, r) = f.write_all_at(AlignedBuf::from_slice(&data), 0).await;
        r.unwrap();
        assert_eq!(read(&e, &p("/f")).await.unwrap(), data);
    }
    assert!(prefixes.len() > 2, "{prefixes:?}");
}

#[tokio::test]
async fn every_operation_kind_can_fail() {
    for op in OpKind::ALL {
        for fault in [Fault::NoSpace, Fault::Io] {
            let fs = SimFs::new(5);
            let e = IoEngine::simulated(fs.clone());
            e.create_dir_all(&p("/d")).await.unwrap();
            let f = e.open(&p("/d/f"), OpenMode::CREATE_NEW).await.unwrap();
            fs.inject(FaultRule::new(fault).on(op));
            let res: io::Result<()> = match op {
                OpKind::Open => e.open(&p("/d/g"), OpenMode::CREATE_NEW).await.map(drop),
                OpKind::Read => f.read_exact_at(AlignedBuf::for_read(0), 0, 0).await.1,
                OpKind::Write => f.write_all_at(AlignedBuf::from_slice(b"x"), 0).await.1,
                OpKind::Fsync => f.sync_all().await,
                OpKind::SetLen => f.set_len(10).await,
                OpKind::Stat => e.exists(&p("/d/f")).await.map(drop),
                OpKind::CreateDir => e.create_dir_all(&p("/e")).await,
                OpKind::ReadDir => e.read_dir(&p("/d")).await.map(drop),
                OpKind::Rename => e.rename(&p("/d/f"), &p("/d/h")).await,
                OpKind::Remove => e.remove_file(&p("/d/f")).await,
                OpKind::FsyncDir => e.fsync_dir(&p("/d")).await,
            };
            let err = res.expect_err(op.name());
            let want = if fault == Fault::NoSpace { "ENOSPC" } else { "EIO" };
            assert!(err.to_string().contains(want), "{op:?}: {err}");
            assert_eq!(fs.faults_fired(), 1, "{op:?}");
        }
    }
}
