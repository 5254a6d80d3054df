//! The real libc/libpthread functions behind our hooks, resolved once with
//! `dlsym(RTLD_NEXT)` and cached. A program that links libpmlab after the
//! C library (Rust doc tests built by `pmlab cargo`, a `-lpmlab` placed
//! last) has nothing after us that defines them: the C library is then
//! asked directly. (Its calls bind to the C library first anyway; only a
//! preloaded libpmlab interposes.)

use libc::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Resolve `name` (NUL-terminated) in the objects after ours; a function
/// the C library must have.
fn resolve(cache: &AtomicUsize, name: &[u8]) -> usize {
    resolve_opt(cache, name).unwrap_or_else(|| crate::sys::fatal(name))
}

/// Resolve `name` (NUL-terminated) in the objects after ours, `None` where
/// none defines it (a function newer than the C library); cached either
/// way.
fn resolve_opt(cache: &AtomicUsize, name: &[u8]) -> Option<usize> {
    const ABSENT: usize = 1;
    let mut f = cache.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: name is NUL-terminated; dlsym is safe to call.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
        if f == 0 {
            f = in_libc(name);
        }
        if f == 0 {
            f = ABSENT;
        }
        cache.store(f, Ordering::Relaxed);
    }
    (f != ABSENT).then_some(f)
}

/// `name` as the loaded C library defines it (0 when it does not).
#[cold]
fn in_libc(name: &[u8]) -> usize {
    // SAFETY: RTLD_NOLOAD only finds a library already loaded (libc.so.6
    // always is); dlsym with a NUL-terminated name.
    unsafe {
        let h = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return 0;
        }
        let f = libc::dlsym(h, name.as_ptr() as *const c_char) as usize;
        libc::dlclose(h);
        f
    }
}

macro_rules! real {
    (
        $($name:ident : fn($($arg:ty),*) -> $ret:ty;)*
        @optional {
            $($(#[$meta:meta])* $opt:ident = $cname:ident : fn($($oarg:ty),*) -> $oret:ty;)*
        }
    ) => {
        $(
            /// The real function of this name.
            #[allow(non_snake_case)]
            #[inline]
            pub fn $name() -> unsafe extern "C" fn($($arg),*) -> $ret {
                static CACHE: AtomicUsize = AtomicUsize::new(0);
                let f = resolve(&CACHE, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: dlsym returned the address of this very function.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(f) }
            }
        )*
        $(
            $(#[$meta])*
            #[allow(clippy::type_complexity)]
            #[inline]
            pub fn $opt() -> Option<unsafe extern "C" fn($($oarg),*) -> $oret> {
                static CACHE: AtomicUsize = AtomicUsize::new(0);
                resolve_opt(&CACHE, concat!(stringify!($cname), "\0").as_bytes()).map(|f| {
                    // SAFETY: dlsym returned the address of this very function.
                    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($oarg),*) -> $oret>(f) }
                })
            }
        )*
        /// Resolve every real function now (at initialisation).
        pub fn resolve_all() {
            $( let _ = $name(); )*
            $( let _ = $opt(); )*
        }
    };
}

/// Start routine of a thread.
pub type StartFn = extern "C" fn(*mut c_void) -> *mut c_void;

real! {
    pthread_create: fn(*mut libc::pthread_t, *const libc::pthread_attr_t, StartFn, *mut c_void) -> c_int;
    pthread_join: fn(libc::pthread_t, *mut *mut c_void) -> c_int;
    pthread_mutex_unlock: fn(*mut libc::pthread_mutex_t) -> c_int;
    pthread_mutex_lock: fn(*mut libc::pthread_mutex_t) -> c_int;
    pthread_mutex_trylock: fn(*mut libc::pthread_mutex_t) -> c_int;
    pthread_spin_lock: fn(*mut libc::pthread_spinlock_t) -> c_int;
    pthread_rwlock_rdlock: fn(*mut libc::pthread_rwlock_t) -> c_int;
    pthread_rwlock_wrlock: fn(*mut libc::pthread_rwlock_t) -> c_int;
    pthread_cond_signal: fn(*mut libc::pthread_cond_t) -> c_int;
    pthread_cond_broadcast: fn(*mut libc::pthread_cond_t) -> c_int;
    pthread_cond_wait: fn(*mut libc::pthread_cond_t, *mut libc::pthread_mutex_t) -> c_int;
    pthread_cond_timedwait: fn(*mut libc::pthread_cond_t, *mut libc::pthread_mutex_t, *const libc::timespec) -> c_int;
    pthread_rwlock_unlock: fn(*mut libc::pthread_rwlock_t) -> c_int;
    pthread_spin_unlock: fn(*mut libc::pthread_spinlock_t) -> c_int;
    pthread_barrier_wait: fn(*mut libc::pthread_barrier_t) -> c_int;
    sem_post: fn(*mut libc::sem_t) -> c_int;
    sigaction: fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    signal: fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    sigprocmask: fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
    pthread_sigmask: fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
    execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    clock_gettime: fn(libc::clockid_t, *mut libc::timespec) -> c_int;
    gettimeofday: fn(*mut libc::timeval, *mut c_void) -> c_int;
    nanosleep: fn(*const libc::timespec, *mut libc::timespec) -> c_int;
    clock_nanosleep: fn(libc::clockid_t, c_int, *const libc::timespec, *mut libc::timespec) -> c_int;
    usleep: fn(libc::useconds_t) -> c_int;
    sleep: fn(libc::c_uint) -> libc::c_uint;
    sem_wait: fn(*mut libc::sem_t) -> c_int;
    sem_timedwait: fn(*mut libc::sem_t, *const libc::timespec) -> c_int;
    poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;
    select: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int;
    epoll_wait: fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int;
    _exit: fn(c_int) -> !;
    _Exit: fn(c_int) -> !;
    ppoll: fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int;
    pselect: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const libc::timespec, *const libc::sigset_t) -> c_int;
    epoll_pwait: fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int;
    @optional {
        /// The real `epoll_pwait2`, `None` where the C library has none
        /// (before glibc 2.35).
        epoll_pwait2_opt = epoll_pwait2: fn(c_int, *mut libc::epoll_event, c_int, *const libc::timespec, *const libc::sigset_t) -> c_int;
        /// The real `execveat`, `None` where the C library has none (before
        /// glibc 2.34).
        execveat_opt = execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int;
    }
}
