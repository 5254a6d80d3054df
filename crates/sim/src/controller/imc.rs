//! `imc`: an integrated memory controller with one channel per device,
//! interleaved at a configurable granularity. Each channel has a read
//! pending queue (bounded outstanding reads) and a write pending queue (the
//! ADR persistence domain) that drains to its device in FIFO order over a
//! bus with a per-line transfer time, combining writes to a line that is
//! still waiting, unless the writing thread fenced since that line was
//! queued (the fence order, [`Order`], travels with each line to the
//! device; another thread's fence does not stop combining). Reads of a
//! line still in the WPQ are forwarded from it.
//!
//! Write scheduling (`write_policy`):
//!
//! * `eager` (FCFS): a queued write leaves as soon as the bus and the
//!   device allow.
//! * `watermark`: writes are held (reads meet an idle device) until the WPQ
//!   holds `drain_high` lines, then the queue drains until empty; a fence
//!   releases every write before it; a full queue pushes out its oldest.
//!
//! The WPQ is evaluated lazily: an entry's departure is computed only when
//! a later arrival needs to know whether it is still there.

use super::Controller;
use crate::config::Params;
use crate::device::{Device, Order};
use crate::stats::Stats;
use crate::Error;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

struct WEntry {
    line: u64,
    ready: f64,
    /// When the scheduler lets it go (None: held by the watermark policy).
    release: Option<f64>,
    depart: Option<f64>,
    order: Order,
}

struct Channel {
    dev: Box<dyn Device>,
    /// Sum over departed WPQ entries of their time in the queue (line-ns).
    occupancy_ns: f64,
    span: Option<(f64, f64)>,
    wpq: VecDeque<WEntry>,
    /// Completion times (f64 bits; all non-negative) of outstanding reads.
    rpq: BinaryHeap<Reverse<u64>>,
    bus_free: f64,
    draining: bool,
}

#[derive(Clone, Copy)]
struct Policy {
    hold: bool,
    high: usize,
}

/// The integrated memory controller.
pub struct Imc {
    channels: Vec<Channel>,
    gran: u64,
    wpq_cap: usize,
    rpq_cap: usize,
    xfer: f64,
    fwd_ns: f64,
    hold: bool,
    high: usize,
    /// Fences seen so far, of all threads.
    fences: u64,
    /// Per thread: `fences` just after its last fence (a write joins only
    /// entries queued since then).
    floors: Vec<u64>,
    // stats
    reads: u64,
    writes: u64,
    merges: u64,
    forwards: u64,
    wpq_full: u64,
    wpq_wait: f64,
    rpq_wait: f64,
    occ_sum: u64,
}

impl Imc {
    /// Build from parameters (child table `dimm`, instantiated once per
    /// channel).
    pub fn build(p: &mut Params) -> Result<Imc, Error> {
        let n = p.count("channels", 1, 1, 64, "channels, one device each")?;
        let gran = p.bytes(
            "interleave",
            4096,
            64,
            "interleaving granularity across channels (LENS III-D: 4 KiB)",
        )?;
        if !gran.is_power_of_two() {
            return Err(Error::config(format!(
                "parameter '{}.interleave' ({gran} B) must be a power of two",
                p.path()
            )));
        }
        let wpq = p.bytes(
            "wpq_bytes",
            512,
            64,
            "write pending queue per channel (LENS III-C: 512 B)",
        )?;
        let rpq = p.count("rpq_entries", 32, 1, 4096, "outstanding reads per channel")?;
        let xfer = p.ns(
            "write_xfer_ns",
            20.0,
            "bus time to move one 64 B line from the WPQ to the device",
        )?;
        let fwd = p.ns("forward_ns", 10.0, "latency of a read served from the WPQ")?;
        let policy = p.choice(
            "write_policy",
            "eager",
            &["eager", "watermark"],
            "write scheduling: eager (FCFS) or watermark (hold, then drain)",
        )?;
        let high = p.count(
            "drain_high",
            wpq / 64,
            1,
            wpq / 64,
            "watermark policy: queued lines that start a drain (default: a full WPQ)",
        )?;
        let mut channels = Vec::with_capacity(n as usize);
        for _ in 0..n {
            channels.push(Channel {
                dev: p.device("dimm")?,
                wpq: VecDeque::new(),
                rpq: BinaryHeap::new(),
                bus_free: 0.0,
                draining: false,
                occupancy_ns: 0.0,
                span: None,
            });
        }
        Ok(Imc {
            channels,
            gran,
            wpq_cap: (wpq / 64) as usize,
            rpq_cap: rpq as usize,
            xfer,
            fwd_ns: fwd,
            hold: policy == "watermark",
            high: high as usize,
            fences: 0,
            floors: Vec::new(),
            reads: 0,
            writes: 0,
            merges: 0,
            forwards: 0,
            wpq_full: 0,
            wpq_wait: 0.0,
            rpq_wait: 0.0,
            occ_sum: 0,
        })
    }

