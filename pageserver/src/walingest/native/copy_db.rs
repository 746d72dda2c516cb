//! `CREATE DATABASE ... STRATEGY FILE_COPY`: PostgreSQL copies the source
//! database's files (after a checkpoint) and logs one record. Here every
//! relation fork of the source is copied page by page, with its relmap
//! file, from the committed state (the receiver commits before this record,
//! so the view includes everything up to it).

use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;

use crate::pgdatadir_mapping::{
    get_one, get_rel_pages_batched, get_rel_size, list_rels, DatadirModification,
};
use crate::tenant::ReadKind;

const READ: ReadKind = ReadKind::Ingest;

pub async fn copy(
    m: &mut DatadirModification<'_>,
    (src_spc, src_db): (u32, u32),
    (spc, db): (u32, u32),
) -> anyhow::Result<()> {
    let (tl, lsn) = m.committed_view();
    m.put_db_dir_creation(spc, db).await?;
    if let Some(map) = get_one(tl, READ, Key::relmap_file(src_spc, src_db), lsn).await? {
        m.put_relmap_file(spc, db, map).await?;
    }
    let chunk = tl.conf().max_get_vectored_keys;
    for src in list_rels(tl, READ, src_spc, src_db, lsn).await? {
        let dst = RelTag { spcnode: spc, dbnode: db, ..src };
        let nblocks = get_rel_size(tl, READ, src, lsn).await?;
        m.put_rel_creation(dst, 0).await?;
        for start in (0..nblocks).step_by(chunk) {
            let end = (start + chunk as u32).min(nblocks);
            let queries: Vec<(RelTag, u32, _)> = (start..end).map(|b| (src, b, lsn)).collect();
            let pages = get_rel_pages_batched(tl, READ, &queries).await?;
            for (blkno, page) in (start..end).zip(pages) {
                m.put_rel_page_image(dst, blkno, page?).await?;
            }
        }
    }
    Ok(())
}
