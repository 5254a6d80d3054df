//! Integration tests of `pmlab check` and `pmlab crash` (issue 18): the
//! planted bugs of `crates/check/tests/c` must be found, their correct
//! versions must pass, bad input fails in one line.

mod common;

use common::{assert_one_line_error, pmlab, runtime_dir, stderr, stdout, TempDir, PMLAB};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Build `crates/check/tests/c/NAME.c` with `pmlab cc` (its stores are
/// recorded), at -O0 so that every store of the source is one store.
fn build(d: &TempDir, name: &str, libs: &[&str]) -> PathBuf {
    let rt = runtime_dir();
    let out = d.path(name);
    let o = Command::new(PMLAB)
        .args(["cc", "-O0", "-g", "-o"])
        .arg(&out)
        .arg(root().join(format!("crates/check/tests/c/{name}.c")))
        .arg(format!("-I{}", root().join("include").display()))
        .arg(format!("-L{}", rt.display()))
        .arg("-lpmlab")
        .arg(format!("-Wl,-rpath,{}", rt.display()))
        .args(libs)
        .output()
        .expect("run pmlab cc");
    assert!(o.status.success(), "pmlab cc {name}: {}", stderr(&o));
    out
}

const POOL_SIZE: &str = "1048576";

/// `pmlab trace --sites` of `planted VARIANT` into `VARIANT.pmt`.
fn trace_planted(d: &TempDir, prog: &Path, variant: &str) -> PathBuf {
    let t = d.path(&format!("{variant}.pmt"));
    let pool = d.path(&format!("{variant}.pool"));
    let o = Command::new(PMLAB)
        .args(["trace", "--sites", "-o"])
        .arg(&t)
        .arg("--")
        .arg(prog)
        .arg(variant)
        .env("PMLAB_PM_FILE", &pool)
        .env("PMLAB_PM_POOL_SIZE", POOL_SIZE)
        .current_dir(d)
        .output()
        .unwrap();
    assert!(o.status.success(), "trace {variant}: {}", stderr(&o));
    t
}

fn check_json(d: &TempDir, trace: &Path) -> (Option<i32>, serde_json::Value) {
    let o = pmlab(d, &["check", "--json", trace.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&o), stderr(&o)));
    (o.status.code(), v)
}

fn kinds(v: &serde_json::Value) -> Vec<String> {
    v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn check_finds_the_planted_flush_fence_and_log_bugs_with_their_lines() {
    let d = TempDir::new("planted");
    let prog = build(&d, "planted", &[]);
    let src = std::fs::read_to_string(root().join("crates/check/tests/c/planted.c")).unwrap();
    // The source line of the payload's store.
    let payload_line = src
        .lines()
        .position(|l| l.contains("r->data[i] = msg[i];"))
        .unwrap()
        + 1;
    for (variant, want) in [
        ("noflush", "not-flushed-at-commit"),
        ("nofence", "not-fenced-at-commit"),
        ("txlog", "store-not-in-tx-log"),
    ] {
        let t = trace_planted(&d, &prog, variant);
        let (code, v) = check_json(&d, &t);
        assert_eq!(code, Some(1), "{variant}: {v}");
        assert!(kinds(&v).contains(&want.to_string()), "{variant}: {v}");
        let g = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["kind"] == want)
            .unwrap();
        assert_eq!(g["function"], "main", "{variant}: {g}");
        assert!(
            g["file"].as_str().unwrap().ends_with("planted.c"),
            "{variant}: {g}"
        );
        if variant != "nofence" {
            assert_eq!(g["line"], payload_line, "{variant}: {g}");
        }
        // Text output: the kind and file:line.
        let o = pmlab(&d, &["check", t.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1));
        assert!(stdout(&o).contains(want) && stdout(&o).contains("planted.c:"));
    }
    // The correct versions, and the late commit flag (a recovery bug no
    // flush is missing for): clean.
    for variant in ["ok", "txlog-ok", "late"] {
        let t = trace_planted(&d, &prog, variant);
        let (code, v) = check_json(&d, &t);
        assert_eq!(code, Some(0), "{variant}: {v}");
        assert_eq!(v["findings"], 0, "{variant}: {v}");
    }
}

fn crash(d: &TempDir, prog: &Path, variant: &str) -> Output {
    let check = format!(
        "PMLAB_PM_FILE={{}} PMLAB_PM_POOL_SIZE={POOL_SIZE} {} check",
        prog.display()
    );
    Command::new(PMLAB)
        .args([
            "crash", "--json", "--budget", "200", "--check", &check, "--dir",
        ])
        .arg(d.path(&format!("crash-{variant}")))
        .arg("--")
        .arg(prog)
        .arg(variant)
        .env("PMLAB_PM_FILE", d.path(&format!("crash-{variant}.pool")))
        .env("PMLAB_PM_POOL_SIZE", POOL_SIZE)
        .current_dir(d)
        .output()
        .unwrap()
}

