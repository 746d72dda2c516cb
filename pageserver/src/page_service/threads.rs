//! The page service's connection threads (`page_service_threads`): each a
//! current-thread tokio runtime; a connection is served on one of them
//! from accept to close.
//!
//! Why: on the daemon's multi-thread runtime a connection's task moves
//! between workers, and a socket or IO-completion wake-up that lands on a
//! parked worker costs a futex wake and a context switch (on a VM, also
//! waking a halted vCPU). On its own thread a connection's reader,
//! executor, socket and ring completions stay together: half the voluntary
//! context switches per cold getpage (docs/benchmarks.md, cold reads).
//!
//! With `page_service_threads = 0` there are no threads: a connection is a
//! task of the runtime that accepted it (the daemon's multi-thread one), as
//! before the threads existed. A single client waiting on each page (queue
//! depth 1, warm) is served ~3% faster there, for a third more CPU per
//! getpage: a worker that wakes keeps looking for work for a moment before
//! it parks, where a connection thread parks at once (docs/benchmarks.md).
//!
//! Contract:
//! - a connection goes to the thread serving the fewest connections (ties:
//!   the lowest index) and never moves; its counter drops when its task
//!   ends or is dropped;
//! - every thread runs until [`ConnectionThreads::shut_down`] (or the value
//!   is dropped); the caller lets the connections end first, and whatever
//!   still runs on a thread then is dropped with its runtime;
//! - what a connection awaits is either runtime-agnostic (tokio's sync
//!   types, cancellation tokens) or registered with the runtime it runs on
//!   (its socket, the io-uring engine's per-runtime eventfd). Tasks a
//!   connection spawns (`tokio::spawn`) run on its thread too.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::runtime::{Builder, Handle};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

/// How long a stopping thread waits for the tasks left on its runtime.
const THREAD_STOP_WAIT: Duration = Duration::from_secs(1);

pub struct ConnectionThreads {
    threads: Vec<ConnectionThread>,
    stop: CancellationToken,
}

struct ConnectionThread {
    handle: Handle,
    /// Connections placed on this thread and not yet ended.
    connections: Arc<AtomicUsize>,
    join: std::thread::JoinHandle<()>,
}

/// Decrements its thread's connection count when the task ends or is dropped.
struct Placed(Arc<AtomicUsize>);

impl Drop for Placed {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionThreads {
    /// Starts `count` threads named `page-service-<i>` (none for 0). On an
    /// error the threads already started stop (through `Drop`).
    pub fn start(count: usize) -> io::Result<ConnectionThreads> {
        let mut all = ConnectionThreads {
            threads: Vec::with_capacity(count),
            stop: CancellationToken::new(),
        };
        for i in 0..count {
            let rt = Builder::new_current_thread().enable_all().build()?;
            let handle = rt.handle().clone();
            let stopped = all.stop.clone();
            let join =
                std::thread::Builder::new().name(format!("page-service-{i}")).spawn(move || {
                    rt.block_on(stopped.cancelled());
                    rt.shutdown_timeout(THREAD_STOP_WAIT);
                })?;
            all.threads.push(ConnectionThread { handle, connections: Arc::default(), join });
        }
        Ok(all)
    }

    /// Serves `socket` with `serve` on the least loaded thread, as a task of
    /// `tracker`. The socket moves from the caller's reactor to that
    /// thread's; if that fails the connection is closed (logged). Without
    /// threads, the task runs on the caller's runtime.
    pub fn spawn<F, Fut>(&self, tracker: &TaskTracker, socket: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let least_loaded =
            self.threads.iter().min_by_key(|t| t.connections.load(Ordering::Relaxed));
        let Some(thread) = least_loaded else {
            tracker.spawn(serve(socket));
            return;
        };
        let socket = match socket.into_std() {
            Ok(socket) => socket,
            Err(e) => {
                warn!("page service: cannot move a connection to its thread: {e}");
                return;
            }
        };
        thread.connections.fetch_add(1, Ordering::Relaxed);
        let placed = Placed(Arc::clone(&thread.connections));
        tracker.spawn_on(
            async move {
                let _placed = placed;
                match TcpStream::from_std(socket) {
                    Ok(socket) => serve(socket).await,
                    Err(e) => warn!("page service: cannot register a connection's socket: {e}"),
                }
            },
            &thread.handle,
        );
    }

