//! The working-set study (`--only workset`, issue 16): memlat and the
//! index-linked chase (`idxchase.c`), 1 and 4 chains, over regions from
//! well inside the last-level cache to far outside it, at 300 and 1000 ns,
//! each against its native run, and the one-chain curves against their
//! `--no-inject` runs (the hooks' cost does not depend on the chains).
//!
//! Below half the LLC, and below [`FITS_SHARE`] of the modelled cache
//! ([`sampled_here`]), the emulated runs are sampled ([`SAMPLE`],
//! [`sample_flags`]): with every access hooked, an in-cache access costs
//! about twice its native time, which no injection takes back; the
//! sampled model charges a window's miss on a line it never saw by the
//! first-sight rule (`runtime::source::instrumented::sample::FirstSight`).
//! From half the LLC up every access is hooked: the misses hide the
//! hooks there, and a sampled model near its own size misses less than a
//! fully fed one.
//!
//! The machine's effective LLC moves with its neighbours, and with it
//! the native curve near the knee. So regions are the outer loop: before
//! each repetition of a region the DRAM latency and the chase curve
//! ([`crate::calibrate::KneeProbe`]) are measured, and that repetition's
//! emulated runs model (`PMLAB_INSTR_LLC`) the random-replacement cache
//! whose miss curve fits the probe's ramp best
//! ([`crate::calibrate::fit_model_bytes`]; the knee's
//! [`crate::calibrate::random_model_bytes`] when the curve has no ramp).
//! Each point's note gives the probe's own miss share at its region next
//! to the native program's `m`: where they differ, the program's layout
//! or its short run, not the model's size, is the difference. Every curve
//! then runs natively, with `--no-inject` and emulated; below four times
//! the LLC each of those runs is followed by a native run, and judged
//! against the native runs right before and after it (`bracketed`,
//! [`paired_expectation`]; run again once when they moved,
//! [`pair_moved`]). A repetition whose probe and one-chain natives
//! disagree ([`probe_disagrees`]) is measured again once. Points whose
//! native reference moved are marked ([`unstable`]).
//!
//! memlat runs with `-q`: its chains linked in one sequential pass (a
//! pseudo-random cycle per chain over a contiguous part of the region, as
//! idxchase builds them) instead of the shuffle, the same timed loop with
//! a set-up that stays short at 1 GiB under emulation.
//!
//! # Expectation
//!
//! Only the accesses that miss the LLC natively go to memory, so only they
//! should cost `L - DRAM` more. Per access:
//!
//! ```text
//! expected(r) = native(r) + m(r) x (L - DRAM)
//! m(r)        = clamp((native(r) - c_k) / (D(r) - c_1), 0, 1)
//! ```
//!
//! with `native(r)` the native ns per access at region `r` (the run of the
//! same repetition), `DRAM` the latency measured just before (the figure
//! the emulated run is given), `D(r)` what one chain's miss costs at `r`
//! ([`miss_cost`]: `DRAM` below four times the LLC, the program's own
//! one-chain native at `r` from there up, where every access of a cyclic
//! chase misses any cache of the LLC's size), `c_k` the in-cache time per
//! access of the same program with the same `k` chains -- its native
//! figure at the largest region below half the LLC that the level-2
//! cache does not hold ([`in_cache`]) -- and `c_1` that of one chain. With one chain, `m(r)` is
//! the share of accesses that miss the LLC: each costs `DRAM` instead of
//! `c_1`. With `k` chains it is the serial misses per access: if hits and
//! misses overlap alike `k'` ways, `native = (m' DRAM + (1 - m') c_1) / k'`
//! and `c_k = c_1 / k'`, so `(native - c_k) / (DRAM - c_1) = m' / k'`, and
//! the added time per access is `m'/k' x (L - DRAM)`: at large regions
//! `native x L / DRAM` as in the chains study.
//!
//! The method's error: a region below half the LLC counts as all hits
//! (`m = 0`) although some of its lines are evicted (by the other
//! programs, by the LLC's own replacement); from four times the LLC a
//! cache that keeps part of a region cyclic access would otherwise evict
//! (at most a quarter there) is read as a cheaper miss; between half and four times the
//! LLC, `m` mixes LLC hits of different latencies, and the estimate leans
//! on `native` at one region per curve (`c_k`, measured with the same
//! noise as the rest): the bounds widen there accordingly.
//!
//! # Targets
//!
//! [`Tolerances`]: within 5% at regions of at least 4x the LLC, within 10%
//! (or 5 ns, whichever is larger) below half the LLC, within 15% between;
//! `--no-inject` within 10% of native at every region.

use super::*;

/// The sampling of the emulated runs at regions below half the LLC
/// (`--sample`): with every access hooked an in-cache access costs about
/// twice its native time, which no injection takes back; sampled, the
/// hooks add about 5% (see `docs/emulator.md`, "Sampled
/// instrumentation"). From half the LLC up every access is hooked: there
/// the misses hide the hooks, and a sampled model near its own size
/// misses less than a fully fed one.
pub const SAMPLE: &str = "auto";

/// The `pmlab run` flags of a region's emulated runs: sampled ([`SAMPLE`])
/// below half the LLC, `--sample off` (every access hooked) from there up
/// (given, not left to `pmlab run`'s default, which is `auto`).
pub fn sample_flags(cls: Class) -> Vec<String> {
    match cls {
        Class::Near => vec![s("--sample"), s(SAMPLE)],
        Class::Mid | Class::Far => vec![s("--sample"), s("off")],
    }
}

/// How far below the modelled cache's size a region still runs sampled
/// ([`sampled_here`]), as a share of that size.
pub const FITS_SHARE: f64 = 0.85;

/// Whether a region of `region` bytes runs sampled: below half the LLC
/// (`llc`, the knee; [`Class::Near`]), or below [`FITS_SHARE`] of the
/// random-replacement model the emulated runs are given (`model` bytes,
/// 0: unknown). Up to there the model itself keeps a cyclic region whole
/// (it charges next to no misses, sampled or not: 0.002 serial misses
/// per load at 8 MiB with a 9.5-10 MiB model in the idle run of
/// 2026-11-24), and hooking every access only adds its cost (memlat with
/// 4 chains at 8 MiB read 33 ns fully hooked against 4.8 sampled, native
/// 5-7).
pub fn sampled_here(region: u64, llc: u64, model: u64) -> bool {
    class(region, llc) == Class::Near || (model > 0 && region as f64 <= FITS_SHARE * model as f64)
}

