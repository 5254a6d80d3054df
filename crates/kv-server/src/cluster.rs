//! Membership from flags or a TOML file, and starting node processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::server::Error;
use crate::types::{NodeAddr, NodeId};

/// Parse `ID=RAFT_ADDR,CLIENT_ADDR` (the `--peer` flag).
pub fn parse_peer(s: &str) -> Result<(NodeId, NodeAddr), Error> {
    let bad = || {
        Error(format!("--peer {s:?}: expected ID=RAFT_HOST:PORT,CLIENT_HOST:PORT, e.g. 1=127.0.0.1:7101,127.0.0.1:7001"))
    };
    let (id, rest) = s.split_once('=').ok_or_else(bad)?;
    let id: NodeId = id.trim().parse().map_err(|_| bad())?;
    let (raft, client) = rest.split_once(',').ok_or_else(bad)?;
    for a in [raft, client] {
        let (host, port) = a.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad());
        }
    }
    if id == 0 {
        return Err(Error(format!("--peer {s:?}: node ids start at 1")));
    }
    Ok((
        id,
        NodeAddr {
            raft: raft.trim().to_string(),
            client: client.trim().to_string(),
        },
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    id: NodeId,
    raft: String,
    client: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    node: Vec<FileNode>,
}

/// Read a membership file:
///
/// ```toml
/// [[node]]
/// id = 1
/// raft = "127.0.0.1:7101"
/// client = "127.0.0.1:7001"
/// ```
pub fn load_members(path: &Path) -> Result<BTreeMap<NodeId, NodeAddr>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error(format!("membership file {}: {e}", path.display())))?;
    let f: ClusterFile = toml::from_str(&text).map_err(|e| {
        Error(format!(
            "membership file {}: {} (want [[node]] tables with id, raft, client)",
            path.display(),
            e.message()
        ))
    })?;
    let mut out = BTreeMap::new();
    for n in f.node {
        let (id, addr) = parse_peer(&format!("{}={},{}", n.id, n.raft, n.client))
            .map_err(|e| Error(format!("membership file {}: {}", path.display(), e.0)))?;
        if out.insert(id, addr).is_some() {
            return Err(Error(format!(
                "membership file {}: node {id} appears twice",
                path.display()
            )));
        }
    }
    check_members(&out)?;
    Ok(out)
}

