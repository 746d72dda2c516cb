//! PostgreSQL-level reads at an LSN: relation existence and size, pages in
//! batches, database size, SLRU segments, directory listings.
//!
//! Contract with the page service: `get_rel_pages_each` (and the collecting
//! `get_rel_pages_batched`) issues exactly one vectored get
//! (`Timeline::get_vectored_each`) for its batch when the sizes of the batch's
//! relations are cached (the steady state); when some are not, their size
//! keys ride along in the same call, or, if that exceeds
//! `max_get_vectored_keys` (from config, never learned from a refusal), the
//! queries are split into chunks of that size. Duplicate (rel, blk, lsn) are
//! read once (the vectored read deduplicates its queries). One result per
//! page (`get_rel_pages_batched`: in request order).

use bytes::Bytes;
use pageserver_api::key::Key;
use pageserver_api::reltag::{RelTag, SlruKind, DEFAULTTABLESPACE_OID, GLOBALTABLESPACE_OID};
use utils::lsn::Lsn;

use super::{
    decode_size, get_chunked, get_one, optional, zero_page, DatadirError, DbDirectory,
    RelDirectory, SlruDirectory, BLCKSZ,
};
use crate::tenant::vectored_read::Ready;
use crate::tenant::{GetVectoredError, PageReconstructError, ReadKind, Timeline};

/// Size of `rel` at `lsn`: `None` if it does not exist. Uses and fills the
/// timeline's size cache.
pub(crate) async fn rel_size_opt(
    tl: &Timeline,
    reader: ReadKind,
    rel: RelTag,
    lsn: Lsn,
) -> Result<Option<u32>, DatadirError> {
    if rel.relnode == 0 {
        return Ok(None);
    }
    if let Some(size) = tl.rel_size_cache.lookup(rel, lsn) {
        return Ok(size);
    }
    let latest = lsn == tl.get_last_record_lsn();
    let size = match get_one(tl, reader, Key::rel_size(rel), lsn).await? {
        Some(v) => decode_size(&v, || format!("relation {rel} at {lsn}"))?,
        None => None,
    };
    if latest {
        tl.rel_size_cache.fill(rel, lsn, size);
    }
    Ok(size)
}

pub async fn get_rel_exists(
    tl: &Timeline,
    reader: ReadKind,
    rel: RelTag,
    lsn: Lsn,
) -> Result<bool, DatadirError> {
    Ok(rel_size_opt(tl, reader, rel, lsn).await?.is_some())
}

/// Number of blocks of `rel` at `lsn`.
pub async fn get_rel_size(
    tl: &Timeline,
    reader: ReadKind,
    rel: RelTag,
    lsn: Lsn,
) -> Result<u32, DatadirError> {
    rel_size_opt(tl, reader, rel, lsn).await?.ok_or(DatadirError::RelNotFound { rel, lsn })
}

/// Read pages of relations, each at its own LSN, with one vectored get
/// (see the module comment). Per page: the image; 8192 zero bytes at or past
/// the relation's size; `RelNotFound` for relnode 0 or an unknown relation.
/// The results in request order. The outer error is the vectored get's own
/// (too many keys, cancelled).
pub async fn get_rel_pages_batched(
    tl: &Timeline,
    reader: ReadKind,
    pages: &[(RelTag, u32, Lsn)],
) -> Result<Vec<Result<Bytes, DatadirError>>, GetVectoredError> {
    let mut out = vec![None; pages.len()];
    get_rel_pages_each(tl, reader, pages, &mut |i, r| {
        assert!(out[i].replace(r).is_none(), "page {i} answered twice");
    })
    .await?;
    Ok(out.into_iter().map(|r| r.expect("every page is answered")).collect())
}

