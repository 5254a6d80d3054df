//! `pmlab run [options] -- program args`: run a program as if its memory
//! were slower persistent memory (Quartz's epoch model, issue 2).
//!
//! Settings come from flags, else a TOML file (`--config`, same names with
//! `_` for `-`), else defaults; each is validated here and passed to the
//! runtime as a `PMLAB_*` variable (see `crates/runtime/src/config.rs`).
//! Before the program starts, the runtime checks them and the counter
//! source, so a machine without a PMU fails at once with one line.

use anyhow::{anyhow, bail, Context};
use pmlab_emu::launch;
use pmlab_model::units::{Bandwidth, Bytes, Nanos};
use serde::Deserialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `pmlab run`.
#[derive(clap::Args, Default)]
pub struct Args {
    /// Emulated PM read latency (e.g. 400ns, 1us) [default: 300ns].
    #[arg(long)]
    pub pm_latency: Option<String>,
    /// This machine's DRAM latency, or `auto` for the calibration cache
    /// (measured on first use) [default: auto].
    #[arg(long)]
    pub dram_latency: Option<String>,
    /// Two-memory mode: the remote NUMA node's latency (it plays PM).
    #[arg(long)]
    pub remote_latency: Option<String>,
    /// Target PM bandwidth (e.g. 8GB/s); epochs that move more are stretched.
    #[arg(long)]
    pub pm_bandwidth: Option<String>,
    /// How to enforce --pm-bandwidth: software or mba (Intel RDT resctrl).
    #[arg(long)]
    pub bw_throttle: Option<String>,
    /// Maximum epoch length [default: 10ms].
    #[arg(long)]
    pub epoch_max: Option<String>,
    /// Minimum epoch length before a sync point ends an epoch [default: 100us].
    #[arg(long)]
    pub epoch_min: Option<String>,
    /// Minimum epoch before a lock acquire or release ends it (set it to
    /// --epoch-max to keep lock points from ending epochs) [default: a
    /// tenth of --epoch-min, at least 1us].
    #[arg(long)]
    pub lock_epoch_min: Option<String>,
    /// Counter source: auto, hw, instrumented, synthetic:FILE [default: auto].
    #[arg(long)]
    pub source: Option<String>,
    /// PM write latency paid at durability points [default: 0 = off].
    #[arg(long)]
    pub write_latency: Option<String>,
    /// Flushes the write model overlaps [default: 4].
    #[arg(long)]
    pub write_parallelism: Option<u32>,
    /// W of Quartz's equation 3 (DRAM/L3 latency ratio) [default: 6].
    #[arg(long)]
    pub w: Option<f64>,
    /// Back the PM pool (pmalloc) with this file.
    #[arg(long)]
    pub pm_file: Option<PathBuf>,
    /// PM pool size [default: 1GiB].
    #[arg(long)]
    pub pm_pool_size: Option<String>,
    /// NUMA node of the PM pool (two-memory mode).
    #[arg(long)]
    pub pm_node: Option<u32>,
    /// Compute epochs and delays but inject nothing (measures overhead).
    #[arg(long)]
    pub no_inject: bool,
    /// Write the runtime's statistics (JSON) to this file.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Print the statistics as JSON on stdout after the program's output.
    #[arg(long)]
    pub json: bool,
    /// Do not print the statistics summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Read settings from a TOML file (flags win).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    pub command: Vec<String>,
}

/// The `--config` file: the flags' names with `_`.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    pm_latency: Option<String>,
    dram_latency: Option<String>,
    remote_latency: Option<String>,
    pm_bandwidth: Option<String>,
    bw_throttle: Option<String>,
    epoch_max: Option<String>,
    epoch_min: Option<String>,
    lock_epoch_min: Option<String>,
    source: Option<String>,
    write_latency: Option<String>,
    write_parallelism: Option<u32>,
    w: Option<f64>,
    pm_file: Option<PathBuf>,
    pm_pool_size: Option<String>,
    pm_node: Option<u32>,
    no_inject: Option<bool>,
}

fn load_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        let msg = e.message().replace('\n', " ");
        anyhow!("config file {}: {msg}", path.display())
    })
}

fn dur(flag: &str, v: &str) -> anyhow::Result<f64> {
    Nanos::parse(v)
        .map(|n| n.get())
        .map_err(|e| anyhow!("--{flag}: {e}"))
}

/// Settings resolved and validated, as runtime variables.
#[derive(Debug)]
pub struct Resolved {
    /// `PMLAB_*` variables.
    pub env: Vec<(String, String)>,
    /// Counter source requested (`auto` not yet resolved).
    pub source: String,
}

