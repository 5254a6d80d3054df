//! Raft RPC between nodes: length-prefixed binary frames over TCP.
//!
//! A frame is a 4-byte big-endian length and that many bytes: the format
//! byte [`codec::VERSION`], a message kind, and the message in the compact
//! binary encoding of [`crate::types::codec`] (values and snapshot data as
//! raw bytes). A length above [`MAX_FRAME`] closes the connection, as does
//! a frame of another format (the JSON frames of older versions start
//! with `{`): the node says so once on stderr. One request is in flight per
//! connection; a failed call drops the connection and the next call dials
//! again. Both ends set `TCP_NODELAY` and write each frame with one call.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::snapstream::{PageBuf, Piece};
use crate::store::StateMachine;
use crate::types::codec::{self, DResult, Dec, DecodeError, Enc};
use crate::types::{NodeAddr, NodeId, Raft, TypeConfig};

/// Largest frame accepted, in bytes: an append batch is cut at
/// [`MAX_BATCH_BYTES`] (a single entry of up to 2 MiB, a CAS of two 1 MiB
/// values, still fits), a snapshot chunk is 4 MiB.
pub const MAX_FRAME: usize = 32 << 20;
/// An append batch whose entries take more than this many bytes is sent
/// in smaller batches (openraft retries with the number of entries that
/// fit, see [`PayloadTooLarge`]).
pub const MAX_BATCH_BYTES: usize = 8 << 20;
/// Most Raft connections a node serves at once.
pub const MAX_RAFT_CONNS: usize = 64;

const KIND_APPEND: u8 = 1;
const KIND_VOTE: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;
const KIND_FULL_SNAPSHOT: u8 = 4;
const KIND_STREAMED_SNAPSHOT: u8 = 5;

/// Write one frame (the body of `enc` after its 4 reserved bytes) with one
/// write call.
async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, mut enc: Enc) -> io::Result<()> {
    let n = enc.buf.len() - 4;
    if n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {n} bytes over the {MAX_FRAME}-byte cap"),
        ));
    }
    enc.buf[..4].copy_from_slice(&(n as u32).to_be_bytes());
    w.write_all(&enc.buf).await
}

/// A frame buffer: 4 bytes for the length, the format byte and `kind`.
fn frame(kind: u8, capacity: usize) -> Enc {
    let mut e = Enc::with_capacity(capacity + 6);
    e.buf.extend_from_slice(&[0; 4]);
    e.u8(codec::VERSION);
    e.u8(kind);
    e
}

/// Read one frame; a length over [`MAX_FRAME`] is an error. The buffer
/// grows as bytes arrive, so a bogus length allocates nothing up front.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {n} bytes over the {MAX_FRAME}-byte cap"),
        ));
    }
    let mut body = Vec::with_capacity(n.min(1 << 20));
    (&mut *r).take(n as u64).read_to_end(&mut body).await?;
    if body.len() != n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(body)
}

static WARNED_FORMAT: AtomicBool = AtomicBool::new(false);

/// Check a frame's format byte and return its kind and the message. A
/// frame of another format is reported once on stderr (one line naming
/// the fix) and refused.
fn open_frame<'a>(body: &'a [u8], peer: &str) -> io::Result<(u8, Dec<'a>)> {
    match body {
        [codec::VERSION, kind, rest @ ..] => Ok((*kind, Dec::new(rest))),
        _ => {
            let what = match body.first() {
                Some(b'{') => "the JSON frames of an older pmkv-server".to_string(),
                Some(b) => format!("format byte {b:#04x}"),
                None => "an empty frame".to_string(),
            };
            let msg = format!(
                "raft peer {peer} speaks another wire format ({what}, this node speaks {:#04x}): run the same pmkv-server version on every node",
                codec::VERSION
            );
            if !WARNED_FORMAT.swap(true, Ordering::Relaxed) {
                eprintln!("pmkv-server: {msg}");
            }
            Err(io::Error::new(io::ErrorKind::InvalidData, msg))
        }
    }
}

fn done<T>(r: &Dec<'_>, x: T) -> DResult<T> {
    if r.remaining() != 0 {
        return Err(DecodeError(format!(
            "{} trailing bytes after a message",
            r.remaining()
        )));
    }
    Ok(x)
}

/// The head of a whole snapshot sent in one stream
/// ([`RpcRequest::FullSnapshot`]); the data follows the frame raw.
pub struct SnapshotHead {
    /// The leader's vote.
    pub vote: openraft::Vote<NodeId>,
    /// What the snapshot covers.
    pub meta: openraft::SnapshotMeta<NodeId, NodeAddr>,
    /// Bytes of data after the frame ([`RpcRequest::FullSnapshot`]), or
    /// the bytes expected, for the receiver's buffer
    /// ([`RpcRequest::StreamedSnapshot`]).
    pub len: u64,
}

/// A Raft RPC.
pub enum RpcRequest {
    /// AppendEntries (also heartbeats).
    Append(AppendEntriesRequest<TypeConfig>),
    /// RequestVote.
    Vote(VoteRequest<NodeId>),
    /// One chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A whole snapshot: this head, then `len` raw bytes after the frame
    /// (see [`Connection`]'s `full_snapshot`); answered as a
    /// [`RpcResponse::Snapshot`] once it is installed.
    FullSnapshot(SnapshotHead),
    /// A whole snapshot sent while it is built: this head, then chunks
    /// `[u32 LE n][n bytes]` after the frame, ended by `n = 0` (or
    /// [`STREAM_FAILED`]: the build failed); answered as a
    /// [`RpcResponse::Snapshot`] once it is installed.
    StreamedSnapshot(SnapshotHead),
}

/// The chunk length that ends a streamed snapshot whose build failed.
pub const STREAM_FAILED: u32 = u32::MAX;
/// Largest chunk of a streamed snapshot accepted.
pub const MAX_STREAM_CHUNK: usize = 64 << 20;

/// The answer to an [`RpcRequest`].
pub enum RpcResponse {
    /// AppendEntries.
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// RequestVote.
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// Snapshot chunk.
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
}

impl RpcRequest {
    /// The whole frame (length, format byte, kind, message).
    pub fn encode(&self) -> Enc {
        match self {
            RpcRequest::Append(q) => {
                let size: usize = q.entries.iter().map(codec::entry_size_hint).sum();
                let mut e = frame(KIND_APPEND, 64 + size + 40 * q.entries.len());
                e.vote(&q.vote);
                e.opt_log_id(&q.prev_log_id);
                e.opt_log_id(&q.leader_commit);
                e.u64(q.entries.len() as u64);
                for x in &q.entries {
                    e.entry(x);
                }
                e
            }
            RpcRequest::Vote(q) => {
                let mut e = frame(KIND_VOTE, 64);
                e.vote(&q.vote);
                e.opt_log_id(&q.last_log_id);
                e
            }
            RpcRequest::Snapshot(q) => {
                let mut e = frame(KIND_SNAPSHOT, 512 + q.data.len());
                e.vote(&q.vote);
                e.json(&q.meta);
                e.u64(q.offset);
                e.u8(q.done as u8);
                e.bytes(&q.data);
                e
            }
            RpcRequest::FullSnapshot(h) | RpcRequest::StreamedSnapshot(h) => {
                let kind = match self {
                    RpcRequest::FullSnapshot(_) => KIND_FULL_SNAPSHOT,
                    _ => KIND_STREAMED_SNAPSHOT,
                };
                let mut e = frame(kind, 512);
                e.vote(&h.vote);
                e.json(&h.meta);
                e.u64(h.len);
                e
            }
        }
    }