/// [`get_rel_pages_batched`], handing each page's result to `ready` (with
/// its index in `pages`) as soon as it is known. When the sizes of the
/// batch's relations are cached (the steady state), pages are handed out
/// as their reads complete; otherwise once the whole read is done. On
/// `Err`, the pages answered without reading may have been handed out;
/// the others were not.
pub async fn get_rel_pages_each(
    tl: &Timeline,
    reader: ReadKind,
    pages: &[(RelTag, u32, Lsn)],
    ready: &mut Ready<'_, Result<Bytes, DatadirError>>,
) -> Result<(), GetVectoredError> {
    let latest = tl.get_last_record_lsn();

    // 1. Sizes from the cache; remember which (rel, lsn) miss. A batch
    // touches few distinct relations, so a linear scan beats hashing.
    let mut sizes = SizeTable::default();
    let mut misses: Vec<(RelTag, Lsn)> = Vec::new();
    for &(rel, _, lsn) in pages {
        if rel.relnode == 0 || sizes.get(rel, lsn).is_some() || misses.contains(&(rel, lsn)) {
            continue;
        }
        match tl.rel_size_cache.lookup(rel, lsn) {
            Some(size) => sizes.insert(rel, lsn, Ok(size)),
            None => misses.push((rel, lsn)),
        }
    }

    // 2. Page queries, answering at once the pages known without reading.
    // Duplicates are passed on: the vectored read plans and reads each
    // (key, lsn) once.
    let mut queries: Vec<(Key, Lsn)> = Vec::with_capacity(pages.len() + misses.len());
    let mut page_of: Vec<usize> = Vec::with_capacity(pages.len());
    for (p, &(rel, blk, lsn)) in pages.iter().enumerate() {
        let known = match sizes.get(rel, lsn) {
            _ if rel.relnode == 0 => Some(Err(DatadirError::RelNotFound { rel, lsn })),
            Some(Ok(None)) => Some(Err(DatadirError::RelNotFound { rel, lsn })),
            Some(Ok(Some(n))) if blk >= *n => Some(Ok(zero_page())),
            _ => None,
        };
        match known {
            Some(r) => ready(p, r),
            None => {
                page_of.push(p);
                queries.push((Key::rel_block(rel, blk), lsn));
            }
        }
    }
    if queries.is_empty() {
        return Ok(());
    }

    // 3. The steady state: every size known, one vectored get, each page
    // handed out as soon as it is read.
    let max_keys = tl.conf().max_get_vectored_keys;
    if misses.is_empty() && queries.len() <= max_keys {
        return tl
            .get_vectored_each(&queries, reader, &mut |i, r| {
                let p = page_of[i];
                let (rel, blk, lsn) = pages[p];
                let n = match sizes.get(rel, lsn) {
                    Some(Ok(Some(n))) => *n,
                    _ => unreachable!("queried pages are below their known size"),
                };
                ready(p, page_result(&r, rel, blk, n, lsn));
            })
            .await;
    }

    // 4. Else the missing sizes ride along (in one call when allowed), and
    // the pages are answered when they are decoded.
    let n_pages = queries.len();
    queries.extend(misses.iter().map(|&(rel, lsn)| (Key::rel_size(rel), lsn)));
    let results = if queries.len() <= max_keys {
        tl.get_vectored(&queries, reader).await?
    } else {
        get_chunked(tl, reader, &queries).await?
    };
    debug_assert_eq!(results.len(), queries.len());
    for (&(rel, lsn), res) in misses.iter().zip(&results[n_pages..]) {
        let size = match optional(res.clone()) {
            Ok(Some(v)) => decode_size(&v, || format!("relation {rel} at {lsn}")),
            Ok(None) => Ok(None),
            Err(e) => Err(DatadirError::Reconstruct(e)),
        };
        if let Ok(s) = &size {
            if lsn == latest {
                tl.rel_size_cache.fill(rel, lsn, *s);
            }
        }
        sizes.insert(rel, lsn, size);
    }
    for (&p, r) in page_of.iter().zip(&results) {
        let (rel, blk, lsn) = pages[p];
        ready(
            p,
            match sizes.get(rel, lsn).expect("size known for every queried page") {
                Err(e) => Err(e.clone()),
                Ok(None) => Err(DatadirError::RelNotFound { rel, lsn }),
                Ok(Some(n)) if blk >= *n => Ok(zero_page()),
                Ok(Some(n)) => page_result(r, rel, blk, *n, lsn),
            },
        );
    }
    Ok(())
}

/// A relation's size in blocks (`None`: it does not exist), or why unknown.
type SizeResult = Result<Option<u32>, DatadirError>;

/// Relation sizes of one batch, keyed by (rel, lsn); a handful of entries.
#[derive(Default)]
struct SizeTable(Vec<((RelTag, Lsn), SizeResult)>);

impl SizeTable {
    fn get(&self, rel: RelTag, lsn: Lsn) -> Option<&SizeResult> {
        self.0.iter().find(|(k, _)| *k == (rel, lsn)).map(|(_, v)| v)
    }

