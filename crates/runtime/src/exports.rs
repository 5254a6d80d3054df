//! Every C symbol libpmlab exports, and only those, in one place: the PM
//! API of `include/pmlab.h`, the interposed pthread, signal, clock, sleep,
//! exec and exit functions, the libpmem/libpmemobj wrappers, the
//! instrumentation callbacks (clang's sanitizer-coverage ones and gcc's
//! `__tsan_*` ones) and libc's `memcpy`/`memmove`/`memset` with their
//! `__*_chk` forms; and the library's constructor.
//!
//! Each function is a shell over the module that does the work (named in
//! its body); `no_mangle` applies only outside tests, so unit tests never
//! interpose on themselves. `crates/runtime/libpmlab.map`, the linker
//! version script, lists the same names (everything else is local), and
//! the runtime's `exports` integration test checks the built library
//! against it. A new export is added in three places: here, the map, and
//! the implementation. No function here panics across the C boundary.
//!
//! The hot paths cross the module boundary inline: the instrumentation
//! callbacks' bodies are `#[inline(always)]`
//! ([`on_access`]), the other implementations `#[inline]`.

// The shells' safety contracts are those of the C functions they stand
// for, documented with each implementation.
#![allow(clippy::missing_safety_doc)]

use crate::source::instrumented::{hooks::on_access, memfns, tsan};
use crate::{api, blocking, exec, interpose, pmdk, real, trace_notes};
use libc::{c_char, c_int, c_uint, c_void, size_t};

