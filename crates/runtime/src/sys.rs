//! Process-level helpers every module may use: the calling thread's and
//! process's ids from the kernel, and the one-line fatal error for
//! failures before `main`. Depends on nothing else in the runtime.

use libc::c_void;

/// Print one line and stop the process (for failures before `main`).
pub fn die(msg: &str) -> ! {
    let line = format!("pmlab: runtime: error: {msg}\n");
    // SAFETY: write(2) to stderr and _exit are async-signal-safe.
    unsafe {
        libc::write(2, line.as_ptr() as *const c_void, line.len());
        libc::_exit(2)
    }
}

/// A real function (NUL-terminated `name`) could not be found.
pub fn fatal(name: &[u8]) -> ! {
    let n = String::from_utf8_lossy(&name[..name.len().saturating_sub(1)]).into_owned();
    die(&format!(
        "cannot find the real '{n}' in the C library (unsupported libc?)"
    ))
}

/// The calling thread's kernel id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The calling process's id, from the kernel (never a cached value: a
/// `vfork` child must see its own). Async-signal-safe.
pub(crate) fn own_pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}
