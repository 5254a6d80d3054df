//! The device study (`pmlab validate --device PRESET|FILE`, issue 21): the
//! LENS pointer-chase curve of a program emulated with `pmlab run
//! --device` against the simulator's own curve (`pmlab probe ptrchase
//! --target sim:PRESET`), and the overwrite probe's wear-leveling period.
//!
//! # The chase
//!
//! `workloads/lenschase.c` chases the lines of a region block by block in
//! a random order, flushing the region before every pass so that each line
//! misses the CPU caches (LENS's method; in device mode `pflush` evicts
//! with `clflushopt`, and the native build, linked with libpmlab but not
//! emulated, flushes with that instruction itself: libpmlab's `pflush`
//! would use `clwb` there, which on AMD's Zen leaves the lines cached).
//! The region is on transparent huge pages where the kernel grants them
//! (`huge_pct=` in its output), so that the chase's TLB misses stay few,
//! as in LENS and in the simulator, which has no TLB. At each region
//! and block size its plain build runs natively and its `pmlab cc` build
//! under `pmlab run --device`. Both do the same work (the flushes, the
//! misses on this machine's DRAM); the emulated run adds the delay the
//! device model charges (the hooks' cost is absorbed by the delays, as in
//! every emulated run). The emulated latency per line is taken as
//!
//! ```text
//!   measured = chase(native) + (ns_per_line(--device) - ns_per_line(native))
//! ```
//!
//! with `chase(native)` the native build's own cost per line of the chase
//! alone (its flushes left out): what one access costs on this machine,
//! to which the emulator adds the device's latency less its own estimate
//! of that cost (a near, far or following miss, `pmlab_model::device::Access`).
//! Both runs time the chase on the thread's CPU clock (`lenschase -c`, as
//! the calibration times its chase: time switched out is not latency; the
//! emulator spins its delays on the thread's CPU). It is compared with
//! the simulator's ptrchase curve at the same region and block (the
//! expectation), within 10% at every region. The DRAM latency each
//! emulated run is given is measured just before it, over the
//! calibration's region, or over the point's region past it
//! ([`dram_region`]).
//!
//! # The overwrite period
//!
//! `lenschase -o N` writes, flushes and fences one 256 B block N times and
//! lists its slow iterations (over 10x the median and 20 us, timed on the
//! monotonic clock). Of those as long as the simulator's tails (0.9 to
//! 1.3 times), [`tail_period`] finds the distance the most of them repeat:
//! stray slow iterations (a preemption, the emulator's own hiccups) split
//! the distances between neighbours, so their median (3,226 against
//! 14,000 in a quiet run) measured the noise, not the stalls. The
//! simulator's overwrite probe on the same device gives the period of its
//! long tails (the median distance: it has no noise). Judged within 10%.
//!
//! # The page
//!
//! [`write_doc`] puts the results, as one generated section, into
//! `docs/validation.md` (`pmlab validate --device ... --write FILE`),
//! between the markers `pmlab sim validate` keeps when it regenerates the
//! rest of the page.

use super::{push, s, simple_point, Ctx, Point, Report};
use crate::calibrate::{self, Chaser};
use crate::error::Result;
use crate::{Error, ErrorKind};
use pmlab_probe::probes::{self, Settings};
use pmlab_probe::sim::Sim;
use pmlab_probe::Op;
use std::path::Path;

/// Bound on the chase's and the period's |error|, percent (issue 21).
pub const BOUND_PCT: f64 = 10.0;

/// The sweep.
struct Plan {
    regions: Vec<u64>,
    blocks: Vec<u64>,
    /// A block size nothing was tuned on, and its regions (judged alike,
    /// marked "held-out").
    held_out: Option<(u64, Vec<u64>)>,
    min_lines: u64,
    /// Regions from this size on are not flushed (they miss any cache).
    no_flush_from: u64,
    overwrite_iterations: u64,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                regions: vec![8 << 10, 1 << 20, 64 << 20],
                blocks: vec![64, 256],
                held_out: None,
                min_lines: 20_000,
                no_flush_from: 256 << 20,
                // Five stalls at the simulator's 14,000.
                overwrite_iterations: 75_000,
            }
        } else {
            Plan {
                regions: (12..=30).map(|k| 1u64 << k).collect(),
                blocks: vec![64, 256],
                held_out: Some((4096, vec![16 << 10, 256 << 10, 4 << 20, 64 << 20, 1 << 30])),
                min_lines: 1 << 17,
                no_flush_from: 256 << 20,
                // Ten stalls at the simulator's 14,000.
                overwrite_iterations: 150_000,
            }
        }
    }
}

