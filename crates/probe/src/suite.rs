//! The whole LENS suite on one target: which sweeps, in which order, and
//! the result set they produce (saved as JSON and CSV, read back by
//! `infer`).

use crate::infer::{self, Thresholds};
use crate::pattern::{Fence, Issue, Op, Pattern, Rng, Timing};
use crate::probes::{self, Curve, Kind, Point, Progress, Settings};
use crate::{Error, ErrorKind, Target};
use std::collections::BTreeMap;
use std::path::Path;

/// The sweeps of `probe all`.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Shared knobs (repeats, passes, seed, outstanding requests).
    pub settings: Settings,
    /// PC-block of the region sweeps.
    pub block: u64,
    /// PC-region sizes of the region sweeps.
    pub regions: Vec<u64>,
    /// Largest PC-block of the amplification sweeps.
    pub max_block: u64,
    /// Overwrite: region and iterations of the per-iteration run.
    pub overwrite_region: u64,
    /// Overwrite: iterations of the per-iteration run.
    pub overwrite_iterations: u32,
    /// Overwrite sweep: region sizes (refined by one point at the drop).
    pub overwrite_regions: Vec<u64>,
    /// Overwrite sweep: bytes written per region size.
    pub overwrite_total: u64,
    /// Stride: the stride of the access-size sweep.
    pub stride: u64,
    /// Stride: bytes per point.
    pub stride_total: u64,
    /// Interleave: strides swept.
    pub strides: Vec<u64>,
    /// Interleave: bytes per access (at least the write-combining unit, so
    /// each access is one whole media write on every device).
    pub interleave_size: u64,
}

impl Plan {
    /// Defaults for the simulator: sweeps reaching past Optane's buffers.
    pub fn sim() -> Plan {
        Plan {
            settings: Settings {
                repeats: 1,
                min_lines: 1 << 14,
                ..Settings::default()
            },
            block: 64,
            regions: probes::pow2_sweep(64, 64 << 20),
            max_block: 16 << 10,
            overwrite_region: 256,
            overwrite_iterations: 50_000,
            overwrite_regions: vec![256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10],
            overwrite_total: 512 << 20,
            stride: 4096,
            stride_total: 4 << 20,
            strides: probes::pow2_sweep(256, 64 << 10),
            interleave_size: 256,
        }
    }

    /// Defaults for the host: regions up to 128 MiB (four times this
    /// machine's 32 MiB LLC), three repeats per point.
    pub fn host() -> Plan {
        Plan {
            settings: Settings {
                repeats: 3,
                min_lines: 1 << 17,
                ..Settings::default()
            },
            block: 64,
            regions: probes::pow2_sweep(1 << 10, 128 << 20),
            max_block: 16 << 10,
            overwrite_region: 256,
            overwrite_iterations: 50_000,
            overwrite_regions: vec![256, 4 << 10, 64 << 10, 1 << 20],
            overwrite_total: 64 << 20,
            stride: 4096,
            stride_total: 16 << 20,
            strides: probes::pow2_sweep(256, 64 << 10),
            interleave_size: 256,
        }
    }
}

/// A result set: every curve of a run, and what ran it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Results {
    /// pmlab version that produced it.
    pub version: String,
    /// `host` or `sim:<preset or file>`.
    pub target: String,
    /// The target's own description.
    pub description: String,
    /// Whether figures are noisy (medians over repeats) or deterministic.
    pub noisy: bool,
    /// Wall-clock seconds per probe.
    pub seconds: BTreeMap<String, f64>,
    /// The curves.
    pub curves: Vec<Curve>,
}

impl Results {
    /// An empty result set for `target`.
    pub fn new(target: &str, t: &dyn Target) -> Results {
        Results {
            version: env!("CARGO_PKG_VERSION").to_string(),
            target: target.to_string(),
            description: t.describe(),
            noisy: t.noisy(),
            seconds: BTreeMap::new(),
            curves: Vec::new(),
        }
    }

