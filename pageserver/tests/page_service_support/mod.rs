//! Shared fixtures of the page service integration tests: a real page service
//! on a 127.0.0.1 socket over a real `TenantManager` in a temp directory, a
//! timeline with known contents, and a libpq client: `pq_proto::client`
//! (shared with pagebench and the WAL receiver) with raw access for tests of
//! malformed input; frontend messages are encoded by `postgres-protocol`.
//!
//! Timeline contents (the model that `expected_page` and friends encode):
//! - `INITIAL_LSN`: the timeline starts empty;
//! - `L1`: relation A (`REL_A`, 10 blocks, version 1), relation B (`REL_B`,
//!   3 blocks), a relmap file for database `DB`, CLOG segment 0 with 2 pages;
//! - `L2`: blocks 0..3 of A rewritten (version 2), A extended to 12 blocks
//!   (blocks 10 and 11, version 2).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use pageserver::page_service::{page_service_main, PageServiceConf};
use pageserver::tenant::mgr::TenantManager;
use pageserver::tenant::{StorageConf, Timeline};
use pageserver_api::pagestream::{
    PagestreamBeMessage, PagestreamFeMessage, PagestreamProtocolVersion, BLCKSZ,
};
use pageserver_api::reltag::{RelTag, SlruKind};
use postgres_protocol::message::frontend;
use pq_proto::client::{read_frame, BackendMessage, Client, ClientError};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;

pub const SPC: u32 = 1663;
pub const DB: u32 = 5;
pub const REL_A: RelTag = RelTag { spcnode: SPC, dbnode: DB, relnode: 1000, forknum: 0 };
pub const REL_B: RelTag = RelTag { spcnode: SPC, dbnode: DB, relnode: 1001, forknum: 0 };
pub const REL_UNKNOWN: RelTag = RelTag { spcnode: SPC, dbnode: DB, relnode: 4242, forknum: 0 };
pub const INITIAL_LSN: Lsn = Lsn(0x0100_0000);
pub const L1: Lsn = Lsn(0x0200_0000);
pub const L2: Lsn = Lsn(0x0300_0000);
pub const CLOG_PAGES: u32 = 2;

/// Bound for anything a test waits on, so a hang fails instead of stalling CI.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A recognisable page: its identity in the first bytes, then a pattern.
pub fn page_image(tag: u32, blk: u32, version: u8) -> Bytes {
    let mut p = BytesMut::with_capacity(BLCKSZ);
    p.put_u32(tag);
    p.put_u32(blk);
    p.put_u8(version);
    while p.len() < BLCKSZ {
        let i = p.len() as u32;
        p.put_u8((i.wrapping_mul(31) ^ tag ^ blk.wrapping_mul(7) ^ version as u32) as u8);
    }
    p.freeze()
}

pub fn zero_page() -> Bytes {
    Bytes::from(vec![0u8; BLCKSZ])
}

/// Number of blocks of a relation of the model at `lsn`, `None` if absent.
pub fn expected_nblocks(rel: RelTag, lsn: Lsn) -> Option<u32> {
    match rel {
        _ if lsn < L1 => None,
        REL_A if lsn < L2 => Some(10),
        REL_A => Some(12),
        REL_B => Some(3),
        _ => None,
    }
}

/// The page of the model, `None` if the relation does not exist at `lsn`.
pub fn expected_page(rel: RelTag, blk: u32, lsn: Lsn) -> Option<Bytes> {
    let n = expected_nblocks(rel, lsn)?;
    if blk >= n {
        return Some(zero_page());
    }
    let version = if rel == REL_A && lsn >= L2 && !(3..10).contains(&blk) { 2 } else { 1 };
    Some(page_image(rel.relnode, blk, version))
}

pub fn expected_clog_segment() -> Bytes {
    let mut seg = BytesMut::new();
    for b in 0..CLOG_PAGES {
        seg.extend_from_slice(&page_image(0xC106, b, 1));
    }
    seg.freeze()
}

