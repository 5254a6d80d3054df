//! `ddr4`: a DDR4 DIMM (one rank) with banks, open-page row buffers, the
//! core timing constraints (tCL, tCWL, tRCD, tRP, tRAS, burst) and
//! all-bank refresh (tREFI, tRFC). Used for plain DRAM and for the DRAM
//! inside an NVRAM DIMM.
//!
//! Address mapping (device-local): `[row | bank | column]`, so that
//! consecutive lines stay in one row (sequential accesses hit the row
//! buffer) and consecutive rows rotate over banks.

use super::Device;
use crate::config::Params;
use crate::stats::Stats;
use crate::Error;

#[derive(Clone, Copy)]
struct Bank {
    open_row: Option<u64>,
    /// Earliest time of the next column command.
    col_ready: f64,
    /// Time of the last activate (for tRAS).
    act_at: f64,
    /// Earliest time of the next activate (after a precharge).
    act_ready: f64,
    /// Refresh interval index of the last access.
    epoch: u64,
}

/// Timing parameters, in ns.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// CAS latency (read command to data).
    pub cl: f64,
    /// CAS write latency.
    pub cwl: f64,
    /// Activate to column command.
    pub rcd: f64,
    /// Precharge to activate.
    pub rp: f64,
    /// Activate to precharge.
    pub ras: f64,
    /// Data burst of one 64-byte line.
    pub burst: f64,
    /// Refresh interval.
    pub refi: f64,
    /// Refresh cycle time (all banks busy).
    pub rfc: f64,
}

/// A DDR4 DIMM.
pub struct Ddr4 {
    t: Timing,
    banks: Vec<Bank>,
    row_lines: u64,
    bus_free: f64,
    extra: f64,
    closed_page: bool,
    // stats
    reads: u64,
    writes: u64,
    row_hits: u64,
    row_misses: u64,
    row_empty: u64,
    refresh_waits: u64,
    busy_ns: f64,
}

impl Ddr4 {
    /// Build from parameters.
    pub fn build(p: &mut Params) -> Result<Ddr4, Error> {
        let tck = p.positive_ns(
            "tck",
            0.75,
            "clock period (DDR4-2666: 1/1333 MHz; JEDEC JESD79-4)",
        )?;
        let cl = p.count(
            "cl",
            19,
            1,
            100,
            "CAS latency in clocks (DDR4-2666 speed bin 19-19-19; JESD79-4)",
        )? as f64
            * tck;
        let cwl = p.count(
            "cwl",
            14,
            1,
            100,
            "CAS write latency in clocks (JESD79-4, 2666 with 1tCK preamble)",
        )? as f64
            * tck;
        let rcd = p.count(
            "trcd",
            19,
            1,
            100,
            "activate-to-read/write in clocks (speed bin 19-19-19)",
        )? as f64
            * tck;
        let rp = p.count(
            "trp",
            19,
            1,
            100,
            "precharge period in clocks (speed bin 19-19-19)",
        )? as f64
            * tck;
        let ras = p.ns(
            "tras",
            32.0,
            "activate-to-precharge minimum (JESD79-4: 32 ns)",
        )?;
        let burst = p.count(
            "burst_clocks",
            4,
            1,
            64,
            "clocks to transfer one 64 B line (BL8 on a 64-bit bus)",
        )? as f64
            * tck;
        let refi = p.ns(
            "trefi",
            7800.0,
            "average refresh interval (JESD79-4: 7.8 us)",
        )?;
        let rfc = p.ns(
            "trfc",
            350.0,
            "refresh cycle time of an 8 Gb die (JESD79-4: 350 ns)",
        )?;
        let banks = p.count("banks", 16, 1, 1024, "banks per rank (4 bank groups x 4)")?;
        let row = p.bytes(
            "row_bytes",
            8192,
            64,
            "row (page) size across the rank (8 KiB for x8 chips)",
        )?;
        let extra = p.ns(
            "extra_ns",
            0.0,
            "fixed added latency on every read (PHY, buffers)",
        )?;
        let policy = p.choice(
            "page_policy",
            "open",
            &["open", "closed"],
            "row buffer policy",
        )?;
        if rfc >= refi {
            return Err(Error::config(format!(
                "parameter '{}.trfc' ({rfc} ns) must be below trefi ({refi} ns)",
                p.path()
            )));
        }
        Ok(Ddr4 {
            t: Timing {
                cl,
                cwl,
                rcd,
                rp,
                ras,
                burst,
                refi,
                rfc,
            },
            banks: vec![
                Bank {
                    open_row: None,
                    col_ready: 0.0,
                    act_at: f64::NEG_INFINITY,
                    act_ready: 0.0,
                    epoch: 0
                };
                banks as usize
            ],
            row_lines: (row / 64).max(1),
            bus_free: 0.0,
            extra,
            closed_page: policy == "closed",
            reads: 0,
            writes: 0,
            row_hits: 0,
            row_misses: 0,
            row_empty: 0,
            refresh_waits: 0,
            busy_ns: 0.0,
        })
    }

