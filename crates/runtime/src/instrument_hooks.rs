//! The callbacks that programs built by `pmlab cc` call on every load and
//! store of their own code (clang's `-fsanitize-coverage=trace-loads,
//! trace-stores`), and the per-thread state behind them.
//!
//! They live in libpmlab.so, never in the program, so one copy serves the
//! whole process whether the library was linked (`pmlab cc` adds it with an
//! rpath) or preloaded by `pmlab run`.
//!
//! # Cost
//!
//! * Not under `pmlab run --source instrumented` the hooks return after one
//!   relaxed atomic load: an instrumented program runs normally.
//! * The common case is a hit in a small per-thread direct-mapped *filter*
//!   of recently touched lines (a subset of the modelled cache): a TLS
//!   lookup, a compare and an increment.
//! * Otherwise the hook *logs* the access (address, position in the
//!   thread's access stream, and for 8-byte loads the value the program is
//!   about to load) in a per-thread log of [`LOG_ENTRIES`] and puts the line
//!   in the filter: a dozen instructions and no wait for the memory access
//!   itself, so that the program's independent misses still overlap as they
//!   do natively (an earlier design ran the model in the hook and had to
//!   wait for each miss: 8 independent chains took 200 ns per access instead
//!   of 22).
//! * The log is run in batches through the thread's cache model (the size
//!   and associativity of this machine's last-level cache), which classifies
//!   each miss as PM or DRAM, feeds the overlap (MLP) estimator and counts
//!   write-backs: when the log is full (on the runtime's modeller thread
//!   when a CPU is free: the `offload` module), and whenever the runtime reads
//!   the thread's totals (epoch ends, sync points, thread exit). Each batch
//!   the thread runs itself is
//!   timed with the TSC, after a fence that lets the program's outstanding
//!   misses complete first, and reported as overhead, so that the runtime
//!   subtracts it from the injected delays. A batch run from the epoch
//!   signal's handler is async-signal-safe: it touches only the thread's own
//!   model, allocates nothing and is skipped when the signal interrupted a
//!   batch (the entries then count in the next epoch).
//!
//! * While `pmlab trace` records (`PMLAB_TRACE_STORES=1`), every access is
//!   also classified as PM or DRAM: a PM store becomes a `W` record; DRAM
//!   loads and stores and PM loads are counted in the thread's state and
//!   recorded as one `UNTRACED` count every
//!   [`TRACE_COUNT_EVERY`] and when the thread ends or the trace finishes,
//!   so that `pmlab analyze` can report the PM share of all accesses. When
//!   not tracing this costs a bit test of the state the hook loads anyway;
//!   when tracing, an out-of-line call that classifies the access (about
//!   2 ns per access on this VM).
//!
//! Accesses that straddle two lines are counted on their first line only.

use pmlab_model::cache::{CacheConfig, CompactCache, Hierarchy};
use pmlab_model::mlp::{window_share, MemKind, OverlapConfig, OverlapEstimator, SerialCounts};
#[cfg(not(target_arch = "x86_64"))]
use std::cell::UnsafeCell;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Entries of a thread's miss log (24 B each), processed in one batch.
pub const LOG_ENTRIES: usize = 512;

/// Entries ahead of the one being processed whose model set is prefetched.
const PREFETCH_AHEAD: usize = 16;

/// Entries of the per-thread filter (direct-mapped, one line each).
pub const FILTER_LINES: usize = 256;
const LINE_SHIFT: u32 = 6;

/// [`ON`] while the hooks count, plus [`TRACING`] while they also feed the
/// tracer: one load tells the hook both.
static ACTIVE: AtomicU8 = AtomicU8::new(0);
const ON: u8 = 1;
const TRACING: u8 = 2;

/// Which accesses count as PM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmMode {
    /// Every memory access is to PM until the program registers a PM pool
    /// range (it uses `pmalloc`); from then on only the pool is PM.
    Auto = 0,
    /// Every memory access is to PM (Quartz's single-memory mode).
    All = 1,
    /// Only addresses in registered PM ranges are PM (two-memory mode).
    Pool = 2,
}

static PM_MODE: AtomicU8 = AtomicU8::new(PmMode::Auto as u8);
const MAX_RANGES: usize = 16;
static RANGE_COUNT: AtomicUsize = AtomicUsize::new(0);
static RANGES: [(AtomicUsize, AtomicUsize); MAX_RANGES] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_RANGES];

/// Geometry of the modelled cache, set by [`activate`].
static LLC_BYTES: AtomicU64 = AtomicU64::new(32 << 20);
static LLC_WAYS: AtomicU64 = AtomicU64::new(16);
static FILL_BUFFERS: AtomicU64 = AtomicU64::new(10);
static WINDOW: AtomicU64 = AtomicU64::new(64);
static HOOKED_WINDOW: AtomicU64 = AtomicU64::new(DEFAULT_HOOKED_WINDOW);

/// Default of [`HookConfig::hooked_window`], fitted on this project's
/// machine (AMD EPYC, KVM guest): with no instrumented access between the
/// misses of 8 independent chains, 4.7 of them overlapped under the hooks;
/// with 1, 2 and 4 filter hits between them, 3.4, 2.6 and 2.5 (natively
/// 7.4-7.8 in every case; `bench/hooked-window.sh`); memlat's 8 chains
/// (two hits per miss) 2.6-3.3. A logged access counts [`LOGGED_WEIGHT`]
/// window units, a hit one: these imply 9.5-14.7 units (the hooks' own
/// time included), and 13 fits memlat's quieter runs.
pub const DEFAULT_HOOKED_WINDOW: u64 = 13;

/// Window units of a logged access (its hook runs the log path, about
/// twice the instructions of a filter hit).
pub const LOGGED_WEIGHT: u64 = 2;

/// Settings of the hooks, fixed when the instrumented source opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookConfig {
    /// The modelled last-level cache.
    pub llc: CacheConfig,
    /// Memory-level parallelism parameters.
    pub overlap: OverlapConfig,
    /// The out-of-order window of the instrumented program, in window units
    /// (an access whose hook hits the filter counts 1, a logged access
    /// [`LOGGED_WEIGHT`]): the hooks' own instructions fill the core's
    /// reorder buffer, so fewer independent misses overlap than natively.
    pub hooked_window: u64,
    /// Which accesses are PM.
    pub pm_mode: PmMode,
}

/// Turn the hooks on for the whole process.
pub fn activate(cfg: HookConfig) {
    LLC_BYTES.store(cfg.llc.size_bytes, Ordering::Relaxed);
    LLC_WAYS.store(cfg.llc.ways as u64, Ordering::Relaxed);
    FILL_BUFFERS.store(cfg.overlap.fill_buffers as u64, Ordering::Relaxed);
    WINDOW.store(cfg.overlap.window_accesses, Ordering::Relaxed);
    HOOKED_WINDOW.store(cfg.hooked_window.max(1), Ordering::Relaxed);
    PM_MODE.store(cfg.pm_mode as u8, Ordering::Relaxed);
    offload::start();
    ACTIVE.fetch_or(ON, Ordering::Release);
}

