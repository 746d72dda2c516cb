//! A simulated file system for crash tests: deterministic, seeded, in
//! memory, and honest about what a power loss keeps.
//!
//! What it models:
//! - file data: writes (and `set_len`) since a file's last `sync_all` are
//!   kept apart from its durable content. On [`SimFs::crash`] each of them,
//!   in order, is kept, dropped, or torn (a random prefix of its 512-byte
//!   sectors persists), as a disk without a completed flush does;
//! - the namespace: create, mkdir, rename and remove go into one ordered
//!   journal. `fsync_dir(d)` makes durable every journal entry up to the
//!   last one touching `d` (an ordered-journal file system, like ext4 with
//!   `data=ordered`). On a crash a random prefix of the rest survives: a
//!   file whose directory was never fsynced may vanish, a rename not
//!   followed by an fsync of its directory may be undone;
//! - power loss in the middle of work: after [`SimFs::power_off_after`]
//!   operations every operation fails until the crash;
//! - a missing fsync: [`SimFs::skip_sync_matching`] turns the `sync_all` of
//!   a matching file, or the `fsync_dir` after an operation on a matching
//!   path, into a no-op, to show a test notices;
//! - typed faults ([`SimFs::inject`]): ENOSPC or EIO at any operation,
//!   chosen by kind ([`OpKind`]), path and count (skip the first `n`
//!   matching operations, then fail `times` of them), the way raft-engine's
//!   failpoints fail one file operation. A failed write stores a random
//!   sector prefix of its data (as a short write before ENOSPC does) and is
//!   otherwise not applied; every other failed operation changes nothing.
//!
//! What it does not model: reordering of writes within one file's unsynced
//! set beyond keep/drop/tear, bit rot of synced data, latency. After a crash
//! every `File` opened before it fails ("stale handle").
//!
//! Concurrency: one mutex over the whole state; every operation is atomic
//! with respect to the others. Operations never await.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{DirEntry, OpenMode};

mod faults;
pub use faults::{Fault, FaultRule, OpKind};

const SECTOR: usize = 512;

type Ino = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    File(Ino),
    Dir,
}

type Namespace = BTreeMap<PathBuf, Entry>;

#[derive(Clone, Debug)]
enum NsOp {
    Create { path: PathBuf, ino: Ino },
    Mkdir { path: PathBuf },
    Rename { from: PathBuf, to: PathBuf },
    Remove { path: PathBuf },
}

impl NsOp {
    /// Whether an fsync of `dir` covers this operation.
    fn touches(&self, dir: &Path) -> bool {
        let parent_is = |p: &Path| p.parent() == Some(dir);
        match self {
            NsOp::Create { path, .. } | NsOp::Mkdir { path } | NsOp::Remove { path } => {
                parent_is(path)
            }
            NsOp::Rename { from, to } => parent_is(from) || parent_is(to),
        }
    }

    /// The path the operation creates, renames to or removes.
    fn target(&self) -> &Path {
        match self {
            NsOp::Create { path, .. } | NsOp::Mkdir { path } | NsOp::Remove { path } => path,
            NsOp::Rename { to, .. } => to,
        }
    }

    fn apply(&self, ns: &mut Namespace) {
        match self {
            NsOp::Create { path, ino } => {
                ns.insert(path.clone(), Entry::File(*ino));
            }
            NsOp::Mkdir { path } => {
                ns.insert(path.clone(), Entry::Dir);
            }
            NsOp::Rename { from, to } => {
                let moved: Vec<(PathBuf, Entry)> = ns
                    .range(from.clone()..)
                    .take_while(|(p, _)| p.starts_with(from))
                    .map(|(p, e)| (p.clone(), e.clone()))
                    .collect();
                remove_tree(ns, to);
                for (p, e) in moved {
                    ns.remove(&p);
                    let rel = p.strip_prefix(from).expect("under from");
                    let dest = if rel.as_os_str().is_empty() { to.clone() } else { to.join(rel) };
                    ns.insert(dest, e);
                }
            }
            NsOp::Remove { path } => remove_tree(ns, path),
        }
    }
}

fn remove_tree(ns: &mut Namespace, path: &Path) {
    let doomed: Vec<PathBuf> = ns
        .range(path.to_path_buf()..)
        .take_while(|(p, _)| p.starts_with(path))
        .map(|(p, _)| p.clone())
        .collect();
    for p in doomed {
        ns.remove(&p);
    }
}

