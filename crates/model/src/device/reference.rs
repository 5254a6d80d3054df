//! The device model as it was before its read path was made cheaper
//! (test-only): the reference [`super::DeviceModel`] must agree with on
//! every level, count and wear-leveling event.

#![allow(dead_code)]

use super::{DeviceCounts, DeviceParams, Level, WEAR_SLOTS};

const NIL: u32 = u32::MAX;

/// An exact LRU set of `u64` keys with a 32-bit mask and a flag each, of
/// fixed capacity: arrays and an open-addressing index allocated once.
#[derive(Debug, Clone)]
struct Lru {
    keys: Vec<u64>,
    masks: Vec<u32>,
    flags: Vec<bool>,
    /// A second mask per entry (the AIT buffer's: which of its XPLines are
    /// in the RMW buffer).
    aux: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Slot of each key, by hash (linear probing); NIL when empty.
    index: Vec<u32>,
    head: u32,
    tail: u32,
    len: u32,
}

impl Lru {
    fn new(cap: u32) -> Lru {
        let c = cap as usize;
        let ix = (c * 2).next_power_of_two().max(2);
        Lru {
            keys: vec![0; c],
            masks: vec![0; c],
            flags: vec![false; c],
            aux: vec![0; c],
            prev: vec![NIL; c],
            next: vec![NIL; c],
            index: vec![NIL; ix],
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    fn cap(&self) -> u32 {
        self.keys.len() as u32
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize & (self.index.len() - 1)
    }

    /// Position in `index` of `key`, or of the empty slot where it would go.
    #[inline]
    fn probe(&self, key: u64) -> (usize, Option<u32>) {
        let m = self.index.len() - 1;
        let mut i = self.home(key);
        loop {
            let s = self.index[i];
            if s == NIL {
                return (i, None);
            }
            if self.keys[s as usize] == key {
                return (i, Some(s));
            }
            i = (i + 1) & m;
        }
    }

    fn find(&self, key: u64) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        self.probe(key).1
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            self.tail = p;
        }
    }

    fn push_front(&mut self, s: u32) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    /// Make `s` the most recent.
    fn touch(&mut self, s: u32) {
        if self.head != s {
            self.unlink(s);
            self.push_front(s);
        }
    }

    /// Remove `key`'s index entry (backward-shift deletion).
    fn unindex(&mut self, key: u64) {
        let m = self.index.len() - 1;
        let (mut i, found) = self.probe(key);
        if found.is_none() {
            return;
        }
        let mut j = i;
        loop {
            j = (j + 1) & m;
            let s = self.index[j];
            if s == NIL {
                break;
            }
            let h = self.home(self.keys[s as usize]);
            // Move the entry at j back to i unless its home lies in (i, j].
            let between = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !between {
                self.index[i] = s;
                i = j;
            }
        }
        self.index[i] = NIL;
    }

    /// [`insert`](Self::insert), and the slot `key` now has (NIL with no
    /// capacity).
    fn insert_at(
        &mut self,
        key: u64,
        mask: u32,
        flag: bool,
    ) -> (u32, Option<(u64, u32, bool, u32)>) {
        if self.cap() == 0 {
            return (NIL, None);
        }
        let mut evicted = None;
        let s = if self.len < self.cap() {
            self.len += 1;
            self.len - 1
        } else {
            let s = self.tail;
            let old = self.keys[s as usize];
            evicted = Some((
                old,
                self.masks[s as usize],
                self.flags[s as usize],
                self.aux[s as usize],
            ));
            self.unindex(old);
            self.unlink(s);
            s
        };
        self.keys[s as usize] = key;
        self.masks[s as usize] = mask;
        self.flags[s as usize] = flag;
        self.aux[s as usize] = 0;
        let (i, _) = self.probe(key);
        self.index[i] = s;
        self.push_front(s);
        (s, evicted)
    }

    /// Remove `key`; returns its mask and flag.
    fn remove(&mut self, key: u64) -> Option<(u32, bool)> {
        let s = self.find(key)?;
        let out = (self.masks[s as usize], self.flags[s as usize]);
        self.unindex(key);
        self.unlink(s);
        // Keep the slots dense: move the last slot into the hole.
        let last = self.len - 1;
        if s != last {
            let k = self.keys[last as usize];
            let (i, _) = self.probe(k);
            self.index[i] = s;
            self.keys[s as usize] = k;
            self.masks[s as usize] = self.masks[last as usize];
            self.flags[s as usize] = self.flags[last as usize];
            self.aux[s as usize] = self.aux[last as usize];
            let (p, n) = (self.prev[last as usize], self.next[last as usize]);
            self.prev[s as usize] = p;
            self.next[s as usize] = n;
            if p != NIL {
                self.next[p as usize] = s;
            } else {
                self.head = s;
            }
            if n != NIL {
                self.prev[n as usize] = s;
            } else {
                self.tail = s;
            }
        }
        self.len -= 1;
        Some(out)
    }
}

