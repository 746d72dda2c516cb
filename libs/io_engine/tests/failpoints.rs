//! Every file operation of the engine has a failpoint `io::<op>::err`; with
//! `return` the operation fails with an error naming the failpoint and the
//! path, and nothing else is affected, whatever the engine. One test
//! (failpoints are process-wide), sequential, once per engine.

use std::path::Path;

use io_engine::{AlignedBuf, IoEngine, IoEngineKind, OpenMode, ReadAt, UringInline, WriteAt};
use utils::failpoint::{configure, Action};

async fn expect_failure<T>(
    name: &str,
    path: &Path,
    op: impl std::future::Future<Output = std::io::Result<T>>,
) {
    configure(name, Action::Return);
    let res = op.await;
    configure(name, Action::Off);
    let err = match res {
        Ok(_) => panic!("{name} did not fail the operation"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(name) && err.contains(&*path.to_string_lossy()), "{name}: {err}");
}

#[tokio::test]
async fn every_operation_fails_at_its_failpoint() {
    for (kind, inline) in [
        (IoEngineKind::StdFs, UringInline::Auto),
        (IoEngineKind::IoUring, UringInline::Auto),
        (IoEngineKind::IoUring, UringInline::Never),
    ] {
        every_operation_fails_with(IoEngine::new(kind).unwrap().with_uring_inline(inline)).await;
    }
}

async fn every_operation_fails_with(e: IoEngine) {
    let dir = tempfile::tempdir().unwrap();
    let f_path = dir.path().join("f");
    let sub = dir.path().join("sub");

    expect_failure("io::open::err", &f_path, e.open(&f_path, OpenMode::CREATE_NEW)).await;
    let f = e.open(&f_path, OpenMode::CREATE_NEW).await.unwrap();
    expect_failure("io::write::err", &f_path, async {
        let (_, r) = f.write_all_at(AlignedBuf::from_slice(b"data"), 0).await;
        r
    })
    .await;
    let (_, r) = f.write_all_at(AlignedBuf::from_slice(b"data"), 0).await;
    r.unwrap();
    expect_failure("io::read::err", &f_path, async {
        let (_, r) = f.read_exact_at(AlignedBuf::with_capacity(4), 0, 4).await;
        r
    })
    .await;
    expect_failure("io::read::err", &f_path, async {
        let reads = vec![ReadAt { file: &f, buf: AlignedBuf::with_capacity(4), offset: 0, len: 4 }];
        e.read_exact_at_many(reads).await.pop().unwrap().1
    })
    .await;
    expect_failure("io::write::err", &f_path, async {
        let writes = vec![WriteAt { file: &f, buf: AlignedBuf::from_slice(b"x"), offset: 0 }];
        e.write_all_at_many(writes).await.pop().unwrap().1
    })
    .await;
    expect_failure("io::fsync::err", &f_path, f.sync_all()).await;
    expect_failure("io::set_len::err", &f_path, f.set_len(1)).await;
    expect_failure("io::create_dir::err", &sub, e.create_dir_all(&sub)).await;
    expect_failure("io::read_dir::err", dir.path(), e.read_dir(dir.path())).await;
    expect_failure("io::rename::err", &f_path, e.rename(&f_path, &dir.path().join("g"))).await;
    expect_failure("io::fsync_dir::err", dir.path(), e.fsync_dir(dir.path())).await;
    expect_failure("io::remove::err", &f_path, e.remove_file(&f_path)).await;
    e.create_dir_all(&sub).await.unwrap();
    expect_failure("io::remove::err", &sub, e.remove_dir_all(&sub)).await;
    // A crash-safe write fails at each of its steps and leaves the old content.
    e.write_file_durably(&f_path, b"old").await.unwrap();
    for name in
        ["io::temp::before-fsync", "io::temp::before-rename", "io::fsync::err", "io::rename::err"]
    {
        configure(name, Action::Return);
        let res = e.write_file_durably(&f_path, b"new").await;
        configure(name, Action::Off);
        assert!(res.is_err(), "{name}");
        assert_eq!(e.read_file(&f_path, 16).await.unwrap(), b"old", "{name}");
    }
    // With every failpoint off again, everything works.
    e.write_file_durably(&f_path, b"new").await.unwrap();
    assert_eq!(e.read_file(&f_path, 16).await.unwrap(), b"new");
    e.remove_dir_all(&sub).await.unwrap();
}
