//! Integration tests of programs that map PM themselves and name it with
//! `pmlab_pm_register` (issue 19): a Rust program built with `pmlab
//! cargo` (`tests/fixtures/rust-pm`, built once per run of this file)
//! and a C program built with `pmlab cc` (`tests/c/pm_register.c`). Each
//! test works in a fresh temporary directory.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{assert_one_line_error, runtime_dir, stderr, stdout, TempDir, PMLAB};
use pmlab_trace::{Op, Record, Space};

fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `key=value` words of a program's output.
fn values(o: &Output) -> HashMap<String, String> {
    stdout(o)
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(v: &HashMap<String, String>, k: &str) -> f64 {
    v.get(k)
        .unwrap_or_else(|| panic!("no {k}= in {v:?}"))
        .parse()
        .unwrap()
}

/// The fixture project copied to a directory of its own under cargo's
/// test scratch space (kept between runs, so the build is incremental;
/// files are rewritten only when they differ) and built with `pmlab cargo
/// build --release`: the project directory and the program.
fn rust_pm() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        runtime_dir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rust-pm");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rust-pm");
        for f in ["Cargo.toml", "src/main.rs"] {
            let text = std::fs::read(src.join(f)).unwrap();
            let to = dir.join(f);
            if std::fs::read(&to).ok().as_deref() != Some(&text[..]) {
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::write(&to, text).unwrap();
            }
        }
        let out = ok(Command::new(PMLAB)
            .args(["cargo", "build", "--release", "--quiet"])
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .current_dir(&dir));
        // The instrumented build has a directory of its own, named on
        // stderr.
        let host = pmlab_emu::cargo::host_triple().unwrap();
        let out_dir = dir.join("target/pmlab").join(&host).join("release");
        assert!(
            stderr(&out).contains(&out_dir.display().to_string()),
            "{}",
            stderr(&out)
        );
        (dir, out_dir.join("rust-pm"))
    })
}

#[test]
fn cargo_builds_a_rust_program_with_the_hooks_that_runs_without_pmlab() {
    let (_, exe) = rust_pm();
    let t = TempDir::new("plain");
    let data = std::fs::read(exe).unwrap();
    assert!(data.windows(22).any(|w| w == b"__sanitizer_cov_load8\0"));
    let ldd = ok(Command::new("ldd").arg(exe));
    assert!(stdout(&ldd).contains("libpmlab.so"));
    // Run directly: libpmlab is linked, so the program finds its functions
    // (and registers its mapping), and nothing is emulated.
    let o =
        ok(Command::new(exe).args([t.path("pool").to_str().unwrap(), "256", "1000", "10", "1"]));
    let v = values(&o);
    assert_eq!(v["registered"], "1");
    assert_eq!(num(&v, "pm_stores"), 4096.0 + 10.0);
    assert_eq!(num(&v, "flushes"), 4096.0 + 10.0);
    assert_eq!(num(&v, "fences"), 1.0 + 10.0);
    // Its own flush path (inline clwb/clflushopt/clflush and sfence, as
    // without libpmlab) runs on this CPU and makes the same operations.
    let o = ok(Command::new(exe)
        .args([t.path("pool").to_str().unwrap(), "256", "1000", "10", "1"])
        .env("RUST_PM_OWN_FLUSH", "1"));
    let own = values(&o);
    for k in ["registered", "pm_stores", "flushes", "fences"] {
        assert_eq!(own[k], v[k], "{k}");
    }
}

#[test]
fn instrumented_source_slows_the_rust_programs_pm_chase() {
    let (_, exe) = rust_pm();
    let t = TempDir::new("slow");
    let pool = t.path("pool");
    // 8 MiB of lines chased at random: every step misses the 1 MiB model
    // cache. 1000 ns of PM against 100 ns of DRAM adds ~900 ns a step.
    let step = |extra: &[&str]| -> f64 {
        let o = ok(Command::new(PMLAB)
            .args(["run", "--quiet", "--source", "instrumented"])
            .args(["--dram-latency", "100ns"])
            .args(extra)
            .arg("--")
            .arg(exe)
            .args([pool.to_str().unwrap(), "8192", "100000", "0", "0"])
            .env("PMLAB_INSTR_LLC", "1MiB:16"));
        let v = values(&o);
        assert_eq!(v["registered"], "1");
        num(&v, "ns_per_step")
    };
    let plain = step(&["--no-inject"]);
    let slow = step(&["--pm-latency", "1000ns"]);
    assert!(
        slow > 1.5 * plain && slow - plain > 300.0,
        "{slow:.0} ns per step at 1000 ns of PM vs {plain:.0} without injection"
    );
}

