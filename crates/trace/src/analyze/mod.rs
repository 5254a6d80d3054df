//! WHISPER-style analysis of a PM trace, in one streaming pass.
//!
//! An *epoch* is the set of PM stores (cacheable or non-temporal) a thread
//! issues between two ordering points (`SFENCE`, `OFENCE`, `DFENCE`), as in
//! WHISPER section 5.1; flushes do not end epochs and, by default, are not
//! stores. Epochs without a PM store are not counted (WHISPER's tracer
//! ignores fences with no PM write before them too).
//!
//! [`Analyzer`] consumes [`Record`]s one at a time and keeps only bounded
//! state: per-thread current epochs, fixed-size [`Histogram`]s and a map of
//! the last writer of each line touched within the dependency window, which
//! is swept as time advances. Memory therefore does not grow with the
//! length of the trace, only with the number of distinct lines written
//! within one window.
//!
//! Metrics ([`Report`]): epochs per transaction (distribution, median),
//! epoch size in unique 64-byte lines (singleton share), bytes written by
//! singleton epochs, epochs with self- and cross-thread write-after-write
//! dependencies within the window (default 50 µs), write amplification when
//! user data is annotated (`USERDATA` records), share of non-temporal
//! stores, PM share of all accesses (when DRAM accesses are in the trace as
//! DRAM records or `UNTRACED` counts) and epochs per second.

mod hist;

pub use hist::Histogram;

use crate::{Op, Record, Space};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The cache-line size the analysis works in.
pub const LINE: u64 = 64;

/// Lines one record may cover (16 MiB); the rest of a longer record is
/// ignored and counted, so a corrupt size cannot stall the analysis.
pub const MAX_LINES: u64 = 1 << 18;

/// Options of an analysis.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Dependencies are counted only between writes at most this many
    /// nanoseconds apart (WHISPER: 50 µs).
    pub window_ns: u64,
    /// Count a flushed line that the thread did not store in the current
    /// epoch as stored by it. For traces where stores are not seen one by
    /// one (unmodified PMDK programs traced through libpmem's flush entry
    /// points), this recovers the epochs' lines from their flushes.
    pub flushes_as_stores: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            window_ns: 50_000,
            flushes_as_stores: false,
        }
    }
}

/// A fast hasher for line numbers (a multiplicative hash; inputs are not
/// adversarial and the map only needs speed).
#[derive(Default)]
struct LineHasher(u64);

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 32;
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<LineHasher>>;

/// The last write seen to a line.
#[derive(Clone, Copy)]
struct LastWrite {
    thread: u32,
    epoch: u64,
    time: u64,
}

/// The unique lines of one epoch: a short vector searched linearly while
/// small (most epochs have one or two lines), a hash set beyond.
#[derive(Default)]
struct LineSet {
    small: Vec<u64>,
    big: std::collections::HashSet<u64, BuildHasherDefault<LineHasher>>,
}

const SMALL_SET: usize = 16;

impl LineSet {
    #[inline]
    fn contains(&self, line: &u64) -> bool {
        if self.big.is_empty() {
            self.small.contains(line)
        } else {
            self.big.contains(line)
        }
    }

    /// Insert; false if already present.
    #[inline]
    fn insert(&mut self, line: u64) -> bool {
        if self.big.is_empty() {
            if self.small.contains(&line) {
                return false;
            }
            if self.small.len() < SMALL_SET {
                self.small.push(line);
                return true;
            }
            self.big.extend(self.small.drain(..));
        }
        self.big.insert(line)
    }

    fn len(&self) -> usize {
        self.small.len() + self.big.len()
    }

    fn is_empty(&self) -> bool {
        self.small.is_empty() && self.big.is_empty()
    }

    fn clear(&mut self) {
        self.small.clear();
        if !self.big.is_empty() {
            self.big.clear();
        }
    }
}

/// One thread's state.
#[derive(Default)]
struct ThreadState {
    id: u32,
    /// Sequence number of the current epoch on this thread.
    epoch: u64,
    /// Unique lines stored in the current epoch.
    lines: LineSet,
    /// Bytes stored in the current epoch (inferred lines count 0).
    bytes: u64,
    nt: bool,
    self_dep: bool,
    cross_dep: bool,
    /// The current epoch has already been counted for a transaction.
    tx_counted: bool,
    tx_depth: u32,
    tx_epochs: u64,
}

