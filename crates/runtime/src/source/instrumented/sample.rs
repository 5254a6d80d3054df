//! The sampling switch of programs built with `pmlab cc`'s sampling
//! plugin (`crates/emu/plugin/sample.cpp`): each function has a clean copy
//! and an instrumented copy (hooks on every load and store), and checks at
//! function entries and loop back-edges (*check events*) count down a
//! per-thread pair held by the program, `state[0]` for the clean copy and
//! `state[1]` for the instrumented one. When a countdown runs out the
//! program calls [`__pmlab_sample_switch`](crate::exports), whose body is
//! [`switch`]: it says which copy runs next (1: instrumented) and writes the
//! next countdowns.
//!
//! * Hooks off (outside `pmlab run`, or another counter source): clean,
//!   and the next question [`INACTIVE_GAP`] checks later (a call per 16 M
//!   checks: nothing).
//! * Tracing (`pmlab trace`, `pmlab check`) or `--sample off`: one endless
//!   window, every access is seen.
//! * `--sample RATIO`: windows of [`WINDOW`] checks separated by gaps so
//!   that RATIO of the checks fall in windows.
//! * `--sample auto`: see [`Policy::Auto`].
//!
//! The default is `--sample off`: `auto` loses accuracy on short phases
//! (see docs/emulator.md) until it is measured on a quiet machine.
//!
//! While a window is open `state[0]` is kept at 1, so that every function
//! entered in the window (a callee) asks, and runs instrumented; such a
//! question counts as one check of the window. After a window, `state[1]`
//! is 1, so that a caller still in its instrumented copy asks at its next
//! check and goes back to the clean copy.
//!
//! Each thread counts the checks of its windows and of its gaps
//! ([`Switch::window_events`], [`Switch::gap_events`]): their ratio is the
//! factor by which the counts of the windows are extrapolated.

use pmlab_model::options::Sample;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Checks between two questions while the hooks are off.
pub const INACTIVE_GAP: i64 = 1 << 24;

/// Checks of an endless window (asked again after so many: never, in
/// practice).
pub const ENDLESS: i64 = 1 << 40;

/// Checks of one window under a fixed ratio.
pub const WINDOW: i64 = 2_000;

/// The hooks' share of the clean code's time that [`Policy::Auto`] aims
/// at.
pub const AUTO_BUDGET: f64 = 0.1;
/// The least share of checks in windows under [`Policy::Auto`].
pub const AUTO_MIN_SHARE: f64 = 0.005;
/// Under [`Policy::Auto`], a slowdown `o` below this runs nearly every
/// check instrumented ([`AUTO_MAX_SHARE`]): the hooks cost less than the
/// code itself, which is then latency-bound (a chase waits on each miss).
pub const AUTO_FULL_BELOW: f64 = 1.0;
/// The largest share of checks in windows under [`Policy::Auto`] (a gap
/// of 1/50 of a window remains, to time the clean code).
pub const AUTO_MAX_SHARE: f64 = 0.98;
/// The share of the first windows under [`Policy::Auto`], before both a
/// window and a gap were timed.
pub const AUTO_FIRST_SHARE: f64 = 0.5;

/// The share of checks to run in windows for `o`, the instrumented copy's
/// slowdown per check over the clean copy's, less 1: [`AUTO_BUDGET`] / `o`,
/// within [[`AUTO_MIN_SHARE`], [`AUTO_MAX_SHARE`]], and the most below
/// [`AUTO_FULL_BELOW`].
pub fn auto_share(o: f64) -> f64 {
    if !o.is_finite() || o < AUTO_FULL_BELOW {
        return AUTO_MAX_SHARE;
    }
    (AUTO_BUDGET / o).clamp(AUTO_MIN_SHARE, AUTO_MAX_SHARE)
}

/// The gap, in checks, that puts `share` of the checks in windows of
/// `window` checks.
pub fn gap_for(window: i64, share: f64) -> i64 {
    let share = share.clamp(1e-9, 1.0);
    (window as f64 * (1.0 - share) / share)
        .round()
        .min(ENDLESS as f64) as i64
}

