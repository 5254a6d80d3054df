//! `nvram`: an Optane-style NVRAM DIMM, after LENS/VANS (MICRO'20,
//! sections III and IV).
//!
//! Structure, top to bottom:
//!
//! * **LSQ** (load-store queue, 4 KiB): writes from the controller are
//!   combined into XPLine-sized (256 B) entries; a 64 B write joins a
//!   waiting entry of the same XPLine unless its thread fenced since that
//!   entry was created (the controller's [`Order`]). Entries
//!   drain in FIFO order after a combining window, one at a time to the
//!   media. A partial entry needs a read-modify-write: if its XPLine is not
//!   in the RMW buffer it is first read (through the AIT).
//! * **RMW buffer** (SRAM, 16 KiB of 256 B entries, LRU): serves reads at
//!   XPLine granularity; a miss fetches the whole XPLine (read
//!   amplification 4 for 64 B reads). Inclusive in the AIT buffer. With
//!   `write_combining = "buffer"` (the Optane presets) it is also the
//!   write-combining buffer Yang et al. (FAST'20) call the XPBuffer: a
//!   partial XPLine drained from the LSQ stays in it, dirty, and later
//!   writes to the rest of the line merge into it; the line goes to the
//!   media once all its 64 B lines are written, or when it is evicted
//!   (a partial media write, read-modify-write: its old content is read
//!   then, unless it was in the buffer before the write). Write amplification therefore depends on
//!   the size of the region written round-robin, with a knee at the
//!   buffer's capacity. With `"lsq"` every drained LSQ entry is a media
//!   write (combining in the LSQ's window only).
//! * **AIT**: address translation (one table read from the on-DIMM DRAM per
//!   RMW miss) and the AIT buffer (16 MiB of 4 KiB entries in that DRAM,
//!   LRU, with a valid bit per XPLine). A miss reads the wanted XPLine
//!   from the media; with `ait_fill = "entry"` (the Optane presets: LENS
//!   found a 4 KiB access granularity at this buffer) the rest of the
//!   entry then streams in, in the media's idle time only (demand reads
//!   never wait for a fill; an XPLine wanted before its turn is read on
//!   demand). Evicting an AIT entry invalidates the RMW entries it covers
//!   (inclusion).
//! * **media**: one server per DIMM; an XPLine read occupies it for
//!   `xpline / media_read_gbs` and returns after `media_read_ns`; a write
//!   occupies it for `xpline / media_write_gbs`.
//! * **wear leveling**: the AIT keeps a write counter per XPLine, reset at
//!   the start of each window of `wear_window` media writes (a hot-block
//!   detector). A block reaching `wear_threshold` writes within a window is
//!   migrated: the media copies its `migration_bytes` region (a read and a
//!   write per XPLine) and spends `migration_ns` more (remapping),
//!   stalling writes (and the media) meanwhile. With the
//!   defaults a 256 B overwrite loop migrates every 14,000 writes (LENS
//!   III-D) while a loop over 64 KiB or more never reaches the threshold
//!   within a window (the frequency drop of LENS Fig. 7c).
//! * **prefetch**: once reads have moved to the next XPLine
//!   `prefetch_after` times in a row, each move fetches the following
//!   `prefetch_xplines` XPLines that are not in the RMW buffer (a sequential stream
//!   detector, after Yang et al.'s XPPrefetcher). With `ait_fill = "entry"`
//!   it stays inside the AIT entry: the next entry's media location is not
//!   known before it is translated.

use super::{Device, Order};
use crate::buffer::{IntMap, Lru};
use crate::config::Params;
use crate::stats::Stats;
use crate::Error;
use std::collections::VecDeque;

struct LEntry {
    blk: u64,
    /// When it entered the LSQ.
    since: f64,
    mask: u32,
    ready: f64,
    /// Fence stamp of the write that created it.
    stamp: u64,
}

