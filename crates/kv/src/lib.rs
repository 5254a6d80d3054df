//! Persistent-memory key-value storage engines, after the thesis on
//! replicating a PM key-value map with Raft without a separate write-ahead
//! log (chapters 2-3), and the pool they live in.
//!
//! The crate owns the pool file format, the flush/fence primitives and four
//! engines behind one trait; it depends on nothing else in pmlab (the pmlab
//! runtime is reached, when loaded, through one C symbol: see
//! [`pm::register_pm`]).
//!
//! # Brief overview
//!
//! * [`Engine`]: the interface. Keys and values are byte strings; every
//!   write carries a version (the replication log index), strictly
//!   increasing; reads as of an index ([`Engine::get_at`]), rollback of
//!   every write above an index ([`Engine::rollback_above`]), consistent
//!   snapshots and restore ([`Engine::snapshot`], [`Engine::restore`]) and
//!   discarding versions no reader needs ([`Engine::discard_below`]).
//! * [`EngineKind`]: `list` (a persistent append-only list of versioned
//!   records + a DRAM index rebuilt on open), `wal` (a DRAM map + a log
//!   on PM, durable per write: the thesis' baseline), `btree` (a persistent
//!   copy-on-write B+-tree holding every version), `anchor` (libpmemobj
//!   transactions, for comparison with the library PM programmers use).
//! * [`pool::Pool`]: the mapped file: header, root slots, pages with control
//!   blocks, used and free lists, bump allocation, group commit, GC.
//! * [`Model`]: the plain in-memory reference the tests and `pmkv check
//!   --expect` compare the engines with.
//! * [`pm`]: clwb/clflushopt/clflush chosen by cpuid, sfence, persist.
//!
//! # Example
//!
//! ```
//! use pmlab_kv::{create, open, EngineKind, Options};
//! let dir = std::env::temp_dir().join(format!("pmkv-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("pool");
//! let mut kv = create(&path, EngineKind::List, &Options::default()).unwrap();
//! kv.set(b"k", b"one", 1).unwrap();
//! kv.set(b"k", b"two", 2).unwrap();
//! drop(kv);
//! let kv = open(&path, EngineKind::List, &Options::default()).unwrap();
//! assert_eq!(kv.get(b"k").unwrap().as_deref(), Some(&b"two"[..]));
//! assert_eq!(kv.get_at(b"k", 1).unwrap().as_deref(), Some(&b"one"[..]));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
#![deny(missing_docs)]

mod anchor;
mod btree;
pub mod cli_error;
mod error;
mod index;
mod log;
mod model;
pub mod pm;
pub mod pool;
pub mod stress;

pub use error::{Error, ErrorKind, Result};
pub use model::Model;

use std::path::Path;

/// Longest key accepted, in bytes.
pub const MAX_KEY: usize = 64 * 1024;
/// Longest value accepted, in bytes.
pub const MAX_VALUE: usize = 1024 * 1024;

/// The storage engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// Persistent append-only list of versioned records + DRAM index.
    List,
    /// DRAM map + append-only log on PM, durable per write.
    Wal,
    /// Persistent copy-on-write B+-tree with every version.
    BTree,
    /// libpmemobj transactions (PMDK), a list of records + DRAM index.
    Anchor,
}

impl EngineKind {
    /// Every engine, in a fixed order.
    pub const ALL: [EngineKind; 4] = [
        EngineKind::List,
        EngineKind::Wal,
        EngineKind::BTree,
        EngineKind::Anchor,
    ];

