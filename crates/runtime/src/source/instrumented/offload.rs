//! Batches on another CPU: when a thread's log is full and the machine has
//! a CPU to spare (fewer threads with a model than online CPUs), the hook
//! hands the log to one *modeller* thread of the runtime and goes on with
//! its second log, instead of running the model itself. A batch costs the
//! program ~15-20 ns per logged miss (`bench/model-speed.sh`), which, on a
//! dependent chase, the program cannot overlap with anything; the hand-off
//! costs a few stores. The order of the entries through a thread's model is
//! kept: whoever runs the model (the owner or the modeller) holds the
//! model's lock, and the owner runs a handed-off log that the modeller has
//! not taken before its current one. The modeller's time is not the
//! program's and is not counted as overhead.
//!
//! Off with `PMLAB_INSTR_OFFLOAD=0`, on a single CPU, in a forked child
//! (the modeller thread does not exist there) and for the full-tag model.
//! Models the modeller may see are never freed: a thread's model is kept
//! for the next thread when it exits.

use super::log::{Slow, Tls, NONE, READY, TAKEN};
use super::model::ThreadTotals;
use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

/// Batches the modeller thread ran, all threads.
static OFFLOADED: AtomicU64 = AtomicU64::new(0);

/// Batches of logged misses the modeller thread ran for the program's
/// threads, in all (the statistics report it).
pub fn offloaded_batches() -> u64 {
    OFFLOADED.load(Ordering::Relaxed)
}

const MAX_MODELS: usize = 256;
static MODELS: [AtomicPtr<Slow>; MAX_MODELS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_MODELS];
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Process whose modeller thread runs (0: none).
static PID: AtomicI32 = AtomicI32::new(0);
static CPUS: AtomicUsize = AtomicUsize::new(1);
/// Threads that own a model.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Bumped at each hand-off; the modeller sleeps on it (futex).
static WORK: AtomicU32 = AtomicU32::new(0);
static SLEEPING: AtomicBool = AtomicBool::new(false);

fn pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Start the modeller (from `activate`), unless disabled.
pub(super) fn start() {
    if PID.load(Ordering::Acquire) == pid() {
        return;
    }
    if std::env::var_os("PMLAB_INSTR_OFFLOAD").is_some_and(|v| v == "0") {
        return;
    }
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if cpus < 2 {
        return;
    }
    CPUS.store(cpus as usize, Ordering::Relaxed);
    // SAFETY: the real pthread_create with a valid start routine: the
    // modeller is the runtime's, not registered as a program thread.
    unsafe {
        let mut th: libc::pthread_t = 0;
        let r =
            crate::real::pthread_create()(&mut th, std::ptr::null(), main, std::ptr::null_mut());
        if r == 0 {
            libc::pthread_detach(th);
            PID.store(pid(), Ordering::Release);
        }
    }
}

/// New models may be handed off.
pub(super) fn enabled() -> bool {
    PID.load(Ordering::Acquire) != 0
}

/// Make `s` visible to the modeller; false when the table is full.
pub(super) fn register(s: *mut Slow) -> bool {
    for (i, slot) in MODELS.iter().enumerate() {
        if slot
            .compare_exchange(std::ptr::null_mut(), s, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            HIGH.fetch_max(i + 1, Ordering::AcqRel);
            LIVE.fetch_add(1, Ordering::AcqRel);
            return true;
        }
    }
    false
}

/// A registered model no thread owns, emptied, for the calling thread.
pub(super) fn reuse() -> Option<*mut Slow> {
    for slot in MODELS.iter().take(HIGH.load(Ordering::Acquire)) {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: registered models are never freed.
        let s = unsafe { &mut *p };
        if s.owned
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        lock(s, true);
        s.model.reset();
        s.ready.store(NONE, Ordering::Release);
        publish(s);
        s.lock.store(false, Ordering::Release);
        LIVE.fetch_add(1, Ordering::AcqRel);
        return Some(p);
    }
    None
}

/// The owner thread is done with `s` (its log is processed).
pub(super) fn release(s: *mut Slow) {
    // SAFETY: registered models are never freed.
    unsafe { (*s).owned.store(false, Ordering::Release) };
    LIVE.fetch_sub(1, Ordering::AcqRel);
}