/// Turn the hooks off (they return immediately again).
pub fn deactivate() {
    ACTIVE.fetch_and(!ON, Ordering::Release);
}

/// True while the hooks count.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed) & ON != 0
}

/// Offer every access to the tracer (`on`, once a trace is recording) or
/// stop doing so; see the module's documentation.
pub fn trace_accesses(on: bool) {
    if on {
        ACTIVE.fetch_or(TRACING, Ordering::Release);
    } else {
        ACTIVE.fetch_and(!TRACING, Ordering::Release);
    }
}

/// Register `[start, start + len)` as emulated PM (the PM pool calls this
/// for each mapping it creates). At most 16 ranges; returns false when full.
pub fn add_pm_range(start: usize, len: usize) -> bool {
    let i = RANGE_COUNT.load(Ordering::Acquire);
    if i >= MAX_RANGES {
        return false;
    }
    RANGES[i].0.store(start, Ordering::Relaxed);
    RANGES[i]
        .1
        .store(start.saturating_add(len), Ordering::Relaxed);
    RANGE_COUNT.store(i + 1, Ordering::Release);
    true
}

/// True when `addr` is emulated PM: everything in `All` mode; in `Auto`
/// mode everything until a PM pool exists, then like `Pool`: addresses in
/// the runtime's PM pool or in a range given to [`add_pm_range`].
#[inline]
pub fn is_pm(addr: usize) -> bool {
    let mode = PM_MODE.load(Ordering::Relaxed);
    if mode == PmMode::All as u8 {
        return true;
    }
    let n = RANGE_COUNT.load(Ordering::Acquire);
    let (base, _) = crate::pool::range();
    if mode == PmMode::Auto as u8 && n == 0 && base == 0 {
        return true;
    }
    crate::pool::contains(addr, 1)
        || RANGES[..n]
            .iter()
            .any(|(lo, hi)| addr >= lo.load(Ordering::Relaxed) && addr < hi.load(Ordering::Relaxed))
}

static UNABSORBED_NS: AtomicU64 = AtomicU64::new(0);

/// Batches the modeller thread ran, all threads.
static OFFLOADED: AtomicU64 = AtomicU64::new(0);

/// Batches of logged misses the modeller thread ran for the program's
/// threads, in all (the statistics report it).
pub fn offloaded_batches() -> u64 {
    OFFLOADED.load(Ordering::Relaxed)
}

/// Add `ns` (if positive) to a process-wide nanosecond total.
fn add_ns(total: &AtomicU64, ns: f64) {
    if ns > 0.0 {
        total.fetch_add(ns as u64, Ordering::Relaxed);
    }
}

/// Record hook overhead that an epoch's delay could not absorb (the
/// instrumented source drops it rather than carry it into later phases).
pub fn add_unabsorbed_ns(ns: f64) {
    add_ns(&UNABSORBED_NS, ns);
}

/// Total hook overhead, all threads, that no delay absorbed (ns).
pub fn unabsorbed_ns() -> u64 {
    UNABSORBED_NS.load(Ordering::Relaxed)
}

static WINDOW_LOSS_NS: AtomicU64 = AtomicU64::new(0);

/// Record time an epoch lost to the hooks' shrinking of the out-of-order
/// window, where it was charged instead of the calls' cost.
pub fn add_window_loss_ns(ns: f64) {
    add_ns(&WINDOW_LOSS_NS, ns);
}

/// Total window loss charged, all threads (ns).
pub fn window_loss_ns() -> u64 {
    WINDOW_LOSS_NS.load(Ordering::Relaxed)
}

/// Cumulative counts of one thread (never reset: readers take differences).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadTotals {
    /// Instrumented accesses seen.
    pub accesses: u64,
    /// Accesses that missed the filter, were logged and went through the
    /// cache model.
    pub slow_calls: u64,
    /// Batches of logged accesses the thread processed itself.
    pub batches: u64,
    /// Batches the modeller thread processed for it (they cost the thread
    /// nothing but the hand-off).
    pub offloaded: u64,
    /// TSC cycles spent processing the batches. A batch interrupted by the
    /// epoch signal (whose handler may inject a delay) is not timed: it
    /// counts the mean cycles per entry of the uninterrupted ones.
    pub slow_cycles: u64,
    /// Entries and cycles of the uninterrupted batches.
    pub clean_entries: u64,
    /// See `clean_entries`.
    pub clean_cycles: u64,
    /// Serial accesses and misses (MLP estimate).
    pub serial: SerialCounts,
    /// Serial accesses (both kinds) as the instrumented program itself runs
    /// them: the same misses in the smaller window the hooks leave
    /// ([`HookConfig::hooked_window`]). At least `serial`'s total: the
    /// difference, at DRAM latency, is time the program loses to the hooks.
    pub hooked_serial: f64,
    /// Dirty lines written back to PM.
    pub pm_writebacks: u64,
    /// Dirty lines written back to DRAM.
    pub dram_writebacks: u64,
}

impl ThreadTotals {
    /// Bytes moved between the caches and PM: misses and write-backs, 64 B each.
    pub fn pm_bytes(&self) -> u64 {
        (self.serial.pm_misses + self.pm_writebacks) << LINE_SHIFT
    }
}

/// The thread's cache model: the compact one when the set count allows it
/// (a power of two, a multiple of the filter size: then a line and the
/// victim it evicts share a filter slot), else the full-tag one.
enum Model {
    Compact(CompactCache<HugeTable>),
    Full(Hierarchy),
}

/// One logged access.
#[derive(Debug, Clone, Copy, Default)]
struct LogEntry {
    /// Byte address; bit 63 set for a store.
    addr: usize,
    /// Position in the thread's access stream.
    at: u64,
    /// The 8 bytes an 8-byte load read (0: not known).
    value: u64,
}

const STORE_BIT: usize = 1 << 63;

struct Slow {
    cache: Model,
    est: OverlapEstimator,
    /// Logged accesses run through the model.
    entries: u64,
    /// Position, in hooked-window units, of the last miss.
    last_miss_units: u64,
    /// Sum of the misses' [`window_share`]s.
    window_serial: f64,
    totals: ThreadTotals,
    /// Two logs: the hook fills `Tls::cur` while the other may wait for,
    /// or be in, the modeller thread (see [`offload`]).
    logs: [[LogEntry; LOG_ENTRIES]; 2],
    /// Held by whoever runs entries through the model (the owner thread or
    /// the modeller).
    lock: AtomicBool,
    /// State of the handed-off log: [`NONE`], [`READY`] (waiting) or
    /// [`TAKEN`] (the modeller runs it, holding `lock`).
    ready: AtomicU8,
    /// The handed-off log and its entries, written by the owner before it
    /// stores [`READY`].
    ready_log: usize,
    ready_from: usize,
    ready_to: usize,
    /// Seqlock over `published`, the totals as of the last batch, for
    /// readers that cannot take `lock` (a signal handler while the
    /// modeller holds it).
    seq: AtomicU64,
    published: std::cell::UnsafeCell<ThreadTotals>,
    /// This model is registered for the modeller (never freed: reused by
    /// later threads, see [`offload`]).
    shared: bool,
    /// A thread owns this model (registered models only).
    owned: AtomicBool,
}