/// The miss share of a chase curve (region bytes, ns per load; regions
/// ascending) at `region` bytes, interpolated on log(region):
/// `(t - in_cache) / (dram - in_cache)` within [0, 1], `dram` at least the
/// largest region's figure; None outside the curve or without a ramp.
pub fn curve_miss(curve: &[(u64, f64)], in_cache: f64, dram: f64, region: u64) -> Option<f64> {
    let dram = curve.last().map_or(dram, |&(_, t)| dram.max(t));
    if dram.is_nan() || in_cache.is_nan() || dram <= in_cache {
        return None;
    }
    let i = curve.iter().position(|&(r, _)| r >= region)?;
    let t = if curve[i].0 == region || i == 0 {
        if curve[i].0 != region {
            return None;
        }
        curve[i].1
    } else {
        let ((r0, t0), (r1, t1)) = (curve[i - 1], curve[i]);
        let f = ((region as f64).ln() - (r0 as f64).ln()) / ((r1 as f64).ln() - (r0 as f64).ln());
        t0 + f * (t1 - t0)
    };
    Some(((t - in_cache) / (dram - in_cache)).clamp(0.0, 1.0))
}

/// Sizes of the working-set study.
struct Plan {
    regions: Vec<u64>,
    /// Regions of the 4-chain curves (the same knee, fewer points).
    regions_multi: Vec<u64>,
    progs: Vec<&'static str>,
    chains: Vec<u32>,
    lat: Vec<f64>,
    accesses: u64,
    /// At most this many runs per point (the study has many points).
    max_reps: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                regions: vec![4, 64, 128],
                regions_multi: vec![],
                progs: vec!["memlat", "idxchase"],
                chains: vec![1],
                lat: vec![1000.0],
                accesses: 200_000,
                max_reps: 1,
            }
        } else {
            Plan {
                regions: vec![1, 4, 8, 16, 24, 32, 48, 64, 128, 256, 1024],
                regions_multi: vec![4, 8, 16, 32, 64, 256],
                progs: vec!["memlat", "idxchase"],
                chains: vec![1, 4],
                lat: vec![300.0, 1000.0],
                accesses: 300_000,
                max_reps: 2,
            }
        }
    }

    /// Whether the curve of `chains` chains has a point at `region` MiB.
    fn has(&self, chains: u32, region: u64) -> bool {
        chains == 1 || self.regions_multi.contains(&region)
    }
}

/// Where a region sits against the LLC, for its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Below half the LLC.
    Near,
    /// From half to four times the LLC (or the LLC size is unknown).
    Mid,
    /// At least four times the LLC.
    Far,
}

/// The class of a region of `region` bytes with an LLC of `llc` bytes (0:
/// unknown).
pub fn class(region: u64, llc: u64) -> Class {
    if llc == 0 {
        Class::Mid
    } else if region * 2 < llc {
        Class::Near
    } else if region >= 4 * llc {
        Class::Far
    } else {
        Class::Mid
    }
}

/// The bound on |error| (percent) of an emulated point of `class` whose
/// expectation is `expected` ns per access.
pub fn bound(t: &Tolerances, class: Class, expected: f64) -> f64 {
    match class {
        Class::Far => t.workset_far,
        Class::Mid => t.workset_mid,
        Class::Near => t.workset_near.max(t.workset_floor_ns / expected * 100.0),
    }
}

/// `(expected, m)`: the expected ns per access at the target and the
/// serial misses per access, from `native` ns per access, the in-cache
/// times `c_k` (these chains) and `c_1` (one chain), the cost of one
/// chain's miss at the point's region `miss` ([`miss_cost`]), the DRAM
/// latency the emulator is given (`dram`) and the target (see the module
/// documentation): `m = (native - c_k) / (miss - c_1)` within [0, 1],
/// `expected = native + m x (target - dram)`.
pub fn expectation(
    native: f64,
    c_k: f64,
    c_1: f64,
    miss: f64,
    dram: f64,
    target: f64,
) -> (f64, f64) {
    // A miss no dearer than a hit: nothing misses.
    let m = if miss > c_1 {
        ((native - c_k) / (miss - c_1)).clamp(0.0, 1.0)
    } else {
        0.0
    };
    (native + m * (target - dram), m)
}

/// What one chain's miss costs at a region of class `cls`: from four
/// times the LLC up (no cache of the LLC's size keeps more than a quarter
/// of a cyclic region, a random-replacement or LRU one next to nothing)
/// every access of one chain misses, so its native time there,
/// `one_chain` (the same program's one-chain median at the region), is
/// the miss cost, page walks and layout included; below, the DRAM
/// latency measured over the calibration's region (`dram`). The DRAM
/// figure alone read memlat's misses at 48-64 MiB as 10% hits: its native
/// time rose from 145 ns at 48 MiB to 178 ns at 1 GiB, past any cache,
/// while the DRAM figure (over 256 MiB) was 159 ns.
pub fn miss_cost(cls: Class, dram: f64, one_chain: Option<f64>) -> f64 {
    match (cls, one_chain) {
        (Class::Far, Some(n)) if n.is_finite() && n > 0.0 => n,
        _ => dram,
    }
}

/// The in-cache time of a curve: the native figure at the largest region
/// below half the LLC (`near`, each region's own class) that the level-2
/// cache does not hold (at least `floor` bytes, [`calibrate::l2_floor`]),
/// else at the largest region below half the LLC, else at the smallest.
/// An access that misses the LLC costs DRAM instead of an LLC hit, not
/// instead of a level-2 hit: from a region the level-2 cache holds
/// (idxchase at 1 MiB, 11 ns, against 17 ns at 4 MiB in the run of
/// 2026-11-25) the LLC's own hits would count as misses.
/// `curve`: (region MiB, native ns per access, below half the LLC),
/// regions ascending.
pub fn in_cache(curve: &[(u64, f64, bool)], floor: u64) -> f64 {
    curve
        .iter()
        .rev()
        .find(|&&(r, _, near)| near && r << 20 >= floor)
        .or_else(|| curve.iter().rev().find(|&&(_, _, near)| near))
        .or(curve.first())
        .map_or(f64::NAN, |&(_, v, _)| v)
}

/// A point's native runs spread by more than this share of their median:
/// the machine, not the emulator, moved during the point.
pub const UNSTABLE_NATIVE: f64 = 0.2;
/// The knee probes before a region's repetitions spread by more than this
/// share of their median (and the region lies between half and four times
/// one of them): the cache the point met was not the same from one
/// repetition to the next.
pub const UNSTABLE_KNEE: f64 = 0.25;

