//! CLOG and multixact SLRU pages: zeroing, truncation, and the entries a
//! new multixact writes (its offset, its members' xids and status bytes).

use bytes::Bytes;
use pageserver_api::reltag::SlruKind;
use postgres_ffi::slru::{segment_of_page, MULTIXACT_OFFSETS_PER_PAGE};
use postgres_ffi::wal::rmgr::{ClogRecord, MultiXactRecord};
use postgres_ffi::SLRU_PAGES_PER_SEGMENT;

use super::CheckpointState;
use crate::pgdatadir_mapping::{zero_page, DatadirModification};
use crate::tenant::value::{Record, Value};

/// Members per group (one status byte each, then their xids), groups per
/// page, members per page (`multixact.c`).
const MEMBERS_PER_GROUP: u32 = 4;
const MEMBER_GROUP_BYTES: u32 = 4 + 4 * MEMBERS_PER_GROUP;
const MEMBER_GROUPS_PER_PAGE: u32 = postgres_ffi::BLCKSZ as u32 / MEMBER_GROUP_BYTES;
const MEMBERS_PER_PAGE: u32 = MEMBER_GROUPS_PER_PAGE * MEMBERS_PER_GROUP;

pub async fn clog(r: ClogRecord, m: &mut DatadirModification<'_>) -> anyhow::Result<()> {
    match r {
        ClogRecord::ZeroPage { pageno } => zero(SlruKind::Clog, pageno, m).await,
        ClogRecord::Truncate { pageno, .. } => truncate(SlruKind::Clog, pageno, m).await,
    }
}

pub async fn multixact(
    r: MultiXactRecord,
    checkpoint: &mut CheckpointState,
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<()> {
    match r {
        MultiXactRecord::ZeroOffsetsPage { pageno } => {
            zero(SlruKind::MultiXactOffsets, pageno, m).await
        }
        MultiXactRecord::ZeroMembersPage { pageno } => {
            zero(SlruKind::MultiXactMembers, pageno, m).await
        }
        MultiXactRecord::Create { mid, moff, members } => {
            let page = mid / MULTIXACT_OFFSETS_PER_PAGE;
            let at = (mid % MULTIXACT_OFFSETS_PER_PAGE) * 4;
            let mut patch = vec![(at as u16, Bytes::copy_from_slice(&moff.to_le_bytes()))];
            // Current minor releases also record where the next multixact's
            // members start (so a reader of this one never waits for it).
            // Done here when that entry is on the same page; on the next
            // page it is written when that multixact is created.
            let next_offset = moff.wrapping_add(members.len() as u32);
            if at + 4 < postgres_ffi::BLCKSZ as u32 {
                patch.push(((at + 4) as u16, Bytes::copy_from_slice(&next_offset.to_le_bytes())));
            }
            put_patches(SlruKind::MultiXactOffsets, page, patch, m).await?;
            let mut by_page: Vec<(u32, Vec<(u16, Bytes)>)> = Vec::new();
            for (i, member) in members.iter().enumerate() {
                let offset = moff.wrapping_add(i as u32);
                let page = offset / MEMBERS_PER_PAGE;
                let group_at =
                    ((offset / MEMBERS_PER_GROUP) % MEMBER_GROUPS_PER_PAGE) * MEMBER_GROUP_BYTES;
                let slot = offset % MEMBERS_PER_GROUP;
                let xid_at = group_at + 4 + slot * 4;
                let patches = [
                    ((group_at + slot) as u16, Bytes::copy_from_slice(&[member.status as u8])),
                    (xid_at as u16, Bytes::copy_from_slice(&member.xid.to_le_bytes())),
                ];
                match by_page.iter_mut().find(|(p, _)| *p == page) {
                    Some((_, v)) => v.extend(patches),
                    None => by_page.push((page, patches.to_vec())),
                }
            }
            for (page, patches) in by_page {
                put_patches(SlruKind::MultiXactMembers, page, patches, m).await?;
            }
            let xids: Vec<u32> = members.iter().map(|m| m.xid).collect();
            checkpoint.multixact_created(mid, next_offset, &xids);
            Ok(())
        }
        MultiXactRecord::Truncate { end_trunc_off, end_trunc_memb, oldest_multi_db, .. } => {
            truncate(SlruKind::MultiXactOffsets, end_trunc_off / MULTIXACT_OFFSETS_PER_PAGE, m)
                .await?;
            truncate(SlruKind::MultiXactMembers, end_trunc_memb / MEMBERS_PER_PAGE, m).await?;
            checkpoint.multixact_truncated(end_trunc_off, oldest_multi_db);
            Ok(())
        }
    }
}

async fn zero(kind: SlruKind, pageno: u32, m: &mut DatadirModification<'_>) -> anyhow::Result<()> {
    let (segno, rpageno) = segment_of_page(pageno);
    m.put_slru_page_image(kind, segno, rpageno, zero_page()).await
}

async fn put_patches(
    kind: SlruKind,
    pageno: u32,
    patches: Vec<(u16, Bytes)>,
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<()> {
    let (segno, rpageno) = segment_of_page(pageno);
    m.put_slru_value(kind, segno, rpageno, Value::Record(Record::SetBytes { patches })).await
}

/// Drop every segment wholly before `cutoff_page` (no wraparound: segment
/// numbers compare as plain numbers).
async fn truncate(
    kind: SlruKind,
    cutoff_page: u32,
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<()> {
    let cutoff_segment = cutoff_page / SLRU_PAGES_PER_SEGMENT;
    for segno in m.slru_segments(kind).await? {
        if segno < cutoff_segment {
            m.drop_slru_segment(kind, segno).await?;
        }
    }
    Ok(())
}
