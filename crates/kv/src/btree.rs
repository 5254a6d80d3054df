//! The `btree` engine: a persistent copy-on-write B+-tree in the pool,
//! holding every retained version.
//!
//! The tree maps (key bytes, version) to a value. Data entries have the key
//! `1 ‖ user key` and the version that wrote them, their value a blob
//! position (0: deletion). Every data version above the discard floor also
//! has a version-index entry `0 ‖ version (8 bytes, big-endian) ‖ user key`,
//! so that rollback and discard find the versions they drop without a scan
//! (the thesis' rollback records, kept in the tree itself).
//!
//! Nodes are fixed-size (16 + 24 × fan-out bytes: a header with a magic
//! and the entry count, then slots of key blob, version, child or value)
//! and never straddle a page; keys and values are blobs (`len u32, bytes`)
//! appended to the stream. A write copies the path from the root to its
//! leaf into new nodes (nodes created since the last commit are changed in
//! place: nothing durable points at them), and the commit flushes them, fences,
//! and swings the root pointer in the root slot: a crash at any point leaves
//! the previous tree whole. Old nodes become garbage, reclaimed by
//! rebuilding the live tree into a fresh chain when the pool's pages in use
//! double.

use crate::error::{Error, ErrorKind, Result};
use crate::pool::{Pool, PoolConfig};
use crate::{
    check_history, check_read, check_sizes, check_version, show, Engine, EngineKind, Options,
    Snapshot, Usage, VersionEntry,
};
use std::cmp::Ordering;
use std::collections::HashSet;
use std::path::Path;

const LEAF: u32 = 0x4641_454c;
const INNER: u32 = 0x524e_4e49;
const DATA: u8 = 1;
const VIDX: u8 = 0;

/// No tree of fan-out 3 or more holding fewer than 2^64 entries is deeper.
const MAX_DEPTH: usize = 48;

/// Smallest and largest fan-out accepted.
pub const FANOUT: std::ops::RangeInclusive<u32> = 3..=64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    keyref: u64,
    ver: u64,
    ptr: u64,
}

#[derive(Clone, Debug)]
struct Node {
    leaf: bool,
    slots: Vec<Slot>,
}

enum Ins {
    One(u64),
    Split(u64, Slot, u64),
}

enum Rem {
    Missing,
    Gone,
    Node(u64),
}

pub(crate) struct BTreeEngine {
    pool: Pool,
    fanout: usize,
    root: u64,
    last: u64,
    floor: u64,
    group: u32,
    pending: u32,
    fresh: HashSet<u64>,
    base_pages: u64,
}

fn data_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(DATA);
    k.extend_from_slice(key);
    k
}

fn vidx_key(version: u64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 9);
    k.push(VIDX);
    k.extend_from_slice(&version.to_be_bytes());
    k.extend_from_slice(key);
    k
}