    /// The engine's name on the command line and in pools.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::List => "list",
            EngineKind::Wal => "wal",
            EngineKind::BTree => "btree",
            EngineKind::Anchor => "anchor",
        }
    }

    /// The engine named `s`, or an error listing the valid names.
    pub fn parse(s: &str) -> Result<EngineKind> {
        EngineKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("unknown engine {s:?}: pick one of list, wal, btree, anchor"),
                )
            })
    }

    /// Whether this build includes the engine (`anchor` needs libpmemobj
    /// at build time).
    pub fn available(self) -> bool {
        self != EngineKind::Anchor || anchor::AVAILABLE
    }

    pub(crate) fn code(self) -> u32 {
        match self {
            EngineKind::List => 1,
            EngineKind::Wal => 2,
            EngineKind::BTree => 3,
            EngineKind::Anchor => 4,
        }
    }

    pub(crate) fn from_code(c: u32) -> Option<EngineKind> {
        EngineKind::ALL.into_iter().find(|k| k.code() == c)
    }
}

/// How to create or open an engine.
#[derive(Clone, Debug)]
pub struct Options {
    /// Pool file size in bytes (create only).
    pub size: u64,
    /// Page size in bytes (create only; the thesis found about 1 KiB best).
    pub page_size: u32,
    /// B+-tree fan-out: most children of an inner node and entries of a
    /// leaf (create only; 4..=64, the thesis found 4-7 best).
    pub fanout: u32,
    /// Writes per group commit: 1 makes every write durable on return;
    /// with k, every k-th write (and [`Engine::sync`]) commits the group.
    /// The `wal` and `anchor` engines are durable per write regardless.
    pub group: u32,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            size: 64 << 20,
            page_size: 4096,
            fanout: 6,
            group: 1,
        }
    }
}

/// One stored version of a key: a value, or `None` for a deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionEntry {
    /// The key.
    pub key: Vec<u8>,
    /// The version (log index) that wrote it.
    pub version: u64,
    /// The value, or `None` for a deletion (tombstone).
    pub value: Option<Vec<u8>>,
}

/// The boxed iterator inside a [`Snapshot`].
pub type Pairs<'a> = Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + 'a>;

/// A consistent snapshot: every live key and its value as of `index`, in
/// key order.
pub struct Snapshot<'a> {
    /// The index the snapshot is taken at.
    pub index: u64,
    inner: Pairs<'a>,
}

impl<'a> Snapshot<'a> {
    /// A snapshot at `index` yielding `inner`'s pairs.
    pub fn new(index: u64, inner: Pairs<'a>) -> Snapshot<'a> {
        Snapshot { index, inner }
    }
}

impl Iterator for Snapshot<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next()
    }
}

/// Space figures of an engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Bytes of PM (pool pages) in use.
    pub pm_bytes: u64,
    /// Key and value bytes of the retained versions.
    pub data_bytes: u64,
    /// Retained versions.
    pub versions: u64,
    /// Compactions and restores (fresh chains) since the engine was opened.
    pub compactions: u64,
}

/// A versioned key-value storage engine.
///
/// Writes take `&mut self` and reads `&self`: share an engine between
/// threads behind a lock.
///
/// Versions are log indices: each write carries one above [`Engine::last_version`]
/// (else [`ErrorKind::VersionOrder`]). Reads below [`Engine::floor`] fail
/// with [`ErrorKind::Discarded`]. A write that changes nothing (deleting an
/// absent key, a failed compare-and-set) stores nothing.
pub trait Engine: Send {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;

    /// The value of `key` as of `index` (the newest version at or below it).
    fn get_at(&self, key: &[u8], index: u64) -> Result<Option<Vec<u8>>>;

    /// Store `value` (or a deletion, `None`) for `key` at `version`.
    fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> Result<()>;

    /// Make every write so far durable (ends the current group).
    fn sync(&mut self) -> Result<()>;

    /// The highest version written (0 for an empty engine).
    fn last_version(&self) -> u64;

    /// The highest version known durable: [`Engine::last_version`] once
    /// the current group is committed (a replication log acknowledges up
    /// to here).
    fn durable_version(&self) -> u64 {
        self.last_version()
    }

    /// The discard floor: reads below it fail.
    fn floor(&self) -> u64;

    /// Remove every version above `index`; durable on return. Fails below the floor.
    fn rollback_above(&mut self, index: u64) -> Result<()>;

