//! `pmlab validate [--quick] [--json FILE] [--plot DIR] [--device D [--write PAGE]]`: the emulator's
//! accuracy study (the work is `pmlab_emu::validate`, which also documents
//! the tolerances). Exit status: 0 when every point meets its bound, 1
//! when one misses it, 2 on an error.

use anyhow::{Context, Result};
use pmlab_emu::validate::{self, Options, Point, STUDIES};
use pmlab_model::options::Sample;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;
use validate::summarize;

/// Arguments of `pmlab validate`.
#[derive(clap::Args)]
#[command(
    after_help = "Exit status: 0 when every point meets its bound, 1 when one misses it, 2 on an error.

Example:
  pmlab validate --quick --json acc.json --plot acc/   # a few minutes, loose (CI) bounds
  pmlab validate --only memlat --reps 3 --loose          # what `make demo` runs
  pmlab validate --device optane-1dimm --reps 3 --write docs/validation.md --plot docs/validation"
)]
pub struct Args {
    /// Small sizes and fewer points (a few minutes, for CI), judged
    /// against the loose bounds (see --loose).
    #[arg(long)]
    quick: bool,
    /// Judge against the loose bounds (memlat and multilat 15%, chains and
    /// mtlat 20%: a broken model fails, a noisy point on a busy machine
    /// does not) instead of the accuracy targets (2% / 5%).
    #[arg(long)]
    loose: bool,
    /// Write the results as JSON to this file (`-` for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write charts of the results into this directory (SVG; the shapes,
    /// workset and bandwidth studies' also PNG).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Runs per point at most: memlat, multilat, mtlat and bandwidth stop early once the remaining runs cannot change a point's verdict (median and spread are reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Only these studies (comma-separated: memlat, chains, multilat, mtlat,
    /// overhead, shapes, workset, bandwidth) [default: all].
    #[arg(long)]
    only: Option<String>,
    /// The workloads' source directory [default: ./workloads, or the one
    /// of the source tree pmlab was built from].
    #[arg(long)]
    workloads: Option<PathBuf>,
    /// Build the workloads here [default: a temporary directory].
    #[arg(long)]
    build_dir: Option<PathBuf>,
    /// Run the device study instead: LENS's pointer chase of a pmlab cc
    /// program under `pmlab run --device DEVICE` against `pmlab probe
    /// ptrchase --target sim:DEVICE` (10% at every region), and the
    /// overwrite probe's wear-leveling period (a preset or a simulator
    /// config file).
    #[arg(long, value_name = "PRESET|FILE", conflicts_with = "only")]
    device: Option<String>,
    /// With --device: write the results as the generated device section of
    /// this Markdown page (docs/validation.md), replacing the one there.
    #[arg(long, value_name = "FILE", requires = "device")]
    write: Option<PathBuf>,
    /// The sampling of the latency studies' emulated runs (memlat,
    /// chains, overhead, mtlat, shapes, multilat), given to each
    /// `pmlab run` as its `--sample`: off, auto or a ratio in (0, 1]
    /// [default: `pmlab run`'s, auto]. The workset and bandwidth studies
    /// pick their own and say so; the device study runs off.
    #[arg(long, value_name = "off|auto|RATIO", value_parser = Sample::parse)]
    sample: Option<Sample>,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
}