/// The records of a finished trace.
fn records(path: &Path) -> Vec<Record> {
    let f = std::fs::File::open(path).unwrap();
    let r = pmlab_trace::binary::Reader::new(std::io::BufReader::new(f)).unwrap();
    assert_eq!(r.meta_value("stores"), Some("instrumented"));
    assert_eq!(r.meta_value("dropped"), Some("00000000000000000000"));
    r.collect::<Result<_, _>>().unwrap()
}

/// PM stores, flushes (any instruction) inside `[base, base+len)`, and
/// fences anywhere.
fn counts(recs: &[Record], base: u64, len: u64) -> (usize, usize, usize) {
    let inside = |r: &&Record| r.addr >= base && r.addr < base + len;
    let stores = recs
        .iter()
        .filter(|r| r.op == Op::Write && r.space == Space::Pm)
        .filter(inside)
        .count();
    let flushes = recs
        .iter()
        .filter(|r| r.op.is_flush())
        .filter(inside)
        .count();
    let fences = recs.iter().filter(|r| r.op == Op::SFence).count();
    (stores, flushes, fences)
}

#[test]
fn trace_records_the_rust_programs_pm_stores_flushes_and_fences() {
    let (_, exe) = rust_pm();
    let t = TempDir::new("trace");
    let trace = t.path("t.pmt");
    let o = ok(Command::new(PMLAB)
        .args(["trace", "-o", trace.to_str().unwrap(), "--"])
        .arg(exe)
        .args([t.path("pool").to_str().unwrap(), "256", "1000", "10", "1"]));
    let v = values(&o);
    assert_eq!(v["registered"], "1");
    let recs = records(&trace);
    let (stores, flushes, fences) = counts(&recs, num(&v, "base") as u64, num(&v, "len") as u64);
    // 4096 lines of chain, each stored and flushed, one fence; then 10
    // records each stored, flushed and fenced.
    assert_eq!(stores, 4096 + 10);
    assert_eq!(stores as f64, num(&v, "pm_stores"));
    assert_eq!(flushes, 4096 + 10);
    assert_eq!(fences, 1 + 10);
    assert_eq!(fences as f64, num(&v, "fences"));
    // The chase's loads of the registered range are PM loads, counted.
    let pm_loads: u64 = recs
        .iter()
        .filter(|r| r.op == Op::Untraced && r.space == Space::Pm)
        .map(|r| r.addr)
        .sum();
    assert!(pm_loads >= 1000, "{pm_loads} PM loads counted");
}

#[test]
fn a_c_program_registers_its_mapping_and_its_stores_are_traced() {
    runtime_dir();
    let t = TempDir::new("c");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/pm_register.c");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let exe = t.path("pm_register");
    ok(Command::new(PMLAB)
        .args(["cc", "-O2", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&exe)
        .arg(&src));
    // Directly (checks the API's answers and error codes), then traced.
    ok(Command::new(&exe).arg(t.path("pool")));
    let trace = t.path("c.pmt");
    let o = ok(Command::new(PMLAB)
        .args(["trace", "-o", trace.to_str().unwrap(), "--"])
        .arg(&exe)
        .arg(t.path("pool")));
    let v = values(&o);
    let recs = records(&trace);
    let (stores, flushes, fences) = counts(&recs, num(&v, "base") as u64, num(&v, "len") as u64);
    assert_eq!((stores, flushes, fences), (100, 100, 100));
}

#[test]
fn cargo_help_has_an_example_and_errors_are_one_line() {
    let t = TempDir::new("errors");
    let o = ok(Command::new(PMLAB).args(["cargo", "--help"]));
    assert!(stdout(&o).contains("Example:") && stdout(&o).contains("pmlab cargo build"));
    let o = Command::new(PMLAB)
        .args(["cargo", "build"])
        .env("PMLAB_CARGO", t.path("no-such-cargo"))
        .current_dir(&t.0)
        .output()
        .unwrap();
    assert_one_line_error(&o, "PMLAB_CARGO");
    let o = Command::new(PMLAB)
        .args(["cargo", "build"])
        .env("PMLAB_LIB_DIR", &t.0)
        .current_dir(&t.0)
        .output()
        .unwrap();
    assert_one_line_error(&o, "libpmlab.so");
}