/// The NVRAM DIMM.
pub struct Nvram {
    dram: Box<dyn Device>,
    xp: u64,
    full_mask: u32,
    lsq: VecDeque<LEntry>,
    lsq_cap: usize,
    combine_ns: f64,
    rmw: Lru,
    rmw_hit_ns: f64,
    /// Partial XPLines stay dirty in the RMW buffer (its mask: the 64 B
    /// lines written) until complete or evicted.
    combine_in_buffer: bool,
    /// Dirty partial XPLines of the RMW buffer whose old content was not
    /// read yet.
    unread: IntMap<()>,
    ait: Lru,
    ait_entry: u64,
    /// An AIT miss fills the whole entry (critical XPLine first, the rest in
    /// the media's idle time) instead of one XPLine.
    ait_fill_entry: bool,
    /// Background fills: (entry, next XPLine index, XPLines left).
    fills: VecDeque<(u64, u64, u64)>,
    /// Time up to which the media's idle time went to background fills.
    fill_clock: f64,
    ait_ns: f64,
    media_read_ns: f64,
    read_occ: f64,
    write_occ: f64,
    media_free: f64,
    prefetch: u64,
    prefetch_after: u64,
    run: u64,
    last_blk: u64,
    /// Write counts of the current window (cleared at each new window, so
    /// memory is bounded by the XPLines written within one window).
    wear: IntMap<u32>,
    wear_epoch: u64,
    wear_threshold: u32,
    wear_window: u64,
    migration_bytes: u64,
    migration_ns: f64,
    migrating: Vec<(u64, f64)>,
    media_writes_total: u64,
    s: NvStats,
}

#[derive(Default, Clone)]
struct NvStats {
    reads: u64,
    writes: u64,
    lsq_merges: u64,
    lsq_forwards: u64,
    lsq_full_waits: u64,
    lsq_wait: f64,
    /// Sum over drained entries of their time in the LSQ (entry-ns).
    lsq_occupancy_ns: f64,
    span_start: Option<f64>,
    span_end: f64,
    rmw_hits: u64,
    rmw_misses: u64,
    rmw_fill_bytes: u64,
    rmw_modify_reads: u64,
    ait_hits: u64,
    ait_misses: u64,
    media_reads: u64,
    media_writes: u64,
    /// Media writes of partial XPLines evicted from the RMW buffer.
    partial_writebacks: u64,
    /// LSQ entries merged into a dirty XPLine of the RMW buffer.
    buffer_merges: u64,
    prefetches: u64,
    ait_fill_reads: u64,
    migrations: u64,
    migration_ns: f64,
    media_busy: f64,
}

