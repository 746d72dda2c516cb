//! `RelTag`: identifies one fork of one PostgreSQL relation, and `SlruKind`.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use postgres_ffi::{
    DEFAULTTABLESPACE_OID, FSM_FORKNUM, GLOBALTABLESPACE_OID, INIT_FORKNUM, MAIN_FORKNUM,
    MAX_FORKNUM, VISIBILITYMAP_FORKNUM,
};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RelTag {
    pub spcnode: u32,
    pub dbnode: u32,
    pub relnode: u32,
    pub forknum: u8,
}

impl RelTag {
    pub fn new(spcnode: u32, dbnode: u32, relnode: u32, forknum: u8) -> Self {
        RelTag { spcnode, dbnode, relnode, forknum }
    }

    pub fn with_fork(self, forknum: u8) -> Self {
        RelTag { forknum, ..self }
    }
}

impl fmt::Display for RelTag {
    /// PostgreSQL's path-like form: `spc/db/rel` plus `_fsm`, `_vm`, `_init`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.spcnode, self.dbnode, self.relnode)?;
        match self.forknum {
            MAIN_FORKNUM => Ok(()),
            FSM_FORKNUM => f.write_str("_fsm"),
            VISIBILITYMAP_FORKNUM => f.write_str("_vm"),
            INIT_FORKNUM => f.write_str("_init"),
            n => write!(f, "_fork{n}"),
        }
    }
}

impl fmt::Debug for RelTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The SLRUs that the page service serves (pagestream `kind` byte).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum SlruKind {
    Clog = 0,
    MultiXactMembers = 1,
    MultiXactOffsets = 2,
}

impl SlruKind {
    pub fn from_u8(v: u8) -> Option<SlruKind> {
        match v {
            0 => Some(SlruKind::Clog),
            1 => Some(SlruKind::MultiXactMembers),
            2 => Some(SlruKind::MultiXactOffsets),
            _ => None,
        }
    }

    /// The data-directory folder of this SLRU.
    pub fn dir_name(self) -> &'static str {
        match self {
            SlruKind::Clog => "pg_xact",
            SlruKind::MultiXactMembers => "pg_multixact/members",
            SlruKind::MultiXactOffsets => "pg_multixact/offsets",
        }
    }
}
