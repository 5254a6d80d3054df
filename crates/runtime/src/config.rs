//! Runtime options: `PMLAB_*` environment variables, read once into one
//! static [`Config`] (see [`get`]). `pmlab run` sets them from its flags
//! and `--config` file; programs linked with `-lpmlab` and run directly see
//! none of them and get the PM API with no emulation.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMLAB_ACTIVE` | unset | `1`: emulate (epochs, delays); unset: API only |
//! | `PMLAB_SOURCE` | `hw` | counter source: `hw`, `synthetic:FILE`, `instrumented` |
//! | `PMLAB_PM_LATENCY` | `300ns` | emulated PM read latency |
//! | `PMLAB_DRAM_LATENCY` | `100ns` | measured DRAM latency (`pmlab calibrate`) |
//! | `PMLAB_REMOTE_LATENCY` | unset | two-memory mode: remote node latency |
//! | `PMLAB_W` | `6` | DRAM/L3 latency ratio of equation 3 |
//! | `PMLAB_PM_BANDWIDTH` | unset | target PM bandwidth (`8GB/s`) |
//! | `PMLAB_BW_THROTTLE` | `software` | `software` (stretch epochs) or `mba` (resctrl) |
//! | `PMLAB_EPOCH_MAX` | `10ms` | maximum epoch length (monitor signal) |
//! | `PMLAB_EPOCH_MIN` | `100us` | minimum epoch length before a sync point ends it |
//! | `PMLAB_NO_INJECT` | unset | `1`: compute everything, inject nothing |
//! | `PMLAB_TSC_GHZ` | measured | TSC frequency (from the calibration cache) |
//! | `PMLAB_CPU_GHZ` | TSC GHz | core cycles per ns, for stall cycles |
//! | `PMLAB_WRITE_LATENCY` | `0` | PM write latency paid at `pm_drain` |
//! | `PMLAB_WRITE_PARALLELISM` | `4` | flushes in flight in the write model |
//! | `PMLAB_PM_FILE` | unset | back the PM pool with this file |
//! | `PMLAB_PM_POOL_SIZE` | `1GiB` | pool size (address space reserved) |
//! | `PMLAB_PM_NODE` | unset | NUMA node for the pool (two-memory mode) |
//! | `PMLAB_STATS_FILE` | unset | write JSON stats here (else stderr text) |
//! | `PMLAB_STATS` | `1` | `0`: no stats on stderr |
//! | `PMLAB_SIGNAL` | `6` | epoch signal = SIGRTMIN + this |
//! | `PMLAB_LAUNCHER_PID` | unset | pid of `pmlab run` (marks the main process) |

use crate::error::{Error, ErrorKind};
use pmlab_model::units::{Bandwidth, Bytes, Nanos};
use std::sync::OnceLock;

/// How a target bandwidth is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttle {
    /// No bandwidth target.
    None,
    /// Stretch epochs (Quartz-style, in software).
    Software,
    /// Intel RDT memory-bandwidth allocation through resctrl.
    Mba,
}

impl Throttle {
    /// Name used in the stats.
    pub fn name(self) -> &'static str {
        match self {
            Throttle::None => "none",
            Throttle::Software => "software",
            Throttle::Mba => "mba",
        }
    }
}

/// Every runtime option, parsed and validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// Emulation on.
    pub active: bool,
    /// Counter source name.
    pub source: String,
    /// PM latency, ns.
    pub pm_latency_ns: f64,
    /// DRAM latency, ns.
    pub dram_latency_ns: f64,
    /// Remote latency in two-memory mode, ns.
    pub remote_latency_ns: Option<f64>,
    /// W of equation 3.
    pub w: f64,
    /// Target PM bandwidth, bytes per ns.
    pub pm_bytes_per_ns: Option<f64>,
    /// How the bandwidth target is enforced.
    pub throttle: Throttle,
    /// Maximum epoch, ns.
    pub epoch_max_ns: f64,
    /// Minimum epoch, ns.
    pub epoch_min_ns: f64,
    /// Minimum epoch at lock acquires and releases, ns (`None`: derived
    /// from `epoch_min_ns`, see [`crate::emu::lock_min_ns`]).
    pub lock_epoch_min_ns: Option<f64>,
    /// Compute but do not inject.
    pub no_inject: bool,
    /// TSC GHz if given.
    pub tsc_ghz: Option<f64>,
    /// Core GHz if given.
    pub cpu_ghz: Option<f64>,
    /// Write latency, ns.
    pub write_latency_ns: f64,
    /// Write parallelism.
    pub write_parallelism: usize,
    /// PM pool file.
    pub pm_file: Option<String>,
    /// PM pool size, bytes.
    pub pool_size: u64,
    /// NUMA node of the pool.
    pub pm_node: Option<u32>,
    /// JSON stats path.
    pub stats_file: Option<String>,
    /// Text stats on stderr.
    pub stats_stderr: bool,
    /// Signal offset from SIGRTMIN.
    pub signal_offset: i32,
    /// Pid of the launcher.
    pub launcher_pid: Option<i32>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            active: false,
            source: "hw".into(),
            pm_latency_ns: 300.0,
            dram_latency_ns: 100.0,
            remote_latency_ns: None,
            w: 6.0,
            pm_bytes_per_ns: None,
            throttle: Throttle::None,
            epoch_max_ns: 10e6,
            epoch_min_ns: 100e3,
            lock_epoch_min_ns: None,
            no_inject: false,
            tsc_ghz: None,
            cpu_ghz: None,
            write_latency_ns: 0.0,
            write_parallelism: 4,
            pm_file: None,
            pool_size: 1 << 30,
            pm_node: None,
            stats_file: None,
            stats_stderr: true,
            signal_offset: 6,
            launcher_pid: None,
        }
    }
}

