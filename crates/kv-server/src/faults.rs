//! Fault schedules against real node processes: one seed draws every
//! fault (kill -9 and restart of the leader or a follower, partitions,
//! delayed and dropping links through a [`Proxy`] per directed link),
//! concurrent clients record a history of GET/SET/CAS/DEL, a liveness phase
//! after healing requires progress, and [`lincheck`] judges the history.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    /// Move the clients to a fresh set of keys this often (as Jepsen's
    /// independent keys do); `None`: the same keys for the whole run, so
    /// every key is hot and its history long.
    pub key_epoch: Option<Duration>,
    /// Print each fault as it happens.
    pub verbose: bool,
    /// The nodes' storage engine (`mem`, `list`, `btree`, `wal`, `anchor`).
    pub engine: String,
    /// After the safety phase, restore a node's pool from `pmlab crash`
    /// images (a PM engine only).
    pub crash_image: Option<CrashImageConfig>,
}

/// The crash-image fault, in `images` rounds on one node drawn from the
/// seed: the node is restarted under `pmlab trace --data` (the `pmlab
/// cargo` build of the server, only its pool PM), runs with the clients
/// for `traced`, and is stopped with SIGTERM, so the trace ends where the
/// process did and its files are as it left them; `pmlab crash --points
/// end` writes images of its pool at that moment, where every line not yet
/// flushed and fenced may or may not have reached PM; the node is started
/// again on one of them (round 0: the image that loses every such line;
/// round 1: the next; later rounds: a random subset) and the cluster runs
/// for `settle`. At the end the node must have caught up with the leader
/// and hold what the final reads saw.
#[derive(Debug, Clone)]
pub struct CrashImageConfig {
    /// The `pmlab` binary.
    pub pmlab: PathBuf,
    /// The `pmlab cargo` build of `pmkv-server`.
    pub traced_bin: PathBuf,
    /// How long the traced node runs with the clients.
    pub traced: Duration,
    /// Rounds, each restoring one image.
    pub images: usize,
    /// How long the cluster runs after each restore.
    pub settle: Duration,
}

/// The `pmlab cargo` build of `pmkv-server` that belongs to the plain one
/// in `release` (`target/release`): `target/pmlab/<triple>/release/pmkv-server`
/// for the one host triple found there, if built.
pub fn default_traced_bin(release: &Path) -> Option<PathBuf> {
    let pmlab_dir = release.parent()?.join("pmlab");
    std::fs::read_dir(&pmlab_dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("release").join("pmkv-server"))
        .find(|p| p.is_file())
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
    /// The checker's effort: the key with the most operations, the key
    /// that took the most steps, and the time over all keys.
    pub longest: lincheck::KeyStats,
    /// See `longest`.
    pub hardest: lincheck::KeyStats,
    /// See `longest`.
    pub check_time: Duration,
    /// The history as text ([`lincheck::format_history`]), for
    /// `pmkv-server lincheck FILE`.
    pub history_file: PathBuf,
    /// Crash images restored into the node of the crash-image fault.
    pub images_restored: usize,
    /// Keys where that node, caught up, differs from the final reads
    /// (`key: node's value / final read`); empty when it matches.
    pub image_node_diffs: Vec<String>,
}

impl FaultReport {
    /// Whether the run passed: linearizable, progress after healing, and
    /// a node restored from crash images that matches the others.
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Linearizable
            && self.liveness_writes > 0
            && self.image_node_diffs.is_empty()
    }
}

impl FaultReport {
    /// The checker's effort, one line.
    pub fn check_line(&self) -> String {
        let k = |s: &lincheck::KeyStats| {
            format!(
                "{} ({} ops, {} unknown, {} steps, {:.3} s)",
                String::from_utf8_lossy(&s.key),
                s.ops,
                s.unknown,
                s.steps,
                s.time.as_secs_f64()
            )
        };
        format!(
            "checker: {:.3} s; longest key {}; hardest key {}; history in {}",
            self.check_time.as_secs_f64(),
            k(&self.longest),
            k(&self.hardest),
            self.history_file.display()
        )
    }

    /// Why the run failed, with how to reproduce it; `None` if it passed.
    pub fn failure(&self, cfg: &FaultConfig) -> Option<String> {
        if self.passed() {
            return None;
        }
        let mut why = vec![format!("seed {}", self.seed)];
        if self.verdict != Verdict::Linearizable {
            why.push(format!(
                "{} (re-check the recorded history: pmkv-server lincheck {})",
                self.verdict,
                self.history_file.display()
            ));
        }
        if self.liveness_writes == 0 {
            why.push("no write acknowledged after healing".into());
        }
        if !self.image_node_diffs.is_empty() {
            why.push(format!(
                "the node restored from crash images differs: {}",
                self.image_node_diffs.join("; ")
            ));
        }
        Some(format!(
            "{}; replay the schedule: {}",
            why.join("; "),
            reproduce_line(cfg)
        ))
    }
}