    /// Decode a request message of `kind`.
    pub fn decode(kind: u8, mut r: Dec<'_>) -> DResult<RpcRequest> {
        match kind {
            KIND_APPEND => {
                let vote = r.vote()?;
                let prev_log_id = r.opt_log_id()?;
                let leader_commit = r.opt_log_id()?;
                let n = r.u64()? as usize;
                // Every entry takes at least 25 bytes: a bogus count
                // cannot reserve much.
                let mut entries = Vec::with_capacity(n.min(r.remaining() / 25));
                for _ in 0..n {
                    entries.push(r.entry()?);
                }
                done(
                    &r,
                    RpcRequest::Append(AppendEntriesRequest {
                        vote,
                        prev_log_id,
                        entries,
                        leader_commit,
                    }),
                )
            }
            KIND_VOTE => {
                let vote = r.vote()?;
                let last_log_id = r.opt_log_id()?;
                done(&r, RpcRequest::Vote(VoteRequest { vote, last_log_id }))
            }
            KIND_SNAPSHOT => {
                let vote = r.vote()?;
                let meta = r.json()?;
                let offset = r.u64()?;
                let done_flag = r.bool()?;
                let data = r.bytes()?;
                done(
                    &r,
                    RpcRequest::Snapshot(InstallSnapshotRequest {
                        vote,
                        meta,
                        offset,
                        data,
                        done: done_flag,
                    }),
                )
            }
            KIND_FULL_SNAPSHOT | KIND_STREAMED_SNAPSHOT => {
                let vote = r.vote()?;
                let meta = r.json()?;
                let len = r.u64()?;
                let head = SnapshotHead { vote, meta, len };
                done(
                    &r,
                    if kind == KIND_FULL_SNAPSHOT {
                        RpcRequest::FullSnapshot(head)
                    } else {
                        RpcRequest::StreamedSnapshot(head)
                    },
                )
            }
            k => Err(DecodeError(format!("unknown request kind {k}"))),
        }
    }
}

/// `Ok`: a 0 byte and the value; `Err`: a 1 byte and the error as JSON.
fn enc_result<T, E: serde::Serialize>(
    e: &mut Enc,
    r: &Result<T, E>,
    ok: impl FnOnce(&mut Enc, &T),
) {
    match r {
        Ok(x) => {
            e.u8(0);
            ok(e, x);
        }
        Err(err) => {
            e.u8(1);
            e.json(err);
        }
    }
}

