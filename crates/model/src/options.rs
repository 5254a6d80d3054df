//! The emulator's run options, defined once: their names (flag, config
//! key, `PMLAB_*` variable), defaults, units, checks and the environment
//! they travel in from `pmlab run` to the runtime.
//!
//! [`SPECS`] lists every option. `pmlab run` builds its flags and its
//! `--config` keys from it, parses what it is given with
//! [`RunOptions::parse`] (errors name the flag), resolves what only it can
//! (the calibration's DRAM latency, paths, NUMA nodes) and passes
//! [`RunOptions::to_env`] to the program. The runtime reads the same
//! variables once with [`RunOptions::from_env`] (errors name the
//! variable). Pure: no I/O here; the caller supplies the lookup.

use crate::device::DeviceParams;
use crate::units::{Bandwidth, Bytes, Nanos};
use crate::{Error, ErrorKind};

/// How an option's value is written and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A duration (`400ns`, `1us`, a bare number is ns).
    Duration,
    /// A bandwidth (`8GB/s`), above zero.
    Bandwidth,
    /// A size (`1GiB`), at least 1 MiB.
    PoolSize,
    /// A whole number from `min` to `max`.
    Count {
        /// Smallest value accepted.
        min: u32,
        /// Largest value accepted.
        max: u32,
    },
    /// A positive finite number.
    Ratio,
    /// One of a fixed list of words.
    Choice(&'static [&'static str]),
    /// `auto`, `hw`, `instrumented` or `synthetic:FILE`.
    Source,
    /// `off`, `auto` or a ratio in (0, 1] (see [`Sample`]).
    Sample,
    /// A file path.
    Path,
    /// On or off: a flag without a value (`1`/`true`/`yes`/`on` in the
    /// environment and the config file).
    Switch,
}

/// One run option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The flag's name without `--` (`pm-latency`); the config file's key
    /// is the same with `_` for `-`.
    pub name: &'static str,
    /// The environment variable the runtime reads.
    pub env: &'static str,
    /// The default as a user would type it (`None`: unset, off).
    pub default: Option<&'static str>,
    /// What it means (the flag's help).
    pub help: &'static str,
    /// How its value is written and checked.
    pub kind: Kind,
    /// A user option (flag and config key); false for the variables only
    /// `pmlab run` itself sets.
    pub user: bool,
}

impl Spec {
    /// The config file's key: the flag's name with `_` for `-`.
    pub fn key(&self) -> String {
        self.name.replace('-', "_")
    }
}

/// Who gave the values: it decides how errors name an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// Flags and config keys: `--pm-latency`.
    Flag,
    /// The environment: `PMLAB_PM_LATENCY (pmlab run --pm-latency)`, the
    /// variable with the flag that sets it, so that either can be fixed.
    Env,
}

impl Naming {
    fn of(self, s: &Spec) -> String {
        match self {
            Naming::Flag => format!("--{}", s.name),
            Naming::Env if s.user => format!("{} (pmlab run --{})", s.env, s.name),
            Naming::Env => s.env.to_string(),
        }
    }
}

/// The longest duration an option takes (1000 s), ns.
pub const MAX_DURATION_NS: f64 = 1e12;

/// The largest ratio an option (`--w`, a clock in GHz) takes.
pub const MAX_RATIO: f64 = 1e6;

/// The DRAM latency the runtime assumes when none is given (`pmlab run`
/// always gives one: measured, cached or from `--dram-latency`), ns.
pub const FALLBACK_DRAM_NS: f64 = 100.0;

