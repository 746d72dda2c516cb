//! Answers of `GET .../get_lsn_by_timestamp` (Neon's shape) and the
//! query strings of it and `GET .../get_timestamp_of_lsn`.

use serde::{Deserialize, Serialize};
use utils::lsn::Lsn;

/// What the LSN of a `get_lsn_by_timestamp` answer is (`docs/http-api.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LsnByTimestampKind {
    /// The end LSN of the last transaction that ended at or before the time.
    Present,
    /// Every transaction kept ended after the time: the lowest restorable LSN.
    Past,
    /// Every transaction ended at or before the time: the last one's end LSN.
    Future,
    /// No transaction is known: the lowest restorable LSN.
    Nodata,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LsnByTimestampResponse {
    pub lsn: Lsn,
    pub kind: LsnByTimestampKind,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LsnByTimestampQuery {
    /// RFC 3339, UTC (`2026-11-28T03:04:05.123456Z`).
    pub timestamp: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimestampOfLsnQuery {
    pub lsn: Lsn,
}
