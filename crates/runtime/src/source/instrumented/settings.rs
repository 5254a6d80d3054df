//! The instrumented source's settings: the `PMLAB_INSTR_*` variables
//! (read once, when the source opens or a trace of stores starts), this
//! machine's last-level cache from sysfs, and the process-wide copy of the
//! settings the hooks and the model read while they run.

use crate::error::{Error, ErrorKind};
use pmlab_model::cache::CacheConfig;
use pmlab_model::mlp::OverlapConfig;
use pmlab_model::units::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which accesses count as PM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmMode {
    /// Every memory access is to PM until the program registers a PM pool
    /// range (it uses `pmalloc`); from then on only the pool is PM.
    Auto = 0,
    /// Every memory access is to PM (Quartz's single-memory mode).
    All = 1,
    /// Only addresses in registered PM ranges are PM (two-memory mode).
    Pool = 2,
}

/// Thousandths of a window unit: the hooked window and the weights of
/// the hook kinds are kept in these (a filter hit is one unit, [`UNIT`]).
pub const UNIT: u64 = 1000;

/// Default of [`HookConfig::hooked_window`] (13 units), fitted on this
/// project's machine (AMD EPYC, KVM guest) with the hooks of that time:
/// with no instrumented access between the misses of 8 independent
/// chains, 4.7 of them overlapped under the hooks; with 1, 2 and 4 filter
/// hits between them, 3.4, 2.6 and 2.5 (natively 7.4-7.8 in every case;
/// `bench/hooked-window.sh`); memlat's 8 chains (two hits per miss, then)
/// 2.6-3.3. With a logged access at [`DEFAULT_LOGGED_WEIGHT`] these imply
/// 9.5-14.7 units (the hooks' own time included), and 13 fit memlat's
/// quieter runs. `bench/hooked-window.sh` fits both numbers to the hooks
/// as they are (`PMLAB_INSTR_HOOKED_WINDOW`, `PMLAB_INSTR_LOGGED_WEIGHT`).
pub const DEFAULT_HOOKED_WINDOW: u64 = 13 * UNIT;

/// Default of [`HookConfig::logged_weight`]: a logged access's hook runs
/// the log path, about twice the instructions of a filter hit.
pub const DEFAULT_LOGGED_WEIGHT: u64 = 2 * UNIT;

/// Settings of the hooks, fixed when the instrumented source opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookConfig {
    /// The modelled last-level cache.
    pub llc: CacheConfig,
    /// Memory-level parallelism parameters.
    pub overlap: OverlapConfig,
    /// The out-of-order window of the instrumented program, in thousandths
    /// of a window unit ([`UNIT`]; an access whose hook hits the filter
    /// counts one unit, a logged access [`logged_weight`](Self::logged_weight)):
    /// the hooks' own instructions fill the core's reorder buffer, so
    /// fewer independent misses overlap than natively.
    pub hooked_window: u64,
    /// The window room of an access whose hook logs it (an update, a load
    /// and its store in one hook, included), in thousandths of the room of
    /// a filter hit (at least [`UNIT`]).
    pub logged_weight: u64,
    /// Which accesses are PM.
    pub pm_mode: PmMode,
    /// The compact model evicts a random way of a full set instead of the
    /// least recently used one (`PMLAB_INSTR_REPLACEMENT=random`, the
    /// default; `lru`): see
    /// [`CompactCache::set_random_replacement`](pmlab_model::cache::CompactCache::set_random_replacement).
    pub random_replacement: bool,
}

