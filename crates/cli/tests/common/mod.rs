//! Helpers shared by the CLI integration tests: the built `pmlab` binary,
//! a fresh directory per test, running `pmlab` in it and checking a
//! one-line error. Each test file declares `mod common;` and uses the
//! helpers it needs.
#![allow(dead_code)] // no test file uses every helper

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
