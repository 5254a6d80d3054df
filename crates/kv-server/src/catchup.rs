//! Recovery and start-up timing (`pmkv-server bench --mode recovery`): a
//! local cluster of node processes; one follower is killed (SIGKILL), the
//! leader takes `writes` SETs of `value_size` bytes, the follower is
//! started again and timed until it answers (`RAFTINFO`) and until its
//! applied index reaches the leader's; then the caught-up follower is
//! stopped (SIGTERM) and started again `restarts` times, each timed from
//! process start to answering and to having re-applied up to the leader's
//! index (start-up with that data).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::client::{Conn, RaftInfo};
use crate::cluster::{self, Spawn};
use crate::resp::Value;
use crate::server::Error;
use crate::types::{NodeAddr, NodeId};

/// The environment variable that turns on [`mark`] in a node process.
pub const TIMING_ENV: &str = "PMKV_TIMING";

/// What [`mark`] prints before the time, so that the lines can be found
/// in a node's log.
pub const MARK_PREFIX: &str = "pmkv-timing";

fn timing_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(TIMING_ENV).is_some_and(|v| v != "0" && !v.is_empty()))
}

fn epoch_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn clock_us(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// CPU time the process has used, µs (all its threads).
fn cpu_us() -> u64 {
    clock_us(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time the calling thread has used, µs, and the page faults it took
/// (minor ones: no I/O), for [`mark`] lines about one thread's work.
pub fn thread_usage() -> (u64, u64) {
    // SAFETY: an all-zero rusage is a valid value to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage to write to.
    let faults = if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } == 0 {
        ru.ru_minflt as u64
    } else {
        0
    };
    (clock_us(libc::CLOCK_THREAD_CPUTIME_ID), faults)
}

/// With `PMKV_TIMING=1` in the environment, print one line
/// `pmkv-timing <µs since the epoch> cpu=<process CPU µs> <what>` on
/// stderr (a node's log): the steps of a recovery (snapshot built, sent,
/// received, installed; entries appended and applied), lined up across
/// processes by the wall clock, with the CPU time the process had used
/// (on a shared machine the wall time between steps includes waiting for
/// a CPU; the CPU time does not). Without it, nothing is done (`what` is
/// not called).
pub fn mark(what: impl FnOnce() -> String) {
    if timing_on() {
        eprintln!("{MARK_PREFIX} {} cpu={} {}", epoch_us(), cpu_us(), what());
    }
}

/// The [`mark`] lines of the node log `log` (node `node`) timed between
/// `from_us` and `to_us` (µs since the epoch), as (µs, node, what), each
/// `what` followed by the process CPU time since the node's previous line
/// in that window (`[cpu +x.x ms]`).
fn read_marks(
    log: &std::path::Path,
    node: NodeId,
    from_us: u64,
    to_us: u64,
) -> Vec<(u64, NodeId, String)> {
    let Ok(text) = std::fs::read_to_string(log) else {
        return Vec::new();
    };
    let mut last_cpu: Option<u64> = None;
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(MARK_PREFIX)?.trim_start();
            let (t, what) = rest.split_once(' ')?;
            let t: u64 = t.parse().ok()?;
            let (cpu, what) = match what.strip_prefix("cpu=").and_then(|w| w.split_once(' ')) {
                Some((c, w)) => (c.parse::<u64>().ok(), w),
                None => (None, what),
            };
            if !(from_us..=to_us).contains(&t) {
                return None;
            }
            let what = match (cpu, last_cpu) {
                (Some(c), Some(p)) => {
                    format!("{what}  [cpu +{:.1} ms]", c.saturating_sub(p) as f64 / 1e3)
                }
                _ => what.to_string(),
            };
            if cpu.is_some() {
                last_cpu = cpu;
            }
            Some((t, node, what))
        })
        .collect()
}

/// Settings of a recovery run.
#[derive(Debug, Clone)]
pub struct CatchupConfig {
    /// The `pmkv-server` binary the nodes run.
    pub bin: PathBuf,
    /// Work directory (node data and logs); emptied first.
    pub dir: PathBuf,
    /// Nodes in the cluster (3 or more).
    pub nodes: u64,
    /// Writes the stopped follower misses.
    pub writes: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// Client threads that load the writes.
    pub clients: usize,
    /// Timed restarts of the caught-up follower.
    pub restarts: usize,
    /// A command each node runs under (empty: none).
    pub wrap: Vec<String>,
    /// Environment of the node processes.
    pub env: Vec<(String, String)>,
    /// Further `serve` flags (engine, pool size, snapshot policy...).
    pub extra: Vec<String>,
    /// Longest wait for a leader, a write, or a catch-up.
    pub timeout: Duration,
    /// Print progress on stderr.
    pub progress: bool,
}

/// One timed start of a node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartTiming {
    /// Process start to the first `RAFTINFO` answer, ms.
    pub serving_ms: f64,
    /// Process start to an applied index at or above the leader's, ms.
    pub caught_up_ms: f64,
}