/// Run the command.
pub fn run(args: Args) -> Result<u8> {
    let opts = Options {
        quick: args.quick,
        loose: args.loose,
        reps: args.reps,
        only: args
            .only
            .as_ref()
            .map(|l| l.split(',').map(|s| s.trim().to_string()).collect()),
        workloads: args.workloads.clone(),
        build_dir: args.build_dir.clone(),
        device: args.device.clone(),
        sample: args.sample.unwrap_or_else(Sample::run_default),
        pmlab: std::env::current_exe().context("cannot locate the pmlab executable")?,
    };
    let progress = args.progress || std::io::stderr().is_terminal();
    let started = Instant::now();
    let say = |msg: &str| {
        if progress {
            eprintln!("[{:>4.0}s] {msg}", started.elapsed().as_secs_f64());
        }
    };
    let report = validate::run(&opts, &say, &crate::cmd::calibrate::note(false))?;
    print_table(&report.points, report.dram_latency_ns, &report.sample);
    for k in &report.skipped {
        println!(
            "  skipped: {} at {} ns: below {} x this machine's DRAM latency ({:.1} ns); PM is emulated as slower memory",
            k.study,
            k.target_ns,
            validate::EMULABLE_MARGIN,
            k.dram_ns
        );
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        if path.as_os_str() == "-" {
            println!("{text}");
        } else {
            crate::cmd::write_atomic(path, (text + "\n").as_bytes(), "--json")?;
        }
    }
    if let Some(dir) = &args.plot {
        validate::write_plots(dir, &report.points)?;
    }
    if let (Some(page), Some(device)) = (&args.write, &args.device) {
        write_device_page(&args, page, device, &report)?;
    }
    let secs = started.elapsed().as_secs_f64();
    for st in &report.study_seconds {
        let (m, s) = min_sec(st.seconds);
        println!(
            "  {:<10} {m:>4} min {s:>2} s  ({} runs judged)",
            st.study, st.runs
        );
    }
    let (m, s) = min_sec(secs);
    println!(
        "pmlab validate: {} points in {m} min {s} s",
        report.points.len()
    );
    if report.all_met() {
        Ok(0)
    } else {
        eprintln!(
            "pmlab: validate: {} of {} points missed their bound ({} tolerances){}",
            report
                .points
                .iter()
                .filter(|p| p.judged() && !p.ok())
                .count(),
            report.points.iter().filter(|p| p.judged()).count(),
            report.tolerances,
            if report.tolerances == "target" {
                "; --loose judges against the bounds that catch a broken model"
            } else {
                ""
            }
        );
        Ok(1)
    }
}

/// `--write`: the device study's section of the page, with the command
/// that made it and the chart linked relative to the page.
fn write_device_page(
    args: &Args,
    page: &std::path::Path,
    device: &str,
    report: &validate::Report,
) -> Result<()> {
    let base = page.parent().unwrap_or(std::path::Path::new(""));
    let images = args
        .plot
        .as_ref()
        .map(|d| d.strip_prefix(base).unwrap_or(d).display().to_string());
    let command = format!(
        "pmlab validate --device {device}{} --reps {} --write {}{}",
        if args.quick { " --quick" } else { "" },
        args.reps,
        page.display(),
        args.plot
            .as_ref()
            .map(|d| format!(" --plot {}", d.display()))
            .unwrap_or_default()
    );
    validate::device::write_doc(page, report, &command, images.as_deref())?;
    Ok(())
}

