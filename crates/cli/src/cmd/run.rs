//! `pmlab run [options] -- program args`: run a program as if its memory
//! were slower persistent memory (Quartz's epoch model, issue 2).
//!
//! The run options are defined once, in `pmlab_model::options` (names,
//! defaults, checks, `PMLAB_*` variables), and shared with the runtime:
//! this file builds their flags and `--config` keys from that table, takes
//! flags over the file over defaults, resolves what only `pmlab run` can
//! (the calibrated DRAM latency, paths, NUMA nodes) and passes them to the
//! runtime in the environment. Before the program starts, the runtime
//! checks them and the counter source, so a machine without a PMU fails at
//! once with one line.

use anyhow::{anyhow, bail, Context};
use clap::{Arg, ArgAction, ArgMatches};
use pmlab_emu::launch;
use pmlab_model::options::{Kind, Naming, RunOptions, Spec, SPECS};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Arguments of `pmlab run`.
#[derive(clap::Args, Default)]
#[command(after_help = "Example:
  pmlab cc -O2 -o app app.c
  pmlab run --pm-latency 400ns --json stats.json -- ./app input.txt
  pmlab run --pm-latency 1us --json /dev/fd/3 -- ./app 3>stats.json   # JSON on a descriptor of its own")]
pub struct Args {
    /// The run options (built from `pmlab_model::options::SPECS`).
    #[command(flatten)]
    pub options: OptionFlags,
    /// Write the runtime's statistics (JSON) to this file.
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,
    /// Write the exit code and statistics (JSON: exit_code, stats,
    /// children, pre_exec) to this file (never to the program's stdout;
    /// `/dev/fd/N` for a descriptor of its own).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Do not print the statistics summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// The last-level cache the instrumented source models, SIZE:WAYS
    /// (e.g. 32MiB:16); over PMLAB_INSTR_LLC. Default: the effective LLC
    /// `pmlab calibrate` measured, else the size sysfs reports.
    #[arg(long, value_name = "SIZE:WAYS")]
    pub llc: Option<String>,
    /// Instrumented source: time 1 in N logged loads to learn which ones
    /// really miss this machine's LLC, and correct the cache model's
    /// misses by it (`off`: no timing, the default); over
    /// PMLAB_TIMED_MISSES.
    #[arg(long, value_name = "N|off")]
    pub timed_misses: Option<String>,
    /// Read settings from a TOML file (the flags' names with `_`; flags win).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, required = true, value_name = "PROGRAM")]
    pub command: Vec<String>,
}

/// The run options given as flags: (option name, value), for the options
/// of [`SPECS`] that users set.
#[derive(Default, Debug, Clone)]
pub struct OptionFlags {
    /// The flags given, by option name.
    pub given: Vec<(&'static str, String)>,
}

impl OptionFlags {
    fn user_specs() -> impl Iterator<Item = &'static Spec> {
        SPECS.iter().filter(|s| s.user)
    }

    /// The clap argument of one option.
    fn arg(s: &'static Spec) -> Arg {
        let help = match (s.kind, s.default) {
            (Kind::Switch, _) | (_, None) => s.help.to_string(),
            (_, Some(d)) => format!("{} [default: {d}]", s.help),
        };
        let a = Arg::new(s.name).long(s.name).help(help);
        match s.kind {
            Kind::Switch => a.action(ArgAction::SetTrue),
            Kind::Duration => a.value_name("TIME"),
            Kind::Bandwidth => a.value_name("RATE"),
            Kind::PoolSize => a.value_name("SIZE"),
            Kind::Path => a.value_name("FILE"),
            _ => a.value_name("VALUE"),
        }
    }
}

impl clap::FromArgMatches for OptionFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for s in Self::user_specs() {
            if s.kind == Kind::Switch {
                if m.get_flag(s.name) {
                    given.push((s.name, "1".to_string()));
                }
            } else if let Some(v) = m.get_one::<String>(s.name) {
                given.push((s.name, v.clone()));
            }
        }
        Ok(OptionFlags { given })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for OptionFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Self::user_specs().fold(cmd, |c, s| c.arg(Self::arg(s)))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The `--config` file's settings, by option name (keys are the flags'
