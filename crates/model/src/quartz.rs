//! The Quartz epoch model (Volos et al., Middleware'15, sections 2 and 3),
//! and pmlab's extensions of it.
//!
//! A thread's execution is cut into epochs. At the end of each epoch the
//! emulator learns how many cycles the core stalled on memory, turns that
//! into a number of *serial* memory accesses, and delays the thread by the
//! extra latency those accesses would have cost on slower memory.
//!
//! Every function here is pure: the runtime feeds it counter values and
//! clock readings, and spins for what it returns.

/// Memory-stall cycles from the three counters of Quartz's Table 1
/// (equation 3):
///
/// `LDM_STALL = L2_stalls * (W * L3_miss) / (L3_hit + W * L3_miss)`
///
/// where `w` is the ratio of DRAM latency to L3 latency. Stalls while an L2
/// miss is pending are split between L3 hits and memory in proportion to how
/// long each takes. Returns 0 when there were neither hits nor misses.
pub fn ldm_stall_cycles(l2_stall_cycles: f64, l3_hits: f64, l3_misses: f64, w: f64) -> f64 {
    let weighted_miss = w * l3_misses;
    let denom = l3_hits + weighted_miss;
    if denom <= 0.0 || l2_stall_cycles <= 0.0 {
        return 0.0;
    }
    l2_stall_cycles * weighted_miss / denom
}

/// The delay to inject at the end of an epoch (equation 2), in nanoseconds:
///
/// `Δ = LDM_STALL / DRAM_lat * (NVM_lat - DRAM_lat)`
///
/// `stall_cycles` are converted to time with `cpu_ghz` (cycles per ns), so
/// `LDM_STALL / DRAM_lat` is the number of serial memory accesses. A target
/// latency at or below the DRAM latency yields no delay.
pub fn epoch_delay_ns(stall_cycles: f64, cpu_ghz: f64, dram_lat_ns: f64, nvm_lat_ns: f64) -> f64 {
    if stall_cycles <= 0.0 || dram_lat_ns <= 0.0 || cpu_ghz <= 0.0 || nvm_lat_ns <= dram_lat_ns {
        return 0.0;
    }
    let serial_accesses = stall_cycles / (dram_lat_ns * cpu_ghz);
    serial_accesses * (nvm_lat_ns - dram_lat_ns)
}

/// The delay of an epoch from a count of serial memory accesses, for
/// sources that count accesses rather than cycles (the instrumented source):
/// each serial access costs `nvm_lat_ns - dram_lat_ns` more.
pub fn delay_from_serial_accesses(serial_accesses: f64, dram_lat_ns: f64, nvm_lat_ns: f64) -> f64 {
    if serial_accesses <= 0.0 || nvm_lat_ns <= dram_lat_ns {
        return 0.0;
    }
    serial_accesses * (nvm_lat_ns - dram_lat_ns)
}

/// The share of an epoch's stall cycles due to remote memory on a
/// two-socket machine where the remote node plays NVM (section 3.3):
///
/// `LDM_STALL_rem = LDM_STALL * M_rem*lat_rem / (M_loc*lat_loc + M_rem*lat_rem)`
pub fn remote_stall_cycles(
    stall_cycles: f64,
    local_accesses: f64,
    remote_accesses: f64,
    local_lat_ns: f64,
    remote_lat_ns: f64,
) -> f64 {
    let rem = remote_accesses * remote_lat_ns;
    let denom = local_accesses * local_lat_ns + rem;
    if denom <= 0.0 {
        return 0.0;
    }
    stall_cycles * rem / denom
}

/// How much longer an epoch must last so that the bytes it moved do not
/// exceed the target bandwidth: `max(0, bytes / bandwidth - epoch_ns)`,
/// where `epoch_ns` already includes the latency delay injected for it.
pub fn bandwidth_stretch_ns(bytes_moved: f64, epoch_ns: f64, target_bytes_per_ns: f64) -> f64 {
    if target_bytes_per_ns <= 0.0 || bytes_moved <= 0.0 {
        return 0.0;
    }
    (bytes_moved / target_bytes_per_ns - epoch_ns).max(0.0)
}

/// Quartz's overhead accounting: the emulator's own cost in each epoch (the
/// signal, reading counters, the model) already slowed the thread down, so
/// it is subtracted from the delays injected later. What could never be
/// absorbed is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OverheadAccount {
    /// Overhead incurred but not yet absorbed by a delay, in ns.
    pub pending_ns: f64,
    /// Total overhead incurred, in ns.
    pub total_overhead_ns: f64,
    /// Total delay the model asked for, in ns.
    pub total_requested_ns: f64,
    /// Total delay actually injected (requested minus absorbed), in ns.
    pub total_injected_ns: f64,
}

impl OverheadAccount {
    /// Record an epoch's overhead and its requested delay; returns the delay
    /// to actually inject after subtracting all pending overhead that fits.
    pub fn settle(&mut self, requested_ns: f64, overhead_ns: f64) -> f64 {
        let requested_ns = requested_ns.max(0.0);
        let overhead_ns = overhead_ns.max(0.0);
        self.total_overhead_ns += overhead_ns;
        self.total_requested_ns += requested_ns;
        self.pending_ns += overhead_ns;
        let absorbed = self.pending_ns.min(requested_ns);
        self.pending_ns -= absorbed;
        let inject = requested_ns - absorbed;
        self.total_injected_ns += inject;
        inject
    }

