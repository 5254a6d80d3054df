//! What the two x86 models share: stores stay in the cache until a flush
//! writes them back (the thread does not wait); a fence waits until every
//! earlier write-back and non-temporal store of its thread is durable; a
//! flush that invalidates its line ([`FlushInvalidation`]) makes the next
//! cacheable store to it read it from memory first (a read for ownership,
//! RFO), and the line's next write-back waits for that read. The models
//! differ only in where a write is durable: on the media (`x86-nvm`) or
//! once accepted into the controller's write pending queue (`x86-adr`).

use super::{Core, FlushInvalidation};
use crate::Request;
use pmlab_trace::Op;
use std::collections::HashMap;

/// `fetch` is swept of arrived entries when it grows past this.
const FETCH_SWEEP_MIN: usize = 1 << 16;

/// Per-thread state of the x86 models.
struct X86Thread {
    /// Latest durability time of the writes since the last fence.
    pending_durable: f64,
    /// The same, had no write-back waited for an RFO (each write-back's
    /// durability time less its delay).
    pending_durable_no_rfo: f64,
    has_pending: bool,
}

/// The x86 cache and write-back machinery, durable at the media or at the
/// controller.
pub(crate) struct X86Cache {
    /// Durable on the media (else: accepted by the controller).
    media: bool,
    flush_invalidates: FlushInvalidation,
    threads: Vec<X86Thread>,
    /// Lines an invalidating flush left out of the caches, with when
    /// their data is back: infinite while no store has fetched them, the
    /// arrival of the read for ownership once one has (entries whose data
    /// is back before every thread's clock are swept).
    fetch: HashMap<u64, f64>,
    /// Size of `fetch` at which arrived entries are swept.
    fetch_sweep_at: usize,
}

impl X86Cache {
    /// The machinery, durable on the media when `media`.
    pub(crate) fn new(media: bool, flush_invalidates: FlushInvalidation) -> X86Cache {
        X86Cache {
            media,
            flush_invalidates,
            threads: Vec::new(),
            fetch: HashMap::new(),
            fetch_sweep_at: FETCH_SWEEP_MIN,
        }
    }

    pub(crate) fn add_thread(&mut self) {
        self.threads.push(X86Thread {
            pending_durable: 0.0,
            pending_durable_no_rfo: 0.0,
            has_pending: false,
        });
    }

    /// A load brings an invalidated line back into the cache.
    pub(crate) fn loaded(&mut self, line: u64, at: f64) {
        if let Some(a) = self.fetch.get_mut(&line) {
            *a = a.min(at);
        }
    }

    /// A non-temporal store goes to memory at once (no RFO: it leaves the
    /// line's state as it was); a cacheable one stays in the cache, after
    /// reading its line if an invalidating flush left it out.
    pub(crate) fn store(&mut self, cx: &mut Core, ti: usize, line: u64, nt: bool) {
        if nt {
            let t0 = cx.threads[ti].clk;
            let th = cx.threads[ti].id;
            let d = cx.write_line(th, line, t0, true, self.media);
            let x = &mut self.threads[ti];
            x.pending_durable = x.pending_durable.max(d);
            x.pending_durable_no_rfo = x.pending_durable_no_rfo.max(d);
            x.has_pending = true;
            cx.issue(ti);
        } else {
            self.read_for_ownership(cx, ti, line);
        }
    }

    /// A flush writes the line back (from when its data is in the cache)
    /// and, if it invalidates, leaves it out of the caches.
    pub(crate) fn flush(&mut self, cx: &mut Core, ti: usize, line: u64, op: Op) {
        let t0 = cx.threads[ti].clk;
        let th = cx.threads[ti].id;
        // The write-back cannot start before the line's data is in the
        // cache (an RFO still on its way).
        let start = match self.fetch.get(&line) {
            Some(&at) if at.is_finite() && at > t0 => {
                cx.n.rfo_delayed_writebacks += 1;
                at
            }
            _ => t0,
        };
        let d = cx.write_line(th, line, start, false, self.media);
        if self.flush_invalidates.invalidates(op) {
            self.fetch.insert(line, f64::INFINITY);
        }
        let x = &mut self.threads[ti];
        x.pending_durable = x.pending_durable.max(d);
        x.pending_durable_no_rfo = x.pending_durable_no_rfo.max(d - (start - t0));
        x.has_pending = true;
        cx.issue(ti);
    }

    /// Every fence waits until the thread's writes since the last fence
    /// are durable.
    pub(crate) fn fence(&mut self, cx: &mut Core, ti: usize) {
        let x = &mut self.threads[ti];
        if x.has_pending {
            cx.n.durability_points += 1;
            let t = &mut cx.threads[ti];
            let wait = (x.pending_durable - t.clk).max(0.0);
            let no_rfo = (x.pending_durable_no_rfo - t.clk).max(0.0).min(wait);
            t.clk += wait;
            t.b.durability_ns += wait;
            t.b.rfo_wait_ns += wait - no_rfo;
            x.has_pending = false;
            x.pending_durable = f64::NEG_INFINITY;
            x.pending_durable_no_rfo = f64::NEG_INFINITY;
        }
        cx.issue(ti);
    }

    /// A cacheable store to a line that an invalidating flush left out of
    /// the caches reads it from memory first (the thread does not wait:
    /// the store waits in the store buffer); the line's next write-back
    /// waits for the data.
    fn read_for_ownership(&mut self, cx: &mut Core, ti: usize, line: u64) {
        let Some(at) = self.fetch.get_mut(&line) else {
            return;
        };
        if at.is_finite() {
            // Cached again, or on its way by an earlier store's RFO.
            return;
        }
        let t0 = cx.threads[ti].clk;
        let th = cx.threads[ti].id;
        let c = cx
            .sys
            .submit(&Request::new(t0, Op::Read, line * 64, 64).on_thread(th));
        self.fetch.insert(line, c.done_ns);
        cx.n.rfo_reads += 1;
        cx.n.rfo_read_ns += c.done_ns - t0;
        if self.fetch.len() >= self.fetch_sweep_at {
            // Forget fetched lines whose data arrived before every
            // thread's clock (no later write-back can wait for them).
            let now = cx.earliest_clock();
            self.fetch.retain(|_, at| *at > now);
            self.fetch_sweep_at = (2 * self.fetch.len()).max(FETCH_SWEEP_MIN);
        }
    }
}
