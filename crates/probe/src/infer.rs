//! Inference: from curve shapes to device parameters (LENS section III).
//!
//! * inflection points of a region sweep → buffer capacities;
//! * block size where the amplification score reaches 1 → entry size;
//! * RaW against R + W → inclusive hierarchy or independent buffers;
//! * long-tail interval and magnitude → migration frequency and latency;
//! * the region size where the long-tail frequency drops → migration block;
//! * the stride at which interleaved bandwidth peaks → interleave
//!   granularity.

use crate::probes::{Curve, Kind, Point};
use crate::Op;

/// Thresholds of the inference.
#[derive(Debug, Clone)]
pub struct Thresholds {
    /// A step counts as a rise when latency grows by more than this
    /// fraction from one sweep point to the next.
    pub rise: f64,
    /// The amplification score counts as 1 within this fraction.
    pub unity: f64,
    /// An iteration is a long tail when slower than this many medians.
    pub tail_factor: f64,
    /// RaW / (R + W) at or above this means no fast-forward: inclusive.
    pub inclusive_ratio: f64,
    /// The tail frequency "drops" below this fraction of the small-region one.
    pub drop: f64,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            rise: 0.10,
            unity: 0.05,
            tail_factor: 5.0,
            inclusive_ratio: 0.9,
            drop: 0.5,
        }
    }
}

/// One inflection of a latency curve.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Inflection {
    /// The last sweep size before the rise: the inferred capacity.
    pub capacity: f64,
    /// Latency on the plateau before the rise.
    pub before: f64,
    /// Latency at the end of the rise.
    pub after: f64,
}

