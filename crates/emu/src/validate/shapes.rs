//! The program-shapes study (`--only shapes`, issue 16): programs written
//! as users write them, beyond memlat's pointer chase, at 300 and 1000 ns.
//!
//! * **Index-linked chase** (`workloads/idxchase.c`, `i = next[i * K]`
//!   over 64-byte nodes), one chain: every load's address is computed
//!   from the value the previous one returned, so every miss is serial.
//!   Expected: the emulator-free reference, the native build holding the
//!   CPU `L - DRAM` ns after every load (`idxchase -x`, `cpuwait.h`): the
//!   chase as it runs when each load costs `L`, measured; the formula
//!   [`chase_formula`], native + (L - DRAM) per load (every load of a
//!   256 MiB random cycle misses), is kept beside it. A wait costs two
//!   TSC reads and an `lfence` (`cpuwait.h` once read the thread's
//!   context switches with a system call per wait: the reference then
//!   read 631 ns at 300 ns, twice the formula). The full study
//!   also runs the variant with 64-bit indices, chain state in memory, no
//!   warm-up, heap memory and no huge pages against the same kind of
//!   reference, and 4 chains with their heads in memory and no warm-up
//!   against the chains study's expectation, native x L / DRAM (the
//!   overlap of 4 chains carries over).
//! * **Hash-table probe** (`hashprobe.c`): independent random lookups in an
//!   open-addressing table much larger than the LLC; and **B+-tree
//!   lookup** (`bptree.c`): a root-to-leaf walk per lookup, a short
//!   dependent chain of misses (the lower levels and the leaf) with a scan
//!   of the node's keys between them (branch-free: the child's index is
//!   the sum of the compares, a data dependence); lookups independent.
//!   Expected, both: [`lookup_expectation`], `t + m x (L - DRAM)`, `t` the
//!   native ns per lookup and `m` the misses per lookup *measured*
//!   natively: the workload's timed run (`-x 0`) times each probe's or
//!   node's load on the TSC and counts it as a miss past 90 ns (an LLC hit
//!   takes ~40 here, DRAM ~150). Each such miss is serial: it waits on a
//!   compare of the key before it (the probe's exit branch, the child's
//!   index), and the lookups do not overlap natively: the dependent
//!   variant (`-d`, each key from the previous lookup's result) runs as
//!   fast as the independent one (1.01-1.02x here), which the point's
//!   `detail` gives. Beside it, the emulator-free reference: `t` plus what
//!   holding the CPU `L - DRAM` ns after each timed miss (`-x L-DRAM`)
//!   added to the timed run; and the older formula [`wait_formula`],
//!   `s = (t - t_cache) / DRAM` waits per lookup, which also counts the
//!   large structure's LLC hits and extra compute as DRAM waits (the
//!   B+-tree's 2.85-2.97 in the last quiet run; its levels' misses are in
//!   the `detail`, root first). The hash probe's reference used to wait
//!   once after every lookup, including the 4-6% whose line the LLC held.
//! * **Skip-list lookup** (`skiplist.c`, full mode only, 64 MiB, 20,000
//!   lookups): held out (nothing was tuned on it): pointer-linked nodes in
//!   random order, ~50 visited and ~20 missed a lookup, each linked to the
//!   one before by a next pointer read by a filter hit and a compare of
//!   its key; the same expectation as the B+-tree, with its misses per
//!   lane (top first) in the `detail`.
//!
//! The lookups' `detail` also gives the misses the emulated time implies
//! ([`implied_misses`]) and those the waited run (`-x L-DRAM`) counts: on
//! a shared machine a line left untouched is lost to the other users at a
//! rate per second, so the lookups miss more at the target's slower pace
//! (docs/accuracy.md, "What the lookups show").
//!
//! A model that injects nothing reads a third or more low; one that
//! treats the lookups' misses as independent reads several times too low
//! (0.09 serial misses per probe before the control-dependence rule).

