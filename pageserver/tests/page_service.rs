//! Page service protocol tests over real 127.0.0.1 sockets: every pagestream
//! message type in v2 and v3, every error case (in-band errors keep the
//! stream; protocol errors end it with an ErrorResponse; the daemon keeps
//! serving), the libpq session (SSL/GSSENC refusal, unknown commands), and
//! JWT authentication.

mod page_service_support;

use page_service_support::req::*;
use page_service_support::*;
use pageserver::config::AuthType;
use pageserver::page_service::PageServiceConf;
use pageserver_api::config::PageServicePipeliningConfig;
use pageserver_api::pagestream::PagestreamProtocolVersion::{self, V2, V3};
use pageserver_api::pagestream::*;
use pageserver_api::reltag::RelTag;
use tokio::io::AsyncWriteExt;
use utils::lsn::Lsn;

fn modes() -> Vec<PageServiceConf> {
    let serial = PageServiceConf {
        pipelining: PageServicePipeliningConfig::Serial,
        ..PageServiceConf::default()
    };
    // The default has two batches in flight; one is Neon's behaviour.
    let mut one_in_flight = PageServiceConf::default();
    let PageServicePipeliningConfig::Pipelined(p) = &mut one_in_flight.pipelining else {
        unreachable!("the default is pipelined")
    };
    p.max_batches_in_flight = std::num::NonZeroUsize::MIN;
    vec![serial, PageServiceConf::default(), one_in_flight]
}

/// The v3 echo of the request header (v2 responses carry none).
fn check_echo(
    resp: &PagestreamBeMessage,
    sent: &PagestreamFeMessage,
    v: PagestreamProtocolVersion,
) {
    if v == V3 {
        assert_eq!(resp.request_header(), sent.header(), "v3 echoes the request header");
    } else {
        assert_eq!(*resp.request_header(), PagestreamRequest::default());
    }
}

#[tokio::test]
async fn every_message_type_v2_and_v3() {
    for conf in modes() {
        let env = TestEnv::start(conf).await;
        for v in [V2, V3] {
            let mut c = env.pagestream(v).await;
            let mut reqid = 100;
            let mut next = |lsn: Lsn| {
                reqid += 1;
                hdr(reqid, lsn, Lsn(0))
            };

            // Exists.
            for (rel, want) in [(REL_A, true), (REL_B, true), (REL_UNKNOWN, false)] {
                let r = exists(next(Lsn::MAX), rel);
                let resp = c.request(&r, v).await;
                check_echo(&resp, &r, v);
                let PagestreamBeMessage::Exists(e) = &resp else { panic!("{resp:?}") };
                assert_eq!(e.exists, want, "{rel}");
                if v == V3 {
                    assert_eq!(e.req.rel, rel);
                }
            }
            // A relation that did not exist yet at L1 - 1.
            let r = exists(next(Lsn(L1.0 - 8)), REL_A);
            let PagestreamBeMessage::Exists(e) = c.request(&r, v).await else { panic!() };
            assert!(!e.exists);

            // Nblocks at L1 and at the latest LSN.
            for (lsn, want) in [(L1, 10), (Lsn(L2.0 - 1), 10), (L2, 12), (Lsn::MAX, 12)] {
                let r = nblocks(next(lsn), REL_A);
                let resp = c.request(&r, v).await;
                check_echo(&resp, &r, v);
                let PagestreamBeMessage::Nblocks(n) = &resp else { panic!("{resp:?}") };
                assert_eq!(n.n_blocks, want, "at {lsn}");
            }

            // GetPage: versions by LSN, past the end of the relation.
            for (rel, blk, lsn) in [
                (REL_A, 0, L1),
                (REL_A, 0, L2),
                (REL_A, 0, Lsn::MAX),
                (REL_A, 5, Lsn::MAX),
                (REL_A, 11, Lsn::MAX),
                (REL_A, 11, L1),
                (REL_A, 12, Lsn::MAX),
                (REL_A, 1_000_000, Lsn::MAX),
                (REL_B, 2, L2),
            ] {
                let r = get_page(next(lsn), rel, blk);
                let resp = c.request(&r, v).await;
                check_echo(&resp, &r, v);
                let PagestreamBeMessage::GetPage(p) = &resp else { panic!("{resp:?}") };
                let lsn_eff = if lsn == Lsn::MAX { L2 } else { lsn };
                assert_eq!(p.page, expected_page(rel, blk, lsn_eff).unwrap(), "{rel} {blk} {lsn}");
                if v == V3 {
                    assert_eq!((p.req.rel, p.req.blkno), (rel, blk));
                }
            }

            // DbSize: (12 + 3) blocks at the latest LSN, 13 at L1.
            for (lsn, blocks) in [(Lsn::MAX, 15), (L1, 13)] {
                let r = db_size(next(lsn), DB);
                let resp = c.request(&r, v).await;
                check_echo(&resp, &r, v);
                let PagestreamBeMessage::DbSize(d) = &resp else { panic!("{resp:?}") };
                assert_eq!(d.db_size, blocks * BLCKSZ as i64);
                if v == V3 {
                    assert_eq!(d.req.dbnode, DB);
                }
            }

            // GetSlruSegment.
            let r = slru(next(Lsn::MAX), 0, 0);
            let resp = c.request(&r, v).await;
            check_echo(&resp, &r, v);
            let PagestreamBeMessage::GetSlruSegment(s) = &resp else { panic!("{resp:?}") };
            assert_eq!(s.segment, expected_clog_segment());
            if v == V3 {
                assert_eq!((s.req.kind, s.req.segno), (0, 0));
            }

            // Terminate ends the session cleanly.
            postgres_protocol::message::frontend::terminate(c.wbuf());
            c.flush().await;
            c.expect_eof().await;
        }
        env.stop().await;
    }
}

