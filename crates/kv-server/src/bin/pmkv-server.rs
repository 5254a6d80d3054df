//! `pmkv-server`: run one node of the replicated key-value service, or a
//! local cluster of them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand};
use pmlab_kv_server::catchup;
use pmlab_kv_server::cluster::{self, Spawn};
use pmlab_kv_server::engine as kvengine;
use pmlab_kv_server::faults::{self, FaultConfig};
use pmlab_kv_server::lincheck;
use pmlab_kv_server::loadgen;
use pmlab_kv_server::server::{Node, NodeConfig};
use pmlab_kv_server::store::LogPlacement;
use pmlab_kv_server::types::{NodeAddr, NodeId};

#[derive(Parser)]
#[command(
    name = "pmkv-server",
    about = "Raft-replicated key-value service speaking RESP (redis-cli works)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Tuning {
    /// Storage engine of the state machine: mem (volatile, rebuilt from a
    /// snapshot file and the log) or a PM engine of pmlab-kv, list, btree,
    /// wal or anchor (pool file kv.pool in the node's data directory).
    #[arg(long, default_value = "mem")]
    engine: String,
    /// Size of a new PM pool in MiB (an existing pool keeps its size).
    #[arg(long, default_value_t = 256)]
    pool_mb: u64,
    /// Where the Raft log lives: auto (in the engine for list, btree and
    /// anchor; a separate file for wal and mem), engine, or file.
    #[arg(long, default_value = "auto")]
    raft_log: String,
    /// Build a snapshot and purge the log every this many entries.
    #[arg(long, default_value_t = 10_000)]
    snapshot_every: u64,
    /// Log entries kept behind the last snapshot.
    #[arg(long, default_value_t = 1000)]
    keep_logs: u64,
    /// Leader heartbeat interval in ms.
    #[arg(long, default_value_t = 50)]
    heartbeat_ms: u64,
    /// Election timeout range in ms, MIN-MAX.
    #[arg(long, default_value = "300-600")]
    election_ms: String,
    /// Most client connections at once.
    #[arg(long, default_value_t = 1024)]
    max_clients: usize,
    /// A node's tokio runtime: current (every task on one thread, so a
    /// hand-off between tasks is a poll rather than a thread wake-up) or
    /// multi (a pool of --worker-threads threads).
    #[arg(long, default_value = "current")]
    runtime: String,
    /// Hold back a commit-only AppendEntries (no entries, only a new commit
    /// index) sent within this many ms of the last one to that follower:
    /// the commit index rides on the next message (0: send each at once).
    #[arg(long, default_value_t = pmlab_kv_server::server::DEFAULT_COMMIT_LAG_MS)]
    commit_lag_ms: u64,
    /// Before sleeping in epoll, poll for up to this many us for a message
    /// (spin-before-block; 0: off). Costs CPU; see docs/kv-server.md.
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node.
    Serve {
        /// This node's id.
        #[arg(long)]
        id: NodeId,
        /// Data directory (Raft log, metadata, snapshots).
        #[arg(long)]
        dir: PathBuf,
        /// A member: ID=RAFT_HOST:PORT,CLIENT_HOST:PORT (repeat for each node, this one included).
        #[arg(long = "peer")]
        peers: Vec<String>,
        /// Membership file (`[[node]]` tables with id, raft, client) instead of --peer.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Dial ID's Raft port at HOST:PORT instead (for proxies): ID=HOST:PORT.
        #[arg(long = "route", hide = true)]
        routes: Vec<String>,
        /// Tokio worker threads with --runtime multi (1: every engine write
        /// on one thread, as `pmlab trace` orders records exactly only
        /// within a thread; --runtime current has that too).
        #[arg(long, default_value_t = 2)]
        worker_threads: usize,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// Start a local cluster of node processes on loopback; Ctrl-C stops them all.
    Cluster {
        /// Number of nodes (client ports BASE.., Raft ports BASE+100..).
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        /// Directory for the nodes' data (node-ID subdirectories and logs).
        #[arg(long)]
        dir: PathBuf,
        /// First client port.
        #[arg(long, default_value_t = 7000)]
        base_port: u16,
        /// Membership file instead of --nodes/--base-port.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Run each node under this command, e.g. "pmlab run --source instrumented --pm-latency 305 --".
        #[arg(long)]
        wrap: Option<String>,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// Measure the service: `--mode latency` (default) against a running
    /// cluster; `--mode recovery` starts its own cluster and times a
    /// lagging follower's catch-up and a node's start-up with the data;
    /// `--mode floor` times bare round trips through 1 and 2 relay
    /// processes, the least any replicated write can take on this machine.
    Bench(BenchArgs),
    /// Run a fault schedule against a local cluster and check the history.
    Faults(FaultArgs),
    /// The median time of each step of a SET from the PMKV_SET_TRACE
    /// files of a cluster's nodes (leader and followers).
    #[command(hide = true)]
    SetTrace {
        /// One file per node.
        files: Vec<PathBuf>,
    },
    /// One relay process of `bench --mode floor` (prints its port).
    #[command(hide = true)]
    FloorRelay {
        /// blocking or tokio.
        #[arg(long, default_value = "blocking")]
        wait: String,
        /// Pass each frame on to this address and relay its answer back.
        #[arg(long)]
        next: Option<String>,
    },
    /// Check a recorded history for linearizability (a fault run writes
    /// its own to DIR/history.txt), or a synthetic one.
    Lincheck(LincheckArgs),
}

/// `bench`'s flags.
#[derive(clap::Args)]
struct BenchArgs {
    /// latency (SET/GET latency and throughput of --addrs), recovery or floor.
    #[arg(long, default_value = "latency")]
    mode: String,
    /// Client addresses of the nodes, comma-separated (the leader is found).
    #[arg(long, value_delimiter = ',')]
    addrs: Vec<String>,
    /// Client threads per run, comma-separated (e.g. 1,20); recovery: the
    /// first is the number of threads loading the writes (default there 20).
    #[arg(long, value_delimiter = ',')]
    clients: Vec<usize>,
    /// Timed operations per client thread.
    #[arg(long, default_value_t = 2000)]
    ops: usize,
    /// Untimed operations per thread first.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Value size in bytes (default 100; recovery 4096).
    #[arg(long)]
    value_size: Option<usize>,
    /// Time GETs instead of SETs.
    #[arg(long)]
    reads: bool,
    /// Write the latency distribution plot here (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Print one JSON object per run.
    #[arg(long)]
    json: bool,
    /// Recovery: writes the stopped follower misses.
    #[arg(long, default_value_t = 15_000)]
    writes: usize,
    /// Recovery: timed restarts of the caught-up follower (start-up).
    #[arg(long, default_value_t = 3)]
    restarts: usize,
    /// Recovery: work directory for the nodes (emptied first).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Recovery: run each node under this command, e.g. "pmlab run --source instrumented --pm-latency 305 --".
    #[arg(long)]
    wrap: Option<String>,
    /// Recovery: the `pmkv-server` binary the nodes run (default: this one;
    /// give the `pmlab cargo` build for --wrap "pmlab run --source instrumented ...").
    #[arg(long)]
    node_bin: Option<PathBuf>,
    #[command(flatten)]
    tuning: Tuning,
}

/// `lincheck`'s flags.
#[derive(clap::Args)]
struct LincheckArgs {
    /// A history file (`pmkv-server faults` writes DIR/history.txt).
    file: Option<PathBuf>,
    /// Check a synthetic history instead: CLIENTS,KEYS,OPS,UNKNOWN_PCT
    /// (clients on keys, operations in all, percent of unknown outcomes),
    /// e.g. 12,1,20000,5.
    #[arg(long, value_delimiter = ',')]
    synthetic: Vec<u64>,
    /// Seed of the synthetic history.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Step limit of the search per key.
    #[arg(long, default_value_t = lincheck::STEP_LIMIT)]
    max_steps: u64,
}

/// `faults`' flags.
#[derive(clap::Args)]
struct FaultArgs {
    /// Seed of the schedule (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Nodes (3 or more).
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Seconds of faults.
    #[arg(long, default_value_t = 60)]
    safety_secs: u64,
    /// Seconds of healed running that must make progress.
    #[arg(long, default_value_t = 10)]
    liveness_secs: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Keys the clients touch.
    #[arg(long, default_value_t = 8)]
    keys: usize,
    /// Move the clients to fresh keys every this many ms (0: the same keys
    /// for the whole run, each one hot).
    #[arg(long, default_value_t = 1000)]
    key_epoch_ms: u64,
    /// Work directory (emptied first).
    #[arg(long)]
    dir: PathBuf,
    /// Runs, each with the next seed.
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// The nodes' storage engine: mem, list, btree, wal or anchor.
    #[arg(long, default_value = "list")]
    engine: String,
    /// After the faults, restore one node's pool from this many
    /// `pmlab crash` images of a traced run, one after another (0: none).
    #[arg(long, default_value_t = 0)]
    crash_images: usize,
    /// Seconds the node runs under `pmlab trace` before its images are made.
    #[arg(long, default_value_t = 5)]
    traced_secs: u64,
    /// The pmlab binary (for --crash-images; default: pmlab next to this binary, else on PATH).
    #[arg(long)]
    pmlab: Option<PathBuf>,
    /// The `pmlab cargo` build of pmkv-server that runs traced (default:
    /// target/pmlab/HOST/release/pmkv-server beside this binary's target/release).
    #[arg(long)]
    traced_bin: Option<PathBuf>,
}

/// [`Tuning`] once checked.
struct Checked {
    /// The `--raft-log` choice: `None` for auto.
    placement: Option<LogPlacement>,
    /// `--election-ms` as (min, max).
    election: (u64, u64),
    /// `--runtime multi`.
    multi_thread: bool,
}

impl Tuning {
    /// The defaults with this engine (for commands that only take
    /// `--engine`).
    fn with_engine(engine: &str) -> Tuning {
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            t: Tuning,
        }
        let mut t = Defaults::parse_from(["pmkv-server"]).t;
        t.engine = engine.to_string();
        t
    }
}

