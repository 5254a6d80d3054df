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
    // Curves are keyed by id: one key path reaches the points.
    let pts = v["curves"]["stride-interleave-store"]["points"]
        .as_array()
        .unwrap();
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
            "res/plots",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // --json: everything under one key path each, and no progress text.
    assert_eq!(stderr(&o), "");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["inferred"]["read_buffers"][0]["capacity"].as_f64(),
        Some(16384.0)
    );
    let load = &v["curves"]["ptrchase-region-load"];
    assert_eq!(load["op"].as_str(), Some("load"));
    assert!(load["points"].as_array().unwrap().len() >= 5);
    let report = std::fs::read_to_string(d.path("res/report.txt")).unwrap();
    assert!(report.contains("read buffer 1:  16 KiB"), "{report}");
    assert!(report.contains("entry 256 B"), "{report}");
    // LENS's store chase (one fence per run): the WPQ and the LSQ.
    assert!(report.contains("write buffer 1:   512 B"), "{report}");
    assert!(report.contains("write buffer 2:   4 KiB"), "{report}");
    for f in [
        "results.json",
        "report.txt",
        "ptrchase-region-load.csv",
        "plots/ptrchase-region-load.svg",
        "plots/ptrchase-region-load.png",
        "plots/overwrite.png",
    ] {
        assert!(d.path("res").join(f).is_file(), "missing {f}");
    }
    // CSV: the header, with units, is the first line.
    let csv = std::fs::read_to_string(d.path("res/ptrchase-region-load.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("PC-region size (bytes),load latency per cache line (ns),min,max")
    );
    assert_eq!(lines.next().unwrap().split(',').count(), 4);
    let png = std::fs::read(d.path("res/plots/ptrchase-region-load.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let svg = std::fs::read_to_string(d.path("res/plots/ptrchase-region-load.svg")).unwrap();
    assert!(svg.contains(">16 KiB</text>"), "inflection not marked");
    // Titles and ticks in words and units, not raw byte counts.
    assert!(
        svg.contains(">Pointer chasing: load latency per line by region size (64 B blocks)</text>"),
        "{svg}"
    );
    assert!(svg.contains(">256 KiB</text>") && !svg.contains(">262144<"));
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
    let points = v["curves"]["ptrchase-region-load"]["points"]
        .as_array()
        .unwrap();
    assert_eq!(points.len(), 3);
    for p in points {
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
        // Clap's own errors: unknown flag, missing value, bad value,
        // negative number (given to the option, not taken for a flag).
        (
            &["probe", "ptrchase", "--regoin", "4KiB"],
            "unexpected argument '--regoin' found (did you mean '--region'?); see 'pmlab probe ptrchase --help'",
        ),
        (
            &["probe", "ptrchase", "--plot"],
            "a value is required for '--plot <DIR>'",
        ),
        (
            &["probe", "stride", "--outstanding", "many"],
            "invalid value 'many' for '--outstanding <OUTSTANDING>'",
        ),
        (
            &["probe", "ptrchase", "--fence", "never"],
            "possible values: block, pass, run",
        ),
        (
            &["probe", "ptrchase", "--outstanding", "-5"],
            "invalid value '-5' for '--outstanding <OUTSTANDING>'",
        ),
        (&["probe", "overwrite", "--cpu", "-1"], "invalid value '-1'"),
        (
            &["probe"],
            "'pmlab probe' needs a command: all, ptrchase, overwrite, stride, infer",
        ),
        (
            &["probe", "ptrchas"],
            "unrecognized subcommand 'ptrchas' (did you mean 'ptrchase'?)",
        ),
        (&["--bogus"], "unexpected argument '--bogus' found"),
    ];
    for (args, needle) in cases {
        let o = pmlab(&d.0, args);
        assert_one_line_error(&o, needle);
    }
    std::fs::write(d.path("junk.json"), "{not json").unwrap();
    let o = pmlab(&d.0, &["probe", "infer", "junk.json"]);
    assert_one_line_error(&o, "not a pmlab probe result set");
}

#[test]
fn clap_errors_never_give_the_negative_number_tip() {
    let d = TempDir::new("neg");
    let o = pmlab(&d.0, &["probe", "ptrchase", "--repeats", "-3"]);
    assert_one_line_error(&o, "'-3'");
    assert!(!stderr(&o).contains("tip"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("'-- -3'"), "{}", stderr(&o));
}

#[test]
fn help_and_version_print_normally_and_help_ends_with_an_example() {
    let d = TempDir::new("help");
    for args in [
        &["probe", "--help"][..],
        &["probe", "all", "--help"],
        &["probe", "ptrchase", "--help"],
        &["probe", "overwrite", "--help"],
        &["probe", "stride", "--help"],
        &["probe", "infer", "--help"],
    ] {
        let o = pmlab(&d.0, args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("Usage: pmlab probe"), "{args:?}: {out}");
        // The worked example is the last paragraph and runs pmlab.
        let last = out.trim_end().rsplit("\n\n").next().unwrap();
        assert!(
            last.starts_with("Example: ") && last.contains("\n  pmlab probe "),
            "{args:?} does not end with an example: {last}"
        );
    }
    let o = pmlab(&d.0, &["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("pmlab "), "{}", stdout(&o));
}

#[test]
fn progress_shows_as_plain_lines_only_when_asked() {
    let d = TempDir::new("progress");
    let args = [
        "probe",
        "ptrchase",
        "--target",
        "sim:optane-1dimm",
        "--region",
        "4KiB..16KiB",
    ];
    // Not a terminal: nothing on stderr by default.
    let o = pmlab(&d.0, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    // --progress: the completed stage as one plain line (no bar drawing).
    let mut with = args.to_vec();
    with.push("--progress");
    let o = pmlab(&d.0, &with);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "ptrchase-region-load: 3/3\n");
}
