//! Record-kind names as PostgreSQL's `rm_identify` gives them (what
//! pg_waldump and pg_walinspect print), for the rmgrs with page redo or
//! masking: Heap, Heap2, Btree, Hash, Gin, Gist, Sequence, SPGist, BRIN and
//! Generic.
//!
//! Per major: the same in 15-18 except Heap2, where 17 replaced PRUNE (0x10),
//! VACUUM (0x20) and FREEZE_PAGE (0x30) with PRUNE_ON_ACCESS,
//! PRUNE_VACUUM_SCAN and PRUNE_VACUUM_CLEANUP. Heap, Heap2 and BRIN kinds
//! that initialise the page carry "+INIT" where PostgreSQL names them so;
//! an info PostgreSQL does not name is "UNKNOWN".

use crate::wal::rmgr_id;
use crate::PgMajorVersion;

/// `XLOG_HEAP_INIT_PAGE` (and `XLOG_BRIN_INIT_PAGE`).
const INIT_PAGE: u8 = 0x80;

/// The name of the record kind `info` (whole `xl_info`) of rmgr `rmid`.
pub fn record_name(rmid: u8, info: u8, version: PgMajorVersion) -> &'static str {
    let info = info & 0xF0;
    let name = match rmid {
        rmgr_id::HEAP => heap(info),
        rmgr_id::HEAP2 => heap2(info, version),
        rmgr_id::BTREE => btree(info),
        rmgr_id::HASH => hash(info),
        rmgr_id::GIN => gin(info),
        rmgr_id::GIST => gist(info),
        rmgr_id::SEQUENCE => (info == 0x00).then_some("LOG"),
        rmgr_id::SPGIST => spgist(info),
        rmgr_id::BRIN => brin(info),
        rmgr_id::GENERIC => Some("Generic"),
        _ => None,
    };
    name.unwrap_or("UNKNOWN")
}

fn heap(info: u8) -> Option<&'static str> {
    Some(match info {
        0x00 => "INSERT",
        0x80 => "INSERT+INIT",
        0x10 => "DELETE",
        0x20 => "UPDATE",
        0xA0 => "UPDATE+INIT",
        0x30 => "TRUNCATE",
        0x40 => "HOT_UPDATE",
        0xC0 => "HOT_UPDATE+INIT",
        0x50 => "HEAP_CONFIRM",
        0x60 => "LOCK",
        0x70 => "INPLACE",
        _ => return None,
    })
}

fn heap2(info: u8, version: PgMajorVersion) -> Option<&'static str> {
    let new_prune = version >= PgMajorVersion::V17;
    Some(match info {
        0x00 => "REWRITE",
        0x10 if new_prune => "PRUNE_ON_ACCESS",
        0x20 if new_prune => "PRUNE_VACUUM_SCAN",
        0x30 if new_prune => "PRUNE_VACUUM_CLEANUP",
        0x10 => "PRUNE",
        0x20 => "VACUUM",
        0x30 => "FREEZE_PAGE",
        0x40 => "VISIBLE",
        0x50 => "MULTI_INSERT",
        i if i == 0x50 | INIT_PAGE => "MULTI_INSERT+INIT",
        0x60 => "LOCK_UPDATED",
        0x70 => "NEW_CID",
        _ => return None,
    })
}

fn btree(info: u8) -> Option<&'static str> {
    const NAMES: [&str; 15] = [
        "INSERT_LEAF",
        "INSERT_UPPER",
        "INSERT_META",
        "SPLIT_L",
        "SPLIT_R",
        "INSERT_POST",
        "DEDUP",
        "DELETE",
        "UNLINK_PAGE",
        "UNLINK_PAGE_META",
        "NEWROOT",
        "MARK_PAGE_HALFDEAD",
        "VACUUM",
        "REUSE_PAGE",
        "META_CLEANUP",
    ];
    NAMES.get((info >> 4) as usize).copied()
}

fn hash(info: u8) -> Option<&'static str> {
    const NAMES: [&str; 13] = [
        "INIT_META_PAGE",
        "INIT_BITMAP_PAGE",
        "INSERT",
        "ADD_OVFL_PAGE",
        "SPLIT_ALLOCATE_PAGE",
        "SPLIT_PAGE",
        "SPLIT_COMPLETE",
        "MOVE_PAGE_CONTENTS",
        "SQUEEZE_PAGE",
        "DELETE",
        "SPLIT_CLEANUP",
        "UPDATE_META_PAGE",
        "VACUUM_ONE_PAGE",
    ];
    NAMES.get((info >> 4) as usize).copied()
}

