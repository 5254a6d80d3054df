//! A thread's own side of the model: creating its model at its first
//! miss, running its batches (timed with the TSC), reading its totals
//! (async-signal-safe, for the epoch signal's handler), and its exit and
//! fork.

use super::log::{tls, Slow, Tls, LOG_ENTRIES};
use super::model::{ModelState, ThreadTotals, FILTER_LINES};
use super::offload;
use std::sync::atomic::{compiler_fence, Ordering};

/// Batches that one run of the model on the owner thread added to its
/// totals (see [`totals_and_ran`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ran {
    /// Batches run.
    pub batches: u64,
    /// Their cycles, as added to [`ThreadTotals::slow_cycles`].
    pub cycles: u64,
}

/// Run the logged, unprocessed accesses through the model (first the
/// handed-off logs the modeller has not run, oldest first); with `reset`
/// (the hook, never a signal handler) empty the log afterwards. Without
/// `wait` (a signal handler) nothing is done while the modeller holds the
/// model: the entries count at the next reading. Returns what it ran.
///
/// # Safety
///
/// `t` is the calling thread's state, not busy, with a model.
pub(super) unsafe fn process(t: *mut Tls, reset: bool, wait: bool) -> Ran {
    (*t).busy = true;
    compiler_fence(Ordering::SeqCst);
    let s = &mut *(*t).slow;
    let mut ran = Ran::default();
    if !offload::lock(s, wait) {
        compiler_fence(Ordering::SeqCst);
        (*t).busy = false;
        return ran;
    }
    let end = std::ptr::read_volatile(&(*t).logged).min(LOG_ENTRIES);
    let start = (*t).processed;
    let pending = s.queued() as u64;
    std::ptr::write_volatile(&mut (*t).interrupted, false);
    if start < end || pending > 0 {
        // The clock starts once the program's own outstanding misses (the
        // values in the log) have arrived: they are not overhead.
        let t0 = tsc_after(0);
        let mut n = 0;
        for _ in 0..pending {
            n += offload::run_oldest(s, Some(&raw mut (*t).filter));
        }
        s.model.run(
            Some(&raw mut (*t).filter),
            &s.logs[(*t).cur][start.min(end)..end],
        );
        n += (end - start.min(end)) as u64;
        // Each handed-off log run here counts as a batch of its own.
        ran.batches = pending + (start < end) as u64;
        charge_inline(
            t,
            s,
            n,
            ran.batches,
            tsc_after(0).wrapping_sub(t0),
            &mut ran,
        );
    }
    offload::publish(s);
    s.lock.store(false, Ordering::Release);
    if reset {
        (*t).logged = 0;
        (*t).processed = 0;
    } else {
        (*t).processed = end;
    }
    compiler_fence(Ordering::SeqCst);
    (*t).busy = false;
    ran
}

/// Book on the model's totals `n` entries and `batches` batches run on
/// the owner thread in `cycles` TSC cycles (into `ran` as well): the
/// time the program lost, which the epoch's delay absorbs. When the
/// epoch signal interrupted the run, the clock reading includes its
/// handler's delay: the entries count at the mean cycles per entry of
/// the uninterrupted runs instead.
///
/// # Safety
///
/// `t` is the calling thread's state; the caller holds `s.lock`.
unsafe fn charge_inline(
    t: *mut Tls,
    s: &mut Slow,
    n: u64,
    batches: u64,
    cycles: u64,
    ran: &mut Ran,
) {
    s.model.totals.slow_calls += n;
    ran.batches = batches;
    if std::ptr::read_volatile(&(*t).interrupted) {
        let tt = &s.model.totals;
        ran.cycles = (n * tt.clean_cycles)
            .checked_div(tt.clean_entries)
            .unwrap_or(0);
    } else {
        ran.cycles = cycles;
        // A wait alone (nothing run) is no sample of the cost per entry.
        if n > 0 {
            s.model.totals.clean_cycles += cycles;
            s.model.totals.clean_entries += n;
        }
    }
    s.model.totals.batches += ran.batches;
    s.model.totals.slow_cycles += ran.cycles;
}

