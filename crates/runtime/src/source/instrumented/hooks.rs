//! The hook ABI's common body: what every load/store callback of an
//! instrumented program does (clang's sanitizer-coverage callbacks and
//! gcc's `__tsan_*` ones, declared in [`crate::exports`]; libc's copies
//! through [`super::memfns`]), and the switch that turns the hooks on.
//!
//! * Not under `pmlab run --source instrumented` the hooks return after one
//!   relaxed atomic load: an instrumented program runs normally.
//! * The common case is a hit in a small per-thread direct-mapped *filter*
//!   of recently touched lines (a subset of the modelled cache): a TLS
//!   lookup, a compare and an increment.
//! * Otherwise the hook *logs* the access (address, position in the
//!   thread's access stream, and for 4- and 8-byte loads the value the
//!   program is about to load, read with the access's own size; an
//!   *update*, `pmlab cc`'s one hook for a load and the store after it to
//!   the same address, is logged as a store with that value) in the thread's miss log ([`super::log`]) and puts the
//!   line in the filter: a dozen instructions and no wait for the memory
//!   access itself, so that the program's independent misses still overlap
//!   as they do natively (an earlier design ran the model in the hook and
//!   had to wait for each miss: 8 independent chains took 200 ns per access
//!   instead of 22).
//! * With timed misses on (`PMLAB_TIMED_MISSES=N`, [`super::timed`]), 1
//!   in about N logged 4- and 8-byte loads leaves the log path for
//!   `log_miss_timed`, which times its read of the value and marks the
//!   entry timed and, above the threshold, slow; every logged load with
//!   a value pays a countdown's decrement and test (off: the countdown
//!   never reaches 0).
//! * A full log is handed to the modeller thread ([`super::offload`]) or
//!   run by the thread itself ([`super::thread`]).
//! * While tracing, every access is also offered to the tracer
//!   ([`super::trace`]): when not tracing this costs a bit test of the state
//!   the hook loads anyway; when tracing, an out-of-line call that
//!   classifies the access (about 2 ns per access on this VM).
//!
//! Accesses that straddle two lines are counted on their first line only.

use super::log::{tls, Tls, LOGS, LOG_ENTRIES};
use super::model::{
    LogEntry, AT_BITS, AT_MASK, BRANCH, FILTER_LINES, FLUSH, LINE_SHIFT, OUTCOME_SHIFT, STORE_BIT,
    UPDATE, VALUE_NARROW, VALUE_WIDE,
};
use super::settings::HookConfig;
use super::{offload, pm, settings, thread, timed, trace};
use std::sync::atomic::{compiler_fence, AtomicU8, Ordering};

/// [`ON`] while the hooks count, plus [`TRACING`] while they also feed the
/// tracer: one load tells the hook both.
static ACTIVE: AtomicU8 = AtomicU8::new(0);
const ON: u8 = 1;
const TRACING: u8 = 2;

/// Turn the hooks on for the whole process.
pub fn activate(cfg: HookConfig) {
    settings::store(&cfg);
    pm::set_mode(cfg.pm_mode);
    offload::start();
    crate::tracer::note_instrumented();
    ACTIVE.fetch_or(ON, Ordering::Release);
}

/// Turn the hooks off (they return immediately again).
pub fn deactivate() {
    ACTIVE.fetch_and(!ON, Ordering::Release);
}

/// True while the hooks count.
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed) & ON != 0
}

/// True while the hooks also feed the tracer (every access must be seen).
#[inline]
pub fn tracing() -> bool {
    ACTIVE.load(Ordering::Relaxed) & TRACING != 0
}

/// Offer every access to the tracer (`on`, once a trace is recording) or
/// stop doing so; see the module's documentation.
pub fn trace_accesses(on: bool) {
    if on {
        crate::tracer::before_finish(trace::flush_trace_counts);
        ACTIVE.fetch_or(TRACING, Ordering::Release);
    } else {
        ACTIVE.fetch_and(!TRACING, Ordering::Release);
    }
}

/// Count one access of the program (`size` bytes at `addr`, a store when
/// `write`; `value`, for loads, points at the bytes the load is about to
/// read: `size` of them are read, and only when `size` is 4 or 8):
/// the body of every callback. A filter hit returns here; a miss is logged.
#[inline(always)]
pub fn on_access(addr: usize, size: u32, write: bool, value: Option<*const u64>) {
    let state = ACTIVE.load(Ordering::Relaxed);
    if state & ON == 0 {
        return;
    }
    if state & TRACING != 0 {
        return on_access_traced(addr, size, write, value.unwrap_or(std::ptr::null()));
    }
    // SAFETY: the state belongs to this thread; a signal handler only
    // works on it through raw pointers (see `totals`).
    unsafe { count(tls(), addr, size, write, value) }
}