/// Check every tuning flag (`--engine`, `--pool-mb`, `--raft-log`,
/// `--election-ms`, ...) without opening anything: the one place these
/// flags are checked.
fn check_tuning(t: &Tuning) -> Result<Checked> {
    let placement = match t.raft_log.as_str() {
        "auto" => None,
        s => Some(
            LogPlacement::parse(s)
                .ok_or_else(|| anyhow!("--raft-log {s:?}: pick auto, engine or file"))?,
        ),
    };
    if placement == Some(LogPlacement::Engine) && t.engine == "mem" {
        bail!("--raft-log engine needs a PM engine (list, btree, wal or anchor), not mem: drop the flag or pick --engine list");
    }
    if t.engine != "mem" {
        let kind = pmlab_kv::EngineKind::parse(&t.engine).map_err(|_| {
            anyhow!(
                "--engine {:?}: unknown engine, pick one of {}",
                t.engine,
                kvengine::ENGINES
            )
        })?;
        if !kind.available() {
            bail!("--engine anchor: this build has no libpmemobj (install libpmemobj-dev and rebuild) — pick list, btree or wal");
        }
        if t.pool_mb < 1 || t.pool_mb > 1 << 20 {
            bail!("--pool-mb {}: give 1 to 1048576 MiB", t.pool_mb);
        }
    }
    let s = &t.election_ms;
    let bad = || anyhow!("--election-ms {s:?}: give MIN-MAX in ms with MIN < MAX, e.g. 300-600");
    let (lo, hi) = s.split_once('-').ok_or_else(bad)?;
    let election: (u64, u64) = (
        lo.parse().map_err(|_| bad())?,
        hi.parse().map_err(|_| bad())?,
    );
    if election.0 == 0 || election.0 >= election.1 {
        return Err(bad());
    }
    if t.heartbeat_ms == 0 || t.heartbeat_ms >= election.0 {
        bail!(
            "--heartbeat-ms {}: give 1 to less than the election timeout's minimum ({} ms), e.g. {}",
            t.heartbeat_ms,
            election.0,
            (election.0 / 6).max(1)
        );
    }
    if t.max_clients == 0 {
        bail!("--max-clients 0: no client could connect; give at least 1 (default 1024)");
    }
    if t.commit_lag_ms >= election.0 {
        bail!(
            "--commit-lag-ms {}: give less than the election timeout's minimum ({} ms), e.g. {}",
            t.commit_lag_ms,
            election.0,
            t.heartbeat_ms.min(election.0 / 2)
        );
    }
    if t.spin_us > 100_000 {
        bail!("--spin-us {}: give 0 (off) to 100000", t.spin_us);
    }
    let multi_thread = match t.runtime.as_str() {
        "current" => false,
        "multi" => true,
        r => bail!("--runtime {r:?}: pick current or multi"),
    };
    Ok(Checked {
        placement,
        election,
        multi_thread,
    })
}

