//! A physical replication client (`replication=true`) on top of
//! [`crate::client::Client`]: the replication commands of PostgreSQL 15 and
//! later (`IDENTIFY_SYSTEM`, `SHOW`, slots, `BASE_BACKUP`,
//! `START_REPLICATION`), as the walreceiver and the import from a running
//! primary need them.
//!
//! Files: this one (connection, one-shot commands, LSN and timestamp
//! helpers), `base_backup` (the tar stream of `BASE_BACKUP`), `stream`
//! (the CopyBoth stream of `START_REPLICATION`).
//!
//! Invariants:
//! - names and strings interpolated into commands are validated or quoted
//!   here (slot names `[a-z0-9_]{1,63}`, setting names `[a-z0-9_.]`), so a
//!   caller cannot inject a second command;
//! - a [`BaseBackup`] or [`ReplicationStream`] borrows the client; dropping
//!   one before its end leaves the session mid-command, and the client then
//!   refuses further commands ([`ClientError::Desynchronized`]): reconnect.
//!
//! LSNs are plain `u64` (the caller's `Lsn` type wraps them); timestamps on
//! the wire are microseconds since 2000-01-01 ([`PgTimestamp`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::{Client, ClientError, QueryResult};
use crate::connstring::ConnString;

mod base_backup;
mod stream;

pub use base_backup::{
    BackupArchive, BackupPart, BackupTablespace, BaseBackup, BaseBackupEnd, BaseBackupOptions,
    MAX_MANIFEST_LEN,
};
pub use stream::{PrimaryKeepalive, ReplicationMessage, ReplicationStream, StreamEnd, XLogData};

/// Longest slot name PostgreSQL accepts (NAMEDATALEN - 1).
pub const MAX_SLOT_NAME_LEN: usize = 63;

/// `X/X` (hexadecimal halves) as PostgreSQL prints an LSN.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// Parses `X/X`.
pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some((u64::from(hi) << 32) | u64::from(lo))
}

/// Seconds from the Unix epoch to PostgreSQL's (2000-01-01 00:00 UTC).
const PG_EPOCH_UNIX_SECS: u64 = 946_684_800;

/// A PostgreSQL timestamp: microseconds since 2000-01-01 00:00 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PgTimestamp(pub i64);

impl PgTimestamp {
    pub fn now() -> PgTimestamp {
        PgTimestamp::from_system_time(SystemTime::now())
    }

    pub fn from_system_time(t: SystemTime) -> PgTimestamp {
        let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
        match t.duration_since(pg_epoch) {
            Ok(d) => PgTimestamp(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
            Err(e) => PgTimestamp(-i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX)),
        }
    }

    pub fn to_system_time(self) -> SystemTime {
        let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
        let d = Duration::from_micros(self.0.unsigned_abs());
        if self.0 >= 0 {
            pg_epoch + d
        } else {
            pg_epoch - d
        }
    }
}

/// The answer to `IDENTIFY_SYSTEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifySystem {
    /// The cluster's system identifier (as in pg_control).
    pub systemid: u64,
    /// The server's current timeline.
    pub timeline: u32,
    /// The current WAL flush position.
    pub xlogpos: u64,
    /// The database connected to; `None` on a physical connection.
    pub dbname: Option<String>,
}

/// The answer to `READ_REPLICATION_SLOT` for an existing slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// `physical` or `logical`.
    pub slot_type: String,
    /// `None` while the slot reserves no WAL.
    pub restart_lsn: Option<u64>,
    pub restart_tli: Option<u32>,
}

/// Refuses anything but a name PostgreSQL accepts for a slot.
pub fn validate_slot_name(name: &str) -> Result<(), ClientError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SLOT_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ClientError::Unsupported(format!(
            "slot name '{name}': use 1 to {MAX_SLOT_NAME_LEN} characters of [a-z0-9_]"
        )))
    }
}

/// `'...'` with quotes doubled, for a string in a replication command.
pub(crate) fn quote_literal(s: &str) -> Result<String, ClientError> {
    if s.contains('\0') {
        return Err(ClientError::Unsupported(format!("string {s:?} contains a NUL byte")));
    }
    Ok(format!("'{}'", s.replace('\'', "''")))
}