/// Merge flags over the file, validate, build the runtime's environment.
pub fn resolve(a: &Args) -> anyhow::Result<Resolved> {
    let f = match &a.config {
        Some(p) => load_file(p)?,
        None => FileConfig::default(),
    };
    macro_rules! pick {
        ($field:ident) => {
            a.$field.clone().or(f.$field.clone())
        };
    }
    let mut env: Vec<(String, String)> = vec![("PMLAB_ACTIVE".into(), "1".into())];
    let mut set = |k: &str, v: String| env.push((k.to_string(), v));

    let pm = dur(
        "pm-latency",
        &pick!(pm_latency).unwrap_or_else(|| "300ns".into()),
    )?;
    let dram_s = pick!(dram_latency).unwrap_or_else(|| "auto".into());
    let cached = if dram_s == "auto" {
        Some(pmlab_emu::calibrate::cached_or_measure(
            &crate::cmd::calibrate::note(false),
        )?)
    } else {
        pmlab_emu::calibrate::load_cache().ok().flatten()
    };
    let dram = if dram_s == "auto" {
        cached.as_ref().map(|c| c.dram_latency_ns).unwrap_or(100.0)
    } else {
        dur("dram-latency", &dram_s)?
    };
    if dram <= 0.0 {
        bail!("--dram-latency must be above 0");
    }
    let remote = pick!(remote_latency)
        .map(|v| dur("remote-latency", &v))
        .transpose()?;
    let base = remote.unwrap_or(dram);
    if pm < base {
        bail!(
            "--pm-latency {} is below the {} latency {}: PM can only be emulated as slower memory (raise --pm-latency)",
            Nanos::new(pm),
            if remote.is_some() { "remote" } else { "DRAM" },
            Nanos::new(base)
        );
    }
    let max = dur(
        "epoch-max",
        &pick!(epoch_max).unwrap_or_else(|| "10ms".into()),
    )?;
    let min = dur(
        "epoch-min",
        &pick!(epoch_min).unwrap_or_else(|| "100us".into()),
    )?;
    if max < 1e3 {
        bail!(
            "--epoch-max {} is too short: give at least 1us",
            Nanos::new(max)
        );
    }
    if min > max {
        bail!(
            "--epoch-min {} is above --epoch-max {}",
            Nanos::new(min),
            Nanos::new(max)
        );
    }
    set("PMLAB_PM_LATENCY", format!("{pm}ns"));
    set("PMLAB_DRAM_LATENCY", format!("{dram}ns"));
    if let Some(r) = remote {
        set("PMLAB_REMOTE_LATENCY", format!("{r}ns"));
    }
    set("PMLAB_EPOCH_MAX", format!("{max}ns"));
    set("PMLAB_EPOCH_MIN", format!("{min}ns"));
    if let Some(l) = pick!(lock_epoch_min) {
        let l = dur("lock-epoch-min", &l)?;
        if l > max {
            bail!(
                "--lock-epoch-min {} is above --epoch-max {}",
                Nanos::new(l),
                Nanos::new(max)
            );
        }
        set("PMLAB_LOCK_EPOCH_MIN", format!("{l}ns"));
    }
    if let Some(c) = &cached {
        set("PMLAB_TSC_GHZ", format!("{}", c.tsc_ghz));
    }
    if let Some(bw) = pick!(pm_bandwidth) {
        let b = Bandwidth::parse(&bw).map_err(|e| anyhow!("--pm-bandwidth: {e}"))?;
        if b.bytes_per_sec() <= 0.0 {
            bail!("--pm-bandwidth must be above 0");
        }
        set("PMLAB_PM_BANDWIDTH", bw);
    }
    if let Some(t) = pick!(bw_throttle) {
        if !matches!(t.as_str(), "software" | "mba") {
            bail!("--bw-throttle '{t}': expected software or mba");
        }
        if pick!(pm_bandwidth).is_none() {
            bail!("--bw-throttle needs --pm-bandwidth");
        }
        set("PMLAB_BW_THROTTLE", t);
    }
    if let Some(wl) = pick!(write_latency) {
        set(
            "PMLAB_WRITE_LATENCY",
            format!("{}ns", dur("write-latency", &wl)?),
        );
    }
    if let Some(n) = pick!(write_parallelism) {
        if !(1..=1024).contains(&n) {
            bail!("--write-parallelism {n}: expected 1 to 1024");
        }
        set("PMLAB_WRITE_PARALLELISM", n.to_string());
    }
    if let Some(w) = pick!(w) {
        if !(w.is_finite() && w > 0.0) {
            bail!("--w {w}: expected a positive ratio (DRAM latency / L3 latency)");
        }
        set("PMLAB_W", w.to_string());
    }
    if let Some(p) = pick!(pm_file) {
        let abs = std::path::absolute(&p).unwrap_or(p.clone());
        if let Some(dir) = abs.parent().filter(|d| !d.is_dir()) {
            bail!(
                "--pm-file {}: directory {} does not exist",
                p.display(),
                dir.display()
            );
        }
        set("PMLAB_PM_FILE", abs.to_string_lossy().into_owned());
    }
    if let Some(s) = pick!(pm_pool_size) {
        let b = Bytes::parse(&s).map_err(|e| anyhow!("--pm-pool-size: {e}"))?;
        if b.get() < (1 << 20) {
            bail!("--pm-pool-size {b}: give at least 1MiB");
        }
        set("PMLAB_PM_POOL_SIZE", s);
    }
    if let Some(n) = pick!(pm_node) {
        if !Path::new(&format!("/sys/devices/system/node/node{n}")).is_dir() {
            bail!(
                "--pm-node {n}: this machine has no NUMA node {n} (see /sys/devices/system/node)"
            );
        }
        set("PMLAB_PM_NODE", n.to_string());
    }
    if a.no_inject || f.no_inject == Some(true) {
        set("PMLAB_NO_INJECT", "1".into());
    }
    let source = pick!(source).unwrap_or_else(|| "auto".into());
    if let Some(p) = source.strip_prefix("synthetic:") {
        // The runtime reads it relative to the program's working
        // directory, which is ours; make it absolute for exec'd children.
        let abs = std::fs::canonicalize(p)
            .with_context(|| format!("--source synthetic:{p}: cannot read the script"))?;
        return Ok(Resolved {
            env,
            source: format!("synthetic:{}", abs.display()),
        });
    }
    if !matches!(source.as_str(), "auto" | "hw" | "instrumented") {
        bail!("--source '{source}': expected auto, hw, instrumented or synthetic:FILE");
    }
    Ok(Resolved { env, source })
}

