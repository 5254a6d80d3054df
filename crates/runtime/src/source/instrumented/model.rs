//! Batch modelling: logged misses run, in order, through the thread's
//! cache model (this machine's last-level cache: PM or DRAM, hit or miss,
//! write-backs) and overlap (MLP) estimator, into the thread's cumulative
//! [`ThreadTotals`]. Whoever runs a batch (the owner thread or the
//! modeller thread, see [`super::offload`]) holds the model's lock.

use super::pm::is_pm;
use super::sample::{first_sight_rule, FirstSight, Serial};
use super::settings::{self, UNIT};
use super::timed::{self, BatchTimed, Confusion, SLOW, TIMED};
use pmlab_model::cache::{CompactAccess, CompactCache, Hierarchy};
use pmlab_model::device::{
    Access, DeviceCounts, DeviceModel, LearnedCosts, NativeCosts, NativeTracker,
};
use pmlab_model::mlp::{window_share, Loaded, MemKind, OverlapEstimator, SerialCounts};

/// Entries ahead of the one being processed whose model set is prefetched.
const PREFETCH_AHEAD: usize = 16;

/// Entries of the per-thread filter (direct-mapped, one line each).
pub const FILTER_LINES: usize = 256;
/// log2 of the line size.
pub(super) const LINE_SHIFT: u32 = 6;

/// Cumulative counts of one thread (never reset: readers take differences).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThreadTotals {
    /// Instrumented accesses seen.
    pub accesses: u64,
    /// Accesses that missed the filter, were logged and went through the
    /// cache model.
    pub slow_calls: u64,
    /// Batches of logged accesses the thread processed itself.
    pub batches: u64,
    /// Batches the modeller thread processed for it (they cost the thread
    /// nothing but the hand-off).
    pub offloaded: u64,
    /// TSC cycles spent processing the batches. A batch interrupted by the
    /// epoch signal (whose handler may inject a delay) is not timed: it
    /// counts the mean cycles per entry of the uninterrupted ones.
    pub slow_cycles: u64,
    /// Entries and cycles of the uninterrupted batches.
    pub clean_entries: u64,
    /// See `clean_entries`.
    pub clean_cycles: u64,
    /// Serial accesses and misses (MLP estimate).
    pub serial: SerialCounts,
    /// Serial accesses (both kinds) as the instrumented program itself runs
    /// them: the same misses in the smaller window the hooks leave
    /// ([`HookConfig::hooked_window`](super::settings::HookConfig::hooked_window)).
    /// At least `serial`'s total: the difference, at DRAM latency, is time
    /// the program loses to the hooks.
    pub hooked_serial: f64,
    /// Compare callbacks (clang's `trace-cmp`) seen, and those logged
    /// (read from the hook's state with `accesses`).
    pub compares: u64,
    /// See `compares`.
    pub compares_logged: u64,
    /// Dirty lines written back to PM.
    pub pm_writebacks: u64,
    /// PM lines a store made dirty (clean or absent before): each owes PM
    /// one write-back. The bandwidth model charges write-backs here rather
    /// than at eviction (`pm_writebacks`), which a sampled model, seeing a
    /// fraction of the lines, reaches far too late.
    pub pm_dirtied: u64,
    /// PM lines the cache model missed (every PM miss, as the model saw
    /// it: before the first-sight rule of sampled runs discounts the
    /// latency counts). The bandwidth model's reads: a streaming loop's
    /// lines are each seen once, first sights every one, and they all
    /// move across the memory bus.
    pub pm_lines_read: u64,
    /// Dirty lines written back to DRAM.
    pub dram_writebacks: u64,
    /// Device mode (`pmlab run --device`): the sum, over the PM misses, of
    /// each miss's serial share times its delay: the latency of the device
    /// level that served it less this machine's native cost of that kind
    /// of access (the timed loads' [`LearnedCosts`], or the start-up
    /// [`NativeCosts`] where they have too few samples), ns.
    pub device_read_delay_ns: f64,
    /// Device mode: the timed PM misses whose native cost was learnt.
    pub device_learned: u64,
    /// Device mode: what the device model counted (levels, media writes,
    /// migrations and their stalls).
    pub device: DeviceCounts,
    /// Timed misses ([`super::timed`]): the timed loads, those the machine
    /// missed, and those the model missed.
    pub timed_loads: u64,
    /// See `timed_loads`.
    pub timed_real_misses: u64,
    /// See `timed_loads`.
    pub timed_model_misses: u64,
    /// Serial accesses (DRAM and PM) as the model counted them, before the
    /// timed-miss correction (`serial` is after it).
    pub model_serial: f64,
}

impl ThreadTotals {
    /// Bytes moved between the caches and PM: misses and write-backs, 64 B each.
    pub fn pm_bytes(&self) -> u64 {
        (self.serial.pm_misses + self.pm_writebacks) << LINE_SHIFT
    }
}

/// The thread's cache model: the compact one when the set count allows it
/// (a power of two, a multiple of the filter size: then a line and the
/// victim it evicts share a filter slot), else the full-tag one.
enum Model {
    Compact(CompactCache<HugeTable>),
    Full(Hierarchy),
}

/// One logged access.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LogEntry {
    /// Byte address; bit 63 set for a store, [`VALUE_WIDE`] or
    /// [`VALUE_NARROW`] when `value` holds what a load of 8 or 4 bytes read.
    pub(super) addr: usize,
    /// Position in the thread's access stream (the low [`AT_BITS`] bits;
    /// [`pos`](Self::pos)) and, in a timed entry, the ticks its read took
    /// (the bits above, saturated; [`ticks`](Self::ticks)).
    pub(super) at: u64,
    /// The value a load of 4 or 8 bytes read (see `addr`'s flags).
    pub(super) value: u64,
}