/// Geometry of the modelled cache and the overlap parameters, set by
/// [`store`] when the hooks are activated.
static LLC_BYTES: AtomicU64 = AtomicU64::new(32 << 20);
static LLC_WAYS: AtomicU64 = AtomicU64::new(16);
static FILL_BUFFERS: AtomicU64 = AtomicU64::new(10);
static WINDOW: AtomicU64 = AtomicU64::new(64);
static HOOKED_WINDOW: AtomicU64 = AtomicU64::new(DEFAULT_HOOKED_WINDOW);
static LOGGED_WEIGHT: AtomicU64 = AtomicU64::new(DEFAULT_LOGGED_WEIGHT);
static RANDOM_REPLACEMENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Keep `cfg`'s cache and window settings for the threads' models (the PM
/// mode is kept by [`super::pm`]).
pub(super) fn store(cfg: &HookConfig) {
    LLC_BYTES.store(cfg.llc.size_bytes, Ordering::Relaxed);
    LLC_WAYS.store(cfg.llc.ways as u64, Ordering::Relaxed);
    FILL_BUFFERS.store(cfg.overlap.fill_buffers as u64, Ordering::Relaxed);
    WINDOW.store(cfg.overlap.window_accesses, Ordering::Relaxed);
    HOOKED_WINDOW.store(cfg.hooked_window.max(1), Ordering::Relaxed);
    LOGGED_WEIGHT.store(cfg.logged_weight.max(UNIT), Ordering::Relaxed);
    RANDOM_REPLACEMENT.store(cfg.random_replacement, Ordering::Relaxed);
}

/// [`HookConfig::random_replacement`].
pub(super) fn random_replacement() -> bool {
    RANDOM_REPLACEMENT.load(Ordering::Relaxed)
}

/// The device whose buffers the model follows (`pmlab run --device`), set
/// once when the source opens.
static DEVICE: std::sync::OnceLock<pmlab_model::device::DeviceParams> = std::sync::OnceLock::new();
/// True once [`DEVICE`] is set: the hooks' one relaxed test.
static DEVICE_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Model `p`'s buffers from now on (the first call wins).
pub(super) fn set_device(p: pmlab_model::device::DeviceParams) {
    let _ = DEVICE.set(p);
    DEVICE_ON.store(true, Ordering::Release);
}

/// The device being modelled, if any.
pub(super) fn device() -> Option<&'static pmlab_model::device::DeviceParams> {
    DEVICE.get()
}

/// True when a device is modelled (flushes are then logged).
#[inline]
pub(super) fn device_on() -> bool {
    DEVICE_ON.load(Ordering::Relaxed)
}

/// The modelled last-level cache.
pub(super) fn llc() -> CacheConfig {
    CacheConfig::new(
        LLC_BYTES.load(Ordering::Relaxed),
        LLC_WAYS.load(Ordering::Relaxed) as u32,
    )
}

/// The overlap (MLP) estimator's parameters.
pub(super) fn overlap() -> OverlapConfig {
    OverlapConfig {
        fill_buffers: FILL_BUFFERS.load(Ordering::Relaxed) as usize,
        window_accesses: WINDOW.load(Ordering::Relaxed),
    }
}

/// [`HookConfig::hooked_window`], at least 1.
#[inline(always)]
pub(super) fn hooked_window() -> u64 {
    HOOKED_WINDOW.load(Ordering::Relaxed)
}

/// [`HookConfig::logged_weight`], at least [`UNIT`].
#[inline(always)]
pub(super) fn logged_weight() -> u64 {
    LOGGED_WEIGHT.load(Ordering::Relaxed)
}

/// Build the hooks' configuration from `PMLAB_INSTR_*` settings (looked up
/// with `get`) and sysfs.
pub fn config_from_env(get: impl Fn(&str) -> Option<String>) -> Result<HookConfig, Error> {
    let pm_mode = match get("PMLAB_INSTR_PM").as_deref() {
        None | Some("auto") => PmMode::Auto,
        Some("all") => PmMode::All,
        Some("pool") => PmMode::Pool,
        Some(other) => {
            return Err(Error::new(
                ErrorKind::Config,
                format!("PMLAB_INSTR_PM='{other}' is not one of auto, all, pool"),
            ))
        }
    };
    let llc = match get("PMLAB_INSTR_LLC") {
        Some(s) => parse_llc(&s)?,
        None => llc_from_sysfs(std::path::Path::new("/sys/devices/system/cpu/cpu0/cache"))
            .unwrap_or(CacheConfig::new(32 << 20, 16)),
    };
    llc.sets().map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("modelled last-level cache: {e} (set PMLAB_INSTR_LLC=SIZE:WAYS or pmlab run --llc SIZE:WAYS)"),
        )
    })?;
    let num = |key: &str, default: u64, max: u64| -> Result<u64, Error> {
        match get(key) {
            None => Ok(default),
            Some(s) => s
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|v| (1..=max).contains(v))
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Config,
                        format!("{key}='{s}' must be an integer in 1..={max}"),
                    )
                }),
        }
    };
    let overlap = OverlapConfig {
        fill_buffers: num(
            "PMLAB_INSTR_FILL_BUFFERS",
            10,
            pmlab_model::mlp::MAX_FILL_BUFFERS as u64,
        )? as usize,
        window_accesses: num("PMLAB_INSTR_WINDOW", 64, 1 << 20)?,
    };
    // In window units, with up to three decimals (kept in thousandths).
    let units = |key: &str, default: u64, min: f64| -> Result<u64, Error> {
        match get(key) {
            None => Ok(default),
            Some(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && (min..=1e6).contains(v))
                .map(|v| (v * UNIT as f64).round() as u64)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Config,
                        format!("{key}='{s}' must be a number of window units in {min}..=1000000 (a filter hit is 1)"),
                    )
                }),
        }
    };
    let hooked_window = units("PMLAB_INSTR_HOOKED_WINDOW", DEFAULT_HOOKED_WINDOW, 0.001)?;
    let logged_weight = units("PMLAB_INSTR_LOGGED_WEIGHT", DEFAULT_LOGGED_WEIGHT, 1.0)?;
    let random_replacement = match get("PMLAB_INSTR_REPLACEMENT").as_deref().map(str::trim) {
        None | Some("random") => true,
        Some("lru") => false,
        Some(other) => {
            return Err(Error::new(
                ErrorKind::Config,
                format!("PMLAB_INSTR_REPLACEMENT='{other}' is not one of random, lru"),
            ))
        }
    };
    Ok(HookConfig {
        llc,
        overlap,
        hooked_window,
        logged_weight,
        pm_mode,
        random_replacement,
    })
}

