//! Starting a program under libpmlab: the one place that finds the
//! runtime, sets `LD_PRELOAD` and the `PMLAB_*` settings, checks that the
//! runtime accepts them before the program starts, and forwards the
//! program's exit status and the signals pmlab receives meanwhile.
//! `pmlab run` uses it; so can any command that runs a program.

use crate::error::{fail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};

/// Where libpmlab.so is: `$PMLAB_RUNTIME`, else next to the running pmlab
/// executable (cargo's target directory), else `../lib/` from it.
pub fn find_runtime() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PMLAB_RUNTIME") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        fail!(
            NotFound,
            "PMLAB_RUNTIME={} is not a file: point it at libpmlab.so",
            p.display()
        );
    }
    let exe = std::env::current_exe().context("cannot locate the pmlab executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for cand in [dir.join("libpmlab.so"), dir.join("../lib/libpmlab.so")] {
        if cand.is_file() {
            return Ok(cand.canonicalize().unwrap_or(cand));
        }
    }
    fail!(
            NotFound,
        "libpmlab.so not found next to {}: run `cargo build --release --workspace` (or set PMLAB_RUNTIME)",
        exe.display()
    )
}

/// `LD_PRELOAD` with the runtime first and any existing value after it.
pub fn preload_value(runtime: &Path, existing: Option<OsString>) -> OsString {
    let mut v = runtime.as_os_str().to_owned();
    if let Some(old) = existing.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// Check the runtime's settings that come from the caller's environment
/// rather than from flags (`PMLAB_FLUSH`), so that a typo is a one-line
/// error here instead of being ignored inside the program.
pub fn check_environment() -> Result<()> {
    if let Some(v) = std::env::var_os("PMLAB_FLUSH") {
        let s = v.to_string_lossy().trim().to_ascii_lowercase();
        if !["clwb", "clflushopt", "clflush"].contains(&s.as_str()) {
            fail!(
                Invalid,
                "PMLAB_FLUSH={}: expected clwb, clflushopt or clflush (or unset it)",
                v.to_string_lossy()
            );
        }
    }
    Ok(())
}

/// Resolve a program name like the shell: a path if it has a `/`, else
/// searched in `$PATH`. One-line error when it does not exist, or when it
/// carries ThreadSanitizer's runtime, which libpmlab cannot run beside.
pub fn resolve_program(name: &str) -> Result<PathBuf> {
    let p = find_program(name)?;
    if crate::elf::uses_tsan_runtime(&p).unwrap_or(false) {
        fail!(
            Invalid,
            "{} carries ThreadSanitizer's runtime (built with -fsanitize=thread), which libpmlab's callbacks and interposers would fight: rebuild it without -fsanitize=thread (pmlab gcc uses gcc's ThreadSanitizer hooks without that runtime)",
            p.display()
        );
    }
    Ok(p)
}

fn find_program(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        if p.is_file() {
            return Ok(p);
        }
        fail!(NotFound, "program '{name}' not found");
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    fail!(
        NotFound,
        "program '{name}' not found in $PATH (give a path such as ./{name})"
    )
}

/// A command for `argv` under the runtime with `env` set.
pub fn command(runtime: &Path, argv: &[String], env: &[(String, String)]) -> Command {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..]);
    c.env(
        "LD_PRELOAD",
        preload_value(runtime, std::env::var_os("LD_PRELOAD")),
    );
    c.env("PMLAB_LAUNCHER_PID", std::process::id().to_string());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Ask the runtime whether it accepts `env` (configuration, counter
/// source) without starting the program: the runtime is loaded into a
/// copy of pmlab itself with `PMLAB_CHECK=1`, checks, and exits before
/// `main`. Returns the runtime's "ok ..." line, or its one-line reason.
pub fn check(runtime: &Path, env: &[(String, String)]) -> Result<String> {
    let exe = std::env::current_exe().context("cannot locate the pmlab executable")?;
    let mut c = command(
        runtime,
        &[exe.to_string_lossy().into_owned(), "--version".into()],
        env,
    );
    c.env("PMLAB_CHECK", "1")
        .env("PMLAB_ACTIVE", "1")
        .stdin(Stdio::null());
    let out = c.output().context("cannot start the runtime check")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        if let Some(line) = stdout.lines().find(|l| l.starts_with("ok ")) {
            return Ok(line.to_string());
        }
        fail!(
            Failed,
            "libpmlab at {} did not load (is it a libpmlab.so built for this machine?)",
            runtime.display()
        );
    }
    let reason = stderr
        .lines()
        .find_map(|l| l.strip_prefix("pmlab: runtime: error: "))
        .map(str::to_string)
        .unwrap_or_else(|| stderr.trim().to_string());
    fail!(Failed, "{reason}")
}

