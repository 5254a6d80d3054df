//! The Raft log kept inside the state machine's engine: no separate log
//! file (the thesis' design, for the PM engines `list`, `btree` and
//! `anchor`).
//!
//! # The mapping
//!
//! Raft log index *i* is engine version *i + 1* (openraft's first entry has
//! index 0, the engines' first version is 1). Every index holds exactly one
//! version, so the engine's versions above its discard floor *are* the log:
//!
//! | entry | written at append, as version *i + 1* |
//! |---|---|
//! | `SET k v` | `k = v` |
//! | `DEL k`, `k` present | a deletion of `k` |
//! | `CAS k e n`, `k == e` | `k = n` |
//! | `DEL`/`CAS` that change nothing, blank entries | the reserved key [`RAFT_KEY`] = a record (log id, what the entry was) |
//! | membership entries | the reserved key [`MEMBER_KEY`] = a record (log id, membership) |
//!
//! A command is applied at *append* time, uncommitted, to the state that
//! the log prefix before it defines (the engine's newest versions), so
//! its outcome is the one every replica computes. The state machine reads
//! only committed versions: `get_at(key, applied + 1)`.
//!
//! Terms: openraft's leaders append a blank entry before anything else in
//! their term, so the first entry of each term in any log is a record, and
//! the leader (term, node) of entry *i* is the one in the newest record
//! at or below version *i + 1* (the engine's own `get_at` on the two reserved
//! keys). An entry that would break this is refused at append.
//!
//! # openraft's contract, operation by operation
//!
//! * `append`: each entry becomes its version; one `sync` of the engine
//!   (one group commit: flushes and fences) before the flush callback, so
//!   the entries are readable on return and durable when acknowledged.
//!   Versions must follow the last one with no gap.
//! * `try_get_log_entries`: rebuilt from the engine: the DRAM map version
//!   to key (rebuilt on open with `written_above(floor)`), the value at that
//!   version (`SET`, or `DEL` for a deletion) or the record. A `CAS` that
//!   stored comes back as the equivalent `SET` after a restart (its effect
//!   on every replica is the same); its client reply was already sent.
//! * `truncate(i)` = `rollback_above(i)` (durable on return).
//! * `purge(i)` = `discard_below(i + 1)`, which raises the floor: only ever
//!   up to what the state machine has applied (and so what a snapshot
//!   covers). A purge beyond the applied index (openraft issues it while
//!   the state machine is still installing a snapshot) waits for that
//!   install and is done by it.
//! * `save_vote`: the vote file `raft-vote.json`, written to a temporary
//!   file, fsync'd and renamed before returning. `save_committed`: one
//!   `pwrite` of a checksummed record into `raft-committed`, no fsync
//!   (openraft needs it after a restart: a node that comes back as the
//!   leader of its old term reads at the saved committed id).
//! * `apply`: nothing is written; the applied log id and membership move
//!   forward in DRAM and the replies come from what the append found
//!   (stored or not). After a restart the applied index is the purged one
//!   (all committed) and openraft re-applies up to the saved committed id.
//! * Snapshot = the engine's snapshot iterator at the applied index
//!   (reserved keys left out; while openraft starts, only the metadata is
//!   handed out, the data being built when a follower needs it); installing one either finds the snapshot's
//!   last entry already in the local log (nothing to change but the
//!   applied index) or replaces the whole engine with `restore` at version
//!   *S + 1*, the membership record included. `restore` is atomic: a crash
//!   in the middle leaves the old log and state, or the new state whose
//!   floor says the log is purged up to *S* with *S*'s term and membership
//!   in its record. No other metadata has to agree with it. A snapshot
//!   streamed to this node is written into the engine as it arrives, as a
//!   staged restore (`EngineSm::stage_begin`) that the install commits
//!   with the same atomicity; a crash before leaves the old log and state.
//! * Linearizable reads use openraft's read index (`ensure_linearizable`),
//!   then read at the applied index: never an uncommitted version.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Cursor};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, Snapshot};
use openraft::{CommittedLeaderId, EntryPayload, ErrorSubject, ErrorVerb, Vote};
use serde::{Deserialize, Serialize};

use crate::engine::{EngineError, KvEngine};
use crate::snapstream::StagedRestore;
use crate::store::{encode_snapshot, metadata_only_snapshot, snapshot_pairs, write_atomic};
use crate::types::{
    Cmd, Entry, LogId, NodeId, Reply, SnapshotMeta, StorageError, StoredMembership,
};