/// Every run option, in the order `pmlab run --help` lists them.
pub const SPECS: &[Spec] = &[
    Spec { name: "pm-latency", env: "PMLAB_PM_LATENCY", default: Some("300ns"), kind: Kind::Duration, user: true,
        help: "Emulated PM read latency (e.g. 400ns, 1us)" },
    Spec { name: "dram-latency", env: "PMLAB_DRAM_LATENCY", default: Some("auto"), kind: Kind::Duration, user: true,
        help: "This machine's DRAM latency, or `auto` for the calibration cache (measured on first use)" },
    Spec { name: "remote-latency", env: "PMLAB_REMOTE_LATENCY", default: None, kind: Kind::Duration, user: true,
        help: "Two-memory mode: the remote NUMA node's latency (it plays PM)" },
    Spec { name: "pm-bandwidth", env: "PMLAB_PM_BANDWIDTH", default: None, kind: Kind::Bandwidth, user: true,
        help: "Target PM bandwidth (e.g. 8GB/s), reads and write-backs together: threads wait for the device to move their traffic" },
    Spec { name: "pm-write-bandwidth", env: "PMLAB_PM_WRITE_BANDWIDTH", default: None, kind: Kind::Bandwidth, user: true,
        help: "PM write bandwidth, when writes are slower than reads (e.g. 2.3GB/s; needs --pm-bandwidth, then the read bandwidth)" },
    Spec { name: "bw-throttle", env: "PMLAB_BW_THROTTLE", default: Some("software"), kind: Kind::Choice(&["software", "mba"]), user: true,
        help: "How to enforce --pm-bandwidth: software or mba (Intel RDT resctrl)" },
    Spec { name: "epoch-max", env: "PMLAB_EPOCH_MAX", default: Some("10ms"), kind: Kind::Duration, user: true,
        help: "Maximum epoch length" },
    Spec { name: "epoch-min", env: "PMLAB_EPOCH_MIN", default: Some("100us"), kind: Kind::Duration, user: true,
        help: "Minimum epoch length before a sync point ends an epoch" },
    Spec { name: "lock-epoch-min", env: "PMLAB_LOCK_EPOCH_MIN", default: None, kind: Kind::Duration, user: true,
        help: "Minimum epoch before a lock acquire or release ends it (set it to --epoch-max to keep lock points from ending epochs) [default: a tenth of --epoch-min, at least 1us]" },
    Spec { name: "source", env: "PMLAB_SOURCE", default: Some("auto"), kind: Kind::Source, user: true,
        help: "Counter source: auto, hw, instrumented, synthetic:FILE" },
    Spec { name: "write-latency", env: "PMLAB_WRITE_LATENCY", default: Some("0ns"), kind: Kind::Duration, user: true,
        help: "PM write latency paid at durability points (0 = off)" },
    Spec { name: "write-parallelism", env: "PMLAB_WRITE_PARALLELISM", default: Some("4"), kind: Kind::Count { min: 1, max: 1024 }, user: true,
        help: "Flushes the write model overlaps" },
    Spec { name: "w", env: "PMLAB_W", default: Some("6"), kind: Kind::Ratio, user: true,
        help: "W of Quartz's equation 3 (DRAM/L3 latency ratio)" },
    Spec { name: "pm-file", env: "PMLAB_PM_FILE", default: None, kind: Kind::Path, user: true,
        help: "Back the PM pool (pmalloc) with this file" },
    Spec { name: "pm-pool-size", env: "PMLAB_PM_POOL_SIZE", default: Some("1GiB"), kind: Kind::PoolSize, user: true,
        help: "PM pool size" },
    Spec { name: "pm-node", env: "PMLAB_PM_NODE", default: None, kind: Kind::Count { min: 0, max: 1023 }, user: true,
        help: "NUMA node of the PM pool (two-memory mode)" },
    Spec { name: "no-inject", env: "PMLAB_NO_INJECT", default: None, kind: Kind::Switch, user: true,
        help: "Compute epochs and delays but inject nothing (measures overhead)" },
    Spec { name: "sample", env: "PMLAB_SAMPLE", default: Some(Sample::DEFAULT), kind: Kind::Sample, user: true,
        help: "Programs built by pmlab cc with the sampling plugin: run the cache model on every access (off), on a fixed share of the checks (a ratio in (0, 1], e.g. 0.01), or adaptively (auto)" },
    Spec { name: "device", env: "PMLAB_DEVICE", default: None, kind: Kind::Path, user: true,
        help: "Emulate a device's buffers: a `pmlab sim` preset (`pmlab sim presets`) or a simulator config or `pmlab probe infer` profile (TOML); each PM access then takes the latency of the level that serves it (instead of --pm-latency; instrumented source)" },
    Spec { name: "device-params", env: "PMLAB_DEVICE_PARAMS", default: None, kind: Kind::Path, user: false,
        help: "The device model's parameters (pmlab run resolves them from --device)" },
    Spec { name: "tsc-ghz", env: "PMLAB_TSC_GHZ", default: None, kind: Kind::Ratio, user: false,
        help: "TSC frequency (from the calibration cache; else measured at start)" },
    Spec { name: "cpu-ghz", env: "PMLAB_CPU_GHZ", default: None, kind: Kind::Ratio, user: false,
        help: "Core cycles per ns, for stall cycles [default: the TSC's]" },
];

/// The spec named `name` (flag name).
pub fn spec(name: &str) -> &'static Spec {
    SPECS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no run option '{name}'"))
}

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
    /// Name used in the stats and the environment.
    pub fn name(self) -> &'static str {
        match self {
            Throttle::None => "none",
            Throttle::Software => "software",
            Throttle::Mba => "mba",
        }
    }
}