#[tokio::test]
async fn in_band_errors_keep_the_stream_open() {
    for conf in modes() {
        let env = TestEnv::start(conf).await;
        for v in [V2, V3] {
            let mut c = env.pagestream(v).await;
            let cases: Vec<(PagestreamFeMessage, &str)> = vec![
                (get_page(hdr(1, Lsn(0), Lsn(0)), REL_A, 0), "zero LSN"),
                (get_page(hdr(2, L1, L2), REL_A, 0), "less than not_modified_since"),
                (nblocks(hdr(3, Lsn(0), Lsn(0)), REL_A), "zero LSN"),
                (get_page(hdr(4, Lsn(INITIAL_LSN.0 - 1), Lsn(0)), REL_A, 0), "garbage collected"),
                (get_page(latest(5), REL_UNKNOWN, 0), "does not exist"),
                (get_page(latest(6), RelTag { relnode: 0, ..REL_A }, 0), "does not exist"),
                (get_page(hdr(7, Lsn(L1.0 - 8), Lsn(0)), REL_A, 0), "does not exist"),
                (nblocks(latest(8), REL_UNKNOWN), "does not exist"),
                (db_size(latest(9), 999), "does not exist"),
                (slru(latest(10), 7, 0), "invalid SLRU kind"),
                (slru(latest(11), 0, 55), "does not exist"),
            ];
            for (r, what) in &cases {
                let resp = c.request(r, v).await;
                let msg = error_message(&resp);
                assert!(msg.contains(what), "{r:?}: '{msg}' should mention '{what}'");
                check_echo(&resp, r, v);
            }
            // Pipelined: all errors at once, then a good request; order kept.
            for (r, _) in &cases {
                c.push_request(r, v);
            }
            let good = get_page(latest(99), REL_A, 3);
            c.push_request(&good, v);
            c.flush().await;
            for (r, _) in &cases {
                let resp = c.recv_response(v).await;
                error_message(&resp);
                check_echo(&resp, r, v);
            }
            let PagestreamBeMessage::GetPage(p) = c.recv_response(v).await else { panic!() };
            assert_eq!(p.page, expected_page(REL_A, 3, L2).unwrap());
        }
        env.stop().await;
    }
}

/// A bad message ends the stream: every earlier response first, then an
/// ErrorResponse, then EOF. Other connections are unaffected.
#[tokio::test]
async fn protocol_errors_end_the_stream_after_earlier_responses() {
    for conf in modes() {
        let env = TestEnv::start(conf).await;
        let good = get_page(latest(1), REL_B, 1);
        let mut oversized = vec![b'd'];
        oversized.extend_from_slice(&(4 + 70_000u32).to_be_bytes());
        oversized.extend_from_slice(&vec![0u8; 70_000]);
        let v3_get = good.serialize(V3);
        let bad_messages: Vec<(&str, Vec<u8>, &str)> = vec![
            ("truncated", copy_data(&v3_get[..v3_get.len() - 1]), "too short"),
            ("trailing", copy_data(&[&v3_get[..], &[0u8]].concat()), "trailing"),
            ("unknown tag", copy_data(&[&[9u8], &v3_get[1..]].concat()), "unknown"),
            ("empty", copy_data(&[]), "empty"),
            ("copy done", vec![b'c', 0, 0, 0, 4], "CopyDone"),
            ("copy fail", [&[b'f', 0, 0, 0, 9][..], b"oops\0"].concat(), "CopyFail"),
            ("query", [&[b'Q', 0, 0, 0, 6][..], b"x\0"].concat(), "unexpected message"),
            ("oversized", oversized, "exceeds"),
        ];
        for (what, bytes, expect) in bad_messages {
            let mut c = env.pagestream(V3).await;
            c.push_request(&good, V3);
            c.flush().await;
            c.write_raw(&bytes).await;
            let PagestreamBeMessage::GetPage(p) = c.recv_response(V3).await else { panic!() };
            assert_eq!(p.page, expected_page(REL_B, 1, L2).unwrap(), "{what}");
            let e = c.expect_error().await;
            assert!(e.message.contains(expect), "{what}: {e:?}");
            assert_eq!(e.code, "08P01", "{what}: {e:?}");
            c.expect_eof().await;
            // The daemon still serves.
            let mut other = env.pagestream(V2).await;
            let resp = other.request(&get_page(latest(2), REL_A, 1), V2).await;
            assert!(matches!(resp, PagestreamBeMessage::GetPage(_)), "{what}");
        }
        // EOF in the middle of a message and a clean EOF: no response, no crash.
        let mut c = env.pagestream(V2).await;
        c.write_raw(&[b'd', 0, 0]).await;
        c.stream().shutdown().await.unwrap();
        let e = c.expect_error().await;
        assert!(e.message.contains("in the middle of a message"), "{e:?}");
        c.expect_eof().await;
        env.stop().await;
    }
}

