//! `WalStreamDecoder` against WAL from the test writer: randomized streams
//! (records of 26 bytes to ~100 KiB, headers split across pages, segment
//! starts, XLOG SWITCH) fed in random chunks come back exactly; a flipped
//! bit anywhere in a record or a checked page-header field is an error
//! naming that record's (or page's) LSN. Seeds are printed; set
//! `WAL_TEST_SEED` to replay one.

mod wal_common;

use postgres_ffi::wal::{WalStreamDecoder, WAL_SEGMENT_SIZE, XLOG_BLCKSZ};
use postgres_ffi::PgMajorVersion;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use utils::lsn::Lsn;
use wal_common::*;

const PAGE: u64 = XLOG_BLCKSZ as u64;

/// What the decoder must return for one record.
struct Expected {
    lsn: Lsn,
    main_data: Vec<u8>,
    image_blkno: Option<u32>,
}

fn seeds(default_count: u64) -> Vec<u64> {
    match std::env::var("WAL_TEST_SEED").ok().filter(|s| !s.is_empty()) {
        Some(s) => vec![s.parse().expect("WAL_TEST_SEED is a number")],
        None => (0..default_count).map(|i| 0x5EED_0000 + i).collect(),
    }
}

fn random_start(rng: &mut StdRng) -> Lsn {
    let seg = rng.gen_range(1..4u64) * WAL_SEGMENT_SIZE;
    let lsn = match rng.gen_range(0..4) {
        0 => seg,
        1 => seg - PAGE * rng.gen_range(1..8),
        2 => seg + 40,
        _ => seg - 8 * rng.gen_range(1..20_000u64),
    };
    // Not inside a page header.
    if (1..24).contains(&(lsn % PAGE)) {
        Lsn(lsn - lsn % PAGE)
    } else {
        Lsn(lsn)
    }
}

fn random_len(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(26..200),
        6..=8 => rng.gen_range(200..9000),
        _ => rng.gen_range(9000..100_000),
    }
}

/// A random stream of about `target_bytes`.
fn random_stream(
    rng: &mut StdRng,
    version: PgMajorVersion,
    target_bytes: usize,
) -> (WalWriter, Vec<Expected>) {
    let mut w = WalWriter::new(random_start(rng), version);
    let mut expected = Vec::new();
    while w.out.len() < target_bytes {
        let kind = rng.gen_range(0..100);
        if kind < 3 {
            let lsn = w.switch();
            expected.push(Expected { lsn, main_data: Vec::new(), image_blkno: None });
            continue;
        }
        if kind < 8 {
            // Make the next record's header straddle the page boundary.
            let page_end = (w.lsn().0 / PAGE + 1) * PAGE;
            let target = Lsn(page_end - [8, 16][rng.gen_range(0..2)]);
            if !w.lsn().0.is_multiple_of(PAGE) && target.0 >= w.lsn().0 + 32 {
                let before = w.records.len();
                w.fill_to(target);
                let filler = w.records[before];
                let body = main_data_body((filler.end.0 - filler.lsn.0) as usize - 24, 0xAB);
                expected.push(Expected {
                    lsn: filler.lsn,
                    main_data: main_of(&body),
                    image_blkno: None,
                });
            }
        }
        if kind < 15 {
            let blkno = rng.gen();
            let body = image_body(blkno, rng.gen_range(0..300), rng.gen());
            let lsn = w.record(10, 0x00, 9, &body);
            let main = image_body_main(&body);
            expected.push(Expected { lsn, main_data: main, image_blkno: Some(blkno) });
            continue;
        }
        let len = random_len(rng);
        let fill = rng.gen();
        let body = main_data_body(len - 24, fill);
        let lsn = w.record_of_len(len, fill);
        expected.push(Expected { lsn, main_data: main_of(&body), image_blkno: None });
    }
    (w, expected)
}

/// Main data of a `main_data_body`.
fn main_of(body: &[u8]) -> Vec<u8> {
    if body[0] == 255 {
        body[2..].to_vec()
    } else {
        body[5..].to_vec()
    }
}

/// Main data of an `image_body`: its length follows the 25-byte block
/// header and the 255 id.
fn image_body_main(body: &[u8]) -> Vec<u8> {
    assert_eq!(body[25], 255);
    let main_len = body[26] as usize;
    body[body.len() - main_len..].to_vec()
}