use super::*;

/// Sizes of the shapes study.
struct Plan {
    lat: Vec<f64>,
    mib: u64,
    chase_loads: u64,
    lookups: u64,
    variants: bool,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                lat: vec![1000.0],
                mib: 128,
                chase_loads: 200_000,
                lookups: 100_000,
                variants: false,
            }
        } else {
            Plan {
                lat: vec![300.0, 1000.0],
                mib: 256,
                chase_loads: 1_000_000,
                lookups: 500_000,
                variants: true,
            }
        }
    }
}

/// The formula for a chase of one chain whose every load misses:
/// `native + (target - dram)` ns per load (each load waits the added
/// latency once: a dependent miss cannot overlap another).
pub fn chase_formula(native: f64, dram: f64, target: f64) -> f64 {
    native + (target - dram).max(0.0)
}

/// Hot keys of the hash probe's in-cache reference (`hashprobe -w`): 4096
/// lines at most, 256 KiB, within the core's L2.
const HOT_KEYS: u64 = 4096;

/// The expectation of a lookup workload (hash probe, B+-tree) from its
/// native runs: `t + m x (target - dram)`, `t` the native ns per lookup
/// and `m` the misses per lookup measured natively (the workload's timed
/// run, `-x 0`: each node's or probe's load timed on the TSC and counted
/// as a miss past 90 ns). Every such miss is taken as serial: each waits
/// on a compare of the previous one's key (a level's child index, a
/// probe's exit), and the lookups do not overlap natively where the
/// dependent variant (`-d`, each key from the previous lookup's result)
/// runs as fast as the independent one (`dep_ratio`, its time over
/// theirs, near 1); where it is not near 1 the description says the
/// expectation is an upper bound. With the description, which also gives
/// the emulator-free reference `reference` (`t` plus what waiting
/// `target - dram` ns after each timed miss added to the timed run) and
/// its distance.
pub fn lookup_expectation(
    t: f64,
    misses: f64,
    dram: f64,
    target: f64,
    dep_ratio: f64,
    reference: f64,
) -> (f64, String) {
    let e = t + misses * (target - dram).max(0.0);
    let overlap = if dep_ratio.is_finite() && dep_ratio > 1.1 {
        "the lookups overlap natively, so this is an upper bound"
    } else {
        "no overlap between lookups natively"
    };
    (
        e,
        format!(
            "native {t:.1} + {misses:.3} misses/lookup measured natively (timed loads, -x 0) x ({target} - {dram:.1}) ns; dependent lookups (-d) {dep_ratio:.2}x the independent ones: {overlap}; reference (native + the added time of a {target} - DRAM ns wait after each timed miss, -x) {reference:.1} ns ({:+.2}% of the expectation)",
            error_pct(reference, e)
        ),
    )
}

/// The misses per lookup an emulated time implies at the delay per miss
/// the expectation uses: `(emulated - t) / (target - dram)` (NaN when the
/// target is not above DRAM), to set beside the `m` counted natively.
pub fn implied_misses(emulated: f64, t: f64, dram: f64, target: f64) -> f64 {
    let step = target - dram;
    if step > 0.0 {
        (emulated - t) / step
    } else {
        f64::NAN
    }
}

/// The older formula for a lookup workload, kept as a diagnostic:
/// `t + s x (target - dram)` with `s = (t - t_cache) / dram` the time a
/// lookup waits on memory natively over the DRAM latency, `t_cache` the
/// same code with its lines in cache. It counts the large structure's
/// extra compute and its LLC hits as DRAM waits; the description says so.
pub fn wait_formula(t: f64, t_cache: f64, dram: f64, target: f64) -> (f64, String) {
    let serial = ((t - t_cache) / dram).max(0.0);
    (
        t + serial * (target - dram).max(0.0),
        format!(
            "native {t:.1} + {serial:.3} DRAM waits/lookup x ({target} - {dram:.1}) ns, waits = (native {t:.1} - in-cache {t_cache:.1}) / DRAM {dram:.1}"
        ),
    )
}