/// Exported shells that call their implementation with the same
/// arguments: `fn` for a safe implementation, `unsafe fn` for one with the
/// C function's contract.
macro_rules! export {
    () => {};
    ($(#[$doc:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? => $imp:path; $($rest:tt)*) => {
        $(#[$doc])*
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name($($a: $t),*) $(-> $r)? {
            $imp($($a),*)
        }
        export!($($rest)*);
    };
    ($(#[$doc:meta])* unsafe fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? => $imp:path; $($rest:tt)*) => {
        $(#[$doc])*
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
            // SAFETY: the caller's contract is the implementation's.
            unsafe { $imp($($a),*) }
        }
        export!($($rest)*);
    };
}

// ------------------------------------------------- PM API (pmlab.h)

export! {
    /// `pmlab_check_version`: NULL when the library is compatible.
    fn pmlab_check_version(major: u32, minor: u32) -> *const c_char => api::pmlab_check_version;
    /// `pmlab_errno`: the calling thread's last error code.
    fn pmlab_errno() -> c_int => api::pmlab_errno;
    /// `pmlab_errormsg`: the text of the calling thread's last error.
    fn pmlab_errormsg() -> *const c_char => api::pmlab_errormsg;
    /// `pmlab_emulating`: 1 when delays are being injected.
    fn pmlab_emulating() -> c_int => api::pmlab_emulating;
    /// `pmalloc`.
    fn pmalloc(size: size_t) -> *mut c_void => api::pmalloc;
    /// `pmalloc_flags`.
    fn pmalloc_flags(size: size_t, flags: u32) -> *mut c_void => api::pmalloc_flags;
    /// `pfree`.
    fn pfree(ptr: *mut c_void) => api::pfree;
    /// `pmlab_pool_range`.
    unsafe fn pmlab_pool_range(base: *mut *mut c_void, size: *mut size_t) -> c_int => api::pmlab_pool_range;
    /// `pmlab_pm_register`: a mapping of the program's counts as PM.
    fn pmlab_pm_register(base: *mut c_void, len: size_t) -> c_int => api::pmlab_pm_register;
    /// `pmlab_pm_unregister`: forget a registered mapping.
    fn pmlab_pm_unregister(base: *mut c_void, len: size_t) -> c_int => api::pmlab_pm_unregister;
    /// `pm_is_pmem`.
    fn pm_is_pmem(addr: *const c_void, len: size_t) -> c_int => api::pm_is_pmem;
    /// `pflush`.
    unsafe fn pflush(addr: *const c_void, len: size_t) => api::pflush;
    /// `pm_fence`.
    fn pm_fence() => api::pm_fence;
    /// `pm_drain`.
    fn pm_drain() => api::pm_drain;
    /// `pm_ofence`.
    fn pm_ofence() => api::pm_ofence;
    /// `pm_dfence`.
    fn pm_dfence() => api::pm_dfence;
    /// `pm_tx_begin`.
    fn pm_tx_begin(id: u64) => api::pm_tx_begin;
    /// `pm_tx_end`.
    fn pm_tx_end(id: u64) => api::pm_tx_end;
    /// `pm_tx_add`: the open transaction logs the range (for `pmlab check`).
    fn pm_tx_add(addr: *const c_void, len: size_t) => trace_notes::pm_tx_add;
    /// `pm_persist`.
    unsafe fn pm_persist(addr: *const c_void, len: size_t) => api::pm_persist;
    /// `pm_memcpy_persist`.
    unsafe fn pm_memcpy_persist(dst: *mut c_void, src: *const c_void, len: size_t) -> *mut c_void => api::pm_memcpy_persist;
    /// `pm_memcpy_nt`.
    unsafe fn pm_memcpy_nt(dst: *mut c_void, src: *const c_void, len: size_t) -> *mut c_void => api::pm_memcpy_nt;
    /// `pm_memset_persist`.
    unsafe fn pm_memset_persist(dst: *mut c_void, c: c_int, len: size_t) -> *mut c_void => api::pm_memset_persist;
    /// `pm_annotate_user_data`.
    fn pm_annotate_user_data(addr: *const c_void, len: size_t) => api::pm_annotate_user_data;
}

// ------------------------------------ pthread, signal, clock, exit

export! {
    /// Interposed `pthread_create`: registers the new thread.
    unsafe fn pthread_create(
        th: *mut libc::pthread_t,
        attr: *const libc::pthread_attr_t,
        start: real::StartFn,
        arg: *mut c_void,
    ) -> c_int => interpose::pthread_create;
    /// Interposed `pthread_join` (sync point).
    unsafe fn pthread_join(th: libc::pthread_t, ret: *mut *mut c_void) -> c_int => interpose::pthread_join;
    /// Interposed `pthread_mutex_lock` (acquire point).
    unsafe fn pthread_mutex_lock(m: *mut libc::pthread_mutex_t) -> c_int => interpose::pthread_mutex_lock;
    /// Interposed `pthread_mutex_trylock` (acquire point when it succeeds).
    unsafe fn pthread_mutex_trylock(m: *mut libc::pthread_mutex_t) -> c_int => interpose::pthread_mutex_trylock;
    /// Interposed `pthread_spin_lock` (acquire point).
    unsafe fn pthread_spin_lock(l: *mut libc::pthread_spinlock_t) -> c_int => interpose::pthread_spin_lock;
    /// Interposed `pthread_rwlock_rdlock` (acquire point).
    unsafe fn pthread_rwlock_rdlock(l: *mut libc::pthread_rwlock_t) -> c_int => interpose::pthread_rwlock_rdlock;
    /// Interposed `pthread_rwlock_wrlock` (acquire point).
    unsafe fn pthread_rwlock_wrlock(l: *mut libc::pthread_rwlock_t) -> c_int => interpose::pthread_rwlock_wrlock;
    /// Interposed `pthread_mutex_unlock` (release point).
    unsafe fn pthread_mutex_unlock(m: *mut libc::pthread_mutex_t) -> c_int => interpose::pthread_mutex_unlock;
    /// Interposed `pthread_rwlock_unlock` (release point).
    unsafe fn pthread_rwlock_unlock(l: *mut libc::pthread_rwlock_t) -> c_int => interpose::pthread_rwlock_unlock;
    /// Interposed `pthread_spin_unlock` (release point).
    unsafe fn pthread_spin_unlock(l: *mut libc::pthread_spinlock_t) -> c_int => interpose::pthread_spin_unlock;
    /// Interposed `pthread_cond_wait`: releases and re-acquires the mutex.
    unsafe fn pthread_cond_wait(c: *mut libc::pthread_cond_t, m: *mut libc::pthread_mutex_t) -> c_int => interpose::pthread_cond_wait;
    /// Interposed `pthread_cond_timedwait`: as `pthread_cond_wait`.
    unsafe fn pthread_cond_timedwait(
        c: *mut libc::pthread_cond_t,
        m: *mut libc::pthread_mutex_t,
        t: *const libc::timespec,
    ) -> c_int => interpose::pthread_cond_timedwait;
    /// Interposed `pthread_cond_signal` (sync point).
    unsafe fn pthread_cond_signal(c: *mut libc::pthread_cond_t) -> c_int => interpose::pthread_cond_signal;
    /// Interposed `pthread_cond_broadcast` (sync point).
    unsafe fn pthread_cond_broadcast(c: *mut libc::pthread_cond_t) -> c_int => interpose::pthread_cond_broadcast;
    /// Interposed `pthread_barrier_wait` (sync point).
    unsafe fn pthread_barrier_wait(b: *mut libc::pthread_barrier_t) -> c_int => interpose::pthread_barrier_wait;
    /// Interposed `sem_post` (sync point).
    unsafe fn sem_post(s: *mut libc::sem_t) -> c_int => interpose::sem_post;
    /// Interposed `clock_gettime`: a sync point once the minimum epoch passed.
    unsafe fn clock_gettime(clock: libc::clockid_t, ts: *mut libc::timespec) -> c_int => interpose::clock_gettime;
    /// Interposed `gettimeofday`: as `clock_gettime`.
    unsafe fn gettimeofday(tv: *mut libc::timeval, tz: *mut c_void) -> c_int => interpose::gettimeofday;
    /// Interposed `sigaction`: the epoch signal stays the runtime's.
    unsafe fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int => interpose::sigaction;
    /// Interposed `signal`: as `sigaction`.
    unsafe fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t => interpose::signal;
    /// Interposed `sigprocmask`: the epoch signal is never blocked.
    unsafe fn sigprocmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int => interpose::sigprocmask;
    /// Interposed `pthread_sigmask`: the epoch signal is never blocked.
    unsafe fn pthread_sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int => interpose::pthread_sigmask;
}

/// Interposed `_exit`: the report and the trace are completed first.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _exit(code: c_int) -> ! {
    // SAFETY: as _exit.
    unsafe { interpose::_exit(code) }
}

/// Interposed `_Exit`: as [`_exit`].
#[allow(non_snake_case)]
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn _Exit(code: c_int) -> ! {
    // SAFETY: as _Exit.
    unsafe { interpose::_Exit(code) }
}

// ---------------------------------- sleeps and waits (blocking.rs)

export! {
    /// Interposed `nanosleep`: not cut short by the epoch signal.
    unsafe fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int => blocking::nanosleep;
    /// Interposed `clock_nanosleep`: not cut short by the epoch signal.
    unsafe fn clock_nanosleep(
        clock: libc::clockid_t,
        flags: c_int,
        req: *const libc::timespec,
        rem: *mut libc::timespec,
    ) -> c_int => blocking::clock_nanosleep;
    /// Interposed `usleep`: not cut short by the epoch signal.
    unsafe fn usleep(us: libc::useconds_t) -> c_int => blocking::usleep;
    /// Interposed `sleep`: not cut short by the epoch signal.
    unsafe fn sleep(s: c_uint) -> c_uint => blocking::sleep;
    /// Interposed `sem_wait`: not cut short by the epoch signal.
    unsafe fn sem_wait(sem: *mut libc::sem_t) -> c_int => blocking::sem_wait;
    /// Interposed `sem_timedwait`: not cut short by the epoch signal.
    unsafe fn sem_timedwait(sem: *mut libc::sem_t, deadline: *const libc::timespec) -> c_int => blocking::sem_timedwait;
    /// Interposed `poll`: not cut short by the epoch signal.
    unsafe fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int => blocking::poll;
    /// Interposed `select`: not cut short by the epoch signal.
    unsafe fn select(
        n: c_int,
        r: *mut libc::fd_set,
        w: *mut libc::fd_set,
        e: *mut libc::fd_set,
        timeout: *mut libc::timeval,
    ) -> c_int => blocking::select;
    /// Interposed `epoll_wait`: not cut short by the epoch signal.
    unsafe fn epoll_wait(epfd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int => blocking::epoll_wait;
    /// Interposed `ppoll`: the epoch signal added to the call's mask.
    unsafe fn ppoll(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        timeout: *const libc::timespec,
        mask: *const libc::sigset_t,
    ) -> c_int => blocking::ppoll;
    /// Interposed `pselect`: the epoch signal added to the call's mask.
    unsafe fn pselect(
        n: c_int,
        r: *mut libc::fd_set,
        w: *mut libc::fd_set,
        e: *mut libc::fd_set,
        timeout: *const libc::timespec,
        mask: *const libc::sigset_t,
    ) -> c_int => blocking::pselect;
    /// Interposed `epoll_pwait`: the epoch signal added to the call's mask.
    unsafe fn epoll_pwait(
        epfd: c_int,
        events: *mut libc::epoll_event,
        max: c_int,
        timeout: c_int,
        mask: *const libc::sigset_t,
    ) -> c_int => blocking::epoll_pwait;
    /// Interposed `epoll_pwait2`: as `epoll_pwait`.
    unsafe fn epoll_pwait2(
        epfd: c_int,
        events: *mut libc::epoll_event,
        max: c_int,
        timeout: *const libc::timespec,
        mask: *const libc::sigset_t,
    ) -> c_int => blocking::epoll_pwait2;
}

// ----------------------------------------------- the exec family

export! {
    /// Interposed `execve`: the epoch signal is blocked across the exec.
    unsafe fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int => exec::execve;
    /// Interposed `execv`.
    unsafe fn execv(path: *const c_char, argv: *const *const c_char) -> c_int => exec::execv;
    /// Interposed `execvpe`.
    unsafe fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int => exec::execvpe;
    /// Interposed `execvp`.
    unsafe fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int => exec::execvp;
    /// Interposed `fexecve`.
    unsafe fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int => exec::fexecve;
    /// Interposed `execveat`.
    unsafe fn execveat(
        dirfd: c_int,
        path: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
        flags: c_int,
    ) -> c_int => exec::execveat;
}

/// A naked trampoline for a variadic exec function (stable Rust cannot
/// define a C-variadic one): spill the five register slots next to each
/// other, point at the stack slots, and call [`exec::exec_list`] with the
/// kind. At entry `rsp` is 8 mod 16; 56 bytes more make it 0 mod 16 for
/// the call. The stack-passed slots start at the entry `rsp` + 8, which is
/// the new `rsp` + 64.
macro_rules! exec_trampoline {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[cfg_attr(not(test), no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name(path: *const c_char, arg0: *const c_char) -> c_int {
            core::arch::naked_asm!(
                "sub rsp, 56",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                "mov rsi, rsp",
                "lea rdx, [rsp + 64]",
                "mov ecx, {kind}",
                "call {body}",
                "add rsp, 56",
                "ret",
                kind = const $kind,
                body = sym exec::exec_list,
            )
        }
    };
}

exec_trampoline!(
    /// Interposed `execl` (variadic; goes through `execve`).
    execl,
    exec::KIND_EXECL
);
exec_trampoline!(
    /// Interposed `execlp` (variadic; goes through `execvpe`).
    execlp,
    exec::KIND_EXECLP
);
exec_trampoline!(
    /// Interposed `execle` (variadic, environment after the NULL; goes
    /// through `execve`).
    execle,
    exec::KIND_EXECLE
);

// --------------------------------------- libpmem and libpmemobj

export! {
    /// `pmem_flush` (libpmem): records a flush per line.
    unsafe fn pmem_flush(addr: *const c_void, len: usize) => pmdk::pmem_flush;
    /// `pmem_deep_flush` (libpmem).
    unsafe fn pmem_deep_flush(addr: *const c_void, len: usize) => pmdk::pmem_deep_flush;
    /// `pmem_drain` (libpmem): records a fence.
    unsafe fn pmem_drain() => pmdk::pmem_drain;
    /// `pmem_persist` (libpmem).
    unsafe fn pmem_persist(addr: *const c_void, len: usize) => pmdk::pmem_persist;
    /// `pmem_msync` (libpmem).
    unsafe fn pmem_msync(addr: *const c_void, len: usize) -> c_int => pmdk::pmem_msync;
    /// `pmem_deep_persist` (libpmem).
    unsafe fn pmem_deep_persist(addr: *const c_void, len: usize) -> c_int => pmdk::pmem_deep_persist;
    /// `pmem_memcpy_persist` (libpmem).
    unsafe fn pmem_memcpy_persist(dest: *mut c_void, src: *const c_void, len: usize) -> *mut c_void => pmdk::pmem_memcpy_persist;
    /// `pmem_memmove_persist` (libpmem).
    unsafe fn pmem_memmove_persist(dest: *mut c_void, src: *const c_void, len: usize) -> *mut c_void => pmdk::pmem_memmove_persist;
    /// `pmem_memcpy_nodrain` (libpmem).
    unsafe fn pmem_memcpy_nodrain(dest: *mut c_void, src: *const c_void, len: usize) -> *mut c_void => pmdk::pmem_memcpy_nodrain;
    /// `pmem_memmove_nodrain` (libpmem).
    unsafe fn pmem_memmove_nodrain(dest: *mut c_void, src: *const c_void, len: usize) -> *mut c_void => pmdk::pmem_memmove_nodrain;
    /// `pmem_memcpy` (libpmem, with flags).
    unsafe fn pmem_memcpy(dest: *mut c_void, src: *const c_void, len: usize, flags: c_uint) -> *mut c_void => pmdk::pmem_memcpy;
    /// `pmem_memmove` (libpmem, with flags).
    unsafe fn pmem_memmove(dest: *mut c_void, src: *const c_void, len: usize, flags: c_uint) -> *mut c_void => pmdk::pmem_memmove;
    /// `pmem_memset_persist` (libpmem).
    unsafe fn pmem_memset_persist(dest: *mut c_void, c: c_int, len: usize) -> *mut c_void => pmdk::pmem_memset_persist;
    /// `pmem_memset_nodrain` (libpmem).
    unsafe fn pmem_memset_nodrain(dest: *mut c_void, c: c_int, len: usize) -> *mut c_void => pmdk::pmem_memset_nodrain;
    /// `pmem_memset` (libpmem, with flags).
    unsafe fn pmem_memset(dest: *mut c_void, c: c_int, len: usize, flags: c_uint) -> *mut c_void => pmdk::pmem_memset;
    /// `pmemobj_tx_begin` (libpmemobj, variadic: the first four variadic
    /// words are forwarded).
    unsafe fn pmemobj_tx_begin(
        pop: *mut c_void,
        env: *mut c_void,
        a: usize,
        b: usize,
        c: usize,
        d: usize,
    ) -> c_int => pmdk::pmemobj_tx_begin;
    /// `pmemobj_tx_end` (libpmemobj).
    unsafe fn pmemobj_tx_end() -> c_int => pmdk::pmemobj_tx_end;
    /// `pmemobj_tx_add_range` (libpmemobj).
    unsafe fn pmemobj_tx_add_range(oid: pmdk::PmemOid, hoff: u64, size: usize) -> c_int => pmdk::pmemobj_tx_add_range;
    /// `pmemobj_tx_add_range_direct` (libpmemobj).
    unsafe fn pmemobj_tx_add_range_direct(ptr: *const c_void, size: usize) -> c_int => pmdk::pmemobj_tx_add_range_direct;
    /// `pmemobj_tx_alloc` (libpmemobj).
    unsafe fn pmemobj_tx_alloc(size: usize, type_num: u64) -> pmdk::PmemOid => pmdk::pmemobj_tx_alloc;
    /// `pmemobj_tx_zalloc` (libpmemobj).
    unsafe fn pmemobj_tx_zalloc(size: usize, type_num: u64) -> pmdk::PmemOid => pmdk::pmemobj_tx_zalloc;
    /// `pmemobj_tx_xadd_range` (libpmemobj).
    unsafe fn pmemobj_tx_xadd_range(oid: pmdk::PmemOid, hoff: u64, size: usize, flags: u64) -> c_int => pmdk::pmemobj_tx_xadd_range;
    /// `pmemobj_tx_xadd_range_direct` (libpmemobj).
    unsafe fn pmemobj_tx_xadd_range_direct(ptr: *const c_void, size: usize, flags: u64) -> c_int => pmdk::pmemobj_tx_xadd_range_direct;
    /// `pmemobj_tx_xalloc` (libpmemobj).
    unsafe fn pmemobj_tx_xalloc(size: usize, type_num: u64, flags: u64) -> pmdk::PmemOid => pmdk::pmemobj_tx_xalloc;
    /// `pmemobj_create` (libpmemobj): a `PMRANGE` note for the pool.
    unsafe fn pmemobj_create(path: *const c_char, layout: *const c_char, poolsize: usize, mode: libc::mode_t) -> *mut c_void => pmdk::pmemobj_create;
    /// `pmemobj_open` (libpmemobj): a `PMRANGE` note for the pool.
    unsafe fn pmemobj_open(path: *const c_char, layout: *const c_char) -> *mut c_void => pmdk::pmemobj_open;
    /// `pmem_map_file` (libpmem): a `PMRANGE` note for the mapping.
    unsafe fn pmem_map_file(path: *const c_char, len: usize, flags: c_int, mode: libc::mode_t, mapped_len: *mut usize, is_pmem: *mut c_int) -> *mut c_void => pmdk::pmem_map_file;
}

// ------------------- clang's sanitizer-coverage callbacks (`pmlab cc`)

/// Load and store callbacks: the access is counted by
/// [`hooks::on_access`](crate::source::instrumented::hooks::on_access),
/// inlined here.
macro_rules! sancov {
    ($($name:ident: $t:ty, $write:expr;)*) => {$(
        /// Called by instrumented code before a load or store of that size.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *const $t) {
            on_access(addr as usize, std::mem::size_of::<$t>() as u32, $write, None);
        }
    )*};
}

sancov! {
    __sanitizer_cov_load1: u8, false;
    __sanitizer_cov_load2: u16, false;
    __sanitizer_cov_load16: u128, false;
    __sanitizer_cov_store1: u8, true;
    __sanitizer_cov_store2: u16, true;
    __sanitizer_cov_store4: u32, true;
    __sanitizer_cov_store8: u64, true;
    __sanitizer_cov_store16: u128, true;
}

/// Called by instrumented code before a 4-byte load; the loaded value is
/// read too (4 bytes), to detect chases linked by 32-bit indices.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __sanitizer_cov_load4(addr: *const u32) {
    on_access(addr as usize, 4, false, Some(addr as *const u64));
}

/// Called by instrumented code before an 8-byte load; the loaded value is
/// read too, to detect pointer chasing.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __sanitizer_cov_load8(addr: *const u64) {
    on_access(addr as usize, 8, false, Some(addr));
}

/// Update callbacks of `pmlab cc`'s sampling plugin: called before a load
/// that a store to the same address follows in the same block (the store
/// gets no hook of its own): the access is counted as a store, with the
/// loaded value for 4- and 8-byte loads, as the load callback reads it.
macro_rules! pmlab_update {
    ($($name:ident: $t:ty, $value:expr;)*) => {$(
        /// Called by instrumented code before a load whose store follows.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *const $t) {
            let size = std::mem::size_of::<$t>() as u32;
            on_access(addr as usize, size, true, $value.then_some(addr as *const u64));
        }
    )*};
}

