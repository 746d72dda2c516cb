//! The tablespaces a base backup declares, and the archives that must hold
//! them.
//!
//! `base.tar` declares a tablespace other than `pg_default`/`pg_global` in
//! one of two ways: a `pg_tblspc/<oid>` symlink to its location (a
//! `BASE_BACKUP` without `TABLESPACE_MAP`: the bootstrap), or a line
//! `<oid> <location>` of `tablespace_map` (`pg_basebackup -Ft`, which asks
//! for the map and gets no symlinks). Either way the tablespace's files are
//! in an archive of their own, which the import stream carries under the
//! prefix `pg_tblspc/<oid>/` (`backup_parts`, `nested`).
//!
//! Invariant (checked by [`check_tablespace_links`] at the end of the
//! import, and at once for a stream of one plain tar, which can have no
//! other archive): every declared tablespace has its archive, else the
//! timeline would silently lack its relations. An archive no symlink or map
//! line declares is accepted: an in-place tablespace
//! (`allow_in_place_tablespaces`) is a directory, not a symlink, and
//! PostgreSQL lists only symlinks in `tablespace_map`.

use super::ImportError;

/// A tablespace `base.tar` declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablespaceRef {
    pub oid: u32,
    /// Its location on the primary.
    pub location: String,
    pub declared_by: DeclaredBy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredBy {
    Symlink,
    TablespaceMap,
}

impl TablespaceRef {
    /// The stream prefix of its archive.
    pub fn prefix(&self) -> String {
        format!("pg_tblspc/{}/", self.oid)
    }
}

/// A `pg_tblspc/<oid>` symlink as a declared tablespace; `None` for another
/// symlink (skipped by the import).
pub fn symlink_ref(path: &str, target: &str) -> Option<TablespaceRef> {
    let oid = path.strip_prefix("pg_tblspc/")?.parse().ok()?;
    Some(TablespaceRef { oid, location: target.to_string(), declared_by: DeclaredBy::Symlink })
}

/// `tablespace_map`, as PostgreSQL's `read_tablespace_map` reads it: lines
/// `<oid> <location>`, the location with `\` before each `\`, `\n` and `\r`
/// it contains; an empty map (no other tablespace) is an empty file.
pub fn parse_tablespace_map(text: &[u8]) -> Result<Vec<TablespaceRef>, String> {
    let mut refs = Vec::new();
    let mut line = Vec::new();
    let mut escaped = false;
    for &c in text {
        if escaped {
            line.push(c);
            escaped = false;
        } else if c == b'\\' {
            escaped = true;
        } else if c == b'\n' || c == b'\r' {
            if !line.is_empty() {
                refs.push(map_line(&line)?);
                line.clear();
            }
        } else {
            line.push(c);
        }
    }
    if !line.is_empty() || escaped {
        return Err("its last line does not end with a newline: truncated".into());
    }
    Ok(refs)
}

fn map_line(line: &[u8]) -> Result<TablespaceRef, String> {
    let text = String::from_utf8_lossy(line);
    let bad = || format!("line {text:?} is not '<oid> <location>'");
    let (oid, location) = text.split_once(' ').ok_or_else(bad)?;
    let oid: u32 = oid.parse().map_err(|_| bad())?;
    if oid == 0 || location.is_empty() {
        return Err(bad());
    }
    Ok(TablespaceRef {
        oid,
        location: location.to_string(),
        declared_by: DeclaredBy::TablespaceMap,
    })
}

/// Every tablespace in `declared` has its archive (prefix
/// `pg_tblspc/<oid>/`) among the `archives` of the stream; a stream of one
/// tar has none, and is refused naming the tablespace.
pub fn check_tablespace_links(
    declared: &[TablespaceRef],
    archives: &[String],
) -> Result<(), ImportError> {
    let Some(t) = declared.iter().find(|t| !archives.contains(&t.prefix())) else {
        return Ok(());
    };
    let (oid, location) = (t.oid, &t.location);
    let what = match t.declared_by {
        DeclaredBy::Symlink => format!("'pg_tblspc/{oid}' is a symlink to '{location}'"),
        DeclaredBy::TablespaceMap => {
            format!("tablespace_map names tablespace {oid} at '{location}'")
        }
    };
    let advice = if archives.is_empty() {
        format!(
            "this is one tar; send the whole pg_basebackup -Ft directory as one tar \
             (`tar -C <dir> -cf - .`: base.tar and {oid}.tar), or a tar that holds the \
             tablespace in place under pg_tblspc/{oid}/PG_<major>_<catversion>/"
        )
    } else {
        "the stream has no archive of it".to_string()
    };
    Err(ImportError::BadTar(format!(
        "{what}: that tablespace's files ({oid}.tar) are missing: {advice}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_lines_and_escapes() {
        let map = b"16390 /srv/ts1\n16391 /srv/with\\\\back\\\nslash\n";
        let refs = parse_tablespace_map(map).unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!((refs[0].oid, refs[0].location.as_str()), (16390, "/srv/ts1"));
        assert_eq!(refs[1].location, "/srv/with\\back\nslash");
        assert_eq!(refs[1].prefix(), "pg_tblspc/16391/");
        assert!(parse_tablespace_map(b"").unwrap().is_empty());
        assert!(parse_tablespace_map(b"16390 /srv/ts1").unwrap_err().contains("truncated"));
        assert!(parse_tablespace_map(b"x /srv\n").unwrap_err().contains("'<oid> <location>'"));
        assert!(parse_tablespace_map(b"16390\n").is_err());
    }

    #[test]
    fn every_declared_tablespace_needs_its_archive() {
        let map = parse_tablespace_map(b"16390 /srv/ts1\n").unwrap();
        let archives = vec![String::new(), "pg_tblspc/16390/".into()];
        check_tablespace_links(&map, &archives).unwrap();
        // An archive nothing declares: an in-place tablespace.
        let more = vec![String::new(), "pg_tblspc/16390/".into(), "pg_tblspc/16500/".into()];
        check_tablespace_links(&map, &more).unwrap();
        let e = check_tablespace_links(&map, &[String::new()]).unwrap_err().to_string();
        assert!(e.contains("tablespace_map names tablespace 16390 at '/srv/ts1'"), "{e}");
        assert!(e.contains("16390.tar") && e.contains("no archive of it"), "{e}");
        let link = symlink_ref("pg_tblspc/16400", "/srv/ts2").unwrap();
        let e = check_tablespace_links(&[link], &[]).unwrap_err().to_string();
        assert!(e.contains("'pg_tblspc/16400' is a symlink to '/srv/ts2'"), "{e}");
        assert!(e.contains("tar -C <dir> -cf - ."), "{e}");
        assert_eq!(symlink_ref("pg_wal", "/x"), None);
    }
}