impl LogEntry {
    /// The entry's position in the thread's access stream.
    #[inline(always)]
    pub(super) fn pos(&self) -> u64 {
        self.at & AT_MASK
    }

    /// A timed entry's ticks (0 in any other entry).
    #[inline(always)]
    pub(super) fn ticks(&self) -> u64 {
        self.at >> AT_BITS
    }
}

/// Bits of [`LogEntry::at`] that hold the position (2^48 accesses: days
/// of a thread's run at a billion accesses a second); the ticks of a
/// timed read sit above them.
pub(super) const AT_BITS: u32 = 48;
/// The position's bits of [`LogEntry::at`].
pub(super) const AT_MASK: u64 = (1 << AT_BITS) - 1;

pub(super) const STORE_BIT: usize = 1 << 63;
/// `LogEntry::value` holds the 8 bytes an 8-byte load read.
pub(super) const VALUE_WIDE: usize = 1 << 62;
/// `LogEntry::value` holds the 4 bytes a 4-byte load read.
pub(super) const VALUE_NARROW: usize = 1 << 61;
/// A flush of the line (`pflush`; device mode only): a store never
/// carries a value, so this pair of bits is free. `value` counts the
/// lines after it that the same entry flushes (a run of consecutive
/// lines, [`super::log::extend_flush_run`]).
pub(super) const FLUSH: usize = STORE_BIT | VALUE_NARROW;
/// A compare of the value the last logged load read (clang's `trace-cmp`
/// callbacks, [`super::hooks::on_cmp`]): `addr` holds the compare's site
/// (its call's return address) and, from bit [`OUTCOME_SHIFT`], its
/// outcome. A store never carries a value, so this pair of bits is free.
pub(super) const BRANCH: usize = STORE_BIT | VALUE_WIDE;
/// Where a [`BRANCH`] entry's outcome sits in `addr` (code addresses are
/// below 2^47).
pub(super) const OUTCOME_SHIFT: u32 = 52;
/// A store that carries the value a load of the same address read just
/// before it (`__pmlab_cov_update*`, one hook for a load and the store
/// that follows it), with [`VALUE_WIDE`] or [`VALUE_NARROW`]:
/// [`STORE_BIT`] with a value bit names a flush or a compare.
pub(super) const UPDATE: usize = 1 << 60;
/// The flag bits of `LogEntry::addr` (user addresses are below 2^57),
/// the timed-miss bits ([`TIMED`], [`SLOW`]) included.
pub(super) const FLAGS: usize = STORE_BIT | VALUE_WIDE | VALUE_NARROW | UPDATE | TIMED | SLOW;

/// A thread's model and what it has counted: the part of the thread's
/// state a batch works on.
pub(super) struct ModelState {
    cache: Model,
    est: OverlapEstimator,
    /// Logged accesses run through the model.
    entries: u64,
    /// Position, in hooked-window units, of the last miss.
    last_miss_units: u64,
    /// Sum of the misses' [`window_share`]s.
    window_serial: f64,
    /// The serial counts the current batch's misses added to the
    /// estimator's (before the first-sight rule).
    window_raw: f64,
    /// The thread's cumulative totals.
    pub(super) totals: ThreadTotals,
    /// Device mode: the device's functional model and what it needs.
    device: Option<Box<DeviceState>>,
    /// Sampled runs: the first-sight rule (see [`FirstSight`]); made at
    /// the first batch under sampling.
    first: Option<Box<FirstSight>>,
    /// Timed misses: the window of timed entries, the model's serial
    /// counts before the correction, and the correction so far
    /// (`totals.serial` is `raw` plus `offset`: serial DRAM and PM, DRAM
    /// and PM misses).
    confusion: Confusion,
    raw: SerialCounts,
    offset: [f64; 4],
}

/// A thread's device-mode state (`pmlab run --device`).
struct DeviceState {
    model: DeviceModel,
    /// The full line number of each slot of the compact cache (its
    /// victims' addresses), set by set (empty with the full-tag model).
    names: HugeTable<u64>,
    /// The compact cache's set count less one, and its ways (to prefetch
    /// a set's names).
    set_mask: u64,
    ways: usize,
    /// The locality of the thread's PM misses, for their native cost.
    locality: NativeTracker,
    native: NativeCosts,
    /// The native costs the thread's timed loads measured, by kind.
    learned: LearnedCosts,
}

impl DeviceState {
    /// Prefetch the compact cache's names of `line`'s set (the tags are
    /// prefetched beside them).
    #[inline(always)]
    fn prefetch_names(&self, line: u64) {
        if self.names.len == 0 {
            return;
        }
        let at = (line & self.set_mask) as usize * self.ways;
        // SAFETY: `at` is a set's first slot, inside the table; the
        // prefetches are hints that never fault.
        let p = unsafe { self.names.ptr.add(at) } as *const u32;
        prefetch(p);
        // A set of 16 names spans two cache lines.
        prefetch(p.wrapping_add(16));
    }
}

/// This machine's native costs of a near, a far and a following miss
/// ([`set_native_costs`]).
static NATIVE: std::sync::OnceLock<NativeCosts> = std::sync::OnceLock::new();

/// Device mode: the native costs the delays are corrected by (set once
/// when the source opens, before the first model is made).
pub(super) fn set_native_costs(n: NativeCosts) {
    let _ = NATIVE.set(n);
}

/// The native costs in use (`None` before [`set_native_costs`]): the
/// start-up ones, with the fresh costs the live probes measured once
/// there are enough of them ([`live_costs`]).
pub(super) fn native_costs() -> Option<NativeCosts> {
    NATIVE.get().copied().map(live_costs)
}

