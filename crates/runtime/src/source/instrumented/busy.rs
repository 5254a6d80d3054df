//! Whether the instrumented source's overhead could be hidden: on a busy
//! machine the modeller thread ([`super::offload`]) finds no free CPU, so
//! the program's threads run their batches themselves (*inline*), and the
//! threads themselves wait for a CPU while runnable. Both lengthen the
//! program's time in ways the delays cannot undo exactly: the inline
//! batches are timed and charged back as overhead (subtracted from the
//! delays, as far as the delays go), but the time a thread spends
//! switched out is not seen by the runtime at all.
//!
//! The source sums, over the program's threads:
//!
//! * the inline batches and their timed cost, against the epochs' wall
//!   time (`hook_inline_share`);
//! * the time the threads were runnable but not running, from the kernel's
//!   per-task `schedstat` (`run_delay`), against their time on a CPU plus
//!   that wait (`run_delay_share`); the modeller thread is left out.
//!
//! Past [`INLINE_WARN_SHARE`] or [`WAIT_WARN_SHARE`] the run's summary
//! carries a one-line warning ([`warning`]), printed at exit.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// Inline modelling above this share of the epochs' time is warned about:
/// at 5% the program's time is off by about as much where the delays
/// cannot absorb it, beyond the emulator's other errors.
pub const INLINE_WARN_SHARE: f64 = 0.05;
/// Time runnable but waiting for a CPU above this share of the threads'
/// time is warned about (the program ran on a busy machine: its time is
/// stretched by the wait, which no delay accounts for).
pub const WAIT_WARN_SHARE: f64 = 0.10;

/// One task's scheduler statistics (`/proc/.../schedstat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sched {
    /// Time on a CPU, ns.
    pub on_cpu_ns: u64,
    /// Time runnable but waiting on a run queue, ns.
    pub wait_ns: u64,
    /// Time slices run.
    pub slices: u64,
}

impl Sched {
    /// The sum of two readings.
    pub fn plus(self, o: Sched) -> Sched {
        Sched {
            on_cpu_ns: self.on_cpu_ns.saturating_add(o.on_cpu_ns),
            wait_ns: self.wait_ns.saturating_add(o.wait_ns),
            slices: self.slices.saturating_add(o.slices),
        }
    }

    /// `self - o`, each field at least 0.
    pub fn minus(self, o: Sched) -> Sched {
        Sched {
            on_cpu_ns: self.on_cpu_ns.saturating_sub(o.on_cpu_ns),
            wait_ns: self.wait_ns.saturating_sub(o.wait_ns),
            slices: self.slices.saturating_sub(o.slices),
        }
    }

    /// The share of the time runnable spent waiting for a CPU, in 0..=1.
    pub fn wait_share(&self) -> f64 {
        let all = self.on_cpu_ns as f64 + self.wait_ns as f64;
        if all > 0.0 {
            self.wait_ns as f64 / all
        } else {
            0.0
        }
    }
}

/// Parse a `schedstat` line: three decimal numbers (time on CPU, time
/// waiting, slices).
pub fn parse_schedstat(b: &[u8]) -> Option<Sched> {
    let mut f = [0u64; 3];
    let mut it = b
        .split(|c| c.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    for v in &mut f {
        let w = it.next()?;
        if w.is_empty() || !w.iter().all(u8::is_ascii_digit) || w.len() > 19 {
            return None;
        }
        *v = w.iter().fold(0u64, |a, d| a * 10 + u64::from(d - b'0'));
    }
    Some(Sched {
        on_cpu_ns: f[0],
        wait_ns: f[1],
        slices: f[2],
    })
}

/// Read a `schedstat` file with open/read/close into a stack buffer
/// (async-signal-safe, no allocation); `None` if it cannot be read.
pub fn read_schedstat(path: &std::ffi::CStr) -> Option<Sched> {
    let mut buf = [0u8; 96];
    // SAFETY: a NUL-terminated path; reading into our own buffer; the
    // descriptor is closed on every path.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return None;
    }
    parse_schedstat(&buf[..n as usize])
}

/// The calling thread's scheduler statistics since it was created.
pub fn thread_sched() -> Option<Sched> {
    read_schedstat(c"/proc/thread-self/schedstat")
}

/// The sum over the process's live threads but the modeller and those
/// [`stopped`] counted already. Allocates: not for a signal handler.
pub fn process_sched() -> Sched {
    sched_of_tasks(|tid| tid == modeller_tid() || is_stopped(tid))
}

/// Threads whose whole-life statistics the source took at their exit
/// (still listed in `/proc` until they are gone), the last
/// [`STOPPED`] of them.
const STOPPED: usize = 64;
static STOPPED_TIDS: [AtomicI32; STOPPED] = [const { AtomicI32::new(0) }; STOPPED];
static STOPPED_NEXT: AtomicUsize = AtomicUsize::new(0);

