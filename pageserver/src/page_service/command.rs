//! The page service's commands, parsed from query text once (at Parse in
//! the extended protocol, at Query in the simple one) into a [`Command`]
//! that knows its result shape without running: Describe answers from
//! [`Command::result_columns`], and one dispatch (`connection.rs`) runs a
//! command for both protocols.
//!
//! Commands (the first word is case-insensitive; a trailing `;` and
//! surrounding blanks are ignored):
//! - `pagestream_v2|pagestream_v3 <tenant_id> <timeline_id>`: CopyBoth, then
//!   the pagestream; the session ends with it. No result columns.
//! - `basebackup|fullbackup <tenant_id> <timeline_id> ...` (`backup.rs`):
//!   COPY OUT of a tar; no result columns (Describe gives NoData).
//! - `lease lsn <tenant_id> <timeline_id> <lsn>`: one row, one text column
//!   `valid_until` (milliseconds since the UNIX epoch, or NULL when the
//!   lease is refused), as Neon's compute reads it.
//! - the empty query: EmptyQueryResponse.
//!
//! Adding a command: a variant, its arm in [`Command::parse`], its
//! [`Command::result_columns`] (`None` for a COPY command: Describe gives
//! NoData), its [`Command::tenant`] (checked against the JWT before it
//! runs), its [`Command::completion_tag`] and its arm in `Connection::dispatch`.

use pageserver_api::pagestream::PagestreamProtocolVersion;
use utils::id::{TenantId, TimelineId};
use utils::lsn::Lsn;
use utils::quote::quote;

use super::backup::{self, BackupRequest};
use super::error::{sqlstate, QueryError};

/// The result column of `lease lsn`.
pub(super) const LEASE_COLUMNS: &[&str] = &["valid_until"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Command {
    /// Blank query text.
    Empty,
    Pagestream {
        version: PagestreamProtocolVersion,
        tenant: TenantId,
        timeline: TimelineId,
    },
    Backup(BackupRequest),
    LeaseLsn {
        tenant: TenantId,
        timeline: TimelineId,
        lsn: Lsn,
    },
}

impl Command {
    /// Parse query text. An unknown command or bad arguments is a
    /// command-level error naming what was wrong (the session goes on).
    pub fn parse(query: &str) -> Result<Command, QueryError> {
        let query = query.trim().trim_end_matches(';').trim_end();
        let words: Vec<&str> = query.split_whitespace().collect();
        let Some((&first, args)) = words.split_first() else {
            return Ok(Command::Empty);
        };
        let version = |v| -> Result<Command, QueryError> {
            let [tenant, timeline] = args else {
                return Err(usage(&format!("{first} <tenant_id> <timeline_id>")));
            };
            let (tenant, timeline) = (tenant_id(tenant)?, timeline_id(timeline)?);
            Ok(Command::Pagestream { version: v, tenant, timeline })
        };
        if first.eq_ignore_ascii_case("pagestream_v2") {
            version(PagestreamProtocolVersion::V2)
        } else if first.eq_ignore_ascii_case("pagestream_v3") {
            version(PagestreamProtocolVersion::V3)
        } else if backup::is_backup_command(first) {
            Ok(Command::Backup(backup::parse(first, args)?))
        } else if first.eq_ignore_ascii_case("lease") {
            let ["lsn" | "LSN", tenant, timeline, lsn] = args else {
                return Err(usage("lease lsn <tenant_id> <timeline_id> <lsn>"));
            };
            let lsn = lsn.parse::<Lsn>().map_err(|_| {
                bad_argument(format!("invalid LSN {}: expected X/X (hexadecimal)", quote(lsn)))
            })?;
            Ok(Command::LeaseLsn {
                tenant: tenant_id(tenant)?,
                timeline: timeline_id(timeline)?,
                lsn,
            })
        } else {
            Err(QueryError::command(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("unsupported command {}", quote(first)),
            ))
        }
    }

    /// The columns of the rows the command returns, known without running
    /// it; `None`: it returns no rows (Describe sends NoData).
    pub fn result_columns(&self) -> Option<&'static [&'static str]> {
        match self {
            Command::Empty | Command::Pagestream { .. } | Command::Backup(_) => None,
            Command::LeaseLsn { .. } => Some(LEASE_COLUMNS),
        }
    }

    /// The tenant the command acts on, for the JWT permission check.
    pub fn tenant(&self) -> Option<TenantId> {
        match self {
            Command::Empty => None,
            Command::Pagestream { tenant, .. } | Command::LeaseLsn { tenant, .. } => Some(*tenant),
            Command::Backup(req) => Some(req.tenant),
        }
    }

    /// The CommandComplete tag the dispatch sends after a successful run;
    /// `None`: the dispatch sends none (the empty query; the pagestream,
    /// which ends the session; a backup, whose COPY sends its own).
    pub fn completion_tag(&self) -> Option<&'static str> {
        match self {
            Command::Empty | Command::Pagestream { .. } | Command::Backup(_) => None,
            Command::LeaseLsn { .. } => Some("SELECT 1"),
        }
    }
}