/// Pick the counter source and check it with the runtime. For `auto`: hw
/// where it works, else instrumented when the program was built by
/// `pmlab cc`, else hw's reason.
fn choose_source(
    runtime: &Path,
    env: &[(String, String)],
    requested: &str,
    program: &Path,
) -> anyhow::Result<(String, String)> {
    let with = |s: &str| {
        let mut e = env.to_vec();
        e.push(("PMLAB_SOURCE".into(), s.to_string()));
        e
    };
    if requested == "instrumented" && !pmlab_emu::elf::is_instrumented(program)? {
        bail!(
            "{} was not built by 'pmlab cc', so the instrumented source would count nothing: rebuild it with pmlab cc, or use --source synthetic:FILE",
            program.display()
        );
    }
    if requested != "auto" {
        let ok = launch::check(runtime, &with(requested))?;
        return Ok((requested.to_string(), ok));
    }
    match launch::check(runtime, &with("hw")) {
        Ok(ok) => Ok(("hw".into(), ok)),
        Err(hw_err) => {
            if pmlab_emu::elf::is_instrumented(program)? {
                let ok = launch::check(runtime, &with("instrumented"))?;
                Ok(("instrumented".into(), ok))
            } else {
                Err(hw_err.into())
            }
        }
    }
}

/// The reports written beside `stats_path`: forked children's as
/// `<file>.<pid>` (`{"pid", "stats"}` each, by pid) and the launched
/// process's before each of its execs as `<file>.exec-<ns>` (in order),
/// `stats` null where a file does not parse. With `remove` (the
/// statistics file is pmlab's own temporary one) they are deleted, with
/// any `.tmp<pid>` file of a report cut short; beside a `--stats-json`
/// file they stay.
fn side_reports(
    stats_path: &Path,
    remove: bool,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let (Some(dir), Some(name)) = (stats_path.parent(), stats_path.file_name()) else {
        return (Vec::new(), Vec::new());
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (Vec::new(), Vec::new());
    };
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
    };
    let (mut children, mut execs) = (Vec::new(), Vec::new());
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(suffix) = file.strip_prefix(&prefix) else {
            continue;
        };
        if suffix.contains("tmp") {
            // A report cut short: nothing to read.
        } else if let Ok(pid) = suffix.parse::<u32>() {
            children.push((pid, read(&e.path())));
        } else if let Some(stamp) = suffix.strip_prefix("exec-") {
            execs.push((stamp.to_string(), read(&e.path())));
        } else {
            continue;
        }
        if remove {
            let _ = std::fs::remove_file(e.path());
        }
    }
    children.sort_by_key(|(pid, _)| *pid);
    execs.sort_by(|a, b| a.0.cmp(&b.0));
    (
        children
            .into_iter()
            .map(|(pid, stats)| serde_json::json!({ "pid": pid, "stats": stats }))
            .collect(),
        execs.into_iter().map(|(_, stats)| stats.into()).collect(),
    )
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let program = launch::resolve_program(&args.command[0])?;
    launch::check_environment()?;
    let resolved = resolve(&args)?;
    let runtime = launch::find_runtime()?;
    let (source, _ok) = choose_source(&runtime, &resolved.env, &resolved.source, &program)?;
    let mut env = resolved.env;
    env.push(("PMLAB_SOURCE".into(), source));
    let (stats_path, temp) = match &args.stats_json {
        Some(p) => (p.clone(), false),
        None => (
            std::env::temp_dir().join(format!("pmlab-stats-{}.json", std::process::id())),
            true,
        ),
    };
    let _ = std::fs::remove_file(&stats_path);
    env.push((
        "PMLAB_STATS_FILE".into(),
        std::path::absolute(&stats_path)
            .unwrap_or(stats_path.clone())
            .to_string_lossy()
            .into_owned(),
    ));
    let cmd = launch::command(&runtime, &args.command, &env);
    let status = launch::spawn_and_wait(cmd)?;
    let code = launch::exit_code(status);
    let stats = std::fs::read_to_string(&stats_path).ok();
    let (children, pre_exec) = side_reports(&stats_path, temp);
    if temp {
        let _ = std::fs::remove_file(&stats_path);
    }
    match stats {
        Some(s) => {
            let v: serde_json::Value = serde_json::from_str(&s).with_context(|| {
                format!("runtime statistics {} are corrupt", stats_path.display())
            })?;
            if args.json {
                // The program's exit code wins over a closed stdout.
                let _ = writeln!(
                    std::io::stdout(),
                    "{}",
                    serde_json::json!({ "exit_code": code, "stats": v, "children": children, "pre_exec": pre_exec })
                );
            }
            if !args.quiet {
                eprintln!("{}", summary(&v));
            }
        }
        None => {
            eprintln!(
                "pmlab: warning: the runtime wrote no statistics: the program may be statically linked or setuid (LD_PRELOAD ignored), or it was killed or crashed"
            );
            if args.json {
                let _ = writeln!(
                    std::io::stdout(),
                    "{}",
                    serde_json::json!({ "exit_code": code, "stats": null, "children": children, "pre_exec": pre_exec })
                );
            }
        }
    }
    Ok(code)
}

