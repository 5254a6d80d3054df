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
/// The epoch on its own, with no credit from the epochs before it: what
/// [`DeviceClock`] reduces to for one thread whose epochs each begin once
/// the device has finished the previous one's traffic (and what the
/// runtime reports under `--no-inject`, where no thread waits).
pub fn bandwidth_stretch_ns(bytes_moved: f64, epoch_ns: f64, target_bytes_per_ns: f64) -> f64 {
    if target_bytes_per_ns <= 0.0 || bytes_moved <= 0.0 {
        return 0.0;
    }
    (bytes_moved / target_bytes_per_ns - epoch_ns).max(0.0)
}

/// The traffic of a sampled thread's gaps, from that of its windows.
///
/// A program built with the sampling plugin runs its instrumented copy,
/// whose accesses the cache model sees, on a share of its *checks*
/// (function entries and loop back-edges), and its clean copy on the rest
/// (the gaps). The bytes the model counts are the windows'; the gaps'
/// bytes are estimated at the rate the windows moved per check, averaged
/// over the last [`keep`](GapRate::new) window checks, and charged in the
/// epoch whose gaps ran them. Scaling each epoch's window bytes by the run's
/// ratio of checks to window checks instead (the latency model's
/// extrapolation) charges a whole period of traffic wherever a window
/// happens to fall: at 1% with windows of 2,000 checks, a period is about
/// 10 MB of a STREAM triad, and a timed pass of a thread holds 20 of them,
/// give or take one: up to 5% early or late at the pass's edges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GapRate {
    read: f64,
    write: f64,
    checks: f64,
    keep: f64,
}

impl GapRate {
    /// An estimator that averages over the last `keep` window checks
    /// (at least 1).
    pub fn new(keep: f64) -> GapRate {
        GapRate {
            keep: keep.max(1.0),
            ..GapRate::default()
        }
    }

    /// The window checks seen so far count for this much (at most
    /// `keep`).
    pub fn checks(&self) -> f64 {
        self.checks
    }

    /// Bytes read and written per window check (0 before any window).
    pub fn per_check(&self) -> (f64, f64) {
        if self.checks > 0.0 {
            (self.read / self.checks, self.write / self.checks)
        } else {
            (0.0, 0.0)
        }
    }

    /// An epoch's traffic: its windows ran `window_checks` checks and
    /// moved `read` and `write` bytes (as the model counted them), its
    /// gaps ran `gap_checks` checks unseen. Returns the epoch's bytes read
    /// and written: the windows' own, plus the gaps' at the rate of the
    /// windows so far, this epoch's included. With no gap checks (every
    /// access hooked, or a program without the plugin) the counts stand
    /// as they are.
    pub fn extrapolate(
        &mut self,
        read: f64,
        write: f64,
        window_checks: f64,
        gap_checks: f64,
    ) -> (f64, f64) {
        let (read, write) = (read.max(0.0), write.max(0.0));
        if window_checks > 0.0 {
            self.read += read;
            self.write += write;
            self.checks += window_checks;
            if self.checks > self.keep {
                let s = self.keep / self.checks;
                self.read *= s;
                self.write *= s;
                self.checks = self.keep;
            }
        }
        let gap = gap_checks.max(0.0);
        let (r, w) = self.per_check();
        (read + r * gap, write + w * gap)
    }
}

/// The emulated device's bandwidth: bytes per ns it reads (line fills,
/// write-allocate reads included) and writes (write-backs). With one
/// figure for both (`--pm-bandwidth` alone) reads and writes share one
/// budget; with a write bandwidth of its own (`--pm-write-bandwidth`, as
/// Optane's ~2.3 GB/s per DIMM for writes against ~6.6 GB/s for reads)
/// each byte occupies the device for the time its kind takes, so mixed
/// traffic gets a bandwidth between the two (the harmonic mix, weighted
/// by the bytes of each kind).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceRates {
    /// Read bandwidth, bytes per ns (1 byte/ns = 1 GB/s).
    pub read_bytes_per_ns: f64,
    /// Write bandwidth, bytes per ns.
    pub write_bytes_per_ns: f64,
}

impl DeviceRates {
    /// One budget for reads and writes.
    pub fn shared(bytes_per_ns: f64) -> DeviceRates {
        DeviceRates {
            read_bytes_per_ns: bytes_per_ns,
            write_bytes_per_ns: bytes_per_ns,
        }
    }

    /// Time (ns) the device is busy moving `read_bytes` in and
    /// `write_bytes` out. A rate that is not positive moves its bytes in
    /// no time (no target).
    pub fn busy_ns(&self, read_bytes: f64, write_bytes: f64) -> f64 {
        let part = |bytes: f64, rate: f64| {
            if bytes > 0.0 && rate > 0.0 {
                bytes / rate
            } else {
                0.0
            }
        };
        part(read_bytes, self.read_bytes_per_ns) + part(write_bytes, self.write_bytes_per_ns)
    }
}

