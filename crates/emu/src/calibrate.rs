//! DRAM calibration: this machine's DRAM latency (and the remote node's,
//! where there are two NUMA nodes), measured by pointer chasing over a
//! region much larger than the last-level cache (`pmlab_probe::host::Chain`:
//! huge pages where the kernel gives them), the TSC frequency
//! (`pmlab_clock`) and the *effective* last-level cache ([`effective_llc`]:
//! the capacity a chase finds, measured, not the size sysfs reports);
//! cached per machine (CPU model + memory size) under
//! `$XDG_CACHE_HOME/pmlab` (or `~/.cache/pmlab`), where `pmlab run
//! --dram-latency auto` finds it. `pmlab calibrate` prints it.

use crate::error::{fail, Context, Result};
use pmlab_model::units::Bytes;
use pmlab_probe::host::Chain;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;

/// What to measure: the region chased, the loads per measurement and the
/// measurements (of which the median is kept).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Region in bytes [default: 8x the LLC, at least 256 MiB, at most 1 GiB].
    pub region: Option<u64>,
    /// Dependent loads per measurement.
    pub accesses: u64,
    /// Measurements.
    pub repeat: u32,
    /// Also measure the effective last-level cache ([`effective_llc`]).
    pub effective_llc: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            region: None,
            accesses: 10_000_000,
            repeat: 3,
            effective_llc: true,
        }
    }
}

/// What a measurement has to say while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note<'a> {
    /// A step done (for a progress display).
    Progress(&'a str),
    /// Something that makes the result doubtful (always worth showing).
    Warning(&'a str),
    /// Something the user should know is happening (always worth showing).
    Info(&'a str),
}

/// A machine's calibration (the cache file's content).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    /// `/proc/cpuinfo` model name.
    pub cpu_model: String,
    /// MemTotal in KiB.
    pub mem_total_kib: u64,
    /// Local DRAM latency, ns (median).
    pub dram_latency_ns: f64,
    /// Spread of the measurements (max - min), ns.
    pub dram_latency_spread_ns: f64,
    /// Remote-node latency, ns (two NUMA nodes only).
    pub remote_latency_ns: Option<f64>,
    /// NUMA nodes seen.
    pub numa_nodes: u32,
    /// TSC frequency, GHz.
    pub tsc_ghz: f64,
    /// Region chased, bytes.
    pub region_bytes: u64,
    /// Last-level cache size, bytes (0 if unknown).
    pub llc_bytes: u64,
    /// Huge pages were granted for the region (AnonHugePages grew).
    pub huge_pages: bool,
    /// The effective last-level cache, bytes ([`effective_llc`]; 0 if not
    /// measured: a cache written before it existed, or no knee found).
    #[serde(default)]
    pub effective_llc_bytes: u64,
    /// The native chase curve it was found on: (region bytes, ns per load).
    #[serde(default)]
    pub llc_curve: Vec<(u64, f64)>,
    /// Seconds since the epoch when measured.
    pub measured_at: u64,
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown-cpu".into())
}

fn meminfo(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn llc_bytes() -> u64 {
    let mut best = 0;
    for i in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let Ok(size) = std::fs::read_to_string(format!("{dir}/size")) else {
            continue;
        };
        if let Ok(b) = Bytes::parse(size.trim()) {
            best = best.max(b.get());
        }
    }
    best
}

fn numa_nodes() -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    if v.is_empty() {
        v.push(0);
    }
    v
}

/// The cache file for this machine.
pub fn cache_path() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(h) => PathBuf::from(h).join(".cache"),
            None => {
                fail!(
                    NotFound,
                    "neither XDG_CACHE_HOME nor HOME is set: cannot locate the calibration cache"
                )
            }
        },
    };
    let key: String = format!("{}-{}MiB", cpu_model(), meminfo("MemTotal:") / 1024)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok(base.join("pmlab").join(format!("calibration-{key}.json")))
}