/// The reserved key holding blank entries and commands that changed nothing.
pub const RAFT_KEY: &[u8] = b"\xffpmkv.raft";
/// The reserved key holding membership entries (and a restored snapshot's).
pub const MEMBER_KEY: &[u8] = b"\xffpmkv.membership";
/// What every reserved key starts with; clients may not use such keys.
pub const RESERVED_PREFIX: &[u8] = b"\xffpmkv.";
/// The file holding the vote.
pub const VOTE_FILE: &str = "raft-vote.json";
/// The file holding the committed log id (a fixed record, rewritten in place).
pub const COMMITTED_FILE: &str = "raft-committed";

const COMMITTED_MAGIC: u64 = 0x544d_4d43_564b_4d50; // "PMKVCMMT"

/// `[magic][index][term][node][present][checksum]`, little-endian u64s.
fn encode_committed(c: Option<LogId>) -> [u8; 48] {
    let w = match c {
        Some(c) => [c.index, c.leader_id.term, c.leader_id.node_id, 1],
        None => [0, 0, 0, 0],
    };
    let mut b = [0u8; 48];
    b[..8].copy_from_slice(&COMMITTED_MAGIC.to_le_bytes());
    for (i, x) in w.iter().enumerate() {
        b[8 + i * 8..16 + i * 8].copy_from_slice(&x.to_le_bytes());
    }
    let sum = crate::store::checksum(&b[..40]);
    b[40..].copy_from_slice(&sum.to_le_bytes());
    b
}

/// The record's log id; `None` when absent, empty or torn (a torn record
/// only costs re-learning the commit index from the leader).
fn decode_committed(b: &[u8]) -> Option<LogId> {
    if b.len() < 48 {
        return None;
    }
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    if w(0) != COMMITTED_MAGIC || crate::store::checksum(&b[..40]) != w(5) || w(4) != 1 {
        return None;
    }
    Some(LogId::new(CommittedLeaderId::new(w(2), w(3)), w(1)))
}

/// Whether `key` is reserved for the Raft log.
pub fn is_reserved(key: &[u8]) -> bool {
    key.starts_with(RESERVED_PREFIX)
}

fn ver(index: u64) -> u64 {
    index + 1
}

/// What a reserved key's version says about its entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Body {
    /// A blank entry.
    Blank,
    /// A command that changed nothing (a failed CAS, a DEL of an absent key).
    Miss(Cmd),
    /// A membership entry, or the membership of a restored snapshot.
    Membership(StoredMembership),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// The entry's log id (for a restore: the snapshot's last log id).
    log_id: LogId,
    body: Body,
}

/// How an entry was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A user key was set or deleted (`SET`, `DEL` that found its key, or
    /// a `CAS` written before a restart).
    Write,
    /// A `CAS` that stored, appended by this process.
    CasHit,
    /// A record under a reserved key.
    Record,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct VoteFile {
    vote: Option<Vote<NodeId>>,
    /// Kept in [`COMMITTED_FILE`], not in the vote file.
    #[serde(skip)]
    committed: Option<LogId>,
}

struct Cached {
    meta: SnapshotMeta,
    data: Arc<Vec<u8>>,
}

struct Inner {
    dir: PathBuf,
    engine: Box<dyn KvEngine>,
    /// The key each version above the floor wrote, and how.
    slots: BTreeMap<u64, (Vec<u8>, Kind)>,
    /// The leader of the last entry (`None` for an empty log).
    last_leader: Option<CommittedLeaderId<NodeId>>,
    saved: VoteFile,
    committed_file: fs::File,
    applied: Option<LogId>,
    membership: StoredMembership,
    pending_purge: Option<LogId>,
    snapshot: Option<Cached>,
    staging: Option<StagedRestore>,
    built: u64,
    /// Bytes of the last snapshot built (a size hint for the next).
    last_len: usize,
    /// Set until openraft has started: its start-up asks for the current
    /// snapshot only for the metadata, so none is built then.
    opening: bool,
}

#[allow(clippy::result_large_err)]
fn eng(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: EngineError) -> StorageError {
    StorageError::from_io_error(subject, verb, io::Error::other(e.0))
}

#[allow(clippy::result_large_err)]
fn bad_log(what: String) -> StorageError {
    StorageError::from_io_error(
        ErrorSubject::Logs,
        ErrorVerb::Read,
        io::Error::new(io::ErrorKind::InvalidData, what),
    )
}

