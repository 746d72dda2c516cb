//! WAL records into page-store values, without a PostgreSQL redo process
//! (see `docs/wal-ingest.md`).
//!
//! For every decoded record, at the record's end LSN:
//! 1. each block reference with a full-page image stores that image, as the
//!    record carries it (compressed, hole removed), as the block's new
//!    version (`tenant/wal_image.rs`: rebuilt when read, `pd_lsn` stamped,
//!    checksum redone); a
//!    reference past the relation's end extends it (gap blocks read as
//!    zeros); a reference without an image stores a `Record::Postgres`
//!    holding what native redo of that block needs
//!    (`postgres_ffi::redo::RedoRecord`), applied when the page is read; a
//!    reference past the relation's end starts from a zero page (as
//!    PostgreSQL's redo reads a page it has not got); an rmgr without
//!    native redo makes reads of that page fail naming LSN and rmgr;
//! 2. the records that change what no image shows are applied natively
//!    (`native.rs`): relation create/truncate/drop, CLOG and multixact
//!    pages, databases, relmap files, two-phase state, the checkpoint, and
//!    visibility-map bits cleared by heap records.
//!
//! With `wal_redo_check`, every record also goes through `redo_check.rs`
//! first (PostgreSQL's consistency images against native redo).
//!
//! The caller (the WAL receiver) owns the `DatadirModification`: it moves it
//! to each record's end LSN with `set_lsn`, and commits batches of records.

mod native;
mod redo_check;

use anyhow::Context;
use bytes::Bytes;
use pageserver_api::key::Key;
use pageserver_api::reltag::RelTag;
use postgres_ffi::controlfile::ControlFileData;
use postgres_ffi::redo::{self, RedoRecord};
use postgres_ffi::wal::{BlockTag, DecodedWalRecord};
use postgres_ffi::PgMajorVersion;
use utils::lsn::Lsn;

use crate::pgdatadir_mapping::{get_one, DatadirModification};
use crate::tenant::value::{Record, Value};
use crate::tenant::wal_image::{stamp_page, WalImage};
use crate::tenant::{ReadKind, Timeline};

/// What the receiver should know about an ingested record.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    /// A shutdown checkpoint: the primary is stopping and waits until the
    /// standby reports it flushed, so make it durable now.
    pub shutdown_checkpoint: bool,
}

/// Per-timeline ingest state.
pub struct WalIngest {
    version: PgMajorVersion,
    /// The cluster has data checksums: stored images get theirs recomputed.
    data_checksums: bool,
    /// The latest checkpoint (`CheckPoint` bytes) as ingest keeps it current.
    checkpoint: native::CheckpointState,
    /// `wal_redo_check`: native redo checked against PostgreSQL's images.
    redo_check: Option<redo_check::RedoCheck>,
}

impl WalIngest {
    /// State of `tl` as of `lsn` (its control file and checkpoint).
    pub async fn new(tl: &Timeline, lsn: Lsn) -> anyhow::Result<WalIngest> {
        let version = PgMajorVersion::new(tl.pg_version)?;
        let control = read_control_file(tl, lsn).await?;
        let checkpoint = get_one(tl, ReadKind::Ingest, Key::checkpoint(), lsn)
            .await?
            .context("the timeline has no checkpoint value")?;
        let data_checksums = control.data_checksum_version != 0;
        tl.set_data_checksums(data_checksums);
        Ok(WalIngest {
            version,
            data_checksums,
            checkpoint: native::CheckpointState::new(checkpoint, version),
            redo_check: tl.conf().wal_redo_check.then(|| redo_check::RedoCheck::new(version)),
        })
    }

    /// Apply one record; `m` is already at `rec.end_lsn`.
    pub async fn ingest(
        &mut self,
        rec: &DecodedWalRecord,
        m: &mut DatadirModification<'_>,
    ) -> anyhow::Result<Ingested> {
        debug_assert_eq!(m.lsn(), rec.end_lsn);
        if let Some(check) = &mut self.redo_check {
            check.observe(rec);
        }
        self.checkpoint.note_xid(rec.xid);
        let outcome = native::apply(self, rec, m)
            .await
            .with_context(|| format!("record at {} (rmgr {})", rec.lsn, rec.rmid))?;
        self.put_blocks(rec, m).await?;
        if self.checkpoint.take_dirty() {
            m.put_checkpoint(self.checkpoint.encode());
        }
        Ok(outcome)
    }