/// Writes the model's data for `L1` and `L2`.
async fn write_model(tl: &Timeline) {
    let mut m = tl.begin_modification(L1);
    m.init_empty().await.unwrap();
    m.put_relmap_file(SPC, DB, Bytes::from(vec![7u8; 512])).await.unwrap();
    for blk in 0..10 {
        m.put_rel_page_image(REL_A, blk, page_image(REL_A.relnode, blk, 1)).await.unwrap();
    }
    for blk in 0..3 {
        m.put_rel_page_image(REL_B, blk, page_image(REL_B.relnode, blk, 1)).await.unwrap();
    }
    m.put_slru_segment_creation(SlruKind::Clog, 0, CLOG_PAGES).await.unwrap();
    for blk in 0..CLOG_PAGES {
        m.put_slru_page_image(SlruKind::Clog, 0, blk, page_image(0xC106, blk, 1)).await.unwrap();
    }
    m.commit().await.unwrap();

    let mut m = tl.begin_modification(L2);
    for blk in (0..3).chain(10..12) {
        m.put_rel_page_image(REL_A, blk, page_image(REL_A.relnode, blk, 2)).await.unwrap();
    }
    m.commit().await.unwrap();
    assert_eq!(tl.get_last_record_lsn(), L2);
}

/// A running page service over a tenant with one timeline holding the model.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub tenants: Arc<TenantManager>,
    pub tenant_id: TenantId,
    pub timeline_id: TimelineId,
    pub timeline: Arc<Timeline>,
    pub addr: SocketAddr,
    pub cancel: CancellationToken,
    server: Option<JoinHandle<anyhow::Result<()>>>,
    extra_servers: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl TestEnv {
    pub async fn start(conf: PageServiceConf) -> TestEnv {
        TestEnv::start_with(conf, |_| {}).await
    }

    /// `tweak` may adjust the storage settings (e.g. `wait_lsn_timeout`).
    pub async fn start_with(
        conf: PageServiceConf,
        tweak: impl FnOnce(&mut StorageConf),
    ) -> TestEnv {
        let dir = tempfile::tempdir().unwrap();
        let mut storage = StorageConf::for_tests(dir.path());
        tweak(&mut storage);
        let cancel = CancellationToken::new();
        let tenants = TenantManager::load(Arc::new(storage), cancel.child_token()).await.unwrap();
        let tenant_id = TenantId::generate();
        let timeline_id = TimelineId::generate();
        let tenant = tenants.create_tenant(tenant_id).await.unwrap();
        let timeline = tenant.create_empty_timeline(timeline_id, INITIAL_LSN, 16).await.unwrap();
        write_model(&timeline).await;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(page_service_main(
            Arc::new(conf),
            Arc::clone(&tenants),
            listener,
            cancel.child_token(),
        ));
        TestEnv {
            dir,
            tenants,
            tenant_id,
            timeline_id,
            timeline,
            addr,
            cancel,
            server: Some(server),
            extra_servers: Vec::new(),
        }
    }

    /// Another page service, with its own configuration, over the same
    /// tenants; it stops with this environment's page service.
    pub fn spawn_service(&mut self, conf: PageServiceConf) -> SocketAddr {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
        let handle = tokio::spawn(page_service_main(
            Arc::new(conf),
            Arc::clone(&self.tenants),
            listener,
            self.cancel.child_token(),
        ));
        self.extra_servers.push(handle);
        addr
    }

    /// A connected, trust-authenticated session.
    pub async fn connect(&self) -> PgConn {
        let mut c = PgConn::connect(self.addr).await;
        c.startup(None).await.expect("startup");
        c
    }

    /// A session in pagestream mode on the model's timeline.
    pub async fn pagestream(&self, version: PagestreamProtocolVersion) -> PgConn {
        let mut c = self.connect().await;
        c.start_pagestream(self.tenant_id, self.timeline_id, version).await.expect("pagestream");
        c
    }

    /// Stops the page service; returns how long that took.
    pub async fn stop_page_service(&mut self) -> Duration {
        let started = Instant::now();
        self.cancel.cancel();
        for server in self.server.take().into_iter().chain(self.extra_servers.drain(..)) {
            tokio::time::timeout(TEST_TIMEOUT, server)
                .await
                .expect("page service did not stop")
                .unwrap()
                .unwrap();
        }
        started.elapsed()
    }

    pub async fn stop(mut self) {
        self.stop_page_service().await;
        tokio::time::timeout(TEST_TIMEOUT, self.tenants.shutdown()).await.unwrap();
    }
}

