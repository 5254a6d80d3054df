//! The LENS probes: each builds request streams ([`Pattern`]s), runs them on
//! any [`Target`] and returns a [`Curve`].

use crate::pattern::{Fence, Issue, Op, Pattern, Rng, Timing, LINE};
use crate::{Error, Target};
use std::collections::BTreeMap;

/// One measured point: the median `y` over repeats, with its min and max.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// Swept parameter (bytes, iteration number).
    pub x: f64,
    /// Median measurement.
    pub y: f64,
    /// Smallest measurement over the repeats.
    pub lo: f64,
    /// Largest measurement over the repeats.
    pub hi: f64,
}

/// Which probe produced a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Pointer chasing, latency per line across PC-region sizes.
    PtrchaseRegion,
    /// Pointer chasing, latency per line across PC-block sizes (amplification).
    PtrchaseBlock,
    /// Overwrite: time of every iteration on one region.
    Overwrite,
    /// Overwrite: long-tail frequency across region sizes.
    OverwriteSweep,
    /// Stride: bandwidth across access sizes at a fixed stride.
    StrideSize,
    /// Stride: bandwidth across strides at a fixed total size (interleaving).
    StrideInterleave,
    /// Stride: bandwidth across multiples of the interleave granularity
    /// (the number of interleaved devices).
    StrideChannels,
}

impl Kind {
    /// The name used in file names and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::PtrchaseRegion => "ptrchase-region",
            Kind::PtrchaseBlock => "ptrchase-block",
            Kind::Overwrite => "overwrite",
            Kind::OverwriteSweep => "overwrite-sweep",
            Kind::StrideSize => "stride-size",
            Kind::StrideInterleave => "stride-interleave",
            Kind::StrideChannels => "stride-channels",
        }
    }
}

/// One curve with what produced it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Curve {
    /// Unique name within a result set (also the file stem).
    pub id: String,
    /// The probe.
    pub kind: Kind,
    /// Loads, stores or read-after-write.
    pub op: Op,
    /// Fixed parameters, in bytes or counts (`block`, `region`, `stride`...).
    pub params: BTreeMap<String, f64>,
    /// What x is (with unit).
    pub x_label: String,
    /// What y is (with unit).
    pub y_label: String,
    /// The points, in sweep order.
    pub points: Vec<Point>,
}

/// Knobs shared by all probes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Runs per point on a noisy target (median and spread are reported).
    pub repeats: u32,
    /// Timed lines per point at least (small regions are passed over
    /// several times to reach it).
    pub min_lines: u64,
    /// Untimed passes before timing.
    pub warmup: u32,
    /// Seed of the random visit orders.
    pub seed: u64,
    /// Requests in flight for bandwidth probes.
    pub outstanding: usize,
    /// Where latency probes fence their stores.
    pub fence: Fence,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            repeats: 5,
            min_lines: 1 << 16,
            warmup: 1,
            seed: 0x1E45,
            outstanding: 16,
            fence: Fence::Block,
        }
    }
}

/// Called after each point: (curve id, points done, points total).
pub type Progress<'a> = &'a mut dyn FnMut(&str, usize, usize);

