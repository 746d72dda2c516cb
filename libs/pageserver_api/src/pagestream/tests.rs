//! Exact byte layouts of every pagestream message in v2 and v3 (written out by
//! hand from the protocol table, not produced by the encoder), round trips,
//! and the decoder's rejections.

use super::*;
use PagestreamProtocolVersion::{V2, V3};

const REL: RelTag = RelTag { spcnode: 0x0000_067F, dbnode: 5, relnode: 0x4000, forknum: 2 };
const REL_BYTES: [u8; 13] = [0, 0, 6, 0x7F, 0, 0, 0, 5, 0, 0, 0x40, 0, 2];

pub(super) fn hdr() -> PagestreamRequest {
    PagestreamRequest {
        reqid: 0x0102_0304_0506_0708,
        request_lsn: Lsn(0x0000_0001_0000_00AA),
        not_modified_since: Lsn(0x0000_0000_0000_0BBB),
    }
}

/// The v2 header after the tag: request_lsn, not_modified_since.
const V2_LSNS: [u8; 16] = [0, 0, 0, 1, 0, 0, 0, 0xAA, 0, 0, 0, 0, 0, 0, 0x0B, 0xBB];
const REQID: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub(super) fn requests() -> Vec<(PagestreamFeMessage, Vec<u8>)> {
    let h = hdr();
    vec![
        (
            PagestreamFeMessage::Exists(PagestreamExistsRequest { hdr: h, rel: REL }),
            cat(&[&[0], &REL_BYTES]),
        ),
        (
            PagestreamFeMessage::Nblocks(PagestreamNblocksRequest { hdr: h, rel: REL }),
            cat(&[&[1], &REL_BYTES]),
        ),
        (
            PagestreamFeMessage::GetPage(PagestreamGetPageRequest {
                hdr: h,
                rel: REL,
                blkno: 0xDEAD_BEEF,
            }),
            cat(&[&[2], &REL_BYTES, &[0xDE, 0xAD, 0xBE, 0xEF]]),
        ),
        (
            PagestreamFeMessage::DbSize(PagestreamDbSizeRequest { hdr: h, dbnode: 0x3039 }),
            cat(&[&[3], &[0, 0, 0x30, 0x39]]),
        ),
        (
            PagestreamFeMessage::GetSlruSegment(PagestreamGetSlruSegmentRequest {
                hdr: h,
                kind: 2,
                segno: 7,
            }),
            cat(&[&[4], &[2, 0, 0, 0, 7]]),
        ),
    ]
}

/// (tag, body) -> full encoding for `version`.
pub(super) fn request_bytes(tag_and_body: &[u8], version: PagestreamProtocolVersion) -> Vec<u8> {
    let (tag, body) = tag_and_body.split_at(1);
    match version {
        V2 => cat(&[tag, &V2_LSNS, body]),
        V3 => cat(&[tag, &REQID, &V2_LSNS, body]),
    }
}

/// What the decoder returns for `msg` in `version`: v2 has no reqid on the wire.
pub(super) fn as_decoded(
    msg: &PagestreamFeMessage,
    version: PagestreamProtocolVersion,
) -> PagestreamFeMessage {
    let mut m = msg.clone();
    if version == V2 {
        match &mut m {
            PagestreamFeMessage::Exists(r) => r.hdr.reqid = 0,
            PagestreamFeMessage::Nblocks(r) => r.hdr.reqid = 0,
            PagestreamFeMessage::GetPage(r) => r.hdr.reqid = 0,
            PagestreamFeMessage::DbSize(r) => r.hdr.reqid = 0,
            PagestreamFeMessage::GetSlruSegment(r) => r.hdr.reqid = 0,
        }
    }
    m
}

#[test]
fn request_layouts_v2_and_v3() {
    for (msg, tag_and_body) in requests() {
        for version in [V2, V3] {
            let expected = request_bytes(&tag_and_body, version);
            let encoded = msg.serialize(version);
            assert_eq!(&encoded[..], &expected[..], "{msg:?} {version:?}");
            let decoded = PagestreamFeMessage::parse(&expected, version).unwrap();
            assert_eq!(decoded, as_decoded(&msg, version), "{version:?}");
        }
    }
}

