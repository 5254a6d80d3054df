//! Integration tests of the emulator (issue 2): `pmlab run` and
//! `pmlab calibrate` with the built binary and libpmlab.so, the C
//! workloads and the C test programs of `tests/c/`, each in a fresh
//! temporary directory. Timing-based checks compare injected delays
//! (hundreds of ms) with generous margins; they never assert speed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use common::{runtime_dir, TempDir, PMLAB};

/// Tests that compare durations take this exclusively; the others share it,
/// so that no test of this file runs beside a timing comparison.
static TIMING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    TIMING.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    TIMING.write().unwrap_or_else(|e| e.into_inner())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compile a C file (from tests/c or workloads) into `dir`.
fn cc(dir: &TempDir, src: &Path, name: &str, with_pmlab: bool) -> PathBuf {
    let out = dir.path(name);
    let mut c = Command::new("cc");
    c.args(["-O2", "-std=gnu11", "-o"])
        .arg(&out)
        .arg(src)
        .arg(format!("-I{}", root().join("include").display()));
    if with_pmlab {
        let rt = runtime_dir();
        c.arg(format!("-L{}", rt.display()))
            .arg("-lpmlab")
            .arg(format!("-Wl,-rpath,{}", rt.display()));
    }
    c.arg("-lpthread");
    let o = c.output().expect("cc runs");
    assert!(
        o.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn test_c(dir: &TempDir, name: &str) -> PathBuf {
    cc(
        dir,
        &root().join(format!("crates/cli/tests/c/{name}.c")),
        name,
        false,
    )
}

fn workload(dir: &TempDir, name: &str) -> PathBuf {
    cc(
        dir,
        &root().join(format!("workloads/{name}.c")),
        name,
        false,
    )
}

fn pmlab(dir: &TempDir, args: &[&str]) -> Output {
    Command::new(PMLAB)
        .args(args)
        .current_dir(&dir.0)
        .env("XDG_CACHE_HOME", dir.path("cache"))
        .env_remove("LD_PRELOAD")
        .output()
        .expect("pmlab runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `pmlab run --json FILE ...`: the program's output and the stats read
/// from FILE (a fresh one per call in `dir`). The JSON never reaches the
/// program's stdout.
fn run_json(dir: &TempDir, flags: &[&str], prog: &[&str]) -> (Output, serde_json::Value) {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = dir.path(&format!("run-{n}.out"));
    let json_arg = json.to_string_lossy().into_owned();
    let mut a = vec![
        "run",
        "--json",
        &json_arg,
        "--quiet",
        "--dram-latency",
        "100ns",
    ];
    a.extend_from_slice(flags);
    a.push("--");
    a.extend_from_slice(prog);
    let o = pmlab(dir, &a);
    let out = text(&o.stdout);
    assert!(
        !out.contains("\"exit_code\""),
        "the JSON reached the program's stdout: {out}"
    );
    let written = std::fs::read_to_string(&json).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(written.trim()).unwrap_or_else(|_| {
        panic!(
            "no stats JSON in {written:?}: stdout={out} stderr={}",
            text(&o.stderr)
        )
    });
    let _ = std::fs::remove_file(&json);
    (o, v)
}

/// Files beside pmlab's temporary statistics files in the temp directory
/// (`pmlab-stats-<pid>.json.<anything>`) of pmlab processes that have
/// ended: other tests may be running pmlab meanwhile, and theirs go when
/// they end.
fn stats_side_files() -> Vec<String> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.strip_prefix("pmlab-stats-")
                .and_then(|r| r.split_once(".json."))
                .is_some_and(|(pid, _)| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect()
}

fn total(v: &serde_json::Value, key: &str) -> f64 {
    v["stats"]["total"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("no total.{key} in {v}"))
}

fn field(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|t| t.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in '{line}'"))
}

#[test]
fn hw_source_fails_before_the_program_with_one_line_where_there_is_no_pmu() {
    let _serial = shared();
    let d = TempDir::new("nopmu");
    let marker = d.path("started");
    let t = Instant::now();
    let o = pmlab(
        &d,
        &[
            "run",
            "--dram-latency",
            "100ns",
            "--source",
            "hw",
            "--",
            "sh",
            "-c",
            &format!("touch {}", marker.display()),
        ],
    );
    let took = t.elapsed();
    if o.status.success() {
        // A machine with a usable PMU: the program ran under hw counters.
        assert!(marker.exists());
        common::not_exercised("this machine has a usable PMU: the no-PMU error path");
        return;
    }
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("pmlab: error: hardware counters unavailable: "),
        "{err}"
    );
    assert!(
        err.contains("--source synthetic:FILE"),
        "says what to do: {err}"
    );
    assert!(!marker.exists(), "the program must not start");
    eprintln!("failed in {took:?}: {err}");
    // auto falls back the same way for a program not built by pmlab cc.
    let o = pmlab(&d, &["run", "--dram-latency", "100ns", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("hardware counters unavailable"));
}

#[test]
fn synthetic_delay_is_injected_around_memlat_as_scripted() {
    let _serial = exclusive();
    let d = TempDir::new("delay");
    let memlat = workload(&d, "memlat");
    // Two epochs of 2,500,000 serial PM accesses x (200 - 100) ns = 250 ms
    // each, then nothing: 500 ms in all, whatever the number of epochs
    // beyond two.
    // A cached calibration spares the runtime its TSC measurement.
    let o = pmlab(
        &d,
        &[
            "calibrate",
            "--region",
            "4MiB",
            "--accesses",
            "10000",
            "--repeat",
            "1",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    d.write("s.txt", "pm=2500000 *2\n");
    let expected = 2.0 * 250e6;
    // About 100 ms of memlat: long enough that two 1 ms epochs always end
    // inside it (at 10 ms the monitor's first ticks could miss them).
    let prog = [memlat.to_str().unwrap(), "-r", "8", "-n", "1000000"];
    let flags = [
        "--pm-latency",
        "200ns",
        "--epoch-max",
        "1ms",
        "--source",
        "synthetic:s.txt",
    ];
    let wall = |extra: &[&str]| {
        let mut f = flags.to_vec();
        f.extend_from_slice(extra);
        let t = Instant::now();
        let (o, v) = run_json(&d, &f, &prog);
        // Time memlat waited for a CPU (this machine is shared) is not
        // part of its run: the runtime reports it from schedstat. (A wait
        // during a delay spin lengthens the spin, which counts only the
        // thread's time on its CPU, as a wait anywhere else does.)
        let waited = v["stats"]["main_run_delay_ns"].as_f64().unwrap();
        let ns = t.elapsed().as_nanos() as f64 - waited;
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(text(&o.stdout).starts_with("memlat: chains=1"));
        (ns, v)
    };
    // Noise only ever adds time: the fastest of three runs is the best
    // estimate of each. The machine is shared, so a measurement disturbed
    // by other work is taken again (up to five times); every attempt is
    // printed.
    let mut errors = Vec::new();
    for _attempt in 0..5 {
        let mut base = f64::MAX;
        let mut with = f64::MAX;
        for _ in 0..3 {
            base = base.min(wall(&["--no-inject"]).0);
            let (ns, v) = wall(&[]);
            assert!(
                total(&v, "epochs") >= 2.0,
                "memlat ran fewer than two epochs: {v}"
            );
            let requested = total(&v, "requested_delay_ns");
            let injected = total(&v, "injected_delay_ns");
            assert!(
                (requested - expected).abs() <= 10.0,
                "the script's arithmetic: {requested}"
            );
            assert!(
                injected <= requested && injected > 0.95 * requested,
                "{injected}"
            );
            with = with.min(ns);
        }
        let measured = with - base;
        let err = (measured - expected).abs() / expected;
        eprintln!(
            "expected {:.1} ms, measured {:.1} ms around memlat (runs of {:.1} ms without delay): error {:.2}%",
            expected / 1e6,
            measured / 1e6,
            base / 1e6,
            err * 100.0
        );
        // The two-sided accuracy figure (goal: within 2%) is a benchmark,
        // not an assertion: `bench/synthetic-delay.sh` prints it. Here the
        // delay must really appear in the program's run time: noise only
        // ever adds time, so at least 98% of it, and never grossly more.
        if measured >= 0.98 * expected && measured <= 1.5 * expected {
            return;
        }
        errors.push(format!("{:.2}%", err * 100.0));
    }
    panic!("delay around memlat not injected as scripted in any attempt: {errors:?}");
}

#[test]
fn sync_point_epochs_carry_the_critical_section_delay_to_the_waiting_thread() {
    let _serial = exclusive();
    let d = TempDir::new("sync");
    let mtlat = workload(&d, "mtlat");
    // 2,000 x 100 ns = 200 us per epoch.
    d.write("s.txt", "pm=2000\nloop\n");
    let prog = [
        mtlat.to_str().unwrap(),
        "-t",
        "2",
        "-k",
        "150",
        "-i",
        "10",
        "-o",
        "2000",
        "-r",
        "1",
    ];
    let go = |min: &str| {
        let (o, v) = run_json(
            &d,
            &[
                "--pm-latency",
                "200ns",
                "--epoch-max",
                "20ms",
                "--epoch-min",
                min,
                "--lock-epoch-min",
                min,
                "--source",
                "synthetic:s.txt",
            ],
            &prog,
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        let line = text(&o.stdout).lines().next().unwrap().to_string();
        (
            field(&line, "lock_hold_ns"),
            field(&line, "lock_wait_ns"),
            v,
        )
    };
    let (hold_sync, wait_sync, v) = go("0");
    let sync_epochs = total(&v, "epochs_sync");
    assert!(
        sync_epochs >= 300.0,
        "every unlock ends an epoch: {sync_epochs}"
    );
    // Each unlock pays its section's delay (200 us) before releasing the
    // lock: the critical sections, which every waiter must wait for, hold
    // the injected delay.
    let in_sections = 300.0 * 200e3;
    assert!(
        hold_sync >= 0.95 * in_sections,
        "lock held {hold_sync} ns for {in_sections} ns of delay"
    );
    // With sync epochs off (both minimums = maximum: neither unlocks nor
    // lock acquires end epochs) the critical sections stay
    // short: the delay would be paid later, overlapping the other thread.
    let (hold_nosync, wait_nosync, v2) = go("20ms");
    assert!(total(&v2, "epochs_sync") < 10.0);
    eprintln!(
        "sync epochs: lock held {:.1} ms, waited {:.1} ms; without: held {:.1} ms, waited {:.1} ms",
        hold_sync / 1e6,
        wait_sync / 1e6,
        hold_nosync / 1e6,
        wait_nosync / 1e6
    );
    // Normally ~1% of it; a lock holder preempted on a loaded machine
    // (two busy loops on the two vCPUs: 24.8 ms of 97 once in five runs)
    // inflates it, hence the wide margin.
    assert!(
        hold_nosync < 0.5 * hold_sync,
        "{hold_nosync} vs {hold_sync}"
    );
    // And the other thread waits for it (work outside the sections lets
    // the two threads interleave). How much depends on how often the two
    // threads run at once, which a loaded 2-CPU machine decides: without
    // sync epochs the wait is nil, with them it is a visible share.
    // If the two threads happened not to overlap, run again (up to twice).
    let mut wait_sync = wait_sync;
    for _ in 0..2 {
        if wait_sync >= 0.02 * in_sections {
            break;
        }
        let (_, w, _) = go("0");
        eprintln!("sync epochs, again: waited {:.1} ms", w / 1e6);
        wait_sync = wait_sync.max(w);
    }
    assert!(wait_sync >= 0.02 * in_sections, "lock wait {wait_sync} ns");
    assert!(
        wait_sync > 2.0 * wait_nosync,
        "{wait_sync} vs {wait_nosync}"
    );
}

#[test]
fn lock_acquire_and_release_bound_epochs_shorter_than_the_minimum() {
    let _serial = exclusive();
    let d = TempDir::new("lockepochs");
    let mtlat = workload(&d, "mtlat");
    d.write("s.txt", "pm=10\nloop\n");
    // One thread, 200 sections of 20000 steps inside and outside (tens of
    // us each, on a 1 MiB region): shorter than the 1 ms minimum epoch,
    // longer than its tenth, which lock points use.
    let prog = [
        mtlat.to_str().unwrap(),
        "-t",
        "1",
        "-k",
        "200",
        "-i",
        "20000",
        "-o",
        "20000",
        "-r",
        "1",
    ];
    let flags = [
        "--pm-latency",
        "200ns",
        "--epoch-max",
        "20ms",
        "--epoch-min",
        "1ms",
        "--source",
        "synthetic:s.txt",
    ];
    let (o, v) = run_json(&d, &flags, &prog);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let line = text(&o.stdout).lines().next().unwrap().to_string();
    let section_ns = field(&line, "ns_per_section");
    let sync = total(&v, "epochs_sync");
    // Each half of a section (the work outside before the lock, the
    // section) ends an epoch at the lock point after it once it lasts the
    // lock points' minimum (100 us, a tenth of --epoch-min): two sync
    // epochs per section. Release points alone (the old rule) ended one
    // per millisecond: 126 here for 200 sections of ~0.6-0.9 ms.
    if section_ns >= 2.0 * 100e3 {
        assert!(
            sync >= 1.8 * 200.0,
            "{sync} sync epochs for 200 sections ({section_ns} ns each)"
        );
    } else {
        common::not_exercised(&format!(
            "the sync-epoch count: sections of {section_ns} ns are too short on this machine"
        ));
    }
}

/// Build `crates/cli/tests/c/NAME.c` and write the script of
/// [`synthetic_flags`], `s.txt`: 100 serial PM accesses every epoch.
fn synthetic_test_c(dir: &TempDir, name: &str) -> PathBuf {
    let p = test_c(dir, name);
    dir.write("s.txt", "pm=100\nloop\n");
    p
}

fn synthetic_flags() -> Vec<&'static str> {
    vec![
        "--pm-latency",
        "200ns",
        "--epoch-max",
        "1ms",
        "--epoch-min",
        "10us",
        "--source",
        "synthetic:s.txt",
    ]
}

#[test]
fn fork_child_reinitialises_and_reports_separately() {
    let _serial = shared();
    let d = TempDir::new("fork");
    let p = synthetic_test_c(&d, "fork");
    let mut f = synthetic_flags();
    f.extend(["--stats-json", "st.json"]);
    let (o, v) = run_json(&d, &f, &[p.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("fork: child ok") && out.contains("fork: parent ok"),
        "{out}"
    );
    assert!(v["stats"]["forked_child"] == false);
    let child: Vec<_> = std::fs::read_dir(&d.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("st.json."))
        .collect();
    assert_eq!(child.len(), 1, "the child writes its own stats file");
    let cv: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(child[0].path()).unwrap()).unwrap();
    assert_eq!(cv["forked_child"], true);
    assert!(
        cv["total"]["epochs"].as_u64().unwrap() > 0,
        "the child emulates too: {cv}"
    );
    // `--json` carries the children's reports too.
    let kids = v["children"].as_array().unwrap();
    assert_eq!(kids.len(), 1, "{v}");
    assert_eq!(kids[0]["stats"], cv);
    // Without --stats-json the reports go to pmlab's temporary file, and
    // the children's beside it are removed with it.
    let before = stats_side_files();
    let (o, v) = run_json(&d, &synthetic_flags(), &[p.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(v["children"].as_array().unwrap().len(), 1, "{v}");
    let after: Vec<String> = stats_side_files()
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(after.is_empty(), "left in the temp dir: {after:?}");
}

#[test]
fn reading_the_clock_ends_the_epoch_before_the_time_is_read() {
    let _serial = shared();
    let d = TempDir::new("clocksync");
    let memlat = workload(&d, "memlat");
    // No timer epochs (10 s maximum): memlat's two clock reads around its
    // loop end the epochs. The first epoch (set-up) owes nothing, the
    // second (the timed loop) 1,000,000 x (200 - 100) ns = 100 ms, which
    // must be injected before the second read returns, inside memlat's own
    // measurement (without the clock sync point it would come at exit).
    d.write("s.txt", "pm=0\npm=1000000\npm=0\nloop\n");
    // (run_json sets the DRAM latency to 100 ns.)
    let flags = [
        "--pm-latency",
        "200ns",
        "--epoch-max",
        "10s",
        "--epoch-min",
        "10us",
        "--source",
        "synthetic:s.txt",
    ];
    let (o, v) = run_json(
        &d,
        &flags,
        &[memlat.to_str().unwrap(), "-r", "8", "-n", "100000"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(total(&v, "epochs_sync") >= 2.0, "{v}");
    assert_eq!(total(&v, "epochs_timer"), 0.0, "{v}");
    let out = text(&o.stdout);
    let elapsed: f64 = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("elapsed_ns="))
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        elapsed >= 0.98 * 100e6,
        "the timed loop's delay reached memlat's measurement: {elapsed} ns"
    );
}

#[test]
fn exec_keeps_the_runtime_through_the_environment() {
    let _serial = shared();
    let d = TempDir::new("exec");
    let p = synthetic_test_c(&d, "exec");
    // An epoch signal that reaches the thread inside execve stays pending
    // into the new image; before the exec hooks, that killed about one run
    // in 20 under load. Several runs make a regression visible.
    for _ in 0..10 {
        let (o, v) = run_json(&d, &synthetic_flags(), &[p.to_str().unwrap()]);
        assert!(o.status.success(), "{:?} {}", o.status, text(&o.stderr));
        assert!(text(&o.stdout).contains("exec: new image ok preload=yes"));
        assert!(total(&v, "epochs") > 0.0);
        // The image before the exec reported too.
        let pre = v["pre_exec"].as_array().unwrap();
        assert_eq!(pre.len(), 1, "{v}");
        assert!(pre[0]["total"]["epochs"].as_u64().unwrap() > 0, "{v}");
    }
}

#[test]
fn every_exec_function_keeps_the_runtime_and_failed_execs_block_nothing() {
    let _serial = shared();
    let d = TempDir::new("execchain");
    let p = synthetic_test_c(&d, "exec");
    let (o, v) = run_json(&d, &synthetic_flags(), &[p.to_str().unwrap(), "chain"]);
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "{:?} {out} {}",
        o.status,
        text(&o.stderr)
    );
    assert!(out.contains("exec: chain ok steps=8 preload=yes"), "{out}");
    // One pre-exec report per successful exec; the failed execs' are
    // deleted.
    let pre = v["pre_exec"].as_array().unwrap();
    assert_eq!(pre.len(), 8, "{v}");
    assert!(pre.iter().all(|r| r["pid"].as_u64().is_some()), "{v}");
    assert!(total(&v, "epochs") > 0.0);
}

#[test]
fn thousands_of_threads_are_registered() {
    let _serial = shared();
    let d = TempDir::new("threads");
    let p = test_c(&d, "threads");
    d.write("s.txt", "pm=1\nloop\n");
    let (o, v) = run_json(
        &d,
        &synthetic_flags(),
        &[p.to_str().unwrap(), "3000", "300"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("created=3000 total=3000"));
    assert_eq!(v["stats"]["threads_untracked"], 0);
    assert_eq!(v["stats"]["threads"].as_array().unwrap().len(), 3001);
    assert!(total(&v, "epochs_exit") >= 3001.0);
}

#[test]
fn programs_with_their_own_signal_handling_keep_working() {
    let _serial = shared();
    let d = TempDir::new("signals");
    let p = synthetic_test_c(&d, "signals");
    let (o, v) = run_json(&d, &synthetic_flags(), &[p.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "{} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("signals: ok usr1=3 own_handler_reported=1"));
    // Epoch signals still arrive although the program claimed the signal
    // and its worker blocked every signal.
    assert!(total(&v, "epochs_timer") > 5.0, "{v}");
}

#[test]
fn blocking_system_calls_are_not_interrupted() {
    let _serial = shared();
    let d = TempDir::new("eintr");
    let p = synthetic_test_c(&d, "eintr");
    let (o, _v) = run_json(&d, &synthetic_flags(), &[p.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "{} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("eintr: ok"));
}

#[test]
fn a_program_ending_with_exit_underscore_still_reports() {
    let _serial = shared();
    let d = TempDir::new("fastexit");
    let p = synthetic_test_c(&d, "fast_exit");
    let (o, v) = run_json(&d, &synthetic_flags(), &[p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("fast_exit: ready"));
    // The report is the parent's (neither the forked child's nor the spawn
    // child's) and includes the epoch that _exit ended.
    assert_eq!(v["stats"]["forked_child"], false, "{v}");
    assert!(total(&v, "epochs") >= 5.0, "{v}");
    assert_eq!(total(&v, "epochs_exit"), 1.0, "{v}");
    assert!(total(&v, "injected_delay_ns") > 0.0, "{v}");
    // Nothing half-written is left beside the statistics.
    let tmp: Vec<_> = stats_side_files()
        .into_iter()
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}

#[test]
fn programs_carrying_the_tsan_runtime_are_refused_in_one_line() {
    let d = TempDir::new("tsanrt");
    d.write("t.c", "int main(void) { return 0; }\n");
    if !common::require_tool("gcc", "gcc") {
        return;
    }
    let o = Command::new("gcc")
        .current_dir(&d.0)
        .args(["-fsanitize=thread", "-o", "t", "t.c"])
        .output()
        .unwrap();
    if !o.status.success() {
        let err = text(&o.stderr);
        // Only a missing ThreadSanitizer runtime is a skip.
        assert!(err.contains("tsan"), "gcc -fsanitize=thread failed: {err}");
        common::skip("libtsan for gcc -fsanitize=thread (apt-get install libtsan2)");
        return;
    }
    for args in [
        &["run", "--source", "synthetic:s.txt", "--", "./t"][..],
        &["trace", "-o", "t.pmt", "--", "./t"][..],
    ] {
        let o = pmlab(&d, args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains("ThreadSanitizer's runtime"), "{err}");
    }
}

/// `mtlat -x` (validate's reference for mtlat) adds its wait to every
/// access, the section's before the unlock: never less than asked.
#[test]
fn mtlat_extra_wait_holds_the_lock_for_every_access() {
    let d = TempDir::new("mtlatx");
    let m = workload(&d, "mtlat");
    let o = Command::new(&m)
        .args([
            "-t", "1", "-k", "20", "-i", "100", "-o", "50", "-r", "8", "-x", "1000",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let line = text(&o.stdout);
    assert_eq!(field(&line, "extra_ns"), 1000.0);
    // 20 sections x 100 accesses x 1 us inside the lock, 20 x 50 outside.
    assert!(field(&line, "lock_hold_ns") >= 2_000_000.0, "{line}");
    assert!(field(&line, "elapsed_ns") >= 3_000_000.0, "{line}");
    // A bad value is refused.
    let o = Command::new(&m).args(["-x", "-5"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn two_threads_racing_to_exit_underscore_still_report() {
    let _serial = shared();
    let d = TempDir::new("twoexit");
    let p = synthetic_test_c(&d, "two_exit");
    for _ in 0..5 {
        let (o, v) = run_json(&d, &synthetic_flags(), &[p.to_str().unwrap()]);
        assert!(matches!(o.status.code(), Some(4 | 5)), "{:?}", o.status);
        assert!(total(&v, "epochs") > 0.0, "{v}");
    }
}

#[test]
fn api_works_linked_directly_and_under_the_emulator() {
    let _serial = shared();
    let d = TempDir::new("api");
    let p = cc(&d, &root().join("crates/cli/tests/c/api.c"), "api", true);
    let o = Command::new(&p).env_remove("LD_PRELOAD").output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stdout));
    assert_eq!(text(&o.stdout).trim(), "api: ok emulating=0");
    d.write("s.txt", "pm=10\nloop\n");
    let mut f = synthetic_flags();
    f.extend(["--write-latency", "1us", "--write-parallelism", "2"]);
    let (o, v) = run_json(&d, &f, &[p.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("api: ok emulating=1"));
    // 20 x 16,384 lines at parallelism 2 and 1 us: about 8 ms each drain
    // minus what overlapped with the flushing itself.
    assert!(total(&v, "write_delay_ns") > 1e6, "{v}");
    assert!(total(&v, "flushed_lines") >= 20.0 * 16384.0);
}

#[test]
fn exported_symbols_match_the_header_and_the_hook_list() {
    let _serial = shared();
    let lib = runtime_dir().join("libpmlab.so");
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .unwrap();
    let exported: std::collections::BTreeSet<String> = text(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T").then(|| f[2].to_string())
        })
        .collect();
    let header = std::fs::read_to_string(root().join("include/pmlab.h")).unwrap();
    let api: Vec<String> = header
        .lines()
        .filter(|l| {
            l.trim_end().ends_with(");")
                && !l.starts_with(' ')
                && !l.starts_with('#')
                && !l.starts_with('*')
        })
        .filter_map(|l| {
            let name = l
                .split('(')
                .next()?
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .rfind(|s| !s.is_empty())?;
            Some(name.to_string())
        })
        .collect();
    assert!(api.len() >= 20, "parsed {api:?}");
    for f in &api {
        assert!(
            exported.contains(f),
            "{f} is declared in pmlab.h but not exported"
        );
    }
    const HOOKS: &[&str] = &[
        "pthread_create",
        "pthread_join",
        "pthread_mutex_unlock",
        "pthread_cond_signal",
        "pthread_cond_broadcast",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "pthread_rwlock_unlock",
        "pthread_spin_unlock",
        "pthread_barrier_wait",
        "sem_post",
        "sigaction",
        "signal",
        "sigprocmask",
        "pthread_sigmask",
        "execve",
        "execv",
        "execvp",
        "execvpe",
        "fexecve",
        "execveat",
        "execl",
        "execlp",
        "execle",
        "clock_gettime",
        "gettimeofday",
        "pthread_mutex_lock",
        "pthread_mutex_trylock",
        "pthread_spin_lock",
        "pthread_rwlock_rdlock",
        "pthread_rwlock_wrlock",
        "memcpy",
        "memmove",
        "memset",
        "__memcpy_chk",
        "__memmove_chk",
        "__memset_chk",
        "nanosleep",
        "clock_nanosleep",
        "usleep",
        "sleep",
        "sem_wait",
        "sem_timedwait",
        "poll",
        "select",
        "epoll_wait",
        "ppoll",
        "pselect",
        "epoll_pwait",
        "epoll_pwait2",
        "_exit",
        "_Exit",
    ];
    for s in &exported {
        let known = api.contains(s)
            || HOOKS.contains(&s.as_str())
            || s.starts_with("pmem_")
            || s.starts_with("pmemobj_")
            || s.starts_with("__sanitizer_cov_")
            // pmlab cc's sampling plugin.
            || s.starts_with("__pmlab_sample_switch")
            || s.starts_with("__pmlab_cov_update")
            // gcc's ThreadSanitizer callbacks (`pmlab cc` with gcc).
            || s.starts_with("__tsan_");
        assert!(known, "unexpected exported symbol {s}");
    }
}

#[test]
fn no_inject_computes_but_does_not_inject() {
    let _serial = shared();
    let d = TempDir::new("noinject");
    let p = test_c(&d, "threads");
    // Every epoch stalls on 10^7 PM accesses, 100 ns slower than DRAM
    // each: a second of delay per epoch, so that any injection at all
    // would dwarf the program's own few milliseconds.
    d.write("s.txt", "pm=10000000\nloop\n");
    let mut f = synthetic_flags();
    f.push("--no-inject");
    let (o, v) = run_json(&d, &f, &[p.to_str().unwrap(), "20", "10"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(v["stats"]["inject"], false);
    assert!(
        total(&v, "injected_delay_ns") > 0.0,
        "what would be injected is still computed"
    );
    // Switched-out time is counted only inside a delay or stall spin: with
    // none, it is zero however busy the machine (an injected spin here,
    // twenty threads on a few cores, would count seconds of it).
    assert_eq!(total(&v, "spin_off_cpu_ns"), 0.0, "{v}");
    // Each worker's exit epoch asked for at least a second, and the main
    // thread joins them all: injected, the program would take at least
    // that long by its own clock. Load only ever adds time, and the margin
    // over the program's own time is a hundredfold.
    let worst = v["stats"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["requested_delay_ns"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(worst >= 1e9, "a thread asked for only {worst} ns: {v}");
    let line = text(&o.stdout);
    let ran_ns = field(&line, "ns_per_thread") * field(&line, "created");
    assert!(
        ran_ns < 0.25 * worst,
        "the program took {ran_ns} ns against {worst} ns asked by one thread: delay was injected"
    );
}

#[test]
fn bandwidth_target_stretches_epochs_that_move_too_much() {
    let _serial = shared();
    let d = TempDir::new("bw");
    let p = test_c(&d, "threads");
    // Each epoch moves 1 MB; at 1 GB/s the device needs 1 ms for it, and
    // no epoch ends before the device is done with its traffic: with its
    // stretch, every epoch lasts at least 1 ms.
    d.write("s.txt", "pm=0 bytes=1000000\nloop\n");
    let mut f = synthetic_flags();
    f.extend(["--pm-bandwidth", "1GB/s"]);
    let t0 = std::time::Instant::now();
    let (o, v) = run_json(&d, &f, &[p.to_str().unwrap(), "4", "4"]);
    let wall_ns = t0.elapsed().as_nanos() as f64;
    assert!(o.status.success());
    assert_eq!(v["stats"]["bandwidth_throttle"], "software");
    let epochs = total(&v, "epochs");
    let stretch = total(&v, "bandwidth_stretch_ns");
    let epoch_time = total(&v, "epoch_time_ns");
    assert!(stretch > 0.0, "no stretch");
    assert!(
        epoch_time + stretch >= 0.99 * epochs * 1e6,
        "{epoch_time} + {stretch} ns for {epochs} epochs of 1 ms of traffic"
    );
    // The threads share one device: the run moved its bytes no faster than
    // 1 GB/s together (per-thread budgets would let the four threads move
    // four times that).
    let bytes = total(&v, "pm_bytes");
    assert_eq!(bytes, epochs * 1e6);
    assert!(
        wall_ns >= 0.95 * bytes,
        "{bytes} B in {wall_ns} ns: above the 1 GB/s target"
    );
}

#[test]
fn write_bandwidth_charges_write_backs_at_their_own_rate() {
    let _serial = shared();
    let d = TempDir::new("wbw");
    let p = test_c(&d, "threads");
    // 1 MB per epoch, half of it written back: at 1 GB/s for both, 1 ms
    // of device time; with writes at 0.25 GB/s, 0.5 + 2 = 2.5 ms.
    d.write("s.txt", "pm=0 bytes=1000000 write_bytes=500000\nloop\n");
    for (extra, busy_ns) in [(None, 1e6), (Some("0.25GB/s"), 2.5e6)] {
        let mut f = synthetic_flags();
        f.extend(["--pm-bandwidth", "1GB/s"]);
        if let Some(w) = extra {
            f.extend(["--pm-write-bandwidth", w]);
        }
        let (o, v) = run_json(&d, &f, &[p.to_str().unwrap(), "2", "1"]);
        assert!(o.status.success());
        let epochs = total(&v, "epochs");
        let spent = total(&v, "epoch_time_ns") + total(&v, "bandwidth_stretch_ns");
        assert!(
            spent >= 0.99 * epochs * busy_ns,
            "{extra:?}: {spent} ns for {epochs} epochs of {busy_ns} ns of traffic"
        );
    }
}

#[test]
fn bad_settings_give_one_line_and_do_not_start_the_program() {
    let _serial = shared();
    let d = TempDir::new("bad");
    let marker = d.path("started");
    let touch = format!("touch {}", marker.display());
    d.write("bad.txt", "pm=1\nstall=3 pm=2\n");
    d.write("s.txt", "pm=1\n");
    d.write("c.toml", "pm_latency = \"400ns\"\nepoch_maxx = \"1ms\"\n");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--pm-latency", "50ns", "--source", "synthetic:s.txt"],
            "below the DRAM latency",
        ),
        (
            &["--epoch-min", "20ms", "--source", "synthetic:s.txt"],
            "above --epoch-max",
        ),
        (
            &["--epoch-max", "10 parsecs", "--source", "synthetic:s.txt"],
            "--epoch-max: cannot read duration",
        ),
        (
            &["--pm-bandwidth", "fast", "--source", "synthetic:s.txt"],
            "--pm-bandwidth",
        ),
        (
            &[
                "--pm-write-bandwidth",
                "2GB/s",
                "--source",
                "synthetic:s.txt",
            ],
            "--pm-write-bandwidth needs --pm-bandwidth",
        ),
        (
            &["--source", "synthetic:missing.txt"],
            "cannot read the script",
        ),
        (&["--source", "synthetic:bad.txt"], "bad.txt:2:"),
        (&["--source", "warp"], "expected auto, hw"),
        (&["--source", "instrumented"], "was not built by 'pmlab cc'"),
        (
            &["--config", "c.toml", "--source", "synthetic:s.txt"],
            "epoch_maxx",
        ),
        (&["--config", "nothere.toml"], "cannot read config file"),
        (
            &["--pm-node", "999", "--source", "synthetic:s.txt"],
            "no NUMA node 999",
        ),
        (
            &[
                "--pm-file",
                "/no/such/dir/pool",
                "--source",
                "synthetic:s.txt",
            ],
            "does not exist",
        ),
    ];
    for (flags, want) in cases {
        let mut a = vec!["run", "--dram-latency", "100ns"];
        a.extend_from_slice(flags);
        a.extend(["--", "sh", "-c", &touch]);
        let o = pmlab(&d, &a);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{flags:?}: {err}");
        assert!(
            err.starts_with("pmlab: error: ") && err.contains(want),
            "{flags:?}: {err}"
        );
        assert!(!marker.exists(), "{flags:?} started the program");
    }
    let o = pmlab(
        &d,
        &[
            "run",
            "--dram-latency",
            "100ns",
            "--source",
            "synthetic:s.txt",
            "--",
            "./no-such-program",
        ],
    );
    assert_eq!(
        text(&o.stderr).trim(),
        "pmlab: error: program './no-such-program' not found"
    );
}

#[test]
fn config_file_is_used_and_flags_win() {
    let _serial = shared();
    let d = TempDir::new("config");
    d.write("s.txt", "pm=1\nloop\n");
    d.write(
        "c.toml",
        "pm_latency = \"250ns\"\nepoch_max = \"3ms\"\nsource = \"synthetic:s.txt\"\n",
    );
    let (o, v) = run_json(&d, &["--config", "c.toml", "--epoch-max", "4ms"], &["true"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(v["stats"]["pm_latency_ns"], 250.0);
    assert_eq!(v["stats"]["epoch_max_ns"], 4e6);
}

#[test]
fn exit_status_and_signals_of_the_program_are_forwarded() {
    let _serial = shared();
    let d = TempDir::new("exit");
    d.write("s.txt", "pm=1\nloop\n");
    let o = pmlab(
        &d,
        &[
            "run",
            "-q",
            "--dram-latency",
            "100ns",
            "--source",
            "synthetic:s.txt",
            "--",
            "sh",
            "-c",
            "exit 7",
        ],
    );
    assert_eq!(o.status.code(), Some(7));
    let o = pmlab(
        &d,
        &[
            "run",
            "-q",
            "--dram-latency",
            "100ns",
            "--source",
            "synthetic:s.txt",
            "--",
            "sh",
            "-c",
            "kill -TERM $$",
        ],
    );
    assert_eq!(o.status.code(), Some(128 + 15));
}

#[test]
fn calibrate_measures_and_caches_per_machine() {
    let _serial = shared();
    let d = TempDir::new("calib");
    let o = pmlab(
        &d,
        &[
            "calibrate",
            "--region",
            "16MiB",
            "--accesses",
            "200000",
            "--repeat",
            "1",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert!(v["dram_latency_ns"].as_f64().unwrap() > 1.0);
    assert!(v["tsc_ghz"].as_f64().unwrap() > 0.1);
    // The effective LLC's chase curve, ending at the DRAM region.
    let curve = v["llc_curve"].as_array().unwrap();
    assert!(curve.len() >= 10, "{curve:?}");
    assert!(v["effective_llc_bytes"].as_u64().is_some());
    let o = pmlab(&d, &["calibrate", "--show"]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert!(out.contains("(cached)"), "{out}");
    assert!(out.contains("effective_llc="), "{out}");
    if v["numa_nodes"] == 1 {
        assert!(out.contains("one NUMA node"), "{out}");
    }
    // run --dram-latency auto uses the cache.
    d.write("s.txt", "pm=1\nloop\n");
    // (--json on a descriptor of its own, as a script would.)
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{PMLAB} run --json /dev/fd/3 -q --pm-latency 100us --source synthetic:s.txt -- true 3>&1 >/dev/null"
        ))
        .current_dir(&d.0)
        .env("XDG_CACHE_HOME", d.path("cache"))
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_str(text(&o.stdout).trim())
        .unwrap_or_else(|_| panic!("{} {}", text(&o.stdout), text(&o.stderr)));
    assert_eq!(
        st["stats"]["dram_latency_ns"].as_f64(),
        v["dram_latency_ns"].as_f64()
    );
    let o = pmlab(&d, &["calibrate", "--region", "1KiB"]);
    assert_eq!(o.status.code(), Some(2));
}