/// `PMLAB_TIMED_MISSES` for `--timed-misses ARG` (`N`, 1 in N logged
/// loads timed, or `off`), checked here so that a bad value is one line
/// before the program starts.
pub fn timed_misses(arg: &str) -> Result<String> {
    let v = arg.trim();
    if v == "off" || v.parse::<u32>().is_ok_and(|n| (1..=1 << 24).contains(&n)) {
        return Ok(v.to_string());
    }
    fail!(
        Invalid,
        "--timed-misses '{arg}': expected off or N in 1..=16777216 (time 1 in N logged loads)"
    )
}

/// The last-level cache the instrumented source models in a run
/// ([`model_llc`]), and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLlc {
    /// `PMLAB_INSTR_LLC` for the runtime (`SIZE:WAYS`); None: the runtime
    /// reads sysfs itself.
    pub setting: Option<String>,
    /// The model's size in bytes (0: unknown).
    pub bytes: u64,
    /// Its ways (0: unknown).
    pub ways: u32,
    /// Where it comes from: `flag`, `environment`, `effective` or `sysfs`.
    pub origin: &'static str,
    /// The effective LLC measured by `pmlab calibrate` (bytes; 0: not
    /// measured).
    pub effective_bytes: u64,
}

impl ModelLlc {
    /// One phrase for the run's summary line: the model and its origin.
    pub fn describe(&self) -> String {
        let mib = |b: u64| b as f64 / 1048576.0;
        let size = if self.bytes > 0 {
            format!("{:.1} MiB, {} ways", mib(self.bytes), self.ways)
        } else {
            "unknown size".to_string()
        };
        let from = match self.origin {
            "flag" => "--llc".to_string(),
            "environment" => "PMLAB_INSTR_LLC".to_string(),
            "effective" => format!(
                "random replacement sized from the effective LLC of {:.1} MiB that pmlab calibrate measured",
                mib(self.effective_bytes)
            ),
            _ => "the size sysfs reports: no effective LLC calibrated".to_string(),
        };
        format!("LLC model {size}: {from}")
    }

    /// The model as JSON (`bytes`, `ways`, `origin`, `effective_bytes`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "bytes": self.bytes,
            "ways": self.ways,
            "origin": self.origin,
            "effective_bytes": self.effective_bytes,
            "setting": self.setting,
        })
    }
}

/// Parse a `SIZE:WAYS` cache (`32MiB:16`, `8388608:8`), checking that it
/// makes a cache (a power-of-two number of sets); `what` names the
/// setting in the error.
pub fn parse_llc(v: &str, what: &str) -> Result<(u64, u32)> {
    let parsed = v.split_once(':').and_then(|(size, ways)| {
        let size = pmlab_model::units::Bytes::parse(size.trim()).ok()?.get();
        let ways = ways.trim().parse::<u32>().ok().filter(|&w| w > 0)?;
        Some((size, ways))
    });
    let Some((size, ways)) = parsed else {
        fail!(
            Invalid,
            "{what} '{v}': expected SIZE:WAYS, e.g. 32MiB:16 (the cache's bytes and ways)"
        );
    };
    if let Err(e) = pmlab_model::cache::CacheConfig::new(size, ways).sets() {
        fail!(
            Invalid,
            "{what} '{v}': {e} (give a size of 64 B x ways x a power of two sets, e.g. 32MiB:16)"
        );
    }
    Ok((size, ways))
}

/// The highest-level data or unified cache of cpu0 in sysfs: (bytes,
/// ways), None when sysfs does not say.
pub fn sysfs_llc() -> Option<(u64, u32)> {
    let mut best: Option<(u32, u64, u32)> = None;
    for i in 0..16 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let level = level.trim().parse::<u32>().unwrap_or(0);
        let size = pmlab_model::units::Bytes::parse(size.trim()).map_or(0, |b| b.get());
        let ways = read("ways_of_associativity")
            .and_then(|w| w.trim().parse::<u32>().ok())
            .unwrap_or(0);
        if best.is_none_or(|b| level > b.0) {
            best = Some((level, size, ways));
        }
    }
    best.map(|(_, size, ways)| (size, ways))
}