    /// Drop versions no reader at or above `index` needs (for each key,
    /// everything older than its newest version at or below `index`, and
    /// that one too if it is a deletion); raises the floor to `index`.
    /// Durable on return. `index` must not exceed [`Engine::last_version`].
    fn discard_below(&mut self, index: u64) -> Result<()>;

    /// The live keys and values as of `index`, in key order.
    fn snapshot(&self, index: u64) -> Result<Snapshot<'_>>;

    /// Replace the whole contents with `entries` at version `index` (the
    /// floor and last version become `index`); durable and atomic on return.
    fn restore(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Result<()>;

    /// [`Engine::restore`] from borrowed pairs, as a snapshot yields them
    /// (in increasing key order; pairs out of order are still restored,
    /// by the slower path). Engines that write the pairs straight into the
    /// pool (`list`, `wal`) skip the owned copy the default makes.
    fn restore_sorted<'a>(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<()> {
        let mut owned = entries.map(|(k, v)| (k.to_vec(), v.to_vec()));
        self.restore(index, &mut owned)
    }

    /// Begin a staged restore at version `index`: pairs given one by one
    /// ([`Engine::stage_push`], in increasing key order) are written as
    /// they come, invisible to readers and to a restart, until
    /// [`Engine::stage_commit`] makes them the whole contents at once
    /// (as [`Engine::restore`]). Any other write first drops a staged
    /// restore (as [`Engine::stage_abort`]), so the engine is never left
    /// half restored. `Ok(false)`: this engine has no staged restore (the
    /// default); the caller collects the pairs and calls
    /// [`Engine::restore_sorted`].
    fn stage_begin(&mut self, _index: u64) -> Result<bool> {
        Ok(false)
    }

    /// Write one pair of the staged restore; keys must increase. On error
    /// the staged restore is dropped.
    fn stage_push(&mut self, _key: &[u8], _value: &[u8]) -> Result<()> {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            "no staged restore in progress",
        ))
    }

    /// Whether a staged restore is in progress (begun, not dropped).
    fn stage_active(&self) -> bool {
        false
    }

    /// Make the staged restore the whole contents: durable and atomic on
    /// return.
    fn stage_commit(&mut self) -> Result<()> {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            "no staged restore in progress",
        ))
    }

    /// Drop the staged restore (if any): the contents stay as they were.
    fn stage_abort(&mut self) {}

    /// Every retained version, sorted by key then version.
    fn history(&self) -> Result<Vec<VersionEntry>>;

    /// The versions above `index` (and above the floor) with the key each
    /// wrote, in version order: what a replication log kept in the engine
    /// needs to find its entries after a restart. The default walks
    /// [`Engine::history`]; engines with a version index answer from it.
    fn written_above(&self, index: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let above = index.max(self.floor());
        let mut out: Vec<(u64, Vec<u8>)> = self
            .history()?
            .into_iter()
            .filter(|e| e.version > above)
            .map(|e| (e.version, e.key))
            .collect();
        out.sort_unstable_by_key(|(v, _)| *v);
        Ok(out)
    }

    /// Check every invariant of the pool and the structure; the error names
    /// the first one broken.
    fn check(&self) -> Result<()>;

    /// Reclaim space now (deduplication, rebuilding, GC); engines also do
    /// it on their own when garbage dominates.
    fn compact(&mut self) -> Result<()>;

    /// Space figures.
    fn usage(&self) -> Usage;

    /// The newest value of `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_at(key, u64::MAX)
    }

    /// Set `key` to `value` at `version`.
    fn set(&mut self, key: &[u8], value: &[u8], version: u64) -> Result<()> {
        self.put(key, Some(value), version)
    }

    /// Delete `key` at `version`; returns whether it existed (nothing is
    /// stored when it did not).
    fn delete(&mut self, key: &[u8], version: u64) -> Result<bool> {
        check_version(self.last_version(), version)?;
        if self.get(key)?.is_none() {
            return Ok(false);
        }
        self.put(key, None, version)?;
        Ok(true)
    }

    /// Set `key` to `new` at `version` if its value is `expected` (`None`:
    /// absent); returns whether it did.
    fn compare_and_set(
        &mut self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
        version: u64,
    ) -> Result<bool> {
        check_version(self.last_version(), version)?;
        check_sizes(key, Some(new))?;
        if self.get(key)?.as_deref() != expected {
            return Ok(false);
        }
        self.put(key, Some(new), version)?;
        Ok(true)
    }
}

