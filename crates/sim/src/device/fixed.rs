//! `fixed-latency`: a device wrapping another (normally `ddr4`) and adding
//! a fixed latency to every read and, optionally, every write. This is
//! Quartz's model of slow memory (DRAM plus a fixed delay, no buffers).

use super::Device;
use crate::config::Params;
use crate::stats::Stats;
use crate::Error;

/// DRAM plus a fixed delay.
pub struct Fixed {
    inner: Box<dyn Device>,
    read_extra: f64,
    write_extra: f64,
}

impl Fixed {
    /// Build from parameters (child table `inner`).
    pub fn build(p: &mut Params) -> Result<Fixed, Error> {
        let read_extra = p.ns("read_extra_ns", 0.0, "latency added to every read")?;
        let write_extra = p.ns(
            "write_extra_ns",
            0.0,
            "latency added before a write is accepted",
        )?;
        let inner = p.device("inner")?;
        Ok(Fixed {
            inner,
            read_extra,
            write_extra,
        })
    }
}

impl Device for Fixed {
    fn read(&mut self, addr: u64, t: f64) -> f64 {
        self.inner.read(addr, t) + self.read_extra
    }
    fn write(&mut self, addr: u64, t: f64, epoch: u64) -> f64 {
        self.inner.write(addr, t + self.write_extra, epoch)
    }
    fn drain(&mut self, t: f64) -> f64 {
        self.inner.drain(t)
    }
    fn stats(&self, s: &mut Stats) {
        let mut c = Stats::new("inner");
        self.inner.stats(&mut c);
        s.push(c);
    }
    fn reset_stats(&mut self) {
        self.inner.reset_stats()
    }
}
