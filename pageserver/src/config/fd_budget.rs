//! File descriptors: how the process's `RLIMIT_NOFILE` is shared between
//! the IO engine's open files, page service connections and HTTP
//! connections, with a reserve for everything else (listeners, the log,
//! directory fsyncs, the workdir lock, WAL receiver sockets).
//!
//! Invariant: `max_open_files + page_service_max_connections +
//! http_max_connections + FD_RESERVE <= RLIMIT_NOFILE`, so neither side can
//! starve the other: a full page service leaves the HTTP API its
//! descriptors, and the reserve keeps start-up and shutdown working.

use super::{key_err, ConfigError};

/// Descriptors kept for everything that is not a layer file or a client.
pub const FD_RESERVE: usize = 64;
/// Upper ends of the defaults (each also scaled down to fit the limit).
pub const DEFAULT_PAGE_SERVICE_MAX_CONNECTIONS: usize = 1000;
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 256;

/// The three limits, validated against the descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdBudget {
    pub max_open_files: usize,
    pub page_service_max_connections: usize,
    pub http_max_connections: usize,
}

impl FdBudget {
    /// Fill in defaults and check the sum against `nofile_limit`. Defaults:
    /// page service `min(1000, spare / 4)`, HTTP `min(256, spare / 16)`,
    /// open files `min(16384, what is left / 2)`, where spare is the limit
    /// minus the reserve; each at least 1.
    pub fn resolve(
        nofile_limit: usize,
        max_open_files: Option<usize>,
        page_service_max_connections: Option<usize>,
        http_max_connections: Option<usize>,
    ) -> Result<FdBudget, ConfigError> {
        for (key, v) in [
            ("max_open_files", max_open_files),
            ("page_service_max_connections", page_service_max_connections),
            ("http_max_connections", http_max_connections),
        ] {
            if v == Some(0) {
                return Err(key_err(key, "must be greater than 0"));
            }
        }
        let spare = nofile_limit.saturating_sub(FD_RESERVE);
        let ps = page_service_max_connections
            .unwrap_or_else(|| DEFAULT_PAGE_SERVICE_MAX_CONNECTIONS.min(spare / 4).max(1));
        let http = http_max_connections
            .unwrap_or_else(|| DEFAULT_HTTP_MAX_CONNECTIONS.min(spare / 16).max(1));
        let left = spare.saturating_sub(ps).saturating_sub(http);
        let files = max_open_files
            .unwrap_or_else(|| io_engine::DEFAULT_MAX_OPEN_FILES.min(left / 2).max(1));
        let budget = FdBudget {
            max_open_files: files,
            page_service_max_connections: ps,
            http_max_connections: http,
        };
        budget.check(nofile_limit)?;
        Ok(budget)
    }

    fn check(&self, nofile_limit: usize) -> Result<(), ConfigError> {
        let total = self
            .max_open_files
            .saturating_add(self.page_service_max_connections)
            .saturating_add(self.http_max_connections)
            .saturating_add(FD_RESERVE);
        if total <= nofile_limit {
            return Ok(());
        }
        Err(key_err(
            "max_open_files",
            format!(
                "max_open_files {} + page_service_max_connections {} + http_max_connections {} \
                 + {FD_RESERVE} reserved = {total} descriptors, more than the process may open \
                 (RLIMIT_NOFILE {nofile_limit}); raise the limit (ulimit -n) or lower these keys",
                self.max_open_files, self.page_service_max_connections, self.http_max_connections
            ),
        ))
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (as PostgreSQL and most
/// daemons do), then return the soft limit in force. Failure to raise is
/// not an error: the budget is checked against whatever limit holds.
pub fn raise_nofile_limit() -> usize {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass; the
    // only effect is on this process's own limit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            let raised = libc::rlimit { rlim_cur: rl.rlim_max, rlim_max: rl.rlim_max };
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        }
    }
    nofile_soft_limit()
}

/// The soft `RLIMIT_NOFILE` of this process.
pub fn nofile_soft_limit() -> usize {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass; no other effects.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    if rc != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        return usize::MAX / 2;
    }
    rl.rlim_cur as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_scale_to_the_limit() {
        let b = FdBudget::resolve(1_048_576, None, None, None).unwrap();
        assert_eq!(
            (b.max_open_files, b.page_service_max_connections, b.http_max_connections),
            (16384, 1000, 256)
        );
        let b = FdBudget::resolve(1024, None, None, None).unwrap();
        assert_eq!((b.page_service_max_connections, b.http_max_connections), (240, 60));
        assert_eq!(b.max_open_files, (1024 - 64 - 240 - 60) / 2);
        let b = FdBudget::resolve(80, None, None, None).unwrap();
        assert!(
            b.max_open_files + b.page_service_max_connections + b.http_max_connections + FD_RESERVE
                <= 80
        );
    }

    #[test]
    fn an_oversubscribed_budget_names_the_keys_and_the_limit() {
        let err = FdBudget::resolve(1024, Some(1000), None, None).unwrap_err().to_string();
        assert!(err.contains("`max_open_files`") && err.contains("RLIMIT_NOFILE 1024"), "{err}");
        let err = FdBudget::resolve(1024, None, Some(5000), None).unwrap_err().to_string();
        assert!(err.contains("page_service_max_connections 5000"), "{err}");
        let err = FdBudget::resolve(1024, None, None, Some(0)).unwrap_err().to_string();
        assert!(err.contains("`http_max_connections`") && err.contains("greater than 0"), "{err}");
    }
}
