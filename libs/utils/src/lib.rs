//! Small building blocks shared by the daemon, the load generator and tests.

pub mod error;
pub mod failpoint;
pub mod id;
pub mod lsn;
pub mod progress;
pub mod quote;
pub mod seqwait;
pub mod spsc_fold;
