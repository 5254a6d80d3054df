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
//! Models: each one implementation of the [`Persistency`] trait, in its own
//! file of this folder, built by name from the registry table
//! ([`crate::registry::PERSISTENCY`]; [`Model::from_name`] lists the valid
//! names for an unknown one). The replay engine ([`Replay`]) owns what is
//! common (thread clocks, the interleaving of threads, loads, compute gaps,
//! transactions, flush inference) and asks the model what stores, flushes,
//! fences and transaction ends cost. Shared machinery lives beside them:
//! `x86.rs` (write-backs, fences, reads for ownership) and
//! `persist_buffer.rs` (HOPS's persist buffers).
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

use crate::registry::{self, PersistencyEntry};
use crate::{Error, ErrorKind, Request, System};
use pmlab_trace::{Op, Record, Space};
use std::collections::{HashMap, VecDeque};

mod hops;
mod ideal;
mod persist_buffer;
mod x86;
mod x86_adr;
mod x86_nvm;

pub(crate) use hops::Hops;
pub(crate) use ideal::Ideal;
pub(crate) use x86_adr::X86Adr;
pub(crate) use x86_nvm::X86Nvm;

/// A persistency model: what a thread's stores, flushes, fences and
/// transaction ends cost it, and when its writes become durable.
///
/// Contract: the [`Replay`] engine calls the model for one thread (index
/// `ti` into [`Core`]'s threads) at a time, in the order of the threads'
/// simulated clocks; the thread's clock is already at the record's time.
/// A model advances that thread's clock by what the operation makes it
/// wait, adds the wait to the thread's [`Breakdown`], submits the writes it
/// makes to the memory system through [`Core::write_line`], and counts
/// durability points and its own events in [`Core`]. Loads, compute gaps,
/// DRAM records, transaction depth and the lines stored in the current
/// epoch are the engine's. Methods with a default do nothing.
pub trait Persistency {
    /// A thread was added (its index is the number of threads before it).
    fn add_thread(&mut self) {}
    /// A load brought `line`'s data into the cache at `at`.
    fn loaded(&mut self, _line: u64, _at: f64) {}
    /// Thread `ti` stores `line` (`nt`: a non-temporal store);
    /// `first_in_epoch` is false when the thread stored the line before
    /// since its last fence.
    fn store(&mut self, cx: &mut Core, ti: usize, line: u64, nt: bool, first_in_epoch: bool);
    /// Thread `ti` flushes `line` with `op` (`clwb`, `clflushopt` or
    /// `clflush`), after any store inferred from it.
    fn flush(&mut self, _cx: &mut Core, _ti: usize, _line: u64, _op: Op) {}
    /// Thread `ti` executes fence `op` (`sfence`, `ofence` or `dfence`);
    /// the engine has cleared the thread's epoch lines.
    fn fence(&mut self, cx: &mut Core, ti: usize, op: Op);
    /// Thread `ti` ended a transaction (its depth is already lowered).
    fn tx_end(&mut self, _cx: &mut Core, _ti: usize) {}
    /// Background work of every thread up to time `at`, before the next
    /// record (which starts at `at`) is replayed.
    fn advance(&mut self, _cx: &mut Core, _at: f64) {}
    /// The trace ended: make whatever is still buffered durable.
    fn finish(&mut self, _cx: &mut Core) {}
}

/// A persistency model's registry entry, by name: a small copyable handle
/// ([`Model::from_name`], [`Model::all`]).
#[derive(Clone, Copy)]
pub struct Model(&'static PersistencyEntry);

impl Model {
    /// Every registered model, in the registry's order (the order reports
    /// list them).
    pub fn all() -> impl Iterator<Item = Model> {
        registry::PERSISTENCY.iter().map(Model)
    }

    /// The registered names, comma-separated (for messages).
    pub fn names() -> String {
        let v: Vec<&str> = Model::all().map(Model::name).collect();
        v.join(", ")
    }

    /// The model's command-line name.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// One line about the model.
    pub fn about(self) -> &'static str {
        self.0.about
    }

    /// Whether the model has HOPS's persist buffers (and so a drain
    /// threshold).
    pub fn is_hops(self) -> bool {
        self.0.buffered
    }

    /// Find a model by name; an unknown name is an error listing the valid
    /// ones.
    pub fn from_name(name: &str) -> Result<Model, Error> {
        Model::all().find(|m| m.name() == name).ok_or_else(|| {
            Error::new(
                ErrorKind::UnknownName,
                format!(
                    "unknown persistency model '{name}': valid ones are {}",
                    Model::names()
                ),
            )
        })
    }

    fn build(self, cfg: &Config) -> Box<dyn Persistency> {
        (self.0.build)(cfg)
    }
}