fn usage(synopsis: &str) -> QueryError {
    bad_argument(format!("usage: {synopsis}"))
}

fn bad_argument(message: String) -> QueryError {
    QueryError::command(sqlstate::PROTOCOL_VIOLATION, message)
}

fn tenant_id(s: &str) -> Result<TenantId, QueryError> {
    s.parse().map_err(|e| bad_argument(format!("invalid tenant id: {e}")))
}

fn timeline_id(s: &str) -> Result<TimelineId, QueryError> {
    s.parse().map_err(|e| bad_argument(format!("invalid timeline id: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: QueryError) -> String {
        match e {
            QueryError::Command { message, .. } => message,
            other => panic!("expected a command error, got {other:?}"),
        }
    }

    #[test]
    fn parses_commands_and_knows_their_shape() {
        let (t, tl) = (TenantId::generate(), TimelineId::generate());
        assert_eq!(Command::parse(" ;").unwrap(), Command::Empty);
        let c = Command::parse(&format!("PageStream_V3 {t} {tl};")).unwrap();
        assert_eq!(
            c,
            Command::Pagestream { version: PagestreamProtocolVersion::V3, tenant: t, timeline: tl }
        );
        assert_eq!((c.result_columns(), c.tenant(), c.completion_tag()), (None, Some(t), None));
        // Neon's compute sends a trailing blank.
        let c = Command::parse(&format!("lease lsn {t} {tl} 0/16B5A50 ")).unwrap();
        assert_eq!(c, Command::LeaseLsn { tenant: t, timeline: tl, lsn: Lsn(0x16B5A50) });
        assert_eq!(c.result_columns(), Some(LEASE_COLUMNS));
        assert_eq!(c.completion_tag(), Some("SELECT 1"));
        let c = Command::parse(&format!("basebackup {t} {tl} 0/16B5A50 --gzip")).unwrap();
        let Command::Backup(req) = &c else { panic!("{c:?}") };
        assert!(req.gzip && !req.full && req.lsn == Some(Lsn(0x16B5A50)));
        assert_eq!((c.result_columns(), c.tenant(), c.completion_tag()), (None, Some(t), None));
        let c = Command::parse(&format!("FULLBACKUP {t} {tl}")).unwrap();
        assert!(matches!(c, Command::Backup(BackupRequest { full: true, lsn: None, .. })), "{c:?}");
    }

    #[test]
    fn errors_name_what_was_wrong() {
        let (t, tl) = (TenantId::generate(), TimelineId::generate());
        for (q, expect) in [
            ("SELECT 1".to_string(), "unsupported command 'SELECT'"),
            ("pagestream_v2".to_string(), "usage: pagestream_v2 <tenant_id> <timeline_id>"),
            (format!("pagestream_v3 nothex {tl}"), "invalid tenant id"),
            (format!("pagestream_v3 {t} zz"), "invalid timeline id"),
            (format!("lease lsn {t} {tl}"), "usage: lease lsn"),
            (format!("lease xyz {t} {tl} 0/1"), "usage: lease lsn"),
            (format!("lease lsn {t} {tl} 16B5A50"), "invalid LSN '16B5A50'"),
        ] {
            let m = message(Command::parse(&q).unwrap_err());
            assert!(m.contains(expect), "{q}: '{m}' should contain '{expect}'");
        }
    }
}
