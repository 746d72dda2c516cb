//! Types shared by the pageserver, its load generator and its tests: keys,
//! relation tags, the pagestream wire codec, HTTP API models and config types.

pub mod config;
pub mod key;
pub mod models;
pub mod pagestream;
pub mod reltag;

pub use utils::id::{TenantId, TimelineId};
pub use utils::lsn::Lsn;
