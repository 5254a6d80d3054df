//! Integration tests of `pmlab sim` (issue 4): each test works in a fresh
//! temporary directory and runs the built `pmlab` binary.

mod common;

use std::process::{Command, Output};

use common::{assert_one_line_error, pmlab, TempDir, PMLAB};

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "pmlab failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(out)).expect("valid JSON")
}

const TEXT_TRACE: &str = "# time thread op addr size\n\
0 0 R 0x1000 64\n\
10 0 NT 0x2000 64\n\
11 0 SFENCE 0 0\n\
20 0 W 0x3000 128\n\
21 0 CLWB 0x3000 64\n\
22 0 SFENCE 0 0\n\
30 1 R 0x1000 64\n\
31 0 TXBEGIN 1 0\n";

#[test]
fn presets_lists_the_six_presets() {
    let d = TempDir::new("presets");
    let out = ok(&pmlab(&d.0, &["sim", "presets"]));
    for p in [
        "ddr4-2666",
        "optane-1dimm",
        "optane-6dimm",
        "cxl-type3",
        "slow-dram",
        "hops-paper",
    ] {
        assert!(out.contains(p), "{p} missing from: {out}");
    }
    let v = json(&pmlab(&d.0, &["sim", "presets", "--json"]));
    assert_eq!(v.as_array().unwrap().len(), 6);
}

#[test]
fn show_prints_every_parameter_with_its_source() {
    let d = TempDir::new("show");
    let out = ok(&pmlab(&d.0, &["sim", "show", "optane-1dimm"]));
    assert!(
        out.contains("controller.dimm.rmw_bytes") && out.contains("16KiB"),
        "{out}"
    );
    assert!(
        out.contains("source: LENS III-C: 16 KiB SRAM RMW buffer"),
        "{out}"
    );
    let v = json(&pmlab(&d.0, &["sim", "show", "ddr4-2666", "--json"]));
    let params = v["parameters"].as_array().unwrap();
    let cl = params.iter().find(|p| p["name"] == "cl").unwrap();
    assert_eq!(cl["value"], "19");
    assert!(cl["source"].as_str().unwrap().contains("19-19-19"));
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "show", "optane"]),
        "unknown preset 'optane'",
    );
}

#[test]
fn replays_a_text_trace_on_every_preset_and_mode() {
    let d = TempDir::new("replay");
    let t = d.write("t.txt", TEXT_TRACE.as_bytes());
    for preset in [
        "ddr4-2666",
        "optane-1dimm",
        "optane-6dimm",
        "cxl-type3",
        "slow-dram",
        "hops-paper",
    ] {
        for mode in ["closed", "open:4", "timed"] {
            let v = json(&pmlab(
                &d.0,
                &[
                    "sim",
                    "--preset",
                    preset,
                    "--mode",
                    mode,
                    "--json",
                    t.to_str().unwrap(),
                ],
            ));
            assert_eq!(v["requests"], 7, "{preset} {mode}");
            assert_eq!(v["skipped"], 1);
            // One key path per value (issue 15), with its unit beside.
            let stats = &v["stats"];
            assert_eq!(stats["latency"]["read"]["count"], 2.0, "{stats}");
            assert!(stats["latency"]["read"]["p99"].as_f64().unwrap() > 0.0);
            assert!(stats["latency"]["fence"]["count"].as_f64().is_some());
            assert_eq!(v["units"]["latency.read.p99"], "ns");
        }
    }
    let table = ok(&pmlab(
        &d.0,
        &["sim", "--preset", "optane-1dimm", t.to_str().unwrap()],
    ));
    assert!(
        table.contains("latency") && table.contains("controller.dimm0.rmw_buffer.hit_rate"),
        "{table}"
    );
    ok(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            t.to_str().unwrap(),
            "--svg",
            "tail.svg",
        ],
    ));
    let svg = std::fs::read_to_string(d.0.join("tail.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("read"), "{svg}");
    // The plot convention: --plot DIR, SVG and PNG.
    ok(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            t.to_str().unwrap(),
            "--plot",
            "plots",
        ],
    ));
    let svg = std::fs::read_to_string(d.0.join("plots/latency-tail.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("Request latency"),
        "{svg}"
    );
    let png = std::fs::read(d.0.join("plots/latency-tail.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
}

#[test]
fn binary_traces_from_gen_replay_and_parse() {
    let d = TempDir::new("gen");
    ok(&pmlab(
        &d.0,
        &[
            "sim",
            "gen",
            "random-read",
            "r.pmt",
            "--count",
            "5000",
            "--span",
            "64MiB",
        ],
    ));
    let v = json(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            "r.pmt",
            "--json",
            "--mode",
            "open:16",
        ],
    ));
    assert_eq!(v["requests"], 5000);
    assert!(v["stats"].to_string().contains("media"));
    let p = json(&pmlab(&d.0, &["sim", "r.pmt", "--parse-only", "--json"]));
    assert_eq!(p["records"], 5000);
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "gen", "zigzag", "z.pmt"]),
        "unknown pattern 'zigzag'",
    );
    assert!(!d.0.join("z.pmt").exists(), "no output file on error");
}