/// The line that replays a run.
pub fn reproduce_line(cfg: &FaultConfig) -> String {
    let mut line = format!(
        "pmkv-server faults --seed {} --engine {} --nodes {} --safety-secs {} --liveness-secs {} --clients {} --keys {} --key-epoch-ms {} --dir {}",
        cfg.seed,
        cfg.engine,
        cfg.nodes,
        cfg.safety.as_secs(),
        cfg.liveness.as_secs(),
        cfg.clients,
        cfg.keys,
        cfg.key_epoch.map_or(0, |d| d.as_millis()),
        cfg.dir.display()
    );
    if let Some(c) = &cfg.crash_image {
        line.push_str(&format!(
            " --crash-images {} --traced-secs {} --pmlab {} --traced-bin {}",
            c.images,
            c.traced.as_secs(),
            c.pmlab.display(),
            c.traced_bin.display()
        ));
    }
    line
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
            cluster::kill_group(&mut c); // SIGKILL
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
    key_epoch: Option<Duration>,
    history: Mutex<Vec<Event>>,
    stop: AtomicBool,
    live_phase: AtomicBool,
    live_writes: AtomicU64,
}

fn now(s: &Shared) -> u64 {
    s.start.elapsed().as_nanos() as u64
}

/// Which set of keys the clients use now ([`FaultConfig::key_epoch`]).
fn generation(s: &Shared) -> u64 {
    s.key_epoch.map_or(0, |e| {
        (s.start.elapsed().as_millis() / e.as_millis().max(1)) as u64
    })
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
                raft: format!("127.0.0.1:{}", cluster::free_port()?),
                client: format!("127.0.0.1:{}", cluster::free_port()?),
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
                env: Vec::new(),
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
        key_epoch: cfg.key_epoch,
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

    // Crash images: one node's pool restored from `pmlab crash` images.
    let image_node = match &cfg.crash_image {
        Some(ci) => Some(crash_image_phase(&mut cl, cfg, ci, &mut rng, &mut |w| {
            log(&sh, w)
        })?),
        None => None,
    };

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
    let mut finals: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for key in keys {
        let call = now(&sh);
        let got = c.call(&[b"GET", &key], 100);
        let ret = now(&sh);
        let outcome = match got {
            Ok(Value::Bulk(v)) => {
                finals.push((key.clone(), Some(v.clone())));
                Outcome::Value(Some(v))
            }
            Ok(Value::Nil) => {
                finals.push((key.clone(), None));
                Outcome::Value(None)
            }
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
    let (images_restored, image_node_diffs) = match image_node {
        Some((v, n)) => (n, compare_node(&cl, v, &finals)),
        None => (0, Vec::new()),
    };
    drop(cl);
    let history = std::mem::take(&mut *sh.history.lock().unwrap_or_else(|p| p.into_inner()));
    let history_file = cfg.dir.join("history.txt");
    std::fs::write(&history_file, lincheck::format_history(&history))
        .map_err(|e| Error(format!("write {}: {e}", history_file.display())))?;
    let checked = lincheck::check_with(&history, lincheck::Limits::default());
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
        verdict: checked.verdict,
        longest: checked.longest,
        hardest: checked.hardest,
        check_time: checked.time,
        history_file,
        images_restored,
        image_node_diffs,
    })
}

/// SIGTERM `child`, wait up to `grace` (then SIGKILL); whether it exited
/// with status 0.
fn stop_clean(child: &mut Child, grace: Duration) -> bool {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(st)) = child.try_wait() {
            return st.success();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster::kill_group(child);
    false
}

/// The crash-image fault (see [`CrashImageConfig`]); returns the node and
/// the number of images restored into it.
fn crash_image_phase(
    cl: &mut Cluster,
    cfg: &FaultConfig,
    ci: &CrashImageConfig,
    rng: &mut Rng,
    log: &mut dyn FnMut(String),
) -> Result<(NodeId, usize), Error> {
    if cfg.engine == "mem" {
        return Err(Error(
            "the crash-image fault needs a PM engine (list, btree, wal or anchor), not mem".into(),
        ));
    }
    cl.heal();
    for id in 1..=cfg.nodes {
        cl.restart(id)?;
    }
    let v = 1 + rng.below(cfg.nodes);
    let work = cfg.dir.join("crash-image");
    let _ = std::fs::remove_dir_all(&work);
    let rounds = ci.images.max(1);
    for round in 0..rounds {
        let seed = rng.next_u64() % 1_000_000;
        let (img, which) =
            crash_image(cl, v, ci, &work.join(format!("round-{round}")), round, seed)?;
        log(format!(
            "node {v} ran traced and stopped (SIGTERM); restart it with crash image {which} of its pool ({})",
            if which == 0 {
                "every line not flushed and fenced lost"
            } else {
                "some or all of those lines kept"
            }
        ));
        let pool = cl.spawns[&v].dir.join(crate::engine::POOL_FILE);
        std::fs::copy(&img, &pool)
            .map_err(|e| Error(format!("copy {} to {}: {e}", img.display(), pool.display())))?;
        cl.restart(v)?;
        std::thread::sleep(ci.settle);
    }
    Ok((v, rounds))
}