/// [`on_access`] while tracing: the access is offered to the tracer, then
/// counted (`value` null: none). Out of line, so that the common path
/// makes no call but the final one to [`log_miss`]. Both take the C ABI
/// with at most six word arguments, so the callbacks reach them by tail
/// jumps: a filter hit needs no stack frame and no saved registers (18
/// instructions from the callback's entry to its return, 23 before).
#[cold]
#[inline(never)]
extern "C" fn on_access_traced(addr: usize, size: u32, write: bool, value: *const u64) {
    let t = tls();
    // SAFETY: as in `on_access`.
    unsafe {
        trace::trace_access(t, addr, size, write);
        count(t, addr, size, write, (!value.is_null()).then_some(value))
    }
}

/// The filter test, and the log on a miss.
///
/// # Safety
///
/// `t` is the calling thread's state; `value`, when given, has `size`
/// readable bytes.
#[inline(always)]
unsafe fn count(t: *mut Tls, addr: usize, size: u32, write: bool, value: Option<*const u64>) {
    (*t).accesses += 1;
    let line = addr >> LINE_SHIFT;
    let e = (*t).filter[line % FILTER_LINES];
    if e >> 1 == line && (e & 1) >= write as usize {
        return;
    }
    // The value pointer as one word (null: none): six arguments in
    // registers, so the call is a tail jump.
    log_miss(
        t,
        addr,
        line,
        size,
        write,
        value.unwrap_or(std::ptr::null()),
    );
}

/// Log an access that missed the filter (see the module's documentation).
/// It makes no call on its common path (room in the log): the rare one
/// that must make room first leaves by a tail jump to [`log_miss_slow`],
/// so that this one needs no stack frame and saves no registers (a miss
/// logged in 30 instructions from the callback's entry, 44 when it saved
/// six registers for a call it almost never made).
///
/// # Safety
///
/// `t` is the calling thread's state; `value`, unless null, has `size`
/// readable bytes.
#[inline(never)]
unsafe extern "C" fn log_miss(
    t: *mut Tls,
    addr: usize,
    line: usize,
    size: u32,
    write: bool,
    value: *const u64,
) {
    if (*t).slow.is_null() || (*t).logged >= LOG_ENTRIES {
        return log_miss_slow(t, addr, line, size, write, value);
    }
    // One in about N loads with a value is timed (`PMLAB_TIMED_MISSES`):
    // the others pay this decrement and test.
    if !value.is_null() && (size == 8 || size == 4) {
        (*t).timed_left = (*t).timed_left.wrapping_sub(1);
        if (*t).timed_left == 0 {
            return log_miss_timed(t, addr, line, size, write, value);
        }
    }
    let n = (*t).logged;
    // The line in the filter first and the store bit in the address word,
    // so that `line` and `write` are dead before the log entry is built:
    // with fewer values live, the path needs no callee-saved register.
    (*t).filter[line % FILTER_LINES] = (line << 1) | write as usize;
    // The value the program is about to load (the hook runs before the
    // load): a later miss to the line it names depends on this one. Nothing
    // waits for it: the store into the log completes whenever the miss does.
    // Exactly the bytes the program reads (4 or 8), never more: a wider
    // read could cross into an unmapped page.
    let (v, flag) = match size {
        _ if value.is_null() => (0, 0),
        8 => (std::ptr::read_unaligned(value), VALUE_WIDE),
        4 => (
            std::ptr::read_unaligned(value as *const u32) as u64,
            VALUE_NARROW,
        ),
        _ => (0, 0),
    };
    // A store with a value (an update: a load and the store after it) is
    // told by its own bit: the store bit with a value bit names a flush or
    // a compare.
    let word = addr
        | match (write, flag) {
            (false, _) => 0,
            (true, 0) => STORE_BIT,
            (true, _) => UPDATE,
        };
    // (`cur` is below the ring's length, at most `LOGS`, a power of two:
    // the mask spares a bounds check, whose panic call would need a stack
    // frame.)
    let e = (*(*t).slow).logs[(*t).cur & (LOGS - 1)].as_mut_ptr().add(n);
    e.write(LogEntry {
        addr: word | flag,
        at: (*t).accesses,
        value: v,
    });
    // The entry is complete before it is counted (a signal handler on this
    // thread may process the log at any instruction).
    compiler_fence(Ordering::SeqCst);
    std::ptr::write_volatile(&mut (*t).logged, n + 1);
    if flag != 0 {
        (*t).cmp_value = v;
        (*t).cmp_armed = true;
    }
}

/// [`log_miss`] for a load whose read is timed ([`timed`]): the entry
/// says it was timed and whether the machine missed its LLC. The log has
/// room; `value` has `size` (4 or 8) readable bytes.
///
/// # Safety
///
/// As [`log_miss`].
#[cold]
#[inline(never)]
unsafe extern "C" fn log_miss_timed(
    t: *mut Tls,
    addr: usize,
    line: usize,
    size: u32,
    write: bool,
    value: *const u64,
) {
    let n = (*t).logged;
    (*t).filter[line % FILTER_LINES] = (line << 1) | write as usize;
    let (v, ticks) = timed::timed_read(value, size == 8);
    (*t).timed_left = timed::next_countdown(timed::every(), (*t).accesses ^ ticks);
    let flag = if size == 8 { VALUE_WIDE } else { VALUE_NARROW };
    let slow = if ticks > timed::slow_ticks() {
        timed::SLOW
    } else {
        0
    };
    let word = addr | flag | timed::TIMED | slow | if write { UPDATE } else { 0 };
    let e = (*(*t).slow).logs[(*t).cur & (LOGS - 1)].as_mut_ptr().add(n);
    e.write(LogEntry {
        addr: word,
        at: ((*t).accesses & AT_MASK) | (ticks.min(u64::MAX >> AT_BITS) << AT_BITS),
        value: v,
    });
    compiler_fence(Ordering::SeqCst);
    std::ptr::write_volatile(&mut (*t).logged, n + 1);
    (*t).cmp_value = v;
    (*t).cmp_armed = true;
}