fn copy_data(body: &[u8]) -> Vec<u8> {
    let mut v = vec![b'd'];
    v.extend_from_slice(&(4 + body.len() as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

#[tokio::test]
async fn session_commands_and_negotiation() {
    let env = TestEnv::start(PageServiceConf::default()).await;

    // SSLRequest and GSSENCRequest are refused with 'N'; startup continues.
    let mut c = PgConn::connect(env.addr).await;
    postgres_protocol::message::frontend::ssl_request(c.wbuf());
    c.flush().await;
    assert_eq!(c.read_byte().await, b'N');
    c.write_raw(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30]).await; // GSSENCRequest
    assert_eq!(c.read_byte().await, b'N');
    c.startup(None).await.unwrap();

    // Unknown commands: ErrorResponse + ReadyForQuery, the session survives.
    let e = c.query_expect_error("SELECT 1").await;
    assert!(e.message.contains("unsupported command"), "{e:?}");
    let e = c.query_expect_error("pagestream_v3").await;
    assert!(e.message.contains("usage"), "{e:?}");
    let e = c.query_expect_error("pagestream_v3 nothex 00").await;
    assert!(e.message.contains("tenant id"), "{e:?}");
    let e = c
        .query_expect_error(&format!(
            "pagestream_v3 {} {}",
            env.tenant_id,
            utils::id::TimelineId::generate()
        ))
        .await;
    assert!(e.message.contains("not found"), "{e:?}");
    let e = c
        .query_expect_error(&format!(
            "pagestream_v2 {} {}",
            utils::id::TenantId::generate(),
            env.timeline_id
        ))
        .await;
    assert!(e.message.contains("not found"), "{e:?}");
    // Empty query: EmptyQueryResponse + ReadyForQuery.
    c.query("  ").await;
    assert_eq!(c.read_msg().await.unwrap().0, b'I');
    c.expect_ready().await;
    // Copy messages outside copy mode are ignored.
    c.write_raw(&copy_data(b"junk")).await;
    // Case-insensitive command, trailing semicolon: then the stream works.
    c.query(&format!("PageStream_V3 {} {};", env.tenant_id, env.timeline_id)).await;
    assert_eq!(c.read_msg().await.unwrap().0, b'W');
    let resp = c.request(&nblocks(latest(1), REL_B), V3).await;
    assert!(matches!(resp, PagestreamBeMessage::Nblocks(n) if n.n_blocks == 3));

    // Bad startup packets are rejected.
    let mut c = PgConn::connect(env.addr).await;
    c.write_raw(&[0, 0, 0, 4]).await;
    let e = c.expect_error().await;
    assert_eq!(e.severity, "FATAL");
    c.expect_eof().await;
    let mut c = PgConn::connect(env.addr).await;
    c.write_raw(&[0, 0, 0, 8, 0, 2, 0, 0]).await; // protocol 2.0
    let e = c.expect_error().await;
    assert!(e.message.contains("unsupported frontend protocol"), "{e:?}");
    // A lone Sync (extended query protocol) is answered with ReadyForQuery.
    let mut c = env.connect().await;
    c.write_raw(&[b'S', 0, 0, 0, 4]).await;
    c.expect_ready().await;
    // A client that disconnects right away.
    drop(PgConn::connect(env.addr).await);
    env.stop().await;
}

const PRIVATE_A: &str = include_str!("data/jwt_a_private.pem");
const PUBLIC_A: &str = include_str!("data/jwt_a_public.pem");
const PRIVATE_B: &str = include_str!("data/jwt_b_private.pem");

fn token(private: &str, claims: serde_json::Value) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let key = EncodingKey::from_ed_pem(private.as_bytes()).unwrap();
    jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &key).unwrap()
}

