//! The accesses the hooks offer to the tracer while `pmlab trace` records
//! (`PMLAB_TRACE_STORES=1`): a PM store becomes a `W` record; DRAM loads
//! and stores and PM loads are counted in the thread's state and recorded
//! as one `UNTRACED` count every [`TRACE_COUNT_EVERY`] and when the thread
//! ends or the trace finishes.

use super::log::{tls, Tls};
use super::pm::is_pm;

/// Accesses of one kind a thread counts before it records them as one
/// `UNTRACED` record.
pub const TRACE_COUNT_EVERY: u64 = 4096;

/// Records the calling thread's pending `UNTRACED` counts when the thread
/// ends. Registered (a TLS destructor) at the thread's first slow call
/// while tracing; the main thread's runs before `exit`'s handlers finish
/// the trace.
struct FlushAtExit;

impl Drop for FlushAtExit {
    fn drop(&mut self) {
        flush_trace_counts();
    }
}

thread_local! {
    static FLUSH_AT_EXIT: FlushAtExit = const { FlushAtExit };
}

/// Have the calling thread's pending counts recorded when it ends (at its
/// first miss while tracing).
pub(super) fn flush_at_thread_exit() {
    let _ = FLUSH_AT_EXIT.try_with(|_| ());
}

/// Offer one access to the tracer (tracing is on): a PM store is recorded,
/// anything else counted in the thread's state.
///
/// # Safety
///
/// `t` is the calling thread's state.
// Out of line: the hook stays small when not tracing.
#[inline(never)]
pub(super) unsafe fn trace_access(t: *mut Tls, addr: usize, size: u32, write: bool) {
    let pm = is_pm(addr);
    if pm && write {
        crate::tracer::record(
            pmlab_trace::Op::Write,
            pmlab_trace::Space::Pm,
            addr as u64,
            size,
        );
        return;
    }
    let n = if pm {
        &mut (*t).trace_pm_loads
    } else {
        &mut (*t).trace_dram
    };
    *n += 1;
    if *n >= TRACE_COUNT_EVERY {
        flush_counts(t);
    }
}

#[cold]
#[inline(never)]
unsafe fn flush_counts(t: *mut Tls) {
    for (n, space) in [
        (&mut (*t).trace_dram, pmlab_trace::Space::Dram),
        (&mut (*t).trace_pm_loads, pmlab_trace::Space::Pm),
    ] {
        let v = std::mem::take(n);
        if v > 0 {
            crate::tracer::record(pmlab_trace::Op::Untraced, space, v, 0);
        }
    }
}

/// Record the calling thread's pending `UNTRACED` counts now (the tracer
/// calls this before it finishes the trace).
pub fn flush_trace_counts() {
    // SAFETY: own thread's state.
    unsafe { flush_counts(tls()) };
}
