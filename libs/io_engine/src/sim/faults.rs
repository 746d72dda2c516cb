//! Typed faults of the simulated file system: which operations fail, and
//! with what error.
//!
//! A [`FaultRule`] matches operations by kind (or any kind) and path (or
//! any path); it lets the first `skip` matching operations pass, then fails
//! the next `times` of them (or every one, `forever`). Rules are checked in
//! the order they were added; the first that fires wins, and every rule
//! that matches counts the operation. An injected error has the kind a real
//! one has (`StorageFull` for ENOSPC, `Other` for EIO) and says it was
//! injected, so a test can tell it from a bug.

use std::fmt;
use std::io;
use std::path::Path;

/// The operations a fault can target (every operation of the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    Open,
    Read,
    Write,
    Fsync,
    SetLen,
    Stat,
    CreateDir,
    ReadDir,
    Rename,
    Remove,
    FsyncDir,
}

impl OpKind {
    pub const ALL: [OpKind; 11] = [
        OpKind::Open,
        OpKind::Read,
        OpKind::Write,
        OpKind::Fsync,
        OpKind::SetLen,
        OpKind::Stat,
        OpKind::CreateDir,
        OpKind::ReadDir,
        OpKind::Rename,
        OpKind::Remove,
        OpKind::FsyncDir,
    ];

    /// The name used in error messages (as the real engines' errors).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Open => "open",
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Fsync => "fsync",
            OpKind::SetLen => "set_len",
            OpKind::Stat => "stat",
            OpKind::CreateDir => "create directory",
            OpKind::ReadDir => "list",
            OpKind::Rename => "rename",
            OpKind::Remove => "remove",
            OpKind::FsyncDir => "fsync directory",
        }
    }
}

/// The error an injected fault fails an operation with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// ENOSPC: no space left on the device.
    NoSpace,
    /// EIO: the device failed the operation.
    Io,
}

/// Marks an injected error (its `get_ref`), so the sim can tell its own
/// faults apart from other failures.
#[derive(Debug)]
struct Injected {
    fault: Fault,
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.fault {
            Fault::NoSpace => "no space left on device (injected ENOSPC)",
            Fault::Io => "input/output error (injected EIO)",
        };
        f.write_str(what)
    }
}

impl std::error::Error for Injected {}

impl Fault {
    /// The error of `op` on `path`. The engine names the operation and the
    /// path of every error but an open's, so only an open's names them here.
    pub(crate) fn error(self, op: OpKind, path: &Path) -> io::Error {
        let kind = match self {
            Fault::NoSpace => io::ErrorKind::StorageFull,
            Fault::Io => io::ErrorKind::Other,
        };
        let injected = Injected { fault: self };
        if op == OpKind::Open {
            return io::Error::new(kind, format!("open {}: {injected}", path.display()));
        }
        io::Error::new(kind, injected)
    }
}

pub(crate) fn is_injected(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Injected>())
}

/// A predicate over paths.
pub(crate) type PathPred = Box<dyn Fn(&Path) -> bool + Send>;

/// Which operations fail; see the module comment.
pub struct FaultRule {
    fault: Fault,
    op: Option<OpKind>,
    path: Option<PathPred>,
    skip: u64,
    /// `None`: every matching operation after the skipped ones.
    times: Option<u64>,
}

impl FaultRule {
    /// Fail the next matching operation once (narrow it with the builders).
    pub fn new(fault: Fault) -> FaultRule {
        FaultRule { fault, op: None, path: None, skip: 0, times: Some(1) }
    }

    /// Only operations of this kind.
    pub fn on(mut self, op: OpKind) -> FaultRule {
        self.op = Some(op);
        self
    }

    /// Only operations on paths `pred` accepts (for a rename: its source).
    pub fn matching(mut self, pred: impl Fn(&Path) -> bool + Send + 'static) -> FaultRule {
        self.path = Some(Box::new(pred));
        self
    }

    /// Let the first `n` matching operations succeed: `skip(n - 1)` fails
    /// the n-th.
    pub fn skip(mut self, n: u64) -> FaultRule {
        self.skip = n;
        self
    }

    /// Fail `n` matching operations (after the skipped ones), then none.
    pub fn times(mut self, n: u64) -> FaultRule {
        self.times = Some(n);
        self
    }

    /// Fail every matching operation (after the skipped ones) until
    /// `SimFs::clear_faults`: a full disk that stays full.
    pub fn forever(mut self) -> FaultRule {
        self.times = None;
        self
    }

    fn matches(&self, op: OpKind, path: &Path) -> bool {
        self.op.is_none_or(|o| o == op) && self.path.as_ref().is_none_or(|p| p(path))
    }
}

#[derive(Default)]
pub(crate) struct Faults {
    rules: Vec<FaultRule>,
    fired: u64,
}

impl Faults {
    pub(crate) fn add(&mut self, rule: FaultRule) {
        self.rules.push(rule);
    }

    pub(crate) fn clear(&mut self) {
        self.rules.clear();
    }

    pub(crate) fn fired(&self) -> u64 {
        self.fired
    }

    /// Count `op` against every matching rule; the fault of the first that fires.
    pub(crate) fn check(&mut self, op: OpKind, path: &Path) -> Option<Fault> {
        let mut hit = None;
        for rule in self.rules.iter_mut().filter(|r| r.matches(op, path)) {
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            if hit.is_some() {
                continue; // another rule failed it: not this rule's turn
            }
            match rule.times.as_mut() {
                Some(0) => continue,
                Some(n) => *n -= 1,
                None => {}
            }
            hit = Some(rule.fault);
        }
        self.rules.retain(|r| r.times != Some(0));
        self.fired += u64::from(hit.is_some());
        hit
    }
}