/// Why a point's native reference is unstable (None: stable): its native
/// runs spread by more than [`UNSTABLE_NATIVE`] of their median, or the
/// knee probes of its repetitions (`knees`, bytes) by more than
/// [`UNSTABLE_KNEE`] while the region (`region` bytes) is near one of
/// them (not below half of the smallest, not at or past four times the
/// largest).
pub fn unstable(native: &[f64], knees: &[u64], region: u64) -> Option<String> {
    let n = summarize(native);
    if native.len() > 1 && (n.max - n.min) > UNSTABLE_NATIVE * n.median {
        return Some(format!(
            "native runs {:.1}..{:.1} ns, {:.0}% of their median",
            n.min,
            n.max,
            (n.max - n.min) / n.median * 100.0
        ));
    }
    let k: Vec<f64> = knees
        .iter()
        .filter(|&&k| k > 0)
        .map(|&k| k as f64)
        .collect();
    let ks = summarize(&k);
    let near = region as f64 * 2.0 >= ks.min && (region as f64) < 4.0 * ks.max;
    if k.len() > 1 && near && (ks.max - ks.min) > UNSTABLE_KNEE * ks.median {
        return Some(format!(
            "effective LLC {:.1}..{:.1} MiB across the repetitions",
            ks.min / 1048576.0,
            ks.max / 1048576.0
        ));
    }
    None
}

/// One point's repetitions: each emulated run next to the native run and
/// the DRAM measurement of its repetition.
#[derive(Default, Clone)]
struct Runs {
    /// The first native run of each repetition.
    native: Vec<f64>,
    no_inject: Vec<f64>,
    /// Per target, each repetition's emulated run.
    emulated: Vec<Vec<f64>>,
    /// Per target, the native runs right before and right after each
    /// emulated run (both the repetition's first native where not
    /// paired).
    pairs: Vec<Vec<(f64, f64)>>,
    /// The DRAM latency of each repetition.
    dram: Vec<f64>,
    /// Emulated runs whose natives moved ([`pair_moved`]) and were run
    /// again; of those, the ones whose natives moved again.
    retried: usize,
    moved: usize,
}

/// Regions below this many MiB run more accesses ([`accesses_at`]).
pub const SMALL_REGION_MIB: u64 = 16;

/// The accesses of a run at `region_mib`: `base` from
/// [`SMALL_REGION_MIB`] up, up to ten times more below it (inversely to
/// the region). In cache an access costs 5-20 ns, so 300,000 of them
/// time 2-6 ms, against which the run's fixed costs (its first sampling
/// windows before the policy has timed the code, the epoch ends at the
/// clock reads around the timed loop) are percents; the longer loops cost
/// tens of ms.
pub fn accesses_at(base: u64, region_mib: u64) -> u64 {
    base * (SMALL_REGION_MIB / region_mib.max(1)).clamp(1, 10)
}

/// How far the knee probe's miss share at a region may be from a
/// one-chain native run's there before the repetition is measured again
/// ([`probe_disagrees`]). The probe's chain and the programs differ in
/// layout (at 16 MiB, in the idle run of 2026-11-24, the probe's ramp read
/// about 0.6 where memlat's native m was 0.29), so only a larger gap says
/// that the cache moved between the probe and the runs.
pub const PROBE_GAP: f64 = 0.4;

/// The one-chain native miss share (`(native - in_cache) / (dram -
/// in_cache)` on the probe's own scale) farthest from the probe's miss
/// share `probe_m` at the region, when it is more than [`PROBE_GAP`] away:
/// the emulated runs modelled a cache (fitted to the probe) that the
/// program did not meet. None when they agree.
pub fn probe_disagrees(probe_m: f64, natives: &[f64], in_cache: f64, dram: f64) -> Option<f64> {
    if dram.is_nan() || in_cache.is_nan() || dram <= in_cache {
        return None;
    }
    natives
        .iter()
        .map(|&n| ((n - in_cache) / (dram - in_cache)).clamp(0.0, 1.0))
        .filter(|m| (m - probe_m).abs() > PROBE_GAP)
        .max_by(|a, b| (a - probe_m).abs().total_cmp(&(b - probe_m).abs()))
}

/// Whether the native runs right before (`before`) and after (`after`)
/// an emulated run differ by more than [`UNSTABLE_NATIVE`] of their mean:
/// the cache the emulated run met is not known.
pub fn pair_moved(before: f64, after: f64) -> bool {
    (before - after).abs() > UNSTABLE_NATIVE * (before + after) / 2.0
}

/// `(expected, m)` of an emulated run between the native runs `pair`
/// (before, after): the mean of the two [`expectation`]s.
pub fn paired_expectation(
    pair: (f64, f64),
    c_k: f64,
    c_1: f64,
    miss: f64,
    dram: f64,
    target: f64,
) -> (f64, f64) {
    let a = expectation(pair.0, c_k, c_1, miss, dram, target);
    let b = expectation(pair.1, c_k, c_1, miss, dram, target);
    ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0)
}

/// What two targets' emulated medians say (`(t1, e1)`, `(t2, e2)`, ns)
/// with the DRAM latency `dram`: `(m, base)`, the serial misses per access
/// the emulator charged (the line's slope over `target - DRAM`) and where
/// the line meets `target = DRAM` (the time with nothing added: native
/// plus the hooks' exposed cost). Against the native `m` and time, they
/// tell a miss of the model (the slope) from one of the cost (the base).
pub fn charged_line(t1: f64, e1: f64, t2: f64, e2: f64, dram: f64) -> Option<(f64, f64)> {
    if (t2 - t1).abs() < 1.0 || !e1.is_finite() || !e2.is_finite() {
        return None;
    }
    let m = (e2 - e1) / (t2 - t1);
    Some((m, e1 - m * (t1 - dram)))
}

/// Runs `run` between two native runs (`before`, updated to the native
/// after it) when `paired`, once more (with fresh natives) when the two
/// moved ([`pair_moved`]); returns the run's value and its pair. Not
/// paired: `run` alone, its pair the repetition's native twice.
fn bracketed(
    paired: bool,
    before: &mut f64,
    native: &mut dyn FnMut() -> Result<f64>,
    run: &mut dyn FnMut() -> Result<f64>,
    counts: (&mut usize, &mut usize),
) -> Result<(f64, (f64, f64))> {
    let v = run()?;
    if !paired {
        return Ok((v, (*before, *before)));
    }
    let after = native()?;
    if !pair_moved(*before, after) {
        let pair = (*before, after);
        *before = after;
        return Ok((v, pair));
    }
    *counts.0 += 1;
    *before = after;
    let v = run()?;
    let after = native()?;
    let pair = (*before, after);
    if pair_moved(pair.0, pair.1) {
        *counts.1 += 1;
    }
    *before = after;
    Ok((v, pair))
}

