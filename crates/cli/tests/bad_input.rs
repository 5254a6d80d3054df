//! Bad input to every quick subcommand: unknown flags, numbers out of
//! range (0, -1, 1e308, NaN, 2^64), empty, truncated, binary-garbage and
//! damaged files for every file input (traces, configs, profiles, probe
//! results), directories where files are expected, and output paths that
//! cannot be written. Each run must end within 20 s with exit code 2 and
//! one line `pmlab: error: ...` on stderr: never a panic, a signal, a hang
//! or a multi-line dump. Then the regressions this audit fixed, one test
//! each.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_one_line_error, pmlab, TempDir, PMLAB};

/// Run `pmlab args` in `dir` for at most 20 s: exit code and stderr.
/// Each run sees an empty calibration cache, as on a fresh machine: bad
/// input must be refused before any measurement, whose note would make
/// the refusal two lines (a clean-clone CI found `--llc` checked after it).
fn run_bounded(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let cache = dir.join(".fresh-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let mut child = Command::new(PMLAB)
        .args(args)
        .current_dir(dir)
        .env("XDG_CACHE_HOME", &cache)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pmlab");
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let end = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pmlab {args:?}: still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let err = reader.join().unwrap();
    assert!(!err.contains("panicked"), "pmlab {args:?} panicked: {err}");
    (status.code(), err)
}

/// `pmlab args` refuses its input cleanly: exit code 2, one error line.
fn refused(dir: &Path, args: &[&str]) {
    let (code, err) = run_bounded(dir, args);
    assert_eq!(code, Some(2), "pmlab {args:?}: exit {code:?}: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "pmlab {args:?}: not one line: {err}"
    );
    assert!(err.starts_with("pmlab: error: "), "pmlab {args:?}: {err}");
}

/// A small xorshift generator: the damage is the same on every run.
struct Damage(u64);

impl Damage {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `src` with a few bytes changed, runs of 0xff written or bytes
    /// inserted, past the first `keep` bytes.
    fn apply(&mut self, src: &[u8], keep: usize) -> Vec<u8> {
        let mut d = src.to_vec();
        for _ in 0..1 + self.below(20) {
            let p = keep + self.below(d.len() - keep);
            match self.below(3) {
                0 => d[p] = self.next() as u8,
                1 => {
                    let e = (p + 8).min(d.len());
                    d[p..e].fill(0xff)
                }
                _ => {
                    let b = self.next().to_le_bytes();
                    d.splice(p..p, b[..1 + self.below(8)].iter().copied());
                }
            }
        }
        d
    }
}

/// A scratch directory with a good trace and the bad files.
fn fixtures(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    let st = pmlab(
        &d.0,
        &["sim", "gen", "seq-write", "good.pmt", "--count", "300"],
    );
    assert!(st.status.success(), "{}", common::stderr(&st));
    let good = std::fs::read(d.0.join("good.pmt")).unwrap();
    std::fs::write(d.0.join("empty"), b"").unwrap();
    let garbage: Vec<u8> = {
        let mut g = Damage(0x5eed);
        (0..1000).map(|_| g.next() as u8).collect()
    };
    std::fs::write(d.0.join("garbage"), &garbage).unwrap();
    std::fs::write(d.0.join("trunc.pmt"), &good[..good.len() - 7]).unwrap();
    std::fs::write(d.0.join("head.pmt"), &good[..12]).unwrap();
    std::fs::create_dir(d.0.join("adir")).unwrap();
    d
}

const BAD_FILES: &[&str] = &[
    "empty",
    "garbage",
    "trunc.pmt",
    "head.pmt",
    "adir",
    "missing",
];

#[test]
fn bad_trace_files_are_refused_by_every_reader() {
    let d = fixtures("traces");
    for f in BAD_FILES {
        refused(&d.0, &["sim", "--preset", "optane-1dimm", f]);
        refused(
            &d.0,
            &["sim", "--preset", "optane-1dimm", "--persistency", "all", f],
        );
        refused(&d.0, &["analyze", f]);
        refused(&d.0, &["check", f]);
        for fmt in ["text", "lackey", "dramsim", "whisper"] {
            if *f != "empty" {
                refused(&d.0, &["analyze", "--format", fmt, f]);
            }
        }
    }
}

/// Damaged traces (bytes changed past the header) are read or refused in
/// one line by every reader, never a panic or a hang.
#[test]
fn damaged_traces_are_read_or_refused() {
    let d = fixtures("damaged");
    let good = std::fs::read(d.0.join("good.pmt")).unwrap();
    let mut g = Damage(0x9e37_79b9);
    for i in 0..25 {
        let name = format!("m{i}.pmt");
        std::fs::write(d.0.join(&name), g.apply(&good, 64)).unwrap();
        for args in [
            vec!["sim", "--preset", "optane-1dimm", &name],
            vec!["sim", "--preset", "optane-1dimm", "--mode", "open:4", &name],
            vec![
                "sim",
                "--preset",
                "hops-paper",
                "--persistency",
                "all",
                &name,
            ],
            vec!["analyze", &name],
            vec!["check", &name],
        ] {
            let (code, err) = run_bounded(&d.0, &args);
            match code {
                Some(0) => {}
                // `check` exits 1 when it has findings.
                Some(1) if args[0] == "check" => {}
                Some(2) => assert_eq!(err.lines().count(), 1, "{args:?}: {err}"),
                _ => panic!("{args:?}: exit {code:?}: {err}"),
            }
        }
    }
}

#[test]
fn bad_configs_and_result_sets_are_refused() {
    let d = fixtures("configs");
    for f in BAD_FILES {
        refused(&d.0, &["sim", "--config", f, "good.pmt"]);
        refused(&d.0, &["sim", "show", "--config", f]);
        refused(&d.0, &["probe", "infer", f]);
    }
    // A result directory whose results.json is empty, garbage or foreign.
    for (name, body) in [
        ("r-empty", &b""[..]),
        ("r-garbage", &[0xff, 0xfe, 0, 1][..]),
        ("r-foreign", &b"{\"curves\": [], \"target\": \"x\"}"[..]),
    ] {
        std::fs::create_dir(d.0.join(name)).unwrap();
        std::fs::write(d.0.join(name).join("results.json"), body).unwrap();
        refused(&d.0, &["probe", "infer", name]);
    }
}

#[test]
fn bad_flags_are_refused() {
    let d = fixtures("flags");
    fn sim<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["sim", "--preset", "optane-1dimm"];
        v.extend_from_slice(extra);
        v.push("good.pmt");
        v
    }
    let cases: Vec<Vec<&str>> = vec![
        vec!["--bogus"],
        vec!["sim", "--bogus"],
        vec!["analyze"],
        sim(&["--mode", "open:0"]),
        sim(&["--mode", "open:-1"]),
        sim(&["--mode", "open:18446744073709551616"]),
        sim(&["--mode", "open:nan"]),
        sim(&["--persistency", "hops@0"]),
        sim(&["--persistency", "hops@99999999999"]),
        sim(&["--persistency", ""]),
        sim(&["--trace-format", "nope"]),
        sim(&["--stores", "nope"]),
        sim(&["--plot", "good.pmt"]),
        vec!["sim", "--preset", "nope", "good.pmt"],
        vec!["analyze", "--window", "0", "good.pmt"],
        vec!["analyze", "--window", "-1", "good.pmt"],
        vec!["analyze", "--window", "1e308", "good.pmt"],
        vec!["analyze", "--window", "nan", "good.pmt"],
        vec!["analyze", "--plot", "good.pmt", "good.pmt"],
        vec!["sim", "gen", "seq-write", "o.pmt", "--count", "-1"],
        vec![
            "sim",
            "gen",
            "seq-write",
            "o.pmt",
            "--count",
            "18446744073709551616",
        ],
        vec!["sim", "gen", "seq-write", "o.pmt", "--chunk", "0B"],
        vec!["sim", "gen", "seq-write", "o.pmt", "--chunk", "100B"],
        vec!["sim", "gen", "seq-write", "o.pmt", "--span", "0B"],
        vec!["sim", "gen", "seq-write", "o.pmt", "--threads", "0"],
        vec!["sim", "gen", "bogus", "o.pmt"],
        vec!["sim", "gen", "seq-write", "o.pmt", "--format", "xx"],
        vec![
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--min-lines",
            "0",
        ],
        vec![
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--min-lines",
            "18446744073709551615",
        ],
        vec![
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--repeats",
            "0",
        ],
        vec![
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--repeats",
            "4000000000",
        ],
        vec![
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--region",
            "3B",
        ],
        vec![
            "probe",
            "ptrchase",
            "--target",
            "sim:optane-1dimm",
            "--outstanding",
            "0",
        ],
        vec![
            "probe",
            "stride",
            "--target",
            "sim:optane-1dimm",
            "--size",
            "1EiB",
        ],
        vec!["probe", "all", "--target", "sim:nope"],
        vec!["run", "--json", "adir", "--", "true"],
        vec!["run", "--json", "missing/s.json", "--", "true"],
        vec!["trace", "-o", "t.pmt", "--json", "adir", "--", "true"],
        vec![
            "trace",
            "-o",
            "t.pmt",
            "--json",
            "missing/s.json",
            "--",
            "true",
        ],
        vec!["run", "--pm-latency", "-1", "--", "true"],
        vec!["run", "--pm-latency", "nan", "--", "true"],
        vec!["run", "--pm-latency", "1e308", "--", "true"],
        vec!["run", "--epoch-max", "0", "--", "true"],
        vec!["run", "--w", "0", "--", "true"],
        vec!["run", "--w", "1e308", "--", "true"],
        vec!["run", "--write-parallelism", "0", "--", "true"],
        vec!["run", "--pm-pool-size", "0", "--", "true"],
        vec!["run", "--pm-node", "99999", "--", "true"],
        vec!["run", "--sample", "2", "--", "true"],
        vec!["run", "--llc", "32MiB:0", "--", "true"],
        vec!["run", "--device", "garbage", "--", "true"],
        vec!["run", "--device", "adir", "--", "true"],
        vec!["run", "--source", "synthetic:empty", "--", "true"],
        vec!["run", "--pm-file", "missing/dir/pool", "--", "true"],
    ];
    for args in &cases {
        refused(&d.0, args);
    }
    assert!(!d.0.join("o.pmt").exists());
    assert!(!d.0.join("t.pmt").exists());
}