/// names with `_`; unknown keys are an error naming them).
fn load_file(path: &Path) -> anyhow::Result<HashMap<&'static str, String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| {
        let msg = e.message().replace('\n', " ");
        anyhow!("config file {}: {msg}", path.display())
    })?;
    let mut out = HashMap::new();
    for (key, value) in table {
        let Some(s) = OptionFlags::user_specs().find(|s| s.key() == key) else {
            let keys: Vec<String> = OptionFlags::user_specs().map(|s| s.key()).collect();
            bail!(
                "config file {}: unknown field `{key}`, expected one of {}",
                path.display(),
                keys.join(", ")
            );
        };
        let v = match value {
            toml::Value::String(v) => v,
            toml::Value::Integer(v) => v.to_string(),
            toml::Value::Float(v) => v.to_string(),
            toml::Value::Boolean(v) if s.kind == Kind::Switch => {
                if v {
                    "1".into()
                } else {
                    "0".into()
                }
            }
            other => bail!(
                "config file {}: `{key}` = {other}: expected a {}",
                path.display(),
                if s.kind == Kind::Switch {
                    "true or false"
                } else {
                    "string or number"
                }
            ),
        };
        out.insert(s.name, v);
    }
    Ok(out)
}

/// Settings resolved and validated, as runtime variables.
#[derive(Debug)]
pub struct Resolved {
    /// `PMLAB_*` variables.
    pub env: Vec<(String, String)>,
    /// Counter source requested (`auto` not yet resolved).
    pub source: String,
    /// The last-level cache the instrumented source models.
    pub llc: launch::ModelLlc,
}

/// Merge flags over the file over the defaults, check, resolve what only
/// `pmlab run` can (the DRAM latency, paths, the NUMA node), and build
/// the runtime's environment.
pub fn resolve(a: &Args) -> anyhow::Result<Resolved> {
    let file = match &a.config {
        Some(p) => load_file(p)?,
        None => HashMap::new(),
    };
    let flags: HashMap<&str, &String> = a.options.given.iter().map(|(k, v)| (*k, v)).collect();
    let mut o = RunOptions::parse(
        |s| {
            flags
                .get(s.name)
                .map(|v| v.to_string())
                .or_else(|| file.get(s.name).cloned())
        },
        Naming::Flag,
    )?;
    // Flags that need no measurement are checked before the calibration,
    // which can take seconds on a machine that has none cached.
    if let Some(v) = &a.llc {
        launch::parse_llc(v, "--llc")?;
    } else if let Ok(v) = std::env::var("PMLAB_INSTR_LLC") {
        launch::parse_llc(&v, "PMLAB_INSTR_LLC")?;
    }
    let timed_misses = a
        .timed_misses
        .as_deref()
        .map(launch::timed_misses)
        .transpose()?;
    let device = o.device.as_deref().map(device_params).transpose()?;
    o.check(Naming::Flag)?;
    if let Some(p) = &o.pm_file {
        let p = PathBuf::from(p);
        let abs = std::path::absolute(&p).unwrap_or(p.clone());
        if let Some(dir) = abs.parent().filter(|d| !d.is_dir()) {
            bail!(
                "--pm-file {}: directory {} does not exist",
                p.display(),
                dir.display()
            );
        }
        o.pm_file = Some(abs.to_string_lossy().into_owned());
    }
    if let Some(n) = o.pm_node {
        if !Path::new(&format!("/sys/devices/system/node/node{n}")).is_dir() {
            bail!(
                "--pm-node {n}: this machine has no NUMA node {n} (see /sys/devices/system/node)"
            );
        }
    }
    if let Some(p) = o.source.strip_prefix("synthetic:") {
        // The runtime reads it relative to the program's working
        // directory, which is ours; make it absolute for exec'd children.
        let abs = std::fs::canonicalize(p)
            .with_context(|| format!("--source synthetic:{p}: cannot read the script"))?;
        o.source = format!("synthetic:{}", abs.display());
        // The runtime parses the script: a bad one is refused here, before
        // any measurement, as every other bad flag is.
        let mut env: Vec<(String, String)> = vec![("PMLAB_ACTIVE".into(), "1".into())];
        env.extend(o.to_env());
        launch::check(&launch::find_runtime()?, &env)?;
    }
    let note = crate::cmd::calibrate::note(false);
    let cached = if o.dram_latency_ns.is_none() {
        Some(pmlab_emu::calibrate::cached_or_measure(&note)?)
    } else {
        pmlab_emu::calibrate::load_cache().ok().flatten()
    };
    if o.dram_latency_ns.is_none() {
        o.dram_latency_ns = Some(
            cached
                .as_ref()
                .map_or(pmlab_model::options::FALLBACK_DRAM_NS, |c| {
                    c.dram_latency_ns
                }),
        );
    }
    if o.tsc_ghz.is_none() {
        o.tsc_ghz = cached.as_ref().map(|c| c.tsc_ghz);
    }
    if let (Some(dev), Some(p)) = (o.device.clone(), device) {
        let dram = o.dram_ns();
        if p.slowest_ns() <= dram {
            bail!(
                "--device {dev}: its reads take at most {:.0} ns, not above this machine's DRAM latency {dram:.0} ns: the emulator can only make memory slower (pick a slower device)",
                p.slowest_ns()
            );
        }
        // The runtime's reference latency: delays are charged in units of
        // (slowest level - DRAM) per serial access.
        o.pm_latency_ns = p.slowest_ns();
        o.device_params = Some(p);
        if o.source == "auto" {
            o.source = "instrumented".into();
        }
    }
    o.check(Naming::Flag)?;
    let mut env: Vec<(String, String)> = vec![("PMLAB_ACTIVE".into(), "1".into())];
    env.extend(o.to_env().into_iter().filter(|(k, _)| k != "PMLAB_SOURCE"));
    // The instrumented source models --llc, else PMLAB_INSTR_LLC, else the
    // effective last-level cache the calibration measured, else sysfs's.
    let llc = launch::model_llc(
        a.llc.as_deref(),
        std::env::var("PMLAB_INSTR_LLC").ok().as_deref(),
        cached.as_ref().map_or(0, |c| c.effective_llc_bytes),
        launch::sysfs_llc(),
    )?;
    if let Some(v) = &llc.setting {
        env.push(("PMLAB_INSTR_LLC".into(), v.clone()));
    }
    if let Some(v) = timed_misses {
        env.push(("PMLAB_TIMED_MISSES".into(), v));
    }
    Ok(Resolved {
        env,
        source: o.source,
        llc,
    })
}