fn check_records(
    w: &WalWriter,
    expected: &[Expected],
    got: &[postgres_ffi::wal::DecodedWalRecord],
) {
    assert_eq!(got.len(), expected.len());
    assert!(got.len() <= w.records.len());
    for ((rec, exp), written) in got.iter().zip(expected).zip(&w.records) {
        assert_eq!(rec.lsn, exp.lsn);
        assert_eq!(written.lsn, exp.lsn);
        if rec.rmid == 0 && rec.info == 0x40 {
            assert_eq!(rec.end_lsn.0 % WAL_SEGMENT_SIZE, 0, "switch ends at a segment");
        } else {
            assert_eq!(rec.end_lsn, written.end.align());
        }
        assert_eq!(rec.main_data[..], exp.main_data[..], "record at {}", rec.lsn);
        match exp.image_blkno {
            Some(blkno) => {
                assert_eq!(rec.blocks.len(), 1);
                let block = &rec.blocks[0];
                assert_eq!(block.tag.blkno, blkno);
                let image = block.image.as_ref().map(|i| i.restore().unwrap());
                assert_eq!(image.as_deref(), Some(&test_page(blkno)[..]));
                assert!(block.apply_image);
            }
            None => assert!(rec.blocks.is_empty()),
        }
    }
}

#[test]
fn random_streams_in_random_chunks() {
    for seed in seeds(16) {
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let version = PgMajorVersion::ALL[rng.gen_range(0..4)];
        let target_bytes = rng.gen_range(10_000..300_000);
        let (w, expected) = random_stream(&mut rng, version, target_bytes);
        let mut decoder = WalStreamDecoder::new(w.start, version);
        let (got, err) = decode_in_chunks(&mut decoder, &w.out, &mut rng);
        assert_eq!(err, None, "seed {seed}");
        check_records(&w, &expected, &got);
        assert_eq!(decoder.fed_lsn(), w.lsn());
    }
}

/// Where a flipped bit must be detected: a byte of a record (an error
/// names the record), or a checked page-header field (an error names the
/// page, or the record continued on it).
fn random_target(w: &WalWriter, rng: &mut StdRng) -> (usize, Vec<Lsn>) {
    let stream_end = w.lsn().0;
    if rng.gen_range(0..4) == 0 {
        let (from, to) = w.page_headers[rng.gen_range(0..w.page_headers.len())];
        let page = Lsn((w.start.0 + from as u64) / PAGE * PAGE);
        let mut lsns = vec![page];
        lsns.extend(w.records.iter().filter(|r| r.lsn < page && page < r.end).map(|r| r.lsn));
        return (rng.gen_range(from..to), lsns);
    }
    // A longer xl_tot_len is caught by the next page header: keep one in the stream.
    let candidates: Vec<&Written> =
        w.records.iter().filter(|r| r.end.0 + PAGE + 40 <= stream_end).collect();
    let r = candidates[rng.gen_range(0..candidates.len())];
    let lsn = r.byte_lsn(rng.gen_range(0..r.tot_len));
    ((lsn.0 - w.start.0) as usize, vec![r.lsn])
}

#[test]
fn flipped_bits_are_errors_naming_the_record() {
    for seed in seeds(12) {
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let version = PgMajorVersion::ALL[rng.gen_range(0..4)];
        let (w, expected) = random_stream(&mut rng, version, 150_000);
        for _ in 0..60 {
            let (at, lsns) = random_target(&w, &mut rng);
            let mut wal = w.out.clone();
            wal[at] ^= 1 << rng.gen_range(0..8);
            let mut decoder = WalStreamDecoder::new(w.start, version);
            decoder.set_system_id(SYSTEM_ID);
            let (got, err) = decode_in_chunks(&mut decoder, &wal, &mut rng);
            let err =
                err.unwrap_or_else(|| panic!("seed {seed}: flip at offset {at} not detected"));
            assert!(
                lsns.contains(&err.lsn),
                "seed {seed}: flip at {at}: {err}, expected one of {lsns:?}"
            );
            // Everything returned before the error is what was written.
            check_records(&w, &expected[..got.len()], &got);
        }
    }
}