/// `pmlab check` walked the whole 64-bit address space on a record at
/// its top (a damaged trace): it now ends within a moment.
#[test]
fn check_ends_on_a_record_at_the_top_of_the_address_space() {
    let d = TempDir::new("check-top");
    std::fs::write(
        d.0.join("top.txt"),
        "0 0 W 0xffffffffffffffd8 64\n1 0 CLWB 0xffffffffffffffc0 64\n2 0 SFENCE 0 0\n",
    )
    .unwrap();
    let (code, err) = run_bounded(&d.0, &["check", "top.txt"]);
    assert_eq!(code, Some(0), "{err}");
}

/// An empty file is not a trace for `check` either (as for sim and
/// analyze).
#[test]
fn check_refuses_an_empty_file() {
    let d = TempDir::new("check-empty");
    std::fs::write(d.0.join("empty.txt"), "# nothing\n").unwrap();
    assert_one_line_error(&pmlab(&d.0, &["check", "empty.txt"]), "no records");
}

/// `sim gen` refuses --count 0 and a directory as output, names the
/// output (not its temporary file) when it cannot write, and leaves
/// nothing behind.
#[test]
fn sim_gen_refuses_unwritable_outputs_and_leaves_nothing() {
    let d = TempDir::new("gen-out");
    std::fs::create_dir(d.0.join("adir")).unwrap();
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "gen", "seq-write", "o.pmt", "--count", "0"]),
        "--count",
    );
    assert_one_line_error(
        &pmlab(&d.0, &["sim", "gen", "seq-write", "adir", "--count", "10"]),
        "is a directory",
    );
    assert_one_line_error(
        &pmlab(
            &d.0,
            &["sim", "gen", "seq-write", "missing/o.pmt", "--count", "10"],
        ),
        "cannot write missing/o.pmt",
    );
    let left: Vec<_> = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["adir"], "left behind: {left:?}");
}