/// `sim gen` with threads, chunks and fences: the records are the
/// accesses split into 64 B lines, interleaved one access per thread, each
/// thread in its own region, an sfence after every K accesses of a thread.
#[test]
fn gen_writes_threaded_chunked_fenced_traces() {
    let d = TempDir::new("gen-mt");
    let v = json(&pmlab(
        &d.0,
        &[
            "sim",
            "gen",
            "seq-ntwrite",
            "t.txt",
            "--threads",
            "2",
            "--chunk",
            "128B",
            "--fence-every",
            "2",
            "--span",
            "512B",
            "--count",
            "8",
            "--format",
            "text",
            "--json",
        ],
    ));
    // 8 accesses of 2 records, and 2 fences per thread.
    assert_eq!(v["records"], 8 * 2 + 4);
    let text = std::fs::read_to_string(d.0.join("t.txt")).unwrap();
    let recs: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(recs.len(), 20, "{text}");
    // Thread 0's first access, then thread 1's (its region at 512 B).
    let addr = |r: &Vec<&str>| u64::from_str_radix(r[3].trim_start_matches("0x"), 16).unwrap();
    assert_eq!((recs[0][1], addr(&recs[0])), ("0", 0));
    assert_eq!((recs[1][1], addr(&recs[1])), ("0", 64));
    assert_eq!((recs[2][1], addr(&recs[2])), ("1", 512));
    // Each thread's second access is followed by its fence.
    let fences: Vec<&str> = recs
        .iter()
        .filter(|r| r[2] == "SFENCE")
        .map(|r| r[1])
        .collect();
    assert_eq!(fences, ["0", "1", "0", "1"]);
    assert_eq!(recs[6][2], "SFENCE");
    assert_eq!(recs[6][1], "0");
    // Sequential accesses wrap around the 512 B region: thread 0's fifth
    // access (its index 4) is at 0 again.
    assert!(recs
        .iter()
        .filter(|r| r[1] == "0" && r[2] == "NT")
        .all(|r| addr(r) < 512));
    // The trace replays.
    let v = json(&pmlab(
        &d.0,
        &["sim", "--preset", "optane-1dimm", "t.txt", "--json"],
    ));
    assert_eq!(v["requests"], 20);
    for (args, msg) in [
        (&["--chunk", "100B"][..], "--chunk must be a multiple of 64"),
        (&["--threads", "0"], "--threads must be from 1"),
        (
            &["--threads", "2", "--format", "dramsim"],
            "DRAMsim3 lines carry no thread ids",
        ),
    ] {
        let mut a = vec!["sim", "gen", "seq-read", "x.pmt"];
        a.extend_from_slice(args);
        assert_one_line_error(&pmlab(&d.0, &a), msg);
    }
}

