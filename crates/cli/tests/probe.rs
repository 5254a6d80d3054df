//! Integration tests of the profiler (issue 5): `pmlab probe` with the
//! built binary, each in a fresh temporary directory. Sweeps are small so
//! the file runs in a few seconds; the full suites are benchmarks
//! (`bench/probe-suite.sh`). No test asserts a timing.

mod common;

use common::{assert_one_line_error, pmlab, stderr, stdout, TempDir};

/// (x, y) rows of the text output of a single probe.
fn rows(out: &str) -> Vec<(f64, f64)> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let mut it = l.split_whitespace();
            (
                it.next().unwrap().parse().unwrap(),
                it.next().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn ptrchase_on_the_simulator_shows_the_16k_read_buffer() {
    let d = TempDir::new("ptr");
    let o = pmlab(
        &d.0,
        &[
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--region",
            "4KiB..64KiB",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = rows(&stdout(&o));
    assert_eq!(
        r.iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![4096.0, 8192.0, 16384.0, 32768.0, 65536.0]
    );
    // Flat while the region fits the 16 KiB buffer, higher past it.
    assert_eq!(r[0].1, r[2].1);
    assert!(r[3].1 > 1.2 * r[2].1, "{r:?}");
}

#[test]
fn block_sweep_and_stride_and_overwrite_run_on_the_simulator() {
    let d = TempDir::new("misc");
    let o = pmlab(
        &d.0,
        &[
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--region",
            "64KiB",
            "--block",
            "64B..1KiB",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = rows(&stdout(&o));
    assert_eq!(r.len(), 5);
    // Larger blocks amortise the 256 B entry: latency per line falls.
    assert!(r[0].1 > r[2].1, "{r:?}");
    let o = pmlab(
        &d.0,
        &[
            "probe",
            "stride",
            "--target",
            "sim:optane-6dimm",
            "--stride",
            "1KiB..16KiB",
            "--size",
            "256B",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let pts = v["curves"][0]["points"].as_array().unwrap();
    assert_eq!(pts.len(), 5);
    let bw: Vec<f64> = pts.iter().map(|p| p["y"].as_f64().unwrap()).collect();
    // 6 DIMMs at 4 KiB: a 4 KiB stride spreads over all, 8 KiB over half.
    assert!(bw[2] > 1.3 * bw[3], "{bw:?}");
    let o = pmlab(
        &d.0,
        &[
            "probe",
            "overwrite",
            "--target",
            "sim:optane-1dimm",
            "--region",
            "256B",
            "--iterations",
            "30000",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("median interval: 14000 iterations"), "{out}");
}

#[test]
fn small_suite_writes_results_plots_and_report_then_infer_reads_them() {
    let d = TempDir::new("all");
    let o = pmlab(
        &d.0,
        &[
            "probe",
            "all",
            "--target",
            "sim:optane-1dimm",
            "--max-region",
            "256KiB",
            "--overwrite-total",
            "4MiB",
            "--no-profile",
            "--out",
            "res",
            "--plot",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report = stdout(&o);
    assert!(report.contains("read buffer 1:    16K"), "{report}");
    assert!(report.contains("entry 256B"), "{report}");
    // LENS's store chase (one fence per run): the WPQ and the LSQ.
    assert!(report.contains("write buffer 1:   512B"), "{report}");
    assert!(report.contains("write buffer 2:     4K"), "{report}");
    for f in [
        "results.json",
        "report.txt",
        "ptrchase-region-load.csv",
        "ptrchase-region-load.svg",
        "ptrchase-region-load.png",
        "overwrite.png",
    ] {
        assert!(d.path("res").join(f).is_file(), "missing {f}");
    }
    let png = std::fs::read(d.path("res/ptrchase-region-load.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let svg = std::fs::read_to_string(d.path("res/ptrchase-region-load.svg")).unwrap();
    assert!(svg.contains(">16K</text>"), "inflection not marked");
    let o = pmlab(&d.0, &["probe", "infer", "res", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["read_buffers"][0]["capacity"].as_f64(), Some(16384.0));
    assert_eq!(v["inclusive"].as_bool(), Some(true));
    // One read buffer only: no NVRAM profile can be written, and it says why.
    let o = pmlab(&d.0, &["probe", "infer", "res"]);
    assert_one_line_error(&o, "fewer than two read buffers");
}

#[test]
fn infer_writes_a_profile_the_simulator_accepts() {
    // A result set with two buffers (16 KiB, 1 MiB) and 256 B entries,
    // small enough for the fit to simulate quickly.
    let d = TempDir::new("infer");
    let load: Vec<String> = (10..=22)
        .map(|e| {
            let x = 1u64 << e;
            let y = if x <= 16384 {
                172.0
            } else if x <= 1 << 20 {
                290.0
            } else {
                330.0
            };
            format!(r#"{{"x":{x},"y":{y},"lo":{y},"hi":{y}}}"#)
        })
        .collect();
    // Extra cost per line halves with each block doubling up to the entry
    // size (256 B at the first level, 1 KiB at the second), then stays.
    let y1 = |x: f64| 172.0 + 100.0 * (256.0 / x).max(1.0);
    let y2 = |x: f64| y1(x) + 100.0 * (1024.0 / x).max(1.0);
    let block = |f: &dyn Fn(f64) -> f64| -> String {
        let pts: Vec<String> = [64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0]
            .iter()
            .map(|&x| {
                let y = f(x);
                format!(r#"{{"x":{x},"y":{y},"lo":{y},"hi":{y}}}"#)
            })
            .collect();
        pts.join(",")
    };
    let curve = |id: &str, kind: &str, params: &str, pts: &str| {
        format!(
            r#"{{"id":"{id}","kind":"{kind}","op":"load","params":{{{params}}},"x_label":"x","y_label":"y","points":[{pts}]}}"#
        )
    };
    let json = format!(
        r#"{{"version":"0","target":"synthetic","description":"hand-made","noisy":false,"seconds":{{}},"curves":[{},{},{}]}}"#,
        curve(
            "ptrchase-region-load",
            "ptrchase-region",
            r#""block":64"#,
            &load.join(",")
        ),
        curve("b1", "ptrchase-block", r#""region":65536"#, &block(&y1)),
        curve("b2", "ptrchase-block", r#""region":4194304"#, &block(&y2)),
    );
    std::fs::create_dir_all(d.path("res")).unwrap();
    std::fs::write(d.path("res/results.json"), json).unwrap();
    let o = pmlab(&d.0, &["probe", "infer", "res"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let toml = stdout(&o);
    assert!(toml.contains("rmw_bytes = \"16KiB\""), "{toml}");
    assert!(toml.contains("ait_buffer_bytes = \"1MiB\""), "{toml}");
    assert!(toml.contains("xpline_bytes = \"256B\""), "{toml}");
    assert!(toml.contains("ait_entry_bytes = \"1KiB\""), "{toml}");
    std::fs::write(d.path("profile.toml"), &toml).unwrap();
    let o = pmlab(&d.0, &["sim", "show", "--config", "profile.toml"]);
    assert!(
        o.status.success(),
        "simulator rejected the profile: {}",
        stderr(&o)
    );
}

#[test]
fn host_ptrchase_runs_and_reports_spread() {
    let d = TempDir::new("host");
    let o = pmlab(
        &d.0,
        &[
            "probe",
            "ptrchase",
            "--target",
            "host",
            "--region",
            "4KiB..16KiB",
            "--repeats",
            "3",
            "--min-lines",
            "20000",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["noisy"].as_bool(), Some(true));
    assert!(v["description"].as_str().unwrap().starts_with("host:"));
    for p in v["curves"][0]["points"].as_array().unwrap() {
        let (y, lo, hi) = (
            p["y"].as_f64().unwrap(),
            p["lo"].as_f64().unwrap(),
            p["hi"].as_f64().unwrap(),
        );
        assert!(y > 0.0 && lo <= y && y <= hi, "{p}");
    }
}

#[test]
fn bad_input_gets_one_line_errors() {
    let d = TempDir::new("bad");
    let cases: &[(&[&str], &str)] = &[
        (
            &["probe", "ptrchase", "--target", "gpu"],
            "unknown --target 'gpu'",
        ),
        (
            &["probe", "ptrchase", "--target", "sim:nonesuch"],
            "nonesuch",
        ),
        (
            &[
                "probe",
                "ptrchase",
                "--target",
                "sim:optane-1dimm",
                "--region",
                "1MiB..4KiB",
            ],
            "--region",
        ),
        (
            &[
                "probe",
                "ptrchase",
                "--target",
                "sim:optane-1dimm",
                "--block",
                "100B",
                "--region",
                "4KiB",
            ],
            "64 B lines",
        ),
        (
            &[
                "probe",
                "ptrchase",
                "--target",
                "sim:optane-1dimm",
                "--op",
                "fly",
            ],
            "unknown --op 'fly'",
        ),
        (
            &["probe", "ptrchase", "--target", "host", "--mem", "tape"],
            "unknown memory kind 'tape'",
        ),
        (
            &[
                "probe",
                "stride",
                "--target",
                "sim:optane-1dimm",
                "--stride",
                "256B",
                "--size",
                "1KiB",
            ],
            "exceeds the stride",
        ),
        (
            &[
                "probe",
                "overwrite",
                "--target",
                "sim:optane-1dimm",
                "--iterations",
                "0",
            ],
            "at least 1",
        ),
        (
            &["probe", "infer", "nowhere"],
            "run `pmlab probe all --out DIR` first",
        ),
        (
            &[
                "probe",
                "ptrchase",
                "--target",
                "sim:optane-1dimm",
                "--plot",
            ],
            "--plot needs --out",
        ),
    ];
    for (args, needle) in cases {
        let o = pmlab(&d.0, args);
        assert_one_line_error(&o, needle);
    }
    std::fs::write(d.path("junk.json"), "{not json").unwrap();
    let o = pmlab(&d.0, &["probe", "infer", "junk.json"]);
    assert_one_line_error(&o, "not a pmlab probe result set");
}
