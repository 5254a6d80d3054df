//! Replay of a PM trace under persistency models (after HOPS, WHISPER
//! section 6), on top of a simulated memory [`System`].
//!
//! Each thread of the trace gets a simulated clock. Between two of its
//! records the thread computes for the gap the trace shows (the *compute
//! gap*); its PM operations then cost what the model and the memory system
//! say. Threads are interleaved by always advancing the one whose next
//! record comes first on the simulated clocks (its clock plus the gap
//! before the record), so the memory system sees requests in time order;
//! persist buffers drain in the background up to that time first.
//!
//! Models ([`Model`]):
//!
//! * `x86-nvm`: stores stay in the cache; `clwb`/`clflush(opt)` write the
//!   line back (the thread does not wait); `sfence` waits until every
//!   earlier write-back and non-temporal store of the thread is on the
//!   media (accepted by the memory controller, plus the media write time).
//!   A flush that invalidates the line ([`FlushInvalidation`]: `clflush`
//!   and `clflushopt` always do, `clwb` may) leaves it out of every cache:
//!   the next cacheable store to it, by any thread, reads it from memory
//!   first (a read for ownership, RFO, submitted at the store's time; the
//!   thread goes on), and the line's next write-back starts no earlier
//!   than the read's data arrived, so the fence that waits for that
//!   write-back waits for the read too. Non-temporal stores bypass the
//!   cache and need no RFO (they leave the line's state as it was).
//! * `x86-adr`: the same, but durable once accepted into the controller's
//!   write pending queue (ADR / HOPS's persistent write queue, PWQ).
//! * `hops`: every store takes an entry of a per-thread persist buffer (32
//!   entries; HOPS Table 2, no coalescing); flushes are not needed and
//!   cost nothing. The buffer starts draining at 16 entries (in use:
//!   buffered or awaiting acknowledgement) and then drains until empty:
//!   the lines of one epoch are written together, an epoch's lines start
//!   only when every line of the earlier epochs is acknowledged, and a
//!   line never leaves before its store. An epoch is acknowledged when its
//!   lines are on the media. `ofence` ends an epoch (cost: nothing);
//!   `dfence` ends it and waits until the buffer is empty and
//!   acknowledged; a full buffer stalls stores. A store to a line whose
//!   last store, by another thread, is not yet acknowledged depends on
//!   that thread's current epoch (HOPS's conservative source timestamp):
//!   the source epoch ends there (split, so no dependency cycle forms) and
//!   the dependent epoch drains only once it is acknowledged, forcing it
//!   out if needed. In traces of x86 programs, an `sfence` inside a
//!   transaction is read as `ofence` and the transaction's end as `dfence`
//!   (WHISPER: durability is needed only at commit); an `sfence` outside
//!   transactions is a `dfence`. Traces that use `ofence`/`dfence`
//!   themselves (programs on `pmlab.h`) are replayed as written: their
//!   `sfence`s are `dfence`s and transaction ends add nothing.
//! * `hops-adr`: the same, but the controller acknowledges an epoch's
//!   lines once they are in its write pending queue (HOPS's "PWQ"
//!   configuration: "the MC ACK may be sent ... earlier, if the MC request
//!   queues are automatically flushed on failures").
//! * `ideal`: no ordering and no durability: flushes and fences cost
//!   nothing; written lines still go to memory (bandwidth), without
//!   waiting.
//!
//! Loads of PM cost the memory system's read latency in every model.
//! Time is accounted per thread in [`Breakdown`]: compute gaps, PM loads,
//! durability waits at fences, stalls on a full persist buffer, and issue
//! costs.

use crate::{Error, ErrorKind, Request, System};
use pmlab_trace::{Op, Record, Space};
use std::collections::{HashMap, VecDeque};

/// A persistency model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Model {
    /// clwb + sfence, durable at the media.
    X86Nvm,
    /// clwb + sfence, durable at the controller's write pending queue.
    X86Adr,
    /// HOPS persist buffers with ofence/dfence; an epoch is acknowledged
    /// when it is on the media (HOPS's "NVM" configuration).
    Hops,
    /// HOPS persist buffers, an epoch acknowledged by the controller's
    /// persistent write queue (HOPS's "PWQ" configuration).
    HopsAdr,
    /// No ordering, no durability.
    Ideal,
}

impl Model {
    /// Every model, in the order reports list them.
    pub const ALL: [Model; 5] = [
        Model::X86Nvm,
        Model::X86Adr,
        Model::Hops,
        Model::HopsAdr,
        Model::Ideal,
    ];

    /// Names accepted by [`Model::from_name`].
    pub const NAMES: &'static str = "x86-nvm, x86-adr, hops, hops-adr, ideal";

    /// The model's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Model::X86Nvm => "x86-nvm",
            Model::X86Adr => "x86-adr",
            Model::Hops => "hops",
            Model::HopsAdr => "hops-adr",
            Model::Ideal => "ideal",
        }
    }

    /// Whether the model has HOPS's persist buffers (and so a drain
    /// threshold).
    pub fn is_hops(self) -> bool {
        matches!(self, Model::Hops | Model::HopsAdr)
    }

    /// Parse a model name.
    pub fn from_name(name: &str) -> Result<Model, Error> {
        Model::ALL
            .iter()
            .copied()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::UnknownName,
                    format!(
                        "unknown persistency model '{name}': valid ones are {}",
                        Model::NAMES
                    ),
                )
            })
    }
}

/// Which flushes invalidate the line they write back, under the x86
/// models (HOPS and `ideal` flush nothing: their caches keep PM lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushInvalidation {
    /// As the Intel SDM documents: `clflush` and `clflushopt` invalidate,
    /// `clwb` retains the line.
    Auto,
    /// Every flush invalidates, `clwb` too (the SDM lets hardware
    /// invalidate on `clwb`).
    All,
    /// No flush invalidates (lines stay cached whatever the instruction).
    Never,
}

impl FlushInvalidation {
    /// Names accepted by [`FlushInvalidation::from_name`].
    pub const NAMES: &'static str = "auto, all, none";

    /// The setting's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            FlushInvalidation::Auto => "auto",
            FlushInvalidation::All => "all",
            FlushInvalidation::Never => "none",
        }
    }

    /// Parse a setting name.
    pub fn from_name(name: &str) -> Result<FlushInvalidation, Error> {
        [
            FlushInvalidation::Auto,
            FlushInvalidation::All,
            FlushInvalidation::Never,
        ]
        .into_iter()
        .find(|f| f.name() == name)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownName,
                format!(
                    "unknown flush invalidation '{name}': valid ones are {}",
                    FlushInvalidation::NAMES
                ),
            )
        })
    }

    /// Whether flush `op` leaves its line out of the caches.
    pub fn invalidates(self, op: Op) -> bool {
        match self {
            FlushInvalidation::Auto => matches!(op, Op::Clflush | Op::ClflushOpt),
            FlushInvalidation::All => op.is_flush(),
            FlushInvalidation::Never => false,
        }
    }
}

