//! The emulator's accuracy study of the instrumented source, behind `pmlab
//! validate` (issue 3; method in docs/accuracy.md).
//!
//! It builds the workloads (`workloads/memlat.c`, `multilat.c`, `mtlat.c`)
//! twice, with `pmlab cc` and with plain clang, then runs each point of the
//! study several times under `pmlab run --source instrumented` and without
//! pmlab, and compares the medians with what the target latency predicts:
//!
//! * memlat, 1 chain: ns per access against the native run made before
//!   each emulated run plus (target - the DRAM latency that run was
//!   given), what a perfect emulator reads ([`memlat_point`]; the error
//!   against the target itself is a diagnostic);
//! * memlat, 2/4/8 chains: against native ns per access x target / DRAM
//!   latency (the overlap the hardware achieves on DRAM carries over);
//! * multilat: run time against `Num_DRAM x DRAM_lat + Num_NVM x NVM_lat`,
//!   with DRAM_lat the workload's own native time per access and NVM_lat
//!   that plus the latency to add (target - calibrated DRAM): the native
//!   run time plus `Num_NVM x (target - DRAM)`; the same native build
//!   waiting target - DRAM per PM access (`multilat -x`) is measured
//!   beside it, to tell the machine's share of an error from the
//!   emulator's;
//! * mtlat: run time against the same schedule with every access at the
//!   target latency, measured: the native build waiting target - DRAM of
//!   its own CPU time after every access (`mtlat -x`); the critical-path
//!   formula (native run time plus the accesses on the schedule's
//!   critical path x (target - DRAM)), a lower bound, is reported beside;
//! * overhead: `--no-inject` runs against native runs;
//! * shapes, workset, bandwidth: foreign program shapes (an index-linked
//!   chase, a hash-table probe, a B+-tree lookup), the working-set sweep
//!   and the STREAM-like bandwidth study (issues 16 and 17), each with its
//!   expectation documented in its module ([`shapes`], [`workset`],
//!   [`bandwidth`]).
//!
//! # Tolerances and the verdict
//!
//! Each point has a bound on the |error| of its median ([`Tolerances`]).
//! The full study is judged against issue 3's targets
//! ([`Tolerances::TARGET`]: memlat and multilat 2%, chains and mtlat 5%).
//! On this 2-vCPU VM those are not met reliably: the DRAM latency alone
//! drifts by several percent over a point's minutes, and multilat's
//! emulator-free reference misses them too (docs/accuracy.md).
//!
//! `--quick` (and `--loose`, which `make demo` uses) judges against
//! [`Tolerances::LOOSE`] instead: memlat and multilat 15%, chains and mtlat
//! 20%. They are set against what a broken model would read, not against
//! the noise: with DRAM at ~165 ns and a 400 ns target, a model that
//! injects nothing reads memlat at ~165 ns (-59%) and one that injects
//! twice reads ~635 ns (+59%); multilat's 2:1 pattern, whose PM third
//! carries the whole injected latency, moves by about +-31%; chains and
//! mtlat by more than 40%. The loose bounds sit at a half or less of those
//! shifts, and at three times or more the worst errors seen here under
//! load (2-6%), so a loaded machine passes and a model that is off by the
//! injected latency as a whole fails. The overhead study has no bound.
//!
//! [`Report::all_met`] is the verdict: `pmlab validate` exits 1 when a
//! point misses its bound, 0 when all meet it.

use crate::calibrate::{self, Chaser};
use crate::error::{fail, Context, Result};
use crate::{Error, ErrorKind};
use pmlab_model::options::Sample;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub mod bandwidth;
pub mod device;
pub mod shapes;
pub mod workset;

/// What to run: the study's options (`pmlab validate`'s flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Small sizes and fewer points, judged against [`Tolerances::LOOSE`].
    pub quick: bool,
    /// Judge against [`Tolerances::LOOSE`] even in the full study.
    pub loose: bool,
    /// Runs per point at most (fewer where the verdict settles: [`settled`]; median and spread are reported), 1 to 100.
    pub reps: usize,
    /// Only these studies (of [`STUDIES`]); `None`: all.
    pub only: Option<Vec<String>>,
    /// The workloads' source directory [default: ./workloads, or the one
    /// of the source tree pmlab was built from].
    pub workloads: Option<PathBuf>,
    /// Build the workloads here [default: a temporary directory].
    pub build_dir: Option<PathBuf>,
    /// Run the device study ([`device`]) on this preset or simulator
    /// config instead of the other studies.
    pub device: Option<String>,
    /// The `pmlab` executable that runs the emulated builds (`pmlab run`)
    /// and builds them (`pmlab cc`).
    pub pmlab: PathBuf,
    /// `--sample` of every emulated run of the latency studies (the
    /// workset and bandwidth studies pick their own).
    pub sample: Sample,
}

/// The bound on each study's |error|, percent (see the module
/// documentation for why these values).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerances {
    /// memlat, 1 chain.
    pub memlat: f64,
    /// memlat, several chains.
    pub chains: f64,
    /// multilat.
    pub multilat: f64,
    /// mtlat.
    pub mtlat: f64,
    /// The program shapes (index chase, hash probe, B+-tree).
    pub shapes: f64,
    /// Working set, regions of at least 4x the LLC.
    pub workset_far: f64,
    /// Working set, regions between half the LLC and 4x the LLC.
    pub workset_mid: f64,
    /// Working set, regions below half the LLC (or
    /// [`workset_floor_ns`](Self::workset_floor_ns), whichever is larger).
    pub workset_near: f64,
    /// The floor of the near bound, ns per access.
    pub workset_floor_ns: f64,
    /// Working set, `--no-inject` against native, every region.
    pub workset_overhead: f64,
    /// Bandwidth against the `--pm-bandwidth` target.
    pub bandwidth: f64,
}

impl Tolerances {
    /// Issue 3's accuracy targets, for the full study.
    pub const TARGET: Tolerances = Tolerances {
        memlat: 2.0,
        chains: 5.0,
        multilat: 2.0,
        mtlat: 5.0,
        shapes: 5.0,
        workset_far: 5.0,
        workset_mid: 15.0,
        workset_near: 10.0,
        workset_floor_ns: 5.0,
        workset_overhead: 10.0,
        bandwidth: 5.0,
    };
    /// Loose enough for a loaded 2-vCPU VM, tight enough to catch a model
    /// that injects nothing or twice the latency (`--quick`, `--loose`).
    pub const LOOSE: Tolerances = Tolerances {
        memlat: 15.0,
        chains: 20.0,
        multilat: 15.0,
        mtlat: 20.0,
        // A model that injects nothing reads a large-region chase at
        // DRAM / L (-51% at 300 ns, -85% at 1000 ns), a hash probe or tree
        // lookup at least a third low; one that takes dependent loads for
        // independent ones reads the index chase at the native 4-chain
        // figure.
        shapes: 20.0,
        workset_far: 15.0,
        workset_mid: 30.0,
        workset_near: 20.0,
        workset_floor_ns: 10.0,
        // Hooks that cost more than the access itself show here at small
        // regions; an injection that --no-inject fails to stop doubles the
        // time at large ones.
        workset_overhead: 30.0,
        // A throttle that does nothing reads the instrumented build's own
        // rate (about 2 GB/s here: +100% at 1 GB/s).
        bandwidth: 25.0,
    };
}

/// The studies, in the order they run.
pub const STUDIES: &[&str] = &[
    "memlat",
    "chains",
    "multilat",
    "mtlat",
    "overhead",
    "shapes",
    "workset",
    "bandwidth",
];

/// Median, minimum and maximum of a set of runs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct Summary {
    /// Median.
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// Median, min and max of `v` (empty input gives NaNs).
pub fn summarize(v: &[f64]) -> Summary {
    if v.is_empty() {
        return Summary {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        };
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Summary {
        median,
        min: s[0],
        max: s[n - 1],
    }
}

/// Signed error of `measured` against `expected`, in percent.
pub fn error_pct(measured: f64, expected: f64) -> f64 {
    (measured - expected) / expected * 100.0
}

/// One point of the study. The study-specific diagnostics (`dram_after_runs`
/// onwards) are empty by default.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Point {
    /// Study name (memlat, chains, multilat, mtlat, overhead).
    pub study: String,
    /// The configuration, human-readable (e.g. "chains=4").
    pub config: String,
    /// Target PM latency, ns (0 for overhead points).
    pub target_ns: f64,
    /// Unit of `expected` and `measured`.
    pub unit: String,
    /// What the model predicts.
    pub expected: f64,
    /// The runs, summarised.
    pub measured: Summary,
    /// Error of the median, percent.
    pub error_pct: f64,
    /// The study's target bound on |error|, percent.
    pub bound_pct: f64,
    /// Every run's value.
    pub runs: Vec<f64>,
    /// How `expected` was derived, with its inputs (empty when it is the
    /// target itself).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// The DRAM latency measured just before each emulated run and given
    /// to it as `--dram-latency` (empty for `--no-inject` runs).
    pub dram_runs: Vec<f64>,
    /// memlat points: the DRAM latency measured again just after each
    /// emulated run (empty for the other studies).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dram_after_runs: Vec<f64>,
    /// memlat points: the error of the median once each run is corrected
    /// for the machine's drift during it (see [`drift_adjusted`]); a
    /// diagnostic beside `error_pct`, which stays the verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_adjusted_error_pct: Option<f64>,
    /// mtlat points: the error of the median against the critical-path
    /// formula (native time + critical-path accesses x (target - DRAM)), a
    /// diagnostic beside `error_pct` (see [`mtlat_point`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formula_error_pct: Option<f64>,
    /// mtlat and multilat points: the runs of the emulator-free reference
    /// (the native build waiting `target - DRAM` ns of CPU-holding time
    /// per access, `-x`). For mtlat its median is `expected` (see
    /// [`mtlat_point`]); for multilat it is a diagnostic (see
    /// [`multilat_point`]). Shapes: idxchase's reference is `expected`;
    /// hashprobe's and bptree's (native plus what a wait after each timed
    /// miss added) are diagnostics in `detail`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reference_runs: Vec<f64>,
    /// multilat points: the error of the median against the reference's
    /// median, a diagnostic beside `error_pct`: what the emulator adds on
    /// this machine to what the machine itself does with the same waits.
    /// memlat points: the error against the target latency itself (the
    /// verdict is against [`memlat_paired_expectation`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_error_pct: Option<f64>,
    /// multilat points: the reference's median against `expected`: how far
    /// this machine alone, with no emulator, is from the formula.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_formula_pct: Option<f64>,
    /// multilat points: the native run of each repetition, made just
    /// before that repetition's reference and emulated runs; memlat
    /// points: the same, made just before each emulated run; bandwidth
    /// points: the native build's bandwidth.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub native_runs: Vec<f64>,
    /// bandwidth points: the emulated build's own bandwidth under `pmlab
    /// run` with no target (what the hooks let it reach).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reach_runs: Vec<f64>,
    /// bandwidth points: the bandwidth by STREAM's own count (no
    /// write-allocate reads) of each emulated run, beside the judged
    /// memory traffic.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stream_runs: Vec<f64>,
    /// bandwidth points: the target is not below what the emulated build
    /// reaches with no target, so no throttle can show it (not judged).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not_reachable: bool,
    /// workset points: the native reference moved during the point (its
    /// runs spread widely, or the effective LLC changed between its
    /// repetitions: `workset::unstable`). Still judged; the summary
    /// counts such misses apart.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub native_unstable: bool,
    /// chains points: the emulated build's ns per access under `pmlab run
    /// --no-inject` (the hooks' own time, nothing injected), a diagnostic:
    /// where its median is not below `expected`, the hooks alone take the
    /// target's time and no subtraction of their cost can reach it (the
    /// delay to inject is smaller than the overhead to absorb).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooked_runs: Vec<f64>,
}