/// Most loads per timed load `PMLAB_TIMED_MISSES` takes.
pub const MAX_TIMED_EVERY: u32 = 1 << 24;

/// `PMLAB_TIMED_MISSES` (looked up with `get`): time 1 in N logged loads
/// (`Some(N)`, see [`super::timed`]) or none (unset or `off`).
pub fn timed_from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<u32>, Error> {
    let Some(v) = get("PMLAB_TIMED_MISSES") else {
        return Ok(None);
    };
    match v.trim() {
        "off" | "0" => Ok(None),
        t => t
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_TIMED_EVERY).contains(n))
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "PMLAB_TIMED_MISSES='{v}' must be off or N in 1..={MAX_TIMED_EVERY} (time 1 in N logged loads)"
                    ),
                )
            }),
    }
}

fn parse_llc(s: &str) -> Result<CacheConfig, Error> {
    let bad = || {
        Error::new(
            ErrorKind::Config,
            format!("PMLAB_INSTR_LLC='{s}' (pmlab run --llc) must be SIZE:WAYS, e.g. 32MiB:16"),
        )
    };
    let (size, ways) = s.split_once(':').ok_or_else(bad)?;
    let size = Bytes::parse(size.trim()).map_err(|_| bad())?;
    let ways = ways.trim().parse::<u32>().map_err(|_| bad())?;
    Ok(CacheConfig::new(size.get(), ways))
}

/// The last-level data/unified cache described under `dir`
/// (`/sys/devices/system/cpu/cpu0/cache`): the highest `index*/level`.
pub fn llc_from_sysfs(dir: &std::path::Path) -> Option<CacheConfig> {
    let mut best: Option<(u32, CacheConfig)> = None;
    for entry in std::fs::read_dir(dir).ok()? {
        let p = entry.ok()?.path();
        if !p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("index"))
        {
            continue;
        }
        let read = |f: &str| {
            std::fs::read_to_string(p.join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let (Some(level), Some(kind), Some(size), Some(ways)) = (
            read("level"),
            read("type"),
            read("size"),
            read("ways_of_associativity"),
        ) else {
            continue;
        };
        if kind == "Instruction" {
            continue;
        }
        let level: u32 = level.parse().ok()?;
        let size = parse_sysfs_size(&size)?;
        let ways: u32 = ways.parse().ok()?;
        let line: u32 = read("coherency_line_size")
            .and_then(|s| s.parse().ok())
            .unwrap_or(64);
        let cfg = CacheConfig {
            size_bytes: size,
            ways,
            line_bytes: line,
        };
        if cfg.sets().is_err() {
            continue;
        }
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, cfg));
        }
    }
    best.map(|(_, c)| c)
}

