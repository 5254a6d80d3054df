//! Which addresses the hooks and the model count as PM: everything
//! (Quartz's single-memory mode), the runtime's PM pool and registered
//! ranges (two-memory mode), or everything until the program maps a pool
//! or registers a range ([`PmMode`]).
//!
//! Ranges come from the program (`pmlab_pm_register`, for file mappings
//! it manages itself: a Rust engine's pool, a DAX file) and from the
//! runtime's own tests. The table has [`MAX_RANGES`] slots; a slot is
//! free while its end is 0. Writers (registration is rare) take a spin
//! lock; readers (every hook that classifies an address) take none: they
//! scan the slots up to the highest one ever used.

use super::settings::PmMode;
use pmlab_trace::Op;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

static PM_MODE: AtomicU8 = AtomicU8::new(PmMode::Auto as u8);
/// Ranges that can be registered at once (`PMLAB_MAX_PM_RANGES`).
pub const MAX_RANGES: usize = 64;
/// Slots ever used (a high-water mark: it never goes down, so `Auto`
/// mode stays with the registered ranges once the program has named one).
static RANGE_COUNT: AtomicUsize = AtomicUsize::new(0);
static RANGES: [(AtomicUsize, AtomicUsize); MAX_RANGES] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_RANGES];
static WRITER: AtomicBool = AtomicBool::new(false);

/// Held by the tests that fill the table or depend on a free slot (the
/// table is process-wide and tests run in parallel).
#[cfg(test)]
pub static TEST_TABLE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Why a range could not be registered or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Empty, starting at 0, or wrapping around the address space.
    Invalid,
    /// [`MAX_RANGES`] ranges are registered.
    Full,
    /// No registered range has that start and length.
    Unknown,
}

/// Set the PM mode (when the hooks are activated).
pub(super) fn set_mode(mode: PmMode) {
    PM_MODE.store(mode as u8, Ordering::Relaxed);
}

struct WriterGuard;

fn lock() -> WriterGuard {
    while WRITER
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    WriterGuard
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        WRITER.store(false, Ordering::Release);
    }
}

/// Force the writers' lock open in a forked child (the holder no longer
/// exists there).
pub fn reset_after_fork() {
    WRITER.store(false, Ordering::Release);
}

/// Register `[start, start + len)` as emulated PM. At most
/// [`MAX_RANGES`] ranges at a time; the same range may be registered
/// twice (and is then removed twice).
pub fn register(start: usize, len: usize) -> Result<(), RangeError> {
    if start == 0 || len == 0 || start.checked_add(len).is_none() {
        return Err(RangeError::Invalid);
    }
    let _g = lock();
    let used = RANGE_COUNT.load(Ordering::Relaxed);
    let slot = (0..used)
        .find(|&i| RANGES[i].1.load(Ordering::Relaxed) == 0)
        .or((used < MAX_RANGES).then_some(used))
        .ok_or(RangeError::Full)?;
    // The start first, then the end that makes the slot live.
    RANGES[slot].0.store(start, Ordering::Relaxed);
    RANGES[slot].1.store(start + len, Ordering::Release);
    if slot == used {
        RANGE_COUNT.store(used + 1, Ordering::Release);
    }
    Ok(())
}

/// Remove the range registered as `[start, start + len)` (one of them,
/// when registered twice).
pub fn unregister(start: usize, len: usize) -> Result<(), RangeError> {
    if start == 0 || len == 0 || start.checked_add(len).is_none() {
        return Err(RangeError::Invalid);
    }
    let _g = lock();
    let used = RANGE_COUNT.load(Ordering::Relaxed);
    let slot = (0..used)
        .find(|&i| {
            RANGES[i].0.load(Ordering::Relaxed) == start
                && RANGES[i].1.load(Ordering::Relaxed) == start + len
        })
        .ok_or(RangeError::Unknown)?;
    RANGES[slot].1.store(0, Ordering::Release);
    RANGES[slot].0.store(0, Ordering::Relaxed);
    Ok(())
}