const NONE: u8 = 0;
const READY: u8 = 1;
const TAKEN: u8 = 2;

struct Tls {
    /// `line << 1 | dirty`; 0 is empty (line 0 is never accessed).
    filter: [usize; FILTER_LINES],
    accesses: u64,
    /// DRAM loads and stores not yet recorded (tracing only).
    trace_dram: u64,
    /// PM loads not yet recorded (tracing only).
    trace_pm_loads: u64,
    slow: *mut Slow,
    /// Entries written to `slow.log`; the first `processed` of them have
    /// been through the model. A signal handler may advance `processed`
    /// (never `logged`); only the hook, outside a signal, resets both.
    logged: usize,
    processed: usize,
    /// Which of `slow.logs` the hook fills.
    cur: usize,
    /// The totals [`totals`] returned last (what it returns when it cannot
    /// read newer ones).
    last: ThreadTotals,
    /// A batch or the model's allocation is under way on this thread.
    busy: bool,
    /// The epoch signal's handler ran while a batch was under way: the
    /// batch's clock reading includes the handler's delay.
    interrupted: bool,
    retired: bool,
}

// The thread's `Tls` lives in this library's static TLS block, reached with
// the initial-exec model (the thread pointer plus an offset the loader
// fixes): two instructions, no call to `__tls_get_addr` and no closure, so
// that the whole hook inlines into each callback. All-zero bytes are the
// valid initial state. The library is always loaded at start-up (preloaded
// or linked), which the initial-exec model requires.
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 6",
    ".globl pmlab_hooks_tls",
    ".hidden pmlab_hooks_tls",
    ".type pmlab_hooks_tls, @object",
    ".size pmlab_hooks_tls, {size}",
    "pmlab_hooks_tls:",
    ".zero {size}",
    ".popsection",
    size = const std::mem::size_of::<Tls>(),
);

/// The calling thread's hook state.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tls() -> *mut Tls {
    let p: *mut Tls;
    // SAFETY: reads the thread pointer and the GOT slot the loader filled
    // with our TLS block's offset; no other effect.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            "add {p}, qword ptr [rip + pmlab_hooks_tls@GOTTPOFF]",
            p = out(reg) p,
            options(pure, readonly, nostack),
        );
    }
    p
}

#[cfg(not(target_arch = "x86_64"))]
thread_local! {
    static TLS: UnsafeCell<Tls> = const {
        UnsafeCell::new(Tls {
            filter: [0; FILTER_LINES],
            accesses: 0,
            trace_dram: 0,
            trace_pm_loads: 0,
            slow: std::ptr::null_mut(),
            logged: 0,
            processed: 0,
            cur: 0,
            last: ThreadTotals {
                accesses: 0,
                slow_calls: 0,
                batches: 0,
                offloaded: 0,
                slow_cycles: 0,
                clean_entries: 0,
                clean_cycles: 0,
                serial: SerialCounts {
                    dram: 0.0,
                    pm: 0.0,
                    dram_misses: 0,
                    pm_misses: 0,
                    dependent: 0,
                },
                hooked_serial: 0.0,
                pm_writebacks: 0,
                dram_writebacks: 0,
            },
            busy: false,
            interrupted: false,
            retired: false,
        })
    };
}

/// The calling thread's hook state.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn tls() -> *mut Tls {
    TLS.with(|t| t.get())
}

#[inline(always)]
pub(crate) fn on_access(addr: usize, size: u32, write: bool, value: Option<*const u64>) {
    let state = ACTIVE.load(Ordering::Relaxed);
    if state & ON == 0 {
        return;
    }
    let t = tls();
    // SAFETY: the state belongs to this thread; a signal handler only
    // works on it through raw pointers (see `totals`).
    unsafe {
        if state & TRACING != 0 {
            trace_access(t, addr, size, write);
        }
        (*t).accesses += 1;
        let line = addr >> LINE_SHIFT;
        let e = (*t).filter[line % FILTER_LINES];
        if e >> 1 == line && (e & 1) >= write as usize {
            return;
        }
        log_miss(t, addr, line, write, value);
    }
}

/// Accesses of one kind a thread counts before it records them as one
/// `UNTRACED` record.
pub const TRACE_COUNT_EVERY: u64 = 4096;

/// Records the calling thread's pending `UNTRACED` counts when the thread
/// ends. Registered (a TLS destructor) at the thread's first slow call
/// while tracing; the main thread's runs before `exit`'s handlers finish
/// the trace.
struct FlushAtExit;

impl Drop for FlushAtExit {
    fn drop(&mut self) {
        flush_trace_counts();
    }
}

thread_local! {
    static FLUSH_AT_EXIT: FlushAtExit = const { FlushAtExit };
}

/// Offer one access to the tracer (tracing is on): a PM store is recorded,
/// anything else counted in the thread's state.
///
/// # Safety
///
/// `t` is the calling thread's state.
// Out of line: the hook stays small when not tracing.
#[inline(never)]
unsafe fn trace_access(t: *mut Tls, addr: usize, size: u32, write: bool) {
    let pm = is_pm(addr);
    if pm && write {
        crate::tracer::record(
            pmlab_trace::Op::Write,
            pmlab_trace::Space::Pm,
            addr as u64,
            size,
        );
        return;
    }
    let n = if pm {
        &mut (*t).trace_pm_loads
    } else {
        &mut (*t).trace_dram
    };
    *n += 1;
    if *n >= TRACE_COUNT_EVERY {
        flush_counts(t);
    }
}

#[cold]
#[inline(never)]
unsafe fn flush_counts(t: *mut Tls) {
    for (n, space) in [
        (&mut (*t).trace_dram, pmlab_trace::Space::Dram),
        (&mut (*t).trace_pm_loads, pmlab_trace::Space::Pm),
    ] {
        let v = std::mem::take(n);
        if v > 0 {
            crate::tracer::record(pmlab_trace::Op::Untraced, space, v, 0);
        }
    }
}

/// Record the calling thread's pending `UNTRACED` counts now (the tracer
/// calls this before it finishes the trace).
pub fn flush_trace_counts() {
    // SAFETY: own thread's state.
    unsafe { flush_counts(tls()) };
}

