//! XLOG rmgr (`catalog/pg_control.h`, `access/xlog_internal.h`).
//!
//! Kinds (`info & 0xF0`): CHECKPOINT_SHUTDOWN 0x00, CHECKPOINT_ONLINE
//! 0x10, NOOP 0x20, NEXTOID 0x30, SWITCH 0x40, BACKUP_END 0x50,
//! PARAMETER_CHANGE 0x60, RESTORE_POINT 0x70, FPW_CHANGE 0x80,
//! END_OF_RECOVERY 0x90, FPI_FOR_HINT 0xA0, FPI 0xB0,
//! OVERWRITE_CONTRECORD 0xD0, and from 17 CHECKPOINT_REDO 0xE0.
//!
//! - checkpoints carry a `CheckPoint` (88 bytes; 17 adds `int wal_level`
//!   at offset 20, padding before): decoded by [`CheckPoint::decode`];
//! - NEXTOID carries an `Oid`; SWITCH nothing;
//! - PARAMETER_CHANGE carries `xl_parameter_change` (28 bytes, 15-18):
//!   `MaxConnections` 0, `max_worker_processes` 4, `max_wal_senders` 8,
//!   `max_prepared_xacts` 12, `max_locks_per_xact` 16, `wal_level` 20,
//!   `bool wal_log_hints` 24, `bool track_commit_timestamp` 25;
//! - FPW_CHANGE carries `bool fpw` (the new `full_page_writes`);
//! - CHECKPOINT_REDO (17, 18) carries `int wal_level`.
//!
//! [`standby_check`] says which records a standby must refuse to go past
//! (as PostgreSQL's `CheckRequiredParameterValues`) and which deserve a
//! warning.

use super::super::{DecodedWalRecord, WalDecodeError};
use super::cursor::Cursor;
use crate::controlfile::{CheckPoint, CHECKPOINT_SIZE};
use crate::PgMajorVersion;

pub const XLOG_CHECKPOINT_SHUTDOWN: u8 = 0x00;
pub const XLOG_CHECKPOINT_ONLINE: u8 = 0x10;
pub const XLOG_NOOP: u8 = 0x20;
pub const XLOG_NEXTOID: u8 = 0x30;
pub const XLOG_SWITCH: u8 = 0x40;
pub const XLOG_BACKUP_END: u8 = 0x50;
pub const XLOG_PARAMETER_CHANGE: u8 = 0x60;
pub const XLOG_RESTORE_POINT: u8 = 0x70;
pub const XLOG_FPW_CHANGE: u8 = 0x80;
pub const XLOG_END_OF_RECOVERY: u8 = 0x90;
pub const XLOG_FPI_FOR_HINT: u8 = 0xA0;
pub const XLOG_FPI: u8 = 0xB0;
pub const XLOG_OVERWRITE_CONTRECORD: u8 = 0xD0;
/// PostgreSQL 17 and later.
pub const XLOG_CHECKPOINT_REDO: u8 = 0xE0;

/// An XLOG record. FPI and FPI_FOR_HINT are not here: they are nothing
/// but block images ([`super::NativeRecord::ImagesOnly`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XlogRecord {
    /// CHECKPOINT_SHUTDOWN (`shutdown`) or CHECKPOINT_ONLINE.
    Checkpoint {
        shutdown: bool,
        checkpoint: CheckPoint,
    },
    /// The next OID to assign.
    NextOid(u32),
    ParameterChange(ParameterChange),
    /// The rest of the WAL segment is unused: the next record starts at
    /// the next segment boundary.
    Switch,
    /// Start of an online checkpoint (17+): its LSN is the redo point.
    CheckpointRedo {
        wal_level: i32,
    },
    /// `full_page_writes` was changed to this value.
    FpwChange(bool),
    /// Any other kind (NOOP, BACKUP_END, RESTORE_POINT,
    /// END_OF_RECOVERY, OVERWRITE_CONTRECORD, ...): nothing to apply.
    Other {
        info: u8,
    },
}

/// `xl_parameter_change`: settings the control file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParameterChange {
    pub max_connections: i32,
    pub max_worker_processes: i32,
    pub max_wal_senders: i32,
    pub max_prepared_xacts: i32,
    pub max_locks_per_xact: i32,
    pub wal_level: i32,
    pub wal_log_hints: bool,
    pub track_commit_timestamp: bool,
}