/// The simulator target of `device`: a file when one exists there, else a
/// preset.
fn target(device: &str) -> Result<Sim> {
    let p = Path::new(device);
    Ok(if p.is_file() {
        Sim::from_file(p)?
    } else {
        Sim::preset(device)?
    })
}

fn need(prog: &str, out: &str, key: &str) -> Result<f64> {
    super::value_of(out, key).ok_or_else(|| {
        Error::new(
            ErrorKind::Failed,
            format!("{prog} printed no {key}= (output: {})", out.trim()),
        )
    })
}

/// Run the study on `device`, appending its points to `out`.
pub(super) fn study(ctx: &Ctx, device: &str, out: &mut Vec<Point>) -> Result<()> {
    let plan = Plan::new(ctx.quick);
    let mut sim = target(device)?;
    let settings = Settings {
        min_lines: plan.min_lines,
        ..Settings::default()
    };
    let flags = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![s("--device"), s(device)];
        v.extend(extra.iter().map(|x| s(*x)));
        v
    };
    let mut sweeps: Vec<(u64, Vec<u64>, bool)> = plan
        .blocks
        .iter()
        .map(|&b| (b, plan.regions.clone(), false))
        .collect();
    if let Some((b, r)) = &plan.held_out {
        sweeps.push((*b, r.clone(), true));
    }
    for (block, regions, held_out) in sweeps {
        ctx.say(&format!(
            "device: {device} pointer chase, {block} B blocks{}: the simulator's curve",
            if held_out { " (held out)" } else { "" }
        ));
        let regions: Vec<u64> = regions.into_iter().filter(|&r| r >= block).collect();
        let curve = probes::ptrchase_region(
            &mut sim,
            &settings,
            Op::Load,
            block,
            &regions,
            &mut |_, _, _| {},
        )?;
        for (&region, point) in regions.iter().zip(&curve.points) {
            let expected = point.y;
            // Timed on the thread's CPU clock (-c), as the calibration
            // times its chase: preemption is not latency.
            let mut args = vec![
                s("-r"),
                s(region),
                s("-b"),
                s(block),
                s("-n"),
                s(plan.min_lines),
                s("-c"),
            ];
            if region >= plan.no_flush_from {
                args.push(s("-F"));
            }
            // Past the calibration's region the DRAM latency given is
            // measured over the point's own region ([`dram_region`]).
            let mut wide = match dram_region(region, calibrate::calibration_region()) {
                Some(r) => Some(Chaser::over(r)?),
                None => None,
            };
            let (mut runs, mut drams) = (Vec::new(), Vec::new());
            for _ in 0..ctx.reps {
                let dram = match wide.as_mut() {
                    Some(c) => dram_over(ctx, c),
                    None => ctx.dram_now(),
                };
                let out = ctx.native("lenschase", &args)?;
                let native = need("lenschase", &out, "ns_per_line")?;
                let chase = need("lenschase", &out, "chase_ns_per_line")?;
                let on = ctx.device_run("lenschase", &args, dram, &flags(&[]))?;
                runs.push(emulated_latency(
                    chase,
                    native,
                    need("lenschase", &on, "ns_per_line")?,
                ));
                drams.push(dram);
            }
            let pt = simple_point(
                "device",
                format!(
                    "{device} block={block}B region={}{}",
                    pmlab_model::Bytes(region),
                    if held_out { " held-out" } else { "" }
                ),
                0.0,
                "ns/line",
                expected,
                runs,
                BOUND_PCT,
                format!(
                    "native chase ns/line + ns/line(--device) - ns/line(native build), against pmlab probe ptrchase --target sim:{device} ({expected:.1} ns/line); {}",
                    if region >= plan.no_flush_from { "not flushed" } else { "flushed before each pass" }
                ) + if wide.is_some() { "; --dram-latency measured over the region" } else { "" },
                drams,
            );
            push(ctx, out, pt);
        }
    }
    // The wear-leveling period.
    ctx.say(&format!("device: {device} overwrite of one 256 B block"));
    let iters = plan.overwrite_iterations;
    let times = probes::overwrite(&mut sim, &settings, 256, iters as u32)?;
    let ys: Vec<f64> = times.points.iter().map(|p| p.y).collect();
    let t = pmlab_model::tails::tails(&ys, 10.0);
    let expected = pmlab_model::tails::tail_interval(&t).ok_or_else(|| {
        Error::new(
            ErrorKind::Failed,
            format!("the simulator's {device} shows fewer than two long tails in {iters} overwrites: its wear leveling is off, so there is no period to compare"),
        )
    })?;
    // The emulated run's slow iterations as long as the simulator's tails
    // (0.9 to 1.3 times their median): a wear-leveling stall, not a stray
    // hiccup of the machine or the emulator (those spread over 25-130 us
    // on this VM; the emulated stalls last 52-53 us against the
    // simulator's 50.5).
    let band = (t.tail_median * 0.9, t.tail_median * 1.3);
    let mut runs = Vec::new();
    for _ in 0..ctx.reps {
        let dram = ctx.dram_now();
        let o = ctx.device_run("lenschase", &[s("-o"), s(iters)], dram, &flags(&[]))?;
        let slow = slow_iterations(&o).ok_or_else(|| {
            Error::new(
                ErrorKind::Failed,
                format!("lenschase printed no slow_at= (output: {})", o.trim()),
            )
        })?;
        runs.push(tail_period(&slow, band).unwrap_or(0.0));
    }
    let pt = simple_point(
        "device",
        format!("{device} overwrite period"),
        0.0,
        "iterations",
        expected,
        runs,
        BOUND_PCT,
        format!(
            "period of the slow iterations of lenschase -o {iters} under --device that last {:.0}..{:.0} ns (tail_period), against the median distance between the simulator's overwrite tails ({} tails, median {:.0} ns, tails {:.0} ns)",
            band.0,
            band.1,
            t.index.len(),
            t.median,
            t.tail_median
        ),
        Vec::new(),
    );
    push(ctx, out, pt);
    Ok(())
}

