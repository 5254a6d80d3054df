//! The simulator target: the probes' request streams submitted to a
//! `pmlab-sim` [`System`], in closed loop (latency) or with a bounded
//! number of outstanding requests (bandwidth).
//!
//! Each pattern runs on a freshly built system, so points do not inherit
//! each other's buffer or wear-leveling state; warm-up passes fill the
//! buffers exactly as on real memory. Loads are 64-byte reads; stores are
//! non-temporal 64-byte writes, with an `sfence` after each block or after
//! each pass as the pattern says (as on the host).

use crate::pattern::{Fence, Issue, Op, Pattern, Timing, LINE};
use crate::{Error, ErrorKind, Target};
use pmlab_sim::{Op as SimOp, Request, System};

/// The simulator target.
pub struct Sim {
    label: String,
    toml: String,
    origin: String,
    description: String,
}

impl Sim {
    /// A target for the bundled preset `name`.
    pub fn preset(name: &str) -> Result<Sim, Error> {
        let p = pmlab_sim::presets::find(name)
            .map_err(|e| Error::new(ErrorKind::Sim, e.to_string()))?;
        Sim::from_toml(p.toml, &format!("preset {name}"), name)
    }

    /// A target for the configuration `text` (`origin` names it in errors,
    /// `label` in reports).
    pub fn from_toml(text: &str, origin: &str, label: &str) -> Result<Sim, Error> {
        let sys = System::from_toml(text, origin)
            .map_err(|e| Error::new(ErrorKind::Sim, e.to_string()))?;
        Ok(Sim {
            label: label.to_string(),
            toml: text.to_string(),
            origin: origin.to_string(),
            description: sys.description().to_string(),
        })
    }

    /// A target for the configuration file at `path`.
    pub fn from_file(path: &std::path::Path) -> Result<Sim, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read simulator config '{}': {e}", path.display()),
            )
        })?;
        Sim::from_toml(
            &text,
            &path.display().to_string(),
            &path.display().to_string(),
        )
    }

    /// The configuration text.
    pub fn toml(&self) -> &str {
        &self.toml
    }

    fn fresh(&self) -> Result<System, Error> {
        System::from_toml(&self.toml, &self.origin)
            .map_err(|e| Error::new(ErrorKind::Sim, e.to_string()))
    }
}

/// Issues requests and keeps the clock: closed loop, or a window of
/// outstanding completions.
struct Issuer {
    sys: System,
    window: Vec<f64>,
    pos: usize,
    now: f64,
    end: f64,
}

impl Issuer {
    fn submit(&mut self, op: SimOp, addr: u64, size: u32) {
        let t = if self.window.is_empty() {
            self.now
        } else {
            // The slot's previous request must have completed.
            self.now.max(self.window[self.pos])
        };
        let c = self.sys.submit(&Request::new(t, op, addr, size));
        if self.window.is_empty() {
            self.now = c.done_ns;
        } else {
            self.window[self.pos] = c.done_ns;
            self.pos = (self.pos + 1) % self.window.len();
            self.now = t;
        }
        self.end = self.end.max(c.done_ns);
    }

    /// Wait for everything in flight.
    fn settle(&mut self) {
        self.now = self.now.max(self.end);
        for w in &mut self.window {
            *w = self.now;
        }
    }
}

fn pass(is: &mut Issuer, p: &Pattern) {
    let per_block = p.fence == Fence::Block;
    let per_pass = p.fence == Fence::Pass;
    let stores = |is: &mut Issuer| {
        for &b in &p.order {
            let base = b as u64 * p.block_stride;
            for off in (0..p.block).step_by(LINE as usize) {
                is.submit(SimOp::NtWrite, base + off, LINE as u32);
            }
            if per_block {
                is.submit(SimOp::SFence, 0, 0);
            }
        }
        if per_pass {
            is.submit(SimOp::SFence, 0, 0);
        }
    };
    let loads = |is: &mut Issuer| {
        for &b in &p.order {
            let base = b as u64 * p.block_stride;
            for off in (0..p.block).step_by(LINE as usize) {
                is.submit(SimOp::Read, base + off, LINE as u32);
            }
        }
    };
    match p.op {
        Op::Load => loads(is),
        // Fenced once per run: the stream continues into the next pass.
        Op::Store if p.fence == Fence::Run => {
            stores(is);
            return;
        }
        Op::Store => stores(is),
        Op::Raw => {
            stores(is);
            if p.fence == Fence::Run {
                is.submit(SimOp::SFence, 0, 0);
            }
            is.settle();
            loads(is);
        }
    }
    is.settle();
}

/// The fence that ends a run of [`Fence::Run`] passes, and the wait for it.
fn end_run(is: &mut Issuer, p: &Pattern) {
    if p.fence == Fence::Run && p.op == Op::Store {
        is.submit(SimOp::SFence, 0, 0);
        is.settle();
    }
}

impl Target for Sim {
    fn describe(&self) -> String {
        format!("simulator: {} ({})", self.label, self.description)
    }

    fn noisy(&self) -> bool {
        false
    }

