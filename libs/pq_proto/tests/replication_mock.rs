//! The replication client against a scripted fake server, for what a real
//! primary does not do on demand: the end of a timeline (CopyDone, next
//! timeline row), a client-initiated stop, an ErrorResponse mid-stream, an
//! oversized message, a server that claims success in the middle of SCRAM,
//! a session left mid-command, and `BASE_BACKUP` archives (one per
//! tablespace) that do or do not match what the server announced.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use pq_proto::backend;
use pq_proto::client::ClientError;
use pq_proto::replication::{
    BackupPart, BackupTablespace, BaseBackupOptions, ReplicationMessage, StreamEnd, XLogData,
};
use pq_proto::{parse_frame, parse_startup, ReplicationClient, StartupPacket};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The server side of one connection.
struct Fake {
    stream: TcpStream,
    buf: BytesMut,
}

impl Fake {
    async fn fill(&mut self) -> bool {
        tokio::time::timeout(TIMEOUT, self.stream.read_buf(&mut self.buf)).await.unwrap().unwrap()
            > 0
    }

    /// Reads the startup packet; checks `replication=true`.
    async fn startup(&mut self) {
        loop {
            if let Some((packet, n)) = parse_startup(&self.buf).unwrap() {
                self.buf.advance(n);
                let StartupPacket::Startup { params } = packet else { panic!("{packet:?}") };
                assert!(params.contains(&("replication".into(), "true".into())), "{params:?}");
                return;
            }
            assert!(self.fill().await, "EOF before the startup packet");
        }
    }

    async fn accept(&mut self) {
        self.startup().await;
        let mut out = BytesMut::new();
        backend::auth_ok(&mut out);
        backend::ready_for_query(&mut out);
        self.send(out).await;
    }

