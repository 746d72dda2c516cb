use bytes::BytesMut;
use pq_proto::client::{decode_backend, parse_backend_frame, BackendMessage};
use pq_proto::extended::{Bind, Named, Parse, Target};
use utils::id::{TenantId, TimelineId};

use super::*;

fn lease_query() -> String {
    format!("lease lsn {} {} 0/1000", TenantId::generate(), TimelineId::generate())
}

fn parse_msg<'a>(statement: &'a str, query: &'a str) -> Parse<'a> {
    Parse { statement, query, param_types: vec![] }
}

fn bind_msg<'a>(portal: &'a str, statement: &'a str, formats: Vec<i16>) -> Bind<'a> {
    Bind { portal, statement, params: vec![], result_formats: formats }
}

/// The backend messages in `out`, decoded (and `out` emptied).
fn replies(out: &mut BytesMut) -> Vec<BackendMessage> {
    let mut v = Vec::new();
    while let Some((tag, body)) = parse_backend_frame(out).unwrap() {
        v.push(decode_backend(tag, body).unwrap());
    }
    assert!(out.is_empty());
    v
}

fn tag_of(m: &BackendMessage) -> u8 {
    match m {
        BackendMessage::Other { tag, .. } => *tag,
        BackendMessage::RowDescription(_) => b'T',
        other => panic!("unexpected {other:?}"),
    }
}

fn code(e: QueryError) -> (&'static [u8; 5], String) {
    match e {
        QueryError::Command { code, message } => (code, message),
        other => panic!("expected a command error, got {other:?}"),
    }
}

#[test]
fn statement_and_portal_lifecycle() {
    let mut st = ExtendedState::default();
    let mut out = BytesMut::new();
    let q = lease_query();
    st.parse(&parse_msg("s1", &q), &mut out).unwrap();
    st.describe(&Named { target: Target::Statement, name: "s1" }, &mut out).unwrap();
    st.bind(&bind_msg("p1", "s1", vec![1]), &mut out).unwrap();
    st.describe(&Named { target: Target::Portal, name: "p1" }, &mut out).unwrap();
    let r = replies(&mut out);
    let tags: Vec<u8> = r.iter().map(tag_of).collect();
    assert_eq!(tags, b"1tT2T");
    assert_eq!(r[2], BackendMessage::RowDescription(vec!["valid_until".into()]));
    // The portal's RowDescription carries the binary format code asked for.
    let mut raw = BytesMut::new();
    st.describe(&Named { target: Target::Portal, name: "p1" }, &mut raw).unwrap();
    assert_eq!(raw[raw.len() - 2..], [0, 1], "format code of the only column");

    let p = st.take_for_execute("p1").unwrap();
    assert_eq!(p.formats, vec![1]);
    let (c, m) = code(st.take_for_execute("p1").unwrap_err());
    assert_eq!(c, sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE, "{m}");
    assert!(m.contains("already ran"), "{m}");

    // Sync drops portals, not statements.
    st.end_transaction();
    let (c, m) = code(st.take_for_execute("p1").unwrap_err());
    assert_eq!(c, sqlstate::INVALID_CURSOR_NAME);
    assert!(m.contains("portal 'p1' does not exist"), "{m}");
    st.bind(&bind_msg("", "s1", vec![]), &mut out).unwrap();

    // Close: CloseComplete, missing names are fine.
    st.close(&Named { target: Target::Statement, name: "s1" }, &mut out);
    st.close(&Named { target: Target::Statement, name: "nope" }, &mut out);
    assert_eq!(replies(&mut out).iter().map(tag_of).collect::<Vec<_>>(), b"233");
    let (c, m) = code(st.bind(&bind_msg("", "s1", vec![]), &mut out).unwrap_err());
    assert_eq!(c, sqlstate::INVALID_SQL_STATEMENT_NAME);
    assert!(m.contains("prepared statement 's1' does not exist"), "{m}");
}

