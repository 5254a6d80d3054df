//! Cost of the functional device model (`pmlab run --device`) per modelled
//! access, against the delay each access injects: random reads that each
//! level serves, random and sequential write-backs, on one and six DIMMs;
//! the locality tracker that picks each miss's native cost; and the compact
//! cache model with and without the slot names device mode keeps. Run by
//! `bench/device-cost.sh`.

use pmlab_model::cache::{CacheConfig, CompactCache};
use pmlab_model::device::{Access, DeviceModel, DeviceParams, NativeCosts, NativeTracker};
use std::time::Instant;

/// Native costs typical of the machines pmlab runs on, ns (the delay a
/// read injects is its level's latency less the native cost of the
/// access; the streams below are far misses).
const NATIVE: NativeCosts = NativeCosts {
    near_ns: 100.0,
    far_ns: 100.0,
    follow_ns: 40.0,
    fresh_ns: 130.0,
    fresh_follow_ns: 60.0,
};

fn stream(n: usize, span: u64, seed: u64) -> Vec<u64> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % span) & !63
        })
        .collect()
}

/// One pass of reads over `addrs`: the delay they inject, ns.
#[inline(never)]
fn reads(d: &mut DeviceModel, p: &DeviceParams, addrs: &[u64]) -> f64 {
    let mut delay = 0.0;
    for &a in addrs {
        delay += NATIVE.delay_ns(p, d.read(a), Access::Far);
    }
    delay
}

/// The measured pass of reads (the instruction counts of
/// `bench/device-cost.sh --instructions` are this function's).
#[inline(never)]
fn measured_reads(d: &mut DeviceModel, p: &DeviceParams, addrs: &[u64]) -> f64 {
    let mut delay = 0.0;
    for &a in addrs {
        delay += NATIVE.delay_ns(p, d.read(a), Access::Far);
    }
    std::hint::black_box(delay)
}

/// The measured pass of write-backs.
#[inline(never)]
fn measured_writes(d: &mut DeviceModel, addrs: &[u64]) {
    for &a in addrs {
        std::hint::black_box(d.write_back(a));
    }
}

/// The streams measured: (what, span of the reads or None for
/// write-backs, addresses).
fn streams(n: usize) -> Vec<(&'static str, Option<u64>, Vec<u64>)> {
    let mut v = Vec::new();
    for (what, span) in [
        ("reads, 8 KiB (RMW buffer)", 8u64 << 10),
        ("reads, 4 MiB (AIT buffer)", 4 << 20),
        ("reads, 1 GiB (media)", 1 << 30),
    ] {
        v.push((what, Some(span), stream(n, span, span)));
    }
    v.push((
        "write-backs, random over 1 GiB",
        None,
        stream(n, 1 << 30, 7),
    ));
    v.push((
        "write-backs, sequential",
        None,
        (0..n as u64).map(|i| i * 64).collect(),
    ));
    v
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let one = DeviceParams::optane_like();
    let six = DeviceParams {
        channels: 6,
        ..one.clone()
    };
    let configs = [("1 DIMM", &one), ("6 DIMMs", &six)];
    // `--one DIMMS STREAM N`: only that stream (its index in the list
    // above) on that many DIMMs, N accesses, warmed, measured once and
    // untimed: for callgrind (`bench/device-cost.sh --instructions`).
    if args.first().map(String::as_str) == Some("--one") {
        let num = |i: usize| -> usize {
            match args.get(i).and_then(|a| a.parse().ok()) {
                Some(v) => v,
                None => {
                    eprintln!("device_cost: usage: device_cost [--one DIMMS(1|6) STREAM(0-4) N]");
                    std::process::exit(2)
                }
            }
        };
        let (dimms, which, n) = (num(1), num(2), num(3));
        let p = match dimms {
            1 => &one,
            6 => &six,
            _ => {
                eprintln!("device_cost: --one takes 1 or 6 DIMMs, not {dimms}");
                std::process::exit(2)
            }
        };
        let all = streams(n);
        let Some((what, span, addrs)) = all.get(which) else {
            eprintln!(
                "device_cost: --one takes a stream from 0 to {}",
                all.len() - 1
            );
            std::process::exit(2)
        };
        let mut d = DeviceModel::new(p);
        if span.is_some() {
            reads(&mut d, p, addrs);
            std::hint::black_box(measured_reads(&mut d, p, addrs));
        } else {
            measured_writes(&mut d, addrs);
        }
        println!("{dimms} DIMM(s), {what}: {n} accesses, {:?}", d.counts());
        return;
    }
    let n = 2_000_000usize;
    let all = streams(n);
    for (label, p) in configs {
        for (what, span, addrs) in &all {
            let mut d = DeviceModel::new(p);
            if span.is_some() {
                // The second pass is timed: the first warms the buffers.
                reads(&mut d, p, addrs);
                let t = Instant::now();
                let delay = measured_reads(&mut d, p, addrs);
                let ns = t.elapsed().as_nanos() as f64 / n as f64;
                let per = delay / n as f64;
                println!(
                    "{label}, {what}: {ns:.1} ns per access, injects {per:.0} ns ({:.1}% of it)",
                    100.0 * ns / per
                );
            } else {
                let t = Instant::now();
                measured_writes(&mut d, addrs);
                let ns = t.elapsed().as_nanos() as f64 / n as f64;
                let c = d.counts();
                println!(
                    "{label}, {what}: {ns:.1} ns per write-back, {:.0} ns of media time each (amplification {:.2})",
                    c.media_write_ns / n as f64,
                    c.write_amplification(p.xpline)
                );
            }
        }
    }
    // The locality tracker: each miss classified (random lines over
    // 1 GiB).
    let lines: Vec<u64> = stream(n, 1 << 30, 11).iter().map(|a| a >> 6).collect();
    let mut tr = NativeTracker::new();
    let t = Instant::now();
    let mut near = 0u64;
    for &l in &lines {
        near += matches!(tr.classify(l), Access::Near(_)) as u64;
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!(
        "locality tracker: {ns:.1} ns per miss ({:.1}% near)",
        100.0 * near as f64 / n as f64
    );
    // The cache model's extra cost in device mode: slot names kept beside
    // the tags.
    let cfg = CacheConfig::new(32 << 20, 16);
    let lines: Vec<u64> = stream(n, 1 << 36, 3).iter().map(|a| a >> 6).collect();
    let mut plain = CompactCache::new(cfg).expect("geometry");
    let mut tracked = CompactCache::new(cfg).expect("geometry");
    let mut names = vec![0u64; CompactCache::table_len(cfg).expect("geometry")];
    for _ in 0..2 {
        let t = Instant::now();
        for &l in &lines {
            std::hint::black_box(plain.access(l, true, true));
        }
        let a = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for &l in &lines {
            std::hint::black_box(tracked.access_tracked(l, true, true, &mut names));
        }
        let b = t.elapsed().as_nanos() as f64 / n as f64;
        println!("compact cache 32 MiB 16-way: {a:.1} ns per access, {b:.1} with slot names");
    }
}
