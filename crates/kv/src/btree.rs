//! The `btree` engine: a persistent copy-on-write B+-tree in the pool with
//! one entry per key and the key's versions in a chain.
//!
//! # Layout (pool layout version 2)
//!
//! A node is `16 + 32 × fan-out` bytes and never straddles a page: a
//! header (magic `LEAF` or `INNR`, entry count u32, generation u64: the
//! sequence number of the commit that made it durable) and slots of
//! 32 bytes: the key's first 12 bytes (big-endian u64 and u32, zero
//! padded), its length u32, the position of its bytes u64, then the child
//! (inner node) or the newest version record of the key (leaf). Keys of
//! up to 12 bytes compare without leaving the node; longer keys follow the
//! key position only when the first 12 bytes tie. The first slot of an
//! inner node carries no key (its child holds everything below the second
//! slot's key).
//!
//! A version record is `ver u64, prev u64, gprev u64, key u64, value
//! length u32 (u32::MAX: a deletion), key length u32`, followed by the
//! value in the stream. `prev` is the key's previous version (versions
//! strictly fall along it), `gprev` the record of the next lower version
//! above the discard floor of any key: the chain from the root slot's
//! engine word (`aux`) lists every version above the floor, newest first,
//! which is how rollback and discard find their versions without a scan
//! (the thesis' rollback records, without a second tree entry).
//!
//! A key's retained versions are its chain from the newest down to the
//! first at or below the discard floor, that one included unless it is a
//! deletion; records further down are garbage until the next rebuild.
//!
//! # Writes and crash consistency
//!
//! A write appends its record (and, for a new key, the key bytes) and
//! copies the path from the root to its leaf; a node whose generation is
//! the one being built is changed in place (nothing durable points at it).
//! The commit flushes what was written, fences, and swings the root
//! pointer, newest record, last version and floor in the root slot: a crash
//! at any point leaves the previous tree whole. The nodes a commit replaced
//! are reused by the following groups once it is durable (nothing durable
//! reaches them then; the list is in DRAM and empty after a reopen). Other
//! garbage (records dropped by rollback and discard, nodes replaced just
//! before a close) is reclaimed by rebuilding the retained versions into a
//! fresh chain (bulk-loaded, leaves three-quarters full) when the pool's
//! pages in use have doubled and the live bytes are under half of them.

use crate::error::{Error, ErrorKind, Result};
use crate::pool::{Pool, PoolConfig, CB};
use crate::{
    check_history, check_read, check_sizes, check_version, show, Engine, EngineKind, Options,
    Snapshot, Usage, VersionEntry,
};
use std::cmp::Ordering;
use std::collections::HashSet;
use std::path::Path;

const LEAF: u32 = 0x4641_454c;
const INNER: u32 = 0x524e_4e49;
/// Node header bytes: magic, count, generation.
const HDR: usize = 16;
/// Slot bytes: prefix (12), key length, key position, child or record.
const SLOT: usize = 32;
/// Key bytes held in a slot.
const PFX: usize = 12;
/// Version record header bytes.
const REC: u64 = 40;
/// Value length of a deletion record.
const DELETED: u32 = u32::MAX;

/// No tree of fan-out 3 or more holding fewer than 2^64 entries is deeper.
const MAX_DEPTH: usize = 48;

/// Smallest and largest fan-out accepted.
pub const FANOUT: std::ops::RangeInclusive<u32> = 3..=64;

/// Room for one node of the largest fan-out plus the slot that splits it.
const BUF: usize = HDR + SLOT * (64 + 1);

/// Bytes of a node of fan-out `f`.
fn node_bytes(f: u32) -> u64 {
    (HDR + SLOT * f as usize) as u64
}

fn rd64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
}

fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))
}

/// The first 12 bytes of `key`, zero padded, as two big-endian numbers
/// (so that numeric order is byte order).
fn prefix(key: &[u8]) -> (u64, u32) {
    let mut p = [0u8; PFX];
    let n = key.len().min(PFX);
    p[..n].copy_from_slice(&key[..n]);
    (
        u64::from_be_bytes(p[0..8].try_into().unwrap_or([0; 8])),
        u32::from_be_bytes(p[8..12].try_into().unwrap_or([0; 4])),
    )
}

/// A key being searched for.
struct Probe<'a> {
    key: &'a [u8],
    hi: u64,
    lo: u32,
}

impl<'a> Probe<'a> {
    fn new(key: &'a [u8]) -> Probe<'a> {
        let (hi, lo) = prefix(key);
        Probe { key, hi, lo }
    }
}

/// A slot's key: prefix, length and where its bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KeyRef {
    hi: u64,
    lo: u32,
    len: u32,
    at: u64,
}

/// A slot as written: key and pointer.
fn slot_bytes(k: &KeyRef, ptr: u64) -> [u8; SLOT] {
    let mut s = [0u8; SLOT];
    s[0..8].copy_from_slice(&k.hi.to_le_bytes());
    s[8..12].copy_from_slice(&k.lo.to_le_bytes());
    s[12..16].copy_from_slice(&k.len.to_le_bytes());
    s[16..24].copy_from_slice(&k.at.to_le_bytes());
    s[24..32].copy_from_slice(&ptr.to_le_bytes());
    s
}

