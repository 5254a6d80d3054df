//! Every symbol libpmlab exports, and only those: the PM API of
//! `include/pmlab.h` and the interposed libc/libpthread functions. Each is
//! a thin shell over the modules that do the work; `no_mangle` applies
//! only outside tests, so unit tests never interpose on themselves. No
//! function here panics across the C boundary.

use crate::emu::{self, State};
use crate::persist::{self, LINE};
use crate::pool;
use crate::real;
use crate::tracer::record;
use libc::{c_char, c_int, c_void, size_t};
use pmlab_trace::{Op, Space};
use std::cell::Cell;
use std::sync::Mutex;

/// Error codes of `pmlab.h` (kept equal to its `PMLAB_E_*` block).
pub mod code {
    /// Success.
    pub const OK: i32 = 0;
    /// Unknown flag bits.
    pub const INVALID_FLAGS: i32 = -1;
    /// The pool is full or could not be created.
    pub const NOMEM: i32 = -2;
    /// No pool exists yet.
    pub const NOPOOL: i32 = -3;
    /// The pointer is not a live pool block.
    pub const NOT_OURS: i32 = -4;
}

/// Flags of `pmalloc_flags`.
pub const ALLOC_ZERO: u32 = 1;
/// Every valid `pmalloc_flags` flag.
pub const ALLOC_VALID_FLAGS: u32 = ALLOC_ZERO;

thread_local! {
    static LAST: Cell<i32> = const { Cell::new(0) };
}

#[inline]
fn set_err(c: i32) {
    LAST.with(|l| l.set(c));
}

#[inline]
fn ensure_init() {
    if emu::state() == State::Uninit {
        emu::init();
    }
}

fn clamp32(n: usize) -> u32 {
    n.min(u32::MAX as usize) as u32
}

fn record_range(op: Op, addr: usize, len: usize) {
    let mut a = addr;
    let mut left = len;
    while left > 0 {
        let n = left.min(1 << 30);
        record(op, Space::Pm, a as u64, clamp32(n));
        a += n;
        left -= n;
    }
}

// ---------------------------------------------------------------- PM API

/// `pmlab_check_version`: NULL when the library is compatible.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pmlab_check_version(major: u32, minor: u32) -> *const c_char {
    if major != crate::API_MAJOR {
        return c"pmlab: incompatible major version".as_ptr();
    }
    if minor > crate::API_MINOR {
        return c"pmlab: library older than the header's minor version".as_ptr();
    }
    std::ptr::null()
}

/// `pmlab_errno`: the calling thread's last error code.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pmlab_errno() -> c_int {
    LAST.with(|l| l.get())
}

/// `pmlab_errormsg`: the text of the calling thread's last error.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pmlab_errormsg() -> *const c_char {
    match pmlab_errno() {
        code::OK => c"success".as_ptr(),
        code::INVALID_FLAGS => c"unknown flag bits (see PMLAB_ALLOC_VALID_FLAGS)".as_ptr(),
        code::NOMEM => {
            c"the PM pool is full or could not be created (PMLAB_PM_POOL_SIZE, PMLAB_PM_FILE)"
                .as_ptr()
        }
        code::NOPOOL => c"no PM pool exists yet (nothing was allocated)".as_ptr(),
        code::NOT_OURS => c"the pointer is not a live block of the PM pool".as_ptr(),
        _ => c"unknown error".as_ptr(),
    }
}

/// `pmlab_emulating`: 1 when delays are being injected.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pmlab_emulating() -> c_int {
    ensure_init();
    emu::active() as c_int
}

/// `pmalloc`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pmalloc(size: size_t) -> *mut c_void {
    pmalloc_flags(size, 0)
}

