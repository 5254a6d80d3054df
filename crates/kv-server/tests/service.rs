//! In-process three-node clusters: commands, redirects, bad input, the
//! connection cap, restarts, and catch-up by snapshot; each with the
//! volatile `mem` engine and the PM engines `list` and `btree`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pmlab_kv_server::client::{Client, Conn};
use pmlab_kv_server::engine::{open_engine, KvEngine, MemEngine};
use pmlab_kv_server::resp::Value;
use pmlab_kv_server::server::{Node, NodeConfig};
use pmlab_kv_server::store::LogPlacement;
use pmlab_kv_server::types::{NodeAddr, NodeId};

mod common;
use common::{hold, members, start_node, tmpdir, wait_converged};

fn config(id: NodeId, dir: &std::path::Path, m: &BTreeMap<NodeId, NodeAddr>) -> NodeConfig {
    let mut c = NodeConfig::new(id, dir.join(format!("node-{id}")), m.clone());
    c.election_ms = (400, 800);
    c
}

/// The engine `name` for node `id`'s data directory (a small PM pool).
fn engine(name: &str, dir: &std::path::Path, id: NodeId) -> Box<dyn KvEngine> {
    open_engine(name, &dir.join(format!("node-{id}")), 16 << 20).unwrap()
}

async fn start_all(
    engine_name: &str,
    dir: &std::path::Path,
    m: &BTreeMap<NodeId, NodeAddr>,
    tweak: impl Fn(&mut NodeConfig),
) -> Vec<Node> {
    let mut nodes = Vec::new();
    for id in m.keys() {
        let mut c = config(*id, dir, m);
        tweak(&mut c);
        nodes.push(start_node(c, || engine(engine_name, dir, *id)).await);
    }
    nodes
}

/// One test per engine for each scenario below.
macro_rules! per_engine {
    ($body:ident: $($name:ident => $engine:literal),+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $body($engine).await
            }
        )+
    };
}

per_engine!(commands_redirects_and_bad_input:
    commands_redirects_and_bad_input_mem => "mem",
    commands_redirects_and_bad_input_list => "list",
    commands_redirects_and_bad_input_btree => "btree");

per_engine!(lagging_node_catches_up_by_snapshot_and_restarts_keep_data:
    snapshot_catch_up_and_restart_mem => "mem",
    snapshot_catch_up_and_restart_list => "list",
    snapshot_catch_up_and_restart_btree => "btree");

per_engine!(pm_engine_is_rolled_back_and_replayed_on_restart:
    rollback_and_replay_list => "list",
    rollback_and_replay_btree => "btree");

/// The same restart with the `list` engine forced to keep a separate log
/// file (`--raft-log file`), the placement benchmarks compare with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_and_replay_list_with_a_separate_log_file() {
    restart_keeps_every_write("list", Some(LogPlacement::File)).await
}

fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    tokio::task::spawn_blocking(f)
}

fn addrs(m: &BTreeMap<NodeId, NodeAddr>) -> Vec<String> {
    m.values().map(|a| a.client.clone()).collect()
}

fn ok(v: std::io::Result<Value>) -> Value {
    v.expect("i/o error")
}

/// The restart scenarios' writes: 60 SETs over key0..key6 (key k ends
/// with the last v{i} where i % 7 == k), DEL key1 if `del_key1`, and CAS
/// key0 from v56 to `cas`.
async fn write_keys(a: Vec<String>, del_key1: bool) {
    blocking(move || {
        let mut c = Client::new(a, Duration::from_secs(10));
        for i in 0..60 {
            let k = format!("key{}", i % 7);
            let v = format!("v{i}");
            assert_eq!(
                ok(c.call(&[b"SET", k.as_bytes(), v.as_bytes()], 100)),
                Value::Simple("OK".into())
            );
        }
        if del_key1 {
            assert_eq!(ok(c.call(&[b"DEL", b"key1"], 100)), Value::Int(1));
        }
        assert_eq!(
            ok(c.call(&[b"CAS", b"key0", b"v56", b"cas"], 100)),
            Value::Int(1)
        );
    })
    .await
    .unwrap();
}