fn dec_result<T, E: serde::de::DeserializeOwned>(
    r: &mut Dec<'_>,
    ok: impl FnOnce(&mut Dec<'_>) -> DResult<T>,
) -> DResult<Result<T, E>> {
    Ok(if r.bool()? {
        Err(r.json()?)
    } else {
        Ok(ok(r)?)
    })
}

impl RpcResponse {
    /// The whole frame (length, format byte, kind, message).
    pub fn encode(&self) -> Enc {
        match self {
            RpcResponse::Append(res) => {
                let mut e = frame(KIND_APPEND, 64);
                enc_result(&mut e, res, |e, a| match a {
                    AppendEntriesResponse::Success => e.u8(0),
                    AppendEntriesResponse::PartialSuccess(l) => {
                        e.u8(1);
                        e.opt_log_id(l);
                    }
                    AppendEntriesResponse::Conflict => e.u8(2),
                    AppendEntriesResponse::HigherVote(v) => {
                        e.u8(3);
                        e.vote(v);
                    }
                });
                e
            }
            RpcResponse::Vote(res) => {
                let mut e = frame(KIND_VOTE, 64);
                enc_result(&mut e, res, |e, v| {
                    e.vote(&v.vote);
                    e.u8(v.vote_granted as u8);
                    e.opt_log_id(&v.last_log_id);
                });
                e
            }
            RpcResponse::Snapshot(res) => {
                let mut e = frame(KIND_SNAPSHOT, 64);
                enc_result(&mut e, res, |e, s| e.vote(&s.vote));
                e
            }
        }
    }

    /// Decode a response message of `kind`.
    pub fn decode(kind: u8, mut r: Dec<'_>) -> DResult<RpcResponse> {
        let resp = match kind {
            KIND_APPEND => RpcResponse::Append(dec_result(&mut r, |r| {
                Ok(match r.u8()? {
                    0 => AppendEntriesResponse::Success,
                    1 => AppendEntriesResponse::PartialSuccess(r.opt_log_id()?),
                    2 => AppendEntriesResponse::Conflict,
                    3 => AppendEntriesResponse::HigherVote(r.vote()?),
                    t => return Err(DecodeError(format!("unknown append response {t}"))),
                })
            })?),
            KIND_VOTE => RpcResponse::Vote(dec_result(&mut r, |r| {
                Ok(VoteResponse {
                    vote: r.vote()?,
                    vote_granted: r.bool()?,
                    last_log_id: r.opt_log_id()?,
                })
            })?),
            KIND_SNAPSHOT => RpcResponse::Snapshot(dec_result(&mut r, |r| {
                Ok(InstallSnapshotResponse { vote: r.vote()? })
            })?),
            k => return Err(DecodeError(format!("unknown response kind {k}"))),
        };
        done(&r, resp)
    }
}

/// The wait before a snapshot send dials an unreachable node again (as
/// `backoff` between other calls).
const DIAL_BACKOFF: Duration = Duration::from_millis(5);
/// The wait before a snapshot send dials its unreachable follower again:
/// shorter than [`DIAL_BACKOFF`], since the follower is found this much
/// later on average after it starts listening (a failed dial on loopback
/// costs a few µs).
const SNAPSHOT_DIAL_BACKOFF: Duration = Duration::from_millis(2);
/// A snapshot held longer than this while its follower was unreachable is
/// given back for a fresh one when the follower answers.
const SNAPSHOT_HELD_FOR: Duration = Duration::from_millis(100);
/// How long a snapshot send keeps dialling an unreachable follower before
/// it hands the failure back to openraft.
const SNAPSHOT_DIAL_FOR: Duration = Duration::from_secs(10);
/// The same for a snapshot not built yet (streamed, see `snapstream`):
/// giving it back costs nothing, and openraft's next one is taken at the
/// applied index then, so the one sent when the follower answers is at
/// most this old (no fresh one to fetch first).
const SNAPSHOT_DIAL_UNBUILT: Duration = Duration::from_millis(50);

/// Largest snapshot accepted in one stream, in bytes (a bogus length is
/// refused before anything is allocated).
pub const MAX_SNAPSHOT: u64 = 1 << 40;

/// Hand the received bytes of the snapshot `head` announced to openraft
/// to install; the answer to send.
async fn install_received(raft: &Raft, head: SnapshotHead, data: Vec<u8>) -> RpcResponse {
    let snapshot = openraft::storage::Snapshot {
        meta: head.meta,
        snapshot: Box::new(io::Cursor::new(data)),
    };
    let res = raft
        .install_full_snapshot(head.vote, snapshot)
        .await
        .map(|s| InstallSnapshotResponse { vote: s.vote })
        .map_err(RaftError::Fatal);
    RpcResponse::Snapshot(res)
}

/// Receive the `head.len` raw bytes of a whole snapshot from `r` into one
/// buffer allocated at its final size (no chunk copies, no regrowth), hand
/// it to openraft to install, and return the answer to send. An error
/// (short read, a length over [`MAX_SNAPSHOT`] or one that cannot be
/// allocated) drops the connection.
async fn receive_full_snapshot<R: AsyncRead + Unpin>(
    raft: &Raft,
    r: &mut R,
    head: SnapshotHead,
) -> io::Result<RpcResponse> {
    let n = head.len;
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    if n > MAX_SNAPSHOT {
        return Err(bad(format!(
            "snapshot of {n} bytes over the {MAX_SNAPSHOT}-byte cap"
        )));
    }
    crate::catchup::mark(|| format!("snapshot receive begin {n} bytes"));
    let mut data = Vec::new();
    data.try_reserve_exact(n as usize)
        .map_err(|e| bad(format!("snapshot of {n} bytes: {e}")))?;
    crate::store::huge_pages(&mut data);
    r.take(n).read_to_end(&mut data).await?;
    if data.len() as u64 != n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    crate::catchup::mark(|| "snapshot receive end".into());
    Ok(install_received(raft, head, data).await)
}

/// Read `n` bytes from `r` onto the end of `buf` (grown as needed, at
/// least doubling).
async fn read_onto<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    let want = buf.len() + n;
    if buf.capacity() < want {
        buf.try_reserve(n.max(buf.capacity() - buf.len()))
            .map_err(|e| io::Error::other(format!("snapshot piece of {n} bytes: {e}")))?;
    }
    while buf.len() < want {
        // The capacity is there: `read_buf` fills it and allocates nothing.
        let left = (want - buf.len()) as u64;
        if (&mut *r).take(left).read_buf(buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Receive a snapshot streamed in chunks ([`RpcRequest::StreamedSnapshot`]),
/// hand it to openraft to install, and return the answer to send. With a
/// state machine that can stage it (`sm`, see
/// [`StateMachine::stage_begin`]), each chunk is written into the engine
/// on a blocking thread while the next one arrives, and openraft's
/// install commits what was staged; otherwise the chunks are collected
/// into one buffer and installed whole. An error (bad data, a failed
/// build, a short read) drops the connection and the staging.
async fn receive_streamed_snapshot<R: AsyncRead + Unpin>(
    raft: &Raft,
    sm: Option<&StateMachine>,
    r: &mut R,
    head: SnapshotHead,
) -> io::Result<RpcResponse> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    let id = head.meta.snapshot_id.clone();
    let staged = sm.filter(|sm| sm.stage_begin(&head.meta)).cloned();
    /// Drops the staging on every way out (a no-op once installed).
    struct Unstage(Option<StateMachine>, String);
    impl Drop for Unstage {
        fn drop(&mut self) {
            if let Some(sm) = &self.0 {
                sm.stage_drop(&self.1);
            }
        }
    }
    let _unstage = Unstage(staged.clone(), id.clone());
    crate::catchup::mark(|| {
        format!(
            "snapshot receive begin (streamed{}, about {} bytes)",
            if staged.is_some() { ", staged" } else { "" },
            head.len
        )
    });
    let mut data = Vec::new();
    let mut writer = None;
    let mut pieces = None;
    match &staged {
        Some(sm) => {
            let (tx, rx) = std::sync::mpsc::channel::<PageBuf>();
            let (sm, id) = (sm.clone(), id.clone());
            writer = Some(tokio::task::spawn_blocking(
                move || -> Result<(), String> {
                    let (cpu0, flt0) = crate::catchup::thread_usage();
                    for piece in rx {
                        sm.stage_data(&id, piece)?;
                    }
                    let r = sm.stage_end(&id);
                    let (cpu1, flt1) = crate::catchup::thread_usage();
                    crate::catchup::mark(|| {
                        format!(
                            "staging thread: cpu {:.1} ms, {} page faults",
                            (cpu1 - cpu0) as f64 / 1e3,
                            flt1 - flt0
                        )
                    });
                    r
                },
            ));
            pieces = Some(tx);
        }
        None => {
            if data
                .try_reserve_exact(head.len.min(MAX_SNAPSHOT) as usize)
                .is_ok()
            {
                crate::store::huge_pages(&mut data);
            }
        }
    }
    let mut total = 0u64;
    loop {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).await?;
        let n = u32::from_le_bytes(len);
        if n == 0 {
            break;
        }
        if n == STREAM_FAILED {
            return Err(bad("the leader's snapshot build failed".into()));
        }
        let n = n as usize;
        total += n as u64;
        if n > MAX_STREAM_CHUNK || total > MAX_SNAPSHOT {
            return Err(bad(format!(
                "snapshot chunk of {n} bytes ({total} in all): over the cap"
            )));
        }
        match &pieces {
            Some(tx) => {
                // Each chunk in its own huge-page buffer, kept until the
                // install (see `EngineSm::stage_data`).
                let mut piece = PageBuf::new(n)?;
                r.read_exact(&mut piece.spare()[..n]).await?;
                piece.advance(n);
                if tx.send(piece).is_err() {
                    // The writer stopped on bad data: its error follows.
                    break;
                }
            }
            None => read_onto(r, &mut data, n).await?,
        }
    }
    drop(pieces);
    if let Some(w) = writer {
        match w.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(bad(e)),
            Err(e) => return Err(io::Error::other(e.to_string())),
        }
    }
    crate::catchup::mark(|| format!("snapshot receive end {total} bytes"));
    Ok(install_received(raft, head, data).await)
}

/// Serve Raft RPCs on `listener` until the task is dropped.
pub async fn serve_raft(listener: TcpListener, raft: Raft) {
    serve_raft_with(listener, raft, None).await
}