#[test]
fn request_header_lengths() {
    // GetPage: header + 13-byte rel tag + blkno.
    let (msg, _) = &requests()[2];
    assert_eq!(msg.serialize(V2).len(), 17 + 13 + 4);
    assert_eq!(msg.serialize(V3).len(), 25 + 13 + 4);
    assert_eq!(V2.request_header_len(), 17);
    assert_eq!(V3.request_header_len(), 25);
}

#[test]
fn request_decoder_rejects_unknown_tags() {
    for version in [V2, V3] {
        for tag in [5u8, 99, 100, 255] {
            let mut bytes = request_bytes(&cat(&[&[0], &REL_BYTES]), version);
            bytes[0] = tag;
            assert_eq!(
                PagestreamFeMessage::parse(&bytes, version),
                Err(PagestreamDecodeError::UnknownTag { kind: "request", tag })
            );
        }
        assert_eq!(PagestreamFeMessage::parse(&[], version), Err(PagestreamDecodeError::Empty));
    }
}

#[test]
fn request_decoder_rejects_every_truncation_and_trailing_bytes() {
    for (_, tag_and_body) in requests() {
        for version in [V2, V3] {
            let full = request_bytes(&tag_and_body, version);
            for cut in 1..full.len() {
                let err = PagestreamFeMessage::parse(&full[..cut], version).unwrap_err();
                assert!(
                    matches!(err, PagestreamDecodeError::Short { .. }),
                    "cut {cut} of {}: {err}",
                    full.len()
                );
            }
            let mut long = full.clone();
            long.push(0);
            assert_eq!(
                PagestreamFeMessage::parse(&long, version),
                Err(PagestreamDecodeError::TrailingBytes(1))
            );
        }
    }
    // A v3 message read as v2 is 8 bytes too long.
    let (msg, _) = &requests()[2];
    assert_eq!(
        PagestreamFeMessage::parse(&msg.serialize(V3), V2),
        Err(PagestreamDecodeError::TrailingBytes(8))
    );
}

pub(super) fn page(fill: u8) -> Bytes {
    let mut p = vec![fill; BLCKSZ];
    p[0] = 0xA5;
    p[BLCKSZ - 1] = 0x5A;
    Bytes::from(p)
}

fn v3_hdr_bytes(tag: u8) -> Vec<u8> {
    cat(&[&[tag], &REQID, &V2_LSNS])
}

/// Every response with its expected v2 and v3 encodings.
pub(super) fn responses() -> Vec<(PagestreamBeMessage, Vec<u8>, Vec<u8>)> {
    let h = hdr();
    let pg = page(0x11);
    let seg = Bytes::from([page(1), page(2)].concat());
    vec![
        (
            PagestreamBeMessage::Exists(PagestreamExistsResponse {
                req: PagestreamExistsRequest { hdr: h, rel: REL },
                exists: true,
            }),
            vec![100, 1],
            cat(&[&v3_hdr_bytes(100), &REL_BYTES, &[1]]),
        ),
        (
            PagestreamBeMessage::Nblocks(PagestreamNblocksResponse {
                req: PagestreamNblocksRequest { hdr: h, rel: REL },
                n_blocks: 0x0001_0002,
            }),
            vec![101, 0, 1, 0, 2],
            cat(&[&v3_hdr_bytes(101), &REL_BYTES, &[0, 1, 0, 2]]),
        ),
        (
            PagestreamBeMessage::GetPage(PagestreamGetPageResponse {
                req: PagestreamGetPageRequest { hdr: h, rel: REL, blkno: 9 },
                page: pg.clone(),
            }),
            cat(&[&[102], &pg]),
            cat(&[&v3_hdr_bytes(102), &REL_BYTES, &[0, 0, 0, 9], &pg]),
        ),
        (
            PagestreamBeMessage::Error(PagestreamErrorResponse {
                req: h,
                message: "bad request: LSN 0".to_string(),
            }),
            cat(&[&[103], b"bad request: LSN 0", &[0]]),
            cat(&[&v3_hdr_bytes(103), b"bad request: LSN 0", &[0]]),
        ),
        (
            PagestreamBeMessage::DbSize(PagestreamDbSizeResponse {
                req: PagestreamDbSizeRequest { hdr: h, dbnode: 0x3039 },
                db_size: 0x0102_0304_0506,
            }),
            vec![104, 0, 0, 1, 2, 3, 4, 5, 6],
            cat(&[&v3_hdr_bytes(104), &[0, 0, 0x30, 0x39], &[0, 0, 1, 2, 3, 4, 5, 6]]),
        ),
        (
            PagestreamBeMessage::GetSlruSegment(PagestreamGetSlruSegmentResponse {
                req: PagestreamGetSlruSegmentRequest { hdr: h, kind: 1, segno: 0x0A0B },
                segment: seg.clone(),
            }),
            cat(&[&[105], &[0, 0, 0, 2], &seg]),
            cat(&[&v3_hdr_bytes(105), &[1, 0, 0, 0x0A, 0x0B], &[0, 0, 0, 2], &seg]),
        ),
    ]
}