/// What a recovery run measured.
#[derive(Debug, Clone)]
pub struct CatchupResult {
    /// The follower that was stopped.
    pub follower: NodeId,
    /// Its applied index when it was killed.
    pub applied_at_kill: u64,
    /// The leader's applied index after the writes.
    pub leader_applied: u64,
    /// Wall time of the load, s.
    pub load_secs: f64,
    /// The lagging follower's start (recovery: `caught_up_ms`).
    pub recovery: StartTiming,
    /// Restarts of the caught-up follower (start-up with the data).
    pub startups: Vec<StartTiming>,
    /// With `PMKV_TIMING=1` (see [`mark`]): the steps of the recovery
    /// from the leader's and the follower's logs, as (ms after the
    /// follower's start, node, step); empty otherwise.
    pub steps: Vec<(f64, NodeId, String)>,
}

impl CatchupResult {
    /// The median start-up timing (`None` without restarts).
    pub fn startup_median(&self) -> Option<StartTiming> {
        if self.startups.is_empty() {
            return None;
        }
        let mut s: Vec<f64> = self.startups.iter().map(|t| t.serving_ms).collect();
        let mut c: Vec<f64> = self.startups.iter().map(|t| t.caught_up_ms).collect();
        s.sort_by(f64::total_cmp);
        c.sort_by(f64::total_cmp);
        Some(StartTiming {
            serving_ms: s[(s.len() - 1) / 2],
            caught_up_ms: c[(c.len() - 1) / 2],
        })
    }

    /// As one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let m = self.startup_median();
        serde_json::json!({
            "follower": self.follower,
            "applied_at_kill": self.applied_at_kill,
            "leader_applied": self.leader_applied,
            "load_secs": self.load_secs,
            "recovery_serving_ms": self.recovery.serving_ms,
            "recovery_ms": self.recovery.caught_up_ms,
            "startup_serving_ms": m.map(|t| t.serving_ms),
            "startup_caught_up_ms": m.map(|t| t.caught_up_ms),
            "startups": self.startups.iter().map(|t| serde_json::json!({
                "serving_ms": t.serving_ms, "caught_up_ms": t.caught_up_ms,
            })).collect::<Vec<_>>(),
        })
    }
}

struct Procs {
    spawns: BTreeMap<NodeId, Spawn>,
    children: BTreeMap<NodeId, Child>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.children.values_mut() {
            cluster::stop(c, Duration::from_secs(3));
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Poll `addr` (keeping one connection) until it answers `RAFTINFO` and
/// until its applied index reaches `target`; times from `t0`.
fn time_start(
    addr: &str,
    target: u64,
    t0: Instant,
    timeout: Duration,
    log: &str,
) -> Result<StartTiming, Error> {
    let mut conn: Option<Conn> = None;
    let mut serving = None;
    while t0.elapsed() < timeout {
        if conn.is_none() {
            conn = Conn::connect(addr, Duration::from_secs(2)).ok();
        }
        let info = conn
            .as_mut()
            .and_then(|c| c.call(&[b"RAFTINFO"]).ok())
            .and_then(|v| RaftInfo::from_value(&v));
        match info {
            Some(i) => {
                let now = t0.elapsed();
                serving.get_or_insert(now);
                if i.applied.unwrap_or(0) >= target {
                    return Ok(StartTiming {
                        serving_ms: ms(serving.unwrap_or(now)),
                        caught_up_ms: ms(now),
                    });
                }
            }
            None => conn = None,
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    Err(Error(format!(
        "the node at {addr} did not reach applied index {target} within {timeout:?} (answering: {}; its log: {log})",
        serving.is_some()
    )))
}

/// Send `writes` SETs to `leader` from `clients` threads, each key once.
fn load(cfg: &CatchupConfig, leader: &str) -> Result<Duration, Error> {
    let value = Arc::new(vec![b'v'; cfg.value_size]);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let clients = cfg.clients.clamp(1, cfg.writes.max(1));
    let mut threads = Vec::new();
    for t in 0..clients {
        let (leader, value, done) = (leader.to_string(), value.clone(), done.clone());
        let (writes, timeout) = (cfg.writes, cfg.timeout);
        threads.push(std::thread::spawn(move || -> Result<(), Error> {
            let mut c = Conn::connect(&leader, timeout)
                .map_err(|e| Error(format!("connect {leader}: {e}")))?;
            for i in (t..writes).step_by(clients) {
                let key = format!("rec:{i:08}");
                match c.call(&[b"SET", key.as_bytes(), &value]) {
                    Ok(Value::Simple(_)) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(other) => {
                        return Err(Error(format!(
                            "SET {key} on the leader {leader}: {other:?}"
                        )))
                    }
                    Err(e) => return Err(Error(format!("SET {key} on {leader}: {e}"))),
                }
            }
            Ok(())
        }));
    }
    let progress = cfg.progress.then(|| {
        let (done, stop, total) = (done.clone(), stop.clone(), cfg.writes);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                eprint!("\r  {}/{total} writes", done.load(Ordering::Relaxed));
            }
            eprintln!("\r  {}/{total} writes", done.load(Ordering::Relaxed));
        })
    });
    let mut failure = None;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(Error("a load thread panicked".into())),
        }
    }
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    if let Some(p) = progress {
        let _ = p.join();
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(took),
    }
}

