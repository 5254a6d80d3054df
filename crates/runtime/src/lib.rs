//! libpmlab, the emulation runtime: loaded into a program with
//! `LD_PRELOAD` by `pmlab run` (or linked with `-lpmlab`), it makes the
//! program run as if its memory were slower persistent memory, following
//! Quartz (Volos et al., Middleware'15): threads' execution is cut into
//! epochs; at the end of each, a counter source says how much the thread
//! stalled on memory and the thread spins for the extra latency PM would
//! have cost.
//!
//! # Brief overview
//!
//! * [`exports`]: every symbol the library exports, and only those (the
//!   list is `libpmlab.map`): the C PM API of `include/pmlab.h`, the
//!   interposed pthread, signal, clock, sleep, exec and exit functions, the
//!   libpmem/libpmemobj wrappers, the instrumentation callbacks and libc's
//!   copies; and the constructor. Each is a shell over one of the modules
//!   below.
//! * [`api`]: the PM API's implementation (`pmalloc`, `pflush`,
//!   `pm_drain`…); [`interpose`], [`blocking`], [`exec`]: the interposed
//!   libc/libpthread functions (sync points, the epoch signal kept ours,
//!   sleeps not cut short, exec surviving the signal); [`pmdk`]: libpmem
//!   and libpmemobj recorded while tracing.
//! * [`emu`]: process and thread state, epochs, the monitor thread, the
//!   epoch signal, fork handling, the exit report.
//! * [`source`]: the counter-source interface ([`source::Source`],
//!   [`source::ThreadCounters`], [`source::SourceStats`]), its registry
//!   ([`source::registry`]) and its implementations `hw`, `synthetic:FILE`
//!   and [`source::instrumented`], which owns everything about
//!   compiler-instrumented programs: the hook ABI's body, gcc's `__tsan_*`
//!   callbacks, libc's copies offered to the hooks, the per-thread miss log,
//!   batch modelling, the modeller thread and cost calibration.
//! * [`tracer`]: trace recording (the `.pmt` writer thread);
//!   [`trace_notes`]: the annotations `pmlab check` and `pmlab crash` need
//!   (call sites, data, modules, PM ranges, transaction log ranges).
//! * [`config`]: the `PMLAB_*` options, read once; [`pool`], [`persist`],
//!   [`clock`], [`mba`], [`stats`]: the PM pool allocator, flush
//!   instructions, the TSC, the bandwidth throttle, the report.
//! * [`Error`]: the one error type.
//!
//! # Dependency rule
//!
//! Dependencies inside the runtime point one way, from the exported
//! surface down (`crates/runtime/README.md` draws the graph):
//! `exports` → the implementations (`api`, `interpose`, `blocking`,
//! `exec`, `pmdk`, the callbacks of `source::instrumented`) and the
//! start-up order → `emu` → `source` (interface, registry, sources) and
//! `stats` → `tracer`, `pool`, `mba`, `config`, `clock`, `persist`, `real`
//! → `sys`, `error`. A lower module never names a higher one: where one
//! must reach up (the tracer recording the hooks' pending counts before it
//! finishes), the higher one registers a function with it. Inside
//! `source::instrumented` the same holds (its module documentation lists
//! the order).
//!
//! Depends only on `pmlab-model` (the Quartz equations), `pmlab-trace`
//! (the record format) and `libc`; never on the CLI, and nothing here
//! panics across the C boundary.

pub mod api;
pub mod blocking;
pub mod clock;
pub mod config;
pub mod emu;
mod error;
pub mod exec;
pub mod exports;
pub mod interpose;
pub mod mba;
pub mod persist;
pub mod pmdk;
pub mod pool;
mod real;
pub mod source;
mod startup;
pub mod stats;
mod sys;
pub mod trace_notes;
pub mod tracer;

pub use error::{Error, ErrorKind};

/// Major version of the C API (`PMLAB_MAJOR_VERSION` in `pmlab.h`).
pub const API_MAJOR: u32 = 1;
/// Minor version of the C API (`PMLAB_MINOR_VERSION` in `pmlab.h`).
pub const API_MINOR: u32 = 2;
