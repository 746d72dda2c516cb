//! The golden file `testdata/pagestream_golden.json`: every pagestream
//! request and response, v2 and v3, with its fields and exact encoding.
//! This test checks the Rust codec against it (encode and decode); the
//! Python codec's test (`test_runner/regress/test_pagestream_golden.py`)
//! checks the same file. The file was written from the hand-written byte
//! layouts of `tests.rs` (`UPDATE_GOLDEN=1` rewrites it from them).
//!
//! Pages in the file are described, not spelled out: `{"fill": n}` is 8192
//! bytes of `n` with 0xA5 first and 0x5A last (`tests::page`).

use serde_json::{json, Value as Json};

use super::tests::{as_decoded, hdr, page, request_bytes, requests, responses, strip_request};
use super::*;
use PagestreamProtocolVersion::{V2, V3};

/// The protocol version number (2 or 3).
fn vnum(v: PagestreamProtocolVersion) -> u8 {
    match v {
        V2 => 2,
        V3 => 3,
    }
}

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/pagestream_golden.json");

/// Every variant's name; the exhaustive matches below make a new variant a
/// compile error here until it is named (and then the coverage check asks
/// for its golden entries).
fn request_name(m: &PagestreamFeMessage) -> &'static str {
    match m {
        PagestreamFeMessage::Exists(_) => "Exists",
        PagestreamFeMessage::Nblocks(_) => "Nblocks",
        PagestreamFeMessage::GetPage(_) => "GetPage",
        PagestreamFeMessage::DbSize(_) => "DbSize",
        PagestreamFeMessage::GetSlruSegment(_) => "GetSlruSegment",
    }
}
const REQUEST_NAMES: [&str; 5] = ["Exists", "Nblocks", "GetPage", "DbSize", "GetSlruSegment"];

fn response_name(m: &PagestreamBeMessage) -> &'static str {
    match m {
        PagestreamBeMessage::Exists(_) => "Exists",
        PagestreamBeMessage::Nblocks(_) => "Nblocks",
        PagestreamBeMessage::GetPage(_) => "GetPage",
        PagestreamBeMessage::Error(_) => "Error",
        PagestreamBeMessage::DbSize(_) => "DbSize",
        PagestreamBeMessage::GetSlruSegment(_) => "GetSlruSegment",
    }
}
const RESPONSE_NAMES: [&str; 6] =
    ["Exists", "Nblocks", "GetPage", "Error", "DbSize", "GetSlruSegment"];

fn rel_json(r: &RelTag) -> Json {
    json!([r.spcnode, r.dbnode, r.relnode, r.forknum])
}

/// The fill byte of a page built by `tests::page`.
fn page_fill(p: &[u8]) -> u8 {
    assert_eq!(p, &page(p[1])[..], "golden pages are tests::page(fill)");
    p[1]
}

fn request_fields(m: &PagestreamFeMessage) -> Json {
    match m {
        PagestreamFeMessage::Exists(r) => json!({"rel": rel_json(&r.rel)}),
        PagestreamFeMessage::Nblocks(r) => json!({"rel": rel_json(&r.rel)}),
        PagestreamFeMessage::GetPage(r) => json!({"rel": rel_json(&r.rel), "blkno": r.blkno}),
        PagestreamFeMessage::DbSize(r) => json!({"dbnode": r.dbnode}),
        PagestreamFeMessage::GetSlruSegment(r) => json!({"kind": r.kind, "segno": r.segno}),
    }
}

fn response_fields(m: &PagestreamBeMessage) -> Json {
    match m {
        PagestreamBeMessage::Exists(r) => json!({"rel": rel_json(&r.req.rel), "exists": r.exists}),
        PagestreamBeMessage::Nblocks(r) => {
            json!({"rel": rel_json(&r.req.rel), "n_blocks": r.n_blocks})
        }
        PagestreamBeMessage::GetPage(r) => {
            json!({"rel": rel_json(&r.req.rel), "blkno": r.req.blkno, "page": {"fill": page_fill(&r.page)}})
        }
        PagestreamBeMessage::Error(r) => json!({"message": r.message}),
        PagestreamBeMessage::DbSize(r) => json!({"dbnode": r.req.dbnode, "db_size": r.db_size}),
        PagestreamBeMessage::GetSlruSegment(r) => json!({
            "kind": r.req.kind,
            "segno": r.req.segno,
            "pages": r.segment.chunks(BLCKSZ).map(|p| json!({"fill": page_fill(p)})).collect::<Vec<_>>(),
        }),
    }
}