pub(super) fn study(ctx: &Ctx, out: &mut Vec<Point>) -> Result<()> {
    let mut p = Plan::new(ctx.quick);
    p.lat = ctx.emulable("workset", &p.lat);
    if p.lat.is_empty() {
        return Ok(());
    }
    let reps = ctx.reps.min(p.max_reps);
    let curves: Vec<(&str, u32)> = p
        .progs
        .iter()
        .flat_map(|&prog| p.chains.iter().map(move |&k| (prog, k)))
        .collect();
    // The model's LLC is measured right before each region's runs (a
    // knee probe) unless the caller set PMLAB_INSTR_LLC.
    let mut probe = if ctx.instr_llc.is_some() {
        Some(calibrate::KneeProbe::new()?)
    } else {
        None
    };
    ctx.say(&format!(
        "workset: regions {:?} MiB ({:?} with 4 chains), {reps} repetition(s) each: {}each curve's native run, --no-inject (1 chain) and {:?} ns (sampled, --sample {SAMPLE}, below half the LLC)",
        p.regions,
        p.regions_multi,
        if probe.is_some() { "a knee probe (the model's LLC), then " } else { "" },
        p.lat
    ));
    let mut all = vec![vec![Runs::default(); p.regions.len()]; curves.len()];
    let mut knees: Vec<Vec<u64>> = vec![Vec::new(); p.regions.len()];
    // Per region, the probe's miss share there and the model size fitted.
    let mut probe_m: Vec<Vec<f64>> = vec![Vec::new(); p.regions.len()];
    let mut models: Vec<Vec<u64>> = vec![Vec::new(); p.regions.len()];
    let mut sampled: Vec<Vec<bool>> = vec![Vec::new(); p.regions.len()];
    // Per region, the repetition measured again because the probe and the
    // natives disagreed, and whether they still did.
    let mut redo: Vec<Option<(f64, f64, bool)>> = vec![None; p.regions.len()];
    for (ri, &r) in p.regions.iter().enumerate() {
        let mut rep = 0;
        while rep < reps {
            let snapshot: Vec<Runs> = all.iter().map(|c| c[ri].clone()).collect();
            let dram = ctx.dram_now();
            let mut probe_here: Option<(f64, f64)> = None;
            if let Some(pr) = probe.as_mut() {
                let (knee, curve) = pr.measure(dram);
                knees[ri].push(knee);
                let floor = calibrate::l2_floor();
                let in_cache = calibrate::llc_in_cache(&curve, floor / 2);
                let fit = calibrate::fit_model_bytes(&curve, in_cache, dram, floor);
                if let Some(m) = curve_miss(&curve, in_cache, dram, r << 20) {
                    probe_m[ri].push(m);
                    probe_here = Some((m, in_cache));
                }
                models[ri].push(fit.unwrap_or_else(|| calibrate::random_model_bytes(knee)));
                *ctx.llc_now.borrow_mut() = fit
                    .and_then(calibrate::instr_llc_model)
                    .or_else(|| calibrate::instr_llc_for(knee));
            }
            // Sampled below half the LLC as measured now, or where the
            // model given keeps the region whole.
            let llc_now = knees[ri].last().copied().filter(|&k| k > 0);
            let model_now = if probe.is_some() {
                models[ri].last().copied().unwrap_or(0)
            } else {
                0
            };
            let near = sampled_here(r << 20, llc_now.unwrap_or(ctx.llc_bytes), model_now);
            let sample = sample_flags(if near { Class::Near } else { Class::Far });
            sampled[ri].push(near);
            // Below four times the LLC the native curve moves with the
            // machine: each emulated run is judged against the native runs
            // right before and right after it.
            let paired = class(r << 20, llc_now.unwrap_or(ctx.llc_bytes)) != Class::Far;
            for (ci, &(prog, k)) in curves.iter().enumerate() {
                if !p.has(k, r) {
                    continue;
                }
                let mut args = vec![
                    s("-c"),
                    s(k),
                    s("-r"),
                    s(r),
                    s("-n"),
                    s(accesses_at(p.accesses, r)),
                ];
                if prog == "memlat" {
                    // Linked in one sequential pass, as idxchase is: the
                    // shuffle of a 1 GiB region takes ~10 s under emulation.
                    args.push(s("-q"));
                }
                let runs = &mut all[ci][ri];
                let mut native = || need(prog, &ctx.native(prog, &args)?, MEMLAT_KEY);
                let mut before = native()?;
                runs.native.push(before);
                // --no-inject with one chain only: the hooks' cost does not
                // depend on the chains.
                if k == 1 {
                    let (v, _) = bracketed(
                        paired,
                        &mut before,
                        &mut native,
                        &mut || {
                            let o =
                                ctx.emulated_with(prog, &args, p.lat[0], true, dram, &sample)?;
                            need(prog, &o, MEMLAT_KEY)
                        },
                        (&mut runs.retried, &mut runs.moved),
                    )?;
                    runs.no_inject.push(v);
                }
                runs.emulated.resize(p.lat.len(), Vec::new());
                runs.pairs.resize(p.lat.len(), Vec::new());
                for (j, &lat) in p.lat.iter().enumerate() {
                    let (v, pair) = bracketed(
                        paired,
                        &mut before,
                        &mut native,
                        &mut || {
                            let o = ctx.emulated_with(prog, &args, lat, false, dram, &sample)?;
                            need(prog, &o, MEMLAT_KEY)
                        },
                        (&mut runs.retried, &mut runs.moved),
                    )?;
                    runs.emulated[j].push(v);
                    runs.pairs[j].push(pair);
                }
                runs.dram.push(dram);
            }
            // The probe against the one-chain natives of this repetition:
            // measured again (once a region) when they disagree.
            if paired {
                if let Some((pm, in_cache)) = probe_here {
                    let natives: Vec<f64> = curves
                        .iter()
                        .enumerate()
                        .filter(|&(_, &(_, k))| k == 1)
                        .filter_map(|(ci, _)| all[ci][ri].native.last().copied())
                        .collect();
                    if let Some(nm) = probe_disagrees(pm, &natives, in_cache, dram) {
                        if redo[ri].is_none() {
                            redo[ri] = Some((pm, nm, false));
                            for (ci, s) in snapshot.into_iter().enumerate() {
                                all[ci][ri] = s;
                            }
                            knees[ri].pop();
                            probe_m[ri].pop();
                            models[ri].pop();
                            sampled[ri].pop();
                            ctx.say(&format!(
                                "workset: {r} MiB: the probe's miss share {pm:.2} against a native {nm:.2}: measured again"
                            ));
                            continue;
                        }
                        redo[ri] = Some((pm, nm, true));
                    }
                }
            }
            rep += 1;
        }
        *ctx.llc_now.borrow_mut() = None;
        let k = summarize(&knees[ri].iter().map(|&k| k as f64).collect::<Vec<_>>());
        ctx.say(&format!(
            "workset: {r} MiB done{}",
            if knees[ri].is_empty() {
                String::new()
            } else {
                format!(
                    "; effective LLC {:.1}..{:.1} MiB",
                    k.min / 1048576.0,
                    k.max / 1048576.0
                )
            }
        ));
    }
    // The LLC the regions are classed by: each region's own probes, else
    // the one measured when validate started.
    let llc_at = |ri: usize| -> u64 {
        let k: Vec<f64> = knees[ri]
            .iter()
            .filter(|&&k| k > 0)
            .map(|&k| k as f64)
            .collect();
        if k.is_empty() {
            ctx.llc_bytes
        } else {
            summarize(&k).median as u64
        }
    };
    // The one-chain in-cache time of each program, for the other curves' m,
    // and its one-chain native per region (the miss cost from 4x the LLC).
    let mut c_1 = f64::NAN;
    let mut one_chain: Vec<Option<f64>> = vec![None; p.regions.len()];
    let floor = calibrate::l2_floor();
    for (ci, &(prog, k)) in curves.iter().enumerate() {
        let pts: Vec<(usize, u64)> = p
            .regions
            .iter()
            .enumerate()
            .filter(|&(_, &r)| p.has(k, r))
            .map(|(i, &r)| (i, r))
            .collect();
        let curve: Vec<(u64, f64, bool)> = pts
            .iter()
            .map(|&(i, r)| {
                (
                    r,
                    summarize(&all[ci][i].native).median,
                    class(r << 20, llc_at(i)) == Class::Near,
                )
            })
            .collect();
        let c_k = in_cache(&curve, floor);
        if k == 1 {
            one_chain = vec![None; p.regions.len()];
            for &(ri, _) in &pts {
                one_chain[ri] = Some(summarize(&all[ci][ri].native).median);
            }
        }
        if k == 1 || c_1.is_nan() {
            c_1 = if k == 1 { c_k } else { c_k * k as f64 };
        }
        for &(ri, r) in &pts {
            let runs = std::mem::take(&mut all[ci][ri]);
            let native = summarize(&runs.native).median;
            let cls = class(r << 20, llc_at(ri));
            let miss = miss_cost(cls, f64::NAN, one_chain[ri]);
            let miss_of = |d: f64| if miss.is_nan() { d } else { miss };
            let name = format!("{prog} chains={k} region={r}MiB");
            let shaky = unstable(&runs.native, &knees[ri], r << 20).or_else(|| {
                (runs.moved > 0).then(|| {
                    format!(
                        "the native runs around {} emulated run(s) moved by over {:.0}% even when run again",
                        runs.moved,
                        UNSTABLE_NATIVE * 100.0
                    )
                })
            }).or_else(|| {
                redo[ri].filter(|x| x.2).map(|(pm, nm, _)| {
                    format!(
                        "the knee probe's miss share here ({pm:.2}) and a one-chain native's ({nm:.2}) disagreed by over {PROBE_GAP}, also when measured again"
                    )
                })
            });
            let redo_note = match redo[ri] {
                Some((pm, nm, false)) => format!(
                    "; a repetition measured again: the knee probe's miss share here {pm:.2} against a one-chain native's {nm:.2}"
                ),
                _ => String::new(),
            };
            let mib = |v: &[u64]| {
                v.iter()
                    .map(|&k| (k as f64 / 1048576.0 * 10.0).round() / 10.0)
                    .collect::<Vec<_>>()
            };
            let n_sampled = sampled[ri].iter().filter(|&&x| x).count();
            let sample_note = format!(
                "; sampled (--sample {SAMPLE}) in {n_sampled} of {} repetition(s)",
                sampled[ri].len()
            );
            let knee_note = if knees[ri].is_empty() {
                sample_note
            } else {
                format!(
                    "{sample_note}; knee before each repetition {:?} MiB, model fitted to the probe's ramp {:?} MiB, the probe's miss share here {:?}",
                    mib(&knees[ri]),
                    mib(&models[ri]),
                    probe_m[ri]
                        .iter()
                        .map(|m| (m * 100.0).round() / 100.0)
                        .collect::<Vec<_>>()
                )
            };
            let dram = summarize(&runs.dram).median;
            let native_m = expectation(native, c_k, c_1, miss_of(dram), dram, dram + 1.0).1;
            // The emulated line through the targets' medians: the serial
            // misses charged (its slope) against the native m, and its
            // base (nothing added) against native: model against cost.
            let line_note = if p.lat.len() >= 2 {
                let last = p.lat.len() - 1;
                charged_line(
                    p.lat[0],
                    summarize(&runs.emulated[0]).median,
                    p.lat[last],
                    summarize(&runs.emulated[last]).median,
                    dram,
                )
                .map_or(String::new(), |(m_emu, base)| {
                    format!(
                        "; between the targets the emulator charged m {m_emu:.3} (native m {native_m:.3}: the model's share of the error {:+.1} ns at {} ns) on a base of {base:.1} ns at L = DRAM (native {native:.1}: the hooks' exposed cost {:+.1} ns)",
                        (m_emu - native_m) * (p.lat[last] - dram),
                        p.lat[last],
                        base - native
                    )
                })
            } else {
                String::new()
            };
            let moved_note = if runs.retried > 0 {
                format!(
                    "; {} emulated run(s) run again because the natives around them moved by over {:.0}%, {} of them moved again",
                    runs.retried,
                    UNSTABLE_NATIVE * 100.0,
                    runs.moved
                )
            } else {
                String::new()
            };
            for (j, &lat) in p.lat.iter().enumerate() {
                // Each run's expectation from the native runs right
                // beside it (the repetition's native where not paired)
                // and the DRAM latency of its repetition.
                let per: Vec<(f64, f64)> = runs.pairs[j]
                    .iter()
                    .zip(&runs.dram)
                    .map(|(&pair, &d)| paired_expectation(pair, c_k, c_1, miss_of(d), d, lat))
                    .collect();
                let expected = summarize(&per.iter().map(|x| x.0).collect::<Vec<_>>()).median;
                let m = summarize(&per.iter().map(|x| x.1).collect::<Vec<_>>()).median;
                let natives: Vec<f64> = runs.pairs[j].iter().map(|&(a, b)| (a + b) / 2.0).collect();
                let native = summarize(&natives).median;
                let mut pt = simple_point(
                    "workset",
                    name.clone(),
                    lat,
                    "ns/access",
                    expected,
                    runs.emulated[j].clone(),
                    bound(&ctx.bounds, cls, expected),
                    format!(
                        "per run native + m x ({lat} - DRAM), native the mean of the native runs right before and after it below 4x the LLC (else the repetition's), DRAM measured at the repetition's start (median: native {native:.1}, m {m:.3}, DRAM {dram:.1}); m = (native - in-cache {c_k:.1}) / ({} - one-chain in-cache {c_1:.1}); region {cls:?} against the LLC{knee_note}{line_note}{moved_note}{redo_note}{}",
                        if miss.is_nan() {
                            s("DRAM")
                        } else {
                            format!("the one-chain native here {miss:.1}, every access a miss from 4x the LLC")
                        },
                        shaky.as_ref().map_or(String::new(), |w| format!("; native unstable: {w}"))
                    ),
                    runs.dram.clone(),
                );
                pt.native_runs = natives;
                pt.native_unstable = shaky.is_some();
                push(ctx, out, pt);
            }
            if runs.no_inject.is_empty() {
                continue;
            }
            let mut pt = simple_point(
                "workset",
                format!("{name} no-inject"),
                0.0,
                "ns/access",
                native,
                runs.no_inject,
                ctx.bounds.workset_overhead,
                format!(
                    "--no-inject against the native {native:.1} ns/access{}",
                    shaky
                        .as_ref()
                        .map_or(String::new(), |w| format!("; native unstable: {w}"))
                ),
                Vec::new(),
            );
            pt.native_runs = runs.native;
            pt.native_unstable = shaky.is_some();
            push(ctx, out, pt);
        }
    }
    Ok(())
}