/// Take the model's lock; without `wait`, give up if it is held.
pub(super) fn lock(s: &Slow, wait: bool) -> bool {
    let mut spins = 0u32;
    loop {
        if s.lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        if !wait {
            return false;
        }
        spins += 1;
        if spins < 1000 {
            std::hint::spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions (and is
            // async-signal-safe).
            unsafe { libc::sched_yield() };
        }
    }
}

/// Copy the totals for lock-free readers (caller holds the lock).
pub(super) fn publish(s: &Slow) {
    s.seq.fetch_add(1, Ordering::AcqRel);
    fence(Ordering::Release);
    // SAFETY: the lock holder is the only writer.
    unsafe { std::ptr::write_volatile(s.published.get(), s.model.totals) };
    fence(Ordering::Release);
    s.seq.fetch_add(1, Ordering::AcqRel);
}

/// Attempts [`read_published`] makes when nothing but a descheduled
/// modeller can hold it up.
pub(super) const PATIENT_TRIES: u32 = 100_000;

/// The totals as of the last batch; None if a writer stayed in the middle
/// of publishing them for `tries` attempts (the modeller was descheduled
/// there, or the caller is a signal handler that interrupted its own
/// thread's publishing). Async-signal-safe.
pub(super) fn read_published(s: &Slow, tries: u32) -> Option<ThreadTotals> {
    for _ in 0..tries {
        let a = s.seq.load(Ordering::Acquire);
        if a & 1 == 0 {
            // SAFETY: a racing write is detected by the sequence.
            let v = unsafe { std::ptr::read_volatile(s.published.get()) };
            fence(Ordering::Acquire);
            if s.seq.load(Ordering::Acquire) == a {
                return Some(v);
            }
        }
        std::hint::spin_loop();
    }
    None
}

/// Hand the calling thread's full log to the modeller; false when it
/// cannot take it (then the caller runs the model itself).
///
/// # Safety
///
/// `t` is the calling thread's state, not busy, with a model.
pub(super) unsafe fn hand_off(t: *mut Tls) -> bool {
    let s = &mut *(*t).slow;
    if !s.shared
        || LIVE.load(Ordering::Relaxed) >= CPUS.load(Ordering::Relaxed)
        || s.ready.load(Ordering::Acquire) != NONE
        || PID.load(Ordering::Relaxed) != pid()
    {
        return false;
    }
    (*t).busy = true;
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    s.ready_log = (*t).cur;
    s.ready_from = (*t).processed;
    s.ready_to = (*t).logged;
    s.ready.store(READY, Ordering::Release);
    (*t).cur ^= 1;
    (*t).processed = 0;
    std::ptr::write_volatile(&mut (*t).logged, 0);
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    (*t).busy = false;
    WORK.fetch_add(1, Ordering::SeqCst);
    if SLEEPING.load(Ordering::SeqCst) {
        libc::syscall(
            libc::SYS_futex,
            WORK.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
    true
}

/// In a forked child: the modeller does not exist. A model it held is
/// released and a log it was running is dropped (at most one log of
/// the forking thread).
pub(super) fn after_fork_child(t: *mut Tls) {
    PID.store(0, Ordering::Release);
    // SAFETY: single-threaded now.
    unsafe {
        let s = (*t).slow;
        if !s.is_null() && (*s).ready.load(Ordering::Acquire) == TAKEN {
            (*s).ready.store(NONE, Ordering::Release);
        }
        if !s.is_null() {
            (*s).lock.store(false, Ordering::Release);
        }
    }
}

extern "C" fn main(_: *mut libc::c_void) -> *mut libc::c_void {
    // The modeller takes none of the program's signals.
    // SAFETY: a full set, masked on this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
    super::busy::set_modeller();
    let me = pid();
    loop {
        if PID.load(Ordering::Acquire) != me {
            return std::ptr::null_mut();
        }
        let seen = WORK.load(Ordering::SeqCst);
        let mut did = false;
        for slot in MODELS.iter().take(HIGH.load(Ordering::Acquire)) {
            let p = slot.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: registered models are never freed; the lock
            // gives this thread the model.
            let s = unsafe { &mut *p };
            if s.ready.load(Ordering::Acquire) != READY || !lock(s, false) {
                continue;
            }
            if s.ready
                .compare_exchange(READY, TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let (log, from, to) = (s.ready_log, s.ready_from, s.ready_to);
                // SAFETY: lock held; the owner does not write this log
                // while it is handed off.
                unsafe { s.model.run(None, &s.logs[log][from.min(to)..to]) };
                s.model.totals.slow_calls += (to - from) as u64;
                s.model.totals.offloaded += 1;
                OFFLOADED.fetch_add(1, Ordering::Relaxed);
                publish(s);
                s.ready.store(NONE, Ordering::Release);
                did = true;
            }
            s.lock.store(false, Ordering::Release);
        }
        if did {
            continue;
        }
        // Idle: poll for ~100 us (a dependent chase fills a log in
        // ~90 us), then sleep until the next hand-off.
        let t0 = std::time::Instant::now();
        while WORK.load(Ordering::SeqCst) == seen && t0.elapsed().as_micros() < 100 {
            std::hint::spin_loop();
        }
        if WORK.load(Ordering::SeqCst) != seen {
            continue;
        }
        SLEEPING.store(true, Ordering::SeqCst);
        if WORK.load(Ordering::SeqCst) == seen {
            // SAFETY: futex wait on our own word; a timeout bounds a
            // missed wake-up.
            unsafe {
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 10_000_000,
                };
                libc::syscall(
                    libc::SYS_futex,
                    WORK.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    seen,
                    &ts as *const libc::timespec,
                );
            }
        }
        SLEEPING.store(false, Ordering::SeqCst);
    }
}