pmlab_update! {
    __pmlab_cov_update1: u8, false;
    __pmlab_cov_update2: u16, false;
    __pmlab_cov_update4: u32, true;
    __pmlab_cov_update8: u64, true;
    __pmlab_cov_update16: u128, false;
}

/// The body of clang's `trace-cmp` callbacks (`__sanitizer_cov_trace_cmp4`,
/// `_cmp8` and their `const_` forms): a compare of `a` with `b` at `site`,
/// the callback's return address (see
/// [`hooks::on_cmp`](crate::source::instrumented::hooks::on_cmp)).
#[cfg(all(target_arch = "x86_64", not(test)))]
extern "C" fn pmlab_on_cmp(a: u64, b: u64, site: usize) {
    crate::source::instrumented::hooks::on_cmp(a, b, site);
}

// clang's compare callbacks (`-fsanitize-coverage=trace-cmp`, and the
// sampling plugin's instrumented copies): the 4- and 8-byte ones pass the
// operands and their return address (the compare's site, which no Rust
// function can read) to `pmlab_on_cmp` by a tail jump; 4-byte operands
// zero-extended, as a 4-byte load's value is logged. 1- and 2-byte
// compares and switches return at once (such loads carry no value).
#[cfg(all(target_arch = "x86_64", not(test)))]
core::arch::global_asm!(
    ".pushsection .text.pmlab_cmp,\"ax\",@progbits",
    ".globl __sanitizer_cov_trace_cmp8",
    ".globl __sanitizer_cov_trace_const_cmp8",
    ".type __sanitizer_cov_trace_cmp8, @function",
    ".type __sanitizer_cov_trace_const_cmp8, @function",
    ".p2align 4",
    "__sanitizer_cov_trace_cmp8:",
    "__sanitizer_cov_trace_const_cmp8:",
    "mov rdx, qword ptr [rsp]",
    "jmp {on_cmp}",
    ".globl __sanitizer_cov_trace_cmp4",
    ".globl __sanitizer_cov_trace_const_cmp4",
    ".type __sanitizer_cov_trace_cmp4, @function",
    ".type __sanitizer_cov_trace_const_cmp4, @function",
    ".p2align 4",
    "__sanitizer_cov_trace_cmp4:",
    "__sanitizer_cov_trace_const_cmp4:",
    "mov edi, edi",
    "mov esi, esi",
    "mov rdx, qword ptr [rsp]",
    "jmp {on_cmp}",
    ".globl __sanitizer_cov_trace_cmp1",
    ".globl __sanitizer_cov_trace_cmp2",
    ".globl __sanitizer_cov_trace_const_cmp1",
    ".globl __sanitizer_cov_trace_const_cmp2",
    ".globl __sanitizer_cov_trace_switch",
    ".type __sanitizer_cov_trace_cmp1, @function",
    ".type __sanitizer_cov_trace_cmp2, @function",
    ".type __sanitizer_cov_trace_const_cmp1, @function",
    ".type __sanitizer_cov_trace_const_cmp2, @function",
    ".type __sanitizer_cov_trace_switch, @function",
    ".p2align 4",
    "__sanitizer_cov_trace_cmp1:",
    "__sanitizer_cov_trace_cmp2:",
    "__sanitizer_cov_trace_const_cmp1:",
    "__sanitizer_cov_trace_const_cmp2:",
    "__sanitizer_cov_trace_switch:",
    "ret",
    ".popsection",
    on_cmp = sym pmlab_on_cmp,
);

