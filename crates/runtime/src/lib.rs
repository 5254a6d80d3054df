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
//! * [`api`]: every exported symbol: the C PM API of `include/pmlab.h`
//!   (`pmalloc`, `pflush`, `pm_drain`…) and the interposed pthread/signal
//!   functions.
//! * [`emu`]: process and thread state, epochs, the monitor thread, the
//!   epoch signal, fork handling, the exit report.
//! * [`source`]: the counter-source interface ([`source::Source`],
//!   [`source::ThreadCounters`]) and its implementations `hw`,
//!   `synthetic:FILE` and `instrumented`.
//! * [`exec`]: the exec family, which keeps the epoch signal from
//!   killing the new image before its runtime is up.
//! * [`config`]: the `PMLAB_*` options, read once.
//! * [`pool`], [`persist`], [`clock`], [`mba`], [`stats`]: the PM pool
//!   allocator, flush instructions, the TSC, the bandwidth throttle, the
//!   report.
//! * [`tracer`], [`pmdk`], [`trace_notes`]: trace recording and libpmem/libpmemobj
//!   interposition, and the notes `pmlab check` needs (call sites, data,
//!   modules, PM ranges, `pm_tx_add`); [`instrument_hooks`]: the compiler-instrumentation
//!   callbacks behind the `instrumented` source (clang), [`tsan_hooks`]:
//!   the same for gcc's `__tsan_*` callbacks; [`memfns`]: libc's `memcpy`,
//!   `memmove` and `memset` offered to those hooks.
//! * [`Error`]: the one error type.
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
pub mod instrument_hooks;
pub mod mba;
pub mod memfns;
pub mod persist;
pub mod pmdk;
pub mod pool;
mod real;
pub mod source;
pub mod stats;
pub mod trace_notes;
pub mod tracer;
pub mod tsan_hooks;

pub use error::{Error, ErrorKind};

/// Major version of the C API (`PMLAB_MAJOR_VERSION` in `pmlab.h`).
pub const API_MAJOR: u32 = 1;
/// Minor version of the C API (`PMLAB_MINOR_VERSION` in `pmlab.h`).
pub const API_MINOR: u32 = 1;
