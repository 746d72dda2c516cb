//! Redo of the Generic rmgr (`access/transam/generic_xlog.c`
//! `generic_redo`), the same in 15-18. Its records (info 0) come from
//! extensions (bloom) through the generic WAL API; each block reference is
//! either a full image (`GENERIC_XLOG_FULL_IMAGE`: applied from the image,
//! never redone here) or a delta in the block's data.
//!
//! Delta format: fragments one after another, each `offset: u16`,
//! `length: u16` (`OffsetNumber`s, native byte order: little-endian), then
//! `length` bytes to copy to `page[offset..offset + length]`. The writer
//! covers only `[0, pd_lower)` and `[pd_upper, BLCKSZ)` of the new page;
//! a new page's delta against zeros covers both in full. After applying,
//! redo zeroes the hole `[pd_lower, pd_upper)` of the result, as
//! `GenericXLogFinish` did on the primary.
//!
//! Invariants: a fragment header or data cut short, or a fragment reaching
//! past the page, is `Fault::Malformed`; a result whose header does not
//! keep `SizeOfPageHeaderData <= pd_lower <= pd_upper <= pd_special <=
//! BLCKSZ` (unless all three are still zero) is `Fault::Page` (PostgreSQL
//! would write out of bounds). Writes the main or init fork. The contents
//! between the header and `pd_lower` belong to the extension: they need
//! not be line pointers (bloom keeps its tuples there).

use super::{Ctx, Fault};
use crate::consts::{BLCKSZ, INIT_FORKNUM, MAIN_FORKNUM, SIZE_OF_PAGE_HEADER_DATA};
use crate::page::PageHeader;

/// `FRAGMENT_HEADER_SIZE`: offset and length.
const FRAGMENT_HEADER_SIZE: usize = 4;

pub(crate) fn redo(page: &mut [u8], ctx: &Ctx) -> Result<(), Fault> {
    if ctx.tag.fork != MAIN_FORKNUM && ctx.tag.fork != INIT_FORKNUM {
        return Err(Fault::malformed(format!("Generic record on fork {}", ctx.tag.fork)));
    }
    apply_delta(page, ctx.rec.block_data)?;
    zero_hole(page)
}

/// `applyPageRedo`: copy every fragment of `delta` into `page`.
fn apply_delta(page: &mut [u8], delta: &[u8]) -> Result<(), Fault> {
    let mut rest = delta;
    while !rest.is_empty() {
        let at = delta.len() - rest.len();
        let Some((header, data)) = rest.split_at_checked(FRAGMENT_HEADER_SIZE) else {
            return Err(Fault::malformed(format!(
                "Generic delta: a fragment header cut short at byte {at} of {}",
                delta.len()
            )));
        };
        let offset = u16::from_le_bytes([header[0], header[1]]) as usize;
        let length = u16::from_le_bytes([header[2], header[3]]) as usize;
        let Some((bytes, next)) = data.split_at_checked(length) else {
            return Err(Fault::malformed(format!(
                "Generic delta: fragment at byte {at} has {length} bytes, {} left",
                data.len()
            )));
        };
        let target = page.get_mut(offset..offset + length).filter(|_| offset + length <= BLCKSZ);
        let Some(target) = target else {
            return Err(Fault::malformed(format!(
                "Generic delta: fragment {offset}..{} past the page",
                offset + length
            )));
        };
        target.copy_from_slice(bytes);
        rest = next;
    }
    Ok(())
}