/// Called by programs built with `pmlab cc`'s sampling plugin when a
/// countdown of `state` (three `int64_t`: the clean copy's, the
/// instrumented copy's, the window flag) runs out: returns 1 when the
/// instrumented copy is to run next, 0 for the clean one, and writes the
/// next countdowns
/// ([`sample::switch`](crate::source::instrumented::sample::switch)).
///
/// # Safety
///
/// `state` points at the calling thread's triple.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __pmlab_sample_switch3(state: *mut i64) -> c_int {
    crate::source::instrumented::sample::switch(state)
}

/// The switch of programs built by an older `pmlab cc` (two countdowns):
/// they run clean ([`sample::legacy_switch`](crate::source::instrumented::sample::legacy_switch)).
///
/// # Safety
///
/// `state` points at the calling thread's two countdowns.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __pmlab_sample_switch(state: *mut i64) -> c_int {
    crate::source::instrumented::sample::legacy_switch(state)
}

/// Called once per instrumented module with its inline 8-bit counters
/// (function-entry coverage, which `pmlab cc` requests only because clang
/// needs a coverage mode for trace-loads/stores). Nothing to do.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __sanitizer_cov_8bit_counters_init(_start: *mut u8, _end: *mut u8) {}

/// Companion of `-fsanitize-coverage=pc-table` (not used by `pmlab cc`,
/// defined so that programs built with it still link).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __sanitizer_cov_pcs_init(_start: *const usize, _end: *const usize) {}

