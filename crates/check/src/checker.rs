//! The streaming checker: one pass over a trace, one state machine per
//! cache line.
//!
//! A line is *clean* (nothing pending), *dirty* (stored, not flushed) or
//! *flushed* (written back by thread T, not yet fenced by T). A store makes
//! a line dirty; a `clwb`/`clflushopt` makes a dirty line flushed; a fence
//! of T (`SFENCE`, and `OFENCE`/`DFENCE`, which execute an `sfence` on
//! x86) makes every line T flushed clean; `clflush` (strongly ordered) and
//! a non-temporal store followed by a fence likewise. Findings:
//!
//! * [`Kind::NotFlushed`] / [`Kind::NotFenced`]: a line still dirty /
//!   flushed at the end of the trace, or at the commit (`TXEND`) of the
//!   transaction that stored it;
//! * [`Kind::RedundantFlush`]: a flush of a line not modified since its
//!   last flush, by a thread with no store of its own to it since its own
//!   last flush (a first flush of a line never stored is not judged:
//!   compilers expand small copies inline, unseen; judged only when the
//!   trace records every store:
//!   `stores=instrumented`, or a hand-made trace; flushes made inside
//!   PMDK's libraries are exempt, their own stores are never recorded);
//! * [`Kind::FlushNotPm`]: a flush outside every PM mapping of the trace
//!   (judged at the end, when the trace has `PMRANGE` notes);
//! * [`Kind::StoreAfterFlush`]: a store to a line between its flush and
//!   the fence that completes it;
//! * [`Kind::TxUnlogged`]: inside a transaction, a store to PM outside the
//!   ranges the transaction logged (`TXADD`). Transactions are checked
//!   when they log at least one range or the trace is of a PMDK program
//!   (`pmdk=interposed`); stores made inside PMDK's libraries are exempt.

use crate::report::{Finding, Kind, Report, When};
use pmlab_trace::ext::{Event, Note};
use pmlab_trace::{Op, Record, Space};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const LINE: u64 = 64;

/// A multiplicative hasher for line addresses (the default SipHash costs
/// more than the rest of the checker).
#[derive(Default)]
pub(crate) struct LineHasher(u64);

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
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (v >> 32);
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<LineHasher>>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Clean,
    Dirty,
    Flushed,
}

#[derive(Clone, Copy)]
struct Line {
    state: State,
    /// The last store: thread, call site, address, size.
    store_thread: u32,
    store_site: u64,
    store_addr: u64,
    store_size: u32,
    /// The thread whose fence completes the flush.
    flush_thread: u32,
    /// Already reported at a commit (not again at exit).
    reported: bool,
    /// Stored while flushed and not yet fenced; reported if the fence
    /// comes before another flush.
    after_flush: bool,
    /// Threads (bit `t`, threads from 63 share bit 63) that stored to the
    /// line and have not flushed it since: another thread's flush of the
    /// line does not make their own redundant.
    owed: u64,
}

fn bit(t: u32) -> u64 {
    1u64 << t.min(63)
}

#[derive(Default)]
struct Thread {
    site: u64,
    /// Lines this thread flushed and has not fenced since.
    flushed: Vec<u64>,
    tx_depth: u32,
    tx_ranges: Vec<(u64, u64)>,
    tx_lines: Vec<u64>,
}

/// Options of a check.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Judge redundant flushes even when the trace says not every store
    /// was recorded.
    pub assume_complete_stores: bool,
}

/// The streaming checker. Feed it events with [`Checker::event`], then
/// call [`Checker::finish`].
pub struct Checker {
    lines: FastMap<u64, Line>,
    threads: Vec<Thread>,
    report: Report,
    complete_stores: bool,
    pmdk: bool,
    pm_ranges: Vec<(u64, u64)>,
    /// Flushes of lines never stored, to judge against PM ranges at the end.
    unknown_flushes: FastMap<u64, (u32, u64, bool, u64)>,
    /// Sites known to be inside PMDK's libraries (decided at first use).
    internal: FastMap<u64, bool>,
    modules: Vec<crate::symbols::Module>,
    records: u64,
}