    /// Step 1 of the module comment: every block reference.
    async fn put_blocks(
        &self,
        rec: &DecodedWalRecord,
        m: &mut DatadirModification<'_>,
    ) -> anyhow::Result<()> {
        for (i, blk) in rec.blocks.iter().enumerate() {
            let rel = rel_of(&blk.tag);
            let blkno = blk.tag.blkno;
            let value = match &blk.image {
                Some(img) if redo::redo_after_image(rec.rmid, rec.info, blk.id) => {
                    self.image_then_redo(rec, i)?
                }
                Some(img) => Value::WalImage(WalImage::from_block(img, self.data_checksums)),
                None => {
                    // A page the relation has not got yet is redone from zeros.
                    let new_page = m.rel_size(rel).await?.is_none_or(|size| blkno >= size);
                    let redo = RedoRecord::from_decoded(rec, i);
                    let mut body = Vec::with_capacity(redo.encoded_len());
                    redo.encode(&mut body);
                    Value::Record(Record::Postgres {
                        will_init: blk.will_init || new_page,
                        rmid: rec.rmid,
                        rec: Bytes::from(body),
                    })
                }
            };
            m.put_rel_value(rel, blkno, value)
                .await
                .with_context(|| format!("block {blkno} of {rel} in the record at {}", rec.lsn))?;
        }
        Ok(())
    }

    /// Block `i` of `rec` carries an image, and PostgreSQL's redo changes
    /// it after restoring it (`redo::redo_after_image`): the page stored is
    /// the image with the record applied, its LSN and checksum set.
    fn image_then_redo(&self, rec: &DecodedWalRecord, i: usize) -> anyhow::Result<Value> {
        let blk = &rec.blocks[i];
        let image = blk.image.as_ref().expect("a block with an image");
        let mut page = image
            .restore()
            .map_err(|e| {
                anyhow::anyhow!("the image of block {} in the record at {}: {e}", blk.id, rec.lsn)
            })?
            .to_vec();
        let redo_rec = RedoRecord::from_decoded(rec, i);
        redo::apply(&mut page, blk.tag, rec.end_lsn, &redo_rec, self.version)?;
        let page = stamp_page(Bytes::from(page), blk.tag.blkno, rec.end_lsn, self.data_checksums);
        Ok(Value::Image(page))
    }
}

/// The timeline's `pg_control` as of `lsn`, decoded.
pub async fn read_control_file(tl: &Timeline, lsn: Lsn) -> anyhow::Result<ControlFileData> {
    let version = PgMajorVersion::new(tl.pg_version)?;
    let control = get_one(tl, ReadKind::Ingest, Key::control_file(), lsn)
        .await?
        .context("the timeline has no control file (was it created from a base backup?)")?;
    ControlFileData::decode(&control, version)
        .context("the timeline's control file does not decode")
}

/// Does ingesting `rec` read the timeline's committed state (beyond the
/// modification's own pending changes)? `CREATE DATABASE ... FILE_COPY`
/// copies the source database as of the record: the caller commits what
/// it has before such a record.
pub fn reads_committed_state(rec: &DecodedWalRecord) -> bool {
    use postgres_ffi::wal::rmgr::database::XLOG_DBASE_CREATE_FILE_COPY;
    rec.rmid == postgres_ffi::wal::rmgr_id::DATABASE
        && rec.rmgr_info() == XLOG_DBASE_CREATE_FILE_COPY
}

/// The relation fork a block reference names.
pub fn rel_of(tag: &BlockTag) -> RelTag {
    RelTag { spcnode: tag.spc_oid, dbnode: tag.db_oid, relnode: tag.rel_number, forknum: tag.fork }
}