/// Log an access that missed the filter (see the module's documentation).
///
/// # Safety
///
/// `t` is the calling thread's state; `value`, when given, is readable.
#[inline(never)]
unsafe fn log_miss(t: *mut Tls, addr: usize, line: usize, write: bool, value: Option<*const u64>) {
    if ((*t).slow.is_null() || (*t).logged >= LOG_ENTRIES) && !make_room(t) {
        return;
    }
    let n = (*t).logged;
    // The value the program is about to load (the hook runs before the
    // load): a later miss to the line it names depends on this one. Nothing
    // waits for it: the store into the log completes whenever the miss does.
    let v = value.map_or(0, |p| std::ptr::read_unaligned(p));
    let e = (*(*t).slow).logs[(*t).cur].as_mut_ptr().add(n);
    e.write(LogEntry {
        addr: addr | if write { STORE_BIT } else { 0 },
        at: (*t).accesses,
        value: v,
    });
    // The entry is complete before it is counted (a signal handler on this
    // thread may process the log at any instruction).
    compiler_fence(Ordering::SeqCst);
    std::ptr::write_volatile(&mut (*t).logged, n + 1);
    (*t).filter[line % FILTER_LINES] = (line << 1) | write as usize;
}

/// Make room in the log: create the thread's model on its first miss, or
/// process the full log. False when the access cannot be logged (a batch is
/// under way below us, the thread has retired, or memory ran out).
#[cold]
#[inline(never)]
unsafe fn make_room(t: *mut Tls) -> bool {
    if (*t).busy || (*t).retired {
        return false;
    }
    if (*t).slow.is_null() {
        (*t).busy = true;
        compiler_fence(Ordering::SeqCst);
        let s = new_slow();
        if s.is_null() {
            (*t).retired = true;
        } else {
            (*t).slow = s;
            if crate::tracer::enabled() {
                let _ = FLUSH_AT_EXIT.try_with(|_| ());
            }
        }
        compiler_fence(Ordering::SeqCst);
        (*t).busy = false;
        return !s.is_null();
    }
    if offload::hand_off(t) {
        return true;
    }
    process(t, true, true);
    true
}

/// Batches that one run of the model on the owner thread added to its
/// totals (see [`totals_and_ran`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ran {
    /// Batches run.
    pub batches: u64,
    /// Their cycles, as added to [`ThreadTotals::slow_cycles`].
    pub cycles: u64,
}

/// Run the logged, unprocessed accesses through the model (first the
/// handed-off log, if the modeller has not taken it); with `reset` (the
/// hook, never a signal handler) empty the log afterwards. Without `wait`
/// (a signal handler) nothing is done while the modeller holds the model:
/// the entries count at the next reading. Returns what it ran.
///
/// # Safety
///
/// `t` is the calling thread's state, not busy, with a model.
unsafe fn process(t: *mut Tls, reset: bool, wait: bool) -> Ran {
    (*t).busy = true;
    compiler_fence(Ordering::SeqCst);
    let s = &mut *(*t).slow;
    let mut ran = Ran::default();
    if !offload::lock(s, wait) {
        compiler_fence(Ordering::SeqCst);
        (*t).busy = false;
        return ran;
    }
    let end = std::ptr::read_volatile(&(*t).logged).min(LOG_ENTRIES);
    let start = (*t).processed;
    let pending = s.ready.load(Ordering::Acquire) == READY;
    std::ptr::write_volatile(&mut (*t).interrupted, false);
    if start < end || pending {
        // The clock starts once the program's own outstanding misses (the
        // values in the log) have arrived: they are not overhead.
        let t0 = tsc_after(0);
        let mut n = 0;
        if pending {
            let (log, from, to) = (s.ready_log, s.ready_from, s.ready_to);
            run_entries(Some(t), s, log, from, to);
            n += (to - from) as u64;
            s.ready.store(NONE, Ordering::Release);
        }
        run_entries(Some(t), s, (*t).cur, start, end);
        n += (end - start) as u64;
        let cycles = tsc_after(0).wrapping_sub(t0);
        s.totals.slow_calls += n;
        // The log handed off but run here counts as a batch of its own.
        ran.batches = pending as u64 + (start < end) as u64;
        if std::ptr::read_volatile(&(*t).interrupted) {
            let tt = &s.totals;
            ran.cycles = (n * tt.clean_cycles)
                .checked_div(tt.clean_entries)
                .unwrap_or(0);
        } else {
            ran.cycles = cycles;
            s.totals.clean_cycles += cycles;
            s.totals.clean_entries += n;
        }
        s.totals.batches += ran.batches;
        s.totals.slow_cycles += ran.cycles;
    }
    offload::publish(s);
    s.lock.store(false, Ordering::Release);
    if reset {
        (*t).logged = 0;
        (*t).processed = 0;
    } else {
        (*t).processed = end;
    }
    compiler_fence(Ordering::SeqCst);
    (*t).busy = false;
    ran
}

/// Entries `from..to` of log `log` through the model, in order, the
/// model's sets prefetched ahead. `t` is the owner's state (needed by the
/// full-tag model only, which is never handed off).
///
/// # Safety
///
/// The caller holds `s.lock`; `t`, if given, is the owner thread's state.
#[inline(always)]
unsafe fn run_entries(t: Option<*mut Tls>, s: &mut Slow, log: usize, from: usize, to: usize) {
    if from >= to {
        return;
    }
    let (before, window_before) = (s.totals.serial, s.window_serial);
    if let Model::Compact(c) = &s.cache {
        for e in &s.logs[log][from..to.min(from + PREFETCH_AHEAD)] {
            prefetch(c.set_addr(((e.addr & !STORE_BIT) >> LINE_SHIFT) as u64));
        }
    }
    for i in from..to {
        if let Model::Compact(c) = &s.cache {
            if i + PREFETCH_AHEAD < to {
                let ahead = s.logs[log][i + PREFETCH_AHEAD].addr & !STORE_BIT;
                prefetch(c.set_addr((ahead >> LINE_SHIFT) as u64));
            }
        }
        let e = s.logs[log][i];
        process_one(t, s, e);
    }
    // The batch as the instrumented program ran it: never more overlap
    // than natively (a chase stays a chase), less where the hooked window
    // cannot hold the misses the native window does.
    let after = s.totals.serial;
    let serial = (after.dram - before.dram) + (after.pm - before.pm);
    s.totals.hooked_serial += serial.max(s.window_serial - window_before);
}

/// One logged access through the model and the overlap estimator.
#[inline(always)]
unsafe fn process_one(t: Option<*mut Tls>, s: &mut Slow, e: LogEntry) {
    let write = e.addr & STORE_BIT != 0;
    let addr = e.addr & !STORE_BIT;
    let line = addr >> LINE_SHIFT;
    let pm = is_pm(addr);
    let miss = match &mut s.cache {
        Model::Compact(c) => {
            // The victim shares the new line's set, hence its filter slot,
            // which the hook already gave to the new line.
            let a = c.access(line as u64, write, pm);
            if let Some(v) = a.victim {
                if v.dirty && v.pm {
                    s.totals.pm_writebacks += 1;
                } else if v.dirty {
                    s.totals.dram_writebacks += 1;
                }
            }
            !a.hit
        }
        Model::Full(h) => {
            let a = h.access(line as u64, write);
            if let Some(t) = t {
                for &ev in &a.evicted[..a.n_evicted] {
                    let slot = &mut (*t).filter[ev as usize % FILTER_LINES];
                    if *slot >> 1 == ev as usize {
                        *slot = 0;
                    }
                }
            }
            for &wb in a.writebacks() {
                if is_pm((wb as usize) << LINE_SHIFT) {
                    s.totals.pm_writebacks += 1;
                } else {
                    s.totals.dram_writebacks += 1;
                }
            }
            a.is_miss()
        }
    };
    // Position in hooked-window units: the accesses so far, the logged ones
    // (this one included) weighing LOGGED_WEIGHT.
    s.entries += 1;
    let units = e.at + s.entries * (LOGGED_WEIGHT - 1);
    if miss {
        let kind = if pm { MemKind::Pm } else { MemKind::Dram };
        s.est
            .miss(line as u64, kind, e.at, Some(e.value), LINE_SHIFT);
        s.totals.serial = s.est.counts();
        let gap = units.saturating_sub(s.last_miss_units);
        s.last_miss_units = units;
        s.window_serial += window_share(gap, HOOKED_WINDOW.load(Ordering::Relaxed));
    }
}