/// One DIMM's state.
#[derive(Debug, Clone)]
struct Dimm {
    /// XPLines: mask of written (dirty) 64 B lines; flag: old content not read.
    rmw: Lru,
    /// AIT entries: mask of valid XPLines.
    ait: Lru,
    last_blk: u64,
    run: u32,
    wear: Vec<(u64, u32)>,
    wear_epoch: u64,
    media_writes: u64,
    /// The AIT entry last looked up or filled: (entry, slot). AIT slots
    /// are never removed, only reused by eviction, so the slot holds the
    /// entry while its key says so (saves a second lookup of the entry a
    /// read just fetched).
    ait_memo: (u64, u32),
}

/// The functional model: the buffers of one DIMM per channel.
#[derive(Debug, Clone)]
pub(super) struct DeviceModel {
    p: DeviceParams,
    /// XPLines per AIT entry (a power of two), and its log2.
    per: u64,
    per_shift: u32,
    /// log2 of the XPLine size.
    xp_shift: u32,
    full: u32,
    dimms: Vec<Dimm>,
    counts: DeviceCounts,
}

impl DeviceModel {
    /// A cold model of `p` (allocates every buffer now).
    pub(super) fn new(p: &DeviceParams) -> DeviceModel {
        let lines = (p.xpline / 64) as u32;
        let per = (p.ait_entry / p.xpline).max(1);
        let (rmw, ait) = if p.has_buffers() {
            (p.rmw_lines, p.ait_entries)
        } else {
            (0, 0)
        };
        DeviceModel {
            p: p.clone(),
            per,
            per_shift: per.trailing_zeros(),
            xp_shift: p.xpline.trailing_zeros(),
            full: if lines >= 32 {
                u32::MAX
            } else {
                (1 << lines) - 1
            },
            dimms: (0..p.channels.max(1))
                .map(|_| Dimm {
                    rmw: Lru::new(rmw),
                    ait: Lru::new(ait),
                    last_blk: u64::MAX - 1,
                    run: 0,
                    wear: if p.has_buffers() {
                        vec![(u64::MAX, 0); WEAR_SLOTS]
                    } else {
                        Vec::new()
                    },
                    wear_epoch: 0,
                    media_writes: 0,
                    ait_memo: (u64::MAX, NIL),
                })
                .collect(),
            counts: DeviceCounts::default(),
        }
    }

    /// The parameters.
    pub(super) fn params(&self) -> &DeviceParams {
        &self.p
    }

    /// What has been counted so far.
    pub(super) fn counts(&self) -> DeviceCounts {
        self.counts
    }

    /// The DIMM and device-local address of `addr` (the simulator's
    /// controller routing: chunk `addr / interleave` goes to DIMM
    /// `chunk % channels`).
    #[inline]
    fn route(&self, addr: u64) -> (usize, u64) {
        let n = self.dimms.len() as u64;
        if n == 1 {
            return (0, addr);
        }
        let g = self.p.interleave;
        let chunk = addr / g;
        ((chunk % n) as usize, (chunk / n) * g + addr % g)
    }

