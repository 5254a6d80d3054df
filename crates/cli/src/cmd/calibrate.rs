//! `pmlab calibrate`: measure this machine's DRAM latency (and the remote
//! node's, where there are two NUMA nodes) by pointer chasing over a region
//! much larger than the last-level cache, backed by huge pages where the
//! kernel gives them; measure the TSC frequency; cache the result per
//! machine (CPU model + memory size) under `$XDG_CACHE_HOME/pmlab` (or
//! `~/.cache/pmlab`), where `pmlab run --dram-latency auto` finds it.

use anyhow::{bail, Context};
use pmlab_model::units::Bytes;
use serde::{Deserialize, Serialize};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `pmlab calibrate`.
#[derive(clap::Args)]
pub struct Args {
    /// Region to chase over (default: 8x the LLC, at least 256MiB, at most 1GiB).
    #[arg(long)]
    pub region: Option<String>,
    /// Dependent loads per measurement.
    #[arg(long, default_value_t = 10_000_000)]
    pub accesses: u64,
    /// Measurements (the median is kept).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Print the cached calibration without measuring (error if none).
    #[arg(long)]
    pub show: bool,
    /// Measure but do not write the cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    pub progress: bool,
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
pub fn cache_path() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(h) => PathBuf::from(h).join(".cache"),
            None => {
                bail!("neither XDG_CACHE_HOME nor HOME is set: cannot locate the calibration cache")
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
pub fn load_cache() -> anyhow::Result<Option<Calibration>> {
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

/// The cached calibration, measuring (and caching) it first if absent.
pub fn cached_or_measure() -> anyhow::Result<Calibration> {
    if let Some(c) = load_cache()? {
        return Ok(c);
    }
    eprintln!("pmlab: no calibration cached for this machine: measuring DRAM latency now (a few seconds; `pmlab calibrate` does it once)");
    let args = Args {
        region: None,
        accesses: 10_000_000,
        repeat: 3,
        show: false,
        no_cache: false,
        json: false,
        progress: false,
    };
    let c = measure(&args)?;
    save(&c)?;
    Ok(c)
}

fn save(c: &Calibration) -> anyhow::Result<()> {
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

/// A mapping of the chase region.
struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    fn new(len: usize, node: Option<u32>) -> anyhow::Result<Region> {
        // SAFETY: anonymous mapping; checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            bail!(
                "cannot map a {} region: {} (try a smaller --region)",
                Bytes(len as u64),
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: advising our own mapping; failure only loses huge pages.
        unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        if let Some(n) = node {
            let mut mask = [0u64; 16];
            mask[(n / 64) as usize] |= 1 << (n % 64);
            // SAFETY: mbind on our own mapping.
            let r = unsafe {
                libc::syscall(libc::SYS_mbind, ptr, len, 2, mask.as_ptr(), 1024usize, 0u32)
            };
            if r != 0 {
                bail!(
                    "cannot bind the region to NUMA node {n}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(Region {
            ptr: ptr as *mut u8,
            len,
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// A random single-cycle permutation of the region's cache lines (Sattolo),
/// each line holding the address of the next.
fn build_chain(r: &Region, seed: u64) -> usize {
    let lines = r.len / 64;
    let mut order: Vec<u32> = (0..lines as u32).collect();
    let mut x = seed | 1;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        order.swap(i, j);
    }
    let base = r.ptr as usize;
    for k in 0..lines {
        let from = base + order[k] as usize * 64;
        let to = base + order[(k + 1) % lines] as usize * 64;
        // SAFETY: both addresses are lines inside the region.
        unsafe { *(from as *mut usize) = to };
    }
    base + order[0] as usize * 64
}

/// A calibration chain kept ready, so that the DRAM latency can be measured
/// again and again at the moments it matters (`pmlab validate` measures it
/// just before each emulated run: this machine's latency drifts by more
/// than the accuracy targets over minutes).
pub struct Chaser {
    region: Region,
    at: usize,
}

impl Chaser {
    /// Map and link a chain over the calibration's region (8x the LLC,
    /// 256 MiB to 1 GiB) and warm its TLB entries.
    pub fn new() -> anyhow::Result<Chaser> {
        let region = Region::new(default_region(llc_bytes()) as usize, None)?;
        let start = build_chain(&region, 0x9E37_79B9_7F4A_7C15);
        let (_, at) = chase(start, 1_000_000);
        Ok(Chaser { region, at })
    }

    /// ns per dependent load over `steps` loads, continuing where the last
    /// measurement stopped. Timed on the thread's CPU clock, in 8 equal
    /// parts of which the median counts: time the thread spent preempted
    /// is not memory latency (with two busy loops on this 2-vCPU machine
    /// the wall clock read 464-646 ns against ~165).
    pub fn measure(&mut self, steps: u64) -> f64 {
        debug_assert!(self.region.len >= 64);
        let part = (steps / 8).max(1);
        let mut ns = [0.0f64; 8];
        for v in &mut ns {
            let t0 = thread_cpu_ns();
            let (_, at) = chase(self.at, part);
            *v = (thread_cpu_ns() - t0) as f64 / part as f64;
            self.at = at;
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

fn chase(start: usize, n: u64) -> (f64, usize) {
    let mut p = start;
    let t = Instant::now();
    for _ in 0..n {
        // SAFETY: every line of the chain holds a valid next address.
        p = unsafe { std::ptr::read_volatile(p as *const usize) };
    }
    (t.elapsed().as_nanos() as f64 / n as f64, p)
}

/// (clock ns, TSC) read close together; retried until both TSC reads
/// around the clock read are near, so a preemption cannot skew the pair.
#[cfg(target_arch = "x86_64")]
fn paired(origin: Instant) -> (f64, f64) {
    let mut best = (0.0, 0.0, u64::MAX);
    for _ in 0..50 {
        // SAFETY: rdtsc has no preconditions.
        let c0 = unsafe { std::arch::x86_64::_rdtsc() };
        let t = origin.elapsed().as_nanos() as f64;
        // SAFETY: as above.
        let c1 = unsafe { std::arch::x86_64::_rdtsc() };
        let gap = c1.wrapping_sub(c0);
        if gap < best.2 {
            best = (t, c0 as f64 + gap as f64 / 2.0, gap);
        }
        if gap < 2_000 {
            break;
        }
    }
    (best.0, best.1)
}

fn tsc_ghz() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let origin = Instant::now();
        let (t0, c0) = paired(origin);
        while origin.elapsed().as_millis() < 100 {
            std::hint::spin_loop();
        }
        let (t1, c1) = paired(origin);
        (c1 - c0) / (t1 - t0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    1.0
}

fn median_and_spread(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let med = v[v.len() / 2];
    (med, v[v.len() - 1] - v[0])
}

fn measure(args: &Args) -> anyhow::Result<Calibration> {
    let progress = args.progress || std::io::stderr().is_terminal();
    let llc = llc_bytes();
    let region = match &args.region {
        Some(s) => Bytes::parse(s)
            .map_err(|e| anyhow::anyhow!("--region: {e}"))?
            .get(),
        None => default_region(llc),
    };
    if region < (1 << 20) {
        bail!("--region {} is too small: give at least 1MiB (much larger than the LLC for a DRAM latency)", Bytes(region));
    }
    if llc > 0 && region < 4 * llc {
        eprintln!(
            "pmlab: warning: region {} is under 4x the last-level cache ({}): the latency will be too low",
            Bytes(region),
            Bytes(llc)
        );
    }
    if args.accesses == 0 || args.repeat == 0 {
        bail!("--accesses and --repeat must be at least 1");
    }
    let nodes = numa_nodes();
    let huge_before = meminfo("AnonHugePages:");
    let run_on = |node: Option<u32>, label: &str| -> anyhow::Result<(f64, f64, bool)> {
        let r = Region::new(region as usize, node)?;
        if progress {
            eprintln!(
                "pmlab: calibrate: building a {} chain ({label})",
                Bytes(region)
            );
        }
        let start = build_chain(&r, 0x9E37_79B9_7F4A_7C15);
        let huge = meminfo("AnonHugePages:") > huge_before;
        let _ = chase(start, args.accesses.min(1_000_000)); // warm the TLB
        let mut v = Vec::new();
        for i in 0..args.repeat {
            let (ns, _) = chase(start, args.accesses);
            if progress {
                eprintln!(
                    "pmlab: calibrate: {label} run {}/{}: {ns:.1} ns",
                    i + 1,
                    args.repeat
                );
            }
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
        tsc_ghz: tsc_ghz(),
        region_bytes: region,
        llc_bytes: llc,
        huge_pages: huge,
        measured_at: now,
    })
}

fn print(c: &Calibration, json: bool, cached: bool) -> anyhow::Result<()> {
    if json {
        writeln!(std::io::stdout(), "{}", serde_json::to_string(c)?)?;
        return Ok(());
    }
    let mut out = std::io::stdout();
    writeln!(
        out,
        "dram_latency_ns={:.1} spread_ns={:.1} tsc_ghz={:.3} region={} llc={} huge_pages={} numa_nodes={}{}",
        c.dram_latency_ns,
        c.dram_latency_spread_ns,
        c.tsc_ghz,
        Bytes(c.region_bytes),
        Bytes(c.llc_bytes),
        c.huge_pages,
        c.numa_nodes,
        if cached { " (cached)" } else { "" }
    )?;
    match c.remote_latency_ns {
        Some(r) => writeln!(out, "remote_latency_ns={r:.1}")?,
        None => writeln!(
            out,
            "one NUMA node: no remote latency measured (two-memory mode, --remote-latency, is unavailable here)"
        )?,
    }
    Ok(())
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.show {
        let c = load_cache()?.ok_or_else(|| {
            anyhow::anyhow!("no calibration cached for this machine: run `pmlab calibrate`")
        })?;
        print(&c, args.json, true)?;
        return Ok(0);
    }
    let c = measure(&args)?;
    if !args.no_cache {
        save(&c)?;
        if !args.json {
            eprintln!("pmlab: cached in {}", cache_path()?.display());
        }
    }
    print(&c, args.json, false)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_is_one_cycle() {
        let r = Region::new(1 << 20, None).unwrap();
        let start = build_chain(&r, 42);
        let mut p = start;
        let mut n = 0;
        loop {
            // SAFETY: chain addresses are inside the region.
            p = unsafe { *(p as *const usize) };
            n += 1;
            if p == start {
                break;
            }
        }
        assert_eq!(n, (1 << 20) / 64);
    }

    #[test]
    fn median_of_three() {
        assert_eq!(median_and_spread(vec![3.0, 1.0, 2.0]), (2.0, 2.0));
    }
}
