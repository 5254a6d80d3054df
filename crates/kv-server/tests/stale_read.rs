//! The checker bites on the real service: with reads answered locally (a
//! planted bug), an old leader cut off by a partition serves a stale value
//! after the new leader acknowledged a newer one, and the recorded history
//! is reported as not linearizable. With the read index (the real path),
//! the same partitioned node never answers the read with a value.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pmlab_kv_server::client::{Client, Conn};
use pmlab_kv_server::engine::MemEngine;
use pmlab_kv_server::lincheck::{check, Event, Op, Outcome, Verdict};
use pmlab_kv_server::proxy::{Proxy, Rule};
use pmlab_kv_server::resp::Value;
use pmlab_kv_server::server::{Node, NodeConfig};
use pmlab_kv_server::types::{NodeAddr, NodeId};

mod common;
use common::free_port;

/// Run the partition scenario; returns the history and the old leader's
/// answer to the read.
async fn scenario(unsafe_reads: bool) -> (Vec<Event>, Value) {
    let dir =
        std::env::temp_dir().join(format!("pmkv-stale-{unsafe_reads}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let members: BTreeMap<NodeId, NodeAddr> = (1..=3)
        .map(|i| {
            let a = NodeAddr {
                raft: format!("127.0.0.1:{}", free_port()),
                client: format!("127.0.0.1:{}", free_port()),
            };
            (i, a)
        })
        .collect();
    let mut links = BTreeMap::new();
    for a in 1..=3u64 {
        for b in 1..=3u64 {
            if a != b {
                links.insert(
                    (a, b),
                    Proxy::start(members[&b].raft.clone(), a * 10 + b)
                        .await
                        .unwrap(),
                );
            }
        }
    }
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let mut c = NodeConfig::new(id, dir.join(format!("node-{id}")), members.clone());
        c.routes = (1..=3)
            .filter(|b| *b != id)
            .map(|b| (b, links[&(id, b)].addr.clone()))
            .collect();
        c.election_ms = (300, 600);
        c.unsafe_local_reads = unsafe_reads;
        nodes.push(Node::start(c, Box::new(MemEngine::new())).await.unwrap());
    }
    let m2 = members.clone();
    let (old, old_addr) = tokio::task::spawn_blocking(move || {
        pmlab_kv_server::cluster::wait_leader(&m2, Duration::from_secs(20))
    })
    .await
    .unwrap()
    .expect("a leader");
    let start = Instant::now();
    let t = move || start.elapsed().as_nanos() as u64;
    let mut history = Vec::new();
    let addrs: Vec<String> = members.values().map(|a| a.client.clone()).collect();

    // v1 through the leader, acknowledged.
    let a2 = addrs.clone();
    let call = t();
    let r = tokio::task::spawn_blocking(move || {
        Client::new(a2, Duration::from_secs(10)).call(&[b"SET", b"k", b"v1"], 100)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r, Value::Simple("OK".into()));
    history.push(Event {
        client: 0,
        key: b"k".to_vec(),
        op: Op::Set(b"v1".to_vec()),
        outcome: Outcome::Ok,
        call,
        ret: t(),
    });

    // Cut the leader off; the other two elect a new one and take v2.
    for ((a, b), p) in &links {
        if *a == old || *b == old {
            p.set(Rule::Cut);
        }
    }
    let others: Vec<String> = members
        .iter()
        .filter(|(id, _)| **id != old)
        .map(|(_, a)| a.client.clone())
        .collect();
    let call = t();
    let r = tokio::task::spawn_blocking(move || {
        Client::new(others, Duration::from_secs(10)).call(&[b"SET", b"k", b"v2"], 400)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        r,
        Value::Simple("OK".into()),
        "the majority side takes writes"
    );
    history.push(Event {
        client: 1,
        key: b"k".to_vec(),
        op: Op::Set(b"v2".to_vec()),
        outcome: Outcome::Ok,
        call,
        ret: t(),
    });

    // Now read from the old leader.
    let call = t();
    let got = tokio::task::spawn_blocking(move || {
        Conn::connect(&old_addr, Duration::from_secs(10))
            .unwrap()
            .call(&[b"GET", b"k"])
    })
    .await
    .unwrap()
    .unwrap();
    let ret = t();
    let outcome = match &got {
        Value::Bulk(v) => Some(Outcome::Value(Some(v.clone()))),
        Value::Nil => Some(Outcome::Value(None)),
        _ => None,
    };
    if let Some(outcome) = outcome {
        history.push(Event {
            client: 2,
            key: b"k".to_vec(),
            op: Op::Get,
            outcome,
            call,
            ret,
        });
    }
    for n in nodes {
        n.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    (history, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_local_reads_are_caught_and_the_read_index_is_not_fooled() {
    let (history, got) = scenario(true).await;
    assert_eq!(
        got,
        Value::Bulk(b"v1".to_vec()),
        "the cut-off old leader answers from its stale state"
    );
    assert!(
        matches!(check(&history), Verdict::NotLinearizable { .. }),
        "{history:?}"
    );

    let (history, got) = scenario(false).await;
    assert!(
        matches!(&got, Value::Error(e) if e.starts_with("TRYAGAIN") || e.starts_with("REDIRECT")),
        "got {got:?}"
    );
    assert_eq!(check(&history), Verdict::Linearizable);
}