fn flag(v: &str) -> bool {
    matches!(v, "1" | "yes" | "true" | "on")
}

impl Config {
    /// Build from a variable lookup (the environment, or a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let mut c = Config::default();
        let bad = |var: &str, e: &dyn std::fmt::Display| {
            Error::new(ErrorKind::Config, format!("{var}: {e}"))
        };
        let dur = |var: &str| -> Result<Option<f64>, Error> {
            get(var)
                .map(|v| Nanos::parse(&v).map(|n| n.get()).map_err(|e| bad(var, &e)))
                .transpose()
        };
        let num = |var: &str| -> Result<Option<f64>, Error> {
            get(var)
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && *x > 0.0)
                        .ok_or_else(|| bad(var, &format!("'{v}' is not a positive number")))
                })
                .transpose()
        };
        c.active = get("PMLAB_ACTIVE").is_some_and(|v| flag(&v));
        if let Some(s) = get("PMLAB_SOURCE") {
            c.source = s;
        }
        if let Some(v) = dur("PMLAB_PM_LATENCY")? {
            c.pm_latency_ns = v;
        }
        if let Some(v) = dur("PMLAB_DRAM_LATENCY")? {
            c.dram_latency_ns = v;
        }
        c.remote_latency_ns = dur("PMLAB_REMOTE_LATENCY")?;
        if let Some(v) = num("PMLAB_W")? {
            c.w = v;
        }
        if let Some(v) = get("PMLAB_PM_BANDWIDTH") {
            let bw = Bandwidth::parse(&v).map_err(|e| bad("PMLAB_PM_BANDWIDTH", &e))?;
            if bw.bytes_per_ns() <= 0.0 {
                return Err(bad("PMLAB_PM_BANDWIDTH", &"must be above zero"));
            }
            c.pm_bytes_per_ns = Some(bw.bytes_per_ns());
            c.throttle = Throttle::Software;
        }
        if let Some(v) = get("PMLAB_BW_THROTTLE") {
            c.throttle = match v.as_str() {
                "software" => Throttle::Software,
                "mba" => Throttle::Mba,
                "none" => Throttle::None,
                _ => {
                    return Err(bad(
                        "PMLAB_BW_THROTTLE",
                        &format!("unknown throttle '{v}': expected software, mba or none"),
                    ))
                }
            };
            if c.pm_bytes_per_ns.is_none() && c.throttle != Throttle::None {
                c.throttle = Throttle::None;
            }
        }
        if let Some(v) = dur("PMLAB_EPOCH_MAX")? {
            c.epoch_max_ns = v;
        }
        if let Some(v) = dur("PMLAB_EPOCH_MIN")? {
            c.epoch_min_ns = v;
        }
        c.lock_epoch_min_ns = dur("PMLAB_LOCK_EPOCH_MIN")?;
        c.no_inject = get("PMLAB_NO_INJECT").is_some_and(|v| flag(&v));
        c.tsc_ghz = num("PMLAB_TSC_GHZ")?;
        c.cpu_ghz = num("PMLAB_CPU_GHZ")?;
        if let Some(v) = dur("PMLAB_WRITE_LATENCY")? {
            c.write_latency_ns = v;
        }
        if let Some(v) = get("PMLAB_WRITE_PARALLELISM") {
            c.write_parallelism = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=1024).contains(&n))
                .ok_or_else(|| {
                    bad(
                        "PMLAB_WRITE_PARALLELISM",
                        &format!("'{v}' is not a whole number from 1 to 1024"),
                    )
                })?;
        }
        c.pm_file = get("PMLAB_PM_FILE").filter(|s| !s.is_empty());
        if let Some(v) = get("PMLAB_PM_POOL_SIZE") {
            let b = Bytes::parse(&v).map_err(|e| bad("PMLAB_PM_POOL_SIZE", &e))?;
            if b.get() < (1 << 20) {
                return Err(bad("PMLAB_PM_POOL_SIZE", &"must be at least 1MiB"));
            }
            c.pool_size = b.get();
        }
        if let Some(v) = get("PMLAB_PM_NODE") {
            c.pm_node =
                Some(v.trim().parse::<u32>().map_err(|_| {
                    bad("PMLAB_PM_NODE", &format!("'{v}' is not a NUMA node number"))
                })?);
        }
        c.stats_file = get("PMLAB_STATS_FILE").filter(|s| !s.is_empty());
        c.stats_stderr = get("PMLAB_STATS").is_none_or(|v| v != "0");
        if let Some(v) = get("PMLAB_SIGNAL") {
            c.signal_offset = v
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| (2..=20).contains(n))
                .ok_or_else(|| {
                    bad(
                        "PMLAB_SIGNAL",
                        &format!("'{v}' is not an offset from 2 to 20"),
                    )
                })?;
        }
        c.launcher_pid = get("PMLAB_LAUNCHER_PID").and_then(|v| v.trim().parse().ok());
        c.validate()?;
        Ok(c)
    }

    /// Check that the values agree with each other.
    pub fn validate(&self) -> Result<(), Error> {
        let e = |m: String| Err(Error::new(ErrorKind::Config, m));
        let base = self.remote_latency_ns.unwrap_or(self.dram_latency_ns);
        if self.dram_latency_ns <= 0.0 {
            return e("PMLAB_DRAM_LATENCY must be above 0".into());
        }
        if self.pm_latency_ns < base {
            return e(format!(
                "PM latency {} is below the {} latency {}: PM can only be emulated as slower memory",
                Nanos::new(self.pm_latency_ns),
                if self.remote_latency_ns.is_some() { "remote" } else { "DRAM" },
                Nanos::new(base)
            ));
        }
        if self.epoch_max_ns < 1e3 {
            return e("maximum epoch must be at least 1us".into());
        }
        if self.epoch_min_ns > self.epoch_max_ns {
            return e(format!(
                "minimum epoch {} is above the maximum epoch {}",
                Nanos::new(self.epoch_min_ns),
                Nanos::new(self.epoch_max_ns)
            ));
        }
        if let Some(l) = self.lock_epoch_min_ns.filter(|&l| l > self.epoch_max_ns) {
            return e(format!(
                "minimum lock epoch {} is above the maximum epoch {}",
                Nanos::new(l),
                Nanos::new(self.epoch_max_ns)
            ));
        }
        Ok(())
    }
}