/// Run an automatic compaction after a commit: a pool too full to compact
/// is not an error of the write that triggered it (which is durable).
pub(crate) fn auto_compact(r: Result<()>) -> Result<()> {
    match r {
        Err(e) if e.kind() == ErrorKind::Full => Ok(()),
        r => r,
    }
}

pub(crate) fn check_version(last: u64, version: u64) -> Result<()> {
    if version <= last {
        return Err(Error::new(
            ErrorKind::VersionOrder,
            format!("version {version} is not above the last version {last}"),
        ));
    }
    Ok(())
}

/// The entries given to `restore`, checked and in key order (a later entry
/// of a key replaces an earlier one).
pub(crate) fn restore_entries(
    entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
) -> Result<std::collections::BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut map = std::collections::BTreeMap::new();
    for (k, v) in entries {
        check_sizes(&k, Some(&v))?;
        map.insert(k, v);
    }
    Ok(map)
}

/// Whether `pairs` are in strictly increasing key order; fails on a key
/// or value over the limits.
pub(crate) fn sorted_pairs(pairs: &[(&[u8], &[u8])]) -> Result<bool> {
    for (k, v) in pairs {
        check_sizes(k, Some(v))?;
    }
    Ok(pairs.windows(2).all(|w| w[0].0 < w[1].0))
}

