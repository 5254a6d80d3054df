//! Small building blocks shared by components: a fast hash map for integer
//! keys and an LRU set whose entries carry the time their data is valid.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher for integer keys (addresses); much cheaper than
/// SipHash, and the keys are not attacker-controlled.
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A `HashMap` keyed by integers with [`IntHasher`].
pub type IntMap<V> = HashMap<u64, V, BuildHasherDefault<IntHasher>>;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node {
    key: u64,
    prev: u32,
    next: u32,
    valid_at: f64,
    mask: u32,
}

/// A fully associative LRU set of `capacity` entries. Each entry has a
/// `valid_at` time (when its data arrived) and a bit mask (valid sectors or
/// dirty lines, as the owner decides). All operations are O(1).
pub struct Lru {
    map: IntMap<u32>,
    nodes: Vec<Node>,
    head: u32,
    tail: u32,
    capacity: usize,
    free: Vec<u32>,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug)]
pub struct Hit {
    /// When the entry's data became (or becomes) valid.
    pub valid_at: f64,
    /// The entry's mask.
    pub mask: u32,
}

impl Lru {
    /// An empty set holding at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Lru {
        let capacity = capacity.max(1);
        let mut map = IntMap::default();
        map.reserve(capacity.min(1 << 20));
        Lru {
            map,
            nodes: Vec::with_capacity(capacity.min(1 << 20)),
            head: NIL,
            tail: NIL,
            capacity,
            free: Vec::new(),
        }
    }

    /// Most entries it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// Look `key` up and make it most recently used.
    #[inline]
    pub fn touch(&mut self, key: u64) -> Option<Hit> {
        let i = *self.map.get(&key)?;
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        let n = &self.nodes[i as usize];
        Some(Hit {
            valid_at: n.valid_at,
            mask: n.mask,
        })
    }

    /// Look `key` up without changing recency.
    pub fn peek(&self, key: u64) -> Option<Hit> {
        let i = *self.map.get(&key)?;
        let n = &self.nodes[i as usize];
        Some(Hit {
            valid_at: n.valid_at,
            mask: n.mask,
        })
    }

    /// OR `mask` into a present entry without changing its recency; false
    /// when `key` is absent.
    pub fn or_mask(&mut self, key: u64, mask: u32) -> bool {
        match self.map.get(&key) {
            Some(&i) => {
                self.nodes[i as usize].mask |= mask;
                true
            }
            None => false,
        }
    }

    /// Replace a present entry's mask without changing its recency; false
    /// when `key` is absent.
    pub fn set_mask(&mut self, key: u64, mask: u32) -> bool {
        match self.map.get(&key) {
            Some(&i) => {
                self.nodes[i as usize].mask = mask;
                true
            }
            None => false,
        }
    }

    /// Keys and masks of the entries whose mask is not zero, least recently
    /// used first.
    pub fn masked(&self) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        let mut i = self.tail;
        while i != NIL {
            let n = &self.nodes[i as usize];
            if n.mask != 0 {
                out.push((n.key, n.mask));
            }
            i = n.prev;
        }
        out
    }

    /// Insert or update `key` as most recently used: the mask is OR-ed in and
    /// `valid_at` raised to at least the given time for a present entry.
    /// Returns the evicted key and its mask, if the set was full.
    pub fn insert(&mut self, key: u64, valid_at: f64, mask: u32) -> Option<(u64, u32)> {
        if let Some(&i) = self.map.get(&key) {
            let n = &mut self.nodes[i as usize];
            n.mask |= mask;
            n.valid_at = n.valid_at.max(valid_at);
            if self.head != i {
                self.unlink(i);
                self.push_front(i);
            }
            return None;
        }
        let mut evicted = None;
        let i = if self.map.len() >= self.capacity {
            let victim = self.tail;
            self.unlink(victim);
            let old = self.nodes[victim as usize];
            self.map.remove(&old.key);
            evicted = Some((old.key, old.mask));
            victim
        } else if let Some(f) = self.free.pop() {
            f
        } else {
            self.nodes.push(Node {
                key,
                prev: NIL,
                next: NIL,
                valid_at,
                mask,
            });
            (self.nodes.len() - 1) as u32
        };
        self.nodes[i as usize] = Node {
            key,
            prev: NIL,
            next: NIL,
            valid_at,
            mask,
        };
        self.map.insert(key, i);
        self.push_front(i);
        evicted
    }

    /// Remove `key` if present.
    pub fn remove(&mut self, key: u64) -> bool {
        let Some(i) = self.map.remove(&key) else {
            return false;
        };
        self.unlink(i);
        self.free.push(i);
        true
    }

    /// Remove `key` if present, returning its mask.
    #[inline]
    pub fn take(&mut self, key: u64) -> Option<u32> {
        let i = self.map.remove(&key)?;
        self.unlink(i);
        self.free.push(i);
        Some(self.nodes[i as usize].mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut l = Lru::new(2);
        assert!(l.insert(1, 0.0, 1).is_none());
        assert!(l.insert(2, 0.0, 1).is_none());
        l.touch(1);
        assert_eq!(l.insert(3, 0.0, 1).map(|e| e.0), Some(2));
        assert!(l.peek(1).is_some() && l.peek(3).is_some() && l.peek(2).is_none());
    }

    #[test]
    fn lru_remove_frees_a_slot() {
        let mut l = Lru::new(2);
        l.insert(1, 0.0, 1);
        l.insert(2, 0.0, 1);
        assert!(l.remove(1));
        assert!(l.insert(3, 5.0, 2).is_none());
        assert_eq!(l.len(), 2);
        assert_eq!(l.insert(4, 0.0, 1).map(|e| e.0), Some(2));
        let h = l.peek(3).unwrap();
        assert_eq!((h.valid_at, h.mask), (5.0, 2));
    }
}
