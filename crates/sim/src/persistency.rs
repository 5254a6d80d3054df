//! Replay of a PM trace under persistency models (after HOPS, WHISPER
//! section 6), on top of a simulated memory [`System`].
//!
//! Each thread of the trace gets a simulated clock. Between two of its
//! records the thread computes for the gap the trace shows (the *compute
//! gap*); its PM operations then cost what the model and the memory system
//! say. Threads are interleaved by always advancing the one whose clock is
//! smallest, so the memory system sees requests in time order.
//!
//! Models ([`Model`]):
//!
//! * `x86-nvm`: stores stay in the cache; `clwb`/`clflush(opt)` write the
//!   line back (the thread does not wait); `sfence` waits until every
//!   earlier write-back and non-temporal store of the thread is on the
//!   media (accepted by the memory controller, plus the media write time).
//! * `x86-adr`: the same, but durable once accepted into the controller's
//!   write pending queue (ADR / HOPS's persistent write queue).
//! * `hops`: stores go to a per-thread persist buffer (32 entries; stores
//!   to one line within one epoch share an entry); flushes are not needed
//!   and cost nothing. The buffer starts draining at 16 entries, one epoch
//!   at a time: all lines of the oldest epoch are written together, the
//!   next epoch starts when the previous one is acknowledged by the media.
//!   `ofence` ends an epoch (cost: nothing); `dfence` waits until the
//!   buffer is empty and acknowledged; a full buffer stalls stores. A
//!   store to a line still buffered by another thread makes its epoch wait
//!   for that thread's epoch to be durable (cross-thread dependency). In
//!   traces of x86 programs, an `sfence` inside a transaction is read as
//!   `ofence` and the transaction's end as `dfence` (WHISPER: durability is
//!   needed only at commit); an `sfence` outside transactions is a
//!   `dfence`. Traces that use `ofence`/`dfence` themselves (programs on
//!   `pmlab.h`) are replayed as written: their `sfence`s are `dfence`s and
//!   transaction ends add nothing.
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
    /// HOPS persist buffers with ofence/dfence.
    Hops,
    /// No ordering, no durability.
    Ideal,
}

impl Model {
    /// Every model, in the order reports list them.
    pub const ALL: [Model; 4] = [Model::X86Nvm, Model::X86Adr, Model::Hops, Model::Ideal];

    /// Names accepted by [`Model::from_name`].
    pub const NAMES: &'static str = "x86-nvm, x86-adr, hops, ideal";

    /// The model's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Model::X86Nvm => "x86-nvm",
            Model::X86Adr => "x86-adr",
            Model::Hops => "hops",
            Model::Ideal => "ideal",
        }
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
}

impl Breakdown {
    /// The sum of the parts.
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
    /// Epochs drained from persist buffers (hops).
    pub epochs_drained: u64,
    /// Epochs that waited for another thread's epoch (hops).
    pub cross_waits: u64,
    /// Media write time used (ns).
    pub media_write_ns: f64,
}

struct PbEntry {
    line: u64,
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
    has_pending: bool,
    /// Lines stored in the current epoch (for flush inference and
    /// coalescing).
    epoch_lines: Vec<u64>,
    tx_depth: u32,
    // hops
    epoch: u64,
    pb: VecDeque<PbEntry>,
    /// Acknowledgement times of drained but not yet acknowledged lines.
    inflight: VecDeque<f64>,
    /// When the next epoch may start draining.
    next_drain: f64,
    /// Highest epoch fully durable, and when.
    durable_epoch: Option<u64>,
    durable_at: f64,
    draining: bool,
    b: Breakdown,
}

