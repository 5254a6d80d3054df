//! Set-up shared by the integration tests: loopback members, scratch
//! directories, fault-run seeds and configurations, and waiting for nodes
//! to converge. Each test file uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pmlab_kv_server::engine::KvEngine;
use pmlab_kv_server::faults::FaultConfig;
use pmlab_kv_server::server::{Node, NodeConfig};
use pmlab_kv_server::types::{NodeAddr, NodeId};

/// A loopback port free right now (`cluster::free_port`: below the
/// ephemeral range, never twice in one process).
pub fn free_port() -> u16 {
    pmlab_kv_server::cluster::free_port().unwrap()
}

/// Listeners holding the loopback addresses of in-process nodes that are
/// not running (not started yet, or stopped for a restart), so that no
/// other process on the machine (another test binary, another checkout's
/// tests) takes a port between the choice and the node's bind.
static HELD: Mutex<BTreeMap<String, TcpListener>> = Mutex::new(BTreeMap::new());

/// Hold `addr` (retrying for a while: a node that was just shut down may
/// still be closing its listener). Best effort: a port still busy after
/// that is left to [`start_node`]'s retries.
fn hold_addr(addr: &str) {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr) {
            Ok(l) => {
                HELD.lock().unwrap().insert(addr.to_string(), l);
                return;
            }
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return,
        }
    }
}

/// A free loopback address, held until a node started by [`start_node`]
/// binds it.
fn held_addr() -> String {
    loop {
        let addr = format!("127.0.0.1:{}", free_port());
        if let Ok(l) = TcpListener::bind(&addr) {
            HELD.lock().unwrap().insert(addr.clone(), l);
            return addr;
        }
    }
}

/// `n` members on free loopback ports, held for them until they start
/// (through [`start_node`]).
pub fn members(n: u64) -> BTreeMap<NodeId, NodeAddr> {
    (1..=n)
        .map(|i| {
            let a = NodeAddr {
                raft: held_addr(),
                client: held_addr(),
            };
            (i, a)
        })
        .collect()
}

/// Hold a stopped member's addresses until it restarts through
/// [`start_node`].
pub fn hold(a: &NodeAddr) {
    hold_addr(&a.raft);
    hold_addr(&a.client);
}

/// Start node `cfg.id` on its held addresses: they are released right
/// before the node binds them, and a bind that finds one in use (another
/// process probing it in that instant) is retried for up to 20 s with a
/// fresh engine from `engine`.
pub async fn start_node(cfg: NodeConfig, engine: impl Fn() -> Box<dyn KvEngine>) -> Node {
    let me = cfg.members[&cfg.id].clone();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        {
            let mut held = HELD.lock().unwrap();
            held.remove(&me.raft);
            held.remove(&me.client);
        }
        match Node::start(cfg.clone(), engine()).await {
            Ok(n) => return n,
            Err(e) if e.to_string().contains("in use") && Instant::now() < end => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("node {}: {e}", cfg.id),
        }
    }
}

/// An empty scratch directory named after the test and this process.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmkv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Wait up to 10 s until every node has applied as far as the furthest.
pub async fn wait_converged(nodes: &[Node]) {
    let end = Instant::now() + Duration::from_secs(10);
    while nodes.iter().map(|n| n.applied_index()).min()
        < nodes.iter().map(|n| n.applied_index()).max()
        && Instant::now() < end
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The fault seed: `PMKV_FAULT_SEED`, else from the clock.
pub fn fault_seed() -> u64 {
    std::env::var("PMKV_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// A short fault run of three nodes on `PMKV_FAULT_ENGINE` (default
/// `list`), keys rotating every second, in a scratch directory `name`.
pub fn fault_config(name: &str, seed: u64, safety_secs: u64, clients: usize) -> FaultConfig {
    FaultConfig {
        bin: env!("CARGO_BIN_EXE_pmkv-server").into(),
        dir: std::env::temp_dir().join(format!("pmkv-{name}-{}", std::process::id())),
        seed,
        nodes: 3,
        safety: Duration::from_secs(safety_secs),
        liveness: Duration::from_secs(5),
        clients,
        keys: 6,
        key_epoch: Some(Duration::from_secs(1)),
        verbose: false,
        engine: std::env::var("PMKV_FAULT_ENGINE").unwrap_or_else(|_| "list".into()),
        crash_image: None,
    }
}
