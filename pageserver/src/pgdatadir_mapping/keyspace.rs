//! `collect_keyspace`: every key that exists at an LSN, as PostgreSQL sees
//! it, found by walking the directories (not the raw layers, which also hold
//! keys of dropped relations and blocks past a truncation).
//!
//! Output: sorted, non-overlapping, end-exclusive ranges with adjacent
//! ranges merged. This feeds `GET .../keyspace`, from which pagebench picks
//! the pages it reads, so a key listed here must be readable at the LSN.

use std::ops::Range;

use pageserver_api::key::Key;
use pageserver_api::reltag::{RelTag, SlruKind};
use utils::lsn::Lsn;

use super::reads::{read_dbdir, read_reldir, rel_sizes};
use super::{
    decode_size, get_chunked, get_one, optional, DatadirError, SlruDirectory, TwoPhaseDirectory,
};
use crate::tenant::{ReadKind, Timeline};

const SLRU_KINDS: [SlruKind; 3] =
    [SlruKind::Clog, SlruKind::MultiXactMembers, SlruKind::MultiXactOffsets];

pub async fn collect_keyspace(
    tl: &Timeline,
    reader: ReadKind,
    lsn: Lsn,
) -> Result<Vec<Range<Key>>, DatadirError> {
    let mut ranges: Vec<Range<Key>> = Vec::new();

    // Databases, their relmap files and relation directories.
    if let Some(dbdir) = read_dbdir(tl, reader, lsn).await? {
        single(&mut ranges, Key::dbdir());
        let mut rels: Vec<RelTag> = Vec::new();
        for (&(spc, db), &relmap) in &dbdir.dbs {
            if relmap {
                single(&mut ranges, Key::relmap_file(spc, db));
            }
            let Some(dir) = read_reldir(tl, reader, spc, db, lsn).await? else {
                return Err(DatadirError::Corrupt(format!(
                    "database {spc}/{db} is in the database directory but has no relation directory at {lsn}"
                )));
            };
            single(&mut ranges, Key::rel_dir(spc, db));
            rels.extend(dir.rels.iter().map(|&(r, f)| RelTag::new(spc, db, r, f)));
        }
        let sizes = rel_sizes(tl, reader, &rels, lsn).await?;
        for (rel, n) in rels.into_iter().zip(sizes) {
            if n > 0 {
                ranges.push(Key::rel_block(rel, 0)..Key::rel_block(rel, n));
            }
            single(&mut ranges, Key::rel_size(rel));
        }
    }

    // SLRUs: directory, blocks, segment sizes.
    for kind in SLRU_KINDS {
        let Some(dir) = get_one(tl, reader, Key::slru_dir(kind), lsn).await? else { continue };
        single(&mut ranges, Key::slru_dir(kind));
        let segs: Vec<u32> = SlruDirectory::decode(&dir)?.segments.into_iter().collect();
        let queries: Vec<_> =
            segs.iter().map(|&s| (Key::slru_segment_size(kind, s), lsn)).collect();
        for (seg, r) in segs.iter().zip(get_chunked(tl, reader, &queries).await?) {
            let n = match optional(r)? {
                Some(v) => {
                    decode_size(&v, || format!("SLRU segment {seg:04X} of {}", kind.dir_name()))?
                }
                None => None,
            };
            let n = n.ok_or_else(|| {
                DatadirError::Corrupt(format!(
                    "SLRU segment {seg:04X} of {} is in its directory but has no size at {lsn}",
                    kind.dir_name()
                ))
            })?;
            if n > 0 {
                ranges.push(Key::slru_block(kind, *seg, 0)..Key::slru_block(kind, *seg, n));
            }
            single(&mut ranges, Key::slru_segment_size(kind, *seg));
        }
    }

    // Two-phase state, control file, checkpoint.
    if let Some(v) = get_one(tl, reader, Key::twophase_dir(), lsn).await? {
        single(&mut ranges, Key::twophase_dir());
        for xid in TwoPhaseDirectory::decode(&v)?.xids {
            single(&mut ranges, Key::twophase_file(xid));
        }
    }
    for k in [Key::control_file(), Key::checkpoint()] {
        if get_one(tl, reader, k, lsn).await?.is_some() {
            single(&mut ranges, k);
        }
    }

    Ok(merge(ranges))
}

fn single(ranges: &mut Vec<Range<Key>>, k: Key) {
    ranges.push(k..k.next());
}

/// Sort and merge overlapping or adjacent ranges.
pub(crate) fn merge(mut ranges: Vec<Range<Key>>) -> Vec<Range<Key>> {
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<Key>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => {
                if r.end > last.end {
                    last.end = r.end;
                }
            }
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_adjacent_and_overlapping() {
        let rel = RelTag::new(1663, 5, 16384, 0);
        let ranges = vec![
            Key::rel_size(rel)..Key::rel_size(rel).next(),
            Key::rel_block(rel, 0)..Key::rel_block(rel, 10),
            // The next fork's blocks start right after this fork's size key.
            Key::rel_block(rel.with_fork(1), 0)..Key::rel_block(rel.with_fork(1), 3),
            Key::rel_block(rel, 5)..Key::rel_block(rel, 7),
            Key::dbdir()..Key::dbdir().next(),
        ];
        let m = merge(ranges);
        assert_eq!(
            m,
            vec![
                Key::dbdir()..Key::dbdir().next(),
                Key::rel_block(rel, 0)..Key::rel_block(rel, 10),
                Key::rel_size(rel)..Key::rel_block(rel.with_fork(1), 3),
            ]
        );
    }
}
