//! `cxl`: a CXL type-3 memory expander: a device (normally `ddr4`) behind
//! a link with its own one-way latency and per-direction bandwidth.

use super::Device;
use crate::config::Params;
use crate::stats::Stats;
use crate::Error;

/// A device behind a CXL link.
pub struct Cxl {
    inner: Box<dyn Device>,
    link_ns: f64,
    /// ns per 64-byte flit payload in each direction.
    xfer: f64,
    tx_free: f64,
    rx_free: f64,
    reads: u64,
    writes: u64,
    link_wait: f64,
}

impl Cxl {
    /// Build from parameters (child table `inner`).
    pub fn build(p: &mut Params) -> Result<Cxl, Error> {
        let link_ns = p.ns(
            "link_ns",
            35.0,
            "one-way latency of link, ports and the device controller",
        )?;
        let bw = p.bandwidth("link_gbs", 32.0, "usable bandwidth per direction")?;
        let inner = p.device("inner")?;
        Ok(Cxl {
            inner,
            link_ns,
            xfer: 64.0 / bw,
            tx_free: 0.0,
            rx_free: 0.0,
            reads: 0,
            writes: 0,
            link_wait: 0.0,
        })
    }
}

impl Device for Cxl {
    fn read(&mut self, addr: u64, t: f64) -> f64 {
        self.reads += 1;
        let data = self.inner.read(addr, t + self.link_ns);
        let start = data.max(self.rx_free);
        self.link_wait += start - data;
        self.rx_free = start + self.xfer;
        start + self.xfer + self.link_ns
    }
    fn write(&mut self, addr: u64, t: f64, epoch: u64) -> f64 {
        self.writes += 1;
        let start = t.max(self.tx_free);
        self.link_wait += start - t;
        self.tx_free = start + self.xfer;
        self.inner
            .write(addr, start + self.xfer + self.link_ns, epoch);
        start + self.xfer
    }
    fn drain(&mut self, t: f64) -> f64 {
        self.inner.drain(t.max(self.tx_free) + self.link_ns)
    }
    fn stats(&self, s: &mut Stats) {
        s.set("reads", self.reads as f64, "count");
        s.set("writes", self.writes as f64, "count");
        s.set("link_wait", self.link_wait, "ns");
        let mut c = Stats::new("inner");
        self.inner.stats(&mut c);
        s.push(c);
    }
    fn reset_stats(&mut self) {
        self.reads = 0;
        self.writes = 0;
        self.link_wait = 0.0;
        self.inner.reset_stats()
    }
}
