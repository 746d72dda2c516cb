//! The records applied natively (step 2 of the module comment of `mod.rs`):
//! what `postgres_ffi::wal::rmgr::classify` says a record does besides its
//! images, turned into writes of the modification.

use pageserver_api::reltag::{RelTag, SlruKind};
use postgres_ffi::records::VM_HEAPBLOCKS_PER_PAGE;
use postgres_ffi::slru::{
    segment_of_page, CLOG_XACTS_PER_PAGE, TRANSACTION_STATUS_ABORTED, TRANSACTION_STATUS_COMMITTED,
};
use postgres_ffi::wal::rmgr::{
    classify, DatabaseRecord, NativeRecord, RelFileLocator, StorageRecord, TablespaceRecord,
    VmClear, XactCompletion, XactRecord, XlogRecord, SMGR_TRUNCATE_FSM, SMGR_TRUNCATE_HEAP,
    SMGR_TRUNCATE_VM,
};
use postgres_ffi::wal::DecodedWalRecord;

use super::{rel_of, Ingested, WalIngest};
use crate::pgdatadir_mapping::{zero_page, DatadirModification};
use crate::tenant::value::{Record, Value};

mod checkpoint;
mod copy_db;
mod slru;

pub use checkpoint::CheckpointState;

/// PostgreSQL forks: main, FSM, VM, init.
const FORKS: [u8; 4] = [0, 1, 2, 3];
const FSM_FORK: u8 = 1;
const VM_FORK: u8 = 2;

