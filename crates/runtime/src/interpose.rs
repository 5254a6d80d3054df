//! The interposed pthread, signal, clock and exit functions (their C
//! symbols are declared in [`crate::exports`], which calls these): thread
//! creation registers the new thread; lock, condition-variable, barrier and
//! semaphore calls are sync points that end epochs; clock reads inject the
//! delay owed first; `_exit` writes the report and completes a trace; the
//! epoch signal stays the runtime's whatever the program asks of
//! `sigaction`, `signal` or the signal masks.

use crate::emu;
use crate::real;
use libc::{c_int, c_void};
use std::sync::Mutex;

struct Start {
    start: real::StartFn,
    arg: *mut c_void,
}

extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: p is the Box we leaked in pthread_create.
    let s = unsafe { Box::from_raw(p as *mut Start) };
    if emu::active() {
        emu::register_current();
    }
    (s.start)(s.arg)
}

/// Interposed `pthread_create`: registers the new thread with the emulator.
///
/// # Safety
/// As pthread_create.
#[inline]
pub unsafe fn pthread_create(
    th: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: real::StartFn,
    arg: *mut c_void,
) -> c_int {
    if !emu::active() {
        return real::pthread_create()(th, attr, start, arg);
    }
    emu::sync_point();
    let boxed = Box::into_raw(Box::new(Start { start, arg }));
    let r = real::pthread_create()(th, attr, trampoline, boxed as *mut c_void);
    if r != 0 {
        drop(Box::from_raw(boxed));
    }
    r
}

/// Interposed `pthread_join` (sync point).
///
/// # Safety
/// As pthread_join.
#[inline]
pub unsafe fn pthread_join(th: libc::pthread_t, ret: *mut *mut c_void) -> c_int {
    emu::sync_point();
    real::pthread_join()(th, ret)
}

macro_rules! sync_hook {
    ($(#[$doc:meta] $name:ident($($a:ident : $t:ty),*);)*) => {$(
        #[$doc]
        ///
        /// # Safety
        /// As the libc function.
        #[inline]
        pub unsafe fn $name($($a: $t),*) -> c_int {
            emu::sync_point();
            real::$name()($($a),*)
        }
    )*};
}

/// A lock's acquire: the epoch of the work before it ends first
/// ([`emu::lock_acquiring`]); a successful acquire opens a critical
/// section ([`emu::lock_acquired`]).
macro_rules! acquire_hook {
    ($(#[$doc:meta] $name:ident($a:ident : $t:ty);)*) => {$(
        #[$doc]
        ///
        /// # Safety
        /// As the libc function.
        #[inline]
        pub unsafe fn $name($a: $t) -> c_int {
            emu::lock_acquiring();
            let r = real::$name()($a);
            if r == 0 {
                emu::lock_acquired();
            }
            r
        }
    )*};
}

acquire_hook! {
    /// Interposed `pthread_mutex_lock` (acquire point).
    pthread_mutex_lock(m: *mut libc::pthread_mutex_t);
    /// Interposed `pthread_mutex_trylock` (acquire point when it succeeds).
    pthread_mutex_trylock(m: *mut libc::pthread_mutex_t);
    /// Interposed `pthread_spin_lock` (acquire point).
    pthread_spin_lock(l: *mut libc::pthread_spinlock_t);
    /// Interposed `pthread_rwlock_rdlock` (acquire point).
    pthread_rwlock_rdlock(l: *mut libc::pthread_rwlock_t);
    /// Interposed `pthread_rwlock_wrlock` (acquire point).
    pthread_rwlock_wrlock(l: *mut libc::pthread_rwlock_t);
}

/// A lock's release: the critical section's epoch ends before the lock
/// is let go ([`emu::lock_releasing`]).
macro_rules! release_hook {
    ($(#[$doc:meta] $name:ident($a:ident : $t:ty);)*) => {$(
        #[$doc]
        ///
        /// # Safety
        /// As the libc function.
        #[inline]
        pub unsafe fn $name($a: $t) -> c_int {
            emu::lock_releasing();
            real::$name()($a)
        }
    )*};
}

release_hook! {
    /// Interposed `pthread_mutex_unlock` (release point).
    pthread_mutex_unlock(m: *mut libc::pthread_mutex_t);
    /// Interposed `pthread_rwlock_unlock` (release point).
    pthread_rwlock_unlock(l: *mut libc::pthread_rwlock_t);
    /// Interposed `pthread_spin_unlock` (release point).
    pthread_spin_unlock(l: *mut libc::pthread_spinlock_t);
}

/// Interposed `pthread_cond_wait`: releases the mutex (the section's epoch
/// ends) and holds it again on return.
///
/// # Safety
/// As pthread_cond_wait.
#[inline]
pub unsafe fn pthread_cond_wait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
) -> c_int {
    emu::lock_releasing();
    let r = real::pthread_cond_wait()(c, m);
    emu::lock_acquired();
    r
}

/// Interposed `pthread_cond_timedwait`: as `pthread_cond_wait` (the mutex
/// is held again on every return, time-out included).
///
/// # Safety
/// As pthread_cond_timedwait.
#[inline]
pub unsafe fn pthread_cond_timedwait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
    t: *const libc::timespec,
) -> c_int {
    emu::lock_releasing();
    let r = real::pthread_cond_timedwait()(c, m, t);
    emu::lock_acquired();
    r
}