/// A replay in progress. Feed it a record stream with [`Replay::run`].
pub struct Replay {
    cfg: Config,
    sys: System,
    threads: Vec<Thread>,
    index: HashMap<u32, usize>,
    /// hops: the last buffered writer of each line, (thread index, epoch).
    owners: HashMap<u64, (usize, u64)>,
    first_ns: Option<u64>,
    /// The trace uses ofence/dfence itself (a program written for HOPS):
    /// no translation of sfences and transaction ends.
    native_fences: bool,
    records: u64,
    lines_written: u64,
    durability_points: u64,
    epochs_drained: u64,
    cross_waits: u64,
}

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
            first_ns: None,
            native_fences: false,
            records: 0,
            lines_written: 0,
            durability_points: 0,
            epochs_drained: 0,
            cross_waits: 0,
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
    pub fn run<I>(mut self, records: I) -> Result<(Report, System), pmlab_trace::Error>
    where
        I: IntoIterator<Item = Result<Record, pmlab_trace::Error>>,
    {
        let mut it = records.into_iter();
        let mut eof = false;
        let mut buffered = 0usize;
        loop {
            // Read until every known thread has a record queued (so the
            // one with the smallest clock can go), or the limit, or EOF.
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
                .min_by(|a, b| a.1.clk.total_cmp(&b.1.clk))
                .map(|(i, _)| i);
            let Some(ti) = next else { break };
            let r = self.threads[ti].queue.pop_front().expect("non-empty queue");
            buffered -= 1;
            self.step(ti, &r);
        }
        // Whatever is still buffered becomes durable at the end.
        for ti in 0..self.threads.len() {
            if self.cfg.model == Model::Hops && !self.threads[ti].pb.is_empty() {
                let t = self.threads[ti].clk;
                self.drain_pb(ti, None, t);
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
            cross_waits: self.cross_waits,
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
                        let d = self.write_line(th, line, t0, false, model == Model::X86Nvm);
                        let t = &mut self.threads[ti];
                        t.pending_durable = t.pending_durable.max(d);
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
                let durable = match (model, r.op) {
                    (Model::Hops, Op::OFence) => false,
                    (Model::Hops, Op::SFence) => {
                        self.native_fences || self.threads[ti].tx_depth == 0
                    }
                    _ => true,
                };
                self.fence(ti, durable);
            }
            Op::TxBegin => self.threads[ti].tx_depth += 1,
            Op::TxEnd => {
                let t = &mut self.threads[ti];
                t.tx_depth = t.tx_depth.saturating_sub(1);
                if model == Model::Hops && t.tx_depth == 0 && !self.native_fences {
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
                    t.has_pending = true;
                    t.clk += self.cfg.issue_ns;
                    t.b.issue_ns += self.cfg.issue_ns;
                }
            }
            Model::Ideal => {
                if first_in_epoch {
                    let t0 = self.threads[ti].clk;
                    self.write_line(th, line, t0, nt, false);
                }
            }
            Model::Hops => {
                if !first_in_epoch {
                    return;
                }
                let now = self.threads[ti].clk;
                self.advance_pb(ti, now);
                // A full buffer stalls the store until an entry frees.
                while self.occupancy(ti) >= self.cfg.pb_entries {
                    let t = &mut self.threads[ti];
                    t.draining = true;
                    let free_at = if let Some(&a) = t.inflight.front() {
                        a
                    } else {
                        t.next_drain.max(t.clk)
                    };
                    let wait = (free_at - t.clk).max(0.0);
                    t.clk += wait;
                    t.b.buffer_full_ns += wait;
                    let now = t.clk;
                    self.advance_pb(ti, now);
                    if wait == 0.0 && self.occupancy(ti) >= self.cfg.pb_entries {
                        // Nothing in flight and the drain start is now:
                        // launch the oldest epoch.
                        self.drain_one_epoch(ti, now);
                    }
                }
                let t = &mut self.threads[ti];
                let epoch = t.epoch;
                t.pb.push_back(PbEntry { line, epoch });
                t.clk += self.cfg.issue_ns;
                t.b.issue_ns += self.cfg.issue_ns;
                if self.occupancy(ti) >= self.cfg.pb_drain_at {
                    self.threads[ti].draining = true;
                }
            }
        }
    }

    fn occupancy(&self, ti: usize) -> usize {
        let t = &self.threads[ti];
        t.pb.len() + t.inflight.len()
    }

    /// Retire acknowledged lines and launch epochs whose turn has come,
    /// up to time `now`.
    fn advance_pb(&mut self, ti: usize, now: f64) {
        loop {
            let t = &mut self.threads[ti];
            while t.inflight.front().is_some_and(|&a| a <= now) {
                t.inflight.pop_front();
            }
            let start = t.next_drain.max(t.durable_at);
            if !t.draining || t.pb.is_empty() || start > now || !t.inflight.is_empty() {
                return;
            }
            self.drain_one_epoch(ti, start);
            let t = &mut self.threads[ti];
            if t.pb.len() + t.inflight.len() < self.cfg.pb_drain_at && t.pb.is_empty() {
                t.draining = false;
            }
        }
    }

    /// Launch every entry of the oldest buffered epoch at `start` (later
    /// if it depends on another thread's epoch).
    fn drain_one_epoch(&mut self, ti: usize, start: f64) {
        let Some(epoch) = self.threads[ti].pb.front().map(|e| e.epoch) else {
            return;
        };
        let th = self.threads[ti].id;
        let mut batch = Vec::new();
        while self.threads[ti]
            .pb
            .front()
            .is_some_and(|e| e.epoch == epoch)
        {
            batch.push(self.threads[ti].pb.pop_front().expect("front").line);
        }
        // Cross-thread dependencies: wait for the source epochs.
        let mut s = start;
        for &line in &batch {
            if let Some(&(src, src_epoch)) = self.owners.get(&line) {
                if src != ti {
                    let done = self.durable_time(src, src_epoch, s);
                    if done > s {
                        self.cross_waits += 1;
                        s = done;
                    }
                }
            }
        }
        let mut last = s;
        for &line in &batch {
            let a = self.write_line(th, line, s, false, true);
            last = last.max(a);
            self.threads[ti].inflight.push_back(a);
            if self
                .owners
                .get(&line)
                .is_some_and(|&(o, e)| o == ti && e == epoch)
            {
                self.owners.remove(&line);
            }
        }
        self.epochs_drained += 1;
        let t = &mut self.threads[ti];
        let mut v: Vec<f64> = t.inflight.drain(..).collect();
        v.sort_by(f64::total_cmp);
        t.inflight.extend(v);
        t.next_drain = last;
        t.durable_epoch = Some(epoch);
        t.durable_at = last;
    }

    /// When thread `src`'s epoch `epoch` is durable, draining it from
    /// `from` on if it is still buffered.
    fn durable_time(&mut self, src: usize, epoch: u64, from: f64) -> f64 {
        if self.threads[src].durable_epoch.is_some_and(|d| d >= epoch) {
            return self.threads[src].durable_at;
        }
        while self.threads[src]
            .pb
            .front()
            .is_some_and(|e| e.epoch <= epoch)
        {
            let start = self.threads[src].next_drain.max(from);
            self.drain_one_epoch(src, start);
        }
        self.threads[src].durable_at
    }

    /// Drain the whole persist buffer from `now`; returns when it is
    /// acknowledged. `upto` limits the epochs drained.
    fn drain_pb(&mut self, ti: usize, upto: Option<u64>, now: f64) -> f64 {
        while let Some(e) = self.threads[ti].pb.front().map(|e| e.epoch) {
            if upto.is_some_and(|u| e > u) {
                break;
            }
            let start = self.threads[ti].next_drain.max(now);
            self.drain_one_epoch(ti, start);
        }
        let t = &self.threads[ti];
        t.inflight.iter().copied().fold(now, f64::max)
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
                    t.clk += wait;
                    t.b.durability_ns += wait;
                    t.has_pending = false;
                }
                t.clk += issue;
                t.b.issue_ns += issue;
            }
            Model::Hops => {
                // Every fence ends the epoch.
                let t = &mut self.threads[ti];
                t.epoch += 1;
                t.clk += issue;
                t.b.issue_ns += issue;
                let now = t.clk;
                for e in &self.threads[ti].pb {
                    self.owners.insert(e.line, (ti, e.epoch));
                }
                if durable {
                    self.durability_points += 1;
                    self.threads[ti].draining = true;
                    let done = self.drain_pb(ti, None, now);
                    let t = &mut self.threads[ti];
                    let wait = (done - t.clk).max(0.0);
                    t.clk += wait;
                    t.b.durability_ns += wait;
                    t.inflight.clear();
                    t.draining = false;
                } else {
                    self.advance_pb(ti, now);
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
        assert!(e.contains("x86-nvm, x86-adr, hops, ideal"), "{e}");
        assert_eq!(Model::from_name("hops").unwrap(), Model::Hops);
    }
}