    /// The timing in use.
    pub fn timing(&self) -> Timing {
        self.t
    }

    /// Issue one column access; returns the end of its data burst.
    fn access(&mut self, addr: u64, t: f64, write: bool) -> f64 {
        let line = addr >> 6;
        let nb = self.banks.len() as u64;
        let bank_i = ((line / self.row_lines) % nb) as usize;
        let row = line / self.row_lines / nb;
        // All-bank refresh every tREFI: a command may not issue inside
        // [k*tREFI, k*tREFI + tRFC), and refresh closes every row.
        let mut t = t;
        let k = (t / self.t.refi).floor();
        if t - k * self.t.refi < self.t.rfc && k >= 1.0 {
            t = k * self.t.refi + self.t.rfc;
            self.refresh_waits += 1;
        }
        let epoch = (t / self.t.refi) as u64;
        let tm = self.t;
        let b = &mut self.banks[bank_i];
        if b.epoch != epoch {
            b.epoch = epoch;
            b.open_row = None;
            b.act_ready = b.act_ready.max(epoch as f64 * tm.refi + tm.rfc);
        }
        let cas = match b.open_row {
            Some(r) if r == row => {
                self.row_hits += 1;
                t.max(b.col_ready)
            }
            Some(_) => {
                self.row_misses += 1;
                let pre = t.max(b.col_ready).max(b.act_at + tm.ras);
                let act = pre + tm.rp;
                b.act_at = act;
                act + tm.rcd
            }
            None => {
                self.row_empty += 1;
                let act = t.max(b.act_ready);
                b.act_at = act;
                act + tm.rcd
            }
        };
        b.open_row = Some(row);
        b.col_ready = cas + tm.burst;
        let data = (cas + if write { tm.cwl } else { tm.cl }).max(self.bus_free);
        self.bus_free = data + tm.burst;
        self.busy_ns += tm.burst;
        if self.closed_page {
            b.open_row = None;
            b.act_ready = (b.act_at + tm.ras).max(data + tm.burst) + tm.rp;
        }
        data + tm.burst
    }
}

impl Device for Ddr4 {
    fn read(&mut self, addr: u64, t: f64) -> f64 {
        self.reads += 1;
        self.access(addr, t, false) + self.extra
    }

    /// Accepted when the write command issues (its data burst follows
    /// tCWL later on the bus).
    fn write(&mut self, addr: u64, t: f64, _order: super::Order) -> f64 {
        self.writes += 1;
        self.access(addr, t, true) - self.t.burst - self.t.cwl
    }

    fn drain(&mut self, t: f64) -> f64 {
        t.max(self.bus_free)
    }