/// [`serve_raft`], with the node's state machine: a snapshot streamed to
/// it ([`RpcRequest::StreamedSnapshot`]) is then written into its engine
/// as it arrives (see [`StateMachine::stage_begin`]).
pub async fn serve_raft_with(listener: TcpListener, raft: Raft, sm: Option<StateMachine>) {
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
        let sm = sm.clone();
        conns.spawn(async move {
            let _permit = permit;
            let _ = sock.set_nodelay(true);
            let peer = sock
                .peer_addr()
                .map_or_else(|_| "?".to_string(), |a| a.to_string());
            let (r, mut w) = sock.into_split();
            let mut r = BufReader::with_capacity(64 * 1024, r);
            while let Ok(body) = read_frame(&mut r).await {
                let t_recv = if set_trace::on() {
                    set_trace::now_ns()
                } else {
                    0
                };
                let Ok((kind, msg)) = open_frame(&body, &peer) else {
                    break;
                };
                let Ok(req) = RpcRequest::decode(kind, msg) else {
                    break;
                };
                drop(body);
                let mut traced = None;
                let resp = match req {
                    RpcRequest::Append(q) => {
                        if set_trace::on() {
                            traced = q.entries.last().map(|e| e.log_id.index);
                            if let Some(i) = traced {
                                set_trace::mark_at("recv", i, 0, t_recv);
                            }
                        }
                        let a = raft.append_entries(q).await;
                        if let Some(i) = traced {
                            set_trace::mark("appended", i, 0);
                        }
                        RpcResponse::Append(a)
                    }
                    RpcRequest::Vote(q) => RpcResponse::Vote(raft.vote(q).await),
                    RpcRequest::Snapshot(q) => {
                        RpcResponse::Snapshot(raft.install_snapshot(q).await)
                    }
                    RpcRequest::FullSnapshot(head) => {
                        match receive_full_snapshot(&raft, &mut r, head).await {
                            Ok(resp) => resp,
                            Err(_) => break,
                        }
                    }
                    RpcRequest::StreamedSnapshot(head) => {
                        match receive_streamed_snapshot(&raft, sm.as_ref(), &mut r, head).await {
                            Ok(resp) => resp,
                            Err(_) => break,
                        }
                    }
                };
                if write_frame(&mut w, resp.encode()).await.is_err() {
                    break;
                }
                if let Some(i) = traced {
                    set_trace::mark("replied", i, 0);
                }
            }
        });
    }
}

/// Creates a [`Connection`] per target node. `routes` overrides the
/// address dialled for some nodes (the fault tests route each link through
/// its own proxy).
///
/// Idle connections are pooled per target: openraft asks for a new
/// [`Connection`] on every leadership check of a linearizable read (and
/// drops it after one AppendEntries), so without the pool each GET would
/// dial every follower afresh. A connection goes back to the pool when its
/// [`Connection`] is dropped between calls (never one with a frame half
/// written or an answer unread), and the next [`Connection`] to that
/// target takes it.
#[derive(Clone, Default)]
pub struct Network {
    /// Node id to the `host:port` to dial instead of its Raft address.
    pub routes: std::collections::BTreeMap<NodeId, String>,
    /// How long a commit-only AppendEntries may be held back (see
    /// [`Connection`]); zero sends each one at once.
    pub commit_lag: Duration,
    /// Idle connections per target.
    pub pool: Pool,
}

/// Idle Raft connections per target node (see [`Network`]).
#[derive(Clone, Default)]
pub struct Pool(Arc<std::sync::Mutex<std::collections::HashMap<NodeId, Vec<Stream>>>>);

/// Most idle connections kept per target.
const POOL_PER_TARGET: usize = 16;

impl Pool {
    fn take(&self, target: NodeId) -> Option<Stream> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get_mut(&target).and_then(Vec::pop)
    }

    fn give(&self, target: NodeId, s: Stream) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let v = m.entry(target).or_default();
        if v.len() < POOL_PER_TARGET {
            v.push(s);
        }
    }
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
            conn: self.pool.take(target),
            pooled: true,
            pool: self.pool.clone(),
            commit_lag: self.commit_lag,
            last: None,
        }
    }
}

type Stream = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
);

/// What the last AppendEntries this connection sent told its follower.
struct LastAppend {
    vote: openraft::Vote<NodeId>,
    /// The follower's last entry as acknowledged (the `prev_log_id` of a
    /// following heartbeat).
    matching: Option<crate::types::LogId>,
    /// The commit index sent, or held back since ([`Connection`]).
    commit: Option<crate::types::LogId>,
    /// When the last frame was sent.
    at: tokio::time::Instant,
}

/// Counts of AppendEntries sent and held back by this process (shown by
/// the `INFO` command).
pub static APPENDS_SENT: AtomicU64 = AtomicU64::new(0);
/// Commit-only AppendEntries held back (see [`Connection`]).
pub static COMMITS_HELD: AtomicU64 = AtomicU64::new(0);

/// A client connection to one node.
///
/// **Commit-only messages held back.** Once an entry is committed,
/// openraft sends every idle follower an AppendEntries carrying no entries
/// and only the new commit index, and waits for its answer before the
/// next entries can go: with one client, two Raft round trips per
/// follower and SET, the second competing with the next SET for the
/// CPUs. When such a message (no entries, the same vote and
/// `prev_log_id` as the last successful call, only a higher
/// `leader_commit`) comes within `commit_lag` of the last frame sent on
/// this connection, it is answered `Success` at once without being sent:
/// the follower learns the commit index from the next AppendEntries (the
/// next entries or openraft's heartbeat, every `heartbeat_interval`).
/// Nothing the leader decides depends on it: the commit index is the
/// leader's, computed from the answers to real entries, and the answer
/// claims no more than the follower already acknowledged (its `matching`
/// unchanged). Linearizable reads confirm leadership on connections of
/// their own (a fresh [`Connection`], whose first call is always sent).
/// A follower's state machine then trails the leader's by up to one
/// heartbeat when writes stop.
pub struct Connection {
    target: NodeId,
    addr: String,
    conn: Option<Stream>,
    /// `conn` came from the pool and has not been used by this
    /// connection yet: it may have been closed by its peer meanwhile.
    pooled: bool,
    pool: Pool,
    commit_lag: Duration,
    last: Option<LastAppend>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(s) = self.conn.take() {
            self.pool.give(self.target, s);
        }
    }
}

enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
}

impl Connection {
    /// Send `req` and read its answer. The stream is taken out of `self`
    /// during the exchange and put back only after a whole answer was
    /// read: a call cancelled half way (openraft's own timeout) drops it,
    /// so no later call can read an earlier call's answer.
    ///
    /// A pooled stream's first call that fails (its peer restarted since,
    /// say) is made again once on a new connection: every request sent
    /// this way (AppendEntries, a vote) may be received twice.
    async fn call(&mut self, req: &RpcRequest, ttl: Duration) -> Result<RpcResponse, CallError> {
        let reused = std::mem::take(&mut self.pooled) && self.conn.is_some();
        match self.call_once(req, ttl).await {
            Err(CallError::Network(e)) if reused && e.kind() != io::ErrorKind::TimedOut => {
                self.call_once(req, ttl).await
            }
            r => r,
        }
    }

    async fn call_once(
        &mut self,
        req: &RpcRequest,
        ttl: Duration,
    ) -> Result<RpcResponse, CallError> {
        self.dial(ttl).await?;
        let Some((mut r, mut w)) = self.conn.take() else {
            return Err(CallError::Network(io::ErrorKind::NotConnected.into()));
        };
        let frame = req.encode();
        let exchange = async {
            write_frame(&mut w, frame).await?;
            read_frame(&mut r).await
        };
        let addr = &self.addr;
        let res = match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(b)) => open_frame(&b, addr).and_then(|(kind, msg)| {
                RpcResponse::decode(kind, msg)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "rpc timed out")),
        };
        match res {
            Ok(resp) => {
                self.conn = Some((r, w));
                Ok(resp)
            }
            Err(e) => Err(CallError::Network(e)),
        }
    }

    /// Whether `rpc` is a commit-only AppendEntries that may be held back.
    fn may_hold(&self, rpc: &AppendEntriesRequest<TypeConfig>) -> bool {
        let Some(l) = &self.last else {
            return false;
        };
        rpc.entries.is_empty()
            && self.conn.is_some()
            && rpc.vote == l.vote
            && rpc.prev_log_id == l.matching
            && rpc.leader_commit > l.commit
            && l.at.elapsed() < self.commit_lag
    }
}