/// The functional device model's parameters for `--device ARG`: a file
/// (a simulator config or a `pmlab probe infer` profile) when one exists
/// at that path, else a preset.
pub fn device_params(arg: &str) -> anyhow::Result<pmlab_model::device::DeviceParams> {
    let path = Path::new(arg);
    if path.is_file() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--device {arg}: cannot read the file"))?;
        return pmlab_sim::functional::params_from_toml(&text, arg)
            .map_err(|e| anyhow!("--device {arg}: {e}"));
    }
    if pmlab_sim::presets::find(arg).is_err() {
        let names: Vec<&str> = pmlab_sim::presets::ALL.iter().map(|p| p.name).collect();
        bail!(
            "--device {arg}: no such preset or file: give a preset ({}; see pmlab sim show NAME) or a simulator config / pmlab probe infer profile (TOML)",
            names.join(", ")
        );
    }
    pmlab_sim::functional::params_of_preset(arg).map_err(|e| anyhow!("--device {arg}: {e}"))
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
    if let Some(p) = &args.json {
        crate::cmd::check_output(p, "--json")?;
    }
    let program = launch::resolve_program(&args.command[0])?;
    launch::check_environment()?;
    let resolved = resolve(&args)?;
    let runtime = launch::find_runtime()?;
    let (source, _ok) = choose_source(&runtime, &resolved.env, &resolved.source, &program)?;
    let mut env = resolved.env;
    // The modelled LLC, where the instrumented source models one.
    let instrumented = source == "instrumented";
    let llc_json = instrumented.then(|| resolved.llc.to_json());
    let llc_note = instrumented.then(|| resolved.llc.describe());
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
            if let Some(path) = &args.json {
                write_json(
                    path,
                    &serde_json::json!({ "exit_code": code, "stats": v, "children": children, "pre_exec": pre_exec, "llc_model": llc_json }),
                )?;
            }
            if !args.quiet {
                eprintln!("{}", summary(&v, llc_note.as_deref()));
            }
        }
        None => {
            eprintln!(
                "pmlab: warning: the runtime wrote no statistics: the program may be statically linked or setuid (LD_PRELOAD ignored), or it was killed or crashed"
            );
            if let Some(path) = &args.json {
                write_json(
                    path,
                    &serde_json::json!({ "exit_code": code, "stats": null, "children": children, "pre_exec": pre_exec, "llc_model": llc_json }),
                )?;
            }
        }
    }
    Ok(code)
}

/// Write one JSON document (and a newline) to `path`: a file (whole or
/// not at all), or a descriptor such as `/dev/fd/3` (never the program's
/// stdout).
pub fn write_json(path: &Path, v: &serde_json::Value) -> anyhow::Result<()> {
    crate::cmd::write_atomic(path, format!("{v}\n").as_bytes(), "--json")
}

