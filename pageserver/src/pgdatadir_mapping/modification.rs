//! `DatadirModification`: buffered PostgreSQL-level changes at one or more
//! increasing LSNs (one per WAL record), committed through the timeline
//! writer at once.
//!
//! Lifecycle: `Timeline::begin_modification(lsn)` -> `put_*` / `drop_*`
//! [-> `set_lsn(next)` -> `put_*` ...] -> `commit()`. `set_lsn` seals the
//! current LSN: its derived values (zero-fill, sizes, directories) are
//! written at it, and the state reached becomes the next LSN's starting
//! point; reads inside the modification see every pending change. Page values are buffered and written with
//! `TimelineWriter::put_batch` whenever more than `FLUSH_BYTES` are pending
//! (so a base-backup import of any size runs in bounded memory); directory,
//! size and bookkeeping values are kept in memory and written when their
//! LSN is sealed, and the commit ends with one `finish_write(last lsn)`.
//! Until then readers see nothing of the modification's LSNs. A modification dropped without commit, or whose write
//! failed, leaves nothing behind (the timeline writer abandons its
//! unfinished LSNs); the caller abandons the timeline or retries the same
//! LSNs' changes.
//!
//! Contract: one modification at a time per timeline (it is the ingest path;
//! the timeline writer lock serializes the actual writes). The state before
//! the modification is read at `last_record_lsn` as of `begin_modification`.
//! One value per key per LSN: a second put of a key still buffered at the
//! same LSN replaces the first; a second write of a relation block at the
//! same LSN after it was flushed is refused.
//!
//! Relation sizes: a page write past the end extends the relation (creating
//! it if needed); when an LSN is sealed, every block between the relation's
//! lowest size during that LSN and its size at the end of it that was not
//! written gets an all-zero image, so pages left over from before a
//! truncation or drop never reappear. Size changes go into the size cache
//! before `finish_write`, each at the LSN of the relation's last change (an
//! older entry must not answer for LSNs between two changes).

use std::collections::HashMap;

use crate::tenant::commit_times::CommitTime;
use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use pageserver_api::key::Key;
use pageserver_api::reltag::{RelTag, SlruKind};
use utils::lsn::Lsn;

use super::reads::{read_dbdir, read_reldir, read_slru_dir, rel_size_opt, slru_segment_size};
use super::{
    encode_size, get_one, zero_page, DbDirectory, RelDirectory, SlruDirectory, TwoPhaseDirectory,
    BLCKSZ,
};
use crate::tenant::value::Value;
use crate::tenant::{ReadKind, Timeline, TimelineWriter};

/// Buffered page bytes that trigger a `put_batch`.
pub const FLUSH_BYTES: usize = 8 * 1024 * 1024;

/// Blocks written in this modification, at or above `base`.
#[derive(Debug, Default)]
struct BlockSet {
    base: u32,
    words: Vec<u64>,
}

impl BlockSet {
    fn new(base: u32) -> Self {
        BlockSet { base, words: Vec::new() }
    }

    /// Mark `blk`; false if it was already marked.
    fn insert(&mut self, blk: u32) -> bool {
        debug_assert!(blk >= self.base);
        let i = (blk - self.base) as usize;
        if self.words.len() <= i / 64 {
            self.words.resize(i / 64 + 1, 0);
        }
        let bit = 1u64 << (i % 64);
        let fresh = self.words[i / 64] & bit == 0;
        self.words[i / 64] |= bit;
        fresh
    }

