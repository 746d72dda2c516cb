//! Failpoints: named places in the code where tests can inject a crash, an
//! error or a delay. Names are `component::site`, e.g. `flush::before-rename`.
//!
//! Compiled in only with the `testing` feature; without it `failpoint()` is an
//! inlined no-op returning `Ok(())`, so production builds pay nothing.
//!
//! Configuration: the env var `FAILPOINTS="name=action;name=action"` at
//! start-up, or `configure(name, action)` at run time (the HTTP API calls it).
//! Unit tests that share a process with others use
//! `configure_on_this_thread`: the failpoint then fires only for code
//! polled on the calling thread (a `#[tokio::test]` runtime's own), never in
//! a concurrently running test.
//! Actions: `off`, `exit` (terminate the process at once, like `kill -9`:
//! no destructors, no buffered output), `panic`, `return` (the call site gets
//! an error), `sleep(MS)`.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Off,
    Exit,
    Panic,
    Return,
    Sleep(u64),
}

#[derive(Debug, thiserror::Error)]
#[error("failpoint {0} triggered")]
pub struct FailpointError(pub String);

impl std::str::FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.trim() {
            "off" => Action::Off,
            "exit" => Action::Exit,
            "panic" => Action::Panic,
            "return" => Action::Return,
            other => {
                let ms = other
                    .strip_prefix("sleep(")
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| {
                        format!("unknown failpoint action '{other}': expected off, exit, panic, return or sleep(MS)")
                    })?;
                Action::Sleep(ms)
            }
        })
    }
}

#[cfg(feature = "testing")]
mod imp {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Mutex, OnceLock};

    /// Whether any failpoint is configured: every IO operation checks a
    /// failpoint, so the common case (none set) must not take the lock.
    static ANY_CONFIGURED: AtomicBool = AtomicBool::new(false);
    /// Threads with a failpoint of their own configured (see
    /// `configure_on_this_thread`).
    static THREADS_CONFIGURED: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        static THIS_THREAD: RefCell<HashMap<String, Action>> = RefCell::new(HashMap::new());
    }

    /// `configure`, for code running on the calling thread only.
    pub fn configure_on_this_thread(name: &str, action: Action) {
        THIS_THREAD.with_borrow_mut(|m| {
            let before = !m.is_empty();
            if action == Action::Off {
                m.remove(name);
            } else {
                m.insert(name.to_string(), action);
            }
            match (before, !m.is_empty()) {
                (false, true) => THREADS_CONFIGURED.fetch_add(1, Ordering::AcqRel),
                (true, false) => THREADS_CONFIGURED.fetch_sub(1, Ordering::AcqRel),
                _ => 0,
            };
        });
    }

    fn registry() -> &'static Mutex<HashMap<String, Action>> {
        static REG: OnceLock<Mutex<HashMap<String, Action>>> = OnceLock::new();
        REG.get_or_init(|| Mutex::new(HashMap::new()))
    }

    pub fn configure(name: &str, action: Action) {
        let mut reg = registry().lock().unwrap();
        if action == Action::Off {
            reg.remove(name);
        } else {
            reg.insert(name.to_string(), action);
        }
        ANY_CONFIGURED.store(!reg.is_empty(), Ordering::Release);
    }

    pub fn failpoint(name: &str) -> Result<(), FailpointError> {
        if !ANY_CONFIGURED.load(Ordering::Acquire)
            && THREADS_CONFIGURED.load(Ordering::Acquire) == 0
        {
            return Ok(());
        }
        let local = THIS_THREAD.with_borrow(|m| m.get(name).cloned());
        let action = local.or_else(|| registry().lock().unwrap().get(name).cloned());
        match action {
            None | Some(Action::Off) => Ok(()),
            Some(Action::Exit) => {
                tracing::info!("failpoint {name}: exiting the process");
                // SAFETY: _exit ends the process immediately; that is the point.
                unsafe { libc_exit(1) }
            }
            Some(Action::Panic) => panic!("failpoint {name} triggered"),
            Some(Action::Return) => Err(FailpointError(name.to_string())),
            Some(Action::Sleep(ms)) => {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(())
            }
        }
    }

    extern "C" {
        #[link_name = "_exit"]
        fn libc_exit(code: i32) -> !;
    }

    pub const ENABLED: bool = true;
}

#[cfg(not(feature = "testing"))]
mod imp {
    use super::*;

    pub fn configure(_name: &str, _action: Action) {}

    pub fn configure_on_this_thread(_name: &str, _action: Action) {}

    #[inline(always)]
    pub fn failpoint(_name: &str) -> Result<(), FailpointError> {
        Ok(())
    }

    pub const ENABLED: bool = false;
}

pub use imp::{configure, configure_on_this_thread, failpoint, ENABLED};

/// Parse `name=action;name=action` (the `FAILPOINTS` env var format) and apply it.
pub fn configure_from_str(spec: &str) -> Result<(), String> {
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, action) = item
            .split_once('=')
            .ok_or_else(|| format!("bad failpoint spec '{item}': expected name=action"))?;
        configure(name.trim(), action.parse()?);
    }
    Ok(())
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;

    #[test]
    fn return_and_off() {
        configure_from_str("t::a=return; t::b=sleep(1)").unwrap();
        assert!(failpoint("t::a").is_err());
        assert!(failpoint("t::b").is_ok());
        configure("t::a", Action::Off);
        assert!(failpoint("t::a").is_ok());
        assert!(configure_from_str("t::a=explode").is_err());
    }
}
