//! The bandwidth study (`--only bandwidth`, issue 17): a STREAM-like copy
//! and triad (`workloads/stream.c`), one and two threads, under
//! `pmlab run --pm-bandwidth` 1, 2, 4 and 8 GB/s.
//!
//! # Expectation
//!
//! The bandwidth the workload reports -- bytes as STREAM counts them (copy
//! 16 B per element, a read and a write; triad 24 B, two reads and a
//! write; the write-allocate reads of the stored lines not counted) over
//! the timed passes -- equals the target whenever the target is below
//! the native build's own bandwidth (measured beside: a target above it
//! cannot slow anything, and the point is not judged). The emulated runs
//! are given the DRAM latency as PM latency, so that only the bandwidth
//! throttle acts. Target: within 5% ([`Tolerances::bandwidth`]).
//!
//! How the emulator counts the traffic (reads, write-backs, the
//! write-allocate reads STREAM leaves out) decides where it lands: a model
//! that charges the write-allocate reads too reads copy at 2/3 and triad
//! at 3/4 of the target. Where the instrumented build cannot move data as
//! fast as the target even with nothing injected (its hooks' cost), the
//! point misses high targets from below; the study reports that as it is.

use super::*;

/// Sizes of the bandwidth study.
struct Plan {
    kernels: Vec<&'static str>,
    threads: Vec<u32>,
    targets: Vec<f64>,
    mib: u64,
    passes: u64,
    max_reps: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                kernels: vec!["triad"],
                threads: vec![1],
                targets: vec![1.0, 4.0],
                mib: 64,
                passes: 1,
                max_reps: 1,
            }
        } else {
            Plan {
                kernels: vec!["copy", "triad"],
                threads: vec![1, 2],
                targets: vec![1.0, 2.0, 4.0, 8.0],
                mib: 128,
                passes: 2,
                max_reps: 3,
            }
        }
    }
}

/// A bandwidth point's bound: `bound` when `target` (GB/s) is below the
/// native bandwidth, none (infinite) otherwise.
pub fn bound_for(target: f64, native: f64, bound: f64) -> f64 {
    if target < native {
        bound
    } else {
        f64::INFINITY
    }
}

pub(super) fn study(ctx: &Ctx, out: &mut Vec<Point>) -> Result<()> {
    let p = Plan::new(ctx.quick);
    let reps = ctx.reps.min(p.max_reps);
    for &kernel in &p.kernels {
        for &t in &p.threads {
            let args = vec![
                s("-k"),
                s(kernel),
                s("-t"),
                s(t),
                s("-r"),
                s(p.mib),
                s("-n"),
                s(p.passes),
            ];
            ctx.say(&format!(
                "bandwidth: {kernel} {t} thread(s), {} MiB arrays: native and --pm-bandwidth {:?} GB/s, interleaved",
                p.mib, p.targets
            ));
            let mut native = Vec::new();
            let mut emu = vec![Vec::new(); p.targets.len()];
            let mut drams = vec![Vec::new(); p.targets.len()];
            for _ in 0..reps {
                native.push(need("stream", &ctx.native("stream", &args)?, "gbps")?);
                for (j, &bw) in p.targets.iter().enumerate() {
                    let dram = (ctx.dram_now() * 100.0).round() / 100.0;
                    let flags = [s("--pm-bandwidth"), format!("{bw}GB/s")];
                    let o = ctx.emulated_with("stream", &args, dram, false, dram, &flags)?;
                    emu[j].push(need("stream", &o, "gbps")?);
                    drams[j].push(dram);
                }
            }
            let n = summarize(&native).median;
            for (j, &bw) in p.targets.iter().enumerate() {
                let mut pt = simple_point(
                    "bandwidth",
                    format!("{kernel} threads={t} {}MiB", p.mib),
                    0.0,
                    "GB/s",
                    bw,
                    std::mem::take(&mut emu[j]),
                    bound_for(bw, n, ctx.bounds.bandwidth),
                    format!(
                        "target {bw} GB/s (STREAM's byte count); native {n:.2} GB/s{}",
                        if bw < n {
                            ""
                        } else {
                            ": the target is not below it, not judged"
                        }
                    ),
                    std::mem::take(&mut drams[j]),
                );
                pt.native_runs = native.clone();
                push(ctx, out, pt);
            }
        }
    }
    Ok(())
}

/// One chart per kernel and thread count: measured against target
/// bandwidth, with the target line.
pub(super) fn plot(dir: &Path, points: &[Point]) -> Result<()> {
    use pmlab_plot::{Axis, LineChart, Series};
    let v: Vec<&Point> = points.iter().filter(|p| p.study == "bandwidth").collect();
    let mut configs: Vec<&str> = Vec::new();
    for p in &v {
        if !configs.contains(&p.config.as_str()) {
            configs.push(&p.config);
        }
    }
    for c in configs {
        let pts: Vec<&&Point> = v.iter().filter(|p| p.config == c).collect();
        let chart = LineChart::new(format!("bandwidth: {c} under --pm-bandwidth"))
            .x_axis(Axis::new("target GB/s"))
            .y_axis(Axis::new("measured GB/s"))
            .series(
                Series::new(
                    "target",
                    pts.iter().map(|p| (p.expected, p.expected)).collect(),
                )
                .dots(true),
            )
            .series(
                Series::new(
                    "measured (median, min..max)",
                    pts.iter()
                        .map(|p| (p.expected, p.measured.median))
                        .collect(),
                )
                .spread(
                    pts.iter()
                        .map(|p| (p.measured.min, p.measured.max))
                        .collect(),
                )
                .dots(true),
            );
        let stem = format!("bandwidth-{}", c.replace([' ', '='], "-"));
        save_both(dir, &chart, &stem)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_at_or_above_native_are_not_judged() {
        assert_eq!(bound_for(4.0, 20.0, 5.0), 5.0);
        assert!(bound_for(8.0, 8.0, 5.0).is_infinite());
        assert!(bound_for(8.0, 2.0, 5.0).is_infinite());
    }

    #[test]
    fn the_known_shortfall_misses_the_target() {
        // Issue 17: the triad read 0.66 GB/s at a 1 GB/s target, 1.95 at 4.
        let t = Tolerances::TARGET.bandwidth;
        for (target, got) in [(1.0, 0.66), (4.0, 1.95)] {
            let p = simple_point(
                "bandwidth",
                s("triad"),
                0.0,
                "GB/s",
                target,
                vec![got],
                bound_for(target, 35.0, t),
                String::new(),
                Vec::new(),
            );
            assert!(p.judged() && !p.ok(), "{target}: {}", p.error_pct);
        }
        let p = simple_point(
            "bandwidth",
            s("triad"),
            0.0,
            "GB/s",
            2.0,
            vec![1.97],
            bound_for(2.0, 35.0, t),
            String::new(),
            Vec::new(),
        );
        assert!(p.ok());
    }
}
