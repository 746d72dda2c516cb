use bytes::BytesMut;
use postgres_protocol::message::frontend;
use postgres_protocol::IsNull;

use super::*;

/// The body of the one message that `encode` writes (tag and length dropped).
fn body(encode: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode(&mut buf);
    let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
    assert_eq!(len + 1, buf.len(), "one message");
    buf[5..].to_vec()
}

fn violation_message(e: QueryError) -> String {
    match e {
        QueryError::Command { code, message } => {
            assert_eq!(code, sqlstate::PROTOCOL_VIOLATION, "{message}");
            message
        }
        other => panic!("expected a command-level protocol violation, got {other:?}"),
    }
}

#[test]
fn decodes_what_libpq_clients_encode() {
    let p = body(|b| frontend::parse("s1", "lease lsn a b c", [25, 0], b).unwrap());
    assert_eq!(
        parse_parse(&p).unwrap(),
        Parse { statement: "s1", query: "lease lsn a b c", param_types: vec![25, 0] }
    );

    let b = body(|b| {
        frontend::bind(
            "p1",
            "s1",
            [0i16],
            [Some(&b"x"[..]), None],
            |v, out| match v {
                Some(v) => {
                    out.extend_from_slice(v);
                    Ok(IsNull::No)
                }
                None => Ok(IsNull::Yes),
            },
            [1i16],
            b,
        )
        .map_err(|_| ())
        .unwrap()
    });
    let bind = parse_bind(&b).unwrap();
    assert_eq!((bind.portal, bind.statement), ("p1", "s1"));
    assert_eq!(bind.params, vec![Some(&b"x"[..]), None]);
    assert_eq!(bind.result_formats, vec![1]);

    let d = body(|b| frontend::describe(b'S', "s1", b).unwrap());
    assert_eq!(
        parse_named("Describe", &d).unwrap(),
        Named { target: Target::Statement, name: "s1" }
    );
    let c = body(|b| frontend::close(b'P', "", b).unwrap());
    assert_eq!(parse_named("Close", &c).unwrap(), Named { target: Target::Portal, name: "" });
    let e = body(|b| frontend::execute("p1", 7, b).unwrap());
    assert_eq!(parse_execute(&e).unwrap(), Execute { portal: "p1", max_rows: 7 });
    parse_empty("Sync", &[]).unwrap();
}

#[test]
fn malformed_bodies_name_the_message_and_the_fault() {
    let cases: Vec<(&str, Result<(), QueryError>, &str)> = vec![
        ("no NUL", parse_parse(b"s1").map(drop), "Parse message: statement name has no NUL"),
        ("bad UTF-8", parse_parse(b"\xff\0q\0\0\0").map(drop), "statement name is not UTF-8"),
        ("no count", parse_parse(b"\0q\0").map(drop), "parameter type count: 2 bytes needed"),
        ("lying count", parse_parse(b"\0q\0\x7f\xff").map(drop), "does not fit"),
        ("negative", parse_parse(b"\0q\0\xff\xff").map(drop), "negative parameter type count"),
        ("trailing", parse_parse(b"\0q\0\0\0x").map(drop), "1 trailing bytes"),
        ("bind len", parse_bind(b"\0\0\0\0\0\x01\xff\xff\xff\xfe\0\0").map(drop), "length -2"),
        ("bind short", parse_bind(b"\0\0\0\0\0\x01\0\0\0\x09ab\0\0").map(drop), "parameter value"),
        ("target", parse_named("Describe", b"X\0").map(drop), "Describe message: target 'X'"),
        ("close", parse_named("Close", b"S").map(drop), "Close message: name has no NUL"),
        ("execute", parse_execute(b"\0\0\0").map(drop), "Execute message: row limit"),
        ("sync", parse_empty("Sync", b"x"), "Sync message: 1 trailing bytes"),
    ];
    for (what, res, expect) in cases {
        let msg = violation_message(res.expect_err(what));
        assert!(msg.contains(expect), "{what}: '{msg}' should contain '{expect}'");
    }
}

/// Random bodies never panic and never decode with bytes left over.
#[test]
fn random_bodies_do_not_panic() {
    use rand::{Rng, SeedableRng};
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..20_000 {
        let len = rng.gen_range(0..24);
        let mut b: Vec<u8> = (0..len).map(|_| rng.gen_range(0..4u8)).collect();
        if rng.gen_bool(0.3) {
            b.push(0);
        }
        let _ = parse_parse(&b);
        let _ = parse_bind(&b);
        let _ = parse_named("Describe", &b);
        let _ = parse_execute(&b);
    }
}