/// Register `[start, start + len)` as emulated PM (the runtime's tests);
/// false when the table is full or the range is invalid.
pub fn add_pm_range(start: usize, len: usize) -> bool {
    register(start, len).is_ok()
}

/// True when `[addr, addr + len)` lies inside one registered range.
pub fn in_registered(addr: usize, len: usize) -> bool {
    let n = RANGE_COUNT.load(Ordering::Acquire);
    let end = addr.saturating_add(len.max(1));
    RANGES[..n].iter().any(|(lo, hi)| {
        let hi = hi.load(Ordering::Acquire);
        hi != 0 && addr >= lo.load(Ordering::Relaxed) && end <= hi
    })
}

/// True when `addr` is emulated PM: everything in `All` mode; in `Auto`
/// mode everything until a PM pool exists or a range was registered, then
/// like `Pool`: addresses in the runtime's PM pool or in a registered
/// range.
#[inline]
pub fn is_pm(addr: usize) -> bool {
    let mode = PM_MODE.load(Ordering::Relaxed);
    if mode == PmMode::All as u8 {
        return true;
    }
    let n = RANGE_COUNT.load(Ordering::Acquire);
    let (base, _) = crate::pool::range();
    if mode == PmMode::Auto as u8 && n == 0 && base == 0 {
        return true;
    }
    crate::pool::contains(addr, 1) || in_registered(addr, 1)
}

/// The flush instruction device mode's start-up chases and live probes
/// use for `op`: one that evicts the line (`clwb` may leave it in the
/// CPU's caches, as AMD's Zen does; `clflushopt` writes it back and
/// evicts it). `pflush` itself keeps the CPU's best flush.
pub fn evicting_flush(op: Op) -> Op {
    if op == Op::Clwb {
        Op::ClflushOpt
    } else {
        op
    }
}

/// Device mode's live measurement of a flushed line's native cost
/// ([`pmlab_model::device::Access::Fresh`] and `FreshFollow`): on this VM
/// a just-flushed line's re-read costs 55-148 ns from one moment to the
/// next within one process, and an instrumented program's re-reads cost
/// otherwise than the native build's (its hooks put time between a flush
/// and the re-read), so the constants measured at start-up misfit much of
/// a run. Instead, while the program runs, about once every
/// [`PROBE_GAP_NS`](fresh::PROBE_GAP_NS) (give or take half, drawn at
/// random), at the end of a `pflush` call on the program's own thread
/// ([`after_flushes`](fresh::after_flushes)), the runtime flushes 32
/// lines of each of two private 4 KiB pages with the same instruction,
/// and at the thread's next durability point
/// ([`at_drain`](fresh::at_drain)) chases them as LENS's chase reads a
/// region: the first page line by line in a random order (the fresh
/// cost, per line), the second in 256 B blocks in a random order, each
/// block's lines in order (per block; less the fresh cost, per following
/// line: the fresh following cost). Each chase is timed whole with the
/// TSC (no fence inside it that would hold the prefetchers back). The
/// medians of the last [`PROBE_RING`](fresh::PROBE_RING) probes are the
/// costs the device model's delays subtract
/// ([`live_fresh`](fresh::live_fresh)). A probe reads 64 lines (5-10 us
/// on this VM), about 1% of the program's time at that rate, not charged
/// back. Off unless [`enable_fresh_probe`](fresh::enable_fresh_probe) was
/// called (device mode, the fresh costs not given by the environment).
pub mod fresh {
    use pmlab_clock::rdtsc_ordered;
    use pmlab_trace::Op;
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

    /// Least time between two probes, ns.
    pub const PROBE_GAP_NS: f64 = 1_000_000.0;
    /// Probes the medians are taken over (the latest ones).
    pub const PROBE_RING: usize = 31;
    /// Probes before the live medians replace the start-up costs.
    pub const MIN_PROBES: u64 = 5;
    /// A probe slower than this (ns per line) was interrupted: dropped.
    const MAX_PROBE_NS: f64 = 5_000.0;