    /// Connections per thread, in thread order.
    #[cfg(test)]
    fn connections(&self) -> Vec<usize> {
        self.threads.iter().map(|t| t.connections.load(Ordering::Relaxed)).collect()
    }

    /// Stops every thread and waits for them (without blocking the caller's
    /// runtime).
    pub async fn shut_down(mut self) {
        self.stop.cancel();
        let threads = std::mem::take(&mut self.threads);
        let joined = tokio::task::spawn_blocking(move || {
            for t in threads {
                if t.join.join().is_err() {
                    warn!("a page service connection thread panicked");
                }
            }
        });
        if let Err(e) = joined.await {
            warn!("joining the page service connection threads failed: {e}");
        }
    }
}

impl Drop for ConnectionThreads {
    /// Without [`ConnectionThreads::shut_down`] (the service's future was
    /// dropped): the threads stop on their own, unjoined.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Accepts `n` connections from clients that each send one byte.
    async fn accept(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut clients, mut servers) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let mut client = TcpStream::connect(addr).await.unwrap();
            client.write_all(b"x").await.unwrap();
            clients.push(client);
            servers.push(listener.accept().await.unwrap().0);
        }
        (clients, servers)
    }

    /// Each connection runs on a `page-service-<i>` thread, spread evenly,
    /// reads from and writes to its socket there, and is counted until its
    /// task ends.
    #[tokio::test]
    async fn connections_are_spread_and_served_on_their_threads() {
        let threads = ConnectionThreads::start(2).unwrap();
        let tracker = TaskTracker::new();
        let (mut clients, servers) = accept(4).await;
        let release = CancellationToken::new();
        for server in servers {
            let release = release.clone();
            threads.spawn(&tracker, server, move |mut socket| async move {
                let name = std::thread::current().name().unwrap_or_default().to_string();
                assert!(name.starts_with("page-service-"), "served on {name}");
                let mut byte = [0u8; 1];
                socket.read_exact(&mut byte).await.unwrap();
                release.cancelled().await;
                socket.write_all(name.as_bytes()).await.unwrap();
            });
        }
        assert_eq!(threads.connections(), vec![2, 2]);
        release.cancel();
        let mut names = Vec::new();
        for client in &mut clients {
            let mut name = String::new();
            client.read_to_string(&mut name).await.unwrap();
            names.push(name);
        }
        names.sort();
        assert_eq!(names, ["page-service-0", "page-service-0", "page-service-1", "page-service-1"]);
        tracker.close();
        tracker.wait().await;
        assert_eq!(threads.connections(), vec![0, 0]);
        threads.shut_down().await;
    }

    /// Shutting down drops what still runs on a thread (its count with it)
    /// and joins the threads.
    #[tokio::test]
    async fn shut_down_drops_connections_still_running() {
        let threads = ConnectionThreads::start(1).unwrap();
        let tracker = TaskTracker::new();
        let (_clients, servers) = accept(1).await;
        let count = Arc::clone(&threads.threads[0].connections);
        threads.spawn(&tracker, servers.into_iter().next().unwrap(), |_socket| {
            std::future::pending::<()>()
        });
        assert_eq!(count.load(Ordering::Relaxed), 1);
        threads.shut_down().await;
        assert_eq!(count.load(Ordering::Relaxed), 0);
        tracker.close();
        tracker.wait().await;
    }

    /// Without threads a connection is a task of the caller's runtime.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn without_threads_connections_run_on_the_callers_runtime() {
        let threads = ConnectionThreads::start(0).unwrap();
        let tracker = TaskTracker::new();
        let (mut clients, servers) = accept(1).await;
        let caller = Handle::current().id();
        threads.spawn(
            &tracker,
            servers.into_iter().next().unwrap(),
            move |mut socket| async move {
                assert_eq!(Handle::current().id(), caller, "served on the caller's runtime");
                let mut byte = [0u8; 1];
                socket.read_exact(&mut byte).await.unwrap();
                socket.write_all(b"served").await.unwrap();
            },
        );
        let mut reply = String::new();
        clients[0].read_to_string(&mut reply).await.unwrap();
        assert_eq!(reply, "served");
        tracker.close();
        tracker.wait().await;
        threads.shut_down().await;
    }
}