fn summary(v: &serde_json::Value) -> String {
    let t = &v["total"];
    let ms = |k: &str| t[k].as_f64().unwrap_or(0.0) / 1e6;
    format!(
        "pmlab: {} epochs ({} timer, {} sync, {} exit) over {} thread(s); delay {} {:.3} ms of {:.3} ms requested; overhead {:.3} ms ({}); write stalls {:.3} ms; source {}; bandwidth throttle {}\npmlab: advice: {}",
        t["epochs"],
        t["epochs_timer"],
        t["epochs_sync"],
        t["epochs_exit"],
        v["threads"].as_array().map_or(0, |a| a.len()),
        if v["inject"].as_bool() == Some(false) { "computed (not injected)" } else { "injected" },
        ms("injected_delay_ns"),
        ms("requested_delay_ns"),
        ms("overhead_ns"),
        if t["amortised"].as_bool() == Some(true) { "amortised".to_string() } else { format!("{} ns not amortised", t["unabsorbed_overhead_ns"]) },
        ms("write_delay_ns"),
        v["source"].as_str().unwrap_or("?"),
        v["bandwidth_throttle"].as_str().unwrap_or("?"),
        v["advice"].as_str().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: impl FnOnce(&mut Args)) -> Args {
        let mut a = Args {
            dram_latency: Some("100ns".into()),
            command: vec!["true".into()],
            ..Default::default()
        };
        f(&mut a);
        a
    }

    #[test]
    fn validation_messages() {
        let e = resolve(&args(|a| a.pm_latency = Some("50ns".into()))).unwrap_err();
        assert!(e.to_string().contains("below the DRAM latency"), "{e}");
        let e = resolve(&args(|a| a.epoch_min = Some("20ms".into()))).unwrap_err();
        assert!(e.to_string().contains("above --epoch-max"), "{e}");
        let e = resolve(&args(|a| a.lock_epoch_min = Some("11ms".into()))).unwrap_err();
        assert!(e.to_string().starts_with("--lock-epoch-min 11ms"), "{e}");
        let r = resolve(&args(|a| a.lock_epoch_min = Some("10ms".into()))).unwrap();
        assert!(r
            .env
            .contains(&("PMLAB_LOCK_EPOCH_MIN".into(), "10000000ns".into())));
        let e = resolve(&args(|a| a.epoch_max = Some("10 fortnights".into()))).unwrap_err();
        assert!(e.to_string().starts_with("--epoch-max:"), "{e}");
        let e = resolve(&args(|a| a.source = Some("magic".into()))).unwrap_err();
        assert!(e.to_string().contains("expected auto, hw"), "{e}");
        let r = resolve(&args(|a| a.pm_latency = Some("0.5us".into()))).unwrap();
        assert!(r.env.contains(&("PMLAB_PM_LATENCY".into(), "500ns".into())));
    }
}