    fn contains(&self, blk: u32) -> bool {
        if blk < self.base {
            return false;
        }
        let i = (blk - self.base) as usize;
        self.words.get(i / 64).is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    /// Is any block `>= blk` marked?
    fn any_at_or_above(&self, blk: u32) -> bool {
        let from = blk.saturating_sub(self.base) as usize;
        (from / 64..self.words.len()).any(|w| {
            let mask = if w == from / 64 { !0u64 << (from % 64) } else { !0u64 };
            self.words[w] & mask != 0
        })
    }
}

#[derive(Debug)]
struct RelState {
    /// Size before this modification; `None`: did not exist.
    before: Option<u32>,
    /// Current size; `None`: does not exist (dropped or never created).
    size: Option<u32>,
    /// Lowest size during this modification: blocks from here up to `size`
    /// must be written or get zero-filled at commit.
    low: u32,
    written: BlockSet,
}

impl RelState {
    fn new(before: Option<u32>) -> Self {
        let low = before.unwrap_or(0);
        RelState { before, size: before, low, written: BlockSet::new(low) }
    }
}

#[derive(Debug, Clone, Copy)]
struct SegState {
    before: Option<u32>,
    size: Option<u32>,
}

pub struct DatadirModification<'t> {
    tl: &'t Timeline,
    /// Taken at the first flush and held until commit, so the LSN's values
    /// are written under one writer lock (no other writer can interleave).
    writer: Option<TimelineWriter<'t>>,
    lsn: Lsn,
    /// Where the state before this modification is read.
    base_lsn: Lsn,
    pending: Vec<(Key, Lsn, Value)>,
    pending_index: HashMap<Key, usize>,
    pending_bytes: usize,
    dbdir: Option<(DbDirectory, bool)>,
    /// (spc, db) -> (relations, or `None` if the database does not exist; dirty)
    reldirs: HashMap<(u32, u32), (Option<RelDirectory>, bool)>,
    rels: HashMap<RelTag, RelState>,
    slru_dirs: HashMap<SlruKind, (SlruDirectory, bool)>,
    slru_segs: HashMap<(SlruKind, u32), SegState>,
    twophase: Option<(TwoPhaseDirectory, bool)>,
    /// Size changes of LSNs already sealed: rel -> (LSN of its last change,
    /// size), for the size cache at commit.
    sealed_sizes: HashMap<RelTag, (Lsn, Option<u32>)>,
    /// Transactions that ended in this modification, for the timeline's
    /// commit-time index at commit.
    xact_times: Vec<CommitTime>,
}

fn value_bytes(v: &Value) -> usize {
    match v {
        Value::Image(b) => b.len(),
        Value::WalImage(_) | Value::Record(_) => v.serialized_len(),
    }
}

impl<'t> DatadirModification<'t> {
    pub fn new(tl: &'t Timeline, lsn: Lsn) -> Self {
        DatadirModification {
            tl,
            writer: None,
            lsn,
            base_lsn: tl.get_last_record_lsn(),
            pending: Vec::new(),
            pending_index: HashMap::new(),
            pending_bytes: 0,
            dbdir: None,
            reldirs: HashMap::new(),
            rels: HashMap::new(),
            slru_dirs: HashMap::new(),
            slru_segs: HashMap::new(),
            twophase: None,
            sealed_sizes: HashMap::new(),
            xact_times: Vec::new(),
        }
    }

    /// Move on to the next record's LSN: the changes made so far are sealed
    /// at the current LSN (sizes, zero-fill, directories written there), and
    /// later changes go to `lsn`. Reads inside the modification keep seeing
    /// every pending change. Panics unless `lsn` is above the current one.
    pub async fn set_lsn(&mut self, lsn: Lsn) -> anyhow::Result<()> {
        assert!(lsn > self.lsn, "modification LSNs must increase: {} then {lsn}", self.lsn);
        self.seal_current_lsn().await?;
        self.lsn = lsn;
        self.pending_index.clear();
        Ok(())
    }

    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Bytes of values buffered and not yet written.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    fn push(&mut self, key: Key, value: Value) {
        self.pending_bytes += value_bytes(&value);
        match self.pending_index.get(&key) {
            Some(&i) => {
                self.pending_bytes -= value_bytes(&self.pending[i].2);
                self.pending[i].2 = value;
            }
            None => {
                self.pending_index.insert(key, self.pending.len());
                self.pending.push((key, self.lsn, value));
            }
        }
    }

