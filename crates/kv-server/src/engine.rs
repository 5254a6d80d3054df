//! The storage interface the state machine needs, mirroring `pmlab_kv::Engine`
//! (versions are Raft log indices), an in-memory implementation, and
//! [`PmEngine`], the adapter over the persistent-memory engines of
//! `pmlab-kv` (`list`, `btree`, `wal`, `anchor`).
//!
//! [`open_engine`] picks one by name for a node's data directory.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// An engine failure, carried as text (the engines' own errors name the
/// offending file, key or version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineError(pub String);

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EngineError {}

/// Result of an engine call.
pub type EngineResult<T> = Result<T, EngineError>;

/// A key and its value, as a snapshot yields them.
pub type Pair = (Vec<u8>, Vec<u8>);

/// A versioned key-value engine, as the replicated state machine uses it.
///
/// Versions are strictly increasing log indices; a write that changes
/// nothing stores nothing, so [`KvEngine::last_version`] may trail the
/// applied index.
pub trait KvEngine: Send {
    /// The engine's name (for logs and `INFO`).
    fn name(&self) -> &'static str;
    /// Whether the contents survive a process restart. A volatile engine is
    /// rebuilt from the last snapshot file and the Raft log.
    fn persistent(&self) -> bool;
    /// The value of `key` as of `index` (the newest version at or below it).
    fn get_at(&self, key: &[u8], index: u64) -> EngineResult<Option<Vec<u8>>>;
    /// Store `value` (or a deletion, `None`) for `key` at `version`.
    fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> EngineResult<()>;
    /// Make every write so far durable.
    fn sync(&mut self) -> EngineResult<()>;
    /// The highest version written (0 when empty).
    fn last_version(&self) -> u64;
    /// Remove every version above `index`.
    fn rollback_above(&mut self, index: u64) -> EngineResult<()>;
    /// Drop versions that no reader at or above `index` needs.
    fn discard_below(&mut self, index: u64) -> EngineResult<()>;
    /// The live pairs as of `index`, in key order.
    fn snapshot(
        &self,
        index: u64,
    ) -> EngineResult<Box<dyn Iterator<Item = EngineResult<Pair>> + '_>>;
    /// Replace the whole contents with `entries` at version `index`.
    fn restore(&mut self, index: u64, entries: &mut dyn Iterator<Item = Pair>) -> EngineResult<()>;

    /// [`KvEngine::restore`] from borrowed pairs, in increasing key order
    /// as a snapshot holds them: the PM engines write them into the pool
    /// without an owned copy of each first.
    fn restore_sorted<'a>(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> EngineResult<()> {
        let mut owned = entries.map(|(k, v)| (k.to_vec(), v.to_vec()));
        self.restore(index, &mut owned)
    }

    /// Begin a staged restore at `index` (`pmlab_kv::Engine::stage_begin`:
    /// pairs written as they arrive, visible only once committed, dropped
    /// by any other write); `Ok(false)` when the engine has none.
    fn stage_begin(&mut self, _index: u64) -> EngineResult<bool> {
        Ok(false)
    }

    /// Write one pair (keys increasing) of the staged restore.
    fn stage_push(&mut self, _key: &[u8], _value: &[u8]) -> EngineResult<()> {
        Err(EngineError("no staged restore in progress".into()))
    }

    /// Whether a staged restore is in progress.
    fn stage_active(&self) -> bool {
        false
    }

    /// Make the staged restore the whole contents (atomic, durable).
    fn stage_commit(&mut self) -> EngineResult<()> {
        Err(EngineError("no staged restore in progress".into()))
    }

    /// Drop the staged restore, if any.
    fn stage_abort(&mut self) {}

    /// The discard floor: reads below it fail. After a restart it tells
    /// what the engine can still serve (a Raft log kept in the engine has
    /// purged every entry below it).
    fn floor(&self) -> u64;

    /// The newest value of `key`.
    fn get(&self, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        self.get_at(key, u64::MAX)
    }

    /// Whether a node keeps its Raft log inside this engine unless told
    /// otherwise (see `store`): true for the PM engines `list`, `btree`
    /// and `anchor`; `wal` keeps a separate log, as the thesis' baseline
    /// does, and a volatile engine cannot hold one.
    fn holds_log(&self) -> bool {
        false
    }

    /// The versions above `index` (and the floor) with the key each wrote,
    /// in version order; needed only to keep the Raft log in the engine.
    fn written_above(&self, _index: u64) -> EngineResult<Vec<(u64, Vec<u8>)>> {
        Err(EngineError(format!(
            "engine {} cannot list its versions, so it cannot hold the Raft log",
            self.name()
        )))
    }
}

