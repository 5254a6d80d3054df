//! `hops` and `hops-adr`: HOPS's persist buffers with `ofence`/`dfence`.
//! Under `hops` an epoch is acknowledged when its lines are on the media
//! (HOPS's "NVM" configuration); under `hops-adr` once they are in the
//! controller's write pending queue (HOPS's "PWQ" configuration: "the MC
//! ACK may be sent ... earlier, if the MC request queues are automatically
//! flushed on failures"). One implementation, two acknowledgement points.
//! The buffers are [`super::persist_buffer`]'s; flushes cost nothing.

use super::persist_buffer::PersistBuffers;
use super::{Config, Core, Persistency};
use pmlab_trace::Op;

/// The `hops` and `hops-adr` models.
pub(crate) struct Hops(PersistBuffers);

impl Hops {
    /// The `hops` model for a replay with `_cfg` (the buffer sizes are
    /// read from the replay's configuration as it runs): epochs
    /// acknowledged on the media.
    pub(crate) fn new(_cfg: &Config) -> Hops {
        Hops(PersistBuffers::new(true))
    }

    /// The `hops-adr` model: epochs acknowledged by the controller's write
    /// pending queue.
    pub(crate) fn adr(_cfg: &Config) -> Hops {
        Hops(PersistBuffers::new(false))
    }
}

impl Persistency for Hops {
    fn add_thread(&mut self) {
        self.0.add_thread();
    }

    fn store(&mut self, cx: &mut Core, ti: usize, line: u64, _nt: bool, _first: bool) {
        self.0.store(cx, ti, line);
    }

    fn fence(&mut self, cx: &mut Core, ti: usize, op: Op) {
        let durable = PersistBuffers::durable(cx, ti, op);
        self.0.fence(cx, ti, durable);
    }

    fn tx_end(&mut self, cx: &mut Core, ti: usize) {
        self.0.tx_end(cx, ti);
    }

    fn advance(&mut self, cx: &mut Core, at: f64) {
        self.0.advance_all(cx, at);
    }

    fn finish(&mut self, cx: &mut Core) {
        self.0.finish(cx);
    }
}