#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Default)]
struct Node {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Pending>,
}

fn apply_write(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset as usize..end].copy_from_slice(data);
}

struct State {
    rng: StdRng,
    nodes: HashMap<Ino, Node>,
    next_ino: Ino,
    volatile: Namespace,
    durable: Namespace,
    journal: Vec<NsOp>,
    /// Bumped by every crash; handles of older generations are stale.
    generation: u64,
    /// Operations left before the simulated power loss.
    ops_until_power_off: Option<u64>,
    skip_sync: Option<faults::PathPred>,
    crashes: u64,
    faults: faults::Faults,
}

/// The simulated file system; share it as `Arc<SimFs>` between the engine
/// ([`crate::IoEngine::simulated`]) and the test that crashes it.
pub struct SimFs {
    state: Mutex<State>,
}

impl std::fmt::Debug for SimFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimFs").field("crashes", &self.crash_count()).finish_non_exhaustive()
    }
}

/// An open file of the simulated file system.
pub(crate) struct SimFile {
    fs: Arc<SimFs>,
    ino: Ino,
    generation: u64,
    writable: bool,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

impl SimFs {
    /// An empty file system with the root directory `/`.
    pub fn new(seed: u64) -> Arc<SimFs> {
        let mut root = Namespace::new();
        root.insert(PathBuf::from("/"), Entry::Dir);
        Arc::new(SimFs {
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                nodes: HashMap::new(),
                next_ino: 1,
                volatile: root.clone(),
                durable: root,
                journal: Vec::new(),
                generation: 0,
                ops_until_power_off: None,
                skip_sync: None,
                crashes: 0,
                faults: faults::Faults::default(),
            }),
        })
    }

    /// Every operation after the next `n` fails (a power loss in the middle
    /// of work), until [`Self::crash`].
    pub fn power_off_after(&self, n: u64) {
        self.state.lock().unwrap().ops_until_power_off = Some(n);
    }

    /// Whether the power is off (an operation has failed for it).
    pub fn is_powered_off(&self) -> bool {
        self.state.lock().unwrap().ops_until_power_off == Some(0)
    }

    /// Make an fsync a no-op, the simulated removal of that fsync from the
    /// code: `sync_all` of a file whose path matches, and `fsync_dir` whose
    /// latest unsynced operation in the directory (e.g. the rename it is
    /// meant to make durable) targets a matching path.
    pub fn skip_sync_matching(&self, pred: impl Fn(&Path) -> bool + Send + 'static) {
        self.state.lock().unwrap().skip_sync = Some(Box::new(pred));
    }

    /// Simulated crashes so far.
    pub fn crash_count(&self) -> u64 {
        self.state.lock().unwrap().crashes
    }

    /// A power loss: keep what was made durable, and of the rest only what
    /// the rules of the module comment allow; power comes back on.
    pub fn crash(&self) {
        let mut guard = self.state.lock().unwrap();
        let st = &mut *guard;
        let keep = st.rng.gen_range(0..=st.journal.len());
        for op in st.journal.drain(..keep) {
            op.apply(&mut st.durable);
        }
        st.journal.clear();
        st.volatile = st.durable.clone();
        for node in st.nodes.values_mut() {
            let mut content = std::mem::take(&mut node.durable);
            for p in node.pending.drain(..) {
                match (p, st.rng.gen_range(0..3)) {
                    (_, 0) => {} // lost
                    (Pending::SetLen(len), _) => content.resize(len as usize, 0),
                    (Pending::Write { offset, data }, 1) => {
                        apply_write(&mut content, offset, &data)
                    }
                    (Pending::Write { offset, data }, _) => {
                        let sectors = data.len().div_ceil(SECTOR);
                        let n = st.rng.gen_range(0..=sectors) * SECTOR;
                        apply_write(&mut content, offset, &data[..n.min(data.len())]);
                    }
                }
            }
            node.current = content.clone();
            node.durable = content;
        }
        let live: std::collections::HashSet<Ino> = st
            .durable
            .values()
            .filter_map(|e| if let Entry::File(i) = e { Some(*i) } else { None })
            .collect();
        st.nodes.retain(|ino, _| live.contains(ino));
        st.generation += 1;
        st.ops_until_power_off = None;
        st.crashes += 1;
    }

    /// Fail operations as `rule` says (see the module comment); rules are
    /// checked in the order they were injected, the first that fires wins.
    pub fn inject(&self, rule: FaultRule) {
        self.state.lock().unwrap().faults.add(rule);
    }

    /// Remove every injected fault (the disk has space again, the device
    /// is back).
    pub fn clear_faults(&self) {
        self.state.lock().unwrap().faults.clear();
    }

    /// Injected faults that have fired so far.
    pub fn faults_fired(&self) -> u64 {
        self.state.lock().unwrap().faults.fired()
    }

    /// Count one operation against the power-off budget, then against the
    /// injected faults.
    fn op(&self, kind: OpKind, path: &Path) -> io::Result<std::sync::MutexGuard<'_, State>> {
        let mut st = self.state.lock().unwrap();
        if let Some(n) = st.ops_until_power_off.as_mut() {
            if *n == 0 {
                return Err(io::Error::other(format!(
                    "{} {}: simulated power loss",
                    kind.name(),
                    path.display()
                )));
            }
            *n -= 1;
        }
        if let Some(fault) = st.faults.check(kind, path) {
            return Err(fault.error(kind, path));
        }
        Ok(st)
    }

    pub(crate) fn open(self: &Arc<Self>, path: &Path, mode: OpenMode) -> io::Result<SimFile> {
        let mut st = self.op(OpKind::Open, path)?;
        let ino = match st.volatile.get(path).cloned() {
            Some(Entry::Dir) => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("open {}: is a directory", path.display()),
                ))
            }
            Some(Entry::File(_)) if mode.create_new => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("open {}: file exists", path.display()),
                ))
            }
            Some(Entry::File(ino)) => ino,
            None if mode.create || mode.create_new => {
                require_dir(&st.volatile, path.parent().unwrap_or(Path::new("/")), path)?;
                let ino = st.next_ino;
                st.next_ino += 1;
                st.nodes.insert(ino, Node::default());
                let op = NsOp::Create { path: path.to_path_buf(), ino };
                op.apply(&mut st.volatile);
                st.journal.push(op);
                ino
            }
            None => return Err(not_found(path)),
        };
        if mode.truncate {
            let node = st.nodes.get_mut(&ino).expect("live inode");
            node.current.clear();
            node.pending.push(Pending::SetLen(0));
        }
        Ok(SimFile { fs: self.clone(), ino, generation: st.generation, writable: mode.write })
    }

    pub(crate) fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.op(OpKind::CreateDir, path)?;
        let mut missing = Vec::new();
        let mut p = Some(path);
        while let Some(dir) = p {
            match st.volatile.get(dir) {
                Some(Entry::Dir) => break,
                Some(Entry::File(_)) => {
                    return Err(io::Error::other(format!("{}: not a directory", dir.display())))
                }
                None => missing.push(dir.to_path_buf()),
            }
            p = dir.parent();
        }
        for dir in missing.into_iter().rev() {
            let op = NsOp::Mkdir { path: dir };
            op.apply(&mut st.volatile);
            st.journal.push(op);
        }
        Ok(())
    }

    pub(crate) fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let st = self.op(OpKind::ReadDir, path)?;
        require_dir(&st.volatile, path, path)?;
        Ok(st
            .volatile
            .range(path.to_path_buf()..)
            .skip(1)
            .take_while(|(p, _)| p.starts_with(path))
            .filter(|(p, _)| p.parent() == Some(path))
            .map(|(p, e)| DirEntry {
                name: p.file_name().expect("named").to_owned(),
                is_dir: *e == Entry::Dir,
            })
            .collect())
    }

    pub(crate) fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.op(OpKind::Stat, path)?.volatile.contains_key(path))
    }

    pub(crate) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.op(OpKind::Rename, from)?;
        if !st.volatile.contains_key(from) {
            return Err(not_found(from));
        }
        require_dir(&st.volatile, to.parent().unwrap_or(Path::new("/")), to)?;
        let op = NsOp::Rename { from: from.to_path_buf(), to: to.to_path_buf() };
        op.apply(&mut st.volatile);
        st.journal.push(op);
        Ok(())
    }

    pub(crate) fn remove(&self, path: &Path, dir_ok: bool) -> io::Result<()> {
        let mut st = self.op(OpKind::Remove, path)?;
        match st.volatile.get(path) {
            None => return Err(not_found(path)),
            Some(Entry::Dir) if !dir_ok => {
                return Err(io::Error::other(format!("remove {}: is a directory", path.display())))
            }
            _ => {}
        }
        let op = NsOp::Remove { path: path.to_path_buf() };
        op.apply(&mut st.volatile);
        st.journal.push(op);
        Ok(())
    }

    pub(crate) fn fsync_dir(&self, path: &Path) -> io::Result<()> {
        let mut guard = self.op(OpKind::FsyncDir, path)?;
        let st = &mut *guard;
        require_dir(&st.volatile, path, path)?;
        if let Some(last) = st.journal.iter().rposition(|op| op.touches(path)) {
            if st.skip_sync.as_ref().is_some_and(|f| f(st.journal[last].target())) {
                return Ok(());
            }
            for op in st.journal.drain(..=last) {
                op.apply(&mut st.durable);
            }
        }
        Ok(())
    }
}