/// The cached calibration of this machine, if any (a corrupt cache is an
/// error naming the file).
pub fn load_cache() -> Result<Option<Calibration>> {
    let p = cache_path()?;
    match std::fs::read_to_string(&p) {
        Ok(s) => serde_json::from_str(&s).map(Some).with_context(|| {
            format!(
                "calibration cache {} is corrupt: delete it and run `pmlab calibrate`",
                p.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
    }
}

/// The cached calibration, measuring (with the default [`Settings`]) and
/// caching it first if absent; `note` hears that it is measuring.
pub fn cached_or_measure(note: &dyn Fn(Note)) -> Result<Calibration> {
    if let Some(mut c) = load_cache()? {
        if c.llc_curve.is_empty() {
            note(Note::Info("the cached calibration has no effective last-level cache: measuring it now (about a second; `pmlab calibrate` does it once)"));
            let (llc, curve) = measure_effective_llc()?;
            c.effective_llc_bytes = llc;
            c.llc_curve = curve;
            save(&c)?;
        }
        return Ok(c);
    }
    note(Note::Info("no calibration cached for this machine: measuring DRAM latency now (a few seconds; `pmlab calibrate` does it once)"));
    let c = measure(&Settings::default(), &|n| {
        if !matches!(n, Note::Progress(_)) {
            note(n)
        }
    })?;
    save(&c)?;
    Ok(c)
}

/// Write `c` as this machine's cached calibration (atomically: a
/// temporary file renamed over the cache).
pub fn save(c: &Calibration) -> Result<()> {
    let p = cache_path()?;
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(c)? + "\n")
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &p).with_context(|| format!("cannot write {}", p.display()))?;
    Ok(())
}

/// The seed of the calibration's chain order.
const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// A calibration chain kept ready, so that the DRAM latency can be measured
/// again and again at the moments it matters (`pmlab validate` measures it
/// just before each emulated run: this machine's latency drifts by more
/// than the accuracy targets over minutes).
pub struct Chaser {
    chain: Chain,
}

impl Chaser {
    /// Map and link a chain over the calibration's region (8x the LLC,
    /// 256 MiB to 1 GiB) and warm its TLB entries.
    pub fn new() -> Result<Chaser> {
        Chaser::over(calibration_region())
    }

    /// As [`new`](Self::new), over `region` bytes instead (a program's
    /// footprint past the calibration's region: `pmlab validate
    /// --device`).
    pub fn over(region: u64) -> Result<Chaser> {
        let mut chain = Chain::new(region as usize, None, SEED)?;
        chain.chase(1_000_000);
        Ok(Chaser { chain })
    }

    /// ns per dependent load over `steps` loads, continuing where the last
    /// measurement stopped. Timed on the thread's CPU clock, in 8 equal
    /// parts of which the median counts: time the thread spent preempted
    /// is not memory latency (with two busy loops on this 2-vCPU machine
    /// the wall clock read 464-646 ns against ~165).
    pub fn measure(&mut self, steps: u64) -> f64 {
        let part = (steps / 8).max(1);
        let mut ns = [0.0f64; 8];
        for v in &mut ns {
            let t0 = pmlab_clock::thread_cpu_ns();
            self.chain.chase(part);
            *v = (pmlab_clock::thread_cpu_ns() - t0) as f64 / part as f64;
        }
        ns.sort_by(f64::total_cmp);
        (ns[3] + ns[4]) / 2.0
    }
}

/// A short knee probe: the effective-LLC curve's chains up to twice the
/// LLC (at least 64 MiB), linked once and chased again whenever the
/// effective LLC is wanted *now* (`pmlab validate`'s working-set study
/// takes it right before each region's runs: this VM's share of the
/// host's L3 moves over minutes). Each measurement warms every chain with
/// a pass over its lines (at most 600,000 loads: past that a region is
/// far out of any cache) and times 160,000 more on the thread's CPU clock
/// (4 parts, the middle two); about a second here.
pub struct KneeProbe {
    chains: Vec<(u64, Chain)>,
    l2: u64,
}

impl KneeProbe {
    /// Map and link the chains ([`llc_curve_regions`] of the sysfs LLC).
    pub fn new() -> Result<KneeProbe> {
        let chains = llc_curve_regions(llc_bytes())
            .into_iter()
            .map(|r| Ok((r, Chain::new(r as usize, None, SEED ^ r)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(KneeProbe {
            chains,
            l2: l2_bytes(),
        })
    }

    /// The curve now, and its knee ([`effective_llc`], 0 when none) against
    /// `dram`, the DRAM latency measured by the caller just before.
    pub fn measure(&mut self, dram: f64) -> (u64, Vec<(u64, f64)>) {
        let mut curve = Vec::with_capacity(self.chains.len());
        for (r, chain) in &mut self.chains {
            chain.chase((*r / 64).min(600_000));
            let part = 40_000;
            let mut ns = [0.0f64; 4];
            for v in &mut ns {
                let t0 = pmlab_clock::thread_cpu_ns();
                chain.chase(part);
                *v = (pmlab_clock::thread_cpu_ns() - t0) as f64 / part as f64;
            }
            ns.sort_by(f64::total_cmp);
            curve.push((*r, (ns[1] + ns[2]) / 2.0));
        }
        let knee = effective_llc(&curve, llc_in_cache(&curve, self.l2), dram).unwrap_or(0);
        (knee, curve)
    }
}

/// `PMLAB_INSTR_LLC` for an effective LLC of `bytes`: the geometry
/// ([`model_geometry`]) nearest [`random_model_bytes`]; None for 0
/// (unknown).
pub fn instr_llc_for(bytes: u64) -> Option<String> {
    instr_llc_model(random_model_bytes(bytes))
}

/// The region this machine's calibration chases (8x its LLC, 256 MiB to
/// 1 GiB).
pub fn calibration_region() -> u64 {
    default_region(llc_bytes())
}

/// The calibration's region for a last-level cache of `llc` bytes: 8x
/// the LLC, 256 MiB to 1 GiB.
fn default_region(llc: u64) -> u64 {
    (llc * 8).clamp(256 << 20, 1 << 30)
}

/// The regions of the effective-LLC curve for a last-level cache of `llc`
/// bytes (sysfs; 0 unknown): 1, 1.5, 2, 3, 4, 6 ... MiB up to twice the
/// LLC, at least 64 MiB and at most 512 MiB, so that the curve reaches
/// DRAM.
pub fn llc_curve_regions(llc: u64) -> Vec<u64> {
    let top = (2 * llc).clamp(64 << 20, 512 << 20);
    let mut v = Vec::new();
    let mut r: u64 = 1 << 20;
    while r <= top {
        v.push(r);
        if r + r / 2 <= top {
            v.push(r + r / 2);
        }
        r *= 2;
    }
    v
}

/// The native chase curve over `regions`: for each region a random
/// cycle through all its lines (huge pages where the kernel gives them),
/// one full pass to bring the caches to their steady state (up to 1M
/// loads: a region that large is far past any cache), then the ns
/// per load over at least 200,000 loads (a pass, up to 1M), timed on the
/// thread's CPU clock in 4 parts of which the median counts (time spent
/// preempted is not memory latency).
pub fn measure_llc_curve(regions: &[u64]) -> Result<Vec<(u64, f64)>> {
    let mut out = Vec::with_capacity(regions.len());
    for &r in regions {
        let mut chain = Chain::new(r as usize, None, SEED ^ r)?;
        let lines = r / 64;
        chain.chase(lines.min(1_000_000));
        let steps = lines.clamp(200_000, 1_000_000);
        let part = steps / 4;
        let mut ns = [0.0f64; 4];
        for v in &mut ns {
            let t0 = pmlab_clock::thread_cpu_ns();
            chain.chase(part);
            *v = (pmlab_clock::thread_cpu_ns() - t0) as f64 / part as f64;
        }
        ns.sort_by(f64::total_cmp);
        out.push((r, (ns[1] + ns[2]) / 2.0));
    }
    Ok(out)
}

/// The in-cache time of an effective-LLC curve: its figure at the
/// smallest region of at least twice the level-2 cache (`l2` bytes; 1 MiB
/// when unknown), where a chase hits the last level and not the ones
/// below; the smallest region's when none is that large.
pub fn llc_in_cache(curve: &[(u64, f64)], l2: u64) -> f64 {
    let l2 = if l2 == 0 { 1 << 20 } else { l2 };
    curve
        .iter()
        .find(|(r, _)| *r >= 2 * l2)
        .or(curve.first())
        .map_or(f64::NAN, |&(_, t)| t)
}

/// The effective last-level cache from a native chase curve (region
/// bytes, ns per load; regions ascending): the region at which half of a
/// random cycle's loads miss, the miss share of a region being
/// `(t - in_cache) / (dram - in_cache)` (`dram` at least the largest
/// region's figure). Taken at the last crossing of
/// one half from below (a noisy point below the knee does not count),
/// interpolated on log(region) between the two points around it. `None`
/// when no point reaches one half (the cache is larger than the curve
/// shows) or DRAM is not slower than the cache; the smallest region when
/// every point is past one half.
///
/// The modelled cache is LRU: on a cyclic chase it hits every load of a
/// region that fits and misses every load of one that does not, a step
/// where a real cache (other replacement, other tenants' lines) shows a
/// ramp. The half-way point is where that step matches the ramp best;
/// with a cache whose hits fall as capacity / region past the capacity,
/// it lies at up to twice the capacity.
pub fn effective_llc(curve: &[(u64, f64)], in_cache: f64, dram: f64) -> Option<u64> {
    // DRAM measured over a region too small (`calibrate --region`) must
    // not put the knee inside the curve's own DRAM part.
    let dram = curve.last().map_or(dram, |&(_, t)| dram.max(t));
    if curve.is_empty() || dram.is_nan() || in_cache.is_nan() || dram <= in_cache * 1.2 {
        return None;
    }
    let m = |t: f64| (t - in_cache) / (dram - in_cache);
    if curve.iter().all(|&(_, t)| m(t) >= 0.5) {
        return Some(curve[0].0);
    }
    let i = (1..curve.len())
        .rev()
        .find(|&i| m(curve[i - 1].1) < 0.5 && m(curve[i].1) >= 0.5)?;
    let ((r0, t0), (r1, t1)) = (curve[i - 1], curve[i]);
    let (m0, m1) = (m(t0), m(t1));
    let f = (0.5 - m0) / (m1 - m0);
    let (l0, l1) = ((r0 as f64).ln(), (r1 as f64).ln());
    Some((l0 + f * (l1 - l0)).exp().round() as u64)
}

/// The cache the instrumented source models for an effective capacity of
/// `bytes`: a power-of-two number of sets (at least 256, the hooks'
/// filter; the compact model needs it) of 8 to 16 ways of 64 B, the
/// nearest such size.
pub fn model_geometry(bytes: u64) -> pmlab_model::cache::CacheConfig {
    let per16 = 64 * 16;
    let sets = bytes.div_ceil(per16).next_power_of_two().max(256);
    let ways = ((bytes as f64 / (64 * sets) as f64).round() as u32).clamp(8, 16);
    pmlab_model::cache::CacheConfig::new(sets * 64 * ways as u64, ways)
}

/// `PMLAB_INSTR_LLC` (`SIZE:WAYS`) for the effective LLC of `c`, if
/// measured: [`instr_llc_for`].
pub fn instr_llc_setting(c: &Calibration) -> Option<String> {
    instr_llc_for(c.effective_llc_bytes)
}

/// The size of a random-replacement model whose cyclic chase misses half
/// of its loads at a region of `knee` bytes, as the machine's does at its
/// effective LLC: `knee / half_hit_ratio(16)`, about `knee / 1.29` (the
/// runtime's compact model evicts a random way among a set's older ones:
/// `CompactCache::set_random_replacement`).
pub fn random_model_bytes(knee: u64) -> u64 {
    (knee as f64 / pmlab_model::cache::half_hit_ratio(16)) as u64
}

/// The size of a random-replacement model whose miss curve on a cyclic
/// chase fits a native chase curve (region bytes, ns per load; regions
/// ascending) best: the native miss share of a region is
/// `(t - in_cache) / (dram - in_cache)` (`dram` at least the largest
/// region's figure, as in [`effective_llc`]), the model's
/// [`random_cycle_miss`](pmlab_model::cache::random_cycle_miss)`(region /
/// size)`, and the size minimises the sum of their absolute differences
/// (one preempted point weighs no more than its own distance) over the
/// curve's regions of at least `floor` bytes (past the level-2
/// cache), searched on a fine logarithmic grid. A fit to every point of
/// the ramp, not to its half-way crossing alone: a ramp gentler or
/// steadier than the model's is met in the middle, and one noisy point
/// moves it less. `None` when no point misses a quarter of its loads or
/// none hits three quarters (no ramp within the curve), or DRAM is not
/// slower than the cache.
pub fn fit_model_bytes(curve: &[(u64, f64)], in_cache: f64, dram: f64, floor: u64) -> Option<u64> {
    let dram = curve.last().map_or(dram, |&(_, t)| dram.max(t));
    if dram.is_nan() || in_cache.is_nan() || dram <= in_cache * 1.2 {
        return None;
    }
    let pts: Vec<(f64, f64)> = curve
        .iter()
        .filter(|&&(r, _)| r >= floor)
        .map(|&(r, t)| {
            (
                r as f64,
                ((t - in_cache) / (dram - in_cache)).clamp(0.0, 1.0),
            )
        })
        .collect();
    if !pts.iter().any(|p| p.1 >= 0.25) || !pts.iter().any(|p| p.1 <= 0.25) {
        return None;
    }
    let err = |c: f64| -> f64 {
        pts.iter()
            .map(|&(r, m)| (pmlab_model::cache::random_cycle_miss(r / c, 16) - m).abs())
            .sum()
    };
    let (lo, hi) = (pts[0].0 / 8.0, pts[pts.len() - 1].0 * 2.0);
    let steps = 600;
    let mut best = (f64::INFINITY, lo);
    for i in 0..=steps {
        let c = lo * (hi / lo).powf(i as f64 / steps as f64);
        let e = err(c);
        if e < best.0 {
            best = (e, c);
        }
    }
    Some(best.1.round() as u64)
}

/// `PMLAB_INSTR_LLC` for a model of about `bytes` (the geometry
/// [`model_geometry`] makes of it); None for 0 (unknown).
pub fn instr_llc_model(bytes: u64) -> Option<String> {
    (bytes > 0).then(|| {
        let g = model_geometry(bytes);
        format!("{}:{}", g.size_bytes, g.ways)
    })
}

/// Twice the level-2 cache of cpu0 (2 MiB when unknown): the smallest
/// region a chase curve's ramp is read from (below, the chase hits the
/// level-2 cache).
pub fn l2_floor() -> u64 {
    2 * match l2_bytes() {
        0 => 1 << 20,
        b => b,
    }
}

/// The level-2 cache of cpu0 (data or unified), bytes (0 if unknown).
fn l2_bytes() -> u64 {
    (0..8)
        .filter_map(|i| {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
            let level = read("level")?;
            let kind = read("type")?;
            (level.trim() == "2" && kind.trim() != "Instruction")
                .then(|| Bytes::parse(read("size")?.trim()).ok().map(|b| b.get()))
                .flatten()
        })
        .max()
        .unwrap_or(0)
}

/// Measure this machine's effective last-level cache: the curve
/// ([`measure_llc_curve`] over [`llc_curve_regions`] and the DRAM
/// calibration's region, whose figure is the DRAM latency the knee is
/// measured against: on the thread's CPU clock like the rest of the
/// curve, so that a loaded machine's preemptions do not inflate it) and
/// its knee ([`effective_llc`]; 0 when none is found). One to two
/// seconds.
pub fn measure_effective_llc() -> Result<(u64, Vec<(u64, f64)>)> {
    let llc = llc_bytes();
    let mut regions = llc_curve_regions(llc);
    let far = default_region(llc);
    if regions.last().is_some_and(|&r| r < far) {
        regions.push(far);
    }
    let curve = measure_llc_curve(&regions)?;
    let dram = curve.last().map_or(f64::NAN, |&(_, t)| t);
    let knee = effective_llc(&curve, llc_in_cache(&curve, l2_bytes()), dram).unwrap_or(0);
    Ok((knee, curve))
}

/// ns per load over `n` dependent loads of `chain`, from its start, on
/// the wall clock.
fn chase(chain: &mut Chain, n: u64) -> f64 {
    chain.rewind();
    let t = Instant::now();
    chain.chase(n);
    t.elapsed().as_nanos() as f64 / n as f64
}

fn median_and_spread(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let med = v[v.len() / 2];
    (med, v[v.len() - 1] - v[0])
}

/// Measure this machine's calibration with `settings`; `note` hears each
/// step and any doubt about the result.
pub fn measure(settings: &Settings, note: &dyn Fn(Note)) -> Result<Calibration> {
    let llc = llc_bytes();
    let region = settings.region.unwrap_or_else(|| default_region(llc));
    if region < (1 << 20) {
        fail!(
            Invalid,
            "--region {} is too small: give at least 1MiB (much larger than the LLC for a DRAM latency)",
            Bytes(region)
        );
    }
    if llc > 0 && region < 4 * llc {
        note(Note::Warning(&format!(
            "region {} is under 4x the last-level cache ({}): the latency will be too low",
            Bytes(region),
            Bytes(llc)
        )));
    }
    if settings.accesses == 0 || settings.repeat == 0 {
        fail!(Invalid, "--accesses and --repeat must be at least 1");
    }
    let nodes = numa_nodes();
    let huge_before = meminfo("AnonHugePages:");
    let run_on = |node: Option<u32>, label: &str| -> Result<(f64, f64, bool)> {
        note(Note::Progress(&format!(
            "building a {} chain ({label})",
            Bytes(region)
        )));
        let mut chain = Chain::new(region as usize, node, SEED).map_err(|e| {
            crate::Error::new(
                crate::ErrorKind::Failed,
                format!("{e} (try a smaller --region)"),
            )
        })?;
        let huge =
            chain.pages().starts_with("hugetlbfs") || meminfo("AnonHugePages:") > huge_before;
        let _ = chase(&mut chain, settings.accesses.min(1_000_000)); // warm the TLB
        let mut v = Vec::new();
        for i in 0..settings.repeat {
            let ns = chase(&mut chain, settings.accesses);
            note(Note::Progress(&format!(
                "{label} run {}/{}: {ns:.1} ns",
                i + 1,
                settings.repeat
            )));
            v.push(ns);
        }
        let (m, s) = median_and_spread(v);
        Ok((m, s, huge))
    };
    let (dram, spread, huge) = run_on(
        if nodes.len() > 1 {
            Some(nodes[0])
        } else {
            None
        },
        "local",
    )?;
    let remote = if nodes.len() > 1 {
        // Runs on whatever CPU the scheduler picks; pin with numactl
        // --cpunodebind for a strict local/remote pair.
        Some(run_on(Some(nodes[1]), "remote")?.0)
    } else {
        None
    };
    let (effective_llc_bytes, llc_curve) = if settings.effective_llc {
        note(Note::Progress("measuring the effective last-level cache"));
        measure_effective_llc()?
    } else {
        (0, Vec::new())
    };
    if settings.effective_llc && effective_llc_bytes == 0 {
        note(Note::Warning("no knee in the chase curve: the effective last-level cache is unknown, the instrumented source models the size sysfs reports"));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Calibration {
        cpu_model: cpu_model(),
        mem_total_kib: meminfo("MemTotal:"),
        dram_latency_ns: dram,
        dram_latency_spread_ns: spread,
        remote_latency_ns: remote,
        numa_nodes: nodes.len() as u32,
        tsc_ghz: pmlab_clock::measure_tsc_ghz(100_000_000),
        region_bytes: region,
        llc_bytes: llc,
        huge_pages: huge,
        effective_llc_bytes,
        llc_curve,
        measured_at: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_three() {
        assert_eq!(median_and_spread(vec![3.0, 1.0, 2.0]), (2.0, 2.0));
    }

    #[test]
    fn region_is_eight_llcs_within_bounds() {
        assert_eq!(default_region(0), 256 << 20);
        assert_eq!(default_region(64 << 20), 512 << 20);
        assert_eq!(default_region(1 << 30), 1 << 30);
    }

    const MIB: u64 = 1 << 20;

    /// A chase curve over `regions` MiB from a miss share per region.
    fn curve(regions: &[f64], in_cache: f64, dram: f64, m: impl Fn(f64) -> f64) -> Vec<(u64, f64)> {
        regions
            .iter()
            .map(|&r| ((r * MIB as f64) as u64, in_cache + m(r) * (dram - in_cache)))
            .collect()
    }

    #[test]
    fn the_model_size_is_fitted_to_the_whole_ramp() {
        use pmlab_model::cache::random_cycle_miss;
        let regions = [
            1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0,
        ];
        // A machine whose cache behaves as a 10 MiB random-replacement
        // model: the fit finds it (the grid's step is under 1%).
        let c = curve(&regions, 40.0, 150.0, |r| random_cycle_miss(r / 10.0, 16));
        let got = fit_model_bytes(&c, 40.0, 150.0, 2 * MIB).unwrap() as f64 / MIB as f64;
        assert!((got - 10.0).abs() < 0.15, "{got}");
        // One preempted point below the ramp (8 MiB read at DRAM) moves it
        // by less than the half-way crossing would have.
        let mut noisy = c.clone();
        noisy[6].1 = 150.0;
        let got = fit_model_bytes(&noisy, 40.0, 150.0, 2 * MIB).unwrap() as f64 / MIB as f64;
        assert!((got - 10.0).abs() < 2.0, "{got}");
        // A gentler ramp (hits falling as 12 MiB / region): the fitted
        // model misses half of its loads within the ramp's middle.
        let c = curve(&regions, 40.0, 150.0, |r| (1.0 - 12.0 / r).max(0.0));
        let got = fit_model_bytes(&c, 40.0, 150.0, 2 * MIB).unwrap() as f64 / MIB as f64;
        let half = got * pmlab_model::cache::half_hit_ratio(16);
        assert!(
            half > 16.0 && half < 32.0,
            "model {got} MiB, half at {half}"
        );
        // No ramp (everything fits, or nothing does): no fit.
        let flat = curve(&regions, 40.0, 150.0, |_| 0.0);
        assert_eq!(fit_model_bytes(&flat, 40.0, 150.0, 2 * MIB), None);
        let far = curve(&regions, 40.0, 150.0, |_| 1.0);
        assert_eq!(fit_model_bytes(&far, 40.0, 150.0, 2 * MIB), None);
        assert_eq!(instr_llc_model(0), None);
        assert_eq!(instr_llc_model(8 * MIB).unwrap(), "8388608:16");
    }

    #[test]
    fn effective_llc_is_where_half_the_loads_miss() {
        let regions = [
            1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0,
        ];
        // An LRU cache of 12 MiB: a step between 12 and 16 MiB; the knee
        // is half-way on the log scale.
        let step = curve(&regions, 15.0, 150.0, |r| if r <= 12.0 { 0.0 } else { 1.0 });
        let k = effective_llc(&step, 15.0, 150.0).unwrap();
        assert!(
            (k as f64 - (12.0f64 * 16.0).sqrt() * MIB as f64).abs() < 1e3,
            "{k}"
        );
        // Hits falling as capacity / region past 12 MiB: half miss at 24.
        let ramp = curve(&regions, 15.0, 150.0, |r| (1.0 - 12.0 / r).max(0.0));
        let k = effective_llc(&ramp, 15.0, 150.0).unwrap();
        assert!((k as f64 / (24 * MIB) as f64 - 1.0).abs() < 1e-6, "{k}");
        // A noisy point below the knee (a preempted measurement) is passed
        // over: the last crossing counts.
        let mut noisy = ramp.clone();
        noisy[2].1 = 140.0;
        assert_eq!(effective_llc(&noisy, 15.0, 150.0), Some(k));
        // A ramp between two points: interpolated on log(region).
        let two = [
            (8 * MIB, 15.0 + 0.25 * 135.0),
            (32 * MIB, 15.0 + 0.75 * 135.0),
        ];
        let k = effective_llc(&two, 15.0, 150.0).unwrap();
        assert!((k as f64 / (16 * MIB) as f64 - 1.0).abs() < 1e-6, "{k}");
    }

    #[test]
    fn effective_llc_needs_a_knee() {
        let regions = [1.0, 2.0, 4.0, 8.0];
        // Everything fits: no knee within the curve.
        let fits = curve(&regions, 15.0, 150.0, |_| 0.1);
        assert_eq!(effective_llc(&fits, 15.0, 150.0), None);
        // Everything misses: at most the smallest region.
        let none = curve(&regions, 15.0, 150.0, |_| 0.9);
        assert_eq!(effective_llc(&none, 15.0, 150.0), Some(MIB));
        // DRAM no slower than the cache, or no curve: nothing to say.
        let flat = curve(&regions, 15.0, 15.5, |_| 1.0);
        assert_eq!(effective_llc(&flat, 15.0, 16.0), None);
        // A DRAM figure below the curve's own far end (measured over too
        // small a region) is replaced by that end.
        let ramp = curve(&regions, 15.0, 150.0, |r| r / 8.0);
        assert_eq!(effective_llc(&ramp, 15.0, 20.0), Some(4 * MIB));
        assert_eq!(effective_llc(&[], 15.0, 150.0), None);
    }

    #[test]
    fn in_cache_time_is_taken_past_the_second_level() {
        let c = [(MIB, 5.0), (2 * MIB, 12.0), (4 * MIB, 14.0)];
        assert_eq!(llc_in_cache(&c, 512 << 10), 5.0);
        assert_eq!(llc_in_cache(&c, MIB), 12.0);
        assert_eq!(llc_in_cache(&c, 0), 12.0);
        assert_eq!(llc_in_cache(&c, 8 * MIB), 5.0);
        assert!(llc_in_cache(&[], MIB).is_nan());
    }

    #[test]
    fn curve_regions_reach_past_the_llc() {
        let r = llc_curve_regions(32 * MIB);
        assert_eq!(r.first(), Some(&MIB));
        assert_eq!(r.last(), Some(&(64 * MIB)));
        assert_eq!(r.len(), 13);
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(llc_curve_regions(0).last(), Some(&(64 * MIB)));
        assert_eq!(llc_curve_regions(1 << 30).last(), Some(&(512 * MIB)));
    }

    #[test]
    fn model_geometry_has_power_of_two_sets() {
        use pmlab_model::cache::CacheConfig;
        assert_eq!(model_geometry(12 * MIB), CacheConfig::new(12 * MIB, 12));
        assert_eq!(model_geometry(32 * MIB), CacheConfig::new(32 * MIB, 16));
        assert_eq!(model_geometry(20 * MIB), CacheConfig::new(20 * MIB, 10));
        // 13.9 MiB: 16384 sets of 14 ways.
        assert_eq!(model_geometry(14_530_000), CacheConfig::new(14 * MIB, 14));
        // Tiny: the filter's 256 sets, 8 ways.
        assert_eq!(model_geometry(100 << 10), CacheConfig::new(128 << 10, 8));
        for b in [3 * MIB, 7 * MIB + 12345, 48 * MIB, 100 * MIB] {
            let g = model_geometry(b);
            let sets = g.sets().unwrap();
            assert!(sets.is_power_of_two() && sets >= 256, "{b}");
            assert!(
                (g.size_bytes as f64 / b as f64 - 1.0).abs() < 0.07,
                "{b}: {g:?}"
            );
        }
        let mut c = Calibration {
            cpu_model: "x".into(),
            mem_total_kib: 1,
            dram_latency_ns: 150.0,
            dram_latency_spread_ns: 1.0,
            remote_latency_ns: None,
            numa_nodes: 1,
            tsc_ghz: 2.0,
            region_bytes: 256 * MIB,
            llc_bytes: 32 * MIB,
            huge_pages: true,
            effective_llc_bytes: 0,
            llc_curve: Vec::new(),
            measured_at: 0,
        };
        assert_eq!(instr_llc_setting(&c), None);
        // A knee at 12 MiB: a random-replacement model of 12 / 1.29 =
        // 9.30 MiB, the nearest geometry 16384 sets of 9 ways.
        c.effective_llc_bytes = 12 * MIB;
        assert_eq!(instr_llc_setting(&c).as_deref(), Some("9437184:9"));
        assert_eq!(random_model_bytes(12 * MIB), 9_756_307);
        // A cache written before the field existed still reads.
        let mut v = serde_json::to_value(&c).unwrap();
        v.as_object_mut().unwrap().remove("effective_llc_bytes");
        v.as_object_mut().unwrap().remove("llc_curve");
        let old: Calibration = serde_json::from_value(v).unwrap();
        assert_eq!(old.effective_llc_bytes, 0);
    }

    #[test]
    fn bad_settings_are_refused_before_measuring() {
        let quiet = |_: Note| {};
        let s = Settings {
            region: Some(4096),
            ..Settings::default()
        };
        let e = measure(&s, &quiet).unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
        let s = Settings {
            region: Some(2 << 20),
            repeat: 0,
            ..Settings::default()
        };
        assert!(measure(&s, &quiet).is_err());
    }
}
