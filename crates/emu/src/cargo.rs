//! `pmlab cargo ARGS...`: cargo with the hooks of `pmlab cc`, so that a
//! Rust program's every load and store calls into libpmlab (the
//! `instrumented` counter source, and `pmlab trace`'s record of PM
//! stores).
//!
//! # What is added
//!
//! * **The hooks**: [`HOOK_FLAGS`], rustc's spelling of what `pmlab cc`
//!   asks of clang ([`crate::cc::COVERAGE_FLAG`]): LLVM's sanitizer-coverage
//!   pass at function level with inline 8-bit counters (without a counter
//!   mode the pass would fall back to `trace-pc-guard`, whose callbacks
//!   libpmlab does not define), plus the load and store callbacks.
//! * **The runtime**: as `pmlab cc` does, the program links libpmlab.so
//!   (found like `pmlab cc` finds it: [`crate::cc::runtime_dir`]) with an
//!   rpath and `--no-as-needed`, so the hook symbols resolve and the
//!   program runs normally (no delay) outside `pmlab run`, and with the
//!   runtime preloaded under it. Doc tests link the same way
//!   (`RUSTDOCFLAGS`).
//! * **Where**: the flags are appended to the caller's own:
//!   `CARGO_ENCODED_RUSTFLAGS` when set, else `RUSTFLAGS` (so, as with any
//!   `RUSTFLAGS`, `build.rustflags` of `.cargo/config.toml` no longer
//!   applies). Cargo applies `RUSTFLAGS` to build scripts and proc macros
//!   too unless a target is named, and a proc macro linked with libpmlab
//!   would load it into rustc: so the host is named as the target
//!   (`CARGO_BUILD_TARGET`, unless the caller gives `--target` or sets
//!   it), and only the program's own crates are instrumented.
//! * **Target directory**: instrumented and plain builds must not
//!   overwrite each other, so the build goes to `pmlab/` inside the
//!   project's target directory (as `cargo metadata` reports it) unless
//!   the caller gives `--target-dir` or sets `CARGO_TARGET_DIR`. A program
//!   built with `pmlab cargo build --release` is therefore
//!   `target/pmlab/<host triple>/release/<name>`; after a successful
//!   `build` that directory is named on stderr.
//!
//! Cargo's own output, diagnostics and exit status are the command's.
//! `PMLAB_CARGO` picks the cargo to run (default `cargo` on PATH),
//! `RUSTC` the rustc asked for the host triple, and `PMLAB_CC_VERBOSE=1`
//! prints the variables set and the command.

use crate::error::{fail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The rustc flags that add the load/store hooks (see the module's
/// documentation).
pub const HOOK_FLAGS: [&str; 5] = [
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=1",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-trace-loads",
    "-Cllvm-args=-sanitizer-coverage-trace-stores",
];

/// The separator of `CARGO_ENCODED_RUSTFLAGS`.
const SEP: char = '\u{1f}';

/// The rustc flags that link libpmlab.so from `lib_dir`, with an rpath:
/// named with `-l`, which rustc places before the C library, so that the
/// runtime's `dlsym(RTLD_NEXT)` finds the C library's functions after it
/// (every instrumented crate calls the hooks' constructor callback, so
/// `--as-needed` keeps it).
pub fn link_flags(lib_dir: &Path) -> Vec<String> {
    let d = lib_dir.display();
    vec![
        format!("-Lnative={d}"),
        "-ldylib=pmlab".into(),
        format!("-Clink-arg=-Wl,-rpath,{d}"),
    ]
}

/// The rustdoc flags that link doc tests with libpmlab.so (rustdoc takes
/// no `-l`: the library goes last, where the runtime asks the C library
/// directly).
pub fn doc_link_flags(lib_dir: &Path) -> Vec<String> {
    let d = lib_dir.display();
    vec![
        format!("-Lnative={d}"),
        format!("-Clink-arg=-Wl,-rpath,{d}"),
        "-Clink-arg=-Wl,--push-state,--no-as-needed".into(),
        "-Clink-arg=-lpmlab".into(),
        "-Clink-arg=-Wl,--pop-state".into(),
    ]
}

/// `ours` appended to the caller's flags, encoded for
/// `CARGO_ENCODED_*FLAGS`: `encoded` (that variable's value) when set and
/// not empty, else `plain` (the `RUSTFLAGS`-style value, split on
/// whitespace).
pub fn merged_flags(encoded: Option<&str>, plain: Option<&str>, ours: &[String]) -> String {
    let mut all: Vec<String> = match (encoded, plain) {
        (Some(e), _) if !e.is_empty() => e.split(SEP).map(String::from).collect(),
        (_, Some(p)) => p.split_whitespace().map(String::from).collect(),
        _ => Vec::new(),
    };
    all.extend(ours.iter().cloned());
    all.join(&SEP.to_string())
}

/// The value of option `name` (`--name VALUE` or `--name=VALUE`) among
/// cargo's arguments before a `--`; `Some("")` when it is given without
/// a value.
fn option<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let eq = format!("{name}=");
    let mut it = args.iter().take_while(|a| *a != "--");
    while let Some(a) = it.next() {
        if a == name {
            return Some(it.next().map_or("", |v| v.as_str()));
        }
        if let Some(v) = a.strip_prefix(&eq) {
            return Some(v);
        }
    }
    None
}

/// True when flag `name` (or its short form) is among cargo's arguments
/// before a `--`.
fn flag(args: &[String], names: &[&str]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| names.contains(&a.as_str()))
}