pub(super) fn study(ctx: &Ctx, out: &mut Vec<Point>) -> Result<()> {
    let mut p = Plan::new(ctx.quick);
    p.lat = ctx.emulable("shapes", &p.lat);
    if p.lat.is_empty() {
        return Ok(());
    }
    let bound = ctx.bounds.shapes;
    // At most 3 runs a point: 256 MiB set-ups under emulation are long.
    let reps = ctx.reps.min(3);
    let mib = s(p.mib);
    let loads = s(p.chase_loads);
    // The index chase, one chain, against the -x reference.
    let mut chases = vec![(
        "idxchase 1 chain",
        vec![s("-r"), mib.clone(), s("-n"), loads.clone()],
    )];
    if p.variants {
        chases.push((
            "idxchase 1 chain 64-bit state=mem no-warmup heap no-huge",
            vec![
                s("-r"),
                mib.clone(),
                s("-n"),
                loads.clone(),
                s("-b"),
                s(64),
                s("-m"),
                s("-W"),
                s("-a"),
                s("heap"),
                s("-H"),
                s(0),
            ],
        ));
    }
    for (name, args) in &chases {
        ctx.say(&format!(
            "shapes: {name} {} MiB: native, reference and {:?} ns, interleaved",
            p.mib, p.lat
        ));
        let mut native = Vec::new();
        let mut refs = vec![Vec::new(); p.lat.len()];
        let mut emu = vec![Vec::new(); p.lat.len()];
        let mut drams = vec![Vec::new(); p.lat.len()];
        for _ in 0..reps {
            native.push(need(
                "idxchase",
                &ctx.native("idxchase", args)?,
                MEMLAT_KEY,
            )?);
            for (k, &lat) in p.lat.iter().enumerate() {
                let dram = ctx.dram_now();
                let mut slow = args.clone();
                slow.extend([s("-x"), s((lat - dram).max(0.0).round() as u64)]);
                refs[k].push(need(
                    "idxchase",
                    &ctx.native("idxchase", &slow)?,
                    MEMLAT_KEY,
                )?);
                let o = ctx.emulated_given("idxchase", args, lat, false, dram)?;
                emu[k].push(need("idxchase", &o, MEMLAT_KEY)?);
                drams[k].push(dram);
            }
        }
        let n = summarize(&native).median;
        for (k, &lat) in p.lat.iter().enumerate() {
            let reference = summarize(&refs[k]).median;
            let dram = summarize(&drams[k]).median;
            let mut pt = simple_point(
                "shapes",
                format!("{name} {}MiB", p.mib),
                lat,
                "ns/access",
                reference,
                std::mem::take(&mut emu[k]),
                bound,
                format!(
                    "expected: the reference (native build, {lat} - DRAM ns of CPU-holding wait per load, idxchase -x): {reference:.1} ns; formula native {n:.1} + ({lat} - {dram:.1}) = {:.1} ns (reference {:+.2}% of it)",
                    chase_formula(n, dram, lat),
                    error_pct(reference, chase_formula(n, dram, lat))
                ),
                std::mem::take(&mut drams[k]),
            );
            pt.reference_runs = std::mem::take(&mut refs[k]);
            pt.native_runs = native.clone();
            push(ctx, out, pt);
        }
    }
    if p.variants {
        // Four chains, heads in memory, no warm-up: the chains study's
        // expectation (issue 16's third case).
        let args = vec![
            s("-r"),
            mib.clone(),
            s("-n"),
            loads.clone(),
            s("-c"),
            s(4),
            s("-m"),
            s("-W"),
        ];
        for &lat in &p.lat {
            let expect = |native: f64, dram: f64| {
                (
                    native * lat / dram,
                    format!("native {native:.1} ns/access x {lat} / {dram:.1}"),
                )
            };
            scaled_point(
                ctx,
                out,
                Scaled {
                    expect: &expect,
                    prog: "idxchase",
                    key: MEMLAT_KEY,
                    args: &args,
                    lat,
                    label: "shapes: idxchase 4 chains, heads in memory, no warm-up",
                    study: "shapes",
                    unit: "ns/access",
                    bound,
                },
                |native| {
                    format!(
                        "idxchase 4 chains state=mem no-warmup {}MiB native={native:.1}ns",
                        p.mib
                    )
                },
            )?;
        }
    }
    // The lookups: hash probe and B+-tree.
    for (prog, what) in [("hashprobe", "hash probe"), ("bptree", "B+-tree lookup")] {
        lookups(ctx, out, &p, prog, what, p.mib, p.lookups)?;
    }
    if p.variants {
        // The held-out lookup: about 56 nodes visited and 20-24 misses a
        // lookup, so a smaller list and fewer lookups keep it short.
        lookups(ctx, out, &p, "skiplist", "skip-list lookup", 64, 20_000)?;
    }
    Ok(())
}

