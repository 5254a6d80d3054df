//! Memory-level parallelism: how many of a thread's memory accesses were
//! *serial*, i.e. how much time they cost when independent misses overlap.
//!
//! The instrumented source sees addresses, not the dependencies between
//! instructions. [`OverlapEstimator`] rebuilds enough of them to tell a
//! pointer chase (each address comes from the previous load, so every miss
//! pays the full latency) from independent misses (which overlap up to the
//! core's fill buffers):
//!
//! * a miss whose address lies in the line named by the *value* loaded by a
//!   recent miss depends on it (the hook reads that value when it sees the
//!   load);
//! * misses are placed on a timeline measured in memory latencies: a miss
//!   issues when the previous miss in program order has issued, when its
//!   parent has completed, and when a fill buffer is free, and completes one
//!   latency later;
//! * the out-of-order window is bounded: when more than
//!   `window_accesses` instrumented accesses separate a miss from an older
//!   one still in flight, the core would have stalled on the older one, so
//!   the timeline waits for it.
//!
//! Whenever a miss pushes the completion frontier forward, the advance is
//! attributed to that miss's memory kind; the per-kind sums are the
//! epoch's serial accesses, which the Quartz delay model multiplies by the
//! extra latency of that kind.

/// Which memory served a miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    /// Ordinary DRAM: no delay is added.
    Dram,
    /// Emulated persistent memory.
    Pm,
}

/// Parameters of the overlap estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverlapConfig {
    /// Misses that may be outstanding at once (line fill buffers / miss
    /// address buffers): about 10-12 on Intel cores, up to 22-24 on AMD Zen.
    pub fill_buffers: usize,
    /// Instrumented accesses the out-of-order window can run ahead of an
    /// outstanding miss before stalling on it.
    pub window_accesses: u64,
}

impl Default for OverlapConfig {
    fn default() -> OverlapConfig {
        OverlapConfig {
            fill_buffers: 10,
            window_accesses: 64,
        }
    }
}

/// The serial share of one miss in a program whose out-of-order window
/// holds only `window` units, `gap` units after the program's previous
/// miss: misses closer than the window overlap, `window / gap` of them at
/// a time, so each costs `gap / window` of a latency; a miss further from
/// the previous one than the window costs a whole latency. Summed over a
/// stretch of misses (and taken as at least the stretch's native serial
/// count) this is the stretch's serial count in the smaller window.
///
/// Instrumentation shrinks the window: every access calls a hook whose
/// instructions take reorder-buffer entries, so independent misses that
/// overlap natively wait for each other (8 chains: 21 ns per access
/// natively, 50-60 under the hooks).
pub fn window_share(gap: u64, window: u64) -> f64 {
    if window == 0 || gap >= window {
        1.0
    } else {
        gap as f64 / window as f64
    }
}

/// Most fill buffers the estimator tracks.
pub const MAX_FILL_BUFFERS: usize = 32;

/// Entries of the table of recent loaded values (direct-mapped).
const PARENTS: usize = 64;

#[derive(Debug, Clone, Copy, Default)]
struct InFlight {
    /// Completion time, in latencies (every miss takes one).
    done: u64,
    /// Index of the access in the thread's access stream.
    at_access: u64,
    /// Valid entry.
    live: bool,
}

/// Serial access counts of one interval, per memory kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SerialCounts {
    /// Serial DRAM accesses (in latencies).
    pub dram: f64,
    /// Serial PM accesses (in latencies).
    pub pm: f64,
    /// Misses seen, DRAM.
    pub dram_misses: u64,
    /// Misses seen, PM.
    pub pm_misses: u64,
    /// Misses found to depend on an earlier miss.
    pub dependent: u64,
}

/// Estimates serial memory accesses from a stream of misses.
#[derive(Debug, Clone)]
pub struct OverlapEstimator {
    config: OverlapConfig,
    /// Recent misses, as a ring; the estimator looks for parents here.
    ring: [InFlight; MAX_FILL_BUFFERS],
    head: usize,
    /// Oldest ring entry not yet known to be outside the window, and how
    /// many entries follow it up to `head`.
    wptr: usize,
    wcount: usize,
    /// Latest completion among misses that fell out of the window.
    win_done: u64,
    /// Line named by the value a recent miss loaded -> its completion time.
    parents: [(u64, u64); PARENTS],
    /// Issue time of the latest miss (program order).
    issue: u64,
    /// Latest completion time of any miss.
    frontier: u64,
    counts: SerialCounts,
}