/// A key's versions, oldest first: (version, value or `None` for a deletion).
type Versions = Vec<(u64, Option<Vec<u8>>)>;

/// A volatile engine: an ordered map from key to its versions.
#[derive(Debug, Default)]
pub struct MemEngine {
    map: BTreeMap<Vec<u8>, Versions>,
    last: u64,
    floor: u64,
}

impl MemEngine {
    /// An empty engine.
    pub fn new() -> MemEngine {
        MemEngine::default()
    }

    fn at(versions: &[(u64, Option<Vec<u8>>)], index: u64) -> Option<&Option<Vec<u8>>> {
        versions
            .iter()
            .rev()
            .find(|(v, _)| *v <= index)
            .map(|(_, val)| val)
    }
}

impl KvEngine for MemEngine {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn persistent(&self) -> bool {
        false
    }

    fn get_at(&self, key: &[u8], index: u64) -> EngineResult<Option<Vec<u8>>> {
        if index < self.floor {
            return Err(EngineError(format!(
                "read at index {index} below the discard floor {}",
                self.floor
            )));
        }
        Ok(self
            .map
            .get(key)
            .and_then(|vs| MemEngine::at(vs, index))
            .cloned()
            .flatten())
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> EngineResult<()> {
        if version <= self.last {
            return Err(EngineError(format!(
                "write at version {version} not above the last version {}",
                self.last
            )));
        }
        self.map
            .entry(key.to_vec())
            .or_default()
            .push((version, value.map(|v| v.to_vec())));
        self.last = version;
        Ok(())
    }

    fn sync(&mut self) -> EngineResult<()> {
        Ok(())
    }

    fn last_version(&self) -> u64 {
        self.last
    }

    fn floor(&self) -> u64 {
        self.floor
    }

    fn written_above(&self, index: u64) -> EngineResult<Vec<(u64, Vec<u8>)>> {
        let above = index.max(self.floor);
        let mut out: Vec<(u64, Vec<u8>)> = self
            .map
            .iter()
            .flat_map(|(k, vs)| {
                vs.iter()
                    .filter(move |(v, _)| *v > above)
                    .map(move |(v, _)| (*v, k.clone()))
            })
            .collect();
        out.sort_unstable_by_key(|(v, _)| *v);
        Ok(out)
    }

    fn rollback_above(&mut self, index: u64) -> EngineResult<()> {
        if index < self.floor {
            return Err(EngineError(format!(
                "rollback to {index} below the discard floor {}",
                self.floor
            )));
        }
        self.map.retain(|_, vs| {
            vs.retain(|(v, _)| *v <= index);
            !vs.is_empty()
        });
        self.last = self.last.min(index);
        Ok(())
    }

    fn discard_below(&mut self, index: u64) -> EngineResult<()> {
        let index = index.min(self.last);
        self.map.retain(|_, vs| {
            if let Some(pos) = vs.iter().rposition(|(v, _)| *v <= index) {
                vs.drain(..pos);
                if vs[0].1.is_none() {
                    vs.remove(0);
                }
            }
            !vs.is_empty()
        });
        self.floor = self.floor.max(index);
        Ok(())
    }

    fn snapshot(
        &self,
        index: u64,
    ) -> EngineResult<Box<dyn Iterator<Item = EngineResult<Pair>> + '_>> {
        if index < self.floor {
            return Err(EngineError(format!(
                "snapshot at {index} below the discard floor {}",
                self.floor
            )));
        }
        Ok(Box::new(self.map.iter().filter_map(move |(k, vs)| {
            MemEngine::at(vs, index)
                .cloned()
                .flatten()
                .map(|v| Ok((k.clone(), v)))
        })))
    }