impl Nvram {
    /// Build from parameters (child table `dram`: the on-DIMM DRAM).
    pub fn build(p: &mut Params) -> Result<Nvram, Error> {
        let xp = p.bytes(
            "xpline_bytes",
            256,
            64,
            "media access and write-combining unit (LENS III-C: 256 B)",
        )?;
        if !xp.is_power_of_two() || xp > 2048 {
            return Err(Error::config(format!(
                "parameter '{}.xpline_bytes' must be a power of two from 64 to 2048",
                p.path()
            )));
        }
        let lsq = p.bytes(
            "lsq_bytes",
            4096,
            xp,
            "load-store queue capacity (LENS III-C: 4 KiB)",
        )?;
        let combine_ns = p.ns("combine_window_ns", 100.0, "time an LSQ entry waits for more lines of its XPLine before draining (VANS: scheduling epoch)")?;
        let rmw = p.bytes(
            "rmw_bytes",
            16 << 10,
            xp,
            "RMW buffer capacity (LENS III-C: 16 KiB SRAM)",
        )?;
        let rmw_hit_ns = p.ns(
            "rmw_hit_ns",
            112.0,
            "DIMM-side latency of a read served by the RMW buffer (DDR-T request/grant, SRAM)",
        )?;
        let combine_in_buffer = p.choice(
            "write_combining",
            "lsq",
            &["lsq", "buffer"],
            "where partial XPLines combine: lsq (within the LSQ's window; every drained entry is a media write) or buffer (also in the RMW buffer until the XPLine is complete or evicted; Yang et al. FAST'20: a ~16 KB XPBuffer)",
        )? == "buffer";
        let ait = p.bytes(
            "ait_buffer_bytes",
            16 << 20,
            4096,
            "AIT buffer capacity (LENS III-C: 16 MiB in on-DIMM DRAM)",
        )?;
        let ait_entry = p.bytes(
            "ait_entry_bytes",
            4096,
            xp,
            "AIT buffer entry (LENS III-C: 4 KiB)",
        )?;
        if !ait_entry.is_power_of_two() || ait_entry / xp > 32 {
            return Err(Error::config(format!(
                "parameter '{}.ait_entry_bytes' must be a power of two of at most 32 XPLines",
                p.path()
            )));
        }
        let ait_fill_entry = p.choice(
            "ait_fill",
            "sector",
            &["sector", "entry"],
            "what an AIT-buffer miss reads: its XPLine (sector), or the whole entry (entry: critical XPLine first, the rest in the media's idle time, and the prefetcher stays inside one entry; LENS III-C: 4 KiB access granularity)",
        )? == "entry";
        let ait_ns = p.ns(
            "ait_ns",
            61.0,
            "AIT controller time per RMW miss, besides its DRAM accesses",
        )?;
        let media_read_ns = p.ns(
            "media_read_ns",
            80.0,
            "3D-XPoint media read latency of one XPLine",
        )?;
        let rbw = p.bandwidth(
            "media_read_gbs",
            6.6,
            "media read throughput per DIMM (Yang et al. FAST'20: ~6.6 GB/s peak read of one DIMM)",
        )?;
        let wbw = p.bandwidth("media_write_gbs", 2.3, "media write throughput per DIMM (Yang et al. FAST'20: ~2.3 GB/s peak write of one DIMM)")?;
        let prefetch = p.count(
            "prefetch_xplines",
            2,
            0,
            64,
            "XPLines fetched ahead on a sequential read miss",
        )?;
        let prefetch_after = p.count(
            "prefetch_after",
            2,
            1,
            64,
            "consecutive sequential misses that confirm a stream before prefetching",
        )?;
        let wear_threshold = p.count(
            "wear_threshold",
            14_000,
            1,
            u32::MAX as u64,
            "writes to one XPLine within a window that trigger a migration (LENS III-D: ~14,000)",
        )? as u32;
        let wear_window = p.count("wear_window", 2_500_000, 1, u64::MAX, "media writes per hot-block detection window (fits LENS Fig. 7c: no tails from 64 KiB regions)")?;
        let migration_bytes = p.bytes(
            "migration_bytes",
            64 << 10,
            xp,
            "region copied by one wear-leveling migration (LENS III-D: 64 KiB)",
        )?;
        let migration_ns = p.ns(
            "migration_ns",
            0.0,
            "fixed cost of one migration besides copying its region (remapping, AIT update)",
        )?;
        let dram = p.device("dram")?;
        let lines = (xp / 64) as u32;
        Ok(Nvram {
            dram,
            xp,
            full_mask: if lines == 32 {
                u32::MAX
            } else {
                (1u32 << lines) - 1
            },
            lsq: VecDeque::with_capacity(((lsq / xp) as usize).min(1 << 16)),
            lsq_cap: (lsq / xp) as usize,
            combine_ns,
            rmw: Lru::new((rmw / xp) as usize),
            rmw_hit_ns,
            combine_in_buffer,
            unread: IntMap::default(),
            ait: Lru::new((ait / ait_entry) as usize),
            ait_entry,
            ait_fill_entry,
            fills: VecDeque::new(),
            fill_clock: 0.0,
            ait_ns,
            media_read_ns,
            read_occ: xp as f64 / rbw,
            write_occ: xp as f64 / wbw,
            media_free: 0.0,
            prefetch,
            prefetch_after,
            run: 0,
            last_blk: u64::MAX - 1,
            wear: IntMap::default(),
            wear_epoch: 0,
            wear_threshold,
            wear_window,
            migration_bytes,
            migration_ns,
            migrating: Vec::new(),
            media_writes_total: 0,
            s: NvStats::default(),
        })
    }

    fn stall_of(&self, blk: u64) -> f64 {
        let region = blk * self.xp / self.migration_bytes;
        self.migrating
            .iter()
            .filter(|m| m.0 == region)
            .map(|m| m.1)
            .fold(0.0, f64::max)
    }

    /// Put XPLine `blk` into the AIT buffer as valid from `at`, keeping the
    /// RMW buffer inclusive.
    fn ait_fill(&mut self, blk: u64, at: f64) {
        let per = self.ait_entry / self.xp;
        let page = blk / per;
        let bit = 1u32 << (blk % per);
        if let Some((victim, valid)) = self.ait.insert(page, at, bit) {
            // Only the entry's valid XPLines can be in the RMW buffer.
            let mut m = valid;
            while m != 0 {
                let b = victim * per + m.trailing_zeros() as u64;
                m &= m - 1;
                if self.rmw.take(b).is_some_and(|d| d != 0) {
                    self.write_back(b, at);
                }
            }
        }
    }

    /// Insert XPLine `blk` into the RMW buffer (OR-ing `dirty` into its
    /// mask); a dirty victim is written back to the media.
    fn rmw_insert(&mut self, blk: u64, at: f64, dirty: u32) {
        if let Some((victim, mask)) = self.rmw.insert(blk, at, dirty) {
            if mask != 0 {
                self.write_back(victim, at);
            }
        }
    }