    fn run(&mut self, p: &Pattern) -> Result<Vec<f64>, Error> {
        p.validate()?;
        let window = match p.issue {
            Issue::Serial => Vec::new(),
            Issue::Outstanding(n) => vec![0.0; n],
        };
        let mut is = Issuer {
            sys: self.fresh()?,
            window,
            pos: 0,
            now: 0.0,
            end: 0.0,
        };
        for _ in 0..p.warmup {
            pass(&mut is, p);
        }
        end_run(&mut is, p);
        let mut out = Vec::new();
        let start = is.now;
        for _ in 0..p.passes {
            let t0 = is.now;
            pass(&mut is, p);
            if p.timing == Timing::PerPass {
                end_run(&mut is, p);
                out.push(is.now - t0);
            }
        }
        if p.timing == Timing::Total {
            end_run(&mut is, p);
            out.push(is.now - start);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{Fence, Rng};

    fn loads(issue: Issue, timing: Timing, passes: u32) -> Pattern {
        Pattern {
            region: 1 << 20,
            block: 64,
            block_stride: 64,
            order: Rng::new(5).permutation(1 << 14),
            op: Op::Load,
            warmup: 1,
            passes,
            issue,
            fence: Fence::Block,
            timing,
        }
    }

    #[test]
    fn outstanding_requests_overlap_and_closed_loop_does_not() {
        let mut s = Sim::preset("optane-1dimm").unwrap();
        let serial = s.run(&loads(Issue::Serial, Timing::Total, 1)).unwrap()[0];
        let par = s
            .run(&loads(Issue::Outstanding(16), Timing::Total, 1))
            .unwrap()[0];
        // Closed loop: at least the device's read latency per line.
        assert!(serial / 16384.0 > 100.0, "{serial}");
        assert!(
            par < serial / 2.0,
            "serial {serial} ns, 16 in flight {par} ns"
        );
        // Deterministic: the same pattern gives the same time.
        assert_eq!(
            s.run(&loads(Issue::Serial, Timing::Total, 1)).unwrap()[0],
            serial
        );
        let per = s.run(&loads(Issue::Serial, Timing::PerPass, 3)).unwrap();
        assert_eq!(per.len(), 3);
    }

    fn stores(region: u64, fence: Fence) -> f64 {
        let lines = region / LINE;
        let p = Pattern {
            region,
            block: LINE,
            block_stride: LINE,
            order: Rng::new(9).permutation(lines as u32),
            op: Op::Store,
            warmup: 1,
            passes: (4096 / lines) as u32,
            issue: Issue::Outstanding(16),
            fence,
            timing: Timing::Total,
        };
        let mut s = Sim::preset("optane-1dimm").unwrap();
        s.run(&p).unwrap()[0] / (lines * p.passes as u64) as f64
    }

    #[test]
    fn one_fence_per_run_lets_the_write_queues_absorb_rewrites() {
        // 256 B fits the 512 B WPQ: re-written lines are absorbed there.
        let run = stores(256, Fence::Run);
        let pass = stores(256, Fence::Pass);
        assert!(run < pass / 4.0, "run {run} ns, pass {pass} ns per line");
        // Past the WPQ (1 KiB), every store goes on to the DIMM.
        let past = stores(1024, Fence::Run);
        assert!(past > 2.0 * run, "256 B {run} ns, 1 KiB {past} ns per line");
    }

    /// The entry size of the AIT buffer from block sweeps past 16 MiB over
    /// the sweep one level down: 4 KiB when a miss fills the entry, 256 B
    /// when it reads only the XPLine.
    #[test]
    fn block_sweeps_show_the_ait_entry_fill() {
        let s = crate::suite::Plan::sim().settings;
        let blocks = crate::probes::pow2_sweep(64, 16 << 10);
        let quiet = &mut |_: &str, _: usize, _: usize| {};
        let preset = pmlab_sim::presets::find("optane-1dimm").unwrap().toml;
        for (fill, want) in [("entry", 4096.0), ("sector", 256.0)] {
            let toml = preset.replace("ait_fill = \"entry\"", &format!("ait_fill = \"{fill}\""));
            let mut t = Sim::from_toml(&toml, "test", "test").unwrap();
            let near =
                crate::probes::ptrchase_block(&mut t, &s, Op::Load, 64 << 10, &blocks, quiet)
                    .unwrap();
            let far = crate::probes::ptrchase_block(&mut t, &s, Op::Load, 64 << 20, &blocks, quiet)
                .unwrap();
            let base: Vec<f64> = near.points.iter().map(|p| p.y).collect();
            let e = crate::infer::entry_knee(&far.points, &base, 0.2);
            assert_eq!(e, Some(want), "{fill}: {:?} over {base:?}", far.points);
        }
    }

    #[test]
    fn bad_configurations_are_refused_with_the_reason() {
        let e = Sim::preset("no-such-preset").err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Sim);
        assert!(e.to_string().contains("no-such-preset"), "{e}");
        let e = Sim::from_toml("[controller]\nimpl = \"nope\"\n", "test", "test")
            .err()
            .unwrap();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
