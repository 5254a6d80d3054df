//! Set-up shared by the integration tests: loopback members, scratch
//! directories, fault-run seeds and configurations, and waiting for nodes
//! to converge. Each test file uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pmlab_kv_server::faults::FaultConfig;
use pmlab_kv_server::server::Node;
use pmlab_kv_server::types::{NodeAddr, NodeId};

/// A loopback port free right now (`cluster::free_port`: below the
/// ephemeral range, never twice in one process).
pub fn free_port() -> u16 {
    pmlab_kv_server::cluster::free_port().unwrap()
}

/// `n` members on free loopback ports.
pub fn members(n: u64) -> BTreeMap<NodeId, NodeAddr> {
    (1..=n)
        .map(|i| {
            let a = NodeAddr {
                raft: format!("127.0.0.1:{}", free_port()),
                client: format!("127.0.0.1:{}", free_port()),
            };
            (i, a)
        })
        .collect()
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
