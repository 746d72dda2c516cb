//! Cases only the io-uring engine has: operations the kernel finishes
//! later (FIFO reads, which wait for a writer), so a future can be dropped
//! while the kernel still owns its buffer; the bound on operations in
//! flight; waiting outside a runtime; and a kernel that refuses io_uring.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::{Duration, Instant};

use futures::future::join_all;
use io_engine::{AlignedBuf, IoEngine, IoEngineKind, OpenMode, URING_MAX_IN_FLIGHT_OPS};

use super::cancel::wait_for_no_ops_in_flight;
use super::{pattern, read, write, URING, URING_RING_ONLY};

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// Write `data` into the FIFO from another thread (its open blocks until a reader exists).
fn feed(path: PathBuf, data: Vec<u8>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        w.write_all(&data).unwrap();
    })
}

/// The FIFO, opened read-write (so the open does not wait for a writer).
async fn open_fifo(e: &IoEngine, dir: &Path, name: &str) -> (PathBuf, io_engine::File) {
    let p = dir.join(name);
    mkfifo(&p);
    let f = e.open(&p, OpenMode::READ_WRITE).await.unwrap();
    (p, f)
}

/// A read is submitted, its future dropped, the file closed; only then a
/// writer fills the FIFO and the kernel completes the read into the
/// buffer the slot still owns. The engine reaps it, frees the buffer into
/// the pool (where this test finds it holding the FIFO's bytes) and closes
/// the descriptor. 50 rounds.
#[tokio::test]
async fn kernel_completes_a_dropped_read_into_its_slot_buffer() {
    const CAP: usize = 23 * 4096; // a pool class no other test uses
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    for round in 0..50u64 {
        let (p, f) = open_fifo(&e, dir.path(), &format!("fifo{round}")).await;
        let data = pattern(round, 1000);
        {
            let mut fut = pin!(f.read_exact_at(AlignedBuf::for_read(CAP), 0, 1000));
            assert!(futures::poll!(fut.as_mut()).is_pending(), "the FIFO is empty");
            assert_eq!(e.in_flight_ops(), 1);
        }
        drop(f);
        assert_eq!(e.in_flight_ops(), 1, "the dropped read is still in flight");
        feed(p, data.clone()).join().unwrap();
        wait_for_no_ops_in_flight(&e).await;
        let mut recycled = AlignedBuf::for_read(CAP);
        recycled.set_len(1000);
        assert!(recycled[..] == data[..], "round {round}: the kernel wrote into the slot's buffer");
    }
}

/// Dropping the last handle to a ring with a read still in flight cancels
/// it and frees the buffer and descriptor (nobody reads the FIFO after).
#[tokio::test]
async fn dropping_the_engine_cancels_abandoned_reads() {
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    let (p, f) = open_fifo(&e, dir.path(), "fifo").await;
    {
        let mut fut = pin!(f.read_exact_at(AlignedBuf::for_read(4096), 0, 100));
        assert!(futures::poll!(fut.as_mut()).is_pending());
    }
    drop(f);
    let started = Instant::now();
    drop(e);
    assert!(started.elapsed() < Duration::from_secs(1), "cancelled, not timed out");
    let no_reader = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&p)
        .unwrap_err();
    assert_eq!(no_reader.raw_os_error(), Some(libc::ENXIO), "the descriptor is closed");
}

/// A read that returns short (the FIFO has part of the data) goes on.
#[tokio::test]
async fn short_reads_continue() {
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    let (p, f) = open_fifo(&e, dir.path(), "fifo").await;
    let data = pattern(5, 200);
    let (first, second) = (data[..120].to_vec(), data[120..].to_vec());
    let writer = std::thread::spawn(move || {
        feed(p.clone(), first).join().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        feed(p, second).join().unwrap();
    });
    assert_eq!(read(&f, 0, 200).await.unwrap(), data);
    writer.join().unwrap();
}