/// The queue of handed-off logs full (`depth` of them): make room for
/// one more. The owner waits for the modeller to finish the log
/// it runs (holding the model's lock); if the queue is still full then
/// (the modeller was not running: descheduled, or asleep), it runs the
/// oldest queued log itself. The whole wait and run is the program's
/// time: booked as one inline batch ([`ThreadTotals::slow_cycles`],
/// charged back as the normal mode charges its batches), the entries it
/// ran as well. False when the lock cannot be had (never, waiting).
///
/// # Safety
///
/// `t` is the calling thread's state, not busy, with a registered model.
pub(super) unsafe fn relieve(t: *mut Tls, depth: usize) -> bool {
    (*t).busy = true;
    compiler_fence(Ordering::SeqCst);
    let s = &mut *(*t).slow;
    std::ptr::write_volatile(&mut (*t).interrupted, false);
    let t0 = tsc_after(0);
    if !offload::lock(s, true) {
        compiler_fence(Ordering::SeqCst);
        (*t).busy = false;
        return false;
    }
    let n = if s.queued() >= depth {
        offload::run_oldest(s, Some(&raw mut (*t).filter))
    } else {
        0
    };
    let mut ran = Ran::default();
    charge_inline(t, s, n, 1, tsc_after(0).wrapping_sub(t0), &mut ran);
    offload::publish(s);
    s.lock.store(false, Ordering::Release);
    compiler_fence(Ordering::SeqCst);
    (*t).busy = false;
    true
}

/// A new model for the calling thread (a registered one no thread owns
/// when there is one); null when it cannot be made.
#[cold]
pub(super) fn new_slow() -> *mut Slow {
    if let Some(s) = offload::reuse() {
        return s;
    }
    let Some((model, compact)) = ModelState::new() else {
        return std::ptr::null_mut();
    };
    let shared = compact && offload::enabled();
    let s = Box::into_raw(Box::new(Slow::new(model, shared)));
    if shared && !offload::register(s) {
        // SAFETY: not yet visible to anyone else.
        unsafe { (*s).shared = false };
    }
    s
}