/// The median of `runs`' values of `key`, or NaN when there are none.
fn median(runs: &[f64]) -> f64 {
    if runs.is_empty() {
        f64::NAN
    } else {
        summarize(runs).median
    }
}

/// One lookup workload's points: per repetition the native run, its
/// in-cache twin (the formula's), the dependent variant (`-d`), the timed
/// run (`-x 0`: the misses per lookup), and per target the DRAM latency,
/// the timed run waiting `L - DRAM` after each miss (`-x`) and the
/// emulated run.
fn lookups(
    ctx: &Ctx,
    out: &mut Vec<Point>,
    p: &Plan,
    prog: &str,
    what: &str,
    mib: u64,
    count: u64,
) -> Result<()> {
    let bound = ctx.bounds.shapes;
    let reps = ctx.reps.min(3);
    let big = vec![s("-r"), s(mib), s("-n"), s(count)];
    // The in-cache twin: the hash probe's own table with its lookups
    // confined to HOT_KEYS keys; the tree's and the list's at 1 MiB.
    let small = if prog == "hashprobe" {
        let mut h = big.clone();
        h.extend([s("-w"), s(HOT_KEYS)]);
        h
    } else {
        vec![s("-r"), s(1), s("-n"), s(count)]
    };
    let with = |extra: &[String]| {
        let mut a = big.clone();
        a.extend(extra.iter().cloned());
        a
    };
    let key = "ns_per_lookup";
    ctx.say(&format!(
        "shapes: {what} {mib} MiB: native (in cache, dependent, timed) and {:?} ns, interleaved",
        p.lat
    ));
    let (mut native, mut cached, mut dep) = (Vec::new(), Vec::new(), Vec::new());
    let (mut timed, mut misses, mut levels) = (Vec::new(), Vec::new(), String::new());
    let mut emu = vec![Vec::new(); p.lat.len()];
    let mut waited = vec![Vec::new(); p.lat.len()];
    // The misses the waited run counts: the same lookups at the target's
    // pace (its levels' or lanes' too).
    let mut paced = vec![Vec::new(); p.lat.len()];
    let mut paced_levels = vec![String::new(); p.lat.len()];
    let mut drams = vec![Vec::new(); p.lat.len()];
    for _ in 0..reps {
        native.push(need(prog, &ctx.native(prog, &big)?, key)?);
        cached.push(need(prog, &ctx.native(prog, &small)?, key)?);
        dep.push(need(prog, &ctx.native(prog, &with(&[s("-d")]))?, key)?);
        let o = ctx.native(prog, &with(&[s("-x"), s(0)]))?;
        timed.push(need(prog, &o, key)?);
        misses.push(need(prog, &o, "misses_per_lookup")?);
        if let Some(l) = text_of(&o, "level_misses").or_else(|| text_of(&o, "lane_misses")) {
            levels = l;
        }
        for (k, &lat) in p.lat.iter().enumerate() {
            let dram = ctx.dram_now();
            let extra = (lat - dram).max(0.0).round() as u64;
            let o = ctx.native(prog, &with(&[s("-x"), s(extra)]))?;
            waited[k].push(need(prog, &o, key)?);
            paced[k].push(need(prog, &o, "misses_per_lookup")?);
            if let Some(l) = text_of(&o, "level_misses").or_else(|| text_of(&o, "lane_misses")) {
                paced_levels[k] = l;
            }
            let o = ctx.emulated_given(prog, &big, lat, false, dram)?;
            emu[k].push(need(prog, &o, key)?);
            drams[k].push(dram);
        }
    }
    let (t, tc, m) = (median(&native), median(&cached), median(&misses));
    let dep_ratio = median(&dep) / t;
    for (k, &lat) in p.lat.iter().enumerate() {
        let dram = median(&drams[k]);
        let reference = t + median(&waited[k]) - median(&timed);
        let (expected, mut detail) = lookup_expectation(t, m, dram, lat, dep_ratio, reference);
        let (formula, formula_detail) = wait_formula(t, tc, dram, lat);
        detail.push_str(&format!(
            "; formula {formula:.1} ns ({formula_detail}; the expectation {:+.2}% of it)",
            error_pct(expected, formula)
        ));
        let charged = implied_misses(median(&emu[k]), t, dram, lat);
        detail.push_str(&format!(
            "; the emulated time implies {charged:.3} misses/lookup; the waited run (-x, the target's pace) counted {:.3}",
            median(&paced[k])
        ));
        if !levels.is_empty() {
            let unit = if prog == "skiplist" {
                "lane, top lane"
            } else {
                "level, root"
            };
            detail.push_str(&format!(
                "; misses per {unit} first: {levels} natively, {} at the target's pace",
                paced_levels[k]
            ));
        }
        let mut pt = simple_point(
            "shapes",
            format!("{prog} {mib}MiB"),
            lat,
            "ns/lookup",
            expected,
            std::mem::take(&mut emu[k]),
            bound,
            detail,
            std::mem::take(&mut drams[k]),
        );
        pt.native_runs = native.clone();
        pt.reference_runs = waited[k]
            .iter()
            .zip(&timed)
            .map(|(w, x)| t + w - x)
            .collect();
        push(ctx, out, pt);
    }
    Ok(())
}