    #[inline]
    fn route(&self, addr: u64) -> (usize, u64) {
        let n = self.channels.len() as u64;
        if n == 1 {
            return (0, addr);
        }
        let chunk = addr / self.gran;
        (
            (chunk % n) as usize,
            (chunk / n) * self.gran + addr % self.gran,
        )
    }
}

impl Channel {
    /// Start the front entry's transfer to the device (computes its
    /// departure time).
    /// A held entry is let go at `force_at`.
    fn launch_front(&mut self, xfer: f64, force_at: f64) -> f64 {
        let front = self.wpq.front_mut().expect("non-empty WPQ");
        if let Some(d) = front.depart {
            return d;
        }
        let offer = front
            .ready
            .max(self.bus_free)
            .max(front.release.unwrap_or(force_at));
        let accepted = self.dev.write(front.line, offer, front.order);
        let depart = accepted + xfer;
        front.depart = Some(depart);
        self.bus_free = depart;
        depart
    }

    /// Remove the front entry (which has a departure time), accounting its
    /// time in the queue.
    fn pop(&mut self) {
        if let Some(e) = self.wpq.pop_front() {
            let d = e.depart.unwrap_or(e.ready);
            self.occupancy_ns += d - e.ready;
            let (lo, hi) = self.span.unwrap_or((e.ready, d));
            self.span = Some((lo.min(e.ready), hi.max(d)));
        }
        if self.wpq.is_empty() {
            self.draining = false;
        }
    }

    /// Retire every WPQ entry that has left by `t`.
    fn advance(&mut self, t: f64, xfer: f64) {
        while let Some(front) = self.wpq.front() {
            let d = match front.depart {
                Some(d) => d,
                None => {
                    let Some(release) = front.release else { break };
                    if front.ready.max(self.bus_free).max(release) > t {
                        break;
                    }
                    self.launch_front(xfer, release)
                }
            };
            if d <= t {
                self.pop();
            } else {
                break;
            }
        }
    }

    /// Append a write accepted at `at`, applying the scheduling policy.
    fn push(&mut self, line: u64, at: f64, order: Order, pol: Policy) {
        let release = if !pol.hold || self.draining {
            Some(at)
        } else {
            None
        };
        self.wpq.push_back(WEntry {
            line,
            ready: at,
            release,
            depart: None,
            order,
        });
        if pol.hold && !self.draining && self.wpq.len() >= pol.high {
            self.draining = true;
            for e in self.wpq.iter_mut() {
                e.release.get_or_insert(at);
            }
        }
    }
}

impl Controller for Imc {
    fn read(&mut self, addr: u64, t: f64) -> f64 {
        self.reads += 1;
        let (c, dev_addr) = self.route(addr);
        let (xfer, cap, fwd) = (self.xfer, self.rpq_cap, self.fwd_ns);
        let ch = &mut self.channels[c];
        ch.advance(t, xfer);
        let line = dev_addr & !63;
        if ch.wpq.iter().any(|e| e.line == line) {
            self.forwards += 1;
            return t + fwd;
        }
        while let Some(Reverse(b)) = ch.rpq.peek() {
            if f64::from_bits(*b) <= t {
                ch.rpq.pop();
            } else {
                break;
            }
        }
        let mut start = t;
        if ch.rpq.len() >= cap {
            let Reverse(b) = ch.rpq.pop().expect("full RPQ");
            start = f64::from_bits(b).max(t);
            self.rpq_wait += start - t;
        }
        let done = ch.dev.read(line, start);
        ch.rpq.push(Reverse(done.max(0.0).to_bits()));
        done
    }

