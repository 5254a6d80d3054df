//! The emulator proper: process state, thread registry, epochs, the
//! monitor thread, the epoch signal, fork handling and the exit report.
//!
//! Lifecycle (one atomic state machine, [`State`]): `Uninit` → `Active`
//! (emulating) or `Passive` (API only, no `PMLAB_ACTIVE`) or `Failed`
//! (bad configuration: the program is stopped before `main` with one line).
//!
//! Concurrency rules:
//! * every registered thread owns one [`ThreadState`] slot; slots are
//!   allocated once and never freed (the monitor may read any slot at any
//!   time); a slot is live while its `tid` is non-zero;
//! * a thread's counters, overhead account and write model are touched
//!   only by that thread, inside its `busy` re-entrancy guard; the epoch
//!   signal handler, finding the guard taken, defers its epoch to the
//!   guard's release;
//! * the handler saves errno, uses only atomics, the thread's own
//!   pre-allocated state and the TSC, and never blocks.

use crate::clock::{self, rdtsc, ticks_to_ns};
use crate::config::{self, Config, Throttle};
use crate::real;
use crate::source::{self, ModelParams, Source, ThreadCounters};
use crate::stats::{self, Summary};
use crate::sys::{die, gettid, own_pid};
use libc::{c_int, c_void};
use pmlab_model::quartz::{self, OverheadAccount, WriteModel};
use std::cell::{Cell, UnsafeCell};
use std::ptr::null_mut;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::OnceLock;

/// Most threads tracked at once; threads beyond are run but not emulated
/// (counted in the stats).
pub const MAX_THREADS: usize = 16384;

/// Process state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Not initialised yet.
    Uninit = 0,
    /// Initialisation in progress.
    Initialising = 1,
    /// Emulating.
    Active = 2,
    /// PM API only.
    Passive = 3,
    /// Initialisation failed.
    Failed = 4,
}

static STATE: AtomicU8 = AtomicU8::new(State::Uninit as u8);

/// Why an epoch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The monitor's signal (maximum epoch length reached).
    Timer = 0,
    /// A synchronisation point after the minimum epoch length.
    Sync = 1,
    /// Thread or process exit.
    Exit = 2,
}

/// Per-thread statistics: written by the owner, read by anyone.
#[derive(Default)]
pub struct ThreadStats {
    /// Epochs by [`Cause`].
    pub epochs: [AtomicU64; 3],
    /// Delay the model asked for (latency + bandwidth), ns.
    pub requested_ns: AtomicU64,
    /// Delay injected, ns.
    pub injected_ns: AtomicU64,
    /// Bandwidth stretch included in the requested delay, ns.
    pub stretch_ns: AtomicU64,
    /// Emulator overhead, ns.
    pub overhead_ns: AtomicU64,
    /// Overhead not yet absorbed, ns.
    pub pending_overhead_ns: AtomicU64,
    /// Overhead in TSC ticks (for per-epoch cycles).
    pub overhead_ticks: AtomicU64,
    /// Program time covered by epochs, ns.
    pub epoch_time_ns: AtomicU64,
    /// Write-model stall paid at durability points, ns.
    pub write_delay_ns: AtomicU64,
    /// Cache lines flushed through the API.
    pub flushes: AtomicU64,
    /// Bytes moved to/from PM as reported by the source.
    pub pm_bytes: AtomicU64,
    /// Time the delay spins spent switched out (not counted as delay).
    pub spin_off_cpu_ns: AtomicU64,
    /// Lock and thread sync points that did not end the epoch because it
    /// was shorter than the minimum epoch length.
    pub sync_skipped: AtomicU64,
}

/// One registered thread.
pub struct ThreadState {
    /// Kernel thread id; 0 when the slot is free.
    pub tid: AtomicI32,
    /// TSC at the start of the current epoch (`u64::MAX` while an epoch
    /// is being closed).
    pub epoch_start: AtomicU64,
    /// The monitor sent a signal not yet handled.
    pub signal_pending: AtomicBool,
    /// Re-entrancy guard: the thread is inside the runtime.
    pub busy: AtomicBool,
    /// A timer epoch arrived while busy.
    pub deferred: AtomicBool,
    /// The thread's CPU time when the monitor last looked (monitor only).
    pub monitor_cpu_ns: AtomicU64,
    /// Locks the thread acquired through our hooks and holds (owner only):
    /// while above 0 the epoch belongs to a critical section.
    pub cs_depth: AtomicU32,
    counters: UnsafeCell<Option<Box<dyn ThreadCounters>>>,
    account: UnsafeCell<OverheadAccount>,
    write: UnsafeCell<Option<WriteModel>>,
    /// Statistics.
    pub stats: ThreadStats,
}

// SAFETY: the UnsafeCell fields are only touched by the owning thread
// under `busy` (or single-threaded after fork).
unsafe impl Sync for ThreadState {}

static SLOTS: [AtomicPtr<ThreadState>; MAX_THREADS] =
    [const { AtomicPtr::new(null_mut()) }; MAX_THREADS];
/// Highest slot index ever used + 1.
static HIGH: AtomicUsize = AtomicUsize::new(0);
static UNTRACKED: AtomicU64 = AtomicU64::new(0);
static THREADS_SEEN: AtomicU64 = AtomicU64::new(0);
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static MONITOR_ON: AtomicBool = AtomicBool::new(false);
static SIGNALS_SENT: AtomicU64 = AtomicU64::new(0);
static KEY: AtomicUsize = AtomicUsize::new(usize::MAX);
static FORKED: AtomicBool = AtomicBool::new(false);
static REPORTED: AtomicBool = AtomicBool::new(false);
/// `_exit` asked the monitor thread for the report: 0 not asked, 1
/// asked, 2 written (see [`report_before_exit`]).
static EXIT_REPORT: AtomicU8 = AtomicU8::new(0);
/// An exec asked the monitor for the pre-exec report: 0 idle, 1 asked, 2
/// written, 3 the exec failed: delete it, 4 being asked (see
/// [`report_before_exec`]).
static EXEC_REPORT: AtomicU8 = AtomicU8::new(0);
/// The pre-exec report's stamp (see [`pre_exec_path`]).
static EXEC_STAMP: AtomicU64 = AtomicU64::new(0);
/// The process that owns this state: the one that initialised it, or the
/// child after `fork`. A `vfork` child (`posix_spawn`) shares our memory
/// but has another pid and must leave it alone.
static OWNER_PID: AtomicI32 = AtomicI32::new(0);