/// Streaming WHISPER analysis. Feed records with [`Analyzer::push`], then
/// call [`Analyzer::finish`].
pub struct Analyzer {
    cfg: Config,
    threads: Vec<ThreadState>,
    thread_index: FastMap<u32, usize>,
    last_thread: Option<(u32, usize)>,
    last_write: FastMap<u64, LastWrite>,
    now: u64,
    next_sweep: u64,
    r: Report,
}

/// The results of an analysis. Counts are over the whole trace.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Records read.
    pub records: u64,
    /// Distinct threads seen.
    pub threads: u64,
    /// Earliest and latest timestamps (ns).
    pub first_ns: u64,
    /// Latest timestamp (ns).
    pub last_ns: u64,
    /// Non-empty epochs.
    pub epochs: u64,
    /// Epoch sizes in unique 64-byte lines.
    pub epoch_lines: Histogram,
    /// Bytes stored by each singleton (one-line) epoch.
    pub singleton_bytes: Histogram,
    /// Epochs containing at least one non-temporal store.
    pub nt_epochs: u64,
    /// Epochs writing a line that an earlier epoch of the same thread
    /// wrote within the window.
    pub self_dep_epochs: u64,
    /// Epochs writing a line that another thread wrote last, within the
    /// window.
    pub cross_dep_epochs: u64,
    /// Completed (outermost) transactions.
    pub transactions: u64,
    /// Non-empty epochs per transaction.
    pub epochs_per_tx: Histogram,
    /// Transaction ends without a matching begin.
    pub unmatched_tx_ends: u64,
    /// Ordering points, by kind: sfence, ofence, dfence.
    pub fences: [u64; 3],
    /// Ordering points with no PM store since the thread's previous one.
    pub empty_fences: u64,
    /// Flush instructions (clwb, clflushopt, clflush).
    pub flushes: u64,
    /// Flushed lines counted as stores (only with
    /// [`Config::flushes_as_stores`]).
    pub inferred_lines: u64,
    /// PM store records and bytes (cacheable + non-temporal).
    pub pm_stores: u64,
    /// Bytes of PM stores.
    pub pm_store_bytes: u64,
    /// Non-temporal PM store records.
    pub nt_stores: u64,
    /// Bytes of non-temporal PM stores.
    pub nt_store_bytes: u64,
    /// PM store bytes inside transactions.
    pub tx_store_bytes: u64,
    /// User-data bytes annotated (all, and inside transactions).
    pub user_bytes: u64,
    /// User-data bytes annotated inside transactions.
    pub tx_user_bytes: u64,
    /// PM loads.
    pub pm_reads: u64,
    /// PM accesses (loads and stores, listed or counted by `UNTRACED`).
    pub pm_accesses: u64,
    /// DRAM accesses (listed or counted by `UNTRACED`).
    pub dram_accesses: u64,
    /// True when the trace said anything about DRAM accesses.
    pub dram_known: bool,
    /// The window used for dependencies (ns).
    pub window_ns: u64,
    /// Whether flushes were counted as stores.
    pub flushes_as_stores: bool,
    /// Largest number of lines the dependency map held at once.
    pub peak_tracked_lines: u64,
    /// Records longer than [`MAX_LINES`] lines (only their first
    /// `MAX_LINES` lines were counted).
    pub clamped_records: u64,
}

impl Report {
    /// Share of epochs that write exactly one line.
    pub fn singleton_share(&self) -> Option<f64> {
        ratio(self.epoch_lines.count_of(1), self.epochs)
    }

    /// Share of epochs with a self-dependency.
    pub fn self_dep_share(&self) -> Option<f64> {
        ratio(self.self_dep_epochs, self.epochs)
    }

    /// Share of epochs with a cross-thread dependency.
    pub fn cross_dep_share(&self) -> Option<f64> {
        ratio(self.cross_dep_epochs, self.epochs)
    }

    /// Share of PM store bytes written non-temporally.
    pub fn nt_byte_share(&self) -> Option<f64> {
        ratio(self.nt_store_bytes, self.pm_store_bytes)
    }

    /// PM accesses over all accesses, when DRAM accesses are known.
    pub fn pm_share(&self) -> Option<f64> {
        if !self.dram_known {
            return None;
        }
        ratio(self.pm_accesses, self.pm_accesses + self.dram_accesses)
    }

