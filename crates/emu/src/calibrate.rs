//! DRAM calibration: this machine's DRAM latency (and the remote node's,
//! where there are two NUMA nodes), measured by pointer chasing over a
//! region much larger than the last-level cache (`pmlab_probe::host::Chain`:
//! huge pages where the kernel gives them), and the TSC frequency
//! (`pmlab_clock`); cached per machine (CPU model + memory size) under
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
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            region: None,
            accesses: 10_000_000,
            repeat: 3,
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
    if let Some(c) = load_cache()? {
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
        let mut chain = Chain::new(default_region(llc_bytes()) as usize, None, SEED)?;
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
            let t0 = thread_cpu_ns();
            self.chain.chase(part);
            *v = (thread_cpu_ns() - t0) as f64 / part as f64;
        }
        ns.sort_by(f64::total_cmp);
        (ns[3] + ns[4]) / 2.0
    }
}

/// The calling thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calibration's region for a last-level cache of `llc` bytes: 8x
/// the LLC, 256 MiB to 1 GiB.
fn default_region(llc: u64) -> u64 {
    (llc * 8).clamp(256 << 20, 1 << 30)
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
