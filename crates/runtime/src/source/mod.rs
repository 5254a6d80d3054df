//! Counter sources: what the emulator learns about each epoch of a thread.
//!
//! A [`Source`] is chosen once per process from its configuration name
//! (see [`registry::open`]); it hands every registered thread its own
//! [`ThreadCounters`]. At the end of each epoch the runtime asks the
//! thread's counters for an [`EpochReading`] and turns it into a delay with
//! the Quartz model ([`EpochReading::delay_ns`]).
//!
//! Two kinds of source exist:
//!
//! * stall-cycle sources (`hw`, `synthetic`) report memory stall cycles,
//!   L3 hits and misses and local/remote DRAM accesses
//!   ([`Reading::Stalls`]): Quartz equations 3 and 2, and the DRAM/NVM
//!   split of section 3.3 in two-memory mode;
//! * access-count sources (`instrumented`) report serial PM and DRAM
//!   accesses already attributed by the compiler instrumentation
//!   ([`Reading::Accesses`]).
//!
//! Both report the bytes moved to and from PM for the bandwidth model:
//! the instrumented source its modelled cache's misses and write-backs
//! times 64 B, the hardware source the L3 misses of loads times 64 B
//! (no write-backs: see `hw`).

use crate::error::Error;
use pmlab_model::quartz;

pub mod hw;
pub mod instrumented;
pub mod registry;
pub mod synthetic;

/// What a source knows about one epoch of one thread: counter deltas since
/// the previous epoch end.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EpochReading {
    /// The counters.
    pub reading: Reading,
    /// Bytes moved between the caches and PM in the epoch: lines read
    /// (write-allocate reads included) and lines written back.
    pub pm_bytes: u64,
    /// The part of `pm_bytes` written to PM (write-backs), for a write
    /// bandwidth of its own; 0 for a source that does not see writes.
    pub pm_write_bytes: u64,
}

impl EpochReading {
    /// Bytes read from PM in the epoch (`pm_bytes` less the writes).
    pub fn pm_read_bytes(&self) -> u64 {
        self.pm_bytes.saturating_sub(self.pm_write_bytes)
    }
}

/// The two kinds of reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// From a stall-cycle source.
    Stalls {
        /// Core cycles stalled while an L2 miss was pending (Quartz Table 1).
        l2_stall_cycles: f64,
        /// L3 hits.
        l3_hits: f64,
        /// L3 misses (served by memory).
        l3_misses: f64,
        /// Misses served by the local node's DRAM.
        local: f64,
        /// Misses served by a remote node (the emulated NVM in two-memory mode).
        remote: f64,
    },
    /// From an access-count source.
    Accesses {
        /// Serial accesses to PM (after memory-level parallelism).
        pm_serial: f64,
        /// Serial accesses to DRAM.
        dram_serial: f64,
    },
}

impl Default for Reading {
    fn default() -> Reading {
        Reading::Accesses {
            pm_serial: 0.0,
            dram_serial: 0.0,
        }
    }
}

/// The model parameters [`EpochReading::delay_ns`] needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelParams {
    /// Core cycles per nanosecond (converts stall cycles to time).
    pub cpu_ghz: f64,
    /// Measured local DRAM latency, ns.
    pub dram_latency_ns: f64,
    /// Emulated PM read latency, ns.
    pub pm_latency_ns: f64,
    /// Measured remote-node latency in two-memory mode (the remote node
    /// plays PM), ns; `None` when every memory access is emulated as PM.
    pub remote_latency_ns: Option<f64>,
    /// W of equation 3: DRAM latency over L3 latency.
    pub w: f64,
}

impl EpochReading {
    /// The delay (ns) this epoch must be stretched by to emulate PM latency.
    ///
    /// Stalls: equation 3 gives memory stall cycles; in two-memory mode only
    /// the remote share (section 3.3) is slowed, from the remote latency to
    /// the PM latency; otherwise all of it, from the DRAM latency. Accesses:
    /// each serial PM access costs `pm - dram` more.
    pub fn delay_ns(&self, p: &ModelParams) -> f64 {
        match self.reading {
            Reading::Stalls {
                l2_stall_cycles,
                l3_hits,
                l3_misses,
                local,
                remote,
            } => {
                let ldm = quartz::ldm_stall_cycles(l2_stall_cycles, l3_hits, l3_misses, p.w);
                match p.remote_latency_ns {
                    Some(rem_lat) => {
                        let rem = quartz::remote_stall_cycles(
                            ldm,
                            local,
                            remote,
                            p.dram_latency_ns,
                            rem_lat,
                        );
                        quartz::epoch_delay_ns(rem, p.cpu_ghz, rem_lat, p.pm_latency_ns)
                    }
                    None => {
                        quartz::epoch_delay_ns(ldm, p.cpu_ghz, p.dram_latency_ns, p.pm_latency_ns)
                    }
                }
            }
            Reading::Accesses { pm_serial, .. } => {
                quartz::delay_from_serial_accesses(pm_serial, p.dram_latency_ns, p.pm_latency_ns)
            }
        }
    }
}

/// One thread's counters. Created on the thread it belongs to, outside any
/// signal handler; used only by that thread.
pub trait ThreadCounters: Send {
    /// Start counting (called once on the owning thread at registration,
    /// and again in a forked child, where per-thread resources must be
    /// reopened). May allocate and make system calls.
    fn start(&mut self) -> Result<(), Error>;

