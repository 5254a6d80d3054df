//! The DRAM index shared by the engines that keep records in a list
//! (`list`, `wal`, `anchor`): every retained version of every key, and the
//! versions above the floor by number (for rollback and discard).

use crate::check_read;
use crate::error::{Error, ErrorKind, Result};
use std::collections::BTreeMap;

/// One version of a key in the index: `None` for a deletion.
pub(crate) type Versions<V> = Vec<(u64, Option<V>)>;

/// What a removal took out: key, version, value handle.
pub(crate) type Removed<V> = Vec<(Vec<u8>, u64, Option<V>)>;

pub(crate) struct Index<V> {
    pub keys: BTreeMap<Vec<u8>, Versions<V>>,
    /// Versions above the floor, each with the key it wrote.
    by_version: BTreeMap<u64, Vec<u8>>,
    pub last: u64,
    pub floor: u64,
    pub versions: u64,
}

impl<V> Index<V> {
    pub fn new(last: u64, floor: u64) -> Index<V> {
        Index {
            keys: BTreeMap::new(),
            by_version: BTreeMap::new(),
            last,
            floor,
            versions: 0,
        }
    }

    /// Each key's value as of `index` (keys deleted then left out), the
    /// value read from its handle with `value`: the engines' snapshot.
    pub fn snapshot_at<'a>(
        &'a self,
        index: u64,
        value: impl Fn(&V) -> Result<Vec<u8>> + 'a,
    ) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + 'a {
        self.keys.iter().filter_map(move |(k, vs)| {
            let (_, val) = vs.iter().rev().find(|(v, _)| *v <= index)?;
            let val = val.as_ref()?;
            Some(value(val).map(|v| (k.clone(), v)))
        })
    }

    /// The versions above `index` and above the floor, with their keys, in
    /// version order.
    pub fn written_above(&self, index: u64) -> Vec<(u64, Vec<u8>)> {
        self.by_version
            .range(index.saturating_add(1)..)
            .map(|(v, k)| (*v, k.clone()))
            .collect()
    }

    /// Add a version; versions of a key must arrive in increasing order.
    pub fn push(&mut self, key: &[u8], version: u64, val: Option<V>) -> Result<()> {
        let vs = match self.keys.get_mut(key) {
            Some(vs) => vs,
            None => self.keys.entry(key.to_vec()).or_default(),
        };
        if let Some((v, _)) = vs.last() {
            if *v >= version {
                return Err(Error::inconsistent(format!(
                    "key {}: version {version} after version {v}",
                    crate::show(key)
                )));
            }
        }
        vs.push((version, val));
        self.versions += 1;
        if version > self.floor {
            self.by_version.insert(version, key.to_vec());
        }
        Ok(())
    }

    /// The newest version of `key` at or below `index`: `Some(None)` is a deletion.
    pub fn lookup(&self, key: &[u8], index: u64) -> Result<Option<&Option<V>>> {
        check_read(self.floor, index)?;
        Ok(self
            .keys
            .get(key)
            .and_then(|vs| vs.iter().rev().find(|(v, _)| *v <= index))
            .map(|(_, val)| val))
    }

    /// Remove every version above `index`; returns what was removed.
    pub fn rollback(&mut self, index: u64) -> Result<Removed<V>> {
        check_read(self.floor, index)?;
        let above = self.by_version.split_off(&(index + 1));
        let mut out = Vec::new();
        for (version, key) in above {
            if let Some(vs) = self.keys.get_mut(&key) {
                if let Some(i) = vs.iter().position(|(v, _)| *v == version) {
                    let (_, val) = vs.remove(i);
                    out.push((key.clone(), version, val));
                    self.versions -= 1;
                }
                if vs.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
        self.last = self.last.min(index);
        Ok(out)
    }

    /// Raise the floor to `index`, dropping versions no reader needs.
    pub fn discard(&mut self, index: u64) -> Result<Removed<V>> {
        if index > self.last {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "discard below {index}: above the last version {}",
                    self.last
                ),
            ));
        }
        let mut out = Vec::new();
        if index <= self.floor {
            return Ok(out);
        }
        let above = self.by_version.split_off(&(index + 1));
        let touched = std::mem::replace(&mut self.by_version, above);
        self.floor = index;
        let mut keys: Vec<Vec<u8>> = touched.into_values().collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let Some(vs) = self.keys.get_mut(&key) else {
                continue;
            };
            if let Some(k) = vs.iter().rposition(|(v, _)| *v <= index) {
                let n = if vs[k].1.is_none() { k + 1 } else { k };
                for (v, val) in vs.drain(..n) {
                    out.push((key.clone(), v, val));
                    self.versions -= 1;
                }
            }
            if vs.is_empty() {
                self.keys.remove(&key);
            }
        }
        Ok(out)
    }
}