fn parse_sysfs_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_geometry_picks_the_last_level() {
        let dir = std::env::temp_dir().join(format!("pmlab-sysfs-{}", std::process::id()));
        let mk = |i: u32, level: &str, kind: &str, size: &str, ways: &str| {
            let d = dir.join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [
                ("level", level),
                ("type", kind),
                ("size", size),
                ("ways_of_associativity", ways),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        mk(0, "1", "Data", "48K", "12");
        mk(1, "1", "Instruction", "32K", "8");
        mk(2, "2", "Unified", "1024K", "16");
        mk(3, "3", "Unified", "32768K", "16");
        let c = llc_from_sysfs(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c, CacheConfig::new(32 << 20, 16));
        assert_eq!(llc_from_sysfs(std::path::Path::new("/nonexistent")), None);
    }

    #[test]
    fn settings_are_validated() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let c = config_from_env(env(&[
            ("PMLAB_INSTR_PM", "pool"),
            ("PMLAB_INSTR_LLC", "8MiB:16"),
            ("PMLAB_INSTR_FILL_BUFFERS", "12"),
            ("PMLAB_INSTR_HOOKED_WINDOW", "20"),
        ]))
        .unwrap();
        assert_eq!(c.hooked_window, 20 * UNIT);
        assert_eq!(c.logged_weight, DEFAULT_LOGGED_WEIGHT);
        let e = config_from_env(env(&[("PMLAB_INSTR_HOOKED_WINDOW", "x")])).unwrap_err();
        assert!(e.message().contains("PMLAB_INSTR_HOOKED_WINDOW"), "{e}");
        // Fractions of a unit, as bench/hooked-window.sh fits them.
        let f = config_from_env(env(&[
            ("PMLAB_INSTR_HOOKED_WINDOW", "9.75"),
            ("PMLAB_INSTR_LOGGED_WEIGHT", " 2.6"),
        ]))
        .unwrap();
        assert_eq!((f.hooked_window, f.logged_weight), (9_750, 2_600));
        // A logged access takes at least a hit's room.
        let e = config_from_env(env(&[("PMLAB_INSTR_LOGGED_WEIGHT", "0.5")])).unwrap_err();
        assert!(e.message().contains("PMLAB_INSTR_LOGGED_WEIGHT"), "{e}");
        let e = config_from_env(env(&[("PMLAB_INSTR_HOOKED_WINDOW", "inf")])).unwrap_err();
        assert!(e.message().contains("window units"), "{e}");
        assert_eq!(c.pm_mode, PmMode::Pool);
        assert_eq!(c.llc, CacheConfig::new(8 << 20, 16));
        assert_eq!(c.overlap.fill_buffers, 12);
        let e = config_from_env(env(&[("PMLAB_INSTR_PM", "some")])).unwrap_err();
        assert!(e.message().contains("auto, all, pool"), "{e}");
        let e = config_from_env(env(&[("PMLAB_INSTR_LLC", "lots")])).unwrap_err();
        assert!(e.message().contains("SIZE:WAYS"), "{e}");
        let e = config_from_env(env(&[("PMLAB_INSTR_LLC", "1000:3")])).unwrap_err();
        assert!(e.message().contains("PMLAB_INSTR_LLC"), "{e}");
        let e = config_from_env(env(&[("PMLAB_INSTR_FILL_BUFFERS", "0")])).unwrap_err();
        assert!(e.message().contains("1..=32"), "{e}");
        // Random replacement by default; lru on request; anything else is
        // named.
        assert!(c.random_replacement);
        let lru = config_from_env(env(&[("PMLAB_INSTR_REPLACEMENT", "lru")])).unwrap();
        assert!(!lru.random_replacement);
        let e = config_from_env(env(&[("PMLAB_INSTR_REPLACEMENT", "fifo")])).unwrap_err();
        assert!(e.message().contains("random, lru"), "{e}");
    }

    #[test]
    fn the_timed_misses_setting_is_parsed() {
        let one =
            |v: &'static str| move |k: &str| (k == "PMLAB_TIMED_MISSES").then(|| v.to_string());
        assert_eq!(timed_from_env(|_| None).unwrap(), None);
        assert_eq!(timed_from_env(one("off")).unwrap(), None);
        assert_eq!(timed_from_env(one(" 64 ")).unwrap(), Some(64));
        for bad in ["-1", "lots", "1.5", "99999999999"] {
            let e = timed_from_env(one(bad)).unwrap_err();
            let m = e.message();
            assert!(m.contains("PMLAB_TIMED_MISSES") && m.contains(bad), "{m}");
            assert!(m.contains("off or N") && !m.contains('\n'), "{m}");
        }
    }
}