    async fn maybe_flush(&mut self) -> anyhow::Result<()> {
        if self.pending_bytes >= FLUSH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Write the buffered values now (without finishing the LSN).
    pub async fn flush(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let w = match &mut self.writer {
            Some(w) => w,
            None => self.writer.insert(self.tl.writer().await),
        };
        w.put_batch(&self.pending)
            .await
            .with_context(|| format!("write changes at {}", self.lsn))?;
        self.pending.clear();
        self.pending_index.clear();
        self.pending_bytes = 0;
        Ok(())
    }

    // ---- loading the state before the modification ----------------------

    async fn dbdir(&mut self) -> anyhow::Result<&mut (DbDirectory, bool)> {
        if self.dbdir.is_none() {
            let dir = read_dbdir(self.tl, ReadKind::Ingest, self.base_lsn)
                .await
                .context("read the database directory")?;
            self.dbdir = Some((dir.unwrap_or_default(), false));
        }
        Ok(self.dbdir.as_mut().unwrap())
    }

    async fn reldir(
        &mut self,
        spc: u32,
        db: u32,
    ) -> anyhow::Result<&mut (Option<RelDirectory>, bool)> {
        if !self.reldirs.contains_key(&(spc, db)) {
            let dir = read_reldir(self.tl, ReadKind::Ingest, spc, db, self.base_lsn)
                .await
                .with_context(|| format!("read the relation directory of database {spc}/{db}"))?;
            self.reldirs.insert((spc, db), (dir, false));
        }
        Ok(self.reldirs.get_mut(&(spc, db)).unwrap())
    }

    async fn rel_state(&mut self, rel: RelTag) -> anyhow::Result<&mut RelState> {
        if rel.relnode == 0 {
            bail!("relation {rel}: relnode 0 is not a relation");
        }
        if !self.rels.contains_key(&rel) {
            let listed = self
                .reldir(rel.spcnode, rel.dbnode)
                .await?
                .0
                .as_ref()
                .is_some_and(|d| d.rels.contains(&(rel.relnode, rel.forknum)));
            let before = if listed {
                let size = rel_size_opt(self.tl, ReadKind::Ingest, rel, self.base_lsn).await?;
                Some(size.ok_or_else(|| {
                    anyhow!("relation {rel} is listed but has no size at {}", self.base_lsn)
                })?)
            } else {
                None
            };
            self.rels.insert(rel, RelState::new(before));
        }
        Ok(self.rels.get_mut(&rel).unwrap())
    }

    async fn slru_dir(&mut self, kind: SlruKind) -> anyhow::Result<&mut (SlruDirectory, bool)> {
        if !self.slru_dirs.contains_key(&kind) {
            let dir = read_slru_dir(self.tl, ReadKind::Ingest, kind, self.base_lsn).await?;
            self.slru_dirs.insert(kind, (dir, false));
        }
        Ok(self.slru_dirs.get_mut(&kind).unwrap())
    }

    async fn seg_state(&mut self, kind: SlruKind, segno: u32) -> anyhow::Result<&mut SegState> {
        if !self.slru_segs.contains_key(&(kind, segno)) {
            let listed = self.slru_dir(kind).await?.0.segments.contains(&segno);
            let before = if listed {
                let size = slru_segment_size(self.tl, ReadKind::Ingest, kind, segno, self.base_lsn)
                    .await?;
                Some(size.ok_or_else(|| {
                    anyhow!(
                        "SLRU segment {segno:04X} of {} is listed but has no size",
                        kind.dir_name()
                    )
                })?)
            } else {
                None
            };
            self.slru_segs.insert((kind, segno), SegState { before, size: before });
        }
        Ok(self.slru_segs.get_mut(&(kind, segno)).unwrap())
    }

    async fn twophase_dir(&mut self) -> anyhow::Result<&mut (TwoPhaseDirectory, bool)> {
        if self.twophase.is_none() {
            let dir = match get_one(self.tl, ReadKind::Ingest, Key::twophase_dir(), self.base_lsn)
                .await?
            {
                Some(v) => TwoPhaseDirectory::decode(&v)?,
                None => TwoPhaseDirectory::default(),
            };
            self.twophase = Some((dir, false));
        }
        Ok(self.twophase.as_mut().unwrap())
    }

    // ---- databases ------------------------------------------------------

    /// Write the empty top-level directories (databases, SLRUs, two-phase)
    /// that do not exist yet: the start of a new cluster's history.
    pub async fn init_empty(&mut self) -> anyhow::Result<()> {
        let d = self.dbdir().await?;
        d.1 = true;
        for kind in [SlruKind::Clog, SlruKind::MultiXactMembers, SlruKind::MultiXactOffsets] {
            self.slru_dir(kind).await?.1 = true;
        }
        self.twophase_dir().await?.1 = true;
        Ok(())
    }

    /// Make sure database (spc, db) exists, with an empty relation directory.
    pub async fn put_db_dir_creation(&mut self, spc: u32, db: u32) -> anyhow::Result<()> {
        let d = self.dbdir().await?;
        if let std::collections::btree_map::Entry::Vacant(v) = d.0.dbs.entry((spc, db)) {
            v.insert(false);
            d.1 = true;
        }
        let r = self.reldir(spc, db).await?;
        if r.0.is_none() {
            *r = (Some(RelDirectory::default()), true);
        }
        Ok(())
    }

    /// Store the `pg_filenode.map` of a database (or of the shared catalogs:
    /// spc 1664, db 0), creating the database entry if needed.
    pub async fn put_relmap_file(&mut self, spc: u32, db: u32, img: Bytes) -> anyhow::Result<()> {
        self.put_db_dir_creation(spc, db).await?;
        let d = self.dbdir().await?;
        if d.0.dbs.insert((spc, db), true) != Some(true) {
            d.1 = true;
        }
        self.push(Key::relmap_file(spc, db), Value::Image(img));
        Ok(())
    }

    /// Drop a database: all its relations, its relation directory, its entry.
    pub async fn drop_db(&mut self, spc: u32, db: u32) -> anyhow::Result<()> {
        let rels: Vec<RelTag> = match &self.reldir(spc, db).await?.0 {
            Some(dir) => dir.rels.iter().map(|&(r, f)| RelTag::new(spc, db, r, f)).collect(),
            None => Vec::new(),
        };
        for rel in rels {
            self.put_rel_drop(rel).await?;
        }
        *self.reldir(spc, db).await? = (None, true);
        let d = self.dbdir().await?;
        if d.0.dbs.remove(&(spc, db)).is_some() {
            d.1 = true;
        }
        Ok(())
    }

    /// A tablespace exists: recorded as its database 0 (an entry with an
    /// empty relation directory), which no PostgreSQL database uses outside
    /// `pg_global`; a base backup lays it out as the tablespace directory.
    pub async fn put_tablespace_creation(&mut self, spc: u32) -> anyhow::Result<()> {
        self.put_db_dir_creation(spc, 0).await
    }

    /// Drop a tablespace: every database entry in it (PostgreSQL drops only
    /// an empty tablespace, so these hold no relation; any that do are
    /// dropped with them) and the tablespace's own entry.
    pub async fn drop_tablespace(&mut self, spc: u32) -> anyhow::Result<()> {
        let dbs: Vec<u32> =
            self.dbdir().await?.0.dbs.keys().filter(|k| k.0 == spc).map(|k| k.1).collect();
        for db in dbs {
            self.drop_db(spc, db).await?;
        }
        Ok(())
    }

    // ---- relations --------------------------------------------------------

    /// Size of `rel` as of this modification so far (`None`: does not exist).
    pub async fn rel_size(&mut self, rel: RelTag) -> anyhow::Result<Option<u32>> {
        if rel.relnode == 0 {
            return Ok(None);
        }
        Ok(self.rel_state(rel).await?.size)
    }

    /// Create `rel` with `nblocks` (zero) blocks. Error if it exists.
    pub async fn put_rel_creation(&mut self, rel: RelTag, nblocks: u32) -> anyhow::Result<()> {
        let lsn = self.lsn;
        let st = self.rel_state(rel).await?;
        if st.size.is_some() {
            bail!("relation {rel} already exists at {lsn}");
        }
        st.size = Some(nblocks);
        st.low = 0;
        st.written = BlockSet::new(0);
        self.put_db_dir_creation(rel.spcnode, rel.dbnode).await?;
        let r = self.reldir(rel.spcnode, rel.dbnode).await?;
        r.0.as_mut().expect("created above").rels.insert((rel.relnode, rel.forknum));
        r.1 = true;
        Ok(())
    }

    /// The timeline this modification writes to.
    pub fn timeline(&self) -> &'t Timeline {
        self.tl
    }

