//! The `pmkv` binary: exit codes, check against a model, and the short
//! kill -9 test of every engine (the long one is bench/kv-crash.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pmkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmkv"))
        .args(args)
        .output()
        .unwrap()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmkv-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn engines() -> Vec<&'static str> {
    pmlab_kv::EngineKind::ALL
        .into_iter()
        .filter(|k| k.available())
        .map(|k| k.name())
        .collect()
}

#[test]
fn check_exits_0_when_consistent_1_when_not_and_2_on_usage_errors() {
    for e in engines() {
        let d = dir(&format!("check-{e}"));
        let pool = d.join("p");
        assert!(pmkv(&["create", "-e", e, "--size", "8M", s(&pool)])
            .status
            .success());
        for (k, v) in [("a", "1"), ("b", "2"), ("a", "3")] {
            assert!(pmkv(&["set", s(&pool), k, v]).status.success());
        }
        assert_eq!(pmkv(&["del", s(&pool), "b"]).stdout, b"1\n");
        let out = pmkv(&["get", "--at", "2", s(&pool), "a"]);
        assert_eq!(out.stdout, b"1\n", "{e}");
        assert_eq!(pmkv(&["get", s(&pool), "b"]).status.code(), Some(1));
        assert_eq!(
            pmkv(&["cas", s(&pool), "a", "9", "4"]).status.code(),
            Some(1)
        );
        assert_eq!(
            pmkv(&["cas", s(&pool), "a", "3", "4"]).status.code(),
            Some(0)
        );
        let model = pmkv(&["dump", "--model", s(&pool)]);
        let mf = d.join("model");
        std::fs::write(&mf, &model.stdout).unwrap();
        let ok = pmkv(&["check", "-e", e, s(&pool), "--expect", s(&mf)]);
        assert_eq!(
            ok.status.code(),
            Some(0),
            "{e}: {}",
            String::from_utf8_lossy(&ok.stdout)
        );
        // a model that differs in one value
        let text = String::from_utf8(model.stdout)
            .unwrap()
            .replace(" 34\n", " 35\n");
        std::fs::write(&mf, text).unwrap();
        let bad = pmkv(&["check", "-e", e, s(&pool), "--expect", s(&mf)]);
        assert_eq!(bad.status.code(), Some(1), "{e}");
        let line = String::from_utf8(bad.stdout).unwrap();
        assert!(
            line.contains("inconsistent") && line.lines().count() == 1,
            "{line}"
        );
        // usage errors
        assert_eq!(
            pmkv(&["check", "-e", "nosuch", s(&pool)]).status.code(),
            Some(2)
        );
        assert_eq!(
            pmkv(&["check", s(&d.join("missing"))]).status.code(),
            Some(2)
        );
        let other = if e == "list" { "btree" } else { "list" };
        let wrong = pmkv(&["check", "-e", other, s(&pool)]);
        assert_eq!(wrong.status.code(), Some(2));
        assert_eq!(String::from_utf8_lossy(&wrong.stderr).lines().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn a_torn_header_is_reported_inconsistent_in_one_line() {
    let d = dir("torn");
    let pool = d.join("p");
    assert!(pmkv(&["create", "-e", "list", "--size", "1M", s(&pool)])
        .status
        .success());
    let mut b = std::fs::read(&pool).unwrap();
    b[17] ^= 0x10;
    std::fs::write(&pool, &b).unwrap();
    let out = pmkv(&["check", "-e", "list", s(&pool)]);
    assert_eq!(out.status.code(), Some(1));
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(
        line.contains("inconsistent") && line.contains("torn") && line.lines().count() == 1,
        "{line}"
    );
    // without -e the engine cannot be read from a torn header either
    let out = pmkv(&["check", s(&pool)]);
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn kill_9_loses_no_acknowledged_write_in_any_engine() {
    let d = dir("crash");
    let seed = std::env::var("PMKV_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261124u64);
    for e in engines() {
        let groups: &[&str] = if e == "list" || e == "btree" {
            &["1", "4"]
        } else {
            &["1"]
        };
        for g in groups {
            let runs = if *g == "1" { "12" } else { "6" };
            let out = pmkv(&[
                "crashtest",
                "-e",
                e,
                "--runs",
                runs,
                "--seed",
                &seed.to_string(),
                "--group",
                g,
                "--dir",
                s(&d),
                "--json",
            ]);
            assert!(
                out.status.success(),
                "{e} group {g} seed {seed}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["runs"].as_u64(), runs.parse().ok());
            assert!(
                v["acked"].as_u64().unwrap() > 0,
                "{e}: nothing acknowledged: {v}"
            );
            assert!(
                v["kills"].as_u64().unwrap() > 0,
                "{e}: no child was killed: {v}"
            );
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn kill_9_catches_a_planted_early_acknowledgement() {
    let d = dir("planted");
    for e in ["list", "btree"] {
        let out = pmkv(&[
            "crashtest",
            "-e",
            e,
            "--runs",
            "20",
            "--seed",
            "7",
            "--group",
            "64",
            "--dir",
            s(&d),
            "--plant-early-ack",
        ]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{e}: the planted bug went unnoticed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("acknowledged through version") && err.contains("reproduce"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}