impl PartialEq for Model {
    fn eq(&self, other: &Model) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Model {}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Model({})", self.name())
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

/// The state of one thread of the trace that every model shares.
#[derive(Default)]
pub(crate) struct Thread {
    pub(crate) id: u32,
    pub(crate) clk: f64,
    last_trace_ns: u64,
    started: bool,
    queue: VecDeque<Record>,
    /// Lines stored since the last fence (for flush inference, and the
    /// write-combining of `ideal`).
    epoch_lines: Vec<u64>,
    pub(crate) tx_depth: u32,
    pub(crate) b: Breakdown,
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
}

/// Event counts of a replay (see [`Report`]).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) lines_written: u64,
    pub(crate) durability_points: u64,
    pub(crate) epochs_drained: u64,
    pub(crate) cross_deps: u64,
    pub(crate) cross_waits: u64,
    pub(crate) rfo_reads: u64,
    pub(crate) rfo_read_ns: f64,
    pub(crate) rfo_delayed_writebacks: u64,
}

/// What a [`Persistency`] model works on: the replay's parameters, the
/// memory system, the threads' clocks and time accounts, and the event
/// counts.
pub struct Core {
    pub(crate) cfg: Config,
    pub(crate) sys: System,
    pub(crate) threads: Vec<Thread>,
    /// The trace uses ofence/dfence itself (a program written for HOPS):
    /// no translation of sfences and transaction ends.
    pub(crate) native_fences: bool,
    pub(crate) n: Counters,
}

impl Core {
    /// Write `line` to the memory system at `t` for thread `th`; returns
    /// when it is durable (controller acceptance, plus the media write
    /// time when `media`).
    pub fn write_line(&mut self, th: u32, line: u64, t: f64, nt: bool, media: bool) -> f64 {
        self.n.lines_written += 1;
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

    /// The clock of the thread furthest behind.
    pub fn earliest_clock(&self) -> f64 {
        self.threads
            .iter()
            .map(|t| t.clk)
            .fold(f64::INFINITY, f64::min)
    }

    /// Charge thread `ti` the issue cost of one operation.
    pub(crate) fn issue(&mut self, ti: usize) {
        let issue = self.cfg.issue_ns;
        let t = &mut self.threads[ti];
        t.clk += issue;
        t.b.issue_ns += issue;
    }
}

/// A replay in progress. Feed it a record stream with [`Replay::run`].
pub struct Replay {
    cx: Core,
    model: Box<dyn Persistency>,
    index: HashMap<u32, usize>,
    first_ns: Option<u64>,
    records: u64,
}

impl Replay {
    /// A replay of `cfg.model` on `sys`. The replay models the cache
    /// itself (stores stay in it until a flush, per model), so every write
    /// it submits is a memory write: `sys`'s cached-stores mode is turned
    /// off.
    pub fn new(mut sys: System, cfg: Config) -> Replay {
        sys.set_cached_stores(false);
        Replay {
            model: cfg.model.build(&cfg),
            cx: Core {
                cfg,
                sys,
                threads: Vec::new(),
                native_fences: false,
                n: Counters::default(),
            },
            index: HashMap::new(),
            first_ns: None,
            records: 0,
        }
    }

    /// The memory system (for its statistics after the run).
    pub fn system(&self) -> &System {
        &self.cx.sys
    }

    fn thread_of(&mut self, id: u32) -> usize {
        let n = self.cx.threads.len();
        let i = *self.index.entry(id).or_insert(n);
        if i == n {
            self.cx.threads.push(Thread {
                id,
                ..Thread::default()
            });
            self.model.add_thread();
        }
        i
    }

