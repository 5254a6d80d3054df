//! HOPS's persist buffers, shared by `hops` and `hops-adr`: every store
//! takes an entry of its thread's buffer (no coalescing, HOPS Table 2);
//! the buffer starts draining at a threshold of entries in use (buffered
//! or awaiting acknowledgement) and then drains until empty; the lines of
//! one epoch are written together, an epoch's lines start only when every
//! line of the earlier epochs is acknowledged, and a line never leaves
//! before its store. `ofence` ends an epoch; `dfence` ends it and waits
//! until the buffer is empty and acknowledged; a full buffer stalls
//! stores. A store to a line whose last store, by another thread, is not
//! yet acknowledged depends on that thread's current epoch, which ends
//! there. The two models differ only in when a line is acknowledged: on
//! the media (`hops`) or once in the controller's write pending queue
//! (`hops-adr`).

use super::Core;
use pmlab_trace::Op;
use std::collections::{HashMap, VecDeque};

/// Retired epochs whose acknowledgement a thread remembers.
const RETIRED_KEPT: usize = 64;

/// `owners` is swept of durable entries when it grows past this.
const OWNERS_SWEEP_MIN: usize = 1 << 16;

/// A buffered store (HOPS's persist buffer front end).
struct PbEntry {
    line: u64,
    epoch: u64,
    /// When the store was made: its line cannot be written earlier.
    at: f64,
    /// Cross-thread dependency: (thread index, epoch) that must be durable
    /// before this entry's epoch drains.
    dep: Option<(usize, u64)>,
}

/// A drained line awaiting its acknowledgement.
struct Inflight {
    ack: f64,
    epoch: u64,
}

/// One thread's persist buffer.
#[derive(Default)]
struct PbThread {
    /// The thread's epoch timestamp (the current, open epoch).
    epoch: u64,
    pb: VecDeque<PbEntry>,
    /// Drained lines not yet acknowledged, in acknowledgement order.
    inflight: VecDeque<Inflight>,
    /// The epoch drained last (more of it may drain at once: stores of one
    /// epoch are unordered).
    launched_epoch: Option<u64>,
    /// When every drained line of `launched_epoch` is acknowledged.
    epoch_ack: f64,
    /// When every drained line of the epochs before it is acknowledged.
    before_ack: f64,
    /// The latest acknowledgement of each recently retired epoch, oldest
    /// first (at most [`RETIRED_KEPT`]).
    retired: VecDeque<(u64, f64)>,
    /// The buffer drains in the background (it reached the threshold).
    draining: bool,
    /// Since when.
    drain_since: f64,
}

impl PbThread {
    /// An upper bound on when every store of epochs up to `epoch` is
    /// acknowledged: infinite while some is still buffered.
    fn ack_bound(&self, epoch: u64) -> f64 {
        if self.pb.front().is_some_and(|e| e.epoch <= epoch) {
            return f64::INFINITY;
        }
        // Epochs are acknowledged in order: the last retired epoch up to
        // `epoch` holds the latest acknowledgement (an epoch older than the
        // history is bounded by its oldest entry).
        let retired = self
            .retired
            .iter()
            .rev()
            .find(|r| r.0 <= epoch)
            .or(self.retired.front())
            .map_or(f64::NEG_INFINITY, |r| r.1);
        self.inflight
            .iter()
            .filter(|i| i.epoch <= epoch)
            .map(|i| i.ack)
            .fold(retired, f64::max)
    }

    /// Record an acknowledged line.
    fn retire(&mut self, i: Inflight) {
        match self.retired.back_mut() {
            Some(r) if r.0 == i.epoch => r.1 = r.1.max(i.ack),
            _ => {
                if self.retired.len() == RETIRED_KEPT {
                    self.retired.pop_front();
                }
                self.retired.push_back((i.epoch, i.ack));
            }
        }
    }

    /// The earliest time lines of `epoch` may drain: after every line of
    /// the earlier epochs is acknowledged.
    fn epoch_may_drain(&self, epoch: u64) -> f64 {
        if self.launched_epoch == Some(epoch) {
            self.before_ack
        } else {
            self.before_ack.max(self.epoch_ack)
        }
    }

    /// End the current epoch early (HOPS splits epochs to avoid
    /// dependency cycles): later stores start a new one.
    fn split_epoch(&mut self) {
        self.epoch += 1;
    }
}

/// Every thread's persist buffer, acknowledged on the media or at the
/// controller.
pub(crate) struct PersistBuffers {
    /// Lines are acknowledged on the media (else: by the controller).
    media: bool,
    threads: Vec<PbThread>,
    /// The last writer of each line whose store may not be durable yet,
    /// (thread index, epoch of the store).
    owners: HashMap<u64, (usize, u64)>,
    /// Size of `owners` at which stale entries are swept.
    owners_sweep_at: usize,
}