    /// Callers insert each (rel, lsn) once.
    fn insert(&mut self, rel: RelTag, lsn: Lsn, size: SizeResult) {
        debug_assert!(self.get(rel, lsn).is_none());
        self.0.push(((rel, lsn), size));
    }
}

fn page_result(
    r: &Result<Bytes, PageReconstructError>,
    rel: RelTag,
    blk: u32,
    nblocks: u32,
    lsn: Lsn,
) -> Result<Bytes, DatadirError> {
    match r {
        Ok(page) if page.len() == BLCKSZ => Ok(page.clone()),
        Ok(page) => Err(DatadirError::Corrupt(format!(
            "block {blk} of relation {rel} at {lsn} is {} bytes, expected {BLCKSZ}",
            page.len()
        ))),
        Err(PageReconstructError::MissingKey { .. }) => Err(DatadirError::Corrupt(format!(
            "block {blk} of relation {rel} is below its size {nblocks} but has no value at {lsn}"
        ))),
        Err(e) => Err(DatadirError::Reconstruct(e.clone())),
    }
}

/// The database directory at `lsn` (`None` if the timeline has none yet).
pub(crate) async fn read_dbdir(
    tl: &Timeline,
    reader: ReadKind,
    lsn: Lsn,
) -> Result<Option<DbDirectory>, DatadirError> {
    match get_one(tl, reader, Key::dbdir(), lsn).await? {
        Some(v) => Ok(Some(DbDirectory::decode(&v)?)),
        None => Ok(None),
    }
}

/// The relations of a database at `lsn`; `None` if the database does not
/// exist (never created, or dropped).
pub(crate) async fn read_reldir(
    tl: &Timeline,
    reader: ReadKind,
    spcnode: u32,
    dbnode: u32,
    lsn: Lsn,
) -> Result<Option<RelDirectory>, DatadirError> {
    match get_one(tl, reader, Key::rel_dir(spcnode, dbnode), lsn).await? {
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => Ok(Some(RelDirectory::decode(&v)?)),
        None => Ok(None),
    }
}

pub(crate) async fn read_slru_dir(
    tl: &Timeline,
    reader: ReadKind,
    kind: SlruKind,
    lsn: Lsn,
) -> Result<SlruDirectory, DatadirError> {
    match get_one(tl, reader, Key::slru_dir(kind), lsn).await? {
        Some(v) => Ok(SlruDirectory::decode(&v)?),
        None => Ok(SlruDirectory::default()),
    }
}

/// Every database at `lsn`: ((spcnode, dbnode), relmap file exists).
pub async fn list_dbs(
    tl: &Timeline,
    reader: ReadKind,
    lsn: Lsn,
) -> Result<Vec<((u32, u32), bool)>, DatadirError> {
    Ok(read_dbdir(tl, reader, lsn).await?.map(|d| d.dbs.into_iter().collect()).unwrap_or_default())
}

/// Every relation fork of a database at `lsn`.
pub async fn list_rels(
    tl: &Timeline,
    reader: ReadKind,
    spcnode: u32,
    dbnode: u32,
    lsn: Lsn,
) -> Result<Vec<RelTag>, DatadirError> {
    let dir = read_reldir(tl, reader, spcnode, dbnode, lsn)
        .await?
        .ok_or(DatadirError::DbNotFound { spcnode, dbnode, lsn })?;
    Ok(dir.rels.into_iter().map(|(rel, fork)| RelTag::new(spcnode, dbnode, rel, fork)).collect())
}

/// Every segment number of an SLRU at `lsn`.
pub async fn list_slru_segments(
    tl: &Timeline,
    reader: ReadKind,
    kind: SlruKind,
    lsn: Lsn,
) -> Result<Vec<u32>, DatadirError> {
    Ok(read_slru_dir(tl, reader, kind, lsn).await?.segments.into_iter().collect())
}

