//! Batches on another CPU: when a thread's log is full and the machine has
//! a CPU to spare (fewer threads with a model than online CPUs), the hook
//! hands the log to one *modeller* thread of the runtime and goes on with
//! the next log of its ring (`log::Slow`), instead of running the
//! model itself. A batch costs the
//! program ~15-20 ns per logged miss (`bench/model-speed.sh`), which, on a
//! dependent chase, the program cannot overlap with anything; the hand-off
//! costs a few stores. The order of the entries through a thread's model is
//! kept: whoever runs the model (the owner or the modeller) holds the
//! model's lock and runs the handed-off logs oldest first, and the owner
//! runs the logs still queued before its current one. The modeller's time
//! is not the program's and is not counted as overhead.
//!
//! Logs in flight (`depth`): up to [`LOGS`] - 1 handed off and waiting,
//! while the owner fills the next. A periodic epoch's end (the monitor's
//! signal) leaves them, and what the owner has logged in its current log,
//! to the modeller: the epoch is charged what the model has run so far,
//! and the accesses still waiting are charged at a later epoch's end (the
//! totals are cumulative: the serial counts and bytes carry forward, per
//! thread and in order). Points where the order matters run everything
//! first: sync points (lock points, clock reads and the others the
//! runtime ends epochs at), the thread's exit, a fork, and tracing; the lag is bounded (see
//! `thread::totals_and_ran`). So the modeller may fall behind for a while
//! (a burst of misses, or descheduled on a busy machine) without the
//! program running the model. When the queue is full the owner makes
//! room for one log (`thread::relieve`): it waits for the modeller to
//! finish the log it runs, or runs the oldest queued log itself, and that
//! time is the program's, timed and charged back as an inline batch (on
//! a machine with no free CPU, most logs go this way, and the run's
//! busy-machine figures, `super::busy`, say so).
//!
//! Off with `PMLAB_INSTR_OFFLOAD=0`, on a single CPU, in a forked child
//! (the modeller thread does not exist there) and for the full-tag model.
//! Models the modeller may see are never freed: a thread's model is kept
//! for the next thread when it exits.

use super::log::{Slow, Tls, LOGS};
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
    // Set before the thread starts: it leaves as soon as it sees another
    // process's id (or none) here.
    PID.store(pid(), Ordering::Release);
    // SAFETY: the real pthread_create with a valid start routine: the
    // modeller is the runtime's, not registered as a program thread.
    unsafe {
        let mut th: libc::pthread_t = 0;
        let r =
            crate::real::pthread_create()(&mut th, std::ptr::null(), main, std::ptr::null_mut());
        if r == 0 {
            libc::pthread_detach(th);
        } else {
            PID.store(0, Ordering::Release);
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
        s.head.store(0, Ordering::Release);
        s.tail.store(0, Ordering::Release);
        s.taken.store(0, Ordering::Release);
        s.ring = depth() + 1;
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

/// Tests: the queue's depth when not 0.
#[cfg(test)]
pub(super) static TEST_DEPTH: AtomicUsize = AtomicUsize::new(0);
/// Tests: the modeller thread runs nothing while set (it lags).
#[cfg(test)]
pub(super) static TEST_PAUSE: AtomicBool = AtomicBool::new(false);

/// Handed-off logs a thread may have waiting: [`LOGS`] - 1 (see the
/// module's documentation).
pub(super) fn depth() -> usize {
    #[cfg(test)]
    {
        let d = TEST_DEPTH.load(Ordering::Relaxed);
        if d != 0 {
            return d.min(LOGS - 1);
        }
    }
    LOGS - 1
}

/// Hand the calling thread's full log to the modeller; false when it
/// cannot take it (then the caller runs the model itself). A full queue
/// first makes room (`thread::relieve`).
///
/// # Safety
///
/// `t` is the calling thread's state, not busy, with a model.
pub(super) unsafe fn hand_off(t: *mut Tls) -> bool {
    let s = &mut *(*t).slow;
    if !s.shared
        || LIVE.load(Ordering::Relaxed) >= CPUS.load(Ordering::Relaxed)
        || PID.load(Ordering::Relaxed) != pid()
    {
        return false;
    }
    let depth = s.ring - 1;
    if s.queued() >= depth && (depth == 1 || !super::thread::relieve(t, depth)) {
        return false;
    }
    (*t).busy = true;
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    // Only this thread advances `tail`.
    let tail = s.tail.load(Ordering::Relaxed);
    s.spans[tail % s.ring] = ((*t).processed, (*t).logged);
    s.tail.store(tail.wrapping_add(1), Ordering::Release);
    (*t).cur = tail.wrapping_add(1) % s.ring;
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

/// Run log `head` of `s` (the oldest handed off) through the model and
/// free it; its entries. The caller holds the lock and has seen
/// `head != tail`.
///
/// # Safety
///
/// The caller holds `s.lock`; `filter`, if given, is the owner's.
pub(super) unsafe fn run_oldest(
    s: &mut Slow,
    filter: Option<*mut [usize; super::model::FILTER_LINES]>,
) -> u64 {
    let head = s.head.load(Ordering::Relaxed);
    let (from, to) = s.spans[head % s.ring];
    s.model
        .run(filter, &s.logs[head % s.ring][from.min(to)..to]);
    s.head.store(head.wrapping_add(1), Ordering::Release);
    (to - from.min(to)) as u64
}

/// In a forked child: the modeller does not exist. A model it held is
/// released and a log it was running is dropped (at most one log of
/// the forking thread); the logs still queued run on the thread.
pub(super) fn after_fork_child(t: *mut Tls) {
    PID.store(0, Ordering::Release);
    // SAFETY: single-threaded now.
    unsafe {
        let s = (*t).slow;
        if !s.is_null() {
            let taken = (*s).taken.swap(0, Ordering::AcqRel);
            let head = (*s).head.load(Ordering::Acquire);
            if taken != 0 && taken.wrapping_sub(1) == head {
                (*s).head.store(head.wrapping_add(1), Ordering::Release);
            }
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
        #[cfg(test)]
        if TEST_PAUSE.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_micros(200));
            continue;
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
            if s.queued() == 0 || !lock(s, false) {
                continue;
            }
            // One log per hold of the lock: an owner making room waits for
            // this log only.
            if s.queued() != 0 {
                let head = s.head.load(Ordering::Relaxed);
                s.taken.store(head.wrapping_add(1), Ordering::Release);
                // SAFETY: lock held; the owner does not write a log
                // while it is handed off.
                let n = unsafe { run_oldest(s, None) };
                s.taken.store(0, Ordering::Release);
                s.model.totals.slow_calls += n;
                s.model.totals.offloaded += 1;
                OFFLOADED.fetch_add(1, Ordering::Relaxed);
                publish(s);
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
