//! Tests of the timeline writer.

mod chain;
#[cfg(feature = "testing")] // the simulated file system's faults
mod full_disk;