/// The text after `key=` in the last line of `output` that has it.
fn text_of(output: &str, key: &str) -> Option<String> {
    output.lines().rev().find_map(|line| {
        line.split_whitespace().find_map(|tok| {
            let (k, v) = tok.split_once('=')?;
            (k == key).then(|| v.to_string())
        })
    })
}

/// One chart per shape: expected and measured against the target latency.
pub(super) fn plot(dir: &Path, points: &[Point]) -> Result<()> {
    use pmlab_plot::{Axis, Format, LineChart, Series};
    let v: Vec<&Point> = points.iter().filter(|p| p.study == "shapes").collect();
    let mut configs: Vec<String> = Vec::new();
    for p in &v {
        // The 4-chain points name their native figure: group without it.
        let c = shape_name(&p.config);
        if !configs.contains(&c) {
            configs.push(c);
        }
    }
    for c in configs {
        let pts: Vec<&&Point> = v.iter().filter(|p| shape_name(&p.config) == c).collect();
        let measured = Series::new(
            "measured (median, min..max)",
            pts.iter()
                .map(|p| (p.target_ns, p.measured.median))
                .collect(),
        )
        .spread(
            pts.iter()
                .map(|p| (p.measured.min, p.measured.max))
                .collect(),
        )
        .dots(true);
        let expected = Series::new(
            "expected",
            pts.iter().map(|p| (p.target_ns, p.expected)).collect(),
        )
        .dots(true);
        let unit = &pts[0].unit;
        let chart = LineChart::new(format!("shapes: {c}"))
            .x_axis(Axis::new("target PM latency").format(Format::Nanos))
            .y_axis(Axis::new(unit.as_str()).format(Format::Nanos))
            .series(expected)
            .series(measured);
        let stem = format!(
            "shapes-{}",
            c.chars()
                .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '-' })
                .collect::<String>()
        );
        save_both(dir, &chart, &stem)?;
    }
    Ok(())
}