/// Fields of an ErrorResponse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgError {
    pub severity: String,
    pub code: String,
    pub message: String,
}

/// ErrorResponse fields, decoded by `pq_proto` (which refuses trailing
/// bytes and unterminated fields).
pub fn parse_error_fields(body: &[u8]) -> PgError {
    to_pg_error(pq_proto::ErrorFields::parse(body).expect("a well-formed ErrorResponse"))
}

fn to_pg_error(f: pq_proto::ErrorFields) -> PgError {
    let e = PgError { severity: f.severity, code: f.code, message: f.message };
    assert!(!e.severity.is_empty() && e.code.len() == 5 && !e.message.is_empty(), "{e:?}");
    e
}

/// A libpq client connection for tests: `pq_proto`'s client (the one
/// pagebench and the WAL receiver use), plus raw access for tests that send
/// malformed or out-of-order bytes and check the server's exact replies.
pub struct PgConn {
    client: Client,
}

impl PgConn {
    pub async fn connect(addr: SocketAddr) -> PgConn {
        let stream = TcpStream::connect(addr).await.unwrap();
        PgConn { client: Client::from_stream(stream).unwrap() }
    }

    pub async fn write_raw(&mut self, bytes: &[u8]) {
        self.client.write_raw(bytes).await.unwrap();
    }

    /// Sends what `frontend` encoders put into the write buffer.
    pub async fn flush(&mut self) {
        self.client.flush().await.unwrap();
    }

    pub fn wbuf(&mut self) -> &mut BytesMut {
        self.client.write_buf()
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        self.client.parts_mut().0
    }

    /// Reads one byte (the answer to SSLRequest/GSSENCRequest).
    pub async fn read_byte(&mut self) -> u8 {
        tokio::time::timeout(TEST_TIMEOUT, self.client.read_raw_byte())
            .await
            .expect("timed out waiting for the server")
            .unwrap()
    }

    /// The next backend message `(tag, body)`, or `None` on EOF (or reset).
    pub async fn read_msg(&mut self) -> Option<(u8, Bytes)> {
        let read = tokio::time::timeout(TEST_TIMEOUT, self.client.recv_frame())
            .await
            .expect("timed out waiting for the server");
        match read {
            Ok(frame) => frame,
            Err(ClientError::Io { .. }) => None,
            Err(e) => panic!("reading a backend message: {e}"),
        }
    }

    /// Expects the connection to close (after any number of `allowed` messages).
    pub async fn expect_eof(&mut self) {
        if let Some((tag, body)) = self.read_msg().await {
            panic!("expected EOF, got '{}' {:?}", tag as char, &body[..body.len().min(64)]);
        }
    }

    pub async fn expect_error(&mut self) -> PgError {
        match self.read_msg().await {
            Some((b'E', body)) => parse_error_fields(&body),
            Some((tag, body)) => panic!("expected ErrorResponse, got '{}' {body:?}", tag as char),
            None => panic!("expected ErrorResponse, got EOF"),
        }
    }

    pub async fn expect_ready(&mut self) {
        match self.read_msg().await {
            Some((b'Z', body)) => assert_eq!(&body[..], b"I"),
            other => panic!("expected ReadyForQuery, got {other:?}"),
        }
    }