/// How the windows are laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// One endless window: every access is seen.
    Full,
    /// Windows of `window` checks, gaps of `gap` checks.
    Fixed {
        /// Checks per window.
        window: i64,
        /// Checks per gap.
        gap: i64,
    },
    /// Adaptive, per thread: windows of [`WINDOW`] checks; each window
    /// and each gap is timed (TSC), and the share of checks in windows is
    /// set so that the hooks cost about [`AUTO_BUDGET`] of the time the
    /// clean code would take: `share = AUTO_BUDGET / o`, where `o` is the
    /// measured slowdown of the instrumented copy over the clean one per
    /// check, less 1 (see [`auto_share`]). Latency-bound code, where the
    /// hooks hide behind the misses (`o` small), runs instrumented nearly
    /// all the time; streaming and compute code (`o` of 5-20) a few
    /// percent. The share stays in [[`AUTO_MIN_SHARE`], [`AUTO_MAX_SHARE`]],
    /// so that some gaps remain to time the clean code.
    Auto,
}

impl Policy {
    /// The policy `--sample` asks for.
    pub fn from_option(s: Sample) -> Policy {
        match s {
            Sample::Off => Policy::Full,
            Sample::Auto => Policy::Auto,
            Sample::Ratio(r) => Policy::fixed(r),
        }
    }

    /// Windows of [`WINDOW`] checks, with gaps so that `ratio` of the
    /// checks fall in windows (`ratio` in (0, 1]).
    pub fn fixed(ratio: f64) -> Policy {
        let ratio = ratio.clamp(1e-9, 1.0);
        let gap = (WINDOW as f64 * (1.0 - ratio) / ratio).round();
        if gap < 1.0 {
            return Policy::Full;
        }
        Policy::Fixed {
            window: WINDOW,
            gap: gap.min(ENDLESS as f64) as i64,
        }
    }

    /// (window, gap) in checks for a thread whose measured share (under
    /// [`Policy::Auto`]) is `share`; a gap of 0 means endless windows.
    fn lengths(self, share: f64) -> (i64, i64) {
        match self {
            Policy::Full => (ENDLESS, 0),
            Policy::Fixed { window, gap } => (window, gap),
            Policy::Auto => (WINDOW, gap_for(WINDOW, share).max(1)),
        }
    }
}

/// One thread's switch state.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Switch {
    /// In a window (else in a gap, or not started).
    pub in_window: bool,
    /// The countdown set when the current window or gap began (0: none
    /// began since the hooks went on).
    pub set: i64,
    /// Checks run in windows so far.
    pub window_events: u64,
    /// Checks run in gaps so far.
    pub gap_events: u64,
    /// TSC when the current window or gap began.
    pub since: u64,
    /// TSC cycles per check of the windows and of the gaps, a moving
    /// average ([`smooth`]; 0: not timed).
    pub window_cycles: f64,
    /// See `window_cycles`.
    pub gap_cycles: f64,
    /// The program's countdown pair, as last seen (to count the checks of
    /// the current window or gap).
    pub state: usize,
}

impl Switch {
    /// Answer one question: `state` is the program's pair (`state[0]` the
    /// clean countdown, `state[1]` the window's), `active` whether the
    /// hooks count, `full` whether every access must be seen (tracing).
    /// Returns 1 when the instrumented copy is to run, else 0, and leaves
    /// the next countdowns in `state`.
    /// `now` is the TSC (for [`Policy::Auto`]).
    pub fn ask(
        &mut self,
        policy: Policy,
        active: bool,
        full: bool,
        state: &mut [i64; 2],
        now: u64,
    ) -> i32 {
        self.state = state.as_ptr() as usize;
        if !active {
            self.in_window = false;
            self.set = 0;
            *state = [INACTIVE_GAP, 1];
            return 0;
        }
        let (window, gap) = if full {
            (ENDLESS, 0)
        } else {
            policy.lengths(self.share())
        };
        if self.set == 0 {
            self.since = now;
            return self.open(window, state);
        }
        if self.in_window {
            if state[1] > 0 {
                // A clean-copy check during the window: a function
                // entered in it, or a caller's loop.
                state[1] -= 1;
                if state[1] > 0 {
                    state[0] = 1;
                    return 1;
                }
            }
            let n = (self.set - state[1]).max(0) as u64;
            self.window_events += n;
            self.window_cycles = smooth(
                self.window_cycles,
                per_check(now.wrapping_sub(self.since), n),
            );
            self.since = now;
            if gap == 0 {
                return self.open(window, state);
            }
            // The gap, from the share as timed now.
            let (_, gap) = if full {
                (window, gap)
            } else {
                policy.lengths(self.share())
            };
            self.in_window = false;
            self.set = gap;
            *state = [gap, 1];
            0
        } else {
            if state[0] > 0 {
                // The instrumented copy of a caller asks after its
                // callee closed the window: back to the clean copy.
                state[1] = 1;
                return 0;
            }
            let n = (self.set - state[0]).max(0) as u64;
            self.gap_events += n;
            self.gap_cycles = smooth(self.gap_cycles, per_check(now.wrapping_sub(self.since), n));
            self.since = now;
            self.open(window, state)
        }
    }

