//! One node: openraft, the Raft RPC listener and the RESP client listener.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};
use openraft::{Config, ServerState, SnapshotPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::engine::KvEngine;
use crate::engine_log::is_reserved;
use crate::net::{serve_raft_with, set_trace, Network};
use crate::resp::{parse_command, Value};
use crate::store::{self, LogPlacement, StateMachine};
use crate::types::{Cmd, NodeAddr, NodeId, Raft, Reply};

/// A server failure: the message names the file, address or setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// How long a client write may wait for its commit before the client is
/// told the outcome is unknown.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a read may wait for the leader to confirm its leadership.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The default of [`NodeConfig::commit_lag_ms`].
pub const DEFAULT_COMMIT_LAG_MS: u64 = 50;

/// Settings of one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id (a key of `members`).
    pub id: NodeId,
    /// Directory for the Raft log, metadata and snapshots.
    pub dir: PathBuf,
    /// Every member's addresses (the initial membership).
    pub members: BTreeMap<NodeId, NodeAddr>,
    /// Build a snapshot (and purge the log it covers) every this many entries.
    pub snapshot_every: u64,
    /// Entries kept in the log behind the last snapshot.
    pub keep_logs: u64,
    /// Leader heartbeat interval, ms.
    pub heartbeat_ms: u64,
    /// Election timeout range, ms.
    pub election_ms: (u64, u64),
    /// Most client connections served at once.
    pub max_clients: usize,
    /// Outgoing Raft connections to these nodes dial this address instead.
    pub routes: BTreeMap<NodeId, String>,
    /// A planted bug for the checker's tests: GET answers from the local
    /// state machine on any node, skipping the read index. Never in use.
    pub unsafe_local_reads: bool,
    /// Where the Raft log lives; `None`: the engine's default
    /// ([`LogPlacement::default_for`]: in the PM engine for `list`,
    /// `btree` and `anchor`, a separate file for `wal` and `mem`).
    pub raft_log: Option<LogPlacement>,
    /// How long after its last AppendEntries to a follower the leader may
    /// hold back a commit-only one (the commit index then rides on the
    /// next message; see [`crate::net::Connection`]), ms; 0 sends each.
    pub commit_lag_ms: u64,
}

impl NodeConfig {
    /// Defaults for node `id` of `members`, data in `dir`.
    pub fn new(id: NodeId, dir: PathBuf, members: BTreeMap<NodeId, NodeAddr>) -> NodeConfig {
        NodeConfig {
            id,
            dir,
            members,
            snapshot_every: 10_000,
            keep_logs: 1000,
            heartbeat_ms: 50,
            election_ms: (300, 600),
            max_clients: 1024,
            routes: BTreeMap::new(),
            unsafe_local_reads: false,
            raft_log: None,
            commit_lag_ms: DEFAULT_COMMIT_LAG_MS,
        }
    }

    fn raft_config(&self) -> Result<Config, Error> {
        let c = Config {
            cluster_name: "pmkv".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_ms.0,
            election_timeout_max: self.election_ms.1,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.keep_logs,
            // Snapshots travel in 4 MiB chunks of raw bytes; append
            // batches are cut at `net::MAX_BATCH_BYTES` as well.
            snapshot_max_chunk_size: 4 << 20,
            max_payload_entries: 512,
            install_snapshot_timeout: 2000,
            ..Default::default()
        };
        c.validate()
            .map_err(|e| Error(format!("raft settings: {e}")))
    }
}

struct Shared {
    id: NodeId,
    raft: Raft,
    sm: StateMachine,
    members: BTreeMap<NodeId, NodeAddr>,
    unsafe_local_reads: bool,
}

