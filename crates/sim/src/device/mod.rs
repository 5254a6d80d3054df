//! Memory devices: what sits behind one channel of a memory controller.
//!
//! Contract of [`Device`]: time is in nanoseconds of simulated time; the
//! caller offers requests in (nearly) non-decreasing time order and a device
//! treats an earlier time as "now". Addresses are device-local (the
//! controller has already removed the interleaving bits) and 64-byte
//! aligned. A device computes each request's completion from when its
//! resources (banks, buses, queues, media) become free; it never scans idle
//! state cycle by cycle.
//!
//! Implementations, one per file, registered in `registry.rs`:
//! `ddr4` ([`ddr4`]), `nvram` ([`nvram`]), `cxl` ([`cxl`]), `fixed-latency`
//! ([`fixed`]).

use crate::stats::Stats;

pub mod cxl;
pub mod ddr4;
pub mod fixed;
pub mod nvram;

/// Fence ordering of one write, as the controller saw it.
///
/// `stamp` is the number of fences (of any thread) before the write; a
/// buffered entry keeps the stamp of the write that created it. `floor` is
/// the stamp right after the writing thread's own last fence. A write may
/// join a buffered entry only if that entry was created after the thread's
/// last fence (`entry stamp >= floor`): a fence orders its own thread's
/// writes, and another thread's fence does not stop combining. With one
/// thread, `stamp == floor` and this is "same epoch".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Order {
    /// Fences seen (all threads) when the write arrived.
    pub stamp: u64,
    /// Stamp just after the writing thread's last fence.
    pub floor: u64,
}

impl Order {
    /// One thread, `fences` fences before this write.
    pub fn epoch(fences: u64) -> Order {
        Order {
            stamp: fences,
            floor: fences,
        }
    }

    /// Whether the write may combine with an entry created at `stamp`.
    #[inline]
    pub fn may_join(self, stamp: u64) -> bool {
        stamp >= self.floor
    }
}

/// A memory device (a DIMM or a CXL memory device).
pub trait Device {
    /// A 64-byte read arriving at the device at `t`; returns the time its
    /// data is back at the controller's side of the device.
    fn read(&mut self, addr: u64, t: f64) -> f64;
    /// A 64-byte write offered by the controller at `t`; returns the time
    /// the device accepted it (the controller's queue slot is free then).
    /// `order` says which buffered writes it may combine with (LENS III-C:
    /// an mfence flushes the WPQ and the LSQ, for the fencing thread).
    fn write(&mut self, addr: u64, t: f64, order: Order) -> f64;
    /// Push every buffered write to the media, starting no earlier than
    /// `t`; returns when the last one got there.
    fn drain(&mut self, t: f64) -> f64;
    /// Append this device's statistics to `into`.
    fn stats(&self, into: &mut Stats);
    /// Zero the statistics (not the state).
    fn reset_stats(&mut self);
}

/// A device of fixed latencies that records what it was offered, for the
/// unit tests of devices that wrap another.
#[cfg(test)]
pub(crate) mod stub {
    use super::Device;
    use crate::stats::Stats;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// What a [`Stub`] was offered.
    #[derive(Default, Debug)]
    pub(crate) struct Log {
        /// (address, arrival time) of every read.
        pub(crate) reads: Vec<(u64, f64)>,
        /// (address, arrival time, order stamp) of every write.
        pub(crate) writes: Vec<(u64, f64, u64)>,
        /// Arrival time of every drain.
        pub(crate) drains: Vec<f64>,
        /// Calls of `reset_stats`.
        pub(crate) resets: u32,
    }

    /// Reads take `read_ns`; writes are accepted `write_ns` after they
    /// arrive; `drain` returns its time plus 5 ns.
    pub(crate) struct Stub {
        read_ns: f64,
        write_ns: f64,
        log: Rc<RefCell<Log>>,
    }

    /// A boxed stub and a handle on its log.
    pub(crate) fn stub(read_ns: f64, write_ns: f64) -> (Box<dyn Device>, Rc<RefCell<Log>>) {
        let log = Rc::new(RefCell::new(Log::default()));
        let s = Stub {
            read_ns,
            write_ns,
            log: log.clone(),
        };
        (Box::new(s), log)
    }

    impl Device for Stub {
        fn read(&mut self, addr: u64, t: f64) -> f64 {
            self.log.borrow_mut().reads.push((addr, t));
            t + self.read_ns
        }
        fn write(&mut self, addr: u64, t: f64, order: super::Order) -> f64 {
            self.log.borrow_mut().writes.push((addr, t, order.stamp));
            t + self.write_ns
        }
        fn drain(&mut self, t: f64) -> f64 {
            self.log.borrow_mut().drains.push(t);
            t + 5.0
        }
        fn stats(&self, into: &mut Stats) {
            into.set("stub_reads", self.log.borrow().reads.len() as f64, "count");
        }
        fn reset_stats(&mut self) {
            self.log.borrow_mut().resets += 1;
        }
    }
}