    fn write(&mut self, addr: u64, t: f64, thread: u32) -> f64 {
        self.writes += 1;
        let (c, dev_addr) = self.route(addr);
        let order = Order {
            stamp: self.fences,
            floor: self.floors.get(thread as usize).copied().unwrap_or(0),
        };
        let (xfer, cap) = (self.xfer, self.wpq_cap);
        let pol = Policy {
            hold: self.hold,
            high: self.high,
        };
        let ch = &mut self.channels[c];
        ch.advance(t, xfer);
        self.occ_sum += ch.wpq.len() as u64;
        let line = dev_addr & !63;
        if ch
            .wpq
            .iter()
            .any(|e| e.line == line && order.may_join(e.order.stamp) && e.depart.is_none())
        {
            self.merges += 1;
            return t;
        }
        let mut at = t;
        if ch.wpq.len() >= cap {
            self.wpq_full += 1;
        }
        while ch.wpq.len() >= cap {
            let d = ch.launch_front(xfer, t);
            at = at.max(d);
            ch.pop();
        }
        self.wpq_wait += at - t;
        ch.push(line, at, order, pol);
        at
    }

    fn fence(&mut self, t: f64, thread: u32) {
        let xfer = self.xfer;
        for ch in &mut self.channels {
            ch.advance(t, xfer);
            // A fence lets every earlier write go (LENS III-C: an mfence
            // flushes the WPQ).
            for e in ch.wpq.iter_mut() {
                e.release.get_or_insert(t);
            }
        }
        self.fences += 1;
        let th = thread as usize;
        if th >= self.floors.len() {
            self.floors.resize(th + 1, 0);
        }
        self.floors[th] = self.fences;
    }

    fn drain(&mut self, t: f64) -> f64 {
        let xfer = self.xfer;
        let mut end = t;
        for ch in &mut self.channels {
            while !ch.wpq.is_empty() {
                end = end.max(ch.launch_front(xfer, t));
                ch.pop();
            }
            end = end.max(ch.dev.drain(t));
        }
        end
    }

    fn stats(&self, s: &mut Stats) {
        s.set("reads", self.reads as f64, "count");
        s.set("writes", self.writes as f64, "count");
        s.set("wpq_merges", self.merges as f64, "count");
        s.set("wpq_read_forwards", self.forwards as f64, "count");
        s.set("wpq_full_arrivals", self.wpq_full as f64, "count");
        s.set("wpq_wait", self.wpq_wait, "ns");
        s.set(
            "wpq_occupancy_seen_by_writes",
            self.occ_sum as f64 / self.writes.max(1) as f64,
            "lines",
        );
        let (occ, span) = self.channels.iter().fold((0.0, 0.0), |(o, sp), ch| {
            (
                o + ch.occupancy_ns,
                sp + ch.span.map_or(0.0, |(lo, hi)| hi - lo),
            )
        });
        s.set(
            "wpq_mean_occupancy",
            if span > 0.0 { occ / span } else { 0.0 },
            "lines per channel",
        );
        s.set("rpq_wait", self.rpq_wait, "ns");
        for (i, ch) in self.channels.iter().enumerate() {
            let mut c = Stats::new(format!("dimm{i}"));
            ch.dev.stats(&mut c);
            s.push(c);
        }
    }