/// A memlat run corrected for the DRAM latency's drift during it: the
/// emulator adds `target - given` to every access that costs what DRAM
/// costs during the run, estimated as the mean of the latencies measured
/// just before (`given`) and just after (`after`) the run; so the run,
/// less half the drift, is what it would have measured on a steady
/// machine.
pub fn drift_adjusted(measured: f64, given: f64, after: f64) -> f64 {
    measured - (after - given) / 2.0
}

impl Point {
    /// Median of [`dram_runs`](Self::dram_runs) (NaN when empty).
    pub fn dram_ns(&self) -> f64 {
        summarize(&self.dram_runs).median
    }

    /// How far the DRAM latency moved across the point's runs: half the
    /// range of [`dram_runs`](Self::dram_runs) over its median, percent
    /// (NaN when empty). Errors of this size are the machine's as much as
    /// the emulator's.
    pub fn dram_spread_pct(&self) -> f64 {
        let d = summarize(&self.dram_runs);
        (d.max - d.min) / 2.0 / d.median * 100.0
    }

    /// True when the median error is within the bound.
    pub fn ok(&self) -> bool {
        self.error_pct.abs() <= self.bound_pct
    }

    /// Whether the point has a bound at all (the overhead study has none).
    pub fn judged(&self) -> bool {
        self.bound_pct.is_finite()
    }
}

/// Parse `key=value` pairs from a workload's output (the last line that
/// has `key`).
pub fn value_of(output: &str, key: &str) -> Option<f64> {
    output.lines().rev().find_map(|line| {
        line.split_whitespace().find_map(|tok| {
            let (k, v) = tok.split_once('=')?;
            (k == key).then(|| v.parse::<f64>().ok()).flatten()
        })
    })
}

struct Ctx<'a> {
    pmlab: PathBuf,
    native: PathBuf,
    instr: PathBuf,
    reps: usize,
    quick: bool,
    dram_ns: f64,
    /// The last-level cache, bytes: the effective one measured when the
    /// study starts, else the calibration's sysfs size (0 when unknown).
    llc_bytes: u64,
    /// `PMLAB_INSTR_LLC` for the emulated runs (the effective LLC), unless
    /// the caller's environment sets it.
    instr_llc: Option<String>,
    /// `PMLAB_INSTR_LLC` for the next emulated runs instead of
    /// `instr_llc`: the working-set study's knee probe, taken just before.
    llc_now: std::cell::RefCell<Option<String>>,
    /// The calibration's chain, to measure the DRAM latency again before
    /// each emulated run.
    chaser: std::cell::RefCell<Chaser>,
    /// Loads per such measurement.
    chase_steps: u64,
    bounds: Tolerances,
    /// `--sample` of the emulated runs that do not give their own
    /// ([`Options::sample`]).
    sample: Sample,
    say: &'a dyn Fn(&str),
    /// The targets left out for being too close to this machine's DRAM
    /// latency (see [`Ctx::emulable`]).
    skipped: std::cell::RefCell<Vec<Skipped>>,
}

/// A study's target latency that this machine cannot emulate: PM is
/// emulated as slower memory, so a target must stand [`EMULABLE_MARGIN`]
/// above the calibrated DRAM latency (the latency measured before each
/// emulated run drifts above the calibration by 10-30% on a busy host,
/// and `pmlab run` refuses a target below it).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Skipped {
    /// The study.
    pub study: String,
    /// The target latency left out, ns.
    pub target_ns: f64,
    /// The calibrated DRAM latency it was judged against, ns.
    pub dram_ns: f64,
}

/// How far above the calibrated DRAM latency a study's target latency
/// must be to be run (see [`Skipped`]).
pub const EMULABLE_MARGIN: f64 = 1.25;

/// Of the target latencies `lats`, those at least [`EMULABLE_MARGIN`]
/// times `dram_ns`, and those left out.
pub fn emulable_split(lats: &[f64], dram_ns: f64) -> (Vec<f64>, Vec<f64>) {
    lats.iter().partition(|&&l| l >= dram_ns * EMULABLE_MARGIN)
}

impl Ctx<'_> {
    fn say(&self, msg: &str) {
        (self.say)(msg)
    }

    /// The target latencies of `study` that this machine can emulate
    /// ([`emulable_split`]); the others are recorded in the report and
    /// said, once each.
    fn emulable(&self, study: &str, lats: &[f64]) -> Vec<f64> {
        let (keep, out) = emulable_split(lats, self.dram_ns);
        for t in out {
            self.say(&format!(
                "{study}: {t} ns left out: below {EMULABLE_MARGIN} x this machine's DRAM latency ({:.1} ns); PM is emulated as slower memory",
                self.dram_ns
            ));
            self.skipped.borrow_mut().push(Skipped {
                study: study.to_string(),
                target_ns: t,
                dram_ns: self.dram_ns,
            });
        }
        keep
    }

    fn exe(&self, instrumented: bool, name: &str) -> PathBuf {
        if instrumented {
            self.instr.join(name)
        } else {
            self.native.join(name)
        }
    }

    /// Run the native build of `prog` (no pmlab) once; return its output.
    fn native(&self, prog: &str, args: &[String]) -> Result<String> {
        let out = Command::new(self.exe(false, prog))
            .args(args)
            .output()
            .with_context(|| format!("cannot run {prog}"))?;
        check_output(prog, &out)
    }

    /// Run the instrumented build under `pmlab run --source instrumented`
    /// with the DRAM latency measured just before (returned with the
    /// output; the cached calibration's with `no_inject`, where it does
    /// not matter). This machine's latency drifts by several percent over
    /// minutes, more than the targets: a calibration from earlier would
    /// make the drift an error of the emulator.
    fn emulated(
        &self,
        prog: &str,
        args: &[String],
        pm_ns: f64,
        no_inject: bool,
    ) -> Result<(String, f64)> {
        let dram = if no_inject {
            self.dram_ns
        } else {
            self.dram_now()
        };
        Ok((
            self.emulated_given(prog, args, pm_ns, no_inject, dram)?,
            dram,
        ))
    }

    /// The DRAM latency now (the calibration's chain, followed again): the
    /// median of three walks of a third of the steps each, so that one walk slowed by a page fault or a
    /// descheduled vCPU (205 ns read once against ~155 here) neither skews
    /// the point nor stops the study with a target below it.
    fn dram_now(&self) -> f64 {
        let mut chaser = self.chaser.borrow_mut();
        let mut walks: Vec<f64> = (0..3)
            .map(|_| chaser.measure(self.chase_steps / 3))
            .collect();
        walks.sort_by(f64::total_cmp);
        walks[1]
    }

    /// The emulator-free reference of `prog` (mtlat, multilat): the native
    /// build with `-x (target - dram)`, waiting that many ns of CPU-holding
    /// time per access it would make at the target; its `elapsed_ns`.
    fn reference(&self, prog: &str, args: &[String], target: f64, dram: f64) -> Result<f64> {
        let mut slow = args.to_vec();
        slow.extend([s("-x"), s((target - dram).max(0.0).round() as u64)]);
        need(prog, &self.native(prog, &slow)?, "elapsed_ns")
    }

    /// As [`emulated`](Self::emulated), given the DRAM latency `dram`
    /// (measured by the caller just before); the output.
    fn emulated_given(
        &self,
        prog: &str,
        args: &[String],
        pm_ns: f64,
        no_inject: bool,
        dram: f64,
    ) -> Result<String> {
        self.emulated_with(prog, args, pm_ns, no_inject, dram, &[])
    }

    /// `--sample` and the study's sampling ([`Ctx::sample`]), unless the
    /// run's `flags` already choose one.
    fn sample_flags(&self, flags: &[String]) -> Vec<String> {
        sample_flags(self.sample, flags)
    }

    /// The instrumented build under `pmlab run --source instrumented`
    /// with the DRAM latency `dram` and `flags` (`--device ...`), no PM
    /// latency (the device gives it), the effective LLC as the other
    /// studies' runs, `--sample off` unless `flags` choose (the device
    /// model is fed every access, whatever `--sample` the latency studies
    /// run with); the output.
    fn device_run(
        &self,
        prog: &str,
        args: &[String],
        dram: f64,
        flags: &[String],
    ) -> Result<String> {
        let mut cmd = Command::new(&self.pmlab);
        cmd.args(["run", "--quiet", "--source", "instrumented"])
            .arg("--dram-latency")
            .arg(format!("{dram:.2}ns"))
            .args(flags)
            .args(sample_flags(Sample::Off, flags));
        if let Some(v) = self.llc_now.borrow().as_ref().or(self.instr_llc.as_ref()) {
            cmd.env("PMLAB_INSTR_LLC", v);
        }
        let out = cmd
            .arg("--")
            .arg(self.exe(true, prog))
            .args(args)
            .output()
            .with_context(|| format!("cannot run pmlab run on {prog}"))?;
        check_output(prog, &out)
    }

    /// As [`emulated_given`](Self::emulated_given), with more `pmlab run`
    /// flags (`flags`, e.g. `--pm-bandwidth`).
    fn emulated_with(
        &self,
        prog: &str,
        args: &[String],
        pm_ns: f64,
        no_inject: bool,
        dram: f64,
        flags: &[String],
    ) -> Result<String> {
        let mut cmd = Command::new(&self.pmlab);
        cmd.args(["run", "--quiet", "--source", "instrumented"])
            .arg("--pm-latency")
            .arg(format!("{pm_ns}ns"))
            .arg("--dram-latency")
            .arg(format!("{dram:.2}ns"))
            .args(flags)
            .args(self.sample_flags(flags));
        if no_inject {
            cmd.arg("--no-inject");
        }
        if let Some(v) = self.llc_now.borrow().as_ref().or(self.instr_llc.as_ref()) {
            cmd.env("PMLAB_INSTR_LLC", v);
        }
        cmd.arg("--").arg(self.exe(true, prog)).args(args);
        let out = cmd
            .output()
            .with_context(|| format!("cannot run pmlab run on {prog}"))?;
        check_output(prog, &out)
    }

    fn reps<F: FnMut() -> Result<f64>>(&self, mut f: F) -> Result<Vec<f64>> {
        (0..self.reps).map(|_| f()).collect()
    }

    /// `--reps` pairs of runs, `first` then `second` each time, so that the
    /// machine's drift over the point's minutes touches both alike.
    fn interleaved<F, G>(&self, mut first: F, mut second: G) -> Result<(Vec<f64>, Vec<f64>)>
    where
        F: FnMut() -> Result<f64>,
        G: FnMut() -> Result<f64>,
    {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..self.reps {
            a.push(first()?);
            b.push(second()?);
        }
        Ok((a, b))
    }
}