    static ON: AtomicBool = AtomicBool::new(false);
    static LAST: AtomicU64 = AtomicU64::new(0);
    static BUSY: AtomicBool = AtomicBool::new(false);
    static PROBES: AtomicU64 = AtomicU64::new(0);
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    /// (fresh, following) per probe, in ns * [`SCALE`].
    static RING: [(AtomicU32, AtomicU32); PROBE_RING] =
        [const { (AtomicU32::new(0), AtomicU32::new(0)) }; PROBE_RING];
    static FRESH_BITS: AtomicU64 = AtomicU64::new(0);
    static FOLLOW_BITS: AtomicU64 = AtomicU64::new(0);
    const SCALE: f64 = 16.0;

    /// Lines a probe chases in each of its pages (the first half of the
    /// page), and per block in the second one.
    pub const PAGE_LINES: usize = 32;
    /// Words of a 4 KiB page.
    const PAGE_WORDS: usize = 512;
    const BLOCK_LINES: usize = 4;

    /// The runtime's two probe pages, each line holding the address of
    /// the next one to read ([`chain`]). One pair for the process: one
    /// probe at a time.
    #[repr(C, align(4096))]
    struct Pages(UnsafeCell<[[usize; PAGE_WORDS]; 2]>);
    // SAFETY: only the thread holding `BUSY` (or a test holding the test
    // lock) touches them.
    unsafe impl Sync for Pages {}
    static PAGES: Pages = Pages(UnsafeCell::new([[0; PAGE_WORDS]; 2]));

    /// The order a page's lines are read in: its blocks of `block` lines
    /// in a fixed random order (Fisher-Yates with xorshift), each block's
    /// lines in order.
    pub fn chain(block: usize, seed: u64) -> [usize; PAGE_LINES] {
        let blocks = PAGE_LINES / block;
        let mut order = [0usize; PAGE_LINES];
        for (i, o) in order.iter_mut().enumerate().take(blocks) {
            *o = i;
        }
        let mut x = seed | 1;
        for i in (1..blocks).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut lines = [0usize; PAGE_LINES];
        for j in 0..blocks {
            for k in 0..block {
                lines[j * block + k] = order[j] * block + k;
            }
        }
        lines
    }

    /// A probe under way (from [`after_flushes`] to [`at_drain`]): the timer's own
    /// cost, ticks.
    #[must_use]
    pub struct Probe {
        tick: u64,
    }

    /// Start probing (device mode, when the environment gives no fresh
    /// costs).
    pub fn enable_fresh_probe() {
        ON.store(true, Ordering::Relaxed);
    }

    /// The live (fresh, fresh following) costs, ns: the medians of the
    /// latest probes; `None` before [`MIN_PROBES`] probes.
    #[inline]
    pub fn live_fresh() -> Option<(f64, f64)> {
        if PROBES.load(Ordering::Acquire) < MIN_PROBES {
            return None;
        }
        Some((
            f64::from_bits(FRESH_BITS.load(Ordering::Relaxed)),
            f64::from_bits(FOLLOW_BITS.load(Ordering::Relaxed)),
        ))
    }

    std::thread_local! {
        /// The calling thread's probe under way: the timer's cost, ticks.
        static PENDING: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
    }