/// One round of the crash-image fault: restart node `v` under `pmlab trace
/// --data`, let it run, stop it with SIGTERM (the trace ends where the
/// process did; its data directory stays as it left it), and have `pmlab
/// crash --points end` write images of its pool. Returns the image to
/// restore and its number: round 0 takes image 0 (every pending line
/// lost), round 1 image 1 (all kept), later rounds image 2 (a random subset
/// drawn from `seed`). A restored image is never older than what the node
/// acknowledged: that would rewind its Raft log, which Raft does not
/// survive and a crash cannot do.
fn crash_image(
    cl: &mut Cluster,
    v: NodeId,
    ci: &CrashImageConfig,
    work: &Path,
    round: usize,
    seed: u64,
) -> Result<(PathBuf, usize), Error> {
    let io =
        |what: &str, p: &Path, e: std::io::Error| Error(format!("{what} {}: {e}", p.display()));
    let images = work.join("images");
    std::fs::create_dir_all(&images).map_err(|e| io("create", &images, e))?;
    let trace = work.join(format!("node-{v}.pmt"));
    let node_log = cl.spawns[&v].log.clone().unwrap_or_default();
    cl.kill(v);
    let mut traced = cl.spawns[&v].clone();
    traced.bin = ci.traced_bin.clone();
    traced.wrap = vec![
        ci.pmlab.display().to_string(),
        "trace".into(),
        "--data".into(),
        "-o".into(),
        trace.display().to_string(),
        "--".into(),
    ];
    traced.env = vec![("PMLAB_INSTR_PM".into(), "pool".into())];
    // One worker thread: the trace orders records exactly only within a
    // thread, and an engine write flushed by another thread could be
    // misordered (a false torn image).
    traced
        .extra
        .extend(["--worker-threads".to_string(), "1".to_string()]);
    let mut child = traced.start()?;
    std::thread::sleep(ci.traced);
    if !stop_clean(&mut child, Duration::from_secs(60)) {
        return Err(Error(format!(
            "node {v} under pmlab trace did not stop cleanly on SIGTERM (its log: {})",
            node_log.display()
        )));
    }
    let check = format!(
        "n=$(ls {d} | wc -l); cp {{}} {d}/image-$n.pool",
        d = images.display()
    );
    let want = round.min(2);
    let out = std::process::Command::new(&ci.pmlab)
        .arg("crash")
        .arg("--trace")
        .arg(&trace)
        .args(["--points", "end", "--budget"])
        .arg((want + 1).max(3).to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--dir")
        .arg(work.join("crash"))
        .arg("--check")
        .arg(&check)
        .output()
        .map_err(|e| Error(format!("run {}: {e}", ci.pmlab.display())))?;
    if !out.status.success() {
        return Err(Error(format!(
            "pmlab crash on {} failed ({}): {}",
            trace.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&images)
        .map_err(|e| io("read", &images, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name
                .strip_prefix("image-")?
                .strip_suffix(".pool")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort();
    // Fewer images than asked: the pending lines were few enough to
    // enumerate (or none), and the last one stands for the rest.
    let which = want.min(files.len().saturating_sub(1));
    match files.get(which) {
        Some((_, p)) => Ok((p.clone(), which)),
        None => Err(Error(format!(
            "pmlab crash wrote no image of node {v}'s pool ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// Wait until node `v` has applied as far as the others, then compare its
/// state machine (`LOCALGET`) with the final reads; the differences found.
fn compare_node(cl: &Cluster, v: NodeId, finals: &[(Vec<u8>, Option<Vec<u8>>)]) -> Vec<String> {
    use crate::client::{raft_info, Conn};
    let addr = &cl.members[&v].client;
    let end = Instant::now() + Duration::from_secs(30);
    let target = cl
        .members
        .iter()
        .filter(|(id, _)| **id != v)
        .filter_map(|(_, m)| raft_info(&m.client, Duration::from_secs(2))?.applied)
        .max()
        .unwrap_or(0);
    loop {
        match raft_info(addr, Duration::from_secs(2)) {
            Some(i) if i.applied.unwrap_or(0) >= target => break,
            last if Instant::now() > end => {
                return vec![format!(
                    "node {v} (restored from a crash image) did not reach applied index {target} within 30 s (it reports {last:?})"
                )]
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let mut c = match Conn::connect(addr, Duration::from_secs(5)) {
        Ok(c) => c,
        Err(e) => return vec![format!("connect to node {v}: {e}")],
    };
    let show = |v: &Option<Vec<u8>>| match v {
        Some(b) => String::from_utf8_lossy(b).into_owned(),
        None => "nil".into(),
    };
    let mut diffs = Vec::new();
    for (key, want) in finals {
        let got = match c.call(&[b"LOCALGET", key]) {
            Ok(Value::Bulk(b)) => Some(b),
            Ok(Value::Nil) => None,
            other => {
                diffs.push(format!("LOCALGET on node {v}: {other:?}"));
                break;
            }
        };
        if &got != want {
            diffs.push(format!(
                "{}: node {v} holds {} / final read {}",
                String::from_utf8_lossy(key),
                show(&got),
                show(want)
            ));
        }
    }
    diffs
}