/// The host triple, from `rustc -vV` (`RUSTC`, else `rustc`).
pub fn host_triple() -> Result<String> {
    let rustc = std::env::var_os("RUSTC")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc).arg("-vV").output().with_context(|| {
        format!(
            "cannot run {} -vV to learn the host triple (install Rust, or set RUSTC)",
            Path::new(&rustc).display()
        )
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().find_map(|l| l.strip_prefix("host: ")) {
        Some(h) if out.status.success() => Ok(h.trim().to_string()),
        _ => fail!(
            Failed,
            "{} -vV names no host triple; check the Rust installation (or pass --target)",
            Path::new(&rustc).display()
        ),
    }
}

/// The project's target directory as `cargo metadata` reports it (for
/// the manifest `--manifest-path` names, else the current directory's);
/// None outside a project or when cargo cannot tell.
fn project_target_dir(cargo: &Path, toolchain: Option<&str>, args: &[String]) -> Option<PathBuf> {
    let mut cmd = Command::new(cargo);
    cmd.args(toolchain)
        .args(["metadata", "--no-deps", "--format-version", "1"]);
    if let Some(m) = option(args, "--manifest-path").filter(|m| !m.is_empty()) {
        cmd.args(["--manifest-path", m]);
    }
    let out = cmd.output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get("target_directory")?.as_str().map(PathBuf::from)
}

/// What `pmlab cargo` runs: the program, its arguments and the variables
/// it sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The cargo to run.
    pub cargo: PathBuf,
    /// Its arguments (the caller's, untouched).
    pub args: Vec<String>,
    /// Variables set for it.
    pub env: Vec<(String, String)>,
    /// Where a `build` puts the program (`<target dir>/<triple>/<profile>`)
    /// when pmlab chose the target directory and triple.
    pub out_dir: Option<PathBuf>,
}

/// What the caller's environment holds that the plan depends on.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `CARGO_ENCODED_RUSTFLAGS`.
    pub encoded_rustflags: Option<String>,
    /// `RUSTFLAGS`.
    pub rustflags: Option<String>,
    /// `CARGO_ENCODED_RUSTDOCFLAGS`.
    pub encoded_rustdocflags: Option<String>,
    /// `RUSTDOCFLAGS`.
    pub rustdocflags: Option<String>,
    /// `CARGO_BUILD_TARGET`.
    pub build_target: Option<String>,
    /// `CARGO_TARGET_DIR`.
    pub target_dir: Option<String>,
}

impl Environment {
    /// Read from this process's environment.
    pub fn from_process() -> Environment {
        let get = |k: &str| std::env::var(k).ok();
        Environment {
            encoded_rustflags: get("CARGO_ENCODED_RUSTFLAGS"),
            rustflags: get("RUSTFLAGS"),
            encoded_rustdocflags: get("CARGO_ENCODED_RUSTDOCFLAGS"),
            rustdocflags: get("RUSTDOCFLAGS"),
            build_target: get("CARGO_BUILD_TARGET").filter(|v| !v.is_empty()),
            target_dir: get("CARGO_TARGET_DIR").filter(|v| !v.is_empty()),
        }
    }
}

