//! The reference model: the engines' semantics on a plain `BTreeMap`.

use crate::error::{Error, ErrorKind, Result};
use crate::{check_read, check_sizes, check_version, hex, unhex, VersionEntry};
use std::collections::BTreeMap;

/// A key's versions, oldest first: `None` for a deletion.
type Versions = Vec<(u64, Option<Vec<u8>>)>;

/// Every retained version of every key, in DRAM; what every engine must
/// match. Its text form (see [`Model::to_text`]) is what `pmkv check
/// --expect` reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    map: BTreeMap<Vec<u8>, Versions>,
    last: u64,
    floor: u64,
}

impl Model {
    /// An empty model.
    pub fn new() -> Model {
        Model::default()
    }

    /// The highest version written.
    pub fn last_version(&self) -> u64 {
        self.last
    }

    /// The discard floor.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The value of `key` as of `index`.
    pub fn get_at(&self, key: &[u8], index: u64) -> Result<Option<Vec<u8>>> {
        check_read(self.floor, index)?;
        Ok(self
            .map
            .get(key)
            .and_then(|vs| vs.iter().rev().find(|(v, _)| *v <= index))
            .and_then(|(_, val)| val.clone()))
    }

    /// The newest value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.get_at(key, u64::MAX).ok().flatten()
    }

    /// Store a value or deletion at `version`.
    pub fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> Result<()> {
        check_version(self.last, version)?;
        check_sizes(key, value)?;
        self.map
            .entry(key.to_vec())
            .or_default()
            .push((version, value.map(|v| v.to_vec())));
        self.last = version;
        Ok(())
    }

    /// Delete `key`; returns whether it existed.
    pub fn delete(&mut self, key: &[u8], version: u64) -> Result<bool> {
        check_version(self.last, version)?;
        if self.get(key).is_none() {
            return Ok(false);
        }
        self.put(key, None, version)?;
        Ok(true)
    }

    /// Compare-and-set, as [`crate::Engine::compare_and_set`].
    pub fn compare_and_set(
        &mut self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
        version: u64,
    ) -> Result<bool> {
        check_version(self.last, version)?;
        if self.get(key).as_deref() != expected {
            return Ok(false);
        }
        self.put(key, Some(new), version)?;
        Ok(true)
    }

    /// Remove every version above `index`.
    pub fn rollback_above(&mut self, index: u64) -> Result<()> {
        check_read(self.floor, index)?;
        for vs in self.map.values_mut() {
            vs.retain(|(v, _)| *v <= index);
        }
        self.map.retain(|_, vs| !vs.is_empty());
        self.last = self.last.min(index);
        Ok(())
    }

    /// Drop versions no reader at or above `index` needs.
    pub fn discard_below(&mut self, index: u64) -> Result<()> {
        if index > self.last {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "discard below {index}: above the last version {}",
                    self.last
                ),
            ));
        }
        if index <= self.floor {
            return Ok(());
        }
        self.floor = index;
        for vs in self.map.values_mut() {
            if let Some(k) = vs.iter().rposition(|(v, _)| *v <= index) {
                let drop_it = vs[k].1.is_none();
                vs.drain(..if drop_it { k + 1 } else { k });
            }
        }
        self.map.retain(|_, vs| !vs.is_empty());
        Ok(())
    }

    /// The live keys and values as of `index`.
    pub fn snapshot(&self, index: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        check_read(self.floor, index)?;
        Ok(self
            .map
            .iter()
            .filter_map(|(k, vs)| {
                let (_, val) = vs.iter().rev().find(|(v, _)| *v <= index)?;
                Some((k.clone(), val.clone()?))
            })
            .collect())
    }

    /// Replace the contents with `entries` at `index`.
    pub fn restore(&mut self, index: u64, entries: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) {
        self.map.clear();
        for (k, v) in entries {
            self.map.insert(k, vec![(index, Some(v))]);
        }
        self.last = index;
        self.floor = index;
    }

    /// Every retained version, sorted by key then version.
    pub fn history(&self) -> Vec<VersionEntry> {
        self.map
            .iter()
            .flat_map(|(k, vs)| {
                vs.iter().map(move |(v, val)| VersionEntry {
                    key: k.clone(),
                    version: *v,
                    value: val.clone(),
                })
            })
            .collect()
    }

    /// The text form: a first line `pmkv-model 1 last=L floor=F`, then one
    /// line per version, `KEY_HEX VERSION VALUE_HEX` (`-` for a deletion).
    pub fn to_text(&self) -> String {
        let mut s = format!("pmkv-model 1 last={} floor={}\n", self.last, self.floor);
        for e in self.history() {
            let v = e.value.as_deref().map(hex).unwrap_or_else(|| "-".into());
            s.push_str(&format!("{} {} {}\n", hex(&e.key), e.version, v));
        }
        s
    }

    /// Parse [`Model::to_text`]'s form; the error names the bad line.
    pub fn from_text(text: &str) -> Result<Model> {
        let bad = |n: usize, what: &str| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("model line {n}: {what}"),
            )
        };
        let mut lines = text.lines();
        let head = lines
            .next()
            .ok_or_else(|| bad(1, "empty file, expected 'pmkv-model 1 last=L floor=F'"))?;
        let f: Vec<&str> = head.split_whitespace().collect();
        let num = |s: Option<&&str>, p: &str| {
            s.and_then(|s| s.strip_prefix(p))
                .and_then(|s| s.parse::<u64>().ok())
        };
        let (last, floor) = match (
            f.first(),
            f.get(1),
            num(f.get(2), "last="),
            num(f.get(3), "floor="),
        ) {
            (Some(&"pmkv-model"), Some(&"1"), Some(l), Some(fl)) if f.len() == 4 && fl <= l => {
                (l, fl)
            }
            _ => return Err(bad(1, "expected 'pmkv-model 1 last=L floor=F' with F <= L")),
        };
        let mut m = Model {
            map: BTreeMap::new(),
            last,
            floor,
        };
        for (i, line) in lines.enumerate() {
            let n = i + 2;
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 3 {
                return Err(bad(n, "expected 'KEY_HEX VERSION VALUE_HEX|-'"));
            }
            let key = unhex(f[0]).ok_or_else(|| bad(n, "key is not hex"))?;
            let version: u64 = f[1]
                .parse()
                .map_err(|_| bad(n, "version is not a number"))?;
            let value = if f[2] == "-" {
                None
            } else {
                Some(unhex(f[2]).ok_or_else(|| bad(n, "value is not hex"))?)
            };
            let vs = m.map.entry(key).or_default();
            if vs.last().is_some_and(|(v, _)| *v >= version) || version > last || version == 0 {
                return Err(bad(
                    n,
                    "versions must increase per key, from 1 to the last version",
                ));
            }
            vs.push((version, value));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_keeps_what_readers_at_the_floor_need() {
        let mut m = Model::new();
        m.put(b"a", Some(b"1"), 1).unwrap();
        m.put(b"a", Some(b"2"), 2).unwrap();
        m.put(b"b", Some(b"x"), 3).unwrap();
        m.put(b"b", None, 4).unwrap();
        m.put(b"a", Some(b"3"), 5).unwrap();
        m.discard_below(4).unwrap();
        assert_eq!(m.get_at(b"a", 4).unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(m.get_at(b"a", 5).unwrap().as_deref(), Some(&b"3"[..]));
        assert_eq!(m.get_at(b"b", 4).unwrap(), None);
        assert_eq!(
            m.get_at(b"a", 3).err().unwrap().kind(),
            ErrorKind::Discarded
        );
        assert_eq!(m.history().len(), 2);
        let back = Model::from_text(&m.to_text()).unwrap();
        assert_eq!(back, m);
        m.rollback_above(4).unwrap();
        assert_eq!(m.get(b"a").as_deref(), Some(&b"2"[..]));
        assert_eq!(m.last_version(), 4);
        assert_eq!(
            m.rollback_above(3).err().unwrap().kind(),
            ErrorKind::Discarded
        );
    }

    #[test]
    fn a_bad_model_file_is_named_by_line() {
        let e = Model::from_text("pmkv-model 1 last=3 floor=0\n61 2 62\n61 2 63\n")
            .err()
            .unwrap();
        assert!(e.to_string().contains("line 3"), "{e}");
        assert!(Model::from_text("nonsense").is_err());
    }
}