#[test]
fn header_straddling_pages_and_segments() {
    let version = PgMajorVersion::V17;
    let seg_end = 2 * WAL_SEGMENT_SIZE;
    let mut w = WalWriter::new(Lsn(seg_end - 2 * PAGE), version);
    w.fill_to(Lsn(seg_end - PAGE - 8));
    w.record_of_len(100, 1); // header split 8 + 16 across pages
    w.fill_to(Lsn(seg_end - 16));
    let across = w.record_of_len(5000, 2); // header split 16 + 8 across segments
    w.record_of_len(30, 3);
    let mut decoder = WalStreamDecoder::new(w.start, version);
    let mut rng = StdRng::seed_from_u64(1);
    let (got, err) = decode_in_chunks(&mut decoder, &w.out, &mut rng);
    assert_eq!(err, None);
    assert_eq!(got.len(), 5);
    assert_eq!(got[0].lsn, Lsn(seg_end - 2 * PAGE + 24), "first record after the page header");
    assert_eq!(got[3].lsn, across);
    assert_eq!(got[3].main_data.len(), 5000 - 24 - 5);
    assert_eq!(decoder.system_id(), Some(SYSTEM_ID));
}

fn decode_all(
    start: Lsn,
    version: PgMajorVersion,
    wal: &[u8],
) -> Result<usize, postgres_ffi::wal::WalDecodeError> {
    let mut decoder = WalStreamDecoder::new(start, version);
    decoder.feed_bytes(wal);
    let mut n = 0;
    while decoder.poll_decode()?.is_some() {
        n += 1;
    }
    Ok(n)
}

#[test]
fn stream_level_errors_name_the_lsn() {
    let version = PgMajorVersion::V15;
    let mut w = WalWriter::new(Lsn(WAL_SEGMENT_SIZE), version);
    w.record_of_len(64, 1);
    let second = w.record_of_len(64, 2);
    let ok = w.out.clone();
    assert_eq!(decode_all(w.start, version, &ok), Ok(2));

    let wrong_version = decode_all(w.start, PgMajorVersion::V16, &ok).unwrap_err();
    assert_eq!(wrong_version.lsn, w.start);
    assert!(wrong_version.msg.contains("magic"), "{wrong_version}");

    let mut zero = ok.clone();
    let at = (second.0 - w.start.0) as usize;
    zero[at..at + 4].fill(0);
    assert_eq!(decode_all(w.start, version, &zero).unwrap_err().lsn, second);

    let mut huge = ok.clone();
    huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(decode_all(w.start, version, &huge).unwrap_err().lsn, second);

    // Starting on a page whose first bytes continue a record.
    let mut w = WalWriter::new(Lsn(WAL_SEGMENT_SIZE + 40), version);
    w.record_of_len(10_000, 4);
    w.record_of_len(64, 5);
    let cont_page = Lsn(WAL_SEGMENT_SIZE + PAGE);
    let tail = &w.out[(cont_page.0 - w.start.0) as usize..];
    assert_eq!(decode_all(cont_page, version, tail).unwrap_err().lsn, cont_page);

    // A record's bytes not all there yet: no error, no record.
    let mut decoder = WalStreamDecoder::new(w.start, version);
    decoder.feed_bytes(&w.out[..5000]);
    assert_eq!(decoder.poll_decode(), Ok(None));
    assert_eq!(decoder.lsn(), w.start);
}

/// The server crashed while writing a record that spans pages; after
/// recovery it wrote from the next page on, flagged
/// XLP_FIRST_IS_OVERWRITE_CONTRECORD, starting with an
/// XLOG_OVERWRITE_CONTRECORD record. The partial record is dropped and
/// decoding goes on with the new records.
#[test]
fn an_overwritten_partial_record_is_dropped() {
    let version = PgMajorVersion::V16;
    let mut w = WalWriter::new(Lsn(WAL_SEGMENT_SIZE + 40), version);
    let first = w.record_of_len(64, 1);
    let abandoned = w.record_of_len(10_000, 2);
    let next_page = Lsn((abandoned.0 / PAGE + 1) * PAGE);
    w.out.truncate((next_page.0 - w.start.0) as usize);
    w.records.pop();
    w.prev = first;
    // xl_overwrite_contrecord: the abandoned record's LSN and a timestamp.
    let mut body = vec![255u8, 16];
    body.extend_from_slice(&abandoned.0.to_le_bytes());
    body.extend_from_slice(&0i64.to_le_bytes());
    let overwrite = w.record(0, 0xD0, 0, &body);
    assert_eq!(overwrite, next_page + 24u64, "the new record starts the page");
    let page_at = (next_page.0 - w.start.0) as usize;
    w.out[page_at + 2] |= 0x08; // XLP_FIRST_IS_OVERWRITE_CONTRECORD
    let after = w.record_of_len(64, 3);

    let mut decoder = WalStreamDecoder::new(w.start, version);
    decoder.feed_bytes(&w.out);
    let mut lsns = Vec::new();
    while let Some(r) = decoder.poll_decode().expect("decodes past the abandoned record") {
        lsns.push(r.lsn);
    }
    assert_eq!(lsns, [first, overwrite, after]);

    // Without the flag the page contradicts the record being assembled.
    w.out[page_at + 2] &= !0x08;
    let err = decode_all(w.start, version, &w.out).unwrap_err();
    assert_eq!(err.lsn, abandoned);
}