/// The plan for `args` (cargo's arguments, a `+toolchain` first if any):
/// `host` is the host triple (needed unless the caller names a target),
/// `project_target` the project's target directory if known.
pub fn plan(
    cargo: &Path,
    args: &[String],
    env: &Environment,
    lib_dir: &Path,
    host: Option<&str>,
    project_target: Option<&Path>,
) -> Plan {
    let mut vars = Vec::new();
    let mut rust: Vec<String> = HOOK_FLAGS.iter().map(|s| s.to_string()).collect();
    rust.extend(link_flags(lib_dir));
    vars.push((
        "CARGO_ENCODED_RUSTFLAGS".to_string(),
        merged_flags(
            env.encoded_rustflags.as_deref(),
            env.rustflags.as_deref(),
            &rust,
        ),
    ));
    vars.push((
        "CARGO_ENCODED_RUSTDOCFLAGS".to_string(),
        merged_flags(
            env.encoded_rustdocflags.as_deref(),
            env.rustdocflags.as_deref(),
            &doc_link_flags(lib_dir),
        ),
    ));
    let named_target = option(args, "--target").is_some() || env.build_target.is_some();
    let triple = match (named_target, host) {
        (false, Some(h)) => {
            vars.push(("CARGO_BUILD_TARGET".to_string(), h.to_string()));
            Some(h.to_string())
        }
        _ => None,
    };
    let named_dir = option(args, "--target-dir").is_some() || env.target_dir.is_some();
    let dir = match (named_dir, project_target) {
        (false, Some(t)) => {
            let d = t.join("pmlab");
            vars.push(("CARGO_TARGET_DIR".to_string(), d.display().to_string()));
            Some(d)
        }
        _ => None,
    };
    let profile = match option(args, "--profile") {
        Some("dev") | Some("test") => "debug".to_string(),
        Some(p) if !p.is_empty() => p.to_string(),
        _ if flag(args, &["--release", "-r"]) => "release".to_string(),
        _ => "debug".to_string(),
    };
    let out_dir = match (dir, triple) {
        (Some(d), Some(t)) => Some(d.join(t).join(profile)),
        _ => None,
    };
    Plan {
        cargo: cargo.to_path_buf(),
        args: args.to_vec(),
        env: vars,
        out_dir,
    }
}

/// The cargo to run: `PMLAB_CARGO`, else `cargo` on PATH.
fn find_cargo() -> Result<PathBuf> {
    let asked = std::env::var_os("PMLAB_CARGO").filter(|v| !v.is_empty());
    let p = asked
        .clone()
        .map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    if let Some(found) = crate::cc::which(&p) {
        return Ok(found);
    }
    if asked.is_some() {
        fail!(
            Invalid,
            "PMLAB_CARGO={} is not an executable cargo; point it at cargo or unset it",
            p.display()
        );
    }
    fail!(
        NotFound,
        "cargo not found on PATH: install Rust (https://rustup.rs), or set PMLAB_CARGO"
    )
}

