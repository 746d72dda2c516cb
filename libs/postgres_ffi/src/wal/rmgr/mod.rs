//! Typed views of the records the pageserver applies itself, without a
//! PostgreSQL redo process (see `docs/wal-ingest.md`, "Records that carry no
//! image and must be handled natively"), for PostgreSQL 15 to 18.
//!
//! [`classify`] turns one [`DecodedWalRecord`] into a [`NativeRecord`]:
//! storage create/truncate, transaction commit/abort/prepare, CLOG and
//! multixact SLRU changes, database and tablespace create/drop, relmap updates, XLOG
//! control records, and the visibility-map bits heap records clear. Every
//! other record is [`NativeRecord::ImagesOnly`]: its block images are the
//! whole change.
//!
//! Invariants:
//! - whatever the variant, the caller applies every block image of the
//!   record (an image is the page after the record); a native action never
//!   replaces an image, an image overrides a native action on the same page;
//! - block references without an image are listed (`without_image`) by the
//!   variants that touch relation pages, so the caller can record that the
//!   page cannot be rebuilt at this LSN;
//! - no input panics, loops or allocates more than the main data's length:
//!   every count is checked against the bytes that are actually there, and
//!   every error names the record's LSN and the field at fault;
//! - main data that PostgreSQL registers as exactly one layout (every kind
//!   here but the heap records) must be exactly that long: bytes left over
//!   are an error, which is how a record read with the wrong version's
//!   layout (CLOG page width, stats item size, relmap size) shows.
//!
//! Layouts are those of the headers of each major (`xact.h`,
//! `storage_xlog.h`, `clog.h`, `multixact.h`, `dbcommands_xlog.h`, `tablespace.h`,
//! `relmapper.h`, `pg_control.h`, `heapam_xlog.h`), 64-bit little-endian.
//! Where a struct differs between versions, the module of its rmgr says so.

pub mod clog;
mod cursor;
pub mod database;
pub mod heap;
pub mod multixact;
pub mod relmap;
pub mod storage;
pub mod tblspc;
pub mod xact;
pub mod xlog;

pub use clog::ClogRecord;
pub use database::DatabaseRecord;
pub use heap::{VmClear, HEAP_OPMASK};
pub use multixact::{MultiXactMember, MultiXactRecord};
pub use relmap::RelMapUpdate;
pub use storage::{
    StorageRecord, SMGR_TRUNCATE_ALL, SMGR_TRUNCATE_FSM, SMGR_TRUNCATE_HEAP, SMGR_TRUNCATE_VM,
};
pub use tblspc::TablespaceRecord;
pub use xact::{XactCompletion, XactDbInfo, XactPrepare, XactRecord};
pub use xlog::{ParameterChange, XlogRecord};

use super::{rmgr_id, BlockTag, DecodedWalRecord, WalDecodeError};
use crate::PgMajorVersion;

/// A relation, all forks (`RelFileLocator`; `RelFileNode` before 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelFileLocator {
    pub spc_oid: u32,
    pub db_oid: u32,
    pub rel_number: u32,
}

/// `sizeof(RelFileLocator)`: three OIDs.
pub(crate) const REL_FILE_LOCATOR_LEN: usize = 12;

/// What the pageserver does with one record besides applying its images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NativeRecord {
    /// Storage (rmgr 2): relation creation and truncation.
    Storage(StorageRecord),
    /// Transaction (rmgr 1): commit, abort (prepared or not), prepare.
    Xact(XactRecord),
    /// CLOG (rmgr 3): page zeroing and truncation.
    Clog(ClogRecord),
    /// MultiXact (rmgr 6): offsets/members SLRU changes.
    MultiXact(MultiXactRecord),
    /// Database (rmgr 4): create (both strategies) and drop.
    Database(DatabaseRecord),
    /// Tablespace (rmgr 5): create and drop; no page changes.
    Tablespace(TablespaceRecord),
    /// RelMap (rmgr 7): a new `pg_filenode.map`.
    RelMap(RelMapUpdate),
    /// XLOG (rmgr 0): checkpoints and control data.
    Xlog(XlogRecord),
    /// Heap (rmgr 10) or Heap2 (rmgr 9) record whose flags say it cleared
    /// visibility-map bits: apply the images of the heap pages, then clear
    /// `vm_clears` in the VM pages (unless the record carried an image of
    /// that VM page, which PostgreSQL 18 does: see [`VmClear`]).
    HeapVmClear {
        vm_clears: Vec<VmClear>,
        /// Heap-page block references without an image. VM pages the
        /// record names (18) are left out: the native clear is their redo.
        without_image: Vec<BlockTag>,
    },
    /// Nothing to do natively: the record's block images are the whole
    /// change (this includes XLOG FPI and FPI_FOR_HINT, transaction
    /// ASSIGNMENT and INVALIDATIONS, and records of every other rmgr).
    ImagesOnly {
        /// Block references that carry no image: their page after this
        /// record cannot be rebuilt without redo.
        without_image: Vec<BlockTag>,
    },
}