#[test]
fn imports_lackey_and_dram_simulator_traces() {
    let d = TempDir::new("import");
    let l = d.write(
        "t.lackey",
        b"==1== Lackey\nI  04016e9a,3\n S 1ffefffd68,8\n L 04228e58,8\n M 0422a010,4\n",
    );
    let v = json(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "ddr4-2666",
            "--trace-format",
            "lackey",
            "--json",
            l.to_str().unwrap(),
        ],
    ));
    assert_eq!(v["requests"], 4);
    assert_eq!(v["trace_format"], "lackey");
    let t = d.write("t.trc", b"0x1f40 READ 12\n0x1f80 WRITE 15\nLD 0x2040\n");
    let v = json(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            "--trace-format",
            "dramsim",
            "--json",
            t.to_str().unwrap(),
        ],
    ));
    assert_eq!(v["requests"], 3);
    // Recognised without --trace-format.
    let v = json(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "ddr4-2666",
            "--json",
            l.to_str().unwrap(),
        ],
    ));
    assert_eq!(v["requests"], 4);
    let v = json(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "ddr4-2666",
            "--json",
            t.to_str().unwrap(),
        ],
    ));
    assert_eq!(v["requests"], 3);
    assert_eq!(v["trace_format"], "dramsim");
    ok(&pmlab(
        &d.0,
        &[
            "sim",
            "gen",
            "seq-write",
            "w.trc",
            "--count",
            "100",
            "--format",
            "dramsim",
        ],
    ));
    let v = json(&pmlab(
        &d.0,
        &[
            "sim",
            "--preset",
            "optane-1dimm",
            "--trace-format",
            "dramsim",
            "--json",
            "w.trc",
        ],
    ));
    assert_eq!(v["requests"], 100);
}

#[test]
fn malformed_traces_get_file_and_line_or_offset() {
    let d = TempDir::new("badtrace");
    d.write("bad.txt", b"0 0 R 0x1000 64\n1 0 JUMP 0x1000 64\n");
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--preset", "ddr4-2666", "bad.txt"]),
        "bad.txt:2",
    );
    let l = d.write("bad.lackey", b"I  0401,3\n Q 0401,3\n");
    assert_one_line_error(
        &pmlab(
            &d.0,
            &[
                "sim",
                "--preset",
                "ddr4-2666",
                "--trace-format",
                "lackey",
                l.to_str().unwrap(),
            ],
        ),
        "bad.lackey:2: unknown access kind 'Q'",
    );
    let r = d.write("bad.trc", b"0x10 READ 1\nnonsense here\n");
    assert_one_line_error(
        &pmlab(
            &d.0,
            &[
                "sim",
                "--preset",
                "ddr4-2666",
                "--trace-format",
                "dramsim",
                r.to_str().unwrap(),
            ],
        ),
        "bad.trc:2",
    );
    // A binary trace cut inside a record.
    ok(&pmlab(
        &d.0,
        &["sim", "gen", "random-read", "r.pmt", "--count", "100"],
    ));
    let bytes = std::fs::read(d.0.join("r.pmt")).unwrap();
    d.write("cut.pmt", &bytes[..bytes.len() - 1]);
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--preset", "ddr4-2666", "cut.pmt"]),
        "offset",
    );
    let mut corrupt = bytes.clone();
    corrupt[8] = 99; // version
    d.write("v.pmt", &corrupt);
    assert_one_line_error(
        &pmlab(
            &d.0,
            &[
                "sim",
                "--preset",
                "ddr4-2666",
                "v.pmt",
                "--trace-format",
                "pmt",
            ],
        ),
        "version 99",
    );
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--preset", "ddr4-2666", "missing.pmt"]),
        "missing.pmt",
    );
    assert_one_line_error(
        &pmlab(
            &d.0,
            &[
                "sim",
                "--preset",
                "ddr4-2666",
                "r.pmt",
                "--trace-format",
                "csv",
            ],
        ),
        "unknown trace format 'csv'",
    );
}