/// `n` with its fresh and fresh following costs replaced by the live
/// probes' medians ([`super::pm::fresh::live_fresh`]) once there are
/// enough probes.
#[inline]
fn live_costs(mut n: NativeCosts) -> NativeCosts {
    if let Some((fresh, follow)) = super::pm::fresh::live_fresh() {
        n.fresh_ns = fresh;
        n.fresh_follow_ns = follow;
    }
    n
}

std::thread_local! {
    /// The wear-leveling stall of the calling thread's model already
    /// charged (at a durability point or an epoch's end), ns.
    static STALL_CHARGED: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

/// Device mode: of the calling thread's migration stalls counted so far
/// (`total`, cumulative), what has not yet been charged; marks it charged.
/// A stall is charged once, by whichever comes first: the durability
/// point after the write that caused it, or the epoch's end.
pub fn take_stall(total: f64) -> f64 {
    STALL_CHARGED.with(|c| {
        let due = (total - c.get()).max(0.0);
        if due > 0.0 {
            c.set(total);
        }
        due
    })
}

impl ModelState {
    /// A cold model of the configured cache ([`settings::llc`]); `None`
    /// when the geometry cannot be modelled or memory ran out. The compact
    /// model's flag is true (only it may be handed to the modeller).
    #[cold]
    pub(super) fn new() -> Option<(ModelState, bool)> {
        let llc = settings::llc();
        let compact = llc
            .sets()
            .is_ok_and(|n| n.is_power_of_two() && n % FILTER_LINES as u64 == 0);
        let cache = if compact {
            let n = CompactCache::table_len(llc).ok()?;
            let table = HugeTable::new(n)?;
            let mut c = CompactCache::with_table(llc, table).ok()?;
            if settings::random_replacement() {
                c.set_random_replacement(Some(0x2545_F491_4F6C_DD1D));
            }
            Model::Compact(c)
        } else {
            Model::Full(Hierarchy::new(&[llc]).ok()?)
        };
        let est = OverlapEstimator::new(settings::overlap());
        let device = match settings::device() {
            Some(p) => {
                let n = match &cache {
                    Model::Compact(_) => CompactCache::table_len(llc).ok()?,
                    Model::Full(_) => 0,
                };
                let ways = (llc.ways as usize).max(1);
                // Without a measurement, nothing is taken to be paid
                // natively.
                let native = native_costs().unwrap_or(NativeCosts {
                    near_ns: 0.0,
                    far_ns: 0.0,
                    follow_ns: 0.0,
                    fresh_ns: 0.0,
                    fresh_follow_ns: 0.0,
                });
                Some(Box::new(DeviceState {
                    model: DeviceModel::new(p),
                    names: HugeTable::new(n)?,
                    set_mask: (n / ways).max(1) as u64 - 1,
                    ways,
                    locality: NativeTracker::new(),
                    native,
                    learned: LearnedCosts::default(),
                }))
            }
            None => None,
        };
        Some((
            ModelState {
                cache,
                est,
                entries: 0,
                last_miss_units: 0,
                window_serial: 0.0,
                window_raw: 0.0,
                totals: ThreadTotals::default(),
                device,
                first: None,
                confusion: Confusion::default(),
                raw: SerialCounts::default(),
                offset: [0.0; 4],
            },
            compact,
        ))
    }

    /// Empty the model and the totals, for a new thread.
    pub(super) fn reset(&mut self) {
        if let Model::Compact(c) = &mut self.cache {
            c.clear();
        }
        self.est = OverlapEstimator::new(self.est.config());
        self.entries = 0;
        self.last_miss_units = 0;
        self.window_serial = 0.0;
        self.window_raw = 0.0;
        self.totals = ThreadTotals::default();
        self.first = None;
        self.confusion = Confusion::default();
        self.raw = SerialCounts::default();
        self.offset = [0.0; 4];
        if let Some(d) = &mut self.device {
            d.model = DeviceModel::new(d.model.params());
            d.names.as_mut().fill(0);
            d.locality = NativeTracker::new();
            d.learned = LearnedCosts::default();
        }
    }

    /// Run `entries` through the model, in order, the model's sets
    /// prefetched ahead. `filter` is the owner's filter (needed by the
    /// full-tag model only, which is never handed off): lines the model
    /// evicts leave it.
    ///
    /// # Safety
    ///
    /// The caller holds the model's lock; `filter`, if given, is the owner
    /// thread's.
    #[inline(always)]
    pub(super) unsafe fn run(
        &mut self,
        filter: Option<*mut [usize; FILTER_LINES]>,
        entries: &[LogEntry],
    ) {
        if entries.is_empty() {
            return;
        }
        if self.device.is_some() {
            // Device mode charges its own delays (the timed bits stay in
            // the entries); the timed reads' own cost is charged back
            // like any hook's.
            let mut b = BatchTimed::default();
            self.run_model(filter, entries, &mut b);
            self.totals.timed_loads += b.timed() as u64;
            return;
        }
        // The model runs on its own counts; the correction is kept apart.
        self.totals.serial = self.raw;
        let hooked0 = self.totals.hooked_serial;
        let mut b = BatchTimed::default();
        self.run_model(filter, entries, &mut b);
        let now = self.totals.serial;
        let delta = [
            now.dram - self.raw.dram,
            now.pm - self.raw.pm,
            now.dram_misses as f64 - self.raw.dram_misses as f64,
            now.pm_misses as f64 - self.raw.pm_misses as f64,
        ];
        self.raw = now;
        self.totals.model_serial += delta[0] + delta[1];
        self.totals.timed_loads += b.timed() as u64;
        self.totals.timed_model_misses += b.miss as u64;
        self.totals.timed_real_misses += (b.hit_slow + b.miss - b.miss_fast) as u64;
        self.confusion.add(&b);
        let rates = self.confusion.rates_at(timed::pace());
        if rates == (0.0, 0.0) && self.offset == [0.0; 4] {
            return;
        }
        let misses = (now.dram_misses + now.pm_misses) as f64;
        let share = if misses > 0.0 {
            (now.dram + now.pm) / misses
        } else {
            1.0
        };
        let hooked = self.totals.hooked_serial - hooked0;
        let (fixed, fixed_hooked) = timed::correct(delta, hooked, b.hits, rates, share);
        for (o, (f, d)) in self.offset.iter_mut().zip(fixed.iter().zip(&delta)) {
            *o += f - d;
        }
        self.totals.hooked_serial = hooked0 + fixed_hooked;
        let o = self.offset;
        self.totals.serial = SerialCounts {
            dram: (now.dram + o[0]).max(0.0),
            pm: (now.pm + o[1]).max(0.0),
            dram_misses: (now.dram_misses as f64 + o[2]).round().max(0.0) as u64,
            pm_misses: (now.pm_misses as f64 + o[3]).round().max(0.0) as u64,
            dependent: now.dependent,
        };
    }

    /// [`run`](Self::run) without the timed-miss correction; the model's
    /// hits and the timed entries are counted in `b`.
    ///
    /// # Safety
    ///
    /// As [`run`](Self::run).
    #[inline(always)]
    unsafe fn run_model(
        &mut self,
        filter: Option<*mut [usize; FILTER_LINES]>,
        entries: &[LogEntry],
        b: &mut BatchTimed,
    ) {
        if self.first.is_none() && self.device.is_none() && first_sight_rule() {
            let llc = settings::llc();
            self.first = Some(Box::new(FirstSight::new(
                llc.size_bytes >> LINE_SHIFT,
                llc.ways as usize,
            )));
        }
        let (before, window_before) = (self.totals.serial, self.window_serial);
        if self.first.is_none() && self.device.is_none() {
            if let Model::Compact(c) = &mut self.cache {
                let at = Position {
                    entries: &mut self.entries,
                    last_miss_units: &mut self.last_miss_units,
                    window_serial: &mut self.window_serial,
                };
                run_compact(c, &mut self.est, &mut self.totals, at, entries, b);
                let after = self.totals.serial;
                let serial = (after.dram - before.dram) + (after.pm - before.pm);
                let window = self.window_serial - window_before;
                self.totals.hooked_serial += serial.max(window);
                return;
            }
        }
        if let Model::Compact(c) = &self.cache {
            for e in &entries[..entries.len().min(PREFETCH_AHEAD)] {
                let line = ((e.addr & !FLAGS) >> LINE_SHIFT) as u64;
                prefetch(c.set_addr(line));
                if let Some(d) = self.device.as_deref() {
                    d.prefetch_names(line);
                }
            }
        }
        for i in 0..entries.len() {
            if let Model::Compact(c) = &self.cache {
                if i + PREFETCH_AHEAD < entries.len() {
                    let ahead = ((entries[i + PREFETCH_AHEAD].addr & !FLAGS) >> LINE_SHIFT) as u64;
                    prefetch(c.set_addr(ahead));
                    if let Some(d) = self.device.as_deref() {
                        d.prefetch_names(ahead);
                    }
                }
            }
            self.process_one(filter, entries[i], b);
        }
        if let Some(d) = self.device.as_deref() {
            // The device's counts, once per batch (not per entry).
            self.totals.device = d.model.counts();
            self.totals.device_learned = d.learned.samples();
        }
        if let Some(f) = self.first.as_deref_mut() {
            f.settle();
            self.totals.serial = charged(f, self.est.counts());
        }
        // The batch as the instrumented program ran it: never more overlap
        // than natively (a chase stays a chase), less where the hooked window
        // cannot hold the misses the native window does.
        let after = self.totals.serial;
        let serial = (after.dram - before.dram) + (after.pm - before.pm);
        let mut window = self.window_serial - window_before;
        if self.first.is_some() {
            // The window's stalls of the misses charged, not of every
            // miss of the model.
            let raw = self.window_raw.max(f64::MIN_POSITIVE);
            window *= (serial / raw).clamp(0.0, 1.0);
            self.window_raw = 0.0;
        }
        self.totals.hooked_serial += serial.max(window);
    }

    /// One logged access through the model and the overlap estimator.
    #[inline(always)]
    unsafe fn process_one(
        &mut self,
        filter: Option<*mut [usize; FILTER_LINES]>,
        e: LogEntry,
        b: &mut BatchTimed,
    ) {
        if e.addr & BRANCH == BRANCH {
            let site = e.addr & ((1 << OUTCOME_SHIFT) - 1);
            let outcome = ((e.addr & !FLAGS) >> OUTCOME_SHIFT) as u8;
            self.est.branch(site as u64, outcome);
            return;
        }
        if self.device.is_some() {
            return self.process_device(filter, e, b);
        }
        let write = e.addr & (STORE_BIT | UPDATE) != 0;
        let addr = e.addr & !FLAGS;
        let pm = is_pm(addr);
        let line = (addr >> LINE_SHIFT) as u64;
        // (seen before, seen just before)
        let (seen, recent) = self
            .first
            .as_deref_mut()
            .map_or((true, true), |f| (f.seen(line), f.recent(line)));
        let totals = &mut self.totals;
        let (miss, dirtied) =
            cache_access(&mut self.cache, None, filter, line, write, pm, |_, pm| {
                count_writeback(totals, pm)
            });
        totals.pm_dirtied += dirtied as u64;
        totals.pm_lines_read += (miss && pm) as u64;
        b.note(e.addr, pm, !miss);
        let Some(f) = self.first.as_deref_mut() else {
            return self.count_miss(e, addr, pm, miss);
        };
        if seen && !recent {
            f.resight(miss);
        }
        let raw = self.est.counts();
        self.count_miss(e, addr, pm, miss);
        let now = self.est.counts();
        self.window_raw += (now.dram - raw.dram) + (now.pm - raw.pm);
        let f = self.first.as_deref_mut().expect("checked above");
        if !seen {
            f.first(miss, serial_of(now, Some(raw)));
        }
        self.totals.serial = charged(f, now);
    }

    /// The overlap estimate and window position of one modelled access
    /// (after the cache model said whether it missed).
    #[inline(always)]
    fn count_miss(&mut self, e: LogEntry, addr: usize, pm: bool, miss: bool) {
        // Position in thousandths of hooked-window units: the accesses so
        // far, the logged ones (this one included) weighing the logged
        // weight.
        self.entries += 1;
        let units = e.pos() * UNIT + self.entries * (settings::logged_weight() - UNIT);
        if miss {
            let kind = if pm { MemKind::Pm } else { MemKind::Dram };
            let loaded = loaded_of(e);
            self.est
                .miss(addr as u64, kind, e.pos(), loaded, LINE_SHIFT);
            self.totals.serial = self.est.counts();
            let gap = units.saturating_sub(self.last_miss_units);
            self.last_miss_units = units;
            self.window_serial += window_share(gap, settings::hooked_window());
        } else if e.addr & (VALUE_WIDE | VALUE_NARROW) != 0 {
            // A chase through a cached node keeps its dependence; a compare
            // that follows reads a cached value.
            let loaded = loaded_of(e);
            self.est.hit(addr as u64, loaded, LINE_SHIFT);
        }
    }
}

impl ModelState {
    /// [`process_one`](Self::process_one) in device mode: PM misses and
    /// write-backs also go through the device's functional model, which
    /// needs the written-back lines' addresses (the compact model names
    /// them in a table beside its tags), and flushes are modelled.
    ///
    /// # Safety
    ///
    /// As [`run`](Self::run).
    #[inline(never)]
    unsafe fn process_device(
        &mut self,
        filter: Option<*mut [usize; FILTER_LINES]>,
        e: LogEntry,
        b: &mut BatchTimed,
    ) {
        let Some(dev) = self.device.as_deref_mut() else {
            return;
        };
        let addr = e.addr & !FLAGS;
        let line = (addr >> LINE_SHIFT) as u64;
        if e.addr & FLAGS == FLUSH {
            // A run of `value + 1` consecutive lines (their sets
            // prefetched a few lines ahead).
            let last = line + e.value;
            for line in line..=last {
                if let Model::Compact(c) = &self.cache {
                    let ahead = line + 8;
                    if ahead <= last {
                        prefetch(c.set_addr(ahead));
                        dev.prefetch_names(ahead);
                    }
                }
                let addr = (line << LINE_SHIFT) as usize;
                let pm = is_pm(addr);
                let dirty = match &mut self.cache {
                    Model::Compact(c) => c
                        .invalidate_tracked(line, dev.names.as_mut())
                        .is_some_and(|v| v.dirty && v.pm),
                    Model::Full(h) => h.invalidate(line) && pm,
                };
                if pm {
                    dev.locality.flush(line);
                }
                if dirty {
                    self.totals.pm_writebacks += 1;
                    dev.model.write_back(addr as u64);
                }
            }
            return;
        }
        let write = e.addr & (STORE_BIT | UPDATE) != 0;
        let pm = is_pm(addr);
        let totals = &mut self.totals;
        let model = &mut dev.model;
        let (miss, dirtied) = cache_access(
            &mut self.cache,
            Some(dev.names.as_mut()),
            filter,
            line,
            write,
            pm,
            |victim, pm| {
                count_writeback(totals, pm);
                if pm {
                    model.write_back(victim << LINE_SHIFT);
                }
            },
        );
        totals.pm_dirtied += dirtied as u64;
        totals.pm_lines_read += (miss && pm) as u64;
        b.note(e.addr, pm, !miss);
        // The delay of a PM miss: the level that served it, less what
        // this kind of access (near, far, following the one before,
        // flushed just before) already costs natively.
        let delay = if miss && pm {
            let level = dev.model.read(addr as u64);
            let access = dev.locality.classify(line);
            if matches!(access, Access::Fresh | Access::FreshFollow(_)) {
                // The program's own cost of a fresh line lately.
                dev.native = live_costs(dev.native);
            }
            // A timed load says what this kind of access costs natively
            // here and now.
            if e.addr & TIMED != 0 && !write {
                if let Some(ns) = timed::native_ns(e.ticks()) {
                    dev.learned.note(access, ns);
                }
            }
            dev.learned
                .delay_ns(dev.model.params(), level, access, &dev.native)
        } else {
            0.0
        };
        let before = self.totals.serial.pm;
        self.count_miss(e, addr, pm, miss);
        self.totals.device_read_delay_ns += (self.totals.serial.pm - before).max(0.0) * delay;
    }
}

/// Where a thread's model stands in its access stream (the fields of
/// [`ModelState`] that [`run_compact`] advances).
struct Position<'a> {
    entries: &'a mut u64,
    last_miss_units: &'a mut u64,
    window_serial: &'a mut f64,
}

