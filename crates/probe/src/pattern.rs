//! The request streams every probe issues, and the [`Target`] trait that
//! executes them on real memory or on the simulator.

use crate::Error;

/// Size of one cache line: every access is a whole number of lines.
pub const LINE: u64 = 64;

/// What a pattern does at each visited block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Cache-bypassing loads of every line of the block, in address order.
    Load,
    /// Cache-bypassing stores of every line of the block, in address order.
    Store,
    /// Read-after-write: each pass stores to every block in visit order,
    /// then loads them again in the same order.
    Raw,
}

impl Op {
    /// Lower-case name (`load`, `store`, `raw`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Load => "load",
            Op::Store => "store",
            Op::Raw => "raw",
        }
    }
}

/// How requests are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issue {
    /// Closed loop: one request at a time, each waits for the previous one
    /// (latency). On the host, loads are a dependent pointer chain and
    /// stores are fenced one by one.
    Serial,
    /// Up to this many requests in flight (bandwidth). On the host, plain
    /// streaming instructions; the CPU bounds concurrency itself.
    Outstanding(usize),
}

/// Where stores are fenced (`sfence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// After every block: each block's stores complete before the next
    /// block starts (no write combining across blocks).
    Block,
    /// Once at the end of each pass: stores stream into the write queues
    /// and combine there, as a loop of non-temporal stores does.
    Pass,
    /// Once after the warm-up passes and once after the last timed pass,
    /// as LENS's store chase does: passes over a region that fits in a
    /// write queue overwrite lines still waiting there (the queue absorbs
    /// them), so each write queue's capacity shows as a step.
    Run,
}

/// How the elapsed time is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// One figure: all measured passes together.
    Total,
    /// One figure per measured pass (overwrite iterations).
    PerPass,
}

/// One request stream: visit `order` (block indices) in sequence, touching
/// `block` bytes at `index * block_stride`, repeated for warm-up passes
/// (not timed) and measured passes.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// Bytes the target must map (every access lies inside).
    pub region: u64,
    /// Bytes touched contiguously at each visit (a multiple of [`LINE`]).
    pub block: u64,
    /// Distance in bytes between consecutive block indices (a multiple of
    /// [`LINE`], at least `block`).
    pub block_stride: u64,
    /// Block indices in visit order.
    pub order: Vec<u32>,
    /// What each visit does.
    pub op: Op,
    /// Untimed passes first (to fill buffers and caches).
    pub warmup: u32,
    /// Timed passes.
    pub passes: u32,
    /// Closed loop or bounded outstanding requests.
    pub issue: Issue,
    /// Where stores are fenced.
    pub fence: Fence,
    /// One total or per-pass figures.
    pub timing: Timing,
}

impl Pattern {
    /// Lines touched by one pass (a RaW pass counts each line once).
    pub fn lines_per_pass(&self) -> u64 {
        self.order.len() as u64 * (self.block / LINE)
    }

    /// Check the invariants every target relies on.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(crate::error::param(m));
        if self.block == 0 || !self.block.is_multiple_of(LINE) {
            return bad(format!(
                "block size {} is not a whole number of 64 B lines",
                self.block
            ));
        }
        if self.block_stride < self.block || !self.block_stride.is_multiple_of(LINE) {
            return bad(format!(
                "block stride {} must be a multiple of 64 B and at least the block ({})",
                self.block_stride, self.block
            ));
        }
        if self.order.is_empty() || self.passes == 0 {
            return bad("a pattern needs at least one block and one timed pass".into());
        }
        let max = *self.order.iter().max().unwrap() as u64;
        if max * self.block_stride + self.block > self.region {
            return bad(format!(
                "pattern reaches byte {} outside its {}-byte region",
                max * self.block_stride + self.block,
                self.region
            ));
        }
        if let Issue::Outstanding(0) = self.issue {
            return bad("outstanding requests must be at least 1".into());
        }
        Ok(())
    }
}

/// Something that executes request streams and times them: the host's
/// memory or the simulator. The probe logic is the same for both.
pub trait Target {
    /// One line describing the target (memory kind, ISA or preset).
    fn describe(&self) -> String;

    /// Execute `pattern` and return elapsed nanoseconds: one figure for
    /// [`Timing::Total`], one per timed pass for [`Timing::PerPass`].
    fn run(&mut self, pattern: &Pattern) -> Result<Vec<f64>, Error>;

    /// True when figures vary between runs (real hardware), so probes
    /// repeat and report spread; false for the deterministic simulator.
    fn noisy(&self) -> bool;
}

/// A small deterministic generator (SplitMix64) for the random visit orders.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A random permutation of `0..n` (Fisher-Yates).
    pub fn permutation(&mut self, n: u32) -> Vec<u32> {
        let mut v: Vec<u32> = (0..n).collect();
        for i in (1..v.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat() -> Pattern {
        Pattern {
            region: 4096,
            block: 256,
            block_stride: 256,
            order: vec![3, 0, 2, 1],
            op: Op::Load,
            warmup: 1,
            passes: 1,
            issue: Issue::Serial,
            fence: Fence::Block,
            timing: Timing::Total,
        }
    }

    #[test]
    fn permutation_visits_every_block_once() {
        let mut p = Rng::new(7).permutation(1000);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        p.sort();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn validate_rejects_out_of_region_and_partial_lines() {
        assert!(pat().validate().is_ok());
        assert_eq!(pat().lines_per_pass(), 16);
        let mut p = pat();
        p.region = 512;
        assert!(p.validate().unwrap_err().to_string().contains("outside"));
        let mut p = pat();
        p.block = 100;
        assert!(p.validate().unwrap_err().to_string().contains("64 B"));
        let mut p = pat();
        p.issue = Issue::Outstanding(0);
        assert!(p.validate().is_err());
    }
}
