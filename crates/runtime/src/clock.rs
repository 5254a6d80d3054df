//! Time: the TSC (read and calibrated by `pmlab-clock`), its frequency as
//! this process uses it, and the delay spin.

use std::sync::atomic::{AtomicU64, Ordering};

static TSC_GHZ_BITS: AtomicU64 = AtomicU64::new(0);

/// Read the time-stamp counter (the one implementation in `pmlab-clock`).
pub use pmlab_clock::rdtsc;

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

/// Measure the TSC frequency against CLOCK_MONOTONIC (the real one, see
/// [`monotonic_ns`]) over `window_ns`, from two tightly paired readings
/// (robust to preemption on a busy machine; `pmlab_clock` does it).
pub fn measure_tsc_ghz(window_ns: u64) -> f64 {
    pmlab_clock::measure_tsc_ghz_with(window_ns, monotonic_ns)
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

/// A gap between two reads of the TSC in the delay spin longer than this
/// may be time the thread spent off its CPU: the spin's loop itself takes
/// tens of ns per turn.
pub const OFF_CPU_GAP_NS: f64 = 1_000.0;

/// How a delay spin went.
#[derive(Clone, Copy, Debug)]
pub struct Spin {
    /// The TSC when the spin ended.
    pub end: u64,
    /// Time within the spin the thread spent descheduled, which did not
    /// count towards the delay, ns.
    pub off_cpu_ns: f64,
}

/// Context switches of the calling thread so far (voluntary and
/// involuntary, `getrusage(RUSAGE_THREAD)` as a raw system call, so
/// async-signal-safe); 0 if unavailable.
fn context_switches() -> i64 {
    // SAFETY: an all-zero rusage is valid; the kernel writes into ours.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::syscall(libc::SYS_getrusage, libc::RUSAGE_THREAD, &mut ru) != 0 {
            return 0;
        }
        ru.ru_nvcsw + ru.ru_nivcsw
    }
}

/// Hold the CPU for `ns` of the thread's own time, as a stall on slower
/// memory would: spin on the TSC, not counting a gap (two reads of the TSC
/// more than [`OFF_CPU_GAP_NS`] apart) in which the thread was switched
/// out: a stalled thread does not progress while another runs on its CPU
/// either, so the delay does not absorb the time another thread of the
/// program (or of the machine) ran meanwhile. Gaps without a context
/// switch (interrupts, the hypervisor) count, as they would during a
/// stall. Async-signal-safe.
#[inline]
pub fn spin_ns(ns: f64) -> Spin {
    let want = ns_to_ticks(ns);
    let gap = ns_to_ticks(OFF_CPU_GAP_NS).max(1);
    let mut switches = context_switches();
    let (mut prev, mut done, mut off) = (rdtsc(), 0u64, 0u64);
    while done < want {
        std::hint::spin_loop();
        let now = rdtsc();
        let d = now.saturating_sub(prev);
        prev = now;
        if d > gap {
            let s = context_switches();
            if s != switches {
                switches = s;
                off += d;
                continue;
            }
        }
        done += d;
    }
    Spin {
        end: prev,
        off_cpu_ns: ticks_to_ns(off),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_lasts_at_least_the_delay() {
        set_tsc_ghz(measure_tsc_ghz(2_000_000));
        let t0 = monotonic_ns();
        let s = spin_ns(200_000.0);
        let dt = monotonic_ns() - t0;
        // Lower bound only: the machine may be busy, never shorter.
        assert!(dt as f64 >= 200_000.0 * 0.97, "spun {dt} ns");
        // Time off the CPU lengthens the spin instead of counting in it.
        assert!(
            dt as f64 >= (200_000.0 + s.off_cpu_ns) * 0.97,
            "spun {dt} ns, {} off the CPU",
            s.off_cpu_ns
        );
    }

    #[test]
    fn time_off_the_cpu_does_not_count_towards_a_spin() {
        set_tsc_ghz(measure_tsc_ghz(2_000_000));
        // Two threads per CPU spinning 30 ms each: the scheduler takes
        // each off its CPU for part of its spin, which must then run on.
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let spins: Vec<_> = (0..2 * cpus)
            .map(|_| {
                std::thread::spawn(|| {
                    let t0 = monotonic_ns();
                    let s = spin_ns(30e6);
                    (monotonic_ns() - t0, s.off_cpu_ns)
                })
            })
            .collect();
        let mut off_total = 0.0;
        for h in spins {
            let (dt, off) = h.join().unwrap();
            assert!(dt as f64 >= (30e6 + off) * 0.97, "{dt} ns, {off} off");
            off_total += off;
        }
        // Twice as many spinners as CPUs: about half of each thread's
        // 30+ ms was spent off its CPU, and it was seen.
        assert!(off_total > 2.0 * cpus as f64 * 5e6, "{off_total} ns off");
    }
}