/// The region the DRAM latency given to a chase point's emulated run is
/// measured over, when not the calibration's (`calibration` bytes): the
/// point's own `region` when larger. On this 2-vCPU KVM guest a far miss
/// costs natively more past the calibration's 256 MiB even on huge pages
/// (a chase over 1 GiB 1.2-1.3 times as much per line as over 256 MiB:
/// the host's translation), and the emulator subtracts the one DRAM
/// latency it is given from each far miss's device latency: given the
/// calibration's, it would charge that growth twice. `None`: the
/// calibration's chase (`Ctx::dram_now`).
pub fn dram_region(region: u64, calibration: u64) -> Option<u64> {
    (region > calibration).then_some(region)
}

/// The DRAM latency now over `chaser`'s region: the median of three
/// walks, as [`Ctx::dram_now`].
fn dram_over(ctx: &Ctx, chaser: &mut Chaser) -> f64 {
    let mut walks: Vec<f64> = (0..3)
        .map(|_| chaser.measure(ctx.chase_steps / 3))
        .collect();
    walks.sort_by(f64::total_cmp);
    walks[1]
}

/// The slow iterations `lenschase -o` lists (`slow_at=I:NS,...`): each
/// one's iteration and time, ns. `None` without the list.
pub fn slow_iterations(out: &str) -> Option<Vec<(u64, f64)>> {
    let list = out.lines().rev().find_map(|l| {
        l.split_whitespace()
            .find_map(|t| t.strip_prefix("slow_at="))
    })?;
    list.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| {
            let (i, ns) = x.split_once(':')?;
            Some((i.parse().ok()?, ns.parse().ok()?))
        })
        .collect()
}

