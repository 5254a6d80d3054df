//! Fault schedules against real node processes: one seed draws every
//! fault (kill -9 and restart of the leader or a follower, partitions,
//! delayed and dropping links through a [`Proxy`] per directed link),
//! concurrent clients record a history of GET/SET/CAS/DEL, a liveness phase
//! after healing requires progress, and [`lincheck`] judges the history.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::cluster::{self, Spawn};
use crate::lincheck::{self, Event, Op, Outcome, Verdict};
use crate::proxy::{Proxy, Rule};
use crate::resp::Value;
use crate::server::Error;
use crate::types::{NodeAddr, NodeId};

/// A deterministic generator (xorshift64*), so a seed replays a schedule.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A duration from `lo` to `hi` ms.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// A fault run's settings.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    /// The `pmkv-server` binary.
    pub bin: PathBuf,
    /// Work directory (node data, node logs); emptied first.
    pub dir: PathBuf,
    /// The seed every fault is drawn from.
    pub seed: u64,
    /// Nodes in the cluster.
    pub nodes: u64,
    /// Length of the phase with faults.
    pub safety: Duration,
    /// Length of the healed phase that must make progress.
    pub liveness: Duration,
    /// Concurrent clients.
    pub clients: usize,
    /// Keys the clients touch.
    pub keys: usize,
    /// Print each fault as it happens.
    pub verbose: bool,
    /// The nodes' storage engine (`mem`, `list`, `btree`, `wal`, `anchor`).
    pub engine: String,
}

/// What a run saw.
#[derive(Debug, Clone)]
pub struct FaultReport {
    /// The seed.
    pub seed: u64,
    /// The faults injected, with their times.
    pub faults: Vec<String>,
    /// Operations in the history.
    pub ops: usize,
    /// Writes acknowledged.
    pub acked_writes: usize,
    /// Operations whose outcome is unknown.
    pub unknown: usize,
    /// Writes acknowledged during the liveness phase.
    pub liveness_writes: usize,
    /// The checker's verdict on the whole history.
    pub verdict: Verdict,
}

impl FaultReport {
    /// Whether the run passed: linearizable and progress after healing.
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Linearizable && self.liveness_writes > 0
    }
}

/// The line that replays a run.
pub fn reproduce_line(cfg: &FaultConfig) -> String {
    format!(
        "pmkv-server faults --seed {} --engine {} --nodes {} --safety-secs {} --liveness-secs {} --clients {} --keys {} --dir {}",
        cfg.seed,
        cfg.engine,
        cfg.nodes,
        cfg.safety.as_secs(),
        cfg.liveness.as_secs(),
        cfg.clients,
        cfg.keys,
        cfg.dir.display()
    )
}

fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error(format!("find a free loopback port: {e}")))
}

struct Cluster {
    spawns: BTreeMap<NodeId, Spawn>,
    children: BTreeMap<NodeId, Option<Child>>,
    /// (from, to) -> proxy carrying from's RPCs to `to`.
    links: BTreeMap<(NodeId, NodeId), Proxy>,
    members: BTreeMap<NodeId, NodeAddr>,
}