pub async fn apply(
    ingest: &mut WalIngest,
    rec: &DecodedWalRecord,
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<Ingested> {
    let mut out = Ingested::default();
    match classify(rec, ingest.version)? {
        NativeRecord::Storage(r) => storage(r, m).await?,
        NativeRecord::Xact(r) => xact(r, m).await?,
        NativeRecord::Clog(r) => slru::clog(r, m).await?,
        NativeRecord::MultiXact(r) => slru::multixact(r, &mut ingest.checkpoint, m).await?,
        NativeRecord::Database(r) => database(r, m).await?,
        NativeRecord::Tablespace(r) => tablespace(r, m).await?,
        NativeRecord::RelMap(r) => m.put_relmap_file(r.spc_oid, r.db_oid, r.map).await?,
        NativeRecord::Xlog(r) => out.shutdown_checkpoint = xlog(r, &mut ingest.checkpoint),
        NativeRecord::HeapVmClear { vm_clears, .. } => vm_clear(rec, &vm_clears, m).await?,
        NativeRecord::ImagesOnly { .. } => {}
    }
    Ok(out)
}

fn rel(loc: RelFileLocator, fork: u8) -> RelTag {
    RelTag { spcnode: loc.spc_oid, dbnode: loc.db_oid, relnode: loc.rel_number, forknum: fork }
}

async fn storage(r: StorageRecord, m: &mut DatadirModification<'_>) -> anyhow::Result<()> {
    match r {
        StorageRecord::Create { rel: loc, fork } => {
            let rel = rel(loc, fork);
            if m.rel_size(rel).await?.is_none() {
                m.put_rel_creation(rel, 0).await?;
            }
        }
        StorageRecord::Truncate { rel: loc, blkno, flags } => {
            if flags & SMGR_TRUNCATE_HEAP != 0 && m.rel_size(rel(loc, 0)).await?.is_some() {
                m.put_rel_truncation(rel(loc, 0), blkno).await?;
            }
            if flags & SMGR_TRUNCATE_FSM != 0 {
                truncate_fsm(rel(loc, FSM_FORK), blkno, m).await?;
            }
            if flags & SMGR_TRUNCATE_VM != 0 {
                truncate_vm(rel(loc, VM_FORK), blkno, m).await?;
            }
        }
    }
    Ok(())
}

/// Heap blocks one FSM leaf page covers (`SlotsPerFSMPage`).
const SLOTS_PER_FSM_PAGE: u32 = 4069;

/// `fsm_logical_to_physical` for a leaf page (level 0), tree depth 3.
fn fsm_leaf_to_physical(logical: u32) -> u32 {
    let mut leaf = logical;
    let mut pages = 0u32;
    for _ in 0..3 {
        pages += leaf + 1;
        leaf /= SLOTS_PER_FSM_PAGE;
    }
    pages - 1
}

/// As `FreeSpaceMapPrepareTruncateRel`: zero the leaf page that keeps part
/// of its slots, drop the pages after it.
async fn truncate_fsm(
    fsm: RelTag,
    heap_blocks: u32,
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<()> {
    let Some(size) = m.rel_size(fsm).await? else { return Ok(()) };
    let mut keep = fsm_leaf_to_physical(heap_blocks / SLOTS_PER_FSM_PAGE);
    if !heap_blocks.is_multiple_of(SLOTS_PER_FSM_PAGE) {
        if keep < size {
            m.put_rel_page_image(fsm, keep, zero_page()).await?;
        }
        keep += 1;
    }
    if size > keep {
        m.put_rel_truncation(fsm, keep).await?;
    }
    Ok(())
}

/// As `visibilitymap_prepare_truncate`: clear the bits of the removed heap
/// blocks in the last kept VM page, drop the pages after it.
async fn truncate_vm(
    vm: RelTag,
    heap_blocks: u32,
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<()> {
    let Some(size) = m.rel_size(vm).await? else { return Ok(()) };
    let mut keep = heap_blocks / VM_HEAPBLOCKS_PER_PAGE;
    if !heap_blocks.is_multiple_of(VM_HEAPBLOCKS_PER_PAGE) {
        if keep < size {
            let clear = Record::VmClearTail { first_heap_blkno: heap_blocks };
            m.put_rel_value(vm, keep, Value::Record(clear)).await?;
        }
        keep += 1;
    }
    if size > keep {
        m.put_rel_truncation(vm, keep).await?;
    }
    Ok(())
}

async fn xact(r: XactRecord, m: &mut DatadirModification<'_>) -> anyhow::Result<()> {
    match r {
        XactRecord::Commit(c) => complete(c, TRANSACTION_STATUS_COMMITTED, m).await,
        XactRecord::Abort(c) => complete(c, TRANSACTION_STATUS_ABORTED, m).await,
        XactRecord::Prepare(p) => m.put_twophase_file(p.xid, p.state).await,
    }
}

/// Commit or abort: CLOG bits of the xid and its subtransactions, dropped
/// relations (every fork), the two-phase file of a prepared transaction.
async fn complete(
    c: XactCompletion,
    status: u8,
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<()> {
    m.note_xact_end(c.xact_time);
    let mut xids = c.subxacts;
    xids.push(c.xid);
    xids.sort_unstable_by_key(|x| x / CLOG_XACTS_PER_PAGE);
    for chunk in xids.chunk_by(|a, b| a / CLOG_XACTS_PER_PAGE == b / CLOG_XACTS_PER_PAGE) {
        let (segno, rpageno) = segment_of_page(chunk[0] / CLOG_XACTS_PER_PAGE);
        let set = Record::ClogSetStatus { xids: chunk.to_vec(), status };
        m.put_slru_value(SlruKind::Clog, segno, rpageno, Value::Record(set)).await?;
    }
    for loc in &c.dropped_rels {
        for fork in FORKS {
            m.put_rel_drop(rel(*loc, fork)).await?;
        }
    }
    if c.prepared {
        m.drop_twophase_file(c.xid).await?;
    }
    Ok(())
}

async fn database(r: DatabaseRecord, m: &mut DatadirModification<'_>) -> anyhow::Result<()> {
    match r {
        DatabaseRecord::CreateFileCopy { db_oid, spc_oid, src_db_oid, src_spc_oid } => {
            copy_db::copy(m, (src_spc_oid, src_db_oid), (spc_oid, db_oid)).await
        }
        DatabaseRecord::CreateWalLog { db_oid, spc_oid } => {
            m.put_db_dir_creation(spc_oid, db_oid).await
        }
        DatabaseRecord::Drop { db_oid, spc_oids } => {
            for spc in spc_oids {
                m.drop_db(spc, db_oid).await?;
            }
            Ok(())
        }
    }
}

/// A tablespace changes no page; the timeline records that it exists so
/// that a base backup lays out its directory (`basebackup` module comment).
async fn tablespace(r: TablespaceRecord, m: &mut DatadirModification<'_>) -> anyhow::Result<()> {
    match r {
        TablespaceRecord::Create { spc_oid } => m.put_tablespace_creation(spc_oid).await,
        TablespaceRecord::Drop { spc_oid } => m.drop_tablespace(spc_oid).await,
    }
}

/// Returns true for a shutdown checkpoint. What a checkpoint does to the
/// counters: `checkpoint.rs`. PARAMETER_CHANGE and FPW_CHANGE change no
/// page; the receiver checks them before ingest
/// (`postgres_ffi::wal::rmgr::xlog::standby_check`).
fn xlog(r: XlogRecord, checkpoint: &mut CheckpointState) -> bool {
    match r {
        XlogRecord::Checkpoint { checkpoint: cp, shutdown } => {
            checkpoint.checkpoint(cp, shutdown);
            shutdown
        }
        XlogRecord::NextOid(oid) => {
            checkpoint.next_oid(oid);
            false
        }
        _ => false,
    }
}

/// Clear VM bits as the heap record says, one record per VM page, unless
/// the record carries an image of that VM page (which then wins).
async fn vm_clear(
    rec: &DecodedWalRecord,
    clears: &[VmClear],
    m: &mut DatadirModification<'_>,
) -> anyhow::Result<()> {
    let mut per_page: Vec<(RelTag, u32, Vec<u32>, u8)> = Vec::new();
    for c in clears {
        let heap = rel_of(&c.heap_block);
        let vm = RelTag { forknum: VM_FORK, ..heap };
        let vm_blk = c.heap_block.blkno / VM_HEAPBLOCKS_PER_PAGE;
        let has_image = rec
            .blocks
            .iter()
            .any(|b| b.image.is_some() && rel_of(&b.tag) == vm && b.tag.blkno == vm_blk);
        if has_image {
            continue;
        }
        match per_page.iter_mut().find(|(r, b, _, _)| *r == vm && *b == vm_blk) {
            Some(entry) => {
                entry.2.push(c.heap_block.blkno);
                // UPDATE clears both pages with the same flags; were they
                // ever different, clearing the union errs on "not visible".
                entry.3 |= c.flags;
            }
            None => per_page.push((vm, vm_blk, vec![c.heap_block.blkno], c.flags)),
        }
    }
    for (vm, vm_blk, heap_blknos, flags) in per_page {
        // PostgreSQL sets the flag only when the bit was set, so the VM page
        // exists; a missing one (never all-visible) needs nothing.
        if m.rel_size(vm).await?.is_some_and(|n| n > vm_blk) {
            let clear = Record::VmClearFlags { heap_blknos, flags };
            m.put_rel_value(vm, vm_blk, Value::Record(clear)).await?;
        }
    }
    Ok(())
}