    /// A 64 B read that missed the CPU caches: the level that served it.
    pub(super) fn read(&mut self, addr: u64) -> Level {
        if !self.p.has_buffers() {
            self.counts.media_reads += 1;
            return Level::Media;
        }
        let (d, local) = self.route(addr);
        let blk = local >> self.xp_shift;
        let bit = 1u32 << ((local & (self.p.xpline - 1)) >> 6);
        let dimm = &mut self.dimms[d];
        let new_xpline = blk != dimm.last_blk;
        if new_xpline {
            dimm.run = if blk == dimm.last_blk.wrapping_add(1) {
                dimm.run + 1
            } else {
                0
            };
            dimm.last_blk = blk;
        }
        let held = dimm.rmw.find(blk);
        let level = match held {
            // A partial line written without its old content serves only
            // the lines written.
            Some(s)
                if dimm.rmw.masks[s as usize] & bit != 0
                    || dimm.rmw.masks[s as usize] == 0
                    || !dimm.rmw.flags[s as usize] =>
            {
                dimm.rmw.touch(s);
                self.counts.rmw_hits += 1;
                Level::Rmw
            }
            _ => {
                let l = self.fetch(d, blk);
                match l {
                    Level::Ait => self.counts.ait_hits += 1,
                    _ => self.counts.media_reads += 1,
                }
                if held.is_some() {
                    // A partial line whose old content is now read (the
                    // fetch may have moved its slot: look it up again).
                    let dimm = &mut self.dimms[d];
                    if let Some(s) = dimm.rmw.find(blk) {
                        dimm.rmw.flags[s as usize] = false;
                    }
                    self.rmw_insert(d, blk, 0, false);
                } else {
                    self.rmw_insert_absent(d, blk, 0, false);
                }
                l
            }
        };
        let dimm = &self.dimms[d];
        if new_xpline && dimm.run >= self.p.prefetch_after {
            for k in 1..=self.p.prefetch as u64 {
                let b = blk + k;
                if self.p.fill_entry && b >> self.per_shift != blk >> self.per_shift {
                    break;
                }
                if self.dimms[d].rmw.find(b).is_none() {
                    self.counts.prefetches += 1;
                    self.fetch(d, b);
                    self.rmw_insert(d, b, 0, false);
                }
            }
        }
        level
    }

    /// A dirty 64 B line written back to the device. Returns the wear-leveling
    /// stall it caused, ns (0 almost always); the media time it took is
    /// added to [`DeviceCounts::media_write_ns`].
    pub(super) fn write_back(&mut self, addr: u64) -> f64 {
        self.counts.writes += 1;
        if !self.p.has_buffers() {
            return 0.0;
        }
        let stall0 = self.counts.stall_ns;
        let (d, local) = self.route(addr);
        let blk = local >> self.xp_shift;
        let bit = 1u32 << ((local & (self.p.xpline - 1)) >> 6);
        let held = self.dimms[d].rmw.find(blk);
        if let Some(s) = held {
            self.dimms[d].rmw.touch(s);
        }
        let old = held.map_or(0, |s| self.dimms[d].rmw.masks[s as usize]);
        let dirty = old | bit;
        if self.p.combine_in_buffer && dirty != self.full {
            // Partial: it waits in the buffer for the rest of its XPLine.
            match held {
                Some(s) => self.dimms[d].rmw.masks[s as usize] = dirty,
                None => self.rmw_insert(d, blk, bit, true),
            }
            return self.counts.stall_ns - stall0;
        }
        if bit != self.full && held.is_none() {
            self.counts.modify_reads += 1;
            self.counts.media_write_ns += self.p.read_occ_ns;
            self.fetch(d, blk);
        }
        self.media_write(d, blk);
        self.ait_fill(d, blk);
        match self.dimms[d].rmw.find(blk) {
            Some(s) => {
                self.dimms[d].rmw.masks[s as usize] = 0;
                self.dimms[d].rmw.flags[s as usize] = false;
            }
            None => self.rmw_insert(d, blk, 0, false),
        }
        self.counts.stall_ns - stall0
    }

    /// Bring XPLine `blk` of DIMM `d` to its RMW buffer's door: an AIT
    /// hit, or a media read (which fills the AIT buffer).
    fn fetch(&mut self, d: usize, blk: u64) -> Level {
        let page = blk >> self.per_shift;
        let bit = 1u32 << (blk & (self.per - 1));
        let dimm = &mut self.dimms[d];
        if let Some(s) = dimm.ait.find(page) {
            dimm.ait.touch(s);
            dimm.ait_memo = (page, s);
            if dimm.ait.masks[s as usize] & bit != 0 {
                return Level::Ait;
            }
        }
        self.ait_fill(d, blk);
        Level::Media
    }

    /// Make XPLine `blk` valid in the AIT buffer (the whole entry when it
    /// was absent and `fill_entry`), keeping the RMW buffer inclusive.
    fn ait_fill(&mut self, d: usize, blk: u64) {
        let page = blk >> self.per_shift;
        let bit = 1u32 << (blk & (self.per - 1));
        let in_rmw = if self.dimms[d].rmw.find(blk).is_some() {
            bit
        } else {
            0
        };
        let dimm = &mut self.dimms[d];
        let ait = &mut dimm.ait;
        if let Some(s) = ait.find(page) {
            ait.masks[s as usize] |= bit;
            ait.aux[s as usize] |= in_rmw;
            ait.touch(s);
            dimm.ait_memo = (page, s);
            return;
        }
        let all = if self.per >= 32 {
            u32::MAX
        } else {
            (1u32 << self.per) - 1
        };
        let mask = if self.p.fill_entry { all } else { bit };
        let (s, evicted) = ait.insert_at(page, mask, false);
        if s != NIL {
            ait.aux[s as usize] = in_rmw;
            dimm.ait_memo = (page, s);
        }
        if let Some((victim, valid, _, in_rmw)) = evicted {
            // Only the entry's valid XPLines that are in the RMW buffer
            // leave it.
            let mut m = valid & in_rmw;
            while m != 0 {
                let b = (victim << self.per_shift) + m.trailing_zeros() as u64;
                m &= m - 1;
                if let Some((dirty, unread)) = self.dimms[d].rmw.remove(b) {
                    if dirty != 0 {
                        self.evict_dirty(d, b, unread);
                    }
                }
            }
        }
    }