#[test]
fn crash_fails_a_recovery_that_trusts_fields_written_after_the_commit_flag() {
    let d = TempDir::new("crash");
    let prog = build(&d, "planted", &[]);
    for variant in ["late", "noflush", "nofence"] {
        let o = crash(&d, &prog, variant);
        assert_eq!(o.status.code(), Some(1), "{variant}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["failed"], true, "{variant}: {v}");
        let f = &v["failure"];
        assert!(
            f["output"].as_str().unwrap().contains("inconsistent"),
            "{variant}: {v}"
        );
        assert!(v["reproduce"].as_str().unwrap().contains("--seed 1"), "{v}");
        // The failing image is kept and fails the check again.
        let img = f["image"].as_str().unwrap();
        let again = Command::new(&prog)
            .arg("check")
            .env("PMLAB_PM_FILE", img)
            .env("PMLAB_PM_POOL_SIZE", POOL_SIZE)
            .output()
            .unwrap();
        assert_eq!(again.status.code(), Some(1), "{variant}");
        if variant == "noflush" {
            // The payload line (offset 0xc0 of the record) was lost.
            assert!(!f["lost"].as_array().unwrap().is_empty(), "{v}");
        }
    }
    let o = crash(&d, &prog, "ok");
    assert_eq!(o.status.code(), Some(0), "ok: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["failed"], false);
    // Every subset of the pending lines at every fence: 1 + 2 + 2 + 2.
    assert!(v["images"].as_u64().unwrap() >= 4, "{v}");
}

#[test]
fn check_and_crash_find_a_pmemobj_store_outside_the_transaction() {
    let d = TempDir::new("pmobj");
    let ok = Command::new("sh")
        .args([
            "-c",
            "echo '#include <libpmemobj.h>' | cc -x c -E - >/dev/null 2>&1",
        ])
        .status()
        .unwrap();
    if !ok.success() {
        eprintln!("skipped: libpmemobj-dev is not installed");
        return;
    }
    let prog = build(&d, "pmobj_planted", &["-lpmemobj"]);
    for (variant, findings) in [("txlog", true), ("ok", false)] {
        let t = d.path(&format!("{variant}.pmt"));
        let pool = d.path(&format!("{variant}.pool"));
        let o = Command::new(PMLAB)
            .args(["trace", "--sites", "-o"])
            .arg(&t)
            .arg("--")
            .arg(&prog)
            .arg(&pool)
            .arg(variant)
            .current_dir(&d)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let (code, v) = check_json(&d, &t);
        if findings {
            assert_eq!(code, Some(1), "{v}");
            assert!(
                kinds(&v).contains(&"store-not-in-tx-log".to_string()),
                "{v}"
            );
        } else {
            assert_eq!(code, Some(0), "{v}");
        }
        // pmlab crash with libpmemobj's recovery and the program's
        // invariant: the unlogged store survives a rolled-back transaction.
        let check = format!("PMEM_IS_PMEM_FORCE=1 {} {{}} check", prog.display());
        let o = Command::new(PMLAB)
            .args(["crash", "--json", "--budget", "100", "--points", "40"])
            .args(["--check", &check, "--dir"])
            .arg(d.path(&format!("crash-{variant}")))
            .arg("--")
            .arg(&prog)
            .arg(d.path(&format!("crash-{variant}.pool")))
            .arg(variant)
            .current_dir(&d)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim())
            .unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
        eprintln!("pmobj_planted {variant}: {} crash images", v["images"]);
        assert_eq!(v["failed"], findings, "{variant}: {v}");
        assert_eq!(o.status.code(), Some(findings as i32), "{variant}: {v}");
        if findings {
            let out = v["failure"]["output"].as_str().unwrap();
            assert!(out.contains("inconsistent"), "{v}");
        }
    }
}

#[test]
fn check_reads_hand_made_text_traces() {
    let d = TempDir::new("text");
    d.write(
        "t.txt",
        "0 0 W 0x1000 8\n1 0 CLWB 0x1000 64\n2 0 W 0x2000 8\n3 0 SFENCE 0 0\n",
    );
    let (code, v) = check_json(&d, &d.path("t.txt"));
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(kinds(&v), vec!["not-flushed-at-exit".to_string()], "{v}");
    assert_eq!(v["groups"][0]["addr"], "0x2000", "{v}");
    d.write("bad.txt", "0 0 JUMP 0x1000 8\n");
    let o = pmlab(&d, &["check", "bad.txt"]);
    assert_one_line_error(&o, "bad.txt");
    assert!(stderr(&o).contains("JUMP"), "{}", stderr(&o));
}

#[test]
fn bad_input_fails_in_one_line() {
    let d = TempDir::new("bad");
    let o = pmlab(&d, &["check", "missing.pmt"]);
    assert_one_line_error(&o, "missing.pmt");
    d.write("junk.pmt", "not a trace at all, no magic here");
    let o = pmlab(&d, &["check", "junk.pmt"]);
    assert_one_line_error(&o, "junk.pmt");
    let o = pmlab(
        &d,
        &["crash", "--check", "true", "--points", "zero", "--", "true"],
    );
    assert_one_line_error(&o, "--points");
    let o = pmlab(
        &d,
        &["crash", "--check", "true", "--budget", "0", "--", "true"],
    );
    assert_one_line_error(&o, "--budget");
    // A trace without data or a file-backed pool cannot give images.
    let mut w = pmlab_trace::binary::Writer::new(Vec::new()).unwrap();
    w.write(&pmlab_trace::Record::new(
        0,
        0,
        pmlab_trace::Op::SFence,
        0,
        0,
    ))
    .unwrap();
    d.write("nodata.pmt", w.finish().unwrap());
    let o = pmlab(&d, &["crash", "--check", "true", "--trace", "nodata.pmt"]);
    assert_one_line_error(&o, "file-backed");
}
