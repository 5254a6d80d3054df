//! The per-thread miss log and the state around it: the hook's filter of
//! recently touched lines and its position in the log (`Tls`, in this
//! library's static TLS block), and the thread's model with its two logs
//! (`Slow`), which the owner thread and the modeller thread share.

use super::model::{LogEntry, ModelState, ThreadTotals, FILTER_LINES};
#[cfg(not(target_arch = "x86_64"))]
use pmlab_model::mlp::SerialCounts;
#[cfg(not(target_arch = "x86_64"))]
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};

/// Entries of a thread's miss log (24 B each), processed in one batch.
pub const LOG_ENTRIES: usize = 512;

/// A thread's model state, its two logs and the hand-off slot (see
/// [`super::offload`]); allocated at the thread's first miss.
pub(super) struct Slow {
    /// The model and its totals.
    pub(super) model: ModelState,
    /// Two logs: the hook fills `Tls::cur` while the other may wait for,
    /// or be in, the modeller thread (see [`super::offload`]).
    pub(super) logs: [[LogEntry; LOG_ENTRIES]; 2],
    /// Held by whoever runs entries through the model (the owner thread or
    /// the modeller).
    pub(super) lock: AtomicBool,
    /// State of the handed-off log: [`NONE`], [`READY`] (waiting) or
    /// [`TAKEN`] (the modeller runs it, holding `lock`).
    pub(super) ready: AtomicU8,
    /// The handed-off log and its entries, written by the owner before it
    /// stores [`READY`].
    pub(super) ready_log: usize,
    pub(super) ready_from: usize,
    pub(super) ready_to: usize,
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
        }
    }
}

/// No log is handed off.
pub(super) const NONE: u8 = 0;
/// A log is handed off and waits for the modeller.
pub(super) const READY: u8 = 1;
/// The modeller runs the handed-off log.
pub(super) const TAKEN: u8 = 2;

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
    /// Which of `slow.logs` the hook fills.
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
        })
    };
}

/// The calling thread's hook state.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(super) fn tls() -> *mut Tls {
    TLS.with(|t| t.get())
}