/// [`ModelState::run`] in the common case: the compact model, no device,
/// no first-sight rule. The same work as `process_one` and `count_miss`
/// entry by entry, with the settings read once per batch, the counts kept
/// in locals and stored once, and the estimator's counts copied once (the
/// estimator's hits and compares leave them alone): the same totals
/// (`model/replay.rs` checks it on every stream), about half the
/// instructions outside the estimator (`bench/batch-cost.sh`).
#[inline(always)]
fn run_compact(
    c: &mut CompactCache<HugeTable>,
    est: &mut OverlapEstimator,
    totals: &mut ThreadTotals,
    at: Position,
    entries: &[LogEntry],
    b: &mut BatchTimed,
) {
    let weight = settings::logged_weight() - UNIT;
    let window = settings::hooked_window();
    let window_f = window as f64;
    let (mut n, mut last, mut window_serial) =
        (*at.entries, *at.last_miss_units, *at.window_serial);
    let (mut dirtied, mut read, mut wb_pm, mut wb_dram) = (0u64, 0u64, 0u64, 0u64);
    let mut missed = false;
    let line_of = |e: &LogEntry| ((e.addr & !FLAGS) >> LINE_SHIFT) as u64;
    for e in &entries[..entries.len().min(PREFETCH_AHEAD)] {
        prefetch(c.set_addr(line_of(e)));
    }
    for (i, &e) in entries.iter().enumerate() {
        if let Some(ahead) = entries.get(i + PREFETCH_AHEAD) {
            prefetch(c.set_addr(line_of(ahead)));
        }
        if e.addr & BRANCH == BRANCH {
            let site = e.addr & ((1 << OUTCOME_SHIFT) - 1);
            let outcome = ((e.addr & !FLAGS) >> OUTCOME_SHIFT) as u8;
            est.branch(site as u64, outcome);
            continue;
        }
        let write = e.addr & (STORE_BIT | UPDATE) != 0;
        let addr = e.addr & !FLAGS;
        let pm = is_pm(addr);
        let f = c.access_flags((addr >> LINE_SHIFT) as u64, write, pm);
        b.note(e.addr, pm, f & CompactAccess::HIT != 0);
        // A dirty victim is written back to its memory.
        let wb = u64::from((f / CompactAccess::VICTIM_DIRTY) & 1);
        let victim_pm = u64::from((f / CompactAccess::VICTIM_PM) & 1);
        wb_pm += wb & victim_pm;
        wb_dram += wb & !victim_pm;
        dirtied += u64::from((f / CompactAccess::DIRTIED) & 1) & u64::from(pm);
        // Position in thousandths of hooked-window units, as `count_miss`.
        n += 1;
        let units = e.pos() * UNIT + n * weight;
        if f & CompactAccess::HIT == 0 {
            read += pm as u64;
            let kind = if pm { MemKind::Pm } else { MemKind::Dram };
            let loaded = loaded_of(e);
            est.miss(addr as u64, kind, e.pos(), loaded, LINE_SHIFT);
            missed = true;
            let gap = units.saturating_sub(last);
            last = units;
            // `window_share(gap, window)`: below the window (under 2^63)
            // the gap converts as a signed integer, to the same value in
            // fewer instructions.
            window_serial += if gap < window && window < 1 << 63 {
                gap as i64 as f64 / window_f
            } else {
                window_share(gap, window)
            };
        } else if e.addr & (VALUE_WIDE | VALUE_NARROW) != 0 {
            let loaded = loaded_of(e);
            est.hit(addr as u64, loaded, LINE_SHIFT);
        }
    }
    (*at.entries, *at.last_miss_units, *at.window_serial) = (n, last, window_serial);
    totals.pm_dirtied += dirtied;
    totals.pm_lines_read += read;
    totals.pm_writebacks += wb_pm;
    totals.dram_writebacks += wb_dram;
    if missed {
        totals.serial = est.counts();
    }
}

