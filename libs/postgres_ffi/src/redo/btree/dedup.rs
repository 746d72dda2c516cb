//! DEDUP redo (`btree_xlog_dedup` with `_bt_dedup_start_pending`,
//! `_bt_dedup_save_htid`, `_bt_dedup_finish_pending`, `_bt_form_posting`)
//! and the posting list update of VACUUM and DELETE
//! (`_bt_update_posting`); the same in PostgreSQL 15-18.
//!
//! Main data `xl_btree_dedup` is the interval count (2 bytes); block 0's
//! data the intervals (`BTDedupInterval`: base offset, item count). The page
//! is rebuilt on a temp page: the high key (unless rightmost), then each
//! interval's items merged into one posting list tuple, other items as
//! they are; BTP_HAS_GARBAGE is cleared.

use super::page::{self, Opaque, BTP_HAS_GARBAGE, BT_MAX_ITEM_SIZE, P_HIKEY, TID_SIZE};
use super::unexpected_block;
use crate::redo::{bufpage, Ctx, Fault};

/// The pending posting list of a dedup pass (`BTDedupStateData`, the parts
/// redo uses).
struct Pending<'a> {
    base: &'a [u8],
    baseoff: u16,
    basetupsize: usize,
    htids: Vec<u8>,
    nitems: u16,
}

impl<'a> Pending<'a> {
    /// `_bt_dedup_start_pending`.
    fn start(base: &'a [u8], baseoff: u16) -> Result<Pending<'a>, Fault> {
        let (basetupsize, htids) = if page::is_posting(base)? {
            let p = page::posting(base)?;
            (p.key_size, p.tids.to_vec())
        } else {
            (page::tuple_size(base)?, base.get(..TID_SIZE).unwrap_or_default().to_vec())
        };
        Ok(Pending { base, baseoff, basetupsize, htids, nitems: 1 })
    }

    /// `_bt_dedup_save_htid`; false when the merged tuple would be too big.
    fn save(&mut self, itup: &[u8]) -> Result<bool, Fault> {
        let tids = if page::is_posting(itup)? {
            page::posting(itup)?.tids
        } else {
            itup.get(..TID_SIZE).unwrap_or_default()
        };
        let merged = bufpage::maxalign(self.basetupsize + self.htids.len() + tids.len());
        if merged > BT_MAX_ITEM_SIZE {
            return Ok(false);
        }
        self.nitems += 1;
        self.htids.extend_from_slice(tids);
        Ok(true)
    }

    /// `_bt_dedup_finish_pending`: add the base tuple or the posting list
    /// to `newpage`; returns whether an interval was completed.
    fn finish(&self, newpage: &mut [u8]) -> Result<bool, Fault> {
        let off = bufpage::max_offset(newpage) + 1;
        if self.nitems == 1 {
            let size = page::tuple_size(self.base)?.min(self.base.len());
            bufpage::add_item(newpage, &self.base[..size], off, false, false)?;
            return Ok(false);
        }
        let posting = page::form_posting(self.base, &self.htids)?;
        bufpage::add_item(newpage, &posting, off, false, false)?;
        Ok(true)
    }
}

/// `BTDedupInterval`s of the block data.
fn intervals(data: &[u8], n: usize) -> Result<Vec<(u16, u16)>, Fault> {
    if data.len() < n * 4 {
        return Err(Fault::malformed(format!("{n} dedup intervals in {} bytes", data.len())));
    }
    (0..n).map(|i| Ok((page::u16_at(data, i * 4)?, page::u16_at(data, i * 4 + 2)?))).collect()
}

pub(super) fn dedup(page: &mut [u8], ctx: &Ctx, block: u8) -> Result<(), Fault> {
    if block != 0 {
        return Err(unexpected_block(ctx, block));
    }
    let nintervals = page::u16_at(ctx.rec.main_data, 0)? as usize;
    let intervals = intervals(ctx.rec.block_data, nintervals)?;
    let opaque = Opaque::read(page)?;
    let mut newpage = page::temp_page_copy_special(page)?;
    if !opaque.is_rightmost() {
        bufpage::add_item(&mut newpage, bufpage::item(page, P_HIKEY)?, P_HIKEY, false, false)?;
    }
    let (minoff, maxoff) = (opaque.first_data_key(), bufpage::max_offset(page));
    let mut done = 0usize;
    let mut pending: Option<Pending> = None;
    for off in minoff..=maxoff {
        let itup = bufpage::item(page, off)?;
        let Some(state) = pending.as_mut() else {
            pending = Some(Pending::start(itup, off)?);
            continue;
        };
        let merge = intervals
            .get(done)
            .is_some_and(|&(baseoff, nitems)| state.baseoff == baseoff && state.nitems < nitems);
        if merge {
            if !state.save(itup)? {
                return Err(Fault::page("dedup interval does not fit one posting list".into()));
            }
        } else {
            done += state.finish(&mut newpage)? as usize;
            pending = Some(Pending::start(itup, off)?);
        }
    }
    if let Some(state) = &pending {
        done += state.finish(&mut newpage)? as usize;
    }
    if done != nintervals {
        return Err(Fault::page(format!(
            "dedup made {done} posting lists, the record {nintervals}"
        )));
    }
    page.copy_from_slice(&newpage);
    page::modify_opaque(page, |o| o.flags &= !BTP_HAS_GARBAGE)
}

/// `_bt_update_posting`: `orig` without the TIDs at the (ascending)
/// positions `deleted`.
pub(super) fn update_posting(orig: &[u8], deleted: &[u16]) -> Result<Vec<u8>, Fault> {
    let p = page::posting(orig)?;
    let n = p.count();
    if deleted.is_empty() || deleted.len() >= n {
        return Err(Fault::page(format!("deleting {} of {n} posting list TIDs", deleted.len())));
    }
    let mut tids = Vec::with_capacity((n - deleted.len()) * TID_SIZE);
    let mut d = 0;
    for i in 0..n {
        if d < deleted.len() && deleted[d] as usize == i {
            d += 1;
            continue;
        }
        tids.extend_from_slice(p.tid(i));
    }
    if d != deleted.len() {
        return Err(Fault::page("posting list TID positions out of order or range".into()));
    }
    page::form_posting(orig, &tids)
}