#[test]
fn bad_configs_and_flags_get_one_line_errors() {
    let d = TempDir::new("badcfg");
    let t = d.write("t.txt", TEXT_TRACE.as_bytes());
    let t = t.to_str().unwrap();
    let base = "[controller]\nimpl = \"imc\"\n[controller.dimm]\nimpl = \"ddr4\"\n";
    d.write("good.toml", base.as_bytes());
    ok(&pmlab(&d.0, &["sim", "--config", "good.toml", t]));
    d.write("key.toml", format!("{base}tcl = 3\n").as_bytes());
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--config", "key.toml", t]),
        "unknown parameter 'controller.dimm.tcl'",
    );
    d.write("impl.toml", base.replace("ddr4", "ddr5").as_bytes());
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--config", "impl.toml", t]),
        "valid ones are ddr4, nvram, cxl, fixed-latency",
    );
    d.write("type.toml", format!("{base}row_bytes = true\n").as_bytes());
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--config", "type.toml", t]),
        "'controller.dimm.row_bytes'",
    );
    d.write("syntax.toml", b"[controller\nimpl = 1\n");
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--config", "syntax.toml", t]),
        "syntax.toml: line 1",
    );
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--config", "nope.toml", t]),
        "cannot read config nope.toml",
    );
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--preset", "optane-9dimm", t]),
        "valid presets are",
    );
    assert_one_line_error(&pmlab(&d.0, &["sim", t]), "pass --preset NAME");
    assert_one_line_error(
        &pmlab(
            &d.0,
            &["sim", "--preset", "ddr4-2666", "--mode", "open:0", t],
        ),
        "open:N",
    );
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--preset", "ddr4-2666"]),
        "no trace given",
    );
    // A command word before the trace (`pmlab sim run t.txt`): clap reads
    // it backwards; the line says what `pmlab sim` takes.
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "run", t]),
        "takes either one of its commands (presets, show, validate, gen)",
    );
    // A missing argument is named on the line (clap lists it below).
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "gen"]),
        "not provided: <PATTERN>, <OUT>",
    );
}