    /// Called by `pflush` after its flushes (`op`, the evicting flush).
    /// A probe of the calling thread under way (flushed at an earlier
    /// `pflush`, no durability point since) is ended first ([`at_drain`]).
    /// Then, when probing is on and the last probe is [`PROBE_GAP_NS`]
    /// old, the probe pages are flushed with `op` and the probe is under
    /// way (one thread at a time; the others go on) until the thread's
    /// next durability point ([`at_drain`]) or its next `pflush`: the
    /// pages are re-read about when the program re-reads its own flushed
    /// lines, and flushed no earlier than them (the re-read of a line
    /// costs more the sooner after its flush it comes: on this VM 240-290
    /// ns right after it, where a chase over a region flushed and drained
    /// before reads its lines at 100-150).
    #[inline]
    pub fn after_flushes(op: Op) {
        if !ON.load(Ordering::Relaxed) {
            return;
        }
        at_drain();
        let now = pmlab_clock::rdtsc();
        let last = LAST.load(Ordering::Relaxed);
        // The gap drawn from 0.5 to 1.5 times PROBE_GAP_NS (from the last
        // probe's time): probes at a steady period would show as a period
        // of slow iterations in a program that times its own (LENS's
        // overwrite probe looks for the wear-leveling stalls' period).
        let gap = (PROBE_GAP_NS * crate::clock::tsc_ghz()) as u64;
        let mut x = last | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let gap = gap / 2 + x % gap.max(1);
        if now.wrapping_sub(last) < gap && last != 0 {
            return;
        }
        if BUSY.swap(true, Ordering::Acquire) {
            return;
        }
        LAST.store(now, Ordering::Relaxed);
        let tick = flush_pages(op).tick;
        PENDING.with(|p| p.set(Some(tick)));
    }

    /// A durability point of the calling thread (`pm_drain`, after its
    /// own work): end the thread's probe under way, if any: chase the
    /// pages and add the costs to the medians.
    #[inline]
    pub fn at_drain() {
        if !ON.load(Ordering::Relaxed) {
            return;
        }
        let Some(tick) = PENDING.with(|p| p.take()) else {
            return;
        };
        if let Some((fresh, follow)) = reread(Probe { tick }, crate::clock::tsc_ghz()) {
            record(fresh, follow);
        }
        BUSY.store(false, Ordering::Release);
    }

    /// Link the probe pages (once: a written line would be flushed dirty,
    /// where the program's chased lines are clean), measure the timer's
    /// cost and flush the pages with `op`.
    fn flush_pages(op: Op) -> Probe {
        let base = PAGES.0.get() as *mut usize;
        // SAFETY: the caller holds `BUSY` (or the test lock); every
        // address is inside the two pages (64 lines of 8 words each).
        unsafe {
            for (page, block) in [(0usize, 1usize), (1, BLOCK_LINES)] {
                let p = base.add(page * PAGE_WORDS);
                let lines = chain(block, 0x9E37_79B9_7F4A_7C15 + page as u64);
                for i in 0..PAGE_LINES {
                    let at = p.add(lines[i] * 8);
                    let to = p.add(lines[(i + 1) % PAGE_LINES] * 8) as usize;
                    if std::ptr::read_volatile(at) != to {
                        std::ptr::write_volatile(at, to);
                    }
                }
            }
            let mut tick = u64::MAX;
            for _ in 0..3 {
                let a = rdtsc_ordered();
                tick = tick.min(rdtsc_ordered().wrapping_sub(a));
            }
            for page in 0..2 {
                for l in 0..PAGE_LINES {
                    let at = base.add(page * PAGE_WORDS + l * 8);
                    crate::persist::flush_line(at as *const u8, op);
                }
            }
            Probe { tick }
        }
    }

    /// Chase the flushed probe pages: (fresh, fresh following) ns per
    /// line; `None` when interrupted.
    fn reread(probe: Probe, ghz: f64) -> Option<(f64, f64)> {
        let base = PAGES.0.get() as *const usize;
        let mut took = [0u64; 2];
        // SAFETY: as in `flush_pages`; the pages are linked.
        unsafe {
            crate::persist::sfence();
            for (page, t) in took.iter_mut().enumerate() {
                let first = base.add(page * PAGE_WORDS);
                // Any line starts the cycle: the page's first.
                let mut p = first as usize;
                let t0 = rdtsc_ordered();
                for _ in 0..PAGE_LINES {
                    p = std::ptr::read_volatile(p as *const usize);
                }
                *t = rdtsc_ordered().wrapping_sub(t0).saturating_sub(probe.tick);
                std::hint::black_box(p);
            }
        }
        Some(costs(took[0], took[1], ghz)).filter(|&(f, b)| f < MAX_PROBE_NS && b < MAX_PROBE_NS)
    }