/// Run the recovery and start-up measurement.
pub fn run(cfg: &CatchupConfig) -> Result<CatchupResult, Error> {
    if cfg.nodes < 3 || cfg.writes == 0 || cfg.clients == 0 {
        return Err(Error(
            "recovery runs need --nodes 3 or more and --writes and --clients of at least 1".into(),
        ));
    }
    let _ = std::fs::remove_dir_all(&cfg.dir);
    std::fs::create_dir_all(&cfg.dir)
        .map_err(|e| Error(format!("create {}: {e}", cfg.dir.display())))?;
    let mut members: BTreeMap<NodeId, NodeAddr> = BTreeMap::new();
    for id in 1..=cfg.nodes {
        members.insert(
            id,
            NodeAddr {
                raft: format!("127.0.0.1:{}", cluster::free_port()?),
                client: format!("127.0.0.1:{}", cluster::free_port()?),
            },
        );
    }
    let mut procs = Procs {
        spawns: BTreeMap::new(),
        children: BTreeMap::new(),
    };
    for id in 1..=cfg.nodes {
        let s = Spawn {
            bin: cfg.bin.clone(),
            id,
            dir: cfg.dir.join(format!("node-{id}")),
            members: members.clone(),
            routes: BTreeMap::new(),
            wrap: cfg.wrap.clone(),
            extra: cfg.extra.clone(),
            log: Some(cfg.dir.join(format!("node-{id}.log"))),
            env: cfg.env.clone(),
        };
        procs.children.insert(id, s.start()?);
        procs.spawns.insert(id, s);
    }
    let say = |s: String| {
        if cfg.progress {
            eprintln!("recovery: {s}");
        }
    };
    let (leader, laddr) = cluster::wait_leader(&members, cfg.timeout).ok_or_else(|| {
        Error(format!(
            "no leader within {:?} (node logs in {})",
            cfg.timeout,
            cfg.dir.display()
        ))
    })?;
    let follower = *members.keys().find(|id| **id != leader).expect("3 nodes");
    let faddr = members[&follower].client.clone();
    let applied_at_kill = crate::client::raft_info(&faddr, Duration::from_secs(2))
        .and_then(|i| i.applied)
        .unwrap_or(0);
    if let Some(mut c) = procs.children.remove(&follower) {
        cluster::kill_group(&mut c);
    }
    say(format!(
        "leader node {leader}; killed follower {follower} at applied index {applied_at_kill}; writing {} x {} B",
        cfg.writes, cfg.value_size
    ));
    let took = load(cfg, &laddr)?;
    let leader_applied = crate::client::raft_info(&laddr, Duration::from_secs(5))
        .and_then(|i| i.applied)
        .ok_or_else(|| Error(format!("the leader at {laddr} stopped answering RAFTINFO")))?;
    let log = cfg.dir.join(format!("node-{follower}.log"));
    let log = log.display().to_string();
    let t0 = Instant::now();
    let t0_us = epoch_us();
    procs
        .children
        .insert(follower, procs.spawns[&follower].start()?);
    let recovery = time_start(&faddr, leader_applied, t0, cfg.timeout, &log)?;
    say(format!(
        "follower {follower} answering after {:.1} ms, at applied index {leader_applied} after {:.1} ms",
        recovery.serving_ms, recovery.caught_up_ms
    ));
    let mut steps = Vec::new();
    if timing_on() {
        let end_us = t0_us + (recovery.caught_up_ms * 1e3) as u64 + 2000;
        let mut all = read_marks(
            &cfg.dir.join(format!("node-{leader}.log")),
            leader,
            t0_us,
            end_us,
        );
        all.extend(read_marks(
            &cfg.dir.join(format!("node-{follower}.log")),
            follower,
            t0_us,
            end_us,
        ));
        all.sort();
        for (t, node, what) in all {
            let at = (t - t0_us) as f64 / 1e3;
            let role = if node == leader { "leader" } else { "follower" };
            say(format!("  {at:8.1} ms  {role:8}  {what}"));
            steps.push((at, node, what));
        }
    }
    let mut startups = Vec::new();
    for r in 0..cfg.restarts {
        if let Some(mut c) = procs.children.remove(&follower) {
            cluster::stop(&mut c, Duration::from_secs(10));
        }
        let t0 = Instant::now();
        procs
            .children
            .insert(follower, procs.spawns[&follower].start()?);
        let t = time_start(&faddr, leader_applied, t0, cfg.timeout, &log)?;
        say(format!(
            "restart {}/{}: answering after {:.1} ms, caught up after {:.1} ms",
            r + 1,
            cfg.restarts,
            t.serving_ms,
            t.caught_up_ms
        ));
        startups.push(t);
    }
    Ok(CatchupResult {
        follower,
        applied_at_kill,
        leader_applied,
        load_secs: took.as_secs_f64(),
        recovery,
        startups,
        steps,
    })
}
