//! Batch modelling: logged misses run, in order, through the thread's
//! cache model (this machine's last-level cache: PM or DRAM, hit or miss,
//! write-backs) and overlap (MLP) estimator, into the thread's cumulative
//! [`ThreadTotals`]. Whoever runs a batch (the owner thread or the
//! modeller thread, see [`super::offload`]) holds the model's lock.

use super::pm::is_pm;
use super::settings::{self, LOGGED_WEIGHT};
use pmlab_model::cache::{CompactCache, Hierarchy};
use pmlab_model::device::{DeviceCounts, DeviceModel, Level};
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
    /// Dirty lines written back to PM.
    pub pm_writebacks: u64,
    /// Dirty lines written back to DRAM.
    pub dram_writebacks: u64,
    /// Device mode (`pmlab run --device`): the sum, over the PM misses, of
    /// each miss's serial share times the latency of the device level that
    /// served it, ns.
    pub device_lat_ns: f64,
    /// Device mode: what the device model counted (levels, media writes,
    /// migrations and their stalls).
    pub device: DeviceCounts,
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
    /// Position in the thread's access stream.
    pub(super) at: u64,
    /// The value a load of 4 or 8 bytes read (see `addr`'s flags).
    pub(super) value: u64,
}

pub(super) const STORE_BIT: usize = 1 << 63;
/// `LogEntry::value` holds the 8 bytes an 8-byte load read.
pub(super) const VALUE_WIDE: usize = 1 << 62;
/// `LogEntry::value` holds the 4 bytes a 4-byte load read.
pub(super) const VALUE_NARROW: usize = 1 << 61;
/// A flush of the line (`pflush`; device mode only): a store never
/// carries a value, so this pair of bits is free.
pub(super) const FLUSH: usize = STORE_BIT | VALUE_NARROW;
/// A compare of the value the last logged load read (clang's `trace-cmp`
/// callbacks, [`super::hooks::on_cmp`]): `addr` holds the compare's site
/// (its call's return address) and, from bit [`OUTCOME_SHIFT`], its
/// outcome. A store never carries a value, so this pair of bits is free.
pub(super) const BRANCH: usize = STORE_BIT | VALUE_WIDE;
/// Where a [`BRANCH`] entry's outcome sits in `addr` (code addresses are
/// below 2^47).
pub(super) const OUTCOME_SHIFT: u32 = 52;
/// The flag bits of `LogEntry::addr` (user addresses are below 2^57).
const FLAGS: usize = STORE_BIT | VALUE_WIDE | VALUE_NARROW;

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
    /// The thread's cumulative totals.
    pub(super) totals: ThreadTotals,
    /// Device mode: the device's functional model, and the full line
    /// number of each slot of the compact cache (its victims' addresses).
    device: Option<(DeviceModel, Vec<u64>)>,
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
                Some((DeviceModel::new(p), vec![0u64; n]))
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
                totals: ThreadTotals::default(),
                device,
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
        self.totals = ThreadTotals::default();
        if let Some((d, names)) = &mut self.device {
            *d = DeviceModel::new(d.params());
            names.fill(0);
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
        let (before, window_before) = (self.totals.serial, self.window_serial);
        if let Model::Compact(c) = &self.cache {
            for e in &entries[..entries.len().min(PREFETCH_AHEAD)] {
                prefetch(c.set_addr(((e.addr & !FLAGS) >> LINE_SHIFT) as u64));
            }
        }
        for i in 0..entries.len() {
            if let Model::Compact(c) = &self.cache {
                if i + PREFETCH_AHEAD < entries.len() {
                    let ahead = entries[i + PREFETCH_AHEAD].addr & !FLAGS;
                    prefetch(c.set_addr((ahead >> LINE_SHIFT) as u64));
                }
            }
            self.process_one(filter, entries[i]);
        }
        // The batch as the instrumented program ran it: never more overlap
        // than natively (a chase stays a chase), less where the hooked window
        // cannot hold the misses the native window does.
        let after = self.totals.serial;
        let serial = (after.dram - before.dram) + (after.pm - before.pm);
        self.totals.hooked_serial += serial.max(self.window_serial - window_before);
    }

    /// One logged access through the model and the overlap estimator.
    #[inline(always)]
    unsafe fn process_one(&mut self, filter: Option<*mut [usize; FILTER_LINES]>, e: LogEntry) {
        if e.addr & BRANCH == BRANCH {
            let site = e.addr & ((1 << OUTCOME_SHIFT) - 1);
            let outcome = ((e.addr & !FLAGS) >> OUTCOME_SHIFT) as u8;
            self.est.branch(site as u64, outcome);
            return;
        }
        if self.device.is_some() {
            return self.process_device(filter, e);
        }
        let write = e.addr & STORE_BIT != 0;
        let addr = e.addr & !FLAGS;
        let line = addr >> LINE_SHIFT;
        let pm = is_pm(addr);
        let miss = match &mut self.cache {
            Model::Compact(c) => {
                // The victim shares the new line's set, hence its filter slot,
                // which the hook already gave to the new line.
                let a = c.access(line as u64, write, pm);
                if let Some(v) = a.victim {
                    if v.dirty && v.pm {
                        self.totals.pm_writebacks += 1;
                    } else if v.dirty {
                        self.totals.dram_writebacks += 1;
                    }
                }
                !a.hit
            }
            Model::Full(h) => {
                let a = h.access(line as u64, write);
                if let Some(f) = filter {
                    for &ev in &a.evicted[..a.n_evicted] {
                        let slot = &mut (*f)[ev as usize % FILTER_LINES];
                        if *slot >> 1 == ev as usize {
                            *slot = 0;
                        }
                    }
                }
                for &wb in a.writebacks() {
                    if is_pm((wb as usize) << LINE_SHIFT) {
                        self.totals.pm_writebacks += 1;
                    } else {
                        self.totals.dram_writebacks += 1;
                    }
                }
                a.is_miss()
            }
        };
        self.count_miss(e, addr, pm, miss);
    }

    /// The overlap estimate and window position of one modelled access
    /// (after the cache model said whether it missed).
    #[inline(always)]
    fn count_miss(&mut self, e: LogEntry, addr: usize, pm: bool, miss: bool) {
        // Position in hooked-window units: the accesses so far, the logged ones
        // (this one included) weighing LOGGED_WEIGHT.
        self.entries += 1;
        let units = e.at + self.entries * (LOGGED_WEIGHT - 1);
        if miss {
            let kind = if pm { MemKind::Pm } else { MemKind::Dram };
            let loaded = if e.addr & VALUE_WIDE != 0 {
                Loaded::Wide(e.value)
            } else if e.addr & VALUE_NARROW != 0 {
                Loaded::Narrow(e.value as u32)
            } else {
                Loaded::Unknown
            };
            self.est.miss(addr as u64, kind, e.at, loaded, LINE_SHIFT);
            self.totals.serial = self.est.counts();
            let gap = units.saturating_sub(self.last_miss_units);
            self.last_miss_units = units;
            self.window_serial += window_share(gap, settings::hooked_window());
        } else if e.addr & (VALUE_WIDE | VALUE_NARROW) != 0 {
            // A chase through a cached node keeps its dependence; a compare
            // that follows reads a cached value.
            let loaded = if e.addr & VALUE_WIDE != 0 {
                Loaded::Wide(e.value)
            } else {
                Loaded::Narrow(e.value as u32)
            };
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
    unsafe fn process_device(&mut self, filter: Option<*mut [usize; FILTER_LINES]>, e: LogEntry) {
        let Some((dev, names)) = &mut self.device else {
            return;
        };
        let addr = e.addr & !FLAGS;
        let line = addr >> LINE_SHIFT;
        if e.addr & FLUSH == FLUSH {
            let dirty = match &mut self.cache {
                Model::Compact(c) => c
                    .invalidate_tracked(line as u64, names)
                    .is_some_and(|v| v.dirty && v.pm),
                Model::Full(h) => h.invalidate(line as u64) && is_pm(addr),
            };
            if dirty {
                self.totals.pm_writebacks += 1;
                dev.write_back(addr as u64);
                self.totals.device = dev.counts();
            }
            return;
        }
        let write = e.addr & STORE_BIT != 0;
        let pm = is_pm(addr);
        let miss = match &mut self.cache {
            Model::Compact(c) => {
                let (a, victim_line) = c.access_tracked(line as u64, write, pm, names);
                if let Some(v) = a.victim {
                    if v.dirty && v.pm {
                        self.totals.pm_writebacks += 1;
                        dev.write_back(victim_line << LINE_SHIFT);
                    } else if v.dirty {
                        self.totals.dram_writebacks += 1;
                    }
                }
                !a.hit
            }
            Model::Full(h) => {
                let a = h.access(line as u64, write);
                if let Some(f) = filter {
                    for &ev in &a.evicted[..a.n_evicted] {
                        let slot = &mut (*f)[ev as usize % FILTER_LINES];
                        if *slot >> 1 == ev as usize {
                            *slot = 0;
                        }
                    }
                }
                for &wb in a.writebacks() {
                    if is_pm((wb as usize) << LINE_SHIFT) {
                        self.totals.pm_writebacks += 1;
                        dev.write_back(wb << LINE_SHIFT);
                    } else {
                        self.totals.dram_writebacks += 1;
                    }
                }
                a.is_miss()
            }
        };
        let level = (miss && pm).then(|| dev.read(addr as u64));
        let lat = level.map_or(0.0, |l: Level| dev.params().latency(l));
        let before = self.totals.serial.pm;
        self.count_miss(e, addr, pm, miss);
        if let Some((dev, _)) = &self.device {
            self.totals.device_lat_ns += (self.totals.serial.pm - before).max(0.0) * lat;
            self.totals.device = dev.counts();
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

/// The compact model's tag table, in its own 2 MiB-aligned mapping with
/// transparent huge pages: a 2 MiB table on 4 KiB pages costs the program
/// hundreds of TLB entries at every batch (memlat with a 32 MiB model ran
/// ~13 ns per access slower than with a 1 MiB one, beyond the batches'
/// measured time).
struct HugeTable {
    ptr: *mut u32,
    len: usize,
}

impl HugeTable {
    fn new(len: usize) -> Option<HugeTable> {
        let bytes = len.checked_mul(4)?.max(1);
        // SAFETY: a fresh anonymous mapping, owned by the table.
        let p = unsafe { crate::pool::map_anonymous_huge(bytes) };
        (p != libc::MAP_FAILED).then_some(HugeTable {
            ptr: p as *mut u32,
            len,
        })
    }
}

impl AsRef<[u32]> for HugeTable {
    fn as_ref(&self) -> &[u32] {
        // SAFETY: `len` slots mapped read-write for the table's life.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u32]> for HugeTable {
    fn as_mut(&mut self) -> &mut [u32] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HugeTable {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, (self.len * 4).max(1)) };
    }
}