impl PersistBuffers {
    /// Buffers acknowledged on the media when `media`.
    pub(crate) fn new(media: bool) -> PersistBuffers {
        PersistBuffers {
            media,
            threads: Vec::new(),
            owners: HashMap::new(),
            owners_sweep_at: OWNERS_SWEEP_MIN,
        }
    }

    pub(crate) fn add_thread(&mut self) {
        self.threads.push(PbThread::default());
    }

    /// Put a store into the thread's persist buffer. Every store takes an
    /// entry (HOPS Table 2; coalescing stores is left to future work
    /// there).
    pub(crate) fn store(&mut self, cx: &mut Core, ti: usize, line: u64) {
        let now = cx.threads[ti].clk;
        // A store to a line whose last buffered writer is another thread
        // (a lost exclusive permission in HOPS) depends on that thread's
        // current epoch (HOPS's conservative source timestamp), which
        // ends there so that no dependency cycle can form.
        let mut dep = None;
        if let Some(&(src, src_epoch)) = self.owners.get(&line) {
            if src != ti && self.threads[src].ack_bound(src_epoch) > now {
                let s = &mut self.threads[src];
                dep = Some((src, s.epoch));
                s.split_epoch();
                cx.n.cross_deps += 1;
            }
        }
        self.advance(cx, ti, now);
        // A full buffer stalls the store until an entry frees.
        while self.occupancy(ti) >= cx.cfg.pb_entries {
            let clk = cx.threads[ti].clk;
            let t = &mut self.threads[ti];
            if !t.draining {
                t.draining = true;
                t.drain_since = clk;
            }
            let free_at = match t.inflight.front() {
                Some(i) => i.ack,
                None => self.batch_start(ti, f64::NEG_INFINITY),
            };
            let c = &mut cx.threads[ti];
            let wait = (free_at - c.clk).max(0.0);
            c.clk += wait;
            c.b.buffer_full_ns += wait;
            let now = c.clk;
            let t = &self.threads[ti];
            let before = (t.pb.len(), t.inflight.len());
            self.advance(cx, ti, now);
            let t = &self.threads[ti];
            if wait == 0.0 && before == (t.pb.len(), t.inflight.len()) {
                // No progress possible by waiting: launch the oldest epoch.
                self.launch_batch(cx, ti, now);
            }
        }
        let t = &mut self.threads[ti];
        let epoch = t.epoch;
        t.pb.push_back(PbEntry {
            line,
            epoch,
            at: cx.threads[ti].clk,
            dep,
        });
        cx.issue(ti);
        self.owners.insert(line, (ti, epoch));
        if !self.threads[ti].draining && self.occupancy(ti) >= cx.cfg.pb_drain_at {
            let t = &mut self.threads[ti];
            t.draining = true;
            t.drain_since = cx.threads[ti].clk;
        }
        if self.owners.len() >= self.owners_sweep_at {
            self.sweep_owners(cx);
        }
    }

    /// Every fence ends the epoch; a durable one (`dfence`, or what the
    /// trace's `sfence`s and transaction ends stand for) also waits until
    /// the buffer is drained and acknowledged.
    pub(crate) fn fence(&mut self, cx: &mut Core, ti: usize, durable: bool) {
        self.threads[ti].epoch += 1;
        cx.issue(ti);
        let now = cx.threads[ti].clk;
        // What drained in the background up to now.
        self.advance(cx, ti, now);
        if durable {
            cx.n.durability_points += 1;
            let done = self.drain(cx, ti, now);
            let c = &mut cx.threads[ti];
            let wait = (done - c.clk).max(0.0);
            c.clk += wait;
            c.b.durability_ns += wait;
            let t = &mut self.threads[ti];
            while let Some(i) = t.inflight.pop_front() {
                t.retire(i);
            }
            t.draining = false;
        }
    }

    /// Whether fence `op` of thread `ti` waits for durability. In traces
    /// of x86 programs an `sfence` inside a transaction is read as
    /// `ofence` (WHISPER: durability is needed only at commit) and outside
    /// as `dfence`; traces that use `ofence`/`dfence` themselves are
    /// replayed as written.
    pub(crate) fn durable(cx: &Core, ti: usize, op: Op) -> bool {
        match op {
            Op::OFence => false,
            Op::SFence => cx.native_fences || cx.threads[ti].tx_depth == 0,
            _ => true,
        }
    }

    /// A transaction's end is a `dfence` in traces of x86 programs.
    pub(crate) fn tx_end(&mut self, cx: &mut Core, ti: usize) {
        if cx.threads[ti].tx_depth == 0 && !cx.native_fences {
            cx.threads[ti].epoch_lines.clear();
            self.fence(cx, ti, true);
        }
    }

    /// Every buffer drains in the background up to `at`.
    pub(crate) fn advance_all(&mut self, cx: &mut Core, at: f64) {
        for tj in 0..self.threads.len() {
            self.advance(cx, tj, at);
        }
    }