    /// Store an 8 KiB page image of block `blk` of `rel`.
    pub async fn put_rel_page_image(
        &mut self,
        rel: RelTag,
        blk: u32,
        img: Bytes,
    ) -> anyhow::Result<()> {
        if img.len() != BLCKSZ {
            bail!("page image for block {blk} of {rel} is {} bytes, expected {BLCKSZ}", img.len());
        }
        self.put_rel_value(rel, blk, Value::Image(img)).await
    }

    /// Store a value (image or record) for block `blk` of `rel`. A block at
    /// or past the end extends the relation, creating it if it does not exist.
    pub async fn put_rel_value(
        &mut self,
        rel: RelTag,
        blk: u32,
        value: Value,
    ) -> anyhow::Result<()> {
        if blk == u32::MAX {
            bail!("block number {blk} of {rel} is not a valid block");
        }
        let lsn = self.lsn;
        if self.rel_state(rel).await?.size.is_none() {
            self.put_rel_creation(rel, 0).await?;
        }
        let key = Key::rel_block(rel, blk);
        let st = self.rels.get_mut(&rel).expect("loaded above");
        let size = st.size.as_mut().expect("exists");
        if blk >= *size {
            *size = blk + 1;
        }
        if blk >= st.low && !st.written.insert(blk) && !self.pending_index.contains_key(&key) {
            bail!("block {blk} of {rel} written twice at {lsn}");
        }
        self.push(key, value);
        self.maybe_flush().await
    }

