//! `pg_control` (`ControlFileData` of `catalog/pg_control.h`) for each
//! supported major version: decode, encode, and a rewrite for a new
//! checkpoint (what a base backup generated at an LSN needs).
//!
//! Layouts (64-bit, offsets in bytes; identical in 15-18 up to offset 256):
//! `system_identifier` 0, `pg_control_version` 8, `catalog_version_no` 12,
//! `state` 16, `time` 24, `checkPoint` 32, `checkPointCopy` 40..128,
//! `unloggedLSN` 128, `minRecoveryPoint` 136, `minRecoveryPointTLI` 144,
//! `backupStartPoint` 152, `backupEndPoint` 160, `backupEndRequired` 168,
//! `wal_level` 172, `wal_log_hints` 176, `MaxConnections` 180,
//! `max_worker_processes` 184, `max_wal_senders` 188, `max_prepared_xacts`
//! 192, `max_locks_per_xact` 196, `track_commit_timestamp` 200, `maxAlign`
//! 204, `floatFormat` 208, `blcksz` 216, `relseg_size` 220, `xlog_blcksz`
//! 224, `xlog_seg_size` 228, `nameDataLen` 232, `indexMaxKeys` 236,
//! `toast_max_chunk_size` 240, `loblksize` 244, `float8ByVal` 248,
//! `data_checksum_version` 252; then 15-17: `mock_authentication_nonce`
//! 256..288, `crc` 288; 18: `default_char_signedness` 256, nonce 257..289,
//! `crc` 292. The CRC-32C covers every byte before `crc`; the file is 8192
//! bytes, zero after the struct.
//!
//! `CheckPoint` (88 bytes): `redo` 0, `ThisTimeLineID` 8, `PrevTimeLineID`
//! 12, `fullPageWrites` 16, `wal_level` 20 (17 and later; padding before),
//! `nextXid` 24, `nextOid` 32, `nextMulti` 36, `nextMultiOffset` 40,
//! `oldestXid` 44, `oldestXidDB` 48, `oldestMulti` 52, `oldestMultiDB` 56,
//! `time` 64, `oldestCommitTsXid` 72, `newestCommitTsXid` 76,
//! `oldestActiveXid` 80.

use crate::consts::PG_CONTROL_FILE_SIZE;
use crate::PgMajorVersion;

/// `sizeof(CheckPoint)`, every supported version.
pub const CHECKPOINT_SIZE: usize = 88;
const CHECKPOINT_COPY_OFFSET: usize = 40;
const MOCK_AUTH_NONCE_LEN: usize = 32;

/// `DBState`.
pub const DB_SHUTDOWNED: i32 = 1;
pub const DB_IN_PRODUCTION: i32 = 6;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlFileError {
    #[error("pg_control is {0} bytes, expected {PG_CONTROL_FILE_SIZE}")]
    Size(usize),
    #[error("pg_control checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (PostgreSQL {version} layout)")]
    Checksum { stored: u32, computed: u32, version: u32 },
    #[error(
        "pg_control version {found} does not belong to PostgreSQL {version} (expected {expected})"
    )]
    ControlVersion { found: u32, expected: u32, version: u32 },
}

/// `CheckPoint`: the body of a checkpoint record, copied into pg_control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckPoint {
    pub redo: u64,
    pub this_timeline_id: u32,
    pub prev_timeline_id: u32,
    pub full_page_writes: bool,
    /// Present from PostgreSQL 17 (zero before).
    pub wal_level: i32,
    /// `FullTransactionId`: epoch in the high 32 bits.
    pub next_xid: u64,
    pub next_oid: u32,
    pub next_multi: u32,
    pub next_multi_offset: u32,
    pub oldest_xid: u32,
    pub oldest_xid_db: u32,
    pub oldest_multi: u32,
    pub oldest_multi_db: u32,
    pub time: i64,
    pub oldest_commit_ts_xid: u32,
    pub newest_commit_ts_xid: u32,
    pub oldest_active_xid: u32,
}

/// Every field of `ControlFileData`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ControlFileData {
    pub system_identifier: u64,
    pub pg_control_version: u32,
    pub catalog_version_no: u32,
    pub state: i32,
    pub time: i64,
    pub checkpoint: u64,
    pub checkpoint_copy: CheckPoint,
    pub unlogged_lsn: u64,
    pub min_recovery_point: u64,
    pub min_recovery_point_tli: u32,
    pub backup_start_point: u64,
    pub backup_end_point: u64,
    pub backup_end_required: bool,
    pub wal_level: i32,
    pub wal_log_hints: bool,
    pub max_connections: i32,
    pub max_worker_processes: i32,
    pub max_wal_senders: i32,
    pub max_prepared_xacts: i32,
    pub max_locks_per_xact: i32,
    pub track_commit_timestamp: bool,
    pub max_align: u32,
    pub float_format: f64,
    pub blcksz: u32,
    pub relseg_size: u32,
    pub xlog_blcksz: u32,
    pub xlog_seg_size: u32,
    pub name_data_len: u32,
    pub index_max_keys: u32,
    pub toast_max_chunk_size: u32,
    pub loblksize: u32,
    pub float8_by_val: bool,
    pub data_checksum_version: u32,
    /// PostgreSQL 18 and later (false before).
    pub default_char_signedness: bool,
    pub mock_authentication_nonce: [u8; MOCK_AUTH_NONCE_LEN],
}