struct Globals {
    cfg: Config,
    source: Box<dyn Source>,
    params: ModelParams,
    min_ticks: u64,
    /// Minimum epoch at lock acquire and release points.
    lock_min_ticks: u64,
    max_ticks: u64,
    throttle: Throttle,
    /// The device's bandwidth when the software throttle enforces it.
    device: Option<quartz::DeviceRates>,
    mba_note: String,
    init_ns: u64,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();

thread_local! {
    static ME: Cell<*const ThreadState> = const { Cell::new(std::ptr::null()) };
}

/// Finished threads' summaries (guarded by a spin lock reset at fork).
struct Finished {
    lock: AtomicBool,
    list: UnsafeCell<Vec<Summary>>,
}
// SAFETY: `list` is only touched with `lock` held.
unsafe impl Sync for Finished {}
static FINISHED: Finished = Finished {
    lock: AtomicBool::new(false),
    list: UnsafeCell::new(Vec::new()),
};

fn with_finished<R>(f: impl FnOnce(&mut Vec<Summary>) -> R) -> R {
    while FINISHED
        .lock
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    // SAFETY: lock held.
    let r = f(unsafe { &mut *FINISHED.list.get() });
    FINISHED.lock.store(false, Ordering::Release);
    r
}

/// The current state.
#[inline]
pub fn state() -> State {
    match STATE.load(Ordering::Acquire) {
        2 => State::Active,
        3 => State::Passive,
        4 => State::Failed,
        1 => State::Initialising,
        _ => State::Uninit,
    }
}

/// True when emulating (fast path: one relaxed load).
#[inline]
pub fn active() -> bool {
    STATE.load(Ordering::Relaxed) == State::Active as u8
}

/// The epoch signal number (0 before initialisation).
#[inline]
pub fn our_signal() -> c_int {
    SIGNAL.load(Ordering::Relaxed)
}

/// Block (`SIG_BLOCK`) or unblock (`SIG_UNBLOCK`) the epoch signal in the
/// calling thread with the real `pthread_sigmask` (the interposed one never
/// blocks it); returns the previous mask, `None` when the signal is not set
/// up yet or the call failed. Async-signal-safe, no allocation.
pub fn mask_our_signal(how: c_int) -> Option<libc::sigset_t> {
    let sig = our_signal();
    if sig == 0 {
        return None;
    }
    // SAFETY: sigset operations on locals; the real pthread_sigmask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        (real::pthread_sigmask()(how, &set, &mut old) == 0).then_some(old)
    }
}

/// While emulating, block the epoch signal in the calling thread (across
/// an exec, or a blocking call it would interrupt); returns the mask for
/// [`restore_signal_mask`]. Async-signal-safe.
pub fn shield_our_signal() -> Option<libc::sigset_t> {
    if !active() {
        return None;
    }
    mask_our_signal(libc::SIG_BLOCK)
}

/// Restore the mask [`shield_our_signal`] saved, keeping `errno`.
/// Async-signal-safe.
pub fn restore_signal_mask(old: Option<libc::sigset_t>) {
    if let Some(old) = old {
        // SAFETY: errno is the thread's; restoring the thread's own mask.
        unsafe {
            let e = *libc::__errno_location();
            real::pthread_sigmask()(libc::SIG_SETMASK, &old, null_mut());
            *libc::__errno_location() = e;
        }
    }
}

/// The configuration once initialised.
pub fn cfg() -> Option<&'static Config> {
    GLOBALS.get().map(|g| &g.cfg)
}

/// The calling thread's state, if registered.
#[inline]
pub fn current() -> Option<&'static ThreadState> {
    let p = ME.with(|c| c.get());
    // SAFETY: slots are never freed.
    unsafe { p.as_ref() }
}

/// Initialise once (called from the library constructor, and lazily from
/// any entry point reached before it).
#[cold]
pub fn init() {
    if STATE
        .compare_exchange(
            State::Uninit as u8,
            State::Initialising as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        return;
    }
    let t0 = clock::monotonic_ns();
    real::resolve_all();
    let check = std::env::var("PMLAB_CHECK").is_ok_and(|v| v == "1");
    let cfg = match config::get() {
        Ok(c) => c.clone(),
        Err(e) => {
            if check || std::env::var("PMLAB_ACTIVE").is_ok_and(|v| v == "1") {
                STATE.store(State::Failed as u8, Ordering::Release);
                die(e.message());
            }
            // Not under `pmlab run`: keep the API working with defaults.
            STATE.store(State::Passive as u8, Ordering::Release);
            return;
        }
    };
    if !cfg.active && !check {
        clock::set_tsc_ghz(
            cfg.tsc_ghz
                .unwrap_or_else(|| clock::measure_tsc_ghz(2_000_000)),
        );
        STATE.store(State::Passive as u8, Ordering::Release);
        return;
    }
    let source = match source::registry::open(&cfg.source) {
        Ok(s) => s,
        Err(e) => {
            STATE.store(State::Failed as u8, Ordering::Release);
            die(e.message());
        }
    };
    let (throttle, mba_note) = match crate::mba::decide(&cfg) {
        Ok(x) => x,
        Err(e) => {
            STATE.store(State::Failed as u8, Ordering::Release);
            die(&e);
        }
    };
    if check {
        let line = format!("ok source={} throttle={}\n", source.name(), throttle.name());
        // SAFETY: write(2) and _exit.
        unsafe {
            libc::write(1, line.as_ptr() as *const c_void, line.len());
            libc::_exit(0);
        }
    }
    let tsc = cfg
        .tsc_ghz
        .unwrap_or_else(|| clock::measure_tsc_ghz(5_000_000));
    clock::set_tsc_ghz(tsc);
    let params = ModelParams {
        cpu_ghz: cfg.cpu_ghz.unwrap_or(tsc),
        dram_latency_ns: cfg.dram_latency_ns,
        pm_latency_ns: cfg.pm_latency_ns,
        remote_latency_ns: cfg.remote_latency_ns,
        w: cfg.w,
    };
    let g = Globals {
        min_ticks: clock::ns_to_ticks(cfg.epoch_min_ns),
        lock_min_ticks: clock::ns_to_ticks(
            cfg.lock_epoch_min_ns
                .unwrap_or_else(|| lock_min_ns(cfg.epoch_min_ns)),
        ),
        max_ticks: clock::ns_to_ticks(cfg.epoch_max_ns),
        throttle,
        device: match (throttle, cfg.pm_bytes_per_ns) {
            (Throttle::Software, Some(read)) => Some(quartz::DeviceRates {
                read_bytes_per_ns: read,
                write_bytes_per_ns: cfg.pm_write_bytes_per_ns.unwrap_or(read),
            }),
            _ => None,
        },
        mba_note,
        cfg,
        source,
        params,
        init_ns: 0,
    };
    let _ = GLOBALS.set(g);
    let g = GLOBALS.get().expect("just set");
    // SAFETY: plain libc calls with valid arguments.
    unsafe {
        let sig = libc::SIGRTMIN() + g.cfg.signal_offset;
        SIGNAL.store(sig, Ordering::Relaxed);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if real::sigaction()(sig, &sa, std::ptr::null_mut()) != 0 {
            STATE.store(State::Failed as u8, Ordering::Release);
            die("cannot install the epoch signal handler");
        }
        let mut key: libc::pthread_key_t = 0;
        if libc::pthread_key_create(&mut key, Some(on_thread_exit)) == 0 {
            KEY.store(key as usize, Ordering::Relaxed);
        }
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
        libc::atexit(on_exit);
    }
    OWNER_PID.store(own_pid(), Ordering::Relaxed);
    STATE.store(State::Active as u8, Ordering::Release);
    register_current();
    // An exec from a runtime'd image blocks the signal across it (see
    // `exec`); the handler is in place now, so take it again.
    let _ = mask_our_signal(libc::SIG_UNBLOCK);
    start_monitor();
    let took = clock::monotonic_ns() - t0;
    INIT_NS.store(took, Ordering::Relaxed);
    let _ = g.init_ns;
}

