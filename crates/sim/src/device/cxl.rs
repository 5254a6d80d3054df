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
    fn write(&mut self, addr: u64, t: f64, order: super::Order) -> f64 {
        self.writes += 1;
        let start = t.max(self.tx_free);
        self.link_wait += start - t;
        self.tx_free = start + self.xfer;
        self.inner
            .write(addr, start + self.xfer + self.link_ns, order);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::stub::stub;

    /// A CXL link of 35 ns one way and 32 GB/s (a 64 B flit every 2 ns)
    /// in front of a stub of 50 ns reads and 10 ns write acceptance.
    fn link() -> (
        Cxl,
        std::rc::Rc<std::cell::RefCell<crate::device::stub::Log>>,
    ) {
        let (inner, log) = stub(50.0, 10.0);
        let c = Cxl {
            inner,
            link_ns: 35.0,
            xfer: 2.0,
            tx_free: 0.0,
            rx_free: 0.0,
            reads: 0,
            writes: 0,
            link_wait: 0.0,
        };
        (c, log)
    }

    #[test]
    fn a_read_crosses_the_link_both_ways_plus_one_flit() {
        let (mut c, log) = link();
        // 100 + 35 there, 50 in the device, 2 for the flit, 35 back.
        assert_eq!(c.read(0x40, 100.0), 222.0);
        assert_eq!(log.borrow().reads, vec![(0x40, 135.0)]);
    }

    #[test]
    fn reads_at_once_queue_for_the_return_flits() {
        let (mut c, _) = link();
        assert_eq!(c.read(0, 0.0), 122.0);
        // Its data is back at 85 as well, but the flit before holds the
        // link until 87.
        assert_eq!(c.read(64, 0.0), 124.0);
        let mut s = Stats::new("cxl");
        c.stats(&mut s);
        assert_eq!(s.get("link_wait"), Some(2.0));
        assert_eq!(s.get("reads"), Some(2.0));
        assert_eq!(s.get("inner.stub_reads"), Some(2.0));
    }

    #[test]
    fn a_write_is_accepted_once_its_flit_is_sent() {
        let (mut c, log) = link();
        assert_eq!(c.write(0x80, 10.0, crate::device::Order::epoch(3)), 12.0);
        // Two at once: the second flit waits for the first.
        assert_eq!(c.write(0xc0, 10.0, crate::device::Order::epoch(3)), 14.0);
        // The device sees each a link crossing after its flit.
        assert_eq!(log.borrow().writes, vec![(0x80, 47.0, 3), (0xc0, 49.0, 3)]);
        // A drain starts after the last flit and crosses the link.
        assert_eq!(c.drain(0.0), 14.0 + 35.0 + 5.0);
        assert_eq!(log.borrow().drains, vec![49.0]);
        c.reset_stats();
        assert_eq!(log.borrow().resets, 1);
        let mut s = Stats::new("cxl");
        c.stats(&mut s);
        assert_eq!(s.get("writes"), Some(0.0));
    }

    #[test]
    fn builds_from_parameters_with_pond_defaults() {
        let t: toml::Table = toml::from_str("impl = \"cxl\"\n[inner]\nimpl = \"ddr4\"\n").unwrap();
        let mut p = Params::new("dimm", t).unwrap();
        let c = Cxl::build(&mut p).unwrap();
        assert_eq!(c.link_ns, 35.0);
        // 32 GB/s: 64 B in 2 ns.
        assert_eq!(c.xfer, 2.0);
        let t: toml::Table =
            toml::from_str("impl = \"cxl\"\nlink_gbs = 16.0\n[inner]\nimpl = \"ddr4\"\n").unwrap();
        let c = Cxl::build(&mut Params::new("dimm", t).unwrap()).unwrap();
        assert_eq!(c.xfer, 4.0);
    }
}
