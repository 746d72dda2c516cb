//! Page service metrics (owned by the page service; this file only reserves
//! the module and the `register()` entry point that `metrics::register_all`
//! calls at start-up).

/// Force registration of the page service metrics.
pub fn register() {}