/// The file's content, from the hand-written layouts of `tests.rs`.
fn expected_json() -> Json {
    let h = hdr();
    let mut entries = Vec::new();
    for (msg, bytes) in requests() {
        for v in [V2, V3] {
            let full = request_bytes(&bytes, v);
            entries.push(json!({"kind": "request", "name": request_name(&msg), "version": vnum(v),
                "fields": request_fields(&msg), "hex": hex::encode(&full)}));
        }
    }
    for (msg, v2, v3) in responses() {
        for (v, bytes) in [(V2, v2.clone()), (V3, v3.clone())] {
            entries
                .push(json!({"kind": "response", "name": response_name(&msg), "version": vnum(v),
                "fields": response_fields(&msg), "hex": hex::encode(&bytes)}));
        }
    }
    json!({
        "format": 1,
        "header": {"reqid": h.reqid, "request_lsn": h.request_lsn.0, "not_modified_since": h.not_modified_since.0},
        "page_rule": "{\"fill\": n} = 8192 bytes of n, first byte 0xA5, last byte 0x5A",
        "entries": entries,
    })
}

#[test]
fn golden_file_matches_the_codec() {
    let expected = expected_json();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(PATH, serde_json::to_string_pretty(&expected).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read_to_string(PATH).expect("the golden file exists");
    let golden: Json = serde_json::from_str(&text).unwrap();
    assert_eq!(golden, expected, "the golden file differs from the protocol's byte layouts");
    let entries = golden["entries"].as_array().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for (msg, _) in requests() {
        for v in [V2, V3] {
            let e = find(entries, "request", request_name(&msg), v);
            let bytes = hex::decode(e["hex"].as_str().unwrap()).unwrap();
            assert_eq!(
                msg.serialize(v).to_vec(),
                bytes,
                "encode request {} v{}",
                request_name(&msg),
                vnum(v)
            );
            assert_eq!(PagestreamFeMessage::parse(&bytes, v).unwrap(), as_decoded(&msg, v));
            seen.insert(("request", request_name(&msg), vnum(v)));
        }
    }
    for (msg, _, _) in responses() {
        for v in [V2, V3] {
            let e = find(entries, "response", response_name(&msg), v);
            let bytes = hex::decode(e["hex"].as_str().unwrap()).unwrap();
            assert_eq!(
                msg.serialize(v).to_vec(),
                bytes,
                "encode response {} v{}",
                response_name(&msg),
                vnum(v)
            );
            let decoded = PagestreamBeMessage::deserialize(Bytes::from(bytes), v).unwrap();
            let want = if v == V2 { strip_request(&msg) } else { msg.clone() };
            assert_eq!(decoded, want);
            seen.insert(("response", response_name(&msg), vnum(v)));
        }
    }
    // Coverage: every variant of both directions, in both versions.
    for v in [2u8, 3] {
        for n in REQUEST_NAMES {
            assert!(seen.contains(&("request", n, v)), "no golden entry for request {n} v{v}");
        }
        for n in RESPONSE_NAMES {
            assert!(seen.contains(&("response", n, v)), "no golden entry for response {n} v{v}");
        }
    }
    assert_eq!(entries.len(), seen.len());
}

fn find<'a>(entries: &'a [Json], kind: &str, name: &str, v: PagestreamProtocolVersion) -> &'a Json {
    entries
        .iter()
        .find(|e| e["kind"] == kind && e["name"] == name && e["version"] == vnum(v))
        .unwrap_or_else(|| panic!("no golden entry for {kind} {name} v{}", vnum(v)))
}
