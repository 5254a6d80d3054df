//! Integration tests of `pmlab run --device` (issue 21): the flag's
//! errors, and a small LENS chase (`workloads/lenschase.c`, built by
//! `pmlab cc`) whose statistics report the device's levels.

mod common;

use common::{assert_one_line_error, pmlab, runtime_dir, stderr, TempDir, PMLAB};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workloads() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workloads")
}

#[test]
fn device_flag_errors_are_one_line() {
    let t = TempDir::new("device-errors");
    let o = pmlab(&t.0, &["run", "--device", "optane", "--", "true"]);
    assert_one_line_error(&o, "--device optane: no such preset or file");
    assert!(stderr(&o).contains("optane-1dimm"), "{}", stderr(&o));
    let o = pmlab(
        &t.0,
        &[
            "run",
            "--device",
            "optane-1dimm",
            "--pm-latency",
            "400ns",
            "--",
            "true",
        ],
    );
    assert_one_line_error(&o, "--device and --pm-latency cannot be combined");
    let o = pmlab(
        &t.0,
        &[
            "run",
            "--device",
            "optane-1dimm",
            "--source",
            "hw",
            "--",
            "true",
        ],
    );
    assert_one_line_error(&o, "--device needs the instrumented source");
    let bad = t.write(
        "bad.toml",
        "name = \"bad\"\n[controller]\nimpl = \"imc\"\ncolour = 3\n",
    );
    let o = pmlab(
        &t.0,
        &["run", "--device", bad.to_str().unwrap(), "--", "true"],
    );
    assert_one_line_error(&o, "bad.toml");
    let o = pmlab(
        &t.0,
        &[
            "run",
            "--device",
            "ddr4-2666",
            "--dram-latency",
            "150ns",
            "--",
            "true",
        ],
    );
    assert_one_line_error(&o, "not above this machine's DRAM latency 150 ns");
}

/// A field of the stats' `device` object.
fn field(v: &serde_json::Value, k: &str) -> f64 {
    v["stats"]["device"][k]
        .as_f64()
        .unwrap_or_else(|| panic!("no device.{k} in {v}"))
}