/// The region of a workset point's config (`region=16MiB`), bytes.
fn region_of(config: &str) -> Option<f64> {
    config.split_whitespace().find_map(|t| {
        t.strip_prefix("region=")
            .and_then(|v| v.strip_suffix("MiB"))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|m| m * 1048576.0)
    })
}

/// One chart per program, chain count and target: native, expected,
/// emulated and `--no-inject` ns per access against the region size.
pub(super) fn plot(dir: &Path, points: &[Point]) -> Result<()> {
    use pmlab_plot::{Axis, Format, LineChart, Scale, Series};
    let v: Vec<&Point> = points.iter().filter(|p| p.study == "workset").collect();
    let mut curves: Vec<(String, f64)> = Vec::new();
    for p in v.iter().filter(|p| p.target_ns > 0.0) {
        let c: Vec<&str> = p.config.split_whitespace().take(2).collect();
        let key = (c.join(" "), p.target_ns);
        if !curves.contains(&key) {
            curves.push(key);
        }
    }
    for (curve, lat) in curves {
        let mine = |p: &&&Point| p.config.starts_with(&format!("{curve} "));
        let emu: Vec<&&Point> = v
            .iter()
            .filter(mine)
            .filter(|p| p.target_ns == lat)
            .collect();
        let noinj: Vec<&&Point> = v
            .iter()
            .filter(mine)
            .filter(|p| p.target_ns == 0.0)
            .collect();
        let xy = |pts: &[&&Point], y: &dyn Fn(&Point) -> f64| -> Vec<(f64, f64)> {
            pts.iter()
                .filter_map(|p| region_of(&p.config).map(|x| (x, y(p))))
                .filter(|&(_, y)| y > 0.0 && y.is_finite())
                .collect()
        };
        let mut chart = LineChart::new(format!("working set: {curve}, {lat} ns"))
            .x_axis(Axis::new("region").scale(Scale::Log).format(Format::Bytes))
            .y_axis(
                Axis::new("time per access")
                    .scale(Scale::Log)
                    .format(Format::Nanos),
            )
            .series(
                Series::new("native", xy(&emu, &|p| summarize(&p.native_runs).median)).dots(true),
            )
            .series(Series::new("expected", xy(&emu, &|p| p.expected)).dots(true))
            .series(
                Series::new("emulated (median)", xy(&emu, &|p| p.measured.median))
                    .spread(
                        emu.iter()
                            .filter(|p| region_of(&p.config).is_some())
                            .map(|p| (p.measured.min, p.measured.max))
                            .collect(),
                    )
                    .dots(true),
            );
        if !noinj.is_empty() {
            chart = chart
                .series(Series::new("--no-inject", xy(&noinj, &|p| p.measured.median)).dots(true));
        }
        let stem = format!("workset-{}-{}ns", curve.replace([' ', '='], "-"), lat);
        save_both(dir, &chart, &stem)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_classed_against_the_llc() {
        let llc = 32 << 20;
        assert_eq!(class(8 << 20, llc), Class::Near);
        assert_eq!(class(16 << 20, llc), Class::Mid);
        assert_eq!(class(64 << 20, llc), Class::Mid);
        assert_eq!(class(128 << 20, llc), Class::Far);
        assert_eq!(class(1 << 20, 0), Class::Mid);
        let t = Tolerances::TARGET;
        assert_eq!(bound(&t, Class::Far, 400.0), 5.0);
        assert_eq!(bound(&t, Class::Mid, 400.0), 15.0);
        // Below half the LLC: 10%, or 5 ns when that is more.
        assert_eq!(bound(&t, Class::Near, 100.0), 10.0);
        assert!((bound(&t, Class::Near, 20.0) - 25.0).abs() < 1e-12);
    }

    #[test]
    fn expectation_adds_the_latency_to_the_misses_only() {
        // One chain: in cache 40 ns, DRAM 150: a region read at 95 ns
        // natively misses half the time; at 1000 ns that adds 425 ns.
        let (e, m) = expectation(95.0, 40.0, 40.0, 150.0, 150.0, 1000.0);
        assert!((m - 0.5).abs() < 1e-12, "{m}");
        assert!((e - 520.0).abs() < 1e-9, "{e}");
        // In cache: nothing added; past DRAM (TLB walks): m stays 1.
        assert_eq!(
            expectation(39.0, 40.0, 40.0, 150.0, 150.0, 1000.0),
            (39.0, 0.0)
        );
        assert_eq!(
            expectation(160.0, 40.0, 40.0, 150.0, 150.0, 300.0),
            (310.0, 1.0)
        );
        // Four chains overlapping 4 ways: native 150/4, in cache 40/4; the
        // chains study's native x L / DRAM comes out.
        let (e, m) = expectation(37.5, 10.0, 40.0, 150.0, 150.0, 300.0);
        assert!((m - 0.25).abs() < 1e-12, "{m}");
        assert!((e - 37.5 * 300.0 / 150.0).abs() < 1e-9, "{e}");
    }

    #[test]
    fn from_four_times_the_llc_a_miss_costs_the_one_chain_native() {
        // memlat at 48 MiB (run of 2026-11-25): native 145.4, DRAM 160,
        // in cache 12.6. Against DRAM, m reads 0.90 (10% "hits");
        // against its own miss cost every access misses: native + L - DRAM.
        let (e, m) = expectation(145.4, 12.6, 12.6, 160.0, 160.0, 1000.0);
        assert!((m - 0.901).abs() < 1e-3, "{m}");
        assert!((e - 902.2).abs() < 0.1, "{e}");
        let miss = miss_cost(Class::Far, 160.0, Some(145.4));
        assert_eq!(miss, 145.4);
        let (e, m) = expectation(145.4, 12.6, 12.6, miss, 160.0, 1000.0);
        assert_eq!(m, 1.0);
        assert!((e - (145.4 + 1000.0 - 160.0)).abs() < 1e-9, "{e}");
        // Four chains there: the serial misses per access over that cost
        // (native 37.9, in cache 3.9 and 12.6: 0.251, not 0.234).
        let (_, m) = expectation(37.9, 3.9, 12.6, miss, 160.0, 1000.0);
        assert!((m - 34.0 / 132.8).abs() < 1e-9, "{m}");
        // Below 4x the LLC, or no one-chain native: the DRAM figure.
        assert_eq!(miss_cost(Class::Mid, 160.0, Some(145.4)), 160.0);
        assert_eq!(miss_cost(Class::Near, 160.0, Some(15.0)), 160.0);
        assert_eq!(miss_cost(Class::Far, 160.0, None), 160.0);
        assert_eq!(miss_cost(Class::Far, 160.0, Some(f64::NAN)), 160.0);
        // A miss cost at or below the in-cache time: no misses.
        assert_eq!(
            expectation(20.0, 12.6, 12.6, 12.6, 160.0, 1000.0),
            (20.0, 0.0)
        );
    }

    #[test]
    fn in_cache_time_is_an_llc_hit_not_a_level_2_hit() {
        let mib = 1u64 << 20;
        // 1 MiB sits in the level-2 cache (floor 2 MiB); 4 and 8 MiB below
        // half the LLC: the largest of those, 8 MiB.
        let curve = [
            (1, 5.0, true),
            (4, 20.0, true),
            (8, 30.0, true),
            (16, 45.0, false),
            (64, 120.0, false),
        ];
        assert_eq!(in_cache(&curve, 2 * mib), 30.0);
        // Each region's own class: 8 MiB past half the LLC at its
        // repetitions, 4 MiB not.
        let moved = [(1, 11.0, true), (4, 17.2, true), (8, 60.0, false)];
        assert_eq!(in_cache(&moved, 2 * mib), 17.2);
        // Only level-2 regions below half the LLC: the largest of them.
        let l2 = [(1, 11.0, true), (4, 40.0, false)];
        assert_eq!(in_cache(&l2, 2 * mib), 11.0);
        // None below half the LLC: the smallest region.
        assert_eq!(in_cache(&curve[3..], 2 * mib), 45.0);
        assert!(in_cache(&[], 2 * mib).is_nan());
    }

    #[test]
    fn the_new_studies_chart_as_svg_and_png() {
        let pt = |study: &str, config: &str, target: f64, expected: f64, got: f64| {
            let mut p = simple_point(
                study,
                config.into(),
                target,
                "ns/access",
                expected,
                vec![got * 0.98, got, got * 1.03],
                5.0,
                s("x"),
                Vec::new(),
            );
            p.native_runs = vec![expected / 2.0];
            p
        };
        let mut pts = Vec::new();
        for r in [1, 16, 256] {
            let e = 10.0 * r as f64;
            pts.push(pt(
                "workset",
                &format!("memlat chains=1 region={r}MiB"),
                300.0,
                e,
                e,
            ));
            pts.push(pt(
                "workset",
                &format!("memlat chains=1 region={r}MiB no-inject"),
                0.0,
                e,
                e,
            ));
            pts.push(pt(
                "workset",
                &format!("memlat chains=4 region={r}MiB"),
                300.0,
                e,
                e,
            ));
        }
        pts.push(pt("shapes", "hashprobe 256MiB", 300.0, 200.0, 190.0));
        pts.push(pt("shapes", "hashprobe 256MiB", 1000.0, 500.0, 400.0));
        pts.push(pt("bandwidth", "triad threads=1 128MiB", 0.0, 1.0, 0.7));
        pts.push(pt("bandwidth", "triad threads=1 128MiB", 0.0, 4.0, 1.9));
        let dir = std::env::temp_dir().join(format!("pmlab-workset-plot-{}", std::process::id()));
        write_plots(&dir, &pts).unwrap();
        for stem in [
            "workset-memlat-chains-1-300ns",
            "workset-memlat-chains-4-300ns",
            "shapes-hashprobe-256MiB",
            "bandwidth-triad-threads-1-128MiB",
        ] {
            let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
            assert!(svg.contains("<svg"), "{stem}");
            let png = std::fs::read(dir.join(format!("{stem}.png"))).unwrap();
            assert_eq!(&png[1..4], b"PNG", "{stem}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unstable_natives_and_moving_knees_are_named() {
        // Native runs within 20% of their median, one knee: stable.
        assert_eq!(unstable(&[100.0, 110.0], &[16 << 20], 16 << 20), None);
        // 21 ns against 107 at the same region: unstable.
        let w = unstable(&[21.0, 107.0], &[], 8 << 20).unwrap();
        assert!(w.contains("native runs 21.0..107.0"), "{w}");
        // The knee moved from 10 to 19 MiB: unstable near it...
        let knees = [10 << 20, 19 << 20];
        let w = unstable(&[100.0, 101.0], &knees, 16 << 20).unwrap();
        assert!(w.contains("10.0..19.0 MiB"), "{w}");
        // ...but not far below half the smaller nor at 4x the larger.
        assert_eq!(unstable(&[5.0, 5.1], &knees, 1 << 20), None);
        assert_eq!(unstable(&[150.0, 151.0], &knees, 128 << 20), None);
        // Unknown knees (0) do not count; one run cannot spread.
        assert_eq!(unstable(&[100.0], &[0, 16 << 20], 16 << 20), None);
    }

    #[test]
    fn the_four_chain_curves_skip_regions() {
        let p = Plan::new(false);
        assert!(p.has(1, 24) && p.has(1, 1024));
        assert!(p.has(4, 16) && !p.has(4, 24) && !p.has(4, 1024));
        assert!(Plan::new(true).regions_multi.is_empty());
    }

    #[test]
    fn only_regions_below_half_the_llc_run_sampled() {
        assert_eq!(sample_flags(Class::Near), vec![s("--sample"), s(SAMPLE)]);
        assert_eq!(sample_flags(Class::Mid), vec![s("--sample"), s("off")]);
        assert_eq!(sample_flags(Class::Far), vec![s("--sample"), s("off")]);
    }

    #[test]
    fn the_probe_curve_is_read_at_a_region() {
        let mib = 1u64 << 20;
        let c = [(8 * mib, 40.0), (16 * mib, 95.0), (32 * mib, 150.0)];
        assert_eq!(curve_miss(&c, 40.0, 150.0, 8 * mib), Some(0.0));
        assert_eq!(curve_miss(&c, 40.0, 150.0, 16 * mib), Some(0.5));
        // Half-way on log(region) between 16 and 32 MiB.
        let m = curve_miss(&c, 40.0, 150.0, (22.627 * mib as f64) as u64).unwrap();
        assert!((m - 0.75).abs() < 0.01, "{m}");
        // Outside the curve, or no ramp: nothing.
        assert_eq!(curve_miss(&c, 40.0, 150.0, mib), None);
        assert_eq!(curve_miss(&c, 40.0, 150.0, 64 * mib), None);
        assert_eq!(curve_miss(&c, 200.0, 150.0, 16 * mib), None);
    }

    #[test]
    fn small_regions_run_longer() {
        assert_eq!(accesses_at(300_000, 1), 3_000_000);
        assert_eq!(accesses_at(300_000, 4), 1_200_000);
        assert_eq!(accesses_at(300_000, 8), 600_000);
        assert_eq!(accesses_at(300_000, 16), 300_000);
        assert_eq!(accesses_at(300_000, 1024), 300_000);
        assert_eq!(accesses_at(300_000, 0), 3_000_000);
    }

    #[test]
    fn each_run_is_judged_against_the_natives_beside_it() {
        // Natives 40 and 95 around the run (in cache 40, DRAM 150): the
        // mean of the two expectations, m 0.25 (0 and 0.5).
        let (e, m) = paired_expectation((40.0, 95.0), 40.0, 40.0, 150.0, 150.0, 1000.0);
        assert!((m - 0.25).abs() < 1e-12, "{m}");
        assert!((e - (40.0 + 520.0) / 2.0).abs() < 1e-9, "{e}");
        // The same native twice: the plain expectation.
        assert_eq!(
            paired_expectation((95.0, 95.0), 40.0, 40.0, 150.0, 150.0, 1000.0),
            expectation(95.0, 40.0, 40.0, 150.0, 150.0, 1000.0)
        );
        // Moved: over 20% of their mean apart.
        assert!(!pair_moved(100.0, 110.0));
        assert!(pair_moved(21.0, 107.0));
        assert!(pair_moved(100.0, 125.0));
    }

    #[test]
    fn a_run_whose_natives_moved_is_run_again_once() {
        // Natives read in turn; the runs count themselves.
        let natives = std::cell::RefCell::new(vec![100.0, 40.0, 41.0, 42.0]);
        let mut native = || Ok(natives.borrow_mut().remove(0));
        let calls = std::cell::Cell::new(0.0);
        let mut run = || {
            calls.set(calls.get() + 1.0);
            Ok(calls.get())
        };
        let (mut retried, mut moved) = (0, 0);
        let mut before = 41.0;
        // Before 41, after 100: moved; again between 100 and 40: moved
        // again (counted), the second run kept.
        let (v, pair) = bracketed(
            true,
            &mut before,
            &mut native,
            &mut run,
            (&mut retried, &mut moved),
        )
        .unwrap();
        assert_eq!(
            (v, pair, before, retried, moved),
            (2.0, (100.0, 40.0), 40.0, 1, 1)
        );
        // Between 40 and 41: kept at once.
        let (v, pair) = bracketed(
            true,
            &mut before,
            &mut native,
            &mut run,
            (&mut retried, &mut moved),
        )
        .unwrap();
        assert_eq!(
            (v, pair, before, retried, moved),
            (3.0, (40.0, 41.0), 41.0, 1, 1)
        );
        // Not paired: no native run, the repetition's native twice.
        let (v, pair) = bracketed(
            false,
            &mut before,
            &mut native,
            &mut run,
            (&mut retried, &mut moved),
        )
        .unwrap();
        assert_eq!((v, pair), (4.0, (41.0, 41.0)));
        assert_eq!(natives.borrow().len(), 1);
    }

    #[test]
    fn regions_the_model_keeps_whole_run_sampled() {
        let mib = 1u64 << 20;
        // Below half the knee: sampled whatever the model.
        assert!(sampled_here(4 * mib, 14 * mib, 0));
        // 8 MiB against a 13.6 MiB knee is past its half, but within 85%
        // of a 10 MiB model: sampled.
        assert!(sampled_here(8 * mib, 13 * mib + 6 * mib / 10, 10 * mib));
        // Past 85% of the model, or the model unknown: every access hooked.
        assert!(!sampled_here(9 * mib, 14 * mib, 10 * mib));
        assert!(!sampled_here(8 * mib, 14 * mib, 0));
        assert!(!sampled_here(16 * mib, 14 * mib, 10 * mib));
    }

    #[test]
    fn a_probe_far_from_the_natives_is_named() {
        // Probe: no misses at 8 MiB; natives (in cache 10, DRAM 150) at
        // 12 ns (m 0.01) and 94 ns (m 0.6): the second is past the gap.
        let nm = probe_disagrees(0.0, &[12.0, 94.0], 10.0, 150.0).unwrap();
        assert!((nm - 0.6).abs() < 1e-12, "{nm}");
        // Within the gap (memlat's layout against the probe's at 16 MiB:
        // 0.29 against 0.6): agreed.
        assert_eq!(
            probe_disagrees(0.6, &[10.0 + 0.29 * 140.0], 10.0, 150.0),
            None
        );
        // No ramp, no natives: nothing to say.
        assert_eq!(probe_disagrees(0.0, &[94.0], 150.0, 150.0), None);
        assert_eq!(probe_disagrees(0.0, &[], 10.0, 150.0), None);
    }

    #[test]
    fn the_line_through_two_targets_splits_model_from_cost() {
        // Native 60 ns, DRAM 150, m 0.2, hooks +10 ns: at 300 ns
        // 60 + 10 + 0.2 x 150 = 100, at 1000 ns 70 + 0.2 x 850 = 240.
        let (m, base) = charged_line(300.0, 100.0, 1000.0, 240.0, 150.0).unwrap();
        assert!((m - 0.2).abs() < 1e-12, "{m}");
        assert!((base - 70.0).abs() < 1e-9, "{base}");
        assert_eq!(charged_line(300.0, 100.0, 300.0, 240.0, 150.0), None);
        assert_eq!(charged_line(300.0, f64::NAN, 1000.0, 240.0, 150.0), None);
    }

    #[test]
    fn regions_are_read_back_from_the_config() {
        assert_eq!(
            region_of("memlat chains=1 region=16MiB no-inject"),
            Some(16.0 * 1048576.0)
        );
        assert_eq!(region_of("memlat chains=1"), None);
    }
}
