//! libpmlab, the emulation runtime (work in progress: see issue 2).

pub mod instrument_hooks;
pub mod pmdk;
pub mod tracer;
