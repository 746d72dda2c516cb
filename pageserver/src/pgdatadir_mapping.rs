//! (in progress)

/// Placeholder until the datadir module lands (owned by the datadir helper).
#[derive(Default)]
pub struct DatadirCache {}
