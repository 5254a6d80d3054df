//! The `pmkv-server` binary: `cluster` starts three node processes that
//! `redis-cli` can use and stops them all on SIGTERM; bad flags get one
//! error line and exit code 2.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pmkv-server");

fn free_base() -> u16 {
    // Three client ports and the Raft ports 100 above them, all free now.
    // Drawn below the kernel's ephemeral range (32768 up), where the
    // connections of tests running beside this one leave TIME_WAIT
    // sockets that make a bind fail.
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        ^ (u64::from(std::process::id()) << 20);
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = 10_000 + (x % 22_000) as u16;
        let free = (0..3).all(|i| {
            std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", p + 100 + i)).is_ok()
        });
        if free {
            return p;
        }
    }
    panic!("no free port range");
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli is needed (Debian: apt-get install redis-tools; scripts/setup.sh test installs it)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn cluster_serves_redis_cli_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("pmkv-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let base = free_base();
    let mut child = Command::new(BIN)
        .args([
            "cluster",
            "--nodes",
            "3",
            "--base-port",
            &base.to_string(),
            "--dir",
        ])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut leader_port = None;
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if let Some(rest) = line.strip_prefix("leader: node ") {
            let addr = rest.split_whitespace().nth(2).unwrap();
            leader_port = Some(addr.rsplit(':').next().unwrap().parse::<u16>().unwrap());
        }
        if line.starts_with("press Ctrl-C") {
            break;
        }
    }
    let leader = leader_port.unwrap_or_else(|| panic!("no leader line in {seen:?}"));
    assert_eq!(
        seen.iter().filter(|l| l.starts_with("node ")).count(),
        3,
        "{seen:?}"
    );
    assert_eq!(redis_cli(leader, &["set", "k", "v"]), "OK");
    assert_eq!(redis_cli(leader, &["get", "k"]), "v");
    assert_eq!(redis_cli(leader, &["cas", "k", "v", "w"]), "1");
    assert_eq!(redis_cli(leader, &["get", "k"]), "w");
    let follower = (base..base + 3).find(|p| *p != leader).unwrap();
    assert_eq!(
        redis_cli(follower, &["get", "k"]),
        format!("REDIRECT 127.0.0.1:{leader}")
    );

    // SIGTERM: the launcher stops every node and exits.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < end, "the launcher did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in base..base + 3 {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", p)).is_err(),
            "node on port {p} still running"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_get_one_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "serve",
                "--id",
                "5",
                "--dir",
                "/tmp/x",
                "--peer",
                "1=127.0.0.1:1,127.0.0.1:2",
            ],
            "not among the members",
        ),
        (
            &["serve", "--id", "1", "--dir", "/tmp/x", "--peer", "1=nope"],
            "--peer",
        ),
        (
            &[
                "serve",
                "--id",
                "1",
                "--dir",
                "/tmp/x",
                "--peer",
                "1=127.0.0.1:1,127.0.0.1:2",
                "--election-ms",
                "9-3",
            ],
            "--election-ms",
        ),
        (
            &[
                "serve",
                "--id",
                "1",
                "--dir",
                "/tmp/x",
                "--peer",
                "1=127.0.0.1:1,127.0.0.1:2",
                "--engine",
                "zz",
            ],
            "unknown engine",
        ),
        (
            &[
                "cluster",
                "--dir",
                "/tmp/x",
                "--engine",
                "list",
                "--pool-mb",
                "0",
            ],
            "--pool-mb 0",
        ),
        (
            &[
                "cluster",
                "--dir",
                "/tmp/x",
                "--engine",
                "list",
                "--raft-log",
                "disk",
            ],
            "--raft-log \"disk\"",
        ),
        (
            &["cluster", "--dir", "/tmp/x", "--raft-log", "engine"],
            "needs a PM engine",
        ),
        (
            &[
                "serve",
                "--id",
                "1",
                "--dir",
                "/tmp/x",
                "--peer",
                "1=127.0.0.1:1,127.0.0.1:2",
                "--heartbeat-ms",
                "0",
            ],
            "--heartbeat-ms 0",
        ),
        (
            &["cluster", "--dir", "/tmp/x", "--heartbeat-ms", "1000"],
            "--heartbeat-ms 1000",
        ),
        (
            &["cluster", "--dir", "/tmp/x", "--max-clients", "0"],
            "--max-clients 0",
        ),
        (&["serve", "--id", "1", "--dir", "/tmp/x"], "no members"),
        (&["cluster", "--nodes", "0", "--dir", "/tmp/x"], "--nodes"),
        (&["bench"], "--addrs"),
        (&["lincheck"], "give a history FILE"),
        (&["lincheck", "--synthetic", "0,1,10,5"], "--synthetic"),
        (
            &["lincheck", "/nonexistent/history.txt"],
            "read the history",
        ),
        (
            &["faults", "--dir", "/tmp/x", "--engine", "zz"],
            "unknown engine",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(BIN).args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("error") && err.contains(want),
            "{args:?}: {err}"
        );
    }
}