    /// Write amplification: extra PM bytes per user byte, over
    /// transactions when user data was annotated inside them, else over
    /// the whole trace. `None` without user-data annotations.
    pub fn amplification(&self) -> Option<f64> {
        let (total, user) = if self.tx_user_bytes > 0 {
            (self.tx_store_bytes, self.tx_user_bytes)
        } else {
            (self.pm_store_bytes, self.user_bytes)
        };
        if user == 0 {
            return None;
        }
        Some(total.saturating_sub(user) as f64 / user as f64)
    }

    /// Trace duration in seconds.
    pub fn duration_s(&self) -> f64 {
        self.last_ns.saturating_sub(self.first_ns) as f64 * 1e-9
    }

    /// Epochs per second of trace time.
    pub fn epochs_per_sec(&self) -> Option<f64> {
        let d = self.duration_s();
        if d > 0.0 {
            Some(self.epochs as f64 / d)
        } else {
            None
        }
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    if b == 0 {
        None
    } else {
        Some(a as f64 / b as f64)
    }
}

impl Analyzer {
    /// A new analysis.
    pub fn new(cfg: Config) -> Analyzer {
        Analyzer {
            cfg,
            threads: Vec::new(),
            thread_index: FastMap::default(),
            last_thread: None,
            last_write: FastMap::default(),
            now: 0,
            next_sweep: cfg.window_ns.max(1),
            r: Report {
                window_ns: cfg.window_ns,
                flushes_as_stores: cfg.flushes_as_stores,
                first_ns: u64::MAX,
                ..Report::default()
            },
        }
    }

    #[inline]
    fn thread(&mut self, id: u32) -> usize {
        if let Some((t, i)) = self.last_thread {
            if t == id {
                return i;
            }
        }
        let next = self.threads.len();
        let i = *self.thread_index.entry(id).or_insert(next);
        if i == next {
            self.threads.push(ThreadState {
                id,
                ..ThreadState::default()
            });
        }
        self.last_thread = Some((id, i));
        i
    }

    /// Consume one record.
    #[inline]
    pub fn push(&mut self, rec: &Record) {
        let r = &mut self.r;
        r.records += 1;
        if rec.time_ns < r.first_ns {
            r.first_ns = rec.time_ns;
        }
        if rec.time_ns > r.last_ns {
            r.last_ns = rec.time_ns;
        }
        if rec.time_ns > self.now {
            self.now = rec.time_ns;
            if self.now >= self.next_sweep {
                self.sweep();
            }
        }
        if rec.space == Space::Dram {
            self.r.dram_known = true;
            match rec.op {
                Op::Read | Op::Write | Op::NtWrite => self.r.dram_accesses += 1,
                Op::Untraced => self.r.dram_accesses += rec.addr,
                _ => {}
            }
            return;
        }
        match rec.op {
            Op::Read => {
                self.r.pm_reads += 1;
                self.r.pm_accesses += 1;
            }
            Op::Untraced => self.r.pm_accesses += rec.addr,
            Op::Write | Op::NtWrite => {
                let nt = rec.op == Op::NtWrite;
                let r = &mut self.r;
                r.pm_stores += 1;
                r.pm_accesses += 1;
                r.pm_store_bytes += rec.size as u64;
                if nt {
                    r.nt_stores += 1;
                    r.nt_store_bytes += rec.size as u64;
                }
                let ti = self.thread(rec.thread);
                let t = &mut self.threads[ti];
                t.bytes += rec.size as u64;
                t.nt |= nt;
                if t.tx_depth > 0 {
                    self.r.tx_store_bytes += rec.size as u64;
                }
                let first = rec.addr / LINE;
                let last = self.last_line(rec);
                for line in first..=last {
                    self.store_line(ti, line, rec.time_ns);
                }
            }
            Op::Clwb | Op::ClflushOpt | Op::Clflush => {
                self.r.flushes += 1;
                if self.cfg.flushes_as_stores {
                    let ti = self.thread(rec.thread);
                    let first = rec.addr / LINE;
                    let last = self.last_line(rec);
                    for line in first..=last {
                        if !self.threads[ti].lines.contains(&line) {
                            self.r.inferred_lines += 1;
                            self.store_line(ti, line, rec.time_ns);
                        }
                    }
                }
            }
            Op::SFence | Op::OFence | Op::DFence => {
                let k = match rec.op {
                    Op::SFence => 0,
                    Op::OFence => 1,
                    _ => 2,
                };
                self.r.fences[k] += 1;
                let ti = self.thread(rec.thread);
                if self.threads[ti].lines.is_empty() {
                    self.r.empty_fences += 1;
                } else {
                    self.close_epoch(ti);
                }
            }
            Op::TxBegin => {
                let ti = self.thread(rec.thread);
                let t = &mut self.threads[ti];
                t.tx_depth += 1;
                if t.tx_depth == 1 {
                    t.tx_epochs = 0;
                }
            }
            Op::TxEnd => {
                let ti = self.thread(rec.thread);
                let t = &mut self.threads[ti];
                match t.tx_depth {
                    0 => self.r.unmatched_tx_ends += 1,
                    1 => {
                        if !t.lines.is_empty() && !t.tx_counted {
                            t.tx_epochs += 1;
                            t.tx_counted = true;
                        }
                        self.r.epochs_per_tx.add(t.tx_epochs);
                        self.r.transactions += 1;
                        t.tx_depth = 0;
                    }
                    _ => t.tx_depth -= 1,
                }
            }
            Op::UserData => {
                self.r.user_bytes += rec.size as u64;
                let ti = self.thread(rec.thread);
                if self.threads[ti].tx_depth > 0 {
                    self.r.tx_user_bytes += rec.size as u64;
                }
            }
        }
    }