/// Companion of `inline-bool-flag` (as above).
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __sanitizer_cov_bool_flag_init(_start: *mut u8, _end: *mut u8) {}

// ------------------- gcc's ThreadSanitizer callbacks (see `tsan`)

/// Plain accesses: `$f` is [`tsan::read`] or [`tsan::write`] with the size,
/// or `read4_with_value` ([`tsan::read4`]).
macro_rules! tsan_access {
    ($($name:ident: $f:ident, $ptr:ty, $n:expr;)*) => {$(
        /// Called by gcc-instrumented code before an access of that size.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: $ptr) {
            tsan::$f(addr, $n);
        }
    )*};
}

tsan_access! {
    __tsan_read1: read, *const c_void, 1;
    __tsan_read2: read, *const c_void, 2;
    __tsan_read4: read4_with_value, *const c_void, 4;
    __tsan_read16: read, *const c_void, 16;
    __tsan_volatile_read1: read, *const c_void, 1;
    __tsan_volatile_read2: read, *const c_void, 2;
    __tsan_volatile_read4: read, *const c_void, 4;
    __tsan_volatile_read16: read, *const c_void, 16;
    __tsan_unaligned_read2: read, *const c_void, 2;
    __tsan_unaligned_read4: read4_with_value, *const c_void, 4;
    __tsan_volatile_read8: read, *const c_void, 8;
    __tsan_unaligned_read16: read, *const c_void, 16;
    __tsan_write1: write, *mut c_void, 1;
    __tsan_write2: write, *mut c_void, 2;
    __tsan_write4: write, *mut c_void, 4;
    __tsan_write8: write, *mut c_void, 8;
    __tsan_write16: write, *mut c_void, 16;
    __tsan_volatile_write1: write, *mut c_void, 1;
    __tsan_volatile_write2: write, *mut c_void, 2;
    __tsan_volatile_write4: write, *mut c_void, 4;
    __tsan_volatile_write8: write, *mut c_void, 8;
    __tsan_volatile_write16: write, *mut c_void, 16;
    __tsan_unaligned_write2: write, *mut c_void, 2;
    __tsan_unaligned_write4: write, *mut c_void, 4;
    __tsan_unaligned_write8: write, *mut c_void, 8;
    __tsan_unaligned_write16: write, *mut c_void, 16;
}