    /// Whatever is still buffered drains at its thread's end.
    pub(crate) fn finish(&mut self, cx: &mut Core) {
        for ti in 0..self.threads.len() {
            if !self.threads[ti].pb.is_empty() {
                let t = cx.threads[ti].clk;
                self.drain(cx, ti, t);
            }
        }
    }

    /// Forget line owners whose stores are durable before every thread's
    /// clock (no later store can depend on them).
    fn sweep_owners(&mut self, cx: &Core) {
        let now = cx.earliest_clock();
        let threads = &self.threads;
        self.owners
            .retain(|_, &mut (src, epoch)| threads[src].ack_bound(epoch) > now);
        self.owners_sweep_at = (2 * self.owners.len()).max(OWNERS_SWEEP_MIN);
    }

    fn occupancy(&self, ti: usize) -> usize {
        let t = &self.threads[ti];
        t.pb.len() + t.inflight.len()
    }

    /// The earliest time the oldest buffered epoch may start draining, no
    /// earlier than `from`: after every line of earlier epochs is
    /// acknowledged, and after the stores it holds were made.
    fn batch_start(&self, ti: usize, from: f64) -> f64 {
        let t = &self.threads[ti];
        let Some(epoch) = t.pb.front().map(|e| e.epoch) else {
            return from;
        };
        t.pb.iter()
            .take_while(|e| e.epoch == epoch)
            .map(|e| e.at)
            .fold(from.max(t.epoch_may_drain(epoch)), f64::max)
    }

    /// Retire acknowledged lines and launch, one epoch after the other,
    /// the epochs whose turn has come by time `now` (background draining).
    fn advance(&mut self, cx: &mut Core, ti: usize, now: f64) {
        loop {
            let t = &mut self.threads[ti];
            while t.inflight.front().is_some_and(|i| i.ack <= now) {
                let i = t.inflight.pop_front().expect("front");
                t.retire(i);
            }
            if !t.draining || t.pb.is_empty() {
                return;
            }
            let since = t.drain_since;
            let start = self.batch_start(ti, since);
            if start > now {
                return;
            }
            self.launch_batch(cx, ti, start);
            let t = &mut self.threads[ti];
            if t.pb.is_empty() {
                t.draining = false;
            }
        }
    }

    /// Write every buffered line of the oldest epoch, together, from
    /// `start` (or later: after the epoch's stores, after the
    /// acknowledgements of earlier epochs' lines, after the epochs of other
    /// threads it depends on).
    fn launch_batch(&mut self, cx: &mut Core, ti: usize, start: f64) {
        let Some(epoch) = self.threads[ti].pb.front().map(|e| e.epoch) else {
            return;
        };
        let mut s = self.batch_start(ti, start);
        let th = cx.threads[ti].id;
        let mut batch = Vec::new();
        let mut deps = Vec::new();
        while self.threads[ti]
            .pb
            .front()
            .is_some_and(|e| e.epoch == epoch)
        {
            let e = self.threads[ti].pb.pop_front().expect("front");
            batch.push(e.line);
            deps.extend(e.dep);
        }
        // Cross-thread dependencies: wait for the source epochs.
        for (src, src_epoch) in deps {
            let done = self.durable_time(cx, src, src_epoch, s);
            if done > s {
                cx.n.cross_waits += 1;
                s = done;
            }
        }
        let mut last = s;
        for line in batch {
            let ack = cx.write_line(th, line, s, false, self.media);
            last = last.max(ack);
            let t = &mut self.threads[ti];
            let pos = t.inflight.partition_point(|i| i.ack <= ack);
            t.inflight.insert(pos, Inflight { ack, epoch });
        }
        cx.n.epochs_drained += 1;
        let t = &mut self.threads[ti];
        if t.launched_epoch != Some(epoch) {
            t.before_ack = t.before_ack.max(t.epoch_ack);
            t.epoch_ack = last;
            t.launched_epoch = Some(epoch);
        } else {
            t.epoch_ack = t.epoch_ack.max(last);
        }
    }

    /// When thread `src`'s epochs up to `epoch` are all acknowledged,
    /// draining the buffered ones from `from` on.
    fn durable_time(&mut self, cx: &mut Core, src: usize, epoch: u64, from: f64) -> f64 {
        while self.threads[src]
            .pb
            .front()
            .is_some_and(|e| e.epoch <= epoch)
        {
            self.launch_batch(cx, src, from);
        }
        self.threads[src].ack_bound(epoch)
    }

    /// Drain the whole persist buffer from `now`; returns when it is
    /// acknowledged.
    fn drain(&mut self, cx: &mut Core, ti: usize, now: f64) -> f64 {
        while !self.threads[ti].pb.is_empty() {
            self.launch_batch(cx, ti, now);
        }
        let t = &self.threads[ti];
        t.inflight.iter().map(|i| i.ack).fold(now, f64::max)
    }
}