/// [`log_miss`] when the log has no room: make room, then log.
///
/// # Safety
///
/// As [`log_miss`].
#[cold]
#[inline(never)]
unsafe extern "C" fn log_miss_slow(
    t: *mut Tls,
    addr: usize,
    line: usize,
    size: u32,
    write: bool,
    value: *const u64,
) {
    if make_room(t) && !(*t).slow.is_null() && (*t).logged < LOG_ENTRIES {
        log_miss(t, addr, line, size, write, value)
    }
}

/// A compare of `a` with `b` at `site` (the return address of clang's
/// `trace-cmp` callback, [`crate::exports`]): logged, once per logged
/// load, when one side is the value the thread's last logged load read,
/// for the overlap estimator's control-dependence rule
/// ([`pmlab_model::mlp::OverlapEstimator::branch`]); otherwise a TLS
/// lookup and two compares. Every call is counted (`Tls::compares`,
/// `compares_logged`), so that its cost is accounted like an access's
/// ([`super::cost::HookCosts::calls_ns`]).
#[inline(always)]
pub fn on_cmp(a: u64, b: u64, site: usize) {
    if ACTIVE.load(Ordering::Relaxed) & ON == 0 {
        return;
    }
    let t = tls();
    // SAFETY: the calling thread's own state, as in `on_access`.
    unsafe {
        (*t).compares += 1;
        if !(*t).cmp_armed || (a != (*t).cmp_value && b != (*t).cmp_value) {
            return;
        }
        (*t).cmp_armed = false;
        log_branch(t, site, (a != b) as usize + (a < b) as usize);
    }
}

/// Log a compare (see [`on_cmp`]).
///
/// # Safety
///
/// `t` is the calling thread's state.
#[inline(never)]
unsafe fn log_branch(t: *mut Tls, site: usize, outcome: usize) {
    if ((*t).slow.is_null() || (*t).logged >= LOG_ENTRIES) && !make_room(t) {
        return;
    }
    let n = (*t).logged;
    let e = (*(*t).slow).logs[(*t).cur].as_mut_ptr().add(n);
    e.write(LogEntry {
        addr: (site & ((1 << OUTCOME_SHIFT) - 1)) | (outcome << OUTCOME_SHIFT) | BRANCH,
        at: (*t).accesses,
        value: 0,
    });
    compiler_fence(Ordering::SeqCst);
    std::ptr::write_volatile(&mut (*t).logged, n + 1);
    (*t).compares_logged += 1;
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
        let s = thread::new_slow();
        if s.is_null() {
            (*t).retired = true;
        } else {
            (*t).slow = s;
            (*t).timed_left = timed::next_countdown(timed::every(), line_seed(t));
            if crate::tracer::enabled() {
                trace::flush_at_thread_exit();
            }
        }
        compiler_fence(Ordering::SeqCst);
        (*t).busy = false;
        return !s.is_null();
    }
    if offload::hand_off(t) {
        return true;
    }
    thread::process(t, true, true);
    true
}

/// A seed for the thread's first countdown to a timed load.
#[cold]
unsafe fn line_seed(t: *mut Tls) -> u64 {
    (t as u64).rotate_left(17) ^ (*t).accesses
}

/// A flush (`pflush`) of the line at `addr`, logged for the device model
/// (`pmlab run --device`) only: in the thread's model the line leaves the
/// cache, written back to the device if it was dirty (Intel's `clwb` on
/// Optane's platforms evicts the line as `clflushopt` does), and the
/// line leaves the filter so that its next access is logged as a miss.
pub fn on_flush(addr: usize) {
    if ACTIVE.load(Ordering::Relaxed) & ON == 0 || !settings::device_on() {
        return;
    }
    let t = tls();
    // SAFETY: the calling thread's own state, as in `on_access`.
    unsafe {
        let line = addr >> LINE_SHIFT;
        let slot = &mut (*t).filter[line % FILTER_LINES];
        if *slot >> 1 == line {
            *slot = 0;
        }
        if super::log::extend_flush_run(t, line) {
            return;
        }
        if ((*t).slow.is_null() || (*t).logged >= LOG_ENTRIES) && !make_room(t) {
            return;
        }
        let n = (*t).logged;
        let e = (*(*t).slow).logs[(*t).cur].as_mut_ptr().add(n);
        e.write(LogEntry {
            addr: addr | FLUSH,
            at: (*t).accesses,
            value: 0,
        });
        compiler_fence(Ordering::SeqCst);
        std::ptr::write_volatile(&mut (*t).logged, n + 1);
    }
}