/// Adaptive repetitions: a point runs at least a majority of its
/// repetitions (`max / 2 + 1`) and stops as soon as the runs left cannot
/// change its verdict. Once more than half of the runs are in, the median
/// of all of them lies within the range of those already made (more than
/// half of the final runs are at or below the largest, and at or above
/// the smallest); so when every run so far is within the bound (with a
/// margin, [`SETTLE_MARGIN`], for an expectation that itself moves a
/// little with the runs) the point passes, and when every run is past it
/// on the same side the point misses, whatever the other runs read. A
/// point with no bound (infinite) stops at the majority. `errors`: each
/// run's signed error, percent, against the expectation of its own
/// repetition (NaN: not known, never settles).
pub fn settled(errors: &[f64], bound: f64, max: usize) -> bool {
    let n = errors.len();
    if n >= max {
        return true;
    }
    if n * 2 <= max {
        return false;
    }
    if bound.is_infinite() {
        return true;
    }
    if errors.iter().any(|e| !e.is_finite()) {
        return false;
    }
    let inside = bound * SETTLE_MARGIN;
    let outside = bound / SETTLE_MARGIN;
    errors.iter().all(|e| e.abs() <= inside)
        || errors.iter().all(|&e| e > outside)
        || errors.iter().all(|&e| e < -outside)
}

/// How far inside its bound every run of a point must be (as a share of
/// the bound), or past it (the bound over this), for [`settled`] to stop
/// its repetitions early.
pub const SETTLE_MARGIN: f64 = 0.8;

impl Ctx<'_> {
    /// Like [`interleaved`](Self::interleaved) for a point with no bound
    /// (a reported figure): a majority of `--reps` pairs.
    fn interleaved_majority<F, G>(
        &self,
        mut first: F,
        mut second: G,
    ) -> Result<(Vec<f64>, Vec<f64>)>
    where
        F: FnMut() -> Result<f64>,
        G: FnMut() -> Result<f64>,
    {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        while !settled(&b, f64::INFINITY, self.reps) {
            a.push(first()?);
            b.push(second()?);
        }
        Ok((a, b))
    }
}

/// Record a point, and show its result with the progress.
fn push(ctx: &Ctx, out: &mut Vec<Point>, p: Point) {
    ctx.say(&format!(
        "  -> {} {}: expected {:.1}, median {:.1} (min {:.1}, max {:.1}), error {:+.2}%",
        p.study,
        p.config,
        p.expected,
        p.measured.median,
        p.measured.min,
        p.measured.max,
        p.error_pct
    ));
    out.push(p);
}

fn check_output(prog: &str, out: &std::process::Output) -> Result<String> {
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        fail!(
            Failed,
            "{prog} failed ({}): {}",
            out.status,
            err.lines().last().unwrap_or("no message")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of `key` in a workload's output, or an error naming it.
fn need(prog: &str, output: &str, key: &str) -> Result<f64> {
    value_of(output, key).ok_or_else(|| {
        let line = output
            .lines()
            .last()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        Error::new(
            ErrorKind::Failed,
            format!("{prog} printed no '{key}=' value: {line}"),
        )
    })
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// Sizes of the study, full or quick.
struct Plan {
    memlat_lat: Vec<f64>,
    chains: Vec<u32>,
    chains_lat: f64,
    /// memlat arguments: (array MiB, accesses per chain).
    memlat_mib: u64,
    memlat_steps: u64,
    /// multilat: region MiB per array and accesses.
    multilat_mib: u64,
    multilat_accesses: u64,
    /// DRAM:PM ratios (Quartz's 10M:10M and 20M:10M configurations).
    multilat_ratio: Vec<(u64, u64)>,
    /// Pattern scales: ratio (2, 1) at scale 100 is 200 DRAM then 100 PM.
    multilat_scale: Vec<u64>,
    multilat_lat: Vec<f64>,
    mtlat_threads: Vec<u32>,
    mtlat_cs: u64,
    mtlat_k: u64,
    mtlat_mib: u64,
    mtlat_lat: f64,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                memlat_lat: vec![400.0, 1000.0],
                chains: vec![4],
                chains_lat: 400.0,
                memlat_mib: 256,
                memlat_steps: 1_000_000,
                multilat_mib: 128,
                multilat_accesses: 1_000_000,
                multilat_ratio: vec![(2, 1)],
                multilat_scale: vec![100, 10_000],
                multilat_lat: vec![400.0],
                mtlat_threads: vec![1, 4],
                mtlat_cs: 100,
                mtlat_k: 500,
                mtlat_mib: 128,
                mtlat_lat: 400.0,
            }
        } else {
            Plan {
                memlat_lat: vec![200.0, 300.0, 400.0, 600.0, 800.0, 1000.0, 2000.0],
                chains: vec![2, 4, 8],
                chains_lat: 400.0,
                // The calibration's region; 4M accesses dilute the first
                // pass over lines that the set-up left in the caches.
                memlat_mib: 256,
                memlat_steps: 4_000_000,
                multilat_mib: 128,
                multilat_accesses: 2_000_000,
                multilat_ratio: vec![(1, 1), (2, 1)],
                // 200:100 to 200000:100000 for 2:1, as Quartz section 4.6;
                // the 1000 scale, between two others that behave alike in
                // every run so far, is left out to keep the full study
                // under 20 minutes.
                multilat_scale: vec![100, 10_000, 100_000],
                multilat_lat: vec![200.0, 400.0, 700.0],
                mtlat_threads: vec![1, 2, 4, 8],
                mtlat_cs: 100,
                mtlat_k: 2_000,
                mtlat_mib: 256,
                mtlat_lat: 400.0,
            }
        }
    }
}

/// Run the study with `opts`; `say` hears each step and each point's
/// result as it comes, `note` what the calibration has to say (when none
/// is cached, it is measured first). Errors (a bad option, a workload that does not
/// build or run) end it; a missed target does not (see
/// [`Report::all_met`]).
pub fn run(opts: &Options, say: &dyn Fn(&str), note: &dyn Fn(calibrate::Note)) -> Result<Report> {
    if opts.reps == 0 || opts.reps > 100 {
        fail!(
            Invalid,
            "--reps {} is out of range: use 1 to 100 (5 or more for the study)",
            opts.reps
        );
    }
    let only: Vec<String> = match &opts.only {
        None => STUDIES.iter().map(|s| s.to_string()).collect(),
        Some(v) => {
            for x in v {
                if !STUDIES.contains(&x.as_str()) {
                    fail!(
                        Invalid,
                        "--only: unknown study '{x}': expected {}",
                        STUDIES.join(", ")
                    );
                }
            }
            v.clone()
        }
    };
    let wl = find_workloads(opts.workloads.as_deref())?;
    let tmp;
    let build = match &opts.build_dir {
        Some(d) => d.clone(),
        None => {
            tmp = TempDir::new()?;
            tmp.0.clone()
        }
    };
    let started = Instant::now();
    let (native, instr) = build_workloads(&opts.pmlab, &wl, &build)?;
    let mut cal = calibrate::cached_or_measure(note)?;
    // The effective last-level cache now: it moves with the neighbours'
    // use of a shared cache, and the workset study's bounds and the
    // model both depend on it. Kept in the cache for later runs.
    let user_llc = std::env::var_os("PMLAB_INSTR_LLC").is_some();
    if !user_llc {
        let (llc, curve) = calibrate::measure_effective_llc()?;
        cal.effective_llc_bytes = llc;
        cal.llc_curve = curve;
        calibrate::save(&cal)?;
    }
    let chaser = Chaser::new()?;
    let ctx = Ctx {
        pmlab: opts.pmlab.clone(),
        native,
        instr,
        reps: opts.reps,
        quick: opts.quick,
        dram_ns: cal.dram_latency_ns,
        llc_bytes: if cal.effective_llc_bytes > 0 && !user_llc {
            cal.effective_llc_bytes
        } else {
            cal.llc_bytes
        },
        instr_llc: if user_llc {
            None
        } else {
            calibrate::instr_llc_setting(&cal)
        },
        llc_now: std::cell::RefCell::new(None),
        chaser: std::cell::RefCell::new(chaser),
        // ~0.16 s a measurement (3 walks of 333,000 loads) in the full
        // study, which takes some 380 of them: the latency's drift over
        // the study (149-183 ns in the last idle run) is far above what
        // a third of 2M loads more would settle.
        chase_steps: if opts.quick { 500_000 } else { 1_000_000 },
        bounds: if opts.quick || opts.loose {
            Tolerances::LOOSE
        } else {
            Tolerances::TARGET
        },
        sample: opts.sample,
        say,
        skipped: Default::default(),
    };
    ctx.say(&format!(
        "calibrated DRAM latency {:.1} ns; last-level cache {} ({}); {} runs per point; latency studies' emulated runs with --sample {} (workset and bandwidth choose their own, device runs off)",
        ctx.dram_ns,
        pmlab_model::units::Bytes(ctx.llc_bytes),
        match (&ctx.instr_llc, user_llc) {
            (Some(v), _) => format!("effective, measured now; modelled as PMLAB_INSTR_LLC={v}"),
            (None, true) => "PMLAB_INSTR_LLC from the environment".to_string(),
            (None, false) => "sysfs: no knee in the chase curve".to_string(),
        },
        ctx.reps,
        ctx.sample
    ));
    let plan = Plan::new(opts.quick);
    let mut points = Vec::new();
    let want = |s: &str| only.iter().any(|x| x == s);
    if let Some(d) = &opts.device {
        device::study(&ctx, d, &mut points)?;
    }
    let want = |s: &str| opts.device.is_none() && want(s);
    // Short studies first, so that results show early; the long
    // working-set and multilat studies last but one, bandwidth last.
    type Study<'s> = Box<dyn Fn(&mut Vec<Point>) -> Result<()> + 's>;
    let studies: Vec<(&str, Study)> = vec![
        ("memlat", Box::new(|o| memlat_study(&ctx, &plan, o))),
        ("chains", Box::new(|o| chains_study(&ctx, &plan, o))),
        ("overhead", Box::new(|o| overhead_study(&ctx, &plan, o))),
        ("mtlat", Box::new(|o| mtlat_study(&ctx, &plan, o))),
        ("shapes", Box::new(|o| shapes::study(&ctx, o))),
        ("multilat", Box::new(|o| multilat_study(&ctx, &plan, o))),
        ("workset", Box::new(|o| workset::study(&ctx, o))),
        ("bandwidth", Box::new(|o| bandwidth::study(&ctx, o))),
    ];
    let chosen: Vec<&(&str, Study)> = studies.iter().filter(|(n, _)| want(n)).collect();
    let mut study_seconds = Vec::new();
    for (i, (name, f)) in chosen.iter().enumerate() {
        let t = Instant::now();
        ctx.say(&format!("[{}/{}] {name}", i + 1, chosen.len()));
        f(&mut points)?;
        study_seconds.push(StudyTime {
            study: name.to_string(),
            seconds: t.elapsed().as_secs_f64(),
            runs: points
                .iter()
                .filter(|p| p.study == *name)
                .map(|p| p.runs.len())
                .sum(),
        });
        ctx.say(&format!(
            "[{}/{}] {name} done in {:.0} s ({:.1} min so far)",
            i + 1,
            chosen.len(),
            t.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64() / 60.0
        ));
    }
    Ok(Report {
        machine: machine_line(),
        dram_latency_ns: ctx.dram_ns,
        quick: ctx.quick,
        tolerances: if ctx.bounds == Tolerances::LOOSE {
            "loose".into()
        } else {
            "target".into()
        },
        reps: ctx.reps,
        sample: ctx.sample.to_string(),
        llc_bytes: ctx.llc_bytes,
        llc_curve: cal.llc_curve.clone(),
        seconds: started.elapsed().as_secs_f64(),
        study_seconds,
        points,
        skipped: ctx.skipped.take(),
    })
}