/// Parameters of a replay.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The model.
    pub model: Model,
    /// Persist buffer entries per thread (HOPS: 32).
    pub pb_entries: usize,
    /// Occupancy at which the persist buffer starts draining (HOPS: 16).
    pub pb_drain_at: usize,
    /// Time from acceptance by the controller to durability on the media
    /// (see [`media_write_ns`]).
    pub media_write_ns: f64,
    /// Issue cost of a flush, a non-temporal store or a buffered store.
    pub issue_ns: f64,
    /// Count a flushed line that the thread did not store in the current
    /// epoch as stored (traces of unmodified PMDK programs, whose stores
    /// are seen only through their flushes).
    pub flushes_as_stores: bool,
    /// Which flushes invalidate their line (x86 models).
    pub flush_invalidates: FlushInvalidation,
    /// Most records read ahead while waiting for a lagging thread.
    pub lookahead: usize,
}

impl Config {
    /// HOPS's parameters for `model`, with the given media write time.
    pub fn new(model: Model, media_write_ns: f64) -> Config {
        Config {
            model,
            pb_entries: 32,
            pb_drain_at: 16,
            media_write_ns,
            issue_ns: 1.0,
            flushes_as_stores: false,
            flush_invalidates: FlushInvalidation::Auto,
            lookahead: 1 << 20,
        }
    }
}

/// Estimate the time from acceptance into the write pending queue to the
/// media on an idle `probe` system (built from the same configuration as
/// the one replayed on; it is used up).
pub fn media_write_ns(probe: &mut System) -> f64 {
    let c = probe.submit(&Request::new(0.0, Op::NtWrite, 0x4000_0000, 64));
    let accepted = c.persist_ns.unwrap_or(c.done_ns);
    (probe.drain(accepted) - accepted).max(0.0)
}

/// Where the simulated time of the threads went (sums over threads, ns).
#[derive(Debug, Clone, Copy, Default)]
pub struct Breakdown {
    /// Compute gaps taken from the trace.
    pub compute_ns: f64,
    /// Waiting for PM loads.
    pub read_ns: f64,
    /// Waiting at fences for durability (sfence, dfence).
    pub durability_ns: f64,
    /// Stalled on a full persist buffer (hops).
    pub buffer_full_ns: f64,
    /// Issue costs of flushes, stores and fences.
    pub issue_ns: f64,
    /// Part of `durability_ns` (not added to the total): how much longer
    /// fences waited because write-backs started only when their line's
    /// read for ownership was back (x86 models with invalidating flushes).
    pub rfo_wait_ns: f64,
}

impl Breakdown {
    /// The sum of the parts (`rfo_wait_ns` is inside `durability_ns`).
    pub fn total(&self) -> f64 {
        self.compute_ns + self.read_ns + self.durability_ns + self.buffer_full_ns + self.issue_ns
    }
}

/// The result of a replay.
#[derive(Debug, Clone)]
pub struct Report {
    /// The model replayed.
    pub model: Model,
    /// Simulated run time: from the first record to the last thread's end
    /// (ns).
    pub run_ns: f64,
    /// Where the threads' time went.
    pub breakdown: Breakdown,
    /// Records replayed.
    pub records: u64,
    /// Threads.
    pub threads: u64,
    /// Lines written to PM.
    pub lines_written: u64,
    /// Durability points (fences that waited for durability, dfences).
    pub durability_points: u64,
    /// Epochs (or parts of epochs) drained from persist buffers (hops).
    pub epochs_drained: u64,
    /// Cross-thread dependencies recorded on buffered stores (hops).
    pub cross_deps: u64,
    /// Drains that waited for another thread's epoch (hops).
    pub cross_waits: u64,
    /// Reads for ownership: stores to lines an invalidating flush had
    /// left out of the caches (x86 models).
    pub rfo_reads: u64,
    /// Their latencies, summed (issue to data back, ns).
    pub rfo_read_ns: f64,
    /// Write-backs that started late, waiting for their line's RFO.
    pub rfo_delayed_writebacks: u64,
    /// Which flushes invalidated their line.
    pub flush_invalidates: FlushInvalidation,
    /// Media write time used (ns).
    pub media_write_ns: f64,
}

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

#[derive(Default)]
struct Thread {
    id: u32,
    clk: f64,
    last_trace_ns: u64,
    started: bool,
    queue: VecDeque<Record>,
    /// x86: latest durability time of the writes since the last fence.
    pending_durable: f64,
    /// The same, had no write-back waited for an RFO (each write-back's
    /// durability time less its delay).
    pending_durable_no_rfo: f64,
    has_pending: bool,
    /// Lines stored since the last fence (for flush inference, and the
    /// write-combining of `ideal`).
    epoch_lines: Vec<u64>,
    tx_depth: u32,
    // hops
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
    b: Breakdown,
}