#[inline(always)]
pub(super) fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// The TSC once every earlier instruction has completed, in particular
/// the load of `_dep` (lfence waits for it), so that the time of that load
/// is not counted after this point.
#[inline(always)]
pub(super) fn tsc_after(_dep: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence and rdtsc have no preconditions on x86-64.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// The calling thread's cumulative totals, after processing what the
/// thread has logged (waiting, spinning, for a log of it the modeller
/// thread is running). Async-signal-safe: works on the thread's own state
/// without references and takes no pthread lock (the modeller never waits
/// for this thread); when the signal interrupted a batch of the thread
/// itself, the entries not yet processed count at the next reading (totals
/// are cumulative, nothing is lost).
pub fn totals() -> ThreadTotals {
    totals_and_ran().0
}

/// Device mode: unprocessed entries of the current log above which an
/// epoch's end leaves them to the modeller thread instead of running them.
const DEFER_ABOVE: usize = 64;

/// Periodic epoch ends in a row that may leave entries of the same log
/// (the one the hook fills, not handed off since) to the modeller; the
/// next one runs them. Outside device mode the lag is thus at most the
/// ring ([`super::log::LOGS`] logs of [`LOG_ENTRIES`] logged accesses)
/// and a log's entries wait at most this many periodic epochs.
pub const MAX_LAG_EPOCHS: u32 = 4;

std::thread_local! {
    /// The next reading must count everything logged (the thread's last).
    static EXACT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The next reading is a periodic epoch's end (the monitor's signal),
    /// which may leave the model's work to the modeller thread.
    static PERIODIC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The calling thread's next [`totals_and_ran`] is its last (it exits):
/// it runs every logged entry, as outside device mode.
pub fn exact_next_reading() {
    EXACT.with(|e| e.set(true));
}

/// The calling thread's next [`totals_and_ran`] ends a periodic epoch (the
/// runtime's timer, not a sync point nor an exit): it may leave logged
/// entries to the modeller thread (see [`totals_and_ran`]). Any other
/// reading runs them first. Async-signal-safe.
pub fn periodic_next_reading() {
    PERIODIC.with(|e| e.set(true));
}

/// True when this reading should not run the thread's logged entries
/// itself but take the totals the model last published, leaving the rest
/// to the modeller thread (totals are cumulative: what is left counts at
/// a later reading, nothing is lost). `exact`: the thread's last reading
/// ([`exact_next_reading`]), which runs everything; `periodic`: see
/// [`periodic_next_reading`].
///
/// Device mode (unchanged by `periodic`): more than [`DEFER_ABOVE`]
/// entries unprocessed, or logs handed off and waiting. A device-mode
/// batch costs tens of ns per entry, a log's worth tens of µs on the
/// program's time at every epoch's end (a step a program that times its
/// iterations sees, in a place the device would not put one); small
/// remainders are run at once, so that a program with few misses is not
/// charged epochs late.
///
/// Otherwise, at periodic epoch ends only, whenever anything is left (run
/// on the program's thread, a batch costs ~15-20 ns per entry, and an
/// epoch's end would run a log and a half on average), except: while
/// tracing, when the program is sampled (each epoch's counts are scaled
/// by that epoch's own factor, `super::sample::thread_epoch_factor`: once
/// the thread has had a gap), and
/// when the log the hook fills has had entries left at
/// [`MAX_LAG_EPOCHS`] periodic epoch ends in a row (it was not handed off
/// since: the thread logs slowly), which bounds the lag.
///
/// # Safety
///
/// `t` is the calling thread's state and `s` its model.
unsafe fn leave_to_modeller(t: *mut Tls, s: *mut Slow, exact: bool, periodic: bool) -> bool {
    if exact || !(*s).shared || !offload::enabled() {
        return false;
    }
    let pending = (*s).queued() != 0;
    let left = std::ptr::read_volatile(&(*t).logged).saturating_sub((*t).processed);
    if super::settings::device_on() {
        return pending || left > DEFER_ABOVE;
    }
    if !periodic
        || super::hooks::tracing()
        || super::sample::thread_events().1 != 0
        || (!pending && left == 0)
    {
        (*t).lag_epochs = 0;
        return false;
    }
    if left == 0 {
        // Only handed-off logs wait: the modeller has them.
        (*t).lag_epochs = 0;
        return true;
    }
    let log = (*s).tail.load(Ordering::Relaxed);
    if (*t).lag_epochs == 0 || (*t).lag_log != log {
        (*t).lag_log = log;
        (*t).lag_epochs = 1;
        return true;
    }
    if (*t).lag_epochs >= MAX_LAG_EPOCHS {
        (*t).lag_epochs = 0;
        return false;
    }
    (*t).lag_epochs += 1;
    true
}

/// Attempts at reading the published totals when the signal interrupted a
/// batch of the thread itself (which may be in the middle of publishing
/// them, and cannot finish before the handler returns).
const BUSY_TRIES: u32 = 256;

/// [`totals`], and the batches that the call itself ran to bring them up
/// to date (the caller, which times the call, need not count them again).
/// A periodic epoch's end ([`periodic_next_reading`]) may instead take
/// the totals the model last published and leave the rest to the
/// modeller thread (`leave_to_modeller`).
pub fn totals_and_ran() -> (ThreadTotals, Ran) {
    let t = tls();
    let mut ran = Ran::default();
    // Both flags hold for this reading only, however it goes.
    let exact = EXACT.with(|e| e.replace(false));
    let periodic = PERIODIC.with(|e| e.replace(false));
    // SAFETY: own thread; raw reads; `process` runs only when no batch
    // is under way on this thread.
    unsafe {
        let s = std::ptr::read_volatile(&(*t).slow);
        let busy = std::ptr::read_volatile(&(*t).busy);
        if busy {
            // A batch of this thread is under way below us: its entries
            // count at the next reading.
            std::ptr::write_volatile(&mut (*t).interrupted, true);
        } else if !s.is_null() && !leave_to_modeller(t, s, exact, periodic) {
            // Exact counts up to here: wait for a log the modeller is
            // running (it never waits for this thread, and holds the lock
            // for one batch at most), then run what is left ourselves.
            ran = process(t, false, true);
        }
        let mut out = std::ptr::read_volatile(&(*t).last);
        if !s.is_null() {
            // Interrupting a batch, take the totals as of the last one
            // published (by the modeller, or by this thread before it
            // began this batch), not the previous reading: a thread that
            // spends most of its time in batches (or waiting for the
            // modeller's) would otherwise read nothing new for several
            // epochs and then all of it at once, and the bandwidth model
            // would see bursts that never happened. If the batch was
            // interrupted while publishing, the previous reading stands.
            let tries = if busy {
                BUSY_TRIES
            } else {
                offload::PATIENT_TRIES
            };
            if let Some(v) = offload::read_published(&*s, tries) {
                out = v;
            }
        }
        out.accesses = std::ptr::read_volatile(&(*t).accesses);
        out.compares = std::ptr::read_volatile(&(*t).compares);
        out.compares_logged = std::ptr::read_volatile(&(*t).compares_logged);
        std::ptr::write_volatile(&mut (*t).last, out);
        (out, ran)
    }
}

/// Device mode (`pmlab run --device`), at a durability point (`pm_drain`,
/// `pm_dfence`): the wear-leveling stall of the calling thread's model not
/// yet charged, ns, now charged (the caller stalls for it). It reads the
/// totals the model last published (by the modeller thread or this one),
/// running nothing: a migration is paid at the first durability point
/// after the batch holding the write that caused it, not at the epoch's
/// end, as the device stalls the write that triggers it.
pub fn device_stall_due() -> f64 {
    if !super::settings::device_on() {
        return 0.0;
    }
    let t = tls();
    // SAFETY: own thread; the published totals are read under their
    // sequence lock.
    unsafe {
        let s = std::ptr::read_volatile(&(*t).slow);
        if s.is_null() || std::ptr::read_volatile(&(*t).busy) {
            return 0.0;
        }
        match offload::read_published(&*s, 64) {
            Some(v) => super::model::take_stall(v.device.stall_ns),
            None => 0.0,
        }
    }
}

/// Run everything the calling thread has logged, its handed-off logs
/// first (waiting for one the modeller is running): before a fork, so
/// that the child starts with nothing queued (its modeller thread does
/// not exist) and the parent is charged its own accesses. The time is the
/// program's, booked as inline batches and charged back at the thread's
/// next epoch end. Not async-signal-safe.
pub fn drain() {
    let t = tls();
    // SAFETY: own thread, outside the hooks (`busy` checked).
    unsafe {
        if !(*t).busy && !(*t).slow.is_null() {
            process(t, false, true);
        }
    }
}

/// The calling thread's hook state after a fork, in the child.
pub fn after_fork_child() {
    offload::after_fork_child(tls());
}

/// Forget the calling thread's model state after a fork (the child starts
/// with a cold model) or before reuse. Not async-signal-safe.
pub fn thread_reset() {
    let t = tls();
    // SAFETY: own thread, not in a hook (hooks never call this).
    unsafe {
        (*t).filter = [0; FILTER_LINES];
    }
}

/// Free the calling thread's model (thread exit). Later accesses of this
/// thread are no longer counted. Not async-signal-safe.
pub fn thread_exit() {
    let t = tls();
    // SAFETY: own thread; `busy` keeps a nested hook away while freeing.
    unsafe {
        if !(*t).busy && !(*t).slow.is_null() {
            process(t, false, true);
        }
        (*t).busy = true;
        (*t).retired = true;
        (*t).logged = 0;
        (*t).processed = 0;
        let s = std::mem::replace(&mut (*t).slow, std::ptr::null_mut());
        (*t).filter = [0; FILTER_LINES];
        if !s.is_null() {
            if (*s).shared {
                offload::release(s);
            } else {
                drop(Box::from_raw(s));
            }
        }
        (*t).busy = false;
    }
}

#[cfg(test)]
mod tests {
    //! The ring of logs under back-pressure (a modeller that lags), its
    //! drain at a thread's exit, the charge-back of what the owner ran
    //! itself, and flush runs.
    use super::super::hooks::{activate, deactivate, on_access};
    use super::super::log::{extend_flush_run, LOGS};
    use super::super::model::{LogEntry, FLUSH};
    use super::super::offload::{self, TEST_DEPTH, TEST_PAUSE};
    use super::super::settings::PmMode;
    use super::super::tests::{cfg, LOCK};
    use super::*;

    /// Load `n` distinct lines (each logged: a filter miss) on this thread.
    fn misses(v: &[u64], n: usize) {
        for i in 0..n {
            let p = &v[(i * 8) % v.len()] as *const u64;
            on_access(p as usize, 8, false, Some(p));
        }
    }

    /// Resets the test switches however the test ends.
    struct Switches;
    impl Drop for Switches {
        fn drop(&mut self) {
            TEST_PAUSE.store(false, Ordering::Release);
            TEST_DEPTH.store(0, Ordering::Release);
        }
    }

    #[test]
    fn a_lagging_modeller_loses_no_entry_and_the_owner_goes_on() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _s = Switches;
        activate(cfg(PmMode::All));
        TEST_DEPTH.store(LOGS - 1, Ordering::Release);
        TEST_PAUSE.store(true, Ordering::Release);
        let n = 20 * LOG_ENTRIES;
        let (a, mid, b, most) = std::thread::spawn(move || {
            let v = vec![0u64; n * 8];
            let a = totals();
            let mut most = 0;
            for k in 0..20 {
                misses(&v[k * LOG_ENTRIES * 8..], LOG_ENTRIES);
                // SAFETY: this thread's own model.
                most = most.max(unsafe { (*(*tls()).slow).queued() });
            }
            // Read without running anything: the modeller is paused, so
            // what is counted is what the owner ran to make room.
            let mid = offload::read_published(
                // SAFETY: this thread's own model.
                unsafe { &*(*tls()).slow },
                offload::PATIENT_TRIES,
            )
            .unwrap();
            // The modeller catches up; the last reading counts everything.
            TEST_PAUSE.store(false, Ordering::Release);
            let b = totals();
            thread_exit();
            (a, mid, b, most)
        })
        .join()
        .unwrap();
        deactivate();
        // Every logged miss went through the model once.
        assert_eq!(b.slow_calls - a.slow_calls, n as u64);
        assert_eq!(b.serial.pm_misses - a.serial.pm_misses, n as u64);
        if offload::enabled() {
            // The queue filled to its depth and never beyond.
            assert_eq!(most, LOGS - 1);
            // Making room ran the oldest logs on the owner, one at a time:
            // 20 logs, 7 queued and 1 filling at the end, so 12 ran here,
            // each booked as an inline batch with its cycles.
            let ran_here = mid.slow_calls - a.slow_calls;
            assert_eq!(ran_here, (20 - LOGS as u64) * LOG_ENTRIES as u64);
            assert_eq!(mid.batches - a.batches, 20 - LOGS as u64);
            assert_eq!(mid.offloaded, a.offloaded);
            assert!(mid.slow_cycles > a.slow_cycles);
            // Uninterrupted: charged exactly as timed.
            assert_eq!(
                mid.slow_cycles - a.slow_cycles,
                mid.clean_cycles - a.clean_cycles
            );
            assert_eq!(mid.clean_entries - a.clean_entries, ran_here);
        }
    }

    #[test]
    fn a_thread_exit_drains_the_queue() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _s = Switches;
        activate(cfg(PmMode::All));
        TEST_DEPTH.store(LOGS - 1, Ordering::Release);
        TEST_PAUSE.store(true, Ordering::Release);
        let n = 5 * LOG_ENTRIES + 100;
        let (queued, model) = std::thread::spawn(move || {
            let v = vec![0u64; n * 8];
            misses(&v, n);
            // SAFETY: this thread's own model.
            let s = unsafe { (*tls()).slow };
            let queued = unsafe { (*s).queued() };
            thread_exit();
            (queued, s as usize)
        })
        .join()
        .unwrap();
        deactivate();
        if !offload::enabled() {
            return;
        }
        assert_eq!(queued, 5);
        // SAFETY: a registered model is never freed.
        let s = unsafe { &*(model as *const Slow) };
        assert_eq!(s.queued(), 0);
        let t = offload::read_published(s, offload::PATIENT_TRIES).unwrap();
        assert_eq!(t.slow_calls, n as u64);
        assert_eq!(t.serial.pm_misses, n as u64);
    }

    #[test]
    fn consecutive_flushes_extend_one_entry() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        activate(cfg(PmMode::All));
        let (first, runs) = std::thread::spawn(|| {
            let v = vec![0u64; 64];
            misses(&v, 1);
            let t = tls();
            // SAFETY: this thread's own state; the entries written by
            // hand are taken out again before anything runs them.
            unsafe {
                // The ring cycles through all its logs (up to LOGS - 1
                // handed off) in either mode.
                assert_eq!((*(*t).slow).ring, LOGS);
                // The last entry is a load: no run to extend.
                let first = extend_flush_run(t, 1000);
                let n = (*t).logged;
                (*(*t).slow).logs[(*t).cur][n] = LogEntry {
                    addr: (1000 << 6) | FLUSH,
                    at: 0,
                    value: 0,
                };
                (*t).logged = n + 1;
                let runs = [
                    extend_flush_run(t, 1001),
                    extend_flush_run(t, 1002),
                    // Not the next line: a new entry.
                    extend_flush_run(t, 1004),
                ];
                let e = (*(*t).slow).logs[(*t).cur][n];
                assert_eq!(e.value, 2);
                // An entry already run (by an epoch's end) stays as it was.
                (*t).processed = n + 1;
                assert!(!extend_flush_run(t, 1003));
                (*t).logged = n;
                (*t).processed = 0;
                thread_exit();
                (first, runs)
            }
        })
        .join()
        .unwrap();
        deactivate();
        assert!(!first);
        assert_eq!(runs, [true, true, false]);
    }

    /// A chase of `n` nodes, one per line, in a shuffled order: each node
    /// holds the address of the next (the value its load logs), so that
    /// the model's dependence estimate sees the order of the entries.
    fn chase(n: usize) -> Vec<u64> {
        let mut v = vec![0u64; n * 8];
        // A full cycle through the nodes: a stride coprime to n.
        let stride = (n / 2..n).find(|&k| gcd(k, n) == 1).unwrap_or(1);
        let next = |i: usize| (i + stride) % n;
        for i in 0..n {
            v[i * 8] = &v[next(i) * 8] as *const u64 as u64;
        }
        v
    }

    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }

    /// Walk `steps` nodes of [`chase`] `v` from node 0, `every` loads
    /// between readings: an exact one, or a periodic epoch's end
    /// (`periodic`); then a last, exact, reading. Returns each reading's
    /// PM serial accesses and misses (differences), the totals before and
    /// after, and the largest number of entries a reading left behind.
    fn walk(
        v: &[u64],
        steps: usize,
        every: usize,
        periodic: bool,
    ) -> (Vec<(f64, u64)>, ThreadTotals, ThreadTotals, u64) {
        let mut readings = Vec::new();
        let first = totals();
        let mut last = first;
        let mut behind = 0;
        let mut p = v.as_ptr();
        let mut logged = 0u64;
        for k in 1..=steps {
            on_access(p as usize, 8, false, Some(p));
            logged += 1;
            // SAFETY: every node holds the address of one in `v`.
            p = unsafe { *p } as *const u64;
            if k % every == 0 {
                if periodic {
                    periodic_next_reading();
                }
                let now = totals();
                behind = behind.max(logged - (now.slow_calls - first.slow_calls));
                readings.push((
                    now.serial.pm - last.serial.pm,
                    now.serial.pm_misses - last.serial.pm_misses,
                ));
                last = now;
            }
        }
        let end = totals();
        readings.push((
            end.serial.pm - last.serial.pm,
            end.serial.pm_misses - last.serial.pm_misses,
        ));
        (readings, first, end, behind)
    }

    #[test]
    fn periodic_readings_defer_and_charge_the_same_in_order() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        activate(cfg(PmMode::All));
        // 20 logs' worth of distinct lines (4x the 1 MiB model: every load
        // misses), read every 300 loads: most readings find a partial log.
        let n = 20 * LOG_ENTRIES + 1;
        let run = move |periodic: bool| {
            std::thread::spawn(move || {
                let v = chase(n);
                let r = walk(&v, n, 300, periodic);
                thread_exit();
                r
            })
            .join()
            .unwrap()
        };
        let (exact, a0, a1, a_behind) = run(false);
        let (lazy, b0, b1, b_behind) = run(true);
        deactivate();
        // No entry lost: every load went through the model once, either way.
        assert_eq!(a1.slow_calls - a0.slow_calls, n as u64);
        assert_eq!(b1.slow_calls - b0.slow_calls, n as u64);
        assert_eq!(a_behind, 0, "an exact reading runs everything");
        // The deferred readings' charges add up to the immediate ones':
        // the same model, fed the same entries in the same order (the
        // dependence estimate, which follows each load's value to the next
        // miss, would differ otherwise).
        let sum = |r: &[(f64, u64)]| r.iter().fold((0.0, 0), |(s, m), &(p, x)| (s + p, m + x));
        let (sa, ma) = sum(&exact);
        let (sb, mb) = sum(&lazy);
        assert_eq!((ma, mb), (n as u64, n as u64));
        assert!((sa - sb).abs() < 1e-6 * sa.max(1.0), "{sa} vs {sb}");
        assert_eq!(
            b1.serial.dependent - b0.serial.dependent,
            a1.serial.dependent - a0.serial.dependent
        );
        assert!(a1.serial.dependent - a0.serial.dependent > n as u64 / 2);
        if offload::enabled() {
            // Periodic readings left work behind, bounded by the ring.
            assert!(b_behind > 0);
            assert!(b_behind <= (LOGS * LOG_ENTRIES) as u64, "{b_behind}");
            // Some readings were charged less and later ones more.
            assert!(lazy.iter().zip(&exact).any(|(l, e)| l.1 != e.1));
        }
    }

    #[test]
    fn a_slowly_filled_log_is_run_after_the_lag_bound() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        activate(cfg(PmMode::All));
        let per = 10;
        let counted = std::thread::spawn(move || {
            let v = vec![0u64; 64 * per * 8];
            let mut counted = Vec::new();
            // Each epoch logs `per` misses: the log never fills.
            for k in 0..(MAX_LAG_EPOCHS as usize + 2) {
                misses(&v[k * per * 8..], per);
                periodic_next_reading();
                counted.push(totals().slow_calls);
            }
            // A sync point (any reading not periodic) runs everything.
            misses(&v[40 * per * 8..], per);
            counted.push(totals().slow_calls);
            thread_exit();
            counted
        })
        .join()
        .unwrap();
        deactivate();
        if !offload::enabled() {
            return;
        }
        // MAX_LAG_EPOCHS readings leave the log's entries, the next runs
        // them all (nothing lost); the lag starts again from there.
        let m = MAX_LAG_EPOCHS as usize;
        assert!(counted[..m].iter().all(|&c| c == 0), "{counted:?}");
        assert_eq!(counted[m], ((m + 1) * per) as u64, "{counted:?}");
        assert_eq!(counted[m + 1], counted[m], "{counted:?}");
        assert_eq!(counted[m + 2], ((m + 3) * per) as u64, "{counted:?}");
    }

    #[test]
    fn a_drain_runs_the_queue_on_the_thread() {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _s = Switches;
        activate(cfg(PmMode::All));
        TEST_PAUSE.store(true, Ordering::Release);
        let n = 3 * LOG_ENTRIES + 50;
        let (queued, after, a, b) = std::thread::spawn(move || {
            let v = vec![0u64; n * 8];
            let a = totals();
            misses(&v, n);
            // SAFETY: this thread's own model.
            let queued = unsafe { (*(*tls()).slow).queued() };
            drain();
            // SAFETY: as above.
            let after = unsafe { (*(*tls()).slow).queued() };
            let s = unsafe { &*(*tls()).slow };
            let b = offload::read_published(s, offload::PATIENT_TRIES).unwrap();
            thread_exit();
            (queued, after, a, b)
        })
        .join()
        .unwrap();
        deactivate();
        assert_eq!(after, 0);
        assert_eq!(b.slow_calls - a.slow_calls, n as u64);
        if offload::enabled() {
            assert_eq!(queued, 3);
            // Run on the thread: booked as inline batches, to be charged.
            assert_eq!(b.batches - a.batches, 4);
            assert!(b.slow_cycles > a.slow_cycles);
        }
    }
}