/// A running node; dropping it does not stop it: call [`Node::shutdown`].
pub struct Node {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Node {
    /// Open the node's storage, bind its listeners and start Raft; the
    /// member with the lowest id initialises a new cluster.
    pub async fn start(cfg: NodeConfig, engine: Box<dyn KvEngine>) -> Result<Node, Error> {
        let me = cfg.members.get(&cfg.id).cloned().ok_or_else(|| {
            Error(format!(
                "node id {} is not among the members {:?}",
                cfg.id,
                cfg.members.keys()
            ))
        })?;
        let raft_config = Arc::new(cfg.raft_config()?);
        let placement = cfg
            .raft_log
            .unwrap_or_else(|| LogPlacement::default_for(engine.as_ref()));
        let (log, sm) = store::open(&cfg.dir, engine, placement)
            .map_err(|e| Error(format!("raft storage in {}: {e}", cfg.dir.display())))?;
        let raft_l = TcpListener::bind(&me.raft)
            .await
            .map_err(|e| Error(format!("bind raft address {}: {e}", me.raft)))?;
        let client_l = TcpListener::bind(&me.client)
            .await
            .map_err(|e| Error(format!("bind client address {}: {e}", me.client)))?;
        let raft = Raft::new(
            cfg.id,
            raft_config,
            Network {
                routes: cfg.routes.clone(),
                commit_lag: Duration::from_millis(cfg.commit_lag_ms),
                pool: Default::default(),
            },
            log,
            sm.clone(),
        )
        .await
        .map_err(|e| Error(format!("start raft: {e}")))?;
        sm.opened();
        let shared = Arc::new(Shared {
            id: cfg.id,
            raft: raft.clone(),
            sm,
            members: cfg.members.clone(),
            unsafe_local_reads: cfg.unsafe_local_reads,
        });
        let mut tasks = vec![tokio::spawn(serve_raft_with(
            raft_l,
            raft.clone(),
            Some(shared.sm.clone()),
        ))];
        tasks.push(tokio::spawn(serve_clients(
            client_l,
            shared.clone(),
            cfg.max_clients,
        )));
        let lowest = *cfg.members.keys().next().unwrap();
        if cfg.id == lowest
            && !raft
                .is_initialized()
                .await
                .map_err(|e| Error(format!("raft: {e}")))?
        {
            // Fails harmlessly when a vote or log already exists.
            let _ = raft.initialize(cfg.members.clone()).await;
        }
        Ok(Node { shared, tasks })
    }

    /// The Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.shared.raft
    }

    /// The value of `key` in this node's state machine, without any
    /// consistency check (for tests and tools; clients read through GET).
    pub fn local_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.shared
            .sm
            .get(key)
            .map_err(|e| Error(format!("engine: {e}")))
    }

    /// The index this node's state machine has applied.
    pub fn applied_index(&self) -> u64 {
        self.shared.sm.applied_index()
    }

    /// Stop Raft and the listeners.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.shared.raft.shutdown().await;
        set_trace::dump();
    }
}

async fn serve_clients(listener: TcpListener, shared: Arc<Shared>, max: usize) {
    let permits = Arc::new(Semaphore::new(max));
    // Dropping the set (when this task is aborted) ends every connection.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let _ = sock
                .write_all(b"-ERR max number of clients reached\r\n")
                .await;
            continue;
        };
        let shared = shared.clone();
        conns.spawn(async move {
            let _permit = permit;
            client_conn(sock, shared).await;
        });
    }
}