fn require_dir(ns: &Namespace, dir: &Path, for_path: &Path) -> io::Result<()> {
    match ns.get(dir) {
        Some(Entry::Dir) => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: directory {} does not exist", for_path.display(), dir.display()),
        )),
    }
}

impl SimFile {
    /// The node, if the handle is from this generation and power is on.
    fn with_node<T>(
        &self,
        kind: OpKind,
        path: &Path,
        f: impl FnOnce(&mut Node, &mut State) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut guard = self.fs.op(kind, path)?;
        let st = &mut *guard;
        if st.generation != self.generation {
            return Err(io::Error::other(format!(
                "{} {}: stale handle after a crash",
                kind.name(),
                path.display()
            )));
        }
        let mut node = st.nodes.remove(&self.ino).ok_or_else(|| not_found(path))?;
        let res = f(&mut node, st);
        st.nodes.insert(self.ino, node);
        res
    }

    /// The node without counting an operation (the partial effect of one
    /// that failed); nothing happens if the handle is stale or the node gone.
    fn with_node_unchecked(&self, f: impl FnOnce(&mut Node, &mut State)) {
        let mut guard = self.fs.state.lock().unwrap();
        let st = &mut *guard;
        if st.generation != self.generation {
            return;
        }
        if let Some(mut node) = st.nodes.remove(&self.ino) {
            f(&mut node, st);
            st.nodes.insert(self.ino, node);
        }
    }

