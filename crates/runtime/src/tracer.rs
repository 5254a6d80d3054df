//! Trace recording: the seam between the PM API / instrumentation hooks and
//! the trace writer. Every PM operation the runtime sees is offered to
//! [`record`]; when tracing is off (the default) that is one relaxed atomic
//! load.

use pmlab_trace::{Op, Space};
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// True when a trace is being recorded.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Record one operation of the calling thread. Must be async-signal-safe
/// and must never call back into an interposed function.
#[inline]
pub fn record(op: Op, space: Space, addr: u64, size: u32) {
    if !enabled() {
        return;
    }
    let _ = (op, space, addr, size);
}