/// What a v2 decoder sees: no request fields.
pub(super) fn strip_request(msg: &PagestreamBeMessage) -> PagestreamBeMessage {
    let z = PagestreamRequest::default();
    let mut m = msg.clone();
    match &mut m {
        PagestreamBeMessage::Exists(r) => r.req = PagestreamExistsRequest { hdr: z, rel: NO_REL },
        PagestreamBeMessage::Nblocks(r) => r.req = PagestreamNblocksRequest { hdr: z, rel: NO_REL },
        PagestreamBeMessage::GetPage(r) => {
            r.req = PagestreamGetPageRequest { hdr: z, rel: NO_REL, blkno: 0 }
        }
        PagestreamBeMessage::Error(r) => r.req = z,
        PagestreamBeMessage::DbSize(r) => r.req = PagestreamDbSizeRequest { hdr: z, dbnode: 0 },
        PagestreamBeMessage::GetSlruSegment(r) => {
            r.req = PagestreamGetSlruSegmentRequest { hdr: z, kind: 0, segno: 0 }
        }
    }
    m
}

#[test]
fn response_layouts_v2_and_v3() {
    for (msg, v2, v3) in responses() {
        for (version, expected) in [(V2, &v2), (V3, &v3)] {
            let encoded = msg.serialize(version);
            assert_eq!(encoded.len(), msg.serialized_len(version), "{:?}", msg.tag());
            assert!(encoded[..] == expected[..], "tag {} {version:?} layout", msg.tag());
            let decoded =
                PagestreamBeMessage::deserialize(Bytes::copy_from_slice(expected), version)
                    .unwrap();
            let want = if version == V2 { strip_request(&msg) } else { msg.clone() };
            assert_eq!(decoded, want, "tag {} {version:?}", msg.tag());
        }
    }
}

#[test]
fn response_decoder_rejects_truncation_trailing_bytes_and_unknown_tags() {
    for (msg, v2, v3) in responses() {
        for (version, full) in [(V2, v2), (V3, v3)] {
            // Every cut point of the small messages; for the big ones, the
            // cuts inside the header/echo and around the payload boundary.
            let cuts: Vec<usize> = if full.len() < 64 {
                (1..full.len()).collect()
            } else {
                (1..40).chain([full.len() - BLCKSZ, full.len() - 1]).collect()
            };
            for cut in cuts {
                let r =
                    PagestreamBeMessage::deserialize(Bytes::copy_from_slice(&full[..cut]), version);
                assert!(r.is_err(), "tag {} {version:?} cut at {cut} must not decode", msg.tag());
            }
            let mut long = full.clone();
            long.push(7);
            let r = PagestreamBeMessage::deserialize(Bytes::from(long), version);
            assert_eq!(r, Err(PagestreamDecodeError::TrailingBytes(1)), "tag {}", msg.tag());
        }
    }
    for tag in [0u8, 4, 99, 106, 255] {
        assert_eq!(
            PagestreamBeMessage::deserialize(Bytes::from(vec![tag, 0, 0, 0, 0]), V2),
            Err(PagestreamDecodeError::UnknownTag { kind: "response", tag })
        );
    }
    assert_eq!(
        PagestreamBeMessage::deserialize(Bytes::new(), V3),
        Err(PagestreamDecodeError::Empty)
    );
}

