//! The time-stamp counter (TSC): reading it and measuring its frequency.
//!
//! This crate owns the one implementation of TSC timing that pmlab's parts
//! share: the preloaded runtime (`pmlab-runtime`, which converts epochs and
//! delays between ns and ticks), the probes' host target (`pmlab-probe`)
//! and the emulator's calibration (`pmlab-emu`).
//!
//! # Brief overview
//!
//! * [`rdtsc`] and [`rdtsc_ordered`] read the counter (the second between
//!   two `lfence`s, for timing short kernels).
//! * [`monotonic_ns`]: `CLOCK_MONOTONIC` in ns; [`thread_cpu_ns`]: the
//!   calling thread's CPU time in ns.
//! * [`measure_tsc_ghz`] and [`measure_tsc_ghz_with`]: ticks per ns over a
//!   window, from two (clock, TSC) pairs each read tightly, so that a
//!   preemption between the two reads of a pair cannot skew it.
//!
//! It must depend on nothing but `libc`, start no thread and run no
//! constructor: the runtime, a library preloaded into foreign programs,
//! links it. The runtime passes its own clock to
//! [`measure_tsc_ghz_with`], since it interposes `clock_gettime`.
//!
//! # Example
//!
//! ```
//! let ghz = pmlab_clock::measure_tsc_ghz(1_000_000);
//! assert!(ghz > 0.0);
//! let t0 = pmlab_clock::rdtsc();
//! assert!(pmlab_clock::rdtsc() >= t0);
//! ```
#![deny(missing_docs)]

/// Read the time-stamp counter (on other architectures: the monotonic
/// clock in ns, read with a raw system call). Async-signal-safe.
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        raw_monotonic_ns()
    }
}

/// Read the time-stamp counter between two `lfence`s, so that the read
/// neither starts before the loads ahead of it finish nor lets later
/// ones start early: for timing a short kernel.
#[inline(always)]
pub fn rdtsc_ordered() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence and rdtsc have no memory effects.
    unsafe {
        use std::arch::x86_64::{_mm_lfence, _rdtsc};
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        raw_monotonic_ns()
    }
}

/// `clock` (a `CLOCK_*` id) in ns, through libc (the vDSO).
#[inline]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in ns, through libc (the vDSO).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) in ns: what
/// a latency chase is timed on, so that time the thread spent switched
/// out on a busy machine is not taken for memory latency.
#[inline]
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `CLOCK_MONOTONIC` in ns by a raw system call: never an interposed
/// `clock_gettime`, and async-signal-safe.
#[cfg(not(target_arch = "x86_64"))]
fn raw_monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the system call writes into our timespec.
    unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A (clock ns, TSC) pair read close together: the TSC is read on both
/// sides of the clock, and of up to 50 tries the pair whose two TSC reads
/// are nearest is kept (at once when they are under 2,000 ticks apart),
/// so that a preemption between the reads cannot skew it.
fn paired_reading(now: &impl Fn() -> u64) -> (u64, f64) {
    let mut best = (0, 0.0, u64::MAX);
    for _ in 0..50 {
        let c0 = rdtsc();
        let t = now();
        let c1 = rdtsc();
        let gap = c1.wrapping_sub(c0);
        if gap < best.2 {
            best = (t, c0 as f64 + gap as f64 / 2.0, gap);
        }
        if gap < 2_000 {
            break;
        }
    }
    (best.0, best.1)
}

/// The TSC's frequency in GHz (ticks per ns), measured against
/// [`monotonic_ns`] over `window_ns` (see [`measure_tsc_ghz_with`]).
pub fn measure_tsc_ghz(window_ns: u64) -> f64 {
    measure_tsc_ghz_with(window_ns, monotonic_ns)
}

/// The TSC's frequency in GHz (ticks per ns), measured against the clock
/// `now` (ns) over `window_ns` of spinning, from a tightly paired (clock,
/// TSC) reading at each end. 1.0 where there is no TSC (the fallback
/// [`rdtsc`] counts ns). Never below 1e-3, so that it can divide.
pub fn measure_tsc_ghz_with(window_ns: u64, now: impl Fn() -> u64) -> f64 {
    if !cfg!(target_arch = "x86_64") {
        return 1.0;
    }
    let (t0, c0) = paired_reading(&now);
    while now().saturating_sub(t0) < window_ns {
        std::hint::spin_loop();
    }
    let (t1, c1) = paired_reading(&now);
    ((c1 - c0) / (t1 - t0).max(1) as f64).max(1e-3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_frequency_is_steady_across_windows() {
        let a = measure_tsc_ghz(2_000_000);
        let b = measure_tsc_ghz(10_000_000);
        // A real TSC runs between 0.5 and 10 GHz; two windows agree to
        // within a few percent even on a busy machine.
        assert!((0.5..10.0).contains(&a), "{a} GHz");
        assert!((a - b).abs() / b < 0.05, "{a} vs {b} GHz");
    }

    #[test]
    fn the_given_clock_is_the_reference() {
        // A clock running at half speed makes the TSC look twice as fast.
        let real = measure_tsc_ghz(5_000_000);
        let half = measure_tsc_ghz_with(5_000_000, || monotonic_ns() / 2);
        assert!((half / real - 2.0).abs() < 0.1, "{half} vs {real}");
    }

    #[test]
    fn ordered_and_plain_reads_advance_together() {
        let (a, b) = (rdtsc(), rdtsc_ordered());
        let c = rdtsc();
        assert!(a <= b && b <= c);
    }
}