    fn reset_stats(&mut self) {
        for ch in &mut self.channels {
            ch.occupancy_ns = 0.0;
            ch.span = None;
        }
        self.reads = 0;
        self.writes = 0;
        self.merges = 0;
        self.forwards = 0;
        self.wpq_full = 0;
        self.wpq_wait = 0.0;
        self.rpq_wait = 0.0;
        self.occ_sum = 0;
        for ch in &mut self.channels {
            ch.dev.reset_stats();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imc(extra: &str) -> Imc {
        let mut t: toml::Table =
            "impl = \"imc\"\nwpq_bytes = 128\nwrite_xfer_ns = 10.0\n[dimm]\nimpl = \"ddr4\"\n"
                .parse()
                .unwrap();
        t.extend(extra.parse::<toml::Table>().unwrap());
        let mut p = Params::new("controller", t).unwrap();
        let c = Imc::build(&mut p).unwrap();
        p.finish().unwrap();
        c
    }

    #[test]
    fn wpq_full_blocks_until_the_front_departs() {
        let mut c = imc("");
        assert_eq!(c.write(0, 0.0, 0), 0.0);
        assert_eq!(c.write(64 * 1000, 0.0, 0), 0.0);
        // Two lines fill the 128 B WPQ: the third waits for the front to
        // leave: the DIMM accepts its write command after tRCD (the row is
        // closed), then the line takes one transfer time.
        let trcd = 19.0 * 0.75;
        assert_eq!(c.write(64 * 2000, 0.0, 0), trcd + 10.0);
        // Not blocked when offered after the WPQ drained.
        assert_eq!(c.write(64 * 3000, 500.0, 0), 500.0);
    }

    #[test]
    fn wpq_merges_and_forwards_until_a_fence() {
        let mut c = imc("");
        c.write(0, 0.0, 0); // goes to the DIMM first
        c.write(64, 0.0, 0); // waits behind it
        c.write(64, 0.0, 0);
        assert_eq!(c.merges, 1);
        assert_eq!(c.read(64, 0.0), c.fwd_ns, "forwarded from the WPQ");
        c.fence(0.0, 0);
        c.write(64, 0.0, 0);
        assert_eq!(c.merges, 1, "sealed by the fence");
    }

    #[test]
    fn a_fence_seals_only_its_own_threads_writes() {
        let mut c = imc("");
        c.write(0, 0.0, 0); // goes to the DIMM first
        c.write(64, 0.0, 0); // waits behind it
        c.fence(0.0, 1);
        c.write(64, 0.0, 0);
        assert_eq!(c.merges, 1, "thread 1's fence does not order thread 0");
        c.fence(0.0, 0);
        c.write(64, 0.0, 0);
        assert_eq!(c.merges, 1, "thread 0's own fence does");
        c.write(64, 0.0, 1);
        assert_eq!(
            c.merges, 2,
            "thread 1 joins the entry queued after its fence"
        );
    }

    #[test]
    fn watermark_holds_writes_until_drain_high() {
        let mut c = imc("wpq_bytes = 256\nwrite_policy = \"watermark\"\ndrain_high = 3");
        c.write(0, 0.0, 0);
        c.write(64 * 1000, 0.0, 0);
        c.channels[0].advance(1000.0, c.xfer);
        assert_eq!(c.channels[0].wpq.len(), 2, "below the watermark: held");
        c.write(64 * 2000, 1000.0, 0);
        c.channels[0].advance(999.0 + 1.0, c.xfer);
        c.channels[0].advance(5000.0, c.xfer);
        assert!(
            c.channels[0].wpq.is_empty(),
            "the third write started a drain"
        );
    }

    #[test]
    fn watermark_releases_writes_at_a_fence() {
        let mut c = imc("wpq_bytes = 256\nwrite_policy = \"watermark\"");
        c.write(0, 0.0, 0);
        c.channels[0].advance(1000.0, c.xfer);
        assert_eq!(c.channels[0].wpq.len(), 1);
        c.fence(1000.0, 0);
        c.channels[0].advance(1000.0 + 5.0, c.xfer);
        assert_eq!(
            c.channels[0].wpq.len(),
            1,
            "not before tRCD after the fence"
        );
        c.channels[0].advance(2000.0, c.xfer);
        assert!(c.channels[0].wpq.is_empty());
    }

    #[test]
    fn interleaving_routes_by_granularity() {
        let c = imc("channels = 2\ninterleave = 4096");
        assert_eq!(c.route(0), (0, 0));
        assert_eq!(c.route(4096), (1, 0));
        assert_eq!(c.route(8192 + 64), (0, 4096 + 64));
    }

    #[test]
    fn rpq_bounds_outstanding_reads() {
        let mut c = imc("rpq_entries = 1");
        let a = c.read(0, 0.0);
        let b = c.read(64 * 4096, 0.0);
        assert!(b >= a, "the second read starts when the first completes");
    }
}
