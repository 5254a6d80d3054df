//! Helpers shared by the CLI integration tests: the built `pmlab` binary,
//! a fresh directory per test, running `pmlab` in it and checking a
//! one-line error, and skipping a test whose tool is not installed. Each
//! test file declares `mod common;` and uses the helpers it needs.
//!
//! # Skips
//!
//! A test that needs a tool or package the machine lacks calls [`skip`]
//! (or [`require_tool`] / [`require_c_library`], which call it) and
//! returns. The skip prints one line to the real stderr (past the test
//! harness's capture, so a passing run shows it) and appends it to the skip
//! log ([`skip_log`]), which `make test` counts and lists at the end. With
//! `PMLAB_TEST_REQUIRE_ALL=1` (set by `.ci/run`, where every tool is
//! installed) a skip is a failure naming what is missing. A part of a test
//! that this machine cannot exercise (it has a PMU, it is too slow) is
//! reported with [`not_exercised`]: listed the same way, never a failure.
#![allow(dead_code)] // no test file uses every helper

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// The `pmlab` binary that cargo built for these tests.
pub const PMLAB: &str = env!("CARGO_BIN_EXE_pmlab");

/// The directory of the `pmlab` binary, with libpmlab.so in it: built
/// (`cargo build -p pmlab-runtime`, same profile) the first time a test
/// binary asks when a bare `cargo test` left it out (`make test` builds the
/// whole workspace first).
pub fn runtime_dir() -> PathBuf {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let dir = Path::new(PMLAB).parent().unwrap().to_path_buf();
    ONCE.call_once(|| {
        if dir.join("libpmlab.so").is_file() {
            return;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "pmlab-runtime"]);
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo to build libpmlab.so");
        assert!(st.success(), "building libpmlab.so failed");
    });
    assert!(
        dir.join("libpmlab.so").is_file(),
        "libpmlab.so is missing next to {PMLAB}: run `cargo build --release --workspace` before the tests"
    );
    dir
}

/// A fresh directory under the system temp dir, removed on drop. Its name
/// holds the test file, the tag, the process and a counter, so no two
/// directories of one run collide.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let file = env!("CARGO_CRATE_NAME");
        let p = std::env::temp_dir().join(format!("pmlab-{file}-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// The path of `name` in this directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Write `content` to `name` in this directory; its path.
    pub fn write(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `pmlab ARGS` in `dir`.
pub fn pmlab(dir: &Path, args: &[&str]) -> Output {
    Command::new(PMLAB)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run pmlab")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code 2 and exactly one line `pmlab: error: ...` containing `needle`.
pub fn assert_one_line_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("pmlab: error: "), "{err}");
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
}

/// The environment switch under which a skipped test fails.
pub const REQUIRE_ALL: &str = "PMLAB_TEST_REQUIRE_ALL";

/// The file each skip appends its line to: `PMLAB_TEST_SKIP_LOG`, or
/// `test-skips.txt` in cargo's target directory.
pub fn skip_log() -> PathBuf {
    if let Some(p) = std::env::var_os("PMLAB_TEST_SKIP_LOG") {
        return PathBuf::from(p);
    }
    // target/<profile>/pmlab: the target directory is two levels up.
    let target = Path::new(PMLAB)
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    target.join("test-skips.txt")
}

/// `test-file::test-name` of the running test (libtest names each test's
/// thread after the test).
fn test_name() -> String {
    let t = std::thread::current();
    format!(
        "{}::{}",
        env!("CARGO_CRATE_NAME"),
        t.name().unwrap_or("(unnamed test)")
    )
}

/// Print `line` past the harness's output capture and add it to the log.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(skip_log())
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Skip the running test: `missing` (a tool or package, with how to get
/// it) is not installed. Fails instead under `PMLAB_TEST_REQUIRE_ALL=1`.
/// The caller returns right after.
pub fn skip(missing: &str) {
    let name = test_name();
    if std::env::var(REQUIRE_ALL).is_ok_and(|v| v == "1") {
        panic!("{name}: {missing} is missing, and {REQUIRE_ALL}=1 makes a skip a failure");
    }
    report(&format!("SKIPPED {name}: {missing} is missing"));
}

/// A part of the running test that this machine cannot exercise (a
/// property of the hardware or its speed, not a missing tool): printed and
/// logged, never a failure.
pub fn not_exercised(why: &str) {
    report(&format!("NOT EXERCISED {}: {why}", test_name()));
}

/// True when `cmd --version` runs; otherwise the test is skipped, naming
/// `cmd` and its Debian `package`, and false.
pub fn require_tool(cmd: &str, package: &str) -> bool {
    let ok = Command::new(cmd)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(&format!("`{cmd}` (apt-get install {package})"));
    }
    ok
}

/// True when `cc` builds and links a program that includes `header` and
/// links `-l<lib>`; otherwise the test is skipped, naming the Debian
/// `package`, and false. Probes with a one-line program, so that a failure
/// to build the real program afterwards is a failure, not a skip.
pub fn require_c_library(header: &str, lib: &str, package: &str) -> bool {
    if !require_tool("cc", "gcc") {
        return false;
    }
    let d = TempDir::new(&format!("probe-{lib}"));
    d.write(
        "p.c",
        format!("#include <{header}>\nint main(void) {{ return 0; }}\n"),
    );
    let ok = Command::new("cc")
        .current_dir(&d.0)
        .args(["-o", "p", "p.c", &format!("-l{lib}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(&format!("{header} / -l{lib} (apt-get install {package})"));
    }
    ok
}