/// Classify one record of a PostgreSQL `version` server.
pub fn classify(
    rec: &DecodedWalRecord,
    version: PgMajorVersion,
) -> Result<NativeRecord, WalDecodeError> {
    let native = match rec.rmid {
        rmgr_id::STORAGE => storage::decode(rec)?.map(NativeRecord::Storage),
        rmgr_id::TRANSACTION => xact::decode(rec, version)?.map(NativeRecord::Xact),
        rmgr_id::CLOG => clog::decode(rec, version)?.map(NativeRecord::Clog),
        rmgr_id::MULTIXACT => multixact::decode(rec, version)?.map(NativeRecord::MultiXact),
        rmgr_id::DATABASE => database::decode(rec)?.map(NativeRecord::Database),
        rmgr_id::TABLESPACE => tblspc::decode(rec)?.map(NativeRecord::Tablespace),
        rmgr_id::RELMAP => relmap::decode(rec, version)?.map(NativeRecord::RelMap),
        rmgr_id::XLOG => xlog::decode(rec, version)?.map(NativeRecord::Xlog),
        rmgr_id::HEAP | rmgr_id::HEAP2 => heap::decode(rec)?,
        _ => None,
    };
    Ok(native.unwrap_or_else(|| NativeRecord::ImagesOnly { without_image: without_image(rec) }))
}

/// Tags of the record's block references that carry no image.
pub fn without_image(rec: &DecodedWalRecord) -> Vec<BlockTag> {
    rec.blocks.iter().filter(|b| b.image.is_none()).map(|b| b.tag).collect()
}

/// The name PostgreSQL gives rmgr `rmid` (`rmgrlist.h`), as `pg_waldump`
/// prints it; `"unknown"` for ids no supported version uses.
pub fn rmgr_name(rmid: u8) -> &'static str {
    match rmid {
        rmgr_id::XLOG => "XLOG",
        rmgr_id::TRANSACTION => "Transaction",
        rmgr_id::STORAGE => "Storage",
        rmgr_id::CLOG => "CLOG",
        rmgr_id::DATABASE => "Database",
        rmgr_id::TABLESPACE => "Tablespace",
        rmgr_id::MULTIXACT => "MultiXact",
        rmgr_id::RELMAP => "RelMap",
        rmgr_id::STANDBY => "Standby",
        rmgr_id::HEAP2 => "Heap2",
        rmgr_id::HEAP => "Heap",
        rmgr_id::BTREE => "Btree",
        rmgr_id::HASH => "Hash",
        rmgr_id::GIN => "Gin",
        rmgr_id::GIST => "Gist",
        rmgr_id::SEQUENCE => "Sequence",
        rmgr_id::SPGIST => "SPGist",
        rmgr_id::BRIN => "BRIN",
        rmgr_id::COMMIT_TS => "CommitTs",
        rmgr_id::REPLORIGIN => "ReplicationOrigin",
        rmgr_id::GENERIC => "Generic",
        rmgr_id::LOGICAL_MESSAGE => "LogicalMessage",
        _ => "unknown",
    }
}

#[cfg(test)]
pub(crate) mod testutil;

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn names() {
        assert_eq!(rmgr_name(0), "XLOG");
        assert_eq!(rmgr_name(10), "Heap");
        assert_eq!(rmgr_name(21), "LogicalMessage");
        assert_eq!(rmgr_name(22), "unknown");
        assert_eq!(rmgr_name(255), "unknown");
    }

    #[test]
    fn other_rmgrs_are_images_only_and_report_missing_images() {
        let mut rec = record(rmgr_id::BTREE, 0x00, &[1, 2, 3]);
        rec.blocks.push(block(0, 0, 7, true));
        rec.blocks.push(block(1, 0, 8, false));
        for v in PgMajorVersion::ALL {
            let NativeRecord::ImagesOnly { without_image } = classify(&rec, v).unwrap() else {
                panic!("btree is images only");
            };
            assert_eq!(without_image.len(), 1);
            assert_eq!(without_image[0].blkno, 8);
        }
    }

    #[test]
    fn unknown_rmgr_is_images_only() {
        let rec = record(200, 0x10, &[]);
        assert_eq!(
            classify(&rec, PgMajorVersion::V18).unwrap(),
            NativeRecord::ImagesOnly { without_image: vec![] }
        );
    }
}
