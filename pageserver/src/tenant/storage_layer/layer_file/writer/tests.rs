//! A layer file whose write fails leaves nothing behind (`unfinished.rs`):
//! a failed value write, a commit that fails before or after its rename,
//! and a writer dropped unfinished. The failures come from the IO engine's
//! failpoints (testing feature): the simulated engine has no typed faults
//! (ENOSPC) to inject; `test_full_disk_compaction.py` runs a real full disk.

use std::path::Path;

use utils::failpoint::{configure_on_this_thread, Action};

use super::*;

const TENANT: TenantId = TenantId([1; 16]);
const TIMELINE: TimelineId = TimelineId([2; 16]);

fn engine() -> IoEngine {
    IoEngine::new(crate::tenant::test_io_engine_kind()).unwrap()
}

fn key(i: u32) -> CompactKey {
    Key::MIN.add(1000 + i).to_compact()
}

fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
}

async fn writer(dir: &Path) -> LayerWriter {
    let (kind, lsns) = (LayerKind::Delta, Lsn(0x10)..Lsn(0x40));
    let direct = crate::tenant::test_direct_io();
    LayerWriter::new(&engine(), dir, TENANT, TIMELINE, kind, lsns, direct).await.unwrap()
}

/// Values of keys `from..from + n`, 4 KiB each (a value write every 256).
async fn put(w: &mut LayerWriter, from: u32, n: u32) -> anyhow::Result<()> {
    for k in from..from + n {
        w.put_raw(key(k), Lsn(0x20), &[k as u8; 4096], true).await?;
    }
    Ok(())
}

/// Runs `f` with failpoint `fp` returning an error on this test's thread
/// only (tests beside it write layers too; value writes are spawned on the
/// same current-thread runtime).
async fn with_failpoint<T>(fp: &str, f: impl std::future::Future<Output = T>) -> T {
    configure_on_this_thread(fp, Action::Return);
    let res = f.await;
    configure_on_this_thread(fp, Action::Off);
    res
}

#[tokio::test]
async fn a_failed_value_write_removes_the_file() {
    if !utils::failpoint::ENABLED {
        return; // built without the testing feature
    }
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path()).await;
    put(&mut w, 0, 10).await.unwrap();
    assert_eq!(files_in(dir.path()).len(), 1, "the temp file is there while writing");
    let res = with_failpoint("io::write::err", async move {
        put(&mut w, 10, 1024).await?;
        w.finish(Key::MAX).await
    })
    .await;
    let err = format!("{:#}", res.err().unwrap());
    assert!(err.contains("io::write::err"), "{err}");
    assert_eq!(files_in(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_failed_commit_removes_the_file_under_either_name() {
    if !utils::failpoint::ENABLED {
        return;
    }
    for fp in
        ["layer-write::before-fsync", "layer-write::before-rename", "layer-write::after-rename"]
    {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path()).await;
        put(&mut w, 0, 300).await.unwrap();
        let res = with_failpoint(fp, w.finish(Key::MAX)).await;
        let err = format!("{:#}", res.err().unwrap());
        assert!(err.contains(fp), "{err}");
        assert_eq!(files_in(dir.path()), Vec::<String>::new(), "after {fp}");
    }
}

#[tokio::test]
async fn a_writer_dropped_unfinished_removes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path()).await;
    put(&mut w, 0, 300).await.unwrap(); // a value write may still be in flight
    drop(w);
    assert_eq!(files_in(dir.path()), Vec::<String>::new());
    // A finished layer stays.
    let mut w = writer(dir.path()).await;
    put(&mut w, 0, 300).await.unwrap();
    let layer = w.finish(Key::MAX).await.unwrap();
    assert_eq!(files_in(dir.path()), vec![layer.name.to_string()]);
}

#[tokio::test]
async fn write_errors_name_the_file_once() {
    if !utils::failpoint::ENABLED {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut w = writer(dir.path()).await;
    let res = with_failpoint("io::write::err", async move {
        put(&mut w, 10, 1024).await?;
        w.finish(Key::MAX).await
    })
    .await;
    let err = format!("{:#}", res.err().unwrap());
    // The IO engine names the file; the writer does not again.
    assert_eq!(err.matches(io_engine::TEMP_SUFFIX).count(), 1, "{err}");
}