/// Note that the calling thread's statistics were taken at its exit.
pub fn stopped() {
    let i = STOPPED_NEXT.fetch_add(1, Ordering::Relaxed) % STOPPED;
    STOPPED_TIDS[i].store(crate::sys::gettid(), Ordering::Relaxed);
}

fn is_stopped(tid: i32) -> bool {
    STOPPED_TIDS
        .iter()
        .any(|t| t.load(Ordering::Relaxed) == tid)
}

/// The sum over the process's live threads but those `skip` names.
pub fn sched_of_tasks(skip: impl Fn(i32) -> bool) -> Sched {
    let mut sum = Sched::default();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return sum;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(tid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if skip(tid) {
            continue;
        }
        let Ok(path) = std::ffi::CString::new(format!("/proc/self/task/{tid}/schedstat")) else {
            continue;
        };
        if let Some(s) = read_schedstat(&path) {
            sum = sum.plus(s);
        }
    }
    sum
}

/// The modeller thread's id (0: none), for [`process_sched`].
static MODELLER_TID: AtomicI32 = AtomicI32::new(0);

/// Record the calling thread as the modeller.
pub(super) fn set_modeller() {
    MODELLER_TID.store(crate::sys::gettid(), Ordering::Relaxed);
}

/// The modeller thread's id (0: none).
pub fn modeller_tid() -> i32 {
    MODELLER_TID.load(Ordering::Relaxed)
}

/// `part / whole`, 0 when `whole` is not positive.
pub fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        (part / whole).max(0.0)
    } else {
        0.0
    }
}

/// The warning for a run whose inline modelling took `inline_share` of its
/// epochs' time (`inline_ns` in all) and whose threads waited for a CPU
/// `wait_share` of their time (`wait_ns`); `None` below both thresholds.
pub fn warning(inline_share: f64, inline_ns: u64, wait_share: f64, wait_ns: u64) -> Option<String> {
    let inline = inline_share > INLINE_WARN_SHARE;
    let wait = wait_share > WAIT_WARN_SHARE;
    if !inline && !wait {
        return None;
    }
    let mut what = Vec::new();
    if inline {
        what.push(format!(
            "the program's threads ran the cache model themselves for {:.1}% of their time ({:.3} ms, charged back where the delays allowed)",
            inline_share * 100.0,
            inline_ns as f64 / 1e6
        ));
    }
    if wait {
        what.push(format!(
            "they waited for a CPU {:.1}% of the time they were runnable ({:.3} ms, not corrected)",
            wait_share * 100.0,
            wait_ns as f64 / 1e6
        ));
    }
    Some(format!(
        "busy machine: {}; emulated times are too long by up to that much: run with a CPU free for the emulator",
        what.join(", and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_lines_parse_and_bad_ones_do_not() {
        assert_eq!(
            parse_schedstat(b"123456 7890 42\n"),
            Some(Sched {
                on_cpu_ns: 123456,
                wait_ns: 7890,
                slices: 42
            })
        );
        assert_eq!(parse_schedstat(b"1 2\n"), None);
        assert_eq!(parse_schedstat(b"1 -2 3\n"), None);
        assert_eq!(parse_schedstat(b"99999999999999999999 1 1"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    #[test]
    fn this_threads_schedstat_reads_when_the_kernel_has_it() {
        // Kernels without CONFIG_SCHEDSTATS (or without /proc) give None;
        // where it exists, a thread that runs has had a time slice (its
        // time on a CPU is accounted at switches and ticks: it may read 0).
        if let Some(s) = thread_sched() {
            assert!(s.slices > 0, "{s:?}");
            let p = sched_of_tasks(|_| false);
            assert!(p.slices >= s.slices, "{p:?} vs {s:?}");
        }
    }

    #[test]
    fn wait_share_is_the_wait_over_the_runnable_time() {
        let s = Sched {
            on_cpu_ns: 900,
            wait_ns: 100,
            slices: 3,
        };
        assert!((s.wait_share() - 0.1).abs() < 1e-12);
        assert_eq!(Sched::default().wait_share(), 0.0);
        let later = s.plus(s);
        assert_eq!(later.minus(s), s);
        assert_eq!(s.minus(later), Sched::default());
    }

    #[test]
    fn warnings_start_past_their_thresholds_and_name_the_effect() {
        assert_eq!(warning(0.0, 0, 0.0, 0), None);
        assert_eq!(warning(INLINE_WARN_SHARE, 1, WAIT_WARN_SHARE, 1), None);
        let w = warning(0.20, 3_000_000, 0.0, 0).unwrap();
        assert!(w.contains("20.0%") && w.contains("3.000 ms"), "{w}");
        assert!(!w.contains("waited"), "{w}");
        let w = warning(0.0, 0, 0.5, 7_000_000).unwrap();
        assert!(
            w.contains("waited for a CPU 50.0%") && w.contains("7.000 ms"),
            "{w}"
        );
        let both = warning(0.06, 1, 0.11, 1).unwrap();
        assert!(both.contains(", and "), "{both}");
        assert_eq!(both.lines().count(), 1);
    }
}