impl Connection {
    /// Connect unless connected.
    async fn dial(&mut self, ttl: Duration) -> Result<(), CallError> {
        if self.conn.is_some() {
            return Ok(());
        }
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
        self.conn = Some((BufReader::with_capacity(16 * 1024, r), w));
        Ok(())
    }

    /// Write the head frame and `data`, then read the answer; a failure
    /// drops the connection.
    async fn stream_snapshot(
        &mut self,
        head: &RpcRequest,
        data: &[u8],
        ttl: Duration,
    ) -> Result<RpcResponse, CallError> {
        self.dial(ttl).await?;
        let Some((r, w)) = self.conn.as_mut() else {
            return Err(CallError::Network(io::ErrorKind::NotConnected.into()));
        };
        let exchange = async {
            write_frame(w, head.encode()).await?;
            w.write_all(data).await?;
            read_frame(r).await
        };
        let addr = &self.addr;
        let res = match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(b)) => open_frame(&b, addr).and_then(|(kind, msg)| {
                RpcResponse::decode(kind, msg)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "snapshot transfer timed out",
            )),
        };
        res.map_err(|e| {
            self.conn = None;
            CallError::Network(e)
        })
    }
}

/// `fut`, or a timed-out error after `ttl`.
async fn within<T>(
    ttl: Duration,
    what: &str,
    fut: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(ttl, fut).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} timed out"),
        )),
    }
}