    pub fn read_exact_at(&self, path: &Path, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with_node(OpKind::Read, path, |node, _| {
            let end = offset as usize + buf.len();
            if end > node.current.len() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "failed to fill whole buffer",
                ));
            }
            buf.copy_from_slice(&node.current[offset as usize..end]);
            Ok(())
        })
    }

    pub fn write_all_at(&self, path: &Path, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "opened read-only"));
        }
        let res = self.with_node(OpKind::Write, path, |node, _| {
            apply_write(&mut node.current, offset, buf);
            node.pending.push(Pending::Write { offset, data: buf.to_vec() });
            Ok(())
        });
        match res {
            Err(e) if faults::is_injected(&e) => {
                // A short write before the error: a random sector prefix lands.
                self.with_node_unchecked(|node, st| {
                    let n =
                        (st.rng.gen_range(0..=buf.len().div_ceil(SECTOR)) * SECTOR).min(buf.len());
                    if n > 0 {
                        apply_write(&mut node.current, offset, &buf[..n]);
                        node.pending.push(Pending::Write { offset, data: buf[..n].to_vec() });
                    }
                });
                Err(e)
            }
            res => res,
        }
    }

    pub fn sync_all(&self, path: &Path) -> io::Result<()> {
        self.with_node(OpKind::Fsync, path, |node, st| {
            if !st.skip_sync.as_ref().is_some_and(|f| f(path)) {
                node.durable = node.current.clone();
                node.pending.clear();
            }
            Ok(())
        })
    }

    pub fn len(&self, path: &Path) -> io::Result<u64> {
        self.with_node(OpKind::Stat, path, |node, _| Ok(node.current.len() as u64))
    }

    pub fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.with_node(OpKind::SetLen, path, |node, _| {
            node.current.resize(len as usize, 0);
            node.pending.push(Pending::SetLen(len));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
