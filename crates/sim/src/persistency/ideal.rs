//! `ideal`: no ordering and no durability. Flushes and fences cost
//! nothing; each line a thread stores goes to memory once per epoch
//! (bandwidth, write-combined until the next fence), without waiting.

use super::{Config, Core, Persistency};
use pmlab_trace::Op;

/// The `ideal` model.
pub(crate) struct Ideal;

impl Ideal {
    /// The model (it has no parameters).
    pub(crate) fn new(_cfg: &Config) -> Ideal {
        Ideal
    }
}

impl Persistency for Ideal {
    fn store(&mut self, cx: &mut Core, ti: usize, line: u64, nt: bool, first_in_epoch: bool) {
        if first_in_epoch {
            let t0 = cx.threads[ti].clk;
            let th = cx.threads[ti].id;
            cx.write_line(th, line, t0, nt, false);
        }
    }

    fn fence(&mut self, _cx: &mut Core, _ti: usize, _op: Op) {}
}