sync_hook! {
    /// Interposed `pthread_cond_signal` (sync point).
    pthread_cond_signal(c: *mut libc::pthread_cond_t);
    /// Interposed `pthread_cond_broadcast` (sync point).
    pthread_cond_broadcast(c: *mut libc::pthread_cond_t);
    /// Interposed `pthread_barrier_wait` (sync point).
    pthread_barrier_wait(b: *mut libc::pthread_barrier_t);
    /// Interposed `sem_post` (sync point).
    sem_post(s: *mut libc::sem_t);
}

/// Interposed `clock_gettime`: reading the clock is a sync point (once the
/// minimum epoch length has passed), so that the delay the thread owes is
/// injected before it sees the time. Without it, a program that times a
/// loop (`t0 = now(); loop; t1 = now()`) receives the delay of the accesses
/// just before `t0` inside its measurement and that of the accesses just
/// before `t1` after it: up to one epoch's delay each way (memlat at
/// 2000 ns: ~80 ms in a 4 s measurement). Async-signal-safe, as the
/// epoch signal's handler is.
///
/// # Safety
/// As clock_gettime.
#[inline]
pub unsafe fn clock_gettime(clock: libc::clockid_t, ts: *mut libc::timespec) -> c_int {
    emu::time_read();
    real::clock_gettime()(clock, ts)
}

/// Interposed `gettimeofday`: a sync point, as `clock_gettime`.
///
/// # Safety
/// As gettimeofday.
#[inline]
pub unsafe fn gettimeofday(tv: *mut libc::timeval, tz: *mut c_void) -> c_int {
    emu::time_read();
    real::gettimeofday()(tv, tz)
}

/// Interposed `_exit`: the process ends without its `atexit` handlers,
/// where the runtime writes its report and completes a trace; both are
/// done first (see `emu::report_before_exit` and
/// `tracer::finish_before_exit`), then the real `_exit` runs.
///
/// # Safety
/// As _exit.
#[inline(always)]
pub unsafe fn _exit(code: c_int) -> ! {
    emu::report_before_exit();
    crate::tracer::finish_before_exit();
    real::_exit()(code)
}

/// Interposed `_Exit`: as [`_exit`].
///
/// # Safety
/// As _Exit.
#[allow(non_snake_case)]
#[inline(always)]
pub unsafe fn _Exit(code: c_int) -> ! {
    emu::report_before_exit();
    crate::tracer::finish_before_exit();
    real::_Exit()(code)
}

/// The program's own disposition for our signal, which we keep for it.
static APP_ACTION: Mutex<Option<libc::sigaction>> = Mutex::new(None);

fn protects(sig: c_int) -> bool {
    emu::active() && sig == emu::our_signal() && sig != 0
}

/// Interposed `sigaction`: the epoch signal stays ours; the program's
/// request for it is remembered and reported back, never installed.
///
/// # Safety
/// As sigaction.
#[inline]
pub unsafe fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !protects(sig) {
        return real::sigaction()(sig, act, old);
    }
    let mut g = APP_ACTION.lock().unwrap_or_else(|e| e.into_inner());
    if !old.is_null() {
        match *g {
            Some(a) => *old = a,
            None => {
                let mut d: libc::sigaction = std::mem::zeroed();
                d.sa_sigaction = libc::SIG_DFL;
                *old = d;
            }
        }
    }
    if !act.is_null() {
        *g = Some(*act);
    }
    0
}

/// Interposed `signal`: as `sigaction` for the epoch signal.
///
/// # Safety
/// As signal.
#[inline]
pub unsafe fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if !protects(sig) {
        return real::signal()(sig, handler);
    }
    let mut g = APP_ACTION.lock().unwrap_or_else(|e| e.into_inner());
    let prev = g.map_or(libc::SIG_DFL, |a| a.sa_sigaction);
    let mut a: libc::sigaction = std::mem::zeroed();
    a.sa_sigaction = handler;
    *g = Some(a);
    prev
}

unsafe fn without_ours(
    how: c_int,
    set: *const libc::sigset_t,
    copy: &mut libc::sigset_t,
) -> *const libc::sigset_t {
    if set.is_null() || !emu::active() || how == libc::SIG_UNBLOCK {
        return set;
    }
    *copy = *set;
    libc::sigdelset(copy, emu::our_signal());
    copy
}

/// Interposed `sigprocmask`: the epoch signal is never blocked.
///
/// # Safety
/// As sigprocmask.
#[inline]
pub unsafe fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let mut copy: libc::sigset_t = std::mem::zeroed();
    let s = without_ours(how, set, &mut copy);
    real::sigprocmask()(how, s, old)
}

/// Interposed `pthread_sigmask`: the epoch signal is never blocked.
///
/// # Safety
/// As pthread_sigmask.
#[inline]
pub unsafe fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let mut copy: libc::sigset_t = std::mem::zeroed();
    let s = without_ours(how, set, &mut copy);
    real::pthread_sigmask()(how, s, old)
}