/// `PG_CONTROL_VERSION` of each major.
pub fn pg_control_version(v: PgMajorVersion) -> u32 {
    match v {
        PgMajorVersion::V15 | PgMajorVersion::V16 => 1300,
        PgMajorVersion::V17 => 1700,
        PgMajorVersion::V18 => 1800,
    }
}

/// Offset of `crc` (= bytes the CRC covers).
pub fn crc_offset(v: PgMajorVersion) -> usize {
    match v {
        PgMajorVersion::V18 => 292,
        _ => 288,
    }
}

/// The major version that wrote a pg_control, from its catalog version
/// number (fixed at each release).
pub fn major_version_of_catalog(catalog_version_no: u32) -> Option<PgMajorVersion> {
    match catalog_version_no {
        202107181..=202209061 => Some(PgMajorVersion::V15),
        202209062..=202307071 => Some(PgMajorVersion::V16),
        202307072..=202406281 => Some(PgMajorVersion::V17),
        202406282..=202506999 => Some(PgMajorVersion::V18),
        _ => None,
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u32(&self, o: usize) -> u32 {
        u32::from_le_bytes(self.0[o..o + 4].try_into().unwrap())
    }
    fn i32(&self, o: usize) -> i32 {
        self.u32(o) as i32
    }
    fn u64(&self, o: usize) -> u64 {
        u64::from_le_bytes(self.0[o..o + 8].try_into().unwrap())
    }
    fn bool(&self, o: usize) -> bool {
        self.0[o] != 0
    }
}

struct Writer<'a>(&'a mut [u8]);