impl Connection {
    /// Write the head frame, then each chunk of `build` as it is filled
    /// (each within `ttl`), then read the answer (within `ttl` plus 250 ms
    /// per MiB sent); a failure drops the connection.
    async fn stream_build(
        &mut self,
        head: &RpcRequest,
        build: &mut crate::snapstream::Build,
        ttl: Duration,
    ) -> Result<RpcResponse, CallError> {
        self.dial(ttl).await?;
        let Some((r, w)) = self.conn.as_mut() else {
            return Err(CallError::Network(io::ErrorKind::NotConnected.into()));
        };
        let addr = &self.addr;
        let exchange = async {
            within(ttl, "snapshot head", write_frame(w, head.encode())).await?;
            let mut total = 0u64;
            loop {
                let piece = within(ttl, "snapshot build", async {
                    Ok::<_, io::Error>(build.rx.recv().await)
                })
                .await?;
                match piece {
                    Some(Piece::Chunk(c)) => {
                        total += (c.len() - 4) as u64;
                        within(ttl, "snapshot chunk", w.write_all(&c)).await?;
                        let _ = build.back.send(c);
                    }
                    Some(Piece::End(_)) => {
                        within(ttl, "snapshot end", w.write_all(&0u32.to_le_bytes())).await?;
                        break;
                    }
                    other => {
                        let why = match other {
                            Some(Piece::Failed(e)) => e,
                            _ => "the build stopped".into(),
                        };
                        let _ = w.write_all(&STREAM_FAILED.to_le_bytes()).await;
                        return Err(io::Error::other(format!("snapshot build: {why}")));
                    }
                }
            }
            crate::catchup::mark(|| format!("snapshot sent {total} bytes"));
            let answer = ttl + Duration::from_millis(250 * (total >> 20));
            let b = within(answer, "snapshot install", read_frame(r)).await?;
            open_frame(&b, addr).and_then(|(kind, msg)| {
                RpcResponse::decode(kind, msg)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
            })
        };
        let res = exchange.await;
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
        // Cut a batch whose entries exceed the byte budget: openraft
        // resends the number of entries that fit.
        let mut bytes = 0;
        for (i, e) in rpc.entries.iter().enumerate() {
            bytes += codec::entry_size_hint(e) + 40;
            if bytes > MAX_BATCH_BYTES && i > 0 {
                return Err(PayloadTooLarge::new_entries_hint(i as u64).into());
            }
        }
        if self.may_hold(&rpc) {
            if let Some(l) = &mut self.last {
                l.commit = rpc.leader_commit;
            }
            COMMITS_HELD.fetch_add(1, Ordering::Relaxed);
            return Ok(AppendEntriesResponse::Success);
        }
        let vote = rpc.vote;
        let commit = rpc.leader_commit;
        let last_sent = rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id);
        self.last = None;
        APPENDS_SENT.fetch_add(1, Ordering::Relaxed);
        let at = tokio::time::Instant::now();
        let traced = last_sent.filter(|_| set_trace::on() && !rpc.entries.is_empty());
        if let Some(l) = traced {
            set_trace::mark("send", l.index, self.target);
        }
        let res = match self
            .call(&RpcRequest::Append(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcResponse::Append(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(mismatch()),
        };
        if let Some(l) = traced {
            set_trace::mark("ack", l.index, self.target);
        }
        if let Ok(AppendEntriesResponse::Success) = &res {
            self.last = Some(LastAppend {
                vote,
                matching: last_sent,
                commit,
                at,
            });
        }
        res
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

    /// Send the whole snapshot in one stream: a [`SnapshotHead`] frame,
    /// then the data as it is, straight from the snapshot's buffer; the
    /// follower reads it into one buffer of its final size and installs
    /// it before answering. Replaces openraft's chunked transfer (a copy
    /// of each chunk on both sides, a growing buffer on the follower, a
    /// round trip and a 1 ms pause per chunk).
    async fn full_snapshot(
        &mut self,
        vote: openraft::Vote<NodeId>,
        snapshot: openraft::storage::Snapshot<TypeConfig>,
        cancel: impl std::future::Future<Output = openraft::error::ReplicationClosed>
            + openraft::OptionalSend
            + 'static,
        option: RPCOption,
    ) -> Result<
        openraft::raft::SnapshotResponse<NodeId>,
        openraft::error::StreamingError<TypeConfig, openraft::error::Fatal<NodeId>>,
    > {
        let meta = snapshot.meta;
        let data = snapshot.snapshot.into_inner();
        // A snapshot built for this send has no data, only an id naming
        // its build (`snapstream`): it is sent while it is built.
        let mut build = None;
        if data.is_empty() && crate::snapstream::names_build(&meta.snapshot_id) {
            build = crate::snapstream::take_build(&meta.snapshot_id);
            if build.is_none() {
                return Err(NetworkError::new(&io::Error::other(
                    "the snapshot's build is gone: fetch a new one",
                ))
                .into());
            }
        }
        // Transfer and install take time in proportion to the size: the
        // RPC timeout plus 250 ms per MiB (a streamed one: per chunk, and
        // for the answer, see `stream_build`).
        let ttl = option.hard_ttl() + Duration::from_millis(250 * (data.len() as u64 >> 20));
        let head = match &build {
            Some(b) => RpcRequest::StreamedSnapshot(SnapshotHead {
                vote,
                meta,
                len: b.hint,
            }),
            None => RpcRequest::FullSnapshot(SnapshotHead {
                vote,
                meta,
                len: data.len() as u64,
            }),
        };
        crate::catchup::mark(|| match &build {
            Some(_) => "snapshot send begin (streamed)".to_string(),
            None => format!("snapshot send begin {} bytes", data.len()),
        });
        let mut cancel = std::pin::pin!(cancel);
        // An unreachable follower (being restarted) is dialled every
        // backoff step, for up to `SNAPSHOT_DIAL_FOR`, without giving the
        // snapshot back (openraft would fetch it again after each failed
        // dial). Once it answers after a longer wait, the snapshot held may
        // be far behind the applied index: the send fails without data (the
        // connection kept) so that openraft fetches a fresh one at once
        // (see `store::REBUILD_BEHIND`).
        let started = tokio::time::Instant::now();
        while self.conn.is_none() {
            let res = tokio::select! {
                r = self.dial(ttl) => r,
                c = cancel.as_mut() => return Err(c.into()),
            };
            match res {
                Ok(()) if started.elapsed() > SNAPSHOT_HELD_FOR => {
                    return Err(NetworkError::new(&io::Error::other(
                        "the follower answers again: send a fresh snapshot",
                    ))
                    .into());
                }
                Ok(()) => {}
                Err(CallError::Unreachable(_))
                    if started.elapsed()
                        < if build.is_some() {
                            SNAPSHOT_DIAL_UNBUILT
                        } else {
                            SNAPSHOT_DIAL_FOR
                        } =>
                {
                    tokio::select! {
                        _ = tokio::time::sleep(SNAPSHOT_DIAL_BACKOFF) => {}
                        c = cancel.as_mut() => return Err(c.into()),
                    }
                }
                Err(CallError::Unreachable(e)) => return Err(Unreachable::new(&e).into()),
                Err(CallError::Network(e)) => return Err(NetworkError::new(&e).into()),
            }
        }
        if let Some(b) = build.as_mut() {
            b.start();
        }
        let res = tokio::select! {
            r = async {
                match build.as_mut() {
                    Some(b) => self.stream_build(&head, b, ttl).await,
                    None => self.stream_snapshot(&head, &data, ttl).await,
                }
            } => r,
            c = cancel.as_mut() => {
                // A frame may be half written: the next call dials again.
                self.conn = None;
                return Err(c.into());
            }
        };
        let resp = match res.map_err(rpc_err::<RaftError<NodeId, InstallSnapshotError>>) {
            Ok(RpcResponse::Snapshot(r)) => r,
            Ok(_) => {
                return Err(NetworkError::new(&io::Error::new(
                    io::ErrorKind::InvalidData,
                    "response of another kind",
                ))
                .into())
            }
            Err(RPCError::Unreachable(e)) => return Err(e.into()),
            Err(RPCError::Network(e)) => return Err(e.into()),
            Err(e) => return Err(NetworkError::new(&e).into()),
        };
        crate::catchup::mark(|| "snapshot send end".into());
        match resp {
            Ok(r) => Ok(openraft::raft::SnapshotResponse { vote: r.vote }),
            Err(RaftError::Fatal(f)) => Err(RemoteError::new(self.target, f).into()),
            Err(RaftError::APIError(e)) => Err(NetworkError::new(&e).into()),
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

    /// Retry an unreachable node every 20 ms: a dial on loopback or a LAN
    /// fails at once, and a restarted replica is found sooner (this wait
    /// was most of its recovery time at 100 ms).
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(DIAL_BACKOFF))
    }
}

/// Per-SET stage timestamps, to see where a replicated write's time goes.
///
/// With `PMKV_SET_TRACE=FILE` in a node's environment (`%p` in FILE
/// stands for the process id, for the nodes of one `cluster` command),
/// the node records
/// the monotonic clock (shared by the processes of one machine) at each
/// stage of every entry it handles and writes them to FILE at shutdown,
/// one line `STAGE INDEX PEER NS` each: on the leader `req` (a write
/// handed to openraft), `send` and `ack` per follower (an AppendEntries
/// carrying the entry written, its answer read), `done` (openraft
/// answered: committed and applied), `out` (the client's reply written);
/// on a follower `recv` (the AppendEntries read), `appended` (openraft
/// answered it) and `replied` (the answer written). `pmkv-server
/// set-trace FILE...` lines them up by log index.
pub mod set_trace {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, OnceLock};

    /// Most records kept (the rest are dropped).
    const CAP: usize = 4 << 20;

    struct Trace {
        file: String,
        recs: Mutex<Vec<(&'static str, u64, u64, u64)>>,
    }

    fn trace() -> Option<&'static Trace> {
        static T: OnceLock<Option<Trace>> = OnceLock::new();
        T.get_or_init(|| {
            std::env::var("PMKV_SET_TRACE").ok().map(|file| Trace {
                file: file.replace("%p", &std::process::id().to_string()),
                recs: Mutex::new(Vec::new()),
            })
        })
        .as_ref()
    }

    /// Whether tracing is on.
    pub fn on() -> bool {
        trace().is_some()
    }

    /// The monotonic clock in ns.
    pub fn now_ns() -> u64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    }

    /// Record `stage` of entry `index` (to or from node `peer`) at `ns`.
    pub fn mark_at(stage: &'static str, index: u64, peer: u64, ns: u64) {
        if let Some(t) = trace() {
            let mut r = t.recs.lock().unwrap_or_else(|e| e.into_inner());
            if r.len() < CAP {
                r.push((stage, index, peer, ns));
            }
        }
    }

    /// Record `stage` of entry `index` now.
    pub fn mark(stage: &'static str, index: u64, peer: u64) {
        if on() {
            mark_at(stage, index, peer, now_ns());
        }
    }

    /// The index of the last write this thread handed to openraft (for the
    /// `out` stage).
    pub static LAST_WRITE: AtomicU64 = AtomicU64::new(u64::MAX);

    /// Note the reply to the last write as written.
    pub fn mark_out() {
        if on() {
            let i = LAST_WRITE.swap(u64::MAX, Ordering::Relaxed);
            if i != u64::MAX {
                mark("out", i, 0);
            }
        }
    }