static INIT_NS: AtomicU64 = AtomicU64::new(0);

/// Register the calling thread (from the thread trampoline, the
/// constructor for the main thread, or lazily).
pub fn register_current() -> Option<&'static ThreadState> {
    if let Some(t) = current() {
        return Some(t);
    }
    let g = GLOBALS.get()?;
    let tid = gettid();
    THREADS_SEEN.fetch_add(1, Ordering::Relaxed);
    let slot = claim_slot(tid)?;
    // SAFETY: we own the slot now (tid claimed); nobody else touches the cells.
    unsafe {
        let mut counters = g.source.thread_counters().ok();
        if let Some(c) = counters.as_mut() {
            if c.start().is_err() {
                counters = None;
            }
        }
        *slot.counters.get() = counters;
        *slot.account.get() = OverheadAccount::default();
        *slot.write.get() = (g.cfg.write_latency_ns > 0.0)
            .then(|| WriteModel::new(g.cfg.write_latency_ns, g.cfg.write_parallelism));
        let key = KEY.load(Ordering::Relaxed);
        if key != usize::MAX {
            libc::pthread_setspecific(
                key as libc::pthread_key_t,
                slot as *const ThreadState as *const c_void,
            );
        }
    }
    slot.epoch_start.store(rdtsc(), Ordering::Release);
    ME.with(|c| c.set(slot));
    Some(slot)
}

fn reset_stats(s: &ThreadStats) {
    for e in &s.epochs {
        e.store(0, Ordering::Relaxed);
    }
    for a in [
        &s.requested_ns,
        &s.injected_ns,
        &s.stretch_ns,
        &s.overhead_ns,
        &s.pending_overhead_ns,
        &s.overhead_ticks,
        &s.epoch_time_ns,
        &s.write_delay_ns,
        &s.flushes,
        &s.pm_bytes,
        &s.spin_off_cpu_ns,
        &s.sync_skipped,
    ] {
        a.store(0, Ordering::Relaxed);
    }
}

fn claim_slot(tid: i32) -> Option<&'static ThreadState> {
    for (i, slot_ptr) in SLOTS.iter().enumerate() {
        let p = slot_ptr.load(Ordering::Acquire);
        if p.is_null() {
            let fresh = Box::into_raw(Box::new(ThreadState {
                tid: AtomicI32::new(tid),
                epoch_start: AtomicU64::new(u64::MAX),
                signal_pending: AtomicBool::new(false),
                busy: AtomicBool::new(false),
                deferred: AtomicBool::new(false),
                monitor_cpu_ns: AtomicU64::new(0),
                cs_depth: AtomicU32::new(0),
                counters: UnsafeCell::new(None),
                account: UnsafeCell::new(OverheadAccount::default()),
                write: UnsafeCell::new(None),
                stats: ThreadStats::default(),
            }));
            match slot_ptr.compare_exchange(null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    HIGH.fetch_max(i + 1, Ordering::AcqRel);
                    // SAFETY: just published, never freed.
                    return Some(unsafe { &*fresh });
                }
                Err(other) => {
                    // SAFETY: fresh was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    // SAFETY: slots are never freed.
                    let t = unsafe { &*other };
                    if t.tid
                        .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        reset_slot(t);
                        return Some(t);
                    }
                }
            }
        } else {
            // SAFETY: slots are never freed.
            let t = unsafe { &*p };
            if t.tid.load(Ordering::Relaxed) == 0
                && t.tid
                    .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                reset_slot(t);
                return Some(t);
            }
        }
    }
    UNTRACKED.fetch_add(1, Ordering::Relaxed);
    None
}

fn reset_slot(t: &ThreadState) {
    t.epoch_start.store(u64::MAX, Ordering::Relaxed);
    t.signal_pending.store(false, Ordering::Relaxed);
    t.busy.store(false, Ordering::Relaxed);
    t.deferred.store(false, Ordering::Relaxed);
    t.cs_depth.store(0, Ordering::Relaxed);
    reset_stats(&t.stats);
}

