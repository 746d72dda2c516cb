//! A `BASE_BACKUP`'s archives as the importer's stream of [`TarPart`]s:
//! the main archive (`base.tar`) without a prefix, and each other
//! tablespace's archive, whose paths (`PG_<major>_<catversion>/<db>/...`)
//! are relative to the tablespace's location, under `pg_tblspc/<oid>/`:
//! the in-place layout that the import classifies (`pg_files`), the backup
//! manifest names, and `basebackup`/`fullbackup` write. The main archive's
//! `pg_tblspc/<oid>` symlink then has its archive (checked by the import).
//!
//! Invariant: bytes are passed on as they arrive, one CopyData at a time;
//! nothing of an archive is held.

use std::io;

use futures::Stream;
use pq_proto::replication::{BackupArchive, BackupPart, BaseBackup};
use tracing::info;

use super::tar_reader::TarPart;

/// Where the entries of `archive` go in the data directory.
pub fn archive_prefix(archive: &BackupArchive) -> String {
    match &archive.tablespace {
        None => String::new(),
        Some(t) => format!("pg_tblspc/{}/", t.oid),
    }
}

/// The backup's parts, for `import_archives_unfinished`.
pub fn backup_parts<'a, 'b: 'a>(
    backup: &'a mut BaseBackup<'b>,
) -> impl Stream<Item = Result<TarPart, io::Error>> + Send + use<'a, 'b> {
    futures::stream::unfold(backup, |b| async move {
        let part = match b.next_part().await {
            Ok(Some(BackupPart::Data(chunk))) => Ok(TarPart::Data(chunk)),
            Ok(Some(BackupPart::Archive(archive))) => {
                if let Some(t) = &archive.tablespace {
                    info!(
                        "base backup: archive {} of tablespace {} at {}",
                        archive.name, t.oid, t.location
                    );
                }
                Ok(TarPart::Archive { prefix: archive_prefix(&archive) })
            }
            Ok(None) => return None,
            Err(e) => Err(io::Error::other(e)),
        };
        Some((part, b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pq_proto::replication::BackupTablespace;

    #[test]
    fn tablespace_archives_go_under_pg_tblspc() {
        let main = BackupArchive { name: "base.tar".into(), tablespace: None };
        assert_eq!(archive_prefix(&main), "");
        let t = BackupTablespace { oid: 16390, location: "/srv/ts".into() };
        let ts = BackupArchive { name: "16390.tar".into(), tablespace: Some(t) };
        assert_eq!(archive_prefix(&ts), "pg_tblspc/16390/");
    }
}