    /// (fresh, fresh following) ns per line from the two chases' ticks:
    /// `lines_ticks` for the page read line by line, `blocks_ticks` for
    /// the page read in blocks of four lines (each block's first line
    /// costs a fresh line; the rest is the following lines'; never
    /// below 0).
    pub fn costs(lines_ticks: u64, blocks_ticks: u64, ghz: f64) -> (f64, f64) {
        let fresh = lines_ticks as f64 / ghz / PAGE_LINES as f64;
        let blocks = (PAGE_LINES / BLOCK_LINES) as f64;
        let rest = blocks_ticks as f64 / ghz - blocks * fresh;
        let follow = (rest / (blocks * (BLOCK_LINES - 1) as f64)).max(0.0);
        (fresh, follow)
    }

    /// Add one probe and publish the new medians.
    pub fn record(fresh: f64, follow: f64) {
        let n = PROBES.load(Ordering::Relaxed);
        let at = NEXT.fetch_add(1, Ordering::Relaxed) % PROBE_RING;
        RING[at].0.store(
            (fresh * SCALE).clamp(0.0, u32::MAX as f64) as u32,
            Ordering::Relaxed,
        );
        RING[at].1.store(
            (follow * SCALE).clamp(0.0, u32::MAX as f64) as u32,
            Ordering::Relaxed,
        );
        let filled = ((n + 1) as usize).min(PROBE_RING);
        let mut a = [0u32; PROBE_RING];
        let mut b = [0u32; PROBE_RING];
        for i in 0..filled {
            a[i] = RING[i].0.load(Ordering::Relaxed);
            b[i] = RING[i].1.load(Ordering::Relaxed);
        }
        let median = |v: &mut [u32]| {
            v.sort_unstable();
            v[v.len() / 2] as f64 / SCALE
        };
        FRESH_BITS.store(median(&mut a[..filled]).to_bits(), Ordering::Relaxed);
        FOLLOW_BITS.store(median(&mut b[..filled]).to_bits(), Ordering::Relaxed);
        PROBES.store(n + 1, Ordering::Release);
    }

    /// Forget every probe and stop probing (tests).
    #[cfg(test)]
    pub fn reset() {
        ON.store(false, Ordering::Relaxed);
        PROBES.store(0, Ordering::Relaxed);
        NEXT.store(0, Ordering::Relaxed);
        LAST.store(0, Ordering::Relaxed);
    }