/// The serial counts `now`, less `before` if given, as [`Serial`].
fn serial_of(now: SerialCounts, before: Option<SerialCounts>) -> Serial {
    let b = before.unwrap_or_default();
    [
        now.dram - b.dram,
        now.pm - b.pm,
        now.dram_misses.saturating_sub(b.dram_misses) as f64,
        now.pm_misses.saturating_sub(b.pm_misses) as f64,
    ]
}

/// The estimator's counts `raw` as the first-sight rule charges them.
fn charged(f: &FirstSight, raw: SerialCounts) -> SerialCounts {
    let c = f.charged(serial_of(raw, None));
    SerialCounts {
        dram: c[0],
        pm: c[1],
        dram_misses: c[2].round() as u64,
        pm_misses: c[3].round() as u64,
        dependent: raw.dependent,
    }
}

/// The value a logged load carried (its flags say whether it did, and
/// how wide), as the overlap estimator takes it.
#[inline(always)]
fn loaded_of(e: LogEntry) -> Loaded {
    if e.addr & VALUE_WIDE != 0 {
        Loaded::Wide(e.value)
    } else if e.addr & VALUE_NARROW != 0 {
        Loaded::Narrow(e.value as u32)
    } else {
        Loaded::Unknown
    }
}

/// A dirty victim written back to PM (`pm`) or DRAM.
#[inline(always)]
fn count_writeback(totals: &mut ThreadTotals, pm: bool) {
    if pm {
        totals.pm_writebacks += 1;
    } else {
        totals.dram_writebacks += 1;
    }
}