    /// Write `results.json` and one CSV per curve into `dir`.
    pub fn save(&self, dir: &Path, json: &str) -> Result<(), Error> {
        let io = |e: std::io::Error, what: &Path| {
            Error::new(
                ErrorKind::Io,
                format!("cannot write '{}': {e}", what.display()),
            )
        };
        std::fs::create_dir_all(dir).map_err(|e| io(e, dir))?;
        // Each file whole or not at all: a temporary file beside it,
        // renamed over it.
        let write = |p: &Path, bytes: &[u8]| {
            let tmp = dir.join(format!(
                ".{}.{}.tmp",
                p.file_name().unwrap_or_default().to_string_lossy(),
                std::process::id()
            ));
            let r = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, p));
            if r.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            r.map_err(|e| io(e, p))
        };
        let p = dir.join("results.json");
        write(&p, json.as_bytes())?;
        for c in &self.curves {
            let p = dir.join(format!("{}.csv", c.id));
            // The header is the first line; the columns carry their units.
            let mut s = format!(
                "{},{},min,max\n",
                csv_field(&c.x_label),
                csv_field(&c.y_label)
            );
            for pt in &c.points {
                s.push_str(&format!("{},{},{},{}\n", pt.x, pt.y, pt.lo, pt.hi));
            }
            write(&p, s.as_bytes())?;
        }
        Ok(())
    }
}

/// `s` as one CSV field: quoted when it holds a comma, quote or line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Pointer chasing with streaming stores, as LENS's store chase: up to
/// `outstanding` stores in flight and one fence for the whole timed run, so
/// a region that fits in a write queue is re-written there (the queue
/// absorbs the stores); each write queue's capacity shows as a step.
pub fn ptrchase_region_stream(
    t: &mut dyn Target,
    s: &Settings,
    block: u64,
    regions: &[u64],
    progress: Progress,
) -> Result<Curve, Error> {
    let mut rng = Rng::new(s.seed ^ 0x5757);
    let id = "ptrchase-region-store-stream".to_string();
    let mut points = Vec::new();
    for (i, &region) in regions.iter().enumerate() {
        let blocks = (region / block).max(1) as u32;
        let lines = blocks as u64 * (block / 64);
        let p = Pattern {
            region,
            block,
            block_stride: block,
            order: rng.permutation(blocks),
            op: Op::Store,
            warmup: s.warmup,
            passes: s.min_lines.div_ceil(lines).clamp(1, 1 << 20) as u32,
            issue: Issue::Outstanding(s.outstanding),
            fence: Fence::Run,
            timing: Timing::Total,
        };
        p.validate()?;
        let total = (p.lines_per_pass() * p.passes as u64) as f64;
        let reps = if t.noisy() { s.repeats.max(1) } else { 1 };
        let mut ys: Vec<f64> = Vec::new();
        for _ in 0..reps {
            ys.push(t.run(&p)?.iter().sum::<f64>() / total);
        }
        ys.sort_by(|a, b| a.total_cmp(b));
        points.push(Point {
            x: region as f64,
            y: ys[ys.len() / 2],
            lo: ys[0],
            hi: ys[ys.len() - 1],
        });
        progress(&id, i + 1, regions.len());
    }
    Ok(Curve {
        id,
        kind: Kind::PtrchaseRegion,
        op: Op::Store,
        params: BTreeMap::from([
            ("block".to_string(), block as f64),
            ("outstanding".to_string(), s.outstanding as f64),
        ]),
        x_label: "PC-region size (bytes)".into(),
        y_label: "streaming store time per cache line (ns)".into(),
        points,
    })
}

