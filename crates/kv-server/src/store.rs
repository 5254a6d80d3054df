//! openraft storage in two placements ([`LogPlacement`]): the Raft log in
//! the state machine's engine ([`crate::engine_log`], the default for the
//! PM engines `list`, `btree` and `anchor`), or in a separate append-only
//! file beside a state machine over a [`KvEngine`] ([`FileLog`] and
//! [`FileSm`]: `wal`, the thesis' baseline, and the volatile `mem`).
//! [`open`] picks one; [`LogStore`] and [`StateMachine`] are what openraft
//! is given either way.
//!
//! Files of the separate placement in a node's directory:
//! * `raft.log`: records `[u32 length][u64 checksum][entry]`, the entry in
//!   the binary encoding of [`crate::types::codec`] (a record of older
//!   versions, JSON, is still read), appended
//!   and fsync'd once per `append` call (one flush per batch), truncated by
//!   `set_len`; a torn tail is cut on open.
//! * `raft-meta.json`: vote, last purged log id, committed log id; written
//!   to a temporary file and renamed (vote and purge marker fsync'd before
//!   returning; the purge marker is written before entries go).
//! * `sm-meta.json`: the state machine's applied log id and membership.
//! * `snapshot.bin`: the last snapshot, for volatile engines only.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogId, RaftLogReader,
    RaftSnapshotBuilder, Vote,
};
use serde::{Deserialize, Serialize};

use crate::engine::{EngineError, KvEngine, Pair};
use crate::types::{
    Cmd, Entry, LogId, NodeId, Reply, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};

/// The snapshot a state machine hands openraft while it starts: the
/// metadata of the applied state with no data. openraft's start-up keeps
/// only the metadata, so building the data (a copy of the whole state) is
/// left to the first follower that needs it.
pub(crate) fn metadata_only_snapshot(
    applied: LogId,
    membership: &StoredMembership,
) -> Snapshot<TypeConfig> {
    Snapshot {
        meta: SnapshotMeta {
            last_log_id: Some(applied),
            last_membership: membership.clone(),
            snapshot_id: format!("{}-0", applied.index),
        },
        snapshot: Box::new(Cursor::new(Vec::new())),
    }
}

/// The current snapshot handed to a follower is rebuilt first when the
/// applied index is more than this many entries past it: the follower
/// then gets the whole state in one restore instead of the snapshot and
/// every later entry one append batch at a time.
pub(crate) const REBUILD_BEHIND: u64 = 1024;

/// The buffer to start a snapshot with after one of `last` bytes.
pub(crate) fn snapshot_hint(last: usize) -> usize {
    last + last / 2 + (1 << 20)
}

/// Whether a snapshot up to `snap` is stale for a follower, the state
/// machine having applied up to `applied`.
pub(crate) fn stale(snap: Option<LogId>, applied: Option<LogId>) -> bool {
    let (s, a) = (snap.map_or(0, |l| l.index), applied.map_or(0, |l| l.index));
    a > s + REBUILD_BEHIND
}

/// Largest log record accepted when reading the log back.
const MAX_RECORD: usize = 256 << 20;
/// Rewrite the log file when this many purged records precede the live ones.
const REWRITE_AFTER: u64 = 4096;
/// A persistent engine's applied index is recorded every this many entries.
const META_EVERY: u64 = 1024;
pub(crate) const SNAPSHOT_MAGIC: &[u8; 8] = b"PMKVSNP1";

#[allow(clippy::result_large_err)]
fn io_err(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: io::Error) -> StorageError {
    StorageError::from_io_error(subject, verb, e)
}

fn engine_err(e: EngineError) -> StorageError {
    StorageError::from_io_error(
        ErrorSubject::StateMachine,
        ErrorVerb::Write,
        io::Error::other(e.0),
    )
}