/// A `--wrap` command line as words.
fn wrap_words(wrap: &Option<String>) -> Vec<String> {
    wrap.as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn tuning_args(t: &Tuning) -> Vec<String> {
    vec![
        "--engine".into(),
        t.engine.clone(),
        "--pool-mb".into(),
        t.pool_mb.to_string(),
        "--raft-log".into(),
        t.raft_log.clone(),
        "--snapshot-every".into(),
        t.snapshot_every.to_string(),
        "--keep-logs".into(),
        t.keep_logs.to_string(),
        "--heartbeat-ms".into(),
        t.heartbeat_ms.to_string(),
        "--election-ms".into(),
        t.election_ms.clone(),
        "--max-clients".into(),
        t.max_clients.to_string(),
        "--runtime".into(),
        t.runtime.clone(),
        "--commit-lag-ms".into(),
        t.commit_lag_ms.to_string(),
        "--spin-us".into(),
        t.spin_us.to_string(),
    ]
}

fn serve(
    id: NodeId,
    dir: PathBuf,
    peers: Vec<String>,
    config: Option<PathBuf>,
    routes: Vec<String>,
    worker_threads: usize,
    t: Tuning,
) -> Result<()> {
    if !(1..=64).contains(&worker_threads) {
        bail!("--worker-threads {worker_threads}: give 1 to 64");
    }
    let members: BTreeMap<NodeId, NodeAddr> = match (config, peers.is_empty()) {
        (Some(_), false) => bail!("give either --config or --peer, not both"),
        (Some(p), true) => cluster::load_members(&p)?,
        (None, _) => {
            let mut m = BTreeMap::new();
            for p in &peers {
                let (id, a) = cluster::parse_peer(p)?;
                if m.insert(id, a).is_some() {
                    bail!("--peer: node {id} given twice");
                }
            }
            cluster::check_members(&m)?;
            m
        }
    };
    let mut route_map = BTreeMap::new();
    for r in &routes {
        let (rid, addr) = r
            .split_once('=')
            .ok_or_else(|| anyhow!("--route {r:?}: expected ID=HOST:PORT"))?;
        route_map.insert(
            rid.parse()
                .map_err(|_| anyhow!("--route {r:?}: bad node id"))?,
            addr.to_string(),
        );
    }
    let checked = check_tuning(&t)?;
    let engine = kvengine::open_engine(&t.engine, &dir, t.pool_mb << 20)
        .map_err(|e| anyhow!("--engine {}: {e}", t.engine))?;
    let mut cfg = NodeConfig::new(id, dir, members);
    cfg.snapshot_every = t.snapshot_every;
    cfg.keep_logs = t.keep_logs;
    cfg.heartbeat_ms = t.heartbeat_ms;
    cfg.election_ms = checked.election;
    cfg.max_clients = t.max_clients;
    cfg.routes = route_map;
    cfg.raft_log = checked.placement;
    cfg.commit_lag_ms = t.commit_lag_ms;
    let mut builder = if checked.multi_thread {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(worker_threads);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all();
    if t.spin_us > 0 {
        builder.on_thread_park(pmlab_kv_server::server::spin_before_park(
            Duration::from_micros(t.spin_us),
        ));
    }
    let rt = builder.build()?;
    rt.block_on(async move {
        let me = cfg.members.get(&cfg.id).cloned();
        let node = Node::start(cfg, engine).await?;
        if let Some(me) = me {
            eprintln!(
                "pmkv-server: node {id} serving clients on {} (raft {})",
                me.client, me.raft
            );
        }
        // openraft stops on a fatal (storage) error without a word: say it.
        let mut metrics = node.raft().metrics();
        tokio::spawn(async move {
            while metrics.changed().await.is_ok() {
                let m = metrics.borrow().clone();
                match &m.running_state {
                    Ok(()) => {}
                    // A shutdown asked for (SIGTERM, Ctrl-C).
                    Err(openraft::error::Fatal::Stopped) => break,
                    Err(e) => {
                        eprintln!("pmkv-server: node {id}: raft stopped: {e}");
                        break;
                    }
                }
            }
        });
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        node.shutdown().await;
        Ok::<(), anyhow::Error>(())
    })
}

fn run_cluster(
    nodes: u64,
    dir: PathBuf,
    base: u16,
    config: Option<PathBuf>,
    wrap: Option<String>,
    t: Tuning,
) -> Result<()> {
    let wrap = wrap_words(&wrap);
    let checked = check_tuning(&t)?;
    let members = match config {
        Some(p) => cluster::load_members(&p)?,
        None => cluster::loopback_members(nodes, base)?,
    };
    let placement = checked
        .placement
        .unwrap_or_else(|| LogPlacement::default_for_name(&t.engine));
    for id in members.keys() {
        let node_dir = dir.join(format!("node-{id}"));
        kvengine::check_data_dir(&t.engine, &node_dir)
            .map_err(|e| anyhow!("--engine {}: {e}", t.engine))?;
        pmlab_kv_server::store::check_placement(&node_dir, placement)?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("create --dir {}", dir.display()))?;
    let bin = std::env::current_exe().context("locate the pmkv-server binary")?;
    let mut children = Vec::new();
    for (id, a) in &members {
        let spawn = Spawn {
            bin: bin.clone(),
            id: *id,
            dir: dir.join(format!("node-{id}")),
            members: members.clone(),
            routes: BTreeMap::new(),
            wrap: wrap.clone(),
            extra: tuning_args(&t),
            log: Some(dir.join(format!("node-{id}.log"))),
            env: Vec::new(),
        };
        children.push(spawn.start()?);
        println!(
            "node {id}: client {} raft {} data {}",
            a.client,
            a.raft,
            spawn.dir.display()
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let members2 = members.clone();
    let leader =
        std::thread::spawn(move || cluster::wait_leader(&members2, Duration::from_secs(20)));
    match leader.join().ok().flatten() {
        Some((id, addr)) => println!(
            "leader: node {id} at {addr} (try: redis-cli -p {} set k v)",
            addr.rsplit(':').next().unwrap_or("")
        ),
        None => println!(
            "no leader after 20 s: see the node logs in {}",
            dir.display()
        ),
    }
    println!("press Ctrl-C to stop the cluster");
    let exited = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok::<bool, anyhow::Error>(true)
    })?;
    for c in &mut children {
        cluster::stop(c, Duration::from_secs(3));
    }
    if exited {
        println!("stopped {} nodes", children.len());
    }
    Ok(())
}

fn faults(a: FaultArgs) -> Result<()> {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    check_tuning(&Tuning::with_engine(&a.engine))?;
    if a.crash_images > 0 && a.engine == "mem" {
        bail!(
            "--crash-images: the mem engine has no pool to image: pick list, btree, wal or anchor"
        );
    }
    if a.runs == 0 || a.safety_secs == 0 || a.liveness_secs == 0 {
        bail!("--runs, --safety-secs and --liveness-secs must be at least 1");
    }
    let crash_image = crash_image_config(a.crash_images, a.traced_secs, a.pmlab, a.traced_bin)?;
    let bin = std::env::current_exe().context("locate the pmkv-server binary")?;
    for r in 0..a.runs {
        let cfg = FaultConfig {
            bin: bin.clone(),
            dir: a.dir.clone(),
            seed: seed.wrapping_add(r),
            nodes: a.nodes,
            safety: Duration::from_secs(a.safety_secs),
            liveness: Duration::from_secs(a.liveness_secs),
            clients: a.clients,
            keys: a.keys,
            key_epoch: (a.key_epoch_ms > 0).then(|| Duration::from_millis(a.key_epoch_ms)),
            verbose: true,
            engine: a.engine.clone(),
            crash_image: crash_image.clone(),
        };
        eprintln!(
            "faults: run {}/{}, seed {}; reproduce: {}",
            r + 1,
            a.runs,
            cfg.seed,
            faults::reproduce_line(&cfg)
        );
        let rep = faults::run(&cfg)?;
        println!(
            "seed {}: {} faults, {} crash images restored, {} ops, {} acknowledged writes, {} unknown, {} writes after healing: {}",
            rep.seed,
            rep.faults.len(),
            rep.images_restored,
            rep.ops,
            rep.acked_writes,
            rep.unknown,
            rep.liveness_writes,
            if rep.passed() { "PASS" } else { "FAIL" }
        );
        println!("  {}", rep.check_line());
        if let Some(why) = rep.failure(&cfg) {
            bail!("{why}");
        }
    }
    Ok(())
}

/// `lincheck`: check a history file or a synthetic history, with the
/// search's effort.
fn check_history(a: LincheckArgs) -> Result<()> {
    let history = match (&a.file, a.synthetic.as_slice()) {
        (Some(_), [_, ..]) => bail!("give either a history FILE or --synthetic, not both"),
        (Some(f), []) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("read the history {}", f.display()))?;
            lincheck::parse_history(&text).map_err(|e| anyhow!("{}: {e}", f.display()))?
        }
        (None, &[clients, keys, ops, unknown]) if clients > 0 && keys > 0 && unknown <= 100 => {
            lincheck::synthetic(a.seed, clients as usize, keys as usize, ops as usize, 200, unknown)
        }
        (None, [_, ..]) => bail!(
            "--synthetic {:?}: give CLIENTS,KEYS,OPS,UNKNOWN_PCT with CLIENTS and KEYS at least 1 and UNKNOWN_PCT at most 100, e.g. 12,1,20000,5",
            a.synthetic
        ),
        (None, []) => bail!("give a history FILE (pmkv-server faults writes DIR/history.txt) or --synthetic CLIENTS,KEYS,OPS,UNKNOWN_PCT"),
    };
    if a.max_steps == 0 {
        bail!("--max-steps 0: give at least 1");
    }
    let rep = lincheck::check_with(&history, lincheck::Limits { steps: a.max_steps });
    let show = |k: &lincheck::KeyStats| {
        format!(
            "key {} ({} ops, {} unknown): {} steps, {} states, {:.3} s",
            String::from_utf8_lossy(&k.key),
            k.ops,
            k.unknown,
            k.steps,
            k.states,
            k.time.as_secs_f64()
        )
    };
    println!(
        "{} operations on {} keys checked in {:.3} s ({} steps)",
        history.len(),
        rep.keys,
        rep.time.as_secs_f64(),
        rep.steps
    );
    println!("longest {}", show(&rep.longest));
    println!("hardest {}", show(&rep.hardest));
    match rep.verdict {
        lincheck::Verdict::Linearizable => {
            println!("linearizable");
            Ok(())
        }
        lincheck::Verdict::Undecided { .. } => bail!(
            "{}: raise --max-steps (memory grows with the states) or split the history",
            rep.verdict
        ),
        v => bail!("{v}"),
    }
}