/// End the calling thread's epoch now. `t0` is the TSC at entry. Caller
/// holds the thread's `busy` guard. Async-signal-safe.
fn end_epoch(t: &ThreadState, cause: Cause, t0: u64) {
    let Some(g) = GLOBALS.get() else { return };
    let start = t.epoch_start.swap(u64::MAX, Ordering::AcqRel);
    let epoch_ns = if start == u64::MAX {
        0.0
    } else {
        ticks_to_ns(t0.saturating_sub(start))
    };
    // SAFETY: owner thread under the busy guard.
    let (counters, account) = unsafe { (&mut *t.counters.get(), &mut *t.account.get()) };
    let (reading, source_overhead) = match counters.as_mut() {
        Some(c) => {
            if matches!(cause, Cause::Timer) {
                // Only a periodic end may leave the model's work to its thread.
                crate::source::instrumented::thread::periodic_next_reading();
            }
            (c.epoch_end(epoch_ns), c.overhead_ns())
        }
        None => (Default::default(), 0.0),
    };
    let delay = reading.delay_ns(&g.params);
    // Bandwidth: the time the device needs for the epoch's traffic, booked
    // on the timeline all threads share; the epoch ends once the device is
    // done (`stretch` is what that adds to the latency delay). Without
    // injection nobody waits, so the timeline would run ahead of the
    // threads: each epoch is then taken alone.
    let busy_ns = g.device.map_or(0.0, |d| {
        d.busy_ns(
            reading.pm_read_bytes() as f64,
            reading.pm_write_bytes as f64,
        )
    });
    let (stretch, deadline) = if busy_ns <= 0.0 {
        (0.0, None)
    } else if g.cfg.no_inject {
        ((busy_ns - epoch_ns - delay).max(0.0), None)
    } else {
        let since = if start == u64::MAX { t0 } else { start };
        let done = book_device(since, clock::ns_to_ticks(busy_ns));
        let wait = ticks_to_ns(done.saturating_sub(t0));
        ((wait - delay).max(0.0), Some(done))
    };
    let t1 = rdtsc();
    let overhead = ticks_to_ns(t1.saturating_sub(t0)) + source_overhead;
    let inject = account.settle(delay, overhead);
    let mut end = if !g.cfg.no_inject && inject > 0.0 {
        spin(t, inject)
    } else {
        rdtsc()
    };
    // The device's deadline is in real time: the overhead and the latency
    // delay spent since the epoch's end count towards it.
    let mut waited = 0.0;
    if let Some(done) = deadline.filter(|&d| d > end) {
        waited = ticks_to_ns(done - end);
        end = spin_until(done);
        account.hide_in_wait(waited);
    }
    // Sampling times the program's own code, without the runtime's, and
    // sizes its windows by the latency delay that hides the hooks.
    crate::source::instrumented::sample::exclude(end.saturating_sub(t0));
    crate::source::instrumented::sample::delayed(if g.cfg.no_inject { 0.0 } else { delay });
    let s = &t.stats;
    s.epochs[cause as usize].fetch_add(1, Ordering::Relaxed);
    s.requested_ns
        .fetch_add((delay + stretch) as u64, Ordering::Relaxed);
    s.injected_ns
        .fetch_add((inject + waited) as u64, Ordering::Relaxed);
    s.stretch_ns.fetch_add(stretch as u64, Ordering::Relaxed);
    s.overhead_ns.fetch_add(overhead as u64, Ordering::Relaxed);
    s.overhead_ticks
        .fetch_add(t1.saturating_sub(t0), Ordering::Relaxed);
    s.pending_overhead_ns
        .store(account.pending_ns as u64, Ordering::Relaxed);
    s.epoch_time_ns
        .fetch_add(epoch_ns as u64, Ordering::Relaxed);
    s.pm_bytes.fetch_add(reading.pm_bytes, Ordering::Relaxed);
    t.epoch_start.store(end, Ordering::Release);
}

/// The emulated device's timeline in TSC ticks
/// ([`quartz::DeviceClock`]): busy with the traffic booked so far, by all
/// threads, until this tick.
static DEVICE_BUSY_UNTIL: AtomicU64 = AtomicU64::new(0);

/// Book `busy_ticks` of device time for traffic moved by an epoch that
/// began at tick `since` ([`quartz::book_after`]); returns the tick at
/// which the device is done with it. Async-signal-safe.
fn book_device(since: u64, busy_ticks: u64) -> u64 {
    let mut cur = DEVICE_BUSY_UNTIL.load(Ordering::Relaxed);
    loop {
        let done = quartz::book_after(cur as f64, since as f64, busy_ticks as f64) as u64;
        match DEVICE_BUSY_UNTIL.compare_exchange_weak(
            cur,
            done,
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => return done,
            Err(now) => cur = now,
        }
    }
}

/// Longest wait for the device spent spinning: a longer one sleeps until
/// this much before its deadline, leaving the CPU to the program's other
/// threads (a thread waiting for a device's bandwidth does not hold a core
/// either), then spins.
const DEVICE_SPIN_NS: f64 = 1e6;

/// Wait until the TSC reaches `tick` (a deadline in real time: time
/// switched out counts towards it), sleeping through all but the last
/// [`DEVICE_SPIN_NS`]. Returns the TSC at the end. Async-signal-safe.
fn spin_until(tick: u64) -> u64 {
    let ahead = ticks_to_ns(tick.saturating_sub(rdtsc()));
    if ahead > 2.0 * DEVICE_SPIN_NS {
        let ns = (ahead - DEVICE_SPIN_NS) as i64;
        let ts = libc::timespec {
            tv_sec: ns / 1_000_000_000,
            tv_nsec: ns % 1_000_000_000,
        };
        // SAFETY: a relative sleep on a local timespec, by system call
        // (not the interposed function); cut short by a signal, the spin
        // below finishes the wait.
        unsafe {
            libc::syscall(
                libc::SYS_clock_nanosleep,
                libc::CLOCK_MONOTONIC,
                0,
                &ts as *const libc::timespec,
                null_mut::<libc::timespec>(),
            )
        };
    }
    loop {
        let now = rdtsc();
        if now >= tick {
            return now;
        }
        std::hint::spin_loop();
    }
}

/// Hold the calling thread's CPU for `ns` of its own time (a delay or a
/// write stall; time it spends switched out meanwhile, another thread
/// running on its CPU, lengthens the spin as it would lengthen a stall:
/// [`clock::spin_ns`]), counting that switched-out time in its stats.
/// Returns the TSC at the end. Async-signal-safe.
fn spin(t: &ThreadState, ns: f64) -> u64 {
    let s = clock::spin_ns(ns);
    t.stats
        .spin_off_cpu_ns
        .fetch_add(s.off_cpu_ns as u64, Ordering::Relaxed);
    s.end
}