impl Checker {
    /// A checker for a trace whose header metadata is `meta`.
    pub fn new(meta: &[(String, String)], opts: Options) -> Checker {
        let get = |k: &str| meta.iter().find(|(mk, _)| mk == k).map(|(_, v)| v.as_str());
        let from_libpmlab = get("producer") == Some("libpmlab");
        let complete_stores =
            opts.assume_complete_stores || !from_libpmlab || get("stores") == Some("instrumented");
        let pmdk = get("pmdk") == Some("interposed");
        let mut report = Report::default();
        report.complete_stores = complete_stores;
        Checker {
            lines: FastMap::default(),
            threads: Vec::new(),
            report,
            complete_stores,
            pmdk,
            pm_ranges: Vec::new(),
            unknown_flushes: FastMap::default(),
            internal: FastMap::default(),
            modules: Vec::new(),
            records: 0,
        }
    }

    fn thread(&mut self, t: u32) -> &mut Thread {
        let t = t as usize;
        if t >= self.threads.len() {
            self.threads.resize_with(t + 1, Thread::default);
        }
        &mut self.threads[t]
    }

    /// Is `site` inside one of PMDK's libraries (libpmem, libpmemobj…)?
    fn is_internal(&mut self, site: u64) -> bool {
        if site == 0 || !self.pmdk {
            return false;
        }
        if let Some(&v) = self.internal.get(&site) {
            return v;
        }
        let v = self
            .modules
            .iter()
            .find(|m| site >= m.start && site < m.start + m.len)
            .is_some_and(|m| {
                let name = m.path.rsplit('/').next().unwrap_or("");
                name.starts_with("libpmem")
            });
        self.internal.insert(site, v);
        v
    }

    fn add(&mut self, kind: Kind, thread: u32, site: u64, addr: u64, size: u32, time: u64) {
        self.report.add(Finding {
            kind,
            thread,
            site,
            addr,
            size,
            time_ns: time,
        });
    }

    /// Take one event.
    pub fn event(&mut self, ev: &Event) {
        match ev {
            Event::Record(r) => self.record(r),
            Event::Note { thread, note, .. } => self.note(*thread, note),
        }
    }

    fn note(&mut self, thread: u32, note: &Note) {
        match note {
            Note::Site { ip } => self.thread(thread).site = *ip,
            Note::TxAdd { addr, len } => {
                let t = self.thread(thread);
                if t.tx_depth > 0 {
                    t.tx_ranges.push((*addr, addr.saturating_add(*len)));
                }
            }
            Note::Module {
                start,
                len,
                bias,
                path,
            } => self.modules.push(crate::symbols::Module {
                start: *start,
                len: *len,
                bias: *bias,
                path: path.clone(),
            }),
            Note::PmRange { base, len, .. } => {
                self.pm_ranges.push((*base, base.saturating_add(*len)));
                self.report.pm_ranges += 1;
            }
            Note::Data { .. } => {}
        }
    }

    /// Take one operation.
    pub fn record(&mut self, r: &Record) {
        self.records += 1;
        if r.space == Space::Dram {
            return;
        }
        match r.op {
            Op::Write | Op::NtWrite => self.store(r),
            Op::Clwb | Op::ClflushOpt | Op::Clflush => self.flush(r),
            // pm_ofence executes an sfence: on x86 it completes flushes too.
            Op::SFence | Op::OFence | Op::DFence => self.fence(r),
            Op::TxBegin => {
                let t = self.thread(r.thread);
                if t.tx_depth == 0 {
                    t.tx_ranges.clear();
                    t.tx_lines.clear();
                }
                t.tx_depth += 1;
            }
            Op::TxEnd => self.tx_end(r),
            _ => {}
        }
    }