/// A shape's config without its `native=` part.
fn shape_name(config: &str) -> String {
    config
        .split_whitespace()
        .filter(|t| !t.starts_with("native="))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_expectation_adds_the_measured_misses_only() {
        // 500 ns a lookup natively with 2.5 misses measured, DRAM 160 ns:
        // at 1000 ns each miss adds 840 ns: 2600 ns.
        let (e, d) = lookup_expectation(500.0, 2.5, 160.0, 1000.0, 1.0, 2652.0);
        assert!((e - 2600.0).abs() < 1e-9, "{e}");
        assert!(d.contains("2.500 misses/lookup"), "{d}");
        assert!(d.contains("no overlap") && d.contains("+2.00%"), "{d}");
        // Lookups that overlap natively: an upper bound, said.
        let (_, d) = lookup_expectation(500.0, 2.5, 160.0, 1000.0, 1.6, 2600.0);
        assert!(d.contains("upper bound"), "{d}");
        // A target below DRAM adds nothing.
        let (e, _) = lookup_expectation(500.0, 2.5, 160.0, 150.0, 1.0, 500.0);
        assert_eq!(e, 500.0);
    }

    #[test]
    fn implied_misses_divide_the_added_time_by_the_step() {
        // 500 ns natively, 1100 emulated at 1000 ns with DRAM 160: 600 ns
        // added over 840 per miss.
        let m = implied_misses(1100.0, 500.0, 160.0, 1000.0);
        assert!((m - 600.0 / 840.0).abs() < 1e-12, "{m}");
        assert!(implied_misses(600.0, 500.0, 160.0, 160.0).is_nan());
    }

    #[test]
    fn the_wait_formula_scales_the_native_memory_wait() {
        // 100 ns a lookup natively, 20 ns in cache, DRAM 160 ns: half a
        // DRAM wait per lookup; at 1000 ns it adds 420 ns: 520 ns.
        let (e, d) = wait_formula(100.0, 20.0, 160.0, 1000.0);
        assert!((e - 520.0).abs() < 1e-9, "{e}");
        assert!(d.contains("0.500 DRAM waits"), "{d}");
        // Faster than in cache (noise): nothing is added.
        let (e, _) = wait_formula(19.0, 20.0, 160.0, 300.0);
        assert_eq!(e, 19.0);
    }

    #[test]
    fn text_values_are_read_from_the_last_line_that_has_them() {
        let out = "bptree: level_misses=0/1\nbptree: x=1 level_misses=0.000/0.250/1.000\n";
        assert_eq!(
            text_of(out, "level_misses").as_deref(),
            Some("0.000/0.250/1.000")
        );
        assert_eq!(text_of(out, "nothing"), None);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn chase_formula_adds_the_latency_once_per_load() {
        // idxchase at 256 MiB on the idle run: native 161.0, DRAM 160.8.
        assert!((chase_formula(161.0, 160.8, 300.0) - 300.2).abs() < 1e-9);
        assert!((chase_formula(161.0, 158.9, 1000.0) - 1002.1).abs() < 1e-9);
        // A target below DRAM adds nothing (the emulator cannot speed up).
        assert_eq!(chase_formula(161.0, 160.0, 150.0), 161.0);
    }

    #[test]
    fn shape_names_drop_the_native_figure() {
        assert_eq!(
            shape_name("idxchase 4 chains state=mem native=41.2ns"),
            "idxchase 4 chains state=mem"
        );
    }
}