/// The emulated device's timeline, shared by every thread of the process:
/// the time its traffic so far keeps it busy until. Each thread, at the
/// end of an epoch, books the traffic of that epoch and then may not go on
/// before the device has moved it ([`DeviceClock::book`]). Threads thus
/// share one budget (two threads streaming at a 1 GB/s target get 0.5 GB/s
/// each, not 1 each), and an epoch that moved less than the budget leaves
/// the device idle rather than in credit, as real hardware does.
///
/// Times are in any unit and clock the caller uses for all threads (the
/// runtime's TSC ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceClock {
    /// The device is busy with booked traffic until this time.
    pub busy_until: f64,
}

impl DeviceClock {
    /// Book `busy` time of traffic moved by an epoch that began at
    /// `since`: the device serves it after what it already has booked,
    /// never before the epoch began. Returns the time the traffic is done;
    /// the thread's epoch must not end before it.
    pub fn book(&mut self, since: f64, busy: f64) -> f64 {
        let done = book_after(self.busy_until, since, busy);
        self.busy_until = done;
        done
    }
}

/// [`DeviceClock::book`]'s rule on a bare time, for callers that keep the
/// timeline in an atomic: `max(busy_until, since) + busy` (`busy` of zero
/// books nothing).
pub fn book_after(busy_until: f64, since: f64, busy: f64) -> f64 {
    if busy <= 0.0 {
        return busy_until;
    }
    busy_until.max(since) + busy
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

    /// The thread waited `wait_ns` for the device's bandwidth (a deadline
    /// in real time, which the overhead already spent brought no nearer):
    /// pending overhead up to that much is hidden in the wait. Returns the
    /// part absorbed.
    pub fn hide_in_wait(&mut self, wait_ns: f64) -> f64 {
        let absorbed = self.pending_ns.min(wait_ns.max(0.0));
        self.pending_ns -= absorbed;
        absorbed
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
    fn gaps_are_charged_at_the_windows_rate_per_check() {
        // A triad at 1%: each window of 2,000 checks moves 1,500 lines in
        // and 500 back (2 elements per check); each gap of 198,000 checks
        // as much per check, unseen.
        let mut g = GapRate::new(8_000.0);
        let (r, w) = g.extrapolate(96_000.0, 32_000.0, 2_000.0, 198_000.0);
        assert_eq!((r, w), (9_600_000.0, 3_200_000.0));
        // An epoch that fell in a gap: charged at the same rate, not zero.
        let (r, w) = g.extrapolate(0.0, 0.0, 0.0, 50_000.0);
        assert_eq!((r, w), (2_400_000.0, 800_000.0));
        // Every access seen (no gap): the counts as they are.
        let (r, w) = g.extrapolate(640.0, 64.0, 10.0, 0.0);
        assert_eq!((r, w), (640.0, 64.0));
        // A new phase moves the rate by half for every `keep` window
        // checks: after four read-only stretches of 8,000 checks the
        // triad's rate weighs 1/16.
        for _ in 0..4 {
            g.extrapolate(8_000.0 * 32.0, 0.0, 8_000.0, 0.0);
        }
        let (r, w) = g.per_check();
        assert!((r - 32.0).abs() < 32.0 / 16.0 && w < 16.0 / 16.0, "{r} {w}");
        assert_eq!(g.checks(), 8_000.0);
        // Nothing seen yet: nothing to charge the gaps with.
        let (r, w) = GapRate::new(100.0).extrapolate(0.0, 0.0, 0.0, 1e6);
        assert_eq!((r, w), (0.0, 0.0));
    }

    #[test]
    fn a_pass_is_charged_its_bytes_wherever_its_windows_fall() {
        // A thread's pass of 4,000,000 checks at 32 B per check, in epochs
        // of 500,000 checks, sampled at 1% (period 200,000): whatever the
        // phase of the windows, each epoch is charged 16 MB within 1.1%
        // (the windows' counts are exact, the gaps' at the mean rate),
        // where scaling each epoch's windows by 100 charges 0, 1 or 2
        // windows' worth (0, 12.8 or 25.6 MB).
        for phase in [0u64, 50_000, 123_456, 199_999] {
            let mut g = GapRate::new(8_000.0);
            // Warm-up: the windows before the pass.
            g.extrapolate(2_000.0 * 32.0, 0.0, 2_000.0, 0.0);
            let mut total = 0.0;
            for e in 0..8u64 {
                let (lo, hi) = (e * 500_000, (e + 1) * 500_000);
                // Window checks of [lo, hi): windows are [k*P + phase, +2000).
                let mut win = 0u64;
                let mut k = 0u64;
                while k * 200_000 < hi + 200_000 {
                    let (a, b) = (k * 200_000 + phase, k * 200_000 + phase + 2_000);
                    win += b.min(hi).saturating_sub(a.max(lo));
                    k += 1;
                }
                let (r, _) =
                    g.extrapolate(win as f64 * 32.0, 0.0, win as f64, (500_000 - win) as f64);
                assert!(
                    (r - 16e6).abs() < 16e6 * 0.011,
                    "phase {phase} epoch {e}: {r}"
                );
                total += r;
            }
            assert!((total - 128e6).abs() < 1.0, "{total}");
        }
    }

    #[test]
    fn device_rates_charge_reads_and_writes_at_their_own_rate() {
        // One shared budget: 1 GB/s = 1 byte/ns, reads and writes alike.
        let one = DeviceRates::shared(1.0);
        assert_eq!(one.busy_ns(3000.0, 1000.0), 4000.0);
        // Optane-like: 6.6 GB/s reads, 2.3 GB/s writes.
        let optane = DeviceRates {
            read_bytes_per_ns: 6.6,
            write_bytes_per_ns: 2.3,
        };
        let t = optane.busy_ns(6600.0, 2300.0);
        assert!((t - 2000.0).abs() < 1e-9, "{t}");
        // Mixed traffic lands between the two rates.
        let mixed = (6600.0 + 2300.0) / t;
        assert!(mixed > 2.3 && mixed < 6.6, "{mixed}");
        // No traffic, no time; a rate of zero means no target.
        assert_eq!(one.busy_ns(0.0, 0.0), 0.0);
        assert_eq!(DeviceRates::shared(0.0).busy_ns(1e9, 1e9), 0.0);
    }

    #[test]
    fn one_thread_books_its_epochs_back_to_back() {
        // 1 byte/ns; a thread that moves 20,000 B per 10,000 ns epoch:
        // each epoch ends 20,000 ns after it began, as bandwidth_stretch_ns
        // says for an epoch alone.
        let rates = DeviceRates::shared(1.0);
        let mut dev = DeviceClock::default();
        let mut start = 0.0;
        for _ in 0..5 {
            let now = start + 10_000.0;
            let done = dev.book(start, rates.busy_ns(20_000.0, 0.0));
            let stretch = done - now;
            assert_eq!(stretch, bandwidth_stretch_ns(20_000.0, 10_000.0, 1.0));
            start = done;
        }
        assert_eq!(start, 100_000.0);
    }

    #[test]
    fn threads_share_the_device_budget() {
        // Two threads, each moving 10,000 B in every 10,000 ns epoch at
        // 1 byte/ns: together they move 1 byte/ns, each half of it
        // (booked per thread, each would run at the full target).
        let mut dev = DeviceClock::default();
        let (mut a, mut b) = (0.0, 0.0);
        let mut moved = 0.0;
        for _ in 0..100 {
            a = dev.book(a, 10_000.0).max(a + 10_000.0);
            b = dev.book(b, 10_000.0).max(b + 10_000.0);
            moved += 20_000.0;
        }
        let rate = moved / a.max(b);
        assert!((rate - 1.0).abs() < 0.01, "{rate}");
        let one = 1_000_000.0 / a.max(b);
        assert!((one - 0.5).abs() < 0.01, "{one}");
    }

    #[test]
    fn the_wait_is_the_target_time_less_the_time_already_spent() {
        // 8 GB/s = 8 bytes/ns; an epoch that moved 80,000 B needs
        // 10,000 ns of device time from its start.
        let rates = DeviceRates::shared(8.0);
        let busy = rates.busy_ns(60_000.0, 20_000.0);
        assert_eq!(busy, 10_000.0);
        // The epoch ran 4,000 ns (clean code, hooks, a switched-out
        // stretch: all of it real time): it waits the other 6,000.
        let mut dev = DeviceClock::default();
        let done = dev.book(0.0, busy);
        assert_eq!(done - 4_000.0, 6_000.0);
        assert_eq!(bandwidth_stretch_ns(80_000.0, 4_000.0, 8.0), 6_000.0);
        // Hooks that slowed the epoch past the device's time leave nothing
        // to wait: the target time is not added on top of the elapsed one.
        let mut dev = DeviceClock::default();
        assert!(dev.book(0.0, busy) < 12_000.0);
        assert_eq!(bandwidth_stretch_ns(80_000.0, 12_000.0, 8.0), 0.0);
    }

    #[test]
    fn an_idle_device_gives_no_credit() {
        // A thread idle for 1 ms, then a burst of 5,000 B in 1,000 ns at
        // 1 byte/ns: the burst waits 4,000 ns; the idle millisecond does
        // not pay for it.
        let mut dev = DeviceClock::default();
        let done = dev.book(1_000_000.0, 5_000.0);
        assert_eq!(done - 1_001_000.0, 4_000.0);
        // Nothing booked: the timeline stays.
        assert_eq!(book_after(7.0, 100.0, 0.0), 7.0);
        // Traffic behind booked traffic waits for it.
        assert_eq!(book_after(50.0, 10.0, 5.0), 55.0);
    }

    #[test]
    fn a_bandwidth_wait_hides_pending_overhead() {
        let mut acc = OverheadAccount::default();
        acc.settle(0.0, 300.0);
        assert_eq!(acc.hide_in_wait(200.0), 200.0);
        assert_eq!(acc.pending_ns, 100.0);
        assert_eq!(acc.hide_in_wait(500.0), 100.0);
        assert!(acc.fully_amortised());
        assert_eq!(acc.hide_in_wait(-5.0), 0.0);
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