    /// The last line a record covers, at most [`MAX_LINES`] after its
    /// first (longer records are counted in `Report::clamped_records`).
    #[inline]
    fn last_line(&mut self, rec: &Record) -> u64 {
        let first = rec.addr / LINE;
        let last = rec.addr.saturating_add((rec.size as u64).max(1) - 1) / LINE;
        if last - first >= MAX_LINES {
            self.r.clamped_records += 1;
            first + MAX_LINES - 1
        } else {
            last
        }
    }

    #[inline]
    fn store_line(&mut self, ti: usize, line: u64, time: u64) {
        let t = &mut self.threads[ti];
        if !t.lines.insert(line) {
            return;
        }
        let me = LastWrite {
            thread: t.id,
            epoch: t.epoch,
            time,
        };
        if let Some(prev) = self.last_write.insert(line, me) {
            if time.saturating_sub(prev.time) <= self.cfg.window_ns {
                if prev.thread != t.id {
                    t.cross_dep = true;
                } else if prev.epoch != t.epoch {
                    t.self_dep = true;
                }
            }
        }
    }

    fn close_epoch(&mut self, ti: usize) {
        let t = &mut self.threads[ti];
        let n = t.lines.len() as u64;
        let r = &mut self.r;
        r.epochs += 1;
        r.epoch_lines.add(n);
        if n == 1 {
            r.singleton_bytes.add(t.bytes);
        }
        r.nt_epochs += t.nt as u64;
        r.self_dep_epochs += t.self_dep as u64;
        r.cross_dep_epochs += t.cross_dep as u64;
        if t.tx_depth > 0 && !t.tx_counted {
            t.tx_epochs += 1;
        }
        t.lines.clear();
        t.bytes = 0;
        t.nt = false;
        t.self_dep = false;
        t.cross_dep = false;
        t.tx_counted = false;
        t.epoch += 1;
    }

    /// Forget lines last written more than one window ago.
    fn sweep(&mut self) {
        let tracked = self.last_write.len() as u64;
        if tracked > self.r.peak_tracked_lines {
            self.r.peak_tracked_lines = tracked;
        }
        let horizon = self.now.saturating_sub(self.cfg.window_ns);
        self.last_write.retain(|_, w| w.time >= horizon);
        self.next_sweep = self.now.saturating_add(self.cfg.window_ns.max(1));
    }