pub(crate) fn checksum(data: &[u8]) -> u64 {
    // FNV-1a, enough to find a torn tail.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Write `bytes` to `path` atomically: a temporary file, fsync'd when
/// `durable`, renamed over the old one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        if durable {
            f.sync_all()?;
        }
    }
    fs::rename(&tmp, path)?;
    if durable {
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LogMeta {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

struct LogInner {
    dir: PathBuf,
    file: File,
    /// Live entries and the file offset of each record.
    entries: BTreeMap<u64, (Entry, u64)>,
    end: u64,
    dead: u64,
    meta: LogMeta,
}

impl LogInner {
    fn write_meta(&self, durable: bool) -> io::Result<()> {
        let bytes = serde_json::to_vec(&self.meta).map_err(io::Error::other)?;
        write_atomic(&self.dir.join("raft-meta.json"), &bytes, durable)
    }

    fn record(entry: &Entry) -> io::Result<Vec<u8>> {
        let body = crate::types::codec::encode_entry(entry);
        let mut rec = Vec::with_capacity(body.len() + 12);
        rec.extend_from_slice(&(body.len() as u32).to_le_bytes());
        rec.extend_from_slice(&checksum(&body).to_le_bytes());
        rec.extend_from_slice(&body);
        Ok(rec)
    }

    /// Rewrite the file with the live entries only.
    fn rewrite(&mut self) -> io::Result<()> {
        let path = self.dir.join("raft.log");
        let tmp = self.dir.join("raft.log.tmp");
        let mut out = Vec::new();
        let mut offsets = Vec::new();
        for (idx, (e, _)) in &self.entries {
            offsets.push((*idx, out.len() as u64));
            out.extend_from_slice(&LogInner::record(e)?);
        }
        write_atomic_file(&tmp, &path, &out)?;
        self.file = OpenOptions::new().read(true).write(true).open(&path)?;
        for (idx, off) in offsets {
            if let Some(slot) = self.entries.get_mut(&idx) {
                slot.1 = off;
            }
        }
        self.end = out.len() as u64;
        self.dead = 0;
        Ok(())
    }
}

fn write_atomic_file(tmp: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    {
        let mut f = File::create(tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The Raft log of one node in its own file (also its own log reader:
/// clones share state).
#[derive(Clone)]
pub struct FileLog {
    inner: Arc<Mutex<LogInner>>,
}

impl FileLog {
    /// Open (or create) the log in `dir`, cutting a torn tail.
    pub fn open(dir: &Path) -> io::Result<FileLog> {
        fs::create_dir_all(dir)?;
        let meta_path = dir.join("raft-meta.json");
        let meta: LogMeta = match fs::read(&meta_path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", meta_path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => LogMeta::default(),
            Err(e) => return Err(e),
        };
        let path = dir.join("raft.log");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        let mut entries = BTreeMap::new();
        let mut pos = 0usize;
        let mut dead = 0;
        let purged = meta.purged.map(|l| l.index);
        while pos + 12 <= data.len() {
            let len = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
            let sum = u64::from_le_bytes(data[pos + 4..pos + 12].try_into().unwrap());
            if len > MAX_RECORD || pos + 12 + len > data.len() {
                break;
            }
            let body = &data[pos + 12..pos + 12 + len];
            if checksum(body) != sum {
                break;
            }
            let Ok(entry) = crate::types::codec::decode_entry(body) else {
                break;
            };
            let idx = entry.log_id.index;
            if purged.is_some_and(|p| idx <= p) {
                dead += 1;
            } else {
                // A record for an index already present follows a truncation
                // that was not cut from the file: the later one wins.
                let stale: Vec<u64> = entries.range(idx..).map(|(k, _)| *k).collect();
                for k in stale {
                    entries.remove(&k);
                }
                entries.insert(idx, (entry, pos as u64));
            }
            pos += 12 + len;
        }
        if pos < data.len() {
            file.set_len(pos as u64)?;
            file.sync_all()?;
        }
        Ok(FileLog {
            inner: Arc::new(Mutex::new(LogInner {
                dir: dir.to_path_buf(),
                file,
                entries,
                end: pos as u64,
                dead,
                meta,
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Live entries held (not yet purged).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RaftLogReader<TypeConfig> for FileLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self
            .lock()
            .entries
            .range(range)
            .map(|(_, (e, _))| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for FileLog {
    type LogReader = FileLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let g = self.lock();
        let last = g
            .entries
            .values()
            .next_back()
            .map(|(e, _)| *e.get_log_id())
            .or(g.meta.purged);
        Ok(LogState {
            last_purged_log_id: g.meta.purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let mut g = self.lock();
        g.meta.vote = Some(*vote);
        g.write_meta(true)
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.lock().meta.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let mut g = self.lock();
        g.meta.committed = committed;
        // Losing the newest committed id only means re-learning it from
        // the leader: no fsync.
        g.write_meta(false)
            .map_err(|e| io_err(ErrorSubject::Store, ErrorVerb::Write, e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.lock().meta.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut g = self.lock();
        let mut buf = Vec::new();
        let mut placed = Vec::new();
        for e in entries {
            let rec = LogInner::record(&e)
                .map_err(|err| io_err(ErrorSubject::Logs, ErrorVerb::Write, err))?;
            placed.push((e, g.end + buf.len() as u64));
            buf.extend_from_slice(&rec);
        }
        let end = g.end;
        let res = (|| {
            g.file.seek(SeekFrom::Start(end))?;
            g.file.write_all(&buf)?;
            g.file.sync_data()
        })();
        if let Err(e) = res {
            callback.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(io_err(ErrorSubject::Logs, ErrorVerb::Write, e));
        }
        g.end += buf.len() as u64;
        for (e, off) in placed {
            g.entries.insert(e.log_id.index, (e, off));
        }
        drop(g);
        crate::catchup::mark(|| format!("append {} bytes", buf.len()));
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = self.lock();
        let cut: Vec<u64> = g.entries.range(log_id.index..).map(|(k, _)| *k).collect();
        let Some(first) = cut.first() else {
            return Ok(());
        };
        let off = g.entries[first].1;
        for k in cut {
            g.entries.remove(&k);
        }
        g.end = off;
        let res = g.file.set_len(off).and_then(|_| g.file.sync_all());
        res.map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut g = self.lock();
        // The marker first: a crash after it leaves only dead records.
        g.meta.purged = Some(log_id);
        g.write_meta(true)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        let gone: Vec<u64> = g.entries.range(..=log_id.index).map(|(k, _)| *k).collect();
        g.dead += gone.len() as u64;
        for k in gone {
            g.entries.remove(&k);
        }
        if g.dead >= REWRITE_AFTER {
            g.rewrite()
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SmMeta {
    applied: Option<LogId>,
    membership: StoredMembership,
}

struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

struct SmState {
    dir: PathBuf,
    engine: Box<dyn KvEngine>,
    applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: Option<StoredSnapshot>,
    staging: Option<crate::snapstream::StagedRestore>,
    since_meta: u64,
    built: u64,
    /// Bytes of the last snapshot built (a size hint for the next).
    last_len: usize,
    /// Set until openraft has started (see `get_current_snapshot`).
    opening: bool,
}

impl SmState {
    fn write_meta(&mut self) -> io::Result<()> {
        if self.engine.persistent() {
            self.engine.sync().map_err(io::Error::other)?;
        }
        let meta = SmMeta {
            applied: self.applied,
            membership: self.membership.clone(),
        };
        let bytes = serde_json::to_vec(&meta).map_err(io::Error::other)?;
        self.since_meta = 0;
        write_atomic(&self.dir.join("sm-meta.json"), &bytes, true)
    }

    fn apply_cmd(&mut self, index: u64, cmd: &Cmd) -> Result<Reply, EngineError> {
        let e = &mut self.engine;
        // After a restart a persistent engine may already hold this entry.
        let replay = index <= e.last_version();
        Ok(match cmd {
            Cmd::Set { key, value } => {
                if !replay {
                    e.put(key, Some(value), index)?;
                }
                Reply::Ok
            }
            Cmd::Del { key } => {
                let found = e.get(key)?.is_some();
                if found && !replay {
                    e.put(key, None, index)?;
                }
                Reply::Bool(found)
            }
            Cmd::Cas { key, expected, new } => {
                let hit = e.get(key)?.as_deref() == Some(expected.as_slice());
                if hit && !replay {
                    e.put(key, Some(new), index)?;
                }
                Reply::Bool(hit)
            }
        })
    }

    /// The state at the applied index as a snapshot (nothing written).
    #[allow(clippy::result_large_err)]
    fn encode_state(&mut self) -> Result<StoredSnapshot, StorageError> {
        let index = self.applied.map_or(0, |l| l.index);
        crate::catchup::mark(|| format!("snapshot build begin at {index}"));
        let at = index.min(self.engine.last_version());
        let hint = snapshot_hint(self.last_len);
        let data = encode_snapshot(self.engine.snapshot(at).map_err(engine_err)?, hint)
            .map_err(engine_err)?;
        self.last_len = data.len();
        self.built += 1;
        crate::catchup::mark(|| format!("snapshot build end {} bytes", data.len()));
        let meta = SnapshotMeta {
            last_log_id: self.applied,
            last_membership: self.membership.clone(),
            snapshot_id: format!("{index}-{}", self.built),
        };
        Ok(StoredSnapshot { meta, data })
    }

    /// The state at the applied index as a snapshot built on its own
    /// thread and streamed as it grows (see [`crate::snapstream`]): the
    /// metadata, no data, and an id naming the build.
    fn stream_state(&mut self, inner: Arc<Mutex<SmState>>) -> Snapshot<TypeConfig> {
        let index = self.applied.map_or(0, |l| l.index);
        let at = index.min(self.engine.last_version());
        self.built += 1;
        let base = format!("{index}-{}", self.built);
        let hint = snapshot_hint(self.last_len) as u64;
        let id = crate::snapstream::spawn_build(&base, hint, move |sink| {
            let mut g = inner.lock().unwrap_or_else(|p| p.into_inner());
            crate::catchup::mark(|| format!("snapshot build begin at {index}"));
            for p in g.engine.snapshot(at)? {
                let (k, v) = p?;
                sink.pair(&k, &v)?;
            }
            g.last_len = sink.total() as usize;
            crate::catchup::mark(|| format!("snapshot build end {} bytes", sink.total()));
            Ok(())
        });
        Snapshot {
            meta: SnapshotMeta {
                last_log_id: self.applied,
                last_membership: self.membership.clone(),
                snapshot_id: id,
            },
            snapshot: Box::new(Cursor::new(Vec::new())),
        }
    }

    /// Build a snapshot at the applied index, keep it (see [`SmState::keep`])
    /// and drop the versions below it.
    #[allow(clippy::result_large_err)]
    fn build(&mut self) -> Result<StoredSnapshot, StorageError> {
        let snap = self.encode_state()?;
        self.keep(&snap)
            .map_err(|e| io_err(ErrorSubject::Snapshot(None), ErrorVerb::Write, e))?;
        // Every reader is at or above the applied index from now on.
        let at = self
            .applied
            .map_or(0, |l| l.index)
            .min(self.engine.last_version());
        self.engine.discard_below(at).map_err(engine_err)?;
        Ok(snap)
    }

    /// Make `snap` the one that survives a restart.
    fn keep(&mut self, snap: &StoredSnapshot) -> io::Result<()> {
        if !self.engine.persistent() {
            let meta = serde_json::to_vec(&snap.meta).map_err(io::Error::other)?;
            let mut file = (meta.len() as u32).to_le_bytes().to_vec();
            file.extend_from_slice(&meta);
            file.extend_from_slice(&snap.data);
            write_atomic(&self.dir.join("snapshot.bin"), &file, true)?;
        }
        self.write_meta()
    }
}

/// Ask for transparent huge pages under the spare capacity of `buf` (whole
/// 2 MiB pages inside it): a snapshot of tens of MiB is then filled with a
/// few dozen page faults instead of one per 4 KiB. Only a hint: without
/// THP (or with it off) nothing changes.
pub(crate) fn huge_pages(buf: &mut Vec<u8>) {
    const HUGE: usize = 2 << 20;
    let spare = buf.spare_capacity_mut();
    let start = spare.as_mut_ptr() as usize;
    let end = start + spare.len();
    let (a, b) = ((start + HUGE - 1) & !(HUGE - 1), end & !(HUGE - 1));
    if a < b {
        // SAFETY: [a, b) lies inside the allocation, which this Vec owns;
        // the advice changes no contents.
        unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
    }
}

/// Encode snapshot pairs: a magic, then `[u32 klen][key][u32 vlen][value]`,
/// into a buffer of `hint` bytes to start with (the size of the last one
/// and some: no regrowth, and huge pages, see [`huge_pages`]).
pub(crate) fn encode_snapshot(
    pairs: impl Iterator<Item = Result<Pair, EngineError>>,
    hint: usize,
) -> Result<Vec<u8>, EngineError> {
    let mut data = Vec::new();
    if data
        .try_reserve_exact(hint.max(SNAPSHOT_MAGIC.len()))
        .is_ok()
    {
        huge_pages(&mut data);
    }
    data.extend_from_slice(SNAPSHOT_MAGIC);
    for pair in pairs {
        let (k, v) = pair?;
        data.extend_from_slice(&(k.len() as u32).to_le_bytes());
        data.extend_from_slice(&k);
        data.extend_from_slice(&(v.len() as u32).to_le_bytes());
        data.extend_from_slice(&v);
    }
    Ok(data)
}

/// Decode snapshot data into pairs, checking every length.
pub fn decode_snapshot(data: &[u8]) -> io::Result<Vec<Pair>> {
    Ok(snapshot_pairs(data)?
        .into_iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect())
}

/// The pairs of snapshot data as slices of it (no copy), checking every
/// length.
pub fn snapshot_pairs(data: &[u8]) -> io::Result<Vec<(&[u8], &[u8])>> {
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot data: {what}"));
    if data.len() < 8 || &data[..8] != SNAPSHOT_MAGIC {
        return Err(bad("bad magic"));
    }
    let mut pos = 8;
    let take = |pos: &mut usize| -> io::Result<&[u8]> {
        if *pos + 4 > data.len() {
            return Err(bad("truncated length"));
        }
        let n = u32::from_le_bytes(data[*pos..*pos + 4].try_into().unwrap()) as usize;
        *pos += 4;
        if n > data.len() - *pos {
            return Err(bad("truncated field"));
        }
        let v = &data[*pos..*pos + n];
        *pos += n;
        Ok(v)
    };
    let mut out = Vec::new();
    while pos < data.len() {
        let k = take(&mut pos)?;
        let v = take(&mut pos)?;
        out.push((k, v));
    }
    Ok(out)
}

/// The replicated state machine beside a [`FileLog`]; clones share it, so
/// the server reads through one while openraft owns another.
#[derive(Clone)]
pub struct FileSm {
    inner: Arc<Mutex<SmState>>,
}

impl FileSm {
    /// Open the state machine in `dir` over `engine`: a volatile engine is
    /// rebuilt from `snapshot.bin`; a persistent one is rolled back to the
    /// recorded applied index (later writes are re-applied from the log).
    pub fn open(dir: &Path, mut engine: Box<dyn KvEngine>) -> io::Result<FileSm> {
        fs::create_dir_all(dir)?;
        let meta_path = dir.join("sm-meta.json");
        let meta: SmMeta = match fs::read(&meta_path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", meta_path.display()),
                )
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => SmMeta::default(),
            Err(e) => return Err(e),
        };
        let mut state = SmState {
            dir: dir.to_path_buf(),
            applied: None,
            membership: StoredMembership::default(),
            snapshot: None,
            staging: None,
            since_meta: 0,
            opening: true,
            built: 0,
            last_len: 0,
            engine: Box::new(crate::engine::MemEngine::new()),
        };
        if engine.persistent() {
            let at = meta.applied.map_or(0, |l| l.index);
            engine.rollback_above(at).map_err(io::Error::other)?;
            state.applied = meta.applied;
            state.membership = meta.membership;
        } else {
            let snap_path = dir.join("snapshot.bin");
            match fs::read(&snap_path) {
                Ok(file) => {
                    let bad = || {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{}: torn", snap_path.display()),
                        )
                    };
                    if file.len() < 4 {
                        return Err(bad());
                    }
                    let n = u32::from_le_bytes(file[..4].try_into().unwrap()) as usize;
                    if 4 + n > file.len() {
                        return Err(bad());
                    }
                    let smeta: SnapshotMeta =
                        serde_json::from_slice(&file[4..4 + n]).map_err(|_| bad())?;
                    let data = file[4 + n..].to_vec();
                    let pairs = decode_snapshot(&data)?;
                    let at = smeta.last_log_id.map_or(0, |l| l.index);
                    engine
                        .restore(at, &mut pairs.into_iter())
                        .map_err(io::Error::other)?;
                    state.applied = smeta.last_log_id;
                    state.membership = smeta.last_membership.clone();
                    state.snapshot = Some(StoredSnapshot { meta: smeta, data });
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        state.engine = engine;
        Ok(FileSm {
            inner: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, SmState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current value of `key` (call after the read index is applied).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        self.lock().engine.get(key)
    }

    /// Begin writing the snapshot `meta` into a persistent engine as its
    /// data arrives (a staged restore committed by the install of the same
    /// snapshot; a crash before leaves the old contents). `false` for a
    /// volatile engine, a snapshot not past the applied index, another
    /// staging in progress, or an engine that cannot stage.
    pub fn stage_begin(&self, meta: &SnapshotMeta) -> bool {
        let mut g = self.lock();
        let Some(s) = meta.last_log_id else {
            return false;
        };
        if !g.engine.persistent() || g.staging.is_some() || Some(s) <= g.applied {
            return false;
        }
        if !matches!(g.engine.stage_begin(s.index), Ok(true)) {
            return false;
        }
        g.staging = Some(crate::snapstream::StagedRestore::new(
            meta.snapshot_id.clone(),
            s,
            None,
            |_| false,
        ));
        crate::catchup::mark(|| format!("install staged begin at {}", s.index));
        true
    }

    /// The next piece of the data of the staged snapshot `id`.
    pub fn stage_data<B: AsRef<[u8]> + Send + 'static>(
        &self,
        id: &str,
        piece: B,
    ) -> Result<(), String> {
        let g = &mut *self.lock();
        crate::snapstream::StagedRestore::data(&mut g.staging, g.engine.as_mut(), id, piece)
    }

    /// All the data of the staged snapshot `id` arrived.
    pub fn stage_end(&self, id: &str) -> Result<(), String> {
        let g = &mut *self.lock();
        crate::snapstream::StagedRestore::end(&mut g.staging, g.engine.as_mut(), id)
    }

    /// Drop the staging of snapshot `id` if its install did not take it.
    pub fn stage_drop(&self, id: &str) {
        let g = &mut *self.lock();
        crate::snapstream::StagedRestore::drop_named(&mut g.staging, g.engine.as_mut(), id);
    }

    /// The applied log index.
    pub fn applied_index(&self) -> u64 {
        self.lock().applied.map_or(0, |l| l.index)
    }

    /// The engine's name.
    pub fn engine_name(&self) -> &'static str {
        self.lock().engine.name()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for FileSm {
    /// Build and keep a snapshot (openraft's snapshot policy), handed
    /// over without a copy; a follower that needs one later gets one
    /// built then (see `REBUILD_BEHIND`), so none is held in memory meanwhile.
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let mut g = self.lock();
        let snap = g.build()?;
        g.snapshot = None;
        Ok(Snapshot {
            meta: snap.meta,
            snapshot: Box::new(Cursor::new(snap.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for FileSm {
    type SnapshotBuilder = FileSm;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let g = self.lock();
        Ok((g.applied, g.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut g = self.lock();
        let mut out = Vec::new();
        for e in entries {
            g.applied = Some(e.log_id);
            g.since_meta += 1;
            match &e.payload {
                EntryPayload::Blank => out.push(Reply::None),
                EntryPayload::Normal(cmd) => {
                    let r = g.apply_cmd(e.log_id.index, cmd).map_err(engine_err)?;
                    out.push(r);
                }
                EntryPayload::Membership(m) => {
                    g.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    g.write_meta()
                        .map_err(|err| io_err(ErrorSubject::StateMachine, ErrorVerb::Write, err))?;
                    out.push(Reply::None);
                }
            }
        }
        if g.engine.persistent() && g.since_meta >= META_EVERY {
            g.write_meta()
                .map_err(|err| io_err(ErrorSubject::StateMachine, ErrorVerb::Write, err))?;
        }
        crate::catchup::mark(|| format!("apply up to {:?}", g.applied.map(|a| a.index)));
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let mut data = snapshot.into_inner();
        let sig = Some(meta.signature());
        let mut g = self.lock();
        let at = meta.last_log_id.map_or(0, |l| l.index);
        let mut committed = false;
        // Staged as it arrived: commit it, or restore from the kept data
        // if a write dropped the stage on the way.
        if let Some(st) =
            crate::snapstream::StagedRestore::take_named(&mut g.staging, &meta.snapshot_id)
        {
            if st.complete && g.engine.stage_active() {
                g.engine.stage_commit().map_err(engine_err)?;
                crate::catchup::mark(|| "install committed the staged restore".into());
                committed = true;
            } else {
                g.engine.stage_abort();
                if data.is_empty() {
                    data = st.kept_data();
                }
            }
        }
        if !committed {
            crate::catchup::mark(|| format!("install begin {} bytes", data.len()));
            let pairs = snapshot_pairs(&data)
                .map_err(|e| io_err(ErrorSubject::Snapshot(sig.clone()), ErrorVerb::Read, e))?;
            crate::catchup::mark(|| "install decoded".into());
            g.engine
                .restore_sorted(at, &mut pairs.into_iter())
                .map_err(engine_err)?;
            crate::catchup::mark(|| "install restored".into());
        }
        g.applied = meta.last_log_id;
        g.membership = meta.last_membership.clone();
        let snap = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        g.keep(&snap)
            .map_err(|e| io_err(ErrorSubject::Snapshot(sig), ErrorVerb::Write, e))?;
        // A staged snapshot leaves no data to keep: the next follower that
        // needs one from this node gets one built then.
        g.snapshot = (!snap.data.is_empty()).then_some(snap);
        crate::catchup::mark(|| "install end".into());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let mut g = self.lock();
        let have = g.snapshot.as_ref().map(|s| s.meta.last_log_id);
        if have.is_none_or(|s| !g.opening && stale(s, g.applied)) {
            let Some(applied) = g.applied else {
                return Ok(None);
            };
            if g.opening {
                return Ok(Some(metadata_only_snapshot(applied, &g.membership)));
            }
            // Built for a follower on its own thread and sent as it
            // grows (`snapstream`), not kept (what is kept is what
            // openraft's policy builds).
            g.snapshot = None;
            return Ok(Some(g.stream_state(self.inner.clone())));
        }
        let s = g.snapshot.as_ref().unwrap();
        let out = Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        };
        crate::catchup::mark(|| "current snapshot copied".into());
        Ok(Some(out))
    }
}

/// Where a node keeps its Raft log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogPlacement {
    /// Inside the state machine's PM engine, as uncommitted versions
    /// ([`crate::engine_log`]); no log file.
    Engine,
    /// In its own file (`raft.log`) beside the state machine.
    File,
}

impl LogPlacement {
    /// The placement named `s` (`engine` or `file`).
    pub fn parse(s: &str) -> Option<LogPlacement> {
        match s {
            "engine" => Some(LogPlacement::Engine),
            "file" => Some(LogPlacement::File),
            _ => None,
        }
    }

    /// The placement's name.
    pub fn name(self) -> &'static str {
        match self {
            LogPlacement::Engine => "engine",
            LogPlacement::File => "file",
        }
    }

    /// The default for `engine`: inside it when it says it can hold the
    /// log ([`KvEngine::holds_log`]), else a separate file.
    pub fn default_for(engine: &dyn KvEngine) -> LogPlacement {
        if engine.holds_log() {
            LogPlacement::Engine
        } else {
            LogPlacement::File
        }
    }

    /// The default for the engine named `name` (as [`open_engine`]
    /// takes it), without opening anything.
    ///
    /// [`open_engine`]: crate::engine::open_engine
    pub fn default_for_name(name: &str) -> LogPlacement {
        match name {
            "list" | "btree" | "anchor" => LogPlacement::Engine,
            _ => LogPlacement::File,
        }
    }
}

/// Fail, in one line naming `--raft-log`, if `dir` holds a Raft log kept
/// the other way than `placement`; a new directory is fine.
pub fn check_placement(dir: &Path, placement: LogPlacement) -> io::Result<()> {
    let refuse = |found: &str, flag: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} holds a Raft log kept {found}: start it with --raft-log {flag} or use another directory",
                dir.display()
            ),
        ))
    };
    match placement {
        LogPlacement::Engine if dir.join("raft.log").exists() => {
            refuse("in a separate file (raft.log)", "file")
        }
        LogPlacement::File if dir.join(crate::engine_log::VOTE_FILE).exists() => {
            refuse("in the engine", "engine")
        }
        _ => Ok(()),
    }
}

/// Open the log and the state machine of the node in `dir` over `engine`
/// with the log placed as `placement`. A directory written with one
/// placement is refused to the other, in one line naming the flag.
pub fn open(
    dir: &Path,
    engine: Box<dyn KvEngine>,
    placement: LogPlacement,
) -> io::Result<(LogStore, StateMachine)> {
    check_placement(dir, placement)?;
    crate::catchup::mark(|| "storage open begin".into());
    match placement {
        LogPlacement::Engine => {
            let (log, sm) = crate::engine_log::open(dir, engine)?;
            Ok((LogStore::Engine(log), StateMachine::Engine(sm)))
        }
        LogPlacement::File => {
            let log = FileLog::open(dir)?;
            let sm = FileSm::open(dir, engine)?;
            Ok((LogStore::File(log), StateMachine::File(sm)))
        }
    }
}

/// The Raft log openraft is given: in a file or in the engine. Clones
/// share state (it is also its own log reader).
#[derive(Clone)]
pub enum LogStore {
    /// A separate log file.
    File(FileLog),
    /// The log kept in the engine.
    Engine(crate::engine_log::EngineLog),
}

/// The state machine openraft is given; clones share it, so the server
/// reads through one while openraft owns another.
#[derive(Clone)]
pub enum StateMachine {
    /// Beside a separate log file.
    File(FileSm),
    /// Over the engine that also holds the log.
    Engine(crate::engine_log::EngineSm),
}

impl LogStore {
    /// Where this log lives.
    pub fn placement(&self) -> LogPlacement {
        match self {
            LogStore::File(_) => LogPlacement::File,
            LogStore::Engine(_) => LogPlacement::Engine,
        }
    }

    /// Live entries held (not yet purged).
    pub fn len(&self) -> usize {
        match self {
            LogStore::File(l) => l.len(),
            LogStore::Engine(l) => l.len(),
        }
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        match self {
            LogStore::File(l) => l.try_get_log_entries(range).await,
            LogStore::Engine(l) => l.read(range),
        }
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        match self {
            LogStore::File(l) => l.get_log_state().await,
            LogStore::Engine(l) => l.log_state(),
        }
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        match self {
            LogStore::File(l) => l.save_vote(vote).await,
            LogStore::Engine(l) => l.save_vote(vote),
        }
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        match self {
            LogStore::File(l) => l.read_vote().await,
            LogStore::Engine(l) => Ok(l.vote()),
        }
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        match self {
            LogStore::File(l) => l.save_committed(committed).await,
            LogStore::Engine(l) => l.save_committed(committed),
        }
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        match self {
            LogStore::File(l) => l.read_committed().await,
            LogStore::Engine(l) => Ok(l.committed()),
        }
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        match self {
            LogStore::File(l) => l.append(entries, callback).await,
            LogStore::Engine(l) => l.append(entries, callback),
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        match self {
            LogStore::File(l) => l.truncate(log_id).await,
            LogStore::Engine(l) => l.truncate(log_id),
        }
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        match self {
            LogStore::File(l) => l.purge(log_id).await,
            LogStore::Engine(l) => l.purge(log_id),
        }
    }
}

impl StateMachine {
    /// openraft has started: a snapshot asked for from now on is built
    /// (during its start-up only the metadata is handed out).
    pub fn opened(&self) {
        crate::catchup::mark(|| "raft started".into());
        match self {
            StateMachine::File(s) => s.lock().opening = false,
            StateMachine::Engine(s) => s.opened(),
        }
    }

    /// The current (committed) value of `key` (call after the read index
    /// is applied).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        match self {
            StateMachine::File(s) => s.get(key),
            StateMachine::Engine(s) => s.get(key),
        }
    }

    /// The applied log index.
    pub fn applied_index(&self) -> u64 {
        match self {
            StateMachine::File(s) => s.applied_index(),
            StateMachine::Engine(s) => s.applied_index(),
        }
    }

    /// The engine's name.
    pub fn engine_name(&self) -> &'static str {
        match self {
            StateMachine::File(s) => s.engine_name(),
            StateMachine::Engine(s) => s.engine_name(),
        }
    }

    /// Where the Raft log beside this state machine lives.
    pub fn placement(&self) -> LogPlacement {
        match self {
            StateMachine::File(_) => LogPlacement::File,
            StateMachine::Engine(_) => LogPlacement::Engine,
        }
    }
}

impl StateMachine {
    /// Begin staging the snapshot `meta` as its data arrives (see
    /// [`crate::engine_log::EngineSm::stage_begin`] and
    /// [`FileSm::stage_begin`]); `false` when the data is to be installed
    /// whole.
    pub fn stage_begin(&self, meta: &SnapshotMeta) -> bool {
        match self {
            StateMachine::File(s) => s.stage_begin(meta),
            StateMachine::Engine(s) => s.stage_begin(meta),
        }
    }

    /// The next piece of the data of the snapshot `id` being staged.
    pub fn stage_data<B: AsRef<[u8]> + Send + 'static>(
        &self,
        id: &str,
        piece: B,
    ) -> Result<(), String> {
        match self {
            StateMachine::File(s) => s.stage_data(id, piece),
            StateMachine::Engine(s) => s.stage_data(id, piece),
        }
    }

    /// All the data of the snapshot `id` being staged arrived.
    pub fn stage_end(&self, id: &str) -> Result<(), String> {
        match self {
            StateMachine::File(s) => s.stage_end(id),
            StateMachine::Engine(s) => s.stage_end(id),
        }
    }

    /// Drop the staging of snapshot `id` if its install did not take it.
    pub fn stage_drop(&self, id: &str) {
        match self {
            StateMachine::File(s) => s.stage_drop(id),
            StateMachine::Engine(s) => s.stage_drop(id),
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        match self {
            StateMachine::File(s) => s.build_snapshot().await,
            StateMachine::Engine(s) => s.build_snapshot(),
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        match self {
            StateMachine::File(s) => s.applied_state().await,
            StateMachine::Engine(s) => Ok(s.applied_state()),
        }
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        match self {
            StateMachine::File(s) => s.apply(entries).await,
            StateMachine::Engine(s) => s.apply(entries),
        }
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        match self {
            StateMachine::File(s) => s.install_snapshot(meta, snapshot).await,
            StateMachine::Engine(s) => s.install(meta, snapshot.into_inner()),
        }
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        match self {
            StateMachine::File(s) => s.get_current_snapshot().await,
            StateMachine::Engine(s) => s.current_snapshot(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_data_round_trips_as_slices_and_refuses_damage() {
        let pairs: Vec<Pair> = (0..50u32)
            .map(|i| {
                (
                    format!("k{i:03}").into_bytes(),
                    vec![i as u8; i as usize * 100],
                )
            })
            .collect();
        let data = encode_snapshot(pairs.clone().into_iter().map(Ok), 0).unwrap();
        let slices = snapshot_pairs(&data).unwrap();
        assert_eq!(slices.len(), pairs.len());
        for ((k, v), (k2, v2)) in pairs.iter().zip(&slices) {
            assert_eq!((&k[..], &v[..]), (*k2, *v2));
        }
        assert_eq!(decode_snapshot(&data).unwrap(), pairs);
        // A hint larger than the data changes nothing but the capacity.
        let big = encode_snapshot(pairs.clone().into_iter().map(Ok), 8 << 20).unwrap();
        assert_eq!(big, data);
        for cut in [0, 7, 9, 12, data.len() - 1] {
            assert!(snapshot_pairs(&data[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge_len = data.clone();
        huge_len[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(snapshot_pairs(&huge_len).is_err());
        let at = |i| Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), i));
        assert!(stale(None, at(REBUILD_BEHIND + 1)));
        assert!(!stale(at(100), at(100 + REBUILD_BEHIND)));
        assert!(stale(at(100), at(101 + REBUILD_BEHIND)));
    }
}