#[test]
fn response_decoder_rejects_bad_values() {
    // exists must be 0 or 1.
    assert!(matches!(
        PagestreamBeMessage::deserialize(Bytes::from_static(&[100, 2]), V2),
        Err(PagestreamDecodeError::Invalid { field: "exists", .. })
    ));
    // Error message without NUL, and with invalid UTF-8.
    assert!(matches!(
        PagestreamBeMessage::deserialize(Bytes::from_static(b"\x67oops"), V2),
        Err(PagestreamDecodeError::Invalid { .. })
    ));
    assert!(matches!(
        PagestreamBeMessage::deserialize(Bytes::from_static(&[103, 0xFF, 0xFE, 0]), V2),
        Err(PagestreamDecodeError::Invalid { .. })
    ));
    // SLRU segment announcing more pages than present.
    let mut b = vec![105, 0, 0, 0, 2];
    b.extend_from_slice(&[0u8; BLCKSZ]);
    assert!(matches!(
        PagestreamBeMessage::deserialize(Bytes::from(b), V2),
        Err(PagestreamDecodeError::Short { .. })
    ));
    // n_blocks so large that its byte length overflows on 32-bit is still only "short" here.
    assert!(PagestreamBeMessage::deserialize(Bytes::from_static(&[105, 255, 255, 255, 255]), V2)
        .is_err());
}

#[test]
fn error_message_nul_bytes_are_replaced() {
    let msg = PagestreamBeMessage::Error(PagestreamErrorResponse {
        req: PagestreamRequest::default(),
        message: "a\0b".to_string(),
    });
    assert_eq!(&msg.serialize(V2)[..], b"\x67a b\0");
}

#[test]
fn empty_slru_segment_round_trips() {
    let msg = PagestreamBeMessage::GetSlruSegment(PagestreamGetSlruSegmentResponse {
        req: PagestreamGetSlruSegmentRequest { hdr: hdr(), kind: 0, segno: 0 },
        segment: Bytes::new(),
    });
    let enc = msg.serialize(V3);
    assert_eq!(enc.len(), 25 + 5 + 4);
    assert_eq!(PagestreamBeMessage::deserialize(enc, V3).unwrap(), msg);
}

#[test]
#[should_panic(expected = "BLCKSZ")]
fn short_page_has_no_encoding() {
    let msg = PagestreamBeMessage::GetPage(PagestreamGetPageResponse {
        req: PagestreamGetPageRequest { hdr: hdr(), rel: REL, blkno: 0 },
        page: Bytes::from_static(&[0; 100]),
    });
    msg.serialize(V2);
}

#[test]
fn decoded_pages_are_zero_copy_slices() {
    let (msg, _, v3) = responses().swap_remove(2);
    let body = Bytes::from(v3);
    let decoded = PagestreamBeMessage::deserialize(body.clone(), V3).unwrap();
    let PagestreamBeMessage::GetPage(r) = decoded else { panic!("not a page: {msg:?}") };
    let start = body.len() - BLCKSZ;
    assert_eq!(r.page.as_ptr(), body[start..].as_ptr());
}

#[test]
fn head_and_body_concatenate_to_the_full_encoding() {
    for (msg, _, _) in responses() {
        for v in [V2, V3] {
            let mut head = BytesMut::new();
            let body = msg.serialize_head_into(&mut head, v);
            let mut joined = head.to_vec();
            if let Some(b) = &body {
                joined.extend_from_slice(b);
            }
            assert_eq!(joined, msg.serialize(v).to_vec(), "{msg:?} {v:?}");
            // Only pages and segments are split off, and without copying.
            match &msg {
                PagestreamBeMessage::GetPage(r) => {
                    assert_eq!(body.unwrap().as_ptr(), r.page.as_ptr())
                }
                PagestreamBeMessage::GetSlruSegment(r) => {
                    assert_eq!(body.unwrap().len(), r.segment.len())
                }
                _ => assert!(body.is_none()),
            }
        }
    }
}