/// 8-byte reads, with the value pointer ([`tsan::read8`]).
macro_rules! tsan_read8 {
    ($($name:ident),* $(,)?) => {$(
        /// Called by gcc-instrumented code before an 8-byte read.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *const c_void) {
            tsan::read8(addr);
        }
    )*};
}

tsan_read8!(__tsan_read8, __tsan_unaligned_read8);

export! {
    /// Before reading `size` bytes (struct copies, packed or odd-sized
    /// members).
    fn __tsan_read_range(addr: *const c_void, size: usize) => tsan::read_range;
    /// Before writing `size` bytes.
    fn __tsan_write_range(addr: *mut c_void, size: usize) => tsan::write_range;
    /// C++: an object's vtable pointer read (clang only).
    fn __tsan_vptr_read(vptr: *mut *mut c_void) => tsan::vptr_read;
    /// C++: a sequentially consistent fence, whatever order is asked.
    fn __tsan_atomic_thread_fence(_mo: i32) => thread_fence;
    /// A compiler fence (`atomic_signal_fence`).
    fn __tsan_atomic_signal_fence(_mo: i32) => signal_fence;
}

/// [`tsan::thread_fence`], whatever memory order `_mo` names.
#[inline(always)]
fn thread_fence(_mo: i32) {
    tsan::thread_fence();
}

/// [`tsan::signal_fence`], whatever memory order `_mo` names.
#[inline(always)]
fn signal_fence(_mo: i32) {
    tsan::signal_fence();
}

/// C++: before an object's vtable pointer at `vptr` is set to `new_val`
/// (constructors, destructors): an 8-byte write.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_vptr_update(vptr: *mut *mut c_void, _new_val: *mut c_void) {
    tsan::vptr_update(vptr);
}

/// Called once by each instrumented module's constructor. Nothing to do.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_init() {}

/// Function entry (not emitted by `pmlab cc`, which passes
/// `--param=tsan-instrument-func-entry-exit=0`). Nothing to do.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_func_entry(_caller_pc: *mut c_void) {}

/// Function exit (see [`__tsan_func_entry`]). Nothing to do.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __tsan_func_exit() {}

