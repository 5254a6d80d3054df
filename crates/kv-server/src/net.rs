//! Raft RPC between nodes: length-prefixed JSON frames over TCP.
//!
//! A frame is a 4-byte big-endian length and that many bytes of JSON; a
//! length above [`MAX_FRAME`] closes the connection. One request is in
//! flight per connection; a failed call drops the connection and the next
//! call dials again.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::types::{NodeAddr, NodeId, Raft, TypeConfig};

/// Largest frame accepted, in bytes (an append batch of 32 entries with
/// 1 MiB values fits, as does a 1 MiB snapshot chunk in JSON).
pub const MAX_FRAME: usize = 80 << 20;
/// Most Raft connections a node serves at once.
pub const MAX_RAFT_CONNS: usize = 64;

/// Write one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> io::Result<()> {
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {} bytes over the cap", body.len()),
        ));
    }
    w.write_all(&(body.len() as u32).to_be_bytes()).await?;
    w.write_all(body).await?;
    w.flush().await
}

/// Read one frame; a length over [`MAX_FRAME`] is an error.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {n} bytes over the {MAX_FRAME}-byte cap"),
        ));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).await?;
    Ok(body)
}

/// A Raft RPC.
#[derive(Serialize, Deserialize)]
pub enum RpcRequest {
    /// AppendEntries (also heartbeats).
    Append(AppendEntriesRequest<TypeConfig>),
    /// RequestVote.
    Vote(VoteRequest<NodeId>),
    /// One chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
}

/// The answer to an [`RpcRequest`].
#[derive(Serialize, Deserialize)]
pub enum RpcResponse {
    /// AppendEntries.
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// RequestVote.
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// Snapshot chunk.
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
}

/// Serve Raft RPCs on `listener` until the task is dropped.
pub async fn serve_raft(listener: TcpListener, raft: Raft) {
    let permits = Arc::new(Semaphore::new(MAX_RAFT_CONNS));
    // Dropping the set (when this task is aborted) ends every connection.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(sock);
            continue;
        };
        let raft = raft.clone();
        conns.spawn(async move {
            let _permit = permit;
            let _ = sock.set_nodelay(true);
            let (r, w) = sock.into_split();
            let mut r = BufReader::new(r);
            let mut w = BufWriter::new(w);
            while let Ok(body) = read_frame(&mut r).await {
                let Ok(req) = serde_json::from_slice::<RpcRequest>(&body) else {
                    break;
                };
                let resp = match req {
                    RpcRequest::Append(q) => RpcResponse::Append(raft.append_entries(q).await),
                    RpcRequest::Vote(q) => RpcResponse::Vote(raft.vote(q).await),
                    RpcRequest::Snapshot(q) => {
                        RpcResponse::Snapshot(raft.install_snapshot(q).await)
                    }
                };
                let Ok(out) = serde_json::to_vec(&resp) else {
                    break;
                };
                if write_frame(&mut w, &out).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// Creates a [`Connection`] per target node. `routes` overrides the
/// address dialled for some nodes (the fault tests route each link through
/// its own proxy).
#[derive(Clone, Default)]
pub struct Network {
    /// Node id to the `host:port` to dial instead of its Raft address.
    pub routes: std::collections::BTreeMap<NodeId, String>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> Connection {
        Connection {
            target,
            addr: self
                .routes
                .get(&target)
                .cloned()
                .unwrap_or_else(|| node.raft.clone()),
            conn: None,
        }
    }
}

type Stream = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    BufWriter<tokio::net::tcp::OwnedWriteHalf>,
);

/// A client connection to one node.
pub struct Connection {
    target: NodeId,
    addr: String,
    conn: Option<Stream>,
}

enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
}

impl Connection {
    async fn call(&mut self, req: &RpcRequest, ttl: Duration) -> Result<RpcResponse, CallError> {
        if self.conn.is_none() {
            let sock = match tokio::time::timeout(ttl, TcpStream::connect(&self.addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(CallError::Unreachable(e)),
                Err(_) => {
                    return Err(CallError::Unreachable(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connect timed out",
                    )))
                }
            };
            let _ = sock.set_nodelay(true);
            let (r, w) = sock.into_split();
            self.conn = Some((BufReader::new(r), BufWriter::new(w)));
        }
        let body = serde_json::to_vec(req).map_err(|e| CallError::Network(io::Error::other(e)))?;
        let (r, w) = self.conn.as_mut().unwrap();
        let exchange = async {
            write_frame(w, &body).await?;
            read_frame(r).await
        };
        let res = match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(b)) => serde_json::from_slice::<RpcResponse>(&b).map_err(io::Error::other),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "rpc timed out")),
        };
        res.map_err(|e| {
            self.conn = None;
            CallError::Network(e)
        })
    }
}

fn rpc_err<E: std::error::Error>(e: CallError) -> RPCError<NodeId, NodeAddr, E> {
    match e {
        CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
    }
}

fn mismatch<E: std::error::Error>() -> RPCError<NodeId, NodeAddr, E> {
    let e = io::Error::new(io::ErrorKind::InvalidData, "response of another kind");
    RPCError::Network(NetworkError::new(&e))
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        match self
            .call(&RpcRequest::Append(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcResponse::Append(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(mismatch()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddr, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self
            .call(&RpcRequest::Snapshot(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcResponse::Snapshot(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(mismatch()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddr, RaftError<NodeId>>> {
        match self
            .call(&RpcRequest::Vote(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcResponse::Vote(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(mismatch()),
        }
    }

    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(100)))
    }
}