/// One access of `line` through the cache model: whether it missed, and
/// whether a store to PM made the line dirty (the bandwidth model's
/// write-back, charged when the line is dirtied). Each
/// dirty line it evicts goes to `writeback(line, pm)` (the line number is
/// known with `names`, the compact model's table of its slots' lines, and
/// with the full-tag model; else 0). Lines the full-tag model evicts leave
/// `filter`.
///
/// # Safety
///
/// As [`ModelState::run`].
#[inline(always)]
unsafe fn cache_access(
    cache: &mut Model,
    names: Option<&mut [u64]>,
    filter: Option<*mut [usize; FILTER_LINES]>,
    line: u64,
    write: bool,
    pm: bool,
    mut writeback: impl FnMut(u64, bool),
) -> (bool, bool) {
    match cache {
        Model::Compact(c) => {
            // The victim shares the new line's set, hence its filter slot,
            // which the hook already gave to the new line.
            let (a, victim_line) = match names {
                Some(n) => c.access_tracked(line, write, pm, n),
                None => (c.access(line, write, pm), 0),
            };
            if let Some(v) = a.victim.filter(|v| v.dirty) {
                writeback(victim_line, v.pm);
            }
            (!a.hit, a.dirtied && pm)
        }
        Model::Full(h) => {
            let dirtied = write && pm && !h.levels().iter().any(|l| l.is_dirty(line));
            let a = h.access(line, write);
            if let Some(f) = filter {
                for &ev in &a.evicted[..a.n_evicted] {
                    let slot = &mut (*f)[ev as usize % FILTER_LINES];
                    if *slot >> 1 == ev as usize {
                        *slot = 0;
                    }
                }
            }
            for &wb in a.writebacks() {
                writeback(wb, is_pm((wb as usize) << LINE_SHIFT));
            }
            (a.is_miss(), dirtied)
        }
    }
}