/// `pmkv-server lincheck` decides a synthetic hot-key history and
/// re-checks a history file, and a planted stale read in the file is
/// reported in one line with exit status 2.
#[test]
fn lincheck_checks_synthetic_and_recorded_histories() {
    let out = Command::new(BIN)
        .args(["lincheck", "--synthetic", "8,1,3000,5"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("longest key k0 (3000 ops"), "{text}");
    assert!(text.trim().ends_with("linearizable"), "{text}");
    let dir = std::env::temp_dir().join(format!("pmkv-lincheck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("history.txt");
    let good = "0 0 10 =k set =a -> ok\n1 20 30 =k set =b -> ok\n";
    std::fs::write(&file, good).unwrap();
    let out = Command::new(BIN)
        .arg("lincheck")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&file, format!("{good}2 40 50 =k get -> value =a\n")).unwrap();
    let out = Command::new(BIN)
        .arg("lincheck")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not linearizable: key k"), "{err}");
    std::fs::write(&file, "0 0 10 =k put =a -> ok\n").unwrap();
    let out = Command::new(BIN)
        .arg("lincheck")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1: unknown operation"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory whose Raft log is kept one way is refused to the other in
/// one line naming `--raft-log`, before any node starts.
#[test]
fn a_directory_of_the_other_log_placement_is_refused() {
    let dir = std::env::temp_dir().join(format!("pmkv-cli-placement-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("node-1")).unwrap();
    std::fs::write(dir.join("node-1/engine"), "list\n").unwrap();
    std::fs::write(dir.join("node-1/raft.log"), b"").unwrap();
    let d = dir.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["cluster", "--dir", d, "--engine", "list"],
            "--raft-log file",
        ),
        (
            &[
                "cluster",
                "--dir",
                d,
                "--engine",
                "list",
                "--raft-log",
                "engine",
            ],
            "--raft-log file",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(BIN).args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench --mode recovery` at a small size: a follower misses 200 writes,
/// catches up, and is restarted once; the JSON names every figure (no
/// timing is asserted).
#[test]
fn bench_recovery_mode_reports_catch_up_and_start_up() {
    let dir = std::env::temp_dir().join(format!("pmkv-bench-rec-{}", std::process::id()));
    let out = Command::new(BIN)
        .args([
            "bench",
            "--mode",
            "recovery",
            "--engine",
            "list",
            "--pool-mb",
            "16",
            "--writes",
            "200",
            "--value-size",
            "512",
            "--clients",
            "4",
            "--restarts",
            "1",
            "--json",
            "--dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench --mode recovery failed: {stderr}"
    );
    assert!(
        stderr.contains("200/200 writes"),
        "no progress shown: {stderr}"
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert!(v["leader_applied"].as_u64().unwrap() >= 200, "{v}");
    assert!(v["applied_at_kill"].as_u64().unwrap() < v["leader_applied"].as_u64().unwrap());
    for k in [
        "recovery_ms",
        "recovery_serving_ms",
        "startup_serving_ms",
        "startup_caught_up_ms",
    ] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k} missing: {v}");
    }
    assert!(
        v["recovery_serving_ms"].as_f64() <= v["recovery_ms"].as_f64(),
        "{v}"
    );
    assert_eq!(v["startups"].as_array().unwrap().len(), 1);
    assert_eq!(v["engine"], "list");
    assert!(!dir.exists(), "the work directory was left behind");
}

/// `bench`'s bad flags: one line naming the flag, exit 2.
#[test]
fn bench_bad_modes_and_flags_get_one_line() {
    for (args, want) in [
        (&["bench", "--mode", "fast"][..], "--mode"),
        (
            &["bench", "--mode", "floor", "--addrs", "a:1"][..],
            "--addrs",
        ),
        (
            &["bench", "--mode", "floor", "--value-size", "9999999"][..],
            "--value-size",
        ),
        (
            &[
                "serve",
                "--id",
                "1",
                "--dir",
                "/tmp/x",
                "--peer",
                "1=127.0.0.1:1,127.0.0.1:2",
                "--runtime",
                "fast",
            ][..],
            "--runtime",
        ),
        (&["bench", "--mode", "recovery"][..], "--dir"),
        (
            &[
                "bench", "--mode", "recovery", "--dir", "/tmp/x", "--addrs", "a:1",
            ][..],
            "--addrs",
        ),
        (
            &[
                "bench", "--mode", "recovery", "--dir", "/tmp/x", "--engine", "nope",
            ][..],
            "--engine",
        ),
        (
            &[
                "bench",
                "--mode",
                "recovery",
                "--dir",
                "/tmp/x",
                "--node-bin",
                "/nonexistent",
            ][..],
            "--node-bin",
        ),
        (
            &[
                "faults",
                "--dir",
                "/tmp/x",
                "--engine",
                "mem",
                "--crash-images",
                "1",
                "--traced-bin",
                "/bin/sh",
            ][..],
            "mem",
        ),
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `bench --mode floor`: four round-trip rows (1 and 2 relays, blocking
/// and tokio), each with every round trip timed, and no relay left behind.
#[test]
fn bench_floor_times_round_trips_through_relays() {
    let out = Command::new(BIN)
        .args([
            "bench", "--mode", "floor", "--ops", "50", "--warmup", "5", "--json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut seen = Vec::new();
    for r in &rows {
        assert_eq!(r["ops"], 50, "{r}");
        let p50 = r["p50_us"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 <= r["p99_us"].as_f64().unwrap(), "{r}");
        seen.push((
            r["hops"].as_u64().unwrap(),
            r["wait"].as_str().unwrap().to_string(),
        ));
    }
    assert_eq!(
        seen,
        [
            (1, "blocking".to_string()),
            (2, "blocking".to_string()),
            (1, "tokio".to_string()),
            (2, "tokio".to_string())
        ]
    );
}