/// The LLC a run's instrumented source models, first of: `--llc`
/// (`flag`), `PMLAB_INSTR_LLC` (`env`), the effective LLC `pmlab
/// calibrate` measured (`effective` bytes, 0: none; modelled as
/// [`crate::calibrate::instr_llc_for`] makes it), the size sysfs reports
/// (`sysfs`). Why the effective LLC: a user's program meets the cache
/// the machine leaves it, not the one its sysfs entry names, and the
/// emulator adds `L - DRAM` only to the accesses its model says miss
/// (see docs/emulator.md, "Which last-level cache a run models").
pub fn model_llc(
    flag: Option<&str>,
    env: Option<&str>,
    effective: u64,
    sysfs: Option<(u64, u32)>,
) -> Result<ModelLlc> {
    let given = |v: &str, what: &str, origin: &'static str| -> Result<ModelLlc> {
        let (bytes, ways) = parse_llc(v, what)?;
        Ok(ModelLlc {
            setting: Some(v.trim().to_string()),
            bytes,
            ways,
            origin,
            effective_bytes: effective,
        })
    };
    if let Some(v) = flag {
        return given(v, "--llc", "flag");
    }
    if let Some(v) = env {
        return given(v, "PMLAB_INSTR_LLC", "environment");
    }
    if let Some(v) = crate::calibrate::instr_llc_for(effective) {
        let (bytes, ways) = parse_llc(&v, "the calibrated LLC")?;
        return Ok(ModelLlc {
            setting: Some(v),
            bytes,
            ways,
            origin: "effective",
            effective_bytes: effective,
        });
    }
    let (bytes, ways) = sysfs.unwrap_or((0, 0));
    Ok(ModelLlc {
        setting: None,
        bytes,
        ways,
        origin: "sysfs",
        effective_bytes: 0,
    })
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// How the program ended, as an exit code for pmlab: its own code, or
/// 128 + the signal that killed it (as shells report it).
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => (128 + s) as u8,
        _ => 1,
    }
}

/// Spawn `cmd`, forward SIGINT/SIGTERM/SIGHUP/SIGQUIT to it while it runs,
/// wait for it. Returns its status.
pub fn spawn_and_wait(mut cmd: Command) -> Result<ExitStatus> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start '{prog}'"))?;
    CHILD.store(child.id() as i32, Ordering::Relaxed);
    let sigs = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
    let mut old = Vec::new();
    for s in sigs {
        // SAFETY: installing a handler that only calls kill(2).
        old.push(unsafe { libc::signal(s, forward as *const () as libc::sighandler_t) });
    }
    let status = child.wait();
    for (s, h) in sigs.iter().zip(old) {
        // SAFETY: restoring the previous disposition.
        unsafe { libc::signal(*s, h) };
    }
    CHILD.store(0, Ordering::Relaxed);
    status.with_context(|| format!("cannot wait for '{prog}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_appends_existing() {
        let v = preload_value(Path::new("/x/libpmlab.so"), Some("/y/liba.so".into()));
        assert_eq!(v, OsString::from("/x/libpmlab.so:/y/liba.so"));
        let v = preload_value(Path::new("/x/libpmlab.so"), Some("".into()));
        assert_eq!(v, OsString::from("/x/libpmlab.so"));
    }

    #[test]
    fn the_modelled_llc_is_the_flag_the_environment_the_effective_or_sysfs() {
        let mib = 1u64 << 20;
        let sysfs = Some((32 * mib, 16));
        // The effective LLC calibrated (10.9 MiB): its random-replacement
        // model, the geometry calibrate makes of knee / 1.29.
        let m = model_llc(None, None, 11_419_958, sysfs).unwrap();
        assert_eq!(m.origin, "effective");
        assert_eq!(m.setting.as_deref(), Some("8388608:8"));
        assert_eq!((m.bytes, m.ways), (8 * mib, 8));
        assert!(
            m.describe().contains("effective LLC of 10.9 MiB"),
            "{}",
            m.describe()
        );
        // The environment over the calibration, the flag over both.
        let m = model_llc(None, Some("16MiB:16"), 11_419_958, sysfs).unwrap();
        assert_eq!((m.origin, m.bytes, m.ways), ("environment", 16 * mib, 16));
        let m = model_llc(Some("4MiB:8"), Some("16MiB:16"), 11_419_958, sysfs).unwrap();
        assert_eq!((m.origin, m.bytes, m.ways), ("flag", 4 * mib, 8));
        assert_eq!(m.setting.as_deref(), Some("4MiB:8"));
        assert_eq!(m.to_json()["origin"], "flag");
        // Nothing calibrated: sysfs, the runtime reads it itself.
        let m = model_llc(None, None, 0, sysfs).unwrap();
        assert_eq!(
            (m.origin, m.setting.clone(), m.bytes),
            ("sysfs", None, 32 * mib)
        );
        assert!(m.describe().contains("sysfs"), "{}", m.describe());
    }

    #[test]
    fn a_bad_llc_is_one_line_naming_the_setting() {
        let e = model_llc(Some("lots"), None, 0, None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--llc 'lots': expected SIZE:WAYS"),
            "{e}"
        );
        let e = model_llc(None, Some("32MiB:0"), 0, None).unwrap_err();
        assert!(e.to_string().contains("PMLAB_INSTR_LLC '32MiB:0'"), "{e}");
        // 1000 bytes of 3 ways: no power-of-two number of sets.
        let e = model_llc(Some("1000:3"), None, 0, None).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }

    #[test]
    fn missing_program_is_one_line() {
        let e = resolve_program("./definitely-not-here").unwrap_err();
        assert_eq!(e.to_string(), "program './definitely-not-here' not found");
        assert!(resolve_program("sh").is_ok());
    }
}