    /// End the current epoch, which ran `epoch_ns` of wall time since the
    /// previous one's delay ended: return the counts since the previous
    /// call and start a new epoch.
    ///
    /// MUST be async-signal-safe: it may run inside the epoch signal
    /// handler. No allocation, no locks, no I/O other than reading counters.
    fn epoch_end(&mut self, epoch_ns: f64) -> EpochReading;

    /// Time (ns) the source's own instrumentation added to the thread in
    /// the epoch the last [`epoch_end`](Self::epoch_end) closed (e.g. the
    /// instrumented source's load/store callbacks); the runtime adds it to
    /// the epoch's overhead so that later delays absorb it.
    /// Async-signal-safe. Default: none.
    fn overhead_ns(&self) -> f64 {
        0.0
    }

    /// The thread read the clock (after the runtime ended the epoch there,
    /// if it was long enough): overhead the source still carries from
    /// earlier epochs is dropped, so that it is not absorbed by delays the
    /// program will time separately. Async-signal-safe. Default: nothing.
    fn time_observed(&mut self) {}

    /// Stop counting and release per-thread resources (thread exit; never
    /// in a signal handler).
    fn stop(&mut self);
}

/// A counter source, chosen once per process.
pub trait Source: Send + Sync {
    /// The configuration name (`hw`, `synthetic:FILE`, `instrumented`).
    fn name(&self) -> String;

    /// The kind of reading it produces (for the stats and the docs).
    fn kind(&self) -> SourceKind;

    /// Counters for the calling thread (not started yet).
    fn thread_counters(&self) -> Result<Box<dyn ThreadCounters>, Error>;

    /// The source's own process-wide numbers for the statistics report
    /// (all threads so far). Default: zeros.
    fn stats(&self) -> SourceStats {
        SourceStats::default()
    }
}

/// A source's own numbers in the statistics report (zeros for a source
/// without them). The instrumented source fills the `hook_*` ones.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SourceStats {
    /// Hook overhead that no delay absorbed, all threads, ns.
    pub hook_overhead_unabsorbed_ns: u64,
    /// Measured cost of a hook call that hits the filter, ns.
    pub hook_hit_ns: f64,
    /// Measured cost of a hook call that logs a miss, ns.
    pub hook_logged_miss_ns: f64,
    /// Batches of logged misses the modeller thread ran.
    pub hook_batches_offloaded: u64,
    /// Time charged for the hooks' shrinking of the out-of-order window
    /// where it exceeded the calls' cost, all threads, ns.
    pub hook_window_loss_ns: u64,
    /// Batches of logged misses the program's threads ran themselves (no
    /// CPU free for the modeller thread, or offloading off).
    pub hook_inline_batches: u64,
    /// Their timed cost, all threads, ns.
    pub hook_inline_ns: u64,
    /// `hook_inline_ns` over the epochs' wall time, all threads.
    pub hook_inline_share: f64,
    /// Time the program's threads were runnable but waiting for a CPU
    /// (kernel schedstat), ns; 0 where the kernel does not report it.
    pub run_delay_ns: u64,
    /// `run_delay_ns` over the threads' time on a CPU plus that wait.
    pub run_delay_share: f64,
}

/// Which model path a source feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// Stall cycles and cache counters (equations 3 and 2).
    StallCycles,
    /// Serial access counts.
    AccessCounts,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ModelParams {
        ModelParams {
            cpu_ghz: 3.0,
            dram_latency_ns: 100.0,
            pm_latency_ns: 400.0,
            remote_latency_ns: None,
            w: 4.0,
        }
    }

    #[test]
    fn stall_reading_uses_equations_3_and_2() {
        // Only misses: all 3000 stall cycles are memory stalls = 10 serial
        // accesses at 3 GHz / 100 ns; each costs 300 ns more.
        let r = EpochReading {
            reading: Reading::Stalls {
                l2_stall_cycles: 3000.0,
                l3_hits: 0.0,
                l3_misses: 5.0,
                local: 0.0,
                remote: 0.0,
            },
            pm_bytes: 0,
            pm_write_bytes: 0,
        };
        assert!((r.delay_ns(&params()) - 3000.0).abs() < 1e-9);
    }

    #[test]
    fn two_memory_mode_slows_only_the_remote_share() {
        let mut p = params();
        p.remote_latency_ns = Some(200.0);
        // 9000 cycles = 3000 ns; 10 local at 100 ns, 10 remote at 200 ns:
        // 2000 ns remote = 10 remote serial accesses, each 200 ns more.
        let r = EpochReading {
            reading: Reading::Stalls {
                l2_stall_cycles: 9000.0,
                l3_hits: 0.0,
                l3_misses: 20.0,
                local: 10.0,
                remote: 10.0,
            },
            pm_bytes: 0,
            pm_write_bytes: 0,
        };
        assert!((r.delay_ns(&p) - 2000.0).abs() < 1e-6);
    }

    #[test]
    fn access_reading_counts_serial_pm_accesses() {
        let r = EpochReading {
            reading: Reading::Accesses {
                pm_serial: 7.0,
                dram_serial: 100.0,
            },
            pm_bytes: 0,
            pm_write_bytes: 0,
        };
        assert!((r.delay_ns(&params()) - 2100.0).abs() < 1e-9);
    }
}
