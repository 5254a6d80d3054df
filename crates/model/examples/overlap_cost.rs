//! Cost of the overlap estimator per miss on one synthetic stream, the
//! stream built first and then run through [`OverlapEstimator::miss`] in
//! `run_stream` (which `bench/dep-cost.sh` counts instructions of under
//! callgrind).
//!
//! Usage: `overlap_cost KIND [MISSES]`, KIND one of `pointer` (a pointer
//! chase), `index` (a chase linked by index, 64 B nodes), `random` (random
//! misses loading random 8-byte values: every miss goes through the
//! learner), `novalue` (random misses, values unknown: the estimator as it
//! was before affine relations, but for the history kept), `hit` (a
//! pointer chase whose every other node is cached: MISSES accesses, half
//! of them hits through [`OverlapEstimator::hit`], which pass the chase's
//! completion on).

use pmlab_model::mlp::{Loaded, MemKind, OverlapConfig, OverlapEstimator};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map(String::as_str).unwrap_or("random");
    let n: usize = match args.get(2).map(|s| s.parse()) {
        None => 1_000_000,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("overlap_cost: MISSES must be a whole number (e.g. 1000000)");
            std::process::exit(2);
        }
    };
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    const BASE: u64 = 0x7f00_0000_0000;
    let nodes = 1u64 << 22;
    let mut stream = Vec::with_capacity(n);
    let mut cur = 0u64;
    for i in 0..n {
        // A random walk standing in for a permutation: the estimator only
        // needs each hop's address to come from the previous value.
        let next = rng() % nodes;
        let miss = match kind {
            "pointer" => (BASE + cur * 64, Loaded::Wide(BASE + next * 64), false),
            "index" => (BASE + cur * 64, Loaded::Wide(next), false),
            "random" => (BASE + (rng() % nodes) * 64, Loaded::Wide(rng()), false),
            "novalue" => (BASE + (rng() % nodes) * 64, Loaded::Unknown, false),
            "hit" => (BASE + cur * 64, Loaded::Wide(BASE + next * 64), i % 2 == 1),
            _ => {
                eprintln!(
                    "overlap_cost: unknown stream kind '{kind}' (use pointer, index, random, novalue or hit)"
                );
                std::process::exit(2);
            }
        };
        stream.push(miss);
        cur = next;
    }
    let t = Instant::now();
    let (serial, dependent, misses) = run_stream(&stream);
    let ns = t.elapsed().as_nanos() as f64 / n.max(1) as f64;
    println!(
        "{kind}: {n} accesses, {misses} misses, {serial:.0} serial, {dependent} dependent, {ns:.1} ns per access (wall clock)"
    );
}

/// The measured part: every access of `stream` (address, value, cache
/// hit) through one estimator.
#[inline(never)]
fn run_stream(stream: &[(u64, Loaded, bool)]) -> (f64, u64, u64) {
    let mut e = OverlapEstimator::new(OverlapConfig::default());
    for (i, &(addr, loaded, hit)) in stream.iter().enumerate() {
        if hit {
            e.hit(addr, loaded, 6);
        } else {
            e.miss(addr, MemKind::Pm, i as u64, loaded, 6);
        }
    }
    let c = e.take();
    (c.pm, c.dependent, c.pm_misses)
}