/// How many of the iterations `idx` (sorted) have another one `gap`
/// iterations later, give or take `max(gap / 100, 128)` (the emulator
/// charges a stall at the durability point after its model has run the
/// write, up to a log's worth of iterations late).
fn repeats(idx: &[u64], gap: u64) -> usize {
    let tol = (gap / 100).max(128);
    idx.iter()
        .enumerate()
        .filter(|&(i, &a)| {
            let j = idx.partition_point(|&b| b + tol < a + gap);
            j < idx.len() && j != i && idx[j] <= a + gap + tol
        })
        .count()
}

/// Slow iterations [`tail_period`] looks at, the first ones.
const MAX_SLOW: usize = 512;

/// The wear-leveling period of an overwrite run: of its slow iterations
/// (iteration, ns), those whose time lies in `band`; of the distances
/// between any two of them, the one the most of them repeat (another one
/// that distance later, give or take `max(distance / 100, 128)`
/// iterations: the emulator charges a stall up to a log late), among
/// equal counts the shortest. Stalls every P iterations make every
/// stall but the last repeat P; stray slow iterations (a preemption, an
/// emulator's hiccup) at random places rarely repeat a distance, where
/// the median distance between neighbours halves at each one. With no
/// distance repeated twice, the (upper) median distance between neighbours;
/// `None` with fewer than two such iterations.
pub fn tail_period(slow: &[(u64, f64)], band: (f64, f64)) -> Option<f64> {
    let mut idx: Vec<u64> = slow
        .iter()
        .filter(|(_, ns)| (band.0..=band.1).contains(ns))
        .map(|&(i, _)| i)
        .collect();
    idx.sort_unstable();
    idx.dedup();
    // Enough for any period that shows (the search is cubic).
    idx.truncate(MAX_SLOW);
    if idx.len() < 2 {
        return None;
    }
    let mut best = (0usize, 0u64);
    for (a, &x) in idx.iter().enumerate() {
        for &y in &idx[a + 1..] {
            let gap = y - x;
            let c = repeats(&idx, gap);
            if c > best.0 || (c == best.0 && gap < best.1) {
                best = (c, gap);
            }
        }
    }
    if best.0 >= 2 {
        return Some(best.1 as f64);
    }
    let mut gaps: Vec<u64> = idx.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    Some(gaps[gaps.len() / 2] as f64)
}

/// The latency per line the emulated program sees: the native build's
/// chase cost per line plus the delay the emulator added per line (the
/// emulated run's ns per line less the native run's, flushes included in
/// both).
pub fn emulated_latency(native_chase: f64, native: f64, emulated: f64) -> f64 {
    native_chase + (emulated - native)
}

/// The block size and region of a chase point's config (a held-out
/// point's too).
fn parse_config(config: &str) -> Option<(u64, u64)> {
    let mut block = None;
    let mut region = None;
    for t in config.split_whitespace() {
        if let Some(b) = t.strip_prefix("block=").and_then(|v| v.strip_suffix('B')) {
            block = b.parse().ok();
        }
        if let Some(r) = t.strip_prefix("region=") {
            region = pmlab_model::Bytes::parse(r).ok().map(|b| b.get());
        }
    }
    Some((block?, region?))
}