/// The atomics of one width (`$t`: u8 … u128), sequentially consistent
/// whatever order the program asks for (see [`tsan::Atomic`]).
macro_rules! tsan_atomics {
    (
        $t:ty, $load:ident, $store:ident, $xchg:ident,
        $add:ident, $sub:ident, $and:ident, $or:ident, $xor:ident, $nand:ident,
        $strong:ident, $weak:ident, $val:ident
    ) => {
        /// Atomic load; counts a read.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $load(a: *const $t, _mo: i32) -> $t {
            // SAFETY: `a` is valid and aligned (the C contract).
            unsafe { tsan::atomic_load(a) }
        }

        /// Atomic store; counts a write.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $store(a: *mut $t, v: $t, _mo: i32) {
            // SAFETY: as for the load.
            unsafe { tsan::atomic_store(a, v) }
        }

        tsan_atomics!(@rmw $t, $xchg, Xchg);
        tsan_atomics!(@rmw $t, $add, Add);
        tsan_atomics!(@rmw $t, $sub, Sub);
        tsan_atomics!(@rmw $t, $and, And);
        tsan_atomics!(@rmw $t, $or, Or);
        tsan_atomics!(@rmw $t, $xor, Xor);
        tsan_atomics!(@rmw $t, $nand, Nand);

        /// Strong compare-exchange: 1 when it stored, else 0 with the
        /// current value in `*expected`; counts a write.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $strong(
            a: *mut $t,
            expected: *mut $t,
            v: $t,
            _mo: i32,
            _fail_mo: i32,
        ) -> i32 {
            // SAFETY: as for the load; `expected` is valid.
            unsafe { tsan::atomic_cas(a, expected, v) }
        }

        /// Weak compare-exchange: the strong one (a weak one may fail
        /// spuriously, and need not).
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $weak(
            a: *mut $t,
            expected: *mut $t,
            v: $t,
            _mo: i32,
            _fail_mo: i32,
        ) -> i32 {
            // SAFETY: as for the strong one.
            unsafe { tsan::atomic_cas(a, expected, v) }
        }

        /// Compare-exchange returning the value `*a` had (stored `v` if it
        /// was `c`); counts a write.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $val(a: *mut $t, c: $t, v: $t, _mo: i32, _fail_mo: i32) -> $t {
            // SAFETY: as for the load.
            unsafe { tsan::atomic_cas_val(a, c, v) }
        }
    };
    (@rmw $t:ty, $name:ident, $op:ident) => {
        /// Atomic read-modify-write returning the old value; counts a write.
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name(a: *mut $t, v: $t, _mo: i32) -> $t {
            // SAFETY: `a` is valid and aligned (the C contract).
            unsafe { tsan::atomic_rmw(a, tsan::Rmw::$op, v) }
        }
    };
}

tsan_atomics!(
    u8,
    __tsan_atomic8_load,
    __tsan_atomic8_store,
    __tsan_atomic8_exchange,
    __tsan_atomic8_fetch_add,
    __tsan_atomic8_fetch_sub,
    __tsan_atomic8_fetch_and,
    __tsan_atomic8_fetch_or,
    __tsan_atomic8_fetch_xor,
    __tsan_atomic8_fetch_nand,
    __tsan_atomic8_compare_exchange_strong,
    __tsan_atomic8_compare_exchange_weak,
    __tsan_atomic8_compare_exchange_val
);
tsan_atomics!(
    u16,
    __tsan_atomic16_load,
    __tsan_atomic16_store,
    __tsan_atomic16_exchange,
    __tsan_atomic16_fetch_add,
    __tsan_atomic16_fetch_sub,
    __tsan_atomic16_fetch_and,
    __tsan_atomic16_fetch_or,
    __tsan_atomic16_fetch_xor,
    __tsan_atomic16_fetch_nand,
    __tsan_atomic16_compare_exchange_strong,
    __tsan_atomic16_compare_exchange_weak,
    __tsan_atomic16_compare_exchange_val
);
tsan_atomics!(
    u32,
    __tsan_atomic32_load,
    __tsan_atomic32_store,
    __tsan_atomic32_exchange,
    __tsan_atomic32_fetch_add,
    __tsan_atomic32_fetch_sub,
    __tsan_atomic32_fetch_and,
    __tsan_atomic32_fetch_or,
    __tsan_atomic32_fetch_xor,
    __tsan_atomic32_fetch_nand,
    __tsan_atomic32_compare_exchange_strong,
    __tsan_atomic32_compare_exchange_weak,
    __tsan_atomic32_compare_exchange_val
);
tsan_atomics!(
    u64,
    __tsan_atomic64_load,
    __tsan_atomic64_store,
    __tsan_atomic64_exchange,
    __tsan_atomic64_fetch_add,
    __tsan_atomic64_fetch_sub,
    __tsan_atomic64_fetch_and,
    __tsan_atomic64_fetch_or,
    __tsan_atomic64_fetch_xor,
    __tsan_atomic64_fetch_nand,
    __tsan_atomic64_compare_exchange_strong,
    __tsan_atomic64_compare_exchange_weak,
    __tsan_atomic64_compare_exchange_val
);
tsan_atomics!(
    u128,
    __tsan_atomic128_load,
    __tsan_atomic128_store,
    __tsan_atomic128_exchange,
    __tsan_atomic128_fetch_add,
    __tsan_atomic128_fetch_sub,
    __tsan_atomic128_fetch_and,
    __tsan_atomic128_fetch_or,
    __tsan_atomic128_fetch_xor,
    __tsan_atomic128_fetch_nand,
    __tsan_atomic128_compare_exchange_strong,
    __tsan_atomic128_compare_exchange_weak,
    __tsan_atomic128_compare_exchange_val
);

// --------------------- libc's copies, offered to the hooks (`memfns`)