/// The statistics' summary lines; `llc`: the modelled LLC, said after
/// the source where one is modelled.
fn summary(v: &serde_json::Value, llc: Option<&str>) -> String {
    let t = &v["total"];
    let ms = |k: &str| t[k].as_f64().unwrap_or(0.0) / 1e6;
    format!(
        "pmlab: {} epochs ({} timer, {} sync, {} exit) over {} thread(s); delay {} {:.3} ms of {:.3} ms requested; overhead {:.3} ms ({}); write stalls {:.3} ms; source {}{}; bandwidth throttle {}\npmlab: advice: {}",
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
        llc.map_or(String::new(), |l| format!("; {l}")),
        v["bandwidth_throttle"].as_str().unwrap_or("?"),
        v["advice"].as_str().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[(&'static str, &str)]) -> Args {
        let mut given = vec![("dram-latency", "100ns".to_string())];
        given.extend(flags.iter().map(|(k, v)| (*k, v.to_string())));
        Args {
            options: OptionFlags { given },
            command: vec!["true".into()],
            ..Default::default()
        }
    }

    #[test]
    fn the_llc_flag_sets_the_model_and_a_bad_one_is_one_line() {
        let mut a = args(&[]);
        a.llc = Some("16MiB:16".into());
        let r = resolve(&a).unwrap();
        assert_eq!(
            (r.llc.origin, r.llc.bytes, r.llc.ways),
            ("flag", 16 << 20, 16)
        );
        assert!(r
            .env
            .contains(&("PMLAB_INSTR_LLC".to_string(), "16MiB:16".to_string())));
        a.llc = Some("16MiB".into());
        let e = resolve(&a).unwrap_err().to_string();
        assert!(e.starts_with("--llc '16MiB': expected SIZE:WAYS"), "{e}");
    }

    #[test]
    fn the_timed_misses_flag_is_passed_on_and_checked() {
        let mut a = args(&[]);
        a.timed_misses = Some("64".into());
        let r = resolve(&a).unwrap();
        assert!(r
            .env
            .contains(&("PMLAB_TIMED_MISSES".to_string(), "64".to_string())));
        a.timed_misses = Some("often".into());
        let e = resolve(&a).unwrap_err().to_string();
        assert!(e.starts_with("--timed-misses 'often'"), "{e}");
    }

    #[test]
    fn validation_messages() {
        let e = resolve(&args(&[("pm-latency", "50ns")])).unwrap_err();
        assert!(e.to_string().contains("below the DRAM latency"), "{e}");
        let e = resolve(&args(&[("epoch-min", "20ms")])).unwrap_err();
        assert!(e.to_string().contains("above --epoch-max"), "{e}");
        let e = resolve(&args(&[("lock-epoch-min", "11ms")])).unwrap_err();
        assert!(e.to_string().starts_with("--lock-epoch-min 11ms"), "{e}");
        let r = resolve(&args(&[("lock-epoch-min", "10ms")])).unwrap();
        assert!(r
            .env
            .contains(&("PMLAB_LOCK_EPOCH_MIN".into(), "10000000ns".into())));
        let e = resolve(&args(&[("epoch-max", "10 fortnights")])).unwrap_err();
        assert!(e.to_string().starts_with("--epoch-max:"), "{e}");
        let e = resolve(&args(&[("source", "magic")])).unwrap_err();
        assert!(e.to_string().contains("expected auto, hw"), "{e}");
        let r = resolve(&args(&[("pm-latency", "0.5us")])).unwrap();
        assert!(r.env.contains(&("PMLAB_PM_LATENCY".into(), "500ns".into())));
    }

    #[test]
    fn flags_are_the_shared_options() {
        use clap::{CommandFactory, Parser};
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            run: Args,
        }
        // Every user option is a flag, and parses into `given`.
        let cmd = T::command();
        for s in SPECS.iter().filter(|s| s.user) {
            assert!(
                cmd.get_arguments().any(|a| a.get_long() == Some(s.name)),
                "{}",
                s.name
            );
        }
        let t = T::try_parse_from([
            "t",
            "--pm-latency",
            "400ns",
            "--no-inject",
            "--",
            "prog",
            "-x",
        ])
        .unwrap();
        assert_eq!(
            t.run.options.given,
            vec![
                ("pm-latency", "400ns".to_string()),
                ("no-inject", "1".to_string())
            ]
        );
        assert_eq!(t.run.command, ["prog", "-x"]);
        // A misspelled option before `--` is an unknown option, not the program.
        let e = T::try_parse_from(["t", "--pm-latncy", "400ns", "--", "prog"])
            .err()
            .unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
        // Without `--`, the program's own options after its name stay its own.
        let t = T::try_parse_from(["t", "prog", "-x", "--y"]).unwrap();
        assert_eq!(t.run.command, ["prog", "-x", "--y"]);
    }
}