#[test]
fn copy_and_empty_commands_describe_as_no_data() {
    let mut st = ExtendedState::default();
    let mut out = BytesMut::new();
    let q = format!("pagestream_v3 {} {}", TenantId::generate(), TimelineId::generate());
    st.parse(&parse_msg("", &q), &mut out).unwrap();
    st.describe(&Named { target: Target::Statement, name: "" }, &mut out).unwrap();
    st.parse(&parse_msg("e", "  "), &mut out).unwrap();
    st.bind(&bind_msg("", "e", vec![]), &mut out).unwrap();
    st.describe(&Named { target: Target::Portal, name: "" }, &mut out).unwrap();
    assert_eq!(replies(&mut out).iter().map(tag_of).collect::<Vec<_>>(), b"1tn12n");
    assert_eq!(st.take_for_execute("").unwrap().command, Command::Empty);
}

#[test]
fn refusals_name_the_problem() {
    let mut st = ExtendedState::default();
    let mut out = BytesMut::new();
    let q = lease_query();
    let with_types = Parse { statement: "", query: &q, param_types: vec![25] };
    let (c, m) = code(st.parse(&with_types, &mut out).unwrap_err());
    assert_eq!(c, sqlstate::PROTOCOL_VIOLATION);
    assert!(m.contains("declares 1 parameter types"), "{m}");
    let (_, m) = code(st.parse(&parse_msg("", "SELECT 1"), &mut out).unwrap_err());
    assert!(m.contains("unsupported command"), "{m}");

    st.parse(&parse_msg("s", &q), &mut out).unwrap();
    let (c, _) = code(st.parse(&parse_msg("s", &q), &mut out).unwrap_err());
    assert_eq!(c, sqlstate::DUPLICATE_PREPARED_STATEMENT);
    let with_params =
        Bind { portal: "", statement: "s", params: vec![Some(b"x"), None], result_formats: vec![] };
    let (_, m) = code(st.bind(&with_params, &mut out).unwrap_err());
    assert!(m.contains("supplies 2 parameters, but prepared statement 's' requires 0"), "{m}");
    let (c, m) = code(st.bind(&bind_msg("", "s", vec![2]), &mut out).unwrap_err());
    assert_eq!(c, sqlstate::INVALID_PARAMETER_VALUE);
    assert!(m.contains("format code 2"), "{m}");
    let (_, m) = code(st.bind(&bind_msg("", "s", vec![0, 0]), &mut out).unwrap_err());
    assert!(m.contains("2 result formats but the command returns 1 columns"), "{m}");
    st.bind(&bind_msg("p", "s", vec![0]), &mut out).unwrap();
    let (c, _) = code(st.bind(&bind_msg("p", "s", vec![]), &mut out).unwrap_err());
    assert_eq!(c, sqlstate::DUPLICATE_CURSOR);
    // The unnamed portal is replaced by the next Bind of it.
    st.bind(&bind_msg("", "s", vec![]), &mut out).unwrap();
    st.bind(&bind_msg("", "s", vec![]), &mut out).unwrap();
}

#[test]
fn statements_and_portals_are_bounded() {
    let mut st = ExtendedState::default();
    let mut out = BytesMut::new();
    let q = lease_query();
    for i in 0..MAX_STATEMENTS {
        st.parse(&parse_msg(&format!("s{i}"), &q), &mut out).unwrap();
    }
    st.parse(&parse_msg("", &q), &mut out).unwrap();
    let (c, m) = code(st.parse(&parse_msg("one more", &q), &mut out).unwrap_err());
    assert_eq!(c, sqlstate::PROGRAM_LIMIT_EXCEEDED);
    assert!(m.contains(&format!("at most {MAX_STATEMENTS}")), "{m}");
    st.close(&Named { target: Target::Statement, name: "s0" }, &mut out);
    st.parse(&parse_msg("one more", &q), &mut out).unwrap();

    for i in 0..MAX_PORTALS {
        st.bind(&bind_msg(&format!("p{i}"), "s1", vec![]), &mut out).unwrap();
    }
    let (c, m) = code(st.bind(&bind_msg("", "s1", vec![]), &mut out).unwrap_err());
    assert_eq!(c, sqlstate::PROGRAM_LIMIT_EXCEEDED);
    assert!(m.contains(&format!("at most {MAX_PORTALS}")), "{m}");
    st.end_transaction();
    st.bind(&bind_msg("", "s1", vec![]), &mut out).unwrap();
}