    /// The next frontend message `(tag, body)`; `None` on EOF.
    async fn read(&mut self) -> Option<(u8, Bytes)> {
        loop {
            if let Some(head) = parse_frame(&self.buf, 1 << 20).unwrap() {
                let mut m = self.buf.split_to(head.total_len());
                m.advance(5);
                return Some((head.tag, m.freeze()));
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    async fn expect_query(&mut self, prefix: &str) {
        let (tag, body) = self.read().await.expect("a query");
        assert_eq!(tag, b'Q');
        let q = String::from_utf8_lossy(&body[..body.len() - 1]).into_owned();
        assert!(q.starts_with(prefix), "{q:?} does not start with {prefix:?}");
    }

    async fn send(&mut self, out: BytesMut) {
        self.stream.write_all(&out).await.unwrap();
    }
}

async fn serve<F, Fut>(script: F) -> (String, JoinHandle<()>)
where
    F: FnOnce(Fake) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("postgres://repl@{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        script(Fake { stream, buf: BytesMut::new() }).await;
    });
    (url, task)
}

fn xlog(start: u64, data: &[u8]) -> Vec<u8> {
    let mut m = vec![b'w'];
    m.extend_from_slice(&start.to_be_bytes());
    m.extend_from_slice(&(start + data.len() as u64).to_be_bytes());
    m.extend_from_slice(&1i64.to_be_bytes());
    m.extend_from_slice(data);
    m
}

fn keepalive(wal_end: u64, reply: bool) -> Vec<u8> {
    let mut m = vec![b'k'];
    m.extend_from_slice(&wal_end.to_be_bytes());
    m.extend_from_slice(&2i64.to_be_bytes());
    m.push(u8::from(reply));
    m
}

fn identify_system_answer(out: &mut BytesMut) {
    backend::row_description(out, &["systemid", "timeline", "xlogpos", "dbname"]);
    backend::data_row(out, &[Some("42"), Some("2"), Some("0/3000000"), None]);
    backend::command_complete(out, "IDENTIFY_SYSTEM");
    backend::ready_for_query(out);
}

/// After the client's CopyDone: the server's end of timeline 1 (next
/// timeline 2 from 0/1000003), then the answer to the client's
/// `IDENTIFY_SYSTEM`.
async fn end_timeline_1_then_identify(f: &mut Fake) {
    let mut out = BytesMut::new();
    backend::row_description(&mut out, &["next_tli", "next_tli_startpos"]);
    backend::data_row(&mut out, &[Some("2"), Some("0/1000003")]);
    backend::command_complete(&mut out, "SELECT");
    backend::command_complete(&mut out, "START_REPLICATION");
    backend::ready_for_query(&mut out);
    f.send(out).await;
    answer_identify_system(f).await;
}

/// The client's `IDENTIFY_SYSTEM`, and its answer.
async fn answer_identify_system(f: &mut Fake) {
    f.expect_query("IDENTIFY_SYSTEM").await;
    let mut out = BytesMut::new();
    identify_system_answer(&mut out);
    f.send(out).await;
}

async fn start_streaming(f: &mut Fake) {
    f.expect_query("START_REPLICATION SLOT s PHYSICAL 0/1000000 TIMELINE 1").await;
    let mut out = BytesMut::new();
    backend::copy_both_response(&mut out);
    backend::copy_data(&mut out, &xlog(0x100_0000, b"abc"));
    backend::copy_data(&mut out, &keepalive(0x100_0003, true));
    f.send(out).await;
}

#[tokio::test]
async fn timeline_end_then_the_session_is_usable() {
    let (url, server) = serve(|mut f: Fake| async move {
        f.accept().await;
        start_streaming(&mut f).await;
        // The status update, field by field.
        let (tag, mut body) = f.read().await.unwrap();
        assert_eq!((tag, body.get_u8()), (b'd', b'r'));
        assert_eq!((body.get_u64(), body.get_u64(), body.get_u64()), (0x100_0003, 0x100_0001, 0));
        let t = body.get_i64();
        assert!(t > 700_000_000_000_000, "timestamp {t} is not in µs since 2000");
        assert_eq!((body.get_u8(), body.len()), (1, 0));
        let mut out = BytesMut::new();
        backend::copy_done(&mut out);
        f.send(out).await;
        assert_eq!(f.read().await.unwrap().0, b'c', "the client answers CopyDone");
        end_timeline_1_then_identify(&mut f).await;
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    let mut stream = repl.start_replication(Some("s"), 0x100_0000, 1).await.unwrap();
    let ReplicationMessage::XLogData(XLogData { wal_start, wal_end, data, .. }) =
        stream.recv().await.unwrap()
    else {
        panic!("expected XLogData")
    };
    assert_eq!((wal_start, wal_end, &data[..]), (0x100_0000, 0x100_0003, &b"abc"[..]));
    let ReplicationMessage::PrimaryKeepalive(k) = stream.recv().await.unwrap() else { panic!() };
    assert!(k.reply_requested && k.wal_end == 0x100_0003);
    stream.send_standby_status(0x100_0003, 0x100_0001, 0, true).await.unwrap();
    let end = StreamEnd::TimelineEnded {
        next_timeline: Some(2),
        next_timeline_start_lsn: Some(0x100_0003),
    };
    assert_eq!(stream.recv().await.unwrap(), ReplicationMessage::End(end.clone()));
    assert_eq!(stream.recv().await.unwrap(), ReplicationMessage::End(end));
    assert!(stream.send_standby_status(1, 1, 1, false).await.is_err());
    assert_eq!(repl.identify_system().await.unwrap().timeline, 2);
    server.await.unwrap();
}

/// A status update due while the stream ends (the server's CopyDone read
/// by a `recv` that was then cancelled, its ReadyForQuery not yet) sends
/// nothing and is not an error; the end still arrives.
#[tokio::test]
async fn a_status_update_while_the_stream_ends_sends_nothing() {
    let (url, server) = serve(|mut f: Fake| async move {
        f.accept().await;
        start_streaming(&mut f).await;
        let mut out = BytesMut::new();
        backend::copy_done(&mut out);
        f.send(out).await;
        assert_eq!(f.read().await.unwrap().0, b'c', "the client answers CopyDone");
        // Held back while the client tries its status update.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The next message is the query: no CopyData after the CopyDone.
        end_timeline_1_then_identify(&mut f).await;
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    let mut stream = repl.start_replication(Some("s"), 0x100_0000, 1).await.unwrap();
    assert!(matches!(stream.recv().await.unwrap(), ReplicationMessage::XLogData(_)));
    assert!(matches!(stream.recv().await.unwrap(), ReplicationMessage::PrimaryKeepalive(_)));
    let pending = tokio::time::timeout(Duration::from_millis(200), stream.recv()).await;
    assert!(pending.is_err(), "the end is not complete yet: {pending:?}");
    stream.send_standby_status(0x100_0003, 0x100_0003, 0, false).await.unwrap();
    let end = StreamEnd::TimelineEnded {
        next_timeline: Some(2),
        next_timeline_start_lsn: Some(0x100_0003),
    };
    assert_eq!(stream.recv().await.unwrap(), ReplicationMessage::End(end));
    assert_eq!(repl.identify_system().await.unwrap().timeline, 2);
    server.await.unwrap();
}

#[tokio::test]
async fn client_stop_discards_wal_in_flight() {
    let (url, server) = serve(|mut f: Fake| async move {
        f.accept().await;
        start_streaming(&mut f).await;
        assert_eq!(f.read().await.unwrap().0, b'c');
        let mut out = BytesMut::new();
        backend::copy_data(&mut out, &xlog(0x100_0003, b"more"));
        backend::copy_done(&mut out);
        backend::command_complete(&mut out, "START_REPLICATION");
        backend::ready_for_query(&mut out);
        f.send(out).await;
        answer_identify_system(&mut f).await;
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    let mut stream = repl.start_replication(Some("s"), 0x100_0000, 1).await.unwrap();
    let end = stream.stop().await.unwrap();
    assert_eq!(
        end,
        StreamEnd::TimelineEnded { next_timeline: None, next_timeline_start_lsn: None }
    );
    assert_eq!(repl.identify_system().await.unwrap().systemid, 42);
    server.await.unwrap();
}

#[tokio::test]
async fn server_error_mid_stream_carries_its_sqlstate() {
    let (url, server) = serve(|mut f: Fake| async move {
        f.accept().await;
        start_streaming(&mut f).await;
        let mut out = BytesMut::new();
        backend::error_response(&mut out, "FATAL", b"57P01", "terminating connection");
        f.send(out).await;
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    let mut stream = repl.start_replication(Some("s"), 0x100_0000, 1).await.unwrap();
    stream.recv().await.unwrap();
    stream.recv().await.unwrap();
    let e = stream.recv().await.unwrap_err();
    assert_eq!(e.sqlstate(), Some("57P01"), "{e}");
    assert!(e.to_string().contains("terminating connection"), "{e}");
    // The stream was interrupted: the session refuses further commands.
    let e = repl.identify_system().await.unwrap_err();
    assert!(matches!(e, ClientError::Desynchronized(_)), "{e}");
    server.await.unwrap();
}

#[tokio::test]
async fn oversized_and_malformed_messages_are_named() {
    let (url, server) = serve(|mut f: Fake| async move {
        f.accept().await;
        start_streaming(&mut f).await;
        let mut out = BytesMut::new();
        out.put_u8(b'd');
        out.put_u32(u32::MAX);
        f.send(out).await;
        // Hold the connection until the client gives up.
        let _ = f.read().await;
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    let mut stream = repl.start_replication(Some("s"), 0x100_0000, 1).await.unwrap();
    stream.recv().await.unwrap();
    stream.recv().await.unwrap();
    let e = stream.recv().await.unwrap_err();
    assert!(matches!(e, ClientError::Protocol(_)), "{e}");
    assert!(e.to_string().contains("exceeds the limit"), "{e}");
    drop(repl);
    server.await.unwrap();
}

#[tokio::test]
async fn scram_requires_the_server_signature() {
    let (url, server) = serve(|mut f: Fake| async move {
        f.startup().await;
        let mut out = BytesMut::new();
        out.put_u8(b'R');
        let body = b"SCRAM-SHA-256\0\0";
        out.put_u32(4 + 4 + body.len() as u32);
        out.put_i32(10);
        out.put_slice(body);
        f.send(out).await;
        let (tag, body) = f.read().await.unwrap();
        assert_eq!(tag, b'p');
        assert!(body.starts_with(b"SCRAM-SHA-256\0"), "{body:?}");
        // Success without SASLContinue/SASLFinal: a server that does not
        // know the secret.
        let mut out = BytesMut::new();
        backend::auth_ok(&mut out);
        backend::ready_for_query(&mut out);
        f.send(out).await;
        let _ = f.read().await;
    })
    .await;
    let e = ReplicationClient::connect(&format!("{url}?password=secret")).await.err().unwrap();
    assert!(matches!(e, ClientError::Auth(_)), "{e}");
    server.await.unwrap();
}

#[tokio::test]
async fn bad_slot_names_are_refused_before_sending() {
    let (url, server) = serve(|mut f: Fake| async move {
        f.accept().await;
        assert!(f.read().await.is_none(), "nothing may be sent");
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    for bad in ["", "x; DROP", "UPPER", "a\"b"] {
        assert!(matches!(
            repl.create_physical_slot(bad, true).await,
            Err(ClientError::Unsupported(_))
        ));
        assert!(repl.start_replication(Some(bad), 0, 1).await.is_err());
    }
    drop(repl);
    server.await.unwrap();
}

/// A `BASE_BACKUP` answer: tablespaces `(oid, location)` announced, then
/// `archives` (`(name, path, data)`), a manifest, the end row.
async fn serve_base_backup(
    f: &mut Fake,
    announced: &[(&str, &str)],
    archives: &[(&str, &str, &[u8])],
) {
    f.expect_query("BASE_BACKUP (LABEL 'l'").await;
    let mut out = BytesMut::new();
    backend::row_description(&mut out, &["recptr", "tli"]);
    backend::data_row(&mut out, &[Some("0/2000028"), Some("1")]);
    backend::command_complete(&mut out, "SELECT");
    backend::row_description(&mut out, &["spcoid", "spclocation", "size"]);
    for (oid, location) in announced {
        backend::data_row(&mut out, &[Some(oid), Some(location), None]);
    }
    backend::data_row(&mut out, &[None, None, None]);
    backend::command_complete(&mut out, "SELECT");
    backend::copy_out_response(&mut out);
    for (name, path, data) in archives {
        backend::copy_data(&mut out, format!("n{name}\0{path}\0").as_bytes());
        backend::copy_data(&mut out, &[b"d".as_slice(), data].concat());
        backend::copy_data(&mut out, &[b'p', 0, 0, 0, 0, 0, 0, 0, 9]);
    }
    backend::copy_data(&mut out, b"m");
    backend::copy_data(&mut out, b"d{}");
    backend::copy_done(&mut out);
    backend::row_description(&mut out, &["recptr", "tli"]);
    backend::data_row(&mut out, &[Some("0/2000100"), Some("1")]);
    backend::command_complete(&mut out, "SELECT");
    backend::ready_for_query(&mut out);
    f.send(out).await;
    let _ = f.read().await; // until the client is done
}

/// Every archive in order, each tablespace's named with its oid and
/// location; the single-archive reader refuses the second one.
#[tokio::test]
async fn base_backup_with_tablespaces_returns_every_archive() {
    let announced = [("16390", "/srv/ts a"), ("16391", "pg_tblspc/16391")];
    let archives: [(&str, &str, &[u8]); 3] = [
        ("16390.tar", "/srv/ts a", b"one"),
        ("16391.tar", "pg_tblspc/16391", b"two"),
        ("base.tar", "", b"main"),
    ];
    let (url, server) = serve(move |mut f: Fake| async move {
        f.accept().await;
        serve_base_backup(&mut f, &announced, &archives).await;
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    let opts = BaseBackupOptions {
        label: "l".into(),
        fast_checkpoint: true,
        manifest: true,
        manifest_checksums: None,
    };
    let mut backup = repl.base_backup_with(&opts).await.unwrap();
    let want = [
        BackupTablespace { oid: 16390, location: "/srv/ts a".into() },
        BackupTablespace { oid: 16391, location: "pg_tblspc/16391".into() },
    ];
    assert_eq!(backup.tablespaces, want);
    let mut got = Vec::new();
    while let Some(part) = backup.next_part().await.unwrap() {
        got.push(match part {
            BackupPart::Archive(a) => format!("{}:{:?}", a.name, a.tablespace.map(|t| t.oid)),
            BackupPart::Data(d) => String::from_utf8(d.to_vec()).unwrap(),
        });
    }
    assert_eq!(
        got,
        ["16390.tar:Some(16390)", "one", "16391.tar:Some(16391)", "two", "base.tar:None", "main"]
    );
    let end = backup.finish().await.unwrap();
    assert_eq!((end.end_lsn, end.tar_bytes), (0x2000100, 10));
    assert_eq!(end.manifest.as_deref(), Some(b"{}".as_slice()));
    drop(repl);
    server.await.unwrap();

    let (url, server) = serve(move |mut f: Fake| async move {
        f.accept().await;
        serve_base_backup(&mut f, &announced, &archives).await;
    })
    .await;
    let mut repl = ReplicationClient::connect(&url).await.unwrap();
    let mut backup = repl.base_backup("l", true).await.unwrap();
    assert_eq!(backup.next_chunk().await.unwrap().as_deref(), Some(b"one".as_slice()));
    let e = backup.next_chunk().await.unwrap_err();
    assert!(matches!(e, ClientError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("a second archive in the base backup (16391.tar)"), "{e}");
    drop(repl);
    server.await.unwrap();
}

/// Archives the server did not announce, twice, or not at all: protocol
/// errors naming the archive or the tablespace.
#[tokio::test]
async fn base_backup_archives_must_match_the_announced_tablespaces() {
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static [(&'static str, &'static str, &'static [u8])],
        &'static str,
    );
    let cases: [Case; 4] = [
        (
            &[],
            &[("16390.tar", "/srv/ts", b"x"), ("base.tar", "", b"y")],
            "archive 16390.tar of /srv/ts, which is not one",
        ),
        (
            &[("16390", "/srv/ts")],
            &[("16390.tar", "/elsewhere", b"x")],
            "archive 16390.tar of /elsewhere",
        ),
        (
            &[("16390", "/srv/ts")],
            &[("base.tar", "", b"y")],
            "without the archives of tablespaces 16390 at /srv/ts",
        ),
        (&[], &[("base.tar", "", b"y"), ("base.tar", "", b"y")], "archive base.tar twice"),
    ];
    for (announced, archives, want) in cases {
        let (url, server) = serve(move |mut f: Fake| async move {
            f.accept().await;
            serve_base_backup(&mut f, announced, archives).await;
        })
        .await;
        let mut repl = ReplicationClient::connect(&url).await.unwrap();
        let mut backup = repl.base_backup("l", true).await.unwrap();
        let e = loop {
            match backup.next_part().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{want}: no error"),
                Err(e) => break e,
            }
        };
        assert!(matches!(e, ClientError::Protocol(_)), "{e}");
        assert!(e.to_string().contains(want), "{want:?} not in {e}");
        drop(repl);
        server.await.unwrap();
    }
}
