//! Time: the TSC (read with `rdtsc`), its frequency, and the delay spin.

use std::sync::atomic::{AtomicU64, Ordering};

static TSC_GHZ_BITS: AtomicU64 = AtomicU64::new(0);

/// Read the time-stamp counter.
#[inline]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

/// CLOCK_MONOTONIC in ns (async-signal-safe).
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec. The real one: the
    // interposed clock_gettime is a sync point.
    unsafe { crate::real::clock_gettime()(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A (clock ns, TSC) pair read close together: the TSC is read on both
/// sides of the clock and the pair is kept only when both reads are near,
/// so that a preemption between them cannot skew it.
#[cfg(target_arch = "x86_64")]
fn paired_reading() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..50 {
        let c0 = rdtsc();
        let t = monotonic_ns();
        let c1 = rdtsc();
        let gap = c1.wrapping_sub(c0);
        if gap < best.2 {
            best = (t, c0 + gap / 2, gap);
        }
        if gap < 2_000 {
            break;
        }
    }
    (best.0, best.1)
}

/// Measure the TSC frequency against CLOCK_MONOTONIC over `window_ns`,
/// from two tightly paired readings (robust to preemption on a busy
/// machine).
pub fn measure_tsc_ghz(window_ns: u64) -> f64 {
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = window_ns;
        return 1.0;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let (t0, c0) = paired_reading();
        while monotonic_ns() - t0 < window_ns {
            std::hint::spin_loop();
        }
        let (t1, c1) = paired_reading();
        (c1 - c0) as f64 / (t1 - t0) as f64
    }
}

/// Set the TSC frequency (from configuration or measurement).
pub fn set_tsc_ghz(ghz: f64) {
    TSC_GHZ_BITS.store(ghz.to_bits(), Ordering::Relaxed);
}

/// The TSC frequency in GHz (ticks per ns); 1.0 until set.
#[inline]
pub fn tsc_ghz() -> f64 {
    let b = TSC_GHZ_BITS.load(Ordering::Relaxed);
    if b == 0 {
        1.0
    } else {
        f64::from_bits(b)
    }
}

/// TSC ticks to ns.
#[inline]
pub fn ticks_to_ns(ticks: u64) -> f64 {
    ticks as f64 / tsc_ghz()
}

/// ns to TSC ticks.
#[inline]
pub fn ns_to_ticks(ns: f64) -> u64 {
    (ns.max(0.0) * tsc_ghz()) as u64
}

/// Longest wait of `_exit` or an exec for another thread (the monitor, the
/// trace writer) to finish writing on its behalf.
pub const HANDOFF_WAIT_NS: u64 = 2_000_000_000;

/// Sleep in 200 us steps (the real `nanosleep`, not the interposed one)
/// while `busy()` holds, for at most `max_ns`. Async-signal-safe when
/// `busy` is; an epoch signal cutting a step short is harmless.
pub fn wait_while(max_ns: u64, mut busy: impl FnMut() -> bool) {
    let start = monotonic_ns();
    let nap = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000,
    };
    while busy() && monotonic_ns().saturating_sub(start) < max_ns {
        // SAFETY: the real nanosleep with a valid timespec.
        unsafe { crate::real::nanosleep()(&nap, std::ptr::null_mut()) };
    }
}

/// Spin until `ns` have passed on the TSC; returns the TSC at the end.
/// Async-signal-safe.
#[inline]
pub fn spin_ns(ns: f64) -> u64 {
    let start = rdtsc();
    let end = start.wrapping_add(ns_to_ticks(ns));
    let mut now = start;
    while now < end {
        std::hint::spin_loop();
        now = rdtsc();
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_lasts_at_least_the_delay() {
        set_tsc_ghz(measure_tsc_ghz(2_000_000));
        let t0 = monotonic_ns();
        spin_ns(200_000.0);
        let dt = monotonic_ns() - t0;
        // Lower bound only: the machine may be busy, never shorter.
        assert!(dt as f64 >= 200_000.0 * 0.97, "spun {dt} ns");
    }
}
