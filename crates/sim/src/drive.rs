//! Drive modes: how a trace's records become timed requests.
//!
//! * `closed`: each thread issues a request when its previous one completed
//!   (latency).
//! * `open:N`: each thread keeps up to N requests outstanding; request i
//!   issues when request i-N of the thread completed (bandwidth). A fence
//!   also holds back the thread's later requests until it completes.
//! * `timed`: each request issues at its trace timestamp.
//!
//! DRAM-space records and markers (transactions, annotations) are counted
//! and skipped: the system models the one memory under study.

use crate::{Error, ErrorKind, Op, Request, System};
use pmlab_trace::{Record, Space};

/// A drive mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One request at a time per thread.
    Closed,
    /// Up to N outstanding requests per thread.
    Open(usize),
    /// Issue at trace timestamps.
    Timed,
}

impl Mode {
    /// Parse `closed`, `open:N` or `timed`.
    pub fn parse(s: &str) -> Result<Mode, Error> {
        let bad = || {
            Error::new(
                ErrorKind::Usage,
                format!(
                    "unknown drive mode '{s}': expected closed, open:N (N from 1 to 4096) or timed"
                ),
            )
        };
        match s {
            "closed" => Ok(Mode::Closed),
            "timed" => Ok(Mode::Timed),
            _ => {
                let n: usize = s
                    .strip_prefix("open:")
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                if (1..=4096).contains(&n) {
                    Ok(Mode::Open(n))
                } else {
                    Err(bad())
                }
            }
        }
    }
}

#[derive(Default, Clone)]
struct ThreadState {
    /// Completion times of the last N requests (ring).
    ring: Vec<f64>,
    pos: usize,
    last_issue: f64,
    barrier: f64,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Requests simulated.
    pub requests: u64,
    /// Records skipped (DRAM space, markers).
    pub skipped: u64,
    /// Time of the last completion (ns).
    pub end_ns: f64,
}

/// Feeds records to a system under a mode, one at a time.
pub struct Driver {
    mode: Mode,
    threads: Vec<ThreadState>,
    summary: Summary,
    t0: Option<u64>,
}

impl Driver {
    /// A driver in `mode`.
    pub fn new(mode: Mode) -> Driver {
        Driver {
            mode,
            threads: Vec::new(),
            summary: Summary::default(),
            t0: None,
        }
    }

    /// Simulate one record.
    pub fn step(&mut self, sys: &mut System, r: &Record) {
        if r.space == Space::Dram || !(r.op.is_access() || r.op.is_flush() || r.op.is_fence()) {
            self.summary.skipped += 1;
            return;
        }
        let window = match self.mode {
            Mode::Closed => 1,
            Mode::Open(n) => n,
            Mode::Timed => 0,
        };
        let th = r.thread as usize;
        if th >= self.threads.len() {
            self.threads.resize(th + 1, ThreadState::default());
        }
        let st = &mut self.threads[th];
        let t = if window == 0 {
            let t0 = *self.t0.get_or_insert(r.time_ns);
            r.time_ns.saturating_sub(t0) as f64
        } else {
            if st.ring.len() != window {
                st.ring = vec![0.0; window];
            }
            st.last_issue.max(st.ring[st.pos]).max(st.barrier)
        };
        let c = sys.submit(&Request {
            time_ns: t,
            op: r.op,
            addr: r.addr,
            size: r.size,
            thread: r.thread,
        });
        if window > 0 {
            st.ring[st.pos] = c.done_ns;
            st.pos = (st.pos + 1) % window;
            st.last_issue = t;
            if r.op.is_fence() && r.op != Op::OFence {
                st.barrier = c.done_ns;
            }
        }
        self.summary.requests += 1;
        self.summary.end_ns = self.summary.end_ns.max(c.done_ns);
    }

    /// Simulate a whole stream; `progress` is called every 2^20 records
    /// with the count so far.
    pub fn run<I>(
        &mut self,
        sys: &mut System,
        records: I,
        mut progress: impl FnMut(u64),
    ) -> Result<Summary, Error>
    where
        I: IntoIterator<Item = Result<Record, pmlab_trace::Error>>,
    {
        let mut n: u64 = 0;
        for r in records {
            self.step(sys, &r?);
            n += 1;
            if n & ((1 << 20) - 1) == 0 {
                progress(n);
            }
        }
        Ok(self.summary.clone())
    }

    /// The summary so far.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_reject() {
        assert_eq!(Mode::parse("closed").unwrap(), Mode::Closed);
        assert_eq!(Mode::parse("open:64").unwrap(), Mode::Open(64));
        assert_eq!(Mode::parse("timed").unwrap(), Mode::Timed);
        for bad in ["open", "open:0", "open:x", "fast"] {
            assert!(Mode::parse(bad)
                .unwrap_err()
                .to_string()
                .contains("closed, open:N"));
        }
    }
}