    /// Take one probe now, whatever the gap and whether probing is on
    /// (tests): (fresh, following) ns.
    #[cfg(test)]
    pub fn probe_now() -> Option<(f64, f64)> {
        let op = super::evicting_flush(crate::persist::cpu_flush_op());
        let p = flush_pages(op);
        reread(p, crate::clock::tsc_ghz())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by the tests of the fresh probe (its state is process-wide).
    static FRESH_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_probe_pages_are_chased_block_by_block() {
        for block in [1usize, 4] {
            let lines = fresh::chain(block, 7);
            let mut seen = lines.to_vec();
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..fresh::PAGE_LINES).collect::<Vec<_>>(),
                "a permutation"
            );
            for b in lines.chunks(block) {
                assert_eq!(b[0] % block, 0, "a block starts on its boundary");
                assert!(b.windows(2).all(|w| w[1] == w[0] + 1), "in order inside");
            }
            // Shuffled: not the identity.
            assert_ne!(lines.to_vec(), (0..fresh::PAGE_LINES).collect::<Vec<_>>());
        }
        // 32 lines at 100 ns read one by one; 8 blocks at 160 ns (their
        // first line 100, three following lines at 20): 1 GHz ticks.
        let (fresh, follow) = fresh::costs(3200, 8 * 160, 1.0);
        assert_eq!(fresh, 100.0);
        assert_eq!(follow, 20.0);
        // Never below 0.
        assert_eq!(fresh::costs(3200, 8 * 50, 1.0).1, 0.0);
    }

    #[test]
    fn the_live_costs_are_the_medians_of_the_latest_probes() {
        let _g = FRESH_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        fresh::reset();
        for i in 0..fresh::MIN_PROBES - 1 {
            fresh::record(100.0 + i as f64, 50.0);
            assert_eq!(fresh::live_fresh(), None, "too few probes");
        }
        fresh::record(1000.0, 10.0);
        // 100, 101, 102, 103, 1000: the median 102; 50 x4 and 10: 50.
        assert_eq!(fresh::live_fresh(), Some((102.0, 50.0)));
        // Only the latest PROBE_RING count.
        for _ in 0..fresh::PROBE_RING {
            fresh::record(60.0, 5.0);
        }
        assert_eq!(fresh::live_fresh(), Some((60.0, 5.0)));
        // Probing stays off until enabled: a drain or a flush adds nothing.
        fresh::reset();
        fresh::at_drain();
        fresh::after_flushes(evicting_flush(crate::persist::cpu_flush_op()));
        fresh::at_drain();
        assert_eq!(fresh::live_fresh(), None);
    }

    #[test]
    fn a_probe_times_plausible_latencies() {
        let _g = FRESH_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // Whatever the machine gives: a flushed line costs something and
        // less than 5 us (MAX_PROBE_NS) unless interrupted.
        let mut got = None;
        for _ in 0..5 {
            got = got.or(fresh::probe_now());
        }
        let (fresh, follow) = got.expect("five probes all interrupted");
        assert!(fresh > 0.0 && fresh < 5_000.0, "{fresh}");
        assert!((0.0..5_000.0).contains(&follow), "{follow}");
    }

    #[test]
    fn the_start_up_chases_evict() {
        assert_eq!(evicting_flush(Op::Clwb), Op::ClflushOpt);
        assert_eq!(evicting_flush(Op::ClflushOpt), Op::ClflushOpt);
        assert_eq!(evicting_flush(Op::Clflush), Op::Clflush);
    }

    #[test]
    fn ranges_register_remove_and_reuse_their_slot() {
        let _g = TEST_TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // Addresses no other test registers (the table is process-wide).
        let a = 0x7e00_0000_0000usize;
        assert_eq!(register(0, 10), Err(RangeError::Invalid));
        assert_eq!(register(a, 0), Err(RangeError::Invalid));
        assert_eq!(register(usize::MAX - 4, 10), Err(RangeError::Invalid));
        register(a, 4096).unwrap();
        assert!(in_registered(a, 1));
        assert!(in_registered(a + 4000, 96));
        assert!(!in_registered(a + 4000, 97));
        assert!(!in_registered(a - 1, 1));
        assert_eq!(unregister(a, 4095), Err(RangeError::Unknown));
        let used = RANGE_COUNT.load(Ordering::Relaxed);
        unregister(a, 4096).unwrap();
        assert!(!in_registered(a, 1));
        assert_eq!(unregister(a, 4096), Err(RangeError::Unknown));
        // A freed slot is taken again before a new one.
        register(a + 8192, 64).unwrap();
        assert!(RANGE_COUNT.load(Ordering::Relaxed) <= used);
        assert!(in_registered(a + 8192 + 63, 1));
        unregister(a + 8192, 64).unwrap();
    }

    #[test]
    fn the_table_refuses_past_its_size() {
        let _g = TEST_TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let base = 0x7d00_0000_0000usize;
        let mut added = Vec::new();
        loop {
            let a = base + added.len() * 4096;
            match register(a, 4096) {
                Ok(()) => added.push(a),
                Err(e) => {
                    assert_eq!(e, RangeError::Full);
                    break;
                }
            }
            assert!(added.len() <= MAX_RANGES);
        }
        assert!(!added.is_empty());
        for a in added {
            unregister(a, 4096).unwrap();
        }
    }
}