/// The text of column `col` of the only row of `res`, which answers `cmd`.
fn single_row<'r>(
    res: &'r QueryResult,
    cmd: &str,
    ncols: usize,
) -> Result<&'r [Option<String>], ClientError> {
    match res.rows.as_slice() {
        [row] if row.len() >= ncols => Ok(row),
        rows => Err(ClientError::protocol(format!(
            "{cmd} answered {} rows of {:?} columns, expected one row of {ncols}",
            rows.len(),
            rows.first().map(|r| r.len())
        ))),
    }
}

fn field<'r>(row: &'r [Option<String>], i: usize, what: &str) -> Result<&'r str, ClientError> {
    row[i].as_deref().ok_or_else(|| ClientError::protocol(format!("{what} is NULL")))
}

pub(crate) fn parse_lsn_field(s: &str, what: &str) -> Result<u64, ClientError> {
    parse_lsn(s).ok_or_else(|| ClientError::protocol(format!("{what} '{s}' is not an LSN")))
}

pub(crate) fn parse_num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, ClientError> {
    s.parse().map_err(|_| ClientError::protocol(format!("{what} '{s}' is not a valid number")))
}

/// A session in physical replication mode.
pub struct ReplicationClient {
    client: Client,
}

impl ReplicationClient {
    /// Connect as `connstring` (URL or key=value) says, with
    /// `replication=true` whatever it says about replication.
    pub async fn connect(connstring: &str) -> Result<ReplicationClient, ClientError> {
        let cs = ConnString::parse(connstring)?;
        ReplicationClient::connect_with(&cs).await
    }

    pub async fn connect_with(cs: &ConnString) -> Result<ReplicationClient, ClientError> {
        let mut cs = cs.clone();
        cs.replication = Some("true".to_string());
        Ok(ReplicationClient { client: Client::connect_with(&cs, &[]).await? })
    }