impl Thread {
    /// When the thread's next queued record happens on its simulated
    /// clock: the clock plus the compute gap before that record.
    fn next_start(&self) -> f64 {
        let r = self.queue.front().expect("a queued record");
        if self.started {
            self.clk + r.time_ns.saturating_sub(self.last_trace_ns) as f64
        } else {
            r.time_ns as f64
        }
    }

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

/// A replay in progress. Feed it a record stream with [`Replay::run`].
pub struct Replay {
    cfg: Config,
    sys: System,
    threads: Vec<Thread>,
    index: HashMap<u32, usize>,
    /// hops: the last writer of each line whose store may not be durable
    /// yet, (thread index, epoch of the store).
    owners: HashMap<u64, (usize, u64)>,
    /// Size of `owners` at which stale entries are swept.
    owners_sweep_at: usize,
    first_ns: Option<u64>,
    /// The trace uses ofence/dfence itself (a program written for HOPS):
    /// no translation of sfences and transaction ends.
    native_fences: bool,
    records: u64,
    lines_written: u64,
    durability_points: u64,
    epochs_drained: u64,
    cross_deps: u64,
    cross_waits: u64,
    /// x86: lines an invalidating flush left out of the caches, with when
    /// their data is back: infinite while no store has fetched them, the
    /// arrival of the read for ownership once one has (entries whose data
    /// is back before every thread's clock are swept).
    fetch: HashMap<u64, f64>,
    /// Size of `fetch` at which arrived entries are swept.
    fetch_sweep_at: usize,
    rfo_reads: u64,
    rfo_read_ns: f64,
    rfo_delayed_writebacks: u64,
}

/// Retired epochs whose acknowledgement a thread remembers.
const RETIRED_KEPT: usize = 64;

/// `owners` is swept of durable entries when it grows past this.
const OWNERS_SWEEP_MIN: usize = 1 << 16;

impl Replay {
    /// A replay of `cfg.model` on `sys`. The replay models the cache
    /// itself (stores stay in it until a flush, per model), so every write
    /// it submits is a memory write: `sys`'s cached-stores mode is turned
    /// off.
    pub fn new(mut sys: System, cfg: Config) -> Replay {
        sys.set_cached_stores(false);
        Replay {
            cfg,
            sys,
            threads: Vec::new(),
            index: HashMap::new(),
            owners: HashMap::new(),
            owners_sweep_at: OWNERS_SWEEP_MIN,
            first_ns: None,
            native_fences: false,
            records: 0,
            lines_written: 0,
            durability_points: 0,
            epochs_drained: 0,
            cross_deps: 0,
            cross_waits: 0,
            fetch: HashMap::new(),
            fetch_sweep_at: OWNERS_SWEEP_MIN,
            rfo_reads: 0,
            rfo_read_ns: 0.0,
            rfo_delayed_writebacks: 0,
        }
    }

    /// The memory system (for its statistics after the run).
    pub fn system(&self) -> &System {
        &self.sys
    }

    fn thread_of(&mut self, id: u32) -> usize {
        let n = self.threads.len();
        let i = *self.index.entry(id).or_insert(n);
        if i == n {
            self.threads.push(Thread {
                id,
                ..Thread::default()
            });
        }
        i
    }

    /// Replay every record of `records` and report. Memory stays bounded
    /// by the read-ahead limit ([`Config::lookahead`]).
    ///
    /// The thread whose next record comes first on the simulated clocks
    /// (its clock plus the compute gap before the record) goes next, so
    /// the memory system sees the threads' requests in time order; before
    /// it goes, every persist buffer drains in the background up to that
    /// time.
    pub fn run<I>(mut self, records: I) -> Result<(Report, System), pmlab_trace::Error>
    where
        I: IntoIterator<Item = Result<Record, pmlab_trace::Error>>,
    {
        let mut it = records.into_iter();
        let mut eof = false;
        let mut buffered = 0usize;
        loop {
            // Read until every known thread has a record queued (so the
            // one whose record comes first can go), or the limit, or EOF.
            while !eof
                && buffered < self.cfg.lookahead
                && (self.threads.is_empty() || self.threads.iter().any(|t| t.queue.is_empty()))
            {
                match it.next() {
                    None => eof = true,
                    Some(r) => {
                        let r = r?;
                        let ti = self.thread_of(r.thread);
                        self.threads[ti].queue.push_back(r);
                        buffered += 1;
                    }
                }
            }
            let next = self
                .threads
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.queue.is_empty())
                .map(|(i, t)| (i, t.next_start()))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((ti, at)) = next else { break };
            if self.cfg.model.is_hops() {
                for tj in 0..self.threads.len() {
                    self.advance_pb(tj, at);
                }
            }
            let r = self.threads[ti].queue.pop_front().expect("non-empty queue");
            buffered -= 1;
            self.step(ti, &r);
        }
        // Whatever is still buffered becomes durable at the end.
        for ti in 0..self.threads.len() {
            if self.cfg.model.is_hops() && !self.threads[ti].pb.is_empty() {
                let t = self.threads[ti].clk;
                self.drain_pb(ti, t);
            }
        }
        let first = self.first_ns.unwrap_or(0) as f64;
        let run_ns = self
            .threads
            .iter()
            .map(|t| t.clk - first)
            .fold(0.0, f64::max);
        let mut b = Breakdown::default();
        for t in &self.threads {
            b.compute_ns += t.b.compute_ns;
            b.read_ns += t.b.read_ns;
            b.durability_ns += t.b.durability_ns;
            b.buffer_full_ns += t.b.buffer_full_ns;
            b.issue_ns += t.b.issue_ns;
            b.rfo_wait_ns += t.b.rfo_wait_ns;
        }
        let report = Report {
            model: self.cfg.model,
            run_ns,
            breakdown: b,
            records: self.records,
            threads: self.threads.len() as u64,
            lines_written: self.lines_written,
            durability_points: self.durability_points,
            epochs_drained: self.epochs_drained,
            cross_deps: self.cross_deps,
            cross_waits: self.cross_waits,
            rfo_reads: self.rfo_reads,
            rfo_read_ns: self.rfo_read_ns,
            rfo_delayed_writebacks: self.rfo_delayed_writebacks,
            flush_invalidates: self.cfg.flush_invalidates,
            media_write_ns: self.cfg.media_write_ns,
        };
        Ok((report, self.sys))
    }

    /// Write `line` to the memory system at `t`; returns when it is durable
    /// under the model (controller acceptance, plus the media time for
    /// media durability).
    fn write_line(&mut self, th: u32, line: u64, t: f64, nt: bool, media: bool) -> f64 {
        self.lines_written += 1;
        let op = if nt { Op::NtWrite } else { Op::Write };
        let c = self
            .sys
            .submit(&Request::new(t, op, line * 64, 64).on_thread(th));
        let accepted = c.persist_ns.unwrap_or(c.done_ns);
        if media {
            accepted + self.cfg.media_write_ns
        } else {
            accepted
        }
    }