/// `pmalloc_flags`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pmalloc_flags(size: size_t, flags: u32) -> *mut c_void {
    ensure_init();
    set_err(code::OK);
    if flags & !ALLOC_VALID_FLAGS != 0 {
        set_err(code::INVALID_FLAGS);
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    let default;
    let cfg = match crate::config::get() {
        Ok(c) => c,
        Err(_) => {
            default = crate::config::Config::default();
            &default
        }
    };
    let p = pool::alloc(size, cfg);
    if p.is_null() {
        set_err(code::NOMEM);
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return std::ptr::null_mut();
    }
    if flags & ALLOC_ZERO != 0 {
        // SAFETY: p is a fresh block of at least `size` bytes.
        unsafe { std::ptr::write_bytes(p, 0, size) };
    }
    p as *mut c_void
}

/// `pfree`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pfree(ptr: *mut c_void) {
    set_err(code::OK);
    if !pool::free(ptr as usize) {
        set_err(code::NOT_OURS);
    }
}

/// `pmlab_pool_range`.
///
/// # Safety
/// `base` and `size` must be NULL or valid for writes.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pmlab_pool_range(base: *mut *mut c_void, size: *mut size_t) -> c_int {
    let (b, s) = pool::range();
    if b == 0 {
        set_err(code::NOPOOL);
        return code::NOPOOL;
    }
    set_err(code::OK);
    if !base.is_null() {
        *base = b as *mut c_void;
    }
    if !size.is_null() {
        *size = s;
    }
    code::OK
}

/// `pm_is_pmem`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_is_pmem(addr: *const c_void, len: size_t) -> c_int {
    pool::contains(addr as usize, len) as c_int
}

/// `pflush`.
///
/// # Safety
/// `[addr, addr+len)` must be mapped.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pflush(addr: *const c_void, len: size_t) {
    let n = persist::lines(addr as usize, len);
    if n == 0 {
        return;
    }
    let op = persist::flush_op();
    let first = (addr as usize) & !(LINE - 1);
    for i in 0..n {
        let line = first + i * LINE;
        persist::flush_line(line as *const u8, op);
        record(op, Space::Pm, line as u64, LINE as u32);
    }
    emu::note_flushes(n);
}

/// `pm_fence`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_fence() {
    persist::sfence();
    record(Op::SFence, Space::Pm, 0, 0);
}

/// `pm_drain`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_drain() {
    persist::sfence();
    emu::durability_point();
    record(Op::SFence, Space::Pm, 0, 0);
}

/// `pm_ofence`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_ofence() {
    persist::sfence();
    record(Op::OFence, Space::Pm, 0, 0);
}

/// `pm_dfence`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_dfence() {
    persist::sfence();
    emu::durability_point();
    record(Op::DFence, Space::Pm, 0, 0);
}

/// `pm_tx_begin`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_tx_begin(id: u64) {
    record(Op::TxBegin, Space::Pm, id, 0);
}

/// `pm_tx_end`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_tx_end(id: u64) {
    record(Op::TxEnd, Space::Pm, id, 0);
}

/// `pm_persist`.
///
/// # Safety
/// `[addr, addr+len)` must be mapped.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pm_persist(addr: *const c_void, len: size_t) {
    pflush(addr, len);
    pm_drain();
}

/// `pm_memcpy_persist`.
///
/// # Safety
/// As memcpy.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pm_memcpy_persist(
    dst: *mut c_void,
    src: *const c_void,
    len: size_t,
) -> *mut c_void {
    std::ptr::copy(src as *const u8, dst as *mut u8, len);
    record_range(Op::Write, dst as usize, len);
    pflush(dst, len);
    pm_drain();
    dst
}

/// `pm_memcpy_nt`.
///
/// # Safety
/// As memcpy (no overlap).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pm_memcpy_nt(
    dst: *mut c_void,
    src: *const c_void,
    len: size_t,
) -> *mut c_void {
    persist::copy_nt(dst as *mut u8, src as *const u8, len);
    record_range(Op::NtWrite, dst as usize, len);
    emu::note_flushes(persist::lines(dst as usize, len));
    dst
}