    /// Write the records to the file (at shutdown); errors are reported on
    /// stderr.
    pub fn dump() {
        let Some(t) = trace() else {
            return;
        };
        let recs = std::mem::take(&mut *t.recs.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out = String::with_capacity(recs.len() * 32);
        for (s, i, p, ns) in recs {
            out.push_str(&format!("{s} {i} {p} {ns}\n"));
        }
        if let Err(e) = std::fs::write(&t.file, out) {
            eprintln!("pmkv-server: PMKV_SET_TRACE {}: {e}", t.file);
        }
    }

    /// The median time of each step of a SET, from the trace files of
    /// every node: one line per step, in us, and the number of SETs seen
    /// whole.
    pub fn report(files: &[std::path::PathBuf]) -> Result<String, String> {
        use std::collections::HashMap;
        // index -> stage -> [(peer, ns)]
        let mut by: HashMap<u64, HashMap<String, Vec<(u64, u64)>>> = HashMap::new();
        for (fi, f) in files.iter().enumerate() {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            for (n, l) in text.lines().enumerate() {
                let w: Vec<&str> = l.split_whitespace().collect();
                let bad = || format!("{}:{}: expected STAGE INDEX PEER NS", f.display(), n + 1);
                let [stage, i, p, ns] = w[..] else {
                    return Err(bad());
                };
                let num = |x: &str| x.parse::<u64>().map_err(|_| bad());
                let peer = if stage == "recv" || stage == "appended" || stage == "replied" {
                    // A follower's stages are told apart by their file.
                    fi as u64
                } else {
                    num(p)?
                };
                by.entry(num(i)?)
                    .or_default()
                    .entry(stage.to_string())
                    .or_default()
                    .push((peer, num(ns)?));
            }
        }
        let steps = [
            "leader: write handed to openraft -> first AppendEntries written (RaftCore, log append and flush, replication task, log read)",
            "-> a follower has read it (loopback, wake-up)",
            "follower: openraft append_entries (RaftCore, log append and flush)",
            "follower: answer written",
            "-> the leader has read the first answer (loopback, wake-up)",
            "leader: first answer -> openraft answers the write (commit, apply)",
            "leader: -> reply written to the client",
            "leader: write handed to openraft -> reply written (total in the leader)",
        ];
        let mut d: Vec<Vec<f64>> = vec![Vec::new(); steps.len()];
        let first = |v: Option<&Vec<(u64, u64)>>| v.and_then(|v| v.iter().map(|x| x.1).min());
        let mut whole = 0;
        for st in by.values() {
            let (Some(req), Some(send), Some(done), Some(out)) = (
                first(st.get("req")),
                first(st.get("send")),
                first(st.get("done")),
                first(st.get("out")),
            ) else {
                continue;
            };
            // The follower whose answer came first.
            let Some(&(fpeer, ack)) = st.get("ack").and_then(|a| a.iter().min_by_key(|x| x.1))
            else {
                continue;
            };
            let Some(&(_, sent)) = st.get("send").and_then(|a| a.iter().find(|x| x.0 == fpeer))
            else {
                continue;
            };
            // The follower's own stages: the one file whose recv is
            // between this send and ack.
            let fol = st.get("recv").and_then(|r| {
                r.iter()
                    .filter(|x| x.1 >= sent && x.1 <= ack)
                    .map(|x| x.0)
                    .next()
            });
            let get = |name: &str, f: u64| {
                st.get(name)
                    .and_then(|v| v.iter().find(|x| x.0 == f))
                    .map(|x| x.1)
            };
            let Some(f) = fol else { continue };
            let (Some(recv), Some(app), Some(rep)) =
                (get("recv", f), get("appended", f), get("replied", f))
            else {
                continue;
            };
            whole += 1;
            let us = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1000.0;
            let vals = [
                us(req, send),
                us(sent, recv),
                us(recv, app),
                us(app, rep),
                us(rep, ack),
                us(ack, done),
                us(done, out),
                us(req, out),
            ];
            for (k, v) in vals.into_iter().enumerate() {
                d[k].push(v);
            }
        }
        if whole == 0 {
            return Err("no SET is traced whole on the leader and a follower: give every node's file (PMKV_SET_TRACE on each node)".into());
        }
        let mut out = format!("SETs traced whole: {whole}\nstep: p50 / p90 us\n");
        for (k, s) in steps.iter().enumerate() {
            let v = &mut d[k];
            v.sort_by(|a, b| a.total_cmp(b));
            let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
            out.push_str(&format!("{s}: {:.1} / {:.1}\n", q(0.5), q(0.9)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Cmd, Entry, LogId};
    use openraft::{CommittedLeaderId, EntryPayload, SnapshotMeta, Vote};
    use std::sync::atomic::AtomicU64;

    fn lid(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    /// A frame's body (after its length, which must match).
    fn body(e: Enc) -> Vec<u8> {
        let n = u32::from_be_bytes(e.buf[..4].try_into().unwrap()) as usize;
        assert_eq!(n, 0, "frame() leaves the length to write_frame");
        e.buf[4..].to_vec()
    }

    #[test]
    fn requests_round_trip() {
        let entries: Vec<Entry> = (0..3)
            .map(|i| Entry {
                log_id: lid(2, i),
                payload: EntryPayload::Normal(Cmd::Set {
                    key: vec![i as u8],
                    value: vec![7; 4096],
                }),
            })
            .collect();
        let q = RpcRequest::Append(AppendEntriesRequest {
            vote: Vote::new_committed(2, 1),
            prev_log_id: Some(lid(1, 0)),
            entries: entries.clone(),
            leader_commit: None,
        });
        let b = body(q.encode());
        // Values travel as raw bytes: 3 x 4 KiB and little else.
        assert!(b.len() < 3 * 4096 + 256, "{} bytes", b.len());
        let (kind, msg) = open_frame(&b, "test").unwrap();
        match RpcRequest::decode(kind, msg).unwrap() {
            RpcRequest::Append(a) => {
                assert_eq!(a.entries, entries);
                assert_eq!(a.prev_log_id, Some(lid(1, 0)));
                assert_eq!(a.leader_commit, None);
                assert_eq!(a.vote, Vote::new_committed(2, 1));
            }
            _ => panic!("another kind"),
        }
        let q = RpcRequest::Snapshot(InstallSnapshotRequest {
            vote: Vote::new(3, 2),
            meta: SnapshotMeta {
                last_log_id: Some(lid(3, 9)),
                last_membership: Default::default(),
                snapshot_id: "9-1".into(),
            },
            offset: 4 << 20,
            data: vec![1, 2, 3],
            done: true,
        });
        let b = body(q.encode());
        let (kind, msg) = open_frame(&b, "test").unwrap();
        match RpcRequest::decode(kind, msg).unwrap() {
            RpcRequest::Snapshot(s) => {
                assert_eq!(s.data, vec![1, 2, 3]);
                assert_eq!(s.offset, 4 << 20);
                assert!(s.done);
                assert_eq!(s.meta.snapshot_id, "9-1");
            }
            _ => panic!("another kind"),
        }
        let q = RpcRequest::FullSnapshot(SnapshotHead {
            vote: Vote::new_committed(3, 2),
            meta: SnapshotMeta {
                last_log_id: Some(lid(3, 15000)),
                last_membership: Default::default(),
                snapshot_id: "15000-2".into(),
            },
            len: 62 << 20,
        });
        let b = body(q.encode());
        // The head only: the data follows the frame.
        assert!(b.len() < 512, "{} bytes", b.len());
        let (kind, msg) = open_frame(&b, "test").unwrap();
        match RpcRequest::decode(kind, msg).unwrap() {
            RpcRequest::FullSnapshot(h) => {
                assert_eq!(h.len, 62 << 20);
                assert_eq!(h.vote, Vote::new_committed(3, 2));
                assert_eq!(h.meta.last_log_id, Some(lid(3, 15000)));
            }
            _ => panic!("another kind"),
        }
        let q = RpcRequest::Vote(VoteRequest {
            vote: Vote::new(5, 3),
            last_log_id: Some(lid(4, 8)),
        });
        let b = body(q.encode());
        let (kind, msg) = open_frame(&b, "test").unwrap();
        match RpcRequest::decode(kind, msg).unwrap() {
            RpcRequest::Vote(v) => {
                assert_eq!(v.vote, Vote::new(5, 3));
                assert_eq!(v.last_log_id, Some(lid(4, 8)));
            }
            _ => panic!("another kind"),
        }
    }

    #[test]
    fn responses_round_trip() {
        let all = || {
            [
                AppendEntriesResponse::Success,
                AppendEntriesResponse::PartialSuccess(Some(lid(2, 5))),
                AppendEntriesResponse::PartialSuccess(None),
                AppendEntriesResponse::Conflict,
                AppendEntriesResponse::HigherVote(Vote::new(8, 2)),
            ]
        };
        for (a, want) in all().into_iter().zip(all()) {
            let b = body(RpcResponse::Append(Ok(a)).encode());
            let (kind, msg) = open_frame(&b, "test").unwrap();
            match RpcResponse::decode(kind, msg).unwrap() {
                RpcResponse::Append(Ok(got)) => assert_eq!(got, want),
                _ => panic!("another answer"),
            }
        }
        let v = VoteResponse {
            vote: Vote::new(3, 3),
            vote_granted: true,
            last_log_id: None,
        };
        let b = body(RpcResponse::Vote(Ok(v.clone())).encode());
        let (kind, msg) = open_frame(&b, "test").unwrap();
        match RpcResponse::decode(kind, msg).unwrap() {
            RpcResponse::Vote(Ok(got)) => assert_eq!(got, v),
            _ => panic!("another answer"),
        }
    }

    /// A stand-in follower: answers every AppendEntries `Success`,
    /// counting the connections accepted and the frames read.
    async fn fake_follower() -> (String, Arc<AtomicU64>, Arc<AtomicU64>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (conns, frames) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (c2, f2) = (conns.clone(), frames.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                c2.fetch_add(1, Ordering::SeqCst);
                let f3 = f2.clone();
                tokio::spawn(async move {
                    let (r, mut w) = s.into_split();
                    let mut r = BufReader::new(r);
                    while read_frame(&mut r).await.is_ok() {
                        f3.fetch_add(1, Ordering::SeqCst);
                        let ok = RpcResponse::Append(Ok(AppendEntriesResponse::Success));
                        if write_frame(&mut w, ok.encode()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, conns, frames)
    }

    fn append(
        prev: Option<LogId>,
        entries: Vec<Entry>,
        commit: Option<LogId>,
    ) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(2, 1),
            prev_log_id: prev,
            entries,
            leader_commit: commit,
        }
    }

    #[tokio::test]
    async fn commit_only_appends_are_held_back_and_connections_pooled() {
        let (addr, conns, frames) = fake_follower().await;
        let node = NodeAddr {
            raft: addr,
            client: String::new(),
        };
        let opt = || RPCOption::new(Duration::from_secs(5));
        let entry = |i| Entry {
            log_id: lid(2, i),
            payload: EntryPayload::Normal(Cmd::Set {
                key: vec![1],
                value: vec![2],
            }),
        };
        for (lag, held) in [(Duration::from_secs(5), true), (Duration::ZERO, false)] {
            let mut net = Network {
                commit_lag: lag,
                ..Default::default()
            };
            let mut c = net.new_client(2, &node).await;
            let before = frames.load(Ordering::SeqCst);
            // Entry 5, then its commit alone: held back (not sent) with a lag.
            let r = c.append_entries(
                append(Some(lid(2, 4)), vec![entry(5)], Some(lid(2, 4))),
                opt(),
            );
            assert_eq!(r.await.unwrap(), AppendEntriesResponse::Success);
            let r = c.append_entries(append(Some(lid(2, 5)), vec![], Some(lid(2, 5))), opt());
            assert_eq!(r.await.unwrap(), AppendEntriesResponse::Success);
            let sent = frames.load(Ordering::SeqCst) - before;
            assert_eq!(sent, if held { 1 } else { 2 }, "lag {lag:?}");
            // A heartbeat with the commit already seen goes out; so does
            // one with another prev_log_id.
            let r = c.append_entries(append(Some(lid(2, 5)), vec![], Some(lid(2, 5))), opt());
            assert_eq!(r.await.unwrap(), AppendEntriesResponse::Success);
            let r = c.append_entries(append(Some(lid(2, 3)), vec![], Some(lid(2, 6))), opt());
            assert_eq!(r.await.unwrap(), AppendEntriesResponse::Success);
            assert_eq!(frames.load(Ordering::SeqCst) - before, sent + 2);
            // A fresh connection's first commit-only message is sent.
            drop(c);
            let accepted = conns.load(Ordering::SeqCst);
            let mut c = net.new_client(2, &node).await;
            let before = frames.load(Ordering::SeqCst);
            let r = c.append_entries(append(Some(lid(2, 5)), vec![], Some(lid(2, 7))), opt());
            assert_eq!(r.await.unwrap(), AppendEntriesResponse::Success);
            assert_eq!(frames.load(Ordering::SeqCst) - before, 1);
            // ... on the pooled connection: no new dial.
            assert_eq!(conns.load(Ordering::SeqCst), accepted);
        }
    }

    #[test]
    fn other_formats_and_garbage_are_refused() {
        let json = br#"{"Vote":{"vote":{}}}"#;
        let err = open_frame(json, "127.0.0.1:1").unwrap_err();
        assert!(
            err.to_string()
                .contains("JSON frames of an older pmkv-server"),
            "{err}"
        );
        assert!(open_frame(&[], "x").is_err());
        // Truncated or trailing bytes, unknown kinds: errors, not panics.
        let b = body(
            RpcRequest::Vote(VoteRequest {
                vote: Vote::new(1, 1),
                last_log_id: None,
            })
            .encode(),
        );
        for cut in 2..b.len() {
            let (kind, msg) = open_frame(&b[..cut], "x").unwrap();
            assert!(RpcRequest::decode(kind, msg).is_err());
        }
        let mut long = b.clone();
        long.push(0);
        let (kind, msg) = open_frame(&long, "x").unwrap();
        assert!(RpcRequest::decode(kind, msg).is_err());
        assert!(RpcRequest::decode(99, Dec::new(&[])).is_err());
        // An entry count far beyond the bytes does not reserve memory.
        let mut e = frame(KIND_APPEND, 0);
        e.vote(&Vote::new(1, 1));
        e.opt_log_id(&None);
        e.opt_log_id(&None);
        e.u64(u64::MAX);
        let b = body(e);
        let (kind, msg) = open_frame(&b, "x").unwrap();
        assert!(RpcRequest::decode(kind, msg).is_err());
    }
}