impl Inner {
    fn record_at(&self, key: &[u8], version: u64) -> Result<Option<Record>, EngineError> {
        match self.engine.get_at(key, version)? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| EngineError(format!("Raft record at version {version}: {e}"))),
        }
    }

    /// The leader of the entry at `version`: the one in the newest record
    /// at or below it.
    fn leader_at(&self, version: u64) -> Result<CommittedLeaderId<NodeId>, EngineError> {
        let a = self.record_at(RAFT_KEY, version)?;
        let b = self.record_at(MEMBER_KEY, version)?;
        let newest = match (a, b) {
            (Some(a), Some(b)) => Some(if a.log_id.index >= b.log_id.index {
                a
            } else {
                b
            }),
            (a, b) => a.or(b),
        };
        newest.map(|r| r.log_id.leader_id).ok_or_else(|| {
            EngineError(format!(
                "no Raft record at or below version {version}: the engine does not hold a Raft log"
            ))
        })
    }

    /// The last purged log id: the entry at the floor.
    fn purged(&self) -> Result<Option<LogId>, EngineError> {
        let floor = self.engine.floor();
        if floor == 0 {
            return Ok(None);
        }
        Ok(Some(LogId::new(self.leader_at(floor)?, floor - 1)))
    }

    fn last_log_id(&self) -> Result<Option<LogId>, EngineError> {
        let last = self.engine.last_version();
        if last == 0 {
            return Ok(None);
        }
        match self.last_leader {
            Some(l) => Ok(Some(LogId::new(l, last - 1))),
            None => Ok(Some(LogId::new(self.leader_at(last)?, last - 1))),
        }
    }

    fn membership_at(&self, version: u64) -> Result<StoredMembership, EngineError> {
        Ok(match self.record_at(MEMBER_KEY, version)? {
            Some(Record {
                body: Body::Membership(m),
                ..
            }) => m,
            _ => StoredMembership::default(),
        })
    }

    /// Entries with versions in `from..to`.
    fn entries(&self, from: u64, to: u64) -> Result<Vec<Entry>, EngineError> {
        let mut out = Vec::new();
        let from = from.max(self.engine.floor() + 1);
        let to = to.min(self.engine.last_version() + 1);
        if from >= to {
            return Ok(out);
        }
        // The leader of the entries before the first record in the range.
        // Reading up to the last entry with no record in the range (the
        // replication of new entries), it is the last entry's leader,
        // known without decoding the two records `leader_at` reads.
        let mut leader = None;
        let to_end = to == self.engine.last_version() + 1;
        let first_record = self
            .slots
            .range(from..to)
            .find(|(_, (_, kind))| *kind == Kind::Record)
            .map(|(v, _)| *v);
        if first_record.is_none() && to_end {
            leader = self.last_leader;
        }
        for v in from..to {
            let Some((key, kind)) = self.slots.get(&v) else {
                return Err(EngineError(format!("log entry {} is missing", v - 1)));
            };
            let (log_id, payload) = match kind {
                Kind::Record => {
                    let r = self
                        .record_at(key, v)?
                        .filter(|r| r.log_id.index == v - 1)
                        .ok_or_else(|| {
                            EngineError(format!("log entry {}: its record is missing", v - 1))
                        })?;
                    leader = Some(r.log_id.leader_id);
                    let payload = match r.body {
                        Body::Blank => EntryPayload::Blank,
                        Body::Miss(c) => EntryPayload::Normal(c),
                        Body::Membership(m) => EntryPayload::Membership(m.membership().clone()),
                    };
                    (r.log_id, payload)
                }
                Kind::Write | Kind::CasHit => {
                    let cmd = match self.engine.get_at(key, v)? {
                        Some(value) => Cmd::Set {
                            key: key.clone(),
                            value,
                        },
                        None => Cmd::Del { key: key.clone() },
                    };
                    let l = match leader {
                        Some(l) => l,
                        None => *leader.insert(self.leader_at(v)?),
                    };
                    (LogId::new(l, v - 1), EntryPayload::Normal(cmd))
                }
            };
            out.push(Entry { log_id, payload });
        }
        Ok(out)
    }

    fn put_record(&mut self, key: &[u8], rec: &Record) -> Result<(), EngineError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| EngineError(e.to_string()))?;
        self.engine.put(key, Some(&bytes), ver(rec.log_id.index))
    }

    /// Write one entry as its version (not yet durable).
    fn append_one(&mut self, e: Entry) -> Result<(), EngineError> {
        let v = ver(e.log_id.index);
        let last = self.engine.last_version();
        if v != last + 1 {
            return Err(EngineError(format!(
                "append of log entry {} after entry {}: the log must have no gap",
                e.log_id.index,
                last as i64 - 1
            )));
        }
        let log_id = e.log_id;
        let record = |body| Record { log_id, body };
        let (key, kind) = match e.payload {
            EntryPayload::Blank => {
                self.put_record(RAFT_KEY, &record(Body::Blank))?;
                (RAFT_KEY.to_vec(), Kind::Record)
            }
            EntryPayload::Membership(m) => {
                let sm = StoredMembership::new(Some(log_id), m);
                self.put_record(MEMBER_KEY, &record(Body::Membership(sm)))?;
                (MEMBER_KEY.to_vec(), Kind::Record)
            }
            EntryPayload::Normal(cmd) => {
                if self.last_leader != Some(log_id.leader_id) {
                    return Err(EngineError(format!(
                        "log entry {} of leader {} is not preceded by a blank or membership entry of that leader (the log kept in the engine relies on openraft's leader blank entries)",
                        log_id.index, log_id.leader_id
                    )));
                }
                let miss = |s: &mut Inner, cmd: Cmd| -> Result<(Vec<u8>, Kind), EngineError> {
                    s.put_record(RAFT_KEY, &record(Body::Miss(cmd)))?;
                    Ok((RAFT_KEY.to_vec(), Kind::Record))
                };
                match cmd {
                    Cmd::Set { ref key, .. } | Cmd::Del { ref key } | Cmd::Cas { ref key, .. }
                        if is_reserved(key) =>
                    {
                        miss(self, cmd)?
                    }
                    Cmd::Set { key, value } => {
                        self.engine.put(&key, Some(&value), v)?;
                        (key, Kind::Write)
                    }
                    Cmd::Del { key } => {
                        if self.engine.get(&key)?.is_some() {
                            self.engine.put(&key, None, v)?;
                            (key, Kind::Write)
                        } else {
                            miss(self, Cmd::Del { key })?
                        }
                    }
                    Cmd::Cas { key, expected, new } => {
                        if self.engine.get(&key)?.as_deref() == Some(expected.as_slice()) {
                            self.engine.put(&key, Some(&new), v)?;
                            (key, Kind::CasHit)
                        } else {
                            miss(self, Cmd::Cas { key, expected, new })?
                        }
                    }
                }
            }
        };
        self.slots.insert(v, (key, kind));
        self.last_leader = Some(log_id.leader_id);
        Ok(())
    }

    fn write_vote_file(&self, durable: bool) -> io::Result<()> {
        let bytes = serde_json::to_vec(&self.saved).map_err(io::Error::other)?;
        write_atomic(&self.dir.join(VOTE_FILE), &bytes, durable)
    }

    /// Discard every entry up to `upto` (applied, so covered by the state).
    fn do_purge(&mut self, upto: LogId) -> Result<(), EngineError> {
        let v = ver(upto.index).min(self.engine.last_version());
        if v > self.engine.floor() {
            self.engine.discard_below(v)?;
        }
        self.slots = self.slots.split_off(&(v + 1));
        Ok(())
    }

    /// Whether installing a snapshot up to `s` replaces the engine's
    /// contents: not when it is older than what is purged, nor when the
    /// log already holds its last entry (then only the applied index
    /// moves).
    fn restores(&self, s: LogId) -> Result<bool, EngineError> {
        let v = ver(s.index);
        let floor = self.engine.floor();
        let last = self.engine.last_version();
        if v < floor {
            return Ok(false);
        }
        let have = if v > floor && v <= last {
            self.leader_at(v)? == s.leader_id && self.slots.contains_key(&v)
        } else {
            v == floor && self.purged()? == Some(s)
        };
        Ok(!have)
    }

    /// The membership record a restore up to `s` writes.
    fn member_record(s: LogId, membership: &StoredMembership) -> Result<Vec<u8>, EngineError> {
        let rec = Record {
            log_id: s,
            body: Body::Membership(membership.clone()),
        };
        serde_json::to_vec(&rec).map_err(|err| EngineError(err.to_string()))
    }

    /// A snapshot at `applied` built on its own thread and streamed as it
    /// grows (see [`crate::snapstream`]): the metadata, no data, and an id
    /// naming the build.
    fn stream(
        &mut self,
        inner: Arc<Mutex<Inner>>,
        applied: LogId,
    ) -> Snapshot<crate::types::TypeConfig> {
        self.built += 1;
        let base = format!("{}-{}", applied.index, self.built);
        let hint = crate::store::snapshot_hint(self.last_len) as u64;
        let id = crate::snapstream::spawn_build(&base, hint, move |sink| {
            let mut g = lock(&inner);
            crate::catchup::mark(|| format!("snapshot build begin at {}", applied.index));
            for p in g.engine.snapshot(ver(applied.index))? {
                let (k, v) = p?;
                if !is_reserved(&k) {
                    sink.pair(&k, &v)?;
                }
            }
            g.last_len = sink.total() as usize;
            crate::catchup::mark(|| format!("snapshot build end {} bytes", sink.total()));
            Ok(())
        });
        Snapshot {
            meta: SnapshotMeta {
                last_log_id: Some(applied),
                last_membership: self.membership.clone(),
                snapshot_id: id,
            },
            snapshot: Box::new(Cursor::new(Vec::new())),
        }
    }

    fn build(&mut self) -> Result<Cached, EngineError> {
        let Some(applied) = self.applied else {
            return Err(EngineError(
                "no entry applied yet: nothing to snapshot".into(),
            ));
        };
        crate::catchup::mark(|| format!("snapshot build begin at {}", applied.index));
        let data = encode_snapshot(
            self.engine
                .snapshot(ver(applied.index))?
                .filter(|r| !matches!(r, Ok((k, _)) if is_reserved(k))),
            crate::store::snapshot_hint(self.last_len),
        )?;
        self.last_len = data.len();
        self.built += 1;
        crate::catchup::mark(|| format!("snapshot build end {} bytes", data.len()));
        let meta = SnapshotMeta {
            last_log_id: Some(applied),
            last_membership: self.membership.clone(),
            snapshot_id: format!("{}-{}", applied.index, self.built),
        };
        Ok(Cached {
            meta,
            data: Arc::new(data),
        })
    }
}

