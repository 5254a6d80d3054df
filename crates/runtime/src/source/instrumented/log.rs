//! The per-thread miss log and the state around it: the hook's filter of
//! recently touched lines and its position in the log (`Tls`, in this
//! library's static TLS block), and the thread's model with its ring of
//! logs (`Slow`), which the owner thread and the modeller thread share.

use super::model::{LogEntry, ModelState, ThreadTotals, FILTER_LINES, FLAGS, FLUSH, LINE_SHIFT};
#[cfg(not(target_arch = "x86_64"))]
use pmlab_model::mlp::SerialCounts;
#[cfg(not(target_arch = "x86_64"))]
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Entries of a thread's miss log (24 B each), processed in one batch.
pub const LOG_ENTRIES: usize = 512;

/// Logs allocated for a thread's ring: the one the hook fills and up to
/// `LOGS - 1` handed off and waiting for (or in) the modeller thread
/// (see [`super::offload`]).
pub const LOGS: usize = 8;
const _: () = assert!(LOGS.is_power_of_two(), "the hook masks the log number");

/// A thread's model state, its ring of logs and the hand-off queue (see
/// [`super::offload`]); allocated at the thread's first miss.
///
/// The ring: logs are numbered by a sequence; log `k` lives in
/// `logs[k % ring]`. Logs `head..tail` are handed off, waiting to run in
/// that order; log `tail` is the one the hook fills (`Tls::cur` is
/// `tail % ring`). Only the owner thread advances `tail` (after writing
/// the log's span in `spans`); whoever runs a log through the model
/// (the modeller thread, or the owner) holds `lock` and advances `head`
/// once it is done, which frees the log for the owner to fill again.
pub(super) struct Slow {
    /// The model and its totals.
    pub(super) model: ModelState,
    /// The ring of logs (on the heap: a thread's stack may be small).
    pub(super) logs: Box<[[LogEntry; LOG_ENTRIES]; LOGS]>,
    /// Held by whoever runs entries through the model (the owner thread or
    /// the modeller).
    pub(super) lock: AtomicBool,
    /// The oldest handed-off log not yet run (a sequence number).
    pub(super) head: AtomicUsize,
    /// The log the hook fills (a sequence number): `tail - head` logs are
    /// handed off.
    pub(super) tail: AtomicUsize,
    /// Logs the ring cycles through (2 to [`LOGS`]: one more than the
    /// handed-off logs allowed, [`super::offload::depth`]), set when a
    /// thread takes the model.
    pub(super) ring: usize,
    /// The entries `from..to` of each handed-off log, by `seq % ring`,
    /// written by the owner before it advances `tail`.
    pub(super) spans: [(usize, usize); LOGS],
    /// The modeller thread is running log `taken - 1` (0: none); a forked
    /// child, where that thread does not exist, drops it unless it was
    /// done (`head` past it).
    pub(super) taken: AtomicUsize,
    /// Seqlock over `published`, the totals as of the last batch, for
    /// readers that cannot take `lock` (a signal handler while the
    /// modeller holds it).
    pub(super) seq: AtomicU64,
    pub(super) published: std::cell::UnsafeCell<ThreadTotals>,
    /// This model is registered for the modeller (never freed: reused by
    /// later threads, see [`super::offload`]).
    pub(super) shared: bool,
    /// A thread owns this model (registered models only).
    pub(super) owned: AtomicBool,
}

impl Slow {
    /// A model's state with empty logs, owned by the calling thread;
    /// `shared` when it is to be registered for the modeller.
    pub(super) fn new(model: ModelState, shared: bool) -> Slow {
        Slow {
            model,
            logs: vec![[LogEntry::default(); LOG_ENTRIES]; LOGS]
                .into_boxed_slice()
                .try_into()
                .unwrap_or_else(|_| unreachable!("LOGS logs were allocated")),
            lock: AtomicBool::new(false),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            ring: super::offload::depth() + 1,
            spans: [(0, 0); LOGS],
            taken: AtomicUsize::new(0),
            seq: AtomicU64::new(0),
            published: std::cell::UnsafeCell::new(ThreadTotals::default()),
            shared,
            owned: AtomicBool::new(true),
        }
    }

    /// Logs handed off and not yet run.
    #[inline]
    pub(super) fn queued(&self) -> usize {
        self.tail
            .load(Ordering::Acquire)
            .wrapping_sub(self.head.load(Ordering::Acquire))
    }
}