/// Take the guard; false when the thread is already inside the runtime.
#[inline]
fn enter(t: &ThreadState) -> bool {
    !t.busy.swap(true, Ordering::Acquire)
}

/// Release the guard, running any timer epoch deferred meanwhile.
#[inline]
fn leave(t: &ThreadState) {
    loop {
        t.busy.store(false, Ordering::Release);
        if !t.deferred.load(Ordering::Relaxed) {
            return;
        }
        if !enter(t) {
            return; // the signal handler got it
        }
        if t.deferred.swap(false, Ordering::AcqRel) {
            end_epoch(t, Cause::Timer, rdtsc());
        }
    }
}

/// A synchronisation point: end the epoch if it is at least the minimum
/// length, so the delay is paid before other threads can observe it.
#[inline]
pub fn sync_point() {
    if !active() {
        return;
    }
    let Some(t) = current() else { return };
    sync_point_for(t, false);
}

/// A sync point (with the lock points' minimum when `lock`) that counts
/// itself as skipped when the epoch was too short to end.
fn sync_point_for(t: &ThreadState, lock: bool) {
    if !sync_and(t, lock, |_| {}) {
        t.stats.sync_skipped.fetch_add(1, Ordering::Relaxed);
    }
}

/// The default minimum epoch at lock points (`--lock-epoch-min`): a
/// tenth of the minimum epoch, at least 1 µs (10 µs by default).
pub fn lock_min_ns(epoch_min_ns: f64) -> f64 {
    (epoch_min_ns / 10.0).max(1e3).min(epoch_min_ns.max(0.0))
}

/// The calling thread is about to take a lock (`pthread_mutex_lock`…):
/// the work done since its last epoch end is outside the critical
/// section, so its delay is paid now, before the lock is taken, once the
/// epoch is a tenth of `--epoch-min` long (Quartz's sync points are
/// releases only; with critical sections shorter than the minimum epoch,
/// the delay of the work before a lock would otherwise be paid at some
/// later release, inside another section, and serialise the threads).
#[inline]
pub fn lock_acquiring() {
    if !active() {
        return;
    }
    let Some(t) = current() else { return };
    let _ = sync_and(t, true, |_| {});
}

/// The calling thread holds one more lock (its acquire succeeded).
#[inline]
pub fn lock_acquired() {
    if !active() {
        return;
    }
    if let Some(t) = current() {
        t.cs_depth.fetch_add(1, Ordering::Relaxed);
    }
}

/// The calling thread is about to release a lock: a sync point. When the
/// thread took the lock through our hooks, the epoch since then is the
/// critical section's: it ends here, before other threads can take the
/// lock, once it is a tenth of `--epoch-min` long (else at `--epoch-min`,
/// as any sync point).
#[inline]
pub fn lock_releasing() {
    if !active() {
        return;
    }
    let Some(t) = current() else { return };
    let held = t.cs_depth.load(Ordering::Relaxed);
    if held > 0 {
        t.cs_depth.store(held - 1, Ordering::Relaxed);
    }
    sync_point_for(t, held > 0);
}

/// The calling thread is about to read the clock: a sync point, after
/// which the counter source drops the overhead it carries
/// (`ThreadCounters::time_observed` in `crate::source`).
/// Async-signal-safe.
pub fn time_read() {
    if !active() {
        return;
    }
    let Some(t) = current() else { return };
    let _ = sync_and(t, false, |t| {
        // SAFETY: owner thread under the busy guard.
        if let Some(c) = unsafe { (*t.counters.get()).as_mut() } {
            c.time_observed();
        }
    });
}

/// A sync point on `t` (with the lock points' shorter minimum when
/// `lock`), then `then` under the same guard. False when the epoch was
/// too short to end here.
fn sync_and(t: &ThreadState, lock: bool, then: impl FnOnce(&ThreadState)) -> bool {
    let Some(g) = GLOBALS.get() else { return true };
    if !enter(t) {
        return true;
    }
    let now = rdtsc();
    let start = t.epoch_start.load(Ordering::Relaxed);
    let min = if lock { g.lock_min_ticks } else { g.min_ticks };
    let ended = start != u64::MAX && now.saturating_sub(start) >= min;
    if ended {
        end_epoch(t, Cause::Sync, now);
    }
    then(t);
    leave(t);
    ended || start == u64::MAX
}

extern "C" fn on_signal(_sig: c_int) {
    // SAFETY: __errno_location is the thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    if let Some(t) = current() {
        t.signal_pending.store(false, Ordering::Relaxed);
        if enter(t) {
            end_epoch(t, Cause::Timer, rdtsc());
            leave(t);
        } else {
            t.deferred.store(true, Ordering::Relaxed);
        }
    }
    // SAFETY: restoring errno.
    unsafe { *libc::__errno_location() = saved };
}

fn summary_of(t: &ThreadState, tid: i32) -> Summary {
    let s = &t.stats;
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Summary {
        tid,
        epochs: [l(&s.epochs[0]), l(&s.epochs[1]), l(&s.epochs[2])],
        requested_ns: l(&s.requested_ns),
        injected_ns: l(&s.injected_ns),
        stretch_ns: l(&s.stretch_ns),
        overhead_ns: l(&s.overhead_ns),
        pending_overhead_ns: l(&s.pending_overhead_ns),
        overhead_ticks: l(&s.overhead_ticks),
        epoch_time_ns: l(&s.epoch_time_ns),
        write_delay_ns: l(&s.write_delay_ns),
        flushes: l(&s.flushes),
        pm_bytes: l(&s.pm_bytes),
        spin_off_cpu_ns: l(&s.spin_off_cpu_ns),
        sync_skipped: l(&s.sync_skipped),
    }
}

/// The calling thread is leaving: close its last epoch, keep its summary,
/// free its slot.
fn finish_thread(t: &ThreadState) {
    if enter(t) {
        crate::source::instrumented::thread::exact_next_reading();
        end_epoch(t, Cause::Exit, rdtsc());
        // SAFETY: owner thread, under the guard.
        unsafe {
            if let Some(mut c) = (*t.counters.get()).take() {
                c.stop();
            }
        }
    }
    let tid = t.tid.load(Ordering::Relaxed);
    let sum = summary_of(t, tid);
    with_finished(|l| l.push(sum));
    ME.with(|c| c.set(std::ptr::null()));
    t.epoch_start.store(u64::MAX, Ordering::Relaxed);
    t.busy.store(false, Ordering::Release);
    t.tid.store(0, Ordering::Release);
}