    /// The underlying session (for `server_parameter`, or a plain query).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    pub async fn identify_system(&mut self) -> Result<IdentifySystem, ClientError> {
        const CMD: &str = "IDENTIFY_SYSTEM";
        let res = self.client.simple_query(CMD).await?;
        let row = single_row(&res, CMD, 4)?;
        Ok(IdentifySystem {
            systemid: parse_num(field(row, 0, "systemid")?, "systemid")?,
            timeline: parse_num(field(row, 1, "timeline")?, "timeline")?,
            xlogpos: parse_lsn_field(field(row, 2, "xlogpos")?, "xlogpos")?,
            dbname: row[3].clone(),
        })
    }

    /// The value of a server setting (`wal_level`, `server_version_num`...).
    pub async fn show(&mut self, setting: &str) -> Result<String, ClientError> {
        let valid = !setting.is_empty()
            && setting.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
        if !valid {
            return Err(ClientError::Unsupported(format!("setting name '{setting}'")));
        }
        let cmd = format!("SHOW {setting}");
        let res = self.client.simple_query(&cmd).await?;
        let row = single_row(&res, &cmd, 1)?;
        Ok(field(row, 0, setting)?.to_string())
    }

    /// Creates a physical slot; with `reserve_wal` the slot holds WAL from
    /// now on, and its restart LSN is returned.
    pub async fn create_physical_slot(
        &mut self,
        name: &str,
        reserve_wal: bool,
    ) -> Result<Option<u64>, ClientError> {
        validate_slot_name(name)?;
        let cmd = format!("CREATE_REPLICATION_SLOT {name} PHYSICAL (RESERVE_WAL {reserve_wal})");
        let res = self.client.simple_query(&cmd).await?;
        single_row(&res, &cmd, 2)?;
        if !reserve_wal {
            return Ok(None);
        }
        let slot = self.read_slot(name).await?.ok_or_else(|| {
            ClientError::protocol(format!("slot '{name}' does not exist right after {cmd}"))
        })?;
        match slot.restart_lsn {
            Some(lsn) => Ok(Some(lsn)),
            None => {
                Err(ClientError::protocol(format!("slot '{name}' reserves no WAL after {cmd}")))
            }
        }
    }

    /// Drops a slot; with `wait`, waits for it to be released by another
    /// session instead of failing when it is active.
    pub async fn drop_slot(&mut self, name: &str, wait: bool) -> Result<(), ClientError> {
        validate_slot_name(name)?;
        let cmd = format!("DROP_REPLICATION_SLOT {name}{}", if wait { " WAIT" } else { "" });
        self.client.simple_query(&cmd).await?;
        Ok(())
    }

    /// The slot named `name`, `None` if there is none.
    pub async fn read_slot(&mut self, name: &str) -> Result<Option<SlotInfo>, ClientError> {
        validate_slot_name(name)?;
        let cmd = format!("READ_REPLICATION_SLOT {name}");
        let res = self.client.simple_query(&cmd).await?;
        let row = single_row(&res, &cmd, 3)?;
        let Some(slot_type) = row[0].clone() else {
            return Ok(None);
        };
        let restart_lsn =
            row[1].as_deref().map(|s| parse_lsn_field(s, "restart_lsn")).transpose()?;
        let restart_tli = row[2].as_deref().map(|s| parse_num(s, "restart_tli")).transpose()?;
        Ok(Some(SlotInfo { slot_type, restart_lsn, restart_tli }))
    }

    /// `BASE_BACKUP` of the main tablespace without WAL and manifest; see
    /// [`ReplicationClient::base_backup_with`].
    pub async fn base_backup(
        &mut self,
        label: &str,
        fast_checkpoint: bool,
    ) -> Result<BaseBackup<'_>, ClientError> {
        let opts = BaseBackupOptions {
            label: label.to_string(),
            fast_checkpoint,
            manifest: false,
            manifest_checksums: None,
        };
        self.base_backup_with(&opts).await
    }

    /// Starts a `BASE_BACKUP`: returns once the server has sent the start
    /// LSN and the tablespace list. A cluster with tablespaces other than
    /// the default is refused (naming them).
    pub async fn base_backup_with(
        &mut self,
        opts: &BaseBackupOptions,
    ) -> Result<BaseBackup<'_>, ClientError> {
        BaseBackup::start(&mut self.client, opts).await
    }

    /// `TIMELINE_HISTORY tli`: the content of the server's history file of
    /// timeline `tli` (`parent <TAB> switch LSN <TAB> reason` lines).
    /// Timeline 1 has none: the server answers an error.
    pub async fn timeline_history(&mut self, tli: u32) -> Result<String, ClientError> {
        let cmd = format!("TIMELINE_HISTORY {tli}");
        let res = self.client.simple_query(&cmd).await?;
        let row = single_row(&res, &cmd, 2)?;
        Ok(field(row, 1, "content")?.to_string())
    }

    /// `START_REPLICATION [SLOT slot] PHYSICAL start_lsn TIMELINE timeline`:
    /// returns once the server has entered CopyBoth.
    pub async fn start_replication(
        &mut self,
        slot: Option<&str>,
        start_lsn: u64,
        timeline: u32,
    ) -> Result<ReplicationStream<'_>, ClientError> {
        ReplicationStream::start(&mut self.client, slot, start_lsn, timeline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trip() {
        for lsn in [0, 0x16B3748, 0x1_0000_0000, u64::MAX] {
            assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
        }
        assert_eq!(format_lsn(0x2_0000_00A8), "2/A8");
        assert_eq!(parse_lsn("0/16B3748"), Some(0x16B3748));
        for bad in ["", "0", "x/1", "1/", "/1", "1/2/3", "100000000/0"] {
            assert_eq!(parse_lsn(bad), None, "{bad}");
        }
    }

    #[test]
    fn timestamps() {
        let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
        assert_eq!(PgTimestamp::from_system_time(pg_epoch), PgTimestamp(0));
        let t = pg_epoch + Duration::from_micros(123_456_789);
        assert_eq!(PgTimestamp::from_system_time(t), PgTimestamp(123_456_789));
        assert_eq!(PgTimestamp(123_456_789).to_system_time(), t);
        assert_eq!(PgTimestamp(-5).to_system_time(), pg_epoch - Duration::from_micros(5));
        assert!(PgTimestamp::now().0 > 24 * 365 * 86_400 * 1_000_000);
    }

    #[test]
    fn names_and_literals() {
        validate_slot_name("pageserver_1").unwrap();
        for bad in ["", "Upper", "a b", "a;DROP", "x\"", &"a".repeat(64)] {
            assert!(validate_slot_name(bad).is_err(), "{bad}");
        }
        assert_eq!(quote_literal("it's").unwrap(), "'it''s'");
        assert!(quote_literal("a\0b").is_err());
    }
}
