//! Speed of the instrumented source's cache model, as its batches use it:
//! a random stream of lines over 32 MiB `CompactCache`s of 16, 8 and 4 ways, with the
//! set of the access 4 ahead prefetched, then the overlap estimator alone.
//! Run by `bench/model-speed.sh`.

use pmlab_model::cache::{CacheConfig, CompactCache};
use pmlab_model::mlp::{Loaded, MemKind, OverlapConfig, OverlapEstimator};
use std::time::Instant;

fn main() {
    let n = 4_000_000usize;
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let lines: Vec<u64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % (1 << 22)) + (1 << 30)
        })
        .collect();
    for (size, ways) in [(32u64 << 20, 16u32), (32 << 20, 8), (32 << 20, 4)] {
        let mut c = CompactCache::new(CacheConfig::new(size, ways)).expect("geometry");
        // The second pass is timed: the first faults the table's pages in.
        let (mut ns, mut misses) = (0.0, 0u64);
        for _ in 0..2 {
            let t = Instant::now();
            misses = 0;
            for i in 0..n {
                if i + 4 < n {
                    prefetch(c.set_addr(lines[i + 4]));
                }
                misses += u64::from(!c.access(lines[i], false, true).hit);
            }
            ns = t.elapsed().as_nanos() as f64 / n as f64;
        }
        println!(
            "compact cache {} MiB {ways}-way: {ns:.1} ns per access ({misses} misses of {n})",
            size >> 20
        );
    }
    let mut e = OverlapEstimator::new(OverlapConfig::default());
    let t = Instant::now();
    for i in 0..n {
        e.miss(
            lines[i] << 6,
            MemKind::Pm,
            i as u64,
            Loaded::Wide(lines[(i + 1) % n] << 6),
            6,
        );
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "overlap estimator: {ns:.1} ns per miss ({:.0} serial)",
        e.counts().pm
    );
}

fn prefetch(p: *const u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint never faults.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