    fn covered(ranges: &[(u64, u64)], addr: u64, end: u64) -> bool {
        let mut pos = addr;
        'outer: while pos < end {
            for &(lo, hi) in ranges {
                if lo <= pos && pos < hi {
                    pos = hi;
                    continue 'outer;
                }
            }
            return false;
        }
        true
    }

    fn in_pm(&self, addr: u64) -> bool {
        self.pm_ranges.is_empty()
            || self
                .pm_ranges
                .iter()
                .any(|&(lo, hi)| addr >= lo && addr < hi)
    }

    fn store(&mut self, r: &Record) {
        // Once the trace has declared its PM mappings, a store elsewhere
        // is not a PM store (the recorder may count memory as PM before
        // the pool exists); stores before the first mapping are judged
        // at the end.
        if !self.in_pm(r.addr) {
            return;
        }
        let t = r.thread;
        let site = self.thread(t).site;
        let end = r.addr.saturating_add(r.size.max(1) as u64);
        let (in_tx, checked) = {
            let th = self.thread(t);
            (
                th.tx_depth > 0,
                th.tx_depth > 0 && (!th.tx_ranges.is_empty()),
            )
        };
        let mut logged = false;
        if in_tx && (checked || self.pmdk) && !self.is_internal(site) {
            logged = Self::covered(&self.threads[t as usize].tx_ranges, r.addr, end);
            if !logged {
                self.add(Kind::TxUnlogged, t, site, r.addr, r.size, r.time_ns);
            }
        }
        let nt = r.op == Op::NtWrite;
        let internal = self.is_internal(site);
        let th = &mut self.threads[t as usize];
        let mut line = r.addr & !(LINE - 1);
        while line < end {
            let fresh = Line {
                state: if nt { State::Flushed } else { State::Dirty },
                store_thread: t,
                store_site: site,
                store_addr: r.addr,
                store_size: r.size,
                flush_thread: t,
                reported: false,
                after_flush: false,
                owed: bit(t),
            };
            match self.lines.entry(line) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    let p = *e.get();
                    // A logged store is the transaction's to flush at commit.
                    let after_flush =
                        (p.state == State::Flushed || p.after_flush) && !nt && !internal && !logged;
                    *e.get_mut() = Line {
                        flush_thread: if nt { t } else { p.flush_thread },
                        after_flush,
                        owed: p.owed | bit(t),
                        ..fresh
                    };
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(fresh);
                }
            }
            if nt {
                th.flushed.push(line);
            }
            if in_tx {
                th.tx_lines.push(line);
            }
            // The last line of the address space ends the walk (a
            // corrupt trace's address near 2^64 must not wrap around).
            let Some(next) = line.checked_add(LINE) else {
                break;
            };
            line = next;
        }
    }

    fn flush(&mut self, r: &Record) {
        let t = r.thread;
        let site = self.thread(t).site;
        let strong = r.op == Op::Clflush;
        let end = r.addr.saturating_add(r.size.max(1) as u64);
        let mut line = r.addr & !(LINE - 1);
        let internal = self.is_internal(site);
        while line < end {
            match self.lines.get_mut(&line) {
                Some(l) if l.state == State::Dirty => {
                    l.after_flush = false;
                    l.owed &= !bit(t);
                    if strong {
                        l.state = State::Clean;
                    } else {
                        l.state = State::Flushed;
                        l.flush_thread = t;
                        self.thread(t).flushed.push(line);
                    }
                }
                Some(l) => {
                    // Clean, or flushed and not modified since: redundant,
                    // unless this is the storing thread's first flush
                    // since its store (another thread flushed it first).
                    let first_own = l.owed & bit(t) != 0;
                    l.owed &= !bit(t);
                    if self.complete_stores {
                        if !internal && !first_own {
                            self.add(Kind::RedundantFlush, t, site, line, LINE as u32, r.time_ns);
                        }
                    } else if !strong {
                        // Unrecorded stores may have modified the line:
                        // count the flush as a store and a flush.
                        l.state = State::Flushed;
                        l.flush_thread = t;
                        self.thread(t).flushed.push(line);
                    }
                }
                None => {
                    // Never stored: judged at the end (outside PM, or not
                    // modified). Without recorded stores, the flush counts
                    // as the store, as `pmlab analyze` does.
                    self.unknown_flushes
                        .entry(line)
                        .or_insert((t, site, internal, r.time_ns));
                    let state = if self.complete_stores || strong {
                        State::Clean
                    } else {
                        self.thread(t).flushed.push(line);
                        State::Flushed
                    };
                    self.lines.insert(
                        line,
                        Line {
                            state,
                            store_thread: t,
                            store_site: site,
                            store_addr: line,
                            store_size: LINE as u32,
                            flush_thread: t,
                            reported: false,
                            after_flush: false,
                            owed: 0,
                        },
                    );
                }
            }
            // The last line of the address space ends the walk (a
            // corrupt trace's address near 2^64 must not wrap around).
            let Some(next) = line.checked_add(LINE) else {
                break;
            };
            line = next;
        }
    }

    fn fence(&mut self, r: &Record) {
        let t = r.thread;
        let flushed = std::mem::take(&mut self.thread(t).flushed);
        for line in &flushed {
            if let Some(l) = self.lines.get_mut(line) {
                if l.state == State::Flushed && l.flush_thread == t {
                    l.state = State::Clean;
                } else if l.after_flush && l.flush_thread == t {
                    // Stored between the flush and this fence, and not
                    // flushed again.
                    l.after_flush = false;
                    let l = *l;
                    self.add(
                        Kind::StoreAfterFlush,
                        l.store_thread,
                        l.store_site,
                        l.store_addr,
                        l.store_size,
                        r.time_ns,
                    );
                }
            }
        }
        let mut v = flushed;
        v.clear();
        self.thread(t).flushed = v;
    }

    fn tx_end(&mut self, r: &Record) {
        let t = r.thread;
        let th = self.thread(t);
        if th.tx_depth == 0 {
            return;
        }
        th.tx_depth -= 1;
        if th.tx_depth > 0 {
            return;
        }
        let lines = std::mem::take(&mut th.tx_lines);
        for line in &lines {
            let Some(l) = self.lines.get_mut(line) else {
                continue;
            };
            if l.reported || l.store_thread != t {
                continue;
            }
            let site = l.store_site;
            // PMDK's own log writes are drained lazily, after the commit.
            if self.is_internal(site) {
                continue;
            }
            let Some(l) = self.lines.get_mut(line) else {
                continue;
            };
            let kind = match l.state {
                State::Dirty => Kind::NotFlushed(When::Commit),
                State::Flushed => Kind::NotFenced(When::Commit),
                State::Clean => continue,
            };
            l.reported = true;
            let l = *l;
            self.add(kind, t, l.store_site, l.store_addr, l.store_size, r.time_ns);
        }
        let mut v = lines;
        v.clear();
        self.thread(t).tx_lines = v;
    }

    /// End of the trace: report what is still not durable, judge flushes
    /// of unknown memory, and return the report.
    pub fn finish(mut self) -> Report {
        let mut pending: Vec<(u64, Line)> = self
            .lines
            .iter()
            .filter(|(_, l)| l.state != State::Clean && !l.reported)
            .map(|(a, l)| (*a, *l))
            .collect();
        pending.sort_by_key(|(a, _)| *a);
        for (a, l) in pending {
            if !self.in_pm(a) {
                continue;
            }
            let kind = match l.state {
                State::Dirty => Kind::NotFlushed(When::Exit),
                _ => Kind::NotFenced(When::Exit),
            };
            self.add(
                kind,
                l.store_thread,
                l.store_site,
                l.store_addr,
                l.store_size,
                u64::MAX,
            );
        }
        let mut unknown: Vec<(u64, (u32, u64, bool, u64))> =
            self.unknown_flushes.iter().map(|(a, v)| (*a, *v)).collect();
        unknown.sort_by_key(|(a, _)| *a);
        for (a, (t, site, internal, time)) in unknown {
            let in_pm = self.pm_ranges.iter().any(|&(lo, hi)| a >= lo && a < hi);
            if !self.pm_ranges.is_empty() && !in_pm {
                // PMDK's libraries flush other mappings of the pool file
                // (its header while creating it): not the program's.
                if !internal {
                    self.add(Kind::FlushNotPm, t, site, a, LINE as u32, time);
                }
            }
            // A PM line flushed before any recorded store is not judged
            // redundant: clang lowers small constant-size memset/memcpy
            // inline, after the instrumentation, so such stores are unseen.
            let _ = (internal, time);
        }
        self.report.records = self.records;
        self.report.modules = std::mem::take(&mut self.modules);
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmlab_trace::ext::Event;

    /// Check a text trace (one record per line; `TXADD addr len` lines are
    /// annotations of thread 0).
    fn check(text: &str) -> Report {
        let meta = vec![("producer".to_string(), "test".to_string())];
        let mut c = Checker::new(&meta, Options::default());
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.first() == Some(&"TXADD") {
                let a = u64::from_str_radix(f[1].trim_start_matches("0x"), 16).unwrap();
                c.event(&Event::Note {
                    time_ns: 0,
                    thread: 0,
                    note: Note::TxAdd {
                        addr: a,
                        len: f[2].parse().unwrap(),
                    },
                });
                continue;
            }
            if let Some(r) = pmlab_trace::text::parse_line(line).unwrap() {
                c.event(&Event::Record(r));
            }
        }
        c.finish()
    }

    /// A record at the top of the address space (a corrupt trace) ends
    /// its walk over lines at 2^64 instead of wrapping around to 0 and
    /// walking the whole address space (`pmlab check` hung on one).
    #[test]
    fn a_record_at_the_top_of_the_address_space_ends_there() {
        let r = check(
            "0 0 W 0xffffffffffffffd8 64\n1 0 CLWB 0xffffffffffffffc0 128\n2 0 SFENCE 0 0\n3 0 NT 0xfffffffffffffff0 4000\n4 0 SFENCE 0 0\n",
        );
        assert_eq!(r.total(), 0, "{r:?}");
    }

    #[test]
    fn a_store_flushed_and_fenced_is_clean() {
        let r = check("0 0 W 0x1000 8\n1 0 CLWB 0x1000 64\n2 0 SFENCE 0 0\n");
        assert_eq!(r.total(), 0);
    }

    #[test]
    fn a_store_never_flushed_is_reported_at_exit() {
        let r = check("0 0 W 0x1000 8\n1 0 SFENCE 0 0\n");
        assert_eq!(r.count(Kind::NotFlushed(When::Exit)), 1);
        assert_eq!(r.total(), 1);
    }

    #[test]
    fn a_flush_without_fence_is_reported_and_another_threads_fence_does_not_help() {
        let r = check("0 0 W 0x1000 8\n1 0 CLWB 0x1000 64\n2 1 SFENCE 0 0\n");
        assert_eq!(r.count(Kind::NotFenced(When::Exit)), 1);
        // clflush is strongly ordered: no fence needed.
        let r = check("0 0 W 0x1000 8\n1 0 CLFLUSH 0x1000 64\n");
        assert_eq!(r.total(), 0);
    }

    #[test]
    fn commit_is_a_durability_point() {
        let r = check(
            "0 0 TXBEGIN 1 0\n1 0 W 0x1000 8\n2 0 TXEND 1 0\n3 0 CLWB 0x1000 64\n4 0 SFENCE 0 0\n",
        );
        assert_eq!(r.count(Kind::NotFlushed(When::Commit)), 1);
        assert_eq!(r.total(), 1, "not reported again at exit");
        let r = check(
            "0 0 TXBEGIN 1 0\n1 0 W 0x1000 8\n2 0 CLWB 0x1000 64\n3 0 TXEND 1 0\n4 0 SFENCE 0 0\n",
        );
        assert_eq!(r.count(Kind::NotFenced(When::Commit)), 1);
    }

    #[test]
    fn redundant_flushes_are_those_of_unmodified_lines() {
        let r = check("0 0 W 0x1000 8\n1 0 CLWB 0x1000 64\n2 0 SFENCE 0 0\n3 0 CLWB 0x1000 64\n4 0 CLWB 0x2000 64\n5 0 SFENCE 0 0\n6 0 CLWB 0x2000 64\n");
        assert_eq!(
            r.count(Kind::RedundantFlush),
            2,
            "0x1000 again, 0x2000 twice"
        );
        let r = check("0 0 W 0x1000 8\n1 0 CLWB 0x1000 64\n2 0 SFENCE 0 0\n3 0 W 0x1008 8\n4 0 CLWB 0x1000 64\n5 0 SFENCE 0 0\n");
        assert_eq!(r.total(), 0);
        // Thread 1 flushed thread 0's store along with its own: thread 0's
        // flush of its own store is still needed.
        let r = check("0 0 W 0x1000 8\n1 1 W 0x1008 8\n2 1 CLWB 0x1000 64\n3 1 SFENCE 0 0\n4 0 CLWB 0x1000 64\n5 0 SFENCE 0 0\n6 0 CLWB 0x1000 64\n7 0 SFENCE 0 0\n");
        assert_eq!(
            r.count(Kind::RedundantFlush),
            1,
            "only the second of thread 0"
        );
    }

    #[test]
    fn a_store_between_flush_and_fence_counts_only_if_not_flushed_again() {
        let r = check("0 0 W 0x1000 8\n1 0 CLWB 0x1000 64\n2 0 W 0x1008 8\n3 0 SFENCE 0 0\n4 0 CLWB 0x1000 64\n5 0 SFENCE 0 0\n");
        assert_eq!(r.count(Kind::StoreAfterFlush), 1);
        assert_eq!(r.total(), 1);
        let r = check("0 0 W 0x1000 8\n1 0 CLWB 0x1000 64\n2 0 W 0x1008 8\n3 0 CLWB 0x1000 64\n4 0 SFENCE 0 0\n");
        assert_eq!(r.total(), 0);
    }

    #[test]
    fn transactional_stores_must_fall_in_logged_ranges() {
        let base = "0 0 TXBEGIN 1 0\nTXADD 0x1000 16\n";
        let tail = "3 0 CLWB 0x1000 64\n4 0 SFENCE 0 0\n5 0 TXEND 1 0\n";
        let r = check(&format!("{base}1 0 W 0x1008 8\n{tail}"));
        assert_eq!(r.total(), 0);
        let r = check(&format!("{base}1 0 W 0x1010 8\n{tail}"));
        assert_eq!(r.count(Kind::TxUnlogged), 1);
        // Adjacent ranges cover a store across both.
        let r = check(&format!("{base}TXADD 0x1010 16\n1 0 W 0x100c 8\n{tail}"));
        assert_eq!(r.total(), 0);
        // A transaction that logs nothing is not checked (pmlab.h opt-in).
        let r = check(
            "0 0 TXBEGIN 1 0\n1 0 W 0x1000 8\n3 0 CLWB 0x1000 64\n4 0 SFENCE 0 0\n5 0 TXEND 1 0\n",
        );
        assert_eq!(r.total(), 0);
    }

    #[test]
    fn flushes_outside_the_pm_mappings_are_reported_at_the_end() {
        let meta = vec![("producer".to_string(), "test".to_string())];
        let mut c = Checker::new(&meta, Options::default());
        let rec = |op, a, s| Event::Record(Record::new(0, 0, op, a, s));
        // A flush before the mapping is declared is judged at the end.
        c.event(&rec(Op::Clwb, 0x9000, 64));
        c.event(&Event::Note {
            time_ns: 0,
            thread: 0,
            note: Note::PmRange {
                base: 0x1000,
                len: 0x1000,
                file_offset: 0,
                path: String::new(),
                init: false,
            },
        });
        c.event(&rec(Op::Write, 0x1000, 8));
        c.event(&rec(Op::Clwb, 0x1000, 64));
        c.event(&rec(Op::SFence, 0, 0));
        // A store outside the mapping is not a PM store.
        c.event(&rec(Op::Write, 0x5000, 8));
        let r = c.finish();
        assert_eq!(r.count(Kind::FlushNotPm), 1);
        assert_eq!(r.total(), 1);
    }

    #[test]
    fn non_temporal_stores_need_only_a_fence() {
        let r = check("0 0 NT 0x1000 64\n1 0 SFENCE 0 0\n");
        assert_eq!(r.total(), 0);
        let r = check("0 0 NT 0x1000 64\n");
        assert_eq!(r.count(Kind::NotFenced(When::Exit)), 1);
    }
}