/// The crash-image fault's settings from `faults`' flags (`None` for 0 images).
fn crash_image_config(
    images: usize,
    traced_secs: u64,
    pmlab: Option<PathBuf>,
    traced_bin: Option<PathBuf>,
) -> Result<Option<faults::CrashImageConfig>> {
    if images == 0 {
        return Ok(None);
    }
    if traced_secs == 0 {
        bail!("--traced-secs must be at least 1");
    }
    let me = std::env::current_exe().context("locate the pmkv-server binary")?;
    let release = me.parent().map(PathBuf::from).unwrap_or_default();
    let pmlab = match pmlab {
        Some(p) => p,
        None if release.join("pmlab").is_file() => release.join("pmlab"),
        None => PathBuf::from("pmlab"),
    };
    let traced_bin = match traced_bin {
        Some(b) => b,
        None => faults::default_traced_bin(&release).ok_or_else(|| {
            anyhow!("--crash-images: no pmlab cargo build of pmkv-server found: run pmlab cargo build --release -p pmlab-kv-server, or give --traced-bin")
        })?,
    };
    if !traced_bin.is_file() {
        bail!(
            "--traced-bin {}: no such file (build it with pmlab cargo build --release -p pmlab-kv-server)",
            traced_bin.display()
        );
    }
    Ok(Some(faults::CrashImageConfig {
        pmlab,
        traced_bin,
        traced: Duration::from_secs(traced_secs),
        images,
        settle: Duration::from_secs(3),
    }))
}

