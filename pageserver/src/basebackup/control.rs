//! `global/pg_control` rewritten for the backup's LSN, and the WAL segment
//! holding that LSN (`postgres_ffi::wal::stub`).
//!
//! The timeline keeps `pg_control` as PostgreSQL last wrote it (import) and
//! the latest checkpoint as WAL moved it (`walingest`). The backup's control
//! file is the former with the latter as `checkPointCopy`, its checkpoint
//! and redo moved to the start position, state "shut down".

use bytes::Bytes;
use pageserver_api::key::Key;
use postgres_ffi::controlfile::{CheckPoint, ControlFileData, CHECKPOINT_SIZE};
use postgres_ffi::wal::stub::{
    checkpoint_record_lsn, checkpoint_shutdown_record, normalize_lsn, wal_file_name, SegmentParams,
    SegmentStub,
};
use postgres_ffi::wal::XLOG_BLCKSZ;
use postgres_ffi::PgMajorVersion;
use utils::lsn::Lsn;

use super::{BackupError, BackupOptions, ChunkSink, TarWriter};
use crate::pgdatadir_mapping::get_one;
use crate::tenant::Timeline;

/// Smallest and largest WAL segment sizes `initdb` accepts (1 MiB .. 1 GiB).
const MIN_SEG_BYTES: u64 = 1 << 20;
const MAX_SEG_BYTES: u64 = 1 << 30;

pub struct Control {
    version: PgMajorVersion,
    /// The rewritten control file.
    data: ControlFileData,
    /// Where the server starts: checkpoint and redo.
    start: Lsn,
    /// Write a shutdown checkpoint record at `start` (fullbackup).
    with_record: bool,
}

impl Control {
    pub async fn read(
        tl: &Timeline,
        opts: &BackupOptions,
        version: PgMajorVersion,
    ) -> Result<Control, BackupError> {
        let lsn = opts.lsn;
        let raw = read_value(tl, opts, Key::control_file(), "control file").await?;
        let old = ControlFileData::decode(&raw, version).map_err(|e| {
            BackupError::Internal(format!("the timeline's control file at {lsn}: {e}"))
        })?;
        let cp_raw = read_value(tl, opts, Key::checkpoint(), "checkpoint").await?;
        if cp_raw.len() < CHECKPOINT_SIZE {
            return Err(BackupError::Internal(format!(
                "the timeline's checkpoint at {lsn} is {} bytes, expected {CHECKPOINT_SIZE}",
                cp_raw.len()
            )));
        }
        let seg_size = old.xlog_seg_size as u64;
        if !seg_size.is_power_of_two() || !(MIN_SEG_BYTES..=MAX_SEG_BYTES).contains(&seg_size) {
            return Err(BackupError::Internal(format!(
                "the timeline's control file says the WAL segment size is {seg_size} bytes"
            )));
        }
        let start = if opts.full {
            checkpoint_record_lsn(lsn, seg_size)
        } else {
            normalize_lsn(lsn, seg_size)
        };
        let mut cp = CheckPoint::decode(&cp_raw, version);
        cp.redo = start.0;
        if cp.this_timeline_id == 0 {
            cp.this_timeline_id = 1;
        }
        let data =
            ControlFileData { checkpoint_copy: cp, ..old }.for_checkpoint_at(start.0, start.0);
        Ok(Control { version, data, start, with_record: opts.full })
    }

    /// `catalog_version_no`: names the `PG_<major>_<catversion>`
    /// directory of every tablespace.
    pub fn catalog_version_no(&self) -> u32 {
        self.data.catalog_version_no
    }

    /// Epoch of `xid` (an xid of a prepared transaction, so not in the
    /// future of `nextXid`): the epoch of `nextXid`, or the one before if
    /// the xid is numerically above it (it was assigned before wraparound).
    pub fn epoch_of(&self, xid: u32) -> u32 {
        let next = self.data.checkpoint_copy.next_xid;
        let epoch = (next >> 32) as u32;
        if xid > next as u32 {
            epoch.saturating_sub(1)
        } else {
            epoch
        }
    }

    /// `global/pg_control`, then the WAL segment. `prev`: the start of
    /// the record ending at the LSN, if known (`xl_prev` of the checkpoint
    /// record; 0 otherwise, as pg_resetwal writes).
    pub async fn write<S: ChunkSink>(
        &self,
        tar: &mut TarWriter<S>,
        prev: Option<Lsn>,
    ) -> Result<(), BackupError> {
        tar.file("global/pg_control", &self.data.encode(self.version)).await?;
        let cp = &self.data.checkpoint_copy;
        let params = SegmentParams {
            version: self.version,
            system_id: self.data.system_identifier,
            timeline: cp.this_timeline_id,
            seg_size: self.data.xlog_seg_size as u64,
        };
        let record = self.with_record.then(|| {
            let mut body = vec![0u8; CHECKPOINT_SIZE];
            cp.encode_into(&mut body, self.version);
            checkpoint_shutdown_record(&body, prev.filter(|p| *p < self.start).unwrap_or(Lsn(0)))
        });
        // Page by page: a client that does not read holds one page of it.
        let stub = SegmentStub::new(&params, self.start, record.as_deref());
        let name = wal_file_name(params.timeline, self.start, params.seg_size);
        tar.begin_file(&format!("pg_wal/{name}"), params.seg_size).await?;
        let mut page = [0u8; XLOG_BLCKSZ];
        for index in 0..stub.zeros_from_page() {
            stub.page(index, &mut page);
            tar.data(&page).await?;
        }
        let zeros = [0u8; XLOG_BLCKSZ];
        for _ in stub.zeros_from_page()..stub.page_count() {
            tar.data(&zeros).await?;
        }
        tar.end_file().await
    }
}

async fn read_value(
    tl: &Timeline,
    opts: &BackupOptions,
    key: Key,
    what: &str,
) -> Result<Bytes, BackupError> {
    get_one(tl, opts.reader, key, opts.lsn).await.map_err(BackupError::read(opts.lsn))?.ok_or_else(
        || {
            BackupError::Internal(format!(
                "the timeline has no {what} at {} (was it created from a base backup?)",
                opts.lsn
            ))
        },
    )
}