/// `wal_level` values (`xlog.h`): minimal, replica, logical.
pub const WAL_LEVEL_MINIMAL: i32 = 0;
pub const WAL_LEVEL_REPLICA: i32 = 1;
pub const WAL_LEVEL_LOGICAL: i32 = 2;

/// Why a standby cannot go past a record, as PostgreSQL's
/// `CheckRequiredParameterValues` refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `wal_level = minimal`: relations created or truncated in the same
    /// transaction as their data are not WAL-logged, so they cannot be
    /// rebuilt from what follows.
    WalLevelMinimal,
}

impl Refusal {
    /// A short name for metrics labels.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::WalLevelMinimal => "wal_level_minimal",
        }
    }

    /// PostgreSQL's own words for it.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::WalLevelMinimal => {
                "WAL was generated with wal_level=minimal, cannot continue recovering"
            }
        }
    }
}

/// What a standby says about a record (see [`standby_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandbyCheck {
    /// Stop before this record: what follows cannot be replayed.
    Refuse(Refusal),
    /// `full_page_writes` is off from here on (FPW_CHANGE, or a checkpoint
    /// that says so): the first change of a page after a checkpoint carries
    /// no image. Replayable, but worth telling the operator.
    FullPageWritesOff,
    /// `full_page_writes` is on again.
    FullPageWritesOn,
}

/// The standby checks of an XLOG record: `Ok(None)` for records of other
/// rmgrs and XLOG records a standby takes as they are.
///
/// The other settings `CheckRequiredParameterValues` compares
/// (`max_connections`, `max_worker_processes`, `max_wal_senders`,
/// `max_prepared_transactions`, `max_locks_per_transaction`) are refused
/// only by a hot standby whose own setting is lower, since it replays into
/// shared memory sized by its own settings; ingest has no such memory and
/// no such settings (a server started from a backup brings its own), so
/// they pass.
pub fn standby_check(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
) -> Result<Option<StandbyCheck>, WalDecodeError> {
    if rec.rmid != crate::wal::rmgr_id::XLOG {
        return Ok(None);
    }
    if !matches!(
        rec.rmgr_info(),
        XLOG_PARAMETER_CHANGE | XLOG_FPW_CHANGE | XLOG_CHECKPOINT_SHUTDOWN | XLOG_CHECKPOINT_ONLINE
    ) {
        return Ok(None);
    }
    Ok(match decode(rec, version)? {
        Some(XlogRecord::ParameterChange(p)) if p.wal_level < WAL_LEVEL_REPLICA => {
            Some(StandbyCheck::Refuse(Refusal::WalLevelMinimal))
        }
        Some(XlogRecord::FpwChange(fpw)) => Some(fpw_check(fpw)),
        Some(XlogRecord::Checkpoint { checkpoint, .. }) => {
            Some(fpw_check(checkpoint.full_page_writes))
        }
        _ => None,
    })
}

fn fpw_check(fpw: bool) -> StandbyCheck {
    if fpw {
        StandbyCheck::FullPageWritesOn
    } else {
        StandbyCheck::FullPageWritesOff
    }
}

pub(crate) fn decode(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
) -> Result<Option<XlogRecord>, WalDecodeError> {
    let info = rec.rmgr_info();
    let what = match info {
        XLOG_CHECKPOINT_SHUTDOWN => "XLOG CHECKPOINT_SHUTDOWN",
        XLOG_CHECKPOINT_ONLINE => "XLOG CHECKPOINT_ONLINE",
        XLOG_NEXTOID => "XLOG NEXTOID",
        XLOG_PARAMETER_CHANGE => "XLOG PARAMETER_CHANGE",
        XLOG_CHECKPOINT_REDO if version >= PgMajorVersion::V17 => "XLOG CHECKPOINT_REDO",
        XLOG_FPW_CHANGE => "XLOG FPW_CHANGE",
        XLOG_SWITCH => return Ok(Some(XlogRecord::Switch)),
        XLOG_FPI | XLOG_FPI_FOR_HINT => return Ok(None),
        _ => return Ok(Some(XlogRecord::Other { info })),
    };
    let mut c = Cursor::new(rec, what);
    let record = match info {
        XLOG_CHECKPOINT_SHUTDOWN | XLOG_CHECKPOINT_ONLINE => XlogRecord::Checkpoint {
            shutdown: info == XLOG_CHECKPOINT_SHUTDOWN,
            checkpoint: CheckPoint::decode(c.bytes(CHECKPOINT_SIZE, "CheckPoint")?, version),
        },
        XLOG_NEXTOID => XlogRecord::NextOid(c.u32("nextOid")?),
        XLOG_PARAMETER_CHANGE => XlogRecord::ParameterChange(parameter_change(&mut c)?),
        XLOG_FPW_CHANGE => XlogRecord::FpwChange(c.u8("fpw")? != 0),
        _ => XlogRecord::CheckpointRedo { wal_level: c.i32("wal_level")? },
    };
    c.finish()?;
    Ok(Some(record))
}