impl OverlapEstimator {
    /// A new estimator; `fill_buffers` is clamped to 1..=[`MAX_FILL_BUFFERS`].
    pub fn new(mut config: OverlapConfig) -> OverlapEstimator {
        config.fill_buffers = config.fill_buffers.clamp(1, MAX_FILL_BUFFERS);
        config.window_accesses = config.window_accesses.max(1);
        OverlapEstimator {
            config,
            ring: [InFlight::default(); MAX_FILL_BUFFERS],
            head: 0,
            wptr: 0,
            wcount: 0,
            win_done: 0,
            parents: [(0, 0); PARENTS],
            issue: 0,
            frontier: 0,
            counts: SerialCounts::default(),
        }
    }

    /// The configuration in use (after clamping).
    pub fn config(&self) -> OverlapConfig {
        self.config
    }

    /// Record a miss to `line` (a line number) of the given kind, at position
    /// `access_index` in the thread's stream of instrumented accesses.
    /// `loaded_value` is the 8-byte value the miss loaded, when known (loads
    /// of 8 bytes), used to detect later misses that depend on it.
    /// `line_shift` converts a value to a line number (6 for 64 B lines).
    pub fn miss(
        &mut self,
        line: u64,
        kind: MemKind,
        access_index: u64,
        loaded_value: Option<u64>,
        line_shift: u32,
    ) {
        let fb = self.config.fill_buffers;
        let window = self.config.window_accesses;
        let mut start = self.issue;
        // Window: misses too far behind in the access stream must have
        // completed before this one can issue. Entries become "far" in
        // order, so a pointer walks over each once (amortised O(1)).
        while self.wcount > 0 {
            let e = &self.ring[self.wptr];
            if access_index.saturating_sub(e.at_access) <= window {
                break;
            }
            self.win_done = self.win_done.max(e.done);
            self.wptr = (self.wptr + 1) % MAX_FILL_BUFFERS;
            self.wcount -= 1;
        }
        start = start.max(self.win_done);
        // Dependency: this address is the line a recent miss loaded.
        let p = self.parents[line as usize % PARENTS];
        if line != 0 && p.0 == line {
            start = start.max(p.1);
            self.counts.dependent += 1;
        }
        // Fill buffers: the oldest of the `fb` most recent misses must be
        // done before this one issues.
        let slot = &self.ring[(self.head + MAX_FILL_BUFFERS - fb) % MAX_FILL_BUFFERS];
        if slot.live {
            start = start.max(slot.done);
        }
        let done = start + 1;
        if done > self.frontier {
            // The frontier moves by one latency: this miss is on the
            // critical path.
            match kind {
                MemKind::Dram => self.counts.dram += 1.0,
                MemKind::Pm => self.counts.pm += 1.0,
            }
            self.frontier = done;
        }
        match kind {
            MemKind::Dram => self.counts.dram_misses += 1,
            MemKind::Pm => self.counts.pm_misses += 1,
        }
        self.issue = start;
        let value_line = loaded_value.map(|v| v >> line_shift).unwrap_or(0);
        if value_line != 0 {
            self.parents[value_line as usize % PARENTS] = (value_line, done);
        }
        self.ring[self.head] = InFlight {
            done,
            at_access: access_index,
            live: true,
        };
        self.head = (self.head + 1) % MAX_FILL_BUFFERS;
        if self.wcount == MAX_FILL_BUFFERS {
            // The oldest entry is overwritten: it is older than every fill
            // buffer, so the fill-buffer rule already waited for it.
            self.wptr = (self.wptr + 1) % MAX_FILL_BUFFERS;
        } else {
            self.wcount += 1;
        }
    }

    /// The counts accumulated since the last [`take`](Self::take).
    pub fn counts(&self) -> SerialCounts {
        self.counts
    }