    /// Media write of a partial XPLine leaving the RMW buffer, after
    /// reading its old content if it entered the buffer without it.
    #[inline(never)]
    fn write_back(&mut self, blk: u64, at: f64) {
        self.s.partial_writebacks += 1;
        let mut start = at;
        if !self.unread.is_empty() && self.unread.remove(&blk).is_some() {
            self.s.rmw_modify_reads += 1;
            start = self.fetch(blk, at);
        }
        self.media_write(blk, start);
    }

    /// One XPLine media write, no earlier than `at`; returns its start.
    fn media_write(&mut self, blk: u64, at: f64) -> f64 {
        let w = at.max(self.media_free).max(self.stall_of(blk));
        self.media_free = w + self.write_occ;
        self.s.media_busy += self.write_occ;
        self.s.media_writes += 1;
        self.media_writes_total += 1;
        self.wear_count(blk);
        w
    }

    /// Give the media's idle time up to `now` to the background entry fills,
    /// one XPLine at a time in queue order; demand reads never wait for them.
    fn run_fills(&mut self, now: f64) {
        let per = self.ait_entry / self.xp;
        let mut clock = self.fill_clock.max(self.media_free);
        while let Some(&(page, next, left)) = self.fills.front() {
            if left == 0 {
                self.fills.pop_front();
                continue;
            }
            let bit = 1u32 << next;
            match self.ait.peek(page) {
                None => {
                    // Evicted before it was filled.
                    self.fills.pop_front();
                    continue;
                }
                Some(h) if h.mask & bit != 0 => {}
                Some(_) => {
                    if clock + self.read_occ > now {
                        break;
                    }
                    clock += self.read_occ;
                    self.s.media_busy += self.read_occ;
                    self.s.media_reads += 1;
                    self.s.ait_fill_reads += 1;
                    self.ait.or_mask(page, bit);
                }
            }
            let f = self.fills.front_mut().expect("non-empty");
            f.1 = (next + 1) % per;
            f.2 = left - 1;
        }
        self.fill_clock = clock.max(self.fill_clock);
    }

    /// Bring XPLine `blk` toward the RMW buffer, starting at `t`: AIT
    /// translation, then the AIT buffer or the media. Returns when the data
    /// is at the RMW buffer.
    fn fetch(&mut self, blk: u64, t: f64) -> f64 {
        let per = self.ait_entry / self.xp;
        let page = blk / per;
        let bit = 1u32 << (blk % per);
        self.s.rmw_fill_bytes += self.xp;
        if self.ait_fill_entry {
            self.run_fills(t);
        }
        // AIT table entry: 8 bytes per page, at the bottom of the DRAM.
        let tt = self
            .dram
            .read((page * 8) & !63 & ((1 << 30) - 1), t + self.ait_ns);
        match self.ait.touch(page) {
            Some(h) if h.mask & bit != 0 => {
                self.s.ait_hits += 1;
                let slot =
                    (page % self.ait.len().max(1) as u64) * self.ait_entry + (blk % per) * self.xp;
                let mut d = tt;
                for i in 0..self.xp / 64 {
                    d = self.dram.read((1 << 30) + slot + i * 64, tt);
                }
                d.max(h.valid_at)
            }
            h => {
                self.s.ait_misses += 1;
                self.s.media_reads += 1;
                let start = tt.max(self.media_free);
                self.media_free = start + self.read_occ;
                self.s.media_busy += self.read_occ;
                let d = start + self.media_read_ns;
                self.ait_fill(blk, d);
                if self.ait_fill_entry && h.is_none() && per > 1 {
                    // Bounded backlog (the media may never be idle): the
                    // oldest fill is abandoned; its XPLines are read on demand.
                    if self.fills.len() >= self.ait.capacity() {
                        self.fills.pop_front();
                    }
                    self.fills.push_back((page, (blk % per + 1) % per, per - 1));
                }
                d
            }
        }
    }

    fn front_leave(&self) -> f64 {
        let e = self.lsq.front().expect("non-empty LSQ");
        e.ready.max(self.media_free).max(self.stall_of(e.blk))
    }