async fn client_conn(mut sock: TcpStream, shared: Arc<Shared>) {
    let _ = sock.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut used = 0;
        let mut close = false;
        loop {
            match parse_command(&buf[used..]) {
                Ok(Some((args, len))) => {
                    used += len;
                    if args.is_empty() {
                        continue;
                    }
                    let quit = args[0].eq_ignore_ascii_case(b"QUIT");
                    exec(&shared, &args).await.encode(&mut out);
                    if quit {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    Value::Error(format!("ERR Protocol error: {}", e.0)).encode(&mut out);
                    close = true;
                    break;
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() && sock.write_all(&out).await.is_err() {
            return;
        }
        set_trace::mark_out();
        out.clear();
        if close {
            return;
        }
    }
}

fn err(s: impl Into<String>) -> Value {
    Value::Error(s.into())
}

fn wrong_args(cmd: &str) -> Value {
    err(format!("ERR wrong number of arguments for '{cmd}' command"))
}

impl Shared {
    fn redirect(&self, f: &ForwardToLeader<NodeId, NodeAddr>) -> Value {
        let addr = f
            .leader_node
            .as_ref()
            .map(|n| n.client.clone())
            .or_else(|| {
                f.leader_id
                    .and_then(|id| self.members.get(&id))
                    .map(|n| n.client.clone())
            });
        match addr {
            Some(a) => err(format!("REDIRECT {a}")),
            None => err("TRYAGAIN no leader elected yet"),
        }
    }

    async fn write(&self, cmd: Cmd) -> Result<Reply, Value> {
        let t0 = if set_trace::on() {
            set_trace::now_ns()
        } else {
            0
        };
        match tokio::time::timeout(WRITE_TIMEOUT, self.raft.client_write(cmd)).await {
            Err(_) => Err(err(
                "TIMEOUT the write was not confirmed in time and may or may not take effect",
            )),
            Ok(Ok(r)) => {
                if set_trace::on() {
                    let i = r.log_id.index;
                    set_trace::mark_at("req", i, 0, t0);
                    set_trace::mark("done", i, 0);
                    set_trace::LAST_WRITE.store(i, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(r.data)
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(self.redirect(&f))
            }
            Ok(Err(e)) => Err(err(format!("ERR raft: {e}"))),
        }
    }

    async fn read(&self, key: &[u8]) -> Value {
        if self.unsafe_local_reads {
            return match self.sm.get(key) {
                Ok(Some(v)) => Value::Bulk(v),
                Ok(None) => Value::Nil,
                Err(e) => err(format!("ERR engine: {e}")),
            };
        }
        match tokio::time::timeout(READ_TIMEOUT, self.raft.ensure_linearizable()).await {
            Err(_) => err("TRYAGAIN leadership not confirmed in time"),
            Ok(Ok(_)) => match self.sm.get(key) {
                Ok(Some(v)) => Value::Bulk(v),
                Ok(None) => Value::Nil,
                Err(e) => err(format!("ERR engine: {e}")),
            },
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                self.redirect(&f)
            }
            Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))) => {
                err("TRYAGAIN no quorum confirmed this leader")
            }
            Ok(Err(e)) => err(format!("ERR raft: {e}")),
        }
    }

    fn raft_info(&self) -> Value {
        let m = self.raft.metrics().borrow().clone();
        let state = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let leader_addr = m
            .current_leader
            .and_then(|id| self.members.get(&id))
            .map(|n| n.client.clone());
        Value::Array(vec![
            Value::Int(self.id as i64),
            Value::Bulk(state.into()),
            Value::Int(m.current_leader.map_or(-1, |l| l as i64)),
            Value::Bulk(leader_addr.unwrap_or_default().into_bytes()),
            Value::Int(m.current_term as i64),
            Value::Int(m.last_applied.map_or(-1, |l| l.index as i64)),
        ])
    }
}

/// Run one client command.
async fn exec(shared: &Shared, args: &[Vec<u8>]) -> Value {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    let n = args.len();
    match name.as_str() {
        "PING" => match n {
            1 => Value::Simple("PONG".into()),
            2 => Value::Bulk(args[1].clone()),
            _ => wrong_args("ping"),
        },
        "ECHO" if n == 2 => Value::Bulk(args[1].clone()),
        "QUIT" | "SELECT" | "CLIENT" | "RESET" => Value::Simple("OK".into()),
        "GET" | "SET" | "CAS" | "DEL" if reserved_key(&name, args) => {
            err("ERR keys starting with \\xffpmkv. are reserved for the Raft log")
        }
        "GET" => {
            if n != 2 {
                return wrong_args("get");
            }
            shared.read(&args[1]).await
        }
        "SET" => {
            if n != 3 {
                return if n < 3 {
                    wrong_args("set")
                } else {
                    err("ERR syntax error (SET takes a key and a value only)")
                };
            }
            let cmd = Cmd::Set {
                key: args[1].clone(),
                value: args[2].clone(),
            };
            match shared.write(cmd).await {
                Ok(_) => Value::Simple("OK".into()),
                Err(e) => e,
            }
        }
        "DEL" => {
            if n < 2 {
                return wrong_args("del");
            }
            let mut count = 0;
            for k in &args[1..] {
                match shared.write(Cmd::Del { key: k.clone() }).await {
                    Ok(Reply::Bool(true)) => count += 1,
                    Ok(_) => {}
                    Err(e) => return e,
                }
            }
            Value::Int(count)
        }
        "CAS" => {
            if n != 4 {
                return wrong_args("cas");
            }
            let cmd = Cmd::Cas {
                key: args[1].clone(),
                expected: args[2].clone(),
                new: args[3].clone(),
            };
            match shared.write(cmd).await {
                Ok(Reply::Bool(b)) => Value::Int(b as i64),
                Ok(_) => err("ERR unexpected reply from the state machine"),
                Err(e) => e,
            }
        }
        "CONFIG" => {
            if n == 3 && args[1].eq_ignore_ascii_case(b"GET") {
                // redis-benchmark asks for `save` and `appendonly`.
                Value::Array(vec![Value::Bulk(args[2].clone()), Value::Bulk(Vec::new())])
            } else {
                err("ERR only CONFIG GET is supported")
            }
        }
        "COMMAND" => {
            if n >= 2 && args[1].eq_ignore_ascii_case(b"COUNT") {
                Value::Int(COMMANDS.len() as i64)
            } else {
                Value::Array(Vec::new())
            }
        }
        "INFO" => {
            let m = shared.raft.metrics().borrow().clone();
            let role = if m.state == ServerState::Leader {
                "master"
            } else {
                "slave"
            };
            let text = format!(
                "# Server\r\nredis_version:7.0.0-pmkv\r\n# Replication\r\nrole:{role}\r\nraft_id:{}\r\nraft_leader:{}\r\nraft_term:{}\r\nraft_applied:{}\r\nengine:{}\r\nraft_log:{}\r\nraft_appends_sent:{}\r\nraft_commits_held:{}\r\n",
                shared.id,
                m.current_leader.map_or("none".to_string(), |l| l.to_string()),
                m.current_term,
                shared.sm.applied_index(),
                shared.sm.engine_name(),
                shared.sm.placement().name(),
                crate::net::APPENDS_SENT.load(std::sync::atomic::Ordering::Relaxed),
                crate::net::COMMITS_HELD.load(std::sync::atomic::Ordering::Relaxed),
            );
            Value::Bulk(text.into_bytes())
        }
        "RAFTINFO" => shared.raft_info(),
        // This node's own state machine, no read index: for tests that
        // compare a replica with the leader, never for clients.
        "LOCALGET" => {
            if n != 2 {
                return wrong_args("localget");
            }
            match shared.sm.get(&args[1]) {
                Ok(Some(v)) => Value::Bulk(v),
                Ok(None) => Value::Nil,
                Err(e) => err(format!("ERR engine: {e}")),
            }
        }
        _ => {
            let shown: String = String::from_utf8_lossy(&args[0]).chars().take(64).collect();
            err(format!(
                "ERR unknown command '{shown}', with {} args (known: {})",
                n - 1,
                COMMANDS.join(" ")
            ))
        }
    }
}

/// Whether a key argument of the data command `name` is reserved for the
/// Raft log kept in the engine (every key of DEL, the first of the others).
fn reserved_key(name: &str, args: &[Vec<u8>]) -> bool {
    match name {
        "DEL" => args[1..].iter().any(|k| is_reserved(k)),
        _ => args.get(1).is_some_and(|k| is_reserved(k)),
    }
}

/// The commands the server answers.
pub const COMMANDS: &[&str] = &[
    "GET", "SET", "DEL", "CAS", "PING", "ECHO", "CONFIG", "COMMAND", "INFO", "RAFTINFO",
    "LOCALGET", "SELECT", "CLIENT", "QUIT",
];

/// A spin-before-block hook for a tokio runtime (`on_thread_park`): before
/// the thread sleeps in `epoll_wait`, poll the runtime's epoll instance
/// without blocking for up to `spin` (an epoll descriptor is readable
/// while it holds ready events, and polling it consumes none), so that a
/// message arriving within that time is taken without the thread going to
/// sleep and being woken. The descriptor is looked up in `/proc/self/fd`
/// at the first park; when the process holds none or more than one, the
/// hook says so once on stderr and does nothing.
pub fn spin_before_park(spin: Duration) -> impl Fn() + Send + Sync + 'static {
    let epfd = std::sync::OnceLock::new();
    move || {
        let Some(fd) = *epfd.get_or_init(|| {
            let fd = find_epoll_fd();
            if fd.is_none() {
                eprintln!("pmkv-server: --spin-us: no single epoll descriptor in /proc/self/fd, spinning is off");
            }
            fd
        }) else {
            return;
        };
        let end = std::time::Instant::now() + spin;
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd, no timeout.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            if n != 0 || std::time::Instant::now() >= end {
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// The process's epoll descriptor, if it holds exactly one.
fn find_epoll_fd() -> Option<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if target.as_os_str() == "anon_inode:[eventpoll]" {
            if let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) {
                found.push(fd);
            }
        }
    }
    match found[..] {
        [fd] => Some(fd),
        _ => None,
    }
}