    fn restore(&mut self, index: u64, entries: &mut dyn Iterator<Item = Pair>) -> EngineResult<()> {
        self.map.clear();
        for (k, v) in entries {
            self.map.insert(k, vec![(index, Some(v))]);
        }
        self.last = index;
        self.floor = index;
        Ok(())
    }
}

/// A persistent-memory engine of `pmlab-kv` behind [`KvEngine`]: every
/// method forwards to its namesake; errors keep their message.
pub struct PmEngine(pub Box<dyn pmlab_kv::Engine>);

fn pm_err(e: pmlab_kv::Error) -> EngineError {
    EngineError(e.to_string())
}

impl KvEngine for PmEngine {
    fn name(&self) -> &'static str {
        self.0.kind().name()
    }

    fn persistent(&self) -> bool {
        true
    }

    fn get_at(&self, key: &[u8], index: u64) -> EngineResult<Option<Vec<u8>>> {
        self.0.get_at(key, index).map_err(pm_err)
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> EngineResult<()> {
        self.0.put(key, value, version).map_err(pm_err)
    }

    fn sync(&mut self) -> EngineResult<()> {
        self.0.sync().map_err(pm_err)
    }

    fn last_version(&self) -> u64 {
        self.0.last_version()
    }

    fn floor(&self) -> u64 {
        self.0.floor()
    }

    fn holds_log(&self) -> bool {
        self.0.kind() != pmlab_kv::EngineKind::Wal
    }

    fn written_above(&self, index: u64) -> EngineResult<Vec<(u64, Vec<u8>)>> {
        self.0.written_above(index).map_err(pm_err)
    }

    fn rollback_above(&mut self, index: u64) -> EngineResult<()> {
        self.0.rollback_above(index).map_err(pm_err)
    }

    fn discard_below(&mut self, index: u64) -> EngineResult<()> {
        // The PM engines refuse a floor above their last version; the state
        // machine's applied index may be ahead of it (no-op writes).
        let index = index.min(self.0.last_version());
        if index <= self.0.floor() {
            return Ok(());
        }
        self.0.discard_below(index).map_err(pm_err)
    }

    fn snapshot(
        &self,
        index: u64,
    ) -> EngineResult<Box<dyn Iterator<Item = EngineResult<Pair>> + '_>> {
        let snap = self.0.snapshot(index).map_err(pm_err)?;
        Ok(Box::new(snap.map(|r| r.map_err(pm_err))))
    }

    fn restore(&mut self, index: u64, entries: &mut dyn Iterator<Item = Pair>) -> EngineResult<()> {
        self.0.restore(index, entries).map_err(pm_err)
    }

    fn restore_sorted<'a>(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> EngineResult<()> {
        self.0.restore_sorted(index, entries).map_err(pm_err)
    }

    fn stage_begin(&mut self, index: u64) -> EngineResult<bool> {
        self.0.stage_begin(index).map_err(pm_err)
    }

    fn stage_push(&mut self, key: &[u8], value: &[u8]) -> EngineResult<()> {
        self.0.stage_push(key, value).map_err(pm_err)
    }

    fn stage_active(&self) -> bool {
        self.0.stage_active()
    }

    fn stage_commit(&mut self) -> EngineResult<()> {
        self.0.stage_commit().map_err(pm_err)
    }

    fn stage_abort(&mut self) {
        self.0.stage_abort()
    }

    fn get(&self, key: &[u8]) -> EngineResult<Option<Vec<u8>>> {
        self.0.get(key).map_err(pm_err)
    }
}

/// The engine names [`open_engine`] accepts.
pub const ENGINES: &str = "mem, list, btree, wal, anchor";

/// Name of the file in a data directory that records which engine wrote it.
pub const ENGINE_FILE: &str = "engine";

/// Name of the pool file of a PM engine in a node's data directory.
pub const POOL_FILE: &str = "kv.pool";