/// The wall time of one study of a `pmlab validate` run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StudyTime {
    /// The study's name (of [`STUDIES`]).
    pub study: String,
    /// Its wall time, s (build and calibration not included).
    pub seconds: f64,
    /// The judged runs of its points (emulated runs; the native and
    /// reference runs beside them are not counted).
    pub runs: usize,
}

/// The study's results (`pmlab validate --json` writes it).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// CPU model and count.
    pub machine: String,
    /// The cached calibration (each emulated run was given a fresh
    /// measurement instead: `points[].dram_runs`).
    pub dram_latency_ns: f64,
    /// The quick plan ran.
    pub quick: bool,
    /// Which [`Tolerances`] judged the points: `target` or `loose`.
    pub tolerances: String,
    /// Runs per point at most (see [`settled`]).
    pub reps: usize,
    /// `--sample` of the latency studies' emulated runs (off, auto or a
    /// ratio; the workset and bandwidth studies choose their own).
    pub sample: String,
    /// The last-level cache the workset study classed regions by, bytes:
    /// the effective one measured at the study's start (else sysfs's).
    pub llc_bytes: u64,
    /// The native chase curve the effective LLC was found on (region
    /// bytes, ns per load); empty when not measured.
    pub llc_curve: Vec<(u64, f64)>,
    /// Wall time of the study, s.
    pub seconds: f64,
    /// Wall time of each study that ran, in the order run.
    pub study_seconds: Vec<StudyTime>,
    /// Every point, in the order measured.
    pub points: Vec<Point>,
    /// The target latencies left out as too close to this machine's DRAM
    /// latency.
    pub skipped: Vec<Skipped>,
}

impl Report {
    /// True when every judged point is within its bound.
    pub fn all_met(&self) -> bool {
        self.points.iter().all(|p| !p.judged() || p.ok())
    }
}

/// `--sample SAMPLE` for an emulated run whose own `flags` do not
/// choose a sampling (the workset and bandwidth studies' do), else
/// nothing.
fn sample_flags(sample: Sample, flags: &[String]) -> Vec<String> {
    if flags
        .iter()
        .any(|f| f == "--sample" || f.starts_with("--sample="))
    {
        return Vec::new();
    }
    vec![s("--sample"), sample.to_string()]
}

fn machine_line() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    format!("{cpu}, {n} CPUs")
}

fn memlat_args(p: &Plan, chains: u32) -> Vec<String> {
    vec![
        s("-c"),
        s(chains),
        s("-r"),
        s(p.memlat_mib),
        s("-n"),
        s(p.memlat_steps),
    ]
}

const MEMLAT_KEY: &str = "ns_per_access";

fn memlat_study(ctx: &Ctx, p: &Plan, out: &mut Vec<Point>) -> Result<()> {
    let args = memlat_args(p, 1);
    for lat in ctx.emulable("memlat", &p.memlat_lat) {
        ctx.say(&format!("memlat, 1 chain, {lat} ns"));
        let mut drams = Vec::new();
        let mut afters = Vec::new();
        let mut natives = Vec::new();
        let mut runs = Vec::new();
        // Each run against its own paired expectation, until the rest
        // cannot change the verdict.
        loop {
            natives.push(need("memlat", &ctx.native("memlat", &args)?, MEMLAT_KEY)?);
            let (o, dram) = ctx.emulated("memlat", &args, lat, false)?;
            drams.push(dram);
            afters.push(ctx.dram_now());
            runs.push(need("memlat", &o, MEMLAT_KEY)?);
            let errors: Vec<f64> = runs
                .iter()
                .zip(natives.iter().zip(&drams))
                .map(|(&r, (&n, &d))| error_pct(r, n + lat - d))
                .collect();
            if settled(&errors, ctx.bounds.memlat, ctx.reps) {
                break;
            }
        }
        push(
            ctx,
            out,
            memlat_point(lat, ctx.bounds.memlat, runs, natives, drams, afters),
        );
    }
    Ok(())
}

/// The memlat point at target `lat` from its emulated `runs`, the native
/// run made just before each, the DRAM latency each was given (`drams`)
/// and the one measured right after it (`afters`). Judged against
/// [`memlat_paired_expectation`], what a perfect emulator given those
/// DRAM figures reads; the error against `lat` itself, which also holds
/// the gap between the DRAM figure and memlat's own native cost (the
/// +1..+6% bias of the runs of 2026-11-24 followed the DRAM drift), is
/// the diagnostic `reference_error_pct`.
pub fn memlat_point(
    lat: f64,
    bound: f64,
    runs: Vec<f64>,
    natives: Vec<f64>,
    drams: Vec<f64>,
    afters: Vec<f64>,
) -> Point {
    let m = summarize(&runs);
    let paired = memlat_paired_expectation(&natives, &drams, lat);
    let adjusted: Vec<f64> = runs
        .iter()
        .zip(drams.iter().zip(&afters))
        .map(|(&r, (&given, &after))| drift_adjusted(r, given, after))
        .collect();
    Point {
        study: s("memlat"),
        config: s("chains=1"),
        target_ns: lat,
        unit: s("ns/access"),
        expected: paired,
        measured: m,
        error_pct: error_pct(m.median, paired),
        bound_pct: bound,
        detail: format!(
            "native run before each emulated run + ({lat} - DRAM measured just before it), median (native {:.1}, DRAM {:.1}); against {lat} ns itself {:+.2}%",
            summarize(&natives).median,
            summarize(&drams).median,
            error_pct(m.median, lat)
        ),
        runs,
        dram_runs: drams,
        dram_after_runs: afters,
        drift_adjusted_error_pct: Some(error_pct(summarize(&adjusted).median, lat)),
        reference_error_pct: Some(error_pct(m.median, lat)),
        native_runs: natives,
        ..Default::default()
    }
}

/// A memlat point's expectation: the median over repetitions of the
/// native run's ns per access plus the latency the emulator adds
/// (`target - DRAM`, the DRAM latency measured just before the emulated
/// run), i.e. what a perfect emulator given that DRAM figure reads.
pub fn memlat_paired_expectation(natives: &[f64], drams: &[f64], target: f64) -> f64 {
    let v: Vec<f64> = natives
        .iter()
        .zip(drams)
        .map(|(n, d)| n + target - d)
        .collect();
    summarize(&v).median
}

/// What [`scaled_point`] measures: `prog` with `args` at target latency
/// `lat`, reading `key` from its result line.
struct Scaled<'a> {
    /// The expectation and its description from the native median and
    /// the median DRAM latency the emulated runs were given.
    expect: &'a dyn Fn(f64, f64) -> (f64, String),
    prog: &'a str,
    key: &'a str,
    args: &'a [String],
    lat: f64,
    label: &'a str,
    study: &'a str,
    unit: &'a str,
    /// The bound on |error|, percent.
    bound: f64,
}

/// One point whose expectation derives from the native result (`w.expect`):
/// runs natively and emulated, each `--reps` times, judged against `w.bound`. `config`
/// names the point from the native median.
fn scaled_point(
    ctx: &Ctx,
    out: &mut Vec<Point>,
    w: Scaled<'_>,
    config: impl FnOnce(f64) -> String,
) -> Result<()> {
    ctx.say(&format!(
        "{}: native and {} ns, interleaved",
        w.label, w.lat
    ));
    let mut drams = Vec::new();
    let (native_runs, runs) = ctx.interleaved(
        || need(w.prog, &ctx.native(w.prog, w.args)?, w.key),
        || {
            let (o, dram) = ctx.emulated(w.prog, w.args, w.lat, false)?;
            drams.push(dram);
            need(w.prog, &o, w.key)
        },
    )?;
    let native = summarize(&native_runs);
    let m = summarize(&runs);
    let (expected, detail) = (w.expect)(native.median, summarize(&drams).median);
    push(
        ctx,
        out,
        Point {
            study: s(w.study),
            config: config(native.median),
            target_ns: w.lat,
            unit: s(w.unit),
            expected,
            measured: m,
            error_pct: error_pct(m.median, expected),
            bound_pct: w.bound,
            runs,
            detail,
            dram_runs: drams,
            ..Default::default()
        },
    );
    Ok(())
}

