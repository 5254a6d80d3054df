//! The compiler-instrumented counter source (`--source instrumented`):
//! counts serial PM and DRAM accesses from the load/store callbacks of
//! programs built by `pmlab cc` (see [`hooks`]), so that emulation works
//! on machines without a usable PMU.
//!
//! Opening the source reads this machine's last-level cache geometry from
//! sysfs, turns the hooks on and measures their cost. Each thread's
//! counters are cumulative totals kept by the hooks; an epoch's reading is
//! the difference since the previous epoch end, and the hooks' own cost in
//! that epoch is reported through
//! [`ThreadCounters::overhead_ns`](crate::source::ThreadCounters::overhead_ns)
//! so that the runtime absorbs it like any emulator overhead. What an
//! epoch's delay cannot absorb is carried into the next epochs of the
//! thread until the thread reads the clock (`clock_gettime`,
//! `gettimeofday`): then what is still carried is counted as unabsorbed
//! (the statistics' `hook_overhead_unabsorbed_ns`) and dropped. So the
//! cost of the hooks during a stretch of DRAM accesses is absorbed by the
//! PM delays that follow it (multilat's 200000-access DRAM stretches), but
//! never across a clock read: an expensive phase that a program times on
//! its own (e.g. building a data set with many misses and little PM delay)
//! does not shorten the delays of the phase it times next.
//!
//! Settings (environment, read once):
//!
//! * `PMLAB_INSTR_PM` = `auto` (default: everything is PM until the program
//!   maps a PM pool, then only the pool), `all` or `pool`;
//! * `PMLAB_INSTR_LLC` = `SIZE:WAYS` (e.g. `32MiB:16`) to override sysfs
//!   (`pmlab run` sets it to the calibration's effective LLC);
//! * `PMLAB_INSTR_FILL_BUFFERS` (default 10) and `PMLAB_INSTR_WINDOW`
//!   (instrumented accesses the out-of-order window spans, default 64);
//! * `PMLAB_INSTR_HOOKED_WINDOW`: the window the instrumented program
//!   itself keeps, in units of one per access that hits the hooks' filter
//!   and `PMLAB_INSTR_LOGGED_WEIGHT` per logged access (decimals allowed;
//!   defaults 13 and 2: [`settings::DEFAULT_HOOKED_WINDOW`],
//!   [`settings::DEFAULT_LOGGED_WEIGHT`], in thousandths; see
//!   [`counters::window_loss_ns`]; `bench/hooked-window.sh` fits both).
//! * `PMLAB_INSTR_OFFLOAD=0` runs every batch of logged misses on the
//!   program's thread (default: on a modeller thread while a CPU is free;
//!   see [`offload`]).
//!
//! The hooks' calls are charged at their calibrated costs except for the
//! share of an epoch spent waiting on memory ([`counters::stall_share`])
//! divided by the epoch's memory-level parallelism ([`counters::mlp`]), or
//! at the time the program lost because the hooks shrank its out-of-order
//! window ([`counters::window_loss_ns`]) where that is more (the calls then
//! run while the core waits); the batches the thread ran itself, as timed.
//!
//! # How an access is counted
//!
//! 1. The program calls a callback (`__sanitizer_cov_load8`,
//!    `__tsan_write4`, `memcpy`…, all declared in [`crate::exports`]); its
//!    body is [`hooks::on_access`]. A hit in the thread's filter returns
//!    there; a miss is written into the thread's miss log ([`log`]).
//! 2. The log is run in batches through the thread's cache model and
//!    overlap (MLP) estimator ([`model`]), which classify each miss as PM or
//!    DRAM ([`pm`]) and count serial accesses and write-backs: when the log
//!    is full, on the runtime's modeller thread when a CPU is free
//!    ([`offload`]) or else on the thread itself ([`thread`]), and whenever
//!    the runtime reads the thread's totals (epoch ends, sync points, thread
//!    exit). Each batch the thread runs itself is timed with the TSC, after
//!    a fence that lets the program's outstanding misses complete first, and
//!    reported as overhead, so that the runtime subtracts it from the
//!    injected delays. A batch run from the epoch signal's handler is
//!    async-signal-safe: it touches only the thread's own model, allocates
//!    nothing and is skipped when the signal interrupted a batch (the
//!    entries then count in the next epoch).
//! 3. The source ([`counters`]) turns differences of the totals into epoch
//!    readings, and the calls and batches, at the costs measured when the
//!    source opened ([`cost`]), into overhead.
//! 4. While `pmlab trace` records (`PMLAB_TRACE_STORES=1`), every access is
//!    also offered to the tracer ([`trace`]).
//!
//! # Modules, in dependency order
//!
//! Each module uses only modules above it in this list (and the runtime's
//! lower layers: `tracer`, `pool`, `real`, `config`, `sys`, `error`, the
//! `source` interface):
//!
//! * [`busy`]: detecting a busy machine (inline batches, waits for a CPU);
//! * [`settings`]: the `PMLAB_INSTR_*` settings and their process-wide copy;
//! * [`pm`]: which addresses are PM;
//! * [`model`]: batch modelling (cache model, overlap estimator, totals);
//! * [`log`]: the per-thread miss log and filter, and the shared model state;
//! * [`offload`]: the modeller thread;
//! * [`thread`]: a thread's own batches, its totals, exit and fork;
//! * [`trace`]: accesses offered to the tracer;
//! * [`hooks`]: the hook ABI's common body and the on/off switch;
//! * [`cost`]: cost calibration and overhead accounting;
//! * [`sample`]: the sampling switch of programs built with the sampling
//!   plugin;
//! * [`tsan`]: gcc's `__tsan_*` callbacks;
//! * [`memfns`]: libc's `memcpy`, `memmove` and `memset` offered to the hooks;
//! * [`counters`]: the `Source` implementation.

pub mod busy;
pub mod cost;
pub mod counters;
pub mod hooks;
pub mod log;
pub mod memfns;
pub mod model;
pub mod offload;
pub mod pm;
pub mod sample;
pub mod settings;
pub mod thread;
pub mod timed;
pub mod trace;
pub mod tsan;

#[cfg(test)]
mod tests;

pub use counters::{open, InstrumentedCounters, InstrumentedSource};
pub use settings::{config_from_env, llc_from_sysfs, HookConfig, PmMode};