impl BTreeEngine {
    pub fn create(path: &Path, opts: &Options) -> Result<BTreeEngine> {
        if !FANOUT.contains(&opts.fanout) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "fan-out {}: must be from {} to {}",
                    opts.fanout,
                    FANOUT.start(),
                    FANOUT.end()
                ),
            ));
        }
        let node = 16 + 24 * opts.fanout as u64;
        if node + 16 > opts.page_size as u64 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "fan-out {}: a node of {node} bytes does not fit a page of {}",
                    opts.fanout, opts.page_size
                ),
            ));
        }
        let pool = Pool::create(
            path,
            EngineKind::BTree,
            PoolConfig {
                size: opts.size,
                page_size: opts.page_size,
                param: opts.fanout,
            },
        )?;
        Ok(BTreeEngine::with(pool, opts))
    }

    pub fn open(path: &Path, opts: &Options) -> Result<BTreeEngine> {
        let pool = Pool::open(path, EngineKind::BTree)?;
        let f = pool.param();
        if !FANOUT.contains(&f) || 16 + 24 * f as u64 + 16 > pool.page_size() {
            return Err(Error::inconsistent(format!(
                "btree: header fan-out {f} is out of range"
            )));
        }
        Ok(BTreeEngine::with(pool, opts))
    }

    fn with(pool: Pool, opts: &Options) -> BTreeEngine {
        let m = pool.committed();
        BTreeEngine {
            fanout: pool.param() as usize,
            root: m.root,
            last: m.last,
            floor: m.floor,
            group: opts.group.max(1),
            pending: 0,
            fresh: HashSet::new(),
            base_pages: m.used_pages,
            pool,
        }
    }

    fn node_size(&self) -> u64 {
        16 + 24 * self.fanout as u64
    }

    fn load(&self, ptr: u64) -> Result<Node> {
        let b = self.pool.slice(ptr, self.node_size())?;
        let word = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let magic = u32::from_le_bytes(b[0..4].try_into().unwrap_or([0; 4]));
        let n = u32::from_le_bytes(b[4..8].try_into().unwrap_or([0; 4])) as usize;
        let leaf = match magic {
            LEAF => true,
            INNER => false,
            _ => {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x} has no node magic"
                )))
            }
        };
        if n > self.fanout || n == 0 {
            return Err(Error::inconsistent(format!(
                "btree: node {ptr:#x} holds {n} entries (fan-out {})",
                self.fanout
            )));
        }
        let slots = (0..n)
            .map(|i| Slot {
                keyref: word(16 + 24 * i),
                ver: word(24 + 24 * i),
                ptr: word(32 + 24 * i),
            })
            .collect();
        Ok(Node { leaf, slots })
    }

    /// [`BTreeEngine::load`] of a node `depth` levels below the root: a
    /// damaged tree with a cycle is reported, not followed forever.
    fn load_at(&self, ptr: u64, depth: usize) -> Result<Node> {
        if depth > MAX_DEPTH {
            return Err(Error::inconsistent(format!(
                "btree: deeper than {MAX_DEPTH} levels at node {ptr:#x} (a cycle)"
            )));
        }
        self.load(ptr)
    }

    fn encode(&self, node: &Node) -> Vec<u8> {
        let mut b = vec![0u8; self.node_size() as usize];
        b[0..4].copy_from_slice(&(if node.leaf { LEAF } else { INNER }).to_le_bytes());
        b[4..8].copy_from_slice(&(node.slots.len() as u32).to_le_bytes());
        for (i, s) in node.slots.iter().enumerate() {
            b[16 + 24 * i..24 + 24 * i].copy_from_slice(&s.keyref.to_le_bytes());
            b[24 + 24 * i..32 + 24 * i].copy_from_slice(&s.ver.to_le_bytes());
            b[32 + 24 * i..40 + 24 * i].copy_from_slice(&s.ptr.to_le_bytes());
        }
        b
    }

    /// Write `node` at `ptr` when it is fresh (not reachable from the durable
    /// root), else into a new node; returns where it is.
    fn store(&mut self, ptr: u64, node: &Node) -> Result<u64> {
        let b = self.encode(node);
        let at = if ptr != 0 && self.fresh.contains(&ptr) {
            ptr
        } else {
            let p = self.pool.alloc(self.node_size())?;
            self.fresh.insert(p);
            p
        };
        self.pool.write(at, &b);
        Ok(at)
    }

    fn blob(&mut self, bytes: &[u8]) -> Result<u64> {
        let mut b = Vec::with_capacity(bytes.len() + 4);
        b.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        b.extend_from_slice(bytes);
        self.pool.append(&b)
    }

    fn read_blob(&self, at: u64) -> Result<Vec<u8>> {
        let mut l = [0u8; 4];
        self.pool.read(at, &mut l)?;
        let len = u32::from_le_bytes(l) as usize;
        if len > crate::MAX_VALUE + 16 {
            return Err(Error::inconsistent(format!(
                "btree: blob at {at:#x} claims {len} bytes"
            )));
        }
        let mut v = vec![0u8; len];
        self.pool.read(self.pool.advance(at, 4)?, &mut v)?;
        Ok(v)
    }

    /// Compare the stored key of `s` with `(key, ver)`.
    fn cmp(&self, s: &Slot, key: &[u8], ver: u64) -> Result<Ordering> {
        let len = self
            .pool
            .slice(s.keyref, 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))? as u64;
        let page = self.pool.page_size();
        let pg = self.pool.page_of_end(s.keyref + 1);
        let o = if s.keyref + 4 + len <= pg + page {
            self.pool.slice(s.keyref + 4, len)?.cmp(key)
        } else {
            self.read_blob(s.keyref)?.as_slice().cmp(key)
        };
        Ok(o.then(s.ver.cmp(&ver)))
    }

    /// Index of the child of inner `node` whose range holds `(key, ver)`.
    fn child(&self, node: &Node, key: &[u8], ver: u64) -> Result<usize> {
        let (mut lo, mut hi) = (1usize, node.slots.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.cmp(&node.slots[mid], key, ver)? == Ordering::Greater {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo - 1)
    }

    fn ins(
        &mut self,
        depth: usize,
        ptr: u64,
        key: &[u8],
        ver: u64,
        val: u64,
        kr: &mut Option<u64>,
    ) -> Result<Ins> {
        let mut node = self.load_at(ptr, depth)?;
        if node.leaf {
            let (mut lo, mut hi) = (0usize, node.slots.len());
            let mut exact = None;
            while lo < hi {
                let mid = (lo + hi) / 2;
                let s = node.slots[mid];
                let o = self.cmp(&s, key, ver)?;
                if o.is_ne() && kr.is_none() && self.cmp(&Slot { ver, ..s }, key, ver)?.is_eq() {
                    *kr = Some(s.keyref);
                }
                match o {
                    Ordering::Less => lo = mid + 1,
                    Ordering::Greater => hi = mid,
                    Ordering::Equal => {
                        exact = Some(mid);
                        break;
                    }
                }
            }
            if let Some(i) = exact {
                node.slots[i].ptr = val;
            } else {
                let keyref = match *kr {
                    Some(r) => r,
                    None => {
                        let r = self.blob(key)?;
                        *kr = Some(r);
                        r
                    }
                };
                node.slots.insert(
                    lo,
                    Slot {
                        keyref,
                        ver,
                        ptr: val,
                    },
                );
            }
        } else {
            let c = self.child(&node, key, ver)?;
            match self.ins(depth + 1, node.slots[c].ptr, key, ver, val, kr)? {
                Ins::One(p) => node.slots[c].ptr = p,
                Ins::Split(l, sep, r) => {
                    node.slots[c].ptr = l;
                    node.slots.insert(c + 1, Slot { ptr: r, ..sep });
                }
            }
        }
        if node.slots.len() <= self.fanout {
            return Ok(Ins::One(self.store(ptr, &node)?));
        }
        let right = Node {
            leaf: node.leaf,
            slots: node.slots.split_off(node.slots.len() / 2),
        };
        let sep = right.slots[0];
        let l = self.store(ptr, &node)?;
        let r = self.store(0, &right)?;
        Ok(Ins::Split(l, sep, r))
    }

    fn insert(&mut self, key: &[u8], ver: u64, val: u64) -> Result<()> {
        let mut kr = None;
        if self.root == 0 {
            let keyref = self.blob(key)?;
            let leaf = Node {
                leaf: true,
                slots: vec![Slot {
                    keyref,
                    ver,
                    ptr: val,
                }],
            };
            self.root = self.store(0, &leaf)?;
            return Ok(());
        }
        match self.ins(0, self.root, key, ver, val, &mut kr)? {
            Ins::One(p) => self.root = p,
            Ins::Split(l, sep, r) => {
                let node = Node {
                    leaf: false,
                    slots: vec![
                        Slot {
                            keyref: 0,
                            ver: 0,
                            ptr: l,
                        },
                        Slot { ptr: r, ..sep },
                    ],
                };
                self.root = self.store(0, &node)?;
            }
        }
        Ok(())
    }

    fn rem(&mut self, depth: usize, ptr: u64, key: &[u8], ver: u64) -> Result<Rem> {
        let mut node = self.load_at(ptr, depth)?;
        if node.leaf {
            let mut found = None;
            for (i, s) in node.slots.iter().enumerate() {
                if self.cmp(s, key, ver)?.is_eq() {
                    found = Some(i);
                    break;
                }
            }
            let Some(i) = found else {
                return Ok(Rem::Missing);
            };
            node.slots.remove(i);
        } else {
            let c = self.child(&node, key, ver)?;
            match self.rem(depth + 1, node.slots[c].ptr, key, ver)? {
                Rem::Missing => return Ok(Rem::Missing),
                Rem::Node(p) => node.slots[c].ptr = p,
                Rem::Gone => {
                    node.slots.remove(c);
                }
            }
        }
        if node.slots.is_empty() {
            return Ok(Rem::Gone);
        }
        Ok(Rem::Node(self.store(ptr, &node)?))
    }

    fn remove(&mut self, key: &[u8], ver: u64) -> Result<bool> {
        if self.root == 0 {
            return Ok(false);
        }
        match self.rem(0, self.root, key, ver)? {
            Rem::Missing => return Ok(false),
            Rem::Gone => self.root = 0,
            Rem::Node(p) => self.root = p,
        }
        // Collapse single-child roots; a tree emptied by the removal has
        // no root left to load.
        let mut depth = 0;
        while self.root != 0 {
            let n = self.load_at(self.root, depth)?;
            if n.leaf || n.slots.len() > 1 {
                break;
            }
            self.root = n.slots[0].ptr;
            depth += 1;
        }
        Ok(true)
    }

    /// The greatest entry at or below `(key, ver)`, with its key bytes.
    fn floor_entry(&self, depth: usize, ptr: u64, key: &[u8], ver: u64) -> Result<Option<Slot>> {
        let node = self.load_at(ptr, depth)?;
        if node.leaf {
            for s in node.slots.iter().rev() {
                if self.cmp(s, key, ver)? != Ordering::Greater {
                    return Ok(Some(*s));
                }
            }
            return Ok(None);
        }
        let c = self.child(&node, key, ver)?;
        for j in (0..=c).rev() {
            if let Some(s) = self.floor_entry(depth + 1, node.slots[j].ptr, key, ver)? {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    /// Visit entries from `(key, ver)` on, in order, until `f` says stop.
    fn scan(
        &self,
        ptr: u64,
        from: Option<(&[u8], u64)>,
        f: &mut dyn FnMut(Slot, Vec<u8>) -> Result<bool>,
    ) -> Result<bool> {
        self.scan_at(0, ptr, from, f)
    }

    fn scan_at(
        &self,
        depth: usize,
        ptr: u64,
        from: Option<(&[u8], u64)>,
        f: &mut dyn FnMut(Slot, Vec<u8>) -> Result<bool>,
    ) -> Result<bool> {
        if ptr == 0 {
            return Ok(true);
        }
        let node = self.load_at(ptr, depth)?;
        if node.leaf {
            for s in &node.slots {
                if let Some((k, v)) = from {
                    if self.cmp(s, k, v)? == Ordering::Less {
                        continue;
                    }
                }
                if !f(*s, self.read_blob(s.keyref)?)? {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let c = match from {
            Some((k, v)) => self.child(&node, k, v)?,
            None => 0,
        };
        for j in c..node.slots.len() {
            if !self.scan_at(
                depth + 1,
                node.slots[j].ptr,
                if j == c { from } else { None },
                f,
            )? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Every data entry: (user key, version, value blob or 0).
    fn data(&self) -> Result<Vec<(Vec<u8>, u64, u64)>> {
        let mut out = Vec::new();
        self.scan(self.root, Some((&[DATA], 0)), &mut |s, k| {
            if k.first() != Some(&DATA) {
                return Ok(false);
            }
            out.push((k[1..].to_vec(), s.ver, s.ptr));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Version-index entries with versions in `from..=to`: (version, user key).
    fn versions(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        let start = vidx_key(from, &[]);
        self.scan(self.root, Some((&start, 0)), &mut |_, k| {
            if k.first() != Some(&VIDX) || k.len() < 9 {
                return Ok(false);
            }
            let v = u64::from_be_bytes(k[1..9].try_into().unwrap_or([0; 8]));
            if v > to {
                return Ok(false);
            }
            out.push((v, k[9..].to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    fn commit(&mut self) -> Result<()> {
        self.pool.cur.root = self.root;
        self.pool.cur.last = self.last;
        self.pool.cur.floor = self.floor;
        self.pool.commit();
        self.fresh.clear();
        self.pending = 0;
        if self.pool.cur.used_pages > 2 * self.base_pages + 64 {
            let r = self.compact();
            if r.is_err() {
                // Too full to rebuild now: try again when the pool has grown by half.
                self.base_pages = self.pool.cur.used_pages * 3 / 4;
            }
            crate::auto_compact(r)?;
        }
        Ok(())
    }

    /// Forget the uncommitted group (after a failed write left it half done).
    fn reset(&mut self) {
        let m = self.pool.committed();
        self.pool.cur = m;
        self.root = m.root;
        self.last = m.last;
        self.floor = m.floor;
        self.fresh.clear();
        self.pending = 0;
    }

    /// Build a new tree of `entries` (key order) in a fresh chain and swing to it.
    fn rebuild(
        &mut self,
        entries: Vec<(Vec<u8>, u64, Option<Vec<u8>>)>,
        last: u64,
        floor: u64,
    ) -> Result<()> {
        self.pool.fresh_chain()?;
        self.fresh.clear();
        self.root = 0;
        for (key, ver, value) in &entries {
            let val = match value {
                Some(v) => self.blob(v)?,
                None => 0,
            };
            self.insert(&data_key(key), *ver, val)?;
            if *ver > floor {
                self.insert(&vidx_key(*ver, key), 0, 0)?;
            }
        }
        self.last = last;
        self.floor = floor;
        self.pool.cur.root = self.root;
        self.pool.cur.last = last;
        self.pool.cur.floor = floor;
        self.pool.commit();
        self.fresh.clear();
        self.pending = 0;
        self.pool.finish_gc()?;
        self.base_pages = self.pool.cur.used_pages;
        Ok(())
    }

    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let r = f(self);
        if r.is_err() {
            self.reset();
        }
        r
    }

    /// Check one subtree; returns its depth. `lo`/`hi` bound its entries.
    fn check_node(
        &self,
        depth: usize,
        ptr: u64,
        used: &HashSet<u64>,
        lo: Option<(Vec<u8>, u64)>,
        hi: Option<(Vec<u8>, u64)>,
        seen: &mut u64,
    ) -> Result<usize> {
        let pg = self.pool.page_of_end(ptr + 1);
        if !used.contains(&pg) || ptr + self.node_size() > pg + self.pool.page_size() {
            return Err(Error::inconsistent(format!(
                "btree: node {ptr:#x} is not inside a used page (its page is {})",
                self.pool.page_state(pg)
            )));
        }
        *seen += 1;
        if *seen > self.pool.total_pages() * self.pool.page_size() / self.node_size() {
            return Err(Error::inconsistent(
                "btree: more nodes than the pool can hold (a cycle)",
            ));
        }
        let node = self.load_at(ptr, depth)?;
        let mut keys = Vec::with_capacity(node.slots.len());
        for (i, s) in node.slots.iter().enumerate() {
            if node.leaf || i > 0 {
                if !used.contains(&self.pool.page_of_end(s.keyref + 1)) {
                    return Err(Error::inconsistent(format!(
                        "btree: node {ptr:#x}: key blob {:#x} outside the used pages",
                        s.keyref
                    )));
                }
                keys.push(Some((self.read_blob(s.keyref)?, s.ver)));
            } else {
                keys.push(None);
            }
        }
        let flat: Vec<&(Vec<u8>, u64)> = keys.iter().flatten().collect();
        if flat.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::inconsistent(format!(
                "btree: node {ptr:#x}: keys out of order"
            )));
        }
        if let (Some(lo), Some(first)) = (&lo, flat.first()) {
            if *first < lo {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x}: a key below its separator"
                )));
            }
        }
        if let (Some(hi), Some(last)) = (&hi, flat.last()) {
            if *last >= hi {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x}: a key at or above the next separator"
                )));
            }
        }
        if node.leaf {
            for (s, k) in node.slots.iter().zip(&keys) {
                let Some((k, _)) = k else { continue };
                if k.first() == Some(&DATA)
                    && s.ptr != 0
                    && !used.contains(&self.pool.page_of_end(s.ptr + 1))
                {
                    return Err(Error::inconsistent(format!(
                        "btree: value blob {:#x} outside the used pages",
                        s.ptr
                    )));
                }
                if k.first() != Some(&DATA) && k.first() != Some(&VIDX) {
                    return Err(Error::inconsistent(format!(
                        "btree: key {} has no namespace byte",
                        show(k)
                    )));
                }
            }
            return Ok(1);
        }
        let mut height = None;
        for j in 0..node.slots.len() {
            let clo = if j == 0 { lo.clone() } else { keys[j].clone() };
            let chi = if j + 1 < node.slots.len() {
                keys[j + 1].clone()
            } else {
                hi.clone()
            };
            let d = self.check_node(depth + 1, node.slots[j].ptr, used, clo, chi, seen)?;
            if height.is_some_and(|x| x != d) {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x}: leaves at different depths"
                )));
            }
            height = Some(d);
        }
        Ok(height.unwrap_or(0) + 1)
    }
}

impl Engine for BTreeEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::BTree
    }

    fn get_at(&self, key: &[u8], index: u64) -> Result<Option<Vec<u8>>> {
        check_read(self.floor, index)?;
        if self.root == 0 {
            return Ok(None);
        }
        let dk = data_key(key);
        match self.floor_entry(0, self.root, &dk, index)? {
            Some(s) if s.ptr != 0 && self.cmp(&Slot { ver: 0, ..s }, &dk, 0)?.is_eq() => {
                Ok(Some(self.read_blob(s.ptr)?))
            }
            _ => Ok(None),
        }
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> Result<()> {
        check_version(self.last, version)?;
        check_sizes(key, value)?;
        self.guarded(|t| {
            let val = match value {
                Some(v) => t.blob(v)?,
                None => 0,
            };
            t.insert(&data_key(key), version, val)?;
            t.insert(&vidx_key(version, key), 0, 0)?;
            t.last = version;
            t.pending += 1;
            if t.pending >= t.group {
                t.commit()?;
            }
            Ok(())
        })
    }

    fn sync(&mut self) -> Result<()> {
        if self.pending > 0 {
            self.guarded(|t| t.commit())?;
        }
        Ok(())
    }

    fn last_version(&self) -> u64 {
        self.last
    }

    fn durable_version(&self) -> u64 {
        self.pool.committed().last
    }

    fn floor(&self) -> u64 {
        self.floor
    }

    fn rollback_above(&mut self, index: u64) -> Result<()> {
        check_read(self.floor, index)?;
        self.guarded(|t| {
            if index < t.last {
                for (v, key) in t.versions(index + 1, u64::MAX)? {
                    t.remove(&data_key(&key), v)?;
                    t.remove(&vidx_key(v, &key), 0)?;
                }
                t.last = index;
            }
            t.commit()
        })
    }

    fn discard_below(&mut self, index: u64) -> Result<()> {
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
            return self.sync();
        }
        self.guarded(|t| {
            let below = t.versions(0, index)?;
            let mut keys: Vec<&Vec<u8>> = below.iter().map(|(_, k)| k).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let dk = data_key(key);
                let mut vs = Vec::new();
                t.scan(t.root, Some((&dk, 0)), &mut |s, k| {
                    if k != dk || s.ver > index {
                        return Ok(false);
                    }
                    vs.push((s.ver, s.ptr));
                    Ok(true)
                })?;
                if let Some(&(_, ptr)) = vs.last() {
                    let n = if ptr == 0 { vs.len() } else { vs.len() - 1 };
                    for (v, _) in &vs[..n] {
                        t.remove(&dk, *v)?;
                    }
                }
            }
            for (v, key) in &below {
                t.remove(&vidx_key(*v, key), 0)?;
            }
            t.floor = index;
            t.commit()
        })
    }

    fn snapshot(&self, index: u64) -> Result<Snapshot<'_>> {
        check_read(self.floor, index)?;
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut cur: Option<(Vec<u8>, u64)> = None;
        let flush =
            |cur: &mut Option<(Vec<u8>, u64)>, out: &mut Vec<(Vec<u8>, Vec<u8>)>| -> Result<()> {
                if let Some((k, p)) = cur.take() {
                    if p != 0 {
                        out.push((k, self.read_blob(p)?));
                    }
                }
                Ok(())
            };
        for (k, v, p) in self.data()? {
            if cur.as_ref().is_some_and(|(ck, _)| *ck != k) {
                flush(&mut cur, &mut out)?;
            }
            if v <= index {
                cur = Some((k, p));
            }
        }
        flush(&mut cur, &mut out)?;
        Ok(Snapshot::new(index, Box::new(out.into_iter().map(Ok))))
    }

    fn restore(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let map = crate::restore_entries(entries)?;
        let entries = map.into_iter().map(|(k, v)| (k, index, Some(v))).collect();
        self.guarded(|t| t.rebuild(entries, index, index))
    }

    fn history(&self) -> Result<Vec<VersionEntry>> {
        self.data()?
            .into_iter()
            .map(|(key, version, p)| {
                Ok(VersionEntry {
                    key,
                    version,
                    value: if p == 0 {
                        None
                    } else {
                        Some(self.read_blob(p)?)
                    },
                })
            })
            .collect()
    }

    fn check(&self) -> Result<()> {
        if self.pending > 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "btree: check with unsynced writes: sync first",
            ));
        }
        let used = self.pool.check_pages()?;
        if self.root != 0 {
            let mut seen = 0;
            self.check_node(0, self.root, &used, None, None, &mut seen)?;
        }
        let h = self.history()?;
        check_history(&h, self.last, self.floor)?;
        let above: Vec<(u64, Vec<u8>)> = {
            let mut v: Vec<(u64, Vec<u8>)> = h
                .iter()
                .filter(|e| e.version > self.floor)
                .map(|e| (e.version, e.key.clone()))
                .collect();
            v.sort();
            v
        };
        let idx = self.versions(0, u64::MAX)?;
        if idx != above {
            let i = idx
                .iter()
                .zip(&above)
                .position(|(a, b)| a != b)
                .unwrap_or(idx.len().min(above.len()));
            let what = match (idx.get(i), above.get(i)) {
                (Some((v, k)), _) => format!("version {v} of key {}", show(k)),
                (None, Some((v, k))) => {
                    format!("version {v} of key {} has no index entry", show(k))
                }
                _ => String::new(),
            };
            return Err(Error::inconsistent(format!(
                "btree: the version index and the data entries above the floor differ at {what}"
            )));
        }
        Ok(())
    }

    fn compact(&mut self) -> Result<()> {
        self.sync()?;
        let entries = self
            .history()?
            .into_iter()
            .map(|e| (e.key, e.version, e.value))
            .collect();
        let (last, floor) = (self.last, self.floor);
        self.guarded(|t| t.rebuild(entries, last, floor))
    }

    fn usage(&self) -> Usage {
        let h = self.history().unwrap_or_default();
        Usage {
            pm_bytes: self.pool.used_bytes(),
            data_bytes: h
                .iter()
                .map(|e| (e.key.len() + e.value.as_ref().map_or(0, |v| v.len())) as u64)
                .sum(),
            versions: h.len() as u64,
            compactions: self.pool.chains(),
        }
    }
}