fn chains_study(ctx: &Ctx, p: &Plan, out: &mut Vec<Point>) -> Result<()> {
    let lat = p.chains_lat;
    if ctx.emulable("chains", &[lat]).is_empty() {
        return Ok(());
    }
    // The overlap the hardware achieves on DRAM carries over to slower
    // memory: every access scales by target / DRAM latency.
    let expect = |native: f64, dram: f64| {
        (
            native * lat / dram,
            format!("native {native:.1} ns/access x {lat} / {dram:.1}"),
        )
    };
    for &k in &p.chains {
        let args = memlat_args(p, k);
        scaled_point(
            ctx,
            out,
            Scaled {
                expect: &expect,
                prog: "memlat",
                key: MEMLAT_KEY,
                args: &args,
                lat,
                label: &format!("memlat, {k} chains"),
                study: "chains",
                unit: "ns/access",
                bound: ctx.bounds.chains,
            },
            |native| format!("chains={k} native={native:.1}ns"),
        )?;
        // The hooks' own time per access beside it (see `hooked_runs`).
        let hooked = ctx.reps(|| {
            need(
                "memlat",
                &ctx.emulated("memlat", &args, lat, true)?.0,
                MEMLAT_KEY,
            )
        })?;
        if let Some(p) = out.last_mut() {
            let h = summarize(&hooked).median;
            ctx.say(&format!(
                "     hooks alone (--no-inject): median {h:.1} ns/access{}",
                if h >= p.expected {
                    ", not below the expectation: the overhead exceeds the delay"
                } else {
                    ""
                }
            ));
            p.hooked_runs = hooked;
        }
    }
    Ok(())
}

/// A multilat pattern of `d` DRAM accesses followed by `p` PM accesses
/// (multilat's counted form, `200D100P`).
fn pattern(d: u64, p: u64) -> String {
    format!("{d}D{p}P")
}

fn multilat_study(ctx: &Ctx, p: &Plan, out: &mut Vec<Point>) -> Result<()> {
    let (mib, accesses) = (p.multilat_mib, p.multilat_accesses);
    let lats = ctx.emulable("multilat", &p.multilat_lat);
    if lats.is_empty() {
        return Ok(());
    }
    for &(rd, rp) in &p.multilat_ratio {
        for &scale in &p.multilat_scale {
            let (pd, pn) = (rd * scale, rp * scale);
            let args = vec![
                s("-p"),
                pattern(pd, pn),
                s("-r"),
                s(mib),
                s("-n"),
                s(accesses),
            ];
            ctx.say(&format!(
                "multilat {mib} MiB x2, {accesses} accesses, pattern {pd}:{pn}: native and {:?} ns, interleaved",
                lats
            ));
            // Natively both arrays are DRAM: the run's time per access is
            // this workload's DRAM latency (memory, TLB and loop together).
            // Each repetition runs the native build and then, for every
            // latency, the emulator-free reference (the native build
            // waiting `lat - DRAM` per PM access, `multilat -x`) and the
            // emulated run, both given the DRAM latency measured just
            // before them, so that the machine's drift over the minutes of
            // a point touches the baseline and the emulated runs alike.
            let mut native_runs = Vec::new();
            let mut runs: Vec<ReferencedRuns> = vec![ReferencedRuns::default(); lats.len()];
            let mut counts = (f64::NAN, f64::NAN);
            // Adaptive: stops once no latency's verdict can change.
            while !multilat_settled(&native_runs, &runs, counts, &lats, ctx) {
                native_runs.push(need(
                    "multilat",
                    &ctx.native("multilat", &args)?,
                    "elapsed_ns",
                )?);
                for (k, &lat) in lats.iter().enumerate() {
                    let dram = ctx.dram_now();
                    let r = &mut runs[k];
                    r.reference
                        .push(ctx.reference("multilat", &args, lat, dram)?);
                    let o = ctx.emulated_given("multilat", &args, lat, false, dram)?;
                    r.dram.push(dram);
                    if !o.contains("pm=pmalloc") {
                        fail!(
                            Failed,
                            "multilat did not get its PM array from pmalloc under pmlab run"
                        );
                    }
                    counts = (
                        need("multilat", &o, "dram_accesses")?,
                        need("multilat", &o, "pm_accesses")?,
                    );
                    r.emulated.push(need("multilat", &o, "elapsed_ns")?);
                }
            }
            for (&lat, mut r) in lats.iter().zip(runs) {
                r.native = native_runs.clone();
                let config = format!("{rd}:{rp} pattern={pd}:{pn}");
                let mut point = multilat_point(config, lat, counts, r);
                point.bound_pct = ctx.bounds.multilat;
                push(ctx, out, point);
            }
        }
    }
    Ok(())
}

/// Whether a multilat configuration's repetitions so far settle every
/// latency's verdict ([`settled`]): each repetition's emulated run
/// against the formula with that repetition's native run and DRAM
/// latency.
fn multilat_settled(
    native: &[f64],
    runs: &[ReferencedRuns],
    (nd, nn): (f64, f64),
    lats: &[f64],
    ctx: &Ctx,
) -> bool {
    runs.iter().zip(lats).all(|(r, &lat)| {
        let errors: Vec<f64> = r
            .emulated
            .iter()
            .zip(native.iter().zip(&r.dram))
            .map(|(&e, (&n, &d))| error_pct(e, multilat_expectation(n, nd, nn, d, lat).0))
            .collect();
        settled(&errors, ctx.bounds.multilat, ctx.reps)
    })
}

/// The measured runs of one mtlat or multilat point, all in ns: the
/// native build, the emulator-free reference (the native build waiting
/// `target - DRAM` ns of its own CPU time per access it would make at the
/// target, `-x`: after each stretch of steps for mtlat, each run of PM
/// accesses for multilat), the emulated build, and the DRAM latency
/// measured before each pair of reference and emulated run (which both
/// got it).
#[derive(Debug, Clone, Default)]
pub struct ReferencedRuns {
    /// The native build's run times.
    pub native: Vec<f64>,
    /// The reference's run times.
    pub reference: Vec<f64>,
    /// The emulated run times.
    pub emulated: Vec<f64>,
    /// The DRAM latency before each reference and emulated run.
    pub dram: Vec<f64>,
}

/// A multilat point from its runs and the timed loop's (DRAM, PM) access
/// counts: judged against the formula ([`multilat_expectation`]) within
/// [`Tolerances::TARGET`]'s bound (the study sets its own); the
/// reference, the same waits with no emulator, is a diagnostic beside it:
/// `reference_formula_pct` is how far this machine alone reads from the
/// formula (the host slows a chase down after a pause, `docs/accuracy.md`),
/// `reference_error_pct` what the emulator adds to that.
pub fn multilat_point(config: String, target: f64, counts: (f64, f64), r: ReferencedRuns) -> Point {
    let (nd, nn) = counts;
    let native = summarize(&r.native).median;
    let dram = summarize(&r.dram).median;
    let (expected, detail) = multilat_expectation(native, nd, nn, dram, target);
    let reference = summarize(&r.reference).median;
    let m = summarize(&r.emulated);
    Point {
        study: s("multilat"),
        config,
        target_ns: target,
        unit: s("ns"),
        expected,
        measured: m,
        error_pct: error_pct(m.median, expected),
        bound_pct: 2.0,
        runs: r.emulated,
        detail: format!(
            "{detail}; reference (native build, {target} - DRAM ns of CPU-holding wait per PM access, multilat -x): {:.2} ms",
            reference / 1e6
        ),
        dram_runs: r.dram,
        reference_runs: r.reference,
        reference_error_pct: Some(error_pct(m.median, reference)),
        reference_formula_pct: Some(error_pct(reference, expected)),
        native_runs: r.native,
        ..Default::default()
    }
}

/// multilat's expectation, `Num_DRAM x DRAM_lat + Num_NVM x NVM_lat`, with
/// DRAM_lat the workload's native ns per access (`native_ns` over all
/// `nd + nn` accesses, every one DRAM when run natively) and NVM_lat that
/// plus the latency the emulator adds, `target - dram`: the native time
/// plus `nn x (target - dram)`. The description also gives the literal
/// formula with `dram` as DRAM_lat (which leaves out the time per access
/// that is not the memory's: the loop, the TLB).
pub fn multilat_expectation(
    native_ns: f64,
    nd: f64,
    nn: f64,
    dram: f64,
    target: f64,
) -> (f64, String) {
    let per = native_ns / (nd + nn);
    let expected = nd * per + nn * (per + target - dram);
    let literal = nd * dram + nn * target;
    (
        expected,
        format!(
            "{nd} x {per:.1} + {nn} x ({per:.1} + {target} - {dram:.1}) ns (native {per:.1} ns/access); literally, with DRAM_lat = {dram:.1} ns: {:.2} ms",
            literal / 1e6
        ),
    )
}

/// Accesses on the critical path of mtlat's schedule: `threads` threads
/// each run `k` sections of `inside` serial steps under one lock and
/// `outside` steps of their own chain between sections, on `cpus` CPUs.
/// The sections run one at a time; the outside steps overlap them, as far
/// as the CPUs let all the work run: the longer of the two bounds.
pub fn mtlat_critical_accesses(threads: u64, k: u64, inside: u64, outside: u64, cpus: u64) -> f64 {
    let sections = (threads * k * inside) as f64;
    let spread = (threads * k * (inside + outside)) as f64 / threads.min(cpus).max(1) as f64;
    sections.max(spread)
}

const MTLAT_KEY: &str = "elapsed_ns";

