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
    /// The tail frequency "drops" below this fraction of the small-region
    /// one (LENS: the long tails all but vanish).
    pub drop: f64,
    /// A block doubling that cuts the extra cost by less than this fraction
    /// marks the entry size.
    pub knee: f64,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            rise: 0.08,
            unity: 0.05,
            tail_factor: 5.0,
            inclusive_ratio: 0.9,
            drop: 0.01,
            knee: 0.2,
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

/// Inflection points. Each step's relative rise is compared with a step
/// threshold: `rise / 4`, or four times the lower quartile of the absolute
/// steps when the curve is noisier than that. A maximal run of consecutive
/// steps above it that rises by more than `rise` in total holds one
/// inflection per peak step (a step at least 1.5 times its neighbours in
/// the run; the largest step if none stands out), placed at the size before
/// the peak step: the last size that still fits.
pub fn inflections(points: &[Point], rise: f64) -> Vec<Inflection> {
    if points.len() < 2 {
        return Vec::new();
    }
    let step = |k: usize| points[k + 1].y / points[k].y.max(1e-12) - 1.0;
    let mut abs: Vec<f64> = (0..points.len() - 1).map(|k| step(k).abs()).collect();
    abs.sort_by(|a, b| a.total_cmp(b));
    // The lower quartile: most steps of a probe curve are flat, so this
    // measures the noise without counting the rises themselves.
    let noise = abs[abs.len() / 4];
    let thr = (rise / 4.0).max(4.0 * noise);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < points.len() {
        if step(i) <= thr {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        while end + 1 < points.len() && step(end) > thr {
            end += 1;
        }
        // Steps start..end (exclusive): step k goes from point k to k + 1.
        let total = points[end].y / points[start].y.max(1e-12) - 1.0;
        if total > rise {
            let mut peaks: Vec<usize> = (start..end)
                .filter(|&k| {
                    let left = k == start || step(k) >= 1.5 * step(k - 1);
                    let right = k + 1 == end || step(k) >= 1.5 * step(k + 1);
                    left && right
                })
                .collect();
            if peaks.is_empty() {
                let best = (start..end)
                    .max_by(|&a, &b| step(a).total_cmp(&step(b)))
                    .unwrap_or(start);
                peaks.push(best);
            }
            for (n, &k) in peaks.iter().enumerate() {
                let until = peaks.get(n + 1).copied().unwrap_or(end);
                out.push(Inflection {
                    capacity: points[k].x,
                    before: points[k].y,
                    after: points[until].y,
                });
            }
        }
        i = end;
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

/// The entry size as the knee of a block sweep: `extra(b)` is the latency
/// per line above `base` (the same sweep one level down, or the flat
/// latency before the buffer). Below the entry size each doubling of the
/// block halves the misses per line; from the entry size on, a doubling no
/// longer cuts the extra cost by more than `knee` (a fraction). Returns the
/// first block where that happens.
pub fn entry_knee(points: &[Point], base: &[f64], knee: f64) -> Option<f64> {
    let extra: Vec<f64> = points
        .iter()
        .zip(base)
        .map(|(p, b)| (p.y - b).max(0.0))
        .collect();
    let top = extra.iter().copied().fold(0.0, f64::max);
    for k in 0..points.len().saturating_sub(1) {
        // Once the extra cost is negligible, this is the plateau too.
        if extra[k] <= 0.02 * top || extra[k + 1] >= (1.0 - knee) * extra[k] {
            return Some(points[k].x);
        }
    }
    None
}

/// Long-tail iterations of an overwrite run: the one implementation is
/// `pmlab_model::tails` (the simulator's validation uses it too).
pub use pmlab_model::tails::{tail_interval, tails, Tails};

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
/// largest stride still at the peak (within 10%) before the bandwidth drops
/// below 75% of the peak. Strides below the granularity still spread over
/// every device; the next power of two sends a share of the accesses to
/// the same device. None when nothing drops (no interleaving seen).
pub fn interleave(points: &[Point]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let (imax, max) =
        points.iter().enumerate().fold(
            (0, 0.0),
            |(bi, b), (i, p)| if p.y > b { (i, p.y) } else { (bi, b) },
        );
    let mut end = imax;
    while end + 1 < points.len() && points[end + 1].y >= 0.9 * max {
        end += 1;
    }
    // Interleaving makes bandwidth rise with the stride first: a peak at
    // the smallest stride is a single device's sequential advantage.
    if imax == 0 {
        return None;
    }
    points[end + 1..]
        .iter()
        .any(|p| p.y < 0.75 * max)
        .then_some(points[end].x)
}

/// The number of interleaved devices from a sweep of strides that are
/// multiples 1, 2, 3... of the granularity: the first multiple (from 2)
/// whose bandwidth is within 15% of the sweep's minimum, when that minimum
/// is under 60% of the bandwidth at multiple 1 (all accesses then go to
/// one device). None when no multiple stands out.
pub fn channels(points: &[Point]) -> Option<u32> {
    let first = points.first()?.y;
    let min = points.iter().map(|p| p.y).fold(f64::INFINITY, f64::min);
    if min >= 0.6 * first {
        return None;
    }
    points
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, p)| p.y <= 1.15 * min)
        .map(|(i, _)| i as u32 + 1)
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
    /// Number of interleaved devices.
    pub channels: Option<u32>,
    /// Peak bandwidths measured by the stride probes, GB/s (load, store).
    pub peak_gbs: (Option<f64>, Option<f64>),
    /// Remarks on what could not be inferred and why.
    pub notes: Vec<String>,
}

/// The closed-loop curve of `kind` and `op` (streaming variants, which
/// carry an `outstanding` parameter, are skipped).
fn find(curves: &[Curve], kind: Kind, op: Op) -> Option<&Curve> {
    curves
        .iter()
        .find(|c| c.kind == kind && c.op == op && !c.params.contains_key("outstanding"))
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
    // Write buffers: steps of the store curves that are not read-buffer
    // steps (a store that needs a read-modify-write shows the read buffers
    // too). The streaming-store curve shows the write queues.
    let stream = curves.iter().find(|c| {
        c.kind == Kind::PtrchaseRegion && c.op == Op::Store && c.params.contains_key("outstanding")
    });
    if let Some(c) = store {
        if c.points.len() >= 2 {
            r.store_latency = Some((c.points[0].y, c.points.last().unwrap().y));
        }
    }
    let mut writes: Vec<Inflection> = Vec::new();
    for c in [store, stream].into_iter().flatten() {
        for f in inflections(&c.points, th.rise) {
            let is_read = r.read_buffers.iter().any(|b| b.capacity == f.capacity);
            let seen = writes.iter().any(|w| w.capacity == f.capacity);
            if !is_read && !seen {
                writes.push(f);
            }
        }
    }
    writes.sort_by(|a, b| a.capacity.total_cmp(&b.capacity));
    r.write_buffers = writes;
    if store.is_none() && stream.is_none() {
        r.notes
            .push("no store region sweep: write buffers unknown".into());
    }
    // Entry sizes: the block sweep whose region lies past each buffer and
    // before the next one, against the sweep of the level below (or the
    // flat latency before the first buffer).
    let blocks: Vec<&Curve> = curves
        .iter()
        .filter(|c| c.kind == Kind::PtrchaseBlock && c.op == Op::Load)
        .collect();
    let region_of = |c: &Curve| c.params.get("region").copied().unwrap_or(0.0);
    let mut below: Option<&Curve> = None;
    for (k, b) in r.read_buffers.iter().enumerate() {
        let next = r
            .read_buffers
            .get(k + 1)
            .map(|n| n.capacity)
            .unwrap_or(f64::INFINITY);
        let sweep = blocks
            .iter()
            .find(|c| region_of(c) > b.capacity && region_of(c) <= next)
            .copied();
        let entry = match sweep {
            Some(c) => {
                let base: Vec<f64> = c
                    .points
                    .iter()
                    .map(|p| match below {
                        Some(bc) => interp(&bc.points, p.x).unwrap_or(b.before),
                        None => b.before,
                    })
                    .collect();
                let e = entry_knee(&c.points, &base, th.knee);
                if e.is_none() {
                    r.notes.push(format!(
                        "block sweep at region {}: the extra cost per line never stops halving; sweep larger blocks",
                        region_of(c)
                    ));
                }
                below = Some(c);
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
        };
        r.read_entries.push(entry);
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
            r.notes.push(
                "RaW sweep shares no region past the first buffer with the load and store sweeps"
                    .into(),
            );
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
        if c.points.first().is_some_and(|p| p.y <= 0.0) {
            r.notes.push(
                "overwrite sweep: no long tails at the smallest region, so no migration block"
                    .into(),
            );
        } else if r.migration_block.is_none() {
            r.notes
                .push("overwrite sweep: the long-tail frequency never drops".into());
        }
    }
    if let Some(c) = curves.iter().find(|c| c.kind == Kind::StrideInterleave) {
        r.interleave = interleave(&c.points);
        if r.interleave.is_none() {
            r.notes.push(
                "stride sweep: no bandwidth drop across strides: no interleaving seen".into(),
            );
        }
    }
    if let Some(c) = curves.iter().find(|c| c.kind == Kind::StrideChannels) {
        r.channels = channels(&c.points);
    }
    let peak = |op| {
        curves
            .iter()
            .filter(|c| {
                matches!(
                    c.kind,
                    Kind::StrideSize | Kind::StrideInterleave | Kind::StrideChannels
                ) && c.op == op
            })
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
    fn two_peaks_in_one_run_are_two_inflections() {
        // Streaming stores on the simulator: a 4 KiB queue, then the 16 KiB
        // buffer, with smaller rises around them.
        let p = pts(&[
            (1e3, 27.8),
            (2e3, 27.8),
            (4e3, 33.1),
            (8e3, 62.6),
            (16e3, 90.0),
            (32e3, 172.6),
            (64e3, 204.4),
            (128e3, 205.0),
        ]);
        let f: Vec<f64> = inflections(&p, 0.08).iter().map(|f| f.capacity).collect();
        assert_eq!(f, vec![4e3, 16e3]);
    }

    #[test]
    fn gradual_rise_is_one_inflection_at_its_largest_step() {
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
    fn entry_knee_where_halving_stops() {
        // 256 B entries over a flat 170 ns base: the extra cost halves up
        // to 256 B, then stays (and falls slowly from a prefetcher).
        let p = pts(&[
            (64.0, 370.0),
            (128.0, 270.0),
            (256.0, 220.0),
            (512.0, 218.0),
            (1024.0, 200.0),
        ]);
        assert_eq!(entry_knee(&p, &[170.0; 5], 0.2), Some(256.0));
        let halving = pts(&[(64.0, 330.0), (128.0, 250.0), (256.0, 210.0)]);
        assert_eq!(entry_knee(&halving, &[170.0; 3], 0.2), None);
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
        assert_eq!(migration_block(&p, 0.01), Some(131072.0));
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