/// Beyond `URING_MAX_IN_FLIGHT_OPS`, operations wait for a slot: the
/// number in flight stays at the bound, and all finish once data comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_beyond_the_bound_wait_for_a_slot() {
    let max = URING_MAX_IN_FLIGHT_OPS as usize;
    let n = max + 88;
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    let (p, f) = open_fifo(&e, dir.path(), "fifo").await;
    let f = std::sync::Arc::new(f);
    let reads = tokio::spawn({
        let f = f.clone();
        async move { join_all((0..n).map(|_| read(&f, 0, 1))).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.in_flight_ops() < max {
        assert!(Instant::now() < deadline, "only {} in flight", e.in_flight_ops());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(e.in_flight_ops(), max, "never above the bound");
    feed(p, vec![9; n]).join().unwrap();
    let results = reads.await.unwrap();
    assert!(results.into_iter().all(|r| r.unwrap() == [9]));
    assert_eq!(e.in_flight_ops(), 0);
}

/// Every slot held by a dropped read: a new operation waits for a slot,
/// and while it waits it reaps, so the slots free up when the reads
/// complete even though nothing else polls the ring.
#[tokio::test]
async fn a_waiting_operation_reaps_dropped_ones() {
    let max = URING_MAX_IN_FLIGHT_OPS as usize;
    let dir = tempfile::tempdir().unwrap();
    let e = URING_RING_ONLY.engine();
    let (p, fifo) = open_fifo(&e, dir.path(), "fifo").await;
    for _ in 0..max {
        let mut fut = pin!(fifo.read_exact_at(AlignedBuf::for_read(4096), 0, 1));
        assert!(futures::poll!(fut.as_mut()).is_pending());
    }
    assert_eq!(e.in_flight_ops(), max);
    let f = e.open(&dir.path().join("f"), OpenMode::CREATE_NEW).await.unwrap();
    let mut op = pin!(async {
        write(&f, b"after", 0).await;
        read(&f, 0, 5).await.unwrap()
    });
    for _ in 0..3 {
        assert!(futures::poll!(op.as_mut()).is_pending(), "no slot is free");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let writer = feed(p, vec![1; max]);
    let got = tokio::time::timeout(Duration::from_secs(10), op).await.expect("got a slot");
    assert_eq!(got, b"after");
    writer.join().unwrap();
    wait_for_no_ops_in_flight(&e).await;
}

/// Reads of pages not in the page cache (evicted with `POSIX_FADV_DONTNEED`)
/// cannot be served inline: they go through the ring, whole or for the
/// part the inline attempt could not serve.
#[tokio::test]
async fn page_cache_misses_go_through_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    let p = dir.path().join("f");
    let len = 1 << 20;
    let data = pattern(9, len);
    let f = e.open(&p, OpenMode::CREATE_NEW).await.unwrap();
    write(&f, &data, 0).await;
    f.sync_all().await.unwrap();
    let std_file = std::fs::File::open(&p).unwrap();
    let evict = |offset: usize, n: usize| {
        use std::os::fd::AsRawFd;
        // SAFETY: an advice call on an open descriptor; no memory involved.
        let rc = unsafe {
            libc::posix_fadvise(
                std_file.as_raw_fd(),
                offset as i64,
                n as i64,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        assert_eq!(rc, 0);
    };
    evict(0, len);
    assert!(read(&f, 0, len).await.unwrap() == data, "all of it evicted");
    evict(len / 2, len / 2);
    assert!(read(&f, 0, len).await.unwrap() == data, "the second half evicted");
    evict(0, len);
    let reads = (0..64)
        .map(|k| io_engine::ReadAt {
            file: &f,
            buf: AlignedBuf::for_read(16384),
            offset: k * 16384,
            len: 16384,
        })
        .collect();
    for (k, (buf, r)) in e.read_exact_at_many(reads).await.into_iter().enumerate() {
        r.unwrap();
        assert!(buf[..] == data[k * 16384..(k + 1) * 16384], "block {k}");
    }
    assert_eq!(e.in_flight_ops(), 0);
}

/// A batch streams: a read that completes is yielded while another read
/// of the same batch (an empty FIFO) is still in the kernel; the FIFO read
/// is yielded once a writer fills it.
#[tokio::test]
async fn batch_each_yields_reads_as_they_complete() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let e = URING_RING_ONLY.engine();
    let (p, fifo) = open_fifo(&e, dir.path(), "fifo").await;
    let data = pattern(7, 8192);
    let file = e.open(&dir.path().join("f"), OpenMode::CREATE_NEW).await.unwrap();
    write(&file, &data, 0).await;
    let reads = vec![
        io_engine::ReadAt { file: &fifo, buf: AlignedBuf::for_read(100), offset: 0, len: 100 },
        io_engine::ReadAt { file: &file, buf: AlignedBuf::for_read(8192), offset: 0, len: 8192 },
    ];
    let mut each = pin!(e.read_exact_at_each(reads));
    let (k, (buf, res)) = tokio::time::timeout(Duration::from_secs(10), each.next())
        .await
        .expect("the file read is yielded while the FIFO read waits")
        .unwrap();
    res.unwrap();
    assert_eq!((k, &buf[..]), (1, &data[..]));
    assert!(futures::poll!(each.next()).is_pending(), "the FIFO is still empty");
    let writer = feed(p, pattern(8, 100));
    let (k, (buf, res)) = each.next().await.unwrap();
    res.unwrap();
    assert_eq!((k, &buf[..]), (0, &pattern(8, 100)[..]));
    assert!(each.next().await.is_none());
    writer.join().unwrap();
    assert_eq!(e.in_flight_ops(), 0);
}

/// Polled outside any runtime, a waiting future blocks in the kernel.
#[test]
fn waits_block_outside_a_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    futures::executor::block_on(async {
        let (p, f) = open_fifo(&e, dir.path(), "fifo").await;
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            feed(p, b"12345678".to_vec()).join().unwrap();
        });
        assert_eq!(read(&f, 0, 8).await.unwrap(), b"12345678");
        writer.join().unwrap();
    });
    assert_eq!(e.in_flight_ops(), 0);
}

/// With io_uring_setup refused (a seccomp filter on this thread returning
/// `errno`), creating the engine fails with an error naming the errno and
/// the alternative; std-fs still works.
#[test]
fn a_kernel_refusal_is_reported_plainly() {
    for (errno, name) in [(libc::ENOSYS, "ENOSYS"), (libc::EPERM, "EPERM")] {
        let msg = std::thread::spawn(move || {
            deny_io_uring_setup(errno);
            assert!(IoEngine::new(IoEngineKind::StdFs).is_ok());
            IoEngine::new(IoEngineKind::IoUring).unwrap_err().to_string()
        })
        .join()
        .unwrap();
        assert!(msg.contains(name) && msg.contains("io_uring_setup"), "{msg}");
        assert!(msg.contains("io_engine = \"std-fs\""), "{msg}");
    }
}

/// Install a seccomp filter on the calling thread only: io_uring_setup
/// fails with `errno`, every other syscall is allowed.
fn deny_io_uring_setup(errno: i32) {
    let stmt = |code: u32, k: u32| libc::sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let jeq = |k: u32| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt: 0,
        jf: 1,
        k,
    };
    let mut filter = [
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0), // seccomp_data.nr
        jeq(libc::SYS_io_uring_setup as u32),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ERRNO | errno as u32),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_mut_ptr() };
    // SAFETY: prctl with a valid filter program that outlives the call.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        let rc = libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog);
        assert_eq!(rc, 0, "seccomp: {}", std::io::Error::last_os_error());
    }
}