/// The calling thread's hook state: the filter, the position in the log
/// and the counters the hook keeps itself.
pub(super) struct Tls {
    /// `line << 1 | dirty`; 0 is empty (line 0 is never accessed).
    pub(super) filter: [usize; FILTER_LINES],
    pub(super) accesses: u64,
    /// DRAM loads and stores not yet recorded (tracing only).
    pub(super) trace_dram: u64,
    /// PM loads not yet recorded (tracing only).
    pub(super) trace_pm_loads: u64,
    pub(super) slow: *mut Slow,
    /// Entries written to `slow.log`; the first `processed` of them have
    /// been through the model. A signal handler may advance `processed`
    /// (never `logged`); only the hook, outside a signal, resets both.
    pub(super) logged: usize,
    pub(super) processed: usize,
    /// Which of `slow.logs` the hook fills (`slow.tail % slow.ring`).
    pub(super) cur: usize,
    /// The totals [`super::thread::totals`] returned last (what it returns when it cannot
    /// read newer ones).
    pub(super) last: ThreadTotals,
    /// A batch or the model's allocation is under way on this thread.
    pub(super) busy: bool,
    /// The epoch signal's handler ran while a batch was under way: the
    /// batch's clock reading includes the handler's delay.
    pub(super) interrupted: bool,
    pub(super) retired: bool,
    /// The value the last logged load read, and whether a compare of it
    /// is still to be logged ([`super::hooks::on_cmp`]).
    pub(super) cmp_value: u64,
    pub(super) cmp_armed: bool,
    /// Compare callbacks seen while the hooks count, and those of them
    /// logged ([`super::hooks::on_cmp`]): their cost is accounted as the
    /// accesses' is ([`super::cost::HookCosts::calls_ns`]).
    pub(super) compares: u64,
    pub(super) compares_logged: u64,
    /// Periodic epoch ends in a row that left entries of the log the hook
    /// fills (sequence `lag_log`) to the modeller (see
    /// [`super::thread::totals_and_ran`]): the lag's bound in epochs.
    pub(super) lag_epochs: u32,
    /// See `lag_epochs`.
    pub(super) lag_log: usize,
    /// Logged loads until the next timed one ([`super::timed`]; 0 until
    /// the thread's model exists, u64::MAX-ish when timing is off).
    pub(super) timed_left: u64,
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
pub(super) fn tls() -> *mut Tls {
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
                compares: 0,
                compares_logged: 0,
                pm_writebacks: 0,
                pm_dirtied: 0,
                dram_writebacks: 0,
            },
            busy: false,
            interrupted: false,
            retired: false,
            cmp_value: 0,
            cmp_armed: false,
            compares: 0,
            compares_logged: 0,
            lag_epochs: 0,
            lag_log: 0,
            timed_left: 0,
        })
    };
}

/// The calling thread's hook state.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(super) fn tls() -> *mut Tls {
    TLS.with(|t| t.get())
}

/// Most lines one flush entry names (see [`extend_flush_run`]).
pub(super) const MAX_FLUSH_RUN: u64 = 1 << 32;

/// Device mode, a flush (`pflush`) of `line` (an address >> 6): when the
/// log's last entry, not yet run, is a flush of the lines up to
/// `line - 1`, it is extended to `line` (its `value` counts the lines
/// after the first) and true is returned; else the caller logs a new
/// entry. A program that flushes a region line by line (a flushed chase
/// flushes every line it reads) then logs one entry per run instead of
/// one per line: half the entries of a flushed chase.
///
/// # Safety
///
/// `t` is the calling thread's state.
#[inline]
pub(super) unsafe fn extend_flush_run(t: *mut Tls, line: usize) -> bool {
    let n = (*t).logged;
    if (*t).slow.is_null() || (*t).busy || n == 0 || n > LOG_ENTRIES {
        return false;
    }
    // `busy` keeps the epoch signal's handler from running the entry
    // while it grows (it would count the run short).
    (*t).busy = true;
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    let mut extended = false;
    if std::ptr::read_volatile(&(*t).processed) < n {
        let e = &mut (*(*t).slow).logs[(*t).cur][n - 1];
        let first = (e.addr & !FLAGS) >> LINE_SHIFT;
        if e.addr & FLAGS == FLUSH
            && e.value + 1 < MAX_FLUSH_RUN
            && first.wrapping_add(e.value as usize + 1) == line
        {
            e.value += 1;
            extended = true;
        }
    }
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    (*t).busy = false;
    extended
}