/// Fail if the data directory `dir` holds data of an engine other than
/// `name` (recorded in its `engine` file); a missing directory is fine.
pub fn check_data_dir(name: &str, dir: &Path) -> EngineResult<()> {
    let tag = dir.join(ENGINE_FILE);
    let recorded = match std::fs::read_to_string(&tag) {
        Ok(t) => Some(t.trim().to_string()),
        // Directories from before the tag held only `mem` data.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            dir.join("sm-meta.json").exists().then(|| "mem".to_string())
        }
        Err(e) => {
            return Err(EngineError(format!("read {}: {e}", tag.display())));
        }
    };
    match recorded {
        Some(t) if t != name => Err(EngineError(format!(
            "{} holds data of engine {}: start it with --engine {} or use another directory",
            dir.display(),
            t,
            t
        ))),
        _ => Ok(()),
    }
}

/// Open the engine `name` for the data directory `dir`: `mem`, or a PM
/// engine whose pool `dir/kv.pool` is opened, or created with `pool_bytes`
/// bytes. A directory written by one engine is refused to another (its
/// state would not match the recorded applied index).
pub fn open_engine(name: &str, dir: &Path, pool_bytes: u64) -> EngineResult<Box<dyn KvEngine>> {
    let kind = match name {
        "mem" => None,
        other => Some(pmlab_kv::EngineKind::parse(other).map_err(|_| {
            EngineError(format!("unknown engine {other:?}: pick one of {ENGINES}"))
        })?),
    };
    if let Some(k) = kind {
        if !k.available() {
            return Err(EngineError(format!(
                "engine {name}: this build has no libpmemobj (install libpmemobj-dev and rebuild), pick another of {ENGINES}"
            )));
        }
    }
    let io = |what: &str, p: &Path, e: std::io::Error| {
        EngineError(format!("{what} {}: {e}", p.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io("create data directory", dir, e))?;
    let tag = dir.join(ENGINE_FILE);
    check_data_dir(name, dir)?;
    if !tag.exists() {
        std::fs::write(&tag, format!("{name}\n")).map_err(|e| io("write", &tag, e))?;
    }
    let Some(kind) = kind else {
        return Ok(Box::new(MemEngine::new()));
    };
    let pool = dir.join(POOL_FILE);
    let opts = pmlab_kv::Options {
        size: pool_bytes,
        // The state machine syncs before it records an applied index and
        // rolls back to that index on restart: writes in between need not
        // be durable one by one.
        group: 64,
        ..pmlab_kv::Options::default()
    };
    crate::catchup::mark(|| format!("engine {name} open begin"));
    let e = if pool.exists() {
        pmlab_kv::open(&pool, kind, &opts)
    } else {
        pmlab_kv::create(&pool, kind, &opts)
    }
    .map_err(pm_err)?;
    crate::catchup::mark(|| format!("engine {name} open end"));
    Ok(Box::new(PmEngine(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_rollback_and_snapshot() {
        let mut e = MemEngine::new();
        e.put(b"a", Some(b"1"), 1).unwrap();
        e.put(b"b", Some(b"2"), 2).unwrap();
        e.put(b"a", None, 3).unwrap();
        assert_eq!(e.get(b"a").unwrap(), None);
        assert_eq!(e.get_at(b"a", 2).unwrap().as_deref(), Some(&b"1"[..]));
        assert!(
            e.put(b"c", Some(b"x"), 3).is_err(),
            "versions must increase"
        );
        e.rollback_above(2).unwrap();
        assert_eq!(e.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(e.last_version(), 2);
        let snap: Vec<Pair> = e.snapshot(1).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(snap, vec![(b"a".to_vec(), b"1".to_vec())]);
        e.discard_below(2).unwrap();
        assert!(e.get_at(b"a", 1).is_err());
        let mut other = MemEngine::new();
        other
            .restore(7, &mut e.snapshot(2).unwrap().map(|r| r.unwrap()))
            .unwrap();
        assert_eq!(other.last_version(), 7);
        assert_eq!(other.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    }
}
