//! Cost calibration: the hooks' own cost per call (a filter hit, a logged
//! miss, a compare callback and a logged compare) measured on the calling
//! thread when the source opens, and the accounting of a stretch of calls
//! and batches in ns, which the source reports as overhead for the delays
//! to absorb.

use super::hooks::{on_access, on_cmp};
use super::model::ThreadTotals;
use super::thread::{totals, tsc, tsc_after, Ran};

/// Measured costs of the hooks, used to account their overhead.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HookCosts {
    /// ns per instrumented access that hits the filter (the whole call).
    pub fast_ns: f64,
    /// ns per access that misses the filter and is logged (the whole call,
    /// not the batch that later processes it, which is timed).
    pub miss_ns: f64,
    /// ns per compare callback (clang's `trace-cmp`) that logs nothing:
    /// most of them (a loop bound, a compare of a value no miss loaded).
    pub cmp_ns: f64,
    /// ns per compare callback that logs the compare (one side is the value
    /// the last logged load read).
    pub cmp_logged_ns: f64,
    /// TSC ticks per ns.
    pub tsc_ghz: f64,
    /// ns of the two fenced TSC reads around a batch.
    pub tsc_pair_ns: f64,
}

impl HookCosts {
    /// The hooks' overhead between two totals, in ns: the calls (filter hits
    /// and logged misses at their calibrated costs) plus the batches run on
    /// the thread, as timed.
    pub fn overhead_ns(&self, from: &ThreadTotals, to: &ThreadTotals) -> f64 {
        self.calls_ns(from, to) + self.batches_ns(from, to)
    }

    /// The calls between two totals at their calibrated costs, in ns (what
    /// they cost when nothing else is in flight): the access callbacks
    /// (filter hits and logged misses) and the compare callbacks (those
    /// that log nothing and those that log the compare). The log entries
    /// the model ran (`slow_calls`) include the logged compares.
    pub fn calls_ns(&self, from: &ThreadTotals, to: &ThreadTotals) -> f64 {
        let calls = to.accesses.saturating_sub(from.accesses) as f64;
        let cmps = to.compares.saturating_sub(from.compares) as f64;
        let cmps_logged = to.compares_logged.saturating_sub(from.compares_logged) as f64;
        let entries = to.slow_calls.saturating_sub(from.slow_calls) as f64;
        let logged = (entries - cmps_logged).max(0.0);
        let hits = (calls - logged).max(0.0);
        hits * self.fast_ns
            + logged * self.miss_ns
            + (cmps - cmps_logged).max(0.0) * self.cmp_ns
            + cmps_logged * self.cmp_logged_ns
    }

    /// The batches the thread ran itself between two totals, as timed
    /// (the modeller thread's batches cost the program nothing), in ns.
    pub fn batches_ns(&self, from: &ThreadTotals, to: &ThreadTotals) -> f64 {
        self.ran_ns(Ran {
            batches: to.batches.saturating_sub(from.batches),
            cycles: to.slow_cycles.saturating_sub(from.slow_cycles),
        })
    }

    /// The time of batches run, in ns.
    pub fn ran_ns(&self, ran: Ran) -> f64 {
        let batch_ns = if self.tsc_ghz > 0.0 {
            ran.cycles as f64 / self.tsc_ghz
        } else {
            0.0
        };
        ran.batches as f64 * self.tsc_pair_ns + batch_ns
    }
}

