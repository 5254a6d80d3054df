//! `x86-nvm`: `clwb`/`clflush(opt)` + `sfence`, durable when the write is on
//! the media (accepted by the memory controller, plus the media write
//! time).
//! The cache and write-back machinery is [`super::x86`]'s.

use super::x86::X86Cache;
use super::{Config, Core, Persistency};
use pmlab_trace::Op;

/// The `x86-nvm` model.
pub(crate) struct X86Nvm(X86Cache);

impl X86Nvm {
    /// The model for a replay with `cfg`.
    pub(crate) fn new(cfg: &Config) -> X86Nvm {
        X86Nvm(X86Cache::new(true, cfg.flush_invalidates))
    }
}

impl Persistency for X86Nvm {
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