/// `set_kind` switches the files already open: a file opened under std-fs
/// reads through the ring after a switch to io-uring (a FIFO read is then
/// in flight instead of blocking the thread), and back; a clone of the
/// engine sees the switch too.
#[tokio::test]
async fn switching_engines_moves_open_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = IoEngine::new(IoEngineKind::StdFs).unwrap();
    let clone = e.clone();
    let (p, fifo) = open_fifo(&e, dir.path(), "fifo").await;
    let file = e.open(&dir.path().join("f"), OpenMode::CREATE_NEW).await.unwrap();
    write(&file, b"before", 0).await;

    e.set_kind(IoEngineKind::IoUring).unwrap();
    assert_eq!(clone.kind(), IoEngineKind::IoUring);
    {
        let mut fut = pin!(fifo.read_exact_at(AlignedBuf::for_read(4096), 0, 5));
        assert!(futures::poll!(fut.as_mut()).is_pending(), "the FIFO is empty");
        assert_eq!(e.in_flight_ops(), 1, "the read went to the ring");
        feed(p, b"hello".to_vec()).join().unwrap();
        let (buf, res) = fut.await;
        res.unwrap();
        assert_eq!(&buf[..], b"hello");
    }
    assert_eq!(read(&file, 0, 6).await.unwrap(), b"before");
    write(&file, b"during", 6).await;
    file.sync_all().await.unwrap();

    clone.set_kind(IoEngineKind::StdFs).unwrap();
    assert_eq!(e.kind(), IoEngineKind::StdFs);
    assert_eq!(read(&file, 0, 12).await.unwrap(), b"beforeduring");
    assert_eq!(e.in_flight_ops(), 0);
}

