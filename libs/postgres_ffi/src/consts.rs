//! Sizes and identifiers fixed by PostgreSQL (default build options).

/// Size of a relation or SLRU page.
pub const BLCKSZ: usize = 8192;
/// Blocks per relation segment file (1 GiB).
pub const RELSEG_SIZE: u32 = 131_072;
/// Size of a WAL page.
pub const XLOG_BLCKSZ: usize = 8192;
/// Default WAL segment size (`initdb --wal-segsize` can change it).
pub const DEFAULT_WAL_SEGMENT_SIZE: u64 = 16 * 1024 * 1024;

/// Fork numbers (`common/relpath.h`).
pub const MAIN_FORKNUM: u8 = 0;
pub const FSM_FORKNUM: u8 = 1;
pub const VISIBILITYMAP_FORKNUM: u8 = 2;
pub const INIT_FORKNUM: u8 = 3;
pub const MAX_FORKNUM: u8 = INIT_FORKNUM;

/// Tablespace OIDs of `pg_global` (shared catalogs) and `pg_default`.
pub const GLOBALTABLESPACE_OID: u32 = 1664;
pub const DEFAULTTABLESPACE_OID: u32 = 1663;

/// Pages per SLRU segment file.
pub const SLRU_PAGES_PER_SEGMENT: u32 = 32;

/// Size of `pg_control` on disk; the struct itself is smaller.
pub const PG_CONTROL_FILE_SIZE: usize = 8192;

/// `sizeof(PageHeaderData)` up to `pd_linp`.
pub const SIZE_OF_PAGE_HEADER_DATA: usize = 24;

const _: () = assert!(BLCKSZ.is_power_of_two() && BLCKSZ % 512 == 0);
const _: () = assert!((RELSEG_SIZE as usize) * BLCKSZ == 1 << 30);
