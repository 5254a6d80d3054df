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
//! * `--sample auto` (the default): see [`Policy::Auto`].
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
pub const WINDOW: i64 = 20_000;

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
    /// Adaptive: for now the same as [`Policy::Full`] (every window
    /// endless), so that accuracy stays that of full instrumentation.
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

    /// (window, gap) in checks; a gap of 0 means endless windows.
    fn lengths(self) -> (i64, i64) {
        match self {
            Policy::Full | Policy::Auto => (ENDLESS, 0),
            Policy::Fixed { window, gap } => (window, gap),
        }
    }
}

/// One thread's switch state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}

impl Switch {
    /// Answer one question: `state` is the program's pair (`state[0]` the
    /// clean countdown, `state[1]` the window's), `active` whether the
    /// hooks count, `full` whether every access must be seen (tracing).
    /// Returns 1 when the instrumented copy is to run, else 0, and leaves
    /// the next countdowns in `state`.
    pub fn ask(&mut self, policy: Policy, active: bool, full: bool, state: &mut [i64; 2]) -> i32 {
        if !active {
            self.in_window = false;
            self.set = 0;
            *state = [INACTIVE_GAP, 1];
            return 0;
        }
        let (window, gap) = if full { (ENDLESS, 0) } else { policy.lengths() };
        if self.set == 0 {
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
            self.window_events += (self.set - state[1]).max(0) as u64;
            if gap == 0 {
                return self.open(window, state);
            }
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
            self.gap_events += (self.set - state[0]).max(0) as u64;
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
    /// check: (window + gap checks) / window checks; 1 before any window
    /// closed.
    pub fn factor(&self) -> f64 {
        extrapolation_factor(self.window_events, self.gap_events)
    }
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
        })
    };
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
        let r = s.ask(policy(), active, full, st);
        c.set(s);
        r
    })
}

/// The calling thread's window and gap checks so far.
pub fn thread_events() -> (u64, u64) {
    SWITCH.with(|c| {
        let s = c.get();
        (s.window_events, s.gap_events)
    })
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
                copy = sw.ask(p, true, false, st);
            }
        }
        copy
    }

    #[test]
    fn inactive_hooks_run_clean_and_ask_rarely() {
        let mut sw = Switch::default();
        let mut st = [1, 1];
        assert_eq!(sw.ask(Policy::Full, false, false, &mut st), 0);
        assert_eq!(st, [INACTIVE_GAP, 1]);
        assert_eq!(sw.window_events + sw.gap_events, 0);
    }

    #[test]
    fn full_and_tracing_keep_one_endless_window() {
        for (p, full) in [(Policy::Full, false), (Policy::fixed(0.01), true)] {
            let mut sw = Switch::default();
            let mut st = [1, 1];
            st[0] -= 1;
            assert_eq!(sw.ask(p, true, full, &mut st), 1);
            assert_eq!(st, [1, ENDLESS]);
            // Function entries in the window ask and stay instrumented.
            for _ in 0..1000 {
                st[0] -= 1;
                assert_eq!(sw.ask(p, true, full, &mut st), 1);
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
        // The last gap is still open: 10 windows and 9 gaps have closed.
        assert!((f - 9.1).abs() < 0.01, "factor {f}");
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
        assert_eq!(sw.ask(p, true, false, &mut st), 1);
        // The callee's instrumented loop runs out the window.
        assert_eq!(run(&mut sw, p, &mut st, 1, 3), 0);
        assert_eq!(st, [5, 1]);
        // The caller, still instrumented, asks at its next check and goes
        // clean; the gap's countdown is untouched.
        st[1] -= 1;
        assert_eq!(sw.ask(p, true, false, &mut st), 0);
        assert_eq!(st, [5, 1]);
        assert_eq!(sw.window_events, 3);
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