/// Inflection points: each maximal run of consecutive steps that together
/// rise by more than `rise` (each step rising by more than `rise / 2`)
/// gives one inflection at the start of the run.
pub fn inflections(points: &[Point], rise: f64) -> Vec<Inflection> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < points.len() {
        let step = |k: usize| points[k + 1].y / points[k].y.max(1e-12) - 1.0;
        if step(i) > rise / 2.0 {
            let start = i;
            let mut end = i + 1;
            while end + 1 < points.len() && step(end) > rise / 2.0 {
                end += 1;
            }
            let total = points[end].y / points[start].y.max(1e-12) - 1.0;
            if total > rise {
                out.push(Inflection {
                    capacity: points[start].x,
                    before: points[start].y,
                    after: points[end].y,
                });
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Amplification scores: latency per line over the latency at the largest
/// block (where amplification is surely 1).
pub fn scores(points: &[Point]) -> Vec<(f64, f64)> {
    let last = points.last().map(|p| p.y).unwrap_or(1.0).max(1e-12);
    points.iter().map(|p| (p.x, p.y / last)).collect()
}

/// The entry size: the smallest block from which every score is within
/// `unity` of 1. None when even the largest-but-one block is above.
pub fn entry_size(points: &[Point], unity: f64) -> Option<f64> {
    let s = scores(points);
    if s.len() < 2 {
        return None;
    }
    let mut first = s.len() - 1;
    for k in (0..s.len()).rev() {
        if (s[k].1 - 1.0).abs() <= unity {
            first = k;
        } else {
            break;
        }
    }
    if first == s.len() - 1 {
        None
    } else {
        Some(s[first].0)
    }
}

/// Long-tail iterations of an overwrite run.
#[derive(Debug, Clone, PartialEq)]
pub struct Tails {
    /// Indices of the slow iterations.
    pub index: Vec<usize>,
    /// Median time of all iterations.
    pub median: f64,
    /// Median time of the slow iterations (0 without any).
    pub tail_median: f64,
}

/// The iterations slower than `factor` times the median.
pub fn tails(times: &[f64], factor: f64) -> Tails {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = if sorted.is_empty() {
        0.0
    } else {
        sorted[sorted.len() / 2]
    };
    let index: Vec<usize> = times
        .iter()
        .enumerate()
        .filter(|(_, &t)| t > factor * median && median > 0.0)
        .map(|(i, _)| i)
        .collect();
    let mut slow: Vec<f64> = index.iter().map(|&i| times[i]).collect();
    slow.sort_by(|a, b| a.total_cmp(b));
    let tail_median = if slow.is_empty() {
        0.0
    } else {
        slow[slow.len() / 2]
    };
    Tails {
        index,
        median,
        tail_median,
    }
}

/// The median gap between consecutive tails, in iterations.
pub fn tail_interval(t: &Tails) -> Option<f64> {
    if t.index.len() < 2 {
        return None;
    }
    let mut gaps: Vec<f64> = t.index.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    gaps.sort_by(|a, b| a.total_cmp(b));
    Some(gaps[gaps.len() / 2])
}

/// The migration block: the smallest region whose tail frequency falls
/// below `drop` times the frequency at the smallest region.
pub fn migration_block(sweep: &[Point], drop: f64) -> Option<f64> {
    let base = sweep.first()?.y;
    if base <= 0.0 {
        return None;
    }
    sweep.iter().find(|p| p.y < drop * base).map(|p| p.x)
}

/// The interleave granularity from a bandwidth-over-stride curve: the
/// smallest stride reaching 90% of the peak, when the curve varies by more
/// than 30% (otherwise there is no interleaving to see).
pub fn interleave(points: &[Point]) -> Option<f64> {
    let max = points.iter().map(|p| p.y).fold(0.0, f64::max);
    let min = points.iter().map(|p| p.y).fold(f64::INFINITY, f64::min);
    if points.len() < 3 || max < 1.3 * min {
        return None;
    }
    points.iter().find(|p| p.y >= 0.9 * max).map(|p| p.x)
}

/// Everything inferred from a result set.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Inferred {
    /// Read buffers (load curve inflections), smallest first.
    pub read_buffers: Vec<Inflection>,
    /// Entry size per read buffer (same order), when measured.
    pub read_entries: Vec<Option<f64>>,
    /// Write buffers (store curve inflections), smallest first.
    pub write_buffers: Vec<Inflection>,
    /// Latency per line on the load curve's first plateau and at its end.
    pub load_latency: Option<(f64, f64)>,
    /// Same for stores.
    pub store_latency: Option<(f64, f64)>,
    /// Median RaW / (R + W) over the regions past the first read buffer.
    pub raw_ratio: Option<f64>,
    /// True: inclusive hierarchy (no fast-forward); false: independent.
    pub inclusive: Option<bool>,
    /// Overwrite: iterations between long tails.
    pub tail_interval: Option<f64>,
    /// Overwrite: bytes written between long tails.
    pub tail_interval_bytes: Option<f64>,
    /// Overwrite: extra time of a long-tail iteration (ns).
    pub migration_ns: Option<f64>,
    /// Overwrite sweep: migration block size.
    pub migration_block: Option<f64>,
    /// Interleave granularity.
    pub interleave: Option<f64>,
    /// Peak bandwidths measured by the stride probes, GB/s (load, store).
    pub peak_gbs: (Option<f64>, Option<f64>),
    /// Remarks on what could not be inferred and why.
    pub notes: Vec<String>,
}

fn find(curves: &[Curve], kind: Kind, op: Op) -> Option<&Curve> {
    curves.iter().find(|c| c.kind == kind && c.op == op)
}

fn interp(points: &[Point], x: f64) -> Option<f64> {
    points.iter().find(|p| (p.x - x).abs() < 0.5).map(|p| p.y)
}

/// Infer device parameters from `curves`.
pub fn infer(curves: &[Curve], th: &Thresholds) -> Inferred {
    let mut r = Inferred::default();
    let load = find(curves, Kind::PtrchaseRegion, Op::Load);
    let store = find(curves, Kind::PtrchaseRegion, Op::Store);
    match load {
        Some(c) if c.points.len() >= 2 => {
            r.read_buffers = inflections(&c.points, th.rise);
            r.load_latency = Some((c.points[0].y, c.points.last().unwrap().y));
        }
        _ => r
            .notes
            .push("no load region sweep: read buffers unknown".into()),
    }
    match store {
        Some(c) if c.points.len() >= 2 => {
            r.write_buffers = inflections(&c.points, th.rise);
            r.store_latency = Some((c.points[0].y, c.points.last().unwrap().y));
        }
        _ => r
            .notes
            .push("no store region sweep: write buffers unknown".into()),
    }
    // Entry sizes: the block sweep whose region lies past each buffer and
    // before the next one.
    let blocks: Vec<&Curve> = curves
        .iter()
        .filter(|c| c.kind == Kind::PtrchaseBlock && c.op == Op::Load)
        .collect();
    for (k, b) in r.read_buffers.iter().enumerate() {
        let next = r
            .read_buffers
            .get(k + 1)
            .map(|n| n.capacity)
            .unwrap_or(f64::INFINITY);
        let sweep = blocks.iter().find(|c| {
            let reg = c.params.get("region").copied().unwrap_or(0.0);
            reg > b.capacity && reg <= next
        });
        r.read_entries.push(match sweep {
            Some(c) => {
                let e = entry_size(&c.points, th.unity);
                if e.is_none() {
                    r.notes.push(format!(
                        "block sweep at region {}: the amplification score never reaches 1; sweep larger blocks",
                        c.params["region"]
                    ));
                }
                e
            }
            None => {
                r.notes.push(format!(
                    "no block sweep between {} and {} bytes: entry size of buffer {} unknown",
                    b.capacity,
                    next,
                    k + 1
                ));
                None
            }
        });
    }
    // RaW versus R + W.
    if let (Some(raw), Some(l), Some(s)) =
        (find(curves, Kind::PtrchaseRegion, Op::Raw), load, store)
    {
        let past = r.read_buffers.first().map(|b| b.capacity).unwrap_or(0.0);
        let mut ratios: Vec<f64> = raw
            .points
            .iter()
            .filter(|p| p.x > past)
            .filter_map(|p| Some(p.y / (interp(&l.points, p.x)? + interp(&s.points, p.x)?)))
            .collect();
        if ratios.is_empty() {
            r.notes
                .push("RaW sweep shares no region with the load and store sweeps".into());
        } else {
            ratios.sort_by(|a, b| a.total_cmp(b));
            let m = ratios[ratios.len() / 2];
            r.raw_ratio = Some(m);
            r.inclusive = Some(m >= th.inclusive_ratio);
        }
    }
    if let Some(c) = curves.iter().find(|c| c.kind == Kind::Overwrite) {
        let times: Vec<f64> = c.points.iter().map(|p| p.y).collect();
        let t = tails(&times, th.tail_factor);
        let region = c.params.get("region").copied().unwrap_or(0.0);
        r.tail_interval = tail_interval(&t);
        r.tail_interval_bytes = r.tail_interval.map(|i| i * region);
        if !t.index.is_empty() {
            r.migration_ns = Some(t.tail_median - t.median);
        } else {
            r.notes.push(format!(
                "overwrite: no iteration slower than {}x the median: no migration seen",
                th.tail_factor
            ));
        }
    }
    if let Some(c) = curves.iter().find(|c| c.kind == Kind::OverwriteSweep) {
        r.migration_block = migration_block(&c.points, th.drop);
        if r.migration_block.is_none() {
            r.notes
                .push("overwrite sweep: the long-tail frequency never drops".into());
        }
    }
    if let Some(c) = curves.iter().find(|c| c.kind == Kind::StrideInterleave) {
        r.interleave = interleave(&c.points);
        if r.interleave.is_none() {
            r.notes.push(
                "stride sweep: bandwidth does not depend on the stride: no interleaving seen"
                    .into(),
            );
        }
    }
    let peak = |op| {
        curves
            .iter()
            .filter(|c| matches!(c.kind, Kind::StrideSize | Kind::StrideInterleave) && c.op == op)
            .flat_map(|c| c.points.iter().map(|p| p.y))
            .fold(None, |m: Option<f64>, y| Some(m.map_or(y, |m| m.max(y))))
    };
    r.peak_gbs = (peak(Op::Load), peak(Op::Store));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(f64, f64)]) -> Vec<Point> {
        v.iter()
            .map(|&(x, y)| Point { x, y, lo: y, hi: y })
            .collect()
    }

    /// A synthetic Optane-like load curve: 16 KiB and 16 MiB buffers.
    fn optane_load() -> Vec<Point> {
        pts(&(6..=28)
            .map(|e| {
                let x = 2f64.powi(e);
                let y = if x <= 16384.0 {
                    170.0
                } else if x <= 16.0 * 1048576.0 {
                    310.0
                } else {
                    640.0
                };
                (x, y * (1.0 + 0.01 * ((e % 3) as f64 - 1.0)))
            })
            .collect::<Vec<_>>())
    }

    #[test]
    fn inflections_of_two_buffers() {
        let f = inflections(&optane_load(), 0.10);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[0].capacity, 16384.0);
        assert_eq!(f[1].capacity, 16.0 * 1048576.0);
    }

    #[test]
    fn gradual_rise_is_one_inflection_at_its_start() {
        // A cache of 32 KiB behind which latency climbs over three steps.
        let p = pts(&[
            (8e3, 1.0),
            (16e3, 1.0),
            (32e3, 1.01),
            (64e3, 2.0),
            (128e3, 3.0),
            (256e3, 3.5),
            (512e3, 3.5),
        ]);
        let f = inflections(&p, 0.10);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].capacity, 32e3);
        assert_eq!(f[0].after, 3.5);
    }

    #[test]
    fn noise_below_threshold_is_not_an_inflection() {
        let p = pts(&[(1.0, 100.0), (2.0, 104.0), (4.0, 99.0), (8.0, 103.0)]);
        assert!(inflections(&p, 0.10).is_empty());
    }

    #[test]
    fn entry_size_where_score_reaches_one() {
        // 256 B entries: per-line latency falls until 256 B, then flat.
        let p = pts(&[
            (64.0, 300.0),
            (128.0, 240.0),
            (256.0, 205.0),
            (512.0, 203.0),
            (1024.0, 200.0),
        ]);
        assert_eq!(entry_size(&p, 0.05), Some(256.0));
        let never = pts(&[(64.0, 400.0), (128.0, 300.0), (256.0, 200.0)]);
        assert_eq!(entry_size(&never, 0.05), None);
    }

    #[test]
    fn tails_interval_and_latency() {
        let mut times = vec![100.0; 1000];
        for i in (50..1000).step_by(140) {
            times[i] = 15_000.0;
        }
        let t = tails(&times, 5.0);
        assert_eq!(t.index.len(), 7);
        assert_eq!(tail_interval(&t), Some(140.0));
        assert_eq!(t.tail_median - t.median, 14_900.0);
    }

    #[test]
    fn migration_block_where_frequency_drops() {
        let p = pts(&[
            (256.0, 10.0),
            (4096.0, 9.5),
            (32768.0, 8.0),
            (65536.0, 0.3),
            (131072.0, 0.0),
        ]);
        assert_eq!(migration_block(&p, 0.5), Some(65536.0));
        assert_eq!(migration_block(&pts(&[(1.0, 0.0)]), 0.5), None);
    }

    #[test]
    fn interleave_from_stride_bandwidth() {
        let p = pts(&[
            (64.0, 2.0),
            (256.0, 2.1),
            (1024.0, 4.0),
            (4096.0, 11.0),
            (8192.0, 6.0),
            (16384.0, 6.0),
        ]);
        assert_eq!(interleave(&p), Some(4096.0));
        let flat = pts(&[(64.0, 2.0), (256.0, 2.1), (1024.0, 2.0)]);
        assert_eq!(interleave(&flat), None);
    }
}