/// A node read in place.
struct NodeRef<'a> {
    leaf: bool,
    n: usize,
    b: &'a [u8],
}

impl NodeRef<'_> {
    fn key(&self, i: usize) -> KeyRef {
        let o = HDR + SLOT * i;
        KeyRef {
            hi: rd64(self.b, o),
            lo: rd32(self.b, o + 8),
            len: rd32(self.b, o + 12),
            at: rd64(self.b, o + 16),
        }
    }

    fn ptr(&self, i: usize) -> u64 {
        rd64(self.b, HDR + SLOT * i + 24)
    }

    fn gen(&self) -> u64 {
        rd64(self.b, 8)
    }
}

/// A version record's header.
#[derive(Clone, Copy, Debug)]
struct Rec {
    ver: u64,
    prev: u64,
    gprev: u64,
    key: u64,
    vlen: u32,
    klen: u32,
}

impl Rec {
    fn deleted(&self) -> bool {
        self.vlen == DELETED
    }
}

/// What a level hands to its parent after a change.
enum Up {
    One(u64),
    Split(u64, [u8; SLOT], u64),
    Gone,
}

/// A change to one node's slots.
enum Edit {
    /// Set slot i's pointer.
    Set(usize, u64),
    /// Insert a slot at i.
    Insert(usize, [u8; SLOT]),
    /// Remove slot i.
    Remove(usize),
    /// Set slot i's pointer and insert a slot after it (a child split).
    Split(usize, u64, [u8; SLOT]),
}

pub(crate) struct BTreeEngine {
    pool: Pool,
    fanout: u32,
    root: u64,
    /// Newest version record (the head of the version chain).
    vhead: u64,
    last: u64,
    floor: u64,
    group: u32,
    pending: u32,
    base_pages: u64,
    path: Vec<(u64, usize)>,
    /// Nodes replaced since the last commit: free once it is durable.
    retired: Vec<u64>,
    /// Nodes no durable tree reaches, reused before the stream grows.
    spare: Vec<u64>,
    /// Scratch node images (a node and the right half of a split).
    scratch: [Vec<u8>; 2],
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
        let node = node_bytes(opts.fanout);
        if node + CB > opts.page_size as u64 {
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
        if !FANOUT.contains(&f) || node_bytes(f) + CB > pool.page_size() {
            return Err(Error::inconsistent(format!(
                "btree: header fan-out {f} is out of range"
            )));
        }
        Ok(BTreeEngine::with(pool, opts))
    }

    fn with(pool: Pool, opts: &Options) -> BTreeEngine {
        let m = pool.committed();
        BTreeEngine {
            fanout: pool.param(),
            root: m.root,
            vhead: m.aux,
            last: m.last,
            floor: m.floor,
            group: opts.group.max(1),
            pending: 0,
            base_pages: m.used_pages,
            pool,
            path: Vec::with_capacity(MAX_DEPTH),
            retired: Vec::new(),
            spare: Vec::new(),
            scratch: [vec![0u8; BUF], vec![0u8; BUF]],
        }
    }

    fn node_size(&self) -> u64 {
        node_bytes(self.fanout)
    }

    /// The generation of nodes written in the current group.
    fn gen(&self) -> u64 {
        self.pool.committed().seq + 1
    }

