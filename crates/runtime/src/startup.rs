//! The library's start-up, run once by its constructor (declared in
//! [`crate::exports`]). The order matters, so it is written here rather
//! than left to the link order of several `.init_array` entries:
//!
//! 1. libc's copy functions and libpmlab's own address range must be known
//!    ([`memfns::init`]) before any runtime thread starts, or that thread's
//!    own copies (the trace writer's name, at start-up) are counted as the
//!    program's;
//! 2. the tracer then starts, with the instrumentation hooks turned on
//!    first when the trace is to record the program's stores, before
//!    emulation, as it records what emulation's start-up does;
//! 3. emulation ([`crate::emu::init`]).

use crate::source::instrumented::{self, hooks, memfns};
use crate::{emu, pmdk, tracer};

/// Everything the library does when it is loaded.
pub(crate) fn on_load() {
    memfns::init();
    start_trace();
    emu::init();
}

/// Start the trace the environment asks for, if any (see [`crate::tracer`]).
fn start_trace() {
    let Some(req) = tracer::request_from_env() else {
        return;
    };
    if req.stores {
        // A program built with `pmlab cc`: turn the load/store hooks on so
        // that its stores into PM are recorded and its other accesses
        // counted (no delay is injected: that is `pmlab run`'s work).
        match instrumented::config_from_env(tracer::env) {
            Ok(cfg) => hooks::activate(cfg),
            Err(e) => {
                let msg = format!("pmlab: trace: stores will not be recorded: {e}\n");
                // SAFETY: plain write(2) to stderr.
                unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            }
        }
    }
    let pmdk = if pmdk::libpmem_present() {
        "interposed"
    } else {
        "absent"
    };
    if tracer::start_requested(&req, &[("pmdk", pmdk)]) && hooks::active() {
        hooks::trace_accesses(true);
    }
}