#[inline(always)]
fn prefetch(p: *const u32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint never faults.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The compact model's tag table (`u32` slots) and, in device mode, its
/// table of the slots' lines (`u64`), each in its own 2 MiB-aligned
/// mapping with transparent huge pages: a 2 MiB table on 4 KiB pages
/// costs the program hundreds of TLB entries at every batch (memlat with a
/// 32 MiB model ran ~13 ns per access slower than with a 1 MiB one, beyond
/// the batches' measured time). Zeroed when mapped.
struct HugeTable<T: Copy = u32> {
    ptr: *mut T,
    len: usize,
}

impl<T: Copy> HugeTable<T> {
    fn new(len: usize) -> Option<HugeTable<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?.max(1);
        // SAFETY: a fresh anonymous mapping, owned by the table.
        let p = unsafe { crate::pool::map_anonymous_huge(bytes) };
        (p != libc::MAP_FAILED).then_some(HugeTable {
            ptr: p as *mut T,
            len,
        })
    }

    fn bytes(&self) -> usize {
        (self.len * std::mem::size_of::<T>()).max(1)
    }
}

impl<T: Copy> AsRef<[T]> for HugeTable<T> {
    fn as_ref(&self) -> &[T] {
        // SAFETY: `len` slots mapped read-write for the table's life
        // (zero bytes are a valid value of the integer types used).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Copy> AsMut<[T]> for HugeTable<T> {
    fn as_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Copy> Drop for HugeTable<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.bytes()) };
    }
}

/// Lines of the chases [`measure_native_costs`] follows (256 KiB).
const REREAD_LINES: usize = 4096;
/// Lines per block of its second chase (256 B blocks).
const FOLLOW_BLOCK: usize = 4;
/// Lines of its third and fourth chases (8 KiB: each line re-read right
/// after its flush, [`pmlab_model::device::Access::Fresh`], one by one and
/// in blocks of [`FOLLOW_BLOCK`] lines).
const FRESH_LINES: usize = pmlab_model::device::FRESH_BURST as usize;

