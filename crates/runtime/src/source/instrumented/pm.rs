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

use super::settings::{self, PmMode};
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

/// The flush instruction device mode (`pmlab run --device`) uses for
/// `op`: one that evicts the line. `clwb` may leave the line in the CPU's
/// caches (AMD's Zen does), so the program's next access would hit there
/// while the device model, which has seen the line leave, charges a
/// device read; `clflushopt` writes the line back and evicts it, so that
/// access really misses, as it does on Optane's platforms.
pub fn evicting_flush(op: Op) -> Op {
    if op == Op::Clwb {
        Op::ClflushOpt
    } else {
        op
    }
}

/// The flush `pflush` uses: `op` (the CPU's best, or `PMLAB_FLUSH`'s), made
/// [evicting](evicting_flush) in device mode.
#[inline]
pub fn flush_for_mode(op: Op) -> Op {
    if settings::device_on() {
        evicting_flush(op)
    } else {
        op
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_mode_flushes_evict() {
        assert_eq!(evicting_flush(Op::Clwb), Op::ClflushOpt);
        assert_eq!(evicting_flush(Op::ClflushOpt), Op::ClflushOpt);
        assert_eq!(evicting_flush(Op::Clflush), Op::Clflush);
        // Outside device mode the flush is the one asked for.
        if !settings::device_on() {
            assert_eq!(flush_for_mode(Op::Clwb), Op::Clwb);
        }
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