/// A simulator config whose bandwidth would make every time astronomical,
/// or whose clock period is zero, is refused naming the key.
#[test]
fn sim_refuses_a_config_that_would_make_times_meaningless() {
    let d = fixtures("cfg-range");
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/optane-1dimm.toml"),
    )
    .unwrap();
    for (key, bad) in [("media_write_gbs", "1e-300"), ("tck", "0")] {
        let text: String = base
            .lines()
            .map(|l| {
                if l.split('=').next().unwrap().trim() == key {
                    format!("{key} = {bad}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        assert_ne!(text, base, "{key} not in the preset");
        std::fs::write(d.0.join("c.toml"), text).unwrap();
        assert_one_line_error(
            &pmlab(&d.0, &["sim", "--config", "c.toml", "good.pmt"]),
            key,
        );
    }
}

/// Whether the 64-bit little-endian ELF `b` names a program interpreter
/// (a PT_INTERP program header): a dynamically linked program, which
/// loads the runtime through LD_PRELOAD.
fn has_interpreter(b: &[u8]) -> bool {
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return true;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).any(|i| {
        let o = phoff + i * size;
        b.get(o..o + 4) == Some(&3u32.to_le_bytes()[..])
    })
}

/// `pmlab trace -o FILE` leaves an existing FILE as it was when the run
/// writes no trace (a static program never loads the runtime): the trace
/// is written beside it and renamed over it only once there is one. A
/// directory as output is refused before anything runs.
#[test]
fn trace_keeps_the_old_file_when_the_run_writes_no_trace() {
    let d = TempDir::new("trace-keep");
    std::fs::create_dir(d.0.join("adir")).unwrap();
    assert_one_line_error(
        &pmlab(&d.0, &["trace", "-o", "adir", "--", "true"]),
        "is a directory",
    );
    let st = pmlab(
        &d.0,
        &["sim", "gen", "seq-write", "old.pmt", "--count", "10"],
    );
    assert!(st.status.success(), "{}", common::stderr(&st));
    let old = std::fs::read(d.0.join("old.pmt")).unwrap();
    let static_prog = Path::new("/sbin/ldconfig");
    let is_static = std::fs::read(static_prog).is_ok_and(|b| !has_interpreter(&b));
    if !is_static {
        common::not_exercised("no static program (/sbin/ldconfig) here");
        return;
    }
    assert_one_line_error(
        &pmlab(
            &d.0,
            &["trace", "-o", "old.pmt", "--", "/sbin/ldconfig", "-p"],
        ),
        "wrote no trace",
    );
    assert_eq!(std::fs::read(d.0.join("old.pmt")).unwrap(), old);
    let left: Vec<_> = std::fs::read_dir(&d.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "left behind: {left:?}");
}