fn gin(info: u8) -> Option<&'static str> {
    Some(match info {
        0x10 => "CREATE_PTREE",
        0x20 => "INSERT",
        0x30 => "SPLIT",
        0x40 => "VACUUM_PAGE",
        0x50 => "DELETE_PAGE",
        0x60 => "UPDATE_META_PAGE",
        0x70 => "INSERT_LISTPAGE",
        0x80 => "DELETE_LISTPAGE",
        0x90 => "VACUUM_DATA_LEAF_PAGE",
        _ => return None,
    })
}

fn gist(info: u8) -> Option<&'static str> {
    Some(match info {
        0x00 => "PAGE_UPDATE",
        0x10 => "DELETE",
        0x20 => "PAGE_REUSE",
        0x30 => "PAGE_SPLIT",
        0x60 => "PAGE_DELETE",
        0x70 => "ASSIGN_LSN",
        _ => return None,
    })
}

fn spgist(info: u8) -> Option<&'static str> {
    const NAMES: [&str; 8] = [
        "ADD_LEAF",
        "MOVE_LEAFS",
        "ADD_NODE",
        "SPLIT_TUPLE",
        "PICKSPLIT",
        "VACUUM_LEAF",
        "VACUUM_ROOT",
        "VACUUM_REDIRECT",
    ];
    (info >> 4).checked_sub(1).and_then(|i| NAMES.get(i as usize)).copied()
}

fn brin(info: u8) -> Option<&'static str> {
    Some(match info {
        0x00 => "CREATE_INDEX",
        0x10 => "INSERT",
        0x90 => "INSERT+INIT",
        0x20 => "UPDATE",
        0xA0 => "UPDATE+INIT",
        0x30 => "SAMEPAGE_UPDATE",
        0x40 => "REVMAP_EXTEND",
        0x50 => "DESUMMARIZE",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use PgMajorVersion::*;

    #[test]
    fn names_per_major() {
        let cases: [(u8, u8, PgMajorVersion, &str); 22] = [
            (rmgr_id::HEAP, 0x00, V15, "INSERT"),
            (rmgr_id::HEAP, 0x80, V18, "INSERT+INIT"),
            (rmgr_id::HEAP, 0x40, V16, "HOT_UPDATE"),
            (rmgr_id::HEAP, 0xC0, V17, "HOT_UPDATE+INIT"),
            (rmgr_id::HEAP, 0x90, V15, "UNKNOWN"),
            (rmgr_id::HEAP2, 0x10, V16, "PRUNE"),
            (rmgr_id::HEAP2, 0x10, V17, "PRUNE_ON_ACCESS"),
            (rmgr_id::HEAP2, 0x20, V15, "VACUUM"),
            (rmgr_id::HEAP2, 0x30, V18, "PRUNE_VACUUM_CLEANUP"),
            (rmgr_id::HEAP2, 0x30, V15, "FREEZE_PAGE"),
            (rmgr_id::HEAP2, 0xD0, V15, "MULTI_INSERT+INIT"),
            (rmgr_id::BTREE, 0x30, V15, "SPLIT_L"),
            (rmgr_id::BTREE, 0xE0, V18, "META_CLEANUP"),
            (rmgr_id::BTREE, 0xF0, V18, "UNKNOWN"),
            (rmgr_id::HASH, 0xC0, V15, "VACUUM_ONE_PAGE"),
            (rmgr_id::GIN, 0x90, V15, "VACUUM_DATA_LEAF_PAGE"),
            (rmgr_id::GIST, 0x40, V15, "UNKNOWN"),
            (rmgr_id::SEQUENCE, 0x00, V15, "LOG"),
            (rmgr_id::SPGIST, 0x10, V15, "ADD_LEAF"),
            (rmgr_id::SPGIST, 0x00, V15, "UNKNOWN"),
            (rmgr_id::BRIN, 0xA0, V15, "UPDATE+INIT"),
            (rmgr_id::GENERIC, 0x00, V15, "Generic"),
        ];
        for (rmid, info, version, want) in cases {
            assert_eq!(
                record_name(rmid, info, version),
                want,
                "rmgr {rmid} info {info:#x} {version:?}"
            );
        }
        // The low bits (XLR_INFO_MASK) are not the kind.
        assert_eq!(record_name(rmgr_id::BTREE, 0x42, V15), "SPLIT_R");
    }
}