    fn stats(&self, s: &mut Stats) {
        s.set("reads", self.reads as f64, "count");
        s.set("writes", self.writes as f64, "count");
        let n = (self.row_hits + self.row_misses + self.row_empty).max(1) as f64;
        s.set("row_hit_rate", self.row_hits as f64 / n, "ratio");
        s.set("row_conflicts", self.row_misses as f64, "count");
        s.set("refresh_waits", self.refresh_waits as f64, "count");
        s.set("bus_busy", self.busy_ns, "ns");
    }

    fn reset_stats(&mut self) {
        self.reads = 0;
        self.writes = 0;
        self.row_hits = 0;
        self.row_misses = 0;
        self.row_empty = 0;
        self.refresh_waits = 0;
        self.busy_ns = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // DDR4-2666, speed bin 19-19-19, worked by hand from JESD79-4 (not
    // read back from the model): tCK = 1 / 1333.33 MHz = 0.75 ns, so
    // CL = tRCD = tRP = 19 x 0.75 = 14.25 ns; a 64 B line is a BL8 burst
    // of 4 clocks = 3 ns; tRAS 32 ns; tREFI 7.8 us; tRFC 350 ns (8 Gb).
    const CL: f64 = 14.25;
    const RCD: f64 = 14.25;
    const RP: f64 = 14.25;
    const RAS: f64 = 32.0;
    const BURST: f64 = 3.0;
    const REFI: f64 = 7800.0;
    const RFC: f64 = 350.0;

    fn dimm() -> Ddr4 {
        let mut t = toml::Table::new();
        t.insert("impl".into(), "ddr4".into());
        let mut p = Params::new("dram", t).unwrap();
        Ddr4::build(&mut p).unwrap()
    }

    #[test]
    fn defaults_are_jedec_ddr4_2666() {
        let tm = dimm().timing();
        let got = [tm.cl, tm.rcd, tm.rp, tm.ras, tm.burst, tm.refi, tm.rfc];
        assert_eq!(got, [CL, RCD, RP, RAS, BURST, REFI, RFC]);
        assert_eq!(tm.cwl, 10.5, "CWL 14 clocks");
    }

    #[test]
    fn row_hit_costs_cl_plus_burst() {
        let mut d = dimm();
        // Empty bank: activate, then read: 100 + 14.25 + 14.25 + 3.
        assert_eq!(d.read(0, 100.0), 131.5);
        // Same row: 200 + 14.25 + 3.
        assert_eq!(d.read(64, 200.0), 217.25);
    }

    #[test]
    fn row_conflict_adds_trp_and_trcd() {
        let mut d = dimm();
        d.read(0, 100.0);
        // Same bank (16 banks x 8 KiB rows), next row: precharge,
        // activate, read: 300 + 14.25 x 3 + 3.
        assert_eq!(d.read(16 * 8192, 300.0), 345.75);
    }

    #[test]
    fn precharge_respects_tras() {
        let mut d = dimm();
        d.read(0, 100.0); // activate at 100
                          // A conflicting read right away precharges at 100 + tRAS = 132
                          // (tRAS - 1 ns would be 131: not allowed), then tRP, tRCD, CL and
                          // the burst: 132 + 14.25 x 3 + 3.
        assert_eq!(d.read(16 * 8192, 101.0), 177.75);
        // Offered at tRAS exactly, the same cost from then on.
        let mut d = dimm();
        d.read(0, 100.0);
        assert_eq!(d.read(16 * 8192, 132.0), 177.75);
    }

    #[test]
    fn commands_wait_out_refresh() {
        let mut d = dimm();
        // At 7801 ns a refresh (7800..8150) is under way: the read
        // activates at 8150: 8150 + 14.25 + 14.25 + 3.
        assert_eq!(d.read(0, REFI + 1.0), 8181.5);
        // Well after it, the row is still open: a row hit.
        assert_eq!(d.read(64, 9150.0), 9150.0 + 14.25 + 3.0);
    }
}