pub(crate) fn check_sizes(key: &[u8], value: Option<&[u8]>) -> Result<()> {
    if key.len() > MAX_KEY {
        return Err(Error::new(
            ErrorKind::TooLarge,
            format!("key of {} bytes: the limit is {MAX_KEY}", key.len()),
        ));
    }
    if let Some(v) = value {
        if v.len() > MAX_VALUE {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!("value of {} bytes: the limit is {MAX_VALUE}", v.len()),
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_read(floor: u64, index: u64) -> Result<()> {
    if index < floor {
        return Err(Error::new(
            ErrorKind::Discarded,
            format!("index {index} is below the discard floor {floor}"),
        ));
    }
    Ok(())
}

/// Create a new pool at `path` (which must not exist) holding `kind`.
pub fn create(path: &Path, kind: EngineKind, opts: &Options) -> Result<Box<dyn Engine>> {
    match kind {
        EngineKind::List | EngineKind::Wal => {
            Ok(Box::new(log::LogEngine::create(path, kind, opts)?))
        }
        EngineKind::BTree => Ok(Box::new(btree::BTreeEngine::create(path, opts)?)),
        EngineKind::Anchor => anchor::create(path, opts),
    }
}

/// Open the pool at `path`, which must hold `kind`; recovers it (rebuilds
/// DRAM indexes, finishes an interrupted GC).
pub fn open(path: &Path, kind: EngineKind, opts: &Options) -> Result<Box<dyn Engine>> {
    match kind {
        EngineKind::List | EngineKind::Wal => Ok(Box::new(log::LogEngine::open(path, kind, opts)?)),
        EngineKind::BTree => Ok(Box::new(btree::BTreeEngine::open(path, opts)?)),
        EngineKind::Anchor => anchor::open(path, opts),
    }
}

/// The engine a pool file holds, from its first bytes: a pmkv header names
/// it, a libpmemobj pool is `anchor`.
pub fn detect(path: &Path) -> Result<EngineKind> {
    use std::io::Read;
    let mut head = [0u8; 16];
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path.display(), e))?;
    let n = f
        .read(&mut head)
        .map_err(|e| Error::io(path.display(), e))?;
    if n >= 16 && head[..8] == pool::MAGIC {
        let code = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
        return EngineKind::from_code(code).ok_or_else(|| {
            Error::new(
                ErrorKind::BadPool,
                format!(
                    "{}: the header names engine code {code}, unknown to this build",
                    path.display()
                ),
            )
        });
    }
    if n >= 7 && &head[..7] == b"PMEMOBJ" {
        return Ok(EngineKind::Anchor);
    }
    Err(Error::new(
        ErrorKind::BadPool,
        format!(
            "{}: neither a pmkv pool nor a libpmemobj pool",
            path.display()
        ),
    ))
}

/// Compare an engine's whole retained state with a model; the error names
/// the first difference.
pub fn compare(engine: &dyn Engine, model: &Model) -> Result<()> {
    if engine.last_version() != model.last_version() {
        return Err(Error::inconsistent(format!(
            "last version {} but the model says {}",
            engine.last_version(),
            model.last_version()
        )));
    }
    if engine.floor() != model.floor() {
        return Err(Error::inconsistent(format!(
            "discard floor {} but the model says {}",
            engine.floor(),
            model.floor()
        )));
    }
    let got = engine.history()?;
    let want = model.history();
    for (i, w) in want.iter().enumerate() {
        match got.get(i) {
            Some(g) if g == w => {}
            Some(g) if g.key == w.key && g.version == w.version => {
                return Err(Error::inconsistent(format!(
                    "version {} of key {}: the value differs from the model's",
                    w.version,
                    show(&w.key)
                )))
            }
            Some(g) => {
                return Err(Error::inconsistent(format!(
                    "version {} of key {} differs from the model (engine has version {} of key {})",
                    w.version,
                    show(&w.key),
                    g.version,
                    show(&g.key)
                )))
            }
            None => {
                return Err(Error::inconsistent(format!(
                    "version {} of key {} is missing",
                    w.version,
                    show(&w.key)
                )))
            }
        }
    }
    if let Some(g) = got.get(want.len()) {
        return Err(Error::inconsistent(format!(
            "version {} of key {} is not in the model",
            g.version,
            show(&g.key)
        )));
    }
    Ok(())
}

/// A key for messages: printable ASCII as is, anything else in hex.
pub fn show(key: &[u8]) -> String {
    if !key.is_empty() && key.iter().all(|b| b.is_ascii_graphic()) {
        String::from_utf8_lossy(key).into_owned()
    } else {
        format!("0x{}", hex(key))
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes from lower-case or upper-case hex, or `None` when malformed.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Check invariants shared by the engines over a history sorted by key and
/// version: versions strictly increase per key and stay at or below `last`;
/// at most one version per key lies at or below `floor`, and it is not a
/// deletion.
pub(crate) fn check_history(h: &[VersionEntry], last: u64, floor: u64) -> Result<()> {
    for (i, e) in h.iter().enumerate() {
        if e.version > last {
            return Err(Error::inconsistent(format!(
                "key {}: version {} above the last version {last}",
                show(&e.key),
                e.version
            )));
        }
        if e.version == 0 {
            return Err(Error::inconsistent(format!(
                "key {}: version 0",
                show(&e.key)
            )));
        }
        let prev = if i > 0 && h[i - 1].key == e.key {
            Some(&h[i - 1])
        } else {
            None
        };
        if let Some(p) = prev {
            if p.version >= e.version {
                return Err(Error::inconsistent(format!(
                    "key {}: versions {} and {} out of order",
                    show(&e.key),
                    p.version,
                    e.version
                )));
            }
            if e.version <= floor {
                return Err(Error::inconsistent(format!(
                    "key {}: two versions ({} and {}) at or below the discard floor {floor}",
                    show(&e.key),
                    p.version,
                    e.version
                )));
            }
        }
        if e.version <= floor && e.value.is_none() {
            return Err(Error::inconsistent(format!(
                "key {}: a deletion at version {} survives the discard floor {floor}",
                show(&e.key),
                e.version
            )));
        }
    }
    Ok(())
}