    fn step(&mut self, ti: usize, r: &Record) {
        self.records += 1;
        if self.first_ns.is_none_or(|f| r.time_ns < f) {
            self.first_ns = Some(r.time_ns);
        }
        {
            let t = &mut self.threads[ti];
            if !t.started {
                t.started = true;
                t.clk = r.time_ns as f64;
            } else {
                let gap = r.time_ns.saturating_sub(t.last_trace_ns) as f64;
                t.clk += gap;
                t.b.compute_ns += gap;
            }
            t.last_trace_ns = t.last_trace_ns.max(r.time_ns);
        }
        if r.space == Space::Dram {
            return;
        }
        let model = self.cfg.model;
        let th = self.threads[ti].id;
        match r.op {
            Op::Read => {
                let t0 = self.threads[ti].clk;
                let c = self
                    .sys
                    .submit(&Request::new(t0, Op::Read, r.addr, r.size).on_thread(th));
                // The load brings invalidated lines back into the cache.
                for line in lines(r.addr, r.size) {
                    if let Some(at) = self.fetch.get_mut(&line) {
                        *at = at.min(c.done_ns);
                    }
                }
                let t = &mut self.threads[ti];
                t.b.read_ns += c.done_ns - t0;
                t.clk = c.done_ns;
            }
            Op::Write | Op::NtWrite => {
                let nt = r.op == Op::NtWrite;
                for line in lines(r.addr, r.size) {
                    self.store(ti, line, nt);
                }
            }
            Op::Clwb | Op::ClflushOpt | Op::Clflush => {
                for line in lines(r.addr, r.size) {
                    let stored = self.threads[ti].epoch_lines.contains(&line);
                    if self.cfg.flushes_as_stores && !stored {
                        self.store(ti, line, false);
                    }
                    if matches!(model, Model::X86Nvm | Model::X86Adr) {
                        let t0 = self.threads[ti].clk;
                        // The write-back cannot start before the line's
                        // data is in the cache (an RFO still on its way).
                        let start = match self.fetch.get(&line) {
                            Some(&at) if at.is_finite() && at > t0 => {
                                self.rfo_delayed_writebacks += 1;
                                at
                            }
                            _ => t0,
                        };
                        let d = self.write_line(th, line, start, false, model == Model::X86Nvm);
                        if self.cfg.flush_invalidates.invalidates(r.op) {
                            self.fetch.insert(line, f64::INFINITY);
                        }
                        let t = &mut self.threads[ti];
                        t.pending_durable = t.pending_durable.max(d);
                        t.pending_durable_no_rfo = t.pending_durable_no_rfo.max(d - (start - t0));
                        t.has_pending = true;
                        t.clk += self.cfg.issue_ns;
                        t.b.issue_ns += self.cfg.issue_ns;
                    }
                }
            }
            Op::SFence | Op::OFence | Op::DFence => {
                if r.op != Op::SFence {
                    self.native_fences = true;
                }
                let durable = match (model.is_hops(), r.op) {
                    (true, Op::OFence) => false,
                    (true, Op::SFence) => self.native_fences || self.threads[ti].tx_depth == 0,
                    _ => true,
                };
                self.fence(ti, durable);
            }
            Op::TxBegin => self.threads[ti].tx_depth += 1,
            Op::TxEnd => {
                let t = &mut self.threads[ti];
                t.tx_depth = t.tx_depth.saturating_sub(1);
                if model.is_hops() && t.tx_depth == 0 && !self.native_fences {
                    self.fence(ti, true);
                }
            }
            Op::UserData | Op::Untraced => {}
        }
    }

    fn store(&mut self, ti: usize, line: u64, nt: bool) {
        let model = self.cfg.model;
        let th = self.threads[ti].id;
        let first_in_epoch = !self.threads[ti].epoch_lines.contains(&line);
        if first_in_epoch {
            self.threads[ti].epoch_lines.push(line);
        }
        match model {
            Model::X86Nvm | Model::X86Adr => {
                if nt {
                    let t0 = self.threads[ti].clk;
                    let d = self.write_line(th, line, t0, true, model == Model::X86Nvm);
                    let t = &mut self.threads[ti];
                    t.pending_durable = t.pending_durable.max(d);
                    t.pending_durable_no_rfo = t.pending_durable_no_rfo.max(d);
                    t.has_pending = true;
                    t.clk += self.cfg.issue_ns;
                    t.b.issue_ns += self.cfg.issue_ns;
                } else {
                    self.read_for_ownership(ti, line);
                }
            }
            Model::Ideal => {
                if first_in_epoch {
                    let t0 = self.threads[ti].clk;
                    self.write_line(th, line, t0, nt, false);
                }
            }
            Model::Hops | Model::HopsAdr => self.buffer_store(ti, line),
        }
    }

    /// x86: a cacheable store to a line that an invalidating flush left out
    /// of the caches reads it from memory first (the thread does not wait:
    /// the store waits in the store buffer); the line's next write-back
    /// waits for the data.
    fn read_for_ownership(&mut self, ti: usize, line: u64) {
        let Some(at) = self.fetch.get_mut(&line) else {
            return;
        };
        if at.is_finite() {
            // Cached again, or on its way by an earlier store's RFO.
            return;
        }
        let t0 = self.threads[ti].clk;
        let th = self.threads[ti].id;
        let c = self
            .sys
            .submit(&Request::new(t0, Op::Read, line * 64, 64).on_thread(th));
        self.fetch.insert(line, c.done_ns);
        self.rfo_reads += 1;
        self.rfo_read_ns += c.done_ns - t0;
        if self.fetch.len() >= self.fetch_sweep_at {
            self.sweep_fetch();
        }
    }

    /// Forget fetched lines whose data arrived before every thread's
    /// clock (no later write-back can wait for them).
    fn sweep_fetch(&mut self) {
        let now = self.earliest_clock();
        self.fetch.retain(|_, at| *at > now);
        self.fetch_sweep_at = (2 * self.fetch.len()).max(OWNERS_SWEEP_MIN);
    }