/// `pm_memset_persist`.
///
/// # Safety
/// As memset.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pm_memset_persist(dst: *mut c_void, c: c_int, len: size_t) -> *mut c_void {
    std::ptr::write_bytes(dst as *mut u8, c as u8, len);
    record_range(Op::Write, dst as usize, len);
    pflush(dst, len);
    pm_drain();
    dst
}

/// `pm_annotate_user_data`.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn pm_annotate_user_data(addr: *const c_void, len: size_t) {
    record_range(Op::UserData, addr as usize, len);
}

// ------------------------------------------------- interposed functions

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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_create(
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_join(th: libc::pthread_t, ret: *mut *mut c_void) -> c_int {
    emu::sync_point();
    real::pthread_join()(th, ret)
}

macro_rules! sync_hook {
    ($(#[$doc:meta] $name:ident($($a:ident : $t:ty),*);)*) => {$(
        #[$doc]
        ///
        /// # Safety
        /// As the libc function.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
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
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($a: $t) -> c_int {
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
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($a: $t) -> c_int {
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_cond_wait(
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_cond_timedwait(
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn clock_gettime(clock: libc::clockid_t, ts: *mut libc::timespec) -> c_int {
    emu::time_read();
    real::clock_gettime()(clock, ts)
}

/// Interposed `gettimeofday`: a sync point, as `clock_gettime`.
///
/// # Safety
/// As gettimeofday.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn gettimeofday(tv: *mut libc::timeval, tz: *mut c_void) -> c_int {
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _exit(code: c_int) -> ! {
    emu::report_before_exit();
    crate::tracer::finish_before_exit();
    real::_exit()(code)
}

/// Interposed `_Exit`: as [`_exit`].
///
/// # Safety
/// As _Exit.
#[allow(non_snake_case)]
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _Exit(code: c_int) -> ! {
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigaction(
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn sigprocmask(
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
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let mut copy: libc::sigset_t = std::mem::zeroed();
    let s = without_ours(how, set, &mut copy);
    real::pthread_sigmask()(how, s, old)
}

// ------------------------------------------------------------ start-up

/// The library's one constructor. The order matters, so it is written
/// here rather than left to the link order of several `.init_array`
/// entries: libc's copy functions and libpmlab's own address range must be
/// known ([`crate::memfns::init`]) before any runtime thread starts, or
/// that thread's own copies (the trace writer's name, at start-up) are
/// counted as the program's; the tracer then starts before emulation, as
/// it records what emulation's start-up does.
extern "C" fn constructor() {
    crate::memfns::init();
    crate::tracer::init_from_env();
    emu::init();
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = constructor;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_without_emulation_allocates_and_persists() {
        let p = pmalloc_flags(256, ALLOC_ZERO) as *mut u8;
        assert!(!p.is_null());
        assert_eq!(pm_is_pmem(p as *const c_void, 256), 1);
        // SAFETY: p is a live 256-byte block; src is a local.
        unsafe {
            assert_eq!(*p.add(255), 0);
            let src = [7u8; 100];
            pm_memcpy_persist(p as *mut c_void, src.as_ptr() as *const c_void, 100);
            assert_eq!(*p.add(99), 7);
            pm_memset_persist(p as *mut c_void, 3, 10);
            assert_eq!(*p, 3);
        }
        pfree(p as *mut c_void);
        assert_eq!(pmlab_errno(), code::OK);
        pfree(&APP_ACTION as *const _ as *mut c_void);
        assert_eq!(pmlab_errno(), code::NOT_OURS);
        assert!(pmalloc_flags(16, 0x80).is_null());
        assert_eq!(pmlab_errno(), code::INVALID_FLAGS);
        assert!(pmlab_check_version(crate::API_MAJOR, 0).is_null());
        assert!(!pmlab_check_version(crate::API_MAJOR + 1, 0).is_null());
        let _ = constructor;
    }
}
