//! Reconstruction: from the values of one key (newest first, ending at a
//! `will_init` value) to the bytes of the key at the requested LSN.
//!
//! Records are applied here, oldest first, in Rust: the pageserver's own
//! (`postgres_ffi::records`: CLOG status bits, visibility-map clears, byte
//! patches) and PostgreSQL's WAL records (`postgres_ffi::redo`, for the
//! timeline's PostgreSQL major). A record that cannot be applied (no
//! native redo for its rmgr, a body stored by an older version, a redo
//! fault) is an error naming LSN, rmgr and block: we never serve a page we
//! cannot build. Each PostgreSQL record is applied with
//! `redo::apply_in_chain` (the page header checked after it, O(1)); the
//! whole page (`redo::check_page`, O(line pointers)) is checked once, after
//! the last PostgreSQL record of the read, before the page is served: a
//! chain of n inserts costs O(n), not O(n²).
//!
//! Every reconstruction counts the records it applies
//! (`pageserver_read_records_applied`): ingest keeps that under
//! `max_record_chain` by writing images of hot keys (`timeline/writer/chain.rs`).
//!
//! Checksums: when a relation page comes out of any record (not straight
//! from an image, which carries or gets its own) and the cluster has data
//! checksums, `pd_checksum` is recomputed for the key's block number, so
//! every page served from a checksummed cluster verifies.

use bytes::{Bytes, BytesMut};
use pageserver_api::key::Key;
use utils::lsn::Lsn;

use super::value::{Record, Value};
use super::wal_image::WalImage;
use super::PageReconstructError;
use crate::metrics::redo::READ_RECORDS_APPLIED;

use postgres_ffi::page::{page_checksum, page_is_new, PageHeader};
use postgres_ffi::records::{clog_set_status, vm_clear_flags, vm_clear_tail};
use postgres_ffi::redo::{self, RedoRecordRef};
use postgres_ffi::wal::BlockTag;
use postgres_ffi::{PgMajorVersion, BLCKSZ};

/// What reconstruction needs to know of the timeline's cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The PostgreSQL major whose records are stored (their layouts).
    pub version: PgMajorVersion,
    /// The cluster has data checksums (`pg_control`'s `data_checksum_version`).
    pub data_checksums: bool,
}

impl ClusterInfo {
    /// Unit tests: PostgreSQL 15, no data checksums.
    #[cfg(test)]
    pub const TESTS: ClusterInfo =
        ClusterInfo { version: PgMajorVersion::V15, data_checksums: false };
}

/// `values` newest first; the last one must be `will_init`.
pub fn reconstruct(
    key: Key,
    lsn: Lsn,
    values: Vec<(Lsn, Value)>,
    cluster: ClusterInfo,
) -> Result<Bytes, PageReconstructError> {
    let mut iter = values.into_iter().rev();
    let Some((base_lsn, base)) = iter.next() else {
        return Err(PageReconstructError::MissingKey { key, lsn });
    };
    if !base.will_init() {
        return Err(PageReconstructError::Corrupt(format!(
            "key {key} at {lsn}: history ends at {base_lsn} without an image or initializing record"
        )));
    }
    let mut from_record = !base.is_image();
    // The page check owed after PostgreSQL records (the last one's).
    let mut check: Option<PageCheck> = None;
    let records = iter.len() + usize::from(from_record);
    READ_RECORDS_APPLIED.observe(records as f64);
    let mut page = match base {
        Value::Image(img) => {
            if iter.len() == 0 {
                return Ok(img); // the common case: no copy
            }
            BytesMut::from(&img[..])
        }
        Value::WalImage(img) => {
            let page = materialize(key, base_lsn, &img)?;
            if iter.len() == 0 {
                return Ok(page);
            }
            BytesMut::from(&page[..])
        }
        Value::Record(rec) => {
            let mut page = BytesMut::new();
            apply(key, base_lsn, &mut page, rec, cluster, &mut check)?;
            page
        }
    };
    for (rec_lsn, v) in iter {
        from_record = !v.is_image();
        match v {
            // Images are will_init: not expected after the base.
            Value::Image(img) => page = BytesMut::from(&img[..]),
            Value::WalImage(img) => page = BytesMut::from(&materialize(key, rec_lsn, &img)?[..]),
            Value::Record(rec) => apply(key, rec_lsn, &mut page, rec, cluster, &mut check)?,
        }
    }
    if let Some(last) = check {
        // Once per read, after the last PostgreSQL record (not after each).
        redo::check_page(&page, last.rmid).map_err(|fault| PageReconstructError::Redo {
            key,
            source: redo::RedoError {
                lsn: last.lsn,
                rmid: last.rmid,
                info: last.info,
                tag: last.tag,
                fault,
            },
        })?;
    }
    if from_record && cluster.data_checksums && key.is_rel_block() {
        set_checksum(&mut page, key.field6);
    }
    Ok(page.freeze())
}