    /// Insert XPLine `blk` into DIMM `d`'s RMW buffer (OR-ing `dirty`
    /// into a present entry); a dirty victim goes to the media.
    fn rmw_insert(&mut self, d: usize, blk: u64, dirty: u32, unread: bool) {
        let rmw = &mut self.dimms[d].rmw;
        if let Some(s) = rmw.find(blk) {
            rmw.masks[s as usize] |= dirty;
            rmw.touch(s);
            return;
        }
        self.rmw_insert_absent(d, blk, dirty, unread);
    }

    /// [`rmw_insert`](Self::rmw_insert) of an XPLine known to be absent.
    fn rmw_insert_absent(&mut self, d: usize, blk: u64, dirty: u32, unread: bool) {
        let (s, evicted) = self.dimms[d].rmw.insert_at(blk, dirty, unread);
        let hint = self.mark_in_rmw(d, blk, true, 0);
        if s != NIL {
            // The RMW entry remembers its AIT entry's slot (plus one).
            self.dimms[d].rmw.aux[s as usize] = hint;
        }
        if let Some((victim, mask, unread, hint)) = evicted {
            self.mark_in_rmw(d, victim, false, hint);
            if mask != 0 {
                self.evict_dirty(d, victim, unread);
            }
        }
    }

    /// Note in XPLine `blk`'s AIT entry, if present, whether it is in the
    /// RMW buffer (so that evicting the entry visits only those XPLines).
    /// `hint` is the entry's slot plus one as the XPLine's RMW entry
    /// remembered it (0: none); returns the slot plus one (0: absent).
    /// AIT slots are never removed, only reused by eviction: a slot holds
    /// the entry while its key says so.
    #[inline]
    fn mark_in_rmw(&mut self, d: usize, blk: u64, on: bool, hint: u32) -> u32 {
        let page = blk >> self.per_shift;
        let dimm = &mut self.dimms[d];
        let (memo_page, memo) = dimm.ait_memo;
        let ait = &mut dimm.ait;
        let holds = |s: u32| s < ait.len && ait.keys[s as usize] == page;
        let slot = if hint != 0 && holds(hint - 1) {
            Some(hint - 1)
        } else if memo_page == page && holds(memo) {
            Some(memo)
        } else {
            ait.find(page)
        };
        let Some(s) = slot else {
            return 0;
        };
        let bit = 1u32 << (blk & (self.per - 1));
        if on {
            ait.aux[s as usize] |= bit;
        } else {
            ait.aux[s as usize] &= !bit;
        }
        s + 1
    }

    /// A partial XPLine leaves the RMW buffer: read its old content if it
    /// was never read, then write it.
    fn evict_dirty(&mut self, d: usize, blk: u64, unread: bool) {
        if unread {
            self.counts.modify_reads += 1;
            self.counts.media_write_ns += self.p.read_occ_ns;
        }
        self.media_write(d, blk);
    }

    /// One XPLine media write and its wear count.
    fn media_write(&mut self, d: usize, blk: u64) {
        self.counts.media_writes += 1;
        self.counts.media_write_ns += self.p.write_ns;
        let dimm = &mut self.dimms[d];
        let epoch = dimm.media_writes / self.p.wear_window;
        dimm.media_writes += 1;
        if epoch != dimm.wear_epoch {
            dimm.wear.fill((u64::MAX, 0));
            dimm.wear_epoch = epoch;
        }
        let slot = &mut dimm.wear[(blk as usize) % WEAR_SLOTS];
        if slot.0 != blk {
            *slot = (blk, 0);
        }
        slot.1 += 1;
        if slot.1 >= self.p.wear_threshold {
            slot.1 = 0;
            self.counts.migrations += 1;
            self.counts.stall_ns += self.p.migration_ns;
        }
    }
}
