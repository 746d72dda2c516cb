//! The extended query protocol and `lease lsn` over real 127.0.0.1 sockets:
//! with `tokio-postgres` (whose `query`, `prepare` and friends use Parse,
//! Describe, Bind, Execute and Sync, and ask for binary results), and with
//! raw messages for the exact replies and the error paths (an error skips
//! to Sync; a malformed body is an ERROR naming it; the daemon serves on).

mod page_service_support;

use page_service_support::req::*;
use page_service_support::*;
use pageserver::page_service::PageServiceConf;
use pageserver_api::pagestream::PagestreamBeMessage;
use pageserver_api::pagestream::PagestreamProtocolVersion::V3;
use postgres_protocol::message::frontend;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use utils::lsn::Lsn;

async fn pg_client(env: &TestEnv) -> Client {
    let conf = format!("host=127.0.0.1 port={} user=cloud_admin dbname=postgres", env.addr.port());
    let (client, conn) = tokio_postgres::connect(&conf, NoTls).await.expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

fn lease_cmd(env: &TestEnv, lsn: Lsn) -> String {
    format!("lease lsn {} {} {lsn}", env.tenant_id, env.timeline_id)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// `valid_until` covers the default lease length (ten minutes) from now,
/// and at most 1.25 times it: a renewal that writes the lease file writes
/// that far ahead (`tenant/timeline/lease.rs`).
fn check_valid_until(text: &str) {
    let ms: u64 = text.parse().expect("milliseconds since the epoch");
    let ahead = ms.saturating_sub(now_ms());
    assert!((590_000..=750_000).contains(&ahead), "valid_until {ms} is {ahead} ms ahead");
}

#[tokio::test]
async fn tokio_postgres_query_prepare_and_errors() {
    let env = TestEnv::start(PageServiceConf::default()).await;
    let client = pg_client(&env).await;

    // `query` (binary results requested) and `prepare`.
    let rows = client.query(&lease_cmd(&env, L1), &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    check_valid_until(rows[0].get::<_, &str>("valid_until"));
    let stmt = client.prepare(&lease_cmd(&env, L2)).await.unwrap();
    assert!(stmt.params().is_empty());
    let cols: Vec<_> = stmt.columns().iter().map(|c| (c.name(), c.type_().clone())).collect();
    assert_eq!(cols, [("valid_until", Type::TEXT)]);
    for _ in 0..2 {
        let row = client.query_one(&stmt, &[]).await.unwrap();
        check_valid_until(row.get(0));
    }
    let held = env.timeline.valid_leases(SystemTime::now());
    assert_eq!(held.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [L1, L2]);

    // The simple protocol, as Neon's compute sends it (trailing blank).
    let msgs = client.simple_query(&format!("{} ", lease_cmd(&env, L1))).await.unwrap();
    let SimpleQueryMessage::Row(row) = &msgs[1] else { panic!("{msgs:?}") };
    check_valid_until(row.get("valid_until").unwrap());

    // Refused (below the history): NULL, as Neon's compute expects.
    let row = client.query_one(&lease_cmd(&env, Lsn(INITIAL_LSN.0 - 1)), &[]).await.unwrap();
    assert_eq!(row.get::<_, Option<&str>>(0), None);

    // Errors name the problem; the session goes on.
    let e = client.query("SELECT 1", &[]).await.unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!((db.code().code(), db.message()), ("0A000", "unsupported command 'SELECT'"));
    let e = client.prepare_typed(&lease_cmd(&env, L1), &[Type::TEXT]).await.unwrap_err();
    let msg = e.as_db_error().unwrap().message().to_string();
    assert!(msg.contains("declares 1 parameter types") && msg.contains("no parameters"), "{msg}");
    let unknown = format!("lease lsn {} {} 0/1", env.tenant_id, utils::id::TimelineId::generate());
    let e = client.query(&unknown, &[]).await.unwrap_err();
    assert!(e.as_db_error().unwrap().message().contains("not found"), "{e}");
    let rows = client.query(&lease_cmd(&env, L1), &[]).await.unwrap();
    assert_eq!(rows.len(), 1, "the session still serves");
    drop(client);
    env.stop().await;
}

/// Tags of the next `n` messages.
async fn tags(c: &mut PgConn, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(c.read_msg().await.expect("a message").0);
    }
    v
}

fn parse(c: &mut PgConn, name: &str, query: &str) {
    frontend::parse(name, query, [], c.wbuf()).unwrap();
}

fn bind(c: &mut PgConn, portal: &str, stmt: &str) {
    let no_params: [Option<&[u8]>; 0] = [];
    frontend::bind(portal, stmt, [], no_params, |_, _| unreachable!(), [], c.wbuf())
        .map_err(|_| ())
        .unwrap();
}

#[tokio::test]
async fn raw_sequences_and_replies() {
    let env = TestEnv::start(PageServiceConf::default()).await;
    let mut c = env.connect().await;
    // Named statement and portal: ParseComplete, ParameterDescription,
    // RowDescription, BindComplete, RowDescription, DataRow, CommandComplete.
    parse(&mut c, "s", &lease_cmd(&env, L1));
    frontend::describe(b'S', "s", c.wbuf()).unwrap();
    bind(&mut c, "p", "s");
    frontend::describe(b'P', "p", c.wbuf()).unwrap();
    frontend::execute("p", 0, c.wbuf()).unwrap();
    frontend::sync(c.wbuf());
    c.flush().await;
    assert_eq!(tags(&mut c, 7).await, b"1tT2TDC");
    c.expect_ready().await;

    // Flush sends ParseComplete before any Sync.
    parse(&mut c, "", "");
    frontend::flush(c.wbuf());
    c.flush().await;
    assert_eq!(tags(&mut c, 1).await, b"1");
    // The empty query: NoData, then EmptyQueryResponse.
    bind(&mut c, "", "");
    frontend::describe(b'P', "", c.wbuf()).unwrap();
    frontend::execute("", 0, c.wbuf()).unwrap();
    frontend::close(b'S', "s", c.wbuf()).unwrap();
    frontend::sync(c.wbuf());
    c.flush().await;
    assert_eq!(tags(&mut c, 4).await, b"2nI3");
    c.expect_ready().await;

    // The pagestream through Execute: CopyBoth, then requests.
    parse(&mut c, "", &format!("pagestream_v3 {} {}", env.tenant_id, env.timeline_id));
    bind(&mut c, "", "");
    frontend::describe(b'P', "", c.wbuf()).unwrap();
    frontend::execute("", 0, c.wbuf()).unwrap();
    c.flush().await;
    assert_eq!(tags(&mut c, 4).await, b"12nW");
    let resp = c.request(&get_page(latest(1), REL_A, 2), V3).await;
    let PagestreamBeMessage::GetPage(p) = resp else { panic!("{resp:?}") };
    assert_eq!(p.page, expected_page(REL_A, 2, L2).unwrap());
    env.stop().await;
}

#[tokio::test]
async fn an_error_skips_to_sync_and_malformed_bodies_are_named() {
    let env = TestEnv::start(PageServiceConf::default()).await;
    let mut c = env.connect().await;
    // A failing Parse: everything up to Sync is discarded (no BindComplete,
    // no second error), then ReadyForQuery.
    parse(&mut c, "", "SELECT 1");
    bind(&mut c, "", "");
    frontend::execute("", 0, c.wbuf()).unwrap();
    frontend::query("pagestream_v3 x y", c.wbuf()).unwrap();
    frontend::sync(c.wbuf());
    c.flush().await;
    let e = c.expect_error().await;
    assert_eq!((e.code.as_str(), e.severity.as_str()), ("0A000", "ERROR"), "{e:?}");
    c.expect_ready().await;

    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        ("no NUL", [&b"P\0\0\0\x06s1"[..]].concat(), "08P01", "malformed Parse message"),
        ("lying count", b"P\0\0\0\x09\0q\0\x7f\xff".to_vec(), "08P01", "does not fit"),
        ("bad target", b"D\0\0\0\x06X\0".to_vec(), "08P01", "malformed Describe message"),
        ("missing stmt", b"D\0\0\0\x0aSnope\0".to_vec(), "26000", "'nope' does not exist"),
        ("missing portal", b"E\0\0\0\x0dnope\0\0\0\0\0".to_vec(), "34000", "portal 'nope'"),
        ("flush body", b"H\0\0\0\x05x".to_vec(), "08P01", "malformed Flush message"),
    ];
    for (what, bytes, code, expect) in cases {
        c.write_raw(&bytes).await;
        frontend::sync(c.wbuf());
        c.flush().await;
        let e = c.expect_error().await;
        assert_eq!(e.code, code, "{what}: {e:?}");
        assert!(e.message.contains(expect), "{what}: {e:?}");
        c.expect_ready().await;
    }

    // Parameters are refused, naming the count; a portal runs once.
    parse(&mut c, "s", &lease_cmd(&env, L1));
    let params = [Some(&b"x"[..])];
    frontend::bind(
        "",
        "s",
        [],
        params,
        |v, out| {
            out.extend_from_slice(v.unwrap());
            Ok(postgres_protocol::IsNull::No)
        },
        [],
        c.wbuf(),
    )
    .map_err(|_| ())
    .unwrap();
    frontend::sync(c.wbuf());
    c.flush().await;
    assert_eq!(tags(&mut c, 1).await, b"1");
    let e = c.expect_error().await;
    assert!(e.message.contains("supplies 1 parameters"), "{e:?}");
    c.expect_ready().await;
    bind(&mut c, "", "s");
    frontend::execute("", 0, c.wbuf()).unwrap();
    frontend::execute("", 0, c.wbuf()).unwrap();
    frontend::sync(c.wbuf());
    c.flush().await;
    assert_eq!(tags(&mut c, 3).await, b"2DC");
    let e = c.expect_error().await;
    assert_eq!(e.code, "55000", "{e:?}");
    c.expect_ready().await;

    // The session, and the daemon, still serve.
    let client = pg_client(&env).await;
    assert_eq!(client.query(&lease_cmd(&env, L2), &[]).await.unwrap().len(), 1);
    tokio::time::timeout(Duration::from_secs(5), c.query("")).await.unwrap();
    assert_eq!(tags(&mut c, 1).await, b"I");
    c.expect_ready().await;
    env.stop().await;
}