/// The compact model's tag table, in its own 2 MiB-aligned mapping with
/// transparent huge pages: a 2 MiB table on 4 KiB pages costs the program
/// hundreds of TLB entries at every batch (memlat with a 32 MiB model ran
/// ~13 ns per access slower than with a 1 MiB one, beyond the batches'
/// measured time).
struct HugeTable {
    ptr: *mut u32,
    len: usize,
}

impl HugeTable {
    fn new(len: usize) -> Option<HugeTable> {
        let bytes = len.checked_mul(4)?.max(1);
        // SAFETY: a fresh anonymous mapping, owned by the table.
        let p = unsafe { crate::pool::map_anonymous_huge(bytes) };
        (p != libc::MAP_FAILED).then_some(HugeTable {
            ptr: p as *mut u32,
            len,
        })
    }
}

impl AsRef<[u32]> for HugeTable {
    fn as_ref(&self) -> &[u32] {
        // SAFETY: `len` slots mapped read-write for the table's life.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u32]> for HugeTable {
    fn as_mut(&mut self) -> &mut [u32] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HugeTable {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, (self.len * 4).max(1)) };
    }
}

#[cold]
fn new_slow() -> *mut Slow {
    if let Some(s) = offload::reuse() {
        return s;
    }
    let llc = CacheConfig::new(
        LLC_BYTES.load(Ordering::Relaxed),
        LLC_WAYS.load(Ordering::Relaxed) as u32,
    );
    let compact = llc
        .sets()
        .is_ok_and(|n| n.is_power_of_two() && n % FILTER_LINES as u64 == 0);
    let cache = if compact {
        let Ok(n) = CompactCache::table_len(llc) else {
            return std::ptr::null_mut();
        };
        let Some(table) = HugeTable::new(n) else {
            return std::ptr::null_mut();
        };
        match CompactCache::with_table(llc, table) {
            Ok(c) => Model::Compact(c),
            Err(_) => return std::ptr::null_mut(),
        }
    } else {
        match Hierarchy::new(&[llc]) {
            Ok(c) => Model::Full(c),
            Err(_) => return std::ptr::null_mut(),
        }
    };
    let est = OverlapEstimator::new(OverlapConfig {
        fill_buffers: FILL_BUFFERS.load(Ordering::Relaxed) as usize,
        window_accesses: WINDOW.load(Ordering::Relaxed),
    });
    let shared = compact && offload::enabled();
    let s = Box::into_raw(Box::new(Slow {
        cache,
        est,
        entries: 0,
        last_miss_units: 0,
        window_serial: 0.0,
        totals: ThreadTotals::default(),
        logs: [[LogEntry::default(); LOG_ENTRIES]; 2],
        lock: AtomicBool::new(false),
        ready: AtomicU8::new(NONE),
        ready_log: 0,
        ready_from: 0,
        ready_to: 0,
        seq: AtomicU64::new(0),
        published: std::cell::UnsafeCell::new(ThreadTotals::default()),
        shared,
        owned: AtomicBool::new(true),
    }));
    if shared && !offload::register(s) {
        // SAFETY: not yet visible to anyone else.
        unsafe { (*s).shared = false };
    }
    s
}

#[inline(always)]
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