    /// Drain the LSQ's front entry to the media, starting at `l`.
    fn commit(&mut self, l: f64) {
        let e = self.lsq.pop_front().expect("non-empty LSQ");
        self.s.lsq_occupancy_ns += l - e.since;
        self.s.span_end = self.s.span_end.max(l);
        let held = self.rmw.touch(e.blk);
        let was_dirty = held.is_some_and(|h| h.mask != 0);
        if was_dirty {
            self.s.buffer_merges += 1;
        }
        let dirty = held.map_or(0, |h| h.mask) | e.mask;
        if self.combine_in_buffer {
            if dirty != self.full_mask {
                // Partial: it waits in the buffer for the rest of its
                // XPLine; the read of its old content is deferred to its
                // write-back (none if the line completes first).
                if held.is_none() {
                    self.unread.insert(e.blk, ());
                }
                self.rmw_insert(e.blk, l, e.mask);
                return;
            }
            if was_dirty {
                self.unread.remove(&e.blk);
            }
        }
        let mut start = l;
        if e.mask != self.full_mask && held.is_none() {
            self.s.rmw_modify_reads += 1;
            start = self.fetch(e.blk, l);
        }
        let w = self.media_write(e.blk, start);
        self.rmw_insert(e.blk, w, 0);
        if was_dirty {
            // Written whole: clean again.
            self.rmw.set_mask(e.blk, 0);
        }
        self.ait_fill(e.blk, w);
    }

    fn wear_count(&mut self, blk: u64) {
        let epoch = self.media_writes_total / self.wear_window;
        if epoch != self.wear_epoch {
            self.wear.clear();
            self.wear_epoch = epoch;
        }
        let c = self.wear.entry(blk).or_insert(0);
        *c += 1;
        if *c >= self.wear_threshold {
            *c = 0;
            let lines = (self.migration_bytes / self.xp) as f64;
            let dur = lines * (self.read_occ + self.write_occ) + self.migration_ns;
            let start = self.media_free;
            self.media_free = start + dur;
            self.s.media_busy += dur;
            self.s.migrations += 1;
            self.s.migration_ns += dur;
            let region = blk * self.xp / self.migration_bytes;
            self.migrating.retain(|m| m.1 > start);
            self.migrating.push((region, self.media_free));
        }
    }

    fn advance(&mut self, t: f64) {
        while !self.lsq.is_empty() {
            let l = self.front_leave();
            if l > t {
                break;
            }
            self.commit(l);
        }
    }
}

impl Device for Nvram {
    fn read(&mut self, addr: u64, t: f64) -> f64 {
        self.s.reads += 1;
        self.advance(t);
        let blk = addr / self.xp;
        let bit = 1u32 << ((addr % self.xp) / 64);
        let new_xpline = blk != self.last_blk;
        if new_xpline {
            self.run = if blk == self.last_blk.wrapping_add(1) {
                self.run + 1
            } else {
                0
            };
            self.last_blk = blk;
        }
        let done = if self.lsq.iter().any(|e| e.blk == blk && e.mask & bit != 0) {
            self.s.lsq_forwards += 1;
            t + self.rmw_hit_ns
        } else if let Some(h) = self.rmw.touch(blk).filter(|h| {
            // A partial line written without its old content serves only
            // the 64 B lines written.
            h.mask == 0 || h.mask & bit != 0 || !self.unread.contains_key(&blk)
        }) {
            self.s.rmw_hits += 1;
            t.max(h.valid_at) + self.rmw_hit_ns
        } else {
            self.s.rmw_misses += 1;
            let d = self.fetch(blk, t);
            if !self.unread.is_empty() {
                self.unread.remove(&blk);
            }
            self.rmw_insert(blk, d, 0);
            d + self.rmw_hit_ns
        };
        if new_xpline && self.run >= self.prefetch_after {
            let per = self.ait_entry / self.xp;
            for k in 1..=self.prefetch {
                let b = blk + k;
                if self.ait_fill_entry && b / per != blk / per {
                    // The next entry's media location is unknown until
                    // it is translated: the prefetcher stays in the entry.
                    break;
                }
                if self.rmw.peek(b).is_none() {
                    self.s.prefetches += 1;
                    let dd = self.fetch(b, t);
                    self.rmw_insert(b, dd, 0);
                }
            }
        }
        done
    }

    fn write(&mut self, addr: u64, t: f64, order: Order) -> f64 {
        self.s.writes += 1;
        self.s.span_start.get_or_insert(t);
        self.advance(t);
        let blk = addr / self.xp;
        let bit = 1u32 << ((addr % self.xp) / 64);
        if let Some(e) = self
            .lsq
            .iter_mut()
            .find(|e| e.blk == blk && order.may_join(e.stamp))
        {
            e.mask |= bit;
            self.s.lsq_merges += 1;
            return t;
        }
        let mut at = t;
        if self.lsq.len() >= self.lsq_cap {
            self.s.lsq_full_waits += 1;
        }
        while self.lsq.len() >= self.lsq_cap {
            let l = self.front_leave();
            self.commit(l);
            at = at.max(l);
        }
        self.s.lsq_wait += at - t;
        self.lsq.push_back(LEntry {
            blk,
            since: at,
            mask: bit,
            ready: at + self.combine_ns,
            stamp: order.stamp,
        });
        at
    }

