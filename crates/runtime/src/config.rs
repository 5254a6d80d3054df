//! Runtime options: `PMLAB_*` environment variables, read once into one
//! static [`Config`] (see [`get`]). `pmlab run` sets them from its flags
//! and `--config` file; programs linked with `-lpmlab` and run directly see
//! none of them and get the PM API with no emulation.
//!
//! The run options (latencies, bandwidth, epochs, source, write model,
//! pool, `PMLAB_NO_INJECT`, `PMLAB_TSC_GHZ`, `PMLAB_CPU_GHZ`) are defined
//! once, with their defaults and checks, in `pmlab_model::options`, which
//! `pmlab run` uses too. The variables below are the runtime's own:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMLAB_ACTIVE` | unset | `1`: emulate (epochs, delays); unset: API only |
//! | `PMLAB_STATS_FILE` | unset | write JSON stats here (else stderr text) |
//! | `PMLAB_STATS` | `1` | `0`: no stats on stderr |
//! | `PMLAB_SIGNAL` | `6` | epoch signal = SIGRTMIN + this |
//! | `PMLAB_LAUNCHER_PID` | unset | pid of `pmlab run` (marks the main process) |
//!
//! A source of `auto` (the options' default) is `hw` here: only `pmlab
//! run` can tell whether a program was built by `pmlab cc`.

use crate::error::{Error, ErrorKind};
use pmlab_model::options::RunOptions;
use std::sync::OnceLock;

/// How a target bandwidth is enforced (defined with the run options).
pub use pmlab_model::options::Throttle;

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
    /// Target PM bandwidth, bytes per ns (the read bandwidth when
    /// `pm_write_bytes_per_ns` is given).
    pub pm_bytes_per_ns: Option<f64>,
    /// Target PM write bandwidth, bytes per ns, when it differs.
    pub pm_write_bytes_per_ns: Option<f64>,
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
    /// The device whose buffers the instrumented source models
    /// (`PMLAB_DEVICE_PARAMS`, from `pmlab run --device`).
    pub device: Option<pmlab_model::device::DeviceParams>,
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
            pm_write_bytes_per_ns: None,
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
            device: None,
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
    /// Build from a variable lookup (the environment, or a map in tests):
    /// the run options through `pmlab_model::options`, then the
    /// runtime's own variables.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let bad = |var: &str, e: &dyn std::fmt::Display| {
            Error::new(ErrorKind::Config, format!("{var}: {e}"))
        };
        let o =
            RunOptions::from_env(&get).map_err(|e| Error::new(ErrorKind::Config, e.to_string()))?;
        let mut c = Config {
            active: get("PMLAB_ACTIVE").is_some_and(|v| flag(&v)),
            source: if o.source == "auto" {
                "hw".into()
            } else {
                o.source.clone()
            },
            pm_latency_ns: o.pm_latency_ns,
            dram_latency_ns: o.dram_ns(),
            remote_latency_ns: o.remote_latency_ns,
            w: o.w,
            pm_bytes_per_ns: o.pm_bandwidth.map(|b| b.bytes_per_ns()),
            pm_write_bytes_per_ns: o.pm_write_bandwidth.map(|b| b.bytes_per_ns()),
            throttle: o.throttle,
            epoch_max_ns: o.epoch_max_ns,
            epoch_min_ns: o.epoch_min_ns,
            lock_epoch_min_ns: o.lock_epoch_min_ns,
            no_inject: o.no_inject,
            tsc_ghz: o.tsc_ghz,
            cpu_ghz: o.cpu_ghz,
            write_latency_ns: o.write_latency_ns,
            write_parallelism: o.write_parallelism as usize,
            pm_file: o.pm_file.clone(),
            pool_size: o.pool_size,
            pm_node: o.pm_node,
            device: o.device_params.clone(),
            ..Config::default()
        };
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
        Ok(c)
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
        assert_eq!(c.pm_write_bytes_per_ns, None);
        assert_eq!(c.throttle, Throttle::Software);
    }

    #[test]
    fn contradictions_are_rejected() {
        let e = cfg(&[("PMLAB_PM_LATENCY", "50ns")]).unwrap_err();
        assert!(e.message().contains("below the DRAM latency"), "{e}");
        let e = cfg(&[("PMLAB_EPOCH_MIN", "20ms")]).unwrap_err();
        assert!(
            e.message()
                .contains("above PMLAB_EPOCH_MAX (pmlab run --epoch-max)"),
            "{e}"
        );
        let e = cfg(&[("PMLAB_LOCK_EPOCH_MIN", "20ms")]).unwrap_err();
        assert!(
            e.message()
                .starts_with("PMLAB_LOCK_EPOCH_MIN (pmlab run --lock-epoch-min) 20ms"),
            "{e}"
        );
        let c = cfg(&[("PMLAB_LOCK_EPOCH_MIN", "2us")]).unwrap();
        assert_eq!(c.lock_epoch_min_ns, Some(2e3));
        let e = cfg(&[("PMLAB_EPOCH_MAX", "10 parsecs")]).unwrap_err();
        assert!(
            e.message()
                .starts_with("PMLAB_EPOCH_MAX (pmlab run --epoch-max):"),
            "{e}"
        );
        assert!(cfg(&[("PMLAB_BW_THROTTLE", "magic")]).is_err());
        assert!(cfg(&[("PMLAB_WRITE_PARALLELISM", "0")]).is_err());
    }
}
