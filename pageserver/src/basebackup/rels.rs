//! Relation files: unlogged relations' init forks (both flavours), every
//! fork of every relation (fullbackup), in 1 GiB segment files as
//! PostgreSQL lays them out.
//!
//! Unlogged relations (those with an init fork): their main fork is not
//! WAL-logged, so what the timeline holds of it is meaningless. `basebackup`
//! writes the init fork and an empty main fork (PostgreSQL's start-up does
//! the reset, as Neon's compute expects); `fullbackup` writes the init fork
//! and a main fork that is a copy of it, and no FSM or VM fork: exactly what
//! PostgreSQL's `ResetUnloggedRelations` leaves, so a server that starts
//! without recovery (and so without that reset) sees an empty relation.

use std::collections::BTreeSet;
use std::ops::Range;

use pageserver_api::reltag::RelTag;
use postgres_ffi::paths::relfile_path;
use postgres_ffi::{BLCKSZ, INIT_FORKNUM, MAIN_FORKNUM, RELSEG_SIZE};

use super::{BackupError, BackupOptions, ChunkSink, Layout, TarWriter};
use crate::pgdatadir_mapping::{get_rel_pages_batched, list_dbs, list_rels, rel_sizes};
use crate::tenant::Timeline;

pub async fn write_relations<S: ChunkSink>(
    tar: &mut TarWriter<S>,
    tl: &Timeline,
    opts: &BackupOptions,
    layout: Layout,
) -> Result<(), BackupError> {
    let lsn = opts.lsn;
    let dbs = list_dbs(tl, opts.reader, lsn).await.map_err(BackupError::read(lsn))?;
    for ((spc, db), _) in dbs {
        let mut rels =
            list_rels(tl, opts.reader, spc, db, lsn).await.map_err(BackupError::read(lsn))?;
        rels.sort();
        let unlogged: BTreeSet<u32> =
            rels.iter().filter(|r| r.forknum == INIT_FORKNUM).map(|r| r.relnode).collect();
        rels.retain(|r| wanted(r, &unlogged, opts.full));
        let sizes = rel_sizes(tl, opts.reader, &rels, lsn).await.map_err(BackupError::read(lsn))?;
        for (rel, nblocks) in rels.into_iter().zip(sizes) {
            let file = FileOf { rel, layout };
            if rel.forknum != INIT_FORKNUM {
                write_fork(tar, tl, opts, rel, nblocks, file).await?;
                continue;
            }
            write_fork(tar, tl, opts, rel, nblocks, file).await?;
            let main = FileOf { rel: rel.with_fork(MAIN_FORKNUM), layout };
            // The main fork: a copy of the init fork, or empty (module comment).
            let main_blocks = if opts.full { nblocks } else { 0 };
            write_fork(tar, tl, opts, rel, main_blocks, main).await?;
        }
    }
    Ok(())
}

/// Which stored forks are written as themselves (see the module comment;
/// an unlogged relation's main fork is written from its init fork).
fn wanted(rel: &RelTag, unlogged: &BTreeSet<u32>, full: bool) -> bool {
    if unlogged.contains(&rel.relnode) {
        rel.forknum == INIT_FORKNUM
    } else {
        full
    }
}

/// Where pages are written: the file layout of a fork (maybe another
/// fork than the one read).
#[derive(Clone, Copy)]
struct FileOf {
    rel: RelTag,
    layout: Layout,
}

impl FileOf {
    fn path(&self, segno: u32) -> String {
        let r = self.rel;
        let Layout { version, catalog_version_no } = self.layout;
        relfile_path(
            (r.spcnode, r.dbnode, r.relnode, r.forknum),
            segno,
            version,
            catalog_version_no,
        )
    }
}

/// `nblocks` pages of `src`, into segment files of `dst` (one empty file
/// for an empty fork).
async fn write_fork<S: ChunkSink>(
    tar: &mut TarWriter<S>,
    tl: &Timeline,
    opts: &BackupOptions,
    src: RelTag,
    nblocks: u32,
    dst: FileOf,
) -> Result<(), BackupError> {
    for (segno, blocks) in segments(nblocks, RELSEG_SIZE) {
        let size_bytes = (blocks.end - blocks.start) as u64 * BLCKSZ as u64;
        tar.begin_file(&dst.path(segno), size_bytes).await?;
        write_pages(tar, tl, opts, src, blocks).await?;
        tar.end_file().await?;
    }
    Ok(())
}

/// The segment files of a fork of `nblocks` blocks: (segment number, its
/// blocks). An empty fork is one empty file; a fork that fills its last
/// segment exactly has no empty segment after it (as PostgreSQL lays it
/// out once the next segment is not yet created).
fn segments(nblocks: u32, seg_blocks: u32) -> impl Iterator<Item = (u32, Range<u32>)> {
    let count = nblocks.div_ceil(seg_blocks).max(1);
    (0..count).map(move |segno| {
        let first = segno * seg_blocks;
        (segno, first..nblocks.min(first + seg_blocks))
    })
}

/// Pages `blocks` of `rel`, read in batches of `max_get_vectored_keys`.
async fn write_pages<S: ChunkSink>(
    tar: &mut TarWriter<S>,
    tl: &Timeline,
    opts: &BackupOptions,
    rel: RelTag,
    blocks: Range<u32>,
) -> Result<(), BackupError> {
    let lsn = opts.lsn;
    let batch = tl.conf().max_get_vectored_keys as u32;
    let mut blk = blocks.start;
    let mut queries = Vec::with_capacity(batch as usize);
    while blk < blocks.end {
        let n = batch.min(blocks.end - blk);
        queries.clear();
        queries.extend((blk..blk + n).map(|b| (rel, b, lsn)));
        let pages = get_rel_pages_batched(tl, opts.reader, &queries)
            .await
            .map_err(|e| BackupError::read(lsn)(e.into()))?;
        for page in pages {
            tar.data(&page.map_err(BackupError::read(lsn))?).await?;
        }
        blk += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use postgres_ffi::PgMajorVersion;

    use super::*;

    #[test]
    fn segment_files() {
        let segs = |n| segments(n, 4).collect::<Vec<_>>();
        assert_eq!(segs(0), vec![(0, 0..0)]);
        assert_eq!(segs(3), vec![(0, 0..3)]);
        assert_eq!(segs(4), vec![(0, 0..4)]);
        assert_eq!(segs(9), vec![(0, 0..4), (1, 4..8), (2, 8..9)]);
        let big = segments(RELSEG_SIZE + 1, RELSEG_SIZE).collect::<Vec<_>>();
        assert_eq!(big, vec![(0, 0..RELSEG_SIZE), (1, RELSEG_SIZE..RELSEG_SIZE + 1)]);
        let layout = Layout { version: PgMajorVersion::V16, catalog_version_no: 202307071 };
        let f = FileOf { rel: RelTag::new(1663, 5, 16384, 1), layout };
        assert_eq!(f.path(0), "base/5/16384_fsm");
        assert_eq!(f.path(2), "base/5/16384_fsm.2");
        let g = FileOf { rel: RelTag::new(1664, 0, 1262, 0), layout };
        assert_eq!(g.path(1), "global/1262.1");
        let t = FileOf { rel: RelTag::new(16797, 5, 16800, 0), layout };
        assert_eq!(t.path(0), "pg_tblspc/16797/PG_16_202307071/5/16800");
    }
}