static CONFIG: OnceLock<Result<Config, Error>> = OnceLock::new();

/// The process's configuration, read from the environment on first use.
pub fn get() -> &'static Result<Config, Error> {
    CONFIG.get_or_init(|| Config::from_lookup(|k| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, Error> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_are_inactive() {
        let c = cfg(&[]).unwrap();
        assert!(!c.active);
        assert_eq!(c.epoch_max_ns, 10e6);
    }

    #[test]
    fn values_are_parsed_with_units() {
        let c = cfg(&[
            ("PMLAB_ACTIVE", "1"),
            ("PMLAB_PM_LATENCY", "0.4us"),
            ("PMLAB_EPOCH_MAX", "1ms"),
            ("PMLAB_EPOCH_MIN", "10us"),
            ("PMLAB_PM_BANDWIDTH", "2GB/s"),
        ])
        .unwrap();
        assert!(c.active);
        assert_eq!(c.pm_latency_ns, 400.0);
        assert_eq!(c.epoch_min_ns, 10e3);
        assert_eq!(c.pm_bytes_per_ns, Some(2.0));
        assert_eq!(c.throttle, Throttle::Software);
    }

    #[test]
    fn contradictions_are_rejected() {
        let e = cfg(&[("PMLAB_PM_LATENCY", "50ns")]).unwrap_err();
        assert!(e.message().contains("below the DRAM latency"), "{e}");
        let e = cfg(&[("PMLAB_EPOCH_MIN", "20ms")]).unwrap_err();
        assert!(e.message().contains("above the maximum"), "{e}");
        let e = cfg(&[("PMLAB_LOCK_EPOCH_MIN", "20ms")]).unwrap_err();
        assert!(e.message().contains("minimum lock epoch"), "{e}");
        let c = cfg(&[("PMLAB_LOCK_EPOCH_MIN", "2us")]).unwrap();
        assert_eq!(c.lock_epoch_min_ns, Some(2e3));
        let e = cfg(&[("PMLAB_EPOCH_MAX", "10 parsecs")]).unwrap_err();
        assert!(e.message().starts_with("PMLAB_EPOCH_MAX:"), "{e}");
        assert!(cfg(&[("PMLAB_BW_THROTTLE", "magic")]).is_err());
        assert!(cfg(&[("PMLAB_WRITE_PARALLELISM", "0")]).is_err());
    }
}