/// `workloads/lenschase.c` built by `pmlab cc` into `t`.
fn build_lenschase(t: &TempDir) -> PathBuf {
    let exe = t.path("lenschase");
    let out = Command::new(PMLAB)
        .args(["cc", "-O2", "-I"])
        .arg(workloads().join("../include"))
        .arg("-o")
        .arg(&exe)
        .arg(workloads().join("lenschase.c"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `pmlab run --quiet --no-inject --device DEVICE --dram-latency 100ns
/// --json` of `exe` with `args`, the environment's `env` set and `unset`
/// removed: the run's stdout and its statistics (the run must succeed).
fn run_device(
    t: &TempDir,
    device: &std::ffi::OsStr,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    unset: &[&str],
) -> (String, serde_json::Value) {
    let stats = t.path("stats.json");
    let _ = std::fs::remove_file(&stats);
    let mut cmd = Command::new(PMLAB);
    cmd.args(["run", "--quiet", "--no-inject", "--device"])
        .arg(device)
        .args(["--dram-latency", "100ns", "--json"])
        .arg(&stats)
        .arg("--")
        .arg(exe)
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in unset {
        cmd.env_remove(k);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    (String::from_utf8_lossy(&out.stdout).to_string(), v)
}

/// The environment that gives device mode the native costs of a near, a
/// following and a fresh miss (ns), so that no start-up chase nor timed
/// load measures them.
fn given<'a>(near: &'a str, follow: &'a str, fresh: &'a str) -> [(&'static str, &'a str); 3] {
    [
        ("PMLAB_DEVICE_NEAR_NS", near),
        ("PMLAB_DEVICE_FOLLOW_NS", follow),
        ("PMLAB_DEVICE_FRESH_NS", fresh),
    ]
}

/// [`run_device`] on the `optane-1dimm` preset.
fn run_optane(
    t: &TempDir,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    unset: &[&str],
) -> (String, serde_json::Value) {
    run_device(t, "optane-1dimm".as_ref(), exe, args, env, unset)
}

#[test]
fn a_small_chase_under_the_device_reports_its_levels() {
    runtime_dir();
    let t = TempDir::new("device-chase");
    let exe = build_lenschase(&t);
    // 64 KiB of 64 B blocks: four times the RMW buffer, well inside the
    // AIT buffer; 8 passes after the warm-up. The native costs of a near,
    // a following and a fresh miss are given rather than measured at
    // start-up, so that the expected delay is exact.
    let (_, v) = run_optane(
        &t,
        &exe,
        &["-r", "65536", "-b", "64", "-n", "8192"],
        &given("80", "80", "80"),
        &[],
    );
    assert_eq!(v["stats"]["device"]["name"], "optane-1dimm");
    let (rmw, ait, media) = (
        field(&v, "rmw_hits"),
        field(&v, "ait_hits"),
        field(&v, "media_reads"),
    );
    // 9 passes of 1024 lines, each a miss after the flush.
    let lines = 9.0 * 1024.0;
    assert!(rmw + ait + media >= lines, "{rmw} {ait} {media}");
    // A random order over 256 XPLines, 64 of them in the RMW buffer: about
    // a quarter hit it; the rest hit the AIT buffer (the region was
    // written, then read, so its entries are in).
    let share = rmw / (rmw + ait + media);
    assert!((0.15..0.4).contains(&share), "RMW share {share}");
    assert!(ait > 2.0 * media, "{ait} AIT hits, {media} media reads");
    // The chain was written: its lines are written back whole when flushed.
    assert!(field(&v, "writebacks") >= 1024.0);
    assert_eq!(field(&v, "write_amplification"), 1.0);
    // The requested delay is each level's latency less the native cost of
    // a near miss (80 ns as given: the region's 16 pages are near after
    // their first miss; those 16 far misses, at the DRAM's 100 ns, are
    // 20 ns apart: well inside the bound).
    assert_eq!(field(&v, "native_near_ns"), 80.0);
    assert_eq!(field(&v, "native_far_ns"), 100.0);
    assert_eq!(field(&v, "native_follow_ns"), 80.0);
    let requested = v["stats"]["total"]["requested_delay_ns"].as_f64().unwrap();
    let want = rmw * (field(&v, "rmw_ns") - 80.0)
        + ait * (field(&v, "ait_ns") - 80.0)
        + media * (field(&v, "media_ns") - 80.0);
    assert!(
        (requested - want).abs() <= 0.1 * want,
        "requested {requested} ns, levels say {want} ns"
    );
}

/// A chase of 256 B blocks: each block's first line is a near (or, first,
/// far) miss, its three others follow the miss before them and cost
/// natively what the prefetchers leave (given: 20 ns against 80), so the
/// requested delay is their level's latency less 20 ns each.
#[test]
fn lines_that_follow_the_previous_miss_are_charged_from_their_own_native_cost() {
    runtime_dir();
    let t = TempDir::new("device-follow");
    let exe = build_lenschase(&t);
    // The quarter of the lines re-read right after their flush: as the
    // following ones (a 2% error on the first lines).
    let (_, v) = run_optane(
        &t,
        &exe,
        &["-r", "65536", "-b", "256", "-n", "8192"],
        &given("80", "20", "20"),
        &[],
    );
    assert_eq!(field(&v, "native_follow_ns"), 20.0);
    let (rmw, ait, media) = (
        field(&v, "rmw_hits"),
        field(&v, "ait_hits"),
        field(&v, "media_reads"),
    );
    // Three lines of four are in their XPLine's RMW entry already: the
    // following ones.
    let share = rmw / (rmw + ait + media);
    assert!((0.7..0.8).contains(&share), "RMW share {share}");
    let requested = v["stats"]["total"]["requested_delay_ns"].as_f64().unwrap();
    let want = rmw * (field(&v, "rmw_ns") - 20.0)
        + ait * (field(&v, "ait_ns") - 80.0)
        + media * (field(&v, "media_ns") - 80.0);
    // Charged as near misses, the following lines would ask for 60 ns
    // less each: a quarter less in all.
    let as_near = want - rmw * 60.0;
    assert!(
        (requested - want).abs() <= 0.08 * want && requested > as_near + 0.5 * (want - as_near),
        "requested {requested} ns, levels say {want} ns (as near misses {as_near} ns)"
    );
}

/// A chase over 8 KiB in 256 B blocks, the region flushed before each
/// pass: every line is re-read right after its flush, the first of each
/// block as a fresh line (its native cost given as 140 ns), the next three
/// as fresh lines following the previous miss (given as 20 ns): all are
/// served by the RMW buffer, and the requested delay is its latency less
/// 140 ns for a quarter of the lines and less 20 ns for the rest, not
/// less 140 ns for all (the rule before the fresh-follow kind). Over
/// 16 KiB (a run of 256 flushes) the following lines cost what a
/// following line does (given as 80 ns).
#[test]
fn fresh_lines_that_follow_the_previous_miss_have_their_own_native_cost() {
    runtime_dir();
    let t = TempDir::new("device-fresh-follow");
    let exe = build_lenschase(&t);
    // 8 KiB flushed whole (128 lines, a short run of flushes): the
    // following lines at the fresh-follow cost (20); 16 KiB (256 lines, a
    // long run): at the following cost (80).
    for (region, follow_ns) in [("8192", 20.0), ("16384", 80.0)] {
        let (_, v) = run_optane(
            &t,
            &exe,
            &["-r", region, "-b", "256", "-n", "8192"],
            &[
                ("PMLAB_DEVICE_NEAR_NS", "80"),
                ("PMLAB_DEVICE_FOLLOW_NS", "80"),
                ("PMLAB_DEVICE_FRESH_NS", "140"),
                ("PMLAB_DEVICE_FRESH_FOLLOW_NS", "20"),
            ],
            &[],
        );
        // Given by the environment: no live probe replaces them.
        assert_eq!(field(&v, "native_fresh_ns"), 140.0);
        assert_eq!(field(&v, "native_fresh_follow_ns"), 20.0);
        let (rmw, ait, media) = (
            field(&v, "rmw_hits"),
            field(&v, "ait_hits"),
            field(&v, "media_reads"),
        );
        let reads = rmw + ait + media;
        // The region fits the RMW buffer: after the first pass every read
        // hits it.
        assert!(rmw / reads > 0.95, "RMW share {}", rmw / reads);
        let requested = v["stats"]["total"]["requested_delay_ns"].as_f64().unwrap();
        let rmw_ns = field(&v, "rmw_ns");
        let want = reads * ((rmw_ns - 140.0) + 3.0 * (rmw_ns - follow_ns)) / 4.0;
        let as_fresh = reads * (rmw_ns - 140.0);
        assert!(
            (requested - want).abs() <= 0.1 * want,
            "{region} B: requested {requested} ns, fresh and following lines say {want} ns (all as fresh {as_fresh} ns)"
        );
    }
}

/// The overwrite probe (one 256 B block written, flushed and fenced each
/// iteration) on a device whose wear leveling migrates an XPLine every
/// 500 writes: every flush of the block's four lines is one whole-XPLine
/// media write, so 5,000 iterations make 10 migrations, each charged (at
/// the durability point after the write, see `thread::device_stall_due`)
/// with the device's stall.
#[test]
fn the_overwrite_migrates_every_threshold_writes_and_charges_the_stall() {
    runtime_dir();
    let t = TempDir::new("device-overwrite");
    let exe = build_lenschase(&t);
    let preset = std::fs::read_to_string(workloads().join("../configs/optane-1dimm.toml")).unwrap();
    let config = t.path("wear500.toml");
    let edited: String = preset
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("wear_threshold") {
                "wear_threshold = 500".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(edited.contains("wear_threshold = 500"));
    std::fs::write(&config, edited).unwrap();
    // Near, following and fresh misses natively as slow as the device's
    // slowest level: the reads add nothing, the stalls are the whole
    // delay.
    let (stdout, v) = run_device(
        &t,
        config.as_os_str(),
        &exe,
        &["-o", "5000"],
        &given("400", "400", "400"),
        &[],
    );
    assert!(
        stdout.contains("mode=overwrite iterations=5000"),
        "{stdout}"
    );
    assert_eq!(field(&v, "media_writes"), 5000.0);
    assert_eq!(field(&v, "write_amplification"), 1.0);
    assert_eq!(field(&v, "migrations"), 10.0);
    let stall = field(&v, "migration_stall_ns");
    assert!(stall > 0.0);
    // Every stall is requested once (nothing is injected: --no-inject);
    // beside them only the set-up's 64 cold misses (under 255 ns each)
    // and media time beyond an epoch could add anything.
    let requested = v["stats"]["total"]["requested_delay_ns"].as_f64().unwrap();
    assert!(
        requested >= stall && requested <= stall + 64.0 * 255.0 + 1.0,
        "requested {requested} ns, stalls {stall} ns"
    );
}

/// A `key=value` token of a `lenschase` line.
fn token<'a>(out: &'a str, key: &str) -> &'a str {
    out.split_whitespace()
        .find_map(|t| t.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {out}"))
}

/// The chase flushes alike natively and emulated: a native build linked
/// with libpmlab (as `pmlab validate` builds it) evicts with its own
/// instruction, not libpmlab's pflush (clwb outside `pmlab run`, which
/// may leave the lines cached), and the `pmlab cc` build under `pmlab run
/// --device` flushes through pflush, which the runtime sees. Both map the
/// region for huge pages and say how much of it got them.
#[test]
fn lenschase_flushes_alike_natively_and_emulated() {
    let dir = runtime_dir();
    if !common::require_tool("clang-14", "clang-14") {
        return;
    }
    let t = TempDir::new("device-flush");
    let native = t.path("lenschase-native");
    let out = Command::new("clang-14")
        .args(["-O2", "-std=gnu11", "-I"])
        .arg(workloads().join("../include"))
        .arg("-o")
        .arg(&native)
        .arg(workloads().join("lenschase.c"))
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-lpmlab")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // 4 MiB: two whole 2 MiB pages when the kernel grants them.
    let args = ["-r", "4194304", "-b", "256", "-n", "1"];
    let o = Command::new(&native).args(args).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let line = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        ["clflushopt", "clflush"].contains(&token(&line, "flush")),
        "{line}"
    );
    let huge: i64 = token(&line, "huge_pct").parse().unwrap();
    assert!((-1..=100).contains(&huge), "{line}");
    let o = Command::new(&native).args(args).arg("-F").output().unwrap();
    assert_eq!(token(&String::from_utf8_lossy(&o.stdout), "flush"), "none");
    let o = Command::new(&native)
        .args(["-r", "4194304", "-n", "1", "-H"])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&o.stdout).to_string();
    // Asked for 4 KiB pages, none of the region is huge.
    assert!(["0", "-1"].contains(&token(&line, "huge_pct")), "{line}");
    let exe = build_lenschase(&t);
    let (stdout, _) = run_optane(
        &t,
        &exe,
        &["-r", "65536", "-n", "1024"],
        &given("80", "80", "80"),
        &[],
    );
    assert_eq!(token(&stdout, "flush"), "pflush");
}

/// Without native costs given, device mode times 1 in 8 of the program's
/// logged loads and subtracts what they measured per kind of access. A
/// chase over 16 KiB flushed before each pass: `pflush` leaves the lines
/// in the CPU's caches (it no longer forces an evicting flush), so their
/// re-reads are cache hits natively, every one is served by the RMW
/// buffer in the model, and the delay requested per read is nearly the
/// buffer's whole latency (with the old start-up estimate of an evicted
/// line's re-read, 100-200 ns less on the machines this was built on).
#[test]
fn the_program_s_timed_loads_set_the_native_cost_the_delay_subtracts() {
    runtime_dir();
    let t = TempDir::new("device-learned");
    let exe = build_lenschase(&t);
    let chase = ["-r", "16384", "-b", "64", "-n", "8192"];
    let (_, v) = run_optane(&t, &exe, &chase, &[], &["PMLAB_TIMED_MISSES"]);
    let (rmw, ait, media) = (
        field(&v, "rmw_hits"),
        field(&v, "ait_hits"),
        field(&v, "media_reads"),
    );
    let reads = rmw + ait + media;
    assert!(rmw / reads > 0.95, "RMW share {}", rmw / reads);
    // About one read in 8 was timed (the hook's countdown: 8 give or take
    // a quarter).
    let timed = field(&v, "native_timed_samples");
    assert!(
        timed > reads / 16.0 && timed < reads / 4.0,
        "{timed} timed of {reads} reads"
    );
    let rmw_ns = field(&v, "rmw_ns");
    let per_read = v["stats"]["total"]["requested_delay_ns"].as_f64().unwrap() / reads;
    assert!(
        per_read > rmw_ns - 100.0 && per_read <= rmw_ns + 1e-6,
        "{per_read} ns requested per read, the RMW buffer's latency {rmw_ns} ns"
    );
    // The timed reads' own cost is charged back as any hook's is: the
    // hooks' statistics count them (hits as well as the learnt misses).
    let charged = v["stats"]["hooks"]["timed_loads"].as_f64().unwrap_or(0.0);
    assert!(
        charged >= timed,
        "{charged} timed loads charged, {timed} learnt"
    );
    // `PMLAB_TIMED_MISSES=off` keeps the start-up costs: nothing is timed.
    let (_, v) = run_optane(&t, &exe, &chase, &[("PMLAB_TIMED_MISSES", "off")], &[]);
    assert_eq!(field(&v, "native_timed_samples"), 0.0);
}