/// Run `pmlab cargo` with cargo's arguments `args` (see the module's
/// documentation); cargo's exit status is returned.
pub fn run(args: &[String]) -> Result<u8> {
    let cargo = find_cargo()?;
    let lib = crate::cc::runtime_dir()?;
    let env = Environment::from_process();
    let toolchain = args
        .first()
        .filter(|a| a.starts_with('+'))
        .map(|s| s.as_str());
    let rest = &args[toolchain.is_some() as usize..];
    let host = if option(rest, "--target").is_none() && env.build_target.is_none() {
        Some(host_triple()?)
    } else {
        None
    };
    let target = if option(rest, "--target-dir").is_none() && env.target_dir.is_none() {
        project_target_dir(&cargo, toolchain, rest)
    } else {
        None
    };
    let p = plan(&cargo, args, &env, &lib, host.as_deref(), target.as_deref());
    if std::env::var_os("PMLAB_CC_VERBOSE").is_some() {
        for (k, v) in &p.env {
            eprintln!("pmlab cargo: {k}={}", v.replace(SEP, " "));
        }
        eprintln!("pmlab cargo: {} {}", p.cargo.display(), p.args.join(" "));
    }
    let status = Command::new(&p.cargo)
        .args(&p.args)
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .status()
        .with_context(|| format!("cannot run {}", p.cargo.display()))?;
    let code = match status.code() {
        Some(c) => c.clamp(0, 255) as u8,
        None => fail!(Failed, "{} was killed by a signal", p.cargo.display()),
    };
    let building = rest
        .iter()
        .find(|a| !a.starts_with('-'))
        .map(|s| s.as_str());
    if let (0, Some("build" | "b"), Some(d)) = (code, building, &p.out_dir) {
        eprintln!(
            "pmlab cargo: instrumented build in {} (run it with pmlab run --source instrumented -- {}/NAME)",
            d.display(),
            d.display()
        );
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_are_appended_to_the_callers() {
        let ours = v("-Ca -Cb");
        assert_eq!(merged_flags(None, None, &ours), "-Ca\u{1f}-Cb");
        assert_eq!(
            merged_flags(None, Some("  -Copt-level=1   -g "), &ours),
            "-Copt-level=1\u{1f}-g\u{1f}-Ca\u{1f}-Cb"
        );
        // The encoded form wins (as in cargo) and keeps spaces inside a flag.
        assert_eq!(
            merged_flags(Some("-L\u{1f}/a b"), Some("-g"), &ours),
            "-L\u{1f}/a b\u{1f}-Ca\u{1f}-Cb"
        );
        // An empty encoded value does not hide RUSTFLAGS.
        assert_eq!(
            merged_flags(Some(""), Some("-g"), &ours),
            "-g\u{1f}-Ca\u{1f}-Cb"
        );
    }

    fn var<'a>(p: &'a Plan, k: &str) -> Option<&'a str> {
        p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_plan_instruments_the_target_links_the_runtime_and_builds_apart() {
        let lib = Path::new("/opt/pmlab lib");
        let p = plan(
            Path::new("cargo"),
            &v("build --release"),
            &Environment {
                rustflags: Some("-g".into()),
                ..Environment::default()
            },
            lib,
            Some("x86_64-unknown-linux-gnu"),
            Some(Path::new("/w/target")),
        );
        assert_eq!(p.args, v("build --release"));
        let flags: Vec<&str> = var(&p, "CARGO_ENCODED_RUSTFLAGS")
            .unwrap()
            .split('\u{1f}')
            .collect();
        assert_eq!(flags[0], "-g");
        for f in HOOK_FLAGS {
            assert!(flags.contains(&f), "{f} missing from {flags:?}");
        }
        assert!(flags.contains(&"-Lnative=/opt/pmlab lib"));
        assert!(flags.contains(&"-Clink-arg=-Wl,-rpath,/opt/pmlab lib"));
        assert!(flags.contains(&"-ldylib=pmlab"));
        let doc = var(&p, "CARGO_ENCODED_RUSTDOCFLAGS").unwrap();
        assert!(doc.contains("-Clink-arg=-lpmlab") && !doc.contains("sancov"));
        assert_eq!(
            var(&p, "CARGO_BUILD_TARGET"),
            Some("x86_64-unknown-linux-gnu")
        );
        assert_eq!(var(&p, "CARGO_TARGET_DIR"), Some("/w/target/pmlab"));
        assert_eq!(
            p.out_dir.as_deref(),
            Some(Path::new(
                "/w/target/pmlab/x86_64-unknown-linux-gnu/release"
            ))
        );
    }

    #[test]
    fn the_callers_target_and_directory_are_kept() {
        let lib = Path::new("/l");
        let host = Some("x86_64-unknown-linux-gnu");
        let t = Some(Path::new("/w/target"));
        let e = Environment::default();
        for args in [
            "build --target aarch64-unknown-linux-gnu",
            "build --target=aarch64-unknown-linux-gnu",
        ] {
            let p = plan(Path::new("cargo"), &v(args), &e, lib, host, t);
            assert_eq!(var(&p, "CARGO_BUILD_TARGET"), None, "{args}");
            assert_eq!(p.out_dir, None);
        }
        let p = plan(
            Path::new("cargo"),
            &v("build --target-dir /x"),
            &e,
            lib,
            host,
            t,
        );
        assert_eq!(var(&p, "CARGO_TARGET_DIR"), None);
        let with_env = Environment {
            target_dir: Some("/y".into()),
            build_target: Some("x86_64-unknown-linux-musl".into()),
            ..Environment::default()
        };
        let p = plan(Path::new("cargo"), &v("build"), &with_env, lib, host, t);
        assert_eq!(var(&p, "CARGO_TARGET_DIR"), None);
        assert_eq!(var(&p, "CARGO_BUILD_TARGET"), None);
        // Arguments after `--` are the program's, not cargo's.
        let p = plan(
            Path::new("cargo"),
            &v("run -- --target-dir z"),
            &e,
            lib,
            host,
            t,
        );
        assert_eq!(var(&p, "CARGO_TARGET_DIR"), Some("/w/target/pmlab"));
        // Profiles name their directory; dev's is debug.
        for (args, dir) in [
            ("build", "debug"),
            ("build -r", "release"),
            ("build --profile dev", "debug"),
            ("build --profile=bench2", "bench2"),
        ] {
            let p = plan(Path::new("cargo"), &v(args), &e, lib, host, t);
            assert!(p.out_dir.unwrap().ends_with(dir), "{args}");
        }
    }
}
