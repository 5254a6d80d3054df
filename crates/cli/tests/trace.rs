//! Integration tests of `pmlab trace` and `pmlab analyze` (issue 6): the
//! built binary on hand-made traces, malformed traces, WHISPER traces, and
//! a libpmemobj workload traced end to end.

mod common;

use common::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PMLAB: &str = env!("CARGO_BIN_EXE_pmlab");

fn pmlab(dir: &Path, args: &[&str]) -> Output {
    Command::new(PMLAB)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run pmlab")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Assert a clean usage/input failure: exit 2, one line, naming `what`.
fn assert_one_line_error(o: &Output, what: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {e}");
    assert!(e.starts_with("pmlab: error: "), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains(what), "expected '{what}' in: {e}");
}

const TEXT_TRACE: &str = "\
# time thread op addr size
0   0 TXBEGIN 1 0
10  0 W 0x1000 8
11  0 CLWB 0x1000 64
12  0 SFENCE 0 0
20  0 W 0x1040 8
21  0 W 0x1080 8
22  0 USERDATA 0x1080 8
23  0 SFENCE 0 0
30  0 TXEND 1 0
40  1 W 0x1000 8
41  1 SFENCE 0 0
50  1 R 0x10 8 dram
";

#[test]
fn analyze_prints_the_whisper_table_and_json() {
    let d = TempDir::new("table");
    std::fs::write(d.join("t.txt"), TEXT_TRACE).unwrap();
    let o = pmlab(&d, &["analyze", "t.txt"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for row in [
        "epochs per transaction",
        "singleton epochs",
        "self-dependent epochs",
        "cross-dependent epochs",
        "write amplification",
        "PM share of accesses",
    ] {
        assert!(out.contains(row), "missing '{row}' in\n{out}");
    }
    let o = pmlab(&d, &["analyze", "t.txt", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["epochs"], 3);
    assert_eq!(v["transactions"], 1);
    assert_eq!(v["epochs_per_tx"]["median"], 2);
    // Epochs: {0x1000}, {0x1040, 0x1080}, {0x1000 by thread 1}.
    assert!((v["singleton_share"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(v["cross_dep_epochs"], 1);
    // 24 PM bytes stored inside the transaction, 8 of them user data:
    // 200 % extra.
    assert!((v["amplification"].as_f64().unwrap() - 2.0).abs() < 1e-9);
    assert!((v["pm_share"].as_f64().unwrap() - 0.8).abs() < 1e-9);
}

#[test]
fn analyze_window_changes_dependencies() {
    let d = TempDir::new("window");
    std::fs::write(d.join("t.txt"), TEXT_TRACE).unwrap();
    let o = pmlab(&d, &["analyze", "t.txt", "--json", "--window", "5ns"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cross_dep_epochs"], 0);
    assert_eq!(v["window_ns"], 5);
}

#[test]
fn analyze_reads_whisper_traces() {
    let d = TempDir::new("whisper");
    let w = "\
7001:1:PM_XS:tx:1
7001:2:PM_W:0x7f0000001000:8:put:10
7001:3:PM_L:0x7f0000001000:0:64:put:11
7001:4:PM_N:put:12
7001:5:PM_W:0x7f0000001000:8:put:13
7001:6:PM_N:put:14
7001:7:PM_XE:tx:2
";
    std::fs::write(d.join("w.txt"), w).unwrap();
    let o = pmlab(&d, &["analyze", "--format", "whisper", "w.txt", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["epochs"], 2);
    assert_eq!(v["self_dep_epochs"], 1);
    assert_eq!(v["epochs_per_tx"]["median"], 2);
    let o = pmlab(
        &d,
        &["analyze", "--format", "whisper", "--json", "nope.txt"],
    );
    assert_one_line_error(&o, "nope.txt");
}

#[test]
fn malformed_traces_get_one_line_errors() {
    let d = TempDir::new("malformed");
    // Text: unknown operation, with file and line.
    std::fs::write(d.join("bad.txt"), "0 0 W 0x10 8\n1 0 JUMP 0x10 8\n").unwrap();
    assert_one_line_error(
        &pmlab(&d, &["analyze", "bad.txt"]),
        "bad.txt:2: unknown operation 'JUMP'",
    );
    // Binary: a valid trace cut inside a record.
    let mut w = pmlab_trace::binary::Writer::new(Vec::new()).unwrap();
    for i in 0..100u64 {
        w.write(&pmlab_trace::Record::new(
            i,
            0,
            pmlab_trace::Op::Write,
            0x1000 + i * 640,
            8,
        ))
        .unwrap();
    }
    let bytes = w.finish().unwrap();
    std::fs::write(d.join("cut.pmt"), &bytes[..bytes.len() - 1]).unwrap();
    assert_one_line_error(&pmlab(&d, &["analyze", "cut.pmt"]), "offset");
    // Binary: an unknown operation code.
    let mut b = bytes.clone();
    let first_record = 16;
    b[first_record] = 0x1f;
    std::fs::write(d.join("op.pmt"), &b).unwrap();
    assert_one_line_error(
        &pmlab(&d, &["analyze", "op.pmt"]),
        "unknown operation code 31",
    );
    // A header alone, cut short.
    std::fs::write(d.join("head.pmt"), b"PMLABTRC\x01").unwrap();
    assert_one_line_error(&pmlab(&d, &["analyze", "head.pmt"]), "header");
    // Not a binary trace, asked as one.
    assert_one_line_error(
        &pmlab(&d, &["analyze", "--format", "pmt", "bad.txt"]),
        "not a pmlab binary trace",
    );
    // Bad flags.
    assert_one_line_error(
        &pmlab(&d, &["analyze", "bad.txt", "--window", "fast"]),
        "--window",
    );
    assert_one_line_error(
        &pmlab(&d, &["analyze", "bad.txt", "--infer-stores", "maybe"]),
        "--infer-stores",
    );
    assert_one_line_error(
        &pmlab(&d, &["analyze", "bad.txt", "--format", "csv"]),
        "--format",
    );
    // An empty trace is an error, not a table of n/a (issue 15).
    std::fs::write(d.join("empty.txt"), "").unwrap();
    assert_one_line_error(
        &pmlab(&d, &["analyze", "empty.txt", "--json"]),
        "empty.txt: the trace holds no records",
    );
}

#[test]
fn analyze_plots_distributions_as_svg() {
    let d = TempDir::new("plot");
    std::fs::write(d.join("t.txt"), TEXT_TRACE).unwrap();
    let o = pmlab(&d, &["analyze", "t.txt", "--plot", "charts"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["epoch_size.svg", "epochs_per_tx.svg", "singleton_bytes.svg"] {
        let svg = std::fs::read_to_string(d.join("charts").join(f)).unwrap();
        assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{f}");
    }
}

/// libpmlab.so of this build (built when missing).
fn runtime_lib() -> PathBuf {
    common::runtime_dir().join("libpmlab.so")
}

/// Build `workloads/NAME.c` into `d`. None (the test skipped) when `cc`
/// or, for the `pmobj_` ones, libpmemobj is not installed; a compile
/// failure with both present fails the test.
fn build_workload(d: &Path, name: &str) -> Option<PathBuf> {
    let ready = if name.starts_with("pmobj_") {
        common::require_c_library("libpmemobj.h", "pmemobj", "libpmemobj-dev")
    } else {
        common::require_tool("cc", "gcc")
    };
    if !ready {
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = d.join(name);
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-std=gnu11", "-I"])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&out)
        .arg(root.join("workloads").join(format!("{name}.c")));
    if name.starts_with("pmobj_") {
        cc.arg("-lpmemobj");
    }
    let o = cc.arg("-lpthread").output().expect("run cc");
    assert!(
        o.status.success(),
        "cannot build workloads/{name}.c: {}",
        stderr(&o)
    );
    Some(out)
}

/// The four persistent structures compute the same map for the same
/// arguments (regression: B-tree deletes once broke key order).
#[test]
fn workloads_agree_on_their_results() {
    let d = TempDir::new("agree");
    let mut results = Vec::new();
    for name in ["pmobj_hashmap", "pmobj_btree", "pm_hashmap", "pm_btree"] {
        let Some(prog) = build_workload(&d, name) else {
            return;
        };
        let o = Command::new(&prog)
            .arg(d.join("pool"))
            .args(["1", "20000", "50"])
            .env("PMEM_IS_PMEM_FORCE", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let line = stdout(&o);
        let fields: Vec<&str> = line
            .split_whitespace()
            .filter(|f| {
                !f.starts_with("workload=")
                    && !f.starts_with("seconds=")
                    && !f.starts_with("ops_per_sec=")
            })
            .collect();
        results.push(fields.join(" "));
    }
    assert!(results.iter().all(|r| r == &results[0]), "{results:#?}");
    assert!(results[0].contains("deletes="), "{}", results[0]);
}

/// The result line without its run-time and transaction-size fields.
fn result_fields(line: &str) -> String {
    line.split_whitespace()
        .filter(|f| {
            !f.starts_with("seconds=")
                && !f.starts_with("ops_per_sec=")
                && !f.starts_with("ops_per_tx=")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Group commit (OPS_PER_TX, the drivers' fifth argument): N operations
/// per transaction give the same map as one per transaction, including
/// an N that does not divide the operations and an N above them; a bad
/// N is refused with the usage error and status 2; traced, a redo-log
/// workload makes one transaction with one durability point per N
/// operations.
#[test]
fn group_commit_keeps_results_and_rejects_bad_ops_per_tx() {
    let d = TempDir::new("groupcommit");
    let rt = runtime_lib();
    for name in ["pmobj_hashmap", "pmobj_btree", "pm_hashmap", "pm_btree"] {
        let Some(prog) = build_workload(&d, name) else {
            return;
        };
        let run = |per_tx: &str| {
            Command::new(&prog)
                .arg(d.join("pool"))
                .args(["2", "3000", "30", per_tx])
                .env("PMEM_IS_PMEM_FORCE", "1")
                .output()
                .unwrap()
        };
        let one = run("1");
        assert!(one.status.success(), "{name}: {}", stderr(&one));
        assert!(!stdout(&one).contains("ops_per_tx"), "{}", stdout(&one));
        for n in ["7", "64", "4096"] {
            let o = run(n);
            assert!(o.status.success(), "{name} OPS_PER_TX={n}: {}", stderr(&o));
            assert!(
                stdout(&o).contains(&format!(" ops_per_tx={n} ")),
                "{}",
                stdout(&o)
            );
            assert_eq!(
                result_fields(&stdout(&o)),
                result_fields(&stdout(&one)),
                "{name} OPS_PER_TX={n}"
            );
        }
        for bad in ["0", "4097", "-1", "8x", ""] {
            let o = run(bad);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{name} OPS_PER_TX='{bad}': {e}");
            let first = e.lines().next().unwrap_or("");
            assert!(
                first.contains(": error: OPS_PER_TX must be a number from 1 to 4096"),
                "{first}"
            );
            assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        }
    }
    // 2 threads x 500 operations in transactions of 16: 32 per thread (the
    // last of 4), each one redo-log commit: 4 epochs, one dfence.
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "g.pmt", "--json", "g.json", "--"])
        .arg(d.join("pm_hashmap"))
        .args(["pool", "2", "500", "20", "16"])
        .env("PMLAB_RUNTIME", &rt)
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let plain = Command::new(d.join("pm_hashmap"))
        .args(["pool", "2", "500", "20"])
        .output()
        .unwrap();
    let traced = stdout(&o);
    assert_eq!(
        checksum(traced.lines().next().unwrap()),
        checksum(&stdout(&plain))
    );
    let o = pmlab(&d, &["analyze", "g.pmt", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["transactions"], 64, "{a}");
    assert_eq!(a["epochs_per_tx"]["median"], 4);
    assert_eq!(a["epochs_per_tx"]["max"], 4);
    // One durability point per transaction, plus the bucket array's.
    assert_eq!(a["fences"]["dfence"], 65, "{a}");
}

fn checksum(out: &str) -> String {
    out.split_whitespace()
        .find(|f| f.starts_with("checksum="))
        .unwrap_or("none")
        .to_string()
}

/// RFO reads of an x86-nvm replay (`--flush-invalidates auto`) of a trace
/// of `prog` (one of the four transactional workloads) recorded with the
/// extra environment `env`.
fn pmemobj_rfo_reads(
    d: &std::path::Path,
    prog: &std::path::Path,
    rt: &std::path::Path,
    env: &[(&str, &str)],
) -> u64 {
    let pool = d.join("pool-rfo");
    let _ = std::fs::remove_file(&pool);
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "rfo.pmt", "--"])
        .arg(prog)
        .arg(&pool)
        .args(["2", "200", "20"])
        .env("PMLAB_RUNTIME", rt)
        .envs(env.iter().copied())
        .current_dir(d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = pmlab(
        d,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            "--persistency",
            "x86-nvm",
            "rfo.pmt",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["models"]["x86-nvm"]["rfo_reads"].as_u64().unwrap()
}

/// The runtime, a fresh directory and `workload` built there; None (the
/// test skipped) when the workload's compiler or library is missing.
fn runtime_and_workload(dir: &str, workload: &str) -> Option<(PathBuf, TempDir, PathBuf)> {
    let rt = runtime_lib();
    let d = TempDir::new(dir);
    let prog = build_workload(&d, workload)?;
    Some((rt, d, prog))
}

#[test]
fn pmemobj_flushes_are_recorded_as_the_instruction_libpmem_uses() {
    let Some((rt, d, prog)) = runtime_and_workload("pmemobj-flush", "pmobj_hashmap") else {
        return;
    };
    // Told not to use clwb, libpmem flushes with clflushopt (or clflush),
    // which invalidate the line: the replay then reads lines for ownership.
    assert!(pmemobj_rfo_reads(&d, &prog, &rt, &[("PMEM_NO_CLWB", "1")]) > 0);
    // With clwb (where the CPU has it) lines stay cached under `auto`.
    if pmlab_cpu_has_clwb() {
        assert_eq!(pmemobj_rfo_reads(&d, &prog, &rt, &[]), 0);
    } else {
        common::not_exercised("the CPU has no clwb: lines kept cached under `auto`");
    }
}

#[test]
fn pmlab_flush_chooses_the_pm_api_flush_and_a_bad_value_is_refused() {
    let Some((rt, d, prog)) = runtime_and_workload("pmflush", "pm_hashmap") else {
        return;
    };
    // pflush with clflush (invalidating): reads for ownership in the replay.
    assert!(pmemobj_rfo_reads(&d, &prog, &rt, &[("PMLAB_FLUSH", "clflush")]) > 0);
    if pmlab_cpu_has_clwb() {
        assert_eq!(pmemobj_rfo_reads(&d, &prog, &rt, &[]), 0);
    } else {
        common::not_exercised("the CPU has no clwb: lines kept cached by pflush's default");
    }
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "x.pmt", "--"])
        .arg(&prog)
        .env("PMLAB_RUNTIME", &rt)
        .env("PMLAB_FLUSH", "clwbx")
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("PMLAB_FLUSH=clwbx"), "{err}");
}

fn pmlab_cpu_has_clwb() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "clwb"))
}

#[test]
fn trace_records_a_pmemobj_workload_without_changing_its_result() {
    let Some((rt, d, prog)) = runtime_and_workload("pmemobj", "pmobj_hashmap") else {
        return;
    };
    let pool = d.join("pool");
    let plain = Command::new(&prog)
        .arg(&pool)
        .args(["2", "500", "20"])
        .env("PMEM_IS_PMEM_FORCE", "1")
        .output()
        .unwrap();
    assert!(plain.status.success());
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "app.pmt", "--json", "app.json", "--"])
        .arg(&prog)
        .arg(&pool)
        .args(["2", "500", "20"])
        .env("PMLAB_RUNTIME", &rt)
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // The program's stdout is its own: the summary went to app.json.
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    let program_line = out.lines().next().unwrap();
    assert_eq!(checksum(program_line), checksum(&stdout(&plain)));
    assert_ne!(checksum(program_line), "none");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("app.json")).unwrap()).unwrap();
    assert_eq!(v["finished"], true);
    assert_eq!(v["dropped"], 0);
    assert!(v["records"].as_u64().unwrap() > 1000);
    assert_eq!(v["threads"], 3, "main thread and two workers");

    let o = pmlab(&d, &["analyze", "app.pmt", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["meta"]["pmdk"], "interposed");
    assert_eq!(a["meta"]["stores"], "flushes-only");
    assert_eq!(a["flushes_as_stores"], true);
    // One transaction per operation plus the setup one.
    assert_eq!(a["transactions"], 1001);
    let median = a["epochs_per_tx"]["median"].as_u64().unwrap();
    assert!((2..=20).contains(&median), "median epochs per tx {median}");
    assert!(a["amplification"].as_f64().unwrap() > 0.0);
    assert!(a["singleton_share"].as_f64().unwrap() > 0.2);

    // An unwritable output and a missing program fail cleanly.
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "/nonexistent/dir/x.pmt", "--", "true"])
        .env("PMLAB_RUNTIME", &rt)
        .output()
        .unwrap();
    assert_one_line_error(&o, "cannot create trace file");
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "x.pmt", "--", "./no-such-program"])
        .env("PMLAB_RUNTIME", &rt)
        .current_dir(&d)
        .output()
        .unwrap();
    assert_one_line_error(&o, "no-such-program");
}

/// Build the libpmem program `source` as `name` in a fresh directory and
/// record it with `pmlab trace --json f.json` (into `f.pmt`); the directory
/// and the JSON summary. `None` (the test skipped) where `cc` or libpmem is missing.
fn trace_libpmem_program(
    tag: &str,
    name: &str,
    source: &str,
) -> Option<(TempDir, serde_json::Value)> {
    if !common::require_c_library("libpmem.h", "pmem", "libpmem-dev") {
        return None;
    }
    let rt = runtime_lib();
    let d = TempDir::new(tag);
    std::fs::write(d.join(format!("{name}.c")), source).unwrap();
    let o = Command::new("cc")
        .current_dir(&d)
        .args(["-O2", "-o", name, &format!("{name}.c"), "-lpmem"])
        .output()
        .expect("run cc");
    assert!(o.status.success(), "cannot build {name}.c: {}", stderr(&o));
    let o = Command::new(PMLAB)
        .args([
            "trace",
            "-o",
            "f.pmt",
            "--json",
            "f.json",
            "--",
            &format!("./{name}"),
        ])
        .env("PMLAB_RUNTIME", &rt)
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = serde_json::from_str(&std::fs::read_to_string(d.join("f.json")).unwrap()).unwrap();
    Some((d, v))
}

const FORKY: &str = r#"
#include <libpmem.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    static char buf[4096] __attribute__((aligned(64)));
    if (argc > 1) {
        for (int i = 0; i < 10; i++) pmem_persist(buf + 64 * i, 8);
        return 0;
    }
    for (int i = 0; i < 100; i++) pmem_persist(buf + 64 * (i % 64), 8);
    pid_t p = fork();
    if (p == 0) {
        for (int i = 0; i < 50; i++) pmem_persist(buf, 8);
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        _exit(1);
    }
    int st;
    waitpid(p, &st, 0);
    for (int i = 0; i < 100; i++) pmem_persist(buf, 8);
    return WEXITSTATUS(st);
}
"#;

/// Fork: the child records nothing into the parent's trace; exec: the new
/// image records into `<trace>.<pid>`.
#[test]
fn trace_fork_and_exec_policy() {
    let Some((d, v)) = trace_libpmem_program("fork", "forky", FORKY) else {
        return;
    };
    // pmem_persist = flush + drain: 200 persists in the parent.
    assert_eq!(v["records"], 400);
    let children = v["child_traces"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{v}");
    let o = pmlab(&d, &["analyze", children[0].as_str().unwrap(), "--json"]);
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["flushes"], 10);
}

const FAST_EXIT: &str = r#"
#include <libpmem.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
int main(void) {
    static char buf[4096] __attribute__((aligned(64)));
    for (int i = 0; i < 100; i++) pmem_persist(buf + 64 * (i % 64), 8);
    /* glibc's spawn child shares our memory and ends with _exit(127):
       it must not stop the parent's trace. */
    char *argv[] = {"/nonexistent/pmlab-test", NULL};
    pid_t s;
    int st;
    if (posix_spawn(&s, argv[0], NULL, NULL, argv, environ) == 0)
        waitpid(s, &st, 0);
    for (int i = 0; i < 50; i++) pmem_persist(buf, 8);
    _exit(0);
}
"#;

/// A program that ends with `_exit` (no `atexit` handlers) still gets a
/// complete trace, and a `posix_spawn` child's `_exit` does not end it.
#[test]
fn trace_is_completed_when_the_program_ends_with_exit_underscore() {
    let Some((_d, v)) = trace_libpmem_program("fastexit", "fast", FAST_EXIT) else {
        return;
    };
    assert_eq!(v["finished"], true, "{v}");
    // pmem_persist = flush + drain: 150 persists, all after the spawn too.
    assert_eq!(v["records"], 300, "{v}");
}

#[test]
fn trace_without_runtime_says_how_to_get_it() {
    let d = TempDir::new("noruntime");
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "x.pmt", "--", "true"])
        .env("PMLAB_RUNTIME", d.join("missing.so"))
        .current_dir(&d)
        .output()
        .unwrap();
    assert_one_line_error(&o, "PMLAB_RUNTIME");
}

/// `pmlab sim --persistency`: every model on a PMDK-like trace, ordered as
/// in HOPS, and clear errors for bad model names.
#[test]
fn sim_persistency_compares_models() {
    let d = TempDir::new("persistency");
    let mut t = String::new();
    let mut time = 0u64;
    for i in 0..200u64 {
        time += 300;
        t.push_str(&format!("{time} 0 TXBEGIN {i} 0\n"));
        for e in 0..5u64 {
            let a = 0x10000 + ((i * 5 + e) % 256) * 64;
            time += 300;
            t.push_str(&format!("{time} 0 W {a:#x} 8\n"));
            time += 2;
            t.push_str(&format!("{time} 0 CLWB {a:#x} 64\n"));
            time += 2;
            t.push_str(&format!("{time} 0 SFENCE 0 0\n"));
        }
        time += 2;
        t.push_str(&format!("{time} 0 TXEND {i} 0\n"));
    }
    std::fs::write(d.join("t.txt"), t).unwrap();
    let o = pmlab(
        &d,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            "--persistency",
            "x86-nvm,x86-adr,hops,hops-adr,hops@1,ideal",
            "--json",
            "t.txt",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let model = |name: &str| v["models"][name].clone();
    assert_eq!(v["order"][4], "hops@1");
    let run = |name: &str| model(name)["run_ns"].as_f64().unwrap();
    let (nvm, adr, ideal) = (run("x86-nvm"), run("x86-adr"), run("ideal"));
    assert!(nvm > adr && adr >= ideal, "{v}");
    // Transactions of 5 lines never fill HOPS's buffer to 16: it drains at
    // the commit, one epoch per media round trip (as x86-nvm waits);
    // draining from the first entry takes the waits off the critical path.
    let hops = model("hops");
    assert_eq!(hops["durability_points"], 200);
    assert_eq!(hops["epochs_drained"], 1000);
    assert!(run("hops@1") < nvm && run("hops@1") >= ideal, "{v}");
    // With the controller's persistent write queue acknowledging epochs,
    // the commit's round trips end at the controller.
    let hops_adr = model("hops-adr");
    assert_eq!(hops_adr["durability_points"], 200);
    assert_eq!(hops_adr["epochs_drained"], 1000);
    assert!(
        run("hops-adr") < run("hops") && run("hops-adr") >= ideal,
        "{v}"
    );
    let o = pmlab(
        &d,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            "--persistency",
            "tso",
            "t.txt",
        ],
    );
    assert_one_line_error(&o, "x86-nvm, x86-adr, hops, hops-adr, ideal");
    let o = pmlab(
        &d,
        &[
            "sim",
            "--preset",
            "hops-paper",
            "--persistency",
            "hops",
            "--infer-stores",
            "maybe",
            "t.txt",
        ],
    );
    assert_one_line_error(&o, "--infer-stores 'maybe': expected on, off or auto");
    let o = pmlab(&d, &["sim", "--persistency", "hops", "t.txt"]);
    assert_one_line_error(&o, "--preset");
}

/// A program built with `pmlab cc` and traced: its DRAM accesses and PM
/// loads reach the trace as `UNTRACED` counts, so `pmlab analyze` reports
/// its PM share (tests/c/pm_share.c: 200000 PM and 300000 DRAM accesses,
/// two threads).
#[test]
fn trace_counts_dram_accesses_of_a_pmlab_cc_program() {
    let rt = runtime_lib();
    let d = TempDir::new("pmshare");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/pm_share.c");
    let o = Command::new(PMLAB)
        .args(["cc", "-O2", "-o", "pm_share"])
        .arg(&src)
        .arg("-lpthread")
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "pmlab cc: {}", stderr(&o));
    let o = Command::new(PMLAB)
        .args([
            "trace",
            "-o",
            "s.pmt",
            "--json",
            "s.json",
            "--",
            "./pm_share",
        ])
        .env("PMLAB_RUNTIME", &rt)
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = pmlab(&d, &["analyze", "s.pmt", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pm = a["pm_accesses"].as_u64().unwrap();
    let dram = a["dram_accesses"].as_u64().unwrap();
    // The loops make exactly one access per iteration (volatile); the
    // compiler may add a few outside them (locals, pthread_t), never one
    // per iteration. A thread's counts not yet recorded when it ends
    // (counts not multiple of the batch: 848 and 144 DRAM, 1696 PM loads)
    // would be missing.
    assert_eq!(a["pm_stores"], 100_000, "{a}");
    assert!((200_000..=200_064).contains(&pm), "PM accesses {pm}");
    assert!((300_000..=300_064).contains(&dram), "DRAM accesses {dram}");
    let share = a["pm_share"].as_f64().unwrap();
    assert!((share - 0.4).abs() < 2e-4, "PM share {share}");
}

#[test]
fn tracing_a_program_without_pm_operations_says_why_there_are_no_records() {
    let rt = runtime_lib();
    let d = TempDir::new("trace-empty");
    let o = Command::new(PMLAB)
        .args(["trace", "-o", "e.pmt", "--json", "e.json", "--", "true"])
        .env("PMLAB_RUNTIME", &rt)
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("warning: no records: true made no PM operations")
            && e.contains("never calls pmalloc")
            && e.contains("not built with pmlab cc"),
        "{e}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("e.json")).unwrap()).unwrap();
    assert_eq!(v["records"], 0);
    assert!(
        v["why_no_records"].as_str().unwrap().contains("pmalloc"),
        "{v}"
    );
}

#[test]
fn a_misspelled_option_before_the_program_is_an_unknown_option() {
    let d = TempDir::new("misspelled");
    for cmd in ["run", "trace"] {
        let mut args = vec![cmd];
        if cmd == "trace" {
            args.extend(["-o", "x.pmt"]);
        }
        args.extend(["--pm-latncy", "400ns", "--", "true"]);
        let o = pmlab(&d, &args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {e}");
        assert!(e.contains("'--pm-latncy'"), "{cmd}: {e}");
        assert!(!e.contains("not found"), "{cmd}: {e}");
    }
}