/// An mtlat point from its runs: judged against the reference's median
/// (within [`Tolerances::TARGET`]'s bound; the study sets its own),
/// the schedule the program keeps when every access costs the target
/// latency, measured on this machine without the emulator. The
/// critical-path formula (native time + `critical` accesses x (target -
/// DRAM)) is a lower bound beside it (`formula_error_pct`): it leaves out
/// what grows with the latency besides the accesses (a waiter that falls
/// asleep on a longer section has to be woken: a system call, and on a VM
/// an interrupt to its CPU, on the lock's critical path; the scheduler's
/// choices when more threads are runnable than there are CPUs; the host's
/// slower chases after a pause), which the reference and the emulated
/// run both meet. In every run since session 5 the reference read above
/// the formula, by 0.6-5% at 1 thread and up to 33% at 8.
pub fn mtlat_point(
    config: String,
    target: f64,
    critical: f64,
    cpus: u64,
    r: ReferencedRuns,
) -> Point {
    let native = summarize(&r.native).median;
    let dram = summarize(&r.dram).median;
    let formula = native + critical * (target - dram);
    let reference = summarize(&r.reference).median;
    let m = summarize(&r.emulated);
    Point {
        study: s("mtlat"),
        config,
        target_ns: target,
        unit: s("ns"),
        expected: reference,
        measured: m,
        error_pct: error_pct(m.median, reference),
        bound_pct: 5.0,
        runs: r.emulated,
        detail: format!(
            "expected: the reference (native build, {target} - DRAM ns of CPU-holding wait per access, mtlat -x): {:.2} ms; critical-path formula (a lower bound): native {:.2} ms + {critical} critical-path accesses x ({target} - {dram:.1}) ns ({cpus} CPUs) = {:.2} ms",
            reference / 1e6,
            native / 1e6,
            formula / 1e6
        ),
        dram_runs: r.dram,
        formula_error_pct: Some(error_pct(m.median, formula)),
        reference_runs: r.reference,
        ..Default::default()
    }
}

/// Repetitions of an mtlat point with `threads` threads on `cpus` CPUs,
/// given `reps`: twice as many where more threads than CPUs are runnable.
/// There the scheduler, which does not know who holds the lock, decides
/// the order of sections and work from run to run, and single runs of
/// the reference and of the emulated build spread over 10-20% (4 threads
/// with work outside on 2 vCPUs: the reference 540-665 ms, the emulated
/// runs 546-710 ms in one run of five repetitions), a spread a median of
/// five cannot pin to the 5% target.
pub fn mtlat_reps(reps: usize, threads: u64, cpus: u64) -> usize {
    if threads > cpus {
        2 * reps
    } else {
        reps
    }
}

fn mtlat_study(ctx: &Ctx, p: &Plan, out: &mut Vec<Point>) -> Result<()> {
    let lat = p.mtlat_lat;
    if ctx.emulable("mtlat", &[lat]).is_empty() {
        return Ok(());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    for &outside in &[false, true] {
        for &n in &p.mtlat_threads {
            let out_steps = if outside { p.mtlat_cs } else { 0 };
            let crit = mtlat_critical_accesses(n as u64, p.mtlat_k, p.mtlat_cs, out_steps, cpus);
            let args = vec![
                s("-t"),
                s(n),
                s("-k"),
                s(p.mtlat_k),
                s("-i"),
                s(p.mtlat_cs),
                s("-o"),
                s(out_steps),
                s("-r"),
                s(p.mtlat_mib),
            ];
            let what = if outside {
                "with work outside"
            } else {
                "cs only"
            };
            ctx.say(&format!(
                "mtlat {n} threads, {what}: native, reference and {lat} ns, interleaved"
            ));
            // Per repetition: the native build; the native build again with
            // every access followed by (lat - DRAM) ns of CPU-holding wait
            // (`mtlat -x`): the schedule with every access at `lat`, no
            // emulator involved; then the emulated run, given the same DRAM
            // latency, measured just before the two.
            let mut r = ReferencedRuns::default();
            let max = mtlat_reps(ctx.reps, n as u64, cpus);
            // Adaptive: each emulated run against its own repetition's
            // reference, until the rest cannot change the verdict.
            while !settled(
                &r.emulated
                    .iter()
                    .zip(&r.reference)
                    .map(|(&e, &x)| error_pct(e, x))
                    .collect::<Vec<_>>(),
                ctx.bounds.mtlat,
                max,
            ) {
                r.native
                    .push(need("mtlat", &ctx.native("mtlat", &args)?, MTLAT_KEY)?);
                let dram = ctx.dram_now();
                r.reference.push(ctx.reference("mtlat", &args, lat, dram)?);
                let o = ctx.emulated_given("mtlat", &args, lat, false, dram)?;
                r.dram.push(dram);
                r.emulated.push(need("mtlat", &o, MTLAT_KEY)?);
            }
            let config = format!("threads={n} {}", if outside { "cs+out" } else { "cs-only" });
            let mut point = mtlat_point(config, lat, crit, cpus, r);
            point.bound_pct = ctx.bounds.mtlat;
            push(ctx, out, point);
        }
    }
    Ok(())
}

fn overhead_study(ctx: &Ctx, p: &Plan, out: &mut Vec<Point>) -> Result<()> {
    let args = memlat_args(p, 1);
    ctx.say("overhead: memlat native and --no-inject, interleaved");
    let (native_runs, runs) = ctx.interleaved_majority(
        || need("memlat", &ctx.native("memlat", &args)?, MEMLAT_KEY),
        || {
            need(
                "memlat",
                // Nothing is injected: any target above DRAM will do.
                &ctx.emulated("memlat", &args, 400f64.max(2.0 * ctx.dram_ns), true)?
                    .0,
                MEMLAT_KEY,
            )
        },
    )?;
    let native = summarize(&native_runs);
    let m = summarize(&runs);
    push(
        ctx,
        out,
        Point {
            study: s("overhead"),
            config: s("memlat chains=1 --no-inject vs native"),
            target_ns: 0.0,
            unit: s("ns/access"),
            expected: native.median,
            measured: m,
            error_pct: error_pct(m.median, native.median),
            bound_pct: f64::INFINITY,
            runs,
            ..Default::default()
        },
    );
    Ok(())
}

/// Write `chart` as `DIR/STEM.svg` and `DIR/STEM.png`.
fn save_both(dir: &Path, chart: &pmlab_plot::LineChart, stem: &str) -> Result<()> {
    for ext in ["svg", "png"] {
        let path = dir.join(format!("{stem}.{ext}"));
        chart.save(&path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot write {}: {e}", path.display()),
            )
        })?;
    }
    Ok(())
}

/// A judged point from its runs: the median against `expected`, within
/// `bound` percent.
#[allow(clippy::too_many_arguments)]
fn simple_point(
    study: &str,
    config: String,
    target_ns: f64,
    unit: &str,
    expected: f64,
    runs: Vec<f64>,
    bound: f64,
    detail: String,
    dram_runs: Vec<f64>,
) -> Point {
    let m = summarize(&runs);
    Point {
        study: s(study),
        config,
        target_ns,
        unit: s(unit),
        expected,
        measured: m,
        error_pct: error_pct(m.median, expected),
        bound_pct: bound,
        runs,
        detail,
        dram_runs,
        ..Default::default()
    }
}