    /// Close the open epochs and return the report. Transactions still
    /// open at the end of the trace are not counted.
    pub fn finish(mut self) -> Report {
        for ti in 0..self.threads.len() {
            if !self.threads[ti].lines.is_empty() {
                self.close_epoch(ti);
            }
        }
        let tracked = self.last_write.len() as u64;
        if tracked > self.r.peak_tracked_lines {
            self.r.peak_tracked_lines = tracked;
        }
        self.r.threads = self.threads.len() as u64;
        if self.r.records == 0 {
            self.r.first_ns = 0;
        }
        self.r
    }
}

/// Analyse a whole stream of records.
pub fn analyze<I>(records: I, cfg: Config) -> Result<Report, crate::Error>
where
    I: IntoIterator<Item = Result<Record, crate::Error>>,
{
    let mut a = Analyzer::new(cfg);
    for r in records {
        a.push(&r?);
    }
    Ok(a.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text;

    fn run(trace: &str, cfg: Config) -> Report {
        analyze(text::Reader::new(trace.as_bytes()), cfg).unwrap()
    }

    #[test]
    fn epochs_are_stores_between_fences_and_singletons_count_lines() {
        let t = "\
            0 0 TXBEGIN 1 0
            1 0 W 0x1000 8
            2 0 W 0x1008 8
            3 0 CLWB 0x1000 64
            4 0 SFENCE 0 0
            5 0 W 0x2000 64
            6 0 W 0x2040 8
            7 0 SFENCE 0 0
            8 0 SFENCE 0 0
            9 0 NT 0x3000 128
            10 0 TXEND 1 0
            11 0 SFENCE 0 0
        ";
        let r = run(t, Config::default());
        assert_eq!(r.epochs, 3);
        assert_eq!(r.epoch_lines.count_of(1), 1);
        assert_eq!(r.epoch_lines.count_of(2), 2);
        assert_eq!(r.singleton_bytes.count_of(16), 1);
        assert_eq!(r.empty_fences, 1);
        assert_eq!(r.transactions, 1);
        assert_eq!(r.epochs_per_tx.median(), Some(3));
        assert_eq!(r.nt_epochs, 1);
        assert_eq!(r.nt_store_bytes, 128);
        assert_eq!(r.pm_store_bytes, 8 + 8 + 64 + 8 + 128);
        assert_eq!(r.flushes, 1);
        assert!((r.singleton_share().unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(r.pm_share(), None);
    }

    #[test]
    fn self_and_cross_dependencies_respect_the_window() {
        let t = "\
            0 0 W 0x40 8
            1 0 SFENCE 0 0
            10 0 W 0x40 8
            11 0 SFENCE 0 0
            20 1 W 0x40 8
            21 1 SFENCE 0 0
            100000 1 W 0x40 8
            100001 1 SFENCE 0 0
            100002 1 W 0x80 8
            100003 1 W 0x80 8
            100004 1 SFENCE 0 0
        ";
        let r = run(t, Config::default());
        assert_eq!(r.epochs, 5);
        assert_eq!(r.self_dep_epochs, 1, "second epoch of thread 0 only");
        assert_eq!(r.cross_dep_epochs, 1, "thread 1 after thread 0");
        assert_eq!(r.threads, 2);
        let r = run(
            t,
            Config {
                window_ns: 5,
                ..Config::default()
            },
        );
        assert_eq!(r.self_dep_epochs, 0);
        assert_eq!(r.cross_dep_epochs, 0);
    }

    #[test]
    fn amplification_pm_share_and_flush_inference() {
        let t = "\
            0 0 TXBEGIN 1 0
            1 0 W 0x100 64
            2 0 W 0x200 64
            3 0 USERDATA 0x200 32
            4 0 SFENCE 0 0
            5 0 TXEND 1 0
            6 0 R 0x10 8 dram
            7 0 UNTRACED 5 0 dram
            8 0 CLWB 0x400 64
            9 0 SFENCE 0 0
        ";
        let r = run(t, Config::default());
        assert!((r.amplification().unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(r.dram_accesses, 6);
        assert!((r.pm_share().unwrap() - 2.0 / 8.0).abs() < 1e-9);
        assert_eq!(r.epochs, 1);
        assert_eq!(r.empty_fences, 1);
        let r = run(
            t,
            Config {
                flushes_as_stores: true,
                ..Config::default()
            },
        );
        assert_eq!(r.epochs, 2);
        assert_eq!(r.inferred_lines, 1);
    }

    #[test]
    fn huge_records_are_clamped_and_counted() {
        let mut a = Analyzer::new(Config::default());
        a.push(&Record::new(0, 0, Op::NtWrite, 0, u32::MAX));
        a.push(&Record::new(1, 0, Op::SFence, 0, 0));
        let r = a.finish();
        assert_eq!(r.clamped_records, 1);
        assert_eq!(r.epoch_lines.max(), MAX_LINES);
    }

    #[test]
    fn dependency_map_stays_bounded_on_long_traces() {
        let mut a = Analyzer::new(Config::default());
        for i in 0..200_000u64 {
            a.push(&Record::new(i * 100, 0, Op::Write, i * 64, 8));
            a.push(&Record::new(i * 100 + 1, 0, Op::SFence, 0, 0));
        }
        let r = a.finish();
        assert_eq!(r.epochs, 200_000);
        assert!(r.peak_tracked_lines <= 1100, "{}", r.peak_tracked_lines);
    }
}
