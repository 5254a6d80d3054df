//! Blocking calls that a signal interrupts whatever `SA_RESTART` says
//! (signal(7)): sleeps, `sem_wait`, `poll`, `select`, `epoll_wait`. The
//! monitor signals only threads it saw running, but a thread can enter
//! such a call between that look and the signal's arrival (on a loaded
//! machine the monitor may be descheduled in between), and the program
//! would see an `EINTR` it never asked for. While the emulation is active
//! these wrappers block the epoch signal for the duration of the call: a
//! signal sent meanwhile stays pending and is taken when the call returns,
//! where it ends the epoch as it would have. The program's own signals
//! interrupt the calls as before.
//!
//! `ppoll`, `pselect`, `epoll_pwait` and `epoll_pwait2` install a mask of
//! their own for the call: the epoch signal is added to a copy of that
//! mask (or, without one, blocked around the call as for the others), so
//! the program's mask is what the kernel restores when the call returns.
//!
//! Not covered: SysV `msgrcv`/`semop`, `sigsuspend`/`sigwait` (a program
//! that waits for signals expects to be woken by them), and calls that
//! glibc makes internally (they do not go through these symbols).

use crate::{emu, real};
use libc::{c_int, c_uint};

/// Run `call` with the epoch signal blocked (when emulating), keeping the
/// call's `errno`.
#[inline]
fn shielded<R>(call: impl FnOnce() -> R) -> R {
    let old = emu::shield_our_signal();
    let r = call();
    emu::restore_signal_mask(old);
    r
}

/// The mask a `p*` call should install: the caller's `mask` plus the
/// epoch signal, written to `buf`; `None` when the caller gave no mask or
/// the emulation is not active (then the call runs as asked, or
/// [`shielded`] when `mask` is null).
#[inline]
unsafe fn with_our_signal(
    mask: *const libc::sigset_t,
    buf: &mut libc::sigset_t,
) -> Option<*const libc::sigset_t> {
    let sig = emu::our_signal();
    if mask.is_null() || !emu::active() || sig == 0 {
        return None;
    }
    *buf = *mask;
    libc::sigaddset(buf, sig);
    Some(buf)
}

/// Run a `p*` call whose last argument is a signal mask: with the caller's
/// mask plus the epoch signal, or shielded when the caller gave none.
#[inline]
unsafe fn masked_call(
    mask: *const libc::sigset_t,
    call: impl FnOnce(*const libc::sigset_t) -> c_int,
) -> c_int {
    let mut buf: libc::sigset_t = std::mem::zeroed();
    match with_our_signal(mask, &mut buf) {
        Some(m) => call(m),
        None if mask.is_null() => shielded(|| call(mask)),
        None => call(mask),
    }
}

/// Interposed `nanosleep`: not cut short by the epoch signal.
///
/// # Safety
/// As nanosleep.
#[inline]
pub unsafe fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int {
    shielded(|| real::nanosleep()(req, rem))
}

/// Interposed `clock_nanosleep`: not cut short by the epoch signal.
///
/// # Safety
/// As clock_nanosleep.
#[inline]
pub unsafe fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> c_int {
    shielded(|| real::clock_nanosleep()(clock, flags, req, rem))
}

/// Interposed `usleep`: not cut short by the epoch signal.
///
/// # Safety
/// As usleep.
#[inline]
pub unsafe fn usleep(us: libc::useconds_t) -> c_int {
    shielded(|| real::usleep()(us))
}

/// Interposed `sleep`: not cut short by the epoch signal.
///
/// # Safety
/// As sleep.
#[inline]
pub unsafe fn sleep(s: c_uint) -> c_uint {
    shielded(|| real::sleep()(s))
}

/// Interposed `sem_wait`: an available count is taken without touching
/// the signal mask; a wait is not cut short by the epoch signal.
///
/// # Safety
/// As sem_wait.
#[inline]
pub unsafe fn sem_wait(sem: *mut libc::sem_t) -> c_int {
    if libc::sem_trywait(sem) == 0 {
        return 0;
    }
    shielded(|| real::sem_wait()(sem))
}

/// Interposed `sem_timedwait`: as [`sem_wait`], with its deadline.
///
/// # Safety
/// As sem_timedwait.
#[inline]
pub unsafe fn sem_timedwait(sem: *mut libc::sem_t, deadline: *const libc::timespec) -> c_int {
    if libc::sem_trywait(sem) == 0 {
        return 0;
    }
    shielded(|| real::sem_timedwait()(sem, deadline))
}

/// Interposed `poll`: not cut short by the epoch signal.
///
/// # Safety
/// As poll.
#[inline]
pub unsafe fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    if timeout == 0 {
        return real::poll()(fds, n, timeout);
    }
    shielded(|| real::poll()(fds, n, timeout))
}

/// Interposed `select`: not cut short by the epoch signal.
///
/// # Safety
/// As select.
#[inline]
pub unsafe fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    shielded(|| real::select()(n, r, w, e, timeout))
}

/// Interposed `epoll_wait`: not cut short by the epoch signal.
///
/// # Safety
/// As epoll_wait.
#[inline]
pub unsafe fn epoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if timeout == 0 {
        return real::epoll_wait()(epfd, events, max, timeout);
    }
    shielded(|| real::epoll_wait()(epfd, events, max, timeout))
}

/// Interposed `ppoll`: not cut short by the epoch signal; the caller's
/// signal mask applies during the call as asked.
///
/// # Safety
/// As ppoll.
#[inline]
pub unsafe fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if !timeout.is_null() && (*timeout).tv_sec == 0 && (*timeout).tv_nsec == 0 {
        return real::ppoll()(fds, n, timeout, mask);
    }
    masked_call(mask, |m| real::ppoll()(fds, n, timeout, m))
}

/// Interposed `pselect`: not cut short by the epoch signal; the caller's
/// signal mask applies during the call as asked.
///
/// # Safety
/// As pselect.
#[inline]
pub unsafe fn pselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    masked_call(mask, |m| real::pselect()(n, r, w, e, timeout, m))
}

/// Interposed `epoll_pwait`: not cut short by the epoch signal; the
/// caller's signal mask applies during the call as asked.
///
/// # Safety
/// As epoll_pwait.
#[inline]
pub unsafe fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if timeout == 0 {
        return real::epoll_pwait()(epfd, events, max, timeout, mask);
    }
    masked_call(mask, |m| real::epoll_pwait()(epfd, events, max, timeout, m))
}

/// Interposed `epoll_pwait2` (glibc 2.35 and later): as [`epoll_pwait`]
/// with a `timespec` timeout. Where the C library has none, fails with
/// `ENOSYS` as that C library's programs could not have called it.
///
/// # Safety
/// As epoll_pwait2.
#[inline]
pub unsafe fn epoll_pwait2(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let Some(f) = real::epoll_pwait2_opt() else {
        *libc::__errno_location() = libc::ENOSYS;
        return -1;
    };
    masked_call(mask, |m| f(epfd, events, max, timeout, m))
}