#[inline(always)]
fn prefetch(p: *const u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint never faults.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The TSC once every earlier instruction has completed, in particular
/// the load of `_dep` (lfence waits for it), so that the time of that load
/// is not counted after this point.
#[inline(always)]
fn tsc_after(_dep: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence and rdtsc have no preconditions on x86-64.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// The calling thread's cumulative totals, after processing what the
/// thread has logged (waiting, spinning, for a log of it the modeller
/// thread is running). Async-signal-safe: works on the thread's own state
/// without references and takes no pthread lock (the modeller never waits
/// for this thread); when the signal interrupted a batch of the thread
/// itself, the entries not yet processed count at the next reading (totals
/// are cumulative, nothing is lost).
pub fn totals() -> ThreadTotals {
    totals_and_ran().0
}

/// [`totals`], and the batches that the call itself ran to bring them up
/// to date (the caller, which times the call, need not count them again).
pub fn totals_and_ran() -> (ThreadTotals, Ran) {
    let t = tls();
    let mut ran = Ran::default();
    // SAFETY: own thread; raw reads; `process` runs only when no batch
    // is under way on this thread.
    unsafe {
        let s = std::ptr::read_volatile(&(*t).slow);
        let busy = std::ptr::read_volatile(&(*t).busy);
        if busy {
            // A batch of this thread is under way below us (it may be
            // publishing): the previous reading stands.
            std::ptr::write_volatile(&mut (*t).interrupted, true);
        } else if !s.is_null() {
            // Exact counts up to here: wait for a log the modeller is
            // running (it never waits for this thread, and holds the lock
            // for one batch at most), then run what is left ourselves.
            ran = process(t, false, true);
        }
        let mut out = std::ptr::read_volatile(&(*t).last);
        if !s.is_null() && !busy {
            if let Some(v) = offload::read_published(&*s) {
                out = v;
            }
        }
        out.accesses = std::ptr::read_volatile(&(*t).accesses);
        std::ptr::write_volatile(&mut (*t).last, out);
        (out, ran)
    }
}

/// Batches on another CPU: when a thread's log is full and the machine has
/// a CPU to spare (fewer threads with a model than online CPUs), the hook
/// hands the log to one *modeller* thread of the runtime and goes on with
/// its second log, instead of running the model itself. A batch costs the
/// program ~15-20 ns per logged miss (`bench/model-speed.sh`), which, on a
/// dependent chase, the program cannot overlap with anything; the hand-off
/// costs a few stores. The order of the entries through a thread's model is
/// kept: whoever runs the model (the owner or the modeller) holds the
/// model's lock, and the owner runs a handed-off log that the modeller has
/// not taken before its current one. The modeller's time is not the
/// program's and is not counted as overhead.
///
/// Off with `PMLAB_INSTR_OFFLOAD=0`, on a single CPU, in a forked child
/// (the modeller thread does not exist there) and for the full-tag model.
/// Models the modeller may see are never freed: a thread's model is kept
/// for the next thread when it exits.
mod offload {
    use super::{Slow, ThreadTotals, Tls, NONE, READY, TAKEN};
    use std::sync::atomic::{
        fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering,
    };

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
    pub fn start() {
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
            let r = crate::real::pthread_create()(
                &mut th,
                std::ptr::null(),
                main,
                std::ptr::null_mut(),
            );
            if r == 0 {
                libc::pthread_detach(th);
                PID.store(pid(), Ordering::Release);
            }
        }
    }

    /// New models may be handed off.
    pub fn enabled() -> bool {
        PID.load(Ordering::Acquire) != 0
    }

    /// Make `s` visible to the modeller; false when the table is full.
    pub fn register(s: *mut Slow) -> bool {
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
    pub fn reuse() -> Option<*mut Slow> {
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
            if let super::Model::Compact(c) = &mut s.cache {
                c.clear();
            }
            s.est = super::OverlapEstimator::new(s.est.config());
            s.entries = 0;
            s.last_miss_units = 0;
            s.window_serial = 0.0;
            s.totals = ThreadTotals::default();
            s.ready.store(NONE, Ordering::Release);
            publish(s);
            s.lock.store(false, Ordering::Release);
            LIVE.fetch_add(1, Ordering::AcqRel);
            return Some(p);
        }
        None
    }

    /// The owner thread is done with `s` (its log is processed).
    pub fn release(s: *mut Slow) {
        // SAFETY: registered models are never freed.
        unsafe { (*s).owned.store(false, Ordering::Release) };
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }

    /// Take the model's lock; without `wait`, give up if it is held.
    pub fn lock(s: &Slow, wait: bool) -> bool {
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
    pub fn publish(s: &Slow) {
        s.seq.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        // SAFETY: the lock holder is the only writer.
        unsafe { std::ptr::write_volatile(s.published.get(), s.totals) };
        fence(Ordering::Release);
        s.seq.fetch_add(1, Ordering::AcqRel);
    }

    /// The totals as of the last batch; None if a writer (the modeller)
    /// stayed in the middle of publishing them for too long (it was
    /// descheduled there). Async-signal-safe.
    pub fn read_published(s: &Slow) -> Option<ThreadTotals> {
        for _ in 0..100_000 {
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
    pub unsafe fn hand_off(t: *mut Tls) -> bool {
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
    pub fn after_fork_child(t: *mut Tls) {
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
                    unsafe { super::run_entries(None, s, log, from, to) };
                    s.totals.slow_calls += (to - from) as u64;
                    s.totals.offloaded += 1;
                    super::OFFLOADED.fetch_add(1, Ordering::Relaxed);
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
}

/// The calling thread's hook state after a fork, in the child.
pub fn after_fork_child() {
    offload::after_fork_child(tls());
}

/// Forget the calling thread's model state after a fork (the child starts
/// with a cold model) or before reuse. Not async-signal-safe.
pub fn thread_reset() {
    let t = tls();
    // SAFETY: own thread, not in a hook (hooks never call this).
    unsafe {
        (*t).filter = [0; FILTER_LINES];
    }
}

/// Free the calling thread's model (thread exit). Later accesses of this
/// thread are no longer counted. Not async-signal-safe.
pub fn thread_exit() {
    let t = tls();
    // SAFETY: own thread; `busy` keeps a nested hook away while freeing.
    unsafe {
        if !(*t).busy && !(*t).slow.is_null() {
            process(t, false, true);
        }
        (*t).busy = true;
        (*t).retired = true;
        (*t).logged = 0;
        (*t).processed = 0;
        let s = std::mem::replace(&mut (*t).slow, std::ptr::null_mut());
        (*t).filter = [0; FILTER_LINES];
        if !s.is_null() {
            if (*s).shared {
                offload::release(s);
            } else {
                drop(Box::from_raw(s));
            }
        }
        (*t).busy = false;
    }
}

/// Measured costs of the hooks, used to account their overhead.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HookCosts {
    /// ns per instrumented access that hits the filter (the whole call).
    pub fast_ns: f64,
    /// ns per access that misses the filter and is logged (the whole call,
    /// not the batch that later processes it, which is timed).
    pub miss_ns: f64,
    /// TSC ticks per ns.
    pub tsc_ghz: f64,
    /// ns of the two fenced TSC reads around a batch.
    pub tsc_pair_ns: f64,
}

impl HookCosts {
    /// The hooks' overhead between two totals, in ns: the calls (filter hits
    /// and logged misses at their calibrated costs) plus the batches run on
    /// the thread, as timed.
    pub fn overhead_ns(&self, from: &ThreadTotals, to: &ThreadTotals) -> f64 {
        self.calls_ns(from, to) + self.batches_ns(from, to)
    }

    /// The calls between two totals at their calibrated costs, in ns (what
    /// they cost when nothing else is in flight).
    pub fn calls_ns(&self, from: &ThreadTotals, to: &ThreadTotals) -> f64 {
        let calls = to.accesses.saturating_sub(from.accesses) as f64;
        let logged = to.slow_calls.saturating_sub(from.slow_calls) as f64;
        let hits = (calls - logged).max(0.0);
        hits * self.fast_ns + logged * self.miss_ns
    }

    /// The batches the thread ran itself between two totals, as timed
    /// (the modeller thread's batches cost the program nothing), in ns.
    pub fn batches_ns(&self, from: &ThreadTotals, to: &ThreadTotals) -> f64 {
        self.ran_ns(Ran {
            batches: to.batches.saturating_sub(from.batches),
            cycles: to.slow_cycles.saturating_sub(from.slow_cycles),
        })
    }

    /// The time of batches run, in ns.
    pub fn ran_ns(&self, ran: Ran) -> f64 {
        let batch_ns = if self.tsc_ghz > 0.0 {
            ran.cycles as f64 / self.tsc_ghz
        } else {
            0.0
        };
        ran.batches as f64 * self.tsc_pair_ns + batch_ns
    }
}

/// The costs [`calibrate`] measured last, as f64 bits (0: not measured).
static CALIBRATED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// The hook costs measured at start-up (zeros when the instrumented source
/// is not in use): the statistics report them.
pub fn calibrated() -> HookCosts {
    HookCosts {
        fast_ns: f64::from_bits(CALIBRATED[0].load(Ordering::Relaxed)),
        miss_ns: f64::from_bits(CALIBRATED[1].load(Ordering::Relaxed)),
        ..HookCosts::default()
    }
}

/// Measure the hooks' costs on the calling thread (a few milliseconds).
/// The hooks must be active; the calibration's own accesses are left in
/// the thread's totals, so callers take a baseline afterwards.
pub fn calibrate() -> HookCosts {
    let load: extern "C" fn(*const u64) = hook_load8;
    let load = std::hint::black_box(load);
    // The TSC rate against the monotonic clock.
    let c0 = std::time::Instant::now();
    let k0 = tsc();
    const N: usize = 100_000;
    // Hits: 8 lines, always in the filter.
    let small = [0u64; 64];
    let p = small.as_ptr();
    let mut fast = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        for i in 0..N {
            // SAFETY: in bounds of `small`.
            load(unsafe { p.add(i & 63) });
        }
        fast = fast.min(t.elapsed().as_nanos() as f64 / N as f64);
    }
    // Cost of two fenced TSC reads, as a batch takes them.
    let mut pairs = [0u64; 1001];
    for p in pairs.iter_mut() {
        let a = tsc_after(0);
        let b = tsc_after(0);
        *p = b.wrapping_sub(a);
    }
    pairs.sort_unstable();
    let tsc_best = pairs[pairs.len() / 2];
    let elapsed_ns = c0.elapsed().as_nanos() as f64;
    let ticks = tsc().wrapping_sub(k0) as f64;
    let tsc_ghz = if elapsed_ns > 0.0 {
        ticks / elapsed_ns
    } else {
        0.0
    };
    let tsc_pair_ns = if tsc_ghz > 0.0 {
        tsc_best as f64 / tsc_ghz
    } else {
        0.0
    };
    // Logged misses: 4096 lines (256 KiB, cache-resident) walked in order
    // miss the 256-entry filter every time; the batches' own time, which
    // the runtime measures at run time, is taken out.
    let lines = 4096;
    let big = vec![0u64; lines * 8];
    let q = big.as_ptr();
    let mut miss = f64::INFINITY;
    for _ in 0..5 {
        let a = totals();
        let t = std::time::Instant::now();
        for i in 0..N {
            // SAFETY: in bounds of `big`.
            load(unsafe { q.add((i % lines) * 8) });
        }
        let b = totals();
        let ns = t.elapsed().as_nanos() as f64;
        let batches = b.batches.saturating_sub(a.batches) as f64;
        let batch_ns = if tsc_ghz > 0.0 {
            b.slow_cycles.saturating_sub(a.slow_cycles) as f64 / tsc_ghz
        } else {
            0.0
        };
        miss = miss.min((ns - batch_ns - batches * tsc_pair_ns) / N as f64);
    }
    drop(big);
    let costs = HookCosts {
        fast_ns: fast,
        miss_ns: miss.max(fast),
        tsc_ghz,
        tsc_pair_ns,
    };
    CALIBRATED[0].store(costs.fast_ns.to_bits(), Ordering::Relaxed);
    CALIBRATED[1].store(costs.miss_ns.to_bits(), Ordering::Relaxed);
    costs
}

extern "C" fn hook_load8(addr: *const u64) {
    on_access(addr as usize, 8, false, Some(addr));
}

// ---- the exported callbacks (clang SanitizerCoverage ABI) ----

macro_rules! load_hook {
    ($name:ident, $t:ty) => {
        /// Called by instrumented code before a load.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *const $t) {
            on_access(addr as usize, std::mem::size_of::<$t>() as u32, false, None);
        }
    };
}

macro_rules! store_hook {
    ($name:ident, $t:ty) => {
        /// Called by instrumented code before a store.
        #[cfg_attr(not(test), no_mangle)]
        pub extern "C" fn $name(addr: *mut $t) {
            on_access(addr as usize, std::mem::size_of::<$t>() as u32, true, None);
        }
    };
}

load_hook!(__sanitizer_cov_load1, u8);
load_hook!(__sanitizer_cov_load2, u16);
load_hook!(__sanitizer_cov_load4, u32);
load_hook!(__sanitizer_cov_load16, u128);
store_hook!(__sanitizer_cov_store1, u8);
store_hook!(__sanitizer_cov_store2, u16);
store_hook!(__sanitizer_cov_store4, u32);
store_hook!(__sanitizer_cov_store8, u64);
store_hook!(__sanitizer_cov_store16, u128);

/// Called by instrumented code before an 8-byte load; the loaded value is
/// read too, to detect pointer chasing.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn __sanitizer_cov_load8(addr: *const u64) {
    on_access(addr as usize, 8, false, Some(addr));
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

#[cfg(test)]
mod tests {
    use super::*;

    // The hooks' state is process-global (ACTIVE, ranges); tests run each
    // scenario on a fresh thread and serialise on one lock.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn cfg(mode: PmMode) -> HookConfig {
        HookConfig {
            llc: CacheConfig::new(1 << 20, 16),
            overlap: OverlapConfig::default(),
            hooked_window: DEFAULT_HOOKED_WINDOW,
            pm_mode: mode,
        }
    }

    fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn inactive_hooks_count_nothing() {
        let _g = LOCK.lock().unwrap();
        deactivate();
        let t = on_thread(|| {
            let x = 5u64;
            __sanitizer_cov_load8(&x);
            totals()
        });
        assert_eq!(t.accesses, 0);
    }

    #[test]
    fn repeated_access_hits_the_filter() {
        let _g = LOCK.lock().unwrap();
        activate(cfg(PmMode::All));
        let t = on_thread(|| {
            let x = [0u64; 8];
            for _ in 0..1000 {
                __sanitizer_cov_load8(&x[0]);
            }
            let t = totals();
            thread_exit();
            t
        });
        deactivate();
        assert_eq!(t.accesses, 1000);
        assert_eq!(t.slow_calls, 1);
        assert_eq!(t.serial.pm_misses, 1);
    }

    #[test]
    fn pointer_chase_over_a_large_array_is_serial_pm() {
        let _g = LOCK.lock().unwrap();
        // The compact model (1024 sets) and the full one (1536 sets).
        for llc in [CacheConfig::new(1 << 20, 16), CacheConfig::new(3 << 19, 16)] {
            activate(HookConfig {
                llc,
                ..cfg(PmMode::All)
            });
            chase_20000();
        }
    }

    fn chase_20000() {
        let t = on_thread(|| {
            // 8 MiB of one pointer per line, chained with a stride that
            // defeats the 1 MiB model.
            let n = 1 << 17;
            let mut v = vec![0u64; n * 8];
            let base = v.as_ptr() as u64;
            let stride = 4099usize; // odd: visits every line
            for i in 0..n {
                let next = (i + stride) % n;
                v[i * 8] = base + (next * 64) as u64;
            }
            let mut p = v.as_ptr();
            let before = totals();
            for _ in 0..20_000 {
                __sanitizer_cov_load8(p);
                // SAFETY: p points into v.
                p = unsafe { *p } as *const u64;
            }
            let t = totals();
            thread_exit();
            (before, t)
        });
        deactivate();
        let (a, b) = t;
        let misses = b.serial.pm_misses - a.serial.pm_misses;
        let serial = b.serial.pm - a.serial.pm;
        assert_eq!(misses, 20_000);
        assert!((serial - 20_000.0).abs() < 2.0, "serial {serial}");
        assert_eq!(b.serial.dram_misses, 0);
        // A chase loses nothing to the hooks' window.
        assert!((b.hooked_serial - a.hooked_serial - serial).abs() < 1e-6);
    }

    #[test]
    fn pool_ranges_attribute_misses_and_write_backs() {
        let _g = LOCK.lock().unwrap();
        activate(cfg(PmMode::Pool));
        let (pm_buf, dram_buf) = (vec![0u8; 4 << 20], vec![0u8; 4 << 20]);
        let pm_addr = pm_buf.as_ptr() as usize;
        let dram_addr = dram_buf.as_ptr() as usize;
        add_pm_range(pm_addr, pm_buf.len());
        let t = on_thread(move || {
            // Write every line of both 4 MiB buffers, twice: the second pass
            // misses again (8 MiB > 1 MiB model) and evicts dirty lines.
            for _ in 0..2 {
                for off in (0..4 << 20).step_by(64) {
                    __sanitizer_cov_store8((pm_addr + off) as *mut u64);
                    __sanitizer_cov_store8((dram_addr + off) as *mut u64);
                }
            }
            let t = totals();
            thread_exit();
            t
        });
        deactivate();
        let lines = (4u64 << 20) / 64;
        assert_eq!(t.serial.pm_misses, 2 * lines);
        assert_eq!(t.serial.dram_misses, 2 * lines);
        // Everything but what still fits in the model was written back.
        let resident = (1u64 << 20) / 64;
        assert_eq!(t.pm_writebacks + t.dram_writebacks, 4 * lines - resident);
        assert!(t.pm_writebacks.abs_diff(t.dram_writebacks) <= resident);
        assert_eq!(t.pm_bytes(), (t.serial.pm_misses + t.pm_writebacks) * 64);
        drop((pm_buf, dram_buf));
    }

    #[test]
    fn calibration_gives_positive_costs() {
        let _g = LOCK.lock().unwrap();
        activate(cfg(PmMode::All));
        let c = on_thread(|| {
            let c = calibrate();
            thread_exit();
            c
        });
        deactivate();
        assert!(c.fast_ns > 0.0 && c.tsc_ghz > 0.0, "{c:?}");
        assert!(c.miss_ns >= c.fast_ns, "{c:?}");
        let a = ThreadTotals::default();
        // 100 calls, 16 of them logged and processed in 2 batches that took
        // 400 ticks in all.
        let b = ThreadTotals {
            accesses: 100,
            slow_calls: 16,
            batches: 2,
            slow_cycles: 400,
            ..Default::default()
        };
        // At 2 ns a hit, 10 ns a logged miss, 15 ns per batch timing and a
        // 2 GHz TSC: 84 x 2 + 16 x 10 + 2 x 15 + 400 / 2 = 558 ns.
        let c = HookCosts {
            fast_ns: 2.0,
            miss_ns: 10.0,
            tsc_ghz: 2.0,
            tsc_pair_ns: 15.0,
        };
        let o = c.overhead_ns(&a, &b);
        assert!((o - 558.0).abs() < 1e-9, "{o}");
    }

    /// A chase over `chains` interleaved random cycles of lines in an
    /// 8 MiB array, `steps` loads each; returns the thread's totals before
    /// and after.
    fn chase_chains(
        chains: usize,
        steps: usize,
        read_midway: bool,
    ) -> (ThreadTotals, ThreadTotals) {
        on_thread(move || {
            let n = 1 << 17;
            let mut v = vec![0u64; n * 8];
            let base = v.as_ptr() as u64;
            // One odd stride per chain over disjoint slices of the array.
            let per = n / chains;
            for c in 0..chains {
                for i in 0..per {
                    let next = c * per + (i + 4099) % per;
                    v[(c * per + i) * 8] = base + (next * 64) as u64;
                }
            }
            let mut p: Vec<*const u64> = (0..chains)
                .map(|c| unsafe { v.as_ptr().add(c * per * 8) })
                .collect();
            let before = totals();
            for k in 0..steps {
                for q in p.iter_mut() {
                    __sanitizer_cov_load8(*q);
                    // SAFETY: every value points into v.
                    *q = unsafe { **q } as *const u64;
                }
                if read_midway && k % 97 == 0 {
                    // An epoch end in the middle of a batch.
                    let _ = totals();
                }
            }
            let after = totals();
            thread_exit();
            (before, after)
        })
    }

    #[test]
    fn logged_misses_are_counted_exactly_whenever_totals_are_read() {
        let _g = LOCK.lock().unwrap();
        activate(cfg(PmMode::All));
        for midway in [false, true] {
            let (a, b) = chase_chains(1, 5_000, midway);
            assert_eq!(b.serial.pm_misses - a.serial.pm_misses, 5_000, "{midway}");
            assert_eq!(b.slow_calls - a.slow_calls, 5_000);
            let batches = (b.batches + b.offloaded) - (a.batches + a.offloaded);
            assert!(batches >= 5_000 / LOG_ENTRIES as u64);
            assert!(((b.serial.pm - a.serial.pm) - 5_000.0).abs() < 2.0);
        }
        deactivate();
    }

    #[test]
    fn a_reading_reports_the_batch_it_ran_itself() {
        let _g = LOCK.lock().unwrap();
        activate(cfg(PmMode::All));
        let (a, b, ran, again) = on_thread(|| {
            // 100 misses, fewer than a log: nothing runs before the read.
            let v = vec![0u64; 100 * 8];
            let a = totals();
            for i in 0..100 {
                __sanitizer_cov_load8(&v[i * 8]);
            }
            let (b, ran) = totals_and_ran();
            // Nothing left to run: a second reading runs nothing.
            let (_, again) = totals_and_ran();
            thread_exit();
            (a, b, ran, again)
        });
        deactivate();
        assert_eq!(b.slow_calls - a.slow_calls, 100);
        // The totals gained exactly the batch the reading ran (its cycles
        // are what the caller timed, not to be counted twice).
        assert_eq!(ran.batches, 1);
        assert_eq!(ran.batches, b.batches - a.batches);
        assert_eq!(ran.cycles, b.slow_cycles - a.slow_cycles);
        assert!(ran.cycles > 0);
        assert_eq!(again, Ran::default());
    }

    #[test]
    fn independent_chains_logged_in_batches_overlap() {
        let _g = LOCK.lock().unwrap();
        activate(cfg(PmMode::All));
        for chains in [2usize, 4, 8] {
            let (a, b) = chase_chains(chains, 2_000, true);
            let misses = (b.serial.pm_misses - a.serial.pm_misses) as f64;
            let serial = b.serial.pm - a.serial.pm;
            assert_eq!(misses, (chains * 2_000) as f64);
            // Each step of the chains costs one latency.
            assert!((serial - 2_000.0).abs() < 3.0, "{chains}: {serial}");
            // Under the hooks (2 window units per logged miss) a window of
            // 13 holds 6.5 misses: 2 and 4 chains still overlap fully (a
            // latency per step), 8 run 6.5 at a time (16,000 / 6.5).
            let hooked = b.hooked_serial - a.hooked_serial;
            let want = if chains == 8 { 16_000.0 / 6.5 } else { 2_000.0 };
            assert!(
                (hooked - want).abs() < 0.01 * want,
                "{chains}: {hooked} vs {want}"
            );
        }
        deactivate();
    }
}