fn print_table(points: &[Point], cached: f64, sample: &str) {
    let all: Vec<f64> = points.iter().flat_map(|p| p.dram_runs.clone()).collect();
    let d = summarize(&all);
    let sampling =
        format!("--sample {sample} (latency studies; workset and bandwidth choose their own, device runs off)");
    if all.is_empty() {
        println!("pmlab validate: instrumented source, {sampling}, calibrated DRAM latency {cached:.1} ns");
    } else {
        println!(
            "pmlab validate: instrumented source, {sampling}; DRAM latency measured before each emulated run: median {:.1} ns ({:.1}..{:.1}; cached calibration {cached:.1})",
            d.median, d.min, d.max
        );
    }
    println!(
        "{:<9} {:<34} {:>7} {:>7} {:>6} {:>13} {:>13} {:>22} {:>8} {:>6}",
        "study",
        "config",
        "target",
        "dram",
        "dram±%",
        "expected",
        "measured",
        "spread (min..max)",
        "error%",
        "ok"
    );
    for p in points {
        let ok = if p.bound_pct.is_finite() {
            if p.ok() {
                "yes"
            } else {
                "NO"
            }
        } else if p.not_reachable {
            "unreach"
        } else {
            "-"
        };
        println!(
            "{:<9} {:<34} {:>7} {:>7} {:>6} {:>13} {:>13} {:>22} {:>+8.2} {:>6}",
            p.study,
            p.config,
            if p.target_ns > 0.0 {
                format!("{}ns", p.target_ns)
            } else {
                "-".into()
            },
            if p.dram_runs.is_empty() {
                "-".into()
            } else {
                format!("{:.1}", p.dram_ns())
            },
            if p.dram_runs.is_empty() {
                "-".into()
            } else {
                format!("{:.1}", p.dram_spread_pct())
            },
            fmt_val(p.expected, &p.unit),
            fmt_val(p.measured.median, &p.unit),
            format!(
                "{}..{}",
                fmt_val(p.measured.min, &p.unit),
                fmt_val(p.measured.max, &p.unit)
            ),
            p.error_pct,
            ok
        );
    }
    for study in STUDIES {
        let v: Vec<&Point> = points.iter().filter(|p| p.study == *study).collect();
        let judged: Vec<&Point> = v.iter().copied().filter(|p| p.judged()).collect();
        if judged.is_empty() {
            continue;
        }
        let v = judged;
        let worst = v.iter().map(|p| p.error_pct.abs()).fold(0.0, f64::max);
        let passed = v.iter().filter(|p| p.ok()).count();
        let bounds = summarize(&v.iter().map(|p| p.bound_pct).collect::<Vec<_>>());
        let target = if bounds.min == bounds.max {
            format!("{}", bounds.min)
        } else {
            format!("{:.0}..{:.0}", bounds.min, bounds.max)
        };
        // Misses no larger than the machine's own drift over the point.
        let noisy = v
            .iter()
            .filter(|p| !p.ok() && p.error_pct.abs() <= p.dram_spread_pct())
            .count();
        let noise = if noisy > 0 {
            format!("; {noisy} of the misses within the DRAM latency's own spread (dram±%)")
        } else {
            String::new()
        };
        // Misses where the native reference itself moved (workset).
        let shaky = v.iter().filter(|p| p.native_unstable).count();
        let shaky_missed = v.iter().filter(|p| p.native_unstable && !p.ok()).count();
        let noise = if shaky > 0 {
            format!("{noise}; {shaky} points with an unstable native reference (runs spread over 20%, or the effective LLC moved between repetitions), {shaky_missed} of them missed")
        } else {
            noise
        };
        let unreachable = points
            .iter()
            .filter(|p| p.study == *study && p.not_reachable)
            .count();
        let unreachable = if unreachable > 0 {
            format!("; {unreachable} not reachable (target not below the emulated build's own bandwidth), not judged")
        } else {
            String::new()
        };
        println!(
            "{study}: worst |error| {worst:.2}% (target < {target}%), {passed}/{} points within{noise}{unreachable}",
            v.len()
        );
        let reference = if *study == "memlat" {
            "against the target L itself (diagnostic: adds the DRAM figure's gap to memlat's own native cost; the verdict is against the native run before each plus L - DRAM)"
        } else {
            "against the emulator-free reference (diagnostic: the native build waiting L - DRAM per PM access, multilat -x)"
        };
        let diagnostics: [(&str, ErrorOf); 4] = [
            (reference, |p| p.reference_error_pct),
            (
                "the reference itself against the formula (diagnostic: what this machine does with no emulator)",
                |p| p.reference_formula_pct,
            ),
            (
                "against the critical-path formula (diagnostic: a lower bound, without the lock hand-offs and scheduling that the reference measures)",
                |p| p.formula_error_pct,
            ),
            (
                "corrected for the DRAM latency's drift during each run (diagnostic; measured before and after)",
                |p| p.drift_adjusted_error_pct,
            ),
        ];
        for (what, error) in diagnostics {
            let e: Vec<f64> = v.iter().filter_map(|p| error(p)).collect();
            if e.is_empty() {
                continue;
            }
            let within = e.iter().filter(|x| x.abs() <= v[0].bound_pct).count();
            let a = summarize(&e);
            println!(
                "{study}, {what}: {within}/{} within, errors {:+.2}..{:+.2}%",
                e.len(),
                a.min,
                a.max
            );
        }
    }
}

/// A diagnostic error of a point, when the point has one.
type ErrorOf = fn(&Point) -> Option<f64>;

fn fmt_val(v: f64, unit: &str) -> String {
    if unit == "ns" {
        format!("{:.2}ms", v / 1e6)
    } else if unit == "GB/s" {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// Whole minutes and seconds of `secs`, rounded to the second first (so
/// 299.99 s reads 5 min 0 s, not 4 min 60 s).
fn min_sec(secs: f64) -> (u64, u64) {
    let whole = secs.max(0.0).round() as u64;
    (whole / 60, whole % 60)
}

#[cfg(test)]
mod min_sec_tests {
    #[test]
    fn seconds_round_before_they_split() {
        assert_eq!(super::min_sec(299.99), (5, 0));
        assert_eq!(super::min_sec(977.8), (16, 18));
        assert_eq!(super::min_sec(59.4), (0, 59));
    }
}
