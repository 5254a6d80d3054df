//! `x86-adr`: `clwb`/`clflush(opt)` + `sfence`, durable once the write is
//! accepted into the controller's write pending queue (ADR, HOPS's PWQ).
//! The cache and write-back machinery is [`super::x86`]'s.

use super::x86::X86Cache;
use super::{Config, Core, Persistency};
use pmlab_trace::Op;

/// The `x86-adr` model.
pub(crate) struct X86Adr(X86Cache);

impl X86Adr {
    /// The model for a replay with `cfg`.
    pub(crate) fn new(cfg: &Config) -> X86Adr {
        X86Adr(X86Cache::new(false, cfg.flush_invalidates))
    }
}

impl Persistency for X86Adr {
    fn add_thread(&mut self) {
        self.0.add_thread();
    }

    fn loaded(&mut self, line: u64, at: f64) {
        self.0.loaded(line, at);
    }

    fn store(&mut self, cx: &mut Core, ti: usize, line: u64, nt: bool, _first: bool) {
        self.0.store(cx, ti, line, nt);
    }

    fn flush(&mut self, cx: &mut Core, ti: usize, line: u64, op: Op) {
        self.0.flush(cx, ti, line, op);
    }

    fn fence(&mut self, cx: &mut Core, ti: usize, _op: Op) {
        self.0.fence(cx, ti);
    }
}