/// With a timeline history, each page's `xlp_tli` must be the timeline
/// that wrote the page's LSN: the page holding the switch keeps the old
/// TLI (the new timeline continues a page the old one began), the pages
/// after it carry the new one. A page with another TLI is an error naming
/// both timelines and the page.
#[test]
fn page_timelines_follow_the_history() {
    use postgres_ffi::wal::{TimelineHistory, TliSwitch};
    let version = PgMajorVersion::V17;
    let mut w = WalWriter::new(Lsn(WAL_SEGMENT_SIZE), version);
    w.record_of_len(5000, 1);
    let switch = w.record_of_len(64, 2); // on the first page: TLI 2 begins here
    for fill in 3..11 {
        w.record_of_len(3000, fill);
    }
    assert!(w.lsn().0 > w.start.0 + 3 * PAGE);
    let mut wal = w.out.clone();
    let mut page = w.start.0 + PAGE;
    while page < w.lsn().0 {
        let at = (page - w.start.0) as usize + 4;
        wal[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
        page += PAGE;
    }
    let history =
        |switch_lsn| TimelineHistory::new(2, vec![TliSwitch { tli: 1, switch_lsn }]).unwrap();
    let decode = |h: TimelineHistory| {
        let mut decoder = WalStreamDecoder::new(w.start, version);
        decoder.set_timeline_history(h);
        decoder.feed_bytes(&wal);
        let mut n = 0;
        while decoder.poll_decode()?.is_some() {
            n += 1;
        }
        Ok::<_, postgres_ffi::wal::WalDecodeError>(n)
    };
    assert_eq!(decode(history(switch)), Ok(10));
    // The switch a page later: the second page should still be timeline 1.
    let e = decode(history(Lsn(w.start.0 + 2 * PAGE))).unwrap_err();
    let second = Lsn(w.start.0 + PAGE);
    assert!(
        e.msg.contains(&format!(
            "page header at {second}: xlp_tli is timeline 2, but the history of timeline 2 \
             says timeline 1 wrote {second}"
        )),
        "{e}"
    );
    // Without a history only going back is refused.
    let mut back = wal.clone();
    let at = (2 * PAGE) as usize + 4;
    back[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    let e = decode_all(w.start, version, &back).unwrap_err();
    assert!(e.msg.contains("timeline 1 after timeline 2"), "{e}");
}

/// A cascading walsender may send the start of a record its standby never
/// completed before promotion; the new timeline continues at the end of
/// the last complete record. `restart_at` drops the partial bytes and
/// decodes the new timeline's record there.
#[test]
fn restart_at_drops_a_record_never_completed() {
    let version = PgMajorVersion::V15;
    let mut old = WalWriter::new(Lsn(WAL_SEGMENT_SIZE), version);
    let first = old.record_of_len(64, 1);
    let switch = old.lsn();
    old.record_of_len(6000, 2); // only its start is sent
    let mut new = WalWriter::new(Lsn(WAL_SEGMENT_SIZE), version);
    new.record_of_len(64, 1);
    new.prev = first;
    let after = new.record_of_len(100, 3);
    assert_eq!(after, switch);

    let mut decoder = WalStreamDecoder::new(old.start, version);
    decoder.feed_bytes(&old.out[..(switch.0 - old.start.0) as usize + 300]);
    assert_eq!(decoder.poll_decode().unwrap().unwrap().lsn, first);
    assert_eq!(decoder.poll_decode(), Ok(None));
    decoder.restart_at(switch);
    assert_eq!(decoder.fed_lsn(), switch);
    decoder.feed_bytes(&new.out[(switch.0 - new.start.0) as usize..]);
    let rec = decoder.poll_decode().unwrap().unwrap();
    assert_eq!((rec.lsn, rec.main_data.len()), (after, 100 - 24 - 2));
}
