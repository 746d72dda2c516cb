use super::*;
use crate::consts::BLCKSZ;

const LSN: Lsn = Lsn(0x0100_0028);

/// A record from its body (sub-headers + payload); CRC left zero (not
/// checked here).
fn record(rmid: u8, info: u8, body: &[u8]) -> Bytes {
    let mut r = Vec::new();
    r.extend_from_slice(&((24 + body.len()) as u32).to_le_bytes());
    r.extend_from_slice(&77u32.to_le_bytes());
    r.extend_from_slice(&0x0100_0000u64.to_le_bytes());
    r.extend_from_slice(&[info, rmid, 0, 0, 0, 0, 0, 0]);
    r.extend_from_slice(body);
    Bytes::from(r)
}

fn decode(body: &[u8]) -> Result<DecodedWalRecord, WalDecodeError> {
    let r = record(10, 0x20, body);
    let end = (LSN + r.len() as u64).align();
    decode_record(LSN, end, r, PgMajorVersion::V16)
}

fn rel(spc: u32, db: u32, rel: u32, blk: u32) -> Vec<u8> {
    [spc, db, rel, blk].iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// pglz stream of literals only: a zero control byte before every 8 bytes.
fn pglz_literals(raw: &[u8]) -> Vec<u8> {
    raw.chunks(8).flat_map(|c| std::iter::once(0u8).chain(c.iter().copied())).collect()
}

#[test]
fn blocks_origin_toplevel_xid_and_main_data() {
    let page: Vec<u8> =
        (0..BLCKSZ).map(|i| if (100..7000).contains(&i) { 0 } else { i as u8 | 1 }).collect();
    let stored = pglz_literals(&[&page[..100], &page[7000..]].concat());
    let mut body = vec![0u8, 0x10 | 0x20];
    body.extend_from_slice(&3u16.to_le_bytes());
    body.extend_from_slice(&(stored.len() as u16).to_le_bytes());
    body.extend_from_slice(&100u16.to_le_bytes());
    body.push(0x01 | 0x02 | 0x04); // hole, apply, pglz
    body.extend_from_slice(&6900u16.to_le_bytes());
    body.extend(rel(1663, 5, 16384, 9));
    body.extend_from_slice(&[2, 0x80 | 0x40 | 0x02]); // same rel, will init, fork 2
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&4u32.to_le_bytes());
    body.push(253);
    body.extend_from_slice(&7u16.to_le_bytes());
    body.push(252);
    body.extend_from_slice(&1234u32.to_le_bytes());
    body.push(254);
    body.extend_from_slice(&300u32.to_le_bytes());
    body.extend(&stored);
    body.extend_from_slice(b"abc");
    body.extend(std::iter::repeat_n(0x5A, 300));
    let rec = decode(&body).unwrap();
    assert_eq!((rec.rmid, rec.info, rec.xid, rec.prev_lsn), (10, 0x20, 77, Lsn(0x0100_0000)));
    assert_eq!((rec.origin, rec.toplevel_xid), (Some(7), Some(1234)));
    assert_eq!(rec.main_data.len(), 300);
    let [b0, b2] = &rec.blocks[..] else { panic!("two blocks") };
    assert_eq!(b0.tag, BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16384, fork: 0, blkno: 9 });
    assert_eq!(b0.image.as_ref().unwrap().restore().unwrap(), page[..]);
    assert!(b0.apply_image && !b0.will_init);
    assert_eq!(&b0.data[..], b"abc");
    assert_eq!(b2.id, 2);
    assert_eq!(b2.tag, BlockTag { fork: 2, blkno: 4, ..b0.tag });
    assert!(b2.will_init && b2.image.is_none() && b2.data.is_empty());
}

#[test]
fn record_without_main_data() {
    let mut body = vec![0u8, 0x20];
    body.extend_from_slice(&2u16.to_le_bytes());
    body.extend(rel(1663, 5, 1, 0));
    body.extend_from_slice(b"xy");
    let rec = decode(&body).unwrap();
    assert!(rec.main_data.is_empty());
    assert_eq!(&rec.blocks[0].data[..], b"xy");
}

#[test]
fn malformed_sub_headers_are_errors_naming_the_lsn() {
    let block = |id: u8, flags: u8, data_len: u16| {
        let mut b = vec![id, flags];
        b.extend_from_slice(&data_len.to_le_bytes());
        if flags & 0x80 == 0 {
            b.extend(rel(1663, 5, 1, 0)[..12].to_vec());
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        b
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("out of order", [block(1, 0, 0), block(1, 0, 0)].concat()),
        ("data flag without data", block(0, 0x20, 0)),
        ("data without flag", [block(0, 0, 2), vec![1, 2]].concat()),
        ("same rel first", block(0, 0x80, 0)),
        ("bad id", vec![40, 0]),
        ("truncated", vec![0, 0x20]),
        ("short main data", vec![255, 10, 1, 2]),
        ("extra bytes", vec![255, 1, 1, 2]),
        (
            "uncompressed short image",
            [vec![0, 0x10, 0, 0], 8000u16.to_le_bytes().to_vec(), vec![0, 0, 0]].concat(),
        ),
    ];
    for (what, body) in cases {
        let err = decode(&body).expect_err(what);
        assert_eq!(err.lsn, LSN, "{what}");
    }
}
