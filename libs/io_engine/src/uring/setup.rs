//! Creating the ring: io_uring_setup, the opcode probe and the eventfd.
//!
//! A kernel that refuses io_uring (no support, seccomp, the
//! `kernel.io_uring_disabled` sysctl, too little locked memory) makes
//! `IoEngine::new(IoEngineKind::IoUring)` fail with an error that names the
//! errno and says that `io_engine = "std-fs"` is the alternative. There is
//! no silent fallback to another engine.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use io_uring::{opcode, IoUring, Probe};

use super::{CQ_ENTRIES, MAX_IN_FLIGHT_OPS, SQ_ENTRIES};

/// What the operator can do instead; ends every setup error.
const ALTERNATIVE: &str = "set io_engine = \"std-fs\" to use the engine without io_uring";

/// The ring and the eventfd registered with it (signalled on every completion).
pub(super) fn create() -> io::Result<(IoUring, OwnedFd)> {
    let uring = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .build(SQ_ENTRIES)
        .map_err(|e| refused("io_uring_setup", e))?;
    let cq_entries = uring.params().cq_entries();
    assert!(cq_entries >= MAX_IN_FLIGHT_OPS, "CQ of {cq_entries} entries cannot overflow");
    check_opcodes(&uring)?;
    let eventfd = new_eventfd()?;
    uring
        .submitter()
        .register_eventfd(std::os::fd::AsRawFd::as_raw_fd(&eventfd))
        .map_err(|e| refused("IORING_REGISTER_EVENTFD", e))?;
    Ok((uring, eventfd))
}

/// The opcodes the engine uses exist (reads and writes need Linux 5.6).
fn check_opcodes(uring: &IoUring) -> io::Result<()> {
    let mut probe = Probe::new();
    uring
        .submitter()
        .register_probe(&mut probe)
        .map_err(|e| refused("IORING_REGISTER_PROBE", e))?;
    let needed = [
        ("IORING_OP_READ", opcode::Read::CODE),
        ("IORING_OP_WRITE", opcode::Write::CODE),
        ("IORING_OP_FSYNC", opcode::Fsync::CODE),
        ("IORING_OP_ASYNC_CANCEL", opcode::AsyncCancel::CODE),
    ];
    for (name, code) in needed {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "io_engine \"io-uring\": this kernel's io_uring lacks {name} (Linux 5.6 or \
                     later is needed); {ALTERNATIVE}"
                ),
            ));
        }
    }
    Ok(())
}

fn new_eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative result is a new fd we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("io_engine \"io-uring\": eventfd: {e}")));
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The error for a kernel refusal of `call`: the errno by name, the likely
/// cause, and the alternative.
pub(super) fn refused(call: &str, e: io::Error) -> io::Error {
    let errno = e.raw_os_error().unwrap_or(0);
    let cause = match errno {
        libc::ENOSYS => "the kernel has no io_uring, or a seccomp filter (a container's default \
                         profile) blocks it"
            .to_string(),
        libc::EPERM => format!(
            "io_uring is not permitted for this process ({})",
            disabled_sysctl()
                .unwrap_or_else(|| "kernel.io_uring_disabled, or a seccomp filter".to_string())
        ),
        libc::ENOMEM => "not enough locked memory for the ring (RLIMIT_MEMLOCK, `ulimit -l`, on \
                         kernels before 5.12)"
            .to_string(),
        _ => "unexpected error".to_string(),
    };
    io::Error::new(
        e.kind(),
        format!(
            "io_engine \"io-uring\": the kernel refused {call}: {} ({e}): {cause}; {ALTERNATIVE}",
            errno_name(errno)
        ),
    )
}

/// `kernel.io_uring_disabled = N`, when the sysctl exists and disables io_uring.
fn disabled_sysctl() -> Option<String> {
    let v = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok()?;
    let v = v.trim();
    (v != "0").then(|| format!("kernel.io_uring_disabled = {v}"))
}

pub(super) fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::ENOSYS => "ENOSYS",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EAGAIN => "EAGAIN",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_errno_and_alternative() {
        for (errno, name, cause) in [
            (libc::ENOSYS, "ENOSYS", "seccomp"),
            (libc::EPERM, "EPERM", "not permitted"),
            (libc::ENOMEM, "ENOMEM", "RLIMIT_MEMLOCK"),
            (libc::E2BIG, "errno 7", "unexpected"),
        ] {
            let msg = refused("io_uring_setup", io::Error::from_raw_os_error(errno)).to_string();
            assert!(msg.contains(name) && msg.contains(cause), "{msg}");
            assert!(msg.contains("io_engine = \"std-fs\""), "{msg}");
        }
    }
}