/// Reject empty memberships and addresses used twice.
pub fn check_members(m: &BTreeMap<NodeId, NodeAddr>) -> Result<(), Error> {
    if m.is_empty() {
        return Err(Error(
            "no members: give --peer for each node or --config FILE".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for a in m.values() {
        for s in [&a.raft, &a.client] {
            if !seen.insert(s.clone()) {
                return Err(Error(format!(
                    "address {s} is used twice in the membership"
                )));
            }
        }
    }
    Ok(())
}

/// Members on loopback: node i (1-based) serves clients on
/// `base + i - 1` and Raft on `base + 100 + i - 1`.
pub fn loopback_members(nodes: u64, base: u16) -> Result<BTreeMap<NodeId, NodeAddr>, Error> {
    if nodes == 0 || nodes > 99 {
        return Err(Error(format!("--nodes {nodes}: give 1 to 99")));
    }
    if base as u64 + 100 + nodes > 65535 || base < 1024 {
        return Err(Error(format!("--base-port {base}: give a port from 1024 that leaves room for {nodes} nodes (+100 for Raft)")));
    }
    Ok((1..=nodes)
        .map(|i| {
            let c = base as u64 + i - 1;
            (
                i,
                NodeAddr {
                    raft: format!("127.0.0.1:{}", c + 100),
                    client: format!("127.0.0.1:{c}"),
                },
            )
        })
        .collect())
}

/// A loopback port free right now, below the kernel's usual ephemeral
/// range (32768 and up), so that no outgoing connection can take it
/// between now and the node's bind (port 0 hands out ephemeral ports,
/// which a client socket may hold a moment later: "Address already in
/// use"). Ports are handed out in order from an offset chosen by the
/// process id, never twice in one process.
pub fn free_port() -> Result<u16, Error> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(Error(format!(
        "no free loopback port in {LOW}..{}: free some, or give the ports explicitly",
        LOW + SPAN
    )))
}

/// How to start one node process.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// The `pmkv-server` binary.
    pub bin: PathBuf,
    /// The node's id.
    pub id: NodeId,
    /// The node's data directory.
    pub dir: PathBuf,
    /// The membership.
    pub members: BTreeMap<NodeId, NodeAddr>,
    /// Outgoing Raft routes (node id to proxy address).
    pub routes: BTreeMap<NodeId, String>,
    /// A command the node runs under, e.g. `pmlab run --source
    /// instrumented --pm-latency 305 --` (empty: run directly).
    pub wrap: Vec<String>,
    /// Further `serve` flags.
    pub extra: Vec<String>,
    /// Where the node's stderr goes (`None`: inherited).
    pub log: Option<PathBuf>,
    /// Environment variables set for the process (and its wrapper), e.g.
    /// `PMLAB_INSTR_PM=pool`.
    pub env: Vec<(String, String)>,
}

impl Spawn {
    /// Start the process.
    pub fn start(&self) -> Result<Child, Error> {
        let mut c = match self.wrap.split_first() {
            Some((cmd, args)) => {
                let mut c = Command::new(cmd);
                c.args(args).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        c.arg("serve")
            .arg("--id")
            .arg(self.id.to_string())
            .arg("--dir")
            .arg(&self.dir);
        for (id, a) in &self.members {
            c.arg("--peer").arg(format!("{id}={},{}", a.raft, a.client));
        }
        for (id, a) in &self.routes {
            c.arg("--route").arg(format!("{id}={a}"));
        }
        // Its own process group, so that `kill_group` reaches the node
        // behind a wrapper (`pmlab run`, `pmlab trace`) too.
        use std::os::unix::process::CommandExt;
        c.process_group(0);
        c.args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(log) = &self.log {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|e| Error(format!("node log {}: {e}", log.display())))?;
            c.stderr(f);
        }
        c.spawn()
            .map_err(|e| Error(format!("start {}: {e}", self.bin.display())))
    }
}

/// Send SIGTERM, wait up to `grace`, then SIGKILL (the whole process group).
pub fn stop(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_group(child);
}

/// SIGKILL the process group of `child` (a node started by
/// [`Spawn::start`], and a wrapper's node with it) and reap the child.
pub fn kill_group(child: &mut Child) {
    // SAFETY: killpg(2) on the group our own child leads.
    unsafe {
        libc::killpg(child.id() as libc::pid_t, libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Poll the nodes until one reports a leader that every reachable node
/// agrees on, or `timeout` passes.
pub fn wait_leader(
    members: &BTreeMap<NodeId, NodeAddr>,
    timeout: Duration,
) -> Option<(NodeId, String)> {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        for a in members.values() {
            if let Some(l) = crate::client::leader_of(&a.client, Duration::from_millis(500)) {
                if let Some((id, _)) = members.iter().find(|(_, m)| m.client == l) {
                    return Some((*id, l));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_and_bad_ones_are_named() {
        let (id, a) = parse_peer("2=127.0.0.1:7102,127.0.0.1:7002").unwrap();
        assert_eq!(
            (id, a.raft.as_str(), a.client.as_str()),
            (2, "127.0.0.1:7102", "127.0.0.1:7002")
        );
        for bad in [
            "2",
            "x=a:1,b:2",
            "2=127.0.0.1:7102",
            "2=:1,b:2",
            "2=a:99999,b:2",
            "0=a:1,b:2",
        ] {
            let e = parse_peer(bad).unwrap_err();
            assert!(e.0.contains("--peer"), "{bad}: {e}");
        }
        let m = loopback_members(3, 7000).unwrap();
        assert_eq!(m[&3].client, "127.0.0.1:7002");
        assert_eq!(m[&3].raft, "127.0.0.1:7102");
        assert!(loopback_members(0, 7000).is_err());
        assert!(loopback_members(3, 65500).is_err());
    }

    #[test]
    fn membership_file() {
        let dir = std::env::temp_dir().join(format!("pmkv-members-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.toml");
        std::fs::write(
            &p,
            "[[node]]\nid = 1\nraft = \"127.0.0.1:7101\"\nclient = \"127.0.0.1:7001\"\n",
        )
        .unwrap();
        assert_eq!(load_members(&p).unwrap().len(), 1);
        std::fs::write(
            &p,
            "[[node]]\nid = 1\nraft = \"127.0.0.1:7101\"\nclient = \"127.0.0.1:7101\"\n",
        )
        .unwrap();
        assert!(load_members(&p).unwrap_err().0.contains("used twice"));
        std::fs::write(&p, "[[node]]\nid = 1\nport = 3\n").unwrap();
        assert!(load_members(&p).unwrap_err().0.contains("membership file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