    /// Record that `blocks` of `rel` were written at this LSN outside the
    /// modification (an import's image layers: `import::rel_images`), so
    /// that the commit does not zero-fill them and a second write of one of
    /// them at this LSN is refused. Extends `rel` (creating it) to cover them.
    pub async fn put_rel_blocks_written_elsewhere(
        &mut self,
        rel: RelTag,
        blocks: std::ops::Range<u32>,
    ) -> anyhow::Result<()> {
        let lsn = self.lsn;
        if self.rel_state(rel).await?.size.is_none() {
            self.put_rel_creation(rel, 0).await?;
        }
        let st = self.rels.get_mut(&rel).expect("loaded above");
        for blk in blocks.clone() {
            if blk >= st.low && !st.written.insert(blk) {
                bail!("block {blk} of {rel} written twice at {lsn}");
            }
        }
        let size = st.size.as_mut().expect("exists");
        *size = (*size).max(blocks.end);
        Ok(())
    }

    /// Grow `rel` to at least `nblocks` blocks (new blocks read as zeros).
    pub async fn put_rel_extend(&mut self, rel: RelTag, nblocks: u32) -> anyhow::Result<()> {
        let lsn = self.lsn;
        let st = self.rel_state(rel).await?;
        let size = st
            .size
            .as_mut()
            .ok_or_else(|| anyhow!("extend of relation {rel}, which does not exist at {lsn}"))?;
        if nblocks > *size {
            *size = nblocks;
        }
        Ok(())
    }

    /// Shrink `rel` to `nblocks` (no-op if it is not larger).
    pub async fn put_rel_truncation(&mut self, rel: RelTag, nblocks: u32) -> anyhow::Result<()> {
        let lsn = self.lsn;
        let st = self.rel_state(rel).await?;
        let size = st.size.ok_or_else(|| {
            anyhow!("truncation of relation {rel}, which does not exist at {lsn}")
        })?;
        if nblocks >= size {
            return Ok(());
        }
        if st.written.any_at_or_above(nblocks) {
            bail!("truncation of {rel} to {nblocks} blocks below blocks written earlier at the same LSN {lsn}");
        }
        st.size = Some(nblocks);
        if nblocks < st.low {
            st.low = nblocks;
            st.written = BlockSet::new(nblocks);
        }
        Ok(())
    }

    /// Drop `rel` (no-op if it does not exist: PostgreSQL drops all forks).
    pub async fn put_rel_drop(&mut self, rel: RelTag) -> anyhow::Result<()> {
        let st = self.rel_state(rel).await?;
        if st.size.take().is_none() {
            return Ok(());
        }
        let r = self.reldir(rel.spcnode, rel.dbnode).await?;
        if let Some(dir) = r.0.as_mut() {
            dir.rels.remove(&(rel.relnode, rel.forknum));
            r.1 = true;
        }
        Ok(())
    }

    // ---- SLRUs --------------------------------------------------------------

    /// Create (or reset the size of) an SLRU segment with `nblocks` blocks.
    pub async fn put_slru_segment_creation(
        &mut self,
        kind: SlruKind,
        segno: u32,
        nblocks: u32,
    ) -> anyhow::Result<()> {
        self.seg_state(kind, segno).await?.size = Some(nblocks);
        let d = self.slru_dir(kind).await?;
        if d.0.segments.insert(segno) {
            d.1 = true;
        }
        Ok(())
    }

