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

/// A memory device (a DIMM or a CXL memory device).
pub trait Device {
    /// A 64-byte read arriving at the device at `t`; returns the time its
    /// data is back at the controller's side of the device.
    fn read(&mut self, addr: u64, t: f64) -> f64;
    /// A 64-byte write offered by the controller at `t`; returns the time
    /// the device accepted it (the controller's queue slot is free then).
    /// `epoch` counts the fences the controller has seen before the write
    /// was accepted: writes of different epochs never combine (LENS III-C:
    /// an mfence flushes the WPQ and the LSQ).
    fn write(&mut self, addr: u64, t: f64, epoch: u64) -> f64;
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
        /// (address, arrival time, epoch) of every write.
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
        fn write(&mut self, addr: u64, t: f64, epoch: u64) -> f64 {
            self.log.borrow_mut().writes.push((addr, t, epoch));
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
