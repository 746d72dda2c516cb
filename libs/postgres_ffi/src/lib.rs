//! PostgreSQL knowledge in one place: constants, page header and data
//! checksum, `pg_control` for each supported major version, data directory
//! paths, SLRU geometry, and the record application the pageserver does
//! itself (CLOG status bits, visibility-map clears).
//!
//! Facts come from PostgreSQL's headers (`bufpage.h`, `checksum_impl.h`,
//! `pg_control.h`, `clog.c`, `visibilitymap.c`, `relpath.c`, `slru.c`) of
//! each major version; per-version differences live in this crate and are
//! selected by a [`PgMajorVersion`]. Everything assumes a 64-bit
//! little-endian build with the default `BLCKSZ` (what every supported
//! server here is). Depends on no pageserver crate.

pub mod consts;
pub mod controlfile;
pub mod page;
pub mod paths;
pub mod records;
pub mod redo;
pub mod slru;
pub mod wal;

pub use consts::*;

/// A supported PostgreSQL major version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PgMajorVersion {
    V15 = 15,
    V16 = 16,
    V17 = 17,
    V18 = 18,
}

impl PgMajorVersion {
    pub const ALL: [PgMajorVersion; 4] =
        [PgMajorVersion::V15, PgMajorVersion::V16, PgMajorVersion::V17, PgMajorVersion::V18];

    pub fn new(major: u32) -> Result<PgMajorVersion, UnsupportedVersion> {
        Self::ALL.into_iter().find(|v| *v as u32 == major).ok_or(UnsupportedVersion(major))
    }

    pub fn number(self) -> u32 {
        self as u32
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("PostgreSQL {0} is not supported (supported: 15, 16, 17, 18)")]
pub struct UnsupportedVersion(pub u32);