    pub async fn put_slru_page_image(
        &mut self,
        kind: SlruKind,
        segno: u32,
        blk: u32,
        img: Bytes,
    ) -> anyhow::Result<()> {
        if img.len() != BLCKSZ {
            bail!(
                "page image for block {blk} of SLRU segment {segno:04X} of {} is {} bytes",
                kind.dir_name(),
                img.len()
            );
        }
        self.put_slru_value(kind, segno, blk, Value::Image(img)).await
    }

    /// Store a value for an SLRU block; extends (or creates) the segment.
    pub async fn put_slru_value(
        &mut self,
        kind: SlruKind,
        segno: u32,
        blk: u32,
        value: Value,
    ) -> anyhow::Result<()> {
        if blk >= super::SLRU_PAGES_PER_SEGMENT {
            bail!(
                "block {blk} of SLRU segment {segno:04X} of {} is beyond a segment",
                kind.dir_name()
            );
        }
        if self.seg_state(kind, segno).await?.size.is_none() {
            self.put_slru_segment_creation(kind, segno, 0).await?;
        }
        let st = self.slru_segs.get_mut(&(kind, segno)).expect("loaded above");
        let size = st.size.as_mut().expect("exists");
        if blk >= *size {
            *size = blk + 1;
        }
        self.push(Key::slru_block(kind, segno, blk), value);
        self.maybe_flush().await
    }

    /// SLRU segments of `kind` as of this modification so far.
    pub async fn slru_segments(&mut self, kind: SlruKind) -> anyhow::Result<Vec<u32>> {
        Ok(self.slru_dir(kind).await?.0.segments.iter().copied().collect())
    }

    /// The timeline and the LSN of the committed state this modification
    /// builds on (its pending changes are not visible there).
    pub fn committed_view(&self) -> (&'t Timeline, Lsn) {
        (self.tl, self.base_lsn)
    }

    pub async fn drop_slru_segment(&mut self, kind: SlruKind, segno: u32) -> anyhow::Result<()> {
        self.seg_state(kind, segno).await?.size = None;
        let d = self.slru_dir(kind).await?;
        if d.0.segments.remove(&segno) {
            d.1 = true;
        }
        Ok(())
    }

    // ---- two-phase state, control data -----------------------------------

    pub async fn put_twophase_file(&mut self, xid: u32, img: Bytes) -> anyhow::Result<()> {
        let d = self.twophase_dir().await?;
        if d.0.xids.insert(xid) {
            d.1 = true;
        }
        self.push(Key::twophase_file(xid), Value::Image(img));
        Ok(())
    }

    pub async fn drop_twophase_file(&mut self, xid: u32) -> anyhow::Result<()> {
        let d = self.twophase_dir().await?;
        if d.0.xids.remove(&xid) {
            d.1 = true;
            self.push(Key::twophase_file(xid), Value::Image(Bytes::new()));
        }
        Ok(())
    }

    /// A transaction ended at the current LSN at time `ts` (PostgreSQL
    /// microseconds): added to the commit-time index at commit.
    pub fn note_xact_end(&mut self, ts: i64) {
        self.xact_times.push(CommitTime { lsn: self.lsn, ts });
    }

    /// The `pg_control` file as PostgreSQL wrote it.
    pub fn put_control_file(&mut self, img: Bytes) {
        self.push(Key::control_file(), Value::Image(img));
    }

    /// The latest checkpoint (PostgreSQL's `CheckPoint` struct bytes).
    pub fn put_checkpoint(&mut self, img: Bytes) {
        self.push(Key::checkpoint(), Value::Image(img));
    }

    // ---- commit -------------------------------------------------------------