    fn drain(&mut self, t: f64) -> f64 {
        while !self.lsq.is_empty() {
            let l = self.front_leave();
            self.commit(l);
        }
        for (blk, _) in self.rmw.masked() {
            self.write_back(blk, t);
            self.rmw.set_mask(blk, 0);
        }
        t.max(self.media_free)
    }

    fn stats(&self, s: &mut Stats) {
        let st = &self.s;
        s.set("reads", st.reads as f64, "count");
        s.set("writes", st.writes as f64, "count");
        let mut lsq = Stats::new("lsq");
        lsq.set("merges", st.lsq_merges as f64, "count");
        lsq.set("read_forwards", st.lsq_forwards as f64, "count");
        lsq.set("full_waits", st.lsq_full_waits as f64, "count");
        lsq.set("wait", st.lsq_wait, "ns");
        let span = st.span_end - st.span_start.unwrap_or(st.span_end);
        lsq.set(
            "mean_occupancy",
            if span > 0.0 {
                st.lsq_occupancy_ns / span
            } else {
                0.0
            },
            "entries",
        );
        s.push(lsq);
        let mut rmw = Stats::new("rmw_buffer");
        rmw.set("hits", st.rmw_hits as f64, "count");
        rmw.set("misses", st.rmw_misses as f64, "count");
        rmw.set(
            "hit_rate",
            st.rmw_hits as f64 / (st.rmw_hits + st.rmw_misses).max(1) as f64,
            "ratio",
        );
        rmw.set(
            "read_amplification",
            st.rmw_fill_bytes as f64 / (64 * st.reads).max(1) as f64,
            "ratio",
        );
        rmw.set("modify_reads", st.rmw_modify_reads as f64, "count");
        rmw.set("write_merges", st.buffer_merges as f64, "count");
        rmw.set("partial_writebacks", st.partial_writebacks as f64, "count");
        rmw.set("prefetches", st.prefetches as f64, "count");
        s.push(rmw);
        let mut ait = Stats::new("ait_buffer");
        ait.set("hits", st.ait_hits as f64, "count");
        ait.set("misses", st.ait_misses as f64, "count");
        ait.set(
            "hit_rate",
            st.ait_hits as f64 / (st.ait_hits + st.ait_misses).max(1) as f64,
            "ratio",
        );
        ait.set("fill_reads", st.ait_fill_reads as f64, "count");
        s.push(ait);
        let mut m = Stats::new("media");
        m.set("reads", st.media_reads as f64, "count");
        m.set("writes", st.media_writes as f64, "count");
        m.set("read_bytes", (st.media_reads * self.xp) as f64, "B");
        m.set("write_bytes", (st.media_writes * self.xp) as f64, "B");
        m.set(
            "write_amplification",
            (st.media_writes * self.xp) as f64 / (64 * st.writes).max(1) as f64,
            "ratio",
        );
        m.set("busy", st.media_busy, "ns");
        m.set("migrations", st.migrations as f64, "count");
        m.set("migration_stall", st.migration_ns, "ns");
        s.push(m);
        let mut d = Stats::new("dram");
        self.dram.stats(&mut d);
        s.push(d);
    }