/// Measure the hooks' costs on the calling thread (a few milliseconds).
/// The hooks must be active; the calibration's own accesses are left in
/// the thread's totals, so callers take a baseline afterwards.
pub fn calibrate() -> HookCosts {
    let load: extern "C" fn(*const u64) = hook_load8;
    let load = std::hint::black_box(load);
    // The TSC rate against the monotonic clock.
    let c0 = std::time::Instant::now();
    let k0 = tsc();
    const N: usize = 100_000;
    // Hits: 8 lines, always in the filter.
    let small = [0u64; 64];
    let p = small.as_ptr();
    let mut fast = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        for i in 0..N {
            // SAFETY: in bounds of `small`.
            load(unsafe { p.add(i & 63) });
        }
        fast = fast.min(t.elapsed().as_nanos() as f64 / N as f64);
    }
    // Cost of two fenced TSC reads, as a batch takes them.
    let mut pairs = [0u64; 1001];
    for p in pairs.iter_mut() {
        let a = tsc_after(0);
        let b = tsc_after(0);
        *p = b.wrapping_sub(a);
    }
    pairs.sort_unstable();
    let tsc_best = pairs[pairs.len() / 2];
    let elapsed_ns = c0.elapsed().as_nanos() as f64;
    let ticks = tsc().wrapping_sub(k0) as f64;
    let tsc_ghz = if elapsed_ns > 0.0 {
        ticks / elapsed_ns
    } else {
        0.0
    };
    let tsc_pair_ns = if tsc_ghz > 0.0 {
        tsc_best as f64 / tsc_ghz
    } else {
        0.0
    };
    // Logged misses: 4096 lines (256 KiB, cache-resident) walked in order
    // miss the 256-entry filter every time; the batches' own time, which
    // the runtime measures at run time, is taken out.
    let lines = 4096;
    let big = vec![0u64; lines * 8];
    let q = big.as_ptr();
    let mut miss = f64::INFINITY;
    for _ in 0..5 {
        let a = totals();
        let t = std::time::Instant::now();
        for i in 0..N {
            // SAFETY: in bounds of `big`.
            load(unsafe { q.add((i % lines) * 8) });
        }
        let b = totals();
        let ns = t.elapsed().as_nanos() as f64;
        let batches = b.batches.saturating_sub(a.batches) as f64;
        let batch_ns = if tsc_ghz > 0.0 {
            b.slow_cycles.saturating_sub(a.slow_cycles) as f64 / tsc_ghz
        } else {
            0.0
        };
        miss = miss.min((ns - batch_ns - batches * tsc_pair_ns) / N as f64);
    }
    let miss = miss.max(fast);
    // Compares that log nothing: after one logged load (the hook then
    // compares both operands with its value), operands that never equal
    // it, as a loop bound's compare after a chase's load.
    let cmp: extern "C" fn(u64, u64) = std::hint::black_box(hook_cmp8);
    // Line 1 of `big` left the filter during the walk above (its slot
    // holds a later line): this load is logged, and arms the compares.
    // SAFETY: in bounds of `big`.
    load(unsafe { q.add(8) });
    let mut cmp_ns = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        for i in 0..N as u64 {
            cmp(i | 1 << 40, i + 1);
        }
        cmp_ns = cmp_ns.min(t.elapsed().as_nanos() as f64 / N as f64);
    }
    // Logged compares: each after a logged load, of the value it read (the
    // region is zeroed), less the load's cost measured above; the batches
    // (twice the entries per access) taken out as above.
    const PAIRS: usize = N / 4;
    let mut pair = f64::INFINITY;
    for _ in 0..3 {
        let a = totals();
        let t = std::time::Instant::now();
        for i in 0..PAIRS {
            // SAFETY: in bounds of `big`.
            load(unsafe { q.add((i % lines) * 8) });
            cmp(0, 1);
        }
        let b = totals();
        let ns = t.elapsed().as_nanos() as f64;
        let batches = b.batches.saturating_sub(a.batches) as f64;
        let batch_ns = if tsc_ghz > 0.0 {
            b.slow_cycles.saturating_sub(a.slow_cycles) as f64 / tsc_ghz
        } else {
            0.0
        };
        pair = pair.min((ns - batch_ns - batches * tsc_pair_ns) / PAIRS as f64);
    }
    drop(big);
    HookCosts {
        fast_ns: fast,
        miss_ns: miss,
        cmp_ns,
        cmp_logged_ns: (pair - miss).max(cmp_ns),
        tsc_ghz,
        tsc_pair_ns,
    }
}

/// What `__sanitizer_cov_load8` does, called through a pointer as the
/// program calls the callback.
extern "C" fn hook_load8(addr: *const u64) {
    on_access(addr as usize, 8, false, Some(addr));
}

/// What `__sanitizer_cov_trace_cmp8` does (its site: this function),
/// called through a pointer as the program calls the callback.
extern "C" fn hook_cmp8(a: u64, b: u64) {
    on_cmp(a, b, hook_cmp8 as *const () as usize);
}