/// The Raft log of a node whose log lives in its engine; clones share it
/// (and the engine) with the [`EngineSm`] opened beside it.
#[derive(Clone)]
pub struct EngineLog {
    inner: Arc<Mutex<Inner>>,
}

/// The state machine over the same engine as its [`EngineLog`].
#[derive(Clone)]
pub struct EngineSm {
    inner: Arc<Mutex<Inner>>,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Open the log and state machine kept in `engine`, with the vote file in
/// `dir`. The engine's versions above its floor must be a gap-free log.
pub fn open(dir: &Path, engine: Box<dyn KvEngine>) -> io::Result<(EngineLog, EngineSm)> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    if !engine.persistent() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "engine {} is volatile and cannot hold the Raft log: use a PM engine or the separate log",
                engine.name()
            ),
        ));
    }
    fs::create_dir_all(dir)?;
    let vote_path = dir.join(VOTE_FILE);
    let saved: VoteFile = match fs::read(&vote_path) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| invalid(format!("{}: {e}", vote_path.display())))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => VoteFile::default(),
        Err(e) => return Err(e),
    };
    let committed_path = dir.join(COMMITTED_FILE);
    let committed_file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&committed_path)?;
    let mut saved = saved;
    {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 48];
        let n = committed_file.read_at(&mut b, 0)?;
        saved.committed = decode_committed(&b[..n]);
    }
    let floor = engine.floor();
    let last = engine.last_version();
    let mut slots = BTreeMap::new();
    for (v, key) in engine.written_above(floor).map_err(io::Error::other)? {
        let kind = if is_reserved(&key) {
            Kind::Record
        } else {
            Kind::Write
        };
        slots.insert(v, (key, kind));
    }
    if slots.len() as u64 != last - floor || slots.keys().next().is_some_and(|v| *v != floor + 1) {
        return Err(invalid(format!(
            "{}: the engine's versions {}..={last} have gaps, so they are not a Raft log kept in the engine (was this directory written with the separate log, --raft-log file?)",
            dir.display(),
            floor + 1
        )));
    }
    let mut inner = Inner {
        dir: dir.to_path_buf(),
        engine,
        slots,
        last_leader: None,
        saved,
        committed_file,
        applied: None,
        membership: StoredMembership::default(),
        pending_purge: None,
        snapshot: None,
        staging: None,
        built: 0,
        last_len: 0,
        opening: true,
    };
    let e = |e: EngineError| invalid(format!("{}: {e}", dir.display()));
    if last > 0 {
        inner.last_leader = Some(inner.leader_at(last).map_err(e)?);
    }
    // Everything purged was applied (purges never pass the applied index);
    // openraft re-applies the rest up to the committed id.
    inner.applied = inner.purged().map_err(e)?;
    if floor > 0 {
        inner.membership = inner.membership_at(floor).map_err(e)?;
    }
    // The committed id may be ahead of a pool restored from an older
    // image: never past the last entry.
    let last_id = inner.last_log_id().map_err(e)?;
    if inner.saved.committed > last_id {
        inner.saved.committed = last_id;
    }
    if !vote_path.exists() {
        // Marks the directory as one whose log is in the engine.
        inner.write_vote_file(true)?;
    }
    let inner = Arc::new(Mutex::new(inner));
    Ok((
        EngineLog {
            inner: inner.clone(),
        },
        EngineSm { inner },
    ))
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(i) => ver(*i),
        Bound::Excluded(i) => ver(*i) + 1,
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(i) => ver(*i) + 1,
        Bound::Excluded(i) => ver(*i),
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