#[test]
fn validation_meets_the_goal() {
    let d = TempDir::new("validate");
    let v = json(&pmlab(&d.0, &["sim", "validate", "--quick", "--json"]));
    let acc = v["average_accuracy_pct"].as_f64().unwrap();
    assert!(acc >= 90.0, "average accuracy {acc}");
    for s in v["shapes"].as_array().unwrap() {
        assert_eq!(s["reproduced"], true, "{s}");
    }
    // Each published figure within its own tolerance, named when not.
    for f in v["figures"].as_array().unwrap() {
        let (sim, publ) = (
            f["simulated"].as_f64().unwrap(),
            f["published"].as_f64().unwrap(),
        );
        let err = (sim - publ).abs() / publ * 100.0;
        let tol = f["tolerance_pct"].as_f64().unwrap();
        assert!(
            err <= tol,
            "{} on {}: error {err:.1}% > {tol}%",
            f["name"],
            f["preset"]
        );
    }
    ok(&pmlab(
        &d.0,
        &[
            "sim", "validate", "--quick", "--write", "v.md", "--plot", "img",
        ],
    ));
    let md = std::fs::read_to_string(d.0.join("v.md")).unwrap();
    assert!(md.contains("| pointer chase, 16 KiB region"), "{md}");
    assert!(md.contains("(img/pointer-chase.svg)"), "{md}");
    assert!(md.contains("--plot img"), "{md}");
    let svg = std::fs::read_to_string(d.0.join("img/pointer-chase.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("LENS (real Optane)"));
    let png = std::fs::read(d.0.join("img/pointer-chase.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
}

#[test]
fn reads_a_trace_from_a_pipe() {
    use std::io::Write;
    let d = TempDir::new("pipe");
    let mut child = Command::new(PMLAB)
        .args(["sim", "--preset", "ddr4-2666", "--json", "/dev/stdin"])
        .current_dir(&d.0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(TEXT_TRACE.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(json(&out)["requests"], 7);
}

#[test]
fn cached_stores_write_back_at_flushes() {
    let d = TempDir::new("stores");
    d.write(
        "c.txt",
        b"0 0 W 0x40 8\n1 0 W 0x48 8\n2 0 CLWB 0x40 64\n3 0 SFENCE 0 0\n",
    );
    let bytes = |extra: &[&str]| {
        let mut args = vec!["sim", "--preset", "optane-1dimm", "--json", "c.txt"];
        args.extend_from_slice(extra);
        let v = json(&pmlab(&d.0, &args));
        v["stats"]["bytes_written"].as_f64().unwrap()
    };
    assert_eq!(bytes(&[]), 128.0, "each W is a memory write");
    assert_eq!(
        bytes(&["--stores", "cached"]),
        64.0,
        "one write-back at the clwb"
    );
    assert_one_line_error(
        &pmlab(
            &d.0,
            &[
                "sim",
                "--preset",
                "optane-1dimm",
                "c.txt",
                "--stores",
                "sometimes",
            ],
        ),
        "sometimes",
    );
}

/// Real `valgrind --tool=lackey --trace-mem=yes` output is recognised and
/// replayed (skipped where valgrind is not installed).
#[test]
fn replays_real_lackey_output() {
    let d = TempDir::new("valgrind");
    if !common::require_tool("valgrind", "valgrind") {
        return;
    }
    let st = Command::new("valgrind")
        .args([
            "--tool=lackey",
            "--trace-mem=yes",
            "--log-file=true.lackey",
            "/bin/true",
        ])
        .current_dir(&d.0)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let v = json(&pmlab(
        &d.0,
        &["sim", "--preset", "optane-1dimm", "--json", "true.lackey"],
    ));
    assert!(v["requests"].as_u64().unwrap() > 1000, "{}", v["requests"]);
}

/// An empty or zero-record trace is one error line (exit 2), never a table
/// of NaN (issue 15), for the replay, the persistency replay and analyze.
#[test]
fn empty_traces_are_errors() {
    let d = TempDir::new("empty");
    d.write("e.txt", b"");
    d.write("c.txt", b"# a header and nothing else\n\n");
    let w = pmlab_trace::binary::Writer::new(Vec::new()).unwrap();
    d.write("e.pmt", w.finish().unwrap());
    for t in ["e.txt", "c.txt", "e.pmt"] {
        for args in [
            vec!["sim", "--preset", "ddr4-2666", t],
            vec!["sim", "--preset", "ddr4-2666", "--json", t],
            vec!["sim", "--preset", "optane-1dimm", "--persistency", "all", t],
            vec!["analyze", t],
            vec!["analyze", "--json", t],
        ] {
            let o = pmlab(&d.0, &args);
            assert_one_line_error(&o, &format!("{t}: the trace holds no records"));
            assert!(o.stdout.is_empty(), "{args:?}");
        }
    }
    // Records, but no request to the simulated memory.
    d.write("m.txt", b"0 0 TXBEGIN 1 0\n1 0 R 0x40 64 dram\n");
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--preset", "ddr4-2666", "m.txt"]),
        "none of its 2 records is a request to the simulated memory",
    );
}

/// Files in no known format get one error naming the formats and the
/// override.
#[test]
fn unknown_trace_formats_are_one_error() {
    let d = TempDir::new("unknown");
    d.write("t.csv", b"time,op,addr\n1,R,0x40\n");
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "--preset", "ddr4-2666", "t.csv"]),
        "t.csv: not a trace in a format pmlab knows (pmt, text, lackey, dramsim, whisper)",
    );
    assert_one_line_error(
        &pmlab(&d.0, &["analyze", "t.csv"]),
        "pass --trace-format NAME",
    );
}

/// Every `--help` of sim, its subcommands and analyze ends with a worked
/// example (issue 15).
#[test]
fn help_ends_with_a_worked_example() {
    let d = TempDir::new("help");
    for cmd in [
        &["sim", "--help"][..],
        &["sim", "presets", "--help"],
        &["sim", "show", "--help"],
        &["sim", "validate", "--help"],
        &["sim", "gen", "--help"],
        &["analyze", "--help"],
    ] {
        let out = ok(&pmlab(&d.0, cmd));
        let tail = out.rsplit_once("Example").map(|(_, t)| t).unwrap_or("");
        assert!(
            tail.lines().any(|l| l.trim_start().starts_with("pmlab ")),
            "{cmd:?}: no example at the end:\n{out}"
        );
        assert!(!out.contains("--svg"), "{cmd:?}: --svg is hidden now");
    }
    assert!(ok(&pmlab(&d.0, &["sim", "--help"])).contains("--plot <DIR>"));
}