fn check_sizes(what: &str, v: &[u64]) -> Result<(), Error> {
    if v.is_empty() {
        return Err(crate::error::param(format!("{what}: the sweep is empty")));
    }
    if let Some(b) = v.iter().find(|&&b| b == 0 || b % LINE != 0) {
        return Err(crate::error::param(format!(
            "{what}: {b} bytes is not a whole number of 64 B lines"
        )));
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Run `p` (repeating on a noisy target) and turn the total time into
/// `scale(ns)`; returns the point at `x`.
fn measure(
    t: &mut dyn Target,
    s: &Settings,
    p: &Pattern,
    x: f64,
    scale: &dyn Fn(f64) -> f64,
) -> Result<Point, Error> {
    let reps = if t.noisy() { s.repeats.max(1) } else { 1 };
    let mut ys = Vec::with_capacity(reps as usize);
    for _ in 0..reps {
        let ns: f64 = t.run(p)?.iter().sum();
        ys.push(scale(ns));
    }
    let lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Ok(Point {
        x,
        y: median(&mut ys),
        lo,
        hi,
    })
}

fn chase_pattern(s: &Settings, rng: &mut Rng, op: Op, region: u64, block: u64) -> Pattern {
    let blocks = (region / block).max(1) as u32;
    let lines = blocks as u64 * (block / LINE);
    Pattern {
        region: region.max(block),
        block,
        block_stride: block,
        order: rng.permutation(blocks),
        op,
        warmup: s.warmup,
        passes: s.min_lines.div_ceil(lines).clamp(1, 1 << 20) as u32,
        issue: Issue::Serial,
        fence: s.fence,
        timing: Timing::Total,
    }
}

/// Pointer chasing, variant 1 (and 3 with [`Op::Raw`]): latency per cache
/// line across PC-region sizes, at a fixed PC-block size. For RaW, y is the
/// cost of one store plus one load of a line.
pub fn ptrchase_region(
    t: &mut dyn Target,
    s: &Settings,
    op: Op,
    block: u64,
    regions: &[u64],
    progress: Progress,
) -> Result<Curve, Error> {
    check_sizes("ptrchase regions", regions)?;
    check_sizes("ptrchase block", &[block])?;
    let id = format!("ptrchase-region-{}", op.name());
    let mut rng = Rng::new(s.seed);
    let mut points = Vec::new();
    for (i, &region) in regions.iter().enumerate() {
        if region < block {
            return Err(crate::error::param(format!(
                "ptrchase: region {region} B is smaller than the block ({block} B)"
            )));
        }
        let p = chase_pattern(s, &mut rng, op, region, block);
        let lines = (p.lines_per_pass() * p.passes as u64) as f64;
        points.push(measure(t, s, &p, region as f64, &|ns| ns / lines)?);
        progress(&id, i + 1, regions.len());
    }
    Ok(Curve {
        id,
        kind: Kind::PtrchaseRegion,
        op,
        params: BTreeMap::from([("block".to_string(), block as f64)]),
        x_label: "PC-region size (bytes)".into(),
        y_label: format!("{} latency per cache line (ns)", op.name()),
        points,
    })
}

/// Pointer chasing, variant 2: latency per cache line across PC-block
/// sizes in a fixed PC-region. The amplification score of each point is
/// its latency over the latency at the largest block (see `infer`).
pub fn ptrchase_block(
    t: &mut dyn Target,
    s: &Settings,
    op: Op,
    region: u64,
    blocks: &[u64],
    progress: Progress,
) -> Result<Curve, Error> {
    check_sizes("ptrchase blocks", blocks)?;
    let id = format!("ptrchase-block-{}-{}", op.name(), region);
    let mut rng = Rng::new(s.seed ^ region);
    let mut points = Vec::new();
    for (i, &block) in blocks.iter().enumerate() {
        if block > region {
            return Err(crate::error::param(format!(
                "ptrchase: block {block} B is larger than the region ({region} B)"
            )));
        }
        let p = chase_pattern(s, &mut rng, op, region, block);
        let lines = (p.lines_per_pass() * p.passes as u64) as f64;
        points.push(measure(t, s, &p, block as f64, &|ns| ns / lines)?);
        progress(&id, i + 1, blocks.len());
    }
    Ok(Curve {
        id,
        kind: Kind::PtrchaseBlock,
        op,
        params: BTreeMap::from([("region".to_string(), region as f64)]),
        x_label: "PC-block size (bytes)".into(),
        y_label: format!("{} latency per cache line (ns)", op.name()),
        points,
    })
}

/// Overwrite, variant 1: write `region` sequentially `iterations` times;
/// y is the time of each iteration.
pub fn overwrite(
    t: &mut dyn Target,
    s: &Settings,
    region: u64,
    iterations: u32,
) -> Result<Curve, Error> {
    let times = overwrite_times(t, s, region, iterations)?;
    let points = times
        .iter()
        .enumerate()
        .map(|(i, &y)| Point {
            x: i as f64,
            y,
            lo: y,
            hi: y,
        })
        .collect();
    Ok(Curve {
        id: "overwrite".into(),
        kind: Kind::Overwrite,
        op: Op::Store,
        params: BTreeMap::from([
            ("region".to_string(), region as f64),
            ("iterations".to_string(), iterations as f64),
        ]),
        x_label: "iteration".into(),
        y_label: "time of the iteration (ns)".into(),
        points,
    })
}

fn overwrite_times(
    t: &mut dyn Target,
    s: &Settings,
    region: u64,
    iterations: u32,
) -> Result<Vec<f64>, Error> {
    check_sizes("overwrite region", &[region])?;
    if iterations == 0 {
        return Err(crate::error::param(
            "overwrite: --iterations must be at least 1",
        ));
    }
    let p = Pattern {
        region,
        block: region,
        block_stride: region,
        order: vec![0],
        op: Op::Store,
        warmup: s.warmup,
        passes: iterations,
        // The stores of one iteration go out back to back, then a fence.
        issue: Issue::Outstanding(s.outstanding),
        fence: Fence::Pass,
        timing: Timing::PerPass,
    };
    t.run(&p)
}

/// Overwrite, variant 2: for each region size, write `total` bytes as
/// repeated overwrites and count long-tail iterations (slower than
/// `tail_factor` times the median). y is tail iterations per MiB written.
pub fn overwrite_sweep(
    t: &mut dyn Target,
    s: &Settings,
    regions: &[u64],
    total: u64,
    tail_factor: f64,
    progress: Progress,
) -> Result<Curve, Error> {
    check_sizes("overwrite regions", regions)?;
    let id = "overwrite-sweep".to_string();
    let mut points = Vec::new();
    for (i, &region) in regions.iter().enumerate() {
        let iters = (total / region).clamp(1, u32::MAX as u64) as u32;
        let times = overwrite_times(t, s, region, iters)?;
        let tails = crate::infer::tails(&times, tail_factor);
        let mib = (iters as u64 * region) as f64 / (1u64 << 20) as f64;
        let f = tails.index.len() as f64 / mib;
        points.push(Point {
            x: region as f64,
            y: f,
            lo: f,
            hi: f,
        });
        progress(&id, i + 1, regions.len());
    }
    Ok(Curve {
        id,
        kind: Kind::OverwriteSweep,
        op: Op::Store,
        params: BTreeMap::from([
            ("total".to_string(), total as f64),
            ("tail_factor".to_string(), tail_factor),
        ]),
        x_label: "overwritten region (bytes)".into(),
        y_label: "long-tail iterations per MiB written".into(),
        points,
    })
}

fn stride_pattern(s: &Settings, op: Op, size: u64, stride: u64, total: u64) -> Pattern {
    let count = (total / size).max(1);
    Pattern {
        region: (count - 1) * stride + size,
        block: size,
        block_stride: stride,
        order: (0..count as u32).collect(),
        op,
        warmup: s.warmup,
        passes: 1,
        issue: Issue::Outstanding(s.outstanding),
        fence: Fence::Pass,
        timing: Timing::Total,
    }
}

fn gbs(bytes: f64) -> impl Fn(f64) -> f64 {
    move |ns| bytes / ns.max(1e-9)
}

/// Stride, variant 1: bandwidth (GB/s) across access sizes, each access
/// `stride` bytes after the previous one, `total` bytes per point.
pub fn stride_size(
    t: &mut dyn Target,
    s: &Settings,
    op: Op,
    stride: u64,
    sizes: &[u64],
    total: u64,
    progress: Progress,
) -> Result<Curve, Error> {
    check_sizes("stride sizes", sizes)?;
    check_sizes("stride", &[stride])?;
    let id = format!("stride-size-{}", op.name());
    let mut points = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        if size > stride {
            return Err(crate::error::param(format!(
                "stride: access size {size} B exceeds the stride ({stride} B)"
            )));
        }
        let p = stride_pattern(s, op, size, stride, total);
        let bytes = (p.lines_per_pass() * LINE) as f64;
        points.push(measure(t, s, &p, size as f64, &gbs(bytes))?);
        progress(&id, i + 1, sizes.len());
    }
    Ok(Curve {
        id,
        kind: Kind::StrideSize,
        op,
        params: BTreeMap::from([
            ("stride".to_string(), stride as f64),
            ("total".to_string(), total as f64),
        ]),
        x_label: "access size (bytes)".into(),
        y_label: format!("{} bandwidth (GB/s)", op.name()),
        points,
    })
}

/// Stride, variant 2: bandwidth (GB/s) across strides, accessing `size`
/// bytes per stride and `total` bytes per point. Strides that send every
/// access to the same interleaved device are slow; the pattern of fast and
/// slow strides gives the interleave granularity.
pub fn stride_interleave(
    t: &mut dyn Target,
    s: &Settings,
    op: Op,
    size: u64,
    strides: &[u64],
    total: u64,
    progress: Progress,
) -> Result<Curve, Error> {
    check_sizes("strides", strides)?;
    check_sizes("access size", &[size])?;
    let id = format!("stride-interleave-{}", op.name());
    let mut points = Vec::new();
    for (i, &stride) in strides.iter().enumerate() {
        if size > stride {
            return Err(crate::error::param(format!(
                "stride: access size {size} B exceeds the stride ({stride} B)"
            )));
        }
        let p = stride_pattern(s, op, size, stride, total);
        let bytes = (p.lines_per_pass() * LINE) as f64;
        points.push(measure(t, s, &p, stride as f64, &gbs(bytes))?);
        progress(&id, i + 1, strides.len());
    }
    Ok(Curve {
        id,
        kind: Kind::StrideInterleave,
        op,
        params: BTreeMap::from([
            ("size".to_string(), size as f64),
            ("total".to_string(), total as f64),
        ]),
        x_label: "stride (bytes)".into(),
        y_label: format!("{} bandwidth (GB/s)", op.name()),
        points,
    })
}

/// Powers of two from `lo` to `hi` inclusive (both rounded to powers of 2).
pub fn pow2_sweep(lo: u64, hi: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut x = lo.max(1).next_power_of_two();
    while x <= hi {
        v.push(x);
        x *= 2;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic fake device: loads cost 100 ns inside a 16 KiB
    /// working set and 300 ns beyond, stores half that.
    struct Fake;
    impl Target for Fake {
        fn describe(&self) -> String {
            "fake".into()
        }
        fn noisy(&self) -> bool {
            false
        }
        fn run(&mut self, p: &Pattern) -> Result<Vec<f64>, Error> {
            p.validate()?;
            let per = if p.region <= 16384 { 100.0 } else { 300.0 };
            let per = if p.op == Op::Store { per / 2.0 } else { per };
            let lines = p.lines_per_pass() as f64;
            Ok(match p.timing {
                Timing::Total => vec![per * lines * p.passes as f64],
                Timing::PerPass => (0..p.passes)
                    .map(|i| {
                        if i % 100 == 99 {
                            per * lines * 50.0
                        } else {
                            per * lines
                        }
                    })
                    .collect(),
            })
        }
    }

    fn quiet() -> impl FnMut(&str, usize, usize) {
        |_: &str, _: usize, _: usize| {}
    }

    #[test]
    fn region_sweep_reports_latency_per_line() {
        let s = Settings::default();
        let c = ptrchase_region(
            &mut Fake,
            &s,
            Op::Load,
            64,
            &pow2_sweep(64, 1 << 20),
            &mut quiet(),
        )
        .unwrap();
        assert_eq!(c.points.len(), 15);
        assert_eq!(c.points[0].y, 100.0);
        assert_eq!(c.points[8].x, 16384.0);
        assert_eq!(c.points[8].y, 100.0);
        assert_eq!(c.points[9].y, 300.0);
    }

    #[test]
    fn overwrite_finds_the_planted_tails() {
        let s = Settings::default();
        let c = overwrite_sweep(&mut Fake, &s, &[256, 1024], 1 << 20, 10.0, &mut quiet()).unwrap();
        // 1 MiB in 256 B iterations: 4096 iterations, a tail every 100th.
        assert_eq!(c.points[0].y, 40.0);
    }

    #[test]
    fn bad_sizes_are_rejected_with_the_reason() {
        let s = Settings::default();
        let e = ptrchase_region(&mut Fake, &s, Op::Load, 100, &[4096], &mut quiet()).unwrap_err();
        assert!(e.to_string().contains("64 B lines"));
        let e = ptrchase_region(&mut Fake, &s, Op::Load, 4096, &[1024], &mut quiet()).unwrap_err();
        assert!(e.to_string().contains("smaller than the block"));
        let e = stride_size(&mut Fake, &s, Op::Load, 256, &[512], 4096, &mut quiet()).unwrap_err();
        assert!(e.to_string().contains("exceeds the stride"));
    }

    #[test]
    fn bandwidth_is_bytes_over_time() {
        let s = Settings::default();
        let c = stride_size(
            &mut Fake,
            &s,
            Op::Store,
            256,
            &[64, 256],
            65536,
            &mut quiet(),
        )
        .unwrap();
        // 150 ns per line (region > 16 KiB): 64 / 150 GB/s.
        assert!(
            (c.points[1].y - 64.0 / 150.0).abs() < 1e-9,
            "{:?}",
            c.points
        );
    }
}