    /// True when every overhead so far was hidden inside requested delays.
    pub fn fully_amortised(&self) -> bool {
        self.pending_ns <= 0.0
    }
}

/// The pcommit-style write model of Quartz's section 6: flushes to PM are
/// posted and proceed in parallel (up to `parallelism` at once, each taking
/// `write_latency_ns` at the device); an ordering/durability point waits
/// only for the flushes that have not completed by the time it is reached.
///
/// Times are in nanoseconds on any monotonic clock the caller uses.
#[derive(Debug, Clone)]
pub struct WriteModel {
    write_latency_ns: f64,
    /// Completion time of the write occupying each slot.
    slots: Vec<f64>,
    /// Latest completion time among outstanding writes.
    last_completion: f64,
    /// Number of flushes issued since the last drain.
    pending: u64,
}

impl WriteModel {
    /// A model with the given per-write latency and write parallelism (at
    /// least 1).
    pub fn new(write_latency_ns: f64, parallelism: usize) -> WriteModel {
        WriteModel {
            write_latency_ns: write_latency_ns.max(0.0),
            slots: vec![f64::NEG_INFINITY; parallelism.max(1)],
            last_completion: f64::NEG_INFINITY,
            pending: 0,
        }
    }

    /// A flush of one cache line issued at `now_ns`: it starts when a slot is
    /// free and completes `write_latency_ns` later.
    pub fn flush(&mut self, now_ns: f64) {
        let (idx, free_at) = self
            .slots
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("at least one slot");
        let done = now_ns.max(free_at) + self.write_latency_ns;
        self.slots[idx] = done;
        self.last_completion = self.last_completion.max(done);
        self.pending += 1;
    }

    /// A durability point reached at `now_ns`: returns how long the thread
    /// must stall until every earlier flush has completed, and forgets them.
    pub fn drain(&mut self, now_ns: f64) -> f64 {
        let wait = (self.last_completion - now_ns).max(0.0);
        self.pending = 0;
        wait
    }

    /// Flushes issued since the last drain.
    pub fn pending(&self) -> u64 {
        self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equation_3_weights_misses_by_w() {
        // Only misses: all stall cycles are memory stalls.
        assert_eq!(ldm_stall_cycles(1000.0, 0.0, 10.0, 4.0), 1000.0);
        // Equal hits and misses with W = 3: three quarters go to memory.
        assert_eq!(ldm_stall_cycles(1000.0, 10.0, 10.0, 3.0), 750.0);
        assert_eq!(ldm_stall_cycles(1000.0, 0.0, 0.0, 3.0), 0.0);
    }

    #[test]
    fn equation_2_counts_serial_accesses() {
        // 3 GHz, 100 ns DRAM: 300 cycles per access; 3000 cycles = 10 accesses.
        let d = epoch_delay_ns(3000.0, 3.0, 100.0, 400.0);
        assert!((d - 3000.0).abs() < 1e-9);
        assert_eq!(epoch_delay_ns(3000.0, 3.0, 100.0, 100.0), 0.0);
        assert_eq!(epoch_delay_ns(3000.0, 3.0, 100.0, 50.0), 0.0);
    }

    #[test]
    fn remote_split_matches_the_papers_example() {
        // 3000 ns total, 10 local at 100 ns and 10 remote at 200 ns: 2000 remote.
        let rem = remote_stall_cycles(3000.0, 10.0, 10.0, 100.0, 200.0);
        assert!((rem - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn bandwidth_stretch_only_when_over_target() {
        // 1 GB/s = 1 byte/ns; 64 KiB in 10 us needs 65536 ns.
        assert!((bandwidth_stretch_ns(65536.0, 10_000.0, 1.0) - 55536.0).abs() < 1e-9);
        assert_eq!(bandwidth_stretch_ns(1000.0, 10_000.0, 1.0), 0.0);
    }

    #[test]
    fn overhead_is_absorbed_by_later_delays() {
        let mut acc = OverheadAccount::default();
        assert_eq!(acc.settle(0.0, 100.0), 0.0);
        assert!(!acc.fully_amortised());
        assert_eq!(acc.settle(250.0, 50.0), 100.0);
        assert!(acc.fully_amortised());
        assert_eq!(acc.total_injected_ns, 100.0);
        assert_eq!(acc.total_overhead_ns, 150.0);
    }

    #[test]
    fn write_model_overlaps_independent_flushes() {
        let mut m = WriteModel::new(100.0, 4);
        for i in 0..4 {
            m.flush(i as f64);
        }
        // Four flushes in parallel: the last completes at 3 + 100.
        assert!((m.drain(10.0) - 93.0).abs() < 1e-9);
        // With parallelism 1 they serialise: done at 400.
        let mut s = WriteModel::new(100.0, 1);
        for i in 0..4 {
            s.flush(i as f64);
        }
        assert!((s.drain(10.0) - 390.0).abs() < 1e-9);
        // A drain long after completion costs nothing.
        s.flush(1000.0);
        assert_eq!(s.drain(5000.0), 0.0);
    }
}