    /// StartupMessage, optional password, then everything up to ReadyForQuery.
    pub async fn startup(&mut self, password: Option<&str>) -> Result<(), PgError> {
        let params =
            [("user", "cloud_admin"), ("database", "postgres"), ("application_name", "test")];
        let started = tokio::time::timeout(TEST_TIMEOUT, self.client.startup(&params, password))
            .await
            .expect("timed out during startup");
        match started {
            Ok(()) => {}
            Err(ClientError::Server { fields, .. }) => return Err(to_pg_error(*fields)),
            Err(e) => panic!("startup: {e}"),
        }
        for required in ["client_encoding", "integer_datetimes", "server_version"] {
            assert!(
                self.client.server_parameter(required).is_some(),
                "missing ParameterStatus {required}"
            );
        }
        Ok(())
    }

    pub async fn query(&mut self, q: &str) {
        frontend::query(q, self.wbuf()).unwrap();
        self.flush().await;
    }

    /// Sends a command that must fail without ending the session.
    pub async fn query_expect_error(&mut self, q: &str) -> PgError {
        let res = tokio::time::timeout(TEST_TIMEOUT, self.client.simple_query(q))
            .await
            .expect("timed out waiting for the server");
        let e = match res {
            Err(ClientError::Server { fields, .. }) => to_pg_error(*fields),
            other => panic!("expected an error from '{q}', got {other:?}"),
        };
        assert_eq!(e.severity, "ERROR", "{e:?}");
        e
    }

    pub async fn start_pagestream(
        &mut self,
        tenant: TenantId,
        timeline: TimelineId,
        version: PagestreamProtocolVersion,
    ) -> Result<(), PgError> {
        let cmd = match version {
            PagestreamProtocolVersion::V2 => "pagestream_v2",
            PagestreamProtocolVersion::V3 => "pagestream_v3",
        };
        let query = format!("{cmd} {tenant} {timeline}");
        let res = tokio::time::timeout(TEST_TIMEOUT, self.client.start_copy(&query))
            .await
            .expect("timed out waiting for the server");
        match res {
            Ok(BackendMessage::CopyBothResponse) => Ok(()),
            Err(ClientError::Server { fields, .. }) => Err(to_pg_error(*fields)),
            other => panic!("expected CopyBothResponse, got {other:?}"),
        }
    }

    /// Buffers one request as a CopyData (call `flush` to send).
    pub fn push_request(&mut self, req: &PagestreamFeMessage, v: PagestreamProtocolVersion) {
        let body = req.serialize(v);
        frontend::CopyData::new(&body[..]).unwrap().write(self.wbuf());
    }

    /// Buffers a CopyData with arbitrary contents.
    pub fn push_copy_data(&mut self, body: &[u8]) {
        frontend::CopyData::new(body).unwrap().write(self.wbuf());
    }

    /// The next pagestream response.
    pub async fn recv_response(&mut self, v: PagestreamProtocolVersion) -> PagestreamBeMessage {
        match self.read_msg().await {
            Some((b'd', body)) => PagestreamBeMessage::deserialize(body, v).unwrap(),
            Some((b'E', body)) => {
                panic!("ErrorResponse instead of a response: {:?}", parse_error_fields(&body))
            }
            other => panic!("expected CopyData, got {other:?}"),
        }
    }