/// One chart: the simulator's curve and the emulated one (median, min..max
/// bars) per block size, latency per line against the region.
pub(super) fn plot(dir: &Path, points: &[Point]) -> Result<()> {
    use pmlab_plot::{Axis, Format, LineChart, Scale, Series};
    let v: Vec<&Point> = points
        .iter()
        .filter(|p| p.study == "device" && parse_config(&p.config).is_some())
        .collect();
    if v.is_empty() {
        return Ok(());
    }
    let device = v[0].config.split_whitespace().next().unwrap_or("device");
    let mut blocks: Vec<u64> = v
        .iter()
        .filter_map(|p| parse_config(&p.config))
        .map(|c| c.0)
        .collect();
    blocks.sort();
    blocks.dedup();
    let mut chart = LineChart::new(format!(
        "pointer chase: pmlab run --device {device} against the simulator"
    ))
    .x_axis(Axis::new("region").scale(Scale::Log).format(Format::Bytes))
    .y_axis(Axis::new("latency per line").format(Format::Nanos));
    for b in blocks {
        let mine: Vec<(&Point, u64)> = v
            .iter()
            .filter_map(|p| {
                parse_config(&p.config)
                    .filter(|c| c.0 == b)
                    .map(|c| (*p, c.1))
            })
            .collect();
        chart = chart
            .series(
                Series::new(
                    format!("simulator, {b} B blocks"),
                    mine.iter().map(|(p, r)| (*r as f64, p.expected)).collect(),
                )
                .dots(true),
            )
            .series(
                Series::new(
                    format!("emulated, {b} B blocks"),
                    mine.iter()
                        .map(|(p, r)| (*r as f64, p.measured.median))
                        .collect(),
                )
                .spread(
                    mine.iter()
                        .map(|(p, _)| (p.measured.min, p.measured.max))
                        .collect(),
                )
                .dots(true),
            );
    }
    super::save_both(dir, &chart, "device-ptrchase")
}

/// The device study's section of `docs/validation.md`: the command, the
/// machine, the method (shared with `pmlab sim validate`'s page), the
/// table of every point and the chart (`images`: the chart's directory
/// relative to the page, when `--plot` wrote it). Markers included.
pub fn markdown(report: &Report, command: &str, images: Option<&str>) -> String {
    use pmlab_sim::validate::{
        DEVICE_HEADING, DEVICE_METHOD, DEVICE_SECTION_BEGIN, DEVICE_SECTION_END,
    };
    let v: Vec<&Point> = report
        .points
        .iter()
        .filter(|p| p.study == "device")
        .collect();
    let judged = v.iter().filter(|p| p.judged()).count();
    let within = v.iter().filter(|p| p.judged() && p.ok()).count();
    let mut s = format!("{DEVICE_SECTION_BEGIN}\n{DEVICE_HEADING}\n\n");
    s.push_str(&format!(
        "Generated by `{command}` on {} ({} runs per point, {:.0} s{}); do not edit by hand.\n\n",
        if report.machine.is_empty() {
            "an unnamed machine"
        } else {
            &report.machine
        },
        report.reps,
        report.seconds,
        if report.quick { ", quick plan" } else { "" }
    ));
    s.push_str(&format!(
        "**{within} of {judged} points within {BOUND_PCT}%.**\n\n| point | simulator | emulated (median) | min..max | error | within |\n|---|---:|---:|---:|---:|---|\n"
    ));
    for p in &v {
        let config = p
            .config
            .split_once(' ')
            .map_or(p.config.as_str(), |(_, c)| c);
        s.push_str(&format!(
            "| {config} | {:.1} {u} | {:.1} {u} | {:.1}..{:.1} | {:+.1}% | {} |\n",
            p.expected,
            p.measured.median,
            p.measured.min,
            p.measured.max,
            p.error_pct,
            if p.ok() { "yes" } else { "**no**" },
            u = p.unit,
        ));
    }
    s.push_str(&format!(
        "\nDevice: `{}`. The DRAM latency measured before each emulated run (over the calibration's region, or over the point's region past it): {}.\n\n",
        v.first()
            .and_then(|p| p.config.split_whitespace().next())
            .unwrap_or("?"),
        {
            let d: Vec<f64> = v.iter().flat_map(|p| p.dram_runs.iter().copied()).collect();
            if d.is_empty() {
                "not measured".to_string()
            } else {
                let m = super::summarize(&d);
                format!("median {:.1} ns ({:.1}..{:.1})", m.median, m.min, m.max)
            }
        }
    ));
    s.push_str(DEVICE_METHOD);
    if let Some(dir) = images {
        s.push_str(&format!(
            "\n![pointer chase: pmlab run --device against the simulator]({dir}/device-ptrchase.svg)\n"
        ));
    }
    s.push_str(DEVICE_SECTION_END);
    s.push('\n');
    s
}