    /// Replay every record of `records` and report. Memory stays bounded
    /// by the read-ahead limit ([`Config::lookahead`]).
    ///
    /// The thread whose next record comes first on the simulated clocks
    /// (its clock plus the compute gap before the record) goes next, so
    /// the memory system sees the threads' requests in time order; before
    /// it goes, the model does its background work (persist buffers
    /// drain) up to that time.
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
                && buffered < self.cx.cfg.lookahead
                && (self.cx.threads.is_empty()
                    || self.cx.threads.iter().any(|t| t.queue.is_empty()))
            {
                match it.next() {
                    None => eof = true,
                    Some(r) => {
                        let r = r?;
                        let ti = self.thread_of(r.thread);
                        self.cx.threads[ti].queue.push_back(r);
                        buffered += 1;
                    }
                }
            }
            let next = self
                .cx
                .threads
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.queue.is_empty())
                .map(|(i, t)| (i, t.next_start()))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((ti, at)) = next else { break };
            self.model.advance(&mut self.cx, at);
            let r = self.cx.threads[ti]
                .queue
                .pop_front()
                .expect("non-empty queue");
            buffered -= 1;
            self.step(ti, &r);
        }
        // Whatever is still buffered becomes durable at the end.
        self.model.finish(&mut self.cx);
        let first = self.first_ns.unwrap_or(0) as f64;
        let threads = &self.cx.threads;
        let run_ns = threads.iter().map(|t| t.clk - first).fold(0.0, f64::max);
        let mut b = Breakdown::default();
        for t in threads {
            b.compute_ns += t.b.compute_ns;
            b.read_ns += t.b.read_ns;
            b.durability_ns += t.b.durability_ns;
            b.buffer_full_ns += t.b.buffer_full_ns;
            b.issue_ns += t.b.issue_ns;
            b.rfo_wait_ns += t.b.rfo_wait_ns;
        }
        let n = &self.cx.n;
        let report = Report {
            model: self.cx.cfg.model,
            run_ns,
            breakdown: b,
            records: self.records,
            threads: threads.len() as u64,
            lines_written: n.lines_written,
            durability_points: n.durability_points,
            epochs_drained: n.epochs_drained,
            cross_deps: n.cross_deps,
            cross_waits: n.cross_waits,
            rfo_reads: n.rfo_reads,
            rfo_read_ns: n.rfo_read_ns,
            rfo_delayed_writebacks: n.rfo_delayed_writebacks,
            flush_invalidates: self.cx.cfg.flush_invalidates,
            media_write_ns: self.cx.cfg.media_write_ns,
        };
        Ok((report, self.cx.sys))
    }

    fn step(&mut self, ti: usize, r: &Record) {
        self.records += 1;
        if self.first_ns.is_none_or(|f| r.time_ns < f) {
            self.first_ns = Some(r.time_ns);
        }
        {
            let t = &mut self.cx.threads[ti];
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
        let th = self.cx.threads[ti].id;
        match r.op {
            Op::Read => {
                let t0 = self.cx.threads[ti].clk;
                let c = self
                    .cx
                    .sys
                    .submit(&Request::new(t0, Op::Read, r.addr, r.size).on_thread(th));
                for line in lines(r.addr, r.size) {
                    self.model.loaded(line, c.done_ns);
                }
                let t = &mut self.cx.threads[ti];
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
                    let stored = self.cx.threads[ti].epoch_lines.contains(&line);
                    if self.cx.cfg.flushes_as_stores && !stored {
                        self.store(ti, line, false);
                    }
                    self.model.flush(&mut self.cx, ti, line, r.op);
                }
            }
            Op::SFence | Op::OFence | Op::DFence => {
                if r.op != Op::SFence {
                    self.cx.native_fences = true;
                }
                self.cx.threads[ti].epoch_lines.clear();
                self.model.fence(&mut self.cx, ti, r.op);
            }
            Op::TxBegin => self.cx.threads[ti].tx_depth += 1,
            Op::TxEnd => {
                let t = &mut self.cx.threads[ti];
                t.tx_depth = t.tx_depth.saturating_sub(1);
                self.model.tx_end(&mut self.cx, ti);
            }
            Op::UserData | Op::Untraced => {}
        }
    }

    fn store(&mut self, ti: usize, line: u64, nt: bool) {
        let t = &mut self.cx.threads[ti];
        let first_in_epoch = !t.epoch_lines.contains(&line);
        if first_in_epoch {
            t.epoch_lines.push(line);
        }
        self.model.store(&mut self.cx, ti, line, nt, first_in_epoch);
    }
}

/// The lines a record covers, at most 2^18 (16 MiB, as the analysis).
fn lines(addr: u64, size: u32) -> impl Iterator<Item = u64> {
    let first = addr / 64;
    let last = addr.saturating_add((size as u64).max(1) - 1) / 64;
    first..=last.min(first + (1 << 18) - 1)
}

#[cfg(test)]
mod tests;