/// Every run option, parsed and checked (see [`SPECS`] for each one's
/// meaning and default).
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// PM read latency, ns.
    pub pm_latency_ns: f64,
    /// DRAM latency, ns; `None` (`auto`) until resolved: `pmlab run` looks
    /// it up in the calibration, [`RunOptions::from_env`] takes
    /// [`FALLBACK_DRAM_NS`].
    pub dram_latency_ns: Option<f64>,
    /// Remote latency in two-memory mode, ns.
    pub remote_latency_ns: Option<f64>,
    /// Target PM bandwidth.
    pub pm_bandwidth: Option<Bandwidth>,
    /// Target PM write bandwidth (write-backs), when it differs from
    /// `pm_bandwidth` (which then is the read bandwidth).
    pub pm_write_bandwidth: Option<Bandwidth>,
    /// How the bandwidth target is enforced ([`Throttle::None`] without one).
    pub throttle: Throttle,
    /// Maximum epoch, ns.
    pub epoch_max_ns: f64,
    /// Minimum epoch, ns.
    pub epoch_min_ns: f64,
    /// Minimum epoch at lock acquires and releases, ns (`None`: derived
    /// from `epoch_min_ns` by the runtime).
    pub lock_epoch_min_ns: Option<f64>,
    /// Counter source: `auto`, `hw`, `instrumented` or `synthetic:FILE`.
    pub source: String,
    /// Write latency, ns.
    pub write_latency_ns: f64,
    /// Flushes in flight in the write model.
    pub write_parallelism: u32,
    /// W of equation 3.
    pub w: f64,
    /// PM pool file.
    pub pm_file: Option<String>,
    /// PM pool size, bytes.
    pub pool_size: u64,
    /// NUMA node of the pool.
    pub pm_node: Option<u32>,
    /// Compute but do not inject.
    pub no_inject: bool,
    /// Sampling of programs built with pmlab cc's sampling plugin.
    pub sample: Sample,
    /// The device emulated (`--device`: a preset name or a file), if any.
    pub device: Option<String>,
    /// Its functional model's parameters (resolved by `pmlab run`).
    pub device_params: Option<DeviceParams>,
    /// TSC GHz, when known.
    pub tsc_ghz: Option<f64>,
    /// Core GHz, when given.
    pub cpu_ghz: Option<f64>,
}

/// How a program built with pmlab cc's sampling plugin runs its
/// instrumented copy (`--sample`, `PMLAB_SAMPLE`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// Every access goes through the cache model (as without the plugin).
    Off,
    /// The runtime picks the share per thread from what the model sees.
    Auto,
    /// A fixed share of the checks (function entries and loop back-edges)
    /// runs instrumented, in (0, 1]; 1 is the same as `Off`.
    Ratio(f64),
}

impl Sample {
    /// The sampling `pmlab run` uses when `--sample` and `PMLAB_SAMPLE`
    /// are not given (and so `pmlab validate`'s latency studies), in the
    /// form [`Sample::parse`] reads.
    pub const DEFAULT: &'static str = "auto";

    /// [`Sample::DEFAULT`], parsed.
    pub fn run_default() -> Sample {
        Sample::parse(Sample::DEFAULT).unwrap_or(Sample::Off)
    }

    /// Parse `off`, `full`, `auto` or a ratio in (0, 1]; the error says
    /// what is expected.
    pub fn parse(v: &str) -> Result<Sample, String> {
        match v.trim() {
            "off" | "full" => Ok(Sample::Off),
            "auto" => Ok(Sample::Auto),
            t => match t.parse::<f64>() {
                Ok(r) if r > 0.0 && r <= 1.0 => Ok(if r == 1.0 {
                    Sample::Off
                } else {
                    Sample::Ratio(r)
                }),
                _ => Err(format!(
                    "'{v}': expected off, auto or a ratio in (0, 1] such as 0.01"
                )),
            },
        }
    }
}

impl std::fmt::Display for Sample {
    /// The form [`Sample::parse`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sample::Off => f.write_str("off"),
            Sample::Auto => f.write_str("auto"),
            Sample::Ratio(r) => write!(f, "{r}"),
        }
    }
}

impl Default for RunOptions {
    /// Every option at its default (as [`SPECS`] says).
    fn default() -> RunOptions {
        RunOptions::parse(|_| None, Naming::Flag).expect("the defaults are valid")
    }
}

fn is_on(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "yes" | "true" | "on"
    )
}

