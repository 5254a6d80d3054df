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
    fn missing_program_is_one_line() {
        let e = resolve_program("./definitely-not-here").unwrap_err();
        assert_eq!(e.to_string(), "program './definitely-not-here' not found");
        assert!(resolve_program("sh").is_ok());
    }
}
