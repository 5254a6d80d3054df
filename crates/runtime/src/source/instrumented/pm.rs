//! Which addresses the hooks and the model count as PM: everything
//! (Quartz's single-memory mode), the runtime's PM pool and registered
//! ranges (two-memory mode), or everything until the program maps a pool
//! ([`PmMode`]).

use super::settings::PmMode;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

static PM_MODE: AtomicU8 = AtomicU8::new(PmMode::Auto as u8);
const MAX_RANGES: usize = 16;
static RANGE_COUNT: AtomicUsize = AtomicUsize::new(0);
static RANGES: [(AtomicUsize, AtomicUsize); MAX_RANGES] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_RANGES];

/// Set the PM mode (when the hooks are activated).
pub(super) fn set_mode(mode: PmMode) {
    PM_MODE.store(mode as u8, Ordering::Relaxed);
}

/// Register `[start, start + len)` as emulated PM. At most 16 ranges;
/// returns false when full.
pub fn add_pm_range(start: usize, len: usize) -> bool {
    let i = RANGE_COUNT.load(Ordering::Acquire);
    if i >= MAX_RANGES {
        return false;
    }
    RANGES[i].0.store(start, Ordering::Relaxed);
    RANGES[i]
        .1
        .store(start.saturating_add(len), Ordering::Relaxed);
    RANGE_COUNT.store(i + 1, Ordering::Release);
    true
}

/// True when `addr` is emulated PM: everything in `All` mode; in `Auto`
/// mode everything until a PM pool exists, then like `Pool`: addresses in
/// the runtime's PM pool or in a range given to [`add_pm_range`].
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
    crate::pool::contains(addr, 1)
        || RANGES[..n]
            .iter()
            .any(|(lo, hi)| addr >= lo.load(Ordering::Relaxed) && addr < hi.load(Ordering::Relaxed))
}