impl RunOptions {
    /// Parse every option from `get` (the given value of a spec, or
    /// `None` for its default) and check them one by one and together.
    /// Errors name the option as `naming` says.
    pub fn parse(
        get: impl Fn(&Spec) -> Option<String>,
        naming: Naming,
    ) -> Result<RunOptions, Error> {
        let value = |name: &str| -> (&'static Spec, Option<String>) {
            let s = spec(name);
            (s, get(s).or_else(|| s.default.map(str::to_string)))
        };
        let bad = |s: &Spec, kind: ErrorKind, why: String| {
            Error::new(kind, format!("{}: {why}", naming.of(s)))
        };
        let dur = |name: &str| -> Result<Option<f64>, Error> {
            let (s, v) = value(name);
            v.map(|v| {
                let ns = Nanos::parse(&v)
                    .map(Nanos::get)
                    .map_err(|e| bad(s, ErrorKind::Parse, e.to_string()))?;
                // Far beyond any memory or epoch, and low enough that
                // delays summed over a run stay finite and exact enough.
                if ns > MAX_DURATION_NS {
                    return Err(bad(
                        s,
                        ErrorKind::OutOfRange,
                        format!("'{v}' is above the maximum of 1000s"),
                    ));
                }
                Ok(ns)
            })
            .transpose()
        };
        let ratio = |name: &str| -> Result<Option<f64>, Error> {
            let (s, v) = value(name);
            v.map(|v| {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0 && *x <= MAX_RATIO)
                    .ok_or_else(|| {
                        bad(
                            s,
                            ErrorKind::OutOfRange,
                            format!("'{v}' is not a positive number up to {MAX_RATIO}"),
                        )
                    })
            })
            .transpose()
        };
        let count = |name: &str| -> Result<Option<u32>, Error> {
            let (s, v) = value(name);
            let Kind::Count { min, max } = s.kind else {
                unreachable!("{name} is a count")
            };
            v.map(|v| {
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (min..=max).contains(n))
                    .ok_or_else(|| {
                        bad(
                            s,
                            ErrorKind::OutOfRange,
                            format!("'{v}' is not a whole number from {min} to {max}"),
                        )
                    })
            })
            .transpose()
        };
        let dram = {
            let (s, v) = value("dram-latency");
            match v.as_deref().map(str::trim) {
                None | Some("auto") => None,
                Some(v) => Some(
                    Nanos::parse(v)
                        .map(Nanos::get)
                        .map_err(|e| bad(s, ErrorKind::Parse, e.to_string()))?,
                ),
            }
        };
        let pm_bandwidth = {
            let (s, v) = value("pm-bandwidth");
            v.map(|v| Bandwidth::parse(&v).map_err(|e| bad(s, ErrorKind::Parse, e.to_string())))
                .transpose()?
        };
        let pm_write_bandwidth = {
            let (s, v) = value("pm-write-bandwidth");
            let w = v
                .map(|v| Bandwidth::parse(&v).map_err(|e| bad(s, ErrorKind::Parse, e.to_string())))
                .transpose()?;
            if w.is_some() && pm_bandwidth.is_none() {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    format!(
                        "{} needs {} (the read bandwidth)",
                        naming.of(s),
                        naming.of(spec("pm-bandwidth"))
                    ),
                ));
            }
            w
        };
        let throttle = {
            let (s, given) = (spec("bw-throttle"), get(spec("bw-throttle")));
            if let Some(t) = &given {
                if pm_bandwidth.is_none() {
                    return Err(Error::new(
                        ErrorKind::Inconsistent,
                        format!("{} needs {}", naming.of(s), naming.of(spec("pm-bandwidth"))),
                    ));
                }
                match t.trim() {
                    "software" => Throttle::Software,
                    "mba" => Throttle::Mba,
                    _ => {
                        return Err(bad(
                            s,
                            ErrorKind::Parse,
                            format!("'{t}': expected software or mba"),
                        ))
                    }
                }
            } else if pm_bandwidth.is_some() {
                Throttle::Software
            } else {
                Throttle::None
            }
        };
        if throttle == Throttle::Mba && pm_write_bandwidth.is_some() {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                format!(
                    "{} needs {} software (MBA has one budget for reads and writes)",
                    naming.of(spec("pm-write-bandwidth")),
                    naming.of(spec("bw-throttle"))
                ),
            ));
        }
        let source = {
            let (s, v) = value("source");
            let v = v.unwrap_or_default();
            let ok = matches!(v.as_str(), "auto" | "hw" | "instrumented")
                || v.strip_prefix("synthetic:").is_some_and(|f| !f.is_empty());
            if !ok {
                return Err(bad(
                    s,
                    ErrorKind::Parse,
                    format!("'{v}': expected auto, hw, instrumented or synthetic:FILE"),
                ));
            }
            v
        };
        let pool_size = {
            let (s, v) = value("pm-pool-size");
            let b = Bytes::parse(v.as_deref().unwrap_or("1GiB"))
                .map_err(|e| bad(s, ErrorKind::Parse, e.to_string()))?;
            if b.get() < (1 << 20) {
                return Err(bad(
                    s,
                    ErrorKind::OutOfRange,
                    format!("{b} is too small: give at least 1MiB"),
                ));
            }
            b.get()
        };
        let device = value("device").1.filter(|d| !d.trim().is_empty());
        let device_params = {
            let (s, v) = value("device-params");
            v.map(|v| DeviceParams::parse(&v).map_err(|e| bad(s, ErrorKind::Parse, e.to_string())))
                .transpose()?
        };
        if device.is_some() && naming == Naming::Flag {
            let d = naming.of(spec("device"));
            if get(spec("pm-latency")).is_some() {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    format!("{d} and {} cannot be combined: the device gives each access the latency of the level that serves it (drop {})", naming.of(spec("pm-latency")), naming.of(spec("pm-latency"))),
                ));
            }
            if !matches!(source.as_str(), "auto" | "instrumented") {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    format!("{d} needs the instrumented source (a program built by pmlab cc), not {} {source}: drop {}", naming.of(spec("source")), naming.of(spec("source"))),
                ));
            }
        }
        let o = RunOptions {
            pm_latency_ns: dur("pm-latency")?.unwrap_or(300.0),
            dram_latency_ns: dram,
            remote_latency_ns: dur("remote-latency")?,
            pm_bandwidth,
            pm_write_bandwidth,
            throttle,
            epoch_max_ns: dur("epoch-max")?.unwrap_or(10e6),
            epoch_min_ns: dur("epoch-min")?.unwrap_or(100e3),
            lock_epoch_min_ns: dur("lock-epoch-min")?,
            source,
            write_latency_ns: dur("write-latency")?.unwrap_or(0.0),
            write_parallelism: count("write-parallelism")?.unwrap_or(4),
            w: ratio("w")?.unwrap_or(6.0),
            pm_file: value("pm-file").1.filter(|p| !p.is_empty()),
            pool_size,
            pm_node: count("pm-node")?,
            no_inject: value("no-inject").1.is_some_and(|v| is_on(&v)),
            sample: {
                let (s, v) = value("sample");
                Sample::parse(v.as_deref().unwrap_or(Sample::DEFAULT))
                    .map_err(|why| bad(s, ErrorKind::Parse, why))?
            },
            device,
            device_params,
            tsc_ghz: ratio("tsc-ghz")?,
            cpu_ghz: ratio("cpu-ghz")?,
        };
        o.check(naming)?;
        Ok(o)
    }

    /// Read the options from `PMLAB_*` variables (`get` looks one up):
    /// the runtime's side. An unset (or `auto`) DRAM latency is
    /// [`FALLBACK_DRAM_NS`].
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<RunOptions, Error> {
        let mut o = RunOptions::parse(|s| get(s.env), Naming::Env)?;
        o.dram_latency_ns.get_or_insert(FALLBACK_DRAM_NS);
        o.check(Naming::Env)?;
        Ok(o)
    }

    /// The DRAM latency in force: the given one, else [`FALLBACK_DRAM_NS`].
    pub fn dram_ns(&self) -> f64 {
        self.dram_latency_ns.unwrap_or(FALLBACK_DRAM_NS)
    }

    /// Check that the values agree with each other (the PM latency
    /// against the DRAM latency only once that is known: call it again
    /// after resolving `auto`).
    pub fn check(&self, naming: Naming) -> Result<(), Error> {
        let n = |name: &str| naming.of(spec(name));
        let e = |m: String| Err(Error::new(ErrorKind::Inconsistent, m));
        if self.dram_latency_ns.is_some_and(|d| d <= 0.0) {
            return e(format!("{} must be above 0", n("dram-latency")));
        }
        // With a device model the level that serves each access gives the
        // latency: `--pm-latency` is not used, so it need not exceed DRAM's.
        let base = self.remote_latency_ns.or(self.dram_latency_ns);
        let uses_pm_latency = self.device.is_none() && self.device_params.is_none();
        if let Some(base) = base.filter(|&b| uses_pm_latency && self.pm_latency_ns < b) {
            return e(format!(
                "{} {} is below the {} latency {}: PM can only be emulated as slower memory (raise {})",
                n("pm-latency"),
                Nanos::new(self.pm_latency_ns),
                if self.remote_latency_ns.is_some() { "remote" } else { "DRAM" },
                Nanos::new(base),
                n("pm-latency"),
            ));
        }
        if self.epoch_max_ns < 1e3 {
            return e(format!(
                "{} {} is too short: give at least 1us",
                n("epoch-max"),
                Nanos::new(self.epoch_max_ns)
            ));
        }
        for (name, v) in [
            ("epoch-min", Some(self.epoch_min_ns)),
            ("lock-epoch-min", self.lock_epoch_min_ns),
        ] {
            if let Some(v) = v.filter(|&v| v > self.epoch_max_ns) {
                return e(format!(
                    "{} {} is above {} {}",
                    n(name),
                    Nanos::new(v),
                    n("epoch-max"),
                    Nanos::new(self.epoch_max_ns)
                ));
            }
        }
        Ok(())
    }

    /// The options as `PMLAB_*` variables, each in a form
    /// [`RunOptions::from_env`] reads back to the same value; options at
    /// no value (unset, off) are left out.
    pub fn to_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        let mut set = |name: &str, v: String| env.push((spec(name).env.to_string(), v));
        let ns = |v: f64| format!("{v}ns");
        set("pm-latency", ns(self.pm_latency_ns));
        if let Some(d) = self.dram_latency_ns {
            set("dram-latency", ns(d));
        }
        if let Some(r) = self.remote_latency_ns {
            set("remote-latency", ns(r));
        }
        set("epoch-max", ns(self.epoch_max_ns));
        set("epoch-min", ns(self.epoch_min_ns));
        if let Some(l) = self.lock_epoch_min_ns {
            set("lock-epoch-min", ns(l));
        }
        if let Some(t) = self.tsc_ghz {
            set("tsc-ghz", t.to_string());
        }
        if let Some(c) = self.cpu_ghz {
            set("cpu-ghz", c.to_string());
        }
        if let Some(b) = self.pm_bandwidth {
            set("pm-bandwidth", format!("{}B/s", b.bytes_per_sec()));
            set("bw-throttle", self.throttle.name().to_string());
        }
        if let Some(w) = self.pm_write_bandwidth {
            set("pm-write-bandwidth", format!("{}B/s", w.bytes_per_sec()));
        }
        if self.write_latency_ns > 0.0 {
            set("write-latency", ns(self.write_latency_ns));
        }
        set("write-parallelism", self.write_parallelism.to_string());
        set("w", self.w.to_string());
        if let Some(p) = &self.pm_file {
            set("pm-file", p.clone());
        }
        set("pm-pool-size", self.pool_size.to_string());
        if let Some(n) = self.pm_node {
            set("pm-node", n.to_string());
        }
        if self.no_inject {
            set("no-inject", "1".into());
        }
        if let Some(d) = &self.device {
            set("device", d.clone());
        }
        if let Some(p) = &self.device_params {
            set("device-params", p.to_env());
        }
        set("source", self.source.clone());
        set("sample", self.sample.to_string());
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn flags(pairs: &[(&str, &str)]) -> Result<RunOptions, Error> {
        let m: HashMap<&str, &str> = pairs.iter().copied().collect();
        RunOptions::parse(|s| m.get(s.name).map(|v| v.to_string()), Naming::Flag)
    }

    fn env(pairs: &[(&str, &str)]) -> Result<RunOptions, Error> {
        let m: HashMap<&str, &str> = pairs.iter().copied().collect();
        RunOptions::from_env(|k| m.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let o = RunOptions::default();
        assert_eq!(o.pm_latency_ns, 300.0);
        assert_eq!(o.dram_latency_ns, None);
        assert_eq!(o.dram_ns(), 100.0);
        assert_eq!((o.epoch_max_ns, o.epoch_min_ns), (10e6, 100e3));
        assert_eq!((o.write_parallelism, o.w), (4, 6.0));
        assert_eq!(o.pool_size, 1 << 30);
        assert_eq!(o.source, "auto");
        assert_eq!(o.throttle, Throttle::None);
        assert!(!o.no_inject);
        assert_eq!(o.sample, Sample::run_default());
        assert_eq!(Sample::run_default().to_string(), Sample::DEFAULT);
        assert_eq!(spec("sample").default, Some(Sample::DEFAULT));
        // Every spec's name and variable are unique, and the variables
        // are the runtime's namespace.
        for (i, a) in SPECS.iter().enumerate() {
            assert!(a.env.starts_with("PMLAB_"), "{}", a.env);
            for b in &SPECS[i + 1..] {
                assert!(a.name != b.name && a.env != b.env, "{}", a.name);
            }
        }
    }

    #[test]
    fn sample_values_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(Sample::parse("off"), Ok(Sample::Off));
        assert_eq!(Sample::parse("full"), Ok(Sample::Off));
        assert_eq!(Sample::parse(" auto "), Ok(Sample::Auto));
        assert_eq!(Sample::parse("0.01"), Ok(Sample::Ratio(0.01)));
        assert_eq!(Sample::parse("1"), Ok(Sample::Off));
        for bad in ["0", "1.5", "-0.1", "sometimes", ""] {
            let e = Sample::parse(bad).unwrap_err();
            assert!(e.contains("expected off, auto or a ratio"), "{bad}: {e}");
        }
        // Unset: pmlab run's default; a flag and a variable say the same.
        assert_eq!(flags(&[]).unwrap().sample, Sample::run_default());
        assert_eq!(flags(&[("sample", "auto")]).unwrap().sample, Sample::Auto);
        assert_eq!(
            env(&[("PMLAB_SAMPLE", "0.1")]).unwrap().sample,
            Sample::Ratio(0.1)
        );
        let e = flags(&[("sample", "2")]).unwrap_err().to_string();
        assert!(e.contains("--sample") && e.contains("'2'"), "{e}");
    }

    #[test]
    fn values_are_parsed_with_units_from_flags_and_env() {
        let o = flags(&[
            ("pm-latency", "0.4us"),
            ("epoch-max", "1ms"),
            ("epoch-min", "10us"),
            ("pm-bandwidth", "2GB/s"),
        ])
        .unwrap();
        assert_eq!(o.pm_latency_ns, 400.0);
        assert_eq!(o.epoch_min_ns, 10e3);
        assert_eq!(o.pm_bandwidth.map(|b| b.bytes_per_ns()), Some(2.0));
        assert_eq!(o.throttle, Throttle::Software);
        let e = env(&[
            ("PMLAB_PM_LATENCY", "400"),
            ("PMLAB_NO_INJECT", "yes"),
            ("PMLAB_PM_POOL_SIZE", "64MiB"),
        ])
        .unwrap();
        assert_eq!(e.pm_latency_ns, 400.0);
        assert!(e.no_inject);
        assert_eq!(e.pool_size, 64 << 20);
    }

    #[test]
    fn errors_name_the_option_as_it_was_given() {
        let e = flags(&[("pm-latency", "50ns"), ("dram-latency", "100ns")]).unwrap_err();
        assert_eq!(e.to_string(), "--pm-latency 50ns is below the DRAM latency 100ns: PM can only be emulated as slower memory (raise --pm-latency)");
        // Before the DRAM latency is known (auto) there is nothing to
        // compare with; the runtime's fallback is 100 ns.
        assert!(flags(&[("pm-latency", "50ns")]).is_ok());
        let e = env(&[("PMLAB_PM_LATENCY", "50ns")]).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "PMLAB_PM_LATENCY (pmlab run --pm-latency) 50ns is below the DRAM latency 100ns"
            ),
            "{e}"
        );
        // Under --device the device's levels give the latency: a DRAM
        // latency above the unused --pm-latency is no error.
        assert!(flags(&[("device", "optane-1dimm"), ("dram-latency", "328ns")]).is_ok());
        let e = flags(&[("epoch-min", "20ms")]).unwrap_err();
        assert_eq!(e.to_string(), "--epoch-min 20ms is above --epoch-max 10ms");
        let e = env(&[("PMLAB_LOCK_EPOCH_MIN", "20ms")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "PMLAB_LOCK_EPOCH_MIN (pmlab run --lock-epoch-min) 20ms is above PMLAB_EPOCH_MAX (pmlab run --epoch-max) 10ms"
        );
        assert!(flags(&[("lock-epoch-min", "10ms")]).is_ok());
        let e = flags(&[("epoch-max", "10 fortnights")]).unwrap_err();
        assert!(e.to_string().starts_with("--epoch-max: "), "{e}");
        let e = flags(&[("source", "magic")]).unwrap_err();
        assert!(e.to_string().contains("expected auto, hw"), "{e}");
        let e = flags(&[("bw-throttle", "mba")]).unwrap_err();
        assert_eq!(e.to_string(), "--bw-throttle needs --pm-bandwidth");
        let e = flags(&[("pm-write-bandwidth", "2GB/s")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--pm-write-bandwidth needs --pm-bandwidth (the read bandwidth)"
        );
        let e = flags(&[
            ("pm-bandwidth", "6GB/s"),
            ("pm-write-bandwidth", "2GB/s"),
            ("bw-throttle", "mba"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--pm-write-bandwidth needs --bw-throttle software"),
            "{e}"
        );
        let o = flags(&[
            ("pm-bandwidth", "6.6GB/s"),
            ("pm-write-bandwidth", "2.3GB/s"),
        ])
        .unwrap();
        assert_eq!(o.pm_write_bandwidth.map(|b| b.bytes_per_ns()), Some(2.3));
        let w = env(&[
            ("PMLAB_PM_BANDWIDTH", "6GB/s"),
            ("PMLAB_PM_WRITE_BANDWIDTH", "fast"),
        ])
        .unwrap_err();
        assert!(
            w.to_string()
                .starts_with("PMLAB_PM_WRITE_BANDWIDTH (pmlab run --pm-write-bandwidth): "),
            "{w}"
        );
        let e = env(&[
            ("PMLAB_PM_BANDWIDTH", "1GB/s"),
            ("PMLAB_BW_THROTTLE", "magic"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("PMLAB_BW_THROTTLE (pmlab run --bw-throttle): 'magic'"),
            "{e}"
        );
        let e = env(&[("PMLAB_WRITE_PARALLELISM", "0")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "PMLAB_WRITE_PARALLELISM (pmlab run --write-parallelism): '0' is not a whole number from 1 to 1024"
        );
        // Values past any meaning (2^64 ns, a ratio of 1e308) are refused
        // rather than turned into delays that overflow a run's sums.
        for (k, v) in [
            ("pm-latency", "18446744073709551616ns"),
            ("write-latency", "2000s"),
            ("epoch-max", "99999999999999ms"),
            ("w", "1e308"),
            ("tsc-ghz", "1e9"),
        ] {
            let e = flags(&[(k, v)]).unwrap_err();
            assert!(e.to_string().starts_with(&format!("--{k}: '{v}'")), "{e}");
        }
        let e = flags(&[("w", "-1")]).unwrap_err();
        assert!(
            e.to_string().starts_with("--w: '-1' is not a positive"),
            "{e}"
        );
        let e = flags(&[("pm-pool-size", "4KiB")]).unwrap_err();
        assert!(e.to_string().contains("at least 1MiB"), "{e}");
        let e = flags(&[("remote-latency", "500ns"), ("pm-latency", "400ns")]).unwrap_err();
        assert!(
            e.to_string().contains("below the remote latency 500ns"),
            "{e}"
        );
        let e = flags(&[("epoch-max", "500ns"), ("epoch-min", "100ns")]).unwrap_err();
        assert!(e.to_string().contains("at least 1us"), "{e}");
    }

    #[test]
    fn a_device_excludes_a_pm_latency_and_other_sources() {
        let e = flags(&[("device", "optane-1dimm"), ("pm-latency", "400ns")]).unwrap_err();
        assert_eq!(e.to_string(), "--device and --pm-latency cannot be combined: the device gives each access the latency of the level that serves it (drop --pm-latency)");
        let e = flags(&[("device", "optane-1dimm"), ("source", "hw")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--device needs the instrumented source"),
            "{e}"
        );
        let o = flags(&[("device", "optane-1dimm")]).unwrap();
        assert_eq!(o.device.as_deref(), Some("optane-1dimm"));
        assert_eq!(o.device_params, None);
        // The runtime's side: the parameters travel, checked.
        let p = crate::device::DeviceParams::optane_like();
        let e = env(&[("PMLAB_DEVICE_PARAMS", "name=x,xpline=3")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("PMLAB_DEVICE_PARAMS: device parameter xpline"),
            "{e}"
        );
        let o = env(&[
            ("PMLAB_DEVICE_PARAMS", &p.to_env()),
            ("PMLAB_PM_LATENCY", "345ns"),
        ])
        .unwrap();
        assert_eq!(o.device_params, Some(p));
    }

    #[test]
    fn the_environment_round_trips() {
        let o = flags(&[
            ("pm-latency", "1.5us"),
            ("dram-latency", "87.25ns"),
            ("remote-latency", "140ns"),
            ("pm-bandwidth", "6.5GiB/s"),
            ("bw-throttle", "mba"),
            ("epoch-max", "3ms"),
            ("epoch-min", "50us"),
            ("lock-epoch-min", "2us"),
            ("source", "synthetic:/tmp/s.txt"),
            ("write-latency", "700ns"),
            ("write-parallelism", "8"),
            ("w", "4.5"),
            ("pm-file", "/tmp/pool"),
            ("pm-pool-size", "256MiB"),
            ("pm-node", "1"),
            ("no-inject", "true"),
        ])
        .unwrap();
        let mut o = o;
        o.device = Some("optane-1dimm".into());
        o.device_params = Some(crate::device::DeviceParams::optane_like());
        let env: HashMap<String, String> = o.to_env().into_iter().collect();
        let back = RunOptions::from_env(|k| env.get(k).cloned()).unwrap();
        assert_eq!(back, o);
        assert_eq!(env["PMLAB_PM_LATENCY"], "1500ns");
        assert_eq!(env["PMLAB_LOCK_EPOCH_MIN"], "2000ns");
        // Unset options stay out of the environment.
        let d = RunOptions::default().to_env();
        assert!(!d.iter().any(|(k, _)| k == "PMLAB_DRAM_LATENCY"
            || k == "PMLAB_PM_BANDWIDTH"
            || k == "PMLAB_NO_INJECT"));
    }
}