/// Zero `[pd_lower, pd_upper)` of the result, once its header's bounds
/// are those of an initialised page (or it is still all-zero in them).
fn zero_hole(page: &mut [u8]) -> Result<(), Fault> {
    let h = PageHeader::decode(page);
    let (lower, upper, special) = (h.lower as usize, h.upper as usize, h.special as usize);
    let new = lower == 0 && upper == 0 && special == 0;
    let sane = SIZE_OF_PAGE_HEADER_DATA <= lower
        && lower <= upper
        && upper <= special
        && special <= BLCKSZ;
    if !new && !sane {
        return Err(Fault::page(format!(
            "Generic: pd_lower {lower}, pd_upper {upper}, pd_special {special} after redo"
        )));
    }
    page[lower..upper].fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use utils::lsn::Lsn;

    use super::*;
    use crate::redo::{BlockRef, RedoRecord};
    use crate::wal::BlockTag;
    use crate::PgMajorVersion;

    fn run(page: &mut [u8], delta: Vec<u8>, fork: u8) -> Result<(), Fault> {
        let tag = BlockTag { spc_oid: 1663, db_oid: 5, rel_number: 16500, fork, blkno: 3 };
        let rec = RedoRecord {
            rmid: crate::wal::rmgr_id::GENERIC,
            info: 0,
            xid: 740,
            target: 0,
            blocks: vec![BlockRef { id: 0, tag, will_init: false, has_image: false }],
            block_data: Bytes::from(delta),
            main_data: Bytes::new(),
        };
        let ctx =
            Ctx { rec: &rec.as_ref(), tag, lsn: Lsn(0x30_0000), version: PgMajorVersion::V18 };
        redo(page, &ctx)
    }

    fn fragment(offset: u16, data: &[u8]) -> Vec<u8> {
        let mut f = offset.to_le_bytes().to_vec();
        f.extend_from_slice(&(data.len() as u16).to_le_bytes());
        f.extend_from_slice(data);
        f
    }

    /// A page with lower 32, upper 8000, special 8184; hole full of 0x99.
    fn old_page() -> Vec<u8> {
        let mut p = vec![0x11u8; BLCKSZ];
        PageHeader {
            lower: 32,
            upper: 8000,
            special: 8184,
            pagesize_version: 8196,
            ..Default::default()
        }
        .encode(&mut p);
        p[32..8000].fill(0x99);
        p
    }

    #[test]
    fn fragments_then_hole_zeroed() {
        let mut page = old_page();
        let mut delta = fragment(12, &[36, 0, 0x30, 0x1F]); // pd_lower 36, pd_upper 7984
        delta.extend(fragment(32, &[1, 2, 3, 4]));
        delta.extend(fragment(7984, &[0xAB; 16]));
        delta.extend(fragment(8188, &[7, 7, 7, 7])); // the page's last bytes
        run(&mut page, delta, MAIN_FORKNUM).unwrap();

        let mut want = old_page();
        want[12..16].copy_from_slice(&[36, 0, 0x30, 0x1F]);
        want[32..36].copy_from_slice(&[1, 2, 3, 4]);
        want[36..7984].fill(0);
        want[7984..8000].fill(0xAB);
        want[8188..8192].fill(7);
        assert_eq!(page, want);
    }

    #[test]
    fn new_page_from_a_full_delta() {
        // What GenericXLogFinish logs for a page built on zeros: the header
        // and line pointers up to pd_lower, then everything from pd_upper.
        let mut built = vec![0u8; BLCKSZ];
        PageHeader {
            lower: 28,
            upper: 8100,
            special: 8184,
            pagesize_version: 8196,
            ..Default::default()
        }
        .encode(&mut built);
        built[24..28].copy_from_slice(&(8100u32 | 1 << 15 | 40 << 17).to_le_bytes());
        built[8100..8140].fill(0x5A);
        built[8184..8192].copy_from_slice(&[0, 0, 0, 0, 0xCD, 0xAB, 0, 0]);
        let mut delta = fragment(0, &built[0..28]);
        delta.extend(fragment(8100, &built[8100..8192]));
        let mut page = vec![0u8; BLCKSZ];
        run(&mut page, delta, INIT_FORKNUM).unwrap();
        assert_eq!(page, built);
    }

    #[test]
    fn empty_delta_only_zeroes_the_hole() {
        let mut page = old_page();
        run(&mut page, Vec::new(), MAIN_FORKNUM).unwrap();
        let mut want = old_page();
        want[32..8000].fill(0);
        assert_eq!(page, want);
    }

    #[test]
    fn malformed_deltas_and_pages() {
        let cases: [(Vec<u8>, &str); 4] = [
            (vec![12, 0, 2], "header cut short"),
            ([fragment(100, &[1, 2, 3]), vec![0, 1, 9, 0, 1]].concat(), "has 9 bytes, 1 left"),
            (fragment(8190, &[1, 2, 3]), "8190..8193 past the page"),
            (fragment(65535, &[1]), "past the page"),
        ];
        for (delta, what) in cases {
            let err = run(&mut old_page(), delta, MAIN_FORKNUM).unwrap_err();
            assert!(matches!(&err, Fault::Malformed(m) if m.contains(what)), "{err}");
        }
        let err = run(&mut old_page(), fragment(12, &[0x50, 0x1F]), MAIN_FORKNUM).unwrap_err();
        let want = "Generic: pd_lower 8016, pd_upper 8000, pd_special 8184 after redo";
        assert_eq!(err, Fault::Page(want.into()));
        let err = run(&mut old_page(), fragment(16, &[0x08, 0x20]), MAIN_FORKNUM).unwrap_err();
        assert!(matches!(err, Fault::Page(m) if m.contains("pd_special 8200")));
        let mut new = vec![0u8; BLCKSZ];
        run(&mut new, Vec::new(), MAIN_FORKNUM).unwrap();
        assert_eq!(new, vec![0u8; BLCKSZ]);
        let err = run(&mut old_page(), Vec::new(), 2).unwrap_err();
        assert!(matches!(err, Fault::Malformed(_)));
    }
}