fn parameter_change(c: &mut Cursor) -> Result<ParameterChange, WalDecodeError> {
    Ok(ParameterChange {
        max_connections: c.i32("MaxConnections")?,
        max_worker_processes: c.i32("max_worker_processes")?,
        max_wal_senders: c.i32("max_wal_senders")?,
        max_prepared_xacts: c.i32("max_prepared_xacts")?,
        max_locks_per_xact: c.i32("max_locks_per_xact")?,
        wal_level: c.i32("wal_level")?,
        wal_log_hints: c.u8("wal_log_hints")? != 0,
        track_commit_timestamp: {
            let v = c.u8("track_commit_timestamp")? != 0;
            c.skip(2, "padding to sizeof(xl_parameter_change)")?;
            v
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::{classify, NativeRecord};
    use super::*;
    use crate::wal::rmgr_id::XLOG;

    fn xlog(info: u8, main: &[u8], v: PgMajorVersion) -> Result<NativeRecord, WalDecodeError> {
        classify(&record(XLOG, info, main), v)
    }

    fn sample_checkpoint(v: PgMajorVersion) -> CheckPoint {
        CheckPoint {
            redo: 0x0100_0028,
            this_timeline_id: 1,
            prev_timeline_id: 1,
            full_page_writes: true,
            wal_level: if v >= PgMajorVersion::V17 { 1 } else { 0 },
            next_xid: (2u64 << 32) | 750,
            next_oid: 24576,
            next_multi: 1,
            next_multi_offset: 0,
            oldest_xid: 716,
            oldest_xid_db: 1,
            oldest_multi: 1,
            oldest_multi_db: 1,
            time: 1_700_000_000,
            oldest_commit_ts_xid: 0,
            newest_commit_ts_xid: 0,
            oldest_active_xid: 750,
        }
    }

    #[test]
    fn checkpoints() {
        for v in PgMajorVersion::ALL {
            let cp = sample_checkpoint(v);
            let mut main = vec![0u8; CHECKPOINT_SIZE];
            cp.encode_into(&mut main, v);
            // Offsets as in pg_control.h, independently of encode_into.
            assert_eq!(u64::from_le_bytes(main[24..32].try_into().unwrap()), cp.next_xid);
            assert_eq!(u32::from_le_bytes(main[80..84].try_into().unwrap()), 750);
            let wal_level_at_20 = u32::from_le_bytes(main[20..24].try_into().unwrap());
            assert_eq!(wal_level_at_20, if v >= PgMajorVersion::V17 { 1 } else { 0 });
            for (info, shutdown) in
                [(XLOG_CHECKPOINT_SHUTDOWN, true), (XLOG_CHECKPOINT_ONLINE, false)]
            {
                assert_eq!(
                    xlog(info, &main, v).unwrap(),
                    NativeRecord::Xlog(XlogRecord::Checkpoint { shutdown, checkpoint: cp })
                );
            }
            let err = xlog(XLOG_CHECKPOINT_ONLINE, &main[..CHECKPOINT_SIZE - 1], v).unwrap_err();
            assert_err(err, "XLOG CHECKPOINT_ONLINE: main data is 87 bytes, CheckPoint needs 88");
        }
    }

    #[test]
    fn next_oid_switch_and_others() {
        for v in PgMajorVersion::ALL {
            let main = Le::new().u32(40000);
            assert_eq!(
                xlog(XLOG_NEXTOID, main.bytes(), v).unwrap(),
                NativeRecord::Xlog(XlogRecord::NextOid(40000))
            );
            assert_truncations_fail(main.bytes(), |m| xlog(XLOG_NEXTOID, m, v));
            assert_eq!(xlog(XLOG_SWITCH, &[], v).unwrap(), NativeRecord::Xlog(XlogRecord::Switch));
            for info in [
                XLOG_NOOP,
                XLOG_BACKUP_END,
                XLOG_RESTORE_POINT,
                XLOG_END_OF_RECOVERY,
                XLOG_OVERWRITE_CONTRECORD,
            ] {
                assert_eq!(
                    xlog(info, &[0; 4], v).unwrap(),
                    NativeRecord::Xlog(XlogRecord::Other { info })
                );
            }
        }
    }

    #[test]
    fn checkpoint_redo_from_17() {
        let main = Le::new().i32(2);
        for v in PgMajorVersion::ALL {
            let got = xlog(XLOG_CHECKPOINT_REDO, main.bytes(), v).unwrap();
            if v >= PgMajorVersion::V17 {
                assert_eq!(got, NativeRecord::Xlog(XlogRecord::CheckpointRedo { wal_level: 2 }));
                assert_truncations_fail(main.bytes(), |m| xlog(XLOG_CHECKPOINT_REDO, m, v));
            } else {
                assert_eq!(
                    got,
                    NativeRecord::Xlog(XlogRecord::Other { info: XLOG_CHECKPOINT_REDO })
                );
            }
        }
    }

    #[test]
    fn parameter_change() {
        let main = Le::new().i32(100).i32(8).i32(10).i32(5).i32(64).i32(1).u8(1).u8(0).u16(0);
        assert_eq!(main.bytes().len(), 28);
        for v in PgMajorVersion::ALL {
            assert_eq!(
                xlog(XLOG_PARAMETER_CHANGE, main.bytes(), v).unwrap(),
                NativeRecord::Xlog(XlogRecord::ParameterChange(ParameterChange {
                    max_connections: 100,
                    max_worker_processes: 8,
                    max_wal_senders: 10,
                    max_prepared_xacts: 5,
                    max_locks_per_xact: 64,
                    wal_level: 1,
                    wal_log_hints: true,
                    track_commit_timestamp: false,
                }))
            );
            assert_truncations_fail(main.bytes(), |m| xlog(XLOG_PARAMETER_CHANGE, m, v));
        }
    }

    #[test]
    fn standby_checks() {
        let v = PgMajorVersion::V15;
        let change = |wal_level: i32| {
            Le::new().i32(100).i32(8).i32(0).i32(0).i32(64).i32(wal_level).u8(0).u8(0).u16(0)
        };
        let check = |info: u8, main: &[u8]| standby_check(&record(XLOG, info, main), v).unwrap();
        assert_eq!(
            check(XLOG_PARAMETER_CHANGE, change(WAL_LEVEL_MINIMAL).bytes()),
            Some(StandbyCheck::Refuse(Refusal::WalLevelMinimal))
        );
        // Lower max_connections, max_wal_senders = 0...: not refused.
        assert_eq!(check(XLOG_PARAMETER_CHANGE, change(WAL_LEVEL_REPLICA).bytes()), None);
        assert_eq!(check(XLOG_PARAMETER_CHANGE, change(WAL_LEVEL_LOGICAL).bytes()), None);
        assert_eq!(check(XLOG_FPW_CHANGE, &[0]), Some(StandbyCheck::FullPageWritesOff));
        assert_eq!(check(XLOG_FPW_CHANGE, &[1]), Some(StandbyCheck::FullPageWritesOn));
        let mut cp = vec![0u8; CHECKPOINT_SIZE];
        CheckPoint { full_page_writes: false, ..sample_checkpoint(v) }.encode_into(&mut cp, v);
        assert_eq!(check(XLOG_CHECKPOINT_ONLINE, &cp), Some(StandbyCheck::FullPageWritesOff));
        assert_eq!(check(XLOG_NEXTOID, &[0; 4]), None);
        let heap = record(crate::wal::rmgr_id::HEAP, 0, &[]);
        assert_eq!(standby_check(&heap, v).unwrap(), None);
        assert!(standby_check(&record(XLOG, XLOG_FPW_CHANGE, &[]), v).is_err());
    }

    #[test]
    fn full_page_images_are_images_only() {
        let mut rec = record(XLOG, XLOG_FPI, &[]);
        rec.blocks.push(block(0, 0, 3, true));
        rec.blocks.push(block(1, 1, 4, false));
        for info in [XLOG_FPI, XLOG_FPI_FOR_HINT] {
            rec.info = info;
            let NativeRecord::ImagesOnly { without_image } =
                classify(&rec, PgMajorVersion::V16).unwrap()
            else {
                panic!()
            };
            assert_eq!(without_image.len(), 1);
            assert_eq!((without_image[0].fork, without_image[0].blkno), (1, 4));
        }
    }
}