/// A number from the environment variable `key`, when set to one (>= 0).
fn env_ns(key: &str) -> Option<f64> {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// True when the environment gives any of device mode's native costs
/// (`PMLAB_DEVICE_*_NS`, [`measure_native_costs`]): they are then used as
/// given, and no timed load replaces them.
pub(super) fn native_costs_given() -> bool {
    [
        "PMLAB_DEVICE_NEAR_NS",
        "PMLAB_DEVICE_FOLLOW_NS",
        "PMLAB_DEVICE_FRESH_NS",
        "PMLAB_DEVICE_FRESH_FOLLOW_NS",
    ]
    .iter()
    .any(|k| env_ns(k).is_some())
}

/// True when device mode times the program's own loads to learn their
/// native costs ([`LearnedCosts`]): the environment neither names a
/// `PMLAB_TIMED_MISSES` rate (or `off`) nor gives native costs.
pub(super) fn device_times_loads() -> bool {
    std::env::var_os("PMLAB_TIMED_MISSES").is_none() && !native_costs_given()
}

/// This machine's native costs for device mode's delays, `far_ns` (the
/// calibrated DRAM latency) given: two random dependent chases over the
/// same 256 KiB, flushed with the evicting flush
/// ([`super::pm::evicting_flush`]) before each pass, the median of
/// five passes after a first untimed one, timed on the thread's CPU
/// clock: one line by one (the near
/// cost), and in 256 B blocks read in order (the following lines' cost,
/// [`NativeCosts::follow_from`]); and the first 8 KiB of it alone, each
/// line re-read right after its flush, one by one (the fresh cost) and in
/// 256 B blocks (the fresh following lines' cost; 25 passes each).
/// `PMLAB_DEVICE_NEAR_NS`, `PMLAB_DEVICE_FOLLOW_NS`,
/// `PMLAB_DEVICE_FRESH_NS` and `PMLAB_DEVICE_FRESH_FOLLOW_NS` give the
/// values instead (tests, or a measurement made elsewhere; with the first
/// three given and not the fourth, a fresh following line costs what a
/// fresh one does). Without memory to measure in, `far_ns` for all.
///
/// Unless the environment gives a fresh cost (or
/// `PMLAB_DEVICE_FRESH_PROBE=0`) or the program's timed loads are to
/// teach the costs ([`device_times_loads`]), the fresh costs are then measured live
/// as well, while the program runs ([`super::pm::fresh`]): once there are
/// enough probes their medians replace the start-up ones
/// ([`native_costs`]).
pub(super) fn measure_native_costs(far_ns: f64) -> NativeCosts {
    let (near, follow, fresh, fresh_follow) = (
        env_ns("PMLAB_DEVICE_NEAR_NS"),
        env_ns("PMLAB_DEVICE_FOLLOW_NS"),
        env_ns("PMLAB_DEVICE_FRESH_NS"),
        env_ns("PMLAB_DEVICE_FRESH_FOLLOW_NS"),
    );
    let probe_off = std::env::var("PMLAB_DEVICE_FRESH_PROBE").is_ok_and(|v| v.trim() == "0");
    // (Not in the unit tests: the probe's state is process-wide, and its
    // own tests set it.)
    if fresh.is_none()
        && fresh_follow.is_none()
        && !probe_off
        && !device_times_loads()
        && !cfg!(test)
    {
        // The fresh costs swing within a run: measured live as well
        // (`PMLAB_DEVICE_FRESH_PROBE=0` keeps the start-up ones), unless
        // the program's own timed loads teach them.
        super::pm::fresh::enable_fresh_probe();
    }
    let measured = if near.is_none() || follow.is_none() || fresh.is_none() {
        measure_chases()
    } else {
        None
    };
    let near_ns = near.or(measured.map(|m| m.0)).unwrap_or(far_ns);
    let follow_ns = follow
        .or(measured.map(|m| NativeCosts::follow_from(m.0, m.1, FOLLOW_BLOCK as u32)))
        .unwrap_or(near_ns);
    let fresh_ns = fresh.or(measured.map(|m| m.2)).unwrap_or(near_ns);
    let fresh_follow_ns = fresh_follow
        .or(measured.map(|m| NativeCosts::follow_from(m.2, m.3, FOLLOW_BLOCK as u32)))
        .unwrap_or(fresh_ns);
    NativeCosts {
        near_ns,
        far_ns,
        follow_ns,
        fresh_ns,
        fresh_follow_ns,
    }
}

/// The four chases of [`measure_native_costs`]: ns per line one line by
/// one and in blocks of [`FOLLOW_BLOCK`] lines, then the same over the
/// first [`FRESH_LINES`]. `None` when the memory cannot be mapped.
fn measure_chases() -> Option<(f64, f64, f64, f64)> {
    let bytes = REREAD_LINES * 64;
    // SAFETY: a fresh private anonymous mapping, unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let b = base as *mut u8;
    let op = super::pm::evicting_flush(crate::persist::cpu_flush_op());
    let mut out = [0f64; 4];
    // (lines per block, lines, timed passes): the short chase's passes
    // are 30x shorter, and noisier.
    for (k, (block, lines, n)) in [
        (1usize, REREAD_LINES, 5usize),
        (FOLLOW_BLOCK, REREAD_LINES, 5),
        (1, FRESH_LINES, 25),
        (FOLLOW_BLOCK, FRESH_LINES, 25),
    ]
    .into_iter()
    .enumerate()
    {
        let blocks = lines / block;
        // A random cyclic order of the blocks (Fisher-Yates, xorshift);
        // inside a block the lines in order.
        let mut order: Vec<usize> = (0..blocks).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in (1..blocks).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let seq: Vec<usize> = order
            .iter()
            .flat_map(|&o| (0..block).map(move |l| o * block + l))
            .collect();
        let mut passes = [0f64; 25];
        let passes = &mut passes[..n];
        // SAFETY: every address is inside the mapping; each line holds the
        // address of the next one.
        unsafe {
            for i in 0..lines {
                let next = b.add(seq[(i + 1) % lines] * 64) as usize;
                std::ptr::write_volatile(b.add(seq[i] * 64) as *mut usize, next);
            }
            let mut p = b.add(seq[0] * 64) as usize;
            for pass in 0..=passes.len() {
                for l in 0..lines {
                    crate::persist::flush_line(b.add(l * 64), op);
                }
                crate::persist::sfence();
                let t = pmlab_clock::thread_cpu_ns();
                for _ in 0..lines {
                    p = std::ptr::read_volatile(p as *const usize);
                }
                let ns = pmlab_clock::thread_cpu_ns().saturating_sub(t) as f64 / lines as f64;
                if pass > 0 {
                    passes[pass - 1] = ns;
                }
            }
            std::hint::black_box(p);
        }
        passes.sort_by(f64::total_cmp);
        out[k] = passes[passes.len() / 2];
    }
    // SAFETY: our own mapping, unmapped once.
    unsafe { libc::munmap(base, bytes) };
    Some((out[0], out[1], out[2], out[3]))
}

#[cfg(test)]
mod replay;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wear_leveling_stall_is_charged_once() {
        // The thread's model counted one 50 us migration: charged at the
        // first look (a durability point), not again at the epoch's end.
        assert_eq!(take_stall(50_000.0), 50_000.0);
        assert_eq!(take_stall(50_000.0), 0.0);
        // An older reading (totals published before) charges nothing.
        assert_eq!(take_stall(0.0), 0.0);
        // The next migration: only it.
        assert_eq!(take_stall(100_000.0), 50_000.0);
    }

    #[test]
    fn the_native_costs_are_measured() {
        // Plausible latencies, whatever the environment gives.
        let (near, block, fresh, fresh_block) = measure_chases().expect("256 KiB mapped");
        assert!(near > 1.0 && near < 100_000.0, "{near}");
        assert!(block > 0.1 && block < 100_000.0, "{block}");
        assert!(fresh > 1.0 && fresh < 100_000.0, "{fresh}");
        assert!(
            fresh_block > 0.1 && fresh_block < 100_000.0,
            "{fresh_block}"
        );
        let n = measure_native_costs(150.0);
        assert_eq!(n.far_ns, 150.0);
        assert!(
            n.near_ns > 0.0 && n.follow_ns >= 0.0 && n.fresh_ns > 0.0 && n.fresh_follow_ns >= 0.0,
            "{n:?}"
        );
    }
}