    fn reset_stats(&mut self) {
        self.s = NvStats::default();
        self.dram.reset_stats();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NVRAM DIMM with small, round parameters; `extra` overrides.
    fn dimm(extra: &str) -> Nvram {
        let mut t: toml::Table = "impl = \"nvram\"\nrmw_hit_ns = 100.0\nait_ns = 0.0\nmedia_read_ns = 50.0\nmedia_read_gbs = 2.56\nmedia_write_gbs = 1.28\ncombine_window_ns = 100.0\nprefetch_xplines = 0\n[dram]\nimpl = \"ddr4\"\n"
            .parse()
            .unwrap();
        let over: toml::Table = extra.parse().unwrap();
        t.extend(over);
        let mut p = Params::new("dimm", t).unwrap();
        let d = Nvram::build(&mut p).unwrap();
        p.finish().unwrap();
        d
    }

    #[test]
    fn rmw_hit_costs_rmw_hit_ns() {
        let mut d = dimm("");
        let first = d.read(0, 0.0);
        let t = first + 1000.0;
        assert_eq!(
            d.read(64, t),
            t + 100.0,
            "same XPLine: served by the RMW buffer"
        );
        assert_eq!(d.s.rmw_hits, 1);
        assert_eq!(d.s.media_reads, 1);
    }

    #[test]
    fn entry_fill_brings_the_rest_of_the_ait_entry_in_idle_time() {
        for (mode, hits, reads) in [("sector", 0, 2), ("entry", 1, 16)] {
            let mut d = dimm(&format!("ait_fill = \"{mode}\""));
            // XPLine 0 of entry 0, then XPLine 1 long after (the media idle).
            let t = d.read(0, 0.0) + 10_000.0;
            d.read(256, t);
            assert_eq!(d.s.ait_hits, hits, "{mode}");
            assert_eq!(d.s.media_reads, reads, "{mode}");
        }
        // A demand read does not wait for a fill in progress.
        let mut e = dimm("ait_fill = \"entry\"");
        let mut s = dimm("");
        let te = e.read(0, 0.0);
        let ts = s.read(0, 0.0);
        assert_eq!(e.read(1 << 20, te), s.read(1 << 20, ts));
        // The prefetcher stays inside the entry.
        for (mode, n) in [("entry", 2), ("sector", 4)] {
            let mut p = dimm(&format!(
                "ait_fill = \"{mode}\"\nprefetch_xplines = 2\nprefetch_after = 1"
            ));
            let mut t = 0.0;
            for x in 12..16u64 {
                t = p.read(x * 256, t);
            }
            // entry: XPLines 14 and 15 only; sector: also 16 and 17.
            assert_eq!(p.s.prefetches, n, "{mode}");
        }
    }

    #[test]
    fn read_amplification_is_xpline_over_request() {
        let mut d = dimm("");
        let mut t = 0.0;
        for i in 0..100u64 {
            t = d.read(i * 4096, t) + 1.0;
        }
        assert_eq!(d.s.rmw_fill_bytes, 100 * 256);
        assert_eq!(d.s.reads, 100);
    }

    #[test]
    fn lsq_combines_four_lines_into_one_media_write() {
        let mut d = dimm("");
        for i in 0..4 {
            d.write(i * 64, 0.0, Order::epoch(0));
        }
        d.drain(0.0);
        assert_eq!(d.s.media_writes, 1);
        assert_eq!(d.s.lsq_merges, 3);
        assert_eq!(d.s.rmw_modify_reads, 0, "a full XPLine needs no read");
    }

    #[test]
    fn partial_xpline_write_reads_first() {
        let mut d = dimm("");
        d.write(0, 0.0, Order::epoch(0));
        d.drain(0.0);
        assert_eq!(
            (d.s.rmw_modify_reads, d.s.media_reads, d.s.media_writes),
            (1, 1, 1)
        );
    }

    #[test]
    fn writes_across_a_fence_do_not_combine() {
        let mut d = dimm("combine_window_ns = 1000.0");
        d.write(0, 0.0, Order::epoch(0));
        d.write(64, 2.0, Order::epoch(1));
        d.drain(2.0);
        assert_eq!(d.s.media_writes, 2, "no combining across a fence");
    }

    /// Yang et al.'s XPBuffer experiment in miniature: 128 B halves of
    /// each XPLine of a region, first halves then second halves. A region
    /// that fits the RMW buffer costs one media write per XPLine, a larger
    /// one two (each half a partial write).
    #[test]
    fn buffer_combines_halves_while_the_region_fits() {
        for (xplines, per_round) in [(4u64, 4u64), (64, 128)] {
            // 4 XPLines of RMW buffer; an LSQ of one entry.
            let mut d = dimm("write_combining = \"buffer\"\nrmw_bytes = 1024\nlsq_bytes = 256");
            let round = |d: &mut Nvram, mut t: f64| {
                for half in 0..2 {
                    for x in 0..xplines {
                        for k in 0..2 {
                            t = d.write(x * 256 + half * 128 + k * 64, t, Order::epoch(0)) + 1000.0;
                        }
                    }
                }
                t
            };
            let t = round(&mut d, 0.0);
            let t = d.drain(t) + 1000.0;
            let before = d.s.media_writes;
            let t = round(&mut d, t);
            d.drain(t);
            assert_eq!(d.s.media_writes - before, per_round, "{xplines} XPLines");
        }
        // The same in "lsq" mode: every drained entry is a media write.
        let mut d = dimm("rmw_bytes = 1024\nlsq_bytes = 256");
        let mut t = 0.0;
        for half in 0..2 {
            for k in 0..2 {
                t = d.write(half * 128 + k * 64, t, Order::epoch(0)) + 1000.0;
            }
        }
        d.drain(t);
        assert_eq!(d.s.media_writes, 4, "four 64 B entries, four media writes");
    }

    #[test]
    fn a_dirty_partial_line_is_written_back_when_evicted() {
        let mut d = dimm("write_combining = \"buffer\"\nrmw_bytes = 256\nlsq_bytes = 256");
        let t = d.write(0, 0.0, Order::epoch(0)) + 1000.0;
        let t = d.write(4096, t, Order::epoch(0)) + 1000.0;
        d.read(8192, t);
        assert_eq!(d.s.partial_writebacks, 2);
        assert_eq!(d.s.media_writes, 2);
        // Each read its old content at write-back, not before.
        assert_eq!(d.s.rmw_modify_reads, 2);
        // A line completed in the buffer needs no read at all.
        let mut c = dimm("write_combining = \"buffer\"\nlsq_bytes = 256");
        let mut t = 0.0;
        for k in 0..4 {
            t = c.write(k * 64, t, Order::epoch(0)) + 1000.0;
        }
        c.drain(t);
        assert_eq!(
            (c.s.rmw_modify_reads, c.s.media_reads, c.s.media_writes),
            (0, 0, 1)
        );
    }

    #[test]
    fn another_threads_fence_does_not_stop_combining() {
        let mut d = dimm("combine_window_ns = 1000.0");
        // Thread A wrote at stamp 0; thread B fenced (stamp 1); A, whose
        // floor is still 0, writes the same XPLine: it combines.
        d.write(0, 0.0, Order::epoch(0));
        d.write(64, 2.0, Order { stamp: 1, floor: 0 });
        // A write whose own thread fenced after the entry does not.
        d.write(128, 3.0, Order { stamp: 1, floor: 1 });
        d.drain(3.0);
        assert_eq!(d.s.lsq_merges, 1);
        assert_eq!(d.s.media_writes, 2);
    }

    #[test]
    fn lsq_full_blocks_until_front_drains() {
        // 2 entries; a 256 B media write occupies the media for 200 ns.
        let mut d = dimm("lsq_bytes = 512");
        for b in 0..2u64 {
            for i in 0..4 {
                assert_eq!(d.write(b * 256 + i * 64, 0.0, Order::epoch(0)), 0.0);
            }
        }
        // Full: the third XPLine waits for the front entry's combining
        // window (100 ns) to end and its media write to start.
        assert_eq!(d.write(512, 0.0, Order::epoch(0)), 100.0);
        // The fourth waits for the media to finish that write (100 + 200).
        assert_eq!(d.write(768, 0.0, Order::epoch(0)), 300.0);
        assert!(
            d.write(1024, 0.0, Order::epoch(0)) > 300.0,
            "and not earlier"
        );
    }

    #[test]
    fn wear_leveling_migrates_after_threshold_within_window() {
        let mut d = dimm("wear_threshold = 10\nwear_window = 1000\nmigration_bytes = 1024");
        let mut t = 0.0;
        for k in 0..25 {
            for i in 0..4 {
                t = d.write(i * 64, t, Order::epoch(k));
            }
        }
        d.drain(t);
        assert_eq!(d.s.media_writes, 25);
        assert_eq!(d.s.migrations, 2);
        // 4 XPLines copied, read 100 ns + write 200 ns each.
        assert_eq!(d.s.migration_ns, 2.0 * 4.0 * 300.0);
    }

    #[test]
    fn wear_counters_reset_each_window() {
        // 4 blocks written in turn: each reaches 5 writes per 20-write
        // window, below the threshold of 6: no migration.
        let mut d = dimm("wear_threshold = 6\nwear_window = 20\nmigration_bytes = 1024");
        let mut t = 0.0;
        for k in 0..200u64 {
            let b = k % 4;
            for i in 0..4 {
                t = d.write(b * 256 + i * 64, t, Order::epoch(k));
            }
        }
        d.drain(t);
        assert_eq!(d.s.migrations, 0);
    }

    #[test]
    fn ait_eviction_keeps_rmw_inclusive() {
        // AIT buffer of one 4 KiB entry: reading another page evicts the
        // first page's XPLines from the RMW buffer too.
        let mut d = dimm("ait_buffer_bytes = 4096");
        let t = d.read(0, 0.0) + 1.0;
        let t = d.read(4096, t) + 1.0;
        assert!(d.rmw.peek(0).is_none(), "XPLine 0 left with its AIT entry");
        d.read(0, t);
        assert_eq!(d.s.media_reads, 3);
    }
}