#[tokio::test]
async fn jwt_accept_and_reject() {
    let keydir = tempfile::tempdir().unwrap();
    let key_path = keydir.path().join("auth_public_key.pem");
    std::fs::write(&key_path, PUBLIC_A).unwrap();
    let conf = PageServiceConf {
        auth_type: AuthType::Jwt,
        auth_validation_public_key_path: Some(key_path),
        ..PageServiceConf::default()
    };
    let env = TestEnv::start(conf).await;
    let tenant = env.tenant_id.to_string();
    let stream_cmd = format!("pagestream_v3 {} {}", env.tenant_id, env.timeline_id);

    // Accepted: a token for this tenant, and a server-wide token.
    for claims in [
        serde_json::json!({"scope": "tenant", "tenant_id": tenant}),
        serde_json::json!({"scope": "pageserverapi"}),
    ] {
        let mut c = PgConn::connect(env.addr).await;
        c.startup(Some(&token(PRIVATE_A, claims.clone()))).await.unwrap();
        c.start_pagestream(env.tenant_id, env.timeline_id, V3).await.unwrap();
        let resp = c.request(&get_page(latest(1), REL_A, 0), V3).await;
        assert!(matches!(resp, PagestreamBeMessage::GetPage(_)), "{claims}");
    }

    // Rejected at startup: wrong key, expired, ineligible scope, not a JWT.
    for bad in [
        token(PRIVATE_B, serde_json::json!({"scope": "tenant", "tenant_id": tenant})),
        token(PRIVATE_A, serde_json::json!({"scope": "tenant", "tenant_id": tenant, "exp": 1})),
        token(PRIVATE_A, serde_json::json!({"scope": "safekeeperdata"})),
        "garbage".to_string(),
    ] {
        let mut c = PgConn::connect(env.addr).await;
        let e = c.startup(Some(&bad)).await.unwrap_err();
        assert_eq!((e.severity.as_str(), e.code.as_str()), ("FATAL", "28000"), "{e:?}");
        c.expect_eof().await;
    }

    // Rejected at the command: a token for another tenant.
    let other = utils::id::TenantId::generate().to_string();
    let mut c = PgConn::connect(env.addr).await;
    c.startup(Some(&token(PRIVATE_A, serde_json::json!({"scope": "tenant", "tenant_id": other}))))
        .await
        .unwrap();
    c.query(&stream_cmd).await;
    let e = c.expect_error().await;
    assert_eq!(e.code, "28000", "{e:?}");
    assert!(e.message.contains("mismatch"), "{e:?}");
    c.expect_eof().await;

    // Something other than a password message.
    let mut c = PgConn::connect(env.addr).await;
    postgres_protocol::message::frontend::startup_message([("user", "x")], c.wbuf()).unwrap();
    c.flush().await;
    assert_eq!(c.read_msg().await.unwrap().0, b'R');
    c.query("pagestream_v3 a b").await;
    let e = c.expect_error().await;
    assert_eq!(e.severity, "FATAL", "{e:?}");
    c.expect_eof().await;
    env.stop().await;
}

#[tokio::test]
async fn start_up_fails_on_bad_conf() {
    use std::num::NonZeroUsize;
    let conf = PageServiceConf {
        pipelining: PageServicePipeliningConfig::Pipelined(
            pageserver_api::config::PageServicePipeliningConfigPipelined {
                max_batch_size: NonZeroUsize::new(64).unwrap(),
                execution:
                    pageserver_api::config::PageServiceProtocolPipelinedExecutionStrategy::Tasks,
                batching: Default::default(),
                max_batches_in_flight: NonZeroUsize::MIN,
            },
        ),
        ..PageServiceConf::default()
    };
    let err = conf.validate(32).unwrap_err();
    assert!(err.contains("max_batch_size 64") && err.contains("max_get_vectored_keys 32"), "{err}");
    assert!(conf.validate(64).is_ok());
    let jwt_without_key =
        PageServiceConf { auth_type: AuthType::Jwt, ..PageServiceConf::default() };
    assert!(jwt_without_key.validate(32).unwrap_err().contains("auth_validation_public_key_path"));

    // page_service_main refuses to start with it.
    let dir = tempfile::tempdir().unwrap();
    let tenants = pageserver::tenant::mgr::TenantManager::load(
        std::sync::Arc::new(pageserver::tenant::StorageConf::for_tests(dir.path())),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let res = pageserver::page_service::page_service_main(
        std::sync::Arc::new(conf),
        tenants,
        listener,
        tokio_util::sync::CancellationToken::new(),
    )
    .await;
    assert!(res.unwrap_err().to_string().contains("max_get_vectored_keys"));
}