/// Give a relation page the data checksum of block `blkno` (new pages have none).
fn set_checksum(page: &mut [u8], blkno: u32) {
    if page.len() == BLCKSZ && !page_is_new(page) {
        let mut header = PageHeader::decode(page);
        header.checksum = page_checksum(page, blkno);
        header.encode(page);
    }
}

/// Rebuild a WAL image of a relation block stored at `lsn`.
fn materialize(key: Key, lsn: Lsn, img: &WalImage) -> Result<Bytes, PageReconstructError> {
    let corrupt = |what: String| PageReconstructError::Corrupt(format!("key {key}: {what}"));
    if !key.is_rel_block() {
        return Err(corrupt(format!(
            "a WAL page image at {lsn} on a key that is no relation block"
        )));
    }
    img.materialize(key.field6, lsn)
        .map_err(|e| corrupt(format!("the WAL page image at {lsn} does not restore: {e}")))
}

/// The last PostgreSQL record applied to a page, whose page check
/// (`redo::check_page`) is run once the chain is applied.
struct PageCheck {
    lsn: Lsn,
    rmid: u8,
    info: u8,
    tag: BlockTag,
}

fn apply(
    key: Key,
    lsn: Lsn,
    page: &mut BytesMut,
    rec: Record,
    cluster: ClusterInfo,
    check: &mut Option<PageCheck>,
) -> Result<(), PageReconstructError> {
    let need_page = |page: &BytesMut, what: &str| {
        if page.len() != BLCKSZ {
            Err(PageReconstructError::Corrupt(format!(
                "key {key}: {what} record at {lsn} applied to a {}-byte value",
                page.len()
            )))
        } else {
            Ok(())
        }
    };
    match rec {
        Record::ClogSetStatus { xids, status } => {
            need_page(page, "CLOG")?;
            clog_set_status(page, &xids, status);
        }
        Record::VmClearFlags { heap_blknos, flags } => {
            need_page(page, "visibility map")?;
            vm_clear_flags(page, &heap_blknos, flags);
        }
        Record::VmClearTail { first_heap_blkno } => {
            need_page(page, "visibility map")?;
            vm_clear_tail(page, first_heap_blkno);
        }
        Record::SetBytes { patches } => {
            need_page(page, "byte-patch")?;
            for (offset, bytes) in patches {
                let at = offset as usize;
                if at + bytes.len() > BLCKSZ {
                    return Err(PageReconstructError::Corrupt(format!(
                        "key {key}: {} bytes at offset {at} at {lsn} run past the page",
                        bytes.len()
                    )));
                }
                page[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        Record::Test { append, will_init } => {
            if will_init {
                page.clear();
            }
            page.extend_from_slice(&append);
        }
        Record::Postgres { rmid, rec, will_init } => {
            *check = Some(redo_postgres(key, lsn, page, (rmid, &rec, will_init), cluster)?);
        }
    }
    Ok(())
}

/// Redo one stored PostgreSQL record on `page` (empty if there is none
/// yet); the page check is the caller's, once per chain.
fn redo_postgres(
    key: Key,
    lsn: Lsn,
    page: &mut BytesMut,
    (rmid, body, will_init): (u8, &Bytes, bool),
    cluster: ClusterInfo,
) -> Result<PageCheck, PageReconstructError> {
    if body.is_empty() || !redo::has_native_redo(rmid) {
        return Err(PageReconstructError::NeedsRedo { key, lsn, rmid });
    }
    let rec = RedoRecordRef::decode(body).map_err(|e| {
        PageReconstructError::Corrupt(format!("key {key}: the stored WAL record at {lsn}: {e}"))
    })?;
    let Some(rel) = key.rel_tag().filter(|_| key.is_rel_block()) else {
        return Err(PageReconstructError::Corrupt(format!(
            "key {key}: a WAL record at {lsn} on a key that is no relation block"
        )));
    };
    if will_init || page.is_empty() {
        page.clear();
        page.resize(BLCKSZ, 0);
    }
    let tag = BlockTag {
        spc_oid: rel.spcnode,
        db_oid: rel.dbnode,
        rel_number: rel.relnode,
        fork: rel.forknum,
        blkno: key.field6,
    };
    redo::apply_in_chain(page, tag, lsn, &rec, cluster.version)
        .map_err(|source| PageReconstructError::Redo { key, source })?;
    Ok(PageCheck { lsn, rmid, info: rec.info, tag })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::value::image;

    #[test]
    fn clog_and_vm_bits() {
        let key = Key::MIN;
        let page = image(&[0u8; BLCKSZ]);
        let set = Value::Record(Record::ClogSetStatus { xids: vec![5, 32768 + 6], status: 1 });
        let out = reconstruct(key, Lsn(3), vec![(Lsn(2), set), (Lsn(1), page)], ClusterInfo::TESTS)
            .unwrap();
        // xid 5: byte 1, bits 2-3; xid 32774 -> index 6 on its page: byte 1, bits 4-5.
        assert_eq!(out[1], (0b01 << 2) | (0b01 << 4));
        assert_eq!(out.iter().filter(|b| **b != 0).count(), 1);

        let vm = image(&[0xffu8; BLCKSZ]);
        let clear = Value::Record(Record::VmClearFlags { heap_blknos: vec![1], flags: 0b11 });
        let out = reconstruct(key, Lsn(3), vec![(Lsn(2), clear), (Lsn(1), vm)], ClusterInfo::TESTS)
            .unwrap();
        assert_eq!(out[24], 0b1111_0011, "after the 24-byte page header");
        assert_eq!(out[25], 0xff);
    }

    /// A relation page built from records carries the checksum of its
    /// block when the cluster has checksums (issue: VM pages were served
    /// with the checksum of the image below the clear).
    #[test]
    fn pages_from_records_get_their_checksum() {
        use postgres_ffi::page::{page_checksum, verify_page_checksum};
        use postgres_ffi::records::VM_HEAPBLOCKS_PER_PAGE;
        let rel = pageserver_api::reltag::RelTag::new(1663, 5, 16396, 2);
        let key = Key::rel_block(rel, 3);
        let mut vm = vec![0xffu8; BLCKSZ];
        PageHeader {
            lower: 24,
            upper: BLCKSZ as u16,
            special: BLCKSZ as u16,
            ..Default::default()
        }
        .encode(&mut vm);
        let mut header = PageHeader::decode(&vm);
        header.checksum = page_checksum(&vm, 3);
        header.encode(&mut vm);
        assert!(verify_page_checksum(&vm, 3));
        let clear = || {
            let heap_blknos = vec![3 * VM_HEAPBLOCKS_PER_PAGE + 1];
            Value::Record(Record::VmClearFlags { heap_blknos, flags: 0b11 })
        };
        let on = ClusterInfo { data_checksums: true, ..ClusterInfo::TESTS };
        let out = reconstruct(key, Lsn(3), vec![(Lsn(2), clear()), (Lsn(1), image(&vm))], on);
        let out = out.unwrap();
        assert_ne!(out[24], 0xff, "the bits were cleared");
        assert!(verify_page_checksum(&out, 3), "the served page verifies");
        let off = reconstruct(
            key,
            Lsn(3),
            vec![(Lsn(2), clear()), (Lsn(1), image(&vm))],
            ClusterInfo::TESTS,
        );
        assert!(!verify_page_checksum(&off.unwrap(), 3), "no checksums: the field is left alone");
        // Straight from an image: served as stored.
        let out = reconstruct(key, Lsn(3), vec![(Lsn(1), image(&vm))], on).unwrap();
        assert_eq!(&out[..], &vm[..]);
    }

    #[test]
    fn set_bytes_patches_the_page() {
        let patch = |at: u16| vec![(0, Bytes::from_static(b"z")), (at, Bytes::from_static(b"ab"))];
        let set = Value::Record(Record::SetBytes { patches: patch(8190) });
        let out = reconstruct(
            Key::MIN,
            Lsn(3),
            vec![(Lsn(2), set), (Lsn(1), image(&[0; BLCKSZ]))],
            ClusterInfo::TESTS,
        );
        let out = out.unwrap();
        assert_eq!((&out[8190..], out[0]), (&b"ab"[..], b'z'));
        let bad = Value::Record(Record::SetBytes { patches: patch(8191) });
        let out = reconstruct(
            Key::MIN,
            Lsn(3),
            vec![(Lsn(2), bad), (Lsn(1), image(&[0; BLCKSZ]))],
            ClusterInfo::TESTS,
        );
        assert!(matches!(out, Err(PageReconstructError::Corrupt(_))));
    }

    #[test]
    fn errors_name_the_problem() {
        let pg = Value::Record(Record::Postgres { will_init: false, rmid: 10, rec: Bytes::new() });
        let err = reconstruct(
            Key::MIN,
            Lsn(5),
            vec![(Lsn(4), pg), (Lsn(1), image(&[0; BLCKSZ]))],
            ClusterInfo::TESTS,
        );
        assert!(matches!(err, Err(PageReconstructError::NeedsRedo { rmid: 10, .. })));
        let t = Value::Record(Record::Test { append: Bytes::from_static(b"x"), will_init: false });
        assert!(matches!(
            reconstruct(Key::MIN, Lsn(5), vec![(Lsn(4), t)], ClusterInfo::TESTS),
            Err(PageReconstructError::Corrupt(_))
        ));
        assert!(matches!(
            reconstruct(Key::MIN, Lsn(5), vec![], ClusterInfo::TESTS),
            Err(PageReconstructError::MissingKey { .. })
        ));
    }
}