unsafe extern "C" fn on_thread_exit(p: *mut c_void) {
    if let Some(t) = (p as *const ThreadState).as_ref() {
        if current().is_some_and(|c| std::ptr::eq(c, t)) {
            finish_thread(t);
        }
    }
}

extern "C" fn on_exit() {
    if let Some(t) = current() {
        finish_thread(t);
    }
    report();
}

/// Whether the calling process may have the monitor write a report for it
/// (before `_exit` or an exec): emulating, the report not written yet, the
/// monitor running, and the process the state's owner, not a forked child
/// (its reports would litter the directory) nor a `vfork` child (it shares
/// the parent's memory; told apart by pid). Async-signal-safe.
fn monitor_can_report() -> bool {
    active()
        && !REPORTED.load(Ordering::Acquire)
        && !FORKED.load(Ordering::Relaxed)
        && MONITOR_ON.load(Ordering::Acquire)
        && own_pid() == OWNER_PID.load(Ordering::Relaxed)
}

/// Called by the interposed exec functions before the real exec: have the
/// monitor write the process's report so far to the pre-exec file
/// `<file>.exec-<ns>` and wait for it, at most 2 s, as for `_exit` (an
/// exec may come from a signal handler; nothing here allocates). The new
/// image starts a report of its own, which becomes the main file; `pmlab
/// run` lists the pre-exec ones beside it. Only the launched process does
/// this (a forked child's exec, the usual fork-exec, and a `vfork` child's
/// are skipped), and only with a statistics file. Returns whether a report
/// was asked for, for [`exec_failed`]. Async-signal-safe.
pub fn report_before_exec() -> bool {
    let Some(g) = GLOBALS.get() else { return false };
    if !monitor_can_report()
        || g.cfg.stats_file.is_none()
        || g.cfg.launcher_pid.is_some_and(|lp| {
            // SAFETY: getppid has no preconditions.
            unsafe { libc::getppid() != lp }
        })
    {
        return false;
    }
    let in_state = |state: u8| move || EXEC_REPORT.load(Ordering::Acquire) == state;
    // A failed exec just before (a program trying several paths): let the
    // monitor delete its report first.
    clock::wait_while(clock::HANDOFF_WAIT_NS, in_state(3));
    // 4: being set up (the monitor ignores it).
    if EXEC_REPORT
        .compare_exchange(0, 4, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false; // another thread's exec is under way
    }
    EXEC_STAMP.store(clock::monotonic_ns(), Ordering::Relaxed);
    EXEC_REPORT.store(1, Ordering::Release);
    clock::wait_while(clock::HANDOFF_WAIT_NS, in_state(1));
    true
}

/// The exec after [`report_before_exec`] returned `true` failed: the
/// monitor deletes the pre-exec file (the process goes on, and its exit
/// report covers that part too). Async-signal-safe.
pub fn exec_failed() {
    EXEC_REPORT.store(3, Ordering::Release);
}

/// Called by the interposed `_exit`/`_Exit`, which skip `atexit` handlers
/// and with them [`report`]: end the calling thread's epoch as at `exit`,
/// then have the monitor thread write the report and wait for it, at most
/// 2 s (`clock::HANDOFF_WAIT_NS`). `_exit` may be called from a signal handler,
/// where writing the report (it allocates) is not allowed; the monitor is
/// an ordinary thread, and the bounded wait means a monitor that cannot
/// finish (say, on a lock the interrupted code holds) delays the exit but
/// never hangs it, and the rename in [`report`] that no half-written file
/// is left. Nothing is done in a forked child (its report would only
/// litter the statistics' directory), a `vfork` child (it shares the
/// parent's memory), when not emulating, or when the report is written
/// already. Async-signal-safe.
pub fn report_before_exit() {
    let wait_for_monitor = || {
        clock::wait_while(clock::HANDOFF_WAIT_NS, || {
            EXIT_REPORT.load(Ordering::Acquire) == 1
        })
    };
    if !monitor_can_report() {
        // Another thread's `_exit` has the monitor writing the report (it
        // counts as written, and the monitor as stopped, from the start):
        // this exit would end the process under the monitor's feet.
        if EXIT_REPORT.load(Ordering::Acquire) == 1
            && own_pid() == OWNER_PID.load(Ordering::Relaxed)
        {
            wait_for_monitor();
        }
        return;
    }
    if let Some(t) = current() {
        if enter(t) {
            crate::source::instrumented::thread::exact_next_reading();
            end_epoch(t, Cause::Exit, rdtsc());
            t.busy.store(false, Ordering::Release);
        }
    }
    // Asked by this thread or, a moment before, by another: wait either way.
    let _ = EXIT_REPORT.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
    wait_for_monitor();
}

/// Write the exit report (once).
pub fn report() {
    if REPORTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(g) = GLOBALS.get() else { return };
    MONITOR_ON.store(false, Ordering::Release);
    let rep = build_report(g);
    match &g.cfg.stats_file {
        Some(path) => {
            // A forked child (or a process other than the launched one)
            // writes next to the main file, never over it.
            let mine = g.cfg.launcher_pid.is_none_or(|lp| {
                // SAFETY: getppid has no preconditions.
                unsafe { libc::getppid() == lp }
            }) && !FORKED.load(Ordering::Relaxed);
            let path = if mine {
                path.clone()
            } else {
                format!("{path}.{}", std::process::id())
            };
            write_report_file(&path, &rep);
            warn_if_busy(&rep);
        }
        None => {
            if g.cfg.stats_stderr {
                // The text starts with the warning, if any.
                let text = rep.to_text();
                // SAFETY: write(2) to stderr.
                unsafe { libc::write(2, text.as_ptr() as *const c_void, text.len()) };
            } else {
                warn_if_busy(&rep);
            }
        }
    }
}

/// The busy-machine warning on stderr, one line, when the report has one.
fn warn_if_busy(rep: &stats::Report) {
    if let Some(w) = rep.busy_warning() {
        let line = format!("pmlab: warning: {w}\n");
        // SAFETY: write(2) to stderr.
        unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
    }
}