/// Put the device study's section ([`markdown`]) into the page at `path`
/// (replacing the one there, or appended; the file is created if absent).
pub fn write_doc(path: &Path, report: &Report, command: &str, images: Option<&str>) -> Result<()> {
    use crate::error::Context;
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(Error::new(
                ErrorKind::Failed,
                format!("--write {}: cannot read it: {e}", path.display()),
            ))
        }
    };
    let new = pmlab_sim::validate::splice_device_section(&old, &markdown(report, command, images));
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, new).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::summarize;
    use super::*;

    #[test]
    fn the_quick_plan_is_small_and_the_full_one_spans_lens_sweep() {
        let q = Plan::new(true);
        assert!(q.regions.len() * q.blocks.len() <= 6);
        let f = Plan::new(false);
        assert_eq!(f.regions.first(), Some(&4096));
        assert_eq!(f.regions.last(), Some(&(1 << 30)));
        assert_eq!(f.blocks, vec![64, 256]);
        // The held-out block size is not one of the tuned ones.
        let (b, r) = f.held_out.unwrap();
        assert!(!f.blocks.contains(&b) && !r.is_empty());
        assert!(q.held_out.is_none());
    }

    #[test]
    fn the_dram_latency_is_measured_over_a_region_past_the_calibrations() {
        let cal = 256 << 20;
        assert_eq!(dram_region(1 << 30, cal), Some(1 << 30));
        assert_eq!(dram_region(512 << 20, cal), Some(512 << 20));
        assert_eq!(dram_region(cal, cal), None);
        assert_eq!(dram_region(64 << 20, cal), None);
        assert_eq!(dram_region(4096, cal), None);
    }

    #[test]
    fn chase_configs_are_read_back_and_charted() {
        assert_eq!(
            parse_config("optane-1dimm block=256B region=64MiB"),
            Some((256, 64 << 20))
        );
        assert_eq!(parse_config("optane-1dimm overwrite period"), None);
        let pt = |config: &str, expected: f64, median: f64| Point {
            study: s("device"),
            config: s(config),
            expected,
            measured: summarize(&[median * 0.98, median, median * 1.01]),
            ..Default::default()
        };
        let points = vec![
            pt("optane-1dimm block=64B region=4KiB", 178.0, 180.0),
            pt("optane-1dimm block=64B region=1MiB", 310.0, 305.0),
            pt("optane-1dimm block=256B region=1MiB", 210.0, 214.0),
            pt("optane-1dimm overwrite period", 14000.0, 14100.0),
        ];
        let dir = std::env::temp_dir().join(format!("pmlab-device-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        plot(&dir, &points).unwrap();
        let svg = std::fs::read_to_string(dir.join("device-ptrchase.svg")).unwrap();
        assert!(svg.contains("simulator, 64 B blocks") && svg.contains("emulated, 256 B blocks"));
        assert!(dir.join("device-ptrchase.png").is_file());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_period_is_the_distance_the_stalls_repeat_despite_stray_tails() {
        let stall = 52_000.0;
        let band = (25_000.0, 100_000.0);
        // Stalls every 14,000 iterations (up to 60 late), and stray slow
        // iterations between them: the median distance between neighbours
        // would be about 3,500.
        let mut slow: Vec<(u64, f64)> = (1..=10u64)
            .map(|k| (k * 14_000 + (k * 37) % 60, stall))
            .collect();
        for (k, &at) in [
            3_100u64, 9_800, 17_200, 24_900, 30_300, 45_100, 51_700, 66_600, 88_800, 101_000,
            122_500, 133_300,
        ]
        .iter()
        .enumerate()
        {
            slow.push((at, if k % 2 == 0 { stall } else { 2_000_000.0 }));
        }
        let p = tail_period(&slow, band).unwrap();
        assert!((p - 14_000.0).abs() <= 60.0, "{p}");
        // Outside the band the long hiccups do not count; without any
        // repeated distance, the median one.
        assert_eq!(
            tail_period(&[(100, stall), (400, stall), (1_300, stall)], band),
            Some(900.0)
        );
        assert_eq!(tail_period(&[(100, stall), (400, 5_000.0)], band), None);
        // Read back from the program's line.
        let out = "lenschase: mode=overwrite iterations=9 median_ns=2300 tails=2 tail_period=4 tail_ns=51000 slow_at=3:50000,7:52000\n";
        assert_eq!(
            slow_iterations(out),
            Some(vec![(3, 50_000.0), (7, 52_000.0)])
        );
        assert_eq!(
            slow_iterations("lenschase: mode=overwrite tails=0 slow_at=\n"),
            Some(vec![])
        );
        assert_eq!(slow_iterations("nothing"), None);
    }

    #[test]
    fn the_emulated_latency_is_the_native_access_plus_the_delay() {
        // Natively 110 ns per access and 125 per line with the flushes;
        // emulated 187 per line: 62 ns of delay per line.
        assert_eq!(emulated_latency(110.0, 125.0, 187.0), 172.0);
    }

    #[test]
    fn the_study_writes_one_section_into_the_page() {
        let pt = |config: &str, expected: f64, median: f64, unit: &str| Point {
            study: s("device"),
            config: s(config),
            unit: s(unit),
            expected,
            measured: summarize(&[median]),
            error_pct: (median - expected) / expected * 100.0,
            bound_pct: BOUND_PCT,
            dram_runs: vec![150.0, 152.0],
            ..Default::default()
        };
        let report = Report {
            machine: s("Test CPU x 2"),
            dram_latency_ns: 150.0,
            quick: true,
            tolerances: s("target"),
            reps: 1,
            sample: "off".into(),
            llc_bytes: 0,
            llc_curve: Vec::new(),
            seconds: 12.0,
            study_seconds: Vec::new(),
            skipped: vec![],
            points: vec![
                pt(
                    "optane-1dimm block=64B region=4KiB",
                    172.0,
                    180.0,
                    "ns/line",
                ),
                pt(
                    "optane-1dimm block=64B region=1MiB",
                    306.0,
                    360.0,
                    "ns/line",
                ),
                pt(
                    "optane-1dimm overwrite period",
                    14000.0,
                    14100.0,
                    "iterations",
                ),
            ],
        };
        let dir = std::env::temp_dir().join(format!("pmlab-device-doc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = dir.join("validation.md");
        let before = format!(
            "# Simulator validation\n\nfigures\n\n{}\n## Curves\n",
            pmlab_sim::validate::device_placeholder()
        );
        std::fs::write(&page, &before).unwrap();
        let cmd = "pmlab validate --device optane-1dimm --write v.md";
        write_doc(&page, &report, cmd, Some("validation")).unwrap();
        let after = std::fs::read_to_string(&page).unwrap();
        assert!(after.starts_with("# Simulator validation\n\nfigures\n"));
        assert!(after.ends_with("## Curves\n"));
        assert!(!after.contains("No results recorded yet"));
        assert!(after.contains(cmd) && after.contains("Test CPU x 2"));
        assert!(after.contains("**2 of 3 points within 10%.**"), "{after}");
        assert!(after.contains("| block=64B region=1MiB | 306.0 ns/line | 360.0 ns/line |"));
        assert!(after.contains("| **no** |") && after.contains("+17.6%"));
        assert!(after.contains("(validation/device-ptrchase.svg)"));
        // A second run replaces the section, it does not add one.
        write_doc(&page, &report, cmd, None).unwrap();
        let again = std::fs::read_to_string(&page).unwrap();
        assert_eq!(
            again.matches(pmlab_sim::validate::DEVICE_HEADING).count(),
            1
        );
        assert!(!again.contains("(validation/device-ptrchase.svg)"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_bad_device_is_named() {
        let e = target("no-such-device").err().unwrap().to_string();
        assert!(
            e.contains("no-such-device") && e.contains("optane-1dimm"),
            "{e}"
        );
    }
}