impl Writer<'_> {
    fn u32(&mut self, o: usize, v: u32) {
        self.0[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, o: usize, v: u64) {
        self.0[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    fn bool(&mut self, o: usize, v: bool) {
        self.0[o] = v as u8;
    }
}

impl CheckPoint {
    pub fn decode(b: &[u8], v: PgMajorVersion) -> CheckPoint {
        assert!(b.len() >= CHECKPOINT_SIZE, "a CheckPoint is {CHECKPOINT_SIZE} bytes");
        let r = Reader(b);
        CheckPoint {
            redo: r.u64(0),
            this_timeline_id: r.u32(8),
            prev_timeline_id: r.u32(12),
            full_page_writes: r.bool(16),
            wal_level: if v >= PgMajorVersion::V17 { r.i32(20) } else { 0 },
            next_xid: r.u64(24),
            next_oid: r.u32(32),
            next_multi: r.u32(36),
            next_multi_offset: r.u32(40),
            oldest_xid: r.u32(44),
            oldest_xid_db: r.u32(48),
            oldest_multi: r.u32(52),
            oldest_multi_db: r.u32(56),
            time: r.u64(64) as i64,
            oldest_commit_ts_xid: r.u32(72),
            newest_commit_ts_xid: r.u32(76),
            oldest_active_xid: r.u32(80),
        }
    }

    pub fn encode_into(&self, b: &mut [u8], v: PgMajorVersion) {
        let mut w = Writer(&mut b[..CHECKPOINT_SIZE]);
        w.0.fill(0);
        w.u64(0, self.redo);
        w.u32(8, self.this_timeline_id);
        w.u32(12, self.prev_timeline_id);
        w.bool(16, self.full_page_writes);
        if v >= PgMajorVersion::V17 {
            w.u32(20, self.wal_level as u32);
        }
        w.u64(24, self.next_xid);
        for (o, x) in [
            (32, self.next_oid),
            (36, self.next_multi),
            (40, self.next_multi_offset),
            (44, self.oldest_xid),
            (48, self.oldest_xid_db),
            (52, self.oldest_multi),
            (56, self.oldest_multi_db),
            (72, self.oldest_commit_ts_xid),
            (76, self.newest_commit_ts_xid),
            (80, self.oldest_active_xid),
        ] {
            w.u32(o, x);
        }
        w.u64(64, self.time as u64);
    }
}

impl ControlFileData {
    /// Decode a pg_control written by PostgreSQL `v`, checking its size,
    /// CRC and control version.
    pub fn decode(b: &[u8], v: PgMajorVersion) -> Result<ControlFileData, ControlFileError> {
        if b.len() != PG_CONTROL_FILE_SIZE {
            return Err(ControlFileError::Size(b.len()));
        }
        let r = Reader(b);
        let crc_at = crc_offset(v);
        let (stored, computed) = (r.u32(crc_at), crc32c::crc32c(&b[..crc_at]));
        if stored != computed {
            return Err(ControlFileError::Checksum { stored, computed, version: v.number() });
        }
        let expected = pg_control_version(v);
        if r.u32(8) != expected {
            return Err(ControlFileError::ControlVersion {
                found: r.u32(8),
                expected,
                version: v.number(),
            });
        }
        let nonce_at = if v >= PgMajorVersion::V18 { 257 } else { 256 };
        Ok(ControlFileData {
            system_identifier: r.u64(0),
            pg_control_version: r.u32(8),
            catalog_version_no: r.u32(12),
            state: r.i32(16),
            time: r.u64(24) as i64,
            checkpoint: r.u64(32),
            checkpoint_copy: CheckPoint::decode(&b[CHECKPOINT_COPY_OFFSET..], v),
            unlogged_lsn: r.u64(128),
            min_recovery_point: r.u64(136),
            min_recovery_point_tli: r.u32(144),
            backup_start_point: r.u64(152),
            backup_end_point: r.u64(160),
            backup_end_required: r.bool(168),
            wal_level: r.i32(172),
            wal_log_hints: r.bool(176),
            max_connections: r.i32(180),
            max_worker_processes: r.i32(184),
            max_wal_senders: r.i32(188),
            max_prepared_xacts: r.i32(192),
            max_locks_per_xact: r.i32(196),
            track_commit_timestamp: r.bool(200),
            max_align: r.u32(204),
            float_format: f64::from_bits(r.u64(208)),
            blcksz: r.u32(216),
            relseg_size: r.u32(220),
            xlog_blcksz: r.u32(224),
            xlog_seg_size: r.u32(228),
            name_data_len: r.u32(232),
            index_max_keys: r.u32(236),
            toast_max_chunk_size: r.u32(240),
            loblksize: r.u32(244),
            float8_by_val: r.bool(248),
            data_checksum_version: r.u32(252),
            default_char_signedness: v >= PgMajorVersion::V18 && r.bool(256),
            mock_authentication_nonce: b[nonce_at..nonce_at + MOCK_AUTH_NONCE_LEN]
                .try_into()
                .unwrap(),
        })
    }

    /// The 8192-byte file for PostgreSQL `v`, CRC computed.
    pub fn encode(&self, v: PgMajorVersion) -> Vec<u8> {
        let mut b = vec![0u8; PG_CONTROL_FILE_SIZE];
        let mut w = Writer(&mut b);
        w.u64(0, self.system_identifier);
        w.u32(8, self.pg_control_version);
        w.u32(12, self.catalog_version_no);
        w.u32(16, self.state as u32);
        w.u64(24, self.time as u64);
        w.u64(32, self.checkpoint);
        self.checkpoint_copy.encode_into(&mut w.0[CHECKPOINT_COPY_OFFSET..], v);
        for (o, x) in [
            (128, self.unlogged_lsn),
            (136, self.min_recovery_point),
            (152, self.backup_start_point),
            (160, self.backup_end_point),
        ] {
            w.u64(o, x);
        }
        w.u32(144, self.min_recovery_point_tli);
        w.bool(168, self.backup_end_required);
        w.bool(176, self.wal_log_hints);
        w.bool(200, self.track_commit_timestamp);
        w.bool(248, self.float8_by_val);
        for (o, x) in [
            (172, self.wal_level),
            (180, self.max_connections),
            (184, self.max_worker_processes),
            (188, self.max_wal_senders),
            (192, self.max_prepared_xacts),
            (196, self.max_locks_per_xact),
        ] {
            w.u32(o, x as u32);
        }
        w.u64(208, self.float_format.to_bits());
        for (o, x) in [
            (204, self.max_align),
            (216, self.blcksz),
            (220, self.relseg_size),
            (224, self.xlog_blcksz),
            (228, self.xlog_seg_size),
            (232, self.name_data_len),
            (236, self.index_max_keys),
            (240, self.toast_max_chunk_size),
            (244, self.loblksize),
            (252, self.data_checksum_version),
        ] {
            w.u32(o, x);
        }
        let nonce_at = if v >= PgMajorVersion::V18 {
            w.bool(256, self.default_char_signedness);
            257
        } else {
            256
        };
        w.0[nonce_at..nonce_at + MOCK_AUTH_NONCE_LEN]
            .copy_from_slice(&self.mock_authentication_nonce);
        let crc_at = crc_offset(v);
        let crc = crc32c::crc32c(&w.0[..crc_at]);
        w.u32(crc_at, crc);
        b
    }

    /// The control file for a start from a checkpoint at `checkpoint_lsn`
    /// whose redo point is `redo_lsn`: checkpoint and its copy's redo
    /// moved there, state "shut down", no backup in progress and no
    /// minimum recovery point.
    pub fn for_checkpoint_at(&self, checkpoint_lsn: u64, redo_lsn: u64) -> ControlFileData {
        let mut c = self.clone();
        c.checkpoint = checkpoint_lsn;
        c.checkpoint_copy.redo = redo_lsn;
        c.state = DB_SHUTDOWNED;
        c.min_recovery_point = 0;
        c.min_recovery_point_tli = 0;
        c.backup_start_point = 0;
        c.backup_end_point = 0;
        c.backup_end_required = false;
        c
    }
}

#[cfg(test)]
mod tests;
