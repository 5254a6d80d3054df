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
    fn write(&mut self, addr: u64, t: f64, order: super::Order) -> f64 {
        self.inner.write(addr, t + self.write_extra, order)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::stub::stub;

    #[test]
    fn reads_pay_the_fixed_extra_on_top_of_the_device() {
        let (inner, log) = stub(80.0, 10.0);
        let mut f = Fixed {
            inner,
            read_extra: 200.0,
            write_extra: 0.0,
        };
        // Quartz: 80 ns of DRAM plus 200 ns.
        assert_eq!(f.read(0x40, 1000.0), 1280.0);
        assert_eq!(log.borrow().reads, vec![(0x40, 1000.0)]);
        // Without a write extra, writes pass straight through.
        assert_eq!(f.write(0x80, 5.0, crate::device::Order::epoch(7)), 15.0);
        assert_eq!(log.borrow().writes, vec![(0x80, 5.0, 7)]);
    }

    #[test]
    fn writes_arrive_late_by_the_write_extra() {
        let (inner, log) = stub(80.0, 10.0);
        let mut f = Fixed {
            inner,
            read_extra: 0.0,
            write_extra: 30.0,
        };
        assert_eq!(f.write(0x80, 5.0, crate::device::Order::epoch(1)), 45.0);
        assert_eq!(log.borrow().writes, vec![(0x80, 35.0, 1)]);
        assert_eq!(f.read(0, 0.0), 80.0);
        // Drain and statistics are the device's.
        assert_eq!(f.drain(100.0), 105.0);
        let mut s = Stats::new("dimm");
        f.stats(&mut s);
        assert_eq!(s.get("inner.stub_reads"), Some(1.0));
        f.reset_stats();
        assert_eq!(log.borrow().resets, 1);
    }

    #[test]
    fn builds_from_parameters() {
        let t: toml::Table = toml::from_str(
            "impl = \"fixed-latency\"\nread_extra_ns = 200.0\n[inner]\nimpl = \"ddr4\"\n",
        )
        .unwrap();
        let f = Fixed::build(&mut Params::new("dimm", t).unwrap()).unwrap();
        assert_eq!((f.read_extra, f.write_extra), (200.0, 0.0));
        let t: toml::Table = toml::from_str(
            "impl = \"fixed-latency\"\nread_extra_ns = -1.0\n[inner]\nimpl = \"ddr4\"\n",
        )
        .unwrap();
        assert!(Fixed::build(&mut Params::new("dimm", t).unwrap()).is_err());
    }
}