/// The exported trampolines: load the return address (at `[rsp]` on entry)
/// into the register of the body's next argument and jump to the body,
/// which then returns straight to the caller (the stack is untouched, so
/// its alignment is the caller's, as for a direct call). The body skips
/// the hooks for calls from libpmlab itself.
macro_rules! memfn_trampoline {
    ($(#[$doc:meta])* $name:ident($($a:ident: $t:ty),*) via $reg:literal => $body:path) => {
        $(#[$doc])*
        #[cfg_attr(not(test), no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> *mut c_void {
            core::arch::naked_asm!(
                concat!("mov ", $reg, ", qword ptr [rsp]"),
                "jmp {body}",
                body = sym $body,
            )
        }
    };
}

memfn_trampoline!(
    /// Interposed `memcpy` (see [`memfns`]).
    memcpy(d: *mut c_void, s: *const c_void, n: usize) via "rcx" => memfns::memcpy_body
);
memfn_trampoline!(
    /// Interposed `memmove`.
    memmove(d: *mut c_void, s: *const c_void, n: usize) via "rcx" => memfns::memmove_body
);
memfn_trampoline!(
    /// Interposed `memset`.
    memset(d: *mut c_void, c: c_int, n: usize) via "rcx" => memfns::memset_body
);
memfn_trampoline!(
    /// Interposed `__memcpy_chk` (`_FORTIFY_SOURCE`).
    __memcpy_chk(d: *mut c_void, s: *const c_void, n: usize, dlen: usize) via "r8" => memfns::memcpy_chk_body
);
memfn_trampoline!(
    /// Interposed `__memmove_chk`.
    __memmove_chk(d: *mut c_void, s: *const c_void, n: usize, dlen: usize) via "r8" => memfns::memmove_chk_body
);
memfn_trampoline!(
    /// Interposed `__memset_chk`.
    __memset_chk(d: *mut c_void, c: c_int, n: usize, dlen: usize) via "r8" => memfns::memset_chk_body
);

// ------------------------------------------------- the constructor

/// The library's one constructor: [`crate::startup::on_load`].
extern "C" fn constructor() {
    crate::startup::on_load();
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = constructor;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn the_api_shells_reach_their_implementation() {
        let p = pmalloc_flags(64, api::ALLOC_ZERO);
        assert!(!p.is_null());
        assert_eq!(pm_is_pmem(p, 64), 1);
        pfree(p);
        assert_eq!(pmlab_errno(), api::code::OK);
        assert!(pmalloc_flags(16, 0x80).is_null());
        assert_eq!(pmlab_errno(), api::code::INVALID_FLAGS);
        let _ = constructor;
    }

    #[test]
    fn small_atomics_perform_their_operation() {
        let mut x: u32 = 5;
        let p = &mut x as *mut u32;
        unsafe {
            assert_eq!(__tsan_atomic32_fetch_add(p, 3, 0), 5);
            assert_eq!(__tsan_atomic32_fetch_sub(p, 1, 0), 8);
            assert_eq!(__tsan_atomic32_fetch_and(p, 6, 0), 7);
            assert_eq!(__tsan_atomic32_fetch_or(p, 1, 0), 6);
            assert_eq!(__tsan_atomic32_fetch_xor(p, 2, 0), 7);
            assert_eq!(__tsan_atomic32_fetch_nand(p, 3, 0), 5);
            assert_eq!(__tsan_atomic32_load(p, 5), !1u32);
            __tsan_atomic32_store(p, 9, 5);
            assert_eq!(__tsan_atomic32_exchange(p, 10, 5), 9);
            let mut e = 3;
            assert_eq!(
                __tsan_atomic32_compare_exchange_strong(p, &mut e, 4, 5, 5),
                0
            );
            assert_eq!(e, 10);
            assert_eq!(
                __tsan_atomic32_compare_exchange_strong(p, &mut e, 4, 5, 5),
                1
            );
            assert_eq!(__tsan_atomic32_compare_exchange_val(p, 4, 11, 5, 5), 4);
            assert_eq!(__tsan_atomic32_compare_exchange_val(p, 4, 12, 5, 5), 11);
            let mut e = 11;
            while __tsan_atomic32_compare_exchange_weak(p, &mut e, 13, 5, 5) == 0 {
                assert_eq!(e, 11);
            }
        }
        assert_eq!(x, 13);
        let mut b: u8 = 0xff;
        unsafe {
            assert_eq!(__tsan_atomic8_fetch_add(&mut b, 1, 0), 0xff);
            assert_eq!(__tsan_atomic8_load(&b, 0), 0);
        }
        let mut w: u64 = 1 << 40;
        unsafe {
            assert_eq!(__tsan_atomic64_fetch_add(&mut w, 1, 0), 1 << 40);
            assert_eq!(__tsan_atomic64_load(&w, 0), (1 << 40) + 1);
        }
    }

    #[repr(align(16))]
    struct A16(u128);

    #[test]
    fn wide_atomics_perform_their_operation() {
        let mut x = A16(u128::MAX);
        let p = &mut x.0 as *mut u128;
        unsafe {
            assert_eq!(__tsan_atomic128_fetch_add(p, 2, 0), u128::MAX);
            assert_eq!(__tsan_atomic128_load(p, 0), 1);
            __tsan_atomic128_store(p, 1 << 100, 0);
            assert_eq!(__tsan_atomic128_fetch_sub(p, 1, 0), 1 << 100);
            assert_eq!(__tsan_atomic128_load(p, 0), (1 << 100) - 1);
            assert_eq!(__tsan_atomic128_exchange(p, 7, 0), (1 << 100) - 1);
            assert_eq!(__tsan_atomic128_fetch_nand(p, 5, 0), 7);
            assert_eq!(__tsan_atomic128_load(p, 0), !5u128);
            let mut e = 0u128;
            assert_eq!(
                __tsan_atomic128_compare_exchange_strong(p, &mut e, 1, 5, 5),
                0
            );
            assert_eq!(e, !5u128);
            assert_eq!(
                __tsan_atomic128_compare_exchange_weak(p, &mut e, 1 << 127, 5, 5),
                1
            );
            assert_eq!(
                __tsan_atomic128_compare_exchange_val(p, 3, 4, 5, 5),
                1 << 127
            );
        }
        assert_eq!(x.0, 1 << 127);
    }

    #[test]
    fn contended_increments_are_exact() {
        let x = std::sync::Arc::new(A16(0));
        let y = std::sync::Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (x, y) = (x.clone(), y.clone());
                std::thread::spawn(move || {
                    let p = &x.0 as *const u128 as *mut u128;
                    for _ in 0..10_000 {
                        unsafe {
                            __tsan_atomic128_fetch_add(p, 1 << 64, 0);
                            __tsan_atomic32_fetch_add(y.as_ptr(), 1, 0);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(x.0 >> 64, 40_000);
        assert_eq!(y.load(Ordering::SeqCst), 40_000);
    }
}