fn bench(a: BenchArgs) -> Result<()> {
    let max_value = pmlab_kv_server::resp::MAX_BULK - 1024;
    match a.mode.as_str() {
        "latency" => {}
        "recovery" => return bench_recovery(a),
        "floor" => return bench_floor(a),
        other => bail!("--mode {other:?}: pick latency, recovery or floor"),
    }
    let value_size = a.value_size.unwrap_or(100);
    if a.addrs.is_empty() {
        bail!("--addrs: give the nodes' client addresses, e.g. 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    }
    if value_size > max_value {
        bail!("--value-size {value_size}: at most {max_value} bytes");
    }
    let clients = if a.clients.is_empty() {
        vec![1, 20]
    } else {
        a.clients.clone()
    };
    let leader = loadgen::find_leader(&a.addrs, Duration::from_secs(20))?;
    eprintln!(
        "bench: leader {leader}, {} of {value_size} B",
        if a.reads { "GET" } else { "SET" }
    );
    let mut results = Vec::new();
    for &c in &clients {
        eprintln!("bench: {c} client(s), {} operations each", a.ops);
        let r = loadgen::run(&leader, c, a.ops, a.warmup, value_size, !a.reads)?;
        if a.json {
            println!("{}", r.to_json());
        } else {
            println!("{}", r.row());
        }
        results.push((format!("{c} client(s)"), r));
    }
    if let Some(p) = &a.plot {
        let refs: Vec<(String, &loadgen::LoadResult)> =
            results.iter().map(|(n, r)| (n.clone(), r)).collect();
        loadgen::plot(&refs, p)?;
        eprintln!("bench: latency distribution written to {}", p.display());
    }
    Ok(())
}

fn bench_floor(a: BenchArgs) -> Result<()> {
    let size = a.value_size.unwrap_or(100);
    if size > 1 << 20 {
        bail!("--value-size {size}: at most 1048576 bytes for --mode floor");
    }
    if !a.addrs.is_empty() {
        bail!("--addrs: --mode floor starts its own relay processes");
    }
    let bin = std::env::current_exe().context("locate the pmkv-server binary")?;
    for wait in [loadgen::FloorWait::Blocking, loadgen::FloorWait::Tokio] {
        for hops in [1, 2] {
            let r = loadgen::floor(&bin, hops, wait, a.ops, a.warmup, size)?;
            if a.json {
                println!("{}", r.to_json());
            } else {
                println!("{}", r.row());
            }
        }
    }
    Ok(())
}

/// `floor-relay`: bind a free loopback port, print it, relay frames until
/// stdin closes (the bench process ended).
fn floor_relay(wait: &str, next: Option<String>) -> Result<()> {
    use std::io::{Read, Write};
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let wait = loadgen::FloorWait::parse(wait)
        .ok_or_else(|| anyhow!("--wait {wait:?}: pick blocking or tokio"))?;
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a loopback port")?;
    let port = l.local_addr()?.port();
    let mut out = std::io::stdout();
    writeln!(out, "{port}")?;
    out.flush()?;
    loadgen::floor_relay(l, next, wait)?;
    Ok(())
}

fn bench_recovery(a: BenchArgs) -> Result<()> {
    let value_size = a.value_size.unwrap_or(4096);
    if value_size == 0 || value_size > pmlab_kv_server::resp::MAX_BULK - 1024 {
        bail!(
            "--value-size {value_size}: give 1 to {} bytes",
            pmlab_kv_server::resp::MAX_BULK - 1024
        );
    }
    if !a.addrs.is_empty() {
        bail!("--addrs: --mode recovery starts its own cluster (give --dir instead)");
    }
    let Some(dir) = a.dir.clone() else {
        bail!("--dir: --mode recovery needs a work directory for its nodes, e.g. --dir /tmp/pmkv-recovery");
    };
    check_tuning(&a.tuning)?;
    let clients = a.clients.first().copied().unwrap_or(20);
    if clients == 0 || a.writes == 0 {
        bail!("--clients and --writes must be at least 1");
    }
    let bin = match &a.node_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("locate the pmkv-server binary")?,
    };
    if !bin.is_file() {
        bail!(
            "--node-bin {}: no such file (build it with pmlab cargo build --release -p pmlab-kv-server)",
            bin.display()
        );
    }
    let wrap = wrap_words(&a.wrap);
    let cfg = catchup::CatchupConfig {
        bin,
        dir: dir.clone(),
        nodes: 3,
        writes: a.writes,
        value_size,
        clients,
        restarts: a.restarts,
        wrap,
        env: Vec::new(),
        extra: tuning_args(&a.tuning),
        timeout: Duration::from_secs(300),
        progress: true,
    };
    eprintln!(
        "bench: recovery of a follower that missed {} writes of {value_size} B, engine {}",
        a.writes, a.tuning.engine
    );
    let r = catchup::run(&cfg)?;
    if a.json {
        let mut v = r.to_json();
        v["engine"] = a.tuning.engine.clone().into();
        v["writes"] = a.writes.into();
        v["value_size"] = value_size.into();
        println!("{v}");
    } else {
        let m = r.startup_median();
        println!(
            "engine {}: recovery {:.1} ms (answering after {:.1} ms) for {} writes of {value_size} B; start-up {} ({} restarts)",
            a.tuning.engine,
            r.recovery.caught_up_ms,
            r.recovery.serving_ms,
            a.writes,
            m.map_or("-".to_string(), |t| format!(
                "{:.1} ms to answer, {:.1} ms to re-apply",
                t.serving_ms, t.caught_up_ms
            )),
            r.startups.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return ExitCode::from(pmlab_kv::cli_error::report(&e, "pmkv-server")),
    };
    let res = match cli.cmd {
        Cmd::Serve {
            id,
            dir,
            peers,
            config,
            routes,
            worker_threads,
            tuning,
        } => serve(id, dir, peers, config, routes, worker_threads, tuning),
        Cmd::Cluster {
            nodes,
            dir,
            base_port,
            config,
            wrap,
            tuning,
        } => run_cluster(nodes, dir, base_port, config, wrap, tuning),
        Cmd::Bench(a) => bench(a),
        Cmd::Faults(a) => faults(a),
        Cmd::Lincheck(a) => check_history(a),
        Cmd::FloorRelay { wait, next } => floor_relay(&wait, next),
        Cmd::SetTrace { files } => {
            if files.is_empty() {
                Err(anyhow!(
                    "set-trace: give the PMKV_SET_TRACE file of every node"
                ))
            } else {
                pmlab_kv_server::net::set_trace::report(&files)
                    .map(|r| print!("{r}"))
                    .map_err(|e| anyhow!("set-trace: {e}"))
            }
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmkv-server: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