/// Regions for the amplification sweeps: one past each read buffer, four
/// times its capacity when that stays at most half the next buffer, else
/// the geometric middle.
pub fn amplification_regions(caps: &[f64], max_region: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (k, &c) in caps.iter().enumerate() {
        let next = caps.get(k + 1).copied().unwrap_or(f64::INFINITY);
        let want = if 4.0 * c <= next / 2.0 {
            4.0 * c
        } else {
            (c * next).sqrt()
        };
        let r = (want as u64)
            .next_power_of_two()
            .min(max_region.next_power_of_two());
        if r as f64 > c && !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

fn timed<T>(
    secs: &mut BTreeMap<String, f64>,
    name: &str,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let t0 = std::time::Instant::now();
    let r = f()?;
    *secs.entry(name.to_string()).or_insert(0.0) += t0.elapsed().as_secs_f64();
    Ok(r)
}

/// Run every probe of `plan` on `t`.
pub fn run_all(
    t: &mut dyn Target,
    target: &str,
    plan: &Plan,
    progress: Progress,
) -> Result<Results, Error> {
    let s = &plan.settings;
    let mut res = Results::new(target, t);
    let mut secs = BTreeMap::new();
    for op in [Op::Load, Op::Store, Op::Raw] {
        let c = timed(&mut secs, "ptrchase-region", || {
            probes::ptrchase_region(t, s, op, plan.block, &plan.regions, progress)
        })?;
        res.curves.push(c);
    }
    let c = timed(&mut secs, "ptrchase-region", || {
        ptrchase_region_stream(t, s, plan.block, &plan.regions, progress)
    })?;
    res.curves.push(c);
    // Amplification: one block sweep past each read buffer found so far.
    let load = &res.curves[0];
    let caps: Vec<f64> = infer::inflections(&load.points, Thresholds::default().rise)
        .iter()
        .map(|f| f.capacity)
        .collect();
    let max_region = *plan.regions.last().unwrap();
    for region in amplification_regions(&caps, max_region) {
        let blocks = probes::pow2_sweep(64, plan.max_block.min(region / 2));
        let c = timed(&mut secs, "ptrchase-block", || {
            probes::ptrchase_block(t, s, Op::Load, region, &blocks, progress)
        })?;
        res.curves.push(c);
    }
    let c = timed(&mut secs, "overwrite", || {
        probes::overwrite(t, s, plan.overwrite_region, plan.overwrite_iterations)
    })?;
    res.curves.push(c);
    let tf = Thresholds::default().tail_factor;
    let mut sweep = timed(&mut secs, "overwrite-sweep", || {
        probes::overwrite_sweep(
            t,
            s,
            &plan.overwrite_regions,
            plan.overwrite_total,
            tf,
            progress,
        )
    })?;
    // Refine: halve the step just before the first drop.
    if let Some(drop) = infer::migration_block(&sweep.points, Thresholds::default().drop) {
        let k = sweep.points.iter().position(|p| p.x == drop).unwrap_or(0);
        if k > 0 {
            let prev = sweep.points[k - 1].x as u64;
            let mid = (prev * 2).max(prev + 64);
            if (mid as f64) < drop {
                let extra = timed(&mut secs, "overwrite-sweep", || {
                    probes::overwrite_sweep(t, s, &[mid], plan.overwrite_total, tf, progress)
                })?;
                sweep.points.insert(k, extra.points[0]);
            }
        }
    }
    res.curves.push(sweep);
    for op in [Op::Load, Op::Store] {
        let sizes = probes::pow2_sweep(64, plan.stride);
        let c = timed(&mut secs, "stride", || {
            probes::stride_size(t, s, op, plan.stride, &sizes, plan.stride_total, progress)
        })?;
        res.curves.push(c);
    }
    let c = timed(&mut secs, "stride", || {
        probes::stride_interleave(
            t,
            s,
            Op::Store,
            plan.interleave_size,
            &plan.strides,
            plan.stride_total,
            progress,
        )
    })?;
    // Devices: strides of 1, 2, ... 8 times the granularity.
    if let Some(g) = infer::interleave(&c.points) {
        let g = g as u64;
        let strides: Vec<u64> = (1..=8).map(|m| m * g).collect();
        let mut ch = timed(&mut secs, "stride", || {
            probes::stride_interleave(
                t,
                s,
                Op::Store,
                plan.interleave_size,
                &strides,
                plan.stride_total,
                progress,
            )
        })?;
        ch.id = "stride-channels-store".into();
        ch.kind = Kind::StrideChannels;
        ch.params.insert("granularity".into(), g as f64);
        res.curves.push(c);
        res.curves.push(ch);
    } else {
        res.curves.push(c);
    }
    res.seconds = secs;
    res.description = t.describe();
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amplification_regions_sit_between_buffers() {
        let r = amplification_regions(&[16384.0, 16777216.0], 64 << 20);
        assert_eq!(r, vec![65536, 64 << 20]);
        // Close buffers: the geometric middle.
        let r = amplification_regions(&[32768.0, 131072.0], 1 << 30);
        assert_eq!(r, vec![65536, 524288]);
        // The largest region caps the last sweep.
        let r = amplification_regions(&[1048576.0], 2 << 20);
        assert_eq!(r, vec![2 << 20]);
    }

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("stride (bytes)"), "stride (bytes)");
        assert_eq!(csv_field("a, b"), "\"a, b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