/// After a restart, every write of [`write_keys`] is there, and a new one
/// is accepted.
async fn check_after_restart(a: Vec<String>, key1_deleted: bool) {
    blocking(move || {
        let mut c = Client::new(a, Duration::from_secs(10));
        assert_eq!(
            ok(c.call(&[b"GET", b"key0"], 200)),
            Value::Bulk(b"cas".to_vec())
        );
        if key1_deleted {
            assert_eq!(ok(c.call(&[b"GET", b"key1"], 200)), Value::Nil);
        }
        for i in 53..60 {
            if i % 7 == 0 || (key1_deleted && i % 7 == 1) {
                continue;
            }
            let k = format!("key{}", i % 7);
            assert_eq!(
                ok(c.call(&[b"GET", k.as_bytes()], 200)),
                Value::Bulk(format!("v{i}").into_bytes())
            );
        }
        assert_eq!(
            ok(c.call(&[b"SET", b"after", b"restart"], 200)),
            Value::Simple("OK".into())
        );
    })
    .await
    .unwrap();
}

async fn commands_redirects_and_bad_input(engine_name: &str) {
    let dir = tmpdir(&format!("svc-cmds-{engine_name}"));
    let m = members(3);
    let nodes = start_all(engine_name, &dir, &m, |c| c.max_clients = 8).await;
    let a = addrs(&m);
    let leader_addr = blocking({
        let m = m.clone();
        move || pmlab_kv_server::cluster::wait_leader(&m, Duration::from_secs(20))
    })
    .await
    .unwrap()
    .expect("a leader within 20 s");
    let a2 = a.clone();
    blocking(move || {
        let mut c = Client::new(a2.clone(), Duration::from_secs(10));
        assert_eq!(ok(c.call(&[b"SET", b"k", b"v1"], 50)), Value::Simple("OK".into()));
        assert_eq!(ok(c.call(&[b"GET", b"k"], 50)), Value::Bulk(b"v1".to_vec()));
        assert_eq!(ok(c.call(&[b"CAS", b"k", b"nope", b"v2"], 50)), Value::Int(0));
        assert_eq!(ok(c.call(&[b"CAS", b"k", b"v1", b"v2"], 50)), Value::Int(1));
        assert_eq!(ok(c.call(&[b"GET", b"k"], 50)), Value::Bulk(b"v2".to_vec()));
        assert_eq!(ok(c.call(&[b"DEL", b"k", b"absent"], 50)), Value::Int(1));
        assert_eq!(ok(c.call(&[b"GET", b"k"], 50)), Value::Nil);

        // A follower redirects to the leader.
        let follower = a2.iter().find(|x| **x != leader_addr.1).unwrap();
        let mut f = Conn::connect(follower, Duration::from_secs(5)).unwrap();
        assert_eq!(f.call(&[b"SET", b"k", b"x"]).unwrap(), Value::Error(format!("REDIRECT {}", leader_addr.1)));
        assert_eq!(f.call(&[b"GET", b"k"]).unwrap(), Value::Error(format!("REDIRECT {}", leader_addr.1)));

        // What redis-cli and redis-benchmark ask first.
        let mut l = Conn::connect(&leader_addr.1, Duration::from_secs(5)).unwrap();
        assert_eq!(l.call(&[b"PING"]).unwrap(), Value::Simple("PONG".into()));
        assert!(matches!(l.call(&[b"CONFIG", b"GET", b"save"]).unwrap(), Value::Array(v) if v.len() == 2));
        assert_eq!(l.call(&[b"COMMAND", b"DOCS"]).unwrap(), Value::Array(vec![]));
        assert!(matches!(l.call(&[b"NOSUCH", b"x"]).unwrap(), Value::Error(e) if e.starts_with("ERR unknown command")));
        assert!(matches!(l.call(&[b"GET"]).unwrap(), Value::Error(e) if e.contains("wrong number")));
        // Keys of the Raft log kept in the engine are not the clients'.
        assert!(matches!(l.call(&[b"SET", b"\xffpmkv.raft", b"x"]).unwrap(), Value::Error(e) if e.contains("reserved")));
        assert!(matches!(l.call(&[b"DEL", b"k", b"\xffpmkv.membership"]).unwrap(), Value::Error(e) if e.contains("reserved")));
        assert!(matches!(l.call(&[b"SET", b"a", b"b", b"EX", b"5"]).unwrap(), Value::Error(_)));

        // Malformed input: an error, the connection closes, the node lives.
        for bad in [&b"*1\r\n$99999999999\r\n"[..], b"*2\r\n$3\r\nGET\r\n:1\r\n", b"*-7\r\n", b"$3\r\nGET\r\n", b"*1\r\n$3\r\nGETXX\r\n"] {
            let mut c = Conn::connect(&leader_addr.1, Duration::from_secs(2)).unwrap();
            let got = c.raw(bad, 4096).unwrap();
            assert!(got.starts_with(b"-ERR"), "{:?} gave {:?}", String::from_utf8_lossy(bad), String::from_utf8_lossy(&got));
        }
        let mut c = Conn::connect(&leader_addr.1, Duration::from_secs(2)).unwrap();
        let long = vec![b'x'; 70 * 1024];
        assert!(c.raw(&long, 4096).unwrap().starts_with(b"-ERR Protocol error: line too long"));
        assert_eq!(l.call(&[b"PING"]).unwrap(), Value::Simple("PONG".into()), "node still answers");

        // The connection cap (8): further connections are refused with an
        // error until some close.
        drop(c);
        let mut held = Vec::new();
        let mut refused = false;
        for _ in 0..9 {
            let mut c = Conn::connect(&leader_addr.1, Duration::from_secs(2)).unwrap();
            match c.call(&[b"PING"]).unwrap() {
                Value::Simple(s) if s == "PONG" => held.push(c),
                Value::Error(e) if e.starts_with("ERR max number of clients") => {
                    refused = true;
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(refused && held.len() < 8, "{} connections held, refused: {refused}", held.len());
        drop(held);
        std::thread::sleep(Duration::from_millis(200));
        let mut c = Conn::connect(&leader_addr.1, Duration::from_secs(2)).unwrap();
        assert_eq!(c.call(&[b"PING"]).unwrap(), Value::Simple("PONG".into()), "connections free again");
    })
    .await
    .unwrap();
    for n in nodes {
        n.shutdown().await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn lagging_node_catches_up_by_snapshot_and_restarts_keep_data(engine_name: &str) {
    let dir = tmpdir(&format!("svc-snap-{engine_name}"));
    let m = members(3);
    let tweak = |c: &mut NodeConfig| {
        c.snapshot_every = 40;
        c.keep_logs = 0;
    };
    let mut nodes = start_all(engine_name, &dir, &m, tweak).await;
    let a = addrs(&m);
    let a2 = a.clone();
    blocking(move || {
        let mut c = Client::new(a2, Duration::from_secs(10));
        assert_eq!(
            ok(c.call(&[b"SET", b"first", b"1"], 100)),
            Value::Simple("OK".into())
        );
    })
    .await
    .unwrap();
    // Stop node 3, write enough for several snapshots and purges.
    let n3 = nodes.pop().unwrap();
    n3.shutdown().await;
    hold(&m[&3]);
    let a2 = a[..2].to_vec();
    blocking(move || {
        let mut c = Client::new(a2, Duration::from_secs(10));
        for i in 0..200 {
            let k = format!("key{i}");
            assert_eq!(
                ok(c.call(&[b"SET", k.as_bytes(), b"val"], 100)),
                Value::Simple("OK".into())
            );
        }
    })
    .await
    .unwrap();
    let leader_applied = nodes.iter().map(|n| n.applied_index()).max().unwrap();
    // Node 3 comes back on the same directory: the entries it missed are
    // purged everywhere, so only a snapshot can bring it up to date.
    let n3 = start_node(
        {
            let mut c = config(3, &dir, &m);
            tweak(&mut c);
            c
        },
        || engine(engine_name, &dir, 3),
    )
    .await;
    let end = Instant::now() + Duration::from_secs(30);
    while n3.applied_index() < leader_applied && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        n3.applied_index() >= leader_applied,
        "node 3 applied {} of {leader_applied}: {:?}; leader {:?}",
        n3.applied_index(),
        n3.raft().metrics().borrow(),
        nodes[0].raft().metrics().borrow()
    );
    assert_eq!(
        n3.local_get(b"key199").unwrap().as_deref(),
        Some(&b"val"[..])
    );
    assert_eq!(n3.local_get(b"first").unwrap().as_deref(), Some(&b"1"[..]));
    // A volatile engine keeps the installed snapshot as a file; a PM
    // engine holds it in its pool (the purged log leaves no other way).
    assert_eq!(
        dir.join("node-3/snapshot.bin").exists(),
        engine_name == "mem",
        "node 3 installed a snapshot"
    );
    nodes.push(n3);

    // Restart the whole cluster: every acknowledged write is still there.
    for n in nodes.drain(..) {
        n.shutdown().await;
    }
    m.values().for_each(hold);
    let nodes = start_all(engine_name, &dir, &m, tweak).await;
    let a2 = a.clone();
    blocking(move || {
        let mut c = Client::new(a2, Duration::from_secs(10));
        assert_eq!(
            ok(c.call(&[b"GET", b"first"], 200)),
            Value::Bulk(b"1".to_vec())
        );
        for i in (0..200).step_by(37) {
            let k = format!("key{i}");
            assert_eq!(
                ok(c.call(&[b"GET", k.as_bytes()], 200)),
                Value::Bulk(b"val".to_vec())
            );
        }
    })
    .await
    .unwrap();
    for n in nodes {
        n.shutdown().await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A "persistent" engine for tests: the state lives in an `Arc` that
/// outlives the node, as a PM pool outlives the process.
#[derive(Clone)]
struct Kept(std::sync::Arc<std::sync::Mutex<MemEngine>>);

impl pmlab_kv_server::engine::KvEngine for Kept {
    fn name(&self) -> &'static str {
        "kept"
    }
    fn persistent(&self) -> bool {
        true
    }
    fn get_at(
        &self,
        key: &[u8],
        index: u64,
    ) -> pmlab_kv_server::engine::EngineResult<Option<Vec<u8>>> {
        self.0.lock().unwrap().get_at(key, index)
    }
    fn put(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        version: u64,
    ) -> pmlab_kv_server::engine::EngineResult<()> {
        self.0.lock().unwrap().put(key, value, version)
    }
    fn sync(&mut self) -> pmlab_kv_server::engine::EngineResult<()> {
        Ok(())
    }
    fn last_version(&self) -> u64 {
        self.0.lock().unwrap().last_version()
    }
    fn floor(&self) -> u64 {
        self.0.lock().unwrap().floor()
    }
    fn rollback_above(&mut self, index: u64) -> pmlab_kv_server::engine::EngineResult<()> {
        self.0.lock().unwrap().rollback_above(index)
    }
    fn discard_below(&mut self, index: u64) -> pmlab_kv_server::engine::EngineResult<()> {
        self.0.lock().unwrap().discard_below(index)
    }
    fn snapshot(
        &self,
        index: u64,
    ) -> pmlab_kv_server::engine::EngineResult<
        Box<
            dyn Iterator<
                    Item = pmlab_kv_server::engine::EngineResult<pmlab_kv_server::engine::Pair>,
                > + '_,
        >,
    > {
        let pairs: Vec<_> = self.0.lock().unwrap().snapshot(index)?.collect();
        Ok(Box::new(pairs.into_iter()))
    }
    fn restore(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = pmlab_kv_server::engine::Pair>,
    ) -> pmlab_kv_server::engine::EngineResult<()> {
        self.0.lock().unwrap().restore(index, entries)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_engine_is_rolled_back_and_replayed_on_restart() {
    let dir = tmpdir("svc-kept");
    let m = members(3);
    let engines: Vec<Kept> = (0..3).map(|_| Kept(Default::default())).collect();
    let start = |engines: Vec<Kept>| {
        let (dir, m) = (dir.clone(), m.clone());
        async move {
            let mut nodes = Vec::new();
            for (id, e) in m.keys().zip(engines) {
                let mut c = config(*id, &dir, &m);
                c.snapshot_every = 25;
                c.keep_logs = 5;
                nodes.push(start_node(c, || Box::new(e.clone()) as Box<dyn KvEngine>).await);
            }
            nodes
        }
    };
    let nodes = start(engines.clone()).await;
    let a = addrs(&m);
    write_keys(a.clone(), false).await;
    for n in nodes {
        n.shutdown().await;
    }
    m.values().for_each(hold);
    // The engines kept writes beyond the recorded applied index: on restart
    // they are rolled back to it and the rest is re-applied from the log.
    let nodes = start(engines.clone()).await;
    check_after_restart(a.clone(), false).await;
    wait_converged(&nodes).await;
    for n in &nodes {
        assert_eq!(n.local_get(b"key0").unwrap().as_deref(), Some(&b"cas"[..]));
    }
    for n in nodes {
        n.shutdown().await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The restart scenario above on a real PM engine with its default log
/// placement: the Raft log in the pool (`list`, `btree`), where the node
/// reopens the log and state from the pool and re-applies up to the
/// committed index.
async fn pm_engine_is_rolled_back_and_replayed_on_restart(engine_name: &str) {
    restart_keeps_every_write(engine_name, None).await
}

async fn restart_keeps_every_write(engine_name: &str, placement: Option<LogPlacement>) {
    let dir = tmpdir(&format!("svc-pm-{engine_name}-{placement:?}"));
    let m = members(3);
    let tweak = move |c: &mut NodeConfig| {
        c.snapshot_every = 25;
        c.keep_logs = 5;
        c.raft_log = placement;
    };
    let nodes = start_all(engine_name, &dir, &m, tweak).await;
    let a = addrs(&m);
    write_keys(a.clone(), true).await;
    for n in nodes {
        n.shutdown().await;
    }
    m.values().for_each(hold);
    let separate = placement == Some(LogPlacement::File);
    for id in m.keys() {
        assert!(
            dir.join(format!("node-{id}/kv.pool")).exists(),
            "node {id} has no pool file"
        );
        assert_eq!(
            dir.join(format!("node-{id}/raft.log")).exists(),
            separate,
            "node {id}: a Raft log file only with the separate placement"
        );
    }
    let nodes = start_all(engine_name, &dir, &m, tweak).await;
    check_after_restart(a.clone(), true).await;
    wait_converged(&nodes).await;
    for n in &nodes {
        assert_eq!(n.local_get(b"key0").unwrap().as_deref(), Some(&b"cas"[..]));
        assert_eq!(
            n.local_get(b"after").unwrap().as_deref(),
            Some(&b"restart"[..])
        );
    }
    for n in nodes {
        n.shutdown().await;
    }
    // Another engine on the same directories is refused in one line.
    let err = open_engine("btree", &dir.join("node-1"), 16 << 20)
        .err()
        .filter(|_| engine_name != "btree")
        .or_else(|| open_engine("list", &dir.join("node-1"), 16 << 20).err())
        .expect("a directory of one engine refused to another");
    assert!(err.0.contains("--engine"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The tests' fixed member addresses cannot collide with other processes:
/// from the choice of a port until its node binds it, and while a node is
/// stopped for a restart, the test holds it (another bind is refused);
/// `start_node` releases it and the node binds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_addresses_are_held_while_their_node_is_down() {
    let dir = tmpdir("svc-held");
    std::fs::create_dir_all(dir.join("node-1")).unwrap();
    let m = members(1);
    let busy = |m: &BTreeMap<NodeId, NodeAddr>| {
        std::net::TcpListener::bind(&m[&1].client).is_err()
            && std::net::TcpListener::bind(&m[&1].raft).is_err()
    };
    assert!(busy(&m), "a chosen address is free for anyone to take");
    let n = start_node(config(1, &dir, &m), || engine("mem", &dir, 1)).await;
    assert!(busy(&m), "the node does not serve its addresses");
    // Stop it once it leads: a one-member node stopped while it is still
    // initialising fails to restart ("Write StateMachine: No such file or
    // directory"), an open kv-server issue this test does not cover.
    let end = Instant::now() + Duration::from_secs(10);
    while n.raft().metrics().borrow().current_leader.is_none() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    n.shutdown().await;
    hold(&m[&1]);
    assert!(
        busy(&m),
        "a stopped node's address is free for anyone to take"
    );
    let n = start_node(config(1, &dir, &m), || engine("mem", &dir, 1)).await;
    n.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