/// Counts the wakes of a waker (all its clones `will_wake` each other).
#[derive(Default)]
struct CountingWaker(std::sync::atomic::AtomicUsize);

impl futures::task::ArcWake for CountingWaker {
    fn wake_by_ref(arc_self: &std::sync::Arc<Self>) {
        arc_self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The futures of one task share its waker (as under `join_all`). When
/// polling one of them reaps the completion of another that was already
/// polled, the task must still be woken for it, even though the waker is
/// the one of the future being polled (a lost wake hung reads of the page
/// service under direct IO).
#[tokio::test]
async fn a_completion_reaped_by_a_sibling_future_still_wakes_the_task() {
    use std::future::Future;
    use std::task::Context;
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    let (pa, fa) = open_fifo(&e, dir.path(), "a").await;
    let (pb, fb) = open_fifo(&e, dir.path(), "b").await;
    let counter = std::sync::Arc::new(CountingWaker::default());
    let waker = futures::task::waker(counter.clone());
    let mut cx = Context::from_waker(&waker);
    let mut a = pin!(fa.read_exact_at(AlignedBuf::for_read(4096), 0, 1));
    let mut b = pin!(fb.read_exact_at(AlignedBuf::for_read(4096), 0, 1));
    assert!(b.as_mut().poll(&mut cx).is_pending(), "FIFO b is empty");
    assert!(a.as_mut().poll(&mut cx).is_pending(), "FIFO a is empty");
    feed(pa, vec![1]).join().unwrap();
    feed(pb, vec![2]).join().unwrap();
    // The kernel posts both completions (task work of this thread, run
    // when it leaves the sleep syscall).
    std::thread::sleep(std::time::Duration::from_millis(50));
    let before = counter.0.load(std::sync::atomic::Ordering::SeqCst);
    let std::task::Poll::Ready((buf, res)) = a.as_mut().poll(&mut cx) else {
        panic!("a's read completed")
    };
    res.unwrap();
    assert_eq!(&buf[..], [1]);
    let after = counter.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(after > before, "b's completion, reaped while polling a, wakes the task");
    let std::task::Poll::Ready((buf, res)) = b.as_mut().poll(&mut cx) else {
        panic!("b's read completed")
    };
    res.unwrap();
    assert_eq!(&buf[..], [2]);
}

/// A read polled once and then parked for good (its task is woken but
/// awaits something else) must not stall the ring: other reads on the
/// same runtime, each in flight before its data arrives, still complete,
/// each well within `STALL_LIMIT` (the engine reaps on its own, it does
/// not rely on the parked future). An engine where whoever polls reaps
/// stalled here at the first read.
async fn a_parked_operation_does_not_stall_others() {
    const STALL_LIMIT: Duration = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let e = URING.engine();
    let (pa, parked_fifo) = open_fifo(&e, dir.path(), "parked").await;
    let (pb, fifo) = open_fifo(&e, dir.path(), "others").await;
    let (polled, parked_now) = tokio::sync::oneshot::channel();
    let parked = tokio::spawn(async move {
        let mut fut = pin!(parked_fifo.read_exact_at(AlignedBuf::for_read(4096), 0, 1));
        assert!(futures::poll!(fut.as_mut()).is_pending(), "the FIFO is empty");
        polled.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    parked_now.await.unwrap();
    assert_eq!(e.in_flight_ops(), 1, "the parked read is in flight");
    for i in 0..20u8 {
        let mut other = pin!(read(&fifo, 0, 1));
        assert!(futures::poll!(other.as_mut()).is_pending(), "the FIFO is empty");
        // The data comes while this task waits (not before it awaits).
        let pb = pb.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            feed(pb, vec![i]).join().unwrap();
        });
        // The limit first: polling the read when the limit fires would reap.
        let res = tokio::select! {
            biased;
            () = tokio::time::sleep(STALL_LIMIT) => {
                panic!("read {i} stalled behind the parked operation")
            }
            res = other => res,
        };
        assert_eq!(res.unwrap(), [i]);
        writer.join().unwrap();
    }
    parked.abort();
    assert!(parked.await.unwrap_err().is_cancelled());
    feed(pa, vec![1]).join().unwrap();
    wait_for_no_ops_in_flight(&e).await;
}

#[tokio::test]
async fn a_parked_operation_does_not_stall_others_current_thread() {
    a_parked_operation_does_not_stall_others().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_operation_does_not_stall_others_multi_thread() {
    a_parked_operation_does_not_stall_others().await
}