impl Cluster {
    fn kill(&mut self, id: NodeId) {
        if let Some(Some(mut c)) = self.children.insert(id, None) {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    fn restart(&mut self, id: NodeId) -> Result<(), Error> {
        if matches!(self.children.get(&id), Some(Some(_))) {
            return Ok(());
        }
        let child = self.spawns[&id].start()?;
        self.children.insert(id, Some(child));
        Ok(())
    }

    fn live(&self) -> Vec<NodeId> {
        self.children
            .iter()
            .filter(|(_, c)| c.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    fn isolate(&self, id: NodeId, rule: Rule) {
        for ((a, b), p) in &self.links {
            if *a == id || *b == id {
                p.set(rule);
            }
        }
    }

    fn heal(&self) {
        for p in self.links.values() {
            p.set(Rule::Pass);
        }
    }

    fn leader(&self) -> Option<NodeId> {
        for id in self.live() {
            if let Some(l) =
                crate::client::leader_of(&self.members[&id].client, Duration::from_millis(300))
            {
                return self
                    .members
                    .iter()
                    .find(|(_, m)| m.client == l)
                    .map(|(i, _)| *i);
            }
        }
        None
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let ids: Vec<NodeId> = self.children.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }
}

struct Shared {
    start: Instant,
    history: Mutex<Vec<Event>>,
    stop: AtomicBool,
    live_phase: AtomicBool,
    live_writes: AtomicU64,
}

fn now(s: &Shared) -> u64 {
    s.start.elapsed().as_nanos() as u64
}

/// Clients move to a fresh set of keys every [`KEY_EPOCH`] (as Jepsen's
/// independent keys do), which bounds each key's history and so the
/// checker's search, however long the run.
pub const KEY_EPOCH: Duration = Duration::from_secs(1);

fn generation(s: &Shared) -> u64 {
    (s.start.elapsed().as_millis() / KEY_EPOCH.as_millis()) as u64
}

fn key_name(generation: u64, slot: usize) -> Vec<u8> {
    format!("k{generation}-{slot}").into_bytes()
}

/// One client: random operations on a few keys, each attempt recorded.
fn client_loop(id: usize, addrs: Vec<String>, keys: usize, seed: u64, sh: Arc<Shared>) {
    let mut rng = Rng::new(seed ^ (id as u64 + 1).wrapping_mul(0x1234_5678_9abc_def1));
    let mut c = Client::new(addrs.clone(), Duration::from_secs(8));
    c.prefer(id);
    let mut seen: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut n = 0u64;
    while !sh.stop.load(Ordering::Relaxed) {
        let key = key_name(generation(&sh), rng.below(keys as u64) as usize);
        let k = key.clone();
        n += 1;
        let fresh = format!("c{id}-{n}").into_bytes();
        let op = match rng.below(10) {
            0..=3 => Op::Get,
            4..=6 => Op::Set(fresh.clone()),
            7..=8 => Op::Cas {
                expected: seen.get(&k).cloned().unwrap_or_else(|| b"none".to_vec()),
                new: fresh.clone(),
            },
            _ => Op::Del,
        };
        let args: Vec<&[u8]> = match &op {
            Op::Get => vec![b"GET", &key],
            Op::Set(v) => vec![b"SET", &key, v],
            Op::Del => vec![b"DEL", &key],
            Op::Cas { expected, new } => vec![b"CAS", &key, expected, new],
        };
        let call = now(&sh);
        let res = c.call_once(&args);
        let ret = now(&sh);
        let write = op != Op::Get;
        let outcome = match (&op, res) {
            (Op::Get, Ok(Value::Bulk(v))) => {
                seen.insert(k, v.clone());
                Some(Outcome::Value(Some(v)))
            }
            (Op::Get, Ok(Value::Nil)) => Some(Outcome::Value(None)),
            (Op::Set(v), Ok(Value::Simple(s))) if s == "OK" => {
                seen.insert(k, v.clone());
                Some(Outcome::Ok)
            }
            (Op::Del | Op::Cas { .. }, Ok(Value::Int(i))) => Some(Outcome::Bool(i == 1)),
            // Rejected before being appended (a follower, no leader) or
            // truncated before commit: no effect.
            (_, Ok(Value::Error(e))) if e.starts_with("REDIRECT") || e.starts_with("TRYAGAIN") => {
                None
            }
            // A read that failed had no effect; a write may have.
            (Op::Get, _) => None,
            _ => Some(Outcome::Unknown),
        };
        if let Some(outcome) = outcome {
            if write && outcome != Outcome::Unknown && sh.live_phase.load(Ordering::Relaxed) {
                sh.live_writes.fetch_add(1, Ordering::Relaxed);
            }
            sh.history
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Event {
                    client: id,
                    key,
                    op,
                    outcome,
                    call,
                    ret,
                });
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Run one fault schedule: start the cluster behind proxies, inject faults
/// with clients running, heal, require progress, check the history.
pub fn run(cfg: &FaultConfig) -> Result<FaultReport, Error> {
    if cfg.nodes < 3 || cfg.clients == 0 || cfg.keys == 0 {
        return Err(Error(
            "fault runs need --nodes 3 or more, --clients and --keys of at least 1".into(),
        ));
    }
    let _ = std::fs::remove_dir_all(&cfg.dir);
    std::fs::create_dir_all(&cfg.dir)
        .map_err(|e| Error(format!("create {}: {e}", cfg.dir.display())))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error(format!("tokio runtime: {e}")))?;
    let mut rng = Rng::new(cfg.seed);
    let mut members = BTreeMap::new();
    for id in 1..=cfg.nodes {
        members.insert(
            id,
            NodeAddr {
                raft: format!("127.0.0.1:{}", free_port()?),
                client: format!("127.0.0.1:{}", free_port()?),
            },
        );
    }
    let mut links = BTreeMap::new();
    for a in 1..=cfg.nodes {
        for b in 1..=cfg.nodes {
            if a != b {
                let p = rt
                    .block_on(Proxy::start(members[&b].raft.clone(), rng.next_u64()))
                    .map_err(|e| Error(format!("start proxy: {e}")))?;
                links.insert((a, b), p);
            }
        }
    }
    let mut spawns = BTreeMap::new();
    for id in 1..=cfg.nodes {
        let routes = (1..=cfg.nodes)
            .filter(|b| *b != id)
            .map(|b| (b, links[&(id, b)].addr.clone()))
            .collect();
        let extra = [
            "--engine",
            &cfg.engine,
            "--pool-mb",
            "32",
            "--snapshot-every",
            "60",
            "--keep-logs",
            "20",
            "--election-ms",
            "400-800",
        ];
        spawns.insert(
            id,
            Spawn {
                bin: cfg.bin.clone(),
                id,
                dir: cfg.dir.join(format!("node-{id}")),
                members: members.clone(),
                routes,
                wrap: Vec::new(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                log: Some(cfg.dir.join(format!("node-{id}.log"))),
            },
        );
    }
    let mut cl = Cluster {
        spawns,
        children: BTreeMap::new(),
        links,
        members: members.clone(),
    };
    for id in 1..=cfg.nodes {
        cl.restart(id)?;
    }
    if cluster::wait_leader(&members, Duration::from_secs(30)).is_none() {
        return Err(Error(format!(
            "no leader within 30 s of start (node logs in {})",
            cfg.dir.display()
        )));
    }
    let sh = Arc::new(Shared {
        start: Instant::now(),
        history: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        live_phase: AtomicBool::new(false),
        live_writes: AtomicU64::new(0),
    });
    let addrs: Vec<String> = members.values().map(|m| m.client.clone()).collect();
    let mut threads = Vec::new();
    for i in 0..cfg.clients {
        let (a, s, keys, seed) = (addrs.clone(), sh.clone(), cfg.keys, cfg.seed);
        threads.push(std::thread::spawn(move || client_loop(i, a, keys, seed, s)));
    }

    // Safety phase: a fault, a pause, a heal, a pause, ...
    let mut faults = Vec::new();
    let mut log = |sh: &Shared, what: String| {
        let line = format!("{:7.3}s {what}", sh.start.elapsed().as_secs_f64());
        if cfg.verbose {
            eprintln!("faults: {line}");
        }
        faults.push(line);
    };
    let end = Instant::now() + cfg.safety;
    let majority_down = (cfg.nodes - 1) / 2;
    while Instant::now() < end {
        std::thread::sleep(rng.ms(300, 900));
        let live = cl.live();
        let down = cfg.nodes as usize - live.len();
        let victim = live.get(rng.below(live.len() as u64) as usize).copied();
        match rng.below(7) {
            0 if down < majority_down as usize + 1 => {
                if let Some(l) = cl.leader().filter(|l| live.contains(l)) {
                    cl.kill(l);
                    log(&sh, format!("kill -9 leader {l}"));
                }
            }
            1 if down < majority_down as usize + 1 => {
                if let Some(v) = victim {
                    cl.kill(v);
                    log(&sh, format!("kill -9 node {v}"));
                }
            }
            2 => {
                if let Some(v) = victim {
                    cl.isolate(v, Rule::Cut);
                    log(&sh, format!("partition node {v} from the others"));
                }
            }
            3 => {
                if let Some(v) = victim {
                    let d = rng.ms(5, 60);
                    cl.isolate(v, Rule::Delay(d));
                    log(&sh, format!("delay node {v}'s links by {d:?}"));
                }
            }
            4 => {
                if let Some(v) = victim {
                    let p = (1 + rng.below(30)) as f64 / 100.0;
                    cl.isolate(v, Rule::Drop(p));
                    log(&sh, format!("drop node {v}'s traffic with p={p}"));
                }
            }
            _ => {
                cl.heal();
                let dead: Vec<NodeId> =
                    (1..=cfg.nodes).filter(|i| !cl.live().contains(i)).collect();
                for d in &dead {
                    cl.restart(*d)?;
                }
                log(&sh, format!("heal links, restart {dead:?}"));
            }
        }
    }

    // Liveness phase: everything healed and running; progress required.
    cl.heal();
    for id in 1..=cfg.nodes {
        cl.restart(id)?;
    }
    log(
        &sh,
        "liveness phase: all links healed, all nodes up".to_string(),
    );
    sh.live_phase.store(true, Ordering::Relaxed);
    std::thread::sleep(cfg.liveness);
    sh.stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    // A final read of every key, recorded like the rest.
    let mut c = Client::new(addrs, Duration::from_secs(8));
    let keys: Vec<Vec<u8>> = (0..=generation(&sh))
        .flat_map(|g| (0..cfg.keys).map(move |k| key_name(g, k)))
        .collect();
    for key in keys {
        let call = now(&sh);
        let got = c.call(&[b"GET", &key], 100);
        let ret = now(&sh);
        let outcome = match got {
            Ok(Value::Bulk(v)) => Outcome::Value(Some(v)),
            Ok(Value::Nil) => Outcome::Value(None),
            other => {
                let k = String::from_utf8_lossy(&key).into_owned();
                return Err(Error(format!(
                    "final read of {k} failed: {other:?}; reproduce: {}",
                    reproduce_line(cfg)
                )));
            }
        };
        sh.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Event {
                client: usize::MAX,
                key,
                op: Op::Get,
                outcome,
                call,
                ret,
            });
    }
    drop(cl);
    let history = std::mem::take(&mut *sh.history.lock().unwrap_or_else(|p| p.into_inner()));
    let verdict = lincheck::check(&history);
    Ok(FaultReport {
        seed: cfg.seed,
        faults,
        ops: history.len(),
        acked_writes: history
            .iter()
            .filter(|e| e.op != Op::Get && e.outcome != Outcome::Unknown)
            .count(),
        unknown: history
            .iter()
            .filter(|e| e.outcome == Outcome::Unknown)
            .count(),
        liveness_writes: sh.live_writes.load(Ordering::Relaxed) as usize,
        verdict,
    })
}
