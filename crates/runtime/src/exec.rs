//! The exec family, interposed so that the epoch signal cannot kill the
//! new program image.
//!
//! The monitor thread ends long epochs with a thread-directed realtime
//! signal. When that signal reaches a thread that is inside `execve`, it
//! stays pending across the exec (pending signals survive it), while the
//! handler does not (handled signals revert to their default action, which
//! for realtime signals is to terminate). The new image then dies before
//! its own copy of this runtime has run its constructor. Each exec function
//! here therefore blocks the epoch signal in the calling thread (the signal
//! mask survives exec), calls the real function, and restores the mask if
//! the exec failed. The new image's runtime unblocks the signal once its
//! handler is installed (see [`crate::emu::init`]); a signal that was
//! pending is then delivered to that handler and ends an epoch early,
//! which is harmless. When the new image does not load the runtime (a
//! static or setuid program, or one whose environment dropped
//! `LD_PRELOAD`), the signal simply stays blocked there.
//!
//! Nothing here allocates or takes a lock: exec is called from `vfork`
//! children and from signal handlers. The variadic `execl`, `execlp` and
//! `execle` are small naked trampolines in [`crate::exports`] (stable Rust
//! cannot define a C-variadic function) that hand the register and stack
//! argument areas to `exec_list`, which walks them as the x86-64 System V
//! ABI lays them out. The C symbols are all declared in
//! [`crate::exports`], which calls the functions here.

use crate::{emu, real};
use libc::{c_char, c_int};
use std::ptr::null_mut;

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// Before an exec: the pre-exec report (see `emu::report_before_exec`),
/// then the epoch signal blocked in the calling thread if the runtime uses
/// it; returns what [`failed`] needs if the exec fails.
fn begin() -> (Option<libc::sigset_t>, bool) {
    let reported = emu::report_before_exec();
    (emu::shield_our_signal(), reported)
}

/// The exec returned (it failed): restore the mask, keep `errno`, drop the
/// pre-exec report.
fn failed((old, reported): (Option<libc::sigset_t>, bool), r: c_int) -> c_int {
    if reported {
        emu::exec_failed();
    }
    emu::restore_signal_mask(old);
    r
}

/// Interposed `execve`: the epoch signal is blocked across the exec.
///
/// # Safety
/// As execve.
#[inline]
pub unsafe fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let old = begin();
    failed(old, real::execve()(path, argv, envp))
}

/// Interposed `execv` (`execve` with the current environment).
///
/// # Safety
/// As execv.
#[inline]
pub unsafe fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    execve(path, argv, environ)
}

/// Interposed `execvpe`: the epoch signal is blocked across the exec
/// (and across the `PATH` search).
///
/// # Safety
/// As execvpe.
#[inline]
pub unsafe fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let old = begin();
    failed(old, real::execvpe()(file, argv, envp))
}

/// Interposed `execvp` (`execvpe` with the current environment).
///
/// # Safety
/// As execvp.
#[inline]
pub unsafe fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    execvpe(file, argv, environ)
}

/// Interposed `fexecve`: the epoch signal is blocked across the exec.
///
/// # Safety
/// As fexecve.
#[inline]
pub unsafe fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    let old = begin();
    failed(old, real::fexecve()(fd, argv, envp))
}

/// Interposed `execveat` (glibc 2.34+; `ENOSYS` where the C library has
/// none): the epoch signal is blocked across the exec.
///
/// # Safety
/// As execveat.
#[inline]
pub unsafe fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    let Some(f) = real::execveat_opt() else {
        *libc::__errno_location() = libc::ENOSYS;
        return -1;
    };
    let old = begin();
    failed(old, f(dirfd, path, argv, envp, flags))
}

/// Which list-taking function a trampoline stands for: `execl`.
pub const KIND_EXECL: c_int = 0;
/// `execlp`.
pub const KIND_EXECLP: c_int = 1;
/// `execle`.
pub const KIND_EXECLE: c_int = 2;

/// Number of argument slots passed in registers after `path`
/// (`rsi`, `rdx`, `rcx`, `r8`, `r9`).
const REG_ARGS: usize = 5;

/// Argument vectors up to this length are built on the stack; longer ones
/// in an anonymous mapping (no allocator in an exec path).
const STACK_ARGS: usize = 256;

/// The body of `execl`, `execlp` and `execle`: `regs` holds the five
/// register-passed variadic slots (the first is `arg0`), `stack` the
/// caller's stack-passed ones, in order.
///
/// # Safety
/// Called only from the trampolines in [`crate::exports`], with the argument areas of a
/// call that follows the C contract (a NULL-terminated list, then for
/// `execle` the environment pointer).
pub unsafe extern "C" fn exec_list(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    kind: c_int,
) -> c_int {
    let at = |i: usize| -> *const c_char {
        if i < REG_ARGS {
            *regs.add(i)
        } else {
            *stack.add(i - REG_ARGS)
        }
    };
    let mut n = 0;
    while !at(n).is_null() {
        n += 1;
    }
    let envp = if kind == KIND_EXECLE {
        at(n + 1) as *const *const c_char
    } else {
        environ
    };
    let mut local = [std::ptr::null::<c_char>(); STACK_ARGS];
    let (argv, mapped) = if n < STACK_ARGS {
        (local.as_mut_ptr(), 0)
    } else {
        let len = (n + 1) * std::mem::size_of::<*const c_char>();
        let p = libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            *libc::__errno_location() = libc::E2BIG;
            return -1;
        }
        (p as *mut *const c_char, len)
    };
    for i in 0..n {
        *argv.add(i) = at(i);
    }
    *argv.add(n) = std::ptr::null();
    let r = if kind == KIND_EXECLP {
        execvpe(path, argv, envp)
    } else {
        execve(path, argv, envp)
    };
    if mapped != 0 {
        let e = *libc::__errno_location();
        libc::munmap(argv as *mut libc::c_void, mapped);
        *libc::__errno_location() = e;
    }
    r
}
