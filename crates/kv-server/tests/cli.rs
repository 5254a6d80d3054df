//! The `pmkv-server` binary: `cluster` starts three node processes that
//! `redis-cli` can use and stops them all on SIGTERM; bad flags get one
//! error line and exit code 2.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pmkv-server");

fn free_base() -> u16 {
    // Three client ports and the Raft ports 100 above them, all free now.
    for _ in 0..50 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        drop(l);
        if !(1024..=60000).contains(&p) {
            continue;
        }
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
        (&["serve", "--id", "1", "--dir", "/tmp/x"], "no members"),
        (&["cluster", "--nodes", "0", "--dir", "/tmp/x"], "--nodes"),
        (&["bench"], "--addrs"),
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