    /// Write the derived values of the current LSN (zero-fill, sizes,
    /// directories) at that LSN, then start the next LSN's bookkeeping from
    /// the state reached (see the module comment).
    async fn seal_current_lsn(&mut self) -> anyhow::Result<()> {
        let lsn = self.lsn;

        // Zero-fill blocks between each relation's low-water size and its
        // final size that were not written (see the module comment).
        let mut gaps: Vec<(RelTag, u32, u32)> = Vec::new();
        for (rel, st) in &self.rels {
            if let Some(size) = st.size {
                if size > st.low {
                    gaps.push((*rel, st.low, size));
                }
            }
        }
        for (rel, low, size) in gaps {
            for blk in low..size {
                if !self.rels[&rel].written.contains(blk) {
                    self.push(Key::rel_block(rel, blk), Value::Image(zero_page()));
                    self.maybe_flush().await?;
                }
            }
        }

        // Sizes.
        let mut size_changes: Vec<(RelTag, Option<u32>)> = Vec::new();
        for (rel, st) in &self.rels {
            if st.size != st.before {
                size_changes.push((*rel, st.size));
            }
        }
        for &(rel, size) in &size_changes {
            self.push(Key::rel_size(rel), Value::Image(size.map(encode_size).unwrap_or_default()));
        }
        let seg_changes: Vec<_> = self
            .slru_segs
            .iter()
            .filter(|(_, s)| s.size != s.before)
            .map(|(&k, s)| (k, s.size))
            .collect();
        for ((kind, segno), size) in seg_changes {
            self.push(
                Key::slru_segment_size(kind, segno),
                Value::Image(size.map(encode_size).unwrap_or_default()),
            );
        }

        // Directories.
        let mut dirs: Vec<(Key, Bytes)> = Vec::new();
        if let Some((d, true)) = &self.dbdir {
            dirs.push((Key::dbdir(), d.encode()));
        }
        for (&(spc, db), (d, dirty)) in &self.reldirs {
            if *dirty {
                dirs.push((
                    Key::rel_dir(spc, db),
                    d.as_ref().map(|d| d.encode()).unwrap_or_default(),
                ));
            }
        }
        for (&kind, (d, dirty)) in &self.slru_dirs {
            if *dirty {
                dirs.push((Key::slru_dir(kind), d.encode()));
            }
        }
        if let Some((d, true)) = &self.twophase {
            dirs.push((Key::twophase_dir(), d.encode()));
        }
        for (k, v) in dirs {
            self.push(k, Value::Image(v));
        }
        for (rel, size) in size_changes {
            self.sealed_sizes.insert(rel, (lsn, size));
        }
        self.reset_bookkeeping();
        Ok(())
    }

    /// After a seal: the state reached is the next LSN's "before".
    fn reset_bookkeeping(&mut self) {
        for st in self.rels.values_mut() {
            *st = RelState::new(st.size);
        }
        for seg in self.slru_segs.values_mut() {
            seg.before = seg.size;
        }
        if let Some((_, dirty)) = &mut self.dbdir {
            *dirty = false;
        }
        for (_, dirty) in self.reldirs.values_mut() {
            *dirty = false;
        }
        for (_, dirty) in self.slru_dirs.values_mut() {
            *dirty = false;
        }
        if let Some((_, dirty)) = &mut self.twophase {
            *dirty = false;
        }
    }

    /// Write everything and finish the last LSN: readers see all LSNs of
    /// the modification at once.
    pub async fn commit(mut self) -> anyhow::Result<()> {
        self.seal_current_lsn().await?;
        let lsn = self.lsn;

        // Store, publish sizes to the cache, then finish the LSN.
        let mut w = match self.writer.take() {
            Some(w) => w,
            None => self.tl.writer().await,
        };
        if !self.pending.is_empty() {
            w.put_batch(&self.pending).await.with_context(|| format!("write changes at {lsn}"))?;
        }
        // Each relation's entry at the LSN of its last change: an older entry
        // must not answer for LSNs between two changes of this modification.
        let mut by_lsn: HashMap<Lsn, Vec<(RelTag, Option<u32>)>> = HashMap::new();
        for (rel, (at, size)) in std::mem::take(&mut self.sealed_sizes) {
            by_lsn.entry(at).or_default().push((rel, size));
        }
        for (at, changes) in by_lsn {
            self.tl.rel_size_cache.update(changes.into_iter(), at);
        }
        // Before `finish_write`: see the contract in `commit_times.rs`.
        self.tl.commit_times.record(std::mem::take(&mut self.xact_times));
        w.finish_write(lsn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_set() {
        let mut s = BlockSet::new(10);
        assert!(s.insert(10));
        assert!(!s.insert(10));
        assert!(s.insert(200));
        assert!(s.contains(200) && s.contains(10) && !s.contains(11) && !s.contains(5));
        assert!(s.any_at_or_above(0));
        assert!(s.any_at_or_above(200));
        assert!(!s.any_at_or_above(201));
        assert!(s.any_at_or_above(11));
        let e = BlockSet::new(0);
        assert!(!e.any_at_or_above(0));
    }
}