    fn open(&mut self, window: i64, state: &mut [i64; 2]) -> i32 {
        self.in_window = true;
        self.set = window;
        *state = [1, window];
        1
    }

    /// The factor that extrapolates the counts of the windows to every
    /// check: (window + gap checks) / window checks, those of the closed
    /// windows and gaps; 1 before any window closed.
    pub fn factor(&self) -> f64 {
        extrapolation_factor(self.window_events, self.gap_events)
    }

    /// The share of checks [`Policy::Auto`] puts in windows now:
    /// [`auto_share`] of the timed slowdown, [`AUTO_FIRST_SHARE`] until a
    /// window and a gap were timed.
    pub fn share(&self) -> f64 {
        if self.window_cycles <= 0.0 || self.gap_cycles <= 0.0 {
            return AUTO_FIRST_SHARE;
        }
        auto_share(self.window_cycles / self.gap_cycles - 1.0)
    }

    /// The checks of the windows and gaps so far, with those of the
    /// current one, given the program's countdowns `state`.
    pub fn events_with(&self, state: [i64; 2]) -> (u64, u64) {
        let (mut w, mut g) = (self.window_events, self.gap_events);
        if self.set > 0 {
            if self.in_window {
                w += (self.set - state[1]).max(0) as u64;
            } else {
                g += (self.set - state[0]).max(0) as u64;
            }
        }
        (w, g)
    }
}

/// A moving average of cycles per check: `old` (0: none yet) updated with
/// `new` (0: nothing timed), so that one window slowed by a batch of the
/// model or by a switch to another task does not flip the share.
pub fn smooth(old: f64, new: f64) -> f64 {
    match (old > 0.0, new > 0.0) {
        (_, false) => old,
        (false, true) => new,
        (true, true) => 0.75 * old + 0.25 * new,
    }
}

/// Cycles per check (0 when no check ran).
fn per_check(cycles: u64, checks: u64) -> f64 {
    if checks == 0 {
        return 0.0;
    }
    cycles as f64 / checks as f64
}

/// (window + gap) / window checks, 1 when no window check was counted.
pub fn extrapolation_factor(window_events: u64, gap_events: u64) -> f64 {
    if window_events == 0 {
        return 1.0;
    }
    (window_events + gap_events) as f64 / window_events as f64
}

/// The policy in force, as [`Policy`] bits: 0 full, 1 auto, else a fixed
/// gap in the high bits (see [`set_policy`]).
static POLICY: AtomicU64 = AtomicU64::new(0);

/// Set the process's policy (when the instrumented source opens).
pub fn set_policy(p: Policy) {
    let bits = match p {
        Policy::Full => 0,
        Policy::Auto => 1,
        Policy::Fixed { window, gap } => {
            2 | ((window as u64 & 0xff_ffff) << 2) | ((gap as u64) << 26)
        }
    };
    POLICY.store(bits, Ordering::Relaxed);
}

/// The process's policy.
pub fn policy() -> Policy {
    match POLICY.load(Ordering::Relaxed) {
        0 => Policy::Full,
        1 => Policy::Auto,
        b => Policy::Fixed {
            window: ((b >> 2) & 0xff_ffff) as i64,
            gap: (b >> 26) as i64,
        },
    }
}

thread_local! {
    static SWITCH: Cell<Switch> = const {
        Cell::new(Switch {
            in_window: false,
            set: 0,
            window_events: 0,
            gap_events: 0,
            since: 0,
            window_cycles: 0.0,
            gap_cycles: 0.0,
            state: 0,
        })
    };
}

thread_local! {
    /// TSC cycles the calling thread spent in the runtime's epoch ends
    /// (delays included), left out of the windows' and gaps' times.
    static EXCLUDED: Cell<u64> = const { Cell::new(0) };
}

/// Leave `ticks` TSC cycles the calling thread spent in the runtime (an
/// epoch end and its delay) out of the sampling's timing: the delays are
/// injected where the windows see misses, and would make the windows look
/// slow. Async-signal-safe.
pub fn exclude(ticks: u64) {
    EXCLUDED.with(|c| c.set(c.get().wrapping_add(ticks)));
}