    /// HOPS: put a store into the thread's persist buffer. Every store
    /// takes an entry (HOPS Table 2; coalescing stores is left to future
    /// work there).
    fn buffer_store(&mut self, ti: usize, line: u64) {
        let now = self.threads[ti].clk;
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
                self.cross_deps += 1;
            }
        }
        self.advance_pb(ti, now);
        // A full buffer stalls the store until an entry frees.
        while self.occupancy(ti) >= self.cfg.pb_entries {
            let t = &mut self.threads[ti];
            if !t.draining {
                t.draining = true;
                t.drain_since = t.clk;
            }
            let free_at = match t.inflight.front() {
                Some(i) => i.ack,
                None => self.batch_start(ti, f64::NEG_INFINITY),
            };
            let t = &mut self.threads[ti];
            let wait = (free_at - t.clk).max(0.0);
            t.clk += wait;
            t.b.buffer_full_ns += wait;
            let now = t.clk;
            let before = (t.pb.len(), t.inflight.len());
            self.advance_pb(ti, now);
            let t = &self.threads[ti];
            if wait == 0.0 && before == (t.pb.len(), t.inflight.len()) {
                // No progress possible by waiting: launch the oldest epoch.
                self.launch_batch(ti, now);
            }
        }
        let t = &mut self.threads[ti];
        let epoch = t.epoch;
        t.pb.push_back(PbEntry {
            line,
            epoch,
            at: t.clk,
            dep,
        });
        t.clk += self.cfg.issue_ns;
        t.b.issue_ns += self.cfg.issue_ns;
        self.owners.insert(line, (ti, epoch));
        if !self.threads[ti].draining && self.occupancy(ti) >= self.cfg.pb_drain_at {
            let t = &mut self.threads[ti];
            t.draining = true;
            t.drain_since = t.clk;
        }
        if self.owners.len() >= self.owners_sweep_at {
            self.sweep_owners();
        }
    }

    /// Forget line owners whose stores are durable before every thread's
    /// clock (no later store can depend on them).
    /// The clock of the thread furthest behind.
    fn earliest_clock(&self) -> f64 {
        self.threads
            .iter()
            .map(|t| t.clk)
            .fold(f64::INFINITY, f64::min)
    }

    fn sweep_owners(&mut self) {
        let now = self.earliest_clock();
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
    fn advance_pb(&mut self, ti: usize, now: f64) {
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
            self.launch_batch(ti, start);
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
    fn launch_batch(&mut self, ti: usize, start: f64) {
        let Some(epoch) = self.threads[ti].pb.front().map(|e| e.epoch) else {
            return;
        };
        let mut s = self.batch_start(ti, start);
        let th = self.threads[ti].id;
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
            let done = self.durable_time(src, src_epoch, s);
            if done > s {
                self.cross_waits += 1;
                s = done;
            }
        }
        let media = self.cfg.model == Model::Hops;
        let mut last = s;
        for line in batch {
            let ack = self.write_line(th, line, s, false, media);
            last = last.max(ack);
            let t = &mut self.threads[ti];
            let pos = t.inflight.partition_point(|i| i.ack <= ack);
            t.inflight.insert(pos, Inflight { ack, epoch });
        }
        self.epochs_drained += 1;
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
    fn durable_time(&mut self, src: usize, epoch: u64, from: f64) -> f64 {
        while self.threads[src]
            .pb
            .front()
            .is_some_and(|e| e.epoch <= epoch)
        {
            self.launch_batch(src, from);
        }
        self.threads[src].ack_bound(epoch)
    }

    /// Drain the whole persist buffer from `now`; returns when it is
    /// acknowledged.
    fn drain_pb(&mut self, ti: usize, now: f64) -> f64 {
        while !self.threads[ti].pb.is_empty() {
            self.launch_batch(ti, now);
        }
        let t = &self.threads[ti];
        t.inflight.iter().map(|i| i.ack).fold(now, f64::max)
    }

    fn fence(&mut self, ti: usize, durable: bool) {
        let model = self.cfg.model;
        let issue = self.cfg.issue_ns;
        {
            let t = &mut self.threads[ti];
            t.epoch_lines.clear();
        }
        match model {
            Model::Ideal => {}
            Model::X86Nvm | Model::X86Adr => {
                let t = &mut self.threads[ti];
                if t.has_pending {
                    self.durability_points += 1;
                    let wait = (t.pending_durable - t.clk).max(0.0);
                    let no_rfo = (t.pending_durable_no_rfo - t.clk).max(0.0).min(wait);
                    t.clk += wait;
                    t.b.durability_ns += wait;
                    t.b.rfo_wait_ns += wait - no_rfo;
                    t.has_pending = false;
                    t.pending_durable = f64::NEG_INFINITY;
                    t.pending_durable_no_rfo = f64::NEG_INFINITY;
                }
                t.clk += issue;
                t.b.issue_ns += issue;
            }
            Model::Hops | Model::HopsAdr => {
                // Every fence ends the epoch.
                let t = &mut self.threads[ti];
                t.epoch += 1;
                t.clk += issue;
                t.b.issue_ns += issue;
                let now = t.clk;
                // What drained in the background up to now.
                self.advance_pb(ti, now);
                if durable {
                    self.durability_points += 1;
                    let done = self.drain_pb(ti, now);
                    let t = &mut self.threads[ti];
                    let wait = (done - t.clk).max(0.0);
                    t.clk += wait;
                    t.b.durability_ns += wait;
                    while let Some(i) = t.inflight.pop_front() {
                        t.retire(i);
                    }
                    t.draining = false;
                }
            }
        }
    }
}

/// The lines a record covers, at most 2^18 (16 MiB, as the analysis).
fn lines(addr: u64, size: u32) -> impl Iterator<Item = u64> {
    let first = addr / 64;
    let last = addr.saturating_add((size as u64).max(1) - 1) / 64;
    first..=last.min(first + (1 << 18) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PMDK-like transactions: per epoch, `compute` ns of work, then a
    /// store, its clwb and an sfence in quick succession; 6 epochs (9
    /// lines) per transaction.
    fn trace(threads: u32, txs: u64, compute: u64) -> Vec<Record> {
        let mut v = Vec::new();
        let mut time = vec![0u64; threads as usize];
        for i in 0..txs {
            for th in 0..threads {
                let t = &mut time[th as usize];
                let mut push = |gap, op, addr, size| {
                    *t += gap;
                    v.push(Record::new(*t, th, op, addr, size));
                };
                push(compute, Op::TxBegin, i, 0);
                for e in 0..6u64 {
                    let base = 0x10_0000 * (th as u64 + 1) + ((i * 6 + e) % 512) * 128;
                    push(compute, Op::Write, base, 8);
                    push(2, Op::Clwb, base, 64);
                    if e % 2 == 0 {
                        push(2, Op::Write, base + 64, 8);
                        push(2, Op::Clwb, base + 64, 64);
                    }
                    push(2, Op::SFence, 0, 0);
                }
                push(2, Op::TxEnd, i, 0);
            }
        }
        v.sort_by_key(|r| r.time_ns);
        v
    }

    fn run_cfg(cfg: impl Fn(f64) -> Config, recs: &[Record]) -> Report {
        let sys = System::preset("optane-1dimm").unwrap();
        let mut probe = System::preset("optane-1dimm").unwrap();
        Replay::new(sys, cfg(media_write_ns(&mut probe)))
            .run(recs.iter().copied().map(Ok))
            .unwrap()
            .0
    }

    fn run(model: Model, recs: &[Record]) -> Report {
        run_cfg(|m| Config::new(model, m), recs)
    }

    #[test]
    fn models_order_as_in_hops() {
        let recs = trace(2, 300, 500);
        let nvm = run(Model::X86Nvm, &recs);
        let adr = run(Model::X86Adr, &recs);
        let ideal = run(Model::Ideal, &recs);
        // HOPS with the buffer draining in the background as soon as it
        // holds anything: flushes leave the critical path.
        let hops = run_cfg(
            |m| Config {
                pb_drain_at: 1,
                ..Config::new(Model::Hops, m)
            },
            &recs,
        );
        assert!(
            nvm.run_ns > adr.run_ns,
            "nvm {} adr {}",
            nvm.run_ns,
            adr.run_ns
        );
        assert!(
            nvm.run_ns > hops.run_ns,
            "nvm {} hops {}",
            nvm.run_ns,
            hops.run_ns
        );
        assert!(
            hops.run_ns >= ideal.run_ns,
            "hops {} ideal {}",
            hops.run_ns,
            ideal.run_ns
        );
        assert!(
            adr.run_ns >= ideal.run_ns,
            "adr {} ideal {}",
            adr.run_ns,
            ideal.run_ns
        );
        // Compute alone is a lower bound for every model.
        assert!(ideal.breakdown.compute_ns > 0.0);
        assert!(ideal.run_ns * 2.0 >= ideal.breakdown.compute_ns * 0.99);
        assert!(nvm.breakdown.durability_ns > adr.breakdown.durability_ns);
        assert!(hops.breakdown.durability_ns < nvm.breakdown.durability_ns);
        assert_eq!(nvm.threads, 2);
        assert!(hops.epochs_drained > 0);
    }

    #[test]
    fn hops_with_late_draining_pays_its_epochs_at_commit() {
        // With draining from 16 entries and 9 lines per transaction, the
        // buffer drains only at the commit's dfence, epoch after epoch.
        let recs = trace(1, 100, 500);
        let hops = run(Model::Hops, &recs);
        assert_eq!(hops.durability_points, 100);
        assert_eq!(hops.epochs_drained, 600);
        assert!(hops.breakdown.durability_ns > 0.0);
    }

    #[test]
    fn hops_dfence_waits_for_the_buffer_and_ofence_does_not() {
        let mk = |fence| {
            vec![
                Record::new(0, 0, Op::Write, 0x1000, 8),
                Record::new(10, 0, fence, 0, 0),
                Record::new(20, 0, Op::Write, 0x2000, 8),
            ]
        };
        let o = run(Model::Hops, &mk(Op::OFence));
        let d = run(Model::Hops, &mk(Op::DFence));
        assert_eq!(o.breakdown.durability_ns, 0.0);
        assert!(d.breakdown.durability_ns > 0.0);
        assert!(d.durability_points == 1 && o.durability_points == 0);
    }

    #[test]
    fn unknown_model_names_the_valid_ones() {
        let e = Model::from_name("tso").unwrap_err().to_string();
        assert!(e.contains("x86-nvm, x86-adr, hops, hops-adr, ideal"), "{e}");
        assert_eq!(Model::from_name("hops").unwrap(), Model::Hops);
        assert_eq!(Model::from_name("hops-adr").unwrap(), Model::HopsAdr);
        assert!(Model::HopsAdr.is_hops() && !Model::X86Adr.is_hops());
    }

    fn hops_at(drain_at: usize) -> impl Fn(f64) -> Config {
        move |m| Config {
            pb_drain_at: drain_at,
            ..Config::new(Model::Hops, m)
        }
    }

    fn rec(t: u64, th: u32, op: Op, addr: u64) -> Record {
        let size = if matches!(op, Op::Write | Op::NtWrite | Op::Clwb) {
            8
        } else {
            0
        };
        Record::new(t, th, op, addr, size)
    }

    #[test]
    fn requests_reach_memory_in_the_time_order_of_the_threads_next_records() {
        // Thread 1 computes for 1 ms before its second record; thread 0
        // fences every microsecond meanwhile. Thread 1's write belongs at
        // 1 ms: replayed first, it would sit at the head of the controller's
        // queue and hold thread 0's writes back until then.
        let mut v = vec![rec(0, 1, Op::Write, 0x9000)];
        v.push(rec(1_000_000, 1, Op::NtWrite, 0x9040));
        v.push(rec(1_000_010, 1, Op::SFence, 0));
        for i in 0..1000u64 {
            let t = 1 + i * 1000;
            v.push(rec(t, 0, Op::Write, 0x10_0000 + (i % 64) * 64));
            v.push(rec(t + 2, 0, Op::Clwb, 0x10_0000 + (i % 64) * 64));
            v.push(rec(t + 4, 0, Op::SFence, 0));
        }
        v.sort_by_key(|r| r.time_ns);
        let adr = run(Model::X86Adr, &v);
        assert_eq!(adr.durability_points, 1001);
        // Each fence waits for one write to reach the controller (~60 ns),
        // never for the 1 ms write.
        assert!(
            adr.breakdown.durability_ns < 1001.0 * 200.0,
            "{:?}",
            adr.breakdown
        );
    }

    #[test]
    fn hops_epochs_drain_in_order_and_an_epochs_lines_together() {
        // Three lines in three epochs, then a dfence: three round trips.
        // The same three lines in one epoch: one round trip.
        let apart = [0x1000, 0x2000, 0x3000]
            .iter()
            .enumerate()
            .flat_map(|(i, &a)| {
                let t = i as u64 * 10;
                [rec(t, 0, Op::Write, a), rec(t + 5, 0, Op::OFence, 0)]
            })
            .chain([rec(40, 0, Op::DFence, 0)])
            .collect::<Vec<_>>();
        let together = vec![
            rec(0, 0, Op::Write, 0x1000),
            rec(10, 0, Op::Write, 0x2000),
            rec(20, 0, Op::Write, 0x3000),
            rec(40, 0, Op::DFence, 0),
        ];
        let a = run(Model::Hops, &apart);
        let t = run(Model::Hops, &together);
        assert_eq!((a.epochs_drained, t.epochs_drained), (3, 1));
        let one_trip = t.breakdown.durability_ns;
        assert!(one_trip > a.media_write_ns, "{one_trip}");
        assert!(a.breakdown.durability_ns > 2.5 * one_trip, "{a:?}");
    }

    #[test]
    fn hops_buffer_drains_in_the_background_from_16_entries() {
        // n stores in one epoch, 100 us of compute, then a dfence: from 16
        // entries the buffer drained meanwhile, below it waits for the
        // dfence.
        let mk = |n: u64, same_line: bool| {
            let mut v: Vec<Record> = (0..n)
                .map(|i| {
                    let a = if same_line { 0x1000 } else { 0x1000 + i * 64 };
                    rec(i * 10, 0, Op::Write, a)
                })
                .collect();
            v.push(rec(100_000, 0, Op::DFence, 0));
            v
        };
        let below = run(Model::Hops, &mk(15, false));
        let at = run(Model::Hops, &mk(16, false));
        assert!(below.breakdown.durability_ns > 0.0, "{below:?}");
        assert_eq!(at.breakdown.durability_ns, 0.0, "{at:?}");
        // Every store takes an entry, also to a line already buffered in
        // the epoch (HOPS Table 2: no coalescing).
        let same = run(Model::Hops, &mk(16, true));
        assert_eq!(same.breakdown.durability_ns, 0.0, "{same:?}");
        assert_eq!(same.lines_written, 16);
    }

    #[test]
    fn hops_epoch_drains_no_earlier_than_its_stores() {
        // Draining from the first entry, the second epoch's line is stored
        // 100 us after the first epoch was acknowledged: it cannot be on
        // the media before then, so the dfence right after it waits.
        let v = vec![
            rec(0, 0, Op::Write, 0x1000),
            rec(10, 0, Op::OFence, 0),
            rec(100_000, 0, Op::Write, 0x2000),
            rec(100_010, 0, Op::OFence, 0),
            rec(100_020, 0, Op::DFence, 0),
        ];
        let r = run_cfg(hops_at(1), &v);
        assert!(
            r.breakdown.durability_ns > r.media_write_ns,
            "{:?}",
            r.breakdown
        );
    }

    #[test]
    fn hops_dfence_keeps_what_drained_in_the_background() {
        // Three epochs drain one after the other from the first entry
        // during 10 us of compute: the dfence finds them acknowledged.
        let mut v = Vec::new();
        for (i, a) in [0x1000u64, 0x2000, 0x3000].iter().enumerate() {
            let t = i as u64 * 20;
            v.push(rec(t, 0, Op::Write, *a));
            v.push(rec(t + 10, 0, Op::OFence, 0));
        }
        v.push(rec(10_000, 0, Op::DFence, 0));
        let r = run_cfg(hops_at(1), &v);
        assert_eq!(r.breakdown.durability_ns, 0.0, "{:?}", r.breakdown);
        assert_eq!(r.epochs_drained, 3);
    }

    #[test]
    fn hops_cross_thread_dependency_orders_the_dependent_epoch_after_its_source() {
        // Thread 0 stores a line and keeps it buffered; thread 1 stores
        // the same line and commits: its dfence waits for thread 0's epoch
        // (forced out) and then for its own. (Thread 0's buffer drains at
        // the end of the run, which no fence waits for.)
        let mk = |line1: u64| {
            vec![
                rec(0, 0, Op::Write, 0x1000),
                rec(100, 1, Op::Write, line1),
                rec(200, 1, Op::DFence, 0),
            ]
        };
        let dep = run(Model::Hops, &mk(0x1000));
        let free = run(Model::Hops, &mk(0x2000));
        assert_eq!((dep.cross_deps, dep.cross_waits), (1, 1));
        assert_eq!((free.cross_deps, free.cross_waits), (0, 0));
        assert!(
            dep.breakdown.durability_ns > 1.5 * free.breakdown.durability_ns,
            "dep {:?} free {:?}",
            dep.breakdown,
            free.breakdown
        );
    }

    #[test]
    fn hops_dependency_points_from_the_later_store_to_the_earlier() {
        // Thread 1 stores first, thread 0 second: thread 1's commit does
        // not wait for thread 0 (whose epoch depends on thread 1's).
        let v = vec![
            rec(0, 1, Op::Write, 0x1000),
            rec(100, 0, Op::Write, 0x1000),
            rec(200, 1, Op::DFence, 0),
            rec(300_000, 0, Op::DFence, 0),
        ];
        let r = run(Model::Hops, &v);
        assert_eq!((r.cross_deps, r.cross_waits), (1, 0));
    }

    #[test]
    fn hops_dependency_splits_the_source_epoch() {
        // After thread 1 depends on thread 0's open epoch, thread 0's next
        // store belongs to a new epoch: thread 1's commit forces out only
        // the store it depends on, thread 0's own commit drains the other.
        let v = vec![
            rec(0, 0, Op::Write, 0x1000),
            rec(100, 1, Op::Write, 0x1000),
            rec(150, 0, Op::Write, 0x2000),
            rec(200, 1, Op::DFence, 0),
            rec(300_000, 0, Op::DFence, 0),
        ];
        let r = run(Model::Hops, &v);
        assert_eq!(r.cross_deps, 1);
        assert_eq!(r.epochs_drained, 3);
    }

    fn with_inval(model: Model, f: FlushInvalidation) -> impl Fn(f64) -> Config {
        move |m| Config {
            flush_invalidates: f,
            ..Config::new(model, m)
        }
    }

    /// A store, `flush` and an sfence; 100 us later the same line again
    /// (its write-back long gone from the controller's queue), stored by
    /// `second`, flushed with `clwb`, fenced.
    fn store_twice(flush: Op, second: Op) -> Vec<Record> {
        vec![
            rec(0, 0, Op::Write, 0x1000),
            rec(10, 0, flush, 0x1000),
            rec(20, 0, Op::SFence, 0),
            rec(100_000, 0, second, 0x1000),
            rec(100_010, 0, Op::Clwb, 0x1000),
            rec(100_020, 0, Op::SFence, 0),
        ]
    }

    #[test]
    fn store_after_clflushopt_makes_the_next_fence_wait_for_a_pm_read() {
        let v = store_twice(Op::ClflushOpt, Op::Write);
        for model in [Model::X86Nvm, Model::X86Adr] {
            let none = run_cfg(with_inval(model, FlushInvalidation::Never), &v);
            let auto = run_cfg(with_inval(model, FlushInvalidation::Auto), &v);
            assert_eq!((none.rfo_reads, auto.rfo_reads), (0, 1), "{model:?}");
            assert_eq!(none.breakdown.rfo_wait_ns, 0.0);
            assert!(auto.rfo_read_ns > 0.0 && auto.rfo_delayed_writebacks == 1);
            // The second fence waits for the read and then the write-back:
            // longer than without the read, by the part of the read that
            // came after the clwb (the store was 10 ns before it).
            let extra = auto.breakdown.durability_ns - none.breakdown.durability_ns;
            assert!(extra > 0.0, "{model:?} auto {auto:?} none {none:?}");
            assert!(auto.breakdown.rfo_wait_ns > 0.0);
            assert!(auto.breakdown.rfo_wait_ns <= auto.breakdown.durability_ns);
            assert!(
                auto.breakdown.rfo_wait_ns <= auto.rfo_read_ns,
                "{:?} {}",
                auto.breakdown,
                auto.rfo_read_ns
            );
            assert!(auto.run_ns > none.run_ns);
            // The write-backs are the same: only when they start differs.
            assert_eq!(auto.lines_written, none.lines_written);
        }
    }

    #[test]
    fn clwb_retains_the_line_under_auto_and_invalidates_under_all() {
        let v = store_twice(Op::Clwb, Op::Write);
        let auto = run_cfg(with_inval(Model::X86Nvm, FlushInvalidation::Auto), &v);
        let all = run_cfg(with_inval(Model::X86Nvm, FlushInvalidation::All), &v);
        let none = run_cfg(with_inval(Model::X86Nvm, FlushInvalidation::Never), &v);
        assert_eq!((auto.rfo_reads, all.rfo_reads), (0, 1));
        assert_eq!(auto.run_ns, none.run_ns);
        assert!(all.breakdown.durability_ns > auto.breakdown.durability_ns);
        assert!(all.breakdown.rfo_wait_ns > 0.0);
        // clflush invalidates under auto, like clflushopt.
        let v = store_twice(Op::Clflush, Op::Write);
        let r = run_cfg(with_inval(Model::X86Adr, FlushInvalidation::Auto), &v);
        assert_eq!(r.rfo_reads, 1);
    }

    #[test]
    fn nt_store_to_an_invalidated_line_needs_no_read() {
        let mut v = store_twice(Op::ClflushOpt, Op::NtWrite);
        let r = run_cfg(with_inval(Model::X86Nvm, FlushInvalidation::All), &v);
        assert_eq!((r.rfo_reads, r.breakdown.rfo_wait_ns), (0, 0.0));
        // The non-temporal store did not bring the line back: a later
        // cacheable store still reads it.
        v.push(rec(200_000, 0, Op::Write, 0x1000));
        v.push(rec(200_010, 0, Op::Clwb, 0x1000));
        v.push(rec(200_020, 0, Op::SFence, 0));
        let r = run_cfg(with_inval(Model::X86Nvm, FlushInvalidation::All), &v);
        assert_eq!(r.rfo_reads, 1);
    }

    #[test]
    fn a_flush_invalidates_the_line_for_every_thread_and_one_read_serves_stores_in_flight() {
        // Thread 0 flushes the line out; thread 1 stores to it twice in
        // quick succession (one read), and its write-back waits for it.
        let v = vec![
            rec(0, 0, Op::Write, 0x1000),
            rec(10, 0, Op::ClflushOpt, 0x1000),
            rec(20, 0, Op::SFence, 0),
            rec(100_000, 1, Op::Write, 0x1000),
            rec(100_002, 1, Op::Write, 0x1008),
            rec(100_004, 1, Op::Clwb, 0x1000),
            rec(100_010, 1, Op::SFence, 0),
            // Long after the read: the line is cached, no read.
            rec(200_000, 1, Op::Write, 0x1000),
            rec(200_004, 1, Op::Clwb, 0x1000),
            rec(200_010, 1, Op::SFence, 0),
        ];
        let r = run_cfg(with_inval(Model::X86Adr, FlushInvalidation::Auto), &v);
        assert_eq!((r.rfo_reads, r.rfo_delayed_writebacks), (1, 1));
        assert!(r.breakdown.rfo_wait_ns > 0.0, "{:?}", r.breakdown);
    }

    #[test]
    fn hops_and_ideal_ignore_flush_invalidation() {
        // Stores, clflushopts and fences of a PMDK-like trace: HOPS keeps
        // PM lines in its caches, ideal has no flushes.
        let mut v = trace(2, 200, 500);
        for r in &mut v {
            if r.op == Op::Clwb {
                r.op = Op::ClflushOpt;
            }
        }
        for model in [Model::Hops, Model::HopsAdr, Model::Ideal] {
            let none = run_cfg(with_inval(model, FlushInvalidation::Never), &v);
            let all = run_cfg(with_inval(model, FlushInvalidation::All), &v);
            assert_eq!(all.rfo_reads, 0, "{model:?}");
            assert_eq!(all.run_ns, none.run_ns, "{model:?}");
            assert_eq!(all.breakdown.durability_ns, none.breakdown.durability_ns);
        }
        // The x86 models pay: the trace reuses its lines (512 per thread).
        let none = run_cfg(with_inval(Model::X86Nvm, FlushInvalidation::Never), &v);
        let auto = run_cfg(with_inval(Model::X86Nvm, FlushInvalidation::Auto), &v);
        assert!(auto.rfo_reads > 0);
        assert!(auto.run_ns > none.run_ns);
    }

    #[test]
    fn flush_invalidation_names() {
        assert_eq!(
            FlushInvalidation::from_name("all").unwrap(),
            FlushInvalidation::All
        );
        assert_eq!(FlushInvalidation::Never.name(), "none");
        let e = FlushInvalidation::from_name("some")
            .unwrap_err()
            .to_string();
        assert!(e.contains("auto, all, none"), "{e}");
        assert!(FlushInvalidation::Auto.invalidates(Op::ClflushOpt));
        assert!(!FlushInvalidation::Auto.invalidates(Op::Clwb));
        assert!(FlushInvalidation::All.invalidates(Op::Clwb));
        assert!(!FlushInvalidation::All.invalidates(Op::Write));
        assert!(!FlushInvalidation::Never.invalidates(Op::Clflush));
        assert_eq!(
            Config::new(Model::X86Nvm, 0.0).flush_invalidates,
            FlushInvalidation::Auto
        );
    }

    #[test]
    fn hops_adr_acknowledges_epochs_at_the_controller() {
        // Three epochs and a dfence: HOPS waits for each epoch on the
        // media, HOPS with a persistent write queue only for its
        // acceptance; the epochs still go one after the other.
        let mut v = Vec::new();
        for (i, a) in [0x1000u64, 0x2000, 0x3000].iter().enumerate() {
            let t = i as u64 * 10;
            v.push(rec(t, 0, Op::Write, *a));
            v.push(rec(t + 5, 0, Op::OFence, 0));
        }
        v.push(rec(40, 0, Op::DFence, 0));
        let nvm = run(Model::Hops, &v);
        let adr = run(Model::HopsAdr, &v);
        assert_eq!((nvm.epochs_drained, adr.epochs_drained), (3, 3));
        assert!(adr.breakdown.durability_ns > 0.0);
        assert!(
            adr.breakdown.durability_ns + 2.5 * nvm.media_write_ns < nvm.breakdown.durability_ns,
            "adr {:?} nvm {:?}",
            adr.breakdown,
            nvm.breakdown
        );
    }
}