impl EngineLog {
    /// Entries in `range` (log indices), rebuilt from the engine.
    #[allow(clippy::result_large_err)]
    pub fn read<RB: RangeBounds<u64>>(&self, range: RB) -> Result<Vec<Entry>, StorageError> {
        let (from, to) = bounds(&range);
        lock(&self.inner)
            .entries(from, to)
            .map_err(|e| eng(ErrorSubject::Logs, ErrorVerb::Read, e))
    }

    /// The last purged and last log ids.
    #[allow(clippy::result_large_err)]
    pub fn log_state(&self) -> Result<LogState<crate::types::TypeConfig>, StorageError> {
        let g = lock(&self.inner);
        let e = |e| eng(ErrorSubject::Logs, ErrorVerb::Read, e);
        let purged = g.purged().map_err(e)?;
        let last = g.last_log_id().map_err(e)?;
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last.or(purged),
        })
    }

    /// Save the vote, durably.
    #[allow(clippy::result_large_err)]
    pub fn save_vote(&self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let mut g = lock(&self.inner);
        g.saved.vote = Some(*vote);
        g.write_vote_file(true)
            .map_err(|e| StorageError::from_io_error(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    /// The saved vote.
    pub fn vote(&self) -> Option<Vote<NodeId>> {
        lock(&self.inner).saved.vote
    }

    /// Save the committed log id: one `pwrite` of a checksummed record at
    /// offset 0 of [`COMMITTED_FILE`], without fsync (it survives a kill
    /// -9 in the page cache). openraft needs it on restart: a node that
    /// comes back as the leader of its old term takes the saved committed
    /// id as its read index, so a stale one would serve stale reads.
    #[allow(clippy::result_large_err)]
    pub fn save_committed(&self, committed: Option<LogId>) -> Result<(), StorageError> {
        use std::os::unix::fs::FileExt;
        let mut g = lock(&self.inner);
        g.saved.committed = committed;
        g.committed_file
            .write_all_at(&encode_committed(committed), 0)
            .map_err(|e| StorageError::from_io_error(ErrorSubject::Store, ErrorVerb::Write, e))
    }

    /// The saved committed log id.
    pub fn committed(&self) -> Option<LogId> {
        lock(&self.inner).saved.committed
    }

    /// Write `entries` as versions, make them durable, then call back.
    #[allow(clippy::result_large_err)]
    pub fn append<I: IntoIterator<Item = Entry>>(
        &self,
        entries: I,
        callback: LogFlushed<crate::types::TypeConfig>,
    ) -> Result<(), StorageError> {
        let mut g = lock(&self.inner);
        let mut res = Ok(());
        let mut n = 0u64;
        let mut first = None;
        for e in entries {
            n += 1;
            first.get_or_insert(e.log_id.index);
            res = g.append_one(e);
            if res.is_err() {
                break;
            }
        }
        if res.is_ok() {
            res = g.engine.sync();
        }
        drop(g);
        crate::catchup::mark(|| format!("append {n} entries from {first:?}"));
        match res {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(io::Error::other(e.0.clone())));
                Err(eng(ErrorSubject::Logs, ErrorVerb::Write, e))
            }
        }
    }

    /// Remove the entries from `log_id` on (rolled back in the engine).
    #[allow(clippy::result_large_err)]
    pub fn truncate(&self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = lock(&self.inner);
        let e = |e| eng(ErrorSubject::Logs, ErrorVerb::Delete, e);
        let v = ver(log_id.index);
        if v > g.engine.last_version() {
            return Ok(());
        }
        g.engine.rollback_above(v - 1).map_err(e)?;
        g.slots.split_off(&v);
        let last = g.engine.last_version();
        g.last_leader = if last == 0 {
            None
        } else {
            Some(g.leader_at(last).map_err(e)?)
        };
        Ok(())
    }

    /// Purge the entries up to `log_id`: now if the state machine has
    /// applied them, else when the snapshot being installed arrives.
    #[allow(clippy::result_large_err)]
    pub fn purge(&self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = lock(&self.inner);
        if g.applied.is_none_or(|a| a.index < log_id.index) {
            if g.pending_purge.is_none_or(|p| p.index < log_id.index) {
                g.pending_purge = Some(log_id);
            }
            return Ok(());
        }
        g.do_purge(log_id)
            .map_err(|e| eng(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }

    /// Versions the engine holds above its floor (live log entries).
    pub fn len(&self) -> usize {
        lock(&self.inner).slots.len()
    }

    /// Whether the log holds no live entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl EngineSm {
    /// The applied log id and membership.
    pub fn applied_state(&self) -> (Option<LogId>, StoredMembership) {
        let g = lock(&self.inner);
        (g.applied, g.membership.clone())
    }

    /// Mark `entries` applied and answer them from what their append did.
    #[allow(clippy::result_large_err)]
    pub fn apply<I: IntoIterator<Item = Entry>>(
        &self,
        entries: I,
    ) -> Result<Vec<Reply>, StorageError> {
        let mut g = lock(&self.inner);
        let mut out = Vec::new();
        for e in entries {
            let reply = match &e.payload {
                EntryPayload::Blank => Reply::None,
                EntryPayload::Membership(m) => {
                    g.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    Reply::None
                }
                EntryPayload::Normal(cmd) => match g.slots.get(&ver(e.log_id.index)) {
                    Some((_, Kind::Record)) => Reply::Bool(false),
                    Some((_, Kind::CasHit)) => Reply::Bool(true),
                    Some((_, Kind::Write)) => match cmd {
                        Cmd::Set { .. } => Reply::Ok,
                        Cmd::Del { .. } | Cmd::Cas { .. } => Reply::Bool(true),
                    },
                    None => {
                        return Err(bad_log(format!(
                            "apply of log entry {}: not in the log",
                            e.log_id.index
                        )))
                    }
                },
            };
            g.applied = Some(e.log_id);
            out.push(reply);
        }
        crate::catchup::mark(|| format!("apply up to {:?}", g.applied.map(|a| a.index)));
        Ok(out)
    }

    /// The value of `key` as of the applied index (committed versions only).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        let g = lock(&self.inner);
        match g.applied {
            None => Ok(None),
            Some(_) if is_reserved(key) => Ok(None),
            Some(a) => g.engine.get_at(key, ver(a.index)),
        }
    }

    /// The applied log index (0 before the first).
    pub fn applied_index(&self) -> u64 {
        lock(&self.inner).applied.map_or(0, |l| l.index)
    }

    /// openraft has started: from now on a snapshot asked for is built.
    pub fn opened(&self) {
        lock(&self.inner).opening = false;
    }

    /// The engine's name.
    pub fn engine_name(&self) -> &'static str {
        lock(&self.inner).engine.name()
    }

    /// Build a snapshot at the applied index (openraft's snapshot
    /// policy), handed over without a copy; a follower that needs one
    /// later gets one built then, so none is held in memory meanwhile.
    #[allow(clippy::result_large_err)]
    pub fn build_snapshot(&self) -> Result<Snapshot<crate::types::TypeConfig>, StorageError> {
        let mut g = lock(&self.inner);
        let c = g
            .build()
            .map_err(|e| eng(ErrorSubject::Snapshot(None), ErrorVerb::Read, e))?;
        g.snapshot = None;
        Ok(Snapshot {
            meta: c.meta,
            snapshot: Box::new(Cursor::new(Arc::into_inner(c.data).unwrap_or_default())),
        })
    }

    /// The last snapshot built or installed, or one built now.
    #[allow(clippy::result_large_err)]
    pub fn current_snapshot(
        &self,
    ) -> Result<Option<Snapshot<crate::types::TypeConfig>>, StorageError> {
        let mut g = lock(&self.inner);
        let have = g.snapshot.as_ref().map(|c| c.meta.last_log_id);
        if have.is_none_or(|s| !g.opening && crate::store::stale(s, g.applied)) {
            let Some(applied) = g.applied else {
                return Ok(None);
            };
            if g.opening {
                return Ok(Some(metadata_only_snapshot(applied, &g.membership)));
            }
            // Built for a follower on its own thread and sent as it grows
            // (`snapstream`); not kept (the next follower gets one built
            // then).
            g.snapshot = None;
            return Ok(Some(g.stream(self.inner.clone(), applied)));
        }
        let c = g.snapshot.as_ref().unwrap();
        let out = Snapshot {
            meta: c.meta.clone(),
            snapshot: Box::new(Cursor::new(c.data.as_ref().clone())),
        };
        crate::catchup::mark(|| "current snapshot copied".into());
        Ok(Some(out))
    }

    /// Begin writing the snapshot `meta` into the engine as its data
    /// arrives ([`EngineSm::stage_data`], [`EngineSm::stage_end`]): a
    /// staged restore, invisible until [`EngineSm::install`] of the same
    /// snapshot commits it (atomically: a crash before leaves the old
    /// contents). `false` when it would not be restored (older than the
    /// log's floor, or its last entry already in the log), when another
    /// snapshot is being staged, or when the engine cannot stage: the
    /// data is then collected and installed whole.
    pub fn stage_begin(&self, meta: &SnapshotMeta) -> bool {
        let mut g = lock(&self.inner);
        let Some(s) = meta.last_log_id else {
            return false;
        };
        if g.staging.is_some() || !g.restores(s).unwrap_or(false) {
            return false;
        }
        let Ok(member) = Inner::member_record(s, &meta.last_membership) else {
            return false;
        };
        if !matches!(g.engine.stage_begin(ver(s.index)), Ok(true)) {
            return false;
        }
        g.staging = Some(StagedRestore::new(
            meta.snapshot_id.clone(),
            s,
            Some((MEMBER_KEY, member)),
            is_reserved,
        ));
        crate::catchup::mark(|| format!("install staged begin at {}", s.index));
        true
    }

    /// The next piece of the data of the staged snapshot `id`: its pairs are written
    /// into the engine now (reserved keys left out, the membership record
    /// put in its key order), and the piece is kept until the install.
    /// `Err` on data that is not a snapshot (the staging is dropped).
    pub fn stage_data<B: AsRef<[u8]> + Send + 'static>(
        &self,
        id: &str,
        piece: B,
    ) -> Result<(), String> {
        let g = &mut *lock(&self.inner);
        StagedRestore::data(&mut g.staging, g.engine.as_mut(), id, piece)
    }

    /// All the data of the staged snapshot `id` arrived: `Err` if it ends inside a
    /// pair (the staging is dropped).
    pub fn stage_end(&self, id: &str) -> Result<(), String> {
        let g = &mut *lock(&self.inner);
        StagedRestore::end(&mut g.staging, g.engine.as_mut(), id)
    }

    /// Drop the staging of snapshot `id`, if it is still there (its
    /// install did not happen: openraft refused or ignored it).
    pub fn stage_drop(&self, id: &str) {
        let g = &mut *lock(&self.inner);
        StagedRestore::drop_named(&mut g.staging, g.engine.as_mut(), id);
    }

    /// Install a snapshot received from the leader (see the module docs).
    /// A snapshot staged as it arrived ([`EngineSm::stage_begin`]) comes
    /// with no data: its staged restore is committed, or, if a write
    /// dropped it on the way, the kept data is restored as usual.
    #[allow(clippy::result_large_err)]
    pub fn install(&self, meta: &SnapshotMeta, mut data: Vec<u8>) -> Result<(), StorageError> {
        let sig = Some(meta.signature());
        let e = |e: EngineError| eng(ErrorSubject::Snapshot(sig.clone()), ErrorVerb::Write, e);
        let Some(s) = meta.last_log_id else {
            return Ok(());
        };
        let mut g = lock(&self.inner);
        let mut committed = false;
        if let Some(st) = StagedRestore::take_named(&mut g.staging, &meta.snapshot_id) {
            if st.complete && st.at == s && g.engine.stage_active() && g.restores(s).map_err(e)? {
                g.engine.stage_commit().map_err(e)?;
                crate::catchup::mark(|| "install committed the staged restore".into());
                g.slots.clear();
                g.last_leader = Some(s.leader_id);
                committed = true;
            } else {
                g.engine.stage_abort();
                if data.is_empty() {
                    data = st.kept_data();
                }
            }
        }
        if !committed {
            crate::catchup::mark(|| format!("install begin {} bytes at {}", data.len(), s.index));
            let pairs = snapshot_pairs(&data).map_err(|err| {
                StorageError::from_io_error(
                    ErrorSubject::Snapshot(sig.clone()),
                    ErrorVerb::Read,
                    err,
                )
            })?;
            crate::catchup::mark(|| "install decoded".into());
            if ver(s.index) < g.engine.floor() {
                // Older than what this node has already purged: nothing to do.
                return Ok(());
            }
            if g.restores(s).map_err(e)? {
                let rec = Inner::member_record(s, &meta.last_membership).map_err(e)?;
                // The membership record in its place in key order.
                let mut all: Vec<(&[u8], &[u8])> =
                    pairs.into_iter().filter(|(k, _)| !is_reserved(k)).collect();
                let at = all.partition_point(|(k, _)| *k < MEMBER_KEY);
                all.insert(at, (MEMBER_KEY, &rec));
                g.engine
                    .restore_sorted(ver(s.index), &mut all.into_iter())
                    .map_err(e)?;
                crate::catchup::mark(|| "install restored".into());
                g.slots.clear();
                g.last_leader = Some(s.leader_id);
            }
        }
        g.applied = Some(s);
        g.membership = meta.last_membership.clone();
        // A staged snapshot leaves no data to keep: the next follower that
        // needs one from this node gets one built then.
        g.snapshot = (!data.is_empty()).then(|| Cached {
            meta: meta.clone(),
            data: Arc::new(data),
        });
        if let Some(p) = g.pending_purge.take() {
            if p.index <= s.index {
                g.do_purge(p).map_err(e)?;
            } else {
                g.pending_purge = Some(p);
            }
        }
        crate::catchup::mark(|| "install end".into());
        Ok(())
    }
}