/// One chart per study (SVG; the shapes, workset and bandwidth studies'
/// also PNG): measured medians with min..max bars against the expected
/// values.
pub fn write_plots(dir: &Path, points: &[Point]) -> Result<()> {
    use pmlab_plot::{Axis, Format, LineChart, Series};
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    shapes::plot(dir, points)?;
    workset::plot(dir, points)?;
    bandwidth::plot(dir, points)?;
    device::plot(dir, points)?;
    let save = |chart: LineChart, name: &str| -> Result<()> {
        let path = dir.join(name);
        chart.save(&path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot write {}: {e}", path.display()),
            )
        })
    };
    let pick = |study: &str| {
        points
            .iter()
            .filter(|p| p.study == study)
            .collect::<Vec<_>>()
    };
    let series = |v: &[&Point], x: &dyn Fn(&Point) -> f64, scale: f64| {
        let measured = Series::new(
            "measured (median, min..max)",
            v.iter()
                .map(|p| (x(p), p.measured.median * scale))
                .collect(),
        )
        .spread(
            v.iter()
                .map(|p| (p.measured.min * scale, p.measured.max * scale))
                .collect(),
        );
        let expected = Series::new(
            "expected",
            v.iter().map(|p| (x(p), p.expected * scale)).collect(),
        );
        (measured, expected)
    };
    let memlat = pick("memlat");
    if !memlat.is_empty() {
        let (m, e) = series(&memlat, &|p| p.target_ns, 1.0);
        save(
            LineChart::new("memlat, 1 chain: ns per access under emulation")
                .x_axis(Axis::new("target PM latency").format(Format::Nanos))
                .y_axis(Axis::new("measured latency").format(Format::Nanos))
                .series(e)
                .series(m),
            "memlat.svg",
        )?;
    }
    let chains = pick("chains");
    if !chains.is_empty() {
        let k = |p: &Point| {
            p.config
                .split_whitespace()
                .find_map(|t| t.strip_prefix("chains="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        let (m, e) = series(&chains, &k, 1.0);
        save(
            LineChart::new("memlat, several chains at 400 ns")
                .x_axis(Axis::new("chains"))
                .y_axis(Axis::new("ns per access").format(Format::Nanos))
                .series(e)
                .series(m),
            "chains.svg",
        )?;
    }
    let multilat = pick("multilat");
    if !multilat.is_empty() {
        let mut chart = LineChart::new("multilat: error of the run time")
            .x_axis(Axis::new("target PM latency").format(Format::Nanos))
            .y_axis(Axis::new("error %"));
        let mut configs: Vec<&str> = multilat.iter().map(|p| p.config.as_str()).collect();
        configs.dedup();
        for c in configs {
            let pts = multilat
                .iter()
                .filter(|p| p.config == c)
                .map(|p| (p.target_ns, p.error_pct))
                .collect();
            chart = chart.series(Series::new(c, pts));
        }
        save(chart, "multilat.svg")?;
    }
    let mtlat = pick("mtlat");
    for (tag, title) in [
        ("cs-only", "critical sections only"),
        ("cs+out", "with work outside"),
    ] {
        let v: Vec<&Point> = mtlat
            .iter()
            .copied()
            .filter(|p| p.config.ends_with(tag))
            .collect();
        if v.is_empty() {
            continue;
        }
        let n = |p: &Point| {
            p.config
                .split_whitespace()
                .find_map(|t| t.strip_prefix("threads="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        let (m, e) = series(&v, &n, 1.0);
        let file = format!("mtlat-{}.svg", tag.replace('+', "-"));
        save(
            LineChart::new(format!("mtlat, {title}, 400 ns"))
                .x_axis(Axis::new("threads"))
                .y_axis(Axis::new("run time").format(Format::Nanos))
                .series(e)
                .series(m),
            &file,
        )?;
    }
    Ok(())
}

/// Find the workloads' source directory.
fn find_workloads(given: Option<&Path>) -> Result<PathBuf> {
    let has = |d: &Path| d.join("memlat.c").is_file();
    if let Some(d) = given {
        if has(d) {
            return Ok(d.to_path_buf());
        }
        fail!(
            NotFound,
            "--workloads {}: no memlat.c there; point it at pmlab's workloads/ directory",
            d.display()
        );
    }
    let mut cands = vec![PathBuf::from("workloads")];
    if let Ok(exe) = std::env::current_exe() {
        // target/<profile>/pmlab -> the source tree
        for up in exe.ancestors().skip(1).take(4) {
            cands.push(up.join("workloads"));
        }
    }
    cands.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../workloads"));
    cands
        .into_iter()
        .find(|d| has(d))
        .ok_or_else(|| {
            Error::new(ErrorKind::NotFound, "cannot find the workloads (workloads/memlat.c): run from the pmlab source tree or pass --workloads DIR")
        })
}

/// The workloads `pmlab validate` builds and runs.
pub const WORKLOADS: &[&str] = &[
    "memlat",
    "lenschase",
    "multilat",
    "mtlat",
    "idxchase",
    "hashprobe",
    "bptree",
    "skiplist",
    "stream",
];

/// Build the [`WORKLOADS`] natively (clang) and with `pmlab cc`.
fn build_workloads(pmlab: &Path, wl: &Path, build: &Path) -> Result<(PathBuf, PathBuf)> {
    let native = build.join("native");
    let instr = build.join("instrumented");
    std::fs::create_dir_all(&native)
        .and_then(|_| std::fs::create_dir_all(&instr))
        .with_context(|| format!("cannot create {}", build.display()))?;
    let include = wl.join("../include");
    let cc = crate::cc::find_compiler(crate::cc::Lang::C, false)?;
    for prog in WORKLOADS {
        let src = wl.join(format!("{prog}.c"));
        for (dir, instrumented) in [(&native, false), (&instr, true)] {
            let mut cmd = if instrumented {
                let mut c = Command::new(pmlab);
                c.arg("cc");
                c
            } else {
                Command::new(&cc)
            };
            cmd.args(["-O2", "-g", "-std=gnu11"])
                .arg("-I")
                .arg(&include)
                .arg("-o")
                .arg(dir.join(prog))
                .arg(&src)
                .args(["-lpthread", "-lm"]);
            if !instrumented {
                // The native build uses the PM API too (multilat): link it.
                let lib = crate::cc::runtime_dir()?;
                cmd.arg(format!("-L{}", lib.display()))
                    .arg(format!("-Wl,-rpath,{}", lib.display()))
                    .arg("-lpmlab");
            }
            let out = cmd
                .output()
                .with_context(|| format!("cannot run the compiler for {prog}"))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                fail!(
                    Failed,
                    "building {} failed: {}",
                    src.display(),
                    err.lines()
                        .find(|l| l.contains("error"))
                        .unwrap_or("see the compiler")
                );
            }
        }
        if !crate::elf::is_instrumented(&instr.join(prog))? {
            fail!(
                Failed,
                "{prog} built by pmlab cc is not instrumented: check clang's -fsanitize-coverage support"
            );
        }
    }
    Ok((native, instr))
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let p = std::env::temp_dir().join(format!("pmlab-validate-{}", std::process::id()));
        std::fs::create_dir_all(&p).with_context(|| format!("cannot create {}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn targets_too_close_to_dram_are_left_out() {
        // A host whose DRAM reads 212.9 ns: 200 ns cannot be emulated,
        // 266 ns (1.25 x) is the lowest that runs.
        let (keep, out) = emulable_split(&[200.0, 266.2, 300.0, 1000.0], 212.9);
        assert_eq!(keep, vec![266.2, 300.0, 1000.0]);
        assert_eq!(out, vec![200.0]);
        let (keep, out) = emulable_split(&[200.0, 400.0], 150.0);
        assert_eq!((keep.len(), out.len()), (2, 0));
    }

    use super::*;

    #[test]
    fn runs_without_their_own_sampling_take_the_study_s() {
        assert_eq!(
            sample_flags(Sample::Auto, &[s("--pm-bandwidth"), s("1GB/s")]),
            vec![s("--sample"), s("auto")]
        );
        assert_eq!(
            sample_flags(Sample::Ratio(0.01), &[]),
            vec![s("--sample"), s("0.01")]
        );
        // The workset and bandwidth studies' own choice stands.
        assert!(sample_flags(Sample::Off, &[s("--sample"), s("0.01")]).is_empty());
        assert!(sample_flags(Sample::Off, &[s("--sample=auto")]).is_empty());
    }

    #[test]
    fn summary_is_median_and_range() {
        let m = summarize(&[5.0, 1.0, 3.0]);
        assert_eq!((m.median, m.min, m.max), (3.0, 1.0, 5.0));
        assert_eq!(summarize(&[1.0, 2.0, 4.0, 10.0]).median, 3.0);
        assert!(summarize(&[]).median.is_nan());
    }

    #[test]
    fn values_are_parsed_from_key_value_lines() {
        let out = "warming up\nworkload=memlat chains=1 ns_per_access=101.5 seconds=0.2\n";
        assert_eq!(value_of(out, "ns_per_access"), Some(101.5));
        assert_eq!(value_of(out, "seconds"), Some(0.2));
        assert_eq!(value_of(out, "missing"), None);
        assert_eq!(value_of("x=abc\n", "x"), None);
    }

    #[test]
    fn drift_adjustment_takes_half_the_drift_off() {
        // Given 170 ns, 180 ns after: DRAM cost ~175 during the run, so a
        // run of 405 ns at 400 ns would have read 400 on a steady machine.
        assert!((drift_adjusted(405.0, 170.0, 180.0) - 400.0).abs() < 1e-12);
        // No drift, no change; a falling latency raises the figure.
        assert_eq!(drift_adjusted(401.0, 170.0, 170.0), 401.0);
        assert!((drift_adjusted(395.0, 180.0, 170.0) - 400.0).abs() < 1e-12);
    }

    #[test]
    fn error_is_signed_percent() {
        assert!((error_pct(102.0, 100.0) - 2.0).abs() < 1e-12);
        assert!((error_pct(95.0, 100.0) + 5.0).abs() < 1e-12);
    }

    fn point(study: &str, config: &str, target: f64, expected: f64, runs: Vec<f64>) -> Point {
        let m = summarize(&runs);
        Point {
            study: study.into(),
            config: config.into(),
            target_ns: target,
            unit: "ns/access".into(),
            expected,
            measured: m,
            error_pct: error_pct(m.median, expected),
            bound_pct: 2.0,
            runs,
            dram_runs: vec![165.0, 170.0, 168.0],
            ..Default::default()
        }
    }

    #[test]
    fn multilat_expectation_adds_the_extra_latency_to_the_native_run() {
        // 2M accesses at 173 ns natively, a third of them PM: each PM access
        // costs the native 173 plus 400 - 164 = 236 ns more.
        let (e, detail) = multilat_expectation(346e6, 1_333_333.0, 666_667.0, 164.0, 400.0);
        assert!((e - (346e6 + 666_667.0 * 236.0)).abs() < 1.0, "{e}");
        // The literal formula with the calibrated DRAM latency is given too.
        let literal = (1_333_333.0 * 164.0 + 666_667.0 * 400.0) / 1e6;
        assert!(detail.contains(&format!("{literal:.2} ms")), "{detail}");
        // When the workload's time per access is the calibrated latency, the
        // two forms agree.
        let (e2, _) = multilat_expectation(2e6 * 164.0, 1e6, 1e6, 164.0, 700.0);
        assert!((e2 - (1e6 * 164.0 + 1e6 * 700.0)).abs() < 1.0);
    }

    #[test]
    fn multilat_is_judged_against_the_formula_with_the_reference_beside() {
        // 1M DRAM and 1M PM accesses at 400 ns; native 330 ms, DRAM 165 ns:
        // the formula expects 330 + 1M x 235 ns = 565 ms.
        let runs = ReferencedRuns {
            native: vec![329e6, 330e6, 345e6],
            reference: vec![570e6, 576.3e6, 600e6],
            emulated: vec![571e6, 582e6, 590e6],
            dram: vec![160.0, 165.0, 170.0],
        };
        let p = multilat_point(s("1:1"), 400.0, (1e6, 1e6), runs);
        assert!((p.expected - 565e6).abs() < 1.0, "{}", p.expected);
        assert_eq!(p.measured.median, 582e6);
        // The verdict is the formula's: +3.01%, over the 2% bound.
        assert!((p.error_pct - 3.009).abs() < 0.01, "{}", p.error_pct);
        assert!(!p.ok());
        // This machine alone, with the same waits, reads +2% from the
        // formula; the emulator adds +0.99% to that.
        let host = p.reference_formula_pct.unwrap();
        assert!((host - 2.0).abs() < 0.01, "{host}");
        let own = p.reference_error_pct.unwrap();
        assert!((own - 0.99).abs() < 0.01, "{own}");
        assert_eq!(p.reference_runs.len(), 3);
        assert_eq!(p.native_runs.len(), 3);
        assert!(p.detail.contains("576.30 ms"), "{}", p.detail);
    }

    #[test]
    fn memlat_is_judged_against_its_paired_expectation() {
        // Natives 150/154/160 at DRAM 148/150/151: expected 404 at 400 ns.
        // Runs read 406..410: +1.0% against it, within 2%, though +2% and
        // more against 400 ns itself (the DRAM figure's gap).
        let p = memlat_point(
            400.0,
            2.0,
            vec![406.0, 408.0, 410.0],
            vec![150.0, 154.0, 160.0],
            vec![148.0, 150.0, 151.0],
            vec![149.0, 150.0, 152.0],
        );
        assert_eq!(p.expected, 404.0);
        assert!((p.error_pct - 0.990).abs() < 0.01, "{}", p.error_pct);
        assert!(p.ok());
        assert!((p.reference_error_pct.unwrap() - 2.0).abs() < 1e-9);
        assert!(
            p.detail.contains("against 400 ns itself +2.00%"),
            "{}",
            p.detail
        );
        // A run off its expectation by 3% misses, whatever L says.
        let p = memlat_point(
            400.0,
            2.0,
            vec![390.0],
            vec![150.0],
            vec![140.0],
            vec![140.0],
        );
        assert_eq!(p.expected, 410.0);
        assert!(!p.ok());
        assert!((p.reference_error_pct.unwrap() + 2.5).abs() < 1e-9);
    }

    #[test]
    fn memlat_paired_expectation_adds_the_latency_to_each_native_run() {
        // Native 150, 154, 160 ns with DRAM measured at 148, 150, 151:
        // 402, 404, 409 at 400 ns; the median 404.
        let e = memlat_paired_expectation(&[150.0, 154.0, 160.0], &[148.0, 150.0, 151.0], 400.0);
        assert_eq!(e, 404.0);
    }

    #[test]
    fn oversubscribed_mtlat_points_run_twice_the_repetitions() {
        assert_eq!(mtlat_reps(5, 1, 2), 5);
        assert_eq!(mtlat_reps(5, 2, 2), 5);
        assert_eq!(mtlat_reps(5, 4, 2), 10);
        assert_eq!(mtlat_reps(3, 8, 2), 6);
        assert_eq!(mtlat_reps(5, 8, 16), 5);
    }

    #[test]
    fn mtlat_critical_path_is_the_sections_or_the_work_per_cpu() {
        // One thread: everything is on the path.
        assert_eq!(mtlat_critical_accesses(1, 10, 100, 0, 2), 1_000.0);
        assert_eq!(mtlat_critical_accesses(1, 10, 100, 100, 2), 2_000.0);
        // Sections serialise: 4 threads x 10 x 100.
        assert_eq!(mtlat_critical_accesses(4, 10, 100, 0, 2), 4_000.0);
        // Outside work as long as the sections on 2 CPUs: hidden behind them.
        assert_eq!(mtlat_critical_accesses(4, 10, 100, 100, 2), 4_000.0);
        // Outside work three times longer: the CPUs are the bound.
        assert_eq!(mtlat_critical_accesses(4, 10, 100, 300, 2), 8_000.0);
        // More CPUs than threads: each thread has its own.
        assert_eq!(mtlat_critical_accesses(2, 10, 100, 300, 8), 4_000.0);
    }

    #[test]
    fn mtlat_is_judged_against_the_reference_with_the_formula_beside() {
        // 1 thread, 1000 critical-path accesses: native 1 ms, DRAM 150 ns,
        // target 400: the formula says 1 ms + 1000 x 250 ns = 1.25 ms; the
        // reference measured 1.3 ms, the emulator 1.326 ms.
        let p = mtlat_point(
            "threads=1 cs-only".into(),
            400.0,
            1000.0,
            2,
            ReferencedRuns {
                native: vec![1.0e6, 0.9e6, 1.1e6],
                reference: vec![1.3e6, 1.2e6, 1.4e6],
                emulated: vec![1.326e6, 1.3e6, 1.35e6],
                dram: vec![150.0, 140.0, 160.0],
            },
        );
        assert_eq!(p.expected, 1.3e6);
        assert!((p.error_pct - 2.0).abs() < 1e-9, "{}", p.error_pct);
        assert!(p.ok());
        let f = p.formula_error_pct.unwrap();
        assert!((f - 6.08).abs() < 1e-9, "{f}");
        assert_eq!(p.reference_runs.len(), 3);
        assert!(p.detail.contains("1.25 ms"), "{}", p.detail);
    }

    /// A point of `study` at 400 ns measured at `measured` with the
    /// given bound.
    fn judged(expected: f64, measured: f64, bound: f64) -> Point {
        let mut p = point("memlat", "chains=1", 400.0, expected, vec![measured]);
        p.bound_pct = bound;
        p
    }

    #[test]
    fn loose_tolerances_pass_noise_and_fail_a_broken_model() {
        let l = Tolerances::LOOSE;
        // memlat at 400 ns with DRAM at 165 ns: a model that injects
        // nothing reads the DRAM latency, one that injects twice reads
        // 165 + 2 x 235 = 635 ns; a loaded machine reads within 6%.
        assert!(!judged(400.0, 165.0, l.memlat).ok());
        assert!(!judged(400.0, 635.0, l.memlat).ok());
        assert!(judged(400.0, 424.0, l.memlat).ok());
        assert!(judged(400.0, 376.0, l.memlat).ok());
        // multilat 2:1 at 400 ns: 2M accesses at 170 ns natively, a third
        // PM; expected 340 ms + 666,667 x 235 ns = 496.7 ms. Nothing
        // injected reads 340 ms, twice 653.3 ms.
        let expected = 340e6 + 666_667.0 * 235.0;
        assert!(!judged(expected, 340e6, l.multilat).ok());
        assert!(!judged(expected, 340e6 + 2.0 * 666_667.0 * 235.0, l.multilat).ok());
        assert!(judged(expected, expected * 1.05, l.multilat).ok());
        // chains: 4 chains of 50 ns natively at 165 ns DRAM, 400 ns target:
        // 121.2 ns expected; nothing injected reads the native 50.
        assert!(!judged(50.0 * 400.0 / 165.0, 50.0, l.chains).ok());
        assert!(judged(50.0 * 400.0 / 165.0, 127.0, l.chains).ok());
        // The targets are tighter than the loose bounds everywhere.
        let t = Tolerances::TARGET;
        for (a, b) in [
            (t.memlat, l.memlat),
            (t.chains, l.chains),
            (t.multilat, l.multilat),
            (t.mtlat, l.mtlat),
        ] {
            assert!(a < b);
        }
        assert!(!judged(400.0, 424.0, t.memlat).ok());
    }

    #[test]
    fn repetitions_stop_once_the_rest_cannot_change_the_verdict() {
        // Fewer than a majority of 5: never settled.
        assert!(!settled(&[0.1, 0.2], 2.0, 5));
        // Three of five within 80% of a 2% bound: the median of five lies
        // within their range, so the point passes whatever comes.
        assert!(settled(&[0.1, -1.2, 1.5], 2.0, 5));
        // One of them near the bound (or past it): two more runs could
        // move the median across it.
        assert!(!settled(&[0.1, -1.2, 1.7], 2.0, 5));
        assert!(!settled(&[0.1, 3.0, 4.0], 2.0, 5));
        // All past the bound on one side: a miss either way.
        assert!(settled(&[3.0, 4.4, 2.6], 2.0, 5));
        assert!(settled(&[-3.0, -4.4, -2.6], 2.0, 5));
        // Past it on both sides: not settled.
        assert!(!settled(&[-3.0, 4.4, 2.6], 2.0, 5));
        // The last repetition always ends; unknown errors never settle
        // early; a point with no bound stops at the majority.
        assert!(settled(&[9.0, -9.0, 0.0, 1.0, 2.0], 2.0, 5));
        assert!(!settled(&[f64::NAN, 0.1, 0.1], 2.0, 5));
        assert!(settled(&[50.0, 1.0, 2.0], f64::INFINITY, 5));
        assert!(!settled(&[50.0, 1.0], f64::INFINITY, 5));
        // Twice the repetitions (oversubscribed mtlat): six of ten.
        assert!(!settled(&[0.0; 5], 5.0, 10));
        assert!(settled(&[0.0; 6], 5.0, 10));
        // One repetition: one run.
        assert!(!settled(&[], 2.0, 1));
        assert!(settled(&[40.0], 2.0, 1));
    }

    #[test]
    fn the_median_of_all_runs_stays_within_the_majority_range() {
        // The property `settled` rests on: with more than half of the runs
        // in, whatever the others read, the final median is within the
        // range of those made.
        let first = [10.0, 12.0, 11.0];
        for a in [-100.0, 9.0, 10.5, 11.5, 100.0] {
            for b in [-100.0, 9.5, 11.0, 13.0, 100.0] {
                let mut all = first.to_vec();
                all.extend([a, b]);
                let m = summarize(&all).median;
                assert!((10.0..=12.0).contains(&m), "{a} {b}: {m}");
            }
        }
    }

    #[test]
    fn a_report_is_met_when_every_judged_point_is() {
        let mut overhead = judged(100.0, 180.0, f64::INFINITY);
        overhead.study = "overhead".into();
        let mut r = Report {
            machine: String::new(),
            dram_latency_ns: 165.0,
            quick: true,
            tolerances: "loose".into(),
            reps: 1,
            sample: "off".into(),
            llc_bytes: 0,
            llc_curve: Vec::new(),
            seconds: 0.0,
            study_seconds: Vec::new(),
            points: vec![judged(400.0, 410.0, 15.0), overhead],
            skipped: vec![],
        };
        assert!(r.all_met());
        r.points.push(judged(400.0, 165.0, 15.0));
        assert!(!r.all_met());
    }

    #[test]
    fn plots_are_written_per_study() {
        let pts = vec![
            point(
                "memlat",
                "chains=1",
                300.0,
                300.0,
                vec![298.0, 301.0, 305.0],
            ),
            point(
                "memlat",
                "chains=1",
                600.0,
                600.0,
                vec![590.0, 604.0, 611.0],
            ),
            point(
                "chains",
                "chains=2 native=80ns",
                400.0,
                200.0,
                vec![190.0, 204.0],
            ),
            point(
                "multilat",
                "1M acc, pattern=200:100",
                400.0,
                1e6,
                vec![1.01e6],
            ),
            point("mtlat", "threads=2 cs-only", 400.0, 1e7, vec![1.02e7]),
        ];
        // 301 against 300 is +0.33%, 604 against 600 +0.67%: both within
        // 2%; a median of 613 (+2.17%) is not.
        assert!(pts[0].ok());
        assert!(pts[1].ok());
        assert!(!point("memlat", "chains=1", 600.0, 600.0, vec![613.0]).ok());
        assert!(point("memlat", "chains=1", 600.0, 600.0, vec![588.0]).ok());
        // Each point reports the median of the latencies its runs were given.
        assert_eq!(pts[0].dram_ns(), 168.0);
        // ...and how far they moved: half of 165..170 over 168.
        assert!((pts[0].dram_spread_pct() - 2.5 / 168.0 * 100.0).abs() < 1e-9);
        let dir = std::env::temp_dir().join(format!("pmlab-validate-plot-{}", std::process::id()));
        write_plots(&dir, &pts).unwrap();
        for f in [
            "memlat.svg",
            "chains.svg",
            "multilat.svg",
            "mtlat-cs-only.svg",
        ] {
            let svg = std::fs::read_to_string(dir.join(f)).unwrap();
            assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{f}");
        }
        assert!(!dir.join("mtlat-cs-out.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