/// Write `rep` to `path`: next to it first, then renamed over it, so that
/// a reader never sees half a report (the process may be cut short while
/// `_exit` or an exec waits for the monitor to write it).
fn write_report_file(path: &str, rep: &stats::Report) {
    let tmp = format!("{path}.tmp{}", std::process::id());
    if std::fs::write(&tmp, rep.to_json()).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    } else {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The pre-exec report's file: `<stats file>.exec-<CLOCK_MONOTONIC ns,
/// 20 digits>`, so that a chain of execs sorts in order.
fn pre_exec_path(path: &str, stamp: u64) -> String {
    format!("{path}.exec-{stamp:020}")
}

/// The report of the process now (every thread's numbers so far).
fn build_report(g: &Globals) -> stats::Report {
    let mut threads = with_finished(|l| l.clone());
    let high = HIGH.load(Ordering::Acquire);
    for slot in SLOTS.iter().take(high) {
        let p = slot.load(Ordering::Acquire);
        // SAFETY: slots are never freed.
        if let Some(t) = unsafe { p.as_ref() } {
            let tid = t.tid.load(Ordering::Acquire);
            if tid != 0 {
                threads.push(summary_of(t, tid));
            }
        }
    }
    stats::Report {
        pid: std::process::id(),
        source: g.source.name(),
        source_stats: g.source.stats(),
        inject: !g.cfg.no_inject,
        pm_latency_ns: g.cfg.pm_latency_ns,
        dram_latency_ns: g.cfg.dram_latency_ns,
        remote_latency_ns: g.cfg.remote_latency_ns,
        epoch_min_ns: g.cfg.epoch_min_ns,
        epoch_max_ns: g.cfg.epoch_max_ns,
        tsc_ghz: clock::tsc_ghz(),
        throttle: g.throttle.name().to_string(),
        throttle_note: g.mba_note.clone(),
        init_ns: INIT_NS.load(Ordering::Relaxed),
        threads_seen: THREADS_SEEN.load(Ordering::Relaxed),
        threads_untracked: UNTRACKED.load(Ordering::Relaxed),
        signals_sent: SIGNALS_SENT.load(Ordering::Relaxed),
        forked_child: FORKED.load(Ordering::Relaxed),
        main_run_delay_ns: std::fs::read_to_string("/proc/self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
            .unwrap_or(0),
        threads,
    }
}

fn start_monitor() {
    MONITOR_ON.store(true, Ordering::Release);
    // SAFETY: the real pthread_create with a valid start routine; the
    // monitor is not registered (it bypasses our hook).
    unsafe {
        let mut th: libc::pthread_t = 0;
        let r = real::pthread_create()(&mut th, std::ptr::null(), monitor_main, null_mut());
        if r == 0 {
            libc::pthread_detach(th);
        } else {
            MONITOR_ON.store(false, Ordering::Release);
        }
    }
}

extern "C" fn monitor_main(_: *mut c_void) -> *mut c_void {
    let Some(g) = GLOBALS.get() else {
        return null_mut();
    };
    let sig = our_signal();
    // The monitor never takes the epoch signal itself.
    let _ = mask_our_signal(libc::SIG_BLOCK);
    // Wake twice per maximum epoch (between 50 us and 5 ms): an epoch
    // ends between 1 and 1.5 maximum lengths, and the monitor's own cost
    // stays low.
    let period = (g.cfg.epoch_max_ns / 2.0).clamp(50e3, 5e6) as i64;
    let ts = libc::timespec {
        tv_sec: period / 1_000_000_000,
        tv_nsec: period % 1_000_000_000,
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    while MONITOR_ON.load(Ordering::Acquire) {
        // SAFETY: nanosleep with a valid timespec.
        unsafe { libc::nanosleep(&ts, null_mut()) };
        if EXIT_REPORT.load(Ordering::Acquire) == 1 {
            // `_exit` waits for this (see `report_before_exit`).
            report();
            EXIT_REPORT.store(2, Ordering::Release);
            break;
        }
        match EXEC_REPORT.load(Ordering::Acquire) {
            1 => {
                // An exec waits for this (see `report_before_exec`).
                if let Some(path) = &g.cfg.stats_file {
                    let stamp = EXEC_STAMP.load(Ordering::Relaxed);
                    write_report_file(&pre_exec_path(path, stamp), &build_report(g));
                }
                let _ = EXEC_REPORT.compare_exchange(1, 2, Ordering::AcqRel, Ordering::Relaxed);
            }
            3 => {
                // The exec failed: the process goes on and its exit report
                // will cover this part too.
                if let Some(path) = &g.cfg.stats_file {
                    let stamp = EXEC_STAMP.load(Ordering::Relaxed);
                    let _ = std::fs::remove_file(pre_exec_path(path, stamp));
                }
                EXEC_REPORT.store(0, Ordering::Release);
            }
            _ => {}
        }
        let now = rdtsc();
        let high = HIGH.load(Ordering::Acquire);
        for slot in SLOTS.iter().take(high) {
            let p = slot.load(Ordering::Acquire);
            // SAFETY: slots are never freed.
            let Some(t) = (unsafe { p.as_ref() }) else {
                continue;
            };
            let tid = t.tid.load(Ordering::Acquire);
            let start = t.epoch_start.load(Ordering::Acquire);
            if tid == 0 || start == u64::MAX || now.saturating_sub(start) < g.max_ticks {
                continue;
            }
            // A thread blocked in the kernel is not accumulating stalls;
            // signalling it would only interrupt its system call (sleeps,
            // sem_wait and poll return EINTR whatever SA_RESTART says).
            // Cheap test first: no CPU time since the last look means the
            // thread is blocked (no /proc read needed).
            let cpu = thread_cpu_ns(tid);
            let last = t.monitor_cpu_ns.swap(cpu, Ordering::Relaxed);
            if cpu == last || !is_running(pid, tid) {
                continue;
            }
            if !t.signal_pending.swap(true, Ordering::AcqRel) {
                // SAFETY: tgkill to a thread of our own process.
                unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig) };
                SIGNALS_SENT.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    null_mut()
}

/// CPU time of thread `tid` of this process (its CPUCLOCK_SCHED clock).
fn thread_cpu_ns(tid: i32) -> u64 {
    let clock = ((!(tid as libc::clockid_t)) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local timespec.
    if unsafe { real::clock_gettime()(clock, &mut ts) } != 0 {
        return u64::MAX;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// True when the thread is running or runnable (state `R` in
/// `/proc/PID/task/TID/stat`); true as well when that cannot be read.
fn is_running(pid: i32, tid: i32) -> bool {
    let mut path = [0u8; 64];
    let mut w = std::io::Cursor::new(&mut path[..]);
    use std::io::Write;
    if write!(w, "/proc/{pid}/task/{tid}/stat\0").is_err() {
        return true;
    }
    let mut buf = [0u8; 512];
    // SAFETY: open/read/close on a NUL-terminated path into a local buffer.
    let n = unsafe {
        let fd = libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return true;
        }
        let n = libc::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return true;
    }
    let text = &buf[..n as usize];
    match text.iter().rposition(|&c| c == b')') {
        Some(i) if i + 2 < text.len() => text[i + 2] == b'R',
        _ => true,
    }
}

extern "C" fn before_fork() {
    // The child has no modeller thread: nothing of ours left queued.
    crate::source::instrumented::thread::drain();
    while FINISHED
        .lock
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

extern "C" fn after_fork_parent() {
    FINISHED.lock.store(false, Ordering::Release);
}

/// In the child only the forking thread exists: drop every other thread's
/// state, start the forking thread's counters again, restart the monitor.
extern "C" fn after_fork_child() {
    crate::source::instrumented::thread::after_fork_child();
    FINISHED.lock.store(false, Ordering::Release);
    crate::pool::reset_after_fork();
    crate::source::instrumented::pm::reset_after_fork();
    FORKED.store(true, Ordering::Relaxed);
    REPORTED.store(false, Ordering::Relaxed);
    EXIT_REPORT.store(0, Ordering::Relaxed);
    EXEC_REPORT.store(0, Ordering::Relaxed);
    OWNER_PID.store(own_pid(), Ordering::Relaxed);
    // SAFETY: single-threaded now; we own the list.
    unsafe { (*FINISHED.list.get()).clear() };
    let me = current().map(|t| t as *const ThreadState);
    let high = HIGH.load(Ordering::Acquire);
    for slot in SLOTS.iter().take(high) {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() || Some(p as *const ThreadState) == me {
            continue;
        }
        // SAFETY: the owner thread does not exist in the child.
        unsafe {
            let t = &*p;
            if t.tid.load(Ordering::Relaxed) != 0 {
                if let Some(mut c) = (*t.counters.get()).take() {
                    c.stop();
                }
                t.tid.store(0, Ordering::Release);
            }
        }
    }
    if let Some(t) = current() {
        t.tid.store(gettid(), Ordering::Release);
        reset_stats(&t.stats);
        // SAFETY: owner thread.
        unsafe {
            *t.account.get() = OverheadAccount::default();
            if let Some(c) = (*t.counters.get()).as_mut() {
                if c.start().is_err() {
                    *t.counters.get() = None;
                }
            }
        }
        t.busy.store(false, Ordering::Relaxed);
        t.deferred.store(false, Ordering::Relaxed);
        t.signal_pending.store(false, Ordering::Relaxed);
        t.epoch_start.store(rdtsc(), Ordering::Release);
    }
    SIGNALS_SENT.store(0, Ordering::Relaxed);
    if active() {
        start_monitor();
    }
}

/// A cache line was flushed by the calling thread (write model).
#[inline]
pub fn note_flushes(n: usize) {
    if !active() {
        return;
    }
    let Some(t) = current() else { return };
    t.stats.flushes.fetch_add(n as u64, Ordering::Relaxed);
    if !enter(t) {
        return;
    }
    // SAFETY: owner thread under the guard.
    if let Some(w) = unsafe { (*t.write.get()).as_mut() } {
        let now = ticks_to_ns(rdtsc());
        for _ in 0..n {
            w.flush(now);
        }
    }
    leave(t);
}

/// A durability point: stall until the flushes still in flight in the
/// write model complete. Returns the stall in ns.
#[inline]
pub fn durability_point() -> f64 {
    if !active() {
        return 0.0;
    }
    let Some(t) = current() else { return 0.0 };
    let Some(g) = GLOBALS.get() else { return 0.0 };
    if !enter(t) {
        return 0.0;
    }
    let mut wait = 0.0;
    // SAFETY: owner thread under the guard.
    if let Some(w) = unsafe { (*t.write.get()).as_mut() } {
        wait = w.drain(ticks_to_ns(rdtsc()));
        if wait > 0.0 && !g.cfg.no_inject {
            spin(t, wait);
        }
        t.stats
            .write_delay_ns
            .fetch_add(wait as u64, Ordering::Relaxed);
    }
    // Device mode: a wear-leveling migration stalls the write that caused it.
    let stall = crate::source::instrumented::thread::device_stall_due();
    if stall > 0.0 {
        if !g.cfg.no_inject {
            spin(t, stall);
        }
        t.stats
            .requested_ns
            .fetch_add(stall as u64, Ordering::Relaxed);
        if !g.cfg.no_inject {
            t.stats
                .injected_ns
                .fetch_add(stall as u64, Ordering::Relaxed);
        }
        wait += stall;
    }
    leave(t);
    wait
}

/// Statistics of the monitor (for tests and benchmarks).
pub fn signals_sent() -> u64 {
    SIGNALS_SENT.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_book_one_device_timeline() {
        // Four threads book 100 transfers of 1,000 ticks each, all from
        // epochs that began at tick 1: the device is busy for the sum, and
        // every booking ends at a distinct multiple of 1,000 (none lost or
        // counted twice under contention).
        let base = DEVICE_BUSY_UNTIL.load(Ordering::Relaxed).max(1);
        let ends: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        (0..100)
                            .map(|_| book_device(base, 1000))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut sorted = ends.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 400);
        assert_eq!(*sorted.last().unwrap(), base + 400_000);
        assert_eq!(DEVICE_BUSY_UNTIL.load(Ordering::Relaxed), base + 400_000);
        // An epoch that began after the device went idle starts afresh.
        let later = base + 1_000_000;
        assert_eq!(book_device(later, 500), later + 500);
    }

    #[test]
    fn a_device_wait_ends_at_its_deadline() {
        clock::set_tsc_ghz(clock::measure_tsc_ghz(2_000_000));
        let deadline = rdtsc() + clock::ns_to_ticks(3e6);
        let end = spin_until(deadline);
        assert!(end >= deadline);
        // A deadline in the past returns at once.
        assert!(spin_until(1) >= 1);
    }
}