    /// The node at `ptr`, `depth` levels below the root (a damaged tree
    /// with a cycle is reported, not followed forever).
    fn node(&self, ptr: u64, depth: usize) -> Result<NodeRef<'_>> {
        if depth > MAX_DEPTH {
            return Err(Error::inconsistent(format!(
                "btree: deeper than {MAX_DEPTH} levels at node {ptr:#x} (a cycle)"
            )));
        }
        let b = self.pool.slice(ptr, self.node_size())?;
        let leaf = match rd32(b, 0) {
            LEAF => true,
            INNER => false,
            _ => {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x} has no node magic"
                )))
            }
        };
        let n = rd32(b, 4) as usize;
        if n > self.fanout as usize || n == 0 {
            return Err(Error::inconsistent(format!(
                "btree: node {ptr:#x} holds {n} entries (fan-out {})",
                self.fanout
            )));
        }
        Ok(NodeRef { leaf, n, b })
    }

    /// The bytes of the key `k`.
    fn key_bytes(&self, k: &KeyRef) -> Result<Vec<u8>> {
        self.read_key(k.at, k.len)
    }

    fn read_key(&self, at: u64, len: u32) -> Result<Vec<u8>> {
        if len as usize > crate::MAX_KEY {
            return Err(Error::inconsistent(format!(
                "btree: key at {at:#x} claims {len} bytes"
            )));
        }
        let mut v = vec![0u8; len as usize];
        self.pool.read(at, &mut v)?;
        Ok(v)
    }

    /// Compare the stored key `k` with the probe.
    fn cmp(&self, k: &KeyRef, p: &Probe) -> Result<Ordering> {
        let o = (k.hi, k.lo).cmp(&(p.hi, p.lo));
        let (a, b) = (k.len as usize, p.key.len());
        if o.is_ne() || a <= PFX || b <= PFX {
            // Equal prefixes and a short key: the shorter is a prefix of the other.
            return Ok(o.then(a.cmp(&b)));
        }
        let end = k.at.checked_add(a as u64);
        let pg = self.pool.page_of_end(k.at + 1);
        if end.is_some_and(|e| e <= pg + self.pool.page_size()) {
            let tail = self.pool.slice(k.at + PFX as u64, (a - PFX) as u64)?;
            Ok(tail.cmp(&p.key[PFX..]))
        } else {
            Ok(self.key_bytes(k)?.as_slice().cmp(p.key))
        }
    }

    /// Compare slot `i`'s key with the probe, loading its fields only as
    /// far as they decide (most keys differ in their first 8 bytes).
    fn cmp_slot(&self, n: &NodeRef, i: usize, p: &Probe) -> Result<Ordering> {
        let o = HDR + SLOT * i;
        let hi = rd64(n.b, o);
        if hi != p.hi {
            return Ok(hi.cmp(&p.hi));
        }
        let lo = rd32(n.b, o + 8);
        if lo != p.lo {
            return Ok(lo.cmp(&p.lo));
        }
        self.cmp(&n.key(i), p)
    }

    /// Leaf search: `Ok(i)` when slot i holds the key, else `Err(i)`, where it goes.
    fn search_leaf(&self, n: &NodeRef, p: &Probe) -> Result<std::result::Result<usize, usize>> {
        let (mut lo, mut hi) = (0usize, n.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.cmp_slot(n, mid, p)? {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(Ok(mid)),
            }
        }
        Ok(Err(lo))
    }

    /// Inner search: the child whose range holds the key.
    fn search_inner(&self, n: &NodeRef, p: &Probe) -> Result<usize> {
        let (mut lo, mut hi) = (1usize, n.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.cmp_slot(n, mid, p)? == Ordering::Greater {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo - 1)
    }

    /// Walk from the root to the leaf for `p`, recording (inner node,
    /// child index) in `path`; the leaf and where the key is or goes.
    fn descend(
        &self,
        p: &Probe,
        path: &mut Vec<(u64, usize)>,
    ) -> Result<Option<(u64, std::result::Result<usize, usize>)>> {
        path.clear();
        let mut at = self.root;
        if at == 0 {
            return Ok(None);
        }
        loop {
            let n = self.node(at, path.len())?;
            if n.leaf {
                return Ok(Some((at, self.search_leaf(&n, p)?)));
            }
            let c = self.search_inner(&n, p)?;
            path.push((at, c));
            at = n.ptr(c);
        }
    }

    /// The leaf slot of `key`: its key and newest record.
    fn lookup(&self, key: &[u8]) -> Result<Option<(KeyRef, u64)>> {
        let p = Probe::new(key);
        let mut at = self.root;
        let mut depth = 0;
        while at != 0 {
            let n = self.node(at, depth)?;
            if n.leaf {
                return Ok(match self.search_leaf(&n, &p)? {
                    Ok(i) => Some((n.key(i), n.ptr(i))),
                    Err(_) => None,
                });
            }
            at = n.ptr(self.search_inner(&n, &p)?);
            depth += 1;
        }
        Ok(None)
    }

    /// Write a node of `n` slots (`buf[HDR..]`) at `at` when it belongs to
    /// the group being built, else into a new node; returns where it is.
    ///
    /// `changed` (byte range of `buf`, and whether the header changed)
    /// limits what is written back to a node changed in place.
    fn put_node(
        &mut self,
        at: u64,
        leaf: bool,
        buf: &mut [u8],
        n: usize,
        changed: Option<(usize, usize, bool)>,
    ) -> Result<u64> {
        let gen = self.gen();
        let fresh = at != 0 && self.pool.u64_at(at + 8)? == gen;
        let to = if fresh {
            at
        } else {
            if at != 0 {
                self.retired.push(at);
            }
            match self.spare.pop() {
                Some(p) => p,
                None => self.pool.alloc(self.node_size())?,
            }
        };
        buf[0..4].copy_from_slice(&(if leaf { LEAF } else { INNER }).to_le_bytes());
        buf[4..8].copy_from_slice(&(n as u32).to_le_bytes());
        buf[8..16].copy_from_slice(&gen.to_le_bytes());
        match changed {
            Some((a, b, header)) if fresh => {
                if header {
                    self.pool.write(to, &buf[..HDR]);
                }
                self.pool.write(to + a as u64, &buf[a..b]);
            }
            _ => self.pool.write(to, &buf[..HDR + SLOT * n]),
        }
        Ok(to)
    }

    /// Apply `edit` to the leaf at `leaf` below `path`, copying the path
    /// (splitting full nodes, dropping empty ones) up to a new root.
    fn apply(&mut self, path: &[(u64, usize)], leaf: u64, edit: Edit) -> Result<()> {
        let [mut buf, mut right] = std::mem::take(&mut self.scratch);
        let r = self.apply_with(path, leaf, edit, &mut buf, &mut right);
        self.scratch = [buf, right];
        r
    }

    fn apply_with(
        &mut self,
        path: &[(u64, usize)],
        leaf: u64,
        mut edit: Edit,
        buf: &mut [u8],
        right: &mut [u8],
    ) -> Result<()> {
        let f = self.fanout as usize;
        let mut at = leaf;
        let mut level = path.len();
        loop {
            let (is_leaf, mut n) = {
                let node = self.node(at, level)?;
                buf[HDR..HDR + SLOT * node.n].copy_from_slice(&node.b[HDR..HDR + SLOT * node.n]);
                (node.leaf, node.n)
            };
            let set = |buf: &mut [u8], i: usize, p: u64| {
                let o = HDR + SLOT * i + 24;
                buf[o..o + 8].copy_from_slice(&p.to_le_bytes());
            };
            let insert = |buf: &mut [u8], n: usize, i: usize, s: &[u8; SLOT]| {
                buf.copy_within(HDR + SLOT * i..HDR + SLOT * n, HDR + SLOT * (i + 1));
                buf[HDR + SLOT * i..HDR + SLOT * (i + 1)].copy_from_slice(s);
            };
            // What changed, for a node rewritten in place: slot bytes, header.
            let changed = match edit {
                Edit::Set(i, p) => {
                    set(buf, i, p);
                    (HDR + SLOT * i + 24, HDR + SLOT * i + 32, false)
                }
                Edit::Insert(i, s) => {
                    insert(buf, n, i, &s);
                    n += 1;
                    (HDR + SLOT * i, HDR + SLOT * n, true)
                }
                Edit::Remove(i) => {
                    buf.copy_within(HDR + SLOT * (i + 1)..HDR + SLOT * n, HDR + SLOT * i);
                    n -= 1;
                    (HDR + SLOT * i, HDR + SLOT * n, true)
                }
                Edit::Split(i, l, s) => {
                    set(buf, i, l);
                    insert(buf, n, i + 1, &s);
                    n += 1;
                    (HDR + SLOT * i, HDR + SLOT * n, true)
                }
            };
            let up = if n == 0 {
                self.retire(at);
                Up::Gone
            } else if n <= f {
                Up::One(self.put_node(at, is_leaf, buf, n, Some(changed))?)
            } else {
                let half = n / 2;
                let moved = n - half;
                right[HDR..HDR + SLOT * moved]
                    .copy_from_slice(&buf[HDR + SLOT * half..HDR + SLOT * n]);
                let mut sep = [0u8; SLOT];
                sep.copy_from_slice(&right[HDR..HDR + SLOT]);
                let l = self.put_node(at, is_leaf, buf, half, None)?;
                let r = self.put_node(0, is_leaf, right, moved, None)?;
                Up::Split(l, sep, r)
            };
            if level == 0 {
                match up {
                    Up::One(p) => self.root = p,
                    Up::Gone => self.root = 0,
                    Up::Split(l, sep, r) => {
                        buf[HDR..HDR + SLOT].copy_from_slice(&[0u8; SLOT]);
                        set(buf, 0, l);
                        buf[HDR + SLOT..HDR + 2 * SLOT].copy_from_slice(&sep);
                        set(buf, 1, r);
                        self.root = self.put_node(0, false, buf, 2, None)?;
                    }
                }
                break;
            }
            level -= 1;
            let (parent, i) = path[level];
            edit = match up {
                Up::One(p) => Edit::Set(i, p),
                Up::Gone => Edit::Remove(i),
                Up::Split(l, sep, r) => {
                    let mut s = sep;
                    s[24..32].copy_from_slice(&r.to_le_bytes());
                    Edit::Split(i, l, s)
                }
            };
            at = parent;
        }
        // A root with one child is that child.
        let mut depth = 0;
        while self.root != 0 {
            let n = self.node(self.root, depth)?;
            if n.leaf || n.n > 1 {
                break;
            }
            let (old, child) = (self.root, n.ptr(0));
            self.retire(old);
            self.root = child;
            depth += 1;
        }
        Ok(())
    }

    /// `at` leaves the tree: its room is free once the commit that drops it is durable.
    fn retire(&mut self, at: u64) {
        self.retired.push(at);
    }

    /// Point `key`'s leaf slot at `head` (a new record), inserting the key
    /// (`new_key`: its stored bytes) when absent; `head` 0 removes the key.
    fn set_head(&mut self, key: &[u8], head: u64, new_key: Option<KeyRef>) -> Result<()> {
        let p = Probe::new(key);
        let mut path = std::mem::take(&mut self.path);
        let r = (|| {
            let Some((leaf, pos)) = self.descend(&p, &mut path)? else {
                if let (Some(k), true) = (new_key, head != 0) {
                    let mut buf = [0u8; BUF];
                    buf[HDR..HDR + SLOT].copy_from_slice(&slot_bytes(&k, head));
                    self.root = self.put_node(0, true, &mut buf, 1, None)?;
                }
                return Ok(());
            };
            let edit = match (pos, head) {
                (Ok(i), 0) => Edit::Remove(i),
                (Ok(i), h) => Edit::Set(i, h),
                (Err(_), 0) => return Ok(()),
                (Err(i), h) => match new_key {
                    Some(k) => Edit::Insert(i, slot_bytes(&k, h)),
                    None => {
                        return Err(Error::inconsistent(format!(
                            "btree: key {} is not in the tree",
                            show(key)
                        )))
                    }
                },
            };
            self.apply(&path, leaf, edit)
        })();
        self.path = path;
        r
    }

    /// Write `key`'s version record and point its leaf slot at it, in one
    /// descent; returns the record.
    fn put_at(
        &mut self,
        p: &Probe,
        key: &[u8],
        value: Option<&[u8]>,
        version: u64,
        path: &mut Vec<(u64, usize)>,
    ) -> Result<u64> {
        let found = self.descend(p, path)?;
        let (prev, kat) = match found {
            Some((leaf, Ok(i))) => {
                let n = self.node(leaf, path.len())?;
                (n.ptr(i), Some(n.key(i).at))
            }
            _ => (0, None),
        };
        let (at, kpos) = self.write_record(version, prev, kat, key, value, true)?;
        let k = KeyRef {
            hi: p.hi,
            lo: p.lo,
            len: key.len() as u32,
            at: kpos,
        };
        match found {
            None => {
                let mut buf = std::mem::take(&mut self.scratch[0]);
                buf[HDR..HDR + SLOT].copy_from_slice(&slot_bytes(&k, at));
                let r = self.put_node(0, true, &mut buf, 1, None);
                self.scratch[0] = buf;
                self.root = r?;
            }
            Some((leaf, Ok(i))) => self.apply(path, leaf, Edit::Set(i, at))?,
            Some((leaf, Err(i))) => self.apply(path, leaf, Edit::Insert(i, slot_bytes(&k, at)))?,
        }
        Ok(at)
    }

    fn rec(&self, at: u64) -> Result<Rec> {
        let b = self.pool.slice(at, REC)?;
        let r = Rec {
            ver: rd64(b, 0),
            prev: rd64(b, 8),
            gprev: rd64(b, 16),
            key: rd64(b, 24),
            vlen: rd32(b, 32),
            klen: rd32(b, 36),
        };
        if r.vlen != DELETED && r.vlen as usize > crate::MAX_VALUE {
            return Err(Error::inconsistent(format!(
                "btree: record {at:#x} claims a value of {} bytes",
                r.vlen
            )));
        }
        Ok(r)
    }

    fn value(&self, at: u64, r: &Rec) -> Result<Option<Vec<u8>>> {
        if r.deleted() {
            return Ok(None);
        }
        let mut v = vec![0u8; r.vlen as usize];
        self.pool.read(at + REC, &mut v)?;
        Ok(Some(v))
    }

    /// Write a version record (and, without `kat`, the key's bytes before
    /// it); returns the record's and the key's positions. With `user`, the
    /// key and value are the caller's new data (not a rebuild's copy),
    /// marked so in a `pmlab trace`.
    fn write_record(
        &mut self,
        ver: u64,
        prev: u64,
        kat: Option<u64>,
        key: &[u8],
        value: Option<&[u8]>,
        user: bool,
    ) -> Result<(u64, u64)> {
        let vlen = value.map_or(0, |v| v.len()) as u64;
        let klen = if kat.is_none() { key.len() as u64 } else { 0 };
        let whole = klen + REC + vlen <= self.pool.page_size() - CB;
        let (kpos, at) = if whole {
            // Key, header and value in one piece of one page.
            let p = self.pool.alloc(klen + REC + vlen)?;
            if kat.is_none() {
                self.pool.write(p, key);
            }
            (kat.unwrap_or(p), p + klen)
        } else {
            let kpos = match kat {
                Some(k) => k,
                None => self.pool.append(key)?,
            };
            (kpos, self.pool.alloc(REC)?)
        };
        let mut h = [0u8; REC as usize];
        h[0..8].copy_from_slice(&ver.to_le_bytes());
        h[8..16].copy_from_slice(&prev.to_le_bytes());
        h[16..24].copy_from_slice(&self.vhead.to_le_bytes());
        h[24..32].copy_from_slice(&kpos.to_le_bytes());
        h[32..36].copy_from_slice(&value.map_or(DELETED, |v| v.len() as u32).to_le_bytes());
        h[36..40].copy_from_slice(&(key.len() as u32).to_le_bytes());
        self.pool.write(at, &h);
        if let Some(v) = value {
            if whole {
                self.pool.write(at + REC, v);
            } else {
                // Appended right after the header, following page links.
                self.pool.append(v)?;
            }
        }
        if user {
            if kat.is_none() {
                self.pool.note_user_data(kpos, key.len() as u64);
            }
            self.pool.note_user_data(at + REC, vlen);
        }
        Ok((at, kpos))
    }

    /// The retained versions of a key whose newest record is `head`,
    /// newest first: (record position, record).
    fn chain(&self, head: u64, floor: u64) -> Result<Vec<(u64, Rec)>> {
        let mut out = Vec::new();
        let mut p = head;
        let mut above = u64::MAX;
        while p != 0 {
            let r = self.rec(p)?;
            if r.ver >= above || r.ver == 0 {
                return Err(Error::inconsistent(format!(
                    "btree: record {p:#x}: version {} does not fall below {above}",
                    r.ver
                )));
            }
            above = r.ver;
            if r.ver <= floor {
                if !r.deleted() {
                    out.push((p, r));
                }
                break;
            }
            out.push((p, r));
            p = r.prev;
        }
        Ok(out)
    }

    /// Version records above `stop`, newest first, from the version chain;
    /// and the first record at or below `stop` (0: none).
    fn newer(&self, stop: u64) -> Result<(Vec<(u64, Rec)>, u64)> {
        let mut out = Vec::new();
        let mut p = self.vhead;
        let mut above = u64::MAX;
        while p != 0 {
            let r = self.rec(p)?;
            if r.ver >= above || r.ver == 0 {
                return Err(Error::inconsistent(format!(
                    "btree: version chain at {p:#x}: version {} does not fall below {above}",
                    r.ver
                )));
            }
            above = r.ver;
            if r.ver <= stop || r.ver <= self.floor {
                break;
            }
            out.push((p, r));
            p = r.gprev;
        }
        Ok((out, p))
    }

    /// Every leaf slot in key order: (key, newest record).
    fn leaves(&self) -> Result<Vec<(KeyRef, u64)>> {
        let mut out = Vec::new();
        if self.root != 0 {
            self.leaves_at(self.root, 0, &mut out)?;
        }
        Ok(out)
    }

    fn leaves_at(&self, at: u64, depth: usize, out: &mut Vec<(KeyRef, u64)>) -> Result<()> {
        let n = self.node(at, depth)?;
        for i in 0..n.n {
            if n.leaf {
                out.push((n.key(i), n.ptr(i)));
            } else {
                self.leaves_at(n.ptr(i), depth + 1, out)?;
            }
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        self.pool.cur.root = self.root;
        self.pool.cur.aux = self.vhead;
        self.pool.cur.last = self.last;
        self.pool.cur.floor = self.floor;
        self.pool.commit();
        self.spare.append(&mut self.retired);
        self.pending = 0;
        if self.pool.cur.used_pages > 2 * self.base_pages + 64 {
            // The pool has doubled: measure what is live (nodes, keys,
            // retained records; no value is read) and rebuild only when
            // garbage dominates. Appended versions are not garbage: an
            // insert-only load never rebuilds.
            let live = self.live_bytes()?.div_ceil(self.pool.page_size() - CB);
            if self.pool.cur.used_pages <= 2 * live + 64 {
                self.base_pages = self.pool.cur.used_pages;
                return Ok(());
            }
            let r = self.compact();
            if r.is_err() {
                // Too full to rebuild now: try again when the pool has grown by half.
                self.base_pages = self.pool.cur.used_pages * 3 / 4;
            }
            crate::auto_compact(r)?;
        }
        Ok(())
    }

    /// Bytes the tree reaches: nodes, key bytes and retained version records.
    fn live_bytes(&self) -> Result<u64> {
        fn walk(t: &BTreeEngine, at: u64, depth: usize, sum: &mut u64) -> Result<()> {
            let n = t.node(at, depth)?;
            *sum += t.node_size();
            for i in 0..n.n {
                if n.leaf {
                    *sum += n.key(i).len as u64;
                    for (_, r) in t.chain(n.ptr(i), t.floor)? {
                        *sum += REC + if r.deleted() { 0 } else { r.vlen as u64 };
                    }
                } else {
                    walk(t, n.ptr(i), depth + 1, sum)?;
                }
            }
            Ok(())
        }
        let mut sum = 0;
        if self.root != 0 {
            walk(self, self.root, 0, &mut sum)?;
        }
        Ok(sum)
    }

    /// Forget the uncommitted group (after a failed write left it half done).
    fn reset(&mut self) {
        let m = self.pool.committed();
        self.pool.cur = m;
        self.root = m.root;
        self.vhead = m.aux;
        self.last = m.last;
        self.floor = m.floor;
        self.pending = 0;
        // Spare nodes taken by the failed group are lost until the next
        // rebuild; the ones it replaced are still in the committed tree.
        self.retired.clear();
    }

    /// Build a new tree of `entries` (sorted by key, then version) in a
    /// fresh chain, bottom-up, and swing to it.
    fn rebuild(&mut self, entries: Vec<VersionEntry>, last: u64, floor: u64) -> Result<()> {
        self.pool.fresh_chain()?;
        // The old chain's pages go to the free list: its nodes are no spares.
        self.spare.clear();
        self.retired.clear();
        self.vhead = 0;
        let mut slots: Vec<[u8; SLOT]> = Vec::new();
        let mut above: Vec<(u64, u64)> = Vec::new();
        let mut i = 0;
        while i < entries.len() {
            let key = &entries[i].key;
            let mut head = 0;
            let mut kat = None;
            while i < entries.len() && entries[i].key == *key {
                let e = &entries[i];
                let (at, k) =
                    self.write_record(e.version, head, kat, key, e.value.as_deref(), false)?;
                head = at;
                kat = Some(k);
                if e.version > floor {
                    above.push((e.version, at));
                }
                i += 1;
            }
            let (hi, lo) = prefix(key);
            let k = KeyRef {
                hi,
                lo,
                len: key.len() as u32,
                at: kat.unwrap_or(0),
            };
            slots.push(slot_bytes(&k, head));
        }
        // The version chain, in version order.
        above.sort_unstable();
        let mut prev = 0u64;
        for &(_, at) in &above {
            self.pool.write(at + 16, &prev.to_le_bytes());
            prev = at;
        }
        self.vhead = prev;
        // Bottom-up: leaves three-quarters full, then each inner level.
        let f = self.fanout as usize;
        let fill = (f - f / 4).max(2);
        let mut leaf = true;
        let mut level = slots;
        self.root = 0;
        while !level.is_empty() {
            let k = level.len().div_ceil(fill);
            let mut up = Vec::with_capacity(k);
            let mut buf = [0u8; BUF];
            let mut start = 0;
            for j in 0..k {
                let end = start + (level.len() - start) / (k - j);
                let n = end - start;
                for (s, slot) in level[start..end].iter().enumerate() {
                    buf[HDR + SLOT * s..HDR + SLOT * (s + 1)].copy_from_slice(slot);
                }
                if !leaf {
                    buf[HDR..HDR + 24].copy_from_slice(&[0u8; 24]);
                }
                let at = self.put_node(0, leaf, &mut buf, n, None)?;
                let mut s = level[start];
                s[24..32].copy_from_slice(&at.to_le_bytes());
                up.push(s);
                start = end;
            }
            leaf = false;
            if up.len() == 1 {
                self.root = rd64(&up[0], 24);
                break;
            }
            level = up;
        }
        self.last = last;
        self.floor = floor;
        self.pool.cur.root = self.root;
        self.pool.cur.aux = self.vhead;
        self.pool.cur.last = last;
        self.pool.cur.floor = floor;
        self.pool.commit();
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

    fn in_used(&self, used: &HashSet<u64>, at: u64, len: u64, what: &str) -> Result<()> {
        let pg = self.pool.page_of_end(at + 1);
        if !used.contains(&pg) || at < pg + CB {
            return Err(Error::inconsistent(format!(
                "btree: {what} {at:#x} is not inside a used page (its page is {})",
                self.pool.page_state(pg)
            )));
        }
        if len > 0 && at + len > pg + self.pool.page_size() {
            return Err(Error::inconsistent(format!(
                "btree: {what} {at:#x} straddles a page"
            )));
        }
        Ok(())
    }

    /// Check one subtree; returns its depth. `lo`/`hi` bound its keys; every
    /// leaf key is pushed to `keys` with its newest record.
    #[allow(clippy::too_many_arguments)]
    fn check_node(
        &self,
        depth: usize,
        ptr: u64,
        used: &HashSet<u64>,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        seen: &mut u64,
        keys: &mut Vec<(Vec<u8>, KeyRef, u64)>,
    ) -> Result<usize> {
        self.in_used(used, ptr, self.node_size(), "node")?;
        *seen += 1;
        if *seen > self.pool.total_pages() * self.pool.page_size() / self.node_size() {
            return Err(Error::inconsistent(
                "btree: more nodes than the pool can hold (a cycle)",
            ));
        }
        let node = self.node(ptr, depth)?;
        if node.gen() > self.pool.committed().seq {
            return Err(Error::inconsistent(format!(
                "btree: node {ptr:#x} has generation {} above the committed sequence {}",
                node.gen(),
                self.pool.committed().seq
            )));
        }
        let mut own: Vec<Option<Vec<u8>>> = Vec::with_capacity(node.n);
        for i in 0..node.n {
            if !node.leaf && i == 0 {
                own.push(None);
                continue;
            }
            let k = node.key(i);
            if k.len as usize > crate::MAX_KEY {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x}: a key of {} bytes",
                    k.len
                )));
            }
            if k.len > 0 {
                self.in_used(used, k.at, 0, "key")?;
            }
            let bytes = self.key_bytes(&k)?;
            if prefix(&bytes) != (k.hi, k.lo) {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x}: the prefix of key {} does not match its bytes",
                    show(&bytes)
                )));
            }
            own.push(Some(bytes));
        }
        let flat: Vec<&Vec<u8>> = own.iter().flatten().collect();
        if flat.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::inconsistent(format!(
                "btree: node {ptr:#x}: keys out of order"
            )));
        }
        if let (Some(lo), Some(first)) = (lo, flat.first()) {
            if first.as_slice() < lo {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x}: a key below its separator"
                )));
            }
        }
        if let (Some(hi), Some(last)) = (hi, flat.last()) {
            if last.as_slice() >= hi {
                return Err(Error::inconsistent(format!(
                    "btree: node {ptr:#x}: a key at or above the next separator"
                )));
            }
        }
        if node.leaf {
            for (i, k) in own.into_iter().enumerate() {
                keys.push((k.unwrap_or_default(), node.key(i), node.ptr(i)));
            }
            return Ok(1);
        }
        let mut height = None;
        for j in 0..node.n {
            let clo = if j == 0 { lo } else { own[j].as_deref() };
            let chi = if j + 1 < node.n {
                own[j + 1].as_deref()
            } else {
                hi
            };
            let d = self.check_node(depth + 1, node.ptr(j), used, clo, chi, seen, keys)?;
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
        let Some((_, head)) = self.lookup(key)? else {
            return Ok(None);
        };
        let mut p = head;
        let mut above = u64::MAX;
        while p != 0 {
            let r = self.rec(p)?;
            if r.ver >= above {
                return Err(Error::inconsistent(format!(
                    "btree: record {p:#x}: version {} does not fall below {above}",
                    r.ver
                )));
            }
            if r.ver <= index {
                return self.value(p, &r);
            }
            above = r.ver;
            p = r.prev;
        }
        Ok(None)
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>, version: u64) -> Result<()> {
        check_version(self.last, version)?;
        check_sizes(key, value)?;
        self.guarded(|t| {
            let mut path = std::mem::take(&mut t.path);
            let r = t.put_at(&Probe::new(key), key, value, version, &mut path);
            t.path = path;
            let at = r?;
            t.vhead = at;
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
                let (gone, stop) = t.newer(index)?;
                // Newest first: each key ends at the version below its oldest dropped one.
                for (_, r) in &gone {
                    let key = t.read_key(r.key, r.klen)?;
                    let mut head = r.prev;
                    if head != 0 {
                        let h = t.rec(head)?;
                        if h.ver <= t.floor && h.deleted() {
                            head = 0;
                        }
                    }
                    t.set_head(&key, head, None)?;
                }
                t.vhead = stop;
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
            let (newer, _) = t.newer(0)?;
            let mut keys: Vec<(u64, u32)> = newer
                .iter()
                .filter(|(_, r)| r.ver <= index)
                .map(|(_, r)| (r.key, r.klen))
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for (kat, klen) in keys {
                let key = t.read_key(kat, klen)?;
                let Some((_, head)) = t.lookup(&key)? else {
                    continue;
                };
                let h = t.rec(head)?;
                // Its newest version is a deletion at or below the floor: the key goes.
                if h.ver <= index && h.deleted() {
                    t.set_head(&key, 0, None)?;
                }
            }
            t.floor = index;
            t.commit()
        })
    }

    fn snapshot(&self, index: u64) -> Result<Snapshot<'_>> {
        check_read(self.floor, index)?;
        // The leaves now, each value read as the iterator reaches it (not
        // the whole state copied first).
        let it = self.leaves()?.into_iter().filter_map(move |(k, head)| {
            let pair = || -> Result<Option<(Vec<u8>, Vec<u8>)>> {
                for (at, r) in self.chain(head, self.floor)? {
                    if r.ver <= index {
                        return match self.value(at, &r)? {
                            Some(v) => Ok(Some((self.key_bytes(&k)?, v))),
                            None => Ok(None),
                        };
                    }
                }
                Ok(None)
            };
            pair().transpose()
        });
        Ok(Snapshot::new(index, Box::new(it)))
    }

    fn restore(
        &mut self,
        index: u64,
        entries: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let map = crate::restore_entries(entries)?;
        let entries = map
            .into_iter()
            .map(|(key, v)| VersionEntry {
                key,
                version: index,
                value: Some(v),
            })
            .collect();
        self.guarded(|t| t.rebuild(entries, index, index))
    }

    fn history(&self) -> Result<Vec<VersionEntry>> {
        let mut out = Vec::new();
        for (k, head) in self.leaves()? {
            let key = self.key_bytes(&k)?;
            let c = self.chain(head, self.floor)?;
            for (at, r) in c.into_iter().rev() {
                out.push(VersionEntry {
                    key: key.clone(),
                    version: r.ver,
                    value: self.value(at, &r)?,
                });
            }
        }
        Ok(out)
    }

    fn check(&self) -> Result<()> {
        if self.pending > 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "btree: check with unsynced writes: sync first",
            ));
        }
        let used = self.pool.check_pages()?;
        let mut keys = Vec::new();
        if self.root != 0 {
            let mut seen = 0;
            self.check_node(0, self.root, &used, None, None, &mut seen, &mut keys)?;
        }
        // Every key's chain: records inside used pages, of this key,
        // versions falling; at least one retained version.
        let mut above: Vec<u64> = Vec::new();
        for (key, k, head) in &keys {
            let c = self.chain(*head, self.floor)?;
            if c.is_empty() {
                return Err(Error::inconsistent(format!(
                    "btree: key {} has no retained version",
                    show(key)
                )));
            }
            for (at, r) in &c {
                self.in_used(&used, *at, REC, "version record")?;
                if r.key != k.at || r.klen != k.len {
                    return Err(Error::inconsistent(format!(
                        "btree: version {} of key {} names another key",
                        r.ver,
                        show(key)
                    )));
                }
                if r.ver > self.floor {
                    above.push(*at);
                }
            }
        }
        let h = self.history()?;
        check_history(&h, self.last, self.floor)?;
        // The version chain lists exactly the records above the floor.
        let (chain, _) = self.newer(self.floor)?;
        if let Some((at, r)) = chain.first() {
            if r.ver > self.last {
                return Err(Error::inconsistent(format!(
                    "btree: version chain starts at record {at:#x} of version {} above the last version {}",
                    r.ver, self.last
                )));
            }
        }
        let mut listed: Vec<u64> = chain.iter().map(|(at, _)| *at).collect();
        listed.sort_unstable();
        above.sort_unstable();
        if listed != above {
            let (only_chain, only_tree) = (
                listed.iter().find(|a| above.binary_search(a).is_err()),
                above.iter().find(|a| listed.binary_search(a).is_err()),
            );
            let what = match (only_chain, only_tree) {
                (Some(a), _) => format!("record {a:#x} is on the version chain but no key's"),
                (None, Some(a)) => format!("record {a:#x} of a key is not on the version chain"),
                _ => "a record is listed twice".to_string(),
            };
            return Err(Error::inconsistent(format!(
                "btree: the version chain and the keys' versions above the floor differ: {what}"
            )));
        }
        Ok(())
    }

    fn compact(&mut self) -> Result<()> {
        self.sync()?;
        let entries = self.history()?;
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