    /// Return the counts accumulated so far and start a new interval (an
    /// epoch). Misses still in flight keep their dependencies.
    pub fn take(&mut self) -> SerialCounts {
        std::mem::take(&mut self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIFT: u32 = 6;

    #[test]
    fn a_small_window_serialises_what_it_cannot_hold() {
        // memlat's 8 chains: a miss every 4 units; a 13-unit window holds
        // 3.25 of them, so each costs 4/13 of a latency.
        assert!((window_share(4, 13) - 4.0 / 13.0).abs() < 1e-12);
        // A lone miss, far from the previous one, costs a whole latency.
        assert_eq!(window_share(13, 13), 1.0);
        assert_eq!(window_share(1000, 13), 1.0);
        // A burst of adjacent logged misses (2 units each) overlaps 6.5-fold.
        let burst: f64 = std::iter::once(window_share(1000, 13))
            .chain((0..7).map(|_| window_share(2, 13)))
            .sum();
        assert!((burst - (1.0 + 14.0 / 13.0)).abs() < 1e-12, "{burst}");
        // No window at all: every miss is serial.
        assert_eq!(window_share(1, 0), 1.0);
    }

    /// A pointer chase over `chains` interleaved chains: element `i` of
    /// chain `c` is at line `base(c) + i`, and its value points to `i + 1`.
    fn chase(est: &mut OverlapEstimator, chains: u64, steps: u64, kind: MemKind) {
        let mut access = 0;
        for i in 0..steps {
            for c in 0..chains {
                let line = 1_000_000 * (c + 1) + i * 7;
                let next = 1_000_000 * (c + 1) + (i + 1) * 7;
                est.miss(line, kind, access, Some(next << SHIFT), SHIFT);
                access += 1;
            }
        }
    }

    #[test]
    fn pointer_chase_is_fully_serial() {
        let mut e = OverlapEstimator::new(OverlapConfig::default());
        chase(&mut e, 1, 1000, MemKind::Pm);
        let c = e.take();
        assert_eq!(c.pm_misses, 1000);
        assert_eq!(c.dependent, 999);
        assert!((c.pm - 1000.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.dram, 0.0);
    }

    #[test]
    fn independent_chains_overlap() {
        for chains in [2u64, 4, 8] {
            let mut e = OverlapEstimator::new(OverlapConfig::default());
            chase(&mut e, chains, 1000, MemKind::Pm);
            let c = e.take();
            assert!((c.pm - 1000.0).abs() < 1.0, "{chains} chains: {c:?}");
        }
    }

    #[test]
    fn overlap_is_capped_by_fill_buffers() {
        // 20 chains but 10 fill buffers: 2 latencies per step.
        let mut e = OverlapEstimator::new(OverlapConfig {
            fill_buffers: 10,
            window_accesses: 1000,
        });
        chase(&mut e, 20, 500, MemKind::Dram);
        let c = e.take();
        assert!((c.dram - 1000.0).abs() < 2.0, "{c:?}");
    }

    #[test]
    fn independent_misses_overlap_up_to_fill_buffers() {
        let mut e = OverlapEstimator::new(OverlapConfig {
            fill_buffers: 10,
            window_accesses: 64,
        });
        for i in 0..10_000u64 {
            e.miss(5000 + i * 3, MemKind::Pm, i, Some(0), SHIFT);
        }
        let c = e.take();
        assert!((c.pm - 1000.0).abs() < 1.0, "{c:?}");
        assert_eq!(c.dependent, 0);
    }

    #[test]
    fn misses_far_apart_in_the_stream_do_not_overlap() {
        // Independent misses separated by 1000 accesses of other work: the
        // window stalls on each one.
        let mut e = OverlapEstimator::new(OverlapConfig::default());
        for i in 0..100u64 {
            e.miss(5000 + i, MemKind::Pm, i * 1000, None, SHIFT);
        }
        assert!((e.take().pm - 100.0).abs() < 1e-9);
    }

    #[test]
    fn mixed_chain_attributes_each_step_to_its_memory() {
        // multilat-like: one chain, 200 DRAM steps then 100 PM steps.
        let mut e = OverlapEstimator::new(OverlapConfig::default());
        let mut access = 0;
        let mut line = 10u64;
        for round in 0..10 {
            for k in 0..300u64 {
                let kind = if k < 200 { MemKind::Dram } else { MemKind::Pm };
                let next = line + 13 + round;
                e.miss(line, kind, access, Some(next << SHIFT), SHIFT);
                line = next;
                access += 1;
            }
        }
        let c = e.take();
        assert!((c.dram - 2000.0).abs() < 1e-9, "{c:?}");
        assert!((c.pm - 1000.0).abs() < 1e-9, "{c:?}");
        assert_eq!((c.dram_misses, c.pm_misses), (2000, 1000));
    }

    #[test]
    fn take_starts_a_new_interval_but_keeps_dependencies() {
        let mut e = OverlapEstimator::new(OverlapConfig::default());
        chase(&mut e, 1, 10, MemKind::Pm);
        assert!((e.take().pm - 10.0).abs() < 1e-9);
        assert_eq!(e.counts(), SerialCounts::default());
        // Continue the same chain: still serial.
        let line = 1_000_000 + 10 * 7;
        e.miss(line, MemKind::Pm, 10, None, SHIFT);
        let c = e.take();
        assert_eq!(c.dependent, 1);
        assert!((c.pm - 1.0).abs() < 1e-9);
    }
}