/// The body of `__pmlab_sample_switch`: `state` is the calling program's
/// pair (see the module's documentation).
///
/// # Safety
///
/// `state` points at two writable `i64`s of the calling thread.
pub unsafe fn switch(state: *mut i64) -> i32 {
    if state.is_null() {
        return 0;
    }
    let st = &mut *(state as *mut [i64; 2]);
    let active = super::hooks::active();
    let full = super::hooks::tracing();
    SWITCH.with(|c| {
        let mut s = c.get();
        let now = pmlab_clock::rdtsc().wrapping_sub(EXCLUDED.with(Cell::get));
        let r = s.ask(policy(), active, full, st, now);
        c.set(s);
        r
    })
}

/// The calling thread's window and gap checks so far (the current window
/// or gap included). Async-signal-safe (read from the epoch signal's
/// handler).
pub fn thread_events() -> (u64, u64) {
    SWITCH.with(|c| {
        let s = c.get();
        if s.state == 0 {
            return (s.window_events, s.gap_events);
        }
        // SAFETY: the pair the program passed at its last question: its
        // own thread-local variable, alive while the thread runs.
        let st = unsafe { std::ptr::read_volatile(s.state as *const [i64; 2]) };
        s.events_with(st)
    })
}

/// The factor that extrapolates the calling thread's counts to all its
/// checks: its checks so far over its window checks (see
/// [`thread_events`]); 1 when no window ran (or the program has no
/// sampling plugin). The runtime scales each epoch's counts by the factor
/// at the epoch's end: the counts of a window may reach the model an epoch
/// late (the modeller thread runs the logs in the background), so the
/// run's ratio, not the epoch's, is the one that holds.
pub fn thread_factor() -> f64 {
    let (w, g) = thread_events();
    extrapolation_factor(w, g)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `n` checks of the copy `copy` (0 clean, 1 instrumented) as the
    /// plugin's code does; returns the copy running after them.
    fn run(sw: &mut Switch, p: Policy, st: &mut [i64; 2], mut copy: i32, n: u64) -> i32 {
        for _ in 0..n {
            let i = copy as usize;
            st[i] -= 1;
            if st[i] <= 0 {
                copy = sw.ask(p, true, false, st, 0);
            }
        }
        copy
    }

    #[test]
    fn inactive_hooks_run_clean_and_ask_rarely() {
        let mut sw = Switch::default();
        let mut st = [1, 1];
        assert_eq!(sw.ask(Policy::Full, false, false, &mut st, 0), 0);
        assert_eq!(st, [INACTIVE_GAP, 1]);
        assert_eq!(sw.window_events + sw.gap_events, 0);
    }

    #[test]
    fn full_and_tracing_keep_one_endless_window() {
        for (p, full) in [(Policy::Full, false), (Policy::fixed(0.01), true)] {
            let mut sw = Switch::default();
            let mut st = [1, 1];
            st[0] -= 1;
            assert_eq!(sw.ask(p, true, full, &mut st, 0), 1);
            assert_eq!(st, [1, ENDLESS]);
            // Function entries in the window ask and stay instrumented.
            for _ in 0..1000 {
                st[0] -= 1;
                assert_eq!(sw.ask(p, true, full, &mut st, 0), 1);
                assert_eq!(st[0], 1);
            }
            assert_eq!(st[1], ENDLESS - 1000);
        }
    }

    #[test]
    fn fixed_ratio_spends_its_share_in_windows() {
        let p = Policy::fixed(0.1);
        assert_eq!(
            p,
            Policy::Fixed {
                window: WINDOW,
                gap: 9 * WINDOW
            }
        );
        let mut sw = Switch::default();
        let mut st = [1, 1];
        let mut copy = 0;
        let (mut inside, total) = (0u64, 2_000_000u64);
        for _ in 0..total {
            if copy == 1 {
                inside += 1;
            }
            copy = run(&mut sw, p, &mut st, copy, 1);
        }
        let share = inside as f64 / total as f64;
        assert!((share - 0.1).abs() < 0.01, "share {share}");
        let f = sw.factor();
        // The last gap is still open: every window has closed, all gaps
        // but one.
        let periods = total as f64 / (10 * WINDOW) as f64;
        let want = (periods * WINDOW as f64 + (periods - 1.0) * 9.0 * WINDOW as f64)
            / (periods * WINDOW as f64);
        assert!((f - want).abs() < 0.01, "factor {f}, want {want}");
        // Every check is counted but the very first, which opened the
        // first window.
        assert_eq!(
            sw.window_events + sw.gap_events + st_pending(&sw, &st) + 1,
            total
        );
    }

    /// Checks of the current phase not yet counted.
    fn st_pending(sw: &Switch, st: &[i64; 2]) -> u64 {
        let left = if sw.in_window { st[1] } else { st[0] };
        (sw.set - left) as u64
    }

    #[test]
    fn callers_leave_the_window_when_a_callee_closes_it() {
        let p = Policy::Fixed { window: 3, gap: 5 };
        let mut sw = Switch::default();
        let mut st = [1, 1];
        st[0] -= 1;
        assert_eq!(sw.ask(p, true, false, &mut st, 0), 1);
        // The callee's instrumented loop runs out the window.
        assert_eq!(run(&mut sw, p, &mut st, 1, 3), 0);
        assert_eq!(st, [5, 1]);
        // The caller, still instrumented, asks at its next check and goes
        // clean; the gap's countdown is untouched.
        st[1] -= 1;
        assert_eq!(sw.ask(p, true, false, &mut st, 0), 0);
        assert_eq!(st, [5, 1]);
        assert_eq!(sw.window_events, 3);
    }

    #[test]
    fn auto_share_follows_the_timed_slowdown() {
        // Hooks hidden by misses: nearly always instrumented.
        assert_eq!(auto_share(0.05), AUTO_MAX_SHARE);
        assert_eq!(auto_share(0.9), AUTO_MAX_SHARE);
        assert_eq!(auto_share(0.0), AUTO_MAX_SHARE);
        // A triad 17x slower instrumented: 10% / 16.
        assert!((auto_share(16.0) - AUTO_BUDGET / 16.0).abs() < 1e-12);
        assert_eq!(auto_share(1e6), AUTO_MIN_SHARE);
        assert_eq!(gap_for(100, 0.25), 300);
        assert_eq!(gap_for(100, 1.0), 0);
    }

    #[test]
    fn auto_times_windows_and_gaps_and_sets_the_share() {
        // Each check costs 10 cycles in a window, 1 in a gap: o = 9.
        let mut sw = Switch::default();
        let mut st = [1, 1];
        let mut now = 0u64;
        st[0] -= 1;
        let mut copy = sw.ask(Policy::Auto, true, false, &mut st, now);
        assert_eq!(copy, 1);
        for _ in 0..3_000_000u64 {
            now += if copy == 1 { 10 } else { 1 };
            let i = copy as usize;
            st[i] -= 1;
            if st[i] <= 0 {
                copy = sw.ask(Policy::Auto, true, false, &mut st, now);
            }
        }
        assert_eq!(sw.window_cycles, 10.0);
        assert_eq!(sw.gap_cycles, 1.0);
        let want = auto_share(9.0);
        assert!((sw.share() - want).abs() < 1e-12);
        assert!(!sw.in_window || sw.set == WINDOW);
        // The gaps after the first follow the share.
        if !sw.in_window {
            assert_eq!(sw.set, gap_for(WINDOW, want));
        }
        let (w, g) = sw.events_with(st);
        assert_eq!(w + g + 1, 3_000_001);
    }

    #[test]
    fn one_slow_window_moves_the_average_a_quarter() {
        assert_eq!(smooth(0.0, 8.0), 8.0);
        assert_eq!(smooth(8.0, 0.0), 8.0);
        assert_eq!(smooth(8.0, 40.0), 16.0);
    }

    #[test]
    fn extrapolation_is_total_over_window_checks() {
        assert_eq!(extrapolation_factor(0, 0), 1.0);
        assert_eq!(extrapolation_factor(0, 100), 1.0);
        assert_eq!(extrapolation_factor(100, 0), 1.0);
        assert_eq!(extrapolation_factor(100, 900), 10.0);
    }

    #[test]
    fn policy_round_trips_through_its_bits() {
        for p in [
            Policy::Full,
            Policy::Auto,
            Policy::fixed(0.01),
            Policy::Fixed {
                window: 7,
                gap: 1 << 30,
            },
        ] {
            set_policy(p);
            assert_eq!(policy(), p);
        }
        set_policy(Policy::Full);
        assert_eq!(Policy::fixed(1.0), Policy::Full);
        assert_eq!(Policy::from_option(Sample::Off), Policy::Full);
    }
}