    /// Sends all `reqs` (in one go, concurrently with reading) and returns
    /// the responses in arrival order.
    pub async fn pipeline(
        &mut self,
        reqs: &[PagestreamFeMessage],
        v: PagestreamProtocolVersion,
    ) -> Vec<PagestreamBeMessage> {
        let mut out = BytesMut::new();
        for r in reqs {
            let body = r.serialize(v);
            frontend::CopyData::new(&body[..]).unwrap().write(&mut out);
        }
        let (stream, rbuf) = self.client.parts_mut();
        let (mut rd, mut wr) = stream.split();
        let write = async move { wr.write_all(&out).await.unwrap() };
        let read = async move {
            let mut resps = Vec::with_capacity(reqs.len());
            while resps.len() < reqs.len() {
                let frame = tokio::time::timeout(TEST_TIMEOUT, read_frame(&mut rd, rbuf))
                    .await
                    .expect("timed out waiting for responses")
                    .unwrap();
                let Some((tag, body)) = frame else {
                    panic!("EOF after {} of {} responses", resps.len(), reqs.len());
                };
                assert_eq!(tag, b'd', "expected CopyData, got '{}': {body:?}", tag as char);
                resps.push(PagestreamBeMessage::deserialize(body, v).unwrap());
            }
            resps
        };
        let ((), resps) = tokio::join!(write, read);
        resps
    }

    /// One request, one response.
    pub async fn request(
        &mut self,
        req: &PagestreamFeMessage,
        v: PagestreamProtocolVersion,
    ) -> PagestreamBeMessage {
        self.push_request(req, v);
        self.flush().await;
        self.recv_response(v).await
    }
}

/// Starts a pagestream whose client floods requests and never reads. The
/// returned read half keeps the socket open (and unread) until dropped; the
/// task writing the flood ends when the server closes the connection.
pub async fn slow_reader(
    env: &TestEnv,
    addr: std::net::SocketAddr,
) -> (tokio::task::JoinHandle<()>, tokio::net::tcp::OwnedReadHalf) {
    let mut c = PgConn::connect(addr).await;
    c.startup(None).await.unwrap();
    c.start_pagestream(env.tenant_id, env.timeline_id, PagestreamProtocolVersion::V2)
        .await
        .unwrap();
    for i in 0..5000u32 {
        c.push_request(
            &req::get_page(req::latest(i as u64), REL_A, i % 12),
            PagestreamProtocolVersion::V2,
        );
    }
    let flood = c.wbuf().split();
    let (stream, _) = c.client.into_parts();
    let (rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&flood).await;
    });
    (writer, rd)
}

/// Request builders.
pub mod req {
    use pageserver_api::pagestream::*;
    use pageserver_api::reltag::RelTag;
    use utils::lsn::Lsn;

    pub fn hdr(reqid: u64, request_lsn: Lsn, not_modified_since: Lsn) -> PagestreamRequest {
        PagestreamRequest { reqid, request_lsn, not_modified_since }
    }

    /// Latest: request_lsn MAX, not_modified_since as a primary would send.
    pub fn latest(reqid: u64) -> PagestreamRequest {
        hdr(reqid, Lsn::MAX, super::L1)
    }

    pub fn get_page(h: PagestreamRequest, rel: RelTag, blkno: u32) -> PagestreamFeMessage {
        PagestreamFeMessage::GetPage(PagestreamGetPageRequest { hdr: h, rel, blkno })
    }

    pub fn exists(h: PagestreamRequest, rel: RelTag) -> PagestreamFeMessage {
        PagestreamFeMessage::Exists(PagestreamExistsRequest { hdr: h, rel })
    }

    pub fn nblocks(h: PagestreamRequest, rel: RelTag) -> PagestreamFeMessage {
        PagestreamFeMessage::Nblocks(PagestreamNblocksRequest { hdr: h, rel })
    }

    pub fn db_size(h: PagestreamRequest, dbnode: u32) -> PagestreamFeMessage {
        PagestreamFeMessage::DbSize(PagestreamDbSizeRequest { hdr: h, dbnode })
    }

    pub fn slru(h: PagestreamRequest, kind: u8, segno: u32) -> PagestreamFeMessage {
        PagestreamFeMessage::GetSlruSegment(PagestreamGetSlruSegmentRequest { hdr: h, kind, segno })
    }
}

/// The in-band error message of a response, or panics.
pub fn error_message(resp: &PagestreamBeMessage) -> &str {
    match resp {
        PagestreamBeMessage::Error(e) => &e.message,
        other => panic!("expected an Error response, got {other:?}"),
    }
}