/// Sizes of many relations at one LSN: cache first, then chunked reads.
/// A relation without a size is an error (it is listed in a directory).
pub(crate) async fn rel_sizes(
    tl: &Timeline,
    reader: ReadKind,
    rels: &[RelTag],
    lsn: Lsn,
) -> Result<Vec<u32>, DatadirError> {
    let mut out = vec![0u32; rels.len()];
    let mut missing = Vec::new();
    for (i, rel) in rels.iter().enumerate() {
        match tl.rel_size_cache.lookup(*rel, lsn) {
            Some(Some(n)) => out[i] = n,
            _ => missing.push(i),
        }
    }
    let queries: Vec<_> = missing.iter().map(|&i| (Key::rel_size(rels[i]), lsn)).collect();
    let results = get_chunked(tl, reader, &queries).await?;
    for (&i, r) in missing.iter().zip(results) {
        let rel = rels[i];
        let size = match optional(r)? {
            Some(v) => decode_size(&v, || format!("relation {rel} at {lsn}"))?,
            None => None,
        };
        out[i] = size.ok_or_else(|| {
            DatadirError::Corrupt(format!(
                "relation {rel} is in its directory but has no size at {lsn}"
            ))
        })?;
    }
    Ok(out)
}

/// Total size in bytes of every fork of every relation of a database.
pub async fn get_db_size(
    tl: &Timeline,
    reader: ReadKind,
    spcnode: u32,
    dbnode: u32,
    lsn: Lsn,
) -> Result<u64, DatadirError> {
    let rels = list_rels(tl, reader, spcnode, dbnode, lsn).await?;
    let sizes = rel_sizes(tl, reader, &rels, lsn).await?;
    Ok(sizes.iter().map(|&n| n as u64 * BLCKSZ as u64).sum())
}

/// Total size in bytes of a database's relations in every tablespace, as
/// `pg_database_size` sums `base/<db>` and `pg_tblspc/*/PG_*/<db>` (the
/// files that are not relations, `PG_VERSION` and `pg_filenode.map`, are not
/// counted: the page service's DbSize). `DbNotFound` if the database has a
/// directory in no tablespace.
pub async fn get_db_size_all_tablespaces(
    tl: &Timeline,
    reader: ReadKind,
    dbnode: u32,
    lsn: Lsn,
) -> Result<u64, DatadirError> {
    let tablespaces: Vec<u32> = list_dbs(tl, reader, lsn)
        .await?
        .into_iter()
        .filter(|&((spc, db), _)| db == dbnode && db != 0 && spc != GLOBALTABLESPACE_OID)
        .map(|((spc, _), _)| spc)
        .collect();
    if tablespaces.is_empty() {
        return Err(DatadirError::DbNotFound { spcnode: DEFAULTTABLESPACE_OID, dbnode, lsn });
    }
    let mut total = 0;
    for spc in tablespaces {
        total += get_db_size(tl, reader, spc, dbnode, lsn).await?;
    }
    Ok(total)
}

/// Size in blocks of an SLRU segment at `lsn`, `None` if it does not exist.
pub(crate) async fn slru_segment_size(
    tl: &Timeline,
    reader: ReadKind,
    kind: SlruKind,
    segno: u32,
    lsn: Lsn,
) -> Result<Option<u32>, DatadirError> {
    match get_one(tl, reader, Key::slru_segment_size(kind, segno), lsn).await? {
        Some(v) => decode_size(&v, || format!("SLRU segment {segno:04X} of {}", kind.dir_name())),
        None => Ok(None),
    }
}

/// The whole content of an SLRU segment file: its pages concatenated.
pub async fn get_slru_segment(
    tl: &Timeline,
    reader: ReadKind,
    kind: SlruKind,
    segno: u32,
    lsn: Lsn,
) -> Result<Bytes, DatadirError> {
    let nblocks = slru_segment_size(tl, reader, kind, segno, lsn)
        .await?
        .ok_or(DatadirError::SlruSegmentNotFound { kind, segno, lsn })?;
    let queries: Vec<_> = (0..nblocks).map(|b| (Key::slru_block(kind, segno, b), lsn)).collect();
    let results = get_chunked(tl, reader, &queries).await?;
    let mut out = Vec::with_capacity(nblocks as usize * BLCKSZ);
    for (blk, r) in results.into_iter().enumerate() {
        let page = optional(r)?.ok_or_else(|| {
            DatadirError::Corrupt(format!(
                "block {blk} of SLRU segment {segno:04X} of {} is below its size {nblocks} but has no value at {lsn}",
                kind.dir_name()
            ))
        })?;
        if page.len() != BLCKSZ {
            return Err(DatadirError::Corrupt(format!(
                "block {blk} of SLRU segment {segno:04X} of {} is {} bytes",
                kind.dir_name(),
                page.len()
            )));
        }
        out.extend_from_slice(&page);
    }
    Ok(out.into())
}
